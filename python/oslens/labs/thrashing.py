"""Lab 1, thrashing (Salahi & Tarzia, Experiment 1, on Linux): row- vs column-wise sums over a
file-backed MAP_SHARED matrix of floats with MADV_RANDOM, under a cgroup memory cap.

The model: with MADV_RANDOM nothing is read ahead, so every first touch of an evicted page is
one major fault. A row walk touches each page once: faults = pages of the matrix. A column walk
touches one page per row (rows of 4000 bytes: almost every row its own page); when one column
touches more pages than the cap holds, LRU has evicted each page before the next column comes
back to it, so every column faults on all its pages again. When a column fits under the cap
(the "fits" matrix: fewer, longer rows) the walk faults each page about once."""

from __future__ import annotations

import math
import os
from pathlib import Path

from oslens.labs import plot, runner
from oslens.labs.lab import Expectation, Lab, Question

ELEM = 4  # float, as in the paper's scalar1/scalar2
MiB = 1 << 20

SIZES = {
    # rows, cols of the thrashing matrix; the "fits" matrix has the same bytes, rows short enough
    # that one column's pages fit under the cap; columns sampled by the column walk
    True: {"rows": 5000, "cols": 1000, "cap_bytes": 8 * MiB, "columns": 3, "fits_rows": 1000, "fits_cols": 5000},
    False: {"rows": 100000, "cols": 1000, "cap_bytes": 128 * MiB, "columns": 3, "fits_rows": 10000, "fits_cols": 10000},
}


def params(quick: bool, variant: str = "default", advice: str = "random") -> dict:
    p = dict(SIZES[bool(quick)])
    p.update(page=os.sysconf("SC_PAGE_SIZE"), elem=ELEM, advice=advice, quick=bool(quick), variant=variant)
    return p


def matrix_pages(rows: int, cols: int, elem: int, page: int) -> int:
    return math.ceil(rows * cols * elem / page)


def column_pages(rows: int, cols: int, elem: int, page: int, j: int = 0) -> int:
    """Distinct pages one column walk touches."""
    stride = cols * elem
    return len({(i * stride + j * elem) // page for i in range(rows)})


def row_page_pairs(rows: int, cols: int, elem: int, page: int) -> int:
    """Sum over rows of the pages each row spans. A column walk whose columns fit under the cap
    faults once per (row, page) pair: a page shared by the end of row i and the start of row i+1
    is needed by the first columns and again by the last, and is evicted in between."""
    stride = cols * elem
    return sum((i * stride + stride - 1) // page - (i * stride) // page + 1 for i in range(rows))


def rows_before_thrashing(cap_bytes: int, cols: int, elem: int, page: int) -> int:
    """The most rows whose column still fits under the cap: each row takes min(row, page) of it."""
    return int(cap_bytes // page * page / min(cols * elem, page))


def model(p: dict) -> dict:
    page, elem = p["page"], p["elem"]
    cap_pages = p["cap_bytes"] // page
    col = column_pages(p["rows"], p["cols"], elem, page)
    fits_col = column_pages(p["fits_rows"], p["fits_cols"], elem, page)
    return {
        "pages": matrix_pages(p["rows"], p["cols"], elem, page),
        "cap_pages": cap_pages,
        "column_pages": col,
        "thrashes": col > cap_pages,
        "fits_pages": matrix_pages(p["fits_rows"], p["fits_cols"], elem, page),
        "fits_faults": row_page_pairs(p["fits_rows"], p["fits_cols"], elem, page),
        "fits_column_pages": fits_col,
        "rows_before_thrashing": rows_before_thrashing(p["cap_bytes"], p["cols"], elem, page),
    }


def expect(p: dict, results: dict | None) -> dict:
    m = model(p)
    r = (results or {}).get("results") or {}
    mib = p["rows"] * p["cols"] * p["elem"] / MiB
    per_col = r.get("col_majflt_per_column")
    return {
        "row_major_faults": Expectation(
            m["pages"], 0.03,
            f"one major fault per page: {mib:.1f} MiB / {p['page']} B pages = {m['pages']} (MADV_RANDOM reads no neighbours)",
            r.get("row_majflt")),
        "col_major_faults_per_column": Expectation(
            m["column_pages"], 0.05,
            f"a column touches {m['column_pages']} pages (one per {p['cols'] * p['elem']}-byte row), more than the "
            f"{m['cap_pages']} the cap holds, so LRU evicted each before the next column needs it again",
            per_col),
        "col_walk_total_faults": Expectation(
            m["column_pages"] * p["cols"], 0.05,
            f"{p['cols']} columns × {m['column_pages']} faults each (extrapolated from the sampled columns)",
            per_col * p["cols"] if per_col is not None else None),
        "fits_walk_major_faults": Expectation(
            m["fits_faults"], 0.05,
            f"a column of the {p['fits_rows']}×{p['fits_cols']} matrix touches {m['fits_column_pages']} pages, "
            f"within the cap's {m['cap_pages']}: each (row, page) pair faults once, {m['fits_pages']} pages + "
            f"{m['fits_faults'] - m['fits_pages']} pages shared by two rows, needed at the first and the last columns",
            r.get("fits_majflt")),
        "rows_before_thrashing": Expectation(
            m["rows_before_thrashing"], 0.25,
            f"a column fits while its pages fit: {p['cap_bytes'] // MiB} MiB cap / "
            f"{min(p['cols'] * p['elem'], p['page'])} B per row (the program's own pages take a little of the cap)"),
    }


def walk(ctx, label, data: Path, rows, cols, order, cgroup, advice, columns=None):
    argv = [runner.program("matrix_sum"), "--file", str(data), "--rows", str(rows), "--cols", str(cols),
            "--walk", order, "--advice", advice, "--cgroup", str(cgroup)]
    if columns is not None:
        argv += ["--columns", str(columns)]
    res = ctx.run(argv, label)
    out = res.json()
    tf = runner.trace_faults(res.trace, res.pid, out["base"], out["base"] + out["bytes"])
    out["trace_faults"] = tf["count"] if tf else None
    out["timeline"] = tf["timeline"] if tf else []
    out["kernel"] = runner.kernel_tier(res.trace)
    return out


def data_dir_hint() -> Path:
    """Where a lab's data goes by default (under the current directory), for its device's settings."""
    return Path.cwd()


def run(ctx, p: dict) -> dict:
    m = model(p)
    ctx.say(f"matrix {p['rows']}×{p['cols']} floats = {p['rows'] * p['cols'] * p['elem'] / MiB:.1f} MiB "
            f"({m['pages']} pages of {p['page']} B), MAP_SHARED from a file, MADV_{p['advice'].upper()}; "
            f"memory cap {p['cap_bytes'] // MiB} MiB ({m['cap_pages']} pages)")
    cg = ctx.cap_memory(p["cap_bytes"])
    ctx.say(f"cgroup {cg} (memory.limit_in_bytes / memory.max = {p['cap_bytes']}), made through the control layer")
    data = ctx.dir / "matrix.f32"
    fits_data = ctx.dir / "matrix-fits.f32"
    ctx.say("\nrow walk ...")
    row = walk(ctx, "row", data, p["rows"], p["cols"], "row", cg, p["advice"])
    ctx.say(f"column walk, first {p['columns']} of {p['cols']} columns ...")
    col = walk(ctx, "col", data, p["rows"], p["cols"], "col", cg, p["advice"], p["columns"])
    ctx.say(f"column walk of the {p['fits_rows']}×{p['fits_cols']} matrix (same bytes, shorter columns) ...")
    fits = walk(ctx, "fits", fits_data, p["fits_rows"], p["fits_cols"], "col", cg, p["advice"])
    usage = ctx.cap_usage()
    per_col = sum(col["per_column_majflt"]) / max(len(col["per_column_majflt"]), 1)
    col_s = col["elapsed_ns"] / 1e9 / max(p["columns"], 1)
    results = {
        "row_majflt": row["majflt"], "row_minflt": row["minflt"], "row_trace_faults": row["trace_faults"],
        "row_s": row["elapsed_ns"] / 1e9,
        "col_majflt": col["majflt"], "col_minflt": col["minflt"], "col_trace_faults": col["trace_faults"],
        "col_per_column": col["per_column_majflt"], "col_majflt_per_column": per_col, "col_s_per_column": col_s,
        "fits_majflt": fits["majflt"], "fits_minflt": fits["minflt"], "fits_trace_faults": fits["trace_faults"],
        "fits_s": fits["elapsed_ns"] / 1e9, "col_timeline": col["timeline"], "kernel": row["kernel"],
        "cap_peak_bytes": usage.get("peak_bytes"), "cap_hits": usage.get("limit_hits"),
    }
    _observations(ctx, p, m, results)
    return results


def _observations(ctx, p, m, r) -> None:
    say = ctx.say
    say("\nObservations (faults during the walk only; rusage = the program's getrusage, "
        "trace = page faults oslens recorded on the matrix's addresses)")
    say(f"  {'walk':<28}{'majflt':>10}{'minflt':>8}{'trace':>10}{'seconds':>9}{'model':>10}")
    say(f"  {'row':<28}{plot.count(r['row_majflt']):>10}{plot.count(r['row_minflt']):>8}{plot.count(r['row_trace_faults']):>10}"
        f"{r['row_s']:>9.2f}{plot.count(m['pages']):>10}")
    say(f"  {'column, %d columns' % p['columns']:<28}{plot.count(r['col_majflt']):>10}{plot.count(r['col_minflt']):>8}"
        f"{plot.count(r['col_trace_faults']):>10}{r['col_s_per_column'] * p['columns']:>9.2f}"
        f"{plot.count(m['column_pages'] * p['columns']):>10}")
    say(f"  {'column, fits (%d×%d)' % (p['fits_rows'], p['fits_cols']):<28}{plot.count(r['fits_majflt']):>10}"
        f"{plot.count(r['fits_minflt']):>8}{plot.count(r['fits_trace_faults']):>10}{r['fits_s']:>9.2f}{plot.count(m['fits_faults']):>10}")
    if r["kernel"] and r["col_trace_faults"] is None:
        say(f"  (the trace has no fault events: {r['kernel']})")
    say(f"\n  per column (rusage majflt): {', '.join(plot.count(x) for x in r['col_per_column'])}"
        f"  — model {m['column_pages']} each")
    full = r["col_s_per_column"] * p["cols"]
    say(f"  whole column walk, extrapolated: {p['cols']} × {r['col_majflt_per_column']:,.0f} = "
        f"{r['col_majflt_per_column'] * p['cols']:,.0f} major faults, about {full / 60:,.1f} minutes "
        f"(the row walk took {r['row_s']:.1f} s)")
    if r["col_timeline"]:
        say(f"  column-walk faults over time (trace, {len(r['col_timeline'])} buckets): "
            f"{plot.sparkline(r['col_timeline'])}")
    say("\n  major faults per walk:")
    for line in plot.bars([("row", r["row_majflt"]), ("column (extrapolated)", r["col_majflt_per_column"] * p["cols"]),
                           ("column, fits", r["fits_majflt"])], width=36):
        say(line)
    if r.get("cap_peak_bytes"):
        say(f"\n  the cap: peak usage {r['cap_peak_bytes'] / MiB:.1f} MiB of {p['cap_bytes'] // MiB} MiB, "
            f"limit reached {plot.count(r['cap_hits'])} times")


LAB = Lab(
    number=1, slug="thrashing", title="Thrashing: row- vs column-wise sums under a memory cap",
    topic="virtual memory, paging", minutes=40,
    requires=("root", "memory-cgroup", "compiler", "disk"), optional=("collector",),
    sheet="01-thrashing.md",
    questions=[
        Question("row_major_faults", "major faults of the row walk", "faults"),
        Question("col_major_faults_per_column", "major faults per column of the column walk", "faults"),
        Question("col_walk_total_faults", "major faults of the whole column walk (all columns)", "faults"),
        Question("fits_walk_major_faults", "major faults of the column walk over the 'fits' matrix", "faults"),
        Question("rows_before_thrashing", "the most rows a column may have before the column walk thrashes", "rows"),
    ],
    predictions=("row_major_faults", "col_major_faults_per_column"),
    run=run, expect=expect, params=params,
    variants={"default": "MADV_RANDOM: one page read per fault",
              "zram": "anonymous memory with swap on zram: swapped out and in instead of OOM-killed (lab 3)"},
    variant_modules={"zram": "oslens.labs.thrashing_zram"},
)
