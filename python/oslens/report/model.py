"""The report as data: a header about the trace and nine sections (Kohr et al.'s tables and
figures, then the findings), each with its tables, notes, and - when the trace cannot support
it - one sentence saying why it is empty. The terminal, HTML and JSON renderers all draw from
this one model, so they always say the same thing."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from oslens.analysis import attach_state, breakdown, crosscheck, db, findings, program, suite, units
from oslens.report import flight


@dataclass
class Column:
    key: str
    label: str
    fmt: str = "str"  # str | int | ms | ms2 | pct | float | ns
    terminal: bool = True  # shown in the terminal too (HTML and JSON show every column)
    unknown: str = "-"  # what an unknown (null) value reads as: "n/a (why)"


@dataclass
class TableView:
    name: str  # the analysis table (also report_<name>.parquet)
    title: str
    columns: list[Column]
    limit: int | None = None  # rows shown in the terminal / HTML (JSON keeps all)
    hide_zero: bool = False  # in the terminal, leave out numeric columns that are zero in every row


@dataclass
class Section:
    id: str
    title: str
    reference: str
    description: str
    available: bool
    reason: str | None = None
    notes: list[str] = field(default_factory=list)
    views: list[TableView] = field(default_factory=list)
    plot: str | None = None  # name of the plot function in oslens.report.plots
    svg: str | None = None  # a figure the section drew itself (program phases' similarity matrix)


@dataclass
class Report:
    trace: str
    header: dict
    kernel: dict
    sections: list[Section]
    tables: dict[str, pa.Table]

    def section(self, sid: str) -> Section:
        return next(s for s in self.sections if s.id == sid)


C = Column
SYNC_TOP = 10  # objects shown in the terminal and HTML sync table (every row in JSON and report_sync)

BREAKDOWN_COLUMNS = [
    C("name", "thread"),
    C("tid", "tid", "int"),
    C("wall_ns", "wall", "ms"),
    C("computation_ns", "computation", "ms"),
    C("syscalls_ns", "syscalls", "ms"),
    C("io_wait_ns", "I/O wait", "ms"),
    C("page_faults_ns", "page faults", "ms"),
    C("wakeup_latency_ns", "wake-up", "ms"),
    C("preempted_ns", "preempted", "ms"),
    C("sync_wait_ns", "sync wait", "ms"),
    C("sleeping_ns", "sleeping", "ms"),
    C("instrumentation_ns", "instrumentation", "ms"),
    C("unknown_ns", "unknown", "ms"),
]


def _sync_reason(con) -> str:
    return (
        "No synchronisation events: the trace has no lock, barrier or condition-variable records "
        "(the program did not synchronise, or the pthread preload was not active while recording)."
    )


NO_COMPLETION = "n/a (no completions)"


def io_notes(requests: pa.Table) -> list[str]:
    """Why I/O durations are unknown, when they are."""
    if requests.num_rows == 0:
        return []
    durations = requests.column("duration_ns")
    if durations.null_count == requests.num_rows:
        return ["Durations are n/a: the device reported no completion for any request (block_rq_complete never "
                "fired; this VM's virtio disk fires almost none), so only issue times are known."]
    if durations.null_count:
        return [f"{durations.null_count} of {requests.num_rows} requests have no completion record: their "
                "durations are n/a and left out of the totals."]
    return []


def header_info(con, trace: str, tables: dict[str, pa.Table] | None = None) -> dict:
    m = db.meta(con)
    prog = program.program(con)
    wall = (prog.window[1] - prog.window[0]) if prog.window else 0
    counts = {t: db.row_count(con, t) for t in
              ["app_events", "regions", "switches", "cpu_slices", "syscalls", "faults", "block_io", "sync", "samples"]}
    # `lost` holds every loss, the kernel collector's included (kernel_lost is its per-CPU detail)
    lost = 0
    if db.row_count(con, "lost"):
        lost = int(con.execute("SELECT coalesce(sum(count), 0) FROM lost").fetchone()[0])
    command = m.get("command") or m.get("argv") or m.get("cmdline") or ""
    if command.startswith("["):
        try:
            import json
            import shlex

            command = shlex.join(json.loads(command))
        except (ValueError, TypeError):
            pass
    return {
        **recorder_cost(m),
        "crosscheck": crosscheck_line(con, m, (tables or {}).get("crosscheck")),
        "exit": exit_line(m),
        # `record -p`: what was already running at the attach
        "attach": attach_state.summary(con),
        "trace": trace,
        "command": command,
        "program_pids": prog.pids,
        "threads": len(prog.tids),
        "cpus": prog.cpus,
        "wall_ns": wall,
        "events": counts,
        "lost_records": lost,
        # runs of oslens's eBPF programs the kernel skipped (its recursion guard), on every task
        "skipped_by_kernel": {k.rsplit(".", 1)[1]: int(v) for k, v in m.items()
                              if k.startswith("kernel.skipped_by_kernel.") and v.isdigit() and int(v)},
        # why the trace stops early (oslens record was killed), or None (store.salvage)
        "incomplete": m.get("trace.incomplete") or None,
        "sync_mode": sync_mode_line(m),
        # a flight-recorder snapshot opens with its trigger (report/flight.py)
        "flight": flight.lines(m),
        "meta": m,
    }


def sync_mode_line(m: dict) -> str:
    """Which lock acquisitions the trace holds one by one (`oslens record --sync`)."""
    mode = m.get("settings.sync")
    if mode == "contended":
        return "--sync contended: contended lock acquisitions recorded one by one, uncontended ones counted per lock (wait 0)"
    return "--sync all: every lock acquisition recorded" if mode == "all" else "every lock acquisition recorded (recorded before --sync existed)"


def crosscheck_line(con, m: dict, table: pa.Table | None = None) -> str | None:
    """The agreement of the trace's counts with the kernel's (recomputed; else as recorded)."""
    table = table if table is not None else crosscheck.crosscheck(con)
    return crosscheck.summary_line(table) or m.get("crosscheck.line") or None


def exit_line(m: dict) -> str | None:
    """How the program ended: its exit status or the signal that killed it."""
    if m.get("exit.signal"):
        return f"killed by {m.get('exit.signal_name') or 'signal ' + m['exit.signal']} (status {m.get('exit.code', '?')})"
    if m.get("exit.detached") == "true" or m.get("exit.detached") == "True":
        return "still running: the recording detached (record -p)"
    if m.get("exit.code", "") != "":
        return f"exit status {m['exit.code']}"
    return None


def recorder_cost(m: dict) -> dict:
    """What recording cost outside the program's threads, as measured (meta.json): the helper
    threads' CPU and the staging slots they copied, and the slots the program's threads copied
    themselves; None for a trace recorded before these were kept."""
    import json

    try:
        helpers = json.loads(m["recorder_helpers"])
        threads = json.loads(m.get("threads") or "[]")
    except (KeyError, ValueError, TypeError):
        return {"recorder_helper_cpu_ns": None, "recorder_helper_slots": None, "recorder_thread_slots": None}
    return {"recorder_helper_cpu_ns": sum(h.get("cpu_ns", 0) for h in helpers),
            "recorder_helper_slots": sum(h.get("ring_slots_copied", 0) for h in helpers),
            "recorder_thread_slots": sum(t.get("ring_slots_self_copied", 0) for t in threads)}


def pids_text(pids: list, shown: int = 4) -> str:
    """The program's processes for the header: every pid of a few, else the first ones and how
    many more (a shell script or a build has hundreds; the JSON report keeps them all)."""
    if not pids:
        return "pid -"
    if len(pids) <= shown:
        return f"pid {', '.join(map(str, pids))}"
    return f"{len(pids):,} processes: pid {', '.join(map(str, pids[:shown]))} and {len(pids) - shown:,} more"


def recorder_cost_line(h: dict) -> str | None:
    if h.get("recorder_helper_cpu_ns") is None:
        return None
    return (f"{units.fmt_ns(h['recorder_helper_cpu_ns'])} CPU in the recorder's helper thread "
            f"({h['recorder_helper_slots']:,} buffer slots copied; {h['recorder_thread_slots']:,} copied by the "
            "program's threads while it was behind)")


def build(con, trace: str = "", tables: dict[str, pa.Table] | None = None) -> Report:
    tables = tables if tables is not None else suite.run_all(con)
    ks = db.kernel_status(con)
    S = _trigger_sections(tables) + _program_sections(con, tables, ks) + _kernel_sections(con, tables, ks)
    S.append(Section(
        "findings", "Findings", "Kohr et al. section 6",
        "Anomalies, in plain words, with the numbers behind them. The plot shows which tasks took CPUs from the "
        "program.",
        available=True,
        views=[TableView("findings", "Findings", [C("severity", "severity"), C("title", "finding"), C("text", "detail")])],
        plot="findings",
        notes=[findings.threshold_note()] if tables["findings"].num_rows else ["Nothing unusual found."],
    ))
    return Report(trace=trace, header=header_info(con, trace, tables), kernel=ks, sections=S, tables=tables)


def _trigger_sections(tables: dict[str, pa.Table]) -> list[Section]:
    """A flight-recorder snapshot's first section: what its trigger's thread was doing just before."""
    t = tables.get("trigger_window")
    if t is None or t.num_rows == 0:
        return []
    w = t.to_pylist()[0]
    who = f"thread {w['tid']}" if w["tid"] is not None else f"the program's {w['count']} thread(s)"
    return [Section(
        "trigger", "Before the trigger", "docs/flight.md",
        f"What {who} did in the {units.fmt_ns(w['ns'])} the trigger measured (or the last second before it): where "
        "the time went (its off-CPU reasons), which tasks held its CPU while it waited for one, its system calls "
        "and block I/O.",
        available=True,
        views=[TableView("trigger_window", "Before the trigger", [
            C("what", "what"), C("name", "name"), C("ns", "time", "ns"), C("count", "count", "int"),
            C("bytes", "bytes", "int"), C("tid", "tid", "int", terminal=False),
        ])],
    )]


def _program_sections(con, tables: dict[str, pa.Table], ks: dict) -> list[Section]:
    """Kohr et al.'s Tables 3-6 and Figures 10-11: the program's threads, tasks, phases, sync, regions."""
    has_sched = ks["scheduling"]
    S = []

    bd_notes = breakdown.notes(con)
    bd_notes.append(
        "Each row adds up to the thread's wall time (start to end): computation = on a CPU in user code; "
        "syscalls = on a CPU inside a system call; wake-up = woken but not yet on a run queue (sched_waking to "
        "sched_wakeup); preempted = runnable but not running (preempted, or woken, queued and waiting for a CPU); sync wait = inside a lock/barrier/condition wait; I/O wait = off-CPU in uninterruptible "
        "sleep or with own block I/O in flight, until woken; "
        "sleeping = any other off-CPU wait."
    )
    S.append(Section(
        "breakdown", "Where each thread's time went", "Kohr et al. Table 3",
        "Execution-time distribution per thread.",
        available=tables["breakdown"].num_rows > 0,
        reason=None if tables["breakdown"].num_rows else "No program threads in this trace.",
        notes=bd_notes,
        views=[TableView("breakdown", "Time per thread (ms)", BREAKDOWN_COLUMNS, hide_zero=True)],
        plot="breakdown",
    ))
    S.append(Section(
        "tasks", "CPU time of every task on the program's CPUs", "Kohr et al. Table 4",
        "Every task that held one of the CPUs the program ran on, while it ran: what it is, its CPU time, "
        "and how often it preempted a program thread.",
        available=tables["tasks"].num_rows > 0,
        reason=None if tables["tasks"].num_rows else db.missing_reason(con, "cpu_slices", "per-task CPU times"),
        views=[TableView("tasks", "Tasks by CPU time", [
            C("comm", "task"), C("tid", "tid", "int"), C("kind", "kind"), C("description", "what it is", terminal=False),
            C("cpu_ns", "CPU time", "ms"), C("share", "share", "pct"), C("slices", "slices", "int"),
            C("mean_slice_ns", "mean slice", "ns", terminal=False), C("preemptions_of_program", "preempted program", "int"),
        ], limit=25)],
        plot="tasks",
    ))
    S.append(Section(
        "phases", "Phases", "Kohr et al. Table 5",
        "Each thread's top-level regions (the regions inside a single wrapping region such as main), in time order, "
        "relative to the program's start.",
        available=tables["phases"].num_rows > 0,
        reason=None if tables["phases"].num_rows else
        "No phases: the program recorded no regions (instrument it with osl_region_begin/osl_region_end).",
        views=[
            TableView("phases", "Phase durations", [
                C("thread", "thread"), C("name", "phase"), C("begin_ns", "begin", "ms"), C("end_ns", "end", "ms"),
                C("duration_ns", "duration", "ms"), C("share", "of thread", "pct"),
            ], limit=40),
            TableView("phase_summary", "Phases by name", [
                C("thread", "thread"), C("name", "phase"), C("count", "count", "int"), C("total_ns", "total", "ms"),
                C("mean_ns", "mean", "ms"),
            ], limit=40),
        ],
        plot="phases",
    ))
    S.append(Section(
        "sync", "Locks and barriers", "Kohr et al. Table 6",
        "Waits for each synchronisation object (request to acquire): count, mean, variance, maximum, and the "
        "share of the wait during which a program thread was preempted.",
        available=tables["sync"].num_rows > 0,
        reason=None if tables["sync"].num_rows else _sync_reason(con),
        notes=[] if has_sched else ["Without scheduling events the preempted share cannot be computed (shown as 0)."],
        views=[TableView("sync", f"Synchronisation: each kind, then the top {SYNC_TOP} objects by total wait", [
            C("kind", "kind"), C("object", "object"), C("count", "count", "int"), C("threads", "threads", "int", terminal=False),
            C("wait_total_ns", "total wait", "ns"), C("wait_mean_ns", "mean wait", "ns"),
            C("preempted_share", "preempted", "pct"), C("wait_max_ns", "max wait", "ns"),
            C("wait_sd_ns", "std dev", "ns"), C("wait_var_ns2", "variance (ms²)", "ms2", terminal=False),
            C("hold_mean_ns", "mean hold", "ns", terminal=False),
        ], limit=SYNC_TOP + len(set(tables["sync"].column("kind").to_pylist())))],
        plot="sync",
    ))
    S.append(Section(
        "regions", "Region durations", "Kohr et al. Figures 10-11",
        "The distribution of each region's durations; the histograms show the regions with the most total time.",
        available=tables["region_stats"].num_rows > 0,
        reason=None if tables["region_stats"].num_rows else
        "No regions: the program recorded none (instrument it with osl_region_begin/osl_region_end).",
        views=[TableView("region_stats", "Durations per region", [
            C("name", "region"), C("count", "count", "int"), C("total_ns", "total", "ms"), C("mean_ns", "mean", "ns"),
            C("std_ns", "std", "ns", terminal=False), C("min_ns", "min", "ns", terminal=False), C("p50_ns", "median", "ns"), C("p90_ns", "p90", "ns", terminal=False),
            C("p99_ns", "p99", "ns"), C("max_ns", "max", "ns"),
            C("mean_comp_ns", "mean, compensated", "ns", terminal=False),
        ], limit=30)],
        plot="regions",
    ))
    return S


def _kernel_sections(con, tables: dict[str, pa.Table], ks: dict) -> list[Section]:
    """Kohr et al.'s Figures 12-17: the CPUs' switches, block I/O, who switched to whom."""
    S = []
    S.append(Section(
        "switches", "Context switches per CPU", "Kohr et al. Figures 12-13, 16",
        "Who ran on each of the program's CPUs over time, and the cumulative number of context switches per CPU.",
        available=tables["switch_timeline"].num_rows > 0,
        reason=None if tables["switch_timeline"].num_rows else
        db.missing_reason(con, "switches", "context-switch records"),
        views=[TableView("switch_summary", "Switches per CPU", [
            C("cpu", "CPU", "int"), C("switches", "switches", "int"), C("involuntary", "involuntary", "int"),
            C("voluntary", "voluntary", "int", terminal=False), C("into_program", "into program", "int"),
            C("out_of_program", "out of program", "int"), C("per_second", "per second", "float"),
        ])],
        plot="switches",
    ))
    io_reason = None
    if tables["io_requests"].num_rows == 0:
        if ks["scheduling"]:
            io_reason = ("No block I/O: no request reached a disk while the program ran (reads served from the page "
                         "cache never do), or the collector did not trace the block layer.")
        else:
            io_reason = db.missing_reason(con, "block_io", "block I/O records")
    S.append(Section(
        "io", "I/O durations over time", "Kohr et al. Figure 14",
        "Every block request: when it was issued and how long it took, reads versus writes.",
        available=tables["io_requests"].num_rows > 0,
        reason=io_reason,
        notes=io_notes(tables["io_requests"]),
        views=[TableView("io_summary", "Block I/O by direction", [
            C("rw", "direction"), C("requests", "requests", "int"), C("completed", "completed", "int"),
            C("bytes", "bytes", "int"),
            C("total_ns", "total", "ns", unknown=NO_COMPLETION), C("mean_ns", "mean", "ns", False, NO_COMPLETION),
            C("max_ns", "max", "ns", unknown=NO_COMPLETION),
            C("by_program", "by program", "int"), C("program_waiting_ns", "program waiting", "ns"),
        ])],
        plot="io",
    ))
    S.append(Section(
        "transitions", "Who switched to whom", "Kohr et al. Figure 17",
        "The context-switch transition matrix: how many times each task (row) gave its CPU to each task (column).",
        available=tables["transitions"].num_rows > 0,
        reason=None if tables["transitions"].num_rows else
        db.missing_reason(con, "switches", "context-switch records"),
        views=[TableView("transitions", "Most frequent transitions", [
            C("prev_task", "from"), C("next_task", "to"), C("count", "switches", "int"),
        ], limit=20)],
        plot="transitions",
    ))
    return S


def format_value(v, fmt: str, unknown: str = "-") -> str:
    if v is None:
        return unknown
    if fmt == "ms":
        return f"{v / 1e6:,.3f}"
    if fmt == "ms2":
        return f"{v / 1e12:,.4g}"
    if fmt == "pct":
        return f"{100 * v:.1f}%"
    if fmt == "int":
        return f"{int(v):,}"
    if fmt == "float":
        return f"{v:,.1f}"
    if fmt == "ns":
        return units.fmt_ns(v)
    return str(v)


def view_rows(report: Report, view: TableView, limit: bool = True, terminal: bool = False):
    """The columns shown, the formatted rows of a table view, and how many rows were left out."""
    t = report.tables[view.name]
    rows = t.to_pylist()
    n = len(rows)
    if limit and view.limit is not None:
        rows = rows[: view.limit]
    cols = [c for c in view.columns if c.terminal or not terminal]
    if terminal and view.hide_zero:
        cols = [c for c in cols if c.fmt == "str" or any(r.get(c.key) for r in rows)]
    return cols, [[format_value(r.get(c.key), c.fmt, c.unknown) for c in cols] for r in rows], n - len(rows)


def find_trace(arg: str | None, cwd: Path | None = None) -> Path:
    """TRACE, or the newest trace directory under ./traces or named oslens-trace* here."""
    from oslens.errors import OslensError

    if arg:
        p = Path(arg)
        if not p.exists():
            raise OslensError(f"{arg} does not exist: give the directory `oslens record -o` wrote.", 2)
        return p
    cwd = cwd or Path.cwd()
    cands = []
    if (cwd / "traces").is_dir():
        cands += [p for p in (cwd / "traces").iterdir() if p.is_dir()]
    cands += [p for p in cwd.glob("oslens-trace*") if p.is_dir()]
    if not cands:
        raise OslensError(
            "no trace given and none found under ./traces or ./oslens-trace*: record one with `oslens record -- CMD`.", 2
        )
    return max(cands, key=lambda p: p.stat().st_mtime)
