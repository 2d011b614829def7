! Fortran use of the oslens module: a region and a counter with a known count.
program recorder_fortran
  use oslens
  implicit none
  type(c_ptr) :: counter
  integer :: i
  counter = osl_counter(osl_str("fortran-count"), c_null_ptr)
  call osl_region_begin(osl_str("fortran-loop"))
  do i = 1, 42
    call osl_count(counter, 1_c_int64_t)
  end do
  call osl_region_end(osl_str("fortran-loop"))
  print *, "count=", osl_counter_value(counter)
end program
