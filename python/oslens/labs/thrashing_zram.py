"""Lab 1, variant zram: thrashing with swap. The same matrix of floats, in anonymous memory, under
the same cap, with swap on a zram device (a compressed RAM disk) set up for the run through the
control layer (control/zram.py: journaled, swapoff and reset after). Without swap the program
would be OOM-killed (lab 3); with it, pages over the cap are swapped out and every touch of one
swapped out is a major fault that swaps it in.

The model: filling N pages under a cap of C pages swaps out N - C. The row walk then needs
the pages in the order they were written, and the ones still resident are the newest: LRU
evicts next exactly the page the walk will need soonest, so every page faults (N swap-ins), and
each swap-in, the cap being full, pushes one page out (zram frees a slot when its page is read
back, so going out again is a new write). A column walk faults on every page it touches, as the
file-backed walk does. zram reads a page synchronously, without swap read-ahead."""

from __future__ import annotations

import math

from oslens.control import zram
from oslens.errors import OslensError
from oslens.labs import plot, runner, thrashing
from oslens.labs.lab import Expectation, Question, Variant

MiB = 1 << 20
SWAP_MARGIN = 32 * MiB  # beyond the matrix: the program's own pages, and room for zram's rounding

QUESTIONS = [
    Question("fill_swap_outs", "pages swapped out while the program fills the matrix", "pages"),
    Question("row_swap_ins", "pages swapped in by the row walk after the fill", "pages"),
    Question("row_swap_outs_per_swap_in", "pages swapped out per page swapped in during the row walk"),
    Question("col_swap_ins_per_column", "pages swapped in per column of the column walk", "pages"),
    Question("oom_kills", "the cgroup's oom_kill count (lab 3 had 1 without swap)"),
]
PREDICTIONS = ("row_swap_ins", "oom_kills")
REQUIRES = ("root", "memory-cgroup", "compiler", "zram-swap")


def swap_bytes(p: dict) -> int:
    return math.ceil((p["rows"] * p["cols"] * p["elem"] + SWAP_MARGIN) / MiB) * MiB


def model(p: dict) -> dict:
    m = thrashing.model(p)
    return {**m, "fill_swap_outs": max(m["pages"] - m["cap_pages"], 0)}


def expect(p: dict, results: dict | None) -> dict:
    m = model(p)
    r = (results or {}).get("results") or {}
    cap_mib = p["cap_bytes"] // MiB
    return {
        "fill_swap_outs": Expectation(
            m["fill_swap_outs"], 0.05,
            f"{m['pages']} pages written under a {cap_mib} MiB cap of {m['cap_pages']} pages: all but the cap's "
            "worth leave for swap (the program's own pages take a little of the cap)", r.get("fill_pswpout")),
        "row_swap_ins": Expectation(
            m["pages"], 0.05,
            f"every one of the {m['pages']} pages: the walk needs the oldest pages first and the resident ones are "
            "the newest, so LRU evicts each page before the walk comes to it", r.get("row_pswpin")),
        "row_swap_outs_per_swap_in": Expectation(
            1.0, 0.05, "the cap is full, so each page swapped in pushes one out, written again (zram freed its slot "
                       "when the page came back)", r.get("row_out_per_in")),
        "col_swap_ins_per_column": Expectation(
            m["column_pages"], 0.05,
            f"a column touches {m['column_pages']} pages (one per {p['cols'] * p['elem']}-byte row), more than "
            f"the {m['cap_pages']} the cap holds: each was swapped out since the last column", r.get("col_pswpin_per_column")),
        "oom_kills": Expectation(
            0, 0.0, "with swap the kernel pages anonymous memory out instead of killing (lab 3 had no swap)",
            r.get("oom_kills"), widen=False),
    }


def run(ctx, p: dict) -> dict:
    m = model(p)
    size = swap_bytes(p)
    swap = ctx.swap_on_zram(size)
    ctx.say(f"swap on {swap['device']}: zram, {size // MiB} MiB, compressor {swap['compressor']}, priority "
            f"{swap['priority']} (set up through the control layer, swapoff and reset after)")
    ctx.say(f"matrix {p['rows']}×{p['cols']} floats = {p['rows'] * p['cols'] * p['elem'] / MiB:.1f} MiB "
            f"({m['pages']} pages) of anonymous memory (MADV_NOHUGEPAGE, MADV_RANDOM); memory cap "
            f"{p['cap_bytes'] // MiB} MiB ({m['cap_pages']} pages)")
    cg = ctx.cap_memory(p["cap_bytes"])
    ctx.say(f"cgroup {cg}, made through the control layer; the program joins it before it fills the matrix")
    ctx.say(f"\nfill, row walk, column walk of the first {p['columns']} columns, in one program ...")
    res = ctx.run([runner.program("anon_matrix"), "--rows", str(p["rows"]), "--cols", str(p["cols"]),
                   "--columns", str(p["columns"]), "--cgroup", str(cg)], "anon")
    usage = ctx.cap_usage()
    if res.status != 0:
        raise OslensError(f"anon_matrix exited {res.status} (oom_kill {usage.get('oom_kills')}): "
                          f"{res.stderr.strip()[-200:] or 'no message'}", 1)
    out = res.json()
    phases = ("fill", "row", "col")
    traced = runner.trace_fault_counts(res.trace, res.pid, out["base"], out["base"] + out["bytes"],
                                       [(out[k]["t0"], out[k]["t1"]) for k in phases])
    row, col = out["row"], out["col"]
    results = {
        **{f"{k}_{f}": out[k][f] for k in phases for f in ("majflt", "minflt", "pswpin", "pswpout")},
        **{f"{k}_s": (out[k]["t1"] - out[k]["t0"]) / 1e9 for k in phases},
        **{f"{k}_trace_faults": (traced[i] if traced else None) for i, k in enumerate(phases)},
        "row_out_per_in": row["pswpout"] / row["pswpin"] if row["pswpin"] else None,
        "col_per_column": out["per_column_majflt"], "col_pswpin_per_column": col["pswpin"] / max(p["columns"], 1),
        "oom_kills": usage.get("oom_kills"), "exit": res.status, "cap_peak_bytes": usage.get("peak_bytes"),
        "cgroup_pgmajfault": ctx.memory_stat("pgmajfault"), "swap_peak_bytes": ctx.swap_peak(),
        "zram": {**swap, **zram_usage(swap)}, "kernel": runner.kernel_tier(res.trace),
    }
    _observations(ctx, p, m, results)
    return results


def zram_usage(swap: dict) -> dict:
    return zram.usage(swap["device"].rsplit("/", 1)[-1])


def _observations(ctx, p, m, r) -> None:
    say = ctx.say
    say("\nObservations (swap-in / swap-out = /proc/vmstat pswpin / pswpout over the phase; rusage = the "
        "program's getrusage; trace = page faults oslens recorded on the matrix in the phase)")
    say(f"  {'phase':<22}{'swap-in':>9}{'swap-out':>10}{'majflt':>9}{'minflt':>9}{'trace':>9}{'seconds':>9}  model")
    models = {"fill": f"{plot.count(m['fill_swap_outs'])} out", "row": f"{plot.count(m['pages'])} in, as many out",
              "col": f"{plot.count(m['column_pages'] * p['columns'])} in"}
    labels = {"fill": "fill (writes)", "row": "row walk", "col": f"column walk, {p['columns']} col."}
    for k in ("fill", "row", "col"):
        say(f"  {labels[k]:<22}{plot.count(r[k + '_pswpin']):>9}{plot.count(r[k + '_pswpout']):>10}{plot.count(r[k + '_majflt']):>9}"
            f"{plot.count(r[k + '_minflt']):>9}{plot.count(r[k + '_trace_faults']):>9}{r[k + '_s']:>9.2f}  {models[k]}")
    say(f"\n  per column (rusage majflt): {', '.join(plot.count(x) for x in r['col_per_column'])} — model {m['column_pages']} each")
    say(f"  the cgroup (memory.stat): {plot.count(r['cgroup_pgmajfault'])} major faults in all; peak memory "
        f"{(r['cap_peak_bytes'] or 0) / MiB:.1f} MiB of {p['cap_bytes'] // MiB} MiB, swap at least "
        f"{(r['swap_peak_bytes'] or 0) / MiB:.1f} MiB at its peak; oom_kill {plot.count(r['oom_kills'])}, exit {r['exit']} "
        "(lab 3, without swap: 137)")
    z = r["zram"]
    if z.get("mem_used_max_bytes") is not None:
        say(f"  zram: at most {z['mem_used_max_bytes'] / MiB:.1f} MiB of RAM held the swapped pages ({z['compressor']}), "
            "outside the cap: swap on zram trades the cap for compression, it does not free memory")
    if r["kernel"] and r["row_trace_faults"] is None:
        say(f"  (the trace has no fault events: {r['kernel']})")
    say("\n  swap-ins per phase:")
    for line in plot.bars([("fill", r["fill_pswpin"]), ("row walk", r["row_pswpin"]),
                                     (f"column walk ({p['columns']})", r["col_pswpin"])], width=36):
        say(line)


VARIANT = Variant(QUESTIONS, PREDICTIONS, REQUIRES, run, expect)
