"""capture.ledger: a names chunk's thread ledger read back as one chunk per thread."""

from pathlib import Path

from oslens import _native
from oslens.capture import ledger, raw

NAME_THREAD = raw.CLASS_ID["thread"]
PID = 100


def names_chunk(entries):
    """A names chunk holding ledger records: entries of ("start", tid, ts), ("end", tid, ts, how,
    name or None), in that order."""
    rows, names = [], []
    for e in entries:
        if e[0] == "start":
            rows.append((e[2], e[1], 0, ledger.THREAD_START, PID, 0xABC))
        else:
            _, tid, ts, how, name = e
            if name is not None:
                rows.append((ts, tid, 0, raw.NAME, NAME_THREAD, len(name)))
                names.append((tid, NAME_THREAD, 0, name))
            rows.append((ts, tid, 0, ledger.THREAD_END, ts * 10, how))
    header = {"source": raw.SOURCE_APP_THREAD, "clock": raw.CLOCK_TSC, "pid": PID, "tid": 0, "ppid": 1, "cpu": 0}
    return raw.ChunkData(path=Path(f"raw/names-{PID}-0.osl"), header=header, records=ledger._records(rows),
                         names=names, payloads={})


def test_entries_pair_starts_and_ends_and_leave_out_the_void():
    nc = names_chunk([("start", 1, 10), ("start", 2, 11), ("start", 3, 12), ("end", 2, 20, ledger.THREAD_END_OWN_CHUNK, None),
                      ("end", 1, 21, 0, "one"), ("start", 1, 30), ("end", 1, 31, 0, "one again")])
    got = [(e["tid"], int(e["start"]["ts"]), None if e["end"] is None else int(e["end"]["ts"]), e["name"])
           for e in ledger.entries(nc)]
    # 2 went on to record (its chunk holds its start); 3 never ended; tid 1 was used twice
    assert got == [(1, 10, 21, "one"), (3, 12, None, None), (1, 30, 31, "one again")]


def test_thread_chunks_are_the_chunks_the_threads_would_have_had():
    nc = names_chunk([("start", 1, 10), ("start", 3, 12), ("start", 4, 13), ("end", 1, 21, 0, "one"), ("start", 1, 30),
                      ("end", 1, 31, 0, "again")])
    nc.names.append((PID, NAME_THREAD, 0, "creator"))  # the creator's name, which 3 and 4 inherited
    # 4 has a chunk of its own and its entry never ended: killed before the entry was voided
    own = raw.ChunkData(path=Path(f"raw/app-{PID}-4-0.osl"), header={**nc.header, "tid": 4}, records=nc.records[:0],
                        names=[], payloads={})
    got = ledger.thread_chunks([nc, own])
    assert [(c.tid, c.header["seq"], c.header["name"], c.header["closed"]) for c in got] == [
        (1, 0, "one", True), (3, 0, "creator", False), (1, 1, "again", True)]
    first = got[0]
    assert first.records["kind"].tolist() == [ledger.THREAD_START, raw.CLOCK_PAIR]
    assert first.records["ts"].tolist() == [10, 21] and first.records["a"].tolist() == [PID, 210]
    assert first.header["calib"] == [(0, 0), (21, 210)]
    assert got[1].records["kind"].tolist() == [ledger.THREAD_START]


def test_records_carry_the_formats_check_byte(tmp_path):
    rows = [(5, 0, 1, ledger.THREAD_START, 7, 8), (9, 0, 1, raw.CLOCK_PAIR, 90, 0)]
    path = tmp_path / "c.osl"
    _native.write_chunk(str(path), {"pid": 1, "tid": 2}, rows)
    assert ledger._records(rows).tobytes() == raw.read_chunk(path).records.tobytes()


FORK, EXEC, EXIT = ledger.MARKER_KINDS


def markers_chunk(rows, names=()):
    """A names chunk of PID holding these (ts, id, cpu, kind, a, b) rows and NAMEs (tid, name)."""
    header = {"source": raw.SOURCE_APP_THREAD, "clock": raw.CLOCK_TSC, "pid": PID, "tid": 0, "ppid": 1, "cpu": 0, "seq": 0}
    return raw.ChunkData(path=Path(f"raw/names-{PID}-0.osl"), header=header, records=ledger._records(rows),
                         names=[(tid, NAME_THREAD, 0, name) for tid, name in names], payloads={})


def test_a_childs_markers_are_the_chunk_it_had():
    # the first marker's pair opens them (id = tid), then the fork and exec markers as recorded
    nc = markers_chunk([(5, PID, 0, raw.NAME, NAME_THREAD, 2), (5, PID, 1, raw.CLOCK_PAIR, 50, 0),
                        (5, 0, 1, FORK, 0, 1), (7, 3, 1, EXEC, 0, 0)], [(PID, "sh")])
    (c,) = ledger.thread_chunks([nc])
    assert (c.pid, c.tid, c.header["name"], c.header["closed"], c.header["seq"]) == (PID, PID, "sh", False, -1)
    assert c.header["calib"] == [(5, 50), (0, 0)]
    assert [tuple(int(r[k]) for k in ("ts", "id", "cpu", "kind", "a", "b")) for r in c.records] == [
        (5, 0, 1, FORK, 0, 1), (7, 3, 1, EXEC, 0, 0)]
    # and not twice: `oslens dump` leaves the ledger's own records out of the names chunk's
    assert [ledger.is_ledger_record(int(r["kind"]), int(r["id"])) for r in nc.records] == [False, True, True, True]


def test_an_exiting_childs_markers_end_with_its_pair_and_name_and_a_void_leaves_none():
    rows = [(5, PID, 0, raw.CLOCK_PAIR, 50, 0), (5, 0, 0, FORK, 0, 1), (8, 0, 0, EXIT, 3, 0),
            (9, PID, 0, raw.NAME, NAME_THREAD, 3), (9, PID, 1, ledger.THREAD_END, 90, 0)]
    (c,) = ledger.thread_chunks([markers_chunk(rows, [(PID, "cc1")])])
    assert c.header["name"] == "cc1" and c.header["calib"] == [(5, 50), (9, 90)]
    assert c.records["kind"].tolist() == [FORK, EXIT, raw.CLOCK_PAIR] and c.records["a"].tolist() == [0, 3, 90]
    # the child went on to record: its chunk holds the markers (THREAD_END, b = own chunk)
    void = rows[:2] + [(6, PID, 0, ledger.THREAD_END, 60, ledger.THREAD_END_OWN_CHUNK)]
    assert ledger.thread_chunks([markers_chunk(void)]) == []


def test_markers_sort_among_the_threads_own_chunks_by_time():
    """An exec'd image's chunk has the same pid and tid as the markers of the image before it."""
    nc = markers_chunk([(50, PID, 0, raw.CLOCK_PAIR, 500, 0), (50, 0, 0, EXEC, 0, 0)])
    own = [raw.ChunkData(path=Path(f"raw/app-{PID}-{PID}-{s}.osl"), header={**nc.header, "tid": PID, "seq": s, "calib": [(t, t * 10), (0, 0)]},
                         records=nc.records[:0], names=[], payloads={}) for s, t in ((0, 10), (1, 90))]
    (c,) = ledger.thread_chunks([nc, *own])
    from oslens.store.app_tables import chunk_order_key

    assert [x.path.name for x in sorted([*own, c], key=chunk_order_key)] == [
        f"app-{PID}-{PID}-0.osl", f"names-{PID}-0.osl#markers-{PID}", f"app-{PID}-{PID}-1.osl"]
