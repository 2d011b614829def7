"""The trace tables, declared once: every table the import writes, each column's type and meaning.

The importer and the native pass take their column lists from TABLE_LIST (app_tables passes each
streamed table's names and types to `_native.app_pass`); docs/trace-schema.md's column tables
are generated from it (`python -m oslens.store.schema_doc`), and test_schema.py checks that both
agree with what an import writes.

SCHEMA_VERSION is stored in the trace (tables/manifest.json and the `meta` table under
`schema_version`); a trace imported under another version is imported again on first use.
Columns may be added without a version change only at the end of a table; renaming or
retyping a column bumps the version.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

SCHEMA_VERSION = 1

I64, I32, U64, STR, BOOL, BIN, F64 = pa.int64(), pa.int32(), pa.uint64(), pa.string(), pa.bool_(), pa.binary(), pa.float64()
U32 = pa.uint32()


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    doc: str
    # written only by the kernel collector's module: a trace without kernel chunks has the table
    # without it (its empty tables keep the columns they always had)
    kernel_only: bool = False
    # the importer extension that appends it after the table's own columns (None: the table's own)
    extension: str | None = None


@dataclass(frozen=True)
class Table:
    name: str
    doc: str
    columns: tuple[Column, ...]
    kernel: bool = False  # built from the kernel collector's chunks
    kernel_only: bool = False  # written only when the trace has kernel chunks
    extension: str | None = None  # written by this importer extension


def _comp(*names: str) -> tuple[Column, ...]:
    """Compensation's columns: the times named, less the instrumentation before them."""
    return tuple(Column(f"{n}_comp_ns", I64, f"`{n}_ns` less the cost of the thread's records before it (docs/calibration.md)",
                        extension="compensation") for n in names)


C = Column
PID, TID = C("pid", I64, "process id"), C("tid", I64, "thread id")

TABLE_LIST: tuple[Table, ...] = (
    Table("meta", "The trace's settings and the import's own figures, one key a row.", (
        C("key", STR, "`meta.json` flattened with dots (`machine.hostname`, `kernel.tier`, `exit.code`, "
                      "`settings.buffer_mb` …; lists as JSON), plus the store's own keys below"),
        C("value", STR, "the value as text"),
    )),
    Table("threads", "Every thread the trace knows: the program's (from the recorder's chunks) merged with every task "
                     "the kernel collector saw (its `tasks` table).", (
        PID, TID,
        C("name", STR, "the name the thread held for most of its life, from the kernel's comm history (`tasks.main_comm`: "
                       "renames followed, and after an exec the new program's name); the recorder's name "
                       "(`osl_thread_name`, chunk header) where it is the untruncated form of that, or without kernel events"),
        C("parent_tid", I64, "the task that created it (kernel fork record; without kernel events: the process's main "
                             "thread, or the parent process for a main thread)"),
        C("start_ns", I64, "kernel fork time when the trace has it; else the earliest of its first record and its chunk's "
                           "opening calibration pair (a main thread starts no later than its threads)"),
        C("end_ns", I64, "kernel exit time when the trace has it (also for processes that wrote chunks: a forked child's "
                         "chunk may never close); else its last record / chunk-closing pair; a thread whose chunk was never "
                         "closed (crash, kill) ends when `oslens record` saw the program exit"),
        C("is_traced", BOOL, "part of the traced process tree (recorded application events, or is the recorded program, "
                             "or descends from it)"),
        C("source", STR, "`app`, `kernel` or `app+kernel`: which sides know the thread"),
        C("app_records", I64, "raw records the thread's recorder wrote"),
        C("lost_events", I64, "events its recorder dropped (buffer full, or not kept after a fault stopped it)"),
        C("exec_ns", I64, "its first successful exec (kernel); for the process `oslens record` started, the time before "
                          "it is oslens's launcher, not the program"),
        C("is_oslens", BOOL, "oslens's own task: named `oslens*` at the end of its life (recorder helper, collector, the "
                             "`oslens` command), or a thread its process's exec killed before it changed its inherited "
                             "name and that recorded no events (a helper caught before it named itself)"),
    )),
    Table("app_events", "Every record the program's threads wrote, one row each.", (
        C("ts", I64, "time"),
        C("pid", I64, "process that wrote it"), C("tid", I64, "thread that wrote it"),
        C("cpu", I64, "CPU it was written on"),
        C("instrument", STR, "the instrument's name (region, counter, timer, event, manager, phase, lock object), "
                             "NULL when unnamed"),
        C("kind", STR, "`region_begin`, `region_end`, `counter`, `timer_start`, `timer_stop`, `event`, `control`, "
                       "`pause`, `clock_pair`, `adapt`, `lock_request`, `lock_acquire`, `lock_release`, `barrier_enter`, "
                       "`barrier_exit`, `cond_wait_enter`, `cond_wait_exit`, `cond_signal`, `func_entry`, `func_exit`"),
        C("value", I64, "counter: the value; timer_stop: elapsed ns; event: payload length; pause: duration ns; "
                        "clock_pair: the CLOCK_MONOTONIC ns read with the raw clock; control: the action (1 suspend, "
                        "2 resume, 3 reset, 4 enable, 5 disable, 6 trigger); adapt: 0 or errno; sync and function kinds: "
                        "the object / function address"),
        C("payload", BIN, "event payload (NULL for other kinds)"),
        C("id", U32, "the raw instrument id (region name hash, counter id, event id, …)"),
        *_comp("ts"),
    )),
    Table("regions", "Region begin/end pairs per thread: paired as a stack (by nesting level, and per name where a "
                     "thread's regions are not properly nested, e.g. begin A, begin B, end A).", (
        PID, TID,
        C("name", STR, "region name"),
        C("begin_ns", I64, "begin"), C("end_ns", I64, "end"),
        C("duration_ns", I64, "end − begin"),
        C("depth", I64, "regions of the thread open when it began (0 = top level)"),
        C("complete", BOOL, "false when its end was never recorded (it ends with its thread)"),
        C("id", U32, "region id"),
        *_comp("begin", "end", "duration"),
    )),
    Table("counters", "Counter values as the recorder recorded them.", (
        C("ts", I64, "when the value was recorded"),
        C("pid", I64, "process of the thread that recorded it"), C("tid", I64, "thread that recorded it"),
        C("name", STR, "counter name"),
        C("value", I64, "the counter's value at `ts`"),
        C("reason", STR, "`periodic`, `asked` (`osl_counter_record`), `final` (at exit), `reset`, `lock` (uncontended "
                         "lock acquisitions counted by the preload: `name` is the lock's address `0x…`, `value` the "
                         "acquisitions since the thread's previous `lock` row for it; summed in `lock_counts`)"),
        *_comp("ts"),
    )),
    Table("timers", "One row per timer stop.", (
        PID, TID,
        C("name", STR, "timer name"),
        C("start_ns", I64, "stop − elapsed"),
        C("stop_ns", I64, "when it stopped"),
        C("elapsed_ns", I64, "time it ran (accumulated across suspensions)"),
        *_comp("start", "stop", "elapsed"),
    )),
    Table("sync", "One row per recorded lock acquisition or barrier / condition-variable wait (from the preload "
                  "library's records), per thread and object in recorded order.", (
        C("kind", STR, "`mutex`, `barrier`, `cond`"),
        C("object", STR, "the object's name where the program named it, else its symbol where it is a static variable "
                         "(`counter_lock`; `table+0x8` for a lock inside a static struct, `_PyRuntime+0x1b8` for "
                         "CPython's GIL mutex), else its address (`0x…`: a lock on the heap or the stack)"),
        C("pid", I64, "process of the waiting thread"), C("tid", I64, "waiting thread"),
        C("request_ns", I64, "asked for the lock / entered the barrier or wait"),
        C("acquire_ns", I64, "got the lock / left the barrier or wait (NULL: not recorded: the thread ended waiting, or "
                             "the acquire was dropped with a full buffer; analyses end such a wait at the thread's next "
                             "record or at the loss, never at the thread's end)"),
        C("release_ns", I64, "mutex: unlocked (NULL if never recorded); barrier: = acquire_ns; cond: NULL"),
        C("address", U64, "object address"),
        C("wait_censored", BOOL, "the wait has no end recorded and is its thread's last record: the thread was killed "
                                 "waiting, or its recorder dropped the acquire and everything after it (buffer full: "
                                 "`threads.lost_events` > 0 tells which). The wait lasted at least until the trace stops "
                                 "knowing the thread; false for a wait that ended, or that was given up (a timed lock "
                                 "that timed out)"),
        *_comp("request", "acquire", "release"),
    )),
    Table("functions", "`-finstrument-functions` entry/exit pairs, paired like regions (by address).", (
        PID, TID,
        C("address", U64, "function address (Python functions: their name id)"),
        C("call_site", U64, "caller address"),
        C("name", STR, "symbol name (filled by the importer's `symbols` extension; NULL when unresolved)"),
        C("begin_ns", I64, "entry"), C("end_ns", I64, "exit"),
        C("duration_ns", I64, "end − begin"),
        C("depth", I64, "calls of the thread open when it began (0 = top level)"),
        C("complete", BOOL, "false when its exit was never recorded (it ends with its thread)"),
        *_comp("begin", "end", "duration"),
    )),
    Table("pauses", "Times the recorder itself stopped the program (opening another chunk with `--on-full block`, "
                    "a flush).", (
        PID, TID,
        C("start_ns", I64, "the pause's start"), C("end_ns", I64, "its end"), C("duration_ns", I64, "end − start"),
        C("reason", STR, "`new chunk`, `flush`, `prepare buffer` (the thread's whole buffer prepared before its first "
                         "event, `--prepare-buffers`), `copy out` (the thread copied staging slots to the trace file "
                         "itself: the helper was behind)"),
    )),
    Table("adapt", "Kernel adaptation calls (`osl_adapt` / `oslens.adapt`).", (
        C("ts", I64, "when"),
        C("pid", I64, "process of the calling thread"), C("tid", I64, "calling thread"),
        C("phase", STR, "phase name"),
        C("error", I64, "0 when every policy applied, else the first errno"),
        C("policy", I64, "policy bits applied"),
    )),
    Table("lost", "Everything the trace lost, so no figure hides it.", (
        C("source", STR, "`app` (recorder dropped events: buffer full, or a fault stopped recording; or region ends with "
                         "no begin, count 0), `kernel` (the collector lost records, or stopped on a fault, or died), "
                         "`damage` (the store could not read them)"),
        C("where", STR, "thread, CPU, or file (`raw/app-PID-TID-SEQ.osl`, `meta.json`)"),
        C("count", I64, "records (events for `app`) lost; NULL when unknown (a chunk missing with no record of its size)"),
        C("reason", STR, "what happened: `truncated: …`, `N record(s) failed their check`, `N record(s) with a timestamp "
                         "outside the chunk's time range`, `header unreadable`, `chunk missing (listed in meta.json)`, "
                         "`chunk missing (gap in the writer's sequence numbers)`, `meta.json unreadable …`, `buffer full "
                         "…`, `disk full at 1.234 s: recording stopped, …` (also `disk quota exceeded`, `I/O error`, "
                         "`file system read-only`, `trace directory gone`, `memory headroom of the cgroup used up`: "
                         "docs/recorder.md \"Faults\"), `kernel collector died …` (count NULL)"),
    )),
    Table("compensation", "What the instrumentation cost each thread, one row per thread and record kind "
                          "(docs/calibration.md).", (
        PID, TID,
        C("kind", STR, "record kind (`pause`: the recorder's own pauses, charged their measured length)"),
        C("records", I64, "records of that kind the thread wrote"),
        C("ns_per_record", F64, "the calibration's cost of one record of that kind (a pause: its mean length; 0 where not charged)"),
        C("ci_low_ns", F64, "its 95% interval's low end"), C("ci_high_ns", F64, "its high end"),
        C("cost_ns", F64, "records × ns_per_record (a pause: its duration)"),
        C("source", STR, "where the figure comes from: `in vitro: …` (the calibration's measurement), `measured pause …`, or "
                         "`not charged: …` and why"),
    ), extension="compensation"),
    # the kernel collector's tables (oslens.store.kernel_tables)
    Table("switches", "One row per context switch.", (
        C("ts", I64, "context switch time"),
        C("cpu", I64, "CPU"),
        C("prev_pid", I64, "process switched out"), C("prev_tid", I64, "task switched out"),
        C("prev_comm", STR, "its name then"),
        C("prev_state", STR, "its state: `R` (preempted, still runnable), `S` (sleeping), `D` (uninterruptible, e.g. "
                             "I/O), …"),
        C("next_pid", I64, "process switched in"), C("next_tid", I64, "task switched in"),
        C("next_comm", STR, "its name then"),
        C("prev_prio", I64, "the priority of the task switched out (the kernel's prio: 100–139 for normal tasks)",
          kernel_only=True),
    ), kernel=True),
    Table("cpu_slices", "When each task held a CPU (consecutive switches of a CPU).", (
        C("tid", I64, "task (tid 0: idle)"), C("pid", I64, "its process"),
        C("comm", STR, "its name then"),
        C("cpu", I64, "CPU"),
        C("start_ns", I64, "switched in"), C("end_ns", I64, "switched out"),
        C("start_inferred", BOOL, "the switch onto the task was not recorded (a ring loss, or a switch away from a task "
                                  "the kernel does not deliver, e.g. one in another PID namespace): the task held the CPU "
                                  "for some part of [start_ns, end_ns], which starts at the evidence (the latest of the "
                                  "CPU's previous switch, the task's own previous switch off a CPU and, when that switch "
                                  "put it to sleep, its first wakeup after it); the report shows that window as unknown. "
                                  "Only for the traced tree's tasks (every task with `--system-wide`), whose every switch "
                                  "is kept"),
    ), kernel=True),
    Table("wakeups", "One row per wakeup of a task.", (
        C("ts", I64, "when"),
        C("cpu", I64, "CPU the wakeup ran on"),
        C("tid", I64, "task woken"),
        C("target_cpu", I64, "CPU it will run on"),
        C("waker_tid", I64, "task that woke it"),
        C("pid", I64, "process of the task woken", kernel_only=True),
        C("waker_pid", I64, "process of the task that woke it", kernel_only=True),
        C("enqueue_ts_ns", I64, "when it then joined a run queue (`sched:sched_wakeup`); NULL when not recorded. "
          "`enqueue_ts_ns - ts` is the wake-up latency, which the breakdown counts as `wakeup_latency` rather than "
          "waiting for a CPU", kernel_only=True),
    ), kernel=True),
    Table("syscalls", "One row per system call, its entry and exit paired.", (
        PID, TID,
        C("nr", I64, "system call number"),
        C("name", STR, "its name"),
        C("start_ns", I64, "entry (NULL: entered before the collector attached)"),
        C("end_ns", I64, "exit (NULL: no exit recorded while the thread lived on; a call the thread never returned from "
                         "— `exit`, `exit_group`, a thread killed inside a call — ends at the kernel's exit record)"),
        C("ret", I64, "return value (NULL when the call did not return)"),
    ), kernel=True),
    Table("faults", "One row per user page fault.", (
        C("ts", I64, "when"),
        C("pid", I64, "faulting process"), C("tid", I64, "faulting task"),
        C("address", U64, "faulting address"),
        C("ip", U64, "instruction pointer"),
        C("error_code", I64, "the fault's error code"),
        C("cpu", I64, "CPU it was taken on", kernel_only=True),
    ), kernel=True),
    Table("block_io", "One row per block I/O request, its issue and completion paired.", (
        C("issue_ns", I64, "request issued to the device"), C("complete_ns", I64, "completed"),
        C("dev", STR, "device `major:minor`"),
        C("sector", I64, "first sector"),
        C("bytes", I64, "size"),
        C("rw", STR, "`R`, `W`, with flags (`S` sync, `M` metadata, …)"),
        C("tid", I64, "task that issued it"),
        C("pid", I64, "its process", kernel_only=True),
        C("dev_num", I64, "the device number `dev` names (the kernel's dev_t)", kernel_only=True),
    ), kernel=True),
    Table("samples", "Instruction-pointer samples (`--sample`, `--phases`).", (
        C("ts", I64, "when"),
        PID, TID,
        C("cpu", I64, "CPU"),
        C("ip", U64, "sampled instruction pointer"),
        C("in_kernel", BOOL, "sample taken in kernel mode"),
    ), kernel=True),
    Table("tasks", "Every task the collector saw (merged into `threads`).", (
        PID, TID,
        C("comm", STR, "its last name"),
        C("parent_tid", I64, "the task that forked it (NULL: unknown)"),
        C("start_ns", I64, "its fork (the recorded program: when the collector began tracing it; NULL: before the trace)"),
        C("end_ns", I64, "its exit (NULL: not seen)"),
        C("parent_pid", I64, "the process that forked it", kernel_only=True),
        C("is_traced", BOOL, "part of the traced process tree (the recorded program and what it forked)", kernel_only=True),
        C("exe", STR, "the program it exec'd (empty: none seen)", kernel_only=True),
        C("main_comm", STR, "the name it held longest since its last exec (or its start)", kernel_only=True),
        C("exec_ns", I64, "its first successful exec", kernel_only=True),
        C("is_oslens", BOOL, "as in `threads` (before the application-events check)", kernel_only=True),
        C("global_tid", I64, "its tid as the kernel numbers it (the initial PID namespace): `tid` itself unless the "
                             "recording ran in a PID namespace, whose pids every table speaks in; there, a task the "
                             "namespace cannot see has `tid` 1000000000 + this; NULL for a task of the namespace "
                             "outside the traced tree", kernel_only=True),
        C("alive_at_attach", BOOL, "already running when `record -p` attached: `start_ns` is the attach, not its "
                                   "start (`attach_threads.started_ns` has that)", kernel_only=True),
    ), kernel=True),
    Table("kernel_lost", "The collector's own losses (copied into `lost` with source `kernel`).", (
        C("source", STR, "who lost them"),
        C("where", STR, "where (`cpu N`)"),
        C("count", I64, "records lost"),
        C("cpu", I64, "CPU whose ring lost them", kernel_only=True),
    ), kernel=True),
    Table("irqs", "One row per hard or soft interrupt handled, its entry and exit paired (`--events irq`).", (
        C("cpu", I64, "CPU"),
        C("tid", I64, "task it interrupted"),
        C("irq", I64, "interrupt number (softirq: its vector)"),
        C("name", STR, "the handler's name (softirq: `TIMER`, `NET_RX`, …)"),
        C("kind", STR, "`hard` or `soft`"),
        C("start_ns", I64, "handler entry"), C("end_ns", I64, "handler exit"),
    ), kernel=True, kernel_only=True),
    Table("migrations", "One row per task moved between CPUs (`sched_migrate_task`).", (
        C("ts", I64, "when"),
        C("tid", I64, "task moved"),
        C("orig_cpu", I64, "CPU it left"),
        C("dest_cpu", I64, "CPU it goes to"),
    ), kernel=True, kernel_only=True),
    Table("attach_processes", "`record -p`: each attached process as it was at the attach (one row a process).", (
        C("ts", I64, "when its state was read (CLOCK_MONOTONIC, the attach)"),
        C("read_ns", I64, "how long reading it took: the rows of `attach_*` are of [ts, ts + read_ns]"),
        PID,
        C("global_pid", I64, "its pid as the kernel numbers it (the initial PID namespace): `pid` itself outside a "
                             "container; NULL when oslens ran inside the container too"),
        C("exe", STR, "its executable"),
        C("command", STR, "its command line, space separated"),
        C("threads", I64, "threads it had"),
        C("fds", I64, "open file descriptors it had"),
        C("cgroup", STR, "its cgroup (v2's path; v1: `controllers:path`, comma separated)"),
        C("memory_max", STR, "the cgroup's memory limit (`memory.max`, v1 `memory.limit_in_bytes`; NULL: none read)"),
        C("cpu_max", STR, "the cgroup's CPU bandwidth (`cpu.max`, v1 `cfs_quota_us cfs_period_us`)"),
        C("pids_max", STR, "the cgroup's task limit (`pids.max`)"),
        C("limits", STR, "every limit read from the cgroup, as JSON"),
        C("detach_ns", I64, "when the recording detached"),
    ), kernel=True, kernel_only=True),
    Table("attach_threads", "`record -p`: every thread of the attached processes at the attach, from "
                            "`/proc/PID/task/TID/stat`.", (
        C("ts", I64, "when it was read (the attach)"),
        PID, TID,
        C("global_tid", I64, "its tid as the kernel numbers it (`tasks.global_tid`): `tid` itself outside a container; "
                             "NULL when oslens ran inside the container too"),
        C("name", STR, "its name (comm)"),
        C("state", STR, "`R` running or runnable, `S` sleeping, `D` uninterruptible, `T` stopped, `t` traced, `Z`, `I`"),
        C("cpu", I64, "the CPU it last ran on"),
        C("policy", STR, "scheduling class (`SCHED_OTHER`, `SCHED_FIFO`, `SCHED_RR`, `SCHED_BATCH`, `SCHED_IDLE`, …)"),
        C("nice", I64, "its nice value"),
        C("rt_priority", I64, "real-time priority (0: not real-time)"),
        C("utime_ns", I64, "user CPU time before the attach (clock-tick resolution)"),
        C("stime_ns", I64, "system CPU time before the attach (clock-tick resolution)"),
        C("started_ns", I64, "when it started (CLOCK_MONOTONIC, to a clock tick)"),
    ), kernel=True, kernel_only=True),
    Table("attach_fds", "`record -p`: the open file descriptors of the attached processes at the attach.", (
        C("ts", I64, "when they were read (the attach)"),
        PID,
        C("fd", I64, "descriptor number"),
        C("kind", STR, "`file`, `dir`, `pipe`, `socket`, `char`, `block`, `fifo`, `anon` (eventfd, epoll, …) or `other`"),
        C("path", STR, "what it refers to (`readlink /proc/PID/fd/N`)"),
        C("pos", I64, "file offset (NULL: unknown)"),
        C("flags", I64, "open flags (`O_*`, from fdinfo)"),
    ), kernel=True, kernel_only=True),
    Table("kernel_counters", "Per-process software counters of the collector's counters tier (every 20 ms, "
                             "cumulative; docs/kernel-collector.md).", (
        C("ts", I64, "when read"),
        C("name", STR, "counter (page faults, task clock, context switches, migrations, …)"),
        C("value", I64, "its value"),
        C("time_enabled_ns", I64, "time the counter was enabled"),
    ), kernel=True, kernel_only=True),
)

TABLE_DECLS: dict[str, Table] = {t.name: t for t in TABLE_LIST}


def own_columns(name: str, with_kernel: bool = True) -> dict[str, pa.DataType]:
    """A table's own columns (no extension's) and their types; without `with_kernel`, those a
    trace without kernel chunks has."""
    return {c.name: c.type for c in TABLE_DECLS[name].columns
            if c.extension is None and (with_kernel or not c.kernel_only)}


def columns(name: str, extensions: bool = True, with_kernel: bool = True) -> dict[str, pa.DataType]:
    """Every column an import writes into `name`, in order: its own, then (with `extensions`)
    those the extensions append."""
    return {c.name: c.type for c in TABLE_DECLS[name].columns
            if (extensions or c.extension is None) and (with_kernel or not c.kernel_only)}


# The columns every import writes, whatever the trace holds (without extensions' columns).
APP_SCHEMAS: dict[str, dict[str, pa.DataType]] = {
    t.name: own_columns(t.name, False) for t in TABLE_LIST if not t.kernel and t.extension is None}
KERNEL_SCHEMAS: dict[str, dict[str, pa.DataType]] = {
    t.name: own_columns(t.name, False) for t in TABLE_LIST if t.kernel and not t.kernel_only}

SCHEMAS: dict[str, dict[str, pa.DataType]] = {**APP_SCHEMAS, **KERNEL_SCHEMAS}
TABLES = list(SCHEMAS)

# Columns whose values repeat a lot: dictionary-encoded in Parquet.
DICTIONARY_COLUMNS = {
    "instrument", "kind", "name", "comm", "prev_comm", "next_comm", "prev_state", "reason",
    "source", "rw", "dev", "object", "phase",
}


# Columns that grow steadily (times): delta-encoded in Parquet (half the write time of plain
# encoding, and a fraction of the size).
DELTA_COLUMNS = {"ts", "begin_ns", "start_ns", "request_ns", "issue_ns"}


def arrow_schema(name: str) -> pa.Schema:
    return pa.schema([pa.field(col, typ) for col, typ in SCHEMAS[name].items()])


def empty(name: str) -> pa.Table:
    return arrow_schema(name).empty_table()


def conform(name: str, table: pa.Table | None) -> pa.Table:
    """`table` with the declared columns of `name` first, in order and cast to their types (missing
    ones filled with nulls); columns the builder added are kept after them. Without a table: the
    table empty, with the columns a trace without kernel chunks has."""
    if table is None:
        return empty(name)
    schema = own_columns(name)
    kernel_only = {c.name for c in TABLE_DECLS[name].columns if c.kernel_only}
    n = table.num_rows
    cols, fields = [], []
    for col, typ in schema.items():
        if col in table.column_names:
            arr = table.column(col)
            if pa.types.is_dictionary(arr.type):
                # keep dictionary encoding (cheap to write, read back as the value type)
                if arr.type.value_type != typ:
                    arr = arr.cast(arr.type.value_type).cast(typ, safe=False)
            elif arr.type != typ:
                arr = arr.cast(typ, safe=False)
        elif col in kernel_only:
            continue  # the collector's module did not write it: left out, as it always was
        else:
            arr = pa.nulls(n, type=typ)
        cols.append(arr)
        fields.append(pa.field(col, arr.type))
    for col in table.column_names:
        if col not in schema:
            arr = table.column(col)
            cols.append(arr)
            fields.append(pa.field(col, arr.type))
    return pa.table(cols, schema=pa.schema(fields))
