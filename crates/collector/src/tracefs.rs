//! Tracepoint ids and field offsets from tracefs. When tracefs is not mounted and we may mount
//! it, it is mounted in a private mount namespace of this process only: nobody else sees it and
//! it disappears with the process, whatever way the process ends.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub struct Tracefs {
    pub root: PathBuf,
    /// How tracefs was found, for meta.json.
    pub how: String,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct Field {
    pub offset: usize,
    pub size: usize,
    pub data_loc: bool,
}

pub struct Format {
    pub id: u16,
    pub fields: HashMap<String, Field>,
}

impl Format {
    pub fn field(&self, name: &str) -> Option<Field> {
        self.fields.get(name).copied()
    }
}

fn has_events(p: &Path) -> bool {
    p.join("events/sched/sched_switch/id").exists() || p.join("events/raw_syscalls").exists()
}

pub fn find() -> Result<Tracefs, String> {
    for (p, how) in [("/sys/kernel/tracing", "already mounted"), ("/sys/kernel/debug/tracing", "already mounted (debugfs)")] {
        let p = Path::new(p);
        if has_events(p) {
            return std::fs::read_to_string(p.join("events/sched/sched_switch/id"))
                .map(|_| Tracefs { root: p.to_path_buf(), how: how.to_string() })
                .or_else(|e| Err(format!("tracefs at {} is not readable ({e}): tracepoints need root or CAP_PERFMON", p.display())));
        }
    }
    // SAFETY: plain syscall.
    if unsafe { libc::geteuid() } != 0 {
        return Err("tracefs is not mounted and only root may mount it: tracepoints need root".into());
    }
    mount_private()
}

fn mount_private() -> Result<Tracefs, String> {
    let err = |what: &str| format!("{what}: {}", std::io::Error::last_os_error());
    // SAFETY: plain syscalls with valid C strings; done before any thread is started.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return Err(err("cannot make a private mount namespace to mount tracefs"));
        }
        if libc::mount(std::ptr::null(), c"/".as_ptr(), std::ptr::null(), libc::MS_REC | libc::MS_PRIVATE, std::ptr::null()) != 0 {
            return Err(err("cannot make mounts private"));
        }
        if libc::mount(c"tracefs".as_ptr(), c"/sys/kernel/tracing".as_ptr(), c"tracefs".as_ptr(), 0, std::ptr::null()) != 0 {
            return Err(err("cannot mount tracefs"));
        }
    }
    let root = PathBuf::from("/sys/kernel/tracing");
    if !has_events(&root) {
        return Err("tracefs mounted but has no events (kernel without tracepoints?)".into());
    }
    Ok(Tracefs { root, how: "mounted by the collector in its own mount namespace (invisible to others, gone when it exits)".into() })
}

impl Tracefs {
    /// Reads events/<system>/<name>/format; None when the tracepoint does not exist.
    pub fn format(&self, tp: &str) -> Option<Format> {
        let text = std::fs::read_to_string(self.root.join("events").join(tp).join("format")).ok()?;
        let mut id = None;
        let mut fields = HashMap::new();
        for line in text.lines() {
            let line = line.trim();
            if let Some(v) = line.strip_prefix("ID:") {
                id = v.trim().parse::<u16>().ok();
            } else if let Some(rest) = line.strip_prefix("field:") {
                let mut parts = rest.split(';');
                let decl = parts.next().unwrap_or("").trim();
                let mut offset = None;
                let mut size = None;
                for p in parts {
                    let p = p.trim();
                    if let Some(v) = p.strip_prefix("offset:") {
                        offset = v.parse().ok();
                    } else if let Some(v) = p.strip_prefix("size:") {
                        size = v.parse().ok();
                    }
                }
                let name = decl.rsplit(' ').next().unwrap_or("");
                let name = name.split('[').next().unwrap_or("").to_string();
                if let (Some(offset), Some(size)) = (offset, size) {
                    fields.insert(name, Field { offset, size, data_loc: decl.starts_with("__data_loc") });
                }
            }
        }
        Some(Format { id: id?, fields })
    }
}
