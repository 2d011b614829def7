! oslens: the recorder's C API for Fortran programs (iso_c_binding).
! Build with:  gfortran $(oslens flags --cflags) prog.f90 $(oslens flags --fortran --libs)
! Strings are passed NUL-terminated: use osl_str("name") or trim(name)//c_null_char.
module oslens
  use iso_c_binding
  implicit none

  interface
    function osl_manager(name) bind(c, name="osl_manager")
      import :: c_ptr, c_char
      character(kind=c_char), dimension(*), intent(in) :: name
      type(c_ptr) :: osl_manager
    end function
    subroutine osl_suspend(m) bind(c, name="osl_suspend")
      import :: c_ptr
      type(c_ptr), value :: m
    end subroutine
    subroutine osl_resume(m) bind(c, name="osl_resume")
      import :: c_ptr
      type(c_ptr), value :: m
    end subroutine
    subroutine osl_reset(m) bind(c, name="osl_reset")
      import :: c_ptr
      type(c_ptr), value :: m
    end subroutine
    function osl_counter(name, m) bind(c, name="osl_counter")
      import :: c_ptr, c_char
      character(kind=c_char), dimension(*), intent(in) :: name
      type(c_ptr), value :: m
      type(c_ptr) :: osl_counter
    end function
    subroutine osl_count(c, delta) bind(c, name="osl_count")
      import :: c_ptr, c_int64_t
      type(c_ptr), value :: c
      integer(c_int64_t), value :: delta
    end subroutine
    subroutine osl_counter_record(c) bind(c, name="osl_counter_record")
      import :: c_ptr
      type(c_ptr), value :: c
    end subroutine
    function osl_counter_value(c) bind(c, name="osl_counter_value")
      import :: c_ptr, c_int64_t
      type(c_ptr), value :: c
      integer(c_int64_t) :: osl_counter_value
    end function
    function osl_timer(name, m) bind(c, name="osl_timer")
      import :: c_ptr, c_char
      character(kind=c_char), dimension(*), intent(in) :: name
      type(c_ptr), value :: m
      type(c_ptr) :: osl_timer
    end function
    subroutine osl_timer_start(t) bind(c, name="osl_timer_start")
      import :: c_ptr
      type(c_ptr), value :: t
    end subroutine
    subroutine osl_timer_stop(t) bind(c, name="osl_timer_stop")
      import :: c_ptr
      type(c_ptr), value :: t
    end subroutine
    subroutine osl_event(id, payload, length) bind(c, name="osl_event")
      import :: c_ptr, c_int32_t, c_size_t
      integer(c_int32_t), value :: id
      type(c_ptr), value :: payload
      integer(c_size_t), value :: length
    end subroutine
    subroutine osl_region_begin(name) bind(c, name="osl_region_begin")
      import :: c_char
      character(kind=c_char), dimension(*), intent(in) :: name
    end subroutine
    subroutine osl_region_end(name) bind(c, name="osl_region_end")
      import :: c_char
      character(kind=c_char), dimension(*), intent(in) :: name
    end subroutine
    subroutine osl_enable() bind(c, name="osl_enable")
    end subroutine
    subroutine osl_disable() bind(c, name="osl_disable")
    end subroutine
    subroutine osl_flush() bind(c, name="osl_flush")
    end subroutine
    subroutine osl_thread_name(name) bind(c, name="osl_thread_name")
      import :: c_char
      character(kind=c_char), dimension(*), intent(in) :: name
    end subroutine
    function osl_adapt(phase) bind(c, name="osl_adapt")
      import :: c_char, c_int
      character(kind=c_char), dimension(*), intent(in) :: phase
      integer(c_int) :: osl_adapt
    end function
  end interface

contains

  ! A Fortran string as a NUL-terminated C string.
  function osl_str(s) result(cs)
    character(len=*), intent(in) :: s
    character(kind=c_char, len=len_trim(s) + 1) :: cs
    cs = trim(s) // c_null_char
  end function

end module oslens
