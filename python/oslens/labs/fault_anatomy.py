"""Lab 4, anatomy of a page fault (Salahi & Tarzia's Experiment 2, on Linux): four kinds of
fault — a zero-filled page, a file page read from disk, a copy-on-write copy, a transparent huge
page — each taken many times by workloads/labs/fault_kinds, with the kernel's stack captured at
the tracepoints inside the fault path (page allocation, page-cache insertion, bio submission).
The stacks of each kind are merged into one annotated call tree (calltree.py), and the
tracepoint hits under each path are counted against the model: one allocation per 4 KiB fault,
one page-table page per 2 MiB, one insertion and one bio per page read, one order-9 allocation
per huge page."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from oslens.capture import kstacks
from oslens.errors import OslensError
from oslens.labs import calltree, runner
from oslens.labs.lab import Expectation, Lab, Question

KINDS = ("zero", "file", "cow", "thp")
TITLES = {"zero": "zero-fill (first write to anonymous memory)", "file": "file page read from disk (MADV_RANDOM)",
          "cow": "copy-on-write (a child's write after fork)", "thp": "transparent huge page (MADV_HUGEPAGE)"}
EVENTS = ["kmem/mm_page_alloc", "filemap/mm_filemap_add_to_page_cache", "block/block_bio_queue"]
SIZES = {True: 4, False: 64}  # MiB walked per kind
PROGRAM = "fault_kinds"
ENTRY = "asm_exc_page_fault"
# page-table pages: allocated inside a fault too, but not the page the fault is for
PAGE_TABLES = ("__pte_alloc", "pte_alloc_one")
# faults the program takes around every walk itself (its stack, the clock read): 2 measured
OWN_FAULTS = 2


def params(quick: bool, variant: str = "default") -> dict:
    return {"mb": SIZES[bool(quick)], "page": os.sysconf("SC_PAGE_SIZE"), "quick": bool(quick), "variant": variant}


def _walk(ctx, cap, kind: str, mb: int, armed: bool) -> tuple[dict, list]:
    """Runs one kind's walk, with the capture armed for exactly the walk or not at all (a stack
    per event costs microseconds: the walk's time is taken unarmed)."""
    data = ctx.dir / "fault_kinds.data"
    proc = ctx.start([runner.program(PROGRAM), "--kind", kind, "--mb", str(mb), "--file", str(data)], interactive=True)
    try:
        if proc.stdout.readline().strip() != "ready":
            raise OslensError(f"{PROGRAM} --kind {kind} did not start: {proc.stderr.read().strip()[-300:]}", 1)
        cap.clear()
        if armed:
            cap.arm()
        proc.stdin.write("\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        cap.disarm()
        proc.stdin.write("\n")
        proc.stdin.flush()
    finally:
        ctx.finish_quietly(proc)
    try:
        result = json.loads(line)
    except ValueError as e:
        raise OslensError(f"{PROGRAM} --kind {kind} printed no result: {line.strip()[:200]!r}", 1) from e
    return result, [h for h in cap.hits() if h.pid == result["pid"]]


def _counts(kind: str, hits: list) -> dict:
    allocs = [h.stack for h in hits if h.event == "mm_page_alloc"]
    inserts = [h.stack for h in hits if h.event == "mm_filemap_add_to_page_cache"]
    bios = [h.stack for h in hits if h.event == "block_bio_queue"]
    out = {"hits": len(hits), "in_fault_path": sum(1 for h in hits if ENTRY in h.stack)}
    if kind == "zero":
        out["allocs"] = calltree.count_under(allocs, "do_anonymous_page", excluding=PAGE_TABLES)
        out["pagetables"] = calltree.count_under(allocs, "do_anonymous_page", "__pte_alloc")
    elif kind == "file":
        out["inserts"] = calltree.count_under(inserts, "filemap_fault")
        out["bios"] = calltree.count_under(bios, "filemap_fault")
        out["allocs"] = calltree.count_under(allocs, "filemap_fault")
    elif kind == "cow":
        out["copies"] = calltree.count_under(allocs, "do_wp_page", excluding=PAGE_TABLES)
    else:
        huge = [h for h in hits if h.event == "mm_page_alloc" and "do_huge_pmd_anonymous_page" in h.stack
                and int(h.fields.get("order", 0)) > 0]
        out["huge_allocs"] = len(huge)
        out["huge_order"] = max((int(h.fields.get("order", 0)) for h in huge), default=0)
    return out


def run(ctx, p: dict) -> dict:
    ctx.say(f"fault_kinds: {p['mb']} MiB walked per kind, one byte per {p['page']} B page; kernel stacks at "
            f"{', '.join(EVENTS)} (an ftrace instance of this run, filtered to {PROGRAM})")
    out: dict = {}
    with kstacks.StackCapture(ctx.journal, EVENTS, PROGRAM) as cap:
        for kind in KINDS:
            result, hits = _walk(ctx, cap, kind, p["mb"], armed=True)
            timed, _ = _walk(ctx, cap, kind, p["mb"], armed=False)
            faults = timed["minflt"] + timed["majflt"]
            tree = calltree.render(calltree.merge([h.stack for h in hits], start=ENTRY))
            out[kind] = {"minflt": result["minflt"], "majflt": result["majflt"],
                         "us_per_fault": timed["elapsed_ns"] / 1e3 / max(faults, 1), **_counts(kind, hits), "tree": tree}
        out["buffer_lost"] = cap.lost()
    for kind in KINDS:
        r = out[kind]
        ctx.say(f"\n{TITLES[kind]}: {r['minflt']:,} minor + {r['majflt']:,} major faults, {r['us_per_fault']:.2f} µs each; "
                f"{r['in_fault_path']:,} of {r['hits']:,} tracepoint hits inside a fault (µs timed with the capture off)")
        for line in r["tree"]:
            ctx.say(line)
    if out["buffer_lost"]:
        ctx.say(f"\nwarning: the capture's buffer lost {out['buffer_lost']:,} events; counts are low (run without --quick "
                "only on a quiet machine)")
    out["bench"] = _bench_faults()
    _say_costs(ctx, out)
    return out


def _bench_faults() -> dict:
    """`oslens bench --only fault --quick`: {benchmark: (median ns, min ns)}; {} when it could not run."""
    with tempfile.TemporaryDirectory(prefix="oslens-lab4-") as where:
        path = os.path.join(where, "bench.json")
        proc = subprocess.run([sys.executable, "-m", "oslens.cli", "bench", "--only", "fault", "--quick", "--json", path],
                              capture_output=True, text=True)
        try:
            rows = json.loads(open(path).read())["results"] if proc.returncode == 0 else []
        except (OSError, ValueError, KeyError):
            rows = []
    return {r["name"]: (r["median_ns"], r["min_ns"]) for r in rows if r.get("status") == "ok"}


def _say_costs(ctx, out: dict) -> None:
    """Each kind's µs per fault beside `oslens bench`'s figures for the same mechanism."""
    bench = out["bench"]
    ctx.say("\nCost per fault (this run, capture off) and `oslens bench --only fault --quick` (median, min)")
    rows = [("zero-fill, per 4 KiB", out["zero"]["us_per_fault"], bench.get("fault.zero_fill.4MiB")),
            ("THP, per 2 MiB fault", out["thp"]["us_per_fault"],
             tuple(512 * v for v in bench["fault.zero_fill.thp.64MiB"]) if "fault.zero_fill.thp.64MiB" in bench else None),
            ("copy-on-write, per 4 KiB", out["cow"]["us_per_fault"], None),
            ("read from disk, per 4 KiB", out["file"]["us_per_fault"], None)]
    for label, mine, b in rows:
        ref = f"bench {b[0] / 1e3:.2f} µs (min {b[1] / 1e3:.2f})" if b else "no bench row"
        ctx.say(f"  {label:<26}{mine:>9.2f} µs   {ref}")


def expect(p: dict, results: dict | None) -> dict:
    r = (results or {}).get("results") or {}
    pages = p["mb"] * (1 << 20) // p["page"]
    huge = p["mb"] // 2

    def got(kind, key):
        return (r.get(kind) or {}).get(key)

    return {
        "zero_allocs": Expectation(pages, 0.02, f"one zeroed page per first touch: {p['mb']} MiB / {p['page']} B = {pages}",
                                   got("zero", "allocs"), abs_band=8),
        "zero_pagetables": Expectation(huge, 0.0, "a page-table page maps 512 pages (2 MiB): one per 2 MiB walked",
                                       got("zero", "pagetables"), abs_band=1),
        "file_major_faults": Expectation(pages, 0.02, "the file was dropped from the page cache, and MADV_RANDOM reads "
                                         "no page ahead: every page is a major fault", got("file", "majflt"), abs_band=8),
        "file_inserts": Expectation(pages, 0.02, "each page read is inserted into the page cache once",
                                    got("file", "inserts"), abs_band=8),
        "file_bios": Expectation(pages, 0.02, "each fault reads its one page: one bio per page (nothing to merge)",
                                 got("file", "bios"), abs_band=8),
        "cow_copies": Expectation(pages, 0.02, "each of the child's first writes copies one page (and the child's "
                                  "own stack and data pages, a few, once)", got("cow", "copies"), abs_band=16),
        "thp_faults": Expectation(huge + OWN_FAULTS, 0.0, f"one fault maps a whole 2 MiB page: {huge}, and the "
                                  f"program's own {OWN_FAULTS} (as in every walk)", got("thp", "minflt"), abs_band=2),
        "thp_order": Expectation(9, 0.0, "2 MiB = 2^9 pages of 4 KiB: an order-9 allocation", got("thp", "huge_order"),
                                 widen=False),
    }


LAB = Lab(
    number=4, slug="fault-anatomy", title="Anatomy of a page fault", topic="virtual memory, kernel paths", minutes=25,
    requires=("root", "compiler", "disk", "kernel-stacks", "thp"), sheet="04-fault-anatomy.md",
    questions=[
        Question("zero_allocs", "page allocations inside the zero-fill faults", "pages"),
        Question("zero_pagetables", "page-table pages allocated by those faults", "pages"),
        Question("file_major_faults", "major faults of the walk over the evicted file", "faults"),
        Question("file_inserts", "page-cache insertions inside those faults", "pages"),
        Question("file_bios", "bios (block I/O requests) submitted inside those faults", "bios"),
        Question("cow_copies", "pages copied by the child's copy-on-write faults", "pages"),
        Question("thp_faults", "faults of the walk over MADV_HUGEPAGE memory", "faults"),
        Question("thp_order", "the order of the allocation a huge-page fault makes", "order"),
    ],
    predictions=("zero_pagetables", "file_bios", "thp_faults"),
    run=run, expect=expect, params=params,
)
