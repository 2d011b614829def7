#!/usr/bin/env python3
"""Lock recording modes on a real program (issue 22's Node.js case): `node -e` hashing 20,000
strings with crypto.createHash, which takes ~800,000 pthread mutex acquisitions, nearly all
uncontended. In one run, alternating, --repeat times each:
  bare        node alone
  contended   oslens record --no-kernel (the default --sync contended)
  all         oslens record --no-kernel --sync all
  all_block   oslens record --no-kernel --sync all --on-full block (nothing dropped, for the counts)
For each: wall time (median, min, max), records, records lost, lock acquisitions in the trace
(sync rows + lock_counts), and the recording cost inside the program's threads as the trace
accounts for it (report finding oslens_cost: instrumentation + recorder pauses, share of thread
time; needs kernel events, so one extra recording per mode with them). Prints one JSON object.

    .venv/bin/python bench/sync_modes/run.py [--repeat R] [--strings N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
OSLENS = str(ROOT / ".venv" / "bin" / "oslens")
SCRIPT = ('const c=require("crypto");let h;for(let i=0;i<{n};i++){{h=c.createHash("sha256").update("s"+i).digest("hex")}}'
          'console.log(h)')
MODES = {"bare": None, "contended": [], "all": ["--sync", "all"], "all_block": ["--sync", "all", "--on-full", "block"]}


def counts(trace: Path) -> dict:
    import oslens

    con = oslens.open(trace)
    try:
        rows = con.execute("SELECT count(*) FROM sync WHERE kind = 'mutex'").fetchone()[0]
        counted = con.execute("SELECT coalesce(sum(count), 0) FROM lock_counts").fetchone()[0]
        lost = con.execute("SELECT coalesce(sum(count), 0) FROM lost").fetchone()[0]
        records = con.execute("SELECT count(*) FROM app_events").fetchone()[0]
    finally:
        con.close()
    return {"lock_acquisitions": rows + counted, "sync_rows": rows, "counted": counted, "records": records, "lost": lost}


def cost_share(trace: Path) -> dict | None:
    out = subprocess.run([OSLENS, "report", "--json", "--no-html", str(trace)], capture_output=True, text=True)
    if out.returncode != 0:
        return None
    report = json.loads(out.stdout)
    for f in report.get("findings") or report.get("tables", {}).get("findings", []):
        if f.get("code") == "oslens_cost":
            return {"cost_ns": f.get("value"), "share_of_thread_time": f.get("share"), "title": f.get("title")}
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--strings", type=int, default=20_000)
    args = ap.parse_args()
    node = shutil.which("node") or shutil.which("nodejs")
    if not node:
        print(json.dumps({"error": "node is not installed (apt-get install nodejs)"}))
        return 1
    cmd = [node, "-e", SCRIPT.format(n=args.strings)]
    walls: dict[str, list[float]] = {m: [] for m in MODES}
    trace_counts: dict[str, list[dict]] = {m: [] for m in MODES if MODES[m] is not None}
    with tempfile.TemporaryDirectory(prefix="oslens-bench-sync-") as tmp:
        for r in range(args.repeat):
            for mode, opts in MODES.items():
                trace = Path(tmp) / f"{mode}-{r}"
                full = cmd if opts is None else [OSLENS, "record", "--no-kernel", "--no-import", "-f", "-o", str(trace), *opts, "--", *cmd]
                t0 = time.perf_counter()
                subprocess.run(full, check=True, capture_output=True)
                walls[mode].append(time.perf_counter() - t0)
                if opts is not None:
                    trace_counts[mode].append(counts(trace))
        costs = {}
        for mode in ("contended", "all"):
            trace = Path(tmp) / f"{mode}-kernel"
            subprocess.run([OSLENS, "record", "-f", "-o", str(trace), *MODES[mode], "--", *cmd], check=True, capture_output=True)
            costs[mode] = cost_share(trace)
    out = {
        "program": f"node -e (createHash sha256 x {args.strings})",
        "node": subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip(),
        "repeat": args.repeat,
        "load_avg": os.getloadavg(),
        "note": "wall includes oslens record's own start-up, not the import (--no-kernel --no-import); the host is shared with other work",
        "wall_s": {m: {"median": statistics.median(v), "min": min(v), "max": max(v)} for m, v in walls.items()},
        "trace": trace_counts,
        "recording_cost_with_kernel_events": costs,
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
