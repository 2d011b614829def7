"""Lab 2, the read-ahead surprise: lab 1's walks without MADV_RANDOM. A major fault on a shared
file mapping then reads a whole window around the faulting page (mm/filemap.c
do_sync_mmap_readahead: ra_pages = the device's read_ahead_kb, starting ra_pages/2 before the
fault). The column walk moves forward one page per row, so only the half of the window ahead of
the fault is used before the next fault: about D / (W/2) major faults per column of D pages,
reading about 2·D pages — most of them pages the cap had evicted before (refaults), far more
refaults than major faults. Whether that makes the walk slower depends on what a read costs:
on a VM whose disk the host caches, big reads are cheap."""

from __future__ import annotations

from oslens.errors import OslensError
from oslens.labs import preflight, thrashing
from oslens.labs.lab import Expectation, Lab, Question


WALK_ATTEMPTS = 3


def params(quick: bool, variant: str = "default") -> dict:
    p = thrashing.params(quick, variant, advice="normal")
    p["read_ahead_kb"] = preflight.read_ahead_kb(thrashing.data_dir_hint(), preflight.sysfs.default_root())
    return p


def _read_ahead(p: dict, results: dict | None) -> int:
    """The read_ahead_kb the run saw (of its data's device), else the current directory's."""
    return ((results or {}).get("params") or {}).get("read_ahead_kb") or p.get("read_ahead_kb") or 0


def window_pages(p: dict) -> int:
    return max(1, (p.get("read_ahead_kb") or 0) * 1024 // p["page"])


def run(ctx, p: dict) -> dict:
    p["read_ahead_kb"] = preflight.read_ahead_kb(ctx.dir, preflight.sysfs.default_root()) or 0
    m = thrashing.model(p)
    w = window_pages(p)
    ctx.say(f"matrix {p['rows']}×{p['cols']} floats ({m['pages']} pages), MAP_SHARED, no madvise: read-around of "
            f"read_ahead_kb = {p['read_ahead_kb']} KiB = {w} pages per major fault; cap {p['cap_bytes'] >> 20} MiB")
    cg = ctx.cap_memory(p["cap_bytes"])
    data = ctx.dir / "matrix.f32"
    out = {}
    for advice in ("normal", "random"):
        col, before = _walk(ctx, f"col-{advice}", data, p, cg, advice)
        out[f"{advice}_col_majflt_per_column"] = col["majflt"] / p["columns"]
        out[f"{advice}_col_minflt"] = col["minflt"]
        out[f"{advice}_col_pages_read_per_column"] = col["read_bytes"] / p["page"] / p["columns"]
        out[f"{advice}_col_refaults"] = (ctx.refaults() or 0) - (before or 0)
        out[f"{advice}_col_s_per_column"] = col["elapsed_ns"] / 1e9 / p["columns"]
    n, r = "normal", "random"
    ctx.say(f"\nObservations (column walk, {p['columns']} columns of {m['column_pages']} pages; per column)")
    ctx.say(f"  {'advice':<10}{'majflt':>9}{'pages read':>12}{'refaults':>10}{'seconds':>9}")
    for a in (n, r):
        ctx.say(f"  {a:<10}{out[f'{a}_col_majflt_per_column']:>9,.0f}{out[f'{a}_col_pages_read_per_column']:>12,.0f}"
                f"{out[f'{a}_col_refaults'] / p['columns']:>10,.0f}{out[f'{a}_col_s_per_column']:>9.3f}")
    per = out[f"{n}_col_pages_read_per_column"] / max(out[f"{n}_col_majflt_per_column"], 1)
    ctx.say(f"  without MADV_RANDOM one major fault read {per:,.0f} pages (the window: {w}); "
            f"the model: {m['column_pages'] / (w / 2):,.1f} faults and {2 * m['column_pages']:,} pages per column")
    faster = out[f"{n}_col_s_per_column"] < out[f"{r}_col_s_per_column"]
    out["slower_with_readahead"] = not faster
    ctx.say(f"  the column walk got {'faster' if faster else 'slower'} with read-ahead here "
            f"({out[f'{n}_col_s_per_column']:.3f} s vs {out[f'{r}_col_s_per_column']:.3f} s a column): "
            + ("large reads are cheap on this disk" if faster else "it reads more pages than it uses"))
    _why(ctx, out, w, ctx.dir, p)
    return out


def _walk(ctx, label: str, data, p: dict, cg, advice: str) -> tuple[dict, int | None]:
    """The column walk and the cgroup's refault count before it. At the quick size the window can
    be as large as the cap (8 MiB on the development VM): a window's pages, locked while read,
    then fill it, and the cgroup's OOM killer may kill the walk (seen once in a dozen CI runs).
    The walk is run again then, up to WALK_ATTEMPTS times, and the run says so."""
    for attempt in range(1, WALK_ATTEMPTS + 1):
        kills, before = ctx.cap_usage().get("oom_kills") or 0, ctx.refaults()
        try:
            return thrashing.walk(ctx, label, data, p["rows"], p["cols"], "col", cg, advice, p["columns"]), before
        except OslensError:
            if attempt == WALK_ATTEMPTS or (ctx.cap_usage().get("oom_kills") or 0) <= kills:
                raise
            ctx.say(f"  the cgroup's OOM killer killed the {advice} walk (a read-ahead window's pages, locked while "
                    f"read, filled the {p['cap_bytes'] >> 20} MiB cap): running it again")
    raise AssertionError("unreachable")


def _why(ctx, out: dict, w: int, data, p: dict) -> None:
    """The measured reason: what one read of a window costs on this disk against W/2 reads of a
    page (read-ahead uses half of each window), timed with O_DIRECT on a probe file beside the
    data (preflight.read_costs)."""
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
    m = thrashing.model(p)
    w = window_pages(p)
    d = m["column_pages"]
    maj = r.get("normal_col_majflt_per_column")
    read = r.get("normal_col_pages_read_per_column")
    return {
        "readaround_pages": Expectation(w, 0.3, f"read_ahead_kb {p['read_ahead_kb']} KiB / {p['page']} B pages: the "
                                                "window read around each major fault",
                                        read / maj if read and maj else None),
        "col_major_faults_per_column": Expectation(d / (w / 2), 0.5, f"the walk moves one page per row: only the "
                                                   f"{w // 2} pages ahead of the fault serve it, {d} / {w // 2}", maj),
        "col_pages_read_per_column": Expectation(2 * d, 0.4, f"each fault reads {w} pages for {w // 2} used: "
                                                 f"twice the column's {d} pages", read),
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
