/*
 * A C application using scr-rs through SCR's C API (scr.h): a per-rank state evolves
 * step by step; the state is checkpointed (several files per rank) whenever
 * SCR_Need_checkpoint says so, an output dataset is written every few steps, and a
 * restarted run resumes from the newest checkpoint SCR offers, falling back to an older
 * one if a file does not read back.
 *
 * Build:   mpicc -o checkpoint checkpoint.c $(pkg-config --cflags --libs scr)
 * Run:     SCR_CHECKPOINT_INTERVAL=5 mpiexec -n 4 ./checkpoint --steps 30
 *          (with no checkpoint_interval, _seconds or _overhead set, SCR_Need_checkpoint
 *          answers 0, as SCR 3's does, and nothing is checkpointed)
 * Options: --steps N        steps to run (default 20)
 *          --files F        checkpoint files per rank (default 2)
 *          --output-every K an output dataset every K steps (default 10, 0: none)
 *          --kill-at S      rank --kill-rank kills itself with SIGKILL after step S
 *          --kill-rank R    (default 1)
 * It prints "restarted from NAME at step S" or "starting fresh", then on rank 0
 * "final step N state crc32 XXXXXXXX": the CRC32 of every rank's final state, which an
 * uninterrupted run reaches too.
 */
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scr.h"

#define CELLS 256

static uint32_t crc32_update(uint32_t crc, const void* data, size_t len)
{
    const unsigned char* p = data;
    crc = ~crc;
    for (size_t i = 0; i < len; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) {
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
        }
    }
    return ~crc;
}

/* One step of a deterministic computation: every rank's cells depend on its rank. */
static void compute(double* cells, int rank, long step)
{
    for (int i = 0; i < CELLS; i++) {
        cells[i] = 0.5 * cells[i] + 0.25 * cells[(i + 1) % CELLS] + 0.001 * (rank + 1) * (double)step;
    }
}

/* The part of the state stored in checkpoint file f of `files`. */
static void part(int f, int files, int* start, int* count)
{
    int per = (CELLS + files - 1) / files;
    *start = f * per;
    *count = *start >= CELLS ? 0 : (*start + per > CELLS ? CELLS - *start : per);
}

/* Read this rank's checkpoint; 1 when every file read back whole. */
static int read_checkpoint(int rank, int files, double* cells, long* step)
{
    int valid = 1;
    for (int f = 0; f < files; f++) {
        char name[256], path[SCR_MAX_FILENAME];
        snprintf(name, sizeof(name), "ckpt/rank_%d.part%d", rank, f);
        if (SCR_Route_file(name, path) != SCR_SUCCESS) {
            valid = 0;
            continue;
        }
        FILE* fp = fopen(path, "rb");
        if (fp == NULL) {
            valid = 0;
            continue;
        }
        int start, count;
        part(f, files, &start, &count);
        long s;
        if (fread(&s, sizeof(s), 1, fp) != 1 || fread(cells + start, sizeof(double), (size_t)count, fp) != (size_t)count) {
            valid = 0;
        }
        if (f == 0) {
            *step = s;
        } else if (s != *step) {
            valid = 0;
        }
        fclose(fp);
    }
    return valid;
}

/* Write this rank's checkpoint; 1 when every file was written. */
static int write_checkpoint(int rank, int files, const double* cells, long step)
{
    int valid = 1;
    for (int f = 0; f < files; f++) {
        char name[256], path[SCR_MAX_FILENAME];
        snprintf(name, sizeof(name), "ckpt/rank_%d.part%d", rank, f);
        if (SCR_Route_file(name, path) != SCR_SUCCESS) {
            valid = 0;
            continue;
        }
        FILE* fp = fopen(path, "wb");
        if (fp == NULL) {
            valid = 0;
            continue;
        }
        int start, count;
        part(f, files, &start, &count);
        if (fwrite(&step, sizeof(step), 1, fp) != 1 || fwrite(cells + start, sizeof(double), (size_t)count, fp) != (size_t)count) {
            valid = 0;
        }
        if (fclose(fp) != 0) {
            valid = 0;
        }
    }
    return valid;
}

int main(int argc, char** argv)
{
    long steps = 20, kill_at = -1;
    int files = 2, output_every = 10, kill_rank = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--steps") == 0) steps = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--files") == 0) files = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--output-every") == 0) output_every = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--kill-at") == 0) kill_at = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--kill-rank") == 0) kill_rank = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (files < 1) files = 1;

    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    /* configuration before SCR_Init: keep 2 checkpoints in cache; ask what is in force */
    SCR_Config("SCR_CACHE_SIZE=2");
    const char* scheme = SCR_Config("SCR_COPY_TYPE");
    if (SCR_Init() != SCR_SUCCESS) {
        fprintf(stderr, "rank %d: SCR_Init failed\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (rank == 0) {
        printf("ranks %d\n", size);
        printf("%s, scheme %s\n", SCR_Get_version(), scheme ? scheme : "(none)");
    }
    free((void*)scheme);

    double cells[CELLS];
    for (int i = 0; i < CELLS; i++) cells[i] = (double)(rank * CELLS + i);
    long step = 0;

    /* restart: the newest checkpoint first, older ones if it does not read */
    int have = 0;
    char name[SCR_MAX_FILENAME];
    while (SCR_Have_restart(&have, name) == SCR_SUCCESS && have) {
        SCR_Start_restart(name);
        long s = 0;
        int valid = read_checkpoint(rank, files, cells, &s);
        if (SCR_Complete_restart(valid) == SCR_SUCCESS) {
            step = s;
            if (rank == 0) printf("restarted from %s at step %ld\n", name, step);
            break;
        }
        if (rank == 0) printf("%s did not read back; trying an older checkpoint\n", name);
        for (int i = 0; i < CELLS; i++) cells[i] = (double)(rank * CELLS + i);
    }
    if (step == 0 && rank == 0) printf("starting fresh\n");

    while (step < steps) {
        step++;
        compute(cells, rank, step);

        int need = 0;
        SCR_Need_checkpoint(&need);
        if (need) {
            char ckpt[64];
            snprintf(ckpt, sizeof(ckpt), "ckpt.%ld", step);
            SCR_Start_output(ckpt, SCR_FLAG_CHECKPOINT);
            int valid = write_checkpoint(rank, files, cells, step);
            if (SCR_Complete_output(valid) == SCR_SUCCESS && rank == 0) {
                printf("checkpoint %s\n", ckpt);
            }
        }
        if (output_every > 0 && step % output_every == 0) {
            char out[64], file[128], path[SCR_MAX_FILENAME];
            snprintf(out, sizeof(out), "output.%ld", step);
            SCR_Start_output(out, SCR_FLAG_OUTPUT);
            snprintf(file, sizeof(file), "results/step%ld/rank_%d.txt", step, rank);
            int valid = 0;
            if (SCR_Route_file(file, path) == SCR_SUCCESS) {
                FILE* fp = fopen(path, "w");
                if (fp != NULL) {
                    fprintf(fp, "rank %d step %ld first %.6f last %.6f\n", rank, step, cells[0], cells[CELLS - 1]);
                    valid = fclose(fp) == 0;
                }
            }
            SCR_Complete_output(valid);
        }
        if (step == kill_at && rank == kill_rank) {
            printf("rank %d killed after step %ld\n", rank, step);
            fflush(stdout);
            raise(SIGKILL);
        }
        int exit_now = 0;
        SCR_Should_exit(&exit_now);
        if (exit_now) {
            if (rank == 0) printf("halted at step %ld\n", step);
            break;
        }
    }

    /* every rank's final state, in rank order, as one CRC32 */
    uint32_t mine = crc32_update(0, cells, sizeof(cells));
    uint32_t* all = rank == 0 ? malloc(sizeof(uint32_t) * (size_t)size) : NULL;
    MPI_Gather(&mine, 1, MPI_UINT32_T, all, 1, MPI_UINT32_T, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        uint32_t crc = crc32_update(0, all, sizeof(uint32_t) * (size_t)size);
        printf("final step %ld state crc32 %08x\n", step, crc);
        free(all);
    }

    if (SCR_Finalize() != SCR_SUCCESS) {
        fprintf(stderr, "rank %d: SCR_Finalize failed\n", rank);
    }
    MPI_Finalize();
    return 0;
}
