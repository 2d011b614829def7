//! What the collector asks of the system: the online CPUs, the clock records carry, errno text.

pub fn online_cpus() -> Vec<u32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let mut out = vec![];
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let mut it = part.split('-');
        let a: u32 = it.next().and_then(|x| x.parse().ok()).unwrap_or(0);
        let b: u32 = it.next().and_then(|x| x.parse().ok()).unwrap_or(a);
        out.extend(a..=b);
    }
    if out.is_empty() {
        // SAFETY: plain call.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as u32;
        out = (0..n).collect();
    }
    out
}

pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn errno_text(e: i32) -> String {
    std::io::Error::from_raw_os_error(e).to_string()
}

/// The inode of this process's PID namespace, 0 when it is the initial one (PROC_PID_INIT_INO):
/// the pids the traced program sees then differ from the kernel's.
pub fn pid_namespace() -> u64 {
    use std::os::unix::fs::MetadataExt;
    const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;
    match std::fs::metadata("/proc/self/ns/pid") {
        Ok(m) if m.ino() != PROC_PID_INIT_INO => m.ino(),
        _ => 0,
    }
}

/// CLOCK_MONOTONIC's offset in this process's time namespace (`/proc/self/timens_offsets`), 0
/// outside one: the kernel stamps records with its own clock, the program reads the offset one.
pub fn monotonic_offset() -> i64 {
    let text = std::fs::read_to_string("/proc/self/timens_offsets").unwrap_or_default();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() == 3 && (f[0] == "monotonic" || f[0] == "1") {
            let (secs, nsecs): (i64, i64) = (f[1].parse().unwrap_or(0), f[2].parse().unwrap_or(0));
            return secs * 1_000_000_000 + nsecs;
        }
    }
    0
}
