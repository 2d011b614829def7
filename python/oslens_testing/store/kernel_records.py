"""The kernel collector's records, laid into a DuckDB database one chunk at a time, so that the
kernel tables (kernel_tables_duckdb, the build before the native pass) are built by queries that spill to disk instead of
from every record held in memory (docs/trace-schema.md, "Import memory").

Table `k`: one row per valid kernel record but NAME records, with `seq` its place in the order the
chunks were given and their records within each; kernel_layout.field_sql reads their fields.
NAME records (the comm history, exe and irq names: a few per task) are returned in Python, with
the lost-record counts per chunk.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from oslens import _native
from oslens.capture import raw
from oslens.store.held import records_of  # noqa: F401 (the oracle reads records through it)

LOST = _native.KINDS["kernel_lost"]
# records inserted at once (a 64 MiB chunk holds 2 Mi records)
SLICE_RECORDS = 1 << 18

SCHEMA = """
CREATE TABLE k (ts BIGINT, cpu INTEGER, kind UTINYINT, id UINTEGER, a UBIGINT, b UBIGINT, seq BIGINT);
"""


class Loaded:
    """What loading gave besides `k`: name rows (ts, id, class, text), lost rows (cpu, lost in the
    header, lost in records) and the record count."""

    def __init__(self):
        self.names: list[tuple[int, int, int, str]] = []
        self.lost_rows: list[tuple[int, int, int]] = []
        self.records = 0


def names_of(chunk: raw.ChunkData, r: np.ndarray) -> list[tuple[int, int, int, str]]:
    """The chunk's NAME records with their times: (ts, id, class, text); time 0 where the records
    and the names cannot be aligned."""
    name_recs = r[r["kind"] == raw.NAME]
    if len(name_recs) == len(chunk.names):
        return [(int(rec[0]), int(i), int(cls), n) for rec, (i, cls, _m, n) in zip(name_recs.tolist(), chunk.names)]
    return [(0, int(i), int(cls), n) for i, cls, _m, n in chunk.names]


def _columns(body: np.ndarray, seq0: int) -> pa.Table:
    return pa.table({
        "ts": body["ts"].astype(np.int64), "cpu": body["cpu"].astype(np.int32), "kind": body["kind"], "id": body["id"],
        "a": body["a"], "b": body["b"], "seq": np.arange(seq0, seq0 + len(body), dtype=np.int64),
    })


def split(chunk: raw.ChunkData, r: np.ndarray):
    """A chunk's NAME rows and its lost row (cpu, lost in the header, lost in records; None for a
    chunk without records or header)."""
    if len(r) == 0:
        return [], ((chunk.header["cpu"], int(chunk.header["dropped_events"]), 0) if chunk.header else None)
    lost_in_records = int(r["a"][r["kind"] == LOST].sum())
    body = r["kind"] != raw.NAME
    first = int(body.argmax())
    cpu = chunk.header["cpu"] if chunk.header else (int(r["cpu"][first]) if body[first] else -1)
    return names_of(chunk, r), (cpu, int(chunk.header["dropped_events"]) if chunk.header else 0, lost_in_records)


def kernel_lost(lost_rows: list) -> pa.Table:
    """The `kernel_lost` table: per CPU, the larger of the two counts of each chunk, summed."""
    per_cpu: dict[int, int] = {}
    for cpu, header, records in lost_rows:
        per_cpu[cpu] = per_cpu.get(cpu, 0) + max(header, records)
    cpus = sorted(per_cpu)
    return pa.table({
        "source": pa.array(["kernel collector"] * len(cpus), type=pa.string()),
        "where": pa.array([f"cpu {c}" for c in cpus], type=pa.string()),
        "count": pa.array([per_cpu[c] for c in cpus], type=pa.int64()),
        "cpu": pa.array(cpus, type=pa.int64()),
    })


def load(con, chunks: list) -> Loaded:
    """Creates `k` in `con` and fills it from `chunks`, one chunk's records in memory at a time."""
    con.execute(SCHEMA)
    out = Loaded()
    for c in chunks:
        r = records_of(c)
        names, lost = split(c, r)
        out.names.extend(names)
        if lost is not None:
            out.lost_rows.append(lost)
        for lo in range(0, len(r), SLICE_RECORDS):
            part = r[lo:lo + SLICE_RECORDS]
            body = part[part["kind"] != raw.NAME]
            con.register("part", _columns(body, out.records))
            con.execute("INSERT INTO k SELECT * FROM part")
            con.unregister("part")
            out.records += len(body)
    return out
