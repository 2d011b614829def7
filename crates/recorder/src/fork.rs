//! fork(): the recorder's locks are taken before it, so the child never inherits one held by a
//! thread that does not exist there, and the child forgets what is the parent's (its chunks,
//! helper, names chunk): it records into chunks of its own from its first event.

use crate::{helper, instruments, names, space, thread};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Once;

static HOOKS: Once = Once::new();

extern "C" fn before_fork() {
    instruments::lock_registry();
    names::lock_for_fork();
}

extern "C" fn after_fork_parent() {
    names::unlock_after_fork();
    instruments::unlock_registry();
}

extern "C" fn after_fork_child() {
    thread::forget_after_fork();
    crate::NAMES_EPOCH.fetch_add(1, Relaxed);
    space::forget_after_fork();
    space::presize_fd_table();
    helper::forget_after_fork();
    names::forget_after_fork();
    instruments::unlock_registry();
}

/// Registers the hooks, once per process (at library load, when recording).
pub fn install_hooks() {
    HOOKS.call_once(|| {
        // SAFETY: registering process-wide hooks with no preconditions.
        unsafe { libc::pthread_atfork(Some(before_fork), Some(after_fork_parent), Some(after_fork_child)) };
    });
}
