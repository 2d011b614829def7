"""The phase analysis as Arrow tables (stored as TRACE/tables/{intervals,phase_segments,phases}.parquet,
so `oslens sql` sees them; columns in docs/trace-schema.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from oslens.phases import analyse as analyse_mod
from oslens.phases import resources


def intervals_table(a: analyse_mod.PhaseAnalysis) -> pa.Table:
    vec, seg = a.vectors, a.segmentation
    cols = {
        "interval": pa.array(np.arange(vec.n), pa.int64()),
        "start_ns": pa.array(vec.edges[:-1], pa.int64()),
        "end_ns": pa.array(vec.edges[1:], pa.int64()),
        "phase": pa.array(seg.labels, pa.int64()),
        "kind": pa.array([a.kinds[p] for p in seg.labels], pa.string()),
        "samples": pa.array(vec.code.counts.sum(axis=1) if vec.code else np.zeros(vec.n), pa.float64()),
        "top_function": pa.array(_top_functions(vec), pa.string()),
    }
    for j, name in enumerate(resources.FRACTIONS):
        cols[name] = pa.array(vec.resource.fractions[:, j], pa.float64()) if vec.resource else pa.nulls(vec.n, pa.float64())
    for j, name in enumerate(resources.RATES):
        cols[f"{name}_per_s"] = pa.array(vec.resource.rates[:, j], pa.float64()) if vec.resource else pa.nulls(vec.n, pa.float64())
    cols["top_region"] = pa.array(_top_regions(vec), pa.string())
    return pa.table(cols)


def _top_functions(vec) -> list:
    return _top(vec.code.counts, vec.code.names) if vec.code else [None] * vec.n


def _top_regions(vec) -> list:
    return _top(vec.region.matrix, vec.region.names) if vec.region else [None] * vec.n


def _top(matrix, names) -> list:
    """The name of each row's largest entry (None where the row is all zero)."""
    best = matrix.argmax(axis=1)
    return [names[b] if matrix[i, b] > 0 else None for i, b in enumerate(best)]


def segments_table(a: analyse_mod.PhaseAnalysis) -> pa.Table:
    """One row per stretch of consecutive intervals in one phase, in time order."""
    vec, seg = a.vectors, a.segmentation
    wall = float(vec.edges[-1] - vec.edges[0])
    rows = []
    for i in range(len(seg.bounds) - 1):
        b, e = int(seg.bounds[i]), int(seg.bounds[i + 1])
        mask = np.zeros(vec.n, bool)
        mask[b:e] = True
        p = int(seg.phase_of_segment[i])
        rows.append({
            "start_ns": int(vec.edges[b] - vec.origin_ns), "end_ns": int(vec.edges[e] - vec.origin_ns),
            "first_interval": b, "last_interval": e - 1, "phase": p, "kind": a.kinds[p],
            "share": float(vec.edges[e] - vec.edges[b]) / wall,
            "functions": ", ".join(analyse_mod.dominant_functions(vec, mask)),
        })
    return _from_rows(rows, SEGMENT_SCHEMA)


def phases_table(a: analyse_mod.PhaseAnalysis) -> pa.Table:
    """One row per phase: its kind, share of the run, recurrences and a representative interval
    (the one nearest the phase's centroid)."""
    vec, seg = a.vectors, a.segmentation
    rows = []
    for p in range(seg.k):
        mask = seg.labels == p
        idx = np.flatnonzero(mask)
        dist = np.abs(a.matrix[idx] - seg.centroids[p]).sum(axis=1) if a.matrix.shape[1] else np.zeros(len(idx))
        rep = int(idx[int(np.argmin(dist))])
        rows.append({
            "phase": p, "kind": a.kinds[p],
            "share": float(np.diff(vec.edges)[mask].sum()) / float(vec.edges[-1] - vec.edges[0]),
            "recurrences": int((seg.phase_of_segment == p).sum()),
            "intervals": int(mask.sum()),
            "representative_interval": rep,
            "representative_start_ns": int(vec.edges[rep] - vec.origin_ns),
            "functions": ", ".join(analyse_mod.dominant_functions(vec, mask)),
            **_mean_fractions(vec, mask),
        })
    return _from_rows(rows, PHASE_SCHEMA)


def _mean_fractions(vec, mask) -> dict:
    if vec.resource is None:
        return {name: None for name in resources.FRACTIONS}
    return {name: float(vec.resource.fractions[mask, j].mean()) for j, name in enumerate(resources.FRACTIONS)}


SEGMENT_SCHEMA = {
    "start_ns": pa.int64(), "end_ns": pa.int64(), "first_interval": pa.int64(), "last_interval": pa.int64(),
    "phase": pa.int64(), "kind": pa.string(), "share": pa.float64(), "functions": pa.string(),
}
PHASE_SCHEMA = {
    "phase": pa.int64(), "kind": pa.string(), "share": pa.float64(), "recurrences": pa.int64(),
    "intervals": pa.int64(), "representative_interval": pa.int64(), "representative_start_ns": pa.int64(),
    "functions": pa.string(), **{name: pa.float64() for name in resources.FRACTIONS},
}


def _from_rows(rows: list[dict], schema: dict) -> pa.Table:
    return pa.table({k: pa.array([r[k] for r in rows], t) for k, t in schema.items()})


def write(a: analyse_mod.PhaseAnalysis, trace: Path) -> list[Path]:
    """Stores the tables beside the trace's own, so `oslens sql TRACE` can query them."""
    out = []
    d = Path(trace) / "tables"
    for name, table in (("intervals", intervals_table(a)), ("phase_segments", segments_table(a)),
                        ("phases", phases_table(a))):
        path = d / f"{name}.parquet"
        pq.write_table(table, path)
        out.append(path)
    return out
