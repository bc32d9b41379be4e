! scr-rs: Scalable Checkpoint/Restart for MPI applications.
!
! The Fortran 90 module of SCR's API: `USE scr` gives the constants of scrf.h and an
! explicit interface for every call, so the compiler checks each call's arguments.
! scripts/install.sh compiles it into include/scr.mod with the Fortran compiler it finds
! (a .mod file belongs to the compiler that made it: rebuild it with yours if it
! differs):
!     mpif90 -c -J <dir> scr.f90
! Link as with scrf.h: -lscrf -lscr (or $(pkg-config --libs scr)).
module scr
  implicit none
  include 'scrf.h'

  interface
    subroutine SCR_INIT(ierror)
      integer, intent(out) :: ierror
    end subroutine SCR_INIT

    subroutine SCR_FINALIZE(ierror)
      integer, intent(out) :: ierror
    end subroutine SCR_FINALIZE

    subroutine SCR_CONFIG(config, val, ierror)
      character(len=*), intent(in) :: config
      character(len=*), intent(out) :: val
      integer, intent(out) :: ierror
    end subroutine SCR_CONFIG

    subroutine SCR_ROUTE_FILE(name, file, ierror)
      character(len=*), intent(in) :: name
      character(len=*), intent(out) :: file
      integer, intent(out) :: ierror
    end subroutine SCR_ROUTE_FILE

    subroutine SCR_HAVE_RESTART(flag, name, ierror)
      integer, intent(out) :: flag
      character(len=*), intent(out) :: name
      integer, intent(out) :: ierror
    end subroutine SCR_HAVE_RESTART

    subroutine SCR_START_RESTART(name, ierror)
      character(len=*), intent(out) :: name
      integer, intent(out) :: ierror
    end subroutine SCR_START_RESTART

    subroutine SCR_COMPLETE_RESTART(valid, ierror)
      integer, intent(in) :: valid
      integer, intent(out) :: ierror
    end subroutine SCR_COMPLETE_RESTART

    subroutine SCR_RESTART_WRITERS(writers, ierror)
      integer, intent(out) :: writers
      integer, intent(out) :: ierror
    end subroutine SCR_RESTART_WRITERS

    subroutine SCR_RESTART_NUM_FILES(rank, count, ierror)
      integer, intent(in) :: rank
      integer, intent(out) :: count
      integer, intent(out) :: ierror
    end subroutine SCR_RESTART_NUM_FILES

    subroutine SCR_RESTART_FILE(rank, index, name, ierror)
      integer, intent(in) :: rank
      integer, intent(in) :: index
      character(len=*), intent(out) :: name
      integer, intent(out) :: ierror
    end subroutine SCR_RESTART_FILE

    subroutine SCR_NEED_CHECKPOINT(flag, ierror)
      integer, intent(out) :: flag
      integer, intent(out) :: ierror
    end subroutine SCR_NEED_CHECKPOINT

    subroutine SCR_START_CHECKPOINT(ierror)
      integer, intent(out) :: ierror
    end subroutine SCR_START_CHECKPOINT

    subroutine SCR_COMPLETE_CHECKPOINT(valid, ierror)
      integer, intent(in) :: valid
      integer, intent(out) :: ierror
    end subroutine SCR_COMPLETE_CHECKPOINT

    subroutine SCR_START_OUTPUT(name, flags, ierror)
      character(len=*), intent(in) :: name
      integer, intent(in) :: flags
      integer, intent(out) :: ierror
    end subroutine SCR_START_OUTPUT

    subroutine SCR_COMPLETE_OUTPUT(valid, ierror)
      integer, intent(in) :: valid
      integer, intent(out) :: ierror
    end subroutine SCR_COMPLETE_OUTPUT

    subroutine SCR_CURRENT(name, ierror)
      character(len=*), intent(in) :: name
      integer, intent(out) :: ierror
    end subroutine SCR_CURRENT

    subroutine SCR_DROP(name, ierror)
      character(len=*), intent(in) :: name
      integer, intent(out) :: ierror
    end subroutine SCR_DROP

    subroutine SCR_DELETE(name, ierror)
      character(len=*), intent(in) :: name
      integer, intent(out) :: ierror
    end subroutine SCR_DELETE

    subroutine SCR_GET_VERSION(version, ierror)
      character(len=*), intent(out) :: version
      integer, intent(out) :: ierror
    end subroutine SCR_GET_VERSION

    subroutine SCR_SHOULD_EXIT(flag, ierror)
      integer, intent(out) :: flag
      integer, intent(out) :: ierror
    end subroutine SCR_SHOULD_EXIT

    ! scr-rs extensions for online recovery (see scrf.h)
    subroutine SCR_RUN_RESILIENT(comm, spares, shrink, body, ierror)
      integer, intent(in) :: comm
      integer, intent(in) :: spares
      integer, intent(in) :: shrink
      interface
        subroutine body(comm, attempt, ierror)
          integer, intent(in) :: comm
          integer, intent(in) :: attempt(*)
          integer, intent(out) :: ierror
        end subroutine body
      end interface
      integer, intent(out) :: ierror
    end subroutine SCR_RUN_RESILIENT

    subroutine SCR_PROCESS_LOST(flag, ierror)
      integer, intent(out) :: flag
      integer, intent(out) :: ierror
    end subroutine SCR_PROCESS_LOST

    subroutine SCR_RECOVERED(flag, ierror)
      integer, intent(out) :: flag
      integer, intent(out) :: ierror
    end subroutine SCR_RECOVERED
  end interface
end module scr
