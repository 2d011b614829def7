"""The region vector: the share of the program's thread time each interval spent in each of its
phase-level regions (oslens.analysis.phases_table: the shallowest level holding more than one
region per thread, expanded through wrappers such as `main`), and in each region directly inside
one of them (named PARENT/CHILD): water's STEPs are one region name each, and what recurs inside
them (INTERF, then POTENG) only shows one level down (docs/phases.md, "Real programs")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from oslens.analysis import db, phases_table
from oslens.phases import binning

TOP_REGIONS = 32


@dataclass
class RegionVector:
    matrix: np.ndarray  # intervals x region names, shares 0..1
    names: list[str]


def _children(con, tid: int, phases: list) -> list[tuple[str, int, int]]:
    """(PARENT/CHILD, begin, end) of the regions directly inside a thread's phase regions."""
    spans = pa.table({"pname": [p[0] for p in phases], "pdepth": [p[1] for p in phases],
                      "pb": [p[2] for p in phases], "pe": [p[3] for p in phases]})
    con.register("_phase_spans", spans)
    try:
        rows = con.execute(
            "SELECT p.pname || '/' || c.name, c.begin_ns, c.end_ns FROM regions c JOIN _phase_spans p "
            "ON c.depth = p.pdepth + 1 AND c.begin_ns >= p.pb AND c.end_ns <= p.pe "
            "WHERE c.tid = ? AND c.end_ns IS NOT NULL", [tid]).fetchall()
    finally:
        con.unregister("_phase_spans")
    return [(n, int(b), int(e)) for n, b, e in rows]


def region_vector(con, prog, edges: np.ndarray) -> RegionVector | None:
    if not (db.table_exists(con, "regions") and db.row_count(con, "regions")):
        return None
    spans: dict[str, tuple[list, list]] = {}
    alive_s, alive_e = [], []
    for tid in prog.tids:
        wall = (prog.end[tid] - prog.start[tid]) or 1
        alive_s.append(prog.start[tid])
        alive_e.append(prog.end[tid])
        phases = phases_table.thread_phases(con, tid, wall)
        named = [(name, b, e) for name, _depth, b, e in phases] + (_children(con, tid, phases) if phases else [])
        for name, b, e in named:
            s, en = spans.setdefault(name, ([], []))
            s.append(b)
            en.append(e)
    if not spans:
        return None
    alive = binning.overlap(np.array(alive_s, np.int64), np.array(alive_e, np.int64), edges)
    denom = np.where(alive > 0, alive, 1.0)
    total = {n: sum(e - b for b, e in zip(*spans[n])) for n in spans}
    names = sorted(spans, key=lambda n: (-total[n], n))
    keep, rest = names[:TOP_REGIONS], names[TOP_REGIONS:]
    cols = [binning.overlap(np.array(spans[n][0], np.int64), np.array(spans[n][1], np.int64), edges) / denom for n in keep]
    if rest:
        cols.append(sum(binning.overlap(np.array(spans[n][0], np.int64), np.array(spans[n][1], np.int64), edges)
                        for n in rest) / denom)
        keep = keep + ["[other]"]
    return RegionVector(np.clip(np.column_stack(cols), 0.0, 2.0), keep)
