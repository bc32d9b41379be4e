/* Online recovery through SCR_Run_resilient: each rank owns a vector of numbers that
 * every step mixes with the sum over all ranks (MPI_Allreduce on the application
 * communicator), checkpointed every 5 steps. `resilient SPARES STEPS [KILL_STEP
 * KILL_RANK]` kills KILL_RANK with SIGKILL after KILL_STEP in the first run of the body;
 * the job goes on through a spare. Rank 0 prints `final <steps> <checksum>` (the same as
 * an uninterrupted run's) and `recoveries <n>`. A fifth argument `fortran` goes through
 * the Fortran binding (`scr_run_resilient_`, gfortran's convention) instead, as a
 * Fortran program would: its MPI is Open MPI 5 with ULFM, which has no Fortran library. */
#include <mpi.h>
#include <scr.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CELLS 1024

struct job {
  int steps, kill_step, kill_rank;
};

static unsigned long long checksum(const double* v, int n) {
  unsigned long long h = 1469598103934665603ULL;
  const unsigned char* b = (const unsigned char*)v;
  for (size_t i = 0; i < (size_t)n * sizeof(double); i++) {
    h = (h ^ b[i]) * 1099511628211ULL;
  }
  return h;
}

/* The restart: the newest checkpoint every rank reads, else a fresh start (step 0). */
static int restart(int rank, double* v, int* step) {
  int have = 0;
  char name[SCR_MAX_FILENAME];
  *step = 0;
  for (int i = 0; i < CELLS; i++) v[i] = rank * CELLS + i;
  while (SCR_Have_restart(&have, name) == SCR_SUCCESS && have) {
    if (SCR_Start_restart(name) != SCR_SUCCESS) return SCR_FAILURE;
    char file[SCR_MAX_FILENAME + 32], path[SCR_MAX_FILENAME];
    snprintf(file, sizeof(file), "%s/rank_%d.ckpt", name, rank);
    int valid = 0;
    if (SCR_Route_file(file, path) == SCR_SUCCESS) {
      FILE* f = fopen(path, "rb");
      if (f) {
        valid = fread(step, sizeof(int), 1, f) == 1 && fread(v, sizeof(double), CELLS, f) == CELLS;
        fclose(f);
      }
    }
    if (SCR_Complete_restart(valid) == SCR_SUCCESS) {
      if (rank == 0) printf("restarted from %s at step %d\n", name, *step);
      return SCR_SUCCESS;
    }
    if (SCR_Process_lost()) return SCR_FAILURE;
  }
  return SCR_Process_lost() ? SCR_FAILURE : SCR_SUCCESS;
}

static int body(MPI_Comm comm, const SCR_Attempt* attempt, void* arg) {
  const struct job* job = arg;
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  if (rank == 0 && attempt->number > 0) {
    printf("recovered (attempt %d): %d rank(s) lost, %d rank(s) now\n", attempt->number, attempt->lost, size);
  }
  double v[CELLS];
  int step;
  if (restart(rank, v, &step) != SCR_SUCCESS) return SCR_FAILURE;
  while (step < job->steps) {
    double mine = 0, all = 0;
    for (int i = 0; i < CELLS; i++) mine += v[i];
    if (MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, MPI_SUM, comm) != MPI_SUCCESS) return SCR_FAILURE;
    for (int i = 0; i < CELLS; i++) v[i] = 0.5 * v[i] + 1e-6 * all + i;
    step++;
    if (attempt->number == 0 && step == job->kill_step && rank == job->kill_rank) {
      kill(getpid(), SIGKILL);
    }
    if (step % 5 == 0) {
      char name[64], file[SCR_MAX_FILENAME], path[SCR_MAX_FILENAME];
      snprintf(name, sizeof(name), "ckpt.%d", step);
      snprintf(file, sizeof(file), "%s/rank_%d.ckpt", name, rank);
      if (SCR_Start_output(name, SCR_FLAG_CHECKPOINT) != SCR_SUCCESS) return SCR_FAILURE;
      if (SCR_Route_file(file, path) != SCR_SUCCESS) return SCR_FAILURE;
      FILE* f = fopen(path, "wb");
      int ok = f && fwrite(&step, sizeof(int), 1, f) == 1 && fwrite(v, sizeof(double), CELLS, f) == CELLS;
      if (f) ok = fclose(f) == 0 && ok;
      if (SCR_Complete_output(ok) != SCR_SUCCESS) return SCR_FAILURE;
    }
  }
  /* the whole state's checksum, in rank order on rank 0 */
  double* all = rank == 0 ? malloc(sizeof(double) * CELLS * size) : NULL;
  if (MPI_Gather(v, CELLS, MPI_DOUBLE, all, CELLS, MPI_DOUBLE, 0, comm) != MPI_SUCCESS) return SCR_FAILURE;
  if (rank == 0) {
    printf("final %d %016llx\n", step, checksum(all, CELLS * size));
    printf("recoveries %d\n", attempt->number);
    free(all);
  }
  return SCR_SUCCESS;
}

/* SCR_RUN_RESILIENT(COMM, SPARES, SHRINK, BODY, IERROR) as gfortran calls it: every
 * argument by reference, BODY(COMM, ATTEMPT, IERROR) with a Fortran communicator handle
 * and the ATTEMPT array (scrf.h's SCR_ATTEMPT_*, from 1 in Fortran). */
void scr_run_resilient_(const MPI_Fint* comm, const int* spares, const int* shrink,
                        void (*body)(const MPI_Fint*, const int*, int*), int* ierror);

static struct job fortran_job;

static void fortran_body(const MPI_Fint* comm, const int* attempt, int* ierror) {
  SCR_Attempt a = {attempt[0], attempt[1], attempt[2], attempt[3], attempt[4], 0.0};
  MPI_Comm c = MPI_Comm_f2c(*comm);
  int rank;
  MPI_Comm_rank(c, &rank);
  if (rank != a.rank) {
    fprintf(stderr, "resilient: ATTEMPT says rank %d, the communicator %d\n", a.rank, rank);
    *ierror = SCR_FAILURE;
    return;
  }
  *ierror = body(c, &a, &fortran_job);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int world_rank, world_size;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (world_rank == 0) printf("ranks %d\n", world_size);
  fflush(stdout);
  int spares = argc > 1 ? atoi(argv[1]) : 0;
  struct job job = {argc > 2 ? atoi(argv[2]) : 40, argc > 3 ? atoi(argv[3]) : -1, argc > 4 ? atoi(argv[4]) : -1};
  int rc;
  if (argc > 5 && strcmp(argv[5], "fortran") == 0) {
    MPI_Fint world = MPI_Comm_c2f(MPI_COMM_WORLD);
    int shrink = 0;
    fortran_job = job;
    scr_run_resilient_(&world, &spares, &shrink, fortran_body, &rc);
  } else {
    rc = SCR_Run_resilient(MPI_COMM_WORLD, spares, 0, body, &job);
  }
  fflush(stdout);
  if (rc != SCR_SUCCESS) {
    fprintf(stderr, "resilient[%d]: SCR_Run_resilient failed\n", world_rank);
    return 1;
  }
  if (SCR_Recovered()) {
    /* Open MPI 5.0's MPI_Finalize may wait for the lost process: end without it */
    _exit(0);
  }
  MPI_Finalize();
  return 0;
}
