"""Chunk rotation (OSLENS_ON_FULL=rotate, what --flight records with) keeps every record: the
next chunk, prepared ahead on the recorder's helper thread or opened by the writer when the
helper is late (crates/recorder/src/helper.rs, `Successor`), follows the full one with no
record lost, duplicated or out of order, and no chunk sequence number skipped."""

import os
from collections import defaultdict

import numpy as np
import pytest

from conftest import run_oslens
from oslens import _native
from oslens.capture import raw

THREADS = 3  # more writers than this VM's 2 CPUs, and the helper with them
RECORDS_PER_MIB = 32_768


# per thread 6.1 chunks' worth: 6 rotations, fewer than the 8 chunks a rotating thread keeps; with
# 1 MiB chunks the helper is often late (the writer opens the next itself), with 4 MiB seldom
@pytest.mark.parametrize("buffer_mb", [1, 4])
def test_a_rotating_recording_under_load_keeps_every_record_in_order(compile_c, tmp_path, buffer_mb):
    events = buffer_mb * RECORDS_PER_MIB * 61 // 10
    prog = compile_c("rotate_count.c")
    trace, log = tmp_path / "t", tmp_path / "log"
    env = dict(os.environ, OSLENS_ON_FULL="rotate")
    run_oslens("record", "--no-kernel", "--no-import", "--no-preload", "--buffer-mb", buffer_mb, "-o", trace, "--",
               prog, log, THREADS, events, env=env)
    written = {int(t): int(n) for t, n in (line.split() for line in log.read_text().splitlines())}
    assert sorted(written.values()) == [events] * THREADS

    chunks = defaultdict(list)
    for path in raw.chunk_paths(trace):
        if path.name.startswith("app-"):
            c = raw.read_chunk(path)
            chunks[c.header["tid"]].append(c)
    assert set(chunks) == set(written)
    for tid, mine in chunks.items():
        mine.sort(key=lambda c: c.header["seq"])
        assert [c.header["seq"] for c in mine] == list(range(len(mine))), tid  # no chunk skipped
        assert len(mine) >= 6, tid  # it rotated
        for c in mine:
            assert not c.damage and c.header["dropped_events"] == 0, (tid, c.path.name)
        # every full one was closed (the exiting thread's last one is left open, complete, by design)
        assert all(c.header["closed"] for c in mine[:-1]), tid
        # ...and, its close finished (by the helper, or at exit), cut at its last record, no ring left
        for c in mine[:-1]:
            assert c.path.stat().st_size == _native.HEADER_SIZE + c.header["capacity"] * _native.RECORD_SIZE, c.path.name
            assert c.header["capacity"] == c.header["committed"], c.path.name
        # every event, in chunk order then position order: exactly the program's numbers
        seqs = np.concatenate([c.records["b"][c.records["kind"] == raw.EVENT] for c in mine])
        assert len(seqs) == written[tid], tid
        assert np.array_equal(seqs, np.arange(written[tid], dtype=seqs.dtype)), tid
        # each chunk's first record is no older than the previous chunk's last
        for one, two in zip(mine, mine[1:]):
            assert one.records["ts"][-1] <= two.records["ts"][0]
    # a prepared chunk nobody took is never left among the trace's chunks
    assert all(p.name.startswith(("app-", "names-")) for p in raw.chunk_paths(trace))
