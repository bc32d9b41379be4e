/*
 * MPI_Init and MPI_Init_thread (C, and Fortran's MPI_INIT and MPI_INIT_THREAD of mpif.h,
 * `use mpi` and Open MPI's `use mpi_f08`) defined by libscr, so that an application
 * written for plain MPI_Init
 * gets MPI_THREAD_MULTIPLE when the job's environment turns protect_in_background on
 * (the decision and what was done: mpi_init.rs, scr_rs_mpi_init_level).
 *
 * Each passes the call on to the next definition of the same name after libscr
 * (dlsym(RTLD_NEXT)): a profiling tool linked after libscr still sees its MPI_Init, and
 * MPI's own runs last; only when there is none does it call MPI's PMPI_ name. The
 * definitions are weak, so that an application or a tool linked statically with its own
 * MPI_Init keeps it (and links) rather than clash with libscr.a.
 *
 * mpi.h is not needed: the PMPI prototypes are the standard's, and the thread level to ask
 * for comes from the Rust side. A Fortran INTEGER is a C int here, as MPI_Fint is in the
 * MPI libscr is built against.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

int PMPI_Init(int *argc, char ***argv);
int PMPI_Init_thread(int *argc, char ***argv, int required, int *provided);

/* The level to ask MPI for (mpi_init.rs): for MPI_Init (`plain` = 1), -1 means "pass it
 * on as MPI_Init"; otherwise the level for MPI_Init_thread. */
int scr_rs_mpi_init_level(int required, int plain);

typedef int (*c_init)(int *, char ***);
typedef int (*c_init_thread)(int *, char ***, int, int *);
typedef void (*f_init)(int *);
typedef void (*f_init_thread)(const int *, int *, int *);

/* The next definition of `name` after libscr (a tool's, else MPI's own), or NULL. */
static void *next(const char *name)
{
    return dlsym(RTLD_NEXT, name);
}

static int c_init_thread_at(int *argc, char ***argv, int level, int *provided)
{
    c_init_thread f = (c_init_thread) next("MPI_Init_thread");
    return f ? f(argc, argv, level, provided) : PMPI_Init_thread(argc, argv, level, provided);
}

__attribute__((weak)) int MPI_Init(int *argc, char ***argv)
{
    int level = scr_rs_mpi_init_level(0, 1);
    if (level < 0) {
        c_init f = (c_init) next("MPI_Init");
        return f ? f(argc, argv) : PMPI_Init(argc, argv);
    }
    int provided = 0;
    return c_init_thread_at(argc, argv, level, &provided);
}

__attribute__((weak)) int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    return c_init_thread_at(argc, argv, scr_rs_mpi_init_level(required, 0), provided);
}

static void fortran_init_thread_at(int level, int *provided, int *ierror, const char *name)
{
    f_init_thread f = (f_init_thread) next(name);
    if (f) {
        f(&level, provided, ierror);
        return;
    }
    int rc = PMPI_Init_thread(NULL, NULL, level, provided);
    if (ierror) *ierror = rc;
}

static void fortran_init(int *ierror, const char *name, const char *thread_name)
{
    int level = scr_rs_mpi_init_level(0, 1);
    if (level >= 0) {
        int provided = 0;
        fortran_init_thread_at(level, &provided, ierror, thread_name);
        return;
    }
    f_init f = (f_init) next(name);
    if (f) {
        f(ierror);
        return;
    }
    int rc = PMPI_Init(NULL, NULL);
    if (ierror) *ierror = rc;
}

static void fortran_init_thread(const int *required, int *provided, int *ierror,
                                const char *name)
{
    int level = scr_rs_mpi_init_level(required ? *required : 0, 0);
    fortran_init_thread_at(level, provided, ierror, name);
}

/* gfortran's and Intel's names, -fsecond-underscore's, and upper case (a name without
 * any underscore is left out: C code may well name a function of its own mpi_init) */
__attribute__((weak)) void mpi_init_(int *ierror)
{
    fortran_init(ierror, "mpi_init_", "mpi_init_thread_");
}
__attribute__((weak)) void mpi_init__(int *ierror)
{
    fortran_init(ierror, "mpi_init__", "mpi_init_thread__");
}
__attribute__((weak)) void MPI_INIT(int *ierror)
{
    fortran_init(ierror, "MPI_INIT", "MPI_INIT_THREAD");
}
__attribute__((weak)) void mpi_init_thread_(const int *required, int *provided, int *ierror)
{
    fortran_init_thread(required, provided, ierror, "mpi_init_thread_");
}
__attribute__((weak)) void mpi_init_thread__(const int *required, int *provided, int *ierror)
{
    fortran_init_thread(required, provided, ierror, "mpi_init_thread__");
}
__attribute__((weak)) void MPI_INIT_THREAD(const int *required, int *provided, int *ierror)
{
    fortran_init_thread(required, provided, ierror, "MPI_INIT_THREAD");
}

/* Open MPI's `use mpi_f08` procedures (IERROR optional: NULL when absent) */
__attribute__((weak)) void mpi_init_f08_(int *ierror)
{
    fortran_init(ierror, "mpi_init_f08_", "mpi_init_thread_f08_");
}
__attribute__((weak)) void mpi_init_thread_f08_(const int *required, int *provided, int *ierror)
{
    fortran_init_thread(required, provided, ierror, "mpi_init_thread_f08_");
}
