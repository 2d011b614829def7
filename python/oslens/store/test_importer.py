"""The importer's chunk reader: the no-copy path (a clean chunk's records mapped from the file)
gives what the decoding reader gives, and damaged or payload-carrying chunks still decode."""

from __future__ import annotations

import os

import numpy as np

from oslens import _native
from oslens.capture import raw
from oslens.store import chunk_reader, importer

HEADER = {"source": raw.SOURCE_APP_THREAD, "clock": raw.CLOCK_TSC, "pid": 7, "tid": 8, "seq": 0, "name": "w"}
RECORDS = [(100 + i, 5, 1, raw.COUNTER, i, 1) for i in range(50)]


def same_chunk(path):
    fast, slow = importer.read_chunk(path), raw.read_chunk(path)
    assert fast.header == slow.header
    assert fast.records.tobytes() == slow.records.tobytes()
    assert (fast.names, fast.payloads, fast.damage) == (slow.names, slow.payloads, slow.damage)
    return fast


def test_a_clean_chunk_is_read_without_decoding(tmp_path):
    path = tmp_path / "app-7-8-0.osl"
    _native.write_chunk(str(path), HEADER, RECORDS)
    got = same_chunk(path)
    assert len(got.records) == 50
    assert got.records["a"].tolist() == list(range(50))
    assert not got.records.flags.writeable


def test_chunks_with_payloads_names_or_damage_read_as_decoded(tmp_path):
    with_payload = tmp_path / "app-7-8-1.osl"
    _native.write_chunk(str(with_payload), HEADER, [(1, 4, 0, raw.EVENT, 20, 0), *RECORDS],
                        names=[(5, 3, 0, "a counter name")], payloads={0: b"x" * 20})
    assert same_chunk(with_payload).payloads == {1: b"x" * 20}  # record 0: the name
    damaged = tmp_path / "app-7-8-2.osl"
    _native.write_chunk(str(damaged), HEADER, RECORDS)
    data = bytearray(damaged.read_bytes())
    data[_native.HEADER_SIZE + 32 * 3 + 16] ^= 0xFF  # record 3 fails its check
    damaged.write_bytes(bytes(data))
    assert len(same_chunk(damaged).damage) == 1
    truncated = tmp_path / "app-7-8-3.osl"
    _native.write_chunk(str(truncated), HEADER, RECORDS)
    os.truncate(truncated, os.path.getsize(truncated) - 64)
    got = same_chunk(truncated)
    assert len(got.records) == 48 and "truncated" in got.damage[0]["reason"]
    empty = tmp_path / "app-7-8-4.osl"
    empty.write_bytes(b"")
    assert np.size(same_chunk(empty).records) == 0


def test_columns_without_nulls_are_written_required_with_the_same_values(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"ts": pa.array([3, 1, 2], pa.int64()), "maybe": pa.array([1, None, 3], pa.int64()),
                      "name": pa.DictionaryArray.from_arrays(pa.array([0, 1, 0], pa.int32()), pa.array(["a", "b"]))})
    importer.write_table(tmp_path / "t.parquet", table)
    back = pq.read_table(tmp_path / "t.parquet")
    assert [f.nullable for f in back.schema] == [False, True, False]
    assert back.column("ts").to_pylist() == [3, 1, 2] and back.column("maybe").to_pylist() == [1, None, 3]
    assert back.column("name").to_pylist() == ["a", "b", "a"]


def test_scan_gives_the_kind_counts_and_clock_pairs_of_raw_clock_for(tmp_path):
    """The readers' scan (_native.scan_records) counts kinds as numpy does, and the importer's
    clock_for fits the same pairs, in the same order, as raw.clock_for."""
    recs = [(1000 + 10 * i, 5, 1 + i % 3, raw.CLOCK_PAIR if i % 7 == 3 else raw.COUNTER, 50_000 + 4 * i, i % 5)
            for i in range(60)]
    paths = []
    for seq, clock in enumerate((raw.CLOCK_TSC, raw.CLOCK_MONOTONIC_NS, raw.CLOCK_TSC)):
        paths.append(tmp_path / f"app-7-8-{seq}.osl")
        _native.write_chunk(str(paths[-1]), {**HEADER, "seq": seq, "clock": clock, "calib": [(900, 40_000), (2000, 52_000)]},
                            recs[seq * 20:(seq + 1) * 20])
    got = [chunk_reader.try_read_chunk(p) for p in paths]
    chunks = [c for _, c, _ in got]
    scans = {c.path: s for _, c, s in got}
    for c in chunks:
        counts, pairs, cpu_max, (counter_reasons, pause_reasons), _sync = scans[c.path]
        assert counts == np.bincount(c.records["kind"], minlength=256).tolist()
        assert cpu_max == int(c.records["cpu"].max())
        assert counter_reasons == sorted(set(c.records["b"][c.records["kind"] == raw.COUNTER].tolist()))
        assert pause_reasons == []
        cp = c.records[c.records["kind"] == raw.CLOCK_PAIR]
        assert pairs == list(zip(cp["ts"].tolist(), cp["a"].tolist()))
    meta = {"clock_pairs": [[800, 39_000]]}
    want, have = raw.clock_for(chunks, meta), importer.clock_for(chunks, meta, scans)
    assert (have.pair_count, have.slope, have.intercept, have.r0, have.n0) == \
        (want.pair_count, want.slope, want.intercept, want.r0, want.n0)


def test_a_trace_whose_recording_was_killed_is_incomplete():
    from oslens.store import salvage

    assert salvage.incomplete_reason({"start_ns": 5, "pid": 9}) == "recording stopped before the program ended"
    assert salvage.incomplete_reason({"start_ns": 5, "end_ns": 9, "exit": {"code": 0}}) is None
    assert salvage.incomplete_reason({"start_ns": 5, "end_ns": 9}) is None  # synthetic traces
    assert salvage.incomplete_reason({}) is None  # not written by oslens record


def test_chunks_past_the_budget_are_let_go_as_read_and_read_one_at_a_time(tmp_path, monkeypatch):
    """read_chunks lets a chunk's records go in the worker that read it, once the held budget is
    spent, and from then on reads the chunks one at a time (the import's peak memory holds the
    budget and one chunk being decoded); the records read again are the ones read first."""
    import threading
    import time

    from oslens.store import held, salvage

    (tmp_path / "raw").mkdir()
    paths = []
    for seq in range(6):
        paths.append(tmp_path / "raw" / f"app-7-8-{seq}.osl")
        _native.write_chunk(str(paths[-1]), {**HEADER, "seq": seq}, [(r[0] + 100 * seq, *r[1:]) for r in RECORDS])
    size = 50 * raw.RECORD_DTYPE.itemsize
    monkeypatch.setattr(held, "HELD_BYTES", 2 * size)
    monkeypatch.delenv("OSLENS_IMPORT_HELD_MB", raising=False)
    read = chunk_reader.try_read_chunk
    busy, overlaps, lock = [0], [], threading.Lock()

    def slow(path):
        with lock:
            busy[0] += 1
            overlaps.append((path.name, busy[0]))
        time.sleep(0.02)
        with lock:
            busy[0] -= 1
        return read(path)

    monkeypatch.setattr(chunk_reader, "try_read_chunk", slow)
    got = chunk_reader.read_chunks(tmp_path, {}, salvage.Losses(), importer.Progress("t", enabled=False))
    kept = [isinstance(c.records, np.ndarray) for c in got.chunks]
    assert sum(kept) == 2 and got.chunks_let_go == 4
    first_let_go = kept.index(False)
    assert all(n == 1 for name, n in overlaps[first_let_go + 3:]), overlaps  # after the reads already under way
    for c in got.chunks:
        assert held.records_of(c).tobytes() == raw.read_chunk(c.path).records.tobytes()
