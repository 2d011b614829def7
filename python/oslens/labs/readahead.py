"""Lab 2, the read-ahead surprise: lab 1's walks without MADV_RANDOM.

The model, from Linux 6.18's mm/filemap.c and mm/readahead.c. A major fault on a shared file
mapping (no page in the cache) does a synchronous read-around (do_sync_mmap_readahead): W =
read_ahead_kb pages starting W/2 before the fault, with the page W/4 before its end marked
PG_readahead. When the walk touches that page (a minor fault: filemap_fault found it cached),
do_async_mmap_readahead → page_cache_async_ra reads the next W pages and marks their first page,
and so on: the window stays a whole window ahead of a forward walk and is never smaller (for mmap
the read-around starts at W; get_next_ra_size keeps it at W). The column walk moves forward one
page per row, so a column of D pages takes one major fault (at its first page) and reads about D
pages: the first window's back half (none when the column starts at page 0) plus the last window
past the column's end (none past the end of the file). The cgroup counts most re-read pages as
refaults: the cap evicted them during the previous column. Asynchronous windows are read in ever
larger folios (up to 2 MiB) and the cap reclaims untouched read-ahead folios first, so now and then
one just ahead of the walk is evicted before the walk gets there: it faults there and reads around
again (the few extra major faults some runs see; traced in docs/labs/02-read-ahead.md). mmap_miss turns read-around off only after MMAP_LOTSAMISS (100) more misses than hits."""

from __future__ import annotations

import mmap
import os
import resource
from pathlib import Path

from oslens.errors import OslensError
from oslens.labs import preflight, thrashing
from oslens.labs.lab import Expectation, Lab, Question


WALK_ATTEMPTS = 3
MiB = 1 << 20
# Lab 1's sizes, but at the quick size a column longer than the cap holds windows: with a cap of
# one window (lab 1's 8 MiB) the pages read ahead were evicted before the walk reached them, and a
# window's locked pages once filled the cap (an OOM kill). 32 MiB is four 8 MiB windows.
QUICK = {"rows": 20000, "cap_bytes": 32 * MiB}
MIN_CAP_WINDOWS = 4  # a cap must hold this many read-ahead windows, or the run refuses
# How far this VM's runs were from the model (3+ runs of each size, docs/labs/02-read-ahead.md):
# up to 6 extra major faults per column (read-ahead evicted before use) and 30% more pages read.
EXTRA_FAULTS_SEEN = 7
PAGES_READ_BAND = 0.35


def params(quick: bool, variant: str = "default") -> dict:
    p = thrashing.params(quick, variant, advice="normal")
    if quick:
        p.update(QUICK)
    p["read_ahead_kb"] = preflight.read_ahead_kb(thrashing.data_dir_hint(), preflight.sysfs.default_root())
    return p


def _read_ahead(p: dict, results: dict | None) -> int:
    """The read_ahead_kb the run saw (of its data's device), else the current directory's."""
    return ((results or {}).get("params") or {}).get("read_ahead_kb") or p.get("read_ahead_kb") or 0


def window_pages(p: dict) -> int:
    return max(1, (p.get("read_ahead_kb") or 0) * 1024 // p["page"])


def read_ahead_walk(first: int, last: int, file_pages: int, w: int) -> tuple[int, int]:
    """(major faults, pages read) of a walk forward from page `first` to page `last` of a cold
    file whose read-ahead keeps up: one read-around at `first` ([first - W/2, first + W/2),
    marker at W/4 before its end), then one asynchronous window of W pages each time the walk
    reaches a marker (the first page of the window after it), none past the end of the file."""
    start = max(0, first - w // 2)
    end, marker = start + w, start + w - w // 4
    while marker <= last:
        marker, end = end, end + w
    return 1, min(end, file_pages) - start


def column_model(p: dict) -> dict:
    """The walk of the sampled columns under the model: per column, major faults and pages read."""
    w, page, stride = window_pages(p), p["page"], p["cols"] * p["elem"]
    file_pages = thrashing.matrix_pages(p["rows"], p["cols"], p["elem"], page)
    walks = [read_ahead_walk(j * p["elem"] // page, ((p["rows"] - 1) * stride + j * p["elem"]) // page, file_pages, w)
             for j in range(p["columns"])]
    return {"faults": sum(f for f, _ in walks) / len(walks), "pages_read": sum(r for _, r in walks) / len(walks),
            "file_pages": file_pages}


def refuse_small_cap(p: dict, w: int) -> None:
    """A cap of less than MIN_CAP_WINDOWS windows evicts what was read ahead before the walk
    uses it, and a window's pages, locked while read, can fill it (the cgroup's OOM killer)."""
    if w * p["page"] * MIN_CAP_WINDOWS > p["cap_bytes"]:
        raise OslensError(
            f"read_ahead_kb {p['read_ahead_kb']} KiB is more than a quarter of the {p['cap_bytes'] // MiB} MiB cap, "
            f"so the cap cannot hold the {MIN_CAP_WINDOWS} read-ahead windows this lab needs; lower read_ahead_kb "
            f"of the data's device to {p['cap_bytes'] // MIN_CAP_WINDOWS // 1024} or less, or run the full size", 1)


def run(ctx, p: dict) -> dict:
    p["read_ahead_kb"] = preflight.read_ahead_kb(ctx.dir, preflight.sysfs.default_root()) or 0
    w = window_pages(p)
    refuse_small_cap(p, w)
    cm = column_model(p)
    ctx.say(f"matrix {p['rows']}×{p['cols']} floats ({cm['file_pages']} pages), MAP_SHARED, no madvise: "
            f"read_ahead_kb = {p['read_ahead_kb']} KiB = {w} pages a window; cap {p['cap_bytes'] >> 20} MiB")
    cg = ctx.cap_memory(p["cap_bytes"])
    data = ctx.dir / "matrix.f32"
    out = {}
    for advice in ("normal", "random"):
        col, before = _walk(ctx, f"col-{advice}", data, p, cg, advice)
        after = _counters(ctx)
        out[f"{advice}_col_majflt_per_column"] = col["majflt"] / p["columns"]
        out[f"{advice}_col_minflt"] = col["minflt"]
        out[f"{advice}_col_pages_read_per_column"] = col["read_bytes"] / p["page"] / p["columns"]
        out[f"{advice}_col_refaults"] = after["refaults"] - before["refaults"]
        out[f"{advice}_col_cgroup_majflt"] = after["pgmajfault"] - before["pgmajfault"]
        out[f"{advice}_col_s_per_column"] = col["elapsed_ns"] / 1e9 / p["columns"]
    out["one_fault_pages"], out["one_fault_majflt"] = one_fault_read(data, p["page"])
    _observations(ctx, p, out, w, cm)
    _why(ctx, out, w, ctx.dir, p)
    return out


def _counters(ctx) -> dict:
    """The cap's refaults and its no-page major faults (memory.stat pgmajfault: filemap_fault
    counts one only where no page was in the cache; getrusage also counts a fault that waited for
    a page being read)."""
    return {"refaults": ctx.refaults() or 0, "pgmajfault": ctx.memory_stat("pgmajfault") or 0}


def one_fault_read(data: Path, page: int) -> tuple[int, int]:
    """(pages read, major faults) of one touch of the middle page of the cold file, by this
    process: the synchronous read-around alone, W pages ([p - W/2, p + W/2))."""
    fd = os.open(data, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        with mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ) as m:
            read0, maj0 = _read_bytes(), resource.getrusage(resource.RUSAGE_SELF).ru_majflt
            m[size // page // 2 * page]
            read1, maj1 = _read_bytes(), resource.getrusage(resource.RUSAGE_SELF).ru_majflt
    finally:
        os.close(fd)
    return (read1 - read0) // page, maj1 - maj0


def _read_bytes() -> int:
    """Bytes the kernel read from storage for this process (/proc/self/io)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == "read_bytes":
            return int(value)
    raise OslensError("/proc/self/io has no read_bytes: this kernel does not account task I/O", 1)


def _observations(ctx, p: dict, out: dict, w: int, cm: dict) -> None:
    n, r = "normal", "random"
    d = thrashing.model(p)["column_pages"]
    ctx.say(f"\nObservations (column walk, {p['columns']} columns of {d} pages; per column; majflt = getrusage, "
            f"no-page = the cgroup's memory.stat pgmajfault)")
    ctx.say(f"  {'advice':<10}{'majflt':>9}{'no-page':>9}{'pages read':>12}{'refaults':>10}{'seconds':>9}")
    for a in (n, r):
        ctx.say(f"  {a:<10}{out[f'{a}_col_majflt_per_column']:>9,.0f}{out[f'{a}_col_cgroup_majflt'] / p['columns']:>9,.0f}"
                f"{out[f'{a}_col_pages_read_per_column']:>12,.0f}"
                f"{out[f'{a}_col_refaults'] / p['columns']:>10,.0f}{out[f'{a}_col_s_per_column']:>9.3f}")
    ctx.say(f"  one major fault in the middle of the cold file read {out['one_fault_pages']:,} pages "
            f"(the window: {w})")
    ctx.say(f"  the model without MADV_RANDOM: {cm['faults']:g} major fault and {cm['pages_read']:,.0f} pages read per "
            f"column: one read-around at the column's first page, then asynchronous read-ahead a window ahead")
    extra = out[f"{n}_col_majflt_per_column"] - cm["faults"]
    if extra >= 1:
        ctx.say(f"  {extra:,.1f} more major faults per column than the model: the cap evicted a folio read ahead before "
                f"the walk got there, so the walk faulted on it and read around again (see the sheet)")
    faster = out[f"{n}_col_s_per_column"] < out[f"{r}_col_s_per_column"]
    out["slower_with_readahead"] = not faster
    ctx.say(f"  the column walk got {'faster' if faster else 'slower'} with read-ahead here "
            f"({out[f'{n}_col_s_per_column']:.3f} s vs {out[f'{r}_col_s_per_column']:.3f} s a column): "
            + ("large reads are cheap on this disk" if faster else "it reads more pages than it uses"))


def _walk(ctx, label: str, data, p: dict, cg, advice: str) -> tuple[dict, dict]:
    """The column walk and the cap's counters before it (_counters). A window's pages are locked
    while read: where a cap held little more than one (lab 1's 8 MiB at the quick size), they once
    filled it and the cgroup's OOM killer killed the walk (once in a dozen CI runs). The run now
    refuses such caps (refuse_small_cap); should it still happen, the walk is run again, up to
    WALK_ATTEMPTS times, and the run says so."""
    for attempt in range(1, WALK_ATTEMPTS + 1):
        kills, before = ctx.cap_usage().get("oom_kills") or 0, _counters(ctx)
        try:
            return thrashing.walk(ctx, label, data, p["rows"], p["cols"], "col", cg, advice, p["columns"]), before
        except OslensError:
            if attempt == WALK_ATTEMPTS or (ctx.cap_usage().get("oom_kills") or 0) <= kills:
                raise
            ctx.say(f"  the cgroup's OOM killer killed the {advice} walk (a read-ahead window's pages, locked while "
                    f"read, filled the {p['cap_bytes'] >> 20} MiB cap): running it again")
    raise AssertionError("unreachable")


def _why(ctx, out: dict, w: int, data, p: dict) -> None:
    """The measured reason: what one read of a window costs on this disk against single-page
    reads, timed with O_DIRECT on a probe file beside the data (preflight.read_costs). The verdict
    (preflight.read_ahead_verdict, also `oslens lab preflight 2`) charges the window to all W
    pages: asynchronous read-ahead keeps it ahead of the walk, which uses every page."""
    costs = preflight.read_costs(data, p["read_ahead_kb"]) if p["read_ahead_kb"] else None
    if costs is None:
        ctx.say("  (the disk's read costs could not be timed here)")
        return
    slower, text = preflight.read_ahead_verdict(*costs, w)
    out["read_4k_us"], out["read_window_ms"], out["disk_says_slower"] = costs[0] * 1e6, costs[1] * 1e3, slower
    ctx.say(f"  why, measured on this disk (O_DIRECT): {text}")


def expect(p: dict, results: dict | None) -> dict:
    r = (results or {}).get("results") or {}
    p = {**p, "read_ahead_kb": _read_ahead(p, results)}
    w = window_pages(p)
    cm = column_model(p)
    d = thrashing.model(p)["column_pages"]
    return {
        "readaround_pages": Expectation(w, 0.02, f"read_ahead_kb {p['read_ahead_kb']} KiB / {p['page']} B pages: the "
                                                 "window read around a major fault, W/2 on each side",
                                        r.get("one_fault_pages"), widen=False),
        "col_major_faults_per_column": Expectation(
            cm["faults"], 0.0, f"one read-around at the column's first page; touching its marked page W/4 before its "
                               f"end reads the next window, whose first page is marked, and so on: asynchronous "
                               f"read-ahead stays a window ahead of the walk (up to {EXTRA_FAULTS_SEEN} more seen where "
                               f"the cap evicted a folio read ahead before the walk got there)",
            r.get("normal_col_majflt_per_column"), abs_band=EXTRA_FAULTS_SEEN, widen=False),
        "col_pages_read_per_column": Expectation(
            cm["pages_read"], PAGES_READ_BAND, f"the column's {d} pages, each read once, plus the first window's back "
                                               f"half and the last window's overshoot (none: the column starts at page 0 "
                                               f"and ends at the end of the file)",
            r.get("normal_col_pages_read_per_column"), widen=False),
    }


LAB = Lab(
    number=2, slug="read-ahead", title="The read-ahead surprise: thrashing without MADV_RANDOM",
    topic="virtual memory, read-ahead", minutes=30,
    requires=("root", "memory-cgroup", "compiler", "disk", "readahead"), optional=("collector", "readahead-slower"),
    sheet="02-read-ahead.md",
    questions=[
        Question("readaround_pages", "pages read around one major fault", "pages"),
        Question("col_major_faults_per_column", "major faults per column without MADV_RANDOM", "faults"),
        Question("col_pages_read_per_column", "pages read from storage per column without MADV_RANDOM", "pages"),
    ],
    predictions=("col_major_faults_per_column",),
    run=run, expect=expect, params=params,
)
