"""Every benchmark of the suite: which C program runs it, with which parameter, and what it means."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Benchmark:
    name: str            # e.g. "calls.syscall_getpid", unique, dotted, the first part is the group
    program: str         # osbench/build/osb_<program>
    cname: str           # the name the C program knows
    label: str           # one line for tables
    table: str           # the paper's table it extends
    param: int | None = None
    unit: str = "op"     # what one operation is ("call", "switch", "4 KiB page", "copy", ...)
    root_only: str = ""  # non-empty: why it needs root (it is skipped otherwise, with this reason)
    sysctl: dict = field(default_factory=dict)  # kernel settings it runs under, e.g. {"kernel.sched_rr_timeslice_ms": 4}
    preemption_expected: bool = False  # the method itself causes involuntary switches
    slow: bool = False   # one repetition is long (fixed work): fewer repetitions in the full run
    env: dict = field(default_factory=dict)

    @property
    def group(self) -> str:
        return self.name.split(".", 1)[0]


def _build() -> list[Benchmark]:
    b: list[Benchmark] = []
    T1, T2, T3, T4, T5, T6, T7, T8 = (f"Table {i}" for i in range(1, 9))
    for cname, label in [
        ("calls.loop", "empty loop (included in every call figure)"),
        ("calls.function", "C function call"),
        ("calls.indirect", "call through a function pointer"),
        ("calls.virtual", "virtual call (object -> vtable -> method)"),
        ("calls.vdso_clock_gettime", "clock_gettime via the vDSO"),
        ("calls.syscall_getpid", "system call: syscall(SYS_getpid)"),
        ("calls.syscall_getppid", "getppid() (lmbench 'null syscall')"),
        ("calls.read_1byte", "read 1 byte from /dev/zero"),
        ("calls.write_1byte", "write 1 byte to /dev/null"),
    ]:
        b.append(Benchmark(cname, "calls", cname, label, T1, unit="call"))
    for slice_us, tag in [(100, "100us"), (20000, "20ms")]:
        b.append(Benchmark(f"timeslice.eevdf.{tag}", "timeslice", "timeslice",
                           f"end of a time slice, EEVDF slice {tag}", T2, param=slice_us, unit="slice",
                           preemption_expected=True, slow=True))
    for ms in (4, 20):
        b.append(Benchmark(f"timeslice.rr.{ms}ms", "timeslice", "timeslice",
                           f"end of a time slice, SCHED_RR, sched_rr_timeslice_ms={ms}", T2, param=-1,
                           unit="slice", root_only="needs root to use SCHED_RR and set kernel.sched_rr_timeslice_ms",
                           sysctl={"kernel.sched_rr_timeslice_ms": ms}, preemption_expected=True, slow=True))
    b.append(Benchmark("ctx.pipe_overhead", "ctx", "ctx.pipe_overhead", "pipe write + read, no switch", T3, unit="pair"))
    for kind, klabel in [("thread", "threads"), ("thread_fp", "threads, AVX in use"),
                         ("process", "processes"), ("process_fp", "processes, AVX in use")]:
        for where, wlabel in [("pinned", "one CPU"), ("cross_cpu", "two CPUs")]:
            name = f"ctx.{kind}.{where}"
            b.append(Benchmark(name, "ctx", name, f"switch: {klabel}, {wlabel}", T3, unit="switch",
                               preemption_expected=True))
    b.append(Benchmark("ctx.process_64k.pinned", "ctx", "ctx.process.pinned",
                       "switch: processes, each reads 64 KiB between switches (lat_ctx -s 64), one CPU", T3,
                       param=64, unit="switch", preemption_expected=True))
    b.append(Benchmark("ctx.pipe_overhead_64k", "ctx", "ctx.pipe_overhead",
                       "pipe write + read + reading 64 KiB, no switch", T3, param=64, unit="pair"))
    for cname, label in [("fault.zero_fill.4MiB", "zero-fill fault, 4 MiB area"),
                         ("fault.zero_fill.64MiB", "zero-fill fault, 64 MiB area"),
                         ("fault.zero_fill.thp.64MiB", "zero-fill, 64 MiB, transparent huge pages")]:
        b.append(Benchmark(cname, "fault", cname, label + " (per 4 KiB)", T4, unit="4 KiB page"))
    for size in (32, 256, 4096, 65536, 1048576):
        for kind, label in [("pair", "malloc+free"), ("alloc", "malloc in a batch"), ("free", "free in a batch")]:
            b.append(Benchmark(f"malloc.{kind}.{size}", "malloc", f"malloc.{kind}", f"{label}, {size} B", T5,
                               param=size, unit="block"))
    b.append(Benchmark("malloc.refcount", "malloc", "malloc.refcount", "atomic refcount inc + dec", T5, unit="pair"))
    for cname, label, table, root in [
        ("file.open.cached", "open existing file, cached", T6, ""),
        ("file.open.already_open", "open a file already open", T6, ""),
        ("file.open.uncached", "open existing file, uncached", T6, "needs root to drop the dentry and inode caches"),
        ("file.create", "create a new file (fresh directory)", T6, ""),
        ("file.close", "close a file", T6, ""),
        ("file.open_close", "open + close (lmbench 'open')", T6, ""),
        ("file.stat", "stat", T6, ""),
        ("file.fstat", "fstat", T6, ""),
        ("file.read.direct.cached", "read 8 KiB, extents in inode, cached", T7, ""),
        ("file.read.direct.uncached", "read 8 KiB, extents in inode, uncached", T7, ""),
        ("file.read.indirect.cached", "read 8 KiB, extent tree, cached", T7, ""),
        ("file.read.indirect.uncached", "read 8 KiB, extent tree, uncached", T7, ""),
        ("file.write.direct", "write 8 KiB, extents in inode, cached", T7, ""),
        ("file.write.indirect", "write 8 KiB, extent tree, cached", T7, ""),
        ("file.lseek", "lseek", T7, ""),
    ]:
        b.append(Benchmark(cname, "file", cname, label, table, unit="op", root_only=root))
    for cname, label in [("copy.rw_8k.cached", "copy 1 MiB, 8 KiB read/write, cache to cache"),
                         ("copy.rw_8k.disk", "copy 1 MiB, 8 KiB read/write, disk to disk"),
                         ("copy.rw_1m.cached", "copy 1 MiB, one 1 MiB read/write, cached"),
                         ("copy.copy_file_range.cached", "copy 1 MiB, copy_file_range, cached"),
                         ("copy.copy_file_range.disk", "copy 1 MiB, copy_file_range, disk to disk")]:
        b.append(Benchmark(cname, "copy", cname, label, T8, unit="copy"))
    for cname, label in [("proc.fork_exit", "fork + exit + wait"), ("proc.fork_exec", "fork + exec + wait")]:
        b.append(Benchmark(cname, "proc", cname, label, "lmbench lat_proc", unit="process"))
    return b


BENCHMARKS: list[Benchmark] = _build()
BY_NAME: dict[str, Benchmark] = {b.name: b for b in BENCHMARKS}
GROUPS: list[str] = list(dict.fromkeys(b.group for b in BENCHMARKS))


def select(patterns: list[str] | None) -> tuple[list[Benchmark], list[str]]:
    """The benchmarks matching any of the patterns (a full name, a group such as `ctx`, a prefix
    such as `ctx.thread`, or a glob such as `*.cached`), in suite order; and the patterns that
    matched nothing."""
    if not patterns:
        return list(BENCHMARKS), []
    chosen: set[str] = set()
    unknown: list[str] = []
    for pat in patterns:
        hits = [b.name for b in BENCHMARKS
                if b.name == pat or b.name.startswith(pat + ".") or fnmatch.fnmatchcase(b.name, pat)]
        if not hits:
            unknown.append(pat)
        chosen.update(hits)
    return [b for b in BENCHMARKS if b.name in chosen], unknown
