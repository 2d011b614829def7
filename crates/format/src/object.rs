//! Which loaded object (executable or shared library) an address belongs to.

/// The load address of the shared object holding `p` (0 if none): the preload wrappers tell the
/// recorder's own calls from the program's by it, the extension finds which recorder it talks to.
pub fn object_base(p: *const std::ffi::c_void) -> usize {
    // SAFETY: dladdr fills the struct for any address.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(p, &mut info) != 0 {
            info.dli_fbase as usize
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_base_finds_this_object_and_not_a_stack_address() {
        assert_ne!(object_base(object_base as *const std::ffi::c_void), 0);
        let local = 0u8;
        assert_eq!(object_base(&local as *const u8 as *const std::ffi::c_void), 0);
    }
}
