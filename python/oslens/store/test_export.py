"""Export of kernel-side tracks (CPUs, syscalls, block I/O lanes) and sync waits, on the
analyses' in-memory reference trace (oslens_testing.analysis.synthetic)."""

import json

from oslens_testing.analysis import synthetic
from oslens.store import export, perfetto

MS = synthetic.MS


def test_perfetto_tracks_of_cpus_syscalls_io_and_sync(tmp_path):
    con = synthetic.reference_trace()
    out = tmp_path / "ref.pftrace"
    counts = export.write_perfetto(con, out)
    packets = perfetto.decode_trace(out.read_bytes())
    tracks = {p["track"]["uuid"]: p["track"] for p in packets if "track" in p}
    by_name: dict = {}
    for p in packets:
        if "event" in p and p["event"]["type"] == perfetto.SLICE_BEGIN:
            t = tracks[p["event"]["track"]]
            by_name.setdefault(t.get("name") or t["thread"]["name"], []).append((p["timestamp"], p["event"]["name"]))
    assert by_name["CPU 0"] == [(0, "main [100]"), (3 * MS, "arbd [500]"), (5 * MS, "main [100]"),
                                (13 * MS, "main [100]"), (16 * MS, "kworker/0:1 [600]"), (18 * MS, "main [100]")]
    assert [n for _, n in by_name["CPU 1"]] == ["worker [101]", "arbd [500]", "worker [101]"]
    assert by_name["syscalls"] == [(14 * MS, "read")]
    # two overlapping requests on one device: two lanes
    assert by_name["I/O 8:0"] == [(16 * MS, "R 4096 B (tid 100)")]
    assert by_name["I/O 8:0 #2"] == [(17 * MS, "WS 8192 B (tid 600)")]
    assert sorted(by_name["sync waits"]) == [(8 * MS, "barrier b0"), (15 * MS, "mutex m0")]
    cpu_group = [t for t in tracks.values() if t.get("name") == "CPUs"]
    assert len(cpu_group) == 1 and tracks[next(u for u, t in tracks.items() if t.get("name") == "CPU 0")]["parent"] == \
        cpu_group[0]["uuid"]
    assert counts["slices"] == sum(len(v) for v in by_name.values())
    # every slice track's begins and ends balance and nest
    depth: dict = {}
    for p in packets:
        if "event" in p and p["event"]["type"] in (perfetto.SLICE_BEGIN, perfetto.SLICE_END):
            d = depth.get(p["event"]["track"], 0) + (1 if p["event"]["type"] == perfetto.SLICE_BEGIN else -1)
            assert d >= 0
            depth[p["event"]["track"]] = d
    assert set(depth.values()) == {0}


def test_chrome_json_of_the_same(tmp_path):
    con = synthetic.reference_trace()
    out = tmp_path / "ref.json"
    export.write_chrome(con, out)
    evs = json.loads(out.read_text())["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "process_name"}
    assert procs[export.CPU_PID] == "CPUs" and procs[export.IO_PID] == "block I/O"
    cpu0 = [e for e in evs if e["ph"] == "X" and e["pid"] == export.CPU_PID and e["tid"] == 0]
    assert [e["name"] for e in cpu0][:2] == ["main [100]", "arbd [500]"]
    assert cpu0[0]["dur"] == 3 * MS / 1000
    regions = [e for e in evs if e["ph"] == "X" and e["cat"] == "region" and e["tid"] == 100]
    assert len(regions) == 6
