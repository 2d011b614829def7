"""How much of a trace's application records the import holds at once.

The importer reads every chunk first (its header, names, payloads and a scan of its records: the
clock's pairs, the kinds counted, the sync objects), because the one native pass needs all of
that before it starts. A chunk's records are kept from that read only while the records kept
stay within HELD_BYTES; past it, a chunk's records are let go after the scan and read again
when the pass reaches the chunk (oslens._native.app_pass, app_rows::Source), so the import's
memory no longer grows with the trace: figures in docs/trace-schema.md, "Import memory".
Kernel chunks are let go the same way: the kernel pass (oslens.store.kernel_tables) reads them
again when its merge reaches them. Names chunks are always kept (their thread ledgers are read before the pass).
"""

from __future__ import annotations

import os
from typing import Callable

import numpy as np

from oslens.capture import raw

# Records kept from the read (bytes; 32 a record): a trace of up to 2 M records is read once. Past
# it a chunk is read a second time, from the page cache (bench/import: ~5 % more CPU at 20 M
# records). OSLENS_IMPORT_HELD_MB overrides it (tests set 0 to read every chunk twice).
HELD_BYTES = 64 << 20


def held_bytes() -> int:
    try:
        return max(0, int(os.environ["OSLENS_IMPORT_HELD_MB"])) << 20
    except (KeyError, ValueError):
        return HELD_BYTES


class LetGo:
    """What stands in a chunk's `records` once they were let go: their count (len) and how to
    read them again (the importer's own reader)."""

    def __init__(self, count: int, reread: Callable[[], np.ndarray]):
        self.count = count
        self._reread = reread

    def __len__(self) -> int:
        return self.count

    def read(self) -> np.ndarray:
        """The records read again: the first `count` (a chunk still being written only grows);
        fewer raises OSError."""
        got = self._reread()
        if len(got) < self.count:
            raise OSError(f"{len(got)} records when read again, {self.count} when first read")
        return got[: self.count]


class Holder:
    """Decides, chunk by chunk in the order they were read, whose records stay in memory."""

    def __init__(self, budget: int | None = None):
        self.budget = held_bytes() if budget is None else budget
        self.kept = 0
        self.let_go = 0

    def take(self, chunk: raw.ChunkData, reread: Callable[[], np.ndarray], keep: bool) -> None:
        size = chunk.records.nbytes if isinstance(chunk.records, np.ndarray) else 0
        if keep or not size or self.kept + size <= self.budget:
            self.kept += size
            return
        chunk.records = LetGo(len(chunk.records), reread)
        self.let_go += 1


def records_of(chunk: raw.ChunkData) -> np.ndarray:
    """A chunk's records, read again if the importer let them go."""
    r = chunk.records
    return r if isinstance(r, np.ndarray) else r.read()


def pass_input(records):
    """A chunk's records as oslens._native.app_pass takes them: a buffer, or (bytes, a callable
    that reads them again)."""
    if isinstance(records, LetGo):
        return records.count * raw.RECORD_DTYPE.itemsize, lambda: records.read().view(np.uint8)
    return records.view(np.uint8)
