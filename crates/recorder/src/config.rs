//! Settings read once from the environment at library load. `oslens record` sets them.

use std::ffi::CString;

pub enum OnFull {
    /// Drop the event and count it (the default: recording never blocks the program).
    Drop,
    /// Pause the program to open a further chunk (recorded as a PAUSE event).
    Block,
}

pub struct Config {
    /// `<trace>/raw`, where chunks are created.
    pub raw_dir: String,
    pub trace_dir: CString,
    pub buffer_records: u64,
    pub on_full: OnFull,
    pub start_enabled: bool,
    /// Trigger: stop recording after this many record slots (events or bytes / 32).
    pub limit_slots: Option<u64>,
    /// Counters record their value at most this often (raw clock ticks; 0 = never periodically).
    pub counter_period_us: u64,
    /// Prepare every page of a thread's buffer when it is created, so no page is prepared
    /// while the program runs (memory and start-up time up front).
    pub prepare_buffers: bool,
    /// The buffer size was given (`--buffer-mb`): it is kept even where it does not fit the
    /// memory budget (memlimit.rs).
    pub buffer_explicit: bool,
    /// The trace is on a file system in memory (tmpfs, ramfs): every recorded page stays
    /// resident, charged to the program's cgroup.
    pub trace_in_memory: bool,
}

/// True when `dir` is on tmpfs or ramfs.
fn in_memory(dir: &str) -> bool {
    let Ok(c) = CString::new(dir) else { return false };
    // SAFETY: statfs fills the struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    unsafe { libc::statfs(c.as_ptr(), &mut st) == 0 && matches!(st.f_type as u64, 0x0102_1994 | 0x8584_58f6) }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

impl Config {
    /// `None` when OSLENS_TRACE is unset: every call stays a no-op.
    pub fn from_env() -> Option<Config> {
        let trace = std::env::var("OSLENS_TRACE").ok().filter(|t| !t.is_empty())?;
        // raw/ is made by `oslens record`, and by the first chunk when missing (ensure_raw_dir):
        // a process that records nothing makes no system call for it.
        let raw_dir = format!("{trace}/raw");
        let buffer_mb = env_u64("OSLENS_BUFFER_MB").unwrap_or(64).max(1);
        let buffer_records = env_u64("OSLENS_BUFFER_RECORDS").unwrap_or(buffer_mb * 1024 * 1024 / 32).max(4);
        let limit_events = env_u64("OSLENS_LIMIT_EVENTS");
        let limit_bytes = env_u64("OSLENS_LIMIT_BYTES").map(|b| b / 32);
        let limit_slots = match (limit_events, limit_bytes) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let trace_in_memory = in_memory(&raw_dir);
        Some(Config {
            trace_in_memory,
            raw_dir,
            trace_dir: CString::new(trace).ok()?,
            buffer_records,
            on_full: match std::env::var("OSLENS_ON_FULL").as_deref() {
                Ok("block") => OnFull::Block,
                _ => OnFull::Drop,
            },
            start_enabled: std::env::var("OSLENS_ENABLE").map_or(true, |v| v != "0"),
            limit_slots,
            counter_period_us: env_u64("OSLENS_COUNTER_PERIOD_US").unwrap_or(1000),
            prepare_buffers: std::env::var("OSLENS_PREPARE_BUFFERS").is_ok_and(|v| v == "1"),
            buffer_explicit: env_u64("OSLENS_BUFFER_MB").is_some() || env_u64("OSLENS_BUFFER_RECORDS").is_some(),
        })
    }
}

/// Creates raw/ when it is missing (a trace directory made by hand, say). Called before a
/// process's first chunk.
pub fn ensure_raw_dir(raw_dir: &str) {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        if std::fs::metadata(raw_dir).is_err() {
            let _ = std::fs::create_dir_all(raw_dir);
        }
    });
}
