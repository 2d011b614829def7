//! Attaching to running processes (`--attach`): their threads as /proc lists them now, each in
//! the pids of its own PID namespace (what its app records carry) and, where this /proc can see
//! them, the kernel's; and room for one perf event per thread, CPU and tracepoint where perf has
//! to follow each thread.

/// A thread alive at the attach: tid and process in the target's PID namespace, the kernel's
/// (0 while unknown: /proc inside a namespace does not show them), its name.
#[derive(Clone, Debug, PartialEq)]
pub struct Alive {
    pub tid: u32,
    pub pid: u32,
    pub global_tid: u32,
    pub global_pid: u32,
    /// Its tid as the collector's /proc and perf_event_open name it.
    pub local: u32,
    pub comm: [u8; 16],
}

/// The innermost value of a `NSpid:`/`NStgid:` line of /proc/PID/task/TID/status (its own
/// namespace's number; one value when /proc and the task share the namespace).
fn innermost(status: &str, key: &str) -> Option<u32> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].split_whitespace().last()?.parse().ok()
}

/// The inode of the PID namespace `pid` lives in (0: the initial one, as sys::pid_namespace).
pub fn pid_namespace_of(pid: i32) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;
    let ino = std::fs::metadata(format!("/proc/{pid}/ns/pid")).ok()?.ino();
    Some(if ino == PROC_PID_INIT_INO { 0 } else { ino })
}

/// The pid of process `pid` in its own PID namespace (`NStgid:`), as its app records carry it.
pub fn ns_tgid(pid: i32) -> Option<u32> {
    innermost(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?, "NStgid:")
}

/// Every thread of `pids` that /proc lists now (a process that is gone lists none). `global`:
/// this /proc numbers tasks as the kernel does (the collector runs in the initial namespace).
pub fn threads_of(pids: &[i32], global: bool) -> Vec<Alive> {
    let mut out = vec![];
    let own = pid_namespace_of(std::process::id() as i32);
    for &pid in pids {
        // in the collector's own namespace /proc's numbers are the process's: no status to read
        let other = pid_namespace_of(pid) != own;
        let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else { continue };
        for e in dir.flatten() {
            let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            let mut comm = [0u8; 16];
            if let Ok(name) = std::fs::read(format!("/proc/{pid}/task/{tid}/comm")) {
                let name = name.strip_suffix(b"\n").unwrap_or(&name);
                let n = name.len().min(15);
                comm[..n].copy_from_slice(&name[..n]);
            }
            let status = if other { std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).unwrap_or_default() } else { String::new() };
            let (vtid, vpid) = (innermost(&status, "NSpid:").unwrap_or(tid), innermost(&status, "NStgid:").unwrap_or(pid as u32));
            let (gtid, gpid) = if global { (tid, pid as u32) } else { (0, 0) };
            out.push(Alive { tid: vtid, pid: vpid, global_tid: gtid, global_pid: gpid, local: tid, comm });
        }
    }
    out.sort_by_key(|a| a.tid);
    out
}

/// Raises the soft limit on open files to the hard one: per-thread perf events of a program with
/// a thousand threads need tens of thousands of descriptors.
pub fn raise_fd_limit() {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: plain calls on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_collectors_own_threads_are_listed_with_their_names() {
        let me = std::process::id() as i32;
        let (tx, rx) = std::sync::mpsc::channel();
        // the new thread names itself when it starts: listed only once it said it runs
        let t = std::thread::Builder::new()
            .name("attach-probe".into())
            .spawn(move || {
                tx.send(()).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(300))
            })
            .unwrap();
        rx.recv().unwrap();
        let alive = super::threads_of(&[me, 999_999_999], true);
        assert!(alive.iter().any(|a| a.tid == me as u32 && a.pid == me as u32));
        // in the collector's own namespace the two numberings agree
        assert!(alive.iter().all(|a| a.tid == a.global_tid && a.pid == a.global_pid));
        assert!(alive.iter().any(|a| a.comm.starts_with(b"attach-probe")));
        t.join().unwrap();
    }
}

#[cfg(test)]
mod ns_tests {
    #[test]
    fn the_innermost_namespace_number_is_the_last_one() {
        let status = "Name:\tx\nNStgid:\t4012\t7\nNSpid:\t4013\t9\n";
        assert_eq!(super::innermost(status, "NSpid:"), Some(9));
        assert_eq!(super::innermost(status, "NStgid:"), Some(7));
        assert_eq!(super::innermost("NSpid:\t12\n", "NSpid:"), Some(12));
        assert_eq!(super::innermost("Name:\tx\n", "NSpid:"), None);
    }
}
