#!/usr/bin/env python3
"""`oslens phases` against a known phase script (issue 23's "How we will know"): a long, varied
script of workloads/phases (compute, write + fdatasync, page-fault storm, lock contention and
sleep at varied lengths, each repeated; 16 phases, ~12 s) recorded --repeat times with
`oslens record --phases`, each recording analysed by `oslens phases --json` with its default
settings, and scored against the script the program printed: boundary F1 within one interval,
adjusted Rand index per interval, the number of phases found against the script's 5 kinds, the
within-phase CPU-utilisation homogeneity, and the ARI between every two runs over script time.
Prints one JSON object; targets: F1 >= 0.9, ARI >= 0.9, exact count, run-to-run ARI >= 0.85,
homogeneity ratio <= 1/3.

    bench/phases/truth.py [--repeat 2] [--script KIND:MS,...] [--weights W] [--keep DIR]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
from oslens.phases import score  # noqa: E402

WORKLOAD = ROOT / "workloads" / "phases" / "phases"
OSLENS = ROOT / ".venv" / "bin" / "oslens"
SCRIPT = ("compute:900,io:600,faults:500,sync:700,sleep:400,compute:1500,faults:300,io:1000,"
          "sleep:800,sync:400,compute:600,io:400,faults:800,sync:1000,sleep:600,compute:1200")


def record(d: Path, script: str) -> tuple[Path, list]:
    trace = d / "trace"
    rec = subprocess.run([str(OSLENS), "record", "--phases", "-o", str(trace), "--", str(WORKLOAD), "--script", script,
                          "--dir", str(d)], check=True, capture_output=True, text=True)
    script = score.parse_script(rec.stderr)
    (d / "script.json").write_text(json.dumps(script))
    return trace, script


def analyse(trace: Path, weights: str | None) -> dict:
    cmd = [str(OSLENS), "phases", str(trace), "--json", "--no-store"] + (["--weights", weights] if weights else [])
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def labels_of(result: dict) -> tuple[np.ndarray, np.ndarray]:
    """Interval edges (trace clock) and each interval's phase, from `phases --json`'s segments."""
    origin, dt, n = result["origin_ns"], result["interval_ns"], result["intervals"]
    edges = origin + dt * np.arange(n + 1, dtype=np.int64)
    labels = np.empty(n, dtype=np.int64)
    for s in result["segments"]:
        labels[s["first_interval"]:s["last_interval"] + 1] = s["phase"]
    return edges, labels


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--script", default=SCRIPT)
    ap.add_argument("--weights")
    ap.add_argument("--keep", help="keep the recordings under this directory")
    args = ap.parse_args()
    runs = []
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        base = Path(args.keep or tmp)
        for i in range(args.repeat):
            d = base / f"run{i}"
            d.mkdir(parents=True, exist_ok=True)
            trace, script = record(d, args.script)
            result = analyse(trace, args.weights)
            edges, labels = labels_of(result)
            s = score.against_script(edges, labels, script)
            s.update(interval_ms=result["interval_ns"] / 1e6, kinds=[p["kind"] for p in result["phases"]],
                     homogeneity=result.get("homogeneity"), trace=str(trace) if args.keep else None)
            runs.append((s, (edges, labels, script)))
            print(f"run {i + 1}: " + json.dumps({k: s[k] for k in ("f1", "ari", "phases", "interval_ms")}), file=sys.stderr)
    pairs = [score.run_to_run(a[1], b[1]) for a, b in itertools.combinations(runs, 2)]
    out = {
        "script": args.script, "phases_in_script": len(args.script.split(",")), "weights": args.weights,
        "runs": [r[0] for r in runs], "run_to_run_ari": pairs,
        "min": {"f1": min(r[0]["f1"] for r in runs), "ari": min(r[0]["ari"] for r in runs),
                "run_to_run_ari": min(pairs) if pairs else None},
        "exact_count": all(r[0]["phases"] == r[0]["script_kinds"] for r in runs),
        "targets": {"f1": 0.9, "ari": 0.9, "run_to_run_ari": 0.85, "homogeneity_ratio": 1 / 3},
        "load_average": os.getloadavg()[0],
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
