//! The command line: what to record and how, checked before anything is opened.

pub struct Opts {
    pub trace: String,
    pub pid: i32,
    pub events: Vec<String>,
    pub system_wide: bool,
    pub sample_hz: u64,
    pub ring_mib: usize,
    pub chunk_records: u64,
    pub watch_stdin: bool,
    pub force_tier: u32,
    /// Experimental: sched_switch / waking per task like perf record (switches *to* the tree
    /// from other tasks are then missed).
    pub per_task_sched: bool,
    /// auto (eBPF for the hot events when it loads, else perf), perf, or ebpf.
    pub mechanism: String,
    /// Running processes to attach to (`--attach`): their existing threads are traced as well as
    /// whatever they create from then on; `pid` is the first of them.
    pub attach: Vec<i32>,
}

pub const USAGE: &str = "usage: oslens-collector --trace DIR (--pid PID | --attach PID[,PID...] | --system-wide) [--events sched,syscalls,faults,io,irq] [--sample HZ] [--ring-mib N] [--chunk-records N] [--watch-stdin] [--tier 1|2|3]";
const DEFAULT_SETS: &str = "sched,syscalls,faults,io,irq";

pub fn parse_args() -> Result<Opts, String> {
    let mut o = Opts {
        trace: String::new(),
        pid: 0,
        events: vec![],
        system_wide: false,
        sample_hz: 0,
        ring_mib: 32,
        chunk_records: 1 << 20,
        watch_stdin: false,
        force_tier: 0,
        per_task_sched: false,
        mechanism: "auto".into(),
        attach: vec![],
    };
    let mut events = DEFAULT_SETS.to_string();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--trace" => o.trace = val("--trace")?,
            "--pid" => o.pid = val("--pid")?.parse().map_err(|_| "--pid needs a number".to_string())?,
            "--events" => events = val("--events")?,
            "--system-wide" => o.system_wide = true,
            "--sample" => o.sample_hz = val("--sample")?.parse().map_err(|_| "--sample needs a frequency in Hz".to_string())?,
            "--ring-mib" => o.ring_mib = val("--ring-mib")?.parse().map_err(|_| "--ring-mib needs a number".to_string())?,
            "--chunk-records" => o.chunk_records = val("--chunk-records")?.parse().map_err(|_| "--chunk-records needs a number".to_string())?,
            "--attach" => {
                let list = val("--attach")?;
                o.attach = list.split(',').map(|p| p.trim().parse::<i32>().ok().filter(|&p| p > 0)).collect::<Option<Vec<_>>>()
                    .ok_or_else(|| "--attach needs process ids, comma separated".to_string())?;
                o.pid = o.attach[0];
            }
            "--watch-stdin" => o.watch_stdin = true,
            "--per-task-sched" => o.per_task_sched = true,
            "--mechanism" => {
                o.mechanism = val("--mechanism")?;
                if !["auto", "perf", "ebpf"].contains(&o.mechanism.as_str()) {
                    return Err("--mechanism is auto, perf or ebpf".into());
                }
            }
            "--tier" => o.force_tier = val("--tier")?.parse().map_err(|_| "--tier needs 1, 2 or 3".to_string())?,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    if o.trace.is_empty() {
        return Err("--trace DIR is required".into());
    }
    if o.pid <= 0 && !o.system_wide {
        return Err("--pid PID (the traced program) or --system-wide is required".into());
    }
    o.events = oslens_format::kernel::parse_event_sets(&events)?;
    if !o.ring_mib.is_power_of_two() || o.ring_mib > 1024 {
        return Err("--ring-mib must be a power of two up to 1024".into());
    }
    o.chunk_records = o.chunk_records.max(64);
    Ok(o)
}
