"""The kernel collector's records as the oracle (kernel_tables_oracle) reads them: each chunk's
NAME records with their times (the comm history, exe and irq names) and its losses.
"""

from __future__ import annotations

import numpy as np

from oslens import _native
from oslens.capture import raw
from oslens.store.held import records_of  # noqa: F401 (the oracle reads records through it)
from oslens.store.kernel_tables import kernel_lost  # noqa: F401 (the one table both builds make alike)

LOST = _native.KINDS["kernel_lost"]


def names_of(chunk: raw.ChunkData, r: np.ndarray) -> list[tuple[int, int, int, str]]:
    """The chunk's NAME records with their times: (ts, id, class, text); time 0 where the records
    and the names cannot be aligned."""
    name_recs = r[r["kind"] == raw.NAME]
    if len(name_recs) == len(chunk.names):
        return [(int(rec[0]), int(i), int(cls), n) for rec, (i, cls, _m, n) in zip(name_recs.tolist(), chunk.names)]
    return [(0, int(i), int(cls), n) for i, cls, _m, n in chunk.names]


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
