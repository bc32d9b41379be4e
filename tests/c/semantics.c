/*
 * SCR 3.x behaviours C applications rely on, one mode per run (tests/tests/capi.rs runs
 * them under mpiexec on simulated nodes and checks what each prints):
 *   config   SCR_Config / SCR_Configf: set, query (a malloc'ed string), unset,
 *            descriptor forms, errors, set after SCR_Init refused
 *   config-scr31  SCR 3.1's keys through SCR_Config: the bare STORE/CKPT/GROUPS queries
 *            and the STORE=/CKPT=/GROUPS= clearing forms, SCR_CONF_FILE (from the
 *            SEMANTICS_CONF_FILE environment variable), the restart, prefix and log keys
 *            set and queried; then init with them and three flushed checkpoints
 *   no-mpi   SCR_Init before MPI_Init fails
 *   route    SCR_Route_file before init, outside a dataset, during output, during
 *            restart (also by base name) and after finalize; NULL name; invalid output
 *            on one rank; NULL flag pointer
 *   legacy   SCR_Need_checkpoint with SCR_CHECKPOINT_INTERVAL, SCR_Start_checkpoint and
 *            SCR_Complete_checkpoint
 *   write N  N checkpoints ckpt.1..ckpt.N, each file holding its step
 *   current NAME  SCR_Current(NAME) before SCR_Have_restart; prints what is restarted
 *   exit     SCR_Should_exit
 *   disabled with SCR_ENABLE=0: every call fails as SCR's do, SCR_Route_file passes
 *            names through, queries return NULL
 *   mismatch arguments that differ between ranks or are wrong on one rank
 *   no-finalize  SCR_Init, then MPI_Finalize and exit without SCR_Finalize
 *   version  SCR_Get_version and the header's macros
 *   shared write|read|cached  one file written by every rank at its own offset, as
 *            SCR's test_api --shared-file: with SCR_CACHE_BYPASS=1 set through
 *            SCR_Config (write two checkpoints, or restart from the newest), or left to
 *            the configuration (cached: refused)
 * With SEMANTICS_INIT set in the environment, MPI is initialised as it says (`plain`:
 * MPI_Init; `funneled`: MPI_Init_thread with MPI_THREAD_FUNNELED) and every rank prints
 * "r<rank> thread <level>" (MPI_Query_thread's answer) before its mode runs.
 * Every line a test checks starts with "r<rank> ".
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "scr.h"

static int rank = -1;

/* Print a query's answer and free it as SCR's contract says. */
static void show(const char* key)
{
    const char* v = SCR_Config(key);
    printf("r%d query %s = %s\n", rank, key, v ? v : "(null)");
    free((void*)v);
}

static void check(int ok, const char* what)
{
    printf("r%d %s %s\n", rank, ok ? "ok" : "FAILED", what);
}

static int write_file(const char* name, const char* text)
{
    char path[SCR_MAX_FILENAME];
    if (SCR_Route_file(name, path) != SCR_SUCCESS) return 0;
    FILE* f = fopen(path, "w");
    if (!f) return 0;
    fputs(text, f);
    return fclose(f) == 0;
}

static int read_file(const char* name, char* text, size_t len)
{
    char path[SCR_MAX_FILENAME];
    if (SCR_Route_file(name, path) != SCR_SUCCESS) return 0;
    FILE* f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(text, 1, len - 1, f);
    text[n] = 0;
    fclose(f);
    return 1;
}

static void mode_config(void)
{
    check(SCR_Config("SCR_CACHE_SIZE=3") == NULL, "set returns NULL");
    show("SCR_CACHE_SIZE");
    check(SCR_Configf("SCR_FLUSH=%d", 4) == NULL, "Configf set returns NULL");
    show("SCR_FLUSH");
    SCR_Config("SCR_FLUSH=");
    show("SCR_FLUSH");
    check(SCR_Config("CKPT=0 TYPE=XOR SET_SIZE=16") == NULL, "descriptor set returns NULL");
    SCR_Configf("STORE=%s COUNT=2", getenv("SCR_CACHE_BASE"));
    SCR_Config("CKPT=3 INTERVAL=4 TYPE=PARTNER");
    show("CKPT=0 TYPE");
    show("CKPT=0 SET_SIZE");
    show("CKPT=3 TYPE");
    show("CKPT=1 TYPE");
    char q[1200];
    snprintf(q, sizeof(q), "STORE=%s COUNT", getenv("SCR_CACHE_BASE"));
    const char* count = SCR_Config(q);
    printf("r%d query STORE COUNT = %s\n", rank, count ? count : "(null)");
    free((void*)count);
    check(SCR_Config("SCR_NO_SUCH_KEY=1") == NULL, "unknown key refused");
    check(SCR_Config("SCR_SET_SIZE=1") == NULL, "out-of-range value refused");
    show("SCR_NO_SUCH_KEY");
    check(SCR_Config(NULL) == NULL, "NULL refused");
    check(SCR_Init() == SCR_SUCCESS, "init");
    check(SCR_Config("SCR_CACHE_SIZE=5") == NULL, "set after init refused");
    show("SCR_CACHE_SIZE");
    show("CKPT=0 TYPE");
    check(SCR_Finalize() == SCR_SUCCESS, "finalize");
}

static void mode_config_scr31(void)
{
    const char* cache = getenv("SCR_CACHE_BASE");
    /* nothing set yet: no descriptor to name (the implied ones are not reported) */
    show("STORE");
    show("CKPT");
    show("GROUPS");
    SCR_Configf("STORE=%s/b COUNT=1", cache);
    SCR_Configf("STORE=%s COUNT=2", cache);
    SCR_Config("CKPT=2 INTERVAL=2 TYPE=SINGLE");
    SCR_Config("CKPT=1 INTERVAL=1 TYPE=SINGLE");
    SCR_Config("GROUPS=nodeX POWER=p1");
    show("STORE");
    show("CKPT");
    show("GROUPS");
    check(SCR_Config("STORE=") == NULL, "STORE= returns NULL");
    check(SCR_Config("CKPT=") == NULL, "CKPT= returns NULL");
    check(SCR_Config("GROUPS=") == NULL, "GROUPS= returns NULL");
    show("STORE");
    show("CKPT");
    show("GROUPS");

    /* the user file named through the API; a key only that file sets shows it is read */
    SCR_Configf("SCR_CONF_FILE=%s", getenv("SEMANTICS_CONF_FILE"));
    show("SCR_CONF_FILE");
    show("SCR_JOB_NAME");

    static const char* keys[][2] = {
        {"SCR_CURRENT", "ckpt.9"},
        {"SCR_DROP_AFTER_CURRENT", "1"},
        {"SCR_PREFIX_SIZE", "2"},
        {"SCR_PREFIX_PURGE", "0"},
        {"SCR_GLOBAL_RESTART", "0"},
        {"SCR_LOG_ENABLE", "1"},
        {"SCR_LOG_TXT_ENABLE", "1"},
        {"SCR_LOG_SYSLOG_ENABLE", "0"},
        {"SCR_LOG_SYSLOG_PREFIX", "scr-e2e"},
        {"SCR_LOG_SYSLOG_FACILITY", "LOG_USER"},
        {"SCR_LOG_SYSLOG_LEVEL", "LOG_DEBUG"},
        /* (no MySQL database: only the off values load; the others are refused) */
        {"SCR_LOG_DB_ENABLE", "0"},
        {"SCR_LOG_DB_DEBUG", "0"},
        {"SCR_FLUSH_POSTSTAGE", "0"},
        {"SCR_HOP_DISTANCE", "2"},
    };
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        check(SCR_Configf("%s=%s", keys[i][0], keys[i][1]) == NULL, keys[i][0]);
        show(keys[i][0]);
    }
    SCR_Config("SCR_FLUSH=1");

    check(SCR_Init() == SCR_SUCCESS, "init goes on though no checkpoint is named ckpt.9");
    int have = 1;
    check(SCR_Have_restart(&have, NULL) == SCR_SUCCESS && !have, "nothing to restart");
    show("SCR_PREFIX_SIZE");
    for (int n = 1; n <= 3; n++) {
        char name[32], file[64], text[64];
        snprintf(name, sizeof(name), "ckpt.%d", n);
        snprintf(file, sizeof(file), "c%d_%d.txt", n, rank);
        snprintf(text, sizeof(text), "%s %d\n", name, rank);
        check(SCR_Start_output(name, SCR_FLAG_CHECKPOINT) == SCR_SUCCESS, "start");
        check(write_file(file, text), "write");
        check(SCR_Complete_output(1) == SCR_SUCCESS, "complete");
    }
    check(SCR_Finalize() == SCR_SUCCESS, "finalize");
}

static void mode_route(void)
{
    char path[SCR_MAX_FILENAME];
    check(SCR_Route_file("data/a.txt", path) == SCR_SUCCESS && strcmp(path, "data/a.txt") == 0,
          "before init the name comes back unchanged");
    check(SCR_Route_file("", path) == SCR_FAILURE, "an empty name is refused before init too");
    check(SCR_Init() == SCR_SUCCESS, "init");
    check(SCR_Route_file("data/a.txt", path) == SCR_SUCCESS && strcmp(path, "data/a.txt") == 0,
          "outside a dataset the name comes back unchanged");
    check(SCR_Start_output("first", SCR_FLAG_CHECKPOINT) == SCR_SUCCESS, "start output");
    char mine[64];
    snprintf(mine, sizeof(mine), "data/rank%d.txt", rank);
    check(SCR_Route_file(mine, path) == SCR_SUCCESS, "route during output");
    const char* base = getenv("SCR_CACHE_BASE");
    check(strncmp(path, base, strlen(base)) == 0, "the routed path is in cache");
    printf("r%d routed %s\n", rank, path);
    check(SCR_Route_file("/etc/passwd", path) == SCR_FAILURE, "a file outside the prefix is refused");
    check(SCR_Route_file(NULL, path) == SCR_FAILURE, "a NULL name is refused");
    char text[64];
    snprintf(text, sizeof(text), "written by rank %d\n", rank);
    check(write_file(mine, text), "write");
    check(SCR_Complete_output(1) == SCR_SUCCESS, "complete output");

    /* a dataset one rank says is invalid is not kept, on every rank */
    check(SCR_Start_output(NULL, SCR_FLAG_CHECKPOINT) == SCR_SUCCESS, "start output with a NULL name");
    write_file(mine, "second\n");
    check(SCR_Complete_output(rank == 1 ? 0 : 1) == SCR_FAILURE, "one invalid rank fails complete everywhere");
    check(SCR_Need_checkpoint(NULL) == SCR_FAILURE, "a NULL flag pointer is refused");
    check(SCR_Start_output("bad", 4) == SCR_FAILURE, "unknown flag bits are refused");

    int have = 0;
    char name[SCR_MAX_FILENAME];
    check(SCR_Have_restart(&have, name) == SCR_SUCCESS && have, "have restart");
    printf("r%d restart name %s\n", rank, name);
    check(SCR_Start_restart(NULL) == SCR_SUCCESS, "start restart with a NULL name buffer");
    char got[64] = "";
    check(read_file(mine, got, sizeof(got)) && strcmp(got, text) == 0, "read back during restart");
    char bare[64];
    snprintf(bare, sizeof(bare), "rank%d.txt", rank);
    char again[64] = "";
    check(read_file(bare, again, sizeof(again)) && strcmp(again, text) == 0,
          "a file named by its base name alone is found during restart");
    check(SCR_Route_file("data/never.txt", path) == SCR_FAILURE, "a file not in the checkpoint is refused");
    check(SCR_Complete_restart(1) == SCR_SUCCESS, "complete restart");
    check(SCR_Finalize() == SCR_SUCCESS, "finalize");
    check(SCR_Start_output("late", SCR_FLAG_CHECKPOINT) == SCR_FAILURE, "calls after finalize are refused");
    check(SCR_Route_file("data/a.txt", path) == SCR_SUCCESS && strcmp(path, "data/a.txt") == 0,
          "after finalize the name comes back unchanged");
}

static void mode_legacy(void)
{
    SCR_Config("SCR_CHECKPOINT_INTERVAL=3");
    check(SCR_Init() == SCR_SUCCESS, "init");
    char flags[16] = "";
    for (int i = 0; i < 7; i++) {
        int need = -1;
        SCR_Need_checkpoint(&need);
        flags[i] = need == 1 ? '1' : need == 0 ? '0' : '?';
    }
    printf("r%d need %s\n", rank, flags);
    check(SCR_Start_checkpoint() == SCR_SUCCESS, "start checkpoint");
    char mine[64];
    snprintf(mine, sizeof(mine), "legacy%d.txt", rank);
    check(write_file(mine, "legacy\n"), "write");
    check(SCR_Complete_checkpoint(1) == SCR_SUCCESS, "complete checkpoint");
    int have = 0;
    char name[SCR_MAX_FILENAME];
    SCR_Have_restart(&have, name);
    printf("r%d restart name %s\n", rank, have ? name : "(none)");
    check(SCR_Finalize() == SCR_SUCCESS, "finalize");
}

static void mode_write(int n)
{
    check(SCR_Init() == SCR_SUCCESS, "init");
    for (int i = 1; i <= n; i++) {
        char ckpt[32], mine[64], text[32];
        snprintf(ckpt, sizeof(ckpt), "ckpt.%d", i);
        snprintf(mine, sizeof(mine), "state%d.txt", rank);
        snprintf(text, sizeof(text), "step %d\n", i);
        SCR_Start_output(ckpt, SCR_FLAG_CHECKPOINT);
        int ok = write_file(mine, text);
        check(SCR_Complete_output(ok) == SCR_SUCCESS, ckpt);
    }
    check(SCR_Finalize() == SCR_SUCCESS, "finalize");
}

static void mode_current(const char* wanted)
{
    check(SCR_Init() == SCR_SUCCESS, "init");
    int rc = SCR_Current(wanted);
    printf("r%d current %s: %s\n", rank, wanted, rc == SCR_SUCCESS ? "ok" : "refused");
    int have = 0;
    char name[SCR_MAX_FILENAME];
    SCR_Have_restart(&have, name);
    if (have) {
        SCR_Start_restart(name);
        char mine[64], got[64] = "";
        snprintf(mine, sizeof(mine), "state%d.txt", rank);
        char path[SCR_MAX_FILENAME];
        if (SCR_Route_file(mine, path) == SCR_SUCCESS) printf("r%d reads %s\n", rank, path);
        int ok = read_file(mine, got, sizeof(got));
        got[strcspn(got, "\n")] = 0;
        printf("r%d restarted %s holding \"%s\"\n", rank, name, got);
        SCR_Complete_restart(ok);
    } else {
        printf("r%d no restart\n", rank);
    }
    check(SCR_Finalize() == SCR_SUCCESS, "finalize");
}

/* Arguments that differ between ranks, or that one rank gets wrong: every rank fails the
 * call (none waits for the others), and the ranks stay in step for the next one. */
static void mode_mismatch(void)
{
    check(SCR_Init() == SCR_SUCCESS, "init");
    check(SCR_Start_output("a", rank == 0 ? 4 : SCR_FLAG_CHECKPOINT) == SCR_FAILURE, "bad flags on rank 0 fail everywhere");
    check(SCR_Start_output(rank == 1 ? "b" : "a", SCR_FLAG_CHECKPOINT) == SCR_FAILURE, "a different name on rank 1 fails everywhere");
    check(SCR_Start_output("a", rank == 2 ? SCR_FLAG_OUTPUT : SCR_FLAG_CHECKPOINT) == SCR_FAILURE, "different flags on rank 2 fail everywhere");
    check(SCR_Current(rank == 3 ? NULL : "nothing") == SCR_FAILURE, "a NULL name on rank 3 fails everywhere");
    int flag = -7;
    check(SCR_Should_exit(rank == 0 ? NULL : &flag) == (rank == 0 ? SCR_FAILURE : SCR_SUCCESS) && (rank == 0 || flag == 0),
          "a NULL flag on rank 0 fails there only, after the collective");
    check(SCR_Start_output("a", SCR_FLAG_CHECKPOINT) == SCR_SUCCESS, "then a good call works");
    check(SCR_Complete_output(1) == SCR_SUCCESS, "complete");
    check(SCR_Finalize() == SCR_SUCCESS, "finalize");
}

/* SCR_ENABLE=0 in the environment: every call fails as SCR's do, names pass through */
static void mode_disabled(void)
{
    check(SCR_Init() == SCR_FAILURE, "init fails when disabled");
    int flag = -1;
    char name[SCR_MAX_FILENAME] = "x";
    check(SCR_Have_restart(&flag, name) == SCR_FAILURE && flag == 0, "have restart fails, no restart");
    flag = -1;
    check(SCR_Need_checkpoint(&flag) == SCR_FAILURE && flag == 0, "need checkpoint fails, no");
    check(SCR_Start_output("ckpt.1", SCR_FLAG_CHECKPOINT) == SCR_FAILURE, "start output fails");
    char path[SCR_MAX_FILENAME];
    check(SCR_Route_file("data/a.txt", path) == SCR_SUCCESS && strcmp(path, "data/a.txt") == 0,
          "route file passes the name through");
    check(SCR_Complete_output(1) == SCR_FAILURE, "complete output fails");
    check(SCR_Should_exit(&flag) == SCR_FAILURE, "should exit fails");
    check(SCR_Current("ckpt.1") == SCR_FAILURE, "current fails");
    check(SCR_Drop("ckpt.1") == SCR_FAILURE, "drop fails");
    check(SCR_Delete("ckpt.1") == SCR_FAILURE, "delete fails");
    const char* v = SCR_Config("SCR_CACHE_SIZE");
    check(v == NULL, "a query returns NULL");
    free((void*)v);
    check(SCR_Finalize() == SCR_FAILURE, "finalize fails");
}

static void mode_exit(void)
{
    check(SCR_Init() == SCR_SUCCESS, "init");
    int flag = -1;
    check(SCR_Should_exit(&flag) == SCR_SUCCESS, "should exit");
    printf("r%d should exit %d\n", rank, flag);
    check(SCR_Finalize() == SCR_SUCCESS, "finalize");
}

/* This rank's slice of the shared file of step `step`. */
static void shared_slice(int step, char* buf)
{
    memset(buf, 0, 64);
    snprintf(buf, 64, "step %d written by rank %d", step, rank);
}

static void mode_shared(const char* how)
{
    int cached = strcmp(how, "cached") == 0;
    if (!cached) check(SCR_Config("SCR_CACHE_BYPASS=1") == NULL, "bypass set");
    check(SCR_Init() == SCR_SUCCESS, "init");
    char name[SCR_MAX_FILENAME], file[SCR_MAX_FILENAME + 16], path[SCR_MAX_FILENAME];
    char slice[64], got[64];
    if (strcmp(how, "read") == 0) {
        int have = 0;
        check(SCR_Have_restart(&have, name) == SCR_SUCCESS && have, "have restart");
        check(SCR_Start_restart(name) == SCR_SUCCESS, "start restart");
        int step = atoi(name + strlen("ckpt."));
        snprintf(file, sizeof(file), "%s/shared.ckpt", name);
        check(SCR_Route_file(file, path) == SCR_SUCCESS, "route the shared file");
        int fd = open(path, O_RDONLY);
        shared_slice(step, slice);
        int exact = fd >= 0 && pread(fd, got, 64, 64 * (off_t)rank) == 64
                    && memcmp(got, slice, 64) == 0;
        if (fd >= 0) close(fd);
        check(SCR_Complete_restart(exact) == SCR_SUCCESS, "complete restart");
        printf("r%d restarted %s from %s, byte-exact %d\n", rank, name, path, exact);
    } else {
        for (int step = 1; step <= (cached ? 1 : 2); step++) {
            snprintf(name, sizeof(name), "ckpt.%d", step);
            check(SCR_Start_output(name, SCR_FLAG_CHECKPOINT) == SCR_SUCCESS, "start output");
            snprintf(file, sizeof(file), "%s/shared.ckpt", name);
            check(SCR_Route_file(file, path) == SCR_SUCCESS, "route the shared file");
            printf("r%d routed %s to %s\n", rank, file, path);
            int fd = open(path, O_WRONLY | O_CREAT, 0600);
            shared_slice(step, slice);
            int ok = fd >= 0 && pwrite(fd, slice, 64, 64 * (off_t)rank) == 64;
            if (fd >= 0 && close(fd) != 0) ok = 0;
            int rc = SCR_Complete_output(ok);
            if (cached) check(rc == SCR_FAILURE, "a shared file refused in cache");
            else check(rc == SCR_SUCCESS, "complete output");
        }
    }
    check(SCR_Finalize() == SCR_SUCCESS, "finalize");
}

int main(int argc, char** argv)
{
    const char* mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "no-mpi") == 0) {
        int rc = SCR_Init();
        printf("init before MPI_Init: %s\n", rc == SCR_SUCCESS ? "succeeded" : "failed");
        return 0;
    }
    const char* init = getenv("SEMANTICS_INIT");
    if (init && strcmp(init, "funneled") == 0) {
        int provided = -1;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    } else {
        MPI_Init(&argc, &argv);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (init) {
        int level = -1;
        MPI_Query_thread(&level);
        printf("r%d thread %s\n", rank,
               level == MPI_THREAD_MULTIPLE ? "multiple"
               : level == MPI_THREAD_SERIALIZED ? "serialized"
               : level == MPI_THREAD_FUNNELED ? "funneled"
               : level == MPI_THREAD_SINGLE ? "single" : "unknown");
    }
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank == 0) printf("ranks %d\n", size);
    fflush(stdout);
    if (strcmp(mode, "config") == 0) mode_config();
    else if (strcmp(mode, "config-scr31") == 0) mode_config_scr31();
    else if (strcmp(mode, "route") == 0) mode_route();
    else if (strcmp(mode, "legacy") == 0) mode_legacy();
    else if (strcmp(mode, "write") == 0 && argc > 2) mode_write(atoi(argv[2]));
    else if (strcmp(mode, "current") == 0 && argc > 2) mode_current(argv[2]);
    else if (strcmp(mode, "exit") == 0) mode_exit();
    else if (strcmp(mode, "disabled") == 0) mode_disabled();
    else if (strcmp(mode, "mismatch") == 0) mode_mismatch();
    else if (strcmp(mode, "shared") == 0 && argc > 2) mode_shared(argv[2]);
    else if (strcmp(mode, "no-finalize") == 0) check(SCR_Init() == SCR_SUCCESS, "init");
    else if (strcmp(mode, "version") == 0) {
        printf("r%d version %s header %s %s.%s.%s\n", rank, SCR_Get_version(), SCR_VERSION,
               SCR_MAJOR_VERSION, SCR_MINOR_VERSION, SCR_PATCH_VERSION);
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
