/*
 * scr-rs: Scalable Checkpoint/Restart for MPI applications.
 *
 * The C interface: source-compatible with the SCR 3.1 API, so an application written
 * for it compiles unchanged and links with -lscr (see `pkg-config --cflags --libs scr`).
 *
 * Every function except SCR_Config (before SCR_Init), SCR_Route_file and SCR_Get_version
 * is collective over MPI_COMM_WORLD. The application calls MPI_Init before SCR_Init and
 * MPI_Finalize after SCR_Finalize. A function that fails returns SCR_FAILURE and prints
 * on stderr which rank, which call and why.
 */
#ifndef SCR_H
#define SCR_H

#ifdef __cplusplus
extern "C" {
#endif

/* The SCR API level this library implements (strings, as SCR defines them). */
#define SCR_MAJOR_VERSION "3"
#define SCR_MINOR_VERSION "1"
#define SCR_PATCH_VERSION "0"
#define SCR_VERSION "v3.1.0"

/* The scr-rs release. */
#define SCR_RS_VERSION "0.1.0"

/* Return codes. */
#define SCR_SUCCESS (0)
#define SCR_FAILURE (1)

/* The largest file or dataset name returned, with its terminating NUL: buffers passed
 * to SCR_Route_file, SCR_Have_restart and SCR_Start_restart hold at least this many. */
#define SCR_MAX_FILENAME 1024

/* Flags for SCR_Start_output, combined with | */
#define SCR_FLAG_NONE       (0 << 0) /* no flags */
#define SCR_FLAG_CHECKPOINT (1 << 0) /* the job can restart from this dataset */
#define SCR_FLAG_OUTPUT     (1 << 1) /* the dataset must reach the prefix directory */

/* Init and finalize */
int SCR_Init(void);
int SCR_Finalize(void);

/* Configuration. "KEY=VALUE" sets a value, "KEY=" forgets a value set here, both before
 * SCR_Init, and return NULL. "KEY" returns the value something set (the API, the
 * environment or a configuration file) in a string the caller must free(), or NULL when
 * nothing set it (a key left at its built-in default). Descriptors: "CKPT=0 TYPE=XOR
 * SET_SIZE=16", "STORE=/dev/shm COUNT=2"; query one item with "CKPT=0 TYPE". */
const char* SCR_Config(const char* config);
const char* SCR_Configf(const char* format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* Where to write (between SCR_Start_output and SCR_Complete_output) or read (between
 * SCR_Start_restart and SCR_Complete_restart; a file may then be named by its base name
 * alone) the file `name`; outside both, and before SCR_Init or after SCR_Finalize,
 * `name` itself. `file` holds at least SCR_MAX_FILENAME bytes. */
int SCR_Route_file(const char* name, char* file);

/* Restart */
int SCR_Have_restart(int* flag, char* name);
int SCR_Start_restart(char* name);
int SCR_Complete_restart(int valid);

/* Restart on another number of ranks (scr-rs extensions; SCR 3.1 has none). Between
 * SCR_Start_restart and SCR_Complete_restart: SCR_Restart_writers gives how many ranks
 * wrote the checkpoint being read; SCR_Restart_num_files how many files old rank `rank`
 * wrote, and SCR_Restart_file the `index`th of them (from 0) as a path to pass to
 * SCR_Route_file (`name` holds SCR_MAX_FILENAME bytes). When the job has another number
 * of ranks than wrote the checkpoint, every rank may list and route every old rank's
 * files, and reads those its new share of the work needs; with the same number, a rank
 * lists its own files only, as each reads back what it wrote. Local calls. Test for
 * them with #ifdef SCR_HAVE_RESTART_WRITERS. */
#define SCR_HAVE_RESTART_WRITERS 1
int SCR_Restart_writers(int* writers);
int SCR_Restart_num_files(int rank, int* count);
int SCR_Restart_file(int rank, int index, char* name);

/* Online recovery (scr-rs extensions; SCR 3.1 has none). SCR_Run_resilient runs `body`
 * on the application ranks of `world` (the last `spares` processes wait inside it as
 * spares), with SCR initialised on the application communicator `comm` before each run of
 * `body` (do not call SCR_Init or SCR_Finalize yourself) and finalized after a run that
 * returns SCR_SUCCESS. Under MPI with ULFM (Open MPI 5, `mpiexec --with-ft ulfm`), when a
 * process is lost every SCR call fails on every rank: return from `body`; a spare takes
 * the lost rank (with `shrink` nonzero and no spare left, the job goes on with fewer
 * ranks), the lost files are rebuilt from cache, and `body` runs again, restarting
 * through SCR_Have_restart. Use `comm`, not `world`, for the application's messages; a
 * loop waiting on their results should also test SCR_Process_lost(). Returns alike on
 * every process, spares included. After a recovery (SCR_Recovered() nonzero) end the
 * process without MPI_Finalize, which Open MPI 5.0 may not return from after a loss.
 * Unlike Fenix, nothing is kept in memory across a loss and no setjmp is involved: the
 * state comes back from the checkpoint files. Test for them with
 * #ifdef SCR_HAVE_RUN_RESILIENT (defined when mpi.h is included before scr.h). */
#ifdef MPI_VERSION /* (declared where mpi.h was included first, as applications do) */
#define SCR_HAVE_RUN_RESILIENT 1
typedef struct {
  int number;              /* 0 for the first run, +1 after each recovery */
  int rank;                /* this process's rank in comm */
  int size;                /* ranks in comm */
  int lost;                /* ranks the last recovery lost */
  int spares_left;         /* spares left */
  double recovery_seconds; /* how long the last recovery took */
} SCR_Attempt;
typedef int (*SCR_Resilient_body)(MPI_Comm comm, const SCR_Attempt* attempt, void* arg);
int SCR_Run_resilient(MPI_Comm world, int spares, int shrink, SCR_Resilient_body body, void* arg);
#endif
int SCR_Process_lost(void);
int SCR_Recovered(void);

/* Checkpoint (the SCR 1.x/2.x forms) */
int SCR_Need_checkpoint(int* flag);
int SCR_Start_checkpoint(void);
int SCR_Complete_checkpoint(int valid);

/* Output (checkpoints and output datasets) */
int SCR_Start_output(const char* name, int flags);
int SCR_Complete_output(int valid);

/* Dataset management */
int SCR_Current(const char* name);
/* Drop: the dataset leaves the prefix's index and is no longer offered for a restart in
 * this run (its files stay). Delete: its files go from cache and prefix, with its index entry.
 * Both collective; a name nothing holds is no error. */
int SCR_Drop(const char* name);
int SCR_Delete(const char* name);

/* Environment */
char* SCR_Get_version(void);
int SCR_Should_exit(int* flag);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SCR_H */
