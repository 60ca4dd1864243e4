! pmpi_fortran.f90: an unmodified Fortran MPI program (mpif.h), run natively and
! with libmdring-pmpi.so preloaded (run.cmake). Exact expected values; Fortran's
! MPI_IN_PLACE, LOGICAL with MPI_LAND, and MPI_Iallreduce with MPI_Wait.
program pmpi_fortran
  implicit none
  include 'mpif.h'
  integer, parameter :: n = 5000, k = 4
  integer :: ierr, rank, nprocs, i, r, root, bad, req, provided
  integer :: ix(n), iy(n)
  double precision :: dx(n), dy(n), expect
  logical :: lx(n)
  integer, allocatable :: g(:), rsin(:)
  integer :: rsout(k)
  integer :: status(MPI_STATUS_SIZE)

  ! Plain MPI_INIT: the interposer raises the level for MPI_Iallreduce's agent.
  call MPI_Init(ierr)
  call MPI_Query_thread(provided, ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
  bad = 0

  ! integer sum, out of place
  do i = 1, n
    ix(i) = rank * 1000 + i
  end do
  call MPI_Allreduce(ix, iy, n, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  do i = 1, n
    if (iy(i) /= 1000 * nprocs * (nprocs - 1) / 2 + nprocs * i) bad = bad + 1
  end do
  call digest('int_sum', iy, n)

  ! double precision max, in place
  do i = 1, n
    dx(i) = dble(mod(rank * 7 + i, 13)) * 0.5d0
  end do
  call MPI_Allreduce(MPI_IN_PLACE, dx, n, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD, ierr)
  do i = 1, n
    expect = 0
    do r = 0, nprocs - 1
      expect = max(expect, dble(mod(r * 7 + i, 13)) * 0.5d0)
    end do
    if (dx(i) /= expect) bad = bad + 1
  end do
  call digest('double_max', transfer(dx, ix), n)

  ! logical and, in place
  do i = 1, n
    lx(i) = mod(rank + i, 3) /= 0
  end do
  call MPI_Allreduce(MPI_IN_PLACE, lx, n, MPI_LOGICAL, MPI_LAND, MPI_COMM_WORLD, ierr)
  do i = 1, n
    if (lx(i) .neqv. all([(mod(r + i, 3) /= 0, r = 0, nprocs - 1)])) bad = bad + 1
  end do

  ! reduce at every root, in place on root 0 (MPICH 4.0.2, Debian 12's, crashes
  ! natively on MPI_IN_PLACE at another root)
  do root = 0, nprocs - 1
    do i = 1, n
      ix(i) = rank + i
      iy(i) = ix(i)
    end do
    if (rank == root .and. root /= 0) then
      call MPI_Reduce(ix, iy, n, MPI_INTEGER, MPI_SUM, root, MPI_COMM_WORLD, ierr)
      do i = 1, n
        if (iy(i) /= nprocs * (nprocs - 1) / 2 + nprocs * i) bad = bad + 1
      end do
    else if (rank == root) then
      call MPI_Reduce(MPI_IN_PLACE, iy, n, MPI_INTEGER, MPI_SUM, root, MPI_COMM_WORLD, ierr)
      do i = 1, n
        if (iy(i) /= nprocs * (nprocs - 1) / 2 + nprocs * i) bad = bad + 1
      end do
    else
      call MPI_Reduce(ix, iy, n, MPI_INTEGER, MPI_SUM, root, MPI_COMM_WORLD, ierr)
    end if
  end do

  ! bcast from the last rank
  do i = 1, n
    ix(i) = -1
    if (rank == nprocs - 1) ix(i) = i * 3
  end do
  call MPI_Bcast(ix, n, MPI_INTEGER, nprocs - 1, MPI_COMM_WORLD, ierr)
  do i = 1, n
    if (ix(i) /= i * 3) bad = bad + 1
  end do

  ! allgather, in place
  allocate(g(k * nprocs))
  g = -1
  do i = 1, k
    g(rank * k + i) = rank * 100 + i
  end do
  call MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, g, k, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  do r = 0, nprocs - 1
    do i = 1, k
      if (g(r * k + i) /= r * 100 + i) bad = bad + 1
    end do
  end do
  call digest('allgather', g, k * nprocs)

  ! reduce_scatter_block
  allocate(rsin(k * nprocs))
  do i = 1, k * nprocs
    rsin(i) = rank + i
  end do
  call MPI_Reduce_scatter_block(rsin, rsout, k, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  do i = 1, k
    if (rsout(i) /= nprocs * (nprocs - 1) / 2 + nprocs * (rank * k + i)) bad = bad + 1
  end do

  ! iallreduce and wait
  do i = 1, n
    ix(i) = rank + 2 * i
  end do
  call MPI_Iallreduce(MPI_IN_PLACE, ix, n, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, req, ierr)
  call MPI_Wait(req, status, ierr)
  do i = 1, n
    if (ix(i) /= nprocs * (nprocs - 1) / 2 + nprocs * 2 * i) bad = bad + 1
  end do
  call digest('iallreduce', ix, n)

  call MPI_Allreduce(MPI_IN_PLACE, bad, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0) then
    if (bad == 0) then
      print '(a, i0)', 'PASSED; thread level ', provided
    else
      print '(a, i0)', 'FAILED: wrong elements ', bad
    end if
  end if
  call MPI_Finalize(ierr)
  if (bad /= 0) stop 1

contains

  subroutine digest(name, a, m)
    character(*), intent(in) :: name
    integer, intent(in) :: m, a(m)
    integer(8) :: h
    integer :: j
    h = 0
    do j = 1, m
      h = ieor(ishftc(h, 5), int(a(j), 8))
    end do
    if (rank == 0) print '(a, 1x, a, 1x, i0)', 'digest', name, h
  end subroutine digest
end program pmpi_fortran
