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
