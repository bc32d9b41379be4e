! scr-rs: Scalable Checkpoint/Restart for MPI applications.
!
! The Fortran constants of SCR's API, for
!       INCLUDE 'scrf.h'
! in fixed-form and free-form sources alike (statements from column
! 7, lines under 72 columns, comments with ! in column 1).
!
! Each SCR call is a subroutine whose last argument is an INTEGER
! IERROR that receives SCR_SUCCESS or SCR_FAILURE; on failure the
! reason is printed on stderr with the rank and the call:
!   SCR_INIT(IERROR), SCR_FINALIZE(IERROR)
!   SCR_CONFIG(CONFIG, VAL, IERROR)
!     'KEY=VALUE' sets, 'KEY=' unsets (both before SCR_INIT; VAL is
!     blanked); 'KEY' puts the value in force in VAL (blank: none)
!   SCR_ROUTE_FILE(NAME, FILE, IERROR)
!   SCR_HAVE_RESTART(FLAG, NAME, IERROR)
!   SCR_START_RESTART(NAME, IERROR)
!   SCR_COMPLETE_RESTART(VALID, IERROR)
!   scr-rs extensions, for a restart on another number of ranks:
!   SCR_RESTART_WRITERS(WRITERS, IERROR)
!   SCR_RESTART_NUM_FILES(RANK, COUNT, IERROR)
!   SCR_RESTART_FILE(RANK, INDEX, NAME, IERROR)
!     INDEX from 1; NAME is a path to pass to SCR_ROUTE_FILE
!   SCR_NEED_CHECKPOINT(FLAG, IERROR)
!   SCR_START_CHECKPOINT(IERROR)
!   SCR_COMPLETE_CHECKPOINT(VALID, IERROR)
!   SCR_START_OUTPUT(NAME, FLAGS, IERROR)
!     FLAGS: a sum of SCR_FLAG_*; a blank NAME names it by its id
!   SCR_COMPLETE_OUTPUT(VALID, IERROR)
!   SCR_CURRENT(NAME, IERROR), SCR_DROP(NAME, IERROR)
!   SCR_DELETE(NAME, IERROR)
!   SCR_GET_VERSION(VERSION, IERROR), SCR_SHOULD_EXIT(FLAG, IERROR)
!   scr-rs extensions, for online recovery (MPI with ULFM):
!   SCR_RUN_RESILIENT(COMM, SPARES, SHRINK, BODY, IERROR)
!     runs EXTERNAL BODY(COMM, ATTEMPT, IERROR) on COMM's ranks but
!     SPARES, with SCR initialised; BODY sets IERROR=SCR_SUCCESS when
!     done; ATTEMPT(SCR_ATTEMPT_LEN) is indexed by SCR_ATTEMPT_*
!   SCR_PROCESS_LOST(FLAG, IERROR), SCR_RECOVERED(FLAG, IERROR)
! Names returned (FILE, NAME, VAL, VERSION) are blank-padded; one
! longer than the variable is a failure saying the length needed:
! CHARACTER(LEN=SCR_MAX_FILENAME) holds any file or dataset name.
!
! Return codes
      INTEGER SCR_SUCCESS
      PARAMETER (SCR_SUCCESS=0)
      INTEGER SCR_FAILURE
      PARAMETER (SCR_FAILURE=1)
!
! The longest name SCR returns, as C counts it (with its NUL)
      INTEGER SCR_MAX_FILENAME
      PARAMETER (SCR_MAX_FILENAME=1024)
!
! Flags of SCR_START_OUTPUT: add them, each at most once
      INTEGER SCR_FLAG_NONE
      PARAMETER (SCR_FLAG_NONE=0)
      INTEGER SCR_FLAG_CHECKPOINT
      PARAMETER (SCR_FLAG_CHECKPOINT=1)
      INTEGER SCR_FLAG_OUTPUT
      PARAMETER (SCR_FLAG_OUTPUT=2)
!
! The entries of SCR_RUN_RESILIENT's ATTEMPT array: the run (0 first,
! one more after each recovery), the rank and size of the application
! communicator, ranks the last recovery lost, spares left
      INTEGER SCR_ATTEMPT_LEN
      PARAMETER (SCR_ATTEMPT_LEN=5)
      INTEGER SCR_ATTEMPT_NUMBER
      PARAMETER (SCR_ATTEMPT_NUMBER=1)
      INTEGER SCR_ATTEMPT_RANK
      PARAMETER (SCR_ATTEMPT_RANK=2)
      INTEGER SCR_ATTEMPT_SIZE
      PARAMETER (SCR_ATTEMPT_SIZE=3)
      INTEGER SCR_ATTEMPT_LOST
      PARAMETER (SCR_ATTEMPT_LOST=4)
      INTEGER SCR_ATTEMPT_SPARES
      PARAMETER (SCR_ATTEMPT_SPARES=5)
!
! The SCR API level implemented (scr.h's SCR_VERSION)
      CHARACTER(LEN=*) SCR_VERSION
      PARAMETER (SCR_VERSION='v3.1.0')
