"""The region vector: the share of the program's thread time each interval spent in each of its
phase-level regions (oslens.analysis.phases_table: the shallowest level holding more than one
region per thread, expanded through wrappers such as `main`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oslens.analysis import db, phases_table
from oslens.phases import binning

TOP_REGIONS = 32


@dataclass
class RegionVector:
    matrix: np.ndarray  # intervals x region names, shares 0..1
    names: list[str]


def region_vector(con, prog, edges: np.ndarray) -> RegionVector | None:
    if not (db.table_exists(con, "regions") and db.row_count(con, "regions")):
        return None
    spans: dict[str, tuple[list, list]] = {}
    alive_s, alive_e = [], []
    for tid in prog.tids:
        wall = (prog.end[tid] - prog.start[tid]) or 1
        alive_s.append(prog.start[tid])
        alive_e.append(prog.end[tid])
        for name, _depth, b, e in phases_table.thread_phases(con, tid, wall):
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
    return RegionVector(np.clip(np.column_stack(cols), 0.0, 1.0), keep)
