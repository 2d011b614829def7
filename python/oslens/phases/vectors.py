"""Interval vectors: the grid, the three vectors that exist in this trace, their weights, and one
matrix (intervals x features) to compare and segment. What a vector needs and the trace lacks is
said in one line each (`notes`); a trace with none of them is an error."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from oslens.analysis import db, program, units
from oslens.errors import OslensError
from oslens.phases import code, grid, regions, resources

KINDS = ("code", "resource", "region")
DEFAULT_WEIGHTS = {"code": 1.0, "resource": 1.0, "region": 2.0}

MISSING = {
    "code": "no IP samples of the program in this trace: the code vector is left out "
            "(record with `oslens record --phases` or `--sample HZ`)",
    "resource": "no scheduling records in this trace: the resource vector is left out "
                "(record with kernel events: `oslens record` without --no-kernel, as root)",
    "region": "the program recorded no regions: the region vector is left out",
}


def parse_weights(text: str | None) -> dict[str, float]:
    """'code=1,resource=2,region=0' -> weights (kinds not named keep their default)."""
    weights = dict(DEFAULT_WEIGHTS)
    if not text:
        return weights
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in KINDS:
            raise OslensError(f"--weights {text!r}: give KIND=NUMBER pairs, KIND one of {', '.join(KINDS)}", 2)
        try:
            w = float(value)
        except ValueError:
            raise OslensError(f"--weights {text!r}: {value.strip()!r} is not a number", 2) from None
        if not np.isfinite(w) or w < 0:
            raise OslensError(f"--weights {text!r}: weights are numbers >= 0", 2)
        weights[key] = w
    if not any(weights.values()):
        raise OslensError(f"--weights {text!r}: at least one weight must be above 0", 2)
    return weights


@dataclass
class IntervalVectors:
    edges: np.ndarray  # int64, len = intervals + 1 (CLOCK_MONOTONIC ns)
    origin_ns: int  # the program's start (report time zero)
    interval_ns: int
    code: code.CodeVector | None
    resource: resources.ResourceVector | None
    region: regions.RegionVector | None
    weights: dict[str, float]
    notes: list[str] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.edges) - 1

    def used(self) -> list[str]:
        return [k for k in KINDS if getattr(self, k) is not None and self.weights.get(k, 0) > 0]

    def matrix(self) -> np.ndarray:
        """The weighted features of every interval, side by side."""
        parts = [self.weights[k] * getattr(self, k).matrix for k in self.used()]
        return np.hstack(parts) if parts else np.zeros((self.n, 0))


def program_window(con):
    """The program's threads and its life: from its first successful exec (before that, the
    process is oslens's fork waiting to exec it) to its last thread's end."""
    prog = program.program(con)
    if not prog.tids or not prog.window:
        raise OslensError("the trace has no program threads with a known start and end (an empty trace?)", 1)
    lo, hi = prog.window
    if db.row_count(con, "syscalls") and prog.main_tid is not None:
        row = con.execute("SELECT min(end_ns) FROM syscalls WHERE tid = ? AND name = 'execve' AND ret = 0 "
                          "AND end_ns > ? AND end_ns < ?", [int(prog.main_tid), int(lo), int(hi)]).fetchone()
        if row and row[0] is not None:
            lo = int(row[0])
    return prog, (lo, hi)


def interval_vectors(con, trace, interval_ns: int | None = None, weights: dict[str, float] | None = None) -> IntervalVectors:
    weights = weights or dict(DEFAULT_WEIGHTS)
    prog, (lo, hi) = program_window(con)
    if hi - lo <= 0:
        raise OslensError("the program's run has no length; nothing to cut into intervals", 1)
    n_samples = code.sample_count(con, prog.tids, lo, hi)
    dt = interval_ns or grid.choose_interval(hi - lo, n_samples)
    edges = grid.edges(lo, hi, dt)
    if len(edges) - 1 < 2:
        raise OslensError(f"the run ({units.fmt_ns(hi - lo)}) holds only one interval of {units.fmt_ns(dt)}; "
                          "choose a shorter --interval", 1)
    vec = IntervalVectors(edges, lo, dt, None, None, None, weights)
    if weights.get("code", 0) > 0:
        vec.code = code.code_vector(con, trace, prog.tids, edges)
    if weights.get("resource", 0) > 0:
        vec.resource = resources.resource_vector(con, prog, edges)
    if weights.get("region", 0) > 0:
        vec.region = regions.region_vector(con, prog, edges)
    if vec.code is not None and vec.resource is not None:
        code.scale_by_demand(vec.code, resources.demand(vec.resource.fractions).sum(axis=1))
    for k in KINDS:
        if weights.get(k, 0) > 0 and getattr(vec, k) is None:
            vec.notes.append(MISSING[k])
    if not vec.used():
        raise OslensError("this trace has nothing to build interval vectors from (no IP samples, no scheduling "
                          "records, no regions); record with `oslens record --phases -- PROGRAM`", 1)
    if vec.code is not None and vec.code.samples / vec.n < grid.MIN_SAMPLES / 4:
        vec.notes.append(f"only {vec.code.samples} IP samples for {vec.n} intervals: the code vector is noisy "
                         "(a longer --interval or a higher --sample rate helps)")
    return vec
