//! Attaching to running processes (`--attach`): their threads as /proc lists them now, and room
//! for one perf event per thread, CPU and tracepoint where perf has to follow each thread.

/// A thread alive at the attach: tid, its process, its name.
#[derive(Clone, Debug, PartialEq)]
pub struct Alive {
    pub tid: u32,
    pub pid: u32,
    pub comm: [u8; 16],
}

/// Every thread of `pids` that /proc lists now (a process that is gone lists none).
pub fn threads_of(pids: &[i32]) -> Vec<Alive> {
    let mut out = vec![];
    for &pid in pids {
        let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else { continue };
        for e in dir.flatten() {
            let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            let mut comm = [0u8; 16];
            if let Ok(name) = std::fs::read(format!("/proc/{pid}/task/{tid}/comm")) {
                let name = name.strip_suffix(b"\n").unwrap_or(&name);
                let n = name.len().min(15);
                comm[..n].copy_from_slice(&name[..n]);
            }
            out.push(Alive { tid, pid: pid as u32, comm });
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
        let alive = super::threads_of(&[me, 999_999_999]);
        assert!(alive.iter().any(|a| a.tid == me as u32 && a.pid == me as u32));
        assert!(alive.iter().any(|a| a.comm.starts_with(b"attach-probe")));
        t.join().unwrap();
    }
}
