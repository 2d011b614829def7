"""A starting plan from the phases found (`oslens phases TRACE --plan-out plan.toml`): one
`[phase.KIND]` table per kind of phase, in the format `oslens config check` and
`oslens tune --plan` read (docs/control.md), and beside it (`plan.phases.json`) the phase model
a program or a later online detector needs to tell which phase it is in: the interval, the
features and weights, and each phase's centroid.

The settings are Krintz & Wolski's per-phase policy carried to Linux 6.x and are a start, to be
measured with `oslens tune`: compute phases a long EEVDF slice (fewer preemptions), I/O and
sleeping phases a short one (run soon after each wakeup), lock contention a long one (a lock
holder preempted holds up every waiter); per-task settings only, so no privilege is needed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

SETTINGS = {
    "compute": ("a long slice: fewer preemptions of a CPU-bound phase", {"class": "other", "slice_ms": 100}),
    "memory": ("page faults are CPU work here: as compute", {"class": "other", "slice_ms": 100}),
    "io": ("a short slice: issue the next I/O soon after each completion", {"class": "other", "slice_ms": 0.1}),
    "sleep": ("a short slice: little CPU, wakeups answered quickly", {"class": "other", "slice_ms": 0.1}),
    "sync": ("a long slice: a lock holder preempted holds up every waiter", {"class": "other", "slice_ms": 20}),
    "mixed": ("no clear resource: the default policy", {"class": "other"}),
    "unknown": ("no scheduling records: the default policy", {"class": "other"}),
}


def _value(v) -> str:
    return f'"{v}"' if isinstance(v, str) else (f"{v:g}" if isinstance(v, float) else str(v))


def plan_text(analysis) -> str:
    kinds = []
    for k in analysis.kinds:
        if k not in kinds:
            kinds.append(k)
    lines = [f"# A starting plan from `oslens phases {analysis.trace}`: one table per kind of phase found.",
             "# Check it with `oslens config check PLAN`; measure it with `oslens tune --plan PLAN -- PROGRAM`",
             "# (the program calls osl_adapt(\"KIND\") where each phase begins). The phase model is in",
             "# the .phases.json file beside this one.", "", "[phase.default]", 'class = "other"']
    for k in kinds:
        why, settings = SETTINGS[k]
        lines += ["", f"[phase.{k}]".ljust(24) + f"# {why}"]
        lines += [f"{key} = {_value(v)}" for key, v in settings.items()]
    return "\n".join(lines) + "\n"


def model(analysis) -> dict:
    vec, seg = analysis.vectors, analysis.segmentation
    features = []
    for k in vec.used():
        features += [f"{k}:{n}" for n in getattr(vec, k).names]
    return {
        "trace": analysis.trace, "interval_ns": vec.interval_ns, "weights": {k: vec.weights[k] for k in vec.used()},
        "features": features,
        "phases": [{"phase": p, "kind": analysis.kinds[p], "centroid": np.round(seg.centroids[p], 6).tolist()}
                   for p in range(seg.k)],
    }


def write(analysis, path: Path) -> tuple[Path, Path]:
    path = Path(path)
    path.write_text(plan_text(analysis))
    side = path.with_suffix(".phases.json")
    side.write_text(json.dumps(model(analysis), indent=1) + "\n")
    return path, side
