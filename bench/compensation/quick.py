"""bench/compensation/quick.py: how far the quick calibration (what an import measures when a
machine has none, docs/calibration.md) lands from the full one, and how long it takes.

Prints JSON. Runs the quick plan QUICK_RUNS times (default 3) and the full plan once, the full
between the first and the second quick run so that a load that comes and goes reaches both. Per
measured kind (and the start-up figures compensation reads): the full figure and its 95%
interval, each quick figure and its interval, and whether the quick figure lies within the full
interval widened by the quick one's half-widths ([full low - (quick - quick low), full high +
(quick high - quick)], i.e. the two intervals overlap). Wall time of each quick measurement
(oslens.calibrate.measure(quick=True): compiling calib.c, the loops, the start-up runs), and of
the full one. Nothing is stored. Never asserted by a test (docs/architecture.md: benchmarks print).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "python"))

from oslens import calibrate  # noqa: E402
from oslens.store import calibration  # noqa: E402

QUICK_RUNS = int(os.environ.get("QUICK_RUNS", "3"))


def figures(cal: dict) -> dict[str, dict]:
    """{name: {ns, ci_low, ci_high}}: every in-call kind, and the start-up figures compensation
    reads (calibration.outside_costs) with their intervals."""
    out = {k: c for k, c in cal["costs"].items()}
    st = cal["startup"]
    out.update({f"startup.{k}": st[k] for k in ("cpu", "wall", "lifetime_per_record_cpu")})
    out["startup.per_record_outside"] = {"ns": st["per_record_outside"]["ns"]}  # a difference: no interval
    return {k: {"ns": c["ns"], "ci_low": c.get("ci_low", c["ns"]), "ci_high": c.get("ci_high", c["ns"])}
            for k, c in out.items()}


def within(quick: dict, full: dict) -> bool:
    low = full["ci_low"] - (quick["ns"] - quick["ci_low"])
    high = full["ci_high"] + (quick["ci_high"] - quick["ns"])
    return low <= quick["ns"] <= high


def timed(quick: bool) -> tuple[dict, float]:
    t0 = time.monotonic()
    cal = calibrate.measure(quick=quick)
    return cal, round(time.monotonic() - t0, 2)


def main() -> int:
    def progress(msg):
        print(f"bench/compensation/quick: {msg}", file=sys.stderr, flush=True)

    quicks, walls = [], []
    full = None
    for i in range(QUICK_RUNS):
        progress(f"quick calibration {i + 1} of {QUICK_RUNS}")
        cal, wall = timed(True)
        quicks.append(cal)
        walls.append(wall)
        if full is None:
            progress("full calibration")
            full, full_wall = timed(False)
    full_f = figures(full)
    kinds = {}
    for name, f in full_f.items():
        qs = [figures(q).get(name) for q in quicks]
        kinds[name] = {"full": f, "quick": qs, "quick_within_widened_full": [q is not None and within(q, f) for q in qs]}
    result = {
        "benchmark": "compensation/quick",
        "machine": full.get("machine"),
        "plans": {"quick": calibrate.invitro.QUICK, "full": calibrate.invitro.FULL},
        "quick_wall_s": walls,
        "full_wall_s": full_wall,
        "quick_ci_coverage": quicks[0]["costs"]["event"].get("ci_coverage"),
        "full_ci_coverage": full["costs"]["event"].get("ci_coverage"),
        "within_count": {"within": sum(sum(v["quick_within_widened_full"]) for v in kinds.values()),
                         "of": sum(len(v["quick_within_widened_full"]) for v in kinds.values())},
        "kinds": kinds,
        "schema": calibration.SCHEMA,
    }
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
