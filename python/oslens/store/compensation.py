"""Importer extension: compensated times and durations, and what the instrumentation cost.

Adds, at the end of existing tables (no schema version change):
    app_events.ts_comp_ns, counters.ts_comp_ns,
    regions / functions: begin_comp_ns, end_comp_ns, duration_comp_ns,
    timers: start_comp_ns, stop_comp_ns, elapsed_comp_ns,
    sync: request_comp_ns, acquire_comp_ns, release_comp_ns
and a table `compensation`: per thread and record kind, how many records, what each cost
(in-vitro figure and its 95% interval) and in total; `pause` rows carry the recorder's own
measured pauses. The model is in docs/calibration.md; the calibration is the one stored
for the trace's machine (oslens.store.calibration.load, $OSLENS_CALIBRATION). Without one, only pauses
are removed, and the `compensation` table says so.

Compensation is computed in one place, the importer's native pass, while it splits the records
(app_tables.build_streamed with costs: cost_table; crates/native/src/app_rows/compensation.rs);
extend only completes the tables kept in memory from its figures. The numpy arithmetic it is
tested against is oslens_testing.store.compensation_oracle (tests only).
"""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa

from oslens.errors import OslensError
from oslens.store import calibration, schema

TABLE = "compensation"
COLUMNS = schema.own_columns(TABLE)  # declared in store/schema.py


def _np(col, dtype=np.int64) -> np.ndarray:
    """A column (plain or dictionary-encoded, chunked or not) as a numpy array of its values."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if pa.types.is_dictionary(col.type):
        values = col.dictionary.to_numpy(zero_copy_only=False)
        idx = col.indices.to_numpy(zero_copy_only=False)
        return values[idx].astype(dtype) if len(idx) else np.zeros(0, dtype)
    return col.to_numpy(zero_copy_only=False).astype(dtype, copy=False)


def _hostname(meta: dict) -> str | None:
    return (meta.get("machine") or {}).get("hostname")


def find_calibration(meta: dict) -> tuple[dict | None, str]:
    """(calibration or None, why none). The full calibration of the trace's machine when it covers
    it, else its quick one; with neither, a quick one is measured and stored, when the trace was
    recorded here and measuring is allowed (calibration.quick_measurer). $OSLENS_CALIBRATION is
    the one file every import uses, and is never measured here."""
    refused: list[str] = []
    cal = _stored_or_measured(meta, refused)
    for why in refused:  # a calibration refused is said even when another one is used
        print(f"oslens: warning: {why}", file=sys.stderr)
    if cal:
        return cal, ""
    return None, refused[0] if refused else _missing(_hostname(meta))


def _stored_or_measured(meta: dict, refused: list) -> dict | None:
    """find_calibration's search; each calibration refused (another machine, unreadable) goes
    into `refused` as one line."""
    for quick in ((False,) if calibration.one_file() else (False, True)):
        cal, why = calibration.stored(meta, quick)
        if cal:
            return cal
        refused += [why] if why else []
    measure = calibration.quick_measurer()
    if measure and calibration.recorded_here(meta):
        cal, why = calibration.stored_quick_or_measure(meta, measure)
        refused += [why] if why else []
        return cal
    return None


def _missing(host: str | None) -> str:
    where = calibration.calibration_path(host)
    return (f"no calibration for {host or 'this machine'} at {where}: run 'oslens calibrate' there, "
            "then 'oslens import --force'")


def cost_table(cal: dict | None, labels: list[str]) -> list[float]:
    """Per record kind (labels[k] names kind k): what one record costs (ns), 0 where the
    calibration says nothing; a pause is charged its measured duration instead (not here)."""
    per_kind = calibration.record_costs(cal) if cal else {}
    return [float(per_kind[name][0]) if name in per_kind else 0.0 for name in labels]


def build(tables: dict, cal: dict | None, why: str, done: dict) -> dict:
    """Returns {table name: amended or new table}; the caller stores them. `done`: what the
    importer's one pass computed (app_tables.build_streamed with costs): app_events already
    carries ts_comp_ns, the tables written in the pass theirs, and the rest is looked up from
    the pass's figures (compensated times of the tables in memory, per-thread counts)."""
    out: dict = {}
    if tables.get("app_events") is None:
        return out
    per_kind = calibration.record_costs(cal) if cal else {}
    cols = done["columns"]
    _amend(tables, out, lambda name, c, p, q, raw: cols[name][c])
    out[TABLE] = summary_of_counts(done["pid"], done["tid"], done["kinds"], done["pause_ns"], done["labels"],
                                   per_kind, cal, why)
    return out


def _amend(tables: dict, out: dict, compensated) -> None:
    """The derived tables' compensated columns, into `out`: compensated(table, column, pid, tid,
    its times with nulls as 0) gives a time column's compensated values. A table written while
    it was built (app_tables.WrittenTable) got them then."""

    def add(name, cols, durations=None):
        t = tables.get(name)
        if t is None:
            return
        if not isinstance(t, pa.Table):  # written while it was built, with its compensated columns
            return
        if t.num_rows == 0:
            for c in cols:
                t = t.append_column(f"{c}_comp_ns", pa.array([], pa.int64()))
            if durations:
                t = t.append_column(f"{durations[0]}_comp_ns", pa.array([], pa.int64()))
            out[name] = t
            return
        p, q = _np(t.column("pid")), _np(t.column("tid"))
        done = {}
        for c in cols:
            arr = t.column(c)
            if isinstance(arr, pa.ChunkedArray):
                arr = arr.combine_chunks()
            valid = ~arr.is_null().to_numpy(zero_copy_only=False)
            raw = arr.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
            v = np.asarray(compensated(name, c, p, q, raw), dtype=np.int64)
            done[c] = (v, valid)
            t = t.append_column(f"{c}_comp_ns", pa.array(v, pa.int64(), mask=~valid if not valid.all() else None))
        if durations:
            dname, a, b = durations
            (va, oka), (vb, okb) = done[a], done[b]
            ok = oka & okb
            t = t.append_column(f"{dname}_comp_ns", pa.array(vb - va, pa.int64(), mask=~ok if not ok.all() else None))
        out[name] = t

    add("regions", ["begin_ns", "end_ns"], ("duration", "begin_ns", "end_ns"))
    add("functions", ["begin_ns", "end_ns"], ("duration", "begin_ns", "end_ns"))
    add("timers", ["start_ns", "stop_ns"], ("elapsed", "start_ns", "stop_ns"))
    add("sync", ["request_ns", "acquire_ns", "release_ns"])
    add("counters", ["ts"])
    for name in ("regions", "functions", "timers"):
        if name in out:  # begin_ns_comp_ns -> begin_comp_ns: the names docs/calibration.md gives
            t = out[name]
            out[name] = t.rename_columns([c.replace("_ns_comp_ns", "_comp_ns") for c in t.column_names])
    if "sync" in out:
        t = out["sync"]
        out["sync"] = t.rename_columns([c.replace("_ns_comp_ns", "_comp_ns") for c in t.column_names])


def summary_of_counts(pid, tid, kinds, pause_ns, labels, per_kind, cal, why) -> pa.Table:
    """summary from each thread's records per kind (kinds: threads x 256) and pauses' sum (ns)."""
    pause = labels.index("pause") if "pause" in labels else -1
    merged: dict = {}
    for g, c in zip(*np.nonzero(kinds)):
        g, c = int(g), int(c)
        k = (int(pid[g]), int(tid[g]), c)
        n0, c0 = merged.get(k, (0, 0.0))
        merged[k] = (n0 + int(kinds[g, c]), c0 + (float(pause_ns[g]) if c == pause else 0.0))
    return _summary_rows(merged, labels, per_kind, cal, why)


def _summary_rows(merged: dict, labels, per_kind, cal, why) -> pa.Table:
    """The table from {(pid, tid, kind code): (records, their summed cost)}."""
    rows = {k: [] for k in COLUMNS}
    if merged:
        groups = sorted(merged)
        counts = np.array([merged[k][0] for k in groups], dtype=np.int64)
        totals = np.array([merged[k][1] for k in groups], dtype=np.float64)
        for g, (p, q, c) in enumerate(groups):
            name = labels[c]
            n = int(counts[g])
            if name == "pause":
                ns = lo = hi = float(totals[g]) / n
                src = "measured pause (the recorder's own: chunk opened or flushed)"
            elif name in per_kind:
                ns, lo, hi, measured = per_kind[name]
                src = f"in vitro: {measured}"
            else:
                if name in calibration.RECORD_KIND_SOURCES and not cal:
                    src = f"not charged: {why}"
                else:
                    src = "not charged: recorder bookkeeping, not instrumentation"
                ns = lo = hi = 0.0
            rows["pid"].append(p)
            rows["tid"].append(q)
            rows["kind"].append(name)
            rows["records"].append(n)
            rows["ns_per_record"].append(ns)
            rows["ci_low_ns"].append(lo)
            rows["ci_high_ns"].append(hi)
            rows["cost_ns"].append(float(totals[g]) if name == "pause" else ns * n)
            rows["source"].append(src)
    return pa.table({k: pa.array(v, COLUMNS[k]) for k, v in rows.items()})


def extend(tables: dict, context: dict) -> None:
    """The importer's extension hook (oslens.store.import_extensions.EXTENSIONS): the tables are completed
    from what the importer's one pass computed (context["compensation"]: the calibration it
    charged and the pass's per-thread figures)."""
    meta = context.get("meta") or {}
    done = context["compensation"]
    cal, why = done["cal"], done["why"]
    tables.update(build(tables, cal, why, done))
    info = {"calibration": cal.get("path") if cal else None, "measured_at": cal.get("measured_at") if cal else None,
            "kind": calibration.kind_of(cal) if cal else None,
            "model": "ts - cost of the thread's earlier records (in vitro) - the recorder's pauses"}
    if not cal:
        info["missing"] = why
    if isinstance(meta, dict):
        meta["compensation"] = info
