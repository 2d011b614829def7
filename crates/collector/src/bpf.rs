//! The eBPF half of the collector: loads `bpf/oslens.bpf.o` (built by bpf/build.sh, committed,
//! CO-RE) through libbpf, opened with dlopen at run time so that neither building nor running
//! oslens needs libbpf: without it (or without BTF, or when the kernel refuses) the collector
//! uses perf_event_open for everything and says why.

use std::ffi::{c_char, c_int, c_void, CStr};

static OBJECT: &[u8] = include_bytes!("../bpf/oslens.bpf.o");

type SampleFn = extern "C" fn(*mut c_void, *mut c_void, usize) -> c_int;

#[allow(non_snake_case)]
struct Lib {
    open_mem: unsafe extern "C" fn(*const c_void, usize, *const c_void) -> *mut c_void,
    load: unsafe extern "C" fn(*mut c_void) -> c_int,
    close: unsafe extern "C" fn(*mut c_void),
    find_prog: unsafe extern "C" fn(*const c_void, *const c_char) -> *mut c_void,
    set_autoload: unsafe extern "C" fn(*mut c_void, bool) -> c_int,
    attach: unsafe extern "C" fn(*const c_void) -> *mut c_void,
    link_destroy: unsafe extern "C" fn(*mut c_void) -> c_int,
    find_map: unsafe extern "C" fn(*const c_void, *const c_char) -> *mut c_void,
    map_fd: unsafe extern "C" fn(*const c_void) -> c_int,
    update: unsafe extern "C" fn(c_int, *const c_void, *const c_void, u64) -> c_int,
    lookup: unsafe extern "C" fn(c_int, *const c_void, *mut c_void) -> c_int,
    rb_new: unsafe extern "C" fn(c_int, SampleFn, *mut c_void, *const c_void) -> *mut c_void,
    rb_consume: unsafe extern "C" fn(*mut c_void) -> c_int,
    rb_free: unsafe extern "C" fn(*mut c_void),
    num_cpus: unsafe extern "C" fn() -> c_int,
    set_max_entries: unsafe extern "C" fn(*mut c_void, u32) -> c_int,
    link_fd: unsafe extern "C" fn(*const c_void) -> c_int,
    iter_create: unsafe extern "C" fn(c_int) -> c_int,
    prog_fd: unsafe extern "C" fn(*const c_void) -> c_int,
}

fn sym<T>(h: *mut c_void, name: &CStr) -> Result<T, String> {
    // SAFETY: dlsym on a handle from dlopen; T is the function pointer type libbpf documents.
    let p = unsafe { libc::dlsym(h, name.as_ptr()) };
    if p.is_null() {
        return Err(format!("libbpf has no {}", name.to_string_lossy()));
    }
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
}

impl Lib {
    fn open() -> Result<Lib, String> {
        let mut h = std::ptr::null_mut();
        for name in [c"libbpf.so.1", c"libbpf.so"] {
            // SAFETY: plain dlopen.
            h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            if !h.is_null() {
                break;
            }
        }
        if h.is_null() {
            return Err("libbpf.so.1 is not installed (Debian: libbpf1)".into());
        }
        // Silence libbpf's own messages: the collector reports failures itself.
        if let Ok(set_print) = sym::<unsafe extern "C" fn(*const c_void) -> *const c_void>(h, c"libbpf_set_print") {
            // SAFETY: NULL disables printing.
            unsafe { set_print(std::ptr::null()) };
        }
        Ok(Lib {
            open_mem: sym(h, c"bpf_object__open_mem")?,
            load: sym(h, c"bpf_object__load")?,
            close: sym(h, c"bpf_object__close")?,
            find_prog: sym(h, c"bpf_object__find_program_by_name")?,
            set_autoload: sym(h, c"bpf_program__set_autoload")?,
            attach: sym(h, c"bpf_program__attach")?,
            link_destroy: sym(h, c"bpf_link__destroy")?,
            find_map: sym(h, c"bpf_object__find_map_by_name")?,
            map_fd: sym(h, c"bpf_map__fd")?,
            update: sym(h, c"bpf_map_update_elem")?,
            lookup: sym(h, c"bpf_map_lookup_elem")?,
            rb_new: sym(h, c"ring_buffer__new")?,
            rb_consume: sym(h, c"ring_buffer__consume")?,
            rb_free: sym(h, c"ring_buffer__free")?,
            num_cpus: sym(h, c"libbpf_num_possible_cpus")?,
            set_max_entries: sym(h, c"bpf_map__set_max_entries")?,
            link_fd: sym(h, c"bpf_link__fd")?,
            iter_create: sym(h, c"bpf_iter_create")?,
            prog_fd: sym(h, c"bpf_program__fd")?,
        })
    }
}

/// Which programs to load.
pub struct Want {
    pub sched: bool,
    pub syscalls: bool,
    pub faults: bool,
    pub irq: bool,
}

/// (program, tracepoint it covers, wanted)
pub fn programs(w: &Want) -> [(&'static CStr, &'static str, bool); 14] {
    [
        (c"osl_sys_enter", "raw_syscalls/sys_enter", w.syscalls),
        (c"osl_sys_exit", "raw_syscalls/sys_exit", w.syscalls),
        (c"osl_sched_switch", "sched/sched_switch", w.sched),
        (c"osl_sched_waking", "sched/sched_waking", w.sched),
        (c"osl_sched_wakeup", "sched/sched_wakeup", w.sched),
        (c"osl_sched_process_fork", "sched/sched_process_fork", true),
        (c"osl_sched_process_exec", "sched/sched_process_exec", true),
        (c"osl_sched_process_exit", "sched/sched_process_exit", true),
        (c"osl_sched_migrate_task", "sched/sched_migrate_task", w.sched),
        (c"osl_page_fault_user", "exceptions/page_fault_user", w.faults),
        (c"osl_irq_handler_entry", "irq/irq_handler_entry", w.irq),
        (c"osl_irq_handler_exit", "irq/irq_handler_exit", w.irq),
        (c"osl_softirq_entry", "irq/softirq_entry", w.irq),
        (c"osl_softirq_exit", "irq/softirq_exit", w.irq),
    ]
}

/// osl_cfg's one value (oslens.bpf.c, struct osl_config: the same layout).
#[repr(C)]
#[derive(Default)]
struct Config {
    system_wide: u64,
    pidns: u64,
    root: u64,
    root_global: u64,
    wake_bytes: u64,
}

/// How much may wait in the ring before a submit wakes the collector: a quarter of it, as perf
/// rings' watermark here; `OSLENS_COLLECTOR_BPF_WAKE=tick` leaves draining to the tick alone
/// (the loss test starves tiny rings that way).
fn wake_bytes(ring_bytes: usize) -> u64 {
    if std::env::var("OSLENS_COLLECTOR_BPF_WAKE").as_deref() == Ok("tick") {
        return 0;
    }
    (ring_bytes as u64 / 4).max(1)
}

/// An epoll fd watching `fd` edge-triggered: the ring's fd itself polls readable whenever a record
/// waits, which would wake the collector for every record of a busy program.
fn edge_triggered(fd: c_int) -> c_int {
    // SAFETY: plain syscalls on fds we own; errors give -1 and the tick alone drains.
    unsafe {
        let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
        if ep < 0 {
            return -1;
        }
        let mut ev = libc::epoll_event { events: (libc::EPOLLIN | libc::EPOLLET) as u32, u64: 0 };
        if libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) != 0 {
            libc::close(ep);
            return -1;
        }
        ep
    }
}

/// Where the recording runs: the inode of its PID namespace (0: the initial one, whose tids the
/// kernel's records already carry) and the root's tid there.
pub struct Ns {
    pub pidns: u64,
    pub root: u32,
}

pub struct Bpf {
    lib: Lib,
    obj: *mut c_void,
    links: Vec<*mut c_void>,
    rb: *mut c_void,
    traced_fd: c_int,
    lost_fd: c_int,
    cfg_fd: c_int,
    /// osl_find_group, loaded inside a PID namespace (null elsewhere).
    find_group_prog: *mut c_void,
    pub programs: Vec<String>,
    /// Each attached program's name (without `osl_`) and fd, for the kernel's count of its skipped runs.
    prog_fds: Vec<(String, c_int)>,
    /// Inside a PID namespace: the root's (tgid, tid) as the kernel numbers them.
    pub root_global: Option<(u32, u32)>,
    /// An edge-triggered epoll fd that turns readable when the programs wake the collector (the
    /// ring past its watermark), never per record; -1 where it could not be made.
    pub wake_fd: c_int,
    /// The record sink the ring buffer callback writes into (set before each consume).
    sink: Box<Option<*mut dyn FnMut(&[u8])>>,
}

extern "C" fn on_sample(ctx: *mut c_void, data: *mut c_void, size: usize) -> c_int {
    // SAFETY: ctx is the Box<Option<*mut dyn FnMut>> owned by Bpf, set for the duration of consume().
    let sink = unsafe { &mut *(ctx as *mut Option<*mut dyn FnMut(&[u8])>) };
    if let Some(f) = sink {
        // SAFETY: libbpf hands a record of `size` bytes.
        let bytes = unsafe { std::slice::from_raw_parts(data as *const u8, size) };
        unsafe { (**f)(bytes) };
    }
    0
}

impl Bpf {
    pub fn load(want: &Want, system_wide: bool, ns: &Ns, ring_bytes: usize) -> Result<Bpf, String> {
        let root = ns.root;
        if OBJECT.len() < 64 {
            return Err("the eBPF object was not built".into());
        }
        if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
            return Err("the kernel has no BTF (/sys/kernel/btf/vmlinux)".into());
        }
        let lib = Lib::open()?;
        // SAFETY: libbpf calls with valid arguments; errors are checked.
        unsafe {
            let obj = (lib.open_mem)(OBJECT.as_ptr() as *const c_void, OBJECT.len(), std::ptr::null());
            if obj.is_null() || (obj as isize) < 0 && (obj as isize) > -4096 {
                return Err("libbpf could not open the eBPF object".into());
            }
            let mut b = Bpf {
                lib,
                obj,
                links: vec![],
                rb: std::ptr::null_mut(),
                traced_fd: -1,
                lost_fd: -1,
                cfg_fd: -1,
                find_group_prog: std::ptr::null_mut(),
                programs: vec![],
                prog_fds: vec![],
                root_global: None,
                wake_fd: -1,
                sink: Box::new(None),
            };
            let progs: Vec<(&CStr, bool)> = programs(want).iter().map(|p| (p.0, p.2)).collect();
            for &(name, on) in &progs {
                let p = (b.lib.find_prog)(b.obj, name.as_ptr());
                if p.is_null() {
                    return Err(format!("eBPF program {} missing", name.to_string_lossy()));
                }
                (b.lib.set_autoload)(p, on);
            }
            let find_root = (b.lib.find_prog)(b.obj, c"osl_find_root".as_ptr());
            if find_root.is_null() {
                return Err("eBPF program osl_find_root missing".into());
            }
            // only where it is needed: a kernel without task iterators still loads the rest
            (b.lib.set_autoload)(find_root, ns.pidns != 0);
            let find_group = (b.lib.find_prog)(b.obj, c"osl_find_group".as_ptr());
            if find_group.is_null() {
                return Err("eBPF program osl_find_group missing".into());
            }
            (b.lib.set_autoload)(find_group, ns.pidns != 0);
            if ns.pidns != 0 {
                b.find_group_prog = find_group;
            }
            let rbm = (b.lib.find_map)(b.obj, c"osl_rb".as_ptr());
            if !rbm.is_null() {
                (b.lib.set_max_entries)(rbm, ring_bytes as u32);
            }
            let rc = (b.lib.load)(b.obj);
            if rc != 0 {
                return Err(format!("the kernel refused the eBPF programs ({})", std::io::Error::from_raw_os_error(-rc)));
            }
            let map = |n: &CStr| -> Result<c_int, String> {
                let m = (b.lib.find_map)(b.obj, n.as_ptr());
                if m.is_null() {
                    return Err(format!("eBPF map {} missing", n.to_string_lossy()));
                }
                Ok((b.lib.map_fd)(m))
            };
            b.traced_fd = map(c"osl_traced")?;
            b.lost_fd = map(c"osl_lost")?;
            let cfg_fd = map(c"osl_cfg")?;
            b.cfg_fd = cfg_fd;
            let rb_fd = map(c"osl_rb")?;
            let key: u32 = 0;
            let cfg = Config {
                system_wide: system_wide as u64,
                pidns: ns.pidns,
                root: root as u64,
                root_global: 0,
                wake_bytes: wake_bytes(ring_bytes),
            };
            (b.lib.update)(cfg_fd, &key as *const u32 as *const c_void, &cfg as *const Config as *const c_void, 0);
            if ns.pidns != 0 && root > 0 {
                b.root_global = Some(b.find_root(find_root, cfg_fd, root)?);
            } else if root > 0 {
                // one bit per tid (oslens.bpf.c, osl_traced)
                let (word, bits): (u32, u64) = (root >> 6, 1u64 << (root & 63));
                (b.lib.update)(b.traced_fd, &word as *const u32 as *const c_void, &bits as *const u64 as *const c_void, 0);
            }
            b.wake_fd = edge_triggered(rb_fd);
            let ctx = &mut *b.sink as *mut Option<*mut dyn FnMut(&[u8])> as *mut c_void;
            b.rb = (b.lib.rb_new)(rb_fd, on_sample, ctx, std::ptr::null());
            if b.rb.is_null() {
                return Err("cannot map the eBPF ring buffer".into());
            }
            for &(name, on) in &progs {
                if !on {
                    continue;
                }
                let p = (b.lib.find_prog)(b.obj, name.as_ptr());
                let link = (b.lib.attach)(p);
                if link.is_null() || ((link as isize) < 0 && (link as isize) > -4096) {
                    return Err(format!("cannot attach {} ({})", name.to_string_lossy(), std::io::Error::last_os_error()));
                }
                b.links.push(link);
                let short = name.to_string_lossy().trim_start_matches("osl_").to_string();
                b.prog_fds.push((short.clone(), (b.lib.prog_fd)(p)));
                b.programs.push(format!("ebpf:{short}"));
            }
            Ok(b)
        }
    }

    /// Adds a running task to the traced set (attach): its word is read and written back with
    /// the bit set, so the other tids of the word stay traced.
    pub fn trace_tid(&self, tid: u32) {
        let word = tid >> 6;
        let mut bits: u64 = 0;
        // SAFETY: array map lookup and update of one u64 at a valid key.
        unsafe {
            (self.lib.lookup)(self.traced_fd, &word as *const u32 as *const c_void, &mut bits as *mut u64 as *mut c_void);
            bits |= 1u64 << (tid & 63);
            (self.lib.update)(self.traced_fd, &word as *const u32 as *const c_void, &bits as *const u64 as *const c_void, 0);
        }
    }

    /// Inside a PID namespace: every thread of the process whose pid there is `pid`, marked
    /// traced by osl_find_group, as (namespace tid, kernel tid, kernel tgid).
    pub fn find_group(&self, pid: u32) -> Result<Vec<(u32, u32, u32)>, String> {
        if self.find_group_prog.is_null() {
            return Err("osl_find_group is loaded only inside a PID namespace".into());
        }
        // SAFETY: libbpf calls with valid arguments; the iterator's output is read into a local buffer.
        unsafe {
            let key = 0u32;
            let mut cfg = Config::default();
            (self.lib.lookup)(self.cfg_fd, &key as *const u32 as *const c_void, &mut cfg as *mut Config as *mut c_void);
            cfg.root = pid as u64;
            (self.lib.update)(self.cfg_fd, &key as *const u32 as *const c_void, &cfg as *const Config as *const c_void, 0);
            let link = (self.lib.attach)(self.find_group_prog);
            if link.is_null() || ((link as isize) < 0 && (link as isize) > -4096) {
                return Err(format!("cannot attach the task iterator ({})", std::io::Error::last_os_error()));
            }
            let fd = (self.lib.iter_create)((self.lib.link_fd)(link));
            let mut out = vec![];
            let mut buf = vec![0u8; 1 << 16];
            loop {
                let n = if fd >= 0 { libc::read(fd, buf.as_mut_ptr() as *mut c_void, buf.len()) } else { -1 };
                if n <= 0 {
                    break;
                }
                // the iterator writes whole 12-byte triples; a read never splits one (seq_file)
                for ids in buf[..n as usize].chunks_exact(12) {
                    let w = |i: usize| u32::from_ne_bytes(ids[i * 4..i * 4 + 4].try_into().unwrap());
                    out.push((w(0), w(1), w(2)));
                }
            }
            if fd >= 0 {
                libc::close(fd);
            }
            (self.lib.link_destroy)(link);
            Ok(out)
        }
    }

    /// Runs osl_find_root over the tasks and returns the root's kernel (tgid, tid), marked traced.
    unsafe fn find_root(&mut self, prog: *mut c_void, cfg_fd: c_int, root: u32) -> Result<(u32, u32), String> {
        let link = (self.lib.attach)(prog);
        if link.is_null() || ((link as isize) < 0 && (link as isize) > -4096) {
            return Err(format!("cannot attach the task iterator ({})", std::io::Error::last_os_error()));
        }
        let fd = (self.lib.iter_create)((self.lib.link_fd)(link));
        let mut buf = [0u8; 64];
        while fd >= 0 && libc::read(fd, buf.as_mut_ptr() as *mut c_void, buf.len()) > 0 {}
        if fd >= 0 {
            libc::close(fd);
        }
        (self.lib.link_destroy)(link);
        let (key, mut cfg) = (0u32, Config::default());
        (self.lib.lookup)(cfg_fd, &key as *const u32 as *const c_void, &mut cfg as *mut Config as *mut c_void);
        if cfg.root_global == 0 {
            return Err(format!("the traced process {root} was not found among the kernel's tasks of this PID namespace"));
        }
        Ok(((cfg.root_global >> 32) as u32, cfg.root_global as u32))
    }

    /// Takes the pending wake-up off the epoll fd, so the next poll sleeps until the next one.
    pub fn clear_wake(&self) {
        if self.wake_fd >= 0 {
            let mut ev = libc::epoll_event { events: 0, u64: 0 };
            // SAFETY: one event into a valid buffer, no wait.
            unsafe { libc::epoll_wait(self.wake_fd, &mut ev, 1, 0) };
        }
    }

    /// Hands every record waiting in the ring to `f`; returns how many.
    pub fn consume(&mut self, f: &mut dyn FnMut(&[u8])) -> usize {
        // SAFETY: the sink pointer lives only for this call.
        let f: *mut (dyn FnMut(&[u8]) + '_) = f;
        *self.sink = Some(unsafe { std::mem::transmute::<*mut (dyn FnMut(&[u8]) + '_), *mut dyn FnMut(&[u8])>(f) });
        let n = unsafe { (self.lib.rb_consume)(self.rb) };
        *self.sink = None;
        n.max(0) as usize
    }

    /// Per program, the runs the kernel skipped (`recursion_misses` in the program's fdinfo): a
    /// tracepoint that fires while the same program runs on that CPU (an interrupt's wakeup inside
    /// another wakeup's program) is not run again. These counts cover every task on the machine,
    /// so for the traced ones they are an upper bound on what the kernel never showed us.
    pub fn skipped_by_kernel(&self) -> Vec<(String, u64)> {
        let mut out = vec![];
        for (name, fd) in &self.prog_fds {
            let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap_or_default();
            let misses = info.lines().find_map(|l| l.strip_prefix("recursion_misses:")).and_then(|v| v.trim().parse().ok());
            if let Some(n) = misses.filter(|&n: &u64| n > 0) {
                out.push((name.clone(), n));
            }
        }
        out
    }

    /// Records dropped in the kernel because the ring was full, per possible CPU.
    pub fn lost_per_cpu(&self) -> Vec<u64> {
        // SAFETY: per-CPU array lookup into a buffer of one u64 per possible CPU.
        unsafe {
            let n = (self.lib.num_cpus)().max(1) as usize;
            let mut vals = vec![0u64; n];
            let key: u32 = 0;
            (self.lib.lookup)(self.lost_fd, &key as *const u32 as *const c_void, vals.as_mut_ptr() as *mut c_void);
            vals
        }
    }

    /// Detaches the programs (nothing more is recorded after this).
    pub fn detach(&mut self) {
        for l in self.links.drain(..) {
            // SAFETY: links from attach, destroyed once.
            unsafe { (self.lib.link_destroy)(l) };
        }
    }
}

impl Drop for Bpf {
    fn drop(&mut self) {
        self.detach();
        // SAFETY: objects from libbpf, freed once.
        unsafe {
            if !self.rb.is_null() {
                (self.lib.rb_free)(self.rb);
            }
            if self.wake_fd >= 0 {
                libc::close(self.wake_fd);
            }
            (self.lib.close)(self.obj);
        }
    }
}

#[cfg(test)]
mod tests {
    /// The eBPF program is C, built apart (bpf/build.sh) and committed as an object, so it cannot
    /// import crates/format: it packs its records with oslens_kinds.h, generated from
    /// crates/format/src/kernel.rs (a test there keeps it so), and must not define kinds or
    /// shift fields into place itself.
    #[test]
    fn the_ebpf_source_packs_with_the_generated_header() {
        let src = include_str!("../bpf/oslens.bpf.c");
        assert!(src.contains("#include \"oslens_kinds.h\""));
        assert!(!src.contains("#define K_"), "a kind defined in oslens.bpf.c rather than crates/format");
        for (i, line) in src.lines().enumerate() {
            if line.contains("emit(") || line.contains("fill(&") {
                assert!(line.contains("osl_pack_") || line.contains("static"), "line {}: packs by hand: {line}", i + 1);
            }
        }
        for kind in oslens_format::kernel::KINDS {
            let used = src.contains(&format!("OSL_K_{} ", kind.name.to_ascii_uppercase()))
                || src.contains(&format!("OSL_K_{},", kind.name.to_ascii_uppercase()));
            assert_eq!(used, src.contains(&format!("osl_pack_{}(", kind.name)), "{}", kind.name);
        }
    }
}
