//! Settings read once from the environment at library load. `oslens record` sets them. Reading
//! them allocates nothing (getenv, and the trace's path copied into fixed buffers): a program
//! loaded with almost no memory left must not need some for the recorder before its first
//! instruction (docs/recorder.md, "Faults").

use std::ffi::{c_char, CStr};

pub enum OnFull {
    /// Drop the event and count it (the default: recording never blocks the program).
    Drop,
    /// Pause the program to open a further chunk (recorded as a PAUSE event).
    Block,
}

/// A path kept in place: at most PATH_MAX bytes with its NUL, the longest the kernel takes.
pub struct Path {
    buf: [u8; libc::PATH_MAX as usize],
    len: usize,
}

impl Path {
    /// The parts joined; None when too long for the kernel or holding a NUL or non-UTF-8 byte.
    pub fn join(parts: &[&str]) -> Option<Path> {
        let mut p = Path { buf: [0; libc::PATH_MAX as usize], len: 0 };
        for part in parts {
            let end = p.len + part.len();
            if end >= p.buf.len() || part.as_bytes().contains(&0) {
                return None;
            }
            p.buf[p.len..end].copy_from_slice(part.as_bytes());
            p.len = end;
        }
        Some(p)
    }

    /// Keeps the first `len` bytes (at a character boundary).
    pub fn truncate(&mut self, len: usize) {
        if len < self.len {
            self.buf[len..self.len].fill(0);
            self.len = len;
        }
    }

    pub fn as_str(&self) -> &str {
        // SAFETY: joined from &str parts.
        unsafe { std::str::from_utf8_unchecked(&self.buf[..self.len]) }
    }

    pub fn as_cstr(&self) -> &CStr {
        // SAFETY: NUL-terminated (buf is zeroed past len, and len < its size), no NUL inside.
        unsafe { CStr::from_bytes_with_nul_unchecked(&self.buf[..=self.len]) }
    }
}

/// The settings an attach request may carry after its trace's path (session.rs): the ones
/// `oslens record -p --flight` needs; an attach keeps the defaults for every other.
pub const ATTACH_SETTINGS: [&str; 2] = ["OSLENS_ON_FULL", "OSLENS_BUFFER_MB"];

pub struct Config {
    /// `<trace>/raw`, where chunks are created.
    pub raw_dir: Path,
    pub trace_dir: Path,
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
    /// Flight recorder (OSLENS_ON_FULL=rotate): a full chunk is closed and the next opened, as
    /// in Block mode, and `oslens record --flight` deletes the oldest closed ones (capture/flight.py).
    pub rotate: bool,
}

/// True when `dir` is on tmpfs or ramfs.
fn in_memory(dir: &CStr) -> bool {
    // SAFETY: statfs fills the struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    unsafe { libc::statfs(dir.as_ptr(), &mut st) == 0 && matches!(st.f_type as u64, 0x0102_1994 | 0x8584_58f6) }
}

/// An environment variable's value, without allocating (None when unset or not UTF-8). Read it
/// at once: the program may change its environment later.
pub fn env(name: &CStr) -> Option<&'static str> {
    // SAFETY: getenv returns null or a NUL-terminated string of the environment.
    let p = unsafe { libc::getenv(name.as_ptr()) };
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p as *const c_char) }.to_str().ok()).flatten()
}

fn number(v: Option<&str>) -> Option<u64> {
    v.and_then(|v| v.trim().parse().ok())
}

/// Says one line on stderr without allocating.
fn say(line: &str) {
    // SAFETY: writing a buffer to stderr.
    unsafe { libc::write(2, line.as_ptr() as *const libc::c_void, line.len()) };
}

impl Config {
    /// `None` when OSLENS_TRACE is unset: every call stays a no-op.
    pub fn from_env() -> Option<Config> {
        let config = match Self::from_lookup(env) {
            Ok(c) => c?,
            Err(why) => {
                say(why);
                return None;
            }
        };
        let in_memory = in_memory(config.raw_dir.as_cstr());
        Some(Config { trace_in_memory: in_memory, ..config })
    }

    /// The settings an attach asks a dormant process for (`oslens record -p`): the request is
    /// its trace's path, then NUL-separated `NAME=VALUE` settings among ATTACH_SETTINGS (the
    /// flight recorder's rotate mode and chunk size, `-p --flight`); the rest are the defaults
    /// (docs/recorder.md, "Dormant instruments"). Parsed in place: nothing is allocated.
    pub fn for_attach(request: &str) -> Option<Config> {
        let trace = request.split('\0').next()?;
        let setting = |name: &CStr| -> Option<&str> {
            if name == c"OSLENS_TRACE" {
                return Some(trace);
            }
            let name = name.to_str().ok().filter(|n| ATTACH_SETTINGS.contains(n))?;
            request.split('\0').skip(1).find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        };
        let config = Self::from_lookup(setting).ok()??;
        let in_memory = in_memory(config.raw_dir.as_cstr());
        Some(Config { trace_in_memory: in_memory, ..config })
    }

    /// The settings, from a lookup of the environment's variables by name (None: not
    /// recording; Err: a line saying why it cannot).
    fn from_lookup<'a>(get: impl Fn(&CStr) -> Option<&'a str>) -> Result<Option<Config>, &'static str> {
        let Some(trace) = get(c"OSLENS_TRACE").filter(|t| !t.is_empty()) else { return Ok(None) };
        // raw/ is made by `oslens record`, and by the first chunk when missing (ensure_raw_dir):
        // a process that records nothing makes no system call for it.
        let (Some(trace_dir), Some(raw_dir)) = (Path::join(&[trace]), Path::join(&[trace, "/raw"])) else {
            return Err("oslens: OSLENS_TRACE is not a path the kernel takes (too long, or a NUL): not recording\n");
        };
        let buffer_mb = number(get(c"OSLENS_BUFFER_MB"));
        let buffer_given = number(get(c"OSLENS_BUFFER_RECORDS"));
        let buffer_records = buffer_given.unwrap_or(buffer_mb.unwrap_or(64).max(1) * 1024 * 1024 / 32).max(4);
        let limit_events = number(get(c"OSLENS_LIMIT_EVENTS"));
        let limit_bytes = number(get(c"OSLENS_LIMIT_BYTES")).map(|b| b / 32);
        let limit_slots = match (limit_events, limit_bytes) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Ok(Some(Config {
            trace_in_memory: false,
            raw_dir,
            trace_dir,
            buffer_records,
            on_full: if get(c"OSLENS_ON_FULL") == Some("block") { OnFull::Block } else { OnFull::Drop },
            start_enabled: get(c"OSLENS_ENABLE") != Some("0"),
            limit_slots,
            counter_period_us: number(get(c"OSLENS_COUNTER_PERIOD_US")).unwrap_or(1000),
            prepare_buffers: get(c"OSLENS_PREPARE_BUFFERS") == Some("1"),
            buffer_explicit: buffer_mb.is_some() || buffer_given.is_some(),
            rotate: get(c"OSLENS_ON_FULL") == Some("rotate"),
        }))
    }
}

/// Creates raw/ when it is missing (a trace directory made by hand, say). Called before a
/// process's first chunk, and again for each attach session's trace (session.rs).
pub fn ensure_raw_dir(raw_dir: &str, session: u32) {
    static MADE_FOR: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(u32::MAX);
    if MADE_FOR.swap(session, std::sync::atomic::Ordering::Relaxed) != session && std::fs::metadata(raw_dir).is_err() {
        let _ = std::fs::create_dir_all(raw_dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&CStr) -> Option<&'a str> {
        move |name| vars.iter().find(|(k, _)| k.as_bytes() == name.to_bytes()).map(|(_, v)| *v)
    }

    #[test]
    fn settings_are_read_in_place() {
        let c = Config::from_lookup(lookup(&[("OSLENS_TRACE", "/t/x"), ("OSLENS_BUFFER_MB", " 2 "), ("OSLENS_LIMIT_EVENTS", "10"), ("OSLENS_LIMIT_BYTES", "640"), ("OSLENS_ON_FULL", "block"), ("OSLENS_ENABLE", "0")])).unwrap().unwrap();
        assert_eq!((c.trace_dir.as_str(), c.raw_dir.as_str(), c.raw_dir.as_cstr().to_bytes()), ("/t/x", "/t/x/raw", &b"/t/x/raw"[..]));
        assert_eq!((c.buffer_records, c.limit_slots, c.buffer_explicit, c.start_enabled), (65536, Some(10), true, false));
        assert!(matches!(c.on_full, OnFull::Block) && !c.prepare_buffers && c.counter_period_us == 1000 && !c.rotate);
        let r = Config::from_lookup(lookup(&[("OSLENS_TRACE", "t"), ("OSLENS_ON_FULL", "rotate")])).unwrap().unwrap();
        assert!(r.rotate && matches!(r.on_full, OnFull::Drop));
        let d = Config::from_lookup(lookup(&[("OSLENS_TRACE", "t"), ("OSLENS_BUFFER_RECORDS", "1")])).unwrap().unwrap();
        assert_eq!((d.buffer_records, d.limit_slots, d.buffer_explicit, d.start_enabled), (4, None, true, true));
        assert!(Config::from_lookup(lookup(&[("OSLENS_TRACE", "")])).unwrap().is_none());
        assert!(Config::from_lookup(lookup(&[])).unwrap().is_none());
    }

    #[test]
    fn an_attach_request_carries_the_flight_settings_only() {
        let plain = Config::for_attach("/t/x").unwrap();
        assert_eq!((plain.trace_dir.as_str(), plain.buffer_records, plain.rotate, plain.buffer_explicit), ("/t/x", 64 << 15, false, false));
        let flight = Config::for_attach("/t/y\0OSLENS_ON_FULL=rotate\0OSLENS_BUFFER_MB=2\0OSLENS_LIMIT_EVENTS=5").unwrap();
        assert_eq!((flight.trace_dir.as_str(), flight.buffer_records, flight.buffer_explicit), ("/t/y", 2 << 15, true));
        assert!(flight.rotate && flight.limit_slots.is_none());
        assert!(Config::for_attach("").is_none() && Config::for_attach("\0OSLENS_ON_FULL=rotate").is_none());
    }

    #[test]
    fn a_path_the_kernel_cannot_take_means_no_recording() {
        let long = "x".repeat(libc::PATH_MAX as usize - 4);
        assert!(Path::join(&[&long]).is_some() && Path::join(&[&long, "/raw"]).is_none());
        let said = Config::from_lookup(lookup(&[("OSLENS_TRACE", &long)])).err().unwrap();
        assert!(said.starts_with("oslens: OSLENS_TRACE is not a path") && said.ends_with("not recording\n"));
        assert!(Path::join(&["a\0b"]).is_none());
    }
}
