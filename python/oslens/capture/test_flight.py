"""The flight loop's trigger rules, without a recording: --max-snapshots, --min-gap, --after."""

from oslens.capture.flight import FlightOptions, FlightRecorder

S = 1_000_000_000


class _Cuts(FlightRecorder):
    """Records the cuts instead of writing snapshots."""

    def _cut(self, fired):
        self.snapshots.append({"dir": f"snapshot-{len(self.snapshots) + 1:03d}", **fired})


def _recorder(tmp_path, **kw):
    (tmp_path / "raw").mkdir()
    return _Cuts(tmp_path, FlightOptions(ring_bytes=4 << 20, **kw), {}, [])


def test_min_gap_and_max_snapshots_ignore_triggers_and_say_why(tmp_path):
    r = _recorder(tmp_path, max_snapshots=2, min_gap_s=5)
    for t in (0, 1, 6, 12):
        r._trigger({"spec": "SIGUSR2", "t_ns": t * S})
    assert [s["t_ns"] for s in r.snapshots] == [0, 6 * S]
    assert [(i["t_ns"], i["why"]) for i in r.ignored] == [(1 * S, "within --min-gap 5s of the previous trigger"),
                                                          (12 * S, "--max-snapshots 2 reached")]


def test_after_waits_before_the_cut(tmp_path):
    import time

    r = _recorder(tmp_path, after_s=3600)
    now = time.monotonic_ns()
    r._trigger({"spec": "SIGUSR2", "t_ns": now})
    assert r.snapshots == [] and r.pending[0]["cut_at_ns"] == now + 3600 * S
    r._trigger({"spec": "exit:SIGSEGV", "t_ns": now}, immediate=True)  # the program's death is cut at once
    assert [s["spec"] for s in r.snapshots] == ["exit:SIGSEGV"]


def _chunk(raw_dir, name, ts, closed=True):
    from oslens import _native
    from oslens.capture import raw

    _native.write_chunk(str(raw_dir / name), {"closed": closed, "clock": raw.CLOCK_MONOTONIC_NS},
                        [(t, 7, 0, raw.EVENT, 8, i) for i, t in enumerate(ts)])


def test_trim_keeps_four_chunks_per_stream_and_counts_what_it_deleted(tmp_path):
    r = _recorder(tmp_path)
    for seq in range(6):
        _chunk(tmp_path / "raw", f"app-1-1-{seq}.osl", [seq * S + 1, seq * S + 2])
    _chunk(tmp_path / "raw", "kernel-cpu0-0.osl", [5, 6], closed=False)
    r.trim()
    assert sorted(p.name for p in (tmp_path / "raw").iterdir()) == [f"app-1-1-{s}.osl" for s in range(2, 6)] + ["kernel-cpu0-0.osl"]
    assert r.overwritten_list() == [{"stream": "app-1-1", "chunks": 2, "records": 4, "first_ns": 1, "last_ns": S + 2}]


def test_trim_never_deletes_past_an_open_chunk_and_honours_the_window(tmp_path):
    import time

    now = time.monotonic_ns()
    r = _recorder(tmp_path, window_ns=1 * S)
    _chunk(tmp_path / "raw", "app-1-1-0.osl", [now - 10 * S])
    _chunk(tmp_path / "raw", "app-1-1-1.osl", [now - 5 * S])
    _chunk(tmp_path / "raw", "app-1-1-2.osl", [now])
    _chunk(tmp_path / "raw", "app-2-2-0.osl", [now - 10 * S], closed=False)
    _chunk(tmp_path / "raw", "app-2-2-1.osl", [now - 9 * S])
    r.trim()
    assert sorted(p.name for p in (tmp_path / "raw").iterdir()) == ["app-1-1-2.osl", "app-2-2-0.osl", "app-2-2-1.osl"]
    assert [(o["stream"], o["chunks"]) for o in r.overwritten_list()] == [("app-1-1", 2)]


def test_a_sigusr2_after_the_loop_stopped_is_not_fatal(tmp_path):
    import os
    import signal

    (tmp_path / "raw").mkdir()
    before = signal.getsignal(signal.SIGUSR2)
    signal.signal(signal.SIGUSR2, signal.SIG_DFL)
    try:
        r = FlightRecorder(tmp_path, FlightOptions(ring_bytes=4 << 20), {}, []).start()
        r.stop()
        # as the program's end leaves it: a late `kill -USR2` while oslens imports would kill it with SIG_DFL
        assert signal.getsignal(signal.SIGUSR2) not in (signal.SIG_DFL, None)
        os.kill(os.getpid(), signal.SIGUSR2)
        assert r.snapshots == []
    finally:
        signal.signal(signal.SIGUSR2, before)


def test_a_closed_chunk_is_scanned_once_and_its_link_reuses_the_scan(tmp_path):
    import os

    from oslens.capture import flight_chunks

    r = _recorder(tmp_path)
    _chunk(tmp_path / "raw", "app-1-1-0.osl", [5, 9, 7])
    _chunk(tmp_path / "raw", "app-1-1-1.osl", [10, 11], closed=False)
    r.trim()
    calls = []
    real = flight_chunks.scan
    flight_chunks.scan = lambda p: calls.append(p.name) or real(p)
    try:
        os.link(tmp_path / "raw" / "app-1-1-0.osl", tmp_path / "link.osl")
        h = flight_chunks.held(tmp_path / "link.osl", [], r.scans, closed=True)
        assert (h.records, h.first_ns, h.last_ns) == (3, 5, 9) and calls == []
        h = flight_chunks.held(tmp_path / "raw" / "app-1-1-1.osl", [], r.scans)  # open: read each time
        assert (h.records, h.first_ns, h.last_ns) == (2, 10, 11) and calls == ["app-1-1-1.osl"]
    finally:
        flight_chunks.scan = real


def test_a_new_chunk_on_a_deleted_ones_inode_is_read_again(tmp_path):
    from oslens.capture import flight_chunks

    cache = flight_chunks.HeldCache()
    (tmp_path / "raw").mkdir()
    path = tmp_path / "raw" / "app-1-1-0.osl"
    _chunk(tmp_path / "raw", path.name, [5, 9])
    assert flight_chunks.held(path, [], cache, closed=True).records == 2
    path.unlink()
    _chunk(tmp_path / "raw", path.name, [20, 21, 22])  # the file system may hand out the same inode
    h = flight_chunks.held(path, [], cache, closed=True)
    assert (h.records, h.first_ns, h.last_ns) == (3, 20, 22)
