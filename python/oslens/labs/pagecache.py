"""Lab 6, the page cache: the first read() of a file goes to storage and inserts every page into
the page cache; the second finds them there and reads nothing from storage. The run counts
what the kernel read from storage for the program (/proc/self/io read_bytes), the page-cache
pages charged to the run's cgroup (memory.stat), and the block requests the trace saw."""

from __future__ import annotations

import os

from oslens.labs import runner
from oslens.labs.lab import Expectation, Lab, Question

MiB = 1 << 20
SIZES = {True: 64, False: 1024}


def params(quick: bool, variant: str = "default") -> dict:
    return {"mb": SIZES[bool(quick)], "page": os.sysconf("SC_PAGE_SIZE"), "quick": bool(quick), "variant": variant}


def _block_requests(trace, pid) -> int | None:
    if trace is None or pid is None:
        return None
    from oslens import store

    try:
        con = store.open_trace(trace, quiet=True)
        return con.execute("SELECT count(*) FROM block_io WHERE tid = ? AND rw LIKE 'R%'", [pid]).fetchone()[0]
    except Exception:  # noqa: BLE001 - no block table (collector without io events): leave it out
        return None


def run(ctx, p: dict) -> dict:
    mb = p["mb"]
    cg = ctx.cap_memory(4 * mb * MiB)  # a cgroup to count the page cache the reads fill; never reached
    ctx.say(f"read_file reads a {mb} MiB file with read() in 1 MiB calls; cgroup {cg.name} counts its page cache")
    data = ctx.dir / "file.dat"
    # write the file first, outside the cgroup: the pages of a file just written are still
    # settling (writeback) and blur the first count
    ctx.run([runner.program("read_file"), "--file", str(data), "--mb", str(mb)], "prepare", record=False)
    out = {}
    for kind, extra in (("cold", ["--drop"]), ("warm", [])):
        before = ctx.cached_bytes() or 0
        res = ctx.run([runner.program("read_file"), "--file", str(data), "--mb", str(mb), "--cgroup", str(cg), *extra],
                      kind, events="io")
        r = res.json()
        after = ctx.cached_bytes() or 0
        out[f"{kind}_read_mb"] = r["read_bytes"] / MiB
        out[f"{kind}_returned_mb"] = r["rchar"] / MiB
        out[f"{kind}_ms"] = r["elapsed_ns"] / 1e6
        out[f"{kind}_inserted_pages"] = (after - before) // p["page"]
        out[f"{kind}_block_requests"] = _block_requests(res.trace, res.pid)
    ctx.say("\nObservations")
    ctx.say(f"  {'read':<6}{'from storage MiB':>18}{'returned MiB':>14}{'pages cached':>14}{'block reqs':>12}{'ms':>9}")
    for kind in ("cold", "warm"):
        b = out[f"{kind}_block_requests"]
        ctx.say(f"  {kind:<6}{out[f'{kind}_read_mb']:>18.1f}{out[f'{kind}_returned_mb']:>14.1f}"
                f"{out[f'{kind}_inserted_pages']:>14,}{'-' if b is None else b:>12}{out[f'{kind}_ms']:>9.1f}")
    if out["cold_block_requests"]:
        ctx.say(f"  one block request carried {out['cold_read_mb'] * 1024 / out['cold_block_requests']:.0f} KiB on average "
                "(read-ahead and the device's largest request size decide it)")
    ctx.say("  the cold read is only a little slower here if the VM's disk is itself cached by its host")
    return out


def expect(p: dict, results: dict | None) -> dict:
    r = (results or {}).get("results") or {}
    pages = p["mb"] * MiB // p["page"]
    return {
        "cold_read_mb": Expectation(p["mb"], 0.05, "a cold read brings the whole file from storage", r.get("cold_read_mb")),
        "warm_read_mb": Expectation(0, 0.0, "every page is in the page cache: nothing comes from storage",
                                    r.get("warm_read_mb"), abs_band=1),
        "cold_pages_inserted": Expectation(pages, 0.03, f"one page-cache page per {p['page']} B: {p['mb']} MiB = {pages}",
                                           r.get("cold_inserted_pages")),
        "warm_pages_inserted": Expectation(0, 0.0, "the pages are already cached (and charged to this cgroup)",
                                           r.get("warm_inserted_pages"), abs_band=16),
    }


LAB = Lab(
    number=6, slug="page-cache", title="The page cache: a cold and a warm read", topic="file systems, caching",
    minutes=15, requires=("root", "memory-cgroup", "compiler", "disk"), optional=("collector",),
    sheet="06-page-cache.md",
    questions=[
        Question("cold_read_mb", "MiB read from storage by the cold read", "MiB"),
        Question("warm_read_mb", "MiB read from storage by the warm read", "MiB"),
        Question("cold_pages_inserted", "pages the cold read put into the page cache", "pages"),
        Question("warm_pages_inserted", "pages the warm read put into the page cache", "pages"),
    ],
    predictions=("cold_read_mb", "warm_read_mb"),
    run=run, expect=expect, params=params,
)
