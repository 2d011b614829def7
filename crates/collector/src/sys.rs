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
