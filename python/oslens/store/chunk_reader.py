"""The import's first step: every raw chunk read (two at a time: the Rust reader releases the
GIL), each scanned while its records are in cache (kinds counted, CLOCK_PAIR records, sync
objects: _native.scan_records), and its records kept only within a budget (store.held), the
others read again when the native pass reaches them.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import functools
import itertools
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from oslens import _native
from oslens.capture import ledger, raw
from oslens.store import held, salvage


def read_chunk(path: Path) -> raw.ChunkData:
    """raw.read_chunk, with the records left in the buffer Rust decoded them into (no copy)."""
    got = _native.read_chunk_records(str(path))
    return raw.ChunkData(
        path=path,
        header=got["header"],
        records=np.frombuffer(got["records"], dtype=raw.RECORD_DTYPE),
        names=got["names"],
        payloads=dict(got["payloads"]),
        damage=[{"file": path.name, "reason": r, "offset": o, "records_lost": n} for r, o, n in got["damage"]],
    )


def try_read_chunk(path: Path):
    """(path, chunk or OSError, scan): scan is _native.scan_records' (records per kind,
    CLOCK_PAIR (ts, a) pairs, largest CPU number, (counter reasons, pause reasons), the
    (name key, address) pairs of its sync records laid flat or None), taken here while the
    records are in cache (None without it)."""
    try:
        chunk = read_chunk(path)
    except OSError as err:
        return path, err, None
    if not len(chunk.records):
        return path, chunk, None
    if chunk.header and chunk.header["source"] == raw.SOURCE_KERNEL_CPU:  # the kernel pass's scan, not the app's
        from oslens.store import kernel_tables

        return path, chunk, kernel_tables.scan_chunk(chunk.records)
    return path, chunk, _native.scan_records(chunk.records.view(np.uint8))


def read_again(path: Path) -> np.ndarray:
    """A chunk's records read again when the pass reaches it (store.held)."""
    return read_chunk(path).records


def _read_and_settle(path: Path, settle, one_at_a_time):
    if one_at_a_time is None:
        got = try_read_chunk(path)
    else:
        with one_at_a_time(path):
            got = try_read_chunk(path)
    if settle is not None and not isinstance(got[1], OSError):
        settle(got[1])
    return got


def read_in_order(paths: list[Path], workers: int = 2, settle=None, one_at_a_time=None):
    """try_read_chunk of each path, in order: `workers` at a time (the Rust reader releases the
    GIL), and no more than one chunk read ahead of each worker. settle(chunk) runs in the worker
    once the chunk is read and scanned (store.held lets its records go there), so the chunks
    waiting to be taken hold no records that will be let go: at 50 M kernel records they held
    three chunks of 32 MiB, the import's peak RSS. one_at_a_time(path): a context the read runs
    in (a lock once reads are let go: two chunks decoding at once were the rest of that peak)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        ahead = collections.deque()
        todo = iter(paths)
        for p in itertools.islice(todo, workers + 1):
            ahead.append(pool.submit(_read_and_settle, p, settle, one_at_a_time))
        while ahead:
            got = ahead.popleft().result()
            nxt = next(todo, None)
            if nxt is not None:
                ahead.append(pool.submit(_read_and_settle, nxt, settle, one_at_a_time))
            yield got


@dataclass
class Read:
    """What the read gives the next steps: the chunks (with the threads that recorded nothing of
    their own), each chunk's scan by path, and what the read cost."""

    chunks: list = field(default_factory=list)
    scans: dict = field(default_factory=dict)
    kernel_scans: dict = field(default_factory=dict)  # kernel chunks' kernel_tables.scan_chunk, by path
    wall_s: float = 0.0
    cpu_s: float = 0.0
    chunks_let_go: int = 0


def read_chunks(trace: Path, meta: dict, losses: salvage.Losses, progress) -> Read:
    """Every raw chunk of `trace`, its damage and the chunks missing added to `losses`;
    `progress` is stepped from 0 to 40 as the chunks are read."""
    paths = raw.chunk_paths(trace)
    out = Read()
    wall, cpu = time.perf_counter(), time.process_time()
    # records held past the read only up to a budget where the pass can read them again
    holder = held.Holder()
    lock = threading.Lock()

    def settle(chunk):
        # names chunks are kept: their thread ledgers are read before the pass
        with lock:
            holder.take(chunk, functools.partial(read_again, chunk.path), ledger.is_names_chunk(chunk))

    decoding = threading.Lock()

    def one_at_a_time(_path):
        # once a chunk was let go the budget is spent: the rest are read one at a time, so the
        # peak holds the budget and one chunk being decoded, whatever the trace's size
        return decoding if holder.let_go else contextlib.nullcontext()

    for i, (p, got, scan) in enumerate(read_in_order(paths, settle=settle, one_at_a_time=one_at_a_time)):
        if isinstance(got, OSError):
            losses.add("damage", f"raw/{p.name}", None, f"chunk unreadable ({got})")
        else:
            out.chunks.append(got)
            if isinstance(scan, dict):  # a kernel chunk: no application records, no clock pairs
                out.kernel_scans[got.path], scan = scan, None
            if scan is not None or not len(got.records) or got.path in out.kernel_scans:
                out.scans[got.path] = scan or (None, [], 0, (None, None))
        progress.step("reading chunks", 40.0 * (i + 1) / max(len(paths), 1))
    for c in ledger.thread_chunks(out.chunks):  # threads that recorded nothing of their own
        out.chunks.append(c)
        out.scans[c.path] = _native.scan_records(c.records.view(np.uint8))
    out.wall_s, out.cpu_s, out.chunks_let_go = time.perf_counter() - wall, time.process_time() - cpu, holder.let_go
    salvage.missing_chunks(losses, trace, [p.name for p in paths], meta)
    for c in out.chunks:
        salvage.chunk_damage(losses, c)
    return out
