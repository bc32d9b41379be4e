! A Fortran 90 application using scr-rs through SCR's Fortran interface (scrf.h): the
! same computation as examples/c/checkpoint.c. A per-rank state evolves step by step;
! it is checkpointed (several files per rank) whenever SCR_NEED_CHECKPOINT says so, an
! output dataset is written every few steps, and a restarted run resumes from the
! newest checkpoint SCR offers, falling back to an older one if a file does not read.
!
! Build:   mpif90 -o checkpoint checkpoint.f90 $(pkg-config --cflags --libs scr)
!     or   mpif90 -o checkpoint checkpoint.f90 -I$PREFIX/include \
!              -L$PREFIX/lib -Wl,-rpath,$PREFIX/lib -lscr
! Run:     mpiexec -n 4 ./checkpoint --steps 30
! Options: --steps N        steps to run (default 20)
!          --files F        checkpoint files per rank (default 2)
!          --output-every K an output dataset every K steps (default 10, 0: none)
!          --kill-at S      rank --kill-rank kills itself with SIGKILL after step S
!          --kill-rank R    (default 1)
! It prints "restarted from NAME at step S" or "starting fresh", then on rank 0
! "final step N state crc32 xxxxxxxx": the CRC32 of every rank's final state (the same
! bytes and the same checksum as the C example), which an uninterrupted run reaches too.
program checkpoint
  use, intrinsic :: iso_c_binding, only: c_int
  use, intrinsic :: iso_fortran_env, only: int8, int64, real64, output_unit, error_unit
  use mpi
  implicit none
  include 'scrf.h'

  interface
    ! C's raise(3): how a rank kills itself to simulate a crash
    function c_raise(sig) bind(C, name='raise') result(rc)
      import :: c_int
      integer(c_int), value :: sig
      integer(c_int) :: rc
    end function c_raise
  end interface

  integer, parameter :: NCELLS = 256
  integer(c_int), parameter :: SIGKILL = 9
  integer(int64), parameter :: MASK32 = 4294967295_int64

  real(real64) :: cells(NCELLS)
  integer(int64) :: steps, kill_at, step, s, mine, crc
  integer(int64), allocatable :: crcs(:)
  integer :: files, output_every, kill_rank
  integer :: ierr, rank, nranks, have, valid, need, exit_now, i
  character(len=SCR_MAX_FILENAME) :: name, ckpt, scheme, version, dummy

  steps = 20
  kill_at = -1
  files = 2
  output_every = 10
  kill_rank = 1
  call parse_options()

  call MPI_INIT(ierr)
  call MPI_COMM_RANK(MPI_COMM_WORLD, rank, ierr)
  call MPI_COMM_SIZE(MPI_COMM_WORLD, nranks, ierr)

  ! configuration before SCR_INIT: keep 2 checkpoints in cache; ask what is in force
  call SCR_CONFIG('SCR_CACHE_SIZE=2', dummy, ierr)
  call SCR_CONFIG('SCR_COPY_TYPE', scheme, ierr)
  if (ierr /= SCR_SUCCESS .or. len_trim(scheme) == 0) scheme = '(none)'
  call SCR_INIT(ierr)
  if (ierr /= SCR_SUCCESS) then
    write (error_unit, '(a,i0,a)') 'rank ', rank, ': SCR_INIT failed'
    call MPI_ABORT(MPI_COMM_WORLD, 1, ierr)
  end if
  call SCR_GET_VERSION(version, ierr)
  if (rank == 0) then
    write (output_unit, '(a,i0)') 'ranks ', nranks
    write (output_unit, '(a,a,a)') trim(version), ', scheme ', trim(scheme)
  end if

  call initial_state()
  step = 0

  ! restart: the newest checkpoint first, older ones if it does not read
  do
    call SCR_HAVE_RESTART(have, name, ierr)
    if (ierr /= SCR_SUCCESS .or. have == 0) exit
    call SCR_START_RESTART(name, ierr)
    s = 0
    valid = read_checkpoint(s)
    call SCR_COMPLETE_RESTART(valid, ierr)
    if (ierr == SCR_SUCCESS) then
      step = s
      if (rank == 0) write (output_unit, '(a,a,a,i0)') 'restarted from ', trim(name), &
        ' at step ', step
      exit
    end if
    if (rank == 0) write (output_unit, '(a,a)') trim(name), &
      ' did not read back; trying an older checkpoint'
    call initial_state()
  end do
  if (step == 0 .and. rank == 0) write (output_unit, '(a)') 'starting fresh'

  do while (step < steps)
    step = step + 1
    call compute()

    call SCR_NEED_CHECKPOINT(need, ierr)
    if (ierr == SCR_SUCCESS .and. need /= 0) then
      write (ckpt, '(a,i0)') 'ckpt.', step
      call SCR_START_OUTPUT(ckpt, SCR_FLAG_CHECKPOINT, ierr)
      valid = write_checkpoint()
      call SCR_COMPLETE_OUTPUT(valid, ierr)
      if (ierr == SCR_SUCCESS .and. rank == 0) write (output_unit, '(a,a)') 'checkpoint ', &
        trim(ckpt)
    end if
    if (output_every > 0) then
      if (mod(step, int(output_every, int64)) == 0) call write_output()
    end if
    if (step == kill_at .and. rank == kill_rank) then
      write (output_unit, '(a,i0,a,i0)') 'rank ', rank, ' killed after step ', step
      flush (output_unit)
      i = c_raise(SIGKILL)
    end if
    call SCR_SHOULD_EXIT(exit_now, ierr)
    if (ierr == SCR_SUCCESS .and. exit_now /= 0) then
      if (rank == 0) write (output_unit, '(a,i0)') 'halted at step ', step
      exit
    end if
  end do

  ! every rank's final state, in rank order, as one CRC32
  mine = crc32(0_int64, transfer(cells, 0_int8, 8 * NCELLS))
  allocate (crcs(nranks))
  call MPI_GATHER(mine, 1, MPI_INTEGER8, crcs, 1, MPI_INTEGER8, 0, MPI_COMM_WORLD, ierr)
  if (rank == 0) then
    crc = crc32(0_int64, le32(crcs))
    write (output_unit, '(a,i0,a,a)') 'final step ', step, ' state crc32 ', hex8(crc)
  end if

  call SCR_FINALIZE(ierr)
  if (ierr /= SCR_SUCCESS) write (error_unit, '(a,i0,a)') 'rank ', rank, &
    ': SCR_FINALIZE failed'
  call MPI_FINALIZE(ierr)

contains

  subroutine parse_options()
    character(len=256) :: opt, val
    integer :: n, k, ios
    n = command_argument_count()
    k = 1
    do while (k + 1 <= n)
      call get_command_argument(k, opt)
      call get_command_argument(k + 1, val)
      select case (trim(opt))
      case ('--steps')
        read (val, *, iostat=ios) steps
      case ('--files')
        read (val, *, iostat=ios) files
      case ('--output-every')
        read (val, *, iostat=ios) output_every
      case ('--kill-at')
        read (val, *, iostat=ios) kill_at
      case ('--kill-rank')
        read (val, *, iostat=ios) kill_rank
      case default
        write (error_unit, '(a,a)') 'unknown option ', trim(opt)
        stop 2
      end select
      if (ios /= 0) then
        write (error_unit, '(a,a,a,a)') 'bad value ', trim(val), ' for ', trim(opt)
        stop 2
      end if
      k = k + 2
    end do
    if (files < 1) files = 1
  end subroutine parse_options

  subroutine initial_state()
    integer :: j
    do j = 1, NCELLS
      cells(j) = real(rank * NCELLS + j - 1, real64)
    end do
  end subroutine initial_state

  ! One step of a deterministic computation: every rank's cells depend on its rank
  ! (the C example's arithmetic, in the same order).
  subroutine compute()
    integer :: j
    do j = 1, NCELLS
      cells(j) = ((0.5_real64 * cells(j)) + (0.25_real64 * cells(mod(j, NCELLS) + 1))) &
        + ((0.001_real64 * real(rank + 1, real64)) * real(step, real64))
    end do
  end subroutine compute

  ! The cells stored in checkpoint file f (0-based) of `files`: first and last index.
  subroutine part(f, first, last)
    integer, intent(in) :: f
    integer, intent(out) :: first, last
    integer :: per
    per = (NCELLS + files - 1) / files
    first = f * per + 1
    last = min(first + per - 1, NCELLS)
  end subroutine part

  function file_name(f) result(fname)
    integer, intent(in) :: f
    character(len=64) :: fname
    write (fname, '(a,i0,a,i0)') 'ckpt/rank_', rank, '.part', f
  end function file_name

  ! Write this rank's checkpoint: 1 when every file was written.
  integer function write_checkpoint() result(ok)
    character(len=SCR_MAX_FILENAME) :: path
    integer :: f, first, last, u, ios, rc
    ok = 1
    do f = 0, files - 1
      call SCR_ROUTE_FILE(trim(file_name(f)), path, rc)
      if (rc /= SCR_SUCCESS) then
        ok = 0
        cycle
      end if
      open (newunit=u, file=trim(path), access='stream', form='unformatted', &
        status='replace', action='write', iostat=ios)
      if (ios /= 0) then
        ok = 0
        cycle
      end if
      call part(f, first, last)
      write (u, iostat=ios) step
      if (ios == 0 .and. last >= first) write (u, iostat=ios) cells(first:last)
      if (ios /= 0) ok = 0
      close (u, iostat=ios)
      if (ios /= 0) ok = 0
    end do
  end function write_checkpoint

  ! Read this rank's checkpoint (its step into s): 1 when every file read back whole.
  integer function read_checkpoint(s) result(ok)
    integer(int64), intent(out) :: s
    character(len=SCR_MAX_FILENAME) :: path
    integer(int64) :: fs
    integer :: f, first, last, u, ios, rc
    ok = 1
    s = 0
    do f = 0, files - 1
      call SCR_ROUTE_FILE(trim(file_name(f)), path, rc)
      if (rc /= SCR_SUCCESS) then
        ok = 0
        cycle
      end if
      open (newunit=u, file=trim(path), access='stream', form='unformatted', &
        status='old', action='read', iostat=ios)
      if (ios /= 0) then
        ok = 0
        cycle
      end if
      call part(f, first, last)
      read (u, iostat=ios) fs
      if (ios == 0 .and. last >= first) read (u, iostat=ios) cells(first:last)
      if (ios /= 0) ok = 0
      if (f == 0) then
        s = fs
      else if (fs /= s) then
        ok = 0
      end if
      close (u)
    end do
  end function read_checkpoint

  ! An output dataset: one text file per rank.
  subroutine write_output()
    character(len=SCR_MAX_FILENAME) :: path
    character(len=64) :: out, fname
    integer :: u, ios, rc, ok
    write (out, '(a,i0)') 'output.', step
    call SCR_START_OUTPUT(out, SCR_FLAG_OUTPUT, rc)
    write (fname, '(a,i0,a,i0,a)') 'results/step', step, '/rank_', rank, '.txt'
    ok = 0
    call SCR_ROUTE_FILE(fname, path, rc)
    if (rc == SCR_SUCCESS) then
      open (newunit=u, file=trim(path), status='replace', action='write', iostat=ios)
      if (ios == 0) then
        write (u, '(a,i0,a,i0,a,f0.6,a,f0.6)', iostat=ios) 'rank ', rank, ' step ', step, &
          ' first ', cells(1), ' last ', cells(NCELLS)
        if (ios == 0) ok = 1
        close (u, iostat=ios)
        if (ios /= 0) ok = 0
      end if
    end if
    call SCR_COMPLETE_OUTPUT(ok, rc)
  end subroutine write_output

  ! CRC32 (IEEE, as zlib) of `bytes`, continuing from `crc_in`, in 64-bit integers.
  function crc32(crc_in, bytes) result(crc)
    integer(int64), intent(in) :: crc_in
    integer(int8), intent(in) :: bytes(:)
    integer(int64) :: crc
    integer(int64), parameter :: POLY = 3988292384_int64 ! 0xEDB88320
    integer :: j, k
    crc = ieor(crc_in, MASK32)
    do j = 1, size(bytes)
      crc = ieor(crc, iand(int(bytes(j), int64), 255_int64))
      do k = 1, 8
        if (iand(crc, 1_int64) /= 0) then
          crc = ieor(ishft(crc, -1), POLY)
        else
          crc = ishft(crc, -1)
        end if
      end do
    end do
    crc = ieor(crc, MASK32)
  end function crc32

  ! 32-bit values as little-endian bytes (C's uint32_t array on x86 and ARM).
  function le32(values) result(bytes)
    integer(int64), intent(in) :: values(:)
    integer(int8) :: bytes(4 * size(values))
    integer :: j, k
    integer(int64) :: b
    do j = 1, size(values)
      do k = 0, 3
        b = iand(ishft(values(j), -8 * k), 255_int64)
        if (b > 127) b = b - 256
        bytes(4 * (j - 1) + k + 1) = int(b, int8)
      end do
    end do
  end function le32

  ! Eight lower-case hexadecimal digits, as C's %08x.
  function hex8(v) result(h)
    integer(int64), intent(in) :: v
    character(len=8) :: h
    character(len=16), parameter :: DIGITS = '0123456789abcdef'
    integer :: k, d
    do k = 0, 7
      d = int(iand(ishft(v, -4 * (7 - k)), 15_int64))
      h(k + 1:k + 1) = DIGITS(d + 1:d + 1)
    end do
  end function hex8

end program checkpoint
