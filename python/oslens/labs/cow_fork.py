"""Lab 5, copy-on-write fork: after fork(), parent and child share every private page read-only;
the child's first write to a page faults, and the kernel copies that one page (a minor fault:
no disk). Writing N MiB of 4 KiB pages costs N × 256 faults; reading them costs none, because
fork copied the page-table entries of the anonymous mapping (read-only) along with it."""

from __future__ import annotations

import os

from oslens.labs import runner
from oslens.labs.lab import Expectation, Lab, Question

SIZES = {True: 16, False: 256}
OVERHEAD = 16  # the child's own stack and data pages it writes first (measured: 4)


def params(quick: bool, variant: str = "default") -> dict:
    return {"mb": SIZES[bool(quick)], "page": os.sysconf("SC_PAGE_SIZE"), "quick": bool(quick), "variant": variant}


def _child_faults(res, out) -> int | None:
    tf = runner.trace_faults(res.trace, out["child"], out["base"], out["base"] + out["bytes"])
    return tf["count"] if tf else None


def run(ctx, p: dict) -> dict:
    prog = runner.program("cow_fork")
    ctx.say(f"cow_fork: the parent writes {p['mb']} MiB (THP off, {p['page']} B pages), forks; the child writes "
            "or reads all of it")
    out = {}
    for mode in ("write", "read"):
        res = ctx.run([prog, "--mb", str(p["mb"]), "--mode", mode], mode)
        r = res.json()
        out[f"{mode}_minflt"], out[f"{mode}_majflt"] = r["minflt"], r["majflt"]
        out[f"{mode}_ms"] = r["elapsed_ns"] / 1e6
        out[f"{mode}_trace_faults"] = _child_faults(res, r)
    ctx.say("\nObservations (the child's walk only)")
    ctx.say(f"  {'child':<8}{'minflt':>9}{'majflt':>8}{'trace':>9}{'ms':>9}{'model':>9}")
    model = {"write": p["mb"] * (1 << 20) // p["page"], "read": 0}
    for mode in ("write", "read"):
        t = out[f"{mode}_trace_faults"]
        ctx.say(f"  {mode:<8}{out[f'{mode}_minflt']:>9,}{out[f'{mode}_majflt']:>8}{'-' if t is None else f'{t:,}':>9}"
                f"{out[f'{mode}_ms']:>9.1f}{model[mode]:>9,}")
    per = out["write_ms"] * 1e3 / max(out["write_minflt"], 1)
    ctx.say(f"  a copy-on-write fault here: {per:.2f} µs (page copy included)")
    return out


def expect(p: dict, results: dict | None) -> dict:
    r = (results or {}).get("results") or {}
    pages = p["mb"] * (1 << 20) // p["page"]
    return {
        "write_faults": Expectation(pages, 0.02, f"one copy-on-write fault per page: {p['mb']} MiB / {p['page']} B = {pages}",
                                    r.get("write_minflt"), abs_band=OVERHEAD),
        "read_faults": Expectation(0, 0.0, "fork copied the mapping's page-table entries: reads find their pages",
                                   r.get("read_minflt"), abs_band=OVERHEAD),
        "write_major_faults": Expectation(0, 0.0, "the copy is made in memory: no disk, so no major fault",
                                          r.get("write_majflt"), abs_band=0.5),
    }


LAB = Lab(
    number=5, slug="cow-fork", title="Copy-on-write fork", topic="virtual memory, processes", minutes=15,
    requires=("compiler",), optional=("collector",), sheet="05-cow-fork.md",
    questions=[
        Question("write_faults", "page faults of the child writing all the memory", "faults"),
        Question("read_faults", "page faults of the child reading all the memory", "faults"),
        Question("write_major_faults", "how many of the write faults are major", "faults"),
    ],
    predictions=("write_faults", "read_faults"),
    run=run, expect=expect, params=params,
)
