//! The process wrappers: fork / posix_spawn (PROCESS_FORK), exec* (PROCESS_EXEC, id = program
//! name) and exit (PROCESS_EXIT); _exit is not wrapped: after vfork it runs on the parent's
//! memory and thread state. Recording as decided in mod.rs; a main thread with no chunk puts
//! its child-side fork, exec and exit markers in the thread ledger (`rec_marker`).
//!
//! exec*, posix_spawn* given an explicit environment get OSLENS_* and LD_PRELOAD put back if
//! the program left them out, so children are traced into the same trace.
//! execl/execlp/execle are variadic (not definable in stable Rust): they are not wrapped;
//! glibc implements them with its internal execve, so their children are still traced through
//! the inherited environment, only without the PROCESS_EXEC marker.

use super::{counts, define_name, errno, real, rec, rec_marker, recording, system_alloc, system_free};
use std::alloc::Layout;
use oslens_format::kinds;
use std::ffi::{c_char, c_int, CStr};
use std::sync::atomic::{AtomicUsize, Ordering::{Acquire, Relaxed, Release}};

type P = *mut std::ffi::c_void;


#[no_mangle]
pub unsafe extern "C" fn fork() -> libc::pid_t {
    let real = real!(c"fork" => fn() -> libc::pid_t);
    let pid = real();
    if pid == 0 {
        counts::after_fork_child();
        rec_marker(kinds::PROCESS_FORK, 0, 0, libc::getppid() as u64);
    } else if pid > 0 {
        rec(kinds::PROCESS_FORK, 0, pid as u64, 0);
    }
    pid
}

/// vfork is run as fork: a vfork child shares the parent's memory and thread state, so the
/// recorder could not tell them apart (and the exec wrappers record before they exec).
#[no_mangle]
pub unsafe extern "C" fn vfork() -> libc::pid_t {
    fork()
}

type Argv = *const *const c_char;

/// OSLENS_* and LD_PRELOAD of the process's start ("NAME=value" entries of its environment),
/// put back into environments that lack them. Kept as pointers, so load allocates nothing: the
/// strings of the environment a process starts with are never freed (and glibc's setenv never
/// frees the ones it made).
const KEEP_MAX: usize = 32;
static KEEP: [AtomicUsize; KEEP_MAX] = [const { AtomicUsize::new(0) }; KEEP_MAX];
static KEPT: AtomicUsize = AtomicUsize::new(0);

/// Notes the entries to keep, once (at load, before the program can change its environment).
fn note_keep() {
    if KEPT.load(Relaxed) != 0 {
        return;
    }
    let mut n = 0;
    // SAFETY: environ is a NULL-terminated array of NUL-terminated strings.
    unsafe {
        let mut e = environ;
        while !e.is_null() && !(*e).is_null() && n < KEEP_MAX {
            let entry = CStr::from_ptr(*e).to_bytes();
            if entry.starts_with(b"OSLENS_") || entry.starts_with(b"LD_PRELOAD=") {
                KEEP[n].store(*e as usize, Relaxed);
                n += 1;
            }
            e = e.add(1);
        }
    }
    KEPT.store(n + 1, Release);
}

/// The entries noted at load.
fn keep() -> impl Iterator<Item = &'static CStr> {
    let n = KEPT.load(Acquire).saturating_sub(1);
    // SAFETY: pointers to environment strings noted by note_keep, never freed.
    KEEP[..n].iter().map(|p| unsafe { CStr::from_ptr(p.load(Relaxed) as *const c_char) })
}

/// `envp` with our variables added where missing (LD_PRELOAD: ours put in front of theirs).
/// The array is leaked: exec replaces the process, and a failed exec is rare.
unsafe fn fix_env(envp: Argv) -> Argv {
    let kept = KEPT.load(Acquire).saturating_sub(1);
    if envp.is_null() || kept == 0 || !recording() {
        return envp;
    }
    let mut n = 0;
    while !(*envp.add(n)).is_null() {
        n += 1;
    }
    // with memory exhausted the environment goes unchanged (the new image may run unrecorded)
    // rather than the allocation aborting the program (the program's memory: mod.rs, system_alloc)
    let Ok(layout) = Layout::array::<*const c_char>(n + kept + 1) else { return envp };
    let entries = system_alloc(layout) as *mut *const c_char;
    if entries.is_null() {
        return envp;
    }
    std::ptr::copy_nonoverlapping(envp, entries, n);
    let mut len = n;
    let mut changed = false;
    for want in keep() {
        let want_b = want.to_bytes();
        let eq = want_b.iter().position(|&c| c == b'=').unwrap_or(0);
        let key = &want_b[..=eq];
        let found = (0..len).find(|&i| CStr::from_ptr(*entries.add(i)).to_bytes().starts_with(key));
        match found {
            None => {
                *entries.add(len) = want.as_ptr();
                len += 1;
                changed = true;
            }
            Some(idx) if key == b"LD_PRELOAD=" => {
                if let Some(merged) = merge_preload(want_b, CStr::from_ptr(*entries.add(idx)).to_bytes()) {
                    *entries.add(idx) = merged;
                    changed = true;
                }
            }
            Some(_) => {}
        }
    }
    if !changed {
        system_free(entries as *mut u8, layout);
        return envp;
    }
    *entries.add(len) = std::ptr::null();
    entries // leaked: exec replaces the process
}

/// The libraries of an LD_PRELOAD value (separated by spaces or colons).
fn words(s: &[u8]) -> impl Iterator<Item = &[u8]> {
    s.split(|&c| c == b' ' || c == b':').filter(|w| !w.is_empty())
}

/// "LD_PRELOAD=ours theirs" when `theirs` (their whole entry) lacks one of ours, or None: nothing
/// missing, or no memory for it.
unsafe fn merge_preload(want: &[u8], their_entry: &[u8]) -> Option<*const c_char> {
    let key = b"LD_PRELOAD=".len();
    let (ours, theirs) = (&want[key..], &their_entry[key..]);
    if !words(ours).any(|lib| !words(theirs).any(|t| t == lib)) {
        return None;
    }
    let len = want.len() + 1 + theirs.len() + 1;
    let p = system_alloc(Layout::array::<u8>(len).ok()?);
    if p.is_null() {
        return None;
    }
    std::ptr::copy_nonoverlapping(want.as_ptr(), p, want.len());
    let mut at = want.len();
    if !theirs.is_empty() {
        *p.add(at) = b' ';
        std::ptr::copy_nonoverlapping(theirs.as_ptr(), p.add(at + 1), theirs.len());
        at += 1 + theirs.len();
    }
    *p.add(at) = 0;
    Some(p as *const c_char)
}

fn record_exec(path: *const c_char) -> u32 {
    counts::flush_all();
    let id = define_name(kinds::NAME_COMMAND, path);
    rec_marker(kinds::PROCESS_EXEC, id, 0, 0);
    id
}

fn record_exec_failed(id: u32) {
    let err = errno();
    rec_marker(kinds::PROCESS_EXEC, id, err as u64, 0);
    // SAFETY: restoring the caller's errno.
    unsafe { *libc::__errno_location() = err };
}

#[no_mangle]
pub unsafe extern "C" fn execve(path: *const c_char, argv: Argv, envp: Argv) -> c_int {
    let real = real!(c"execve" => fn(*const c_char, Argv, Argv) -> c_int);
    let id = record_exec(path);
    let r = real(path, argv, fix_env(envp));
    record_exec_failed(id);
    r
}

extern "C" {
    static environ: Argv;
}

/// execv and execvp go through execve / execvpe with the (fixed) environment: a program may
/// have emptied its environment first (`env -i`).
#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: Argv) -> c_int {
    let real = real!(c"execve" => fn(*const c_char, Argv, Argv) -> c_int);
    let id = record_exec(path);
    let r = real(path, argv, fix_env(environ));
    record_exec_failed(id);
    r
}

#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: Argv) -> c_int {
    let real = real!(c"execvpe" => fn(*const c_char, Argv, Argv) -> c_int);
    let id = record_exec(file);
    let r = real(file, argv, fix_env(environ));
    record_exec_failed(id);
    r
}

#[no_mangle]
pub unsafe extern "C" fn execvpe(file: *const c_char, argv: Argv, envp: Argv) -> c_int {
    let real = real!(c"execvpe" => fn(*const c_char, Argv, Argv) -> c_int);
    let id = record_exec(file);
    let r = real(file, argv, fix_env(envp));
    record_exec_failed(id);
    r
}

/// "fd:N" in `buf`, NUL-terminated (on the stack: nothing allocated before an exec).
fn fd_name(fd: c_int, buf: &mut [u8; 24]) -> *const c_char {
    buf[..3].copy_from_slice(b"fd:");
    let mut digits = [0u8; 12];
    let (mut v, mut n) = (fd.unsigned_abs(), 0);
    loop {
        digits[n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let mut at = 3;
    if fd < 0 {
        buf[at] = b'-';
        at += 1;
    }
    for i in (0..n).rev() {
        buf[at] = digits[i];
        at += 1;
    }
    buf[at] = 0;
    buf.as_ptr() as *const c_char
}

#[no_mangle]
pub unsafe extern "C" fn fexecve(fd: c_int, argv: Argv, envp: Argv) -> c_int {
    let real = real!(c"fexecve" => fn(c_int, Argv, Argv) -> c_int);
    let mut name = [0u8; 24];
    let id = record_exec(fd_name(fd, &mut name));
    let r = real(fd, argv, fix_env(envp));
    record_exec_failed(id);
    r
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawn(pid: *mut libc::pid_t, path: *const c_char, actions: P, attr: P, argv: Argv, envp: Argv) -> c_int {
    let real = real!(c"posix_spawn" => fn(*mut libc::pid_t, *const c_char, P, P, Argv, Argv) -> c_int);
    let r = real(pid, path, actions, attr, argv, fix_env(envp));
    if r == 0 && !pid.is_null() {
        rec(kinds::PROCESS_FORK, 0, *pid as u64, 1);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawnp(pid: *mut libc::pid_t, file: *const c_char, actions: P, attr: P, argv: Argv, envp: Argv) -> c_int {
    let real = real!(c"posix_spawnp" => fn(*mut libc::pid_t, *const c_char, P, P, Argv, Argv) -> c_int);
    let r = real(pid, file, actions, attr, argv, fix_env(envp));
    if r == 0 && !pid.is_null() {
        rec(kinds::PROCESS_FORK, 0, *pid as u64, 1);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn exit(status: c_int) -> ! {
    let real = real!(c"exit" => fn(c_int) -> !);
    counts::flush_all();
    rec_marker(kinds::PROCESS_EXIT, 0, status as u64, 0);
    real(status)
}

extern "C" fn flush_counts_at_exit() {
    counts::flush_all();
}

#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = {
    extern "C" fn constructor() {
        // Capture the environment to restore before the program can change it.
        note_keep();
        if recording() {
            counts::create_exit_key();
            // at exit, counts are flushed before a main thread's ledger markers are ended: a
            // count is a record of its own, which makes the thread's chunk that takes them
            crate::thread::set_exit_flush(counts::flush_all);
            // a return from main exits through glibc's own exit call, not the wrapper
            // SAFETY: registering a plain function.
            unsafe { libc::atexit(flush_counts_at_exit) };
        }
    }
    constructor
};

#[cfg(test)]
mod tests {
    use super::{fd_name, merge_preload};
    use std::ffi::CStr;

    fn merged(want: &[u8], theirs: &[u8]) -> Option<String> {
        // SAFETY: merge_preload returns null or a NUL-terminated string it allocated.
        unsafe { merge_preload(want, theirs).map(|p| CStr::from_ptr(p).to_string_lossy().into_owned()) }
    }

    #[test]
    fn ours_go_in_front_of_theirs_once() {
        assert_eq!(merged(b"LD_PRELOAD=/a/liboslens.so", b"LD_PRELOAD=/x/o.so").as_deref(), Some("LD_PRELOAD=/a/liboslens.so /x/o.so"));
        assert_eq!(merged(b"LD_PRELOAD=/a/liboslens.so", b"LD_PRELOAD=").as_deref(), Some("LD_PRELOAD=/a/liboslens.so"));
        assert_eq!(merged(b"LD_PRELOAD=/a/liboslens.so", b"LD_PRELOAD=/x/o.so:/a/liboslens.so"), None);
    }

    #[test]
    fn exec_by_descriptor_is_named_on_the_stack() {
        let mut buf = [0u8; 24];
        // SAFETY: fd_name NUL-terminates within buf.
        assert_eq!(unsafe { CStr::from_ptr(fd_name(7, &mut buf)) }, c"fd:7");
        assert_eq!(unsafe { CStr::from_ptr(fd_name(-12, &mut buf)) }, c"fd:-12");
        assert_eq!(unsafe { CStr::from_ptr(fd_name(i32::MAX, &mut buf)) }, c"fd:2147483647");
    }
}
