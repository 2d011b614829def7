//! Attaching: the three tiers (kernel tracepoints, with eBPF for the hot events when it loads;
//! per-process software counters; nothing), each falling back to the next with its reason.

use crate::attach;
use crate::bpf;
use crate::collector::{Collector, RingSlot, TIER_COUNTERS, TIER_NONE, TIER_TRACEPOINTS};
use crate::counters::{Counter, ProcSwitches};
use crate::perf;
use crate::perf_records::RingKind;
use crate::sys::errno_text;
use crate::task_events;
use crate::tracefs::{self, Field, Format};
use crate::tracepoints::{fields_of, optional_field, Ev, Handler, TRACEPOINTS};
use oslens_format::kernel as k;

/// How many times an attach lists a process's threads again for ones created meanwhile (a
/// program that creates threads without end must not hold the attach forever).
const ATTACH_LISTINGS: usize = 50;

/// The per-task tracepoints' attributes and names, in the same order.
type TaskEvents<'a> = (&'a [perf::Attr], &'a [&'a str]);

/// A tracepoint to open: its handler, whether it is opened for every task of a CPU, its format.
struct Chosen {
    tp: &'static str,
    ev: Ev,
    per_cpu: bool,
    format: Format,
}

impl Collector {
    /// Tier 1: tracepoints. Err(reason) to fall back.
    fn attach_tracepoints(&mut self) -> Result<(), String> {
        if !self.opts.attach.is_empty() {
            attach::raise_fd_limit();
            self.attach_namespace()?;
            self.attached = attach::threads_of(&self.opts.attach, self.sees_global_tids());
            if self.attached.is_empty() {
                return Err(format!("the process {} is gone", self.opts.pid));
            }
        }
        let tfs = tracefs::find()?;
        self.tracefs_how = Some(tfs.how.clone());
        let mut chosen = self.choose_tracepoints(&tfs);
        if chosen.is_empty() {
            return Err("none of the requested tracepoints exist on this kernel".into());
        }
        // The hot events through eBPF when it loads: filtered in the kernel, no perf sample path.
        if self.opts.mechanism != "perf" && !self.opts.per_task_sched {
            self.attach_bpf(&mut chosen)?;
            self.seed_bpf()?;
        }
        if self.pidns != 0 && self.bpf.is_none() {
            // perf's raw fields hold the kernel's tids, its headers the namespace's: only eBPF
            // names every task as the program sees it
            let place = if crate::sys::pid_namespace() == 0 { "for a process in a PID namespace" } else { "inside a PID namespace" };
            return Err(format!(
                "{place} the kernel tracepoints need eBPF, which names tasks as the namespace does ({})",
                self.bpf_note.take().unwrap_or_else(|| format!("mechanism {} was asked for", self.opts.mechanism))
            ));
        }
        for c in &chosen {
            let mut f = [Field::default(); 6];
            for (i, n) in fields_of(c.ev).iter().enumerate() {
                f[i] = c.format.field(n).unwrap_or_default();
            }
            self.st.handlers.push(Handler { ev: c.ev, f });
            self.st.by_id[c.format.id as usize] = self.st.handlers.len() as u16;
            if c.ev == Ev::NewTask {
                self.st.newtask_id = c.format.id;
            }
        }
        let (wide, task): (Vec<&Chosen>, Vec<&Chosen>) = chosen.iter().partition(|c| c.per_cpu);
        let (task, _probes) = self.probe_task_events(task)?;
        let before = self.enabled.len();
        let mut rings = vec![];
        for &cpu in &self.cpus.clone() {
            if let Some(ring) = self.open_cpu(cpu, &wide, !task.is_empty())? {
                rings.push((cpu, ring));
            }
        }
        // listed in the table's order, per-CPU and per-task ones mixed as before
        let wide_opened = self.enabled.split_off(before);
        let opened = |tp: &str| wide_opened.iter().any(|e| e == tp) || task.iter().any(|t| t.tp == tp);
        self.enabled.extend(chosen.iter().filter(|c| opened(c.tp)).map(|c| c.tp.to_string()));
        let attrs: Vec<perf::Attr> = task.iter().map(|c| self.tracepoint_attr(c, 0)).collect();
        let names: Vec<&str> = task.iter().map(|c| c.tp).collect();
        let tids = self.task_targets();
        self.open_task_groups((&attrs, &names), &tids, &rings)?;
        self.open_late_threads((&attrs, &names), &rings)?;
        if self.enabled.is_empty() {
            self.close_all();
            return Err("no tracepoint could be opened".into());
        }
        if self.bpf.is_some() && !self.opts.system_wide {
            // every task the tree forks is learnt from the eBPF fork records
            self.st.traced.insert(self.root);
        }
        self.st.filter_switches = !self.opts.system_wide && !self.opts.per_task_sched && self.enabled.iter().any(|e| e == "sched/sched_switch");
        if self.opts.sample_hz > 0 {
            self.attach_sampling(false);
        }
        Ok(())
    }

    /// The tracepoints of the requested event sets that this kernel has with every field read.
    fn choose_tracepoints(&mut self, tfs: &tracefs::Tracefs) -> Vec<Chosen> {
        let mut chosen = vec![];
        for (tp, ev, set, per_cpu) in TRACEPOINTS {
            if !set.is_empty() && !self.opts.events.iter().any(|e| e == set) {
                continue;
            }
            match tfs.format(tp) {
                Some(format) => {
                    let missing_field = fields_of(ev).iter().find(|n| format.field(n).is_none() && !optional_field(ev, n));
                    if let Some(n) = missing_field {
                        self.missing.push(format!("{tp} (no field {n} on this kernel)"));
                        continue;
                    }
                    let per_cpu = per_cpu && !(self.opts.per_task_sched && matches!(ev, Ev::Switch | Ev::Waking | Ev::Migrate));
                    chosen.push(Chosen { tp, ev, per_cpu: per_cpu || self.opts.system_wide, format });
                }
                None => self.missing.push(format!("{tp} (not in this kernel)")),
            }
        }
        chosen
    }

    /// Loads the eBPF programs and drops from `chosen` the tracepoints they cover; Err only when
    /// eBPF was asked for and does not load.
    fn attach_bpf(&mut self, chosen: &mut Vec<Chosen>) -> Result<(), String> {
        let wants = |set: &str| self.opts.events.iter().any(|e| e == set);
        let want = bpf::Want { sched: wants("sched"), syscalls: wants("syscalls"), faults: wants("faults"), irq: wants("irq") };
        // one ring for all CPUs: as large as the per-CPU perf rings together, at least 8 MiB
        // (OSLENS_COLLECTOR_BPF_RING_KIB overrides it, for tests of the loss accounting)
        let bpf_ring = ((self.opts.ring_mib * self.cpus.len()).next_power_of_two().max(8) << 20).min(1 << 30);
        let bpf_ring = std::env::var("OSLENS_COLLECTOR_BPF_RING_KIB")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|v| v.is_power_of_two() && *v >= 4)
            .map_or(bpf_ring, |v| v << 10);
        let ns = bpf::Ns { pidns: self.pidns, root: self.root };
        match bpf::Bpf::load(&want, self.opts.system_wide, &ns, bpf_ring) {
            Ok(b) => {
                let covered: Vec<&str> = bpf::programs(&want).iter().filter(|p| p.2).map(|p| p.1).collect();
                // task_newtask is replaced by the eBPF sched_process_fork
                chosen.retain(|c| !covered.contains(&c.tp) && c.ev != Ev::NewTask);
                for n in &covered {
                    self.enabled.push(n.to_string());
                }
                self.bpf_note = Some(format!("eBPF (tp_btf, in-kernel filter, BPF ring buffer) for {}", b.programs.join(", ")));
                self.bpf = Some(b);
                self.bpf_used = true;
            }
            Err(e) => {
                if self.opts.mechanism == "ebpf" {
                    return Err(format!("eBPF was asked for but is unavailable: {e}"));
                }
                self.bpf_note = Some(format!("eBPF unavailable ({e}); perf_event_open for every event"));
            }
        }
        Ok(())
    }

    /// The per-task tracepoints the kernel opens, tried on the collector itself (a refusal there
    /// is one for every thread); the others are noted missing, a refused privilege ends the tier.
    /// The tries stay open until dropped: closing the last event of a tracepoint unregisters it,
    /// and registering it again waits for RCU.
    fn probe_task_events<'a>(&mut self, task: Vec<&'a Chosen>) -> Result<(Vec<&'a Chosen>, task_events::Held), String> {
        let mut ok = vec![];
        let mut held = task_events::Held::default();
        for c in task {
            // without inherit (as for -1): the opening workers must not inherit these tries
            match perf::open(&self.tracepoint_attr(c, -1), 0, self.cpus[0] as i32, -1) {
                Ok(fd) => {
                    held.0.push(fd);
                    ok.push(c);
                }
                Err(e) if e == libc::EACCES || e == libc::EPERM => {
                    self.close_all();
                    return Err(format!("perf_event_open on {} was refused ({}): tracepoints need root or CAP_PERFMON", c.tp, errno_text(e)));
                }
                Err(e) => self.missing.push(format!("{} ({})", c.tp, errno_text(e))),
            }
        }
        Ok((ok, held))
    }

    /// Opens the per-CPU tracepoints on one CPU, all writing into one ring (the first one's, or a
    /// dummy event's when only per-task events will write into it: `need_ring`). Returns the
    /// ring's owner, None when nothing opened and none is needed.
    fn open_cpu(&mut self, cpu: u32, wide: &[&Chosen], need_ring: bool) -> Result<Option<i32>, String> {
        let mut ring: Option<i32> = None;
        for c in wide {
            let a = self.tracepoint_attr(c, -1);
            let opened = match ring {
                None => perf::open(&a, -1, cpu as i32, -1),
                Some(r) => perf::open_into(&a, -1, cpu as i32, r, false),
            };
            let fd = match opened {
                Ok(fd) => fd,
                Err(e) if e == libc::EACCES || e == libc::EPERM => {
                    self.close_all();
                    return Err(format!("perf_event_open on {} was refused ({}): tracepoints need root or CAP_PERFMON", c.tp, errno_text(e)));
                }
                Err(e) => {
                    if cpu == self.cpus[0] {
                        self.missing.push(format!("{} ({})", c.tp, errno_text(e)));
                    }
                    continue;
                }
            };
            self.fds.push(fd);
            if cpu == self.cpus[0] {
                self.enabled.push(c.tp.to_string());
            }
            if ring.is_none() {
                self.map_ring(cpu, fd)?;
                ring = Some(fd);
            }
        }
        if ring.is_none() && need_ring {
            // the per-task events need a ring owner per CPU: an event that never fires
            let mut a = perf::Attr::new(perf::TYPE_SOFTWARE, perf::SW_DUMMY);
            a.flags = perf::F_DISABLED | perf::F_USE_CLOCKID | perf::F_WATERMARK;
            a.clockid = libc::CLOCK_MONOTONIC;
            a.wakeup = ((self.opts.ring_mib << 20) / 4) as u32;
            let fd = perf::open(&a, -1, cpu as i32, -1).map_err(|e| {
                self.close_all();
                format!("cannot open the CPU {cpu} ring's owner (a dummy event): {}", errno_text(e))
            })?;
            self.fds.push(fd);
            self.map_ring(cpu, fd)?;
            ring = Some(fd);
        }
        Ok(ring)
    }

    fn map_ring(&mut self, cpu: u32, fd: i32) -> Result<(), String> {
        let ring = perf::Ring::map(fd, self.opts.ring_mib << 20).map_err(|e| {
            let why = format!("cannot map a {} MiB ring buffer for CPU {cpu}: {}", self.opts.ring_mib, errno_text(e));
            self.close_all();
            why
        })?;
        self.rings.push(RingSlot { cpu, kind: RingKind::Trace, ring });
        self.leaders.push(fd);
        Ok(())
    }

    /// The per-task events of `tids` on every CPU (task_events); a thread that ended is skipped
    /// in an attach and ends the tier for a launched program.
    fn open_task_groups(&mut self, task: TaskEvents, tids: &[i32], rings: &[(u32, i32)]) -> Result<(), String> {
        match task_events::open_all(task.0, tids, rings) {
            Ok(g) if g.gone > 0 && self.opts.attach.is_empty() => {
                let mut g = g;
                g.close();
                self.close_all();
                Err(format!("the traced process {} is gone", self.opts.pid))
            }
            Ok(mut g) => {
                self.fds.append(&mut g.leaders);
                self.members.append(&mut g.members);
                Ok(())
            }
            Err(r) => {
                self.close_all();
                Err(format!("perf_event_open on {} for thread {} was refused: {}", task.1[r.index], r.tid, errno_text(r.errno)))
            }
        }
    }

    fn tracepoint_attr(&self, c: &Chosen, pid: i32) -> perf::Attr {
        let ring_bytes = self.opts.ring_mib << 20;
        let mut a = perf::Attr::new(perf::TYPE_TRACEPOINT, c.format.id as u64);
        a.sample_period = 1;
        a.sample_type = perf::SAMPLE_TID | perf::SAMPLE_TIME | perf::SAMPLE_RAW;
        a.flags = perf::F_DISABLED | perf::F_USE_CLOCKID | perf::F_WATERMARK;
        a.clockid = libc::CLOCK_MONOTONIC;
        a.wakeup = (ring_bytes / 4) as u32;
        if pid != -1 {
            a.flags |= perf::F_INHERIT;
        }
        a
    }

    /// The tasks per-task events are opened on: the program, or every thread of the attached
    /// processes (inherit follows only the threads a task creates after its event is opened).
    fn task_targets(&self) -> Vec<i32> {
        if self.opts.attach.is_empty() {
            return vec![self.opts.pid];
        }
        self.attached.iter().map(|a| a.local as i32).collect()
    }

    /// An attach records in the pids of the attached processes' PID namespace (their app
    /// records carry those): it must be one for all of them; the root is named as it names it.
    fn attach_namespace(&mut self) -> Result<(), String> {
        let mut spaces = self.opts.attach.iter().map(|&p| attach::pid_namespace_of(p));
        let first = spaces.next().flatten().ok_or_else(|| format!("the process {} is gone", self.opts.pid))?;
        if spaces.any(|s| s.is_some_and(|s| s != first)) {
            return Err("the attached processes live in different PID namespaces: attach to each apart".into());
        }
        self.pidns = first;
        if first != 0 {
            self.root = attach::ns_tgid(self.opts.pid).ok_or_else(|| format!("the process {} is gone", self.opts.pid))?;
            if self.sees_global_tids() {
                // perf numbers samples as the collector's namespace does: the kernel's tids here
                self.st.to_namespace = Some(Default::default());
            }
        }
        Ok(())
    }

    /// Whether the collector's /proc numbers tasks as the kernel does (it runs in the initial
    /// PID namespace); inside one, the kernel's tids of attached threads come from osl_find_group.
    fn sees_global_tids(&self) -> bool {
        crate::sys::pid_namespace() == 0
    }

    /// Threads of the attached processes that /proc lists now but did not before (created while
    /// the collector attached), added to `attached`.
    fn newly_listed(&mut self) -> Vec<attach::Alive> {
        let new: Vec<attach::Alive> =
            attach::threads_of(&self.opts.attach, self.sees_global_tids()).into_iter().filter(|a| !self.attached.iter().any(|b| b.tid == a.tid)).collect();
        self.attached.extend(new.iter().cloned());
        new
    }

    /// Seeds the eBPF traced set with the attached threads, listing them again until no new one
    /// appears: a thread created by a seeded one is added by the fork program itself.
    fn seed_bpf(&mut self) -> Result<(), String> {
        if self.bpf.is_none() || self.opts.attach.is_empty() {
            return Ok(());
        }
        let mut batch: std::collections::HashSet<u32> = self.attached.iter().map(|a| a.tid).collect();
        for _ in 0..ATTACH_LISTINGS {
            if batch.is_empty() {
                break;
            }
            if self.attached.iter().any(|a| a.global_tid == 0) {
                self.learn_global_tids()?;
            }
            for a in self.attached.iter().filter(|a| batch.contains(&a.tid) && a.global_tid != 0) {
                self.bpf.as_ref().unwrap().trace_tid(a.global_tid);
            }
            batch = self.newly_listed().iter().map(|a| a.tid).collect();
        }
        self.attached.retain(|a| a.global_tid != 0); // ended before the kernel was asked
        Ok(())
    }

    /// Inside a PID namespace: the kernel's tids of the attached threads, from the eBPF task
    /// iterator (which marks them traced as it finds them; bpf_get_ns_current_pid_tgid answers
    /// only for the current task, and /proc there shows only the namespace's numbers).
    fn learn_global_tids(&mut self) -> Result<(), String> {
        let mut found = std::collections::HashMap::new();
        for &pid in &self.opts.attach {
            for (tid, gtid, gpid) in self.bpf.as_ref().unwrap().find_group(pid as u32)? {
                found.insert(tid, (gtid, gpid));
            }
        }
        for a in self.attached.iter_mut().filter(|a| a.global_tid == 0) {
            if let Some(&(gtid, gpid)) = found.get(&a.tid) {
                (a.global_tid, a.global_pid) = (gtid, gpid);
            }
        }
        Ok(())
    }

    /// perf: per-task events for the threads the attached processes created while their
    /// events were being opened, until a listing finds none.
    fn open_late_threads(&mut self, task: TaskEvents, rings: &[(u32, i32)]) -> Result<(), String> {
        if self.opts.attach.is_empty() || task.0.is_empty() {
            return Ok(());
        }
        for _ in 0..ATTACH_LISTINGS {
            let tids: Vec<i32> = self.newly_listed().iter().map(|a| a.tid as i32).collect();
            if tids.is_empty() {
                break;
            }
            self.open_task_groups(task, &tids, rings)?;
        }
        Ok(())
    }

    fn attach_sampling(&mut self, user_only: bool) {
        let ring_bytes = 1usize << 20;
        let targets = if self.opts.system_wide { vec![-1] } else { self.task_targets() };
        for &cpu in &self.cpus.clone() {
            let mut leader: Option<i32> = None;
            for &pid in &targets {
                let mut a = perf::Attr::new(perf::TYPE_SOFTWARE, perf::SW_CPU_CLOCK);
                a.sample_period = self.opts.sample_hz;
                a.sample_type = perf::SAMPLE_IP | perf::SAMPLE_TID | perf::SAMPLE_TIME;
                a.flags = perf::F_DISABLED | perf::F_USE_CLOCKID | perf::F_FREQ | perf::F_WATERMARK;
                if user_only {
                    a.flags |= perf::F_EXCLUDE_KERNEL | perf::F_EXCLUDE_HV;
                }
                a.clockid = libc::CLOCK_MONOTONIC;
                a.wakeup = (ring_bytes / 4) as u32;
                if pid != -1 {
                    a.flags |= perf::F_INHERIT;
                }
                let fd = match perf::open(&a, pid, cpu as i32, -1) {
                    Ok(fd) => fd,
                    Err(e) if e == libc::ESRCH && !self.opts.attach.is_empty() => continue, // a thread that ended
                    Err(e) => {
                        self.sampling = Some(format!("sampling unavailable: perf_event_open on cpu-clock refused ({})", errno_text(e)));
                        return;
                    }
                };
                self.fds.push(fd);
                if let Some(l) = leader {
                    // an attached process's further threads share the CPU's sample ring
                    let _ = perf::set_output(fd, l);
                    continue;
                }
                match perf::Ring::map(fd, ring_bytes) {
                    Ok(ring) => {
                        self.leaders.push(fd);
                        self.rings.push(RingSlot { cpu, kind: RingKind::Sample, ring });
                        leader = Some(fd);
                    }
                    Err(e) => {
                        self.sampling = Some(format!("sampling unavailable: cannot map its ring ({})", errno_text(e)));
                        return;
                    }
                }
            }
        }
        self.sampling = Some(format!("cpu-clock at {} Hz{}", self.opts.sample_hz, if user_only { ", user space only" } else { ", user and kernel" }));
    }

    /// Tier 2: per-process software counters, read periodically.
    fn attach_counters(&mut self) -> Result<(), String> {
        if self.opts.system_wide {
            return Err("--system-wide needs kernel tracepoints".into());
        }
        if !self.opts.attach.is_empty() {
            // the counters would be one per thread, and the counters tier sums one tree's
            return Err("attaching to a running process needs kernel tracepoints".into());
        }
        let list = [
            (k::COUNTER_CONTEXT_SWITCHES, perf::SW_CONTEXT_SWITCHES),
            (k::COUNTER_CPU_MIGRATIONS, perf::SW_CPU_MIGRATIONS),
            (k::COUNTER_PAGE_FAULTS, perf::SW_PAGE_FAULTS),
            (k::COUNTER_MINOR_FAULTS, perf::SW_PAGE_FAULTS_MIN),
            (k::COUNTER_MAJOR_FAULTS, perf::SW_PAGE_FAULTS_MAJ),
            (k::COUNTER_TASK_CLOCK, perf::SW_TASK_CLOCK),
        ];
        let mut last_err = 0;
        for (id, config) in list {
            let mut a = perf::Attr::new(perf::TYPE_SOFTWARE, config);
            a.read_format = perf::FORMAT_TOTAL_TIME_ENABLED;
            a.flags = perf::F_DISABLED | perf::F_INHERIT | perf::F_EXCLUDE_KERNEL | perf::F_EXCLUDE_HV;
            if id == k::COUNTER_CONTEXT_SWITCHES || id == k::COUNTER_CPU_MIGRATIONS {
                // counted in the kernel only: with exclude_kernel they stay 0; try with the kernel
                a.flags &= !(perf::F_EXCLUDE_KERNEL | perf::F_EXCLUDE_HV);
            }
            match perf::open(&a, self.opts.pid, -1, -1) {
                Ok(fd) => {
                    self.counters.push(Counter { id, fd, last: (0, 0) });
                    self.enabled.push(format!("software:{}", k::counter_name(id)));
                }
                Err(e) => {
                    last_err = e;
                    if id == k::COUNTER_CONTEXT_SWITCHES {
                        self.proc_switches = Some(ProcSwitches::default());
                        self.enabled.push("/proc:context_switches (sampled every 20 ms)".into());
                    }
                }
            }
        }
        if self.counters.is_empty() && self.proc_switches.is_none() {
            return Err(format!(
                "per-process software counters were refused too ({}; kernel.perf_event_paranoid = {})",
                errno_text(last_err),
                std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap_or_default().trim()
            ));
        }
        if self.opts.sample_hz > 0 {
            self.attach_sampling(true);
        }
        Ok(())
    }

    pub fn setup(&mut self) {
        let mut reasons = vec![];
        let force = self.opts.force_tier;
        if force <= 1 {
            if self.opts.events.is_empty() {
                reasons.push("no kernel event set was selected".to_string());
            } else {
                match self.attach_tracepoints() {
                    Ok(()) => {
                        self.tier = 1;
                        self.tier_name = TIER_TRACEPOINTS.into();
                        return;
                    }
                    Err(r) => reasons.push(r),
                }
            }
        } else {
            reasons.push(format!("tier {force} was asked for"));
        }
        if force <= 2 {
            match self.attach_counters() {
                Ok(()) => {
                    self.tier = 2;
                    self.tier_name = TIER_COUNTERS.into();
                    self.reason = Some(reasons.join("; "));
                    return;
                }
                Err(r) => reasons.push(r),
            }
        }
        self.tier = 3;
        self.tier_name = TIER_NONE.into();
        self.reason = Some(reasons.join("; "));
    }
}
