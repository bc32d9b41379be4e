/* A restart on any number of ranks through SCR's C API and the scr-rs extensions
 * (SCR_Restart_writers, SCR_Restart_num_files, SCR_Restart_file).
 *
 *   resize write STEP   each rank writes checkpoint ckpt.STEP: part_<rank>.dat, whose
 *                       bytes depend on the rank and STEP only
 *   resize read         one restart loop, the same for any number of ranks: every rank
 *                       lists every old rank's files, routes and reads each, and checks
 *                       every byte against what that old rank wrote
 *   ... share           (after write or read) read only the old ranks whose share of the
 *                       work overlaps this rank's, and say whether every file came from
 *                       cache (not the prefix)
 *
 * Prints "ranks N" on rank 0 (a wrong mpiexec runs N singletons), then per rank
 * "r<rank> wrote ckpt.STEP" or "r<rank> restarted ckpt.STEP writers W files F exact|DIFFERS",
 * or "r<rank> FAILED <what>". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scr.h"

#define BYTES 5000

/* what old rank `writer` wrote at checkpoint `step`, byte `i` */
static unsigned char expected(int writer, int step, int i)
{
    return (unsigned char)((i * 13) ^ (writer * 31) ^ (step * 7));
}

static int rank;

static int fail(const char* what)
{
    printf("r%d FAILED %s\n", rank, what);
    return 1;
}

static int write_step(int step)
{
    char name[32], path[96], file[SCR_MAX_FILENAME];
    snprintf(name, sizeof name, "ckpt.%d", step);
    if (SCR_Start_output(name, SCR_FLAG_CHECKPOINT) != SCR_SUCCESS) return fail("start_output");
    snprintf(path, sizeof path, "%s/part_%d.dat", name, rank);
    if (SCR_Route_file(path, file) != SCR_SUCCESS) return fail("route_file");
    FILE* f = fopen(file, "wb");
    int ok = f != NULL;
    for (int i = 0; ok && i < BYTES; i++) ok = fputc(expected(rank, step, i), f) != EOF;
    if (f && fclose(f) != 0) ok = 0;
    if (SCR_Complete_output(ok) != SCR_SUCCESS) return fail("complete_output");
    printf("r%d wrote %s\n", rank, name);
    return 0;
}

/* every byte of `path` is what `writer` wrote at `step` */
static int holds(const char* path, int writer, int step)
{
    FILE* f = fopen(path, "rb");
    if (!f) return 0;
    int i = 0, c, ok = 1;
    while ((c = fgetc(f)) != EOF) {
        if (i >= BYTES || c != expected(writer, step, i)) ok = 0;
        i++;
    }
    fclose(f);
    return ok && i == BYTES;
}

static int read_any(int share)
{
    int flag = 0;
    char name[SCR_MAX_FILENAME];
    if (SCR_Have_restart(&flag, name) != SCR_SUCCESS) return fail("have_restart");
    if (!flag) {
        printf("r%d no restart\n", rank);
        return 0;
    }
    if (SCR_Start_restart(name) != SCR_SUCCESS) return fail("start_restart");
    int step = atoi(name + strlen("ckpt."));
    int writers = 0, files = 0, exact = 1, cached = 1, size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (SCR_Restart_writers(&writers) != SCR_SUCCESS) return fail("restart_writers");
    for (int w = 0; w < writers; w++) {
        /* old rank w of `writers` covers [w/writers, (w+1)/writers) of the work */
        long lo = (long)w * size, hi = (long)(w + 1) * size;
        if (share && !(lo < (long)(rank + 1) * writers && hi > (long)rank * writers)) continue;
        int count = 0;
        if (SCR_Restart_num_files(w, &count) != SCR_SUCCESS) return fail("restart_num_files");
        for (int i = 0; i < count; i++) {
            char old[SCR_MAX_FILENAME], routed[SCR_MAX_FILENAME];
            if (SCR_Restart_file(w, i, old) != SCR_SUCCESS) return fail("restart_file");
            if (SCR_Route_file(old, routed) != SCR_SUCCESS) return fail("route_file");
            exact = exact && holds(routed, w, step);
            cached = cached && strstr(routed, "/prefix/") == NULL;
            files++;
        }
    }
    if (SCR_Complete_restart(exact) != SCR_SUCCESS) return fail("complete_restart");
    printf("r%d restarted %s writers %d files %d %s%s\n", rank, name, writers, files,
           exact ? "exact" : "DIFFERS", share ? (cached ? " from cache" : " from the prefix") : "");
    return 0;
}

int main(int argc, char** argv)
{
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank == 0) printf("ranks %d\n", size);
    int rc = 0;
    if (SCR_Init() != SCR_SUCCESS) {
        rc = fail("init");
    } else {
        int share = strcmp(argv[argc - 1], "share") == 0;
        if (argc >= 3 && strcmp(argv[1], "write") == 0) {
            rc = write_step(atoi(argv[2]));
        } else if (argc >= 2 && strcmp(argv[1], "read") == 0) {
            rc = read_any(share);
        } else {
            rc = fail("usage: resize write STEP [share] | resize read [share]");
        }
        if (SCR_Finalize() != SCR_SUCCESS) rc = fail("finalize");
    }
    fflush(stdout);
    MPI_Finalize();
    return rc;
}
