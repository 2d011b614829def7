//! The process wrappers: fork / posix_spawn (PROCESS_FORK), exec* (PROCESS_EXEC, id = program
//! name) and exit (PROCESS_EXIT); _exit is not wrapped: after vfork it runs on the parent's
//! memory and thread state. Recording as decided in mod.rs.
//!
//! exec*, posix_spawn* given an explicit environment get OSLENS_* and LD_PRELOAD put back if
//! the program left them out, so children are traced into the same trace.
//! execl/execlp/execle are variadic (not definable in stable Rust): they are not wrapped;
//! glibc implements them with its internal execve, so their children are still traced through
//! the inherited environment, only without the PROCESS_EXEC marker.

use super::{counts, define_name, errno, real, rec, recording};
use oslens_format::kinds;
use std::ffi::{c_char, c_int, CStr, CString};
use std::sync::atomic::{AtomicUsize, Ordering::{Acquire, Relaxed, Release}};

type P = *mut std::ffi::c_void;


#[no_mangle]
pub unsafe extern "C" fn fork() -> libc::pid_t {
    let real = real!(c"fork" => fn() -> libc::pid_t);
    let pid = real();
    if pid == 0 {
        counts::after_fork_child();
        rec(kinds::PROCESS_FORK, 0, 0, libc::getppid() as u64);
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
    // rather than the allocation aborting the program
    let mut entries: Vec<*const c_char> = Vec::new();
    if entries.try_reserve_exact(n + kept + 1).is_err() {
        return envp;
    }
    for i in 0..n {
        entries.push(*envp.add(i));
    }
    let mut changed = false;
    for want in keep() {
        let want_b = want.to_bytes();
        let eq = want_b.iter().position(|&c| c == b'=').unwrap_or(0);
        let key = &want_b[..=eq];
        let found = entries.iter().position(|&e| CStr::from_ptr(e).to_bytes().starts_with(key));
        match found {
            None => {
                entries.push(want.as_ptr());
                changed = true;
            }
            Some(idx) if key == b"LD_PRELOAD=" => {
                let theirs = &CStr::from_ptr(entries[idx]).to_bytes()[key.len()..];
                let ours = &want_b[key.len()..];
                let missing = ours.split(|&c| c == b' ' || c == b':').any(|lib| !lib.is_empty() && !theirs.split(|&c| c == b' ' || c == b':').any(|t| t == lib));
                if missing {
                    let mut merged = Vec::new();
                    if merged.try_reserve_exact(want_b.len() + theirs.len() + 2).is_err() {
                        continue;
                    }
                    merged.extend_from_slice(want_b);
                    if !theirs.is_empty() {
                        merged.push(b' ');
                        merged.extend_from_slice(theirs);
                    }
                    if let Ok(s) = CString::new(merged) {
                        entries[idx] = s.into_raw();
                        changed = true;
                    }
                }
            }
            Some(_) => {}
        }
    }
    if !changed {
        return envp;
    }
    entries.push(std::ptr::null());
    let leaked = entries.leak();
    leaked.as_ptr()
}

fn record_exec(path: *const c_char) -> u32 {
    counts::flush_all();
    let id = define_name(kinds::NAME_COMMAND, path);
    rec(kinds::PROCESS_EXEC, id, 0, 0);
    id
}

fn record_exec_failed(id: u32) {
    let err = errno();
    rec(kinds::PROCESS_EXEC, id, err as u64, 0);
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

#[no_mangle]
pub unsafe extern "C" fn fexecve(fd: c_int, argv: Argv, envp: Argv) -> c_int {
    let real = real!(c"fexecve" => fn(c_int, Argv, Argv) -> c_int);
    let name = CString::new(format!("fd:{fd}")).unwrap_or_default();
    let id = record_exec(name.as_ptr());
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
    rec(kinds::PROCESS_EXIT, 0, status as u64, 0);
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
            // a return from main exits through glibc's own exit call, not the wrapper
            // SAFETY: registering a plain function.
            unsafe { libc::atexit(flush_counts_at_exit) };
        }
    }
    constructor
};
