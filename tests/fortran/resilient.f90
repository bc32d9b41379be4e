! Online recovery through SCR_RUN_RESILIENT, the Fortran form of tests/c/resilient.c:
! each rank owns a vector that every step mixes with the sum over all ranks
! (MPI_ALLREDUCE on the application communicator), checkpointed every 5 steps.
! `resilient SPARES STEPS`: rank 0 prints `final <steps> <checksum>` and
! `recoveries <n>`; every rank prints the ATTEMPT array it was given.
module job
  use mpi
  use scr
  implicit none
  integer, parameter :: cells = 1024
  integer :: steps = 40
contains
  ! The body run on the application ranks: restart from the newest checkpoint (or start
  ! fresh), compute to `steps`, checkpointing every 5.
  subroutine body(comm, attempt, ierror)
    integer, intent(in) :: comm
    integer, intent(in) :: attempt(*)
    integer, intent(out) :: ierror
    double precision :: v(cells), mine, total, all(cells * 64)
    integer :: rank, nranks, ierr, step, i, u, flag, valid, ios, lost
    character(len=SCR_MAX_FILENAME) :: name, path
    character(len=64) :: file

    ierror = SCR_FAILURE
    call MPI_COMM_RANK(comm, rank, ierr)
    call MPI_COMM_SIZE(comm, nranks, ierr)
    print '(a,i0,a,5(1x,i0))', 'r', rank, ' attempt', attempt(1:SCR_ATTEMPT_LEN)
    step = 0
    do i = 1, cells
      v(i) = rank * cells + i - 1
    end do
    call SCR_HAVE_RESTART(flag, name, ierr)
    if (ierr == SCR_SUCCESS .and. flag == 1) then
      call SCR_START_RESTART(name, ierr)
      if (ierr /= SCR_SUCCESS) return
      write(file, '(2a,i0,a)') trim(name), '/rank_', rank, '.ckpt'
      call SCR_ROUTE_FILE(trim(file), path, ierr)
      valid = 0
      if (ierr == SCR_SUCCESS) then
        open(newunit=u, file=trim(path), access='stream', form='unformatted', &
          status='old', iostat=ios)
        if (ios == 0) then
          read(u, iostat=ios) step, v
          if (ios == 0) valid = 1
          close(u)
        end if
      end if
      call SCR_COMPLETE_RESTART(valid, ierr)
      if (ierr /= SCR_SUCCESS) return
      if (rank == 0) print '(3a,i0)', 'restarted from ', trim(name), ' at step ', step
    end if
    do while (step < steps)
      mine = sum(v)
      call MPI_ALLREDUCE(mine, total, 1, MPI_DOUBLE_PRECISION, MPI_SUM, comm, ierr)
      call SCR_PROCESS_LOST(lost, ierr)
      if (lost == 1) return
      do i = 1, cells
        v(i) = 0.5d0 * v(i) + 1d-6 * total + (i - 1)
      end do
      step = step + 1
      if (mod(step, 5) == 0) then
        write(name, '(a,i0)') 'ckpt.', step
        call SCR_START_OUTPUT(trim(name), SCR_FLAG_CHECKPOINT, ierr)
        if (ierr /= SCR_SUCCESS) return
        write(file, '(2a,i0,a)') trim(name), '/rank_', rank, '.ckpt'
        call SCR_ROUTE_FILE(trim(file), path, ierr)
        if (ierr /= SCR_SUCCESS) return
        open(newunit=u, file=trim(path), access='stream', form='unformatted', &
          status='replace', iostat=ios)
        if (ios == 0) write(u, iostat=ios) step, v
        if (ios == 0) close(u, iostat=ios)
        call SCR_COMPLETE_OUTPUT(merge(1, 0, ios == 0), ierr)
        if (ierr /= SCR_SUCCESS) return
      end if
    end do
    call MPI_GATHER(v, cells, MPI_DOUBLE_PRECISION, all, cells, MPI_DOUBLE_PRECISION, &
      0, comm, ierr)
    if (rank == 0) then
      print '(a,i0,1x,es24.17)', 'final ', step, sum(all(1:cells * nranks) * &
        [(dble(mod(i, 97) + 1), i = 1, cells * nranks)])
      print '(a,i0)', 'recoveries ', attempt(SCR_ATTEMPT_NUMBER)
    end if
    ierror = SCR_SUCCESS
  end subroutine body
end module job

program resilient
  use job
  implicit none
  integer :: ierr, ierror, rank, nranks, spares, flag
  character(len=16) :: arg

  call MPI_INIT(ierr)
  call MPI_COMM_RANK(MPI_COMM_WORLD, rank, ierr)
  call MPI_COMM_SIZE(MPI_COMM_WORLD, nranks, ierr)
  if (rank == 0) print '(a,i0)', 'ranks ', nranks
  call get_command_argument(1, arg)
  read(arg, *) spares
  call get_command_argument(2, arg)
  read(arg, *) steps
  call SCR_RUN_RESILIENT(MPI_COMM_WORLD, spares, 0, body, ierror)
  if (ierror /= SCR_SUCCESS) then
    print '(a,i0,a)', 'r', rank, ' SCR_RUN_RESILIENT failed'
    call MPI_ABORT(MPI_COMM_WORLD, 1, ierr)
  end if
  call SCR_RECOVERED(flag, ierror)
  if (flag == 1) then
    ! Open MPI 5.0's MPI_FINALIZE may wait for the lost process: end without it
    call exit(0)
  end if
  call MPI_FINALIZE(ierr)
end program resilient
