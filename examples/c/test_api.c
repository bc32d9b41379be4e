/*
 * test_api: the checkpoint loop of SCR's own examples/test_api.c (v3.1.0), as a C client
 * of libscr, with the baseline it is judged against measured in the same run.
 *
 * The loop (what SCR's test_api does, so the two libraries can be compared like for
 * like): every rank writes its checkpoint file ckpt.<t>/rank_<r>.ckpt, routed through
 * SCR_Route_file, between SCR_Start_output and SCR_Complete_output: open (O_TRUNC, mode
 * 0600), one write of SIZE + rank bytes after an 8-byte header naming t, fsync, close.
 * One untimed checkpoint, then --times timed ones, each followed by --seconds of sleep
 * (the application's compute time; counted in the loop time, as test_api counts it).
 *
 * The baseline: the same files, written the same way, without the library, into the
 * node-local directory the cache lives in (SCR_CACHE_BASE), keeping as many checkpoints
 * as the cache does (--keep: the checkpoint t - keep is deleted after checkpoint t), with
 * the same sleeps, every rank starting checkpoint t at the same time (a barrier), as the
 * library's collective calls make them and an application's own communication does.
 * Rates are aggregate: the sum over ranks of (MiB of SIZE written) / (the
 * rank's loop seconds), as scr-bench defines them.
 *
 * After the loop every rank reads its newest checkpoint back through the path SCR routed
 * it to and compares it byte for byte (and a rank that wrote none fails), so a run whose
 * files are wrong exits non-zero instead of reporting a rate.
 *
 * Build:   mpicc -o test_api test_api.c $(pkg-config --cflags --libs scr)
 * Run:     SCR_COPY_TYPE=XOR mpiexec -n 4 ./test_api --size 64m --times 5 --expect-ranks 4
 * Options: -s, --size SIZE      bytes per rank per checkpoint, with k/m/g units of 2^10,
 *                               2^20, 2^30 (default 1m)
 *          -t, --times N        timed checkpoints after the untimed one (default 5)
 *          -z, --seconds S      seconds to sleep after each checkpoint, fractions allowed
 *                               (default 0)
 *          --steps N            cut each sleep into N timesteps, each followed by
 *                               SCR_Need_checkpoint (its answer unused), as an
 *                               application asks every timestep (default 0: one sleep,
 *                               no call); the plain loop sleeps the same steps
 *          --keep N             checkpoints the plain loop keeps (default SCR_CACHE_SIZE
 *                               when set, else 2: scr-rs's default cache_size)
 *          --plain before|after|none
 *                               when the plain loop runs (default after)
 *          --plain-dir DIR      where it writes (default SCR_CACHE_BASE, else /dev/shm)
 *          --scheme NAME        the label of the JSON line (default SCR_COPY_TYPE, else
 *                               "default")
 *          --expect-ranks N     fail unless the world has N ranks (a launcher of another
 *                               MPI runs N singletons, which must not pass)
 *          --corrupt            flip one byte of rank 0's newest checkpoint before the
 *                               check (the check must then fail: for tests)
 * Output:  on rank 0, one line "#test_api {JSON}" with the scheme, ranks, bytes per rank,
 *          checkpoints, sleep seconds, the loop's slowest-rank seconds and aggregate MiB/s,
 *          the plain loop's, and their ratio.
 */
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "scr.h"

/* Bytes of the header before the data: "ckpt" and the timestep as 4 decimal digits. */
#define HEADER 8

struct options {
    size_t size;
    int times;
    double seconds;
    int steps;
    int keep;
    const char* plain; /* "before", "after" or "none" */
    const char* plain_dir;
    const char* scheme;
    int expect_ranks;
    int corrupt;
};

static int rank = 0, ranks = 1;

/* Exit the whole job with a message (the other ranks may be in a collective). */
static void fail(const char* what)
{
    fprintf(stderr, "test_api: rank %d: %s\n", rank, what);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

/* "64m", "1.5g", "4096": bytes; 0 when the text is not a size. */
static size_t parse_size(const char* text)
{
    char* end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (errno != 0 || end == text || v <= 0) {
        return 0;
    }
    double unit = 1;
    switch (*end) {
    case 'k': case 'K': unit = 1024.0; end++; break;
    case 'm': case 'M': unit = 1048576.0; end++; break;
    case 'g': case 'G': unit = 1073741824.0; end++; break;
    default: break;
    }
    if (*end == 'b' || *end == 'B') {
        end++;
    }
    return *end == '\0' ? (size_t)(v * unit) : 0;
}

/* An integer option's value, or a failure naming the option. */
static long parse_int(const char* option, const char* text, long min)
{
    char* end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < min) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s %s: expected an integer of at least %ld", option, text, min);
        fail(msg);
    }
    return v;
}

static void usage_error(const char* what)
{
    char msg[512];
    snprintf(msg, sizeof(msg), "%s (options: --size SIZE --times N --seconds S --steps N --keep N "
             "--plain before|after|none --plain-dir DIR --scheme NAME --expect-ranks N --corrupt)", what);
    fail(msg);
}

/* SCR_Config's answer for KEY, or NULL (SCR answers only what a source set); the
 * caller frees it (scr.h declares it const, as SCR 3.x does, yet it is malloc'ed). */
static char* config(const char* key)
{
    return (char*)SCR_Config(key);
}

static void parse(int argc, char** argv, struct options* o)
{
    o->size = 1048576;
    o->times = 5;
    o->seconds = 0;
    o->steps = 0;
    o->keep = 0;
    o->plain = "after";
    o->plain_dir = NULL;
    o->scheme = NULL;
    o->expect_ranks = 0;
    o->corrupt = 0;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1;
        if (!strcmp(a, "--corrupt")) {
            o->corrupt = 1;
            takes = 0;
        } else if (v == NULL) {
            char msg[256];
            snprintf(msg, sizeof(msg), "%s: unknown option, or its value is missing", a);
            usage_error(msg);
        } else if (!strcmp(a, "-s") || !strcmp(a, "--size")) {
            o->size = parse_size(v);
            if (o->size == 0) {
                char msg[256];
                snprintf(msg, sizeof(msg), "--size %s: expected a positive size such as 4096, 16m or 1g", v);
                usage_error(msg);
            }
        } else if (!strcmp(a, "-t") || !strcmp(a, "--times")) {
            o->times = (int)parse_int(a, v, 1);
        } else if (!strcmp(a, "-z") || !strcmp(a, "--seconds")) {
            char* end = NULL;
            o->seconds = strtod(v, &end);
            if (end == v || *end != '\0' || o->seconds < 0) {
                usage_error("--seconds: expected a number of seconds (0 or more)");
            }
        } else if (!strcmp(a, "--steps")) {
            o->steps = (int)parse_int(a, v, 0);
        } else if (!strcmp(a, "--keep")) {
            o->keep = (int)parse_int(a, v, 1);
        } else if (!strcmp(a, "--plain")) {
            if (strcmp(v, "before") && strcmp(v, "after") && strcmp(v, "none")) {
                usage_error("--plain: expected before, after or none");
            }
            o->plain = v;
        } else if (!strcmp(a, "--plain-dir")) {
            o->plain_dir = v;
        } else if (!strcmp(a, "--scheme")) {
            o->scheme = v;
        } else if (!strcmp(a, "--expect-ranks")) {
            o->expect_ranks = (int)parse_int(a, v, 1);
        } else {
            char msg[256];
            snprintf(msg, sizeof(msg), "%s: unknown option", a);
            usage_error(msg);
        }
        i += takes;
    }
}

/* Sleep `seconds` (the application's compute between checkpoints). */
static void pause_for(double seconds)
{
    if (seconds <= 0) {
        return;
    }
    struct timespec t;
    t.tv_sec = (time_t)seconds;
    t.tv_nsec = (long)((seconds - (double)t.tv_sec) * 1e9);
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

/* The application's compute after a checkpoint: --seconds of sleep, in --steps timesteps
 * each followed (with the library) by SCR_Need_checkpoint. */
static void compute(const struct options* o, int with_library)
{
    if (o->steps <= 0) {
        pause_for(o->seconds);
        return;
    }
    for (int i = 0; i < o->steps; i++) {
        pause_for(o->seconds / o->steps);
        if (with_library) {
            int flag = 0;
            if (SCR_Need_checkpoint(&flag) != SCR_SUCCESS) {
                fail("SCR_Need_checkpoint failed");
            }
        }
    }
}

/* Stamp checkpoint `t` into the header of `buf`. */
static void stamp(char* buf, int t)
{
    char h[16];
    snprintf(h, sizeof(h), "ckpt%04u", (unsigned)t % 10000u);
    memcpy(buf, h, HEADER);
}

/* test_api's write: create or truncate (0600), one write, fsync, close. 0 when all
 * succeeded, else errno (and `path` says where). */
static int write_file(const char* path, const char* buf, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, S_IRUSR | S_IWUSR);
    if (fd < 0) {
        return errno;
    }
    int err = 0;
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, buf + done, len - done);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            err = errno;
            break;
        }
        done += (size_t)n;
    }
    if (fsync(fd) != 0 && err == 0) {
        err = errno;
    }
    if (close(fd) != 0 && err == 0) {
        err = errno;
    }
    return err;
}

/* Every rank's `ok` (collective): 1 when all are non-zero. */
static int all(int ok)
{
    int out = 0;
    MPI_Allreduce(&ok, &out, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    return out;
}

/* Checkpoint `t` through the library; the path it was routed to goes to `routed`. */
static int checkpoint(int t, char* buf, size_t len, char* routed)
{
    char label[64], name[SCR_MAX_FILENAME];
    snprintf(label, sizeof(label), "ckpt.%d", t);
    snprintf(name, sizeof(name), "%s/rank_%d.ckpt", label, rank);
    int valid = SCR_Start_output(label, SCR_FLAG_CHECKPOINT) == SCR_SUCCESS;
    if (!valid) {
        fprintf(stderr, "test_api: rank %d: SCR_Start_output(%s) failed\n", rank, label);
    } else if (SCR_Route_file(name, routed) != SCR_SUCCESS) {
        fprintf(stderr, "test_api: rank %d: SCR_Route_file(%s) failed\n", rank, name);
        valid = 0;
    } else {
        stamp(buf, t);
        int err = write_file(routed, buf, len);
        if (err != 0) {
            fprintf(stderr, "test_api: rank %d: writing %s: %s\n", rank, routed, strerror(err));
            valid = 0;
        }
    }
    /* every rank calls it (collective), whatever happened above */
    return SCR_Complete_output(valid) == SCR_SUCCESS;
}

/* The plain loop's file of checkpoint t (and its directory, when `dir`). */
static void plain_path(const char* base, int t, int dir, char* out, size_t cap)
{
    if (dir) {
        snprintf(out, cap, "%s/ckpt.%d", base, t);
    } else {
        snprintf(out, cap, "%s/ckpt.%d/rank_%d.ckpt", base, t, rank);
    }
}

/* Delete the plain loop's checkpoint t (its file and directory, this rank's own). */
static void plain_remove(const char* base, int t)
{
    char path[SCR_MAX_FILENAME];
    plain_path(base, t, 0, path, sizeof(path));
    unlink(path);
    plain_path(base, t, 1, path, sizeof(path));
    rmdir(path);
}

/* Checkpoint t of the plain loop: 0, or errno with `path` naming the file. */
static int plain_one(const char* base, int t, int keep, char* buf, size_t len, char* path, size_t cap)
{
    plain_path(base, t, 1, path, cap);
    if (mkdir(path, 0700) != 0 && errno != EEXIST) {
        return errno;
    }
    plain_path(base, t, 0, path, cap);
    stamp(buf, t);
    int err = write_file(path, buf, len);
    if (err == 0 && t >= keep) {
        plain_remove(base, t - keep);
    }
    return err;
}

/* The loop without the library (collective): this rank's loop seconds. Each rank has a
 * directory of its own under `dir`, as each rank's cache is its node's. */
static double plain_loop(const struct options* o, const char* dir, int job, char* buf, size_t len, int keep)
{
    char base[SCR_MAX_FILENAME], path[SCR_MAX_FILENAME];
    snprintf(base, sizeof(base), "%s/test_api-plain.%d.%d", dir, job, rank);
    int err = mkdir(base, 0700) != 0 ? errno : 0;
    snprintf(path, sizeof(path), "%s", base);
    if (err == 0) {
        err = plain_one(base, 0, keep, buf, len, path, sizeof(path));
        compute(o, 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int t = 1; t <= o->times; t++) {
        /* every rank writes checkpoint t at the same time, as an application's ranks do
           (its own communication keeps them in step) and as the library's loop does (its
           calls are collective): ranks left to drift apart over the pauses would write
           one after another, on cores the others leave free */
        MPI_Barrier(MPI_COMM_WORLD);
        if (err == 0) {
            err = plain_one(base, t, keep, buf, len, path, sizeof(path));
        }
        compute(o, 0);
    }
    double secs = MPI_Wtime() - t0;
    if (err != 0) {
        fprintf(stderr, "test_api: rank %d: the plain loop failed at %s: %s\n", rank, path, strerror(err));
    }
    for (int t = o->times - keep + 1; t <= o->times; t++) {
        if (t >= 0) {
            plain_remove(base, t);
        }
    }
    rmdir(base);
    if (!all(err == 0)) {
        fail("the plain loop failed (see the messages above): is --plain-dir a writable directory?");
    }
    return secs;
}

/* Aggregate MiB/s: the sum over ranks of MiB / this rank's seconds (collective). */
static double aggregate(double mib, double secs)
{
    double mine = mib / secs, sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return sum;
}

static double slowest(double secs)
{
    double max = 0;
    MPI_Allreduce(&secs, &max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return max;
}

/* 1 when `path` holds exactly `len` bytes equal to `expect`. */
static int same_bytes(const char* path, const char* expect, size_t len)
{
    FILE* f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "test_api: rank %d: reading back %s: %s\n", rank, path, strerror(errno));
        return 0;
    }
    char piece[65536];
    size_t at = 0, n;
    int same = 1;
    while (same && (n = fread(piece, 1, sizeof(piece), f)) > 0) {
        if (at + n > len || memcmp(piece, expect + at, n) != 0) {
            same = 0;
        }
        at += n;
    }
    fclose(f);
    if (!same || at != len) {
        fprintf(stderr, "test_api: rank %d: %s does not hold the %zu bytes written to it\n", rank, path, len);
        return 0;
    }
    return 1;
}

/* Flip one byte in the middle of `path`. */
static void corrupt(const char* path)
{
    int fd = open(path, O_RDWR);
    struct stat st;
    unsigned char b;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size == 0) {
        fail("--corrupt: the newest checkpoint file cannot be opened");
    }
    off_t at = st.st_size / 2;
    if (pread(fd, &b, 1, at) != 1) {
        fail("--corrupt: cannot read the newest checkpoint file");
    }
    b ^= 0x5a;
    if (pwrite(fd, &b, 1, at) != 1) {
        fail("--corrupt: cannot write the newest checkpoint file");
    }
    close(fd);
}

int main(int argc, char** argv)
{
    /* plain MPI_Init, as SCR's test_api: with SCR_PROTECT_IN_BACKGROUND set in the
     * environment, libscr's MPI_Init asks MPI for MPI_THREAD_MULTIPLE itself */
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    struct options o;
    parse(argc, argv, &o);
    if (o.expect_ranks > 0 && o.expect_ranks != ranks) {
        char msg[256];
        snprintf(msg, sizeof(msg), "the world has %d rank(s), not the %d of --expect-ranks: "
                 "is this mpiexec the one of the MPI test_api was built with?", ranks, o.expect_ranks);
        fail(msg);
    }

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (SCR_Init() != SCR_SUCCESS) {
        fail("SCR_Init failed (see the library's messages above)");
    }
    double init = slowest(MPI_Wtime() - t0);

    /* what the configuration set, for the plain loop and the label */
    char* cache_size = config("SCR_CACHE_SIZE");
    char* cache_base = config("SCR_CACHE_BASE");
    char* copy_type = config("SCR_COPY_TYPE");
    int keep = o.keep > 0 ? o.keep : (cache_size != NULL ? atoi(cache_size) : 2);
    if (keep < 1) {
        keep = 1;
    }
    const char* dir = o.plain_dir != NULL ? o.plain_dir : (cache_base != NULL ? cache_base : "/dev/shm");
    const char* scheme = o.scheme != NULL ? o.scheme : (copy_type != NULL ? copy_type : "default");

    /* a fresh job: a checkpoint offered here would be another run's */
    int have = 0;
    char dataset[SCR_MAX_FILENAME] = "";
    if (SCR_Have_restart(&have, dataset) == SCR_SUCCESS && have && rank == 0) {
        printf("note: the library offers %s to restart from; this run writes new checkpoints\n", dataset);
    }

    /* SIZE + rank bytes after the header, as test_api varies the size per rank */
    size_t len = HEADER + o.size + (size_t)rank;
    char* buf = malloc(len);
    char* routed = malloc(SCR_MAX_FILENAME);
    if (buf == NULL || routed == NULL) {
        fail("out of memory for the checkpoint buffer: use a smaller --size");
    }
    uint32_t x = 2463534242u + (uint32_t)rank * 2654435761u;
    for (size_t i = HEADER; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        buf[i] = (char)x;
    }
    int job = (int)getpid();
    MPI_Bcast(&job, 1, MPI_INT, 0, MPI_COMM_WORLD);
    double mib = (double)o.times * (double)o.size / 1048576.0;
    double plain_secs = 0;
    if (!strcmp(o.plain, "before")) {
        plain_secs = plain_loop(&o, dir, job, buf, len, keep);
    }

    /* the loop: one untimed checkpoint, then --times timed ones */
    if (!checkpoint(0, buf, len, routed)) {
        fail("checkpoint ckpt.0 was not kept (SCR_Complete_output failed)");
    }
    compute(&o, 1);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (int t = 1; t <= o.times; t++) {
        if (!checkpoint(t, buf, len, routed)) {
            char msg[128];
            snprintf(msg, sizeof(msg), "checkpoint ckpt.%d was not kept (SCR_Complete_output failed)", t);
            fail(msg);
        }
        compute(&o, 1);
    }
    double secs = MPI_Wtime() - t0;

    /* the newest checkpoint, read back where SCR put it */
    if (o.corrupt && rank == 0) {
        corrupt(routed);
    }
    stamp(buf, o.times);
    if (!all(same_bytes(routed, buf, len))) {
        fail("the newest checkpoint does not read back as written (see the messages above)");
    }

    if (!strcmp(o.plain, "after")) {
        plain_secs = plain_loop(&o, dir, job, buf, len, keep);
    }
    double rate = aggregate(mib, secs), loop = slowest(secs);
    double plain_rate = 0, plain_loop_s = 0;
    if (strcmp(o.plain, "none")) {
        plain_rate = aggregate(mib, plain_secs);
        plain_loop_s = slowest(plain_secs);
    }
    if (rank == 0) {
        int level = MPI_THREAD_SINGLE;
        MPI_Query_thread(&level);
        printf("#test_api {\"scheme\":\"%s\",\"ranks\":%d,\"bytes_per_rank\":%zu,\"checkpoints\":%d,"
               "\"sleep_s\":%g,\"steps\":%d,\"keep\":%d,\"init_s\":%.6f,\"seconds\":%.6f,\"mib_per_s\":%.3f,"
               "\"plain_seconds\":%.6f,\"plain_mib_per_s\":%.3f,\"vs_plain\":%.4f,\"verified\":true,"
               "\"thread_multiple\":%s}\n",
               scheme, ranks, o.size, o.times, o.seconds, o.steps, keep, init, loop, rate, plain_loop_s,
               plain_rate, plain_rate > 0 ? rate / plain_rate : 0.0,
               level == MPI_THREAD_MULTIPLE ? "true" : "false");
        fflush(stdout);
    }
    free(buf);
    free(routed);
    free(cache_size);
    free(cache_base);
    free(copy_type);
    if (SCR_Finalize() != SCR_SUCCESS) {
        fail("SCR_Finalize failed");
    }
    MPI_Finalize();
    return 0;
}
