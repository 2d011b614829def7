import json

import numpy as np
import pyarrow as pa
import pytest

from oslens.errors import OslensError
from oslens.store import calibration
from oslens_testing.store import compensation_oracle as compensate


def test_cumulative_is_exclusive_and_per_thread():
    pid = np.array([1, 1, 1, 1, 1], dtype=np.int64)
    tid = np.array([1, 1, 1, 2, 2], dtype=np.int64)
    ts = np.array([100, 200, 300, 150, 250], dtype=np.int64)
    cost = np.array([10, 20, 30, 5, 7], dtype=np.float64)
    c = compensate.cumulative(pid, tid, ts, cost)
    assert c.before.tolist() == [0, 10, 30, 0, 5]
    assert compensate.record_ts_comp(ts, c).tolist() == [100, 190, 270, 150, 245]
    assert c.total == {(1, 1): 60.0, (1, 2): 12.0}
    # arbitrary times: the cost of the records strictly before them; after the last: the total
    got = c.at(np.array([1, 1, 1, 1]), np.array([1, 1, 2, 2]), np.array([200, 301, 150, 999]))
    assert got.tolist() == [10, 60, 0, 12]
    # an unknown thread costs nothing
    assert c.at(np.array([9]), np.array([9]), np.array([5])).tolist() == [0]


def test_thread_order_detects_interleaving():
    assert compensate.thread_order(np.array([1, 1, 1]), np.array([1, 1, 2])) is None
    order_ = compensate.thread_order(np.array([1, 1, 1]), np.array([1, 2, 1]))
    assert order_.tolist() == [0, 2, 1]


def test_record_costs_mapping():
    cal = {"schema": calibration.SCHEMA, "costs": {"event": {"ns": 20.0, "ci_low": 19, "ci_high": 21},
                                                 "raw": {"ns": -1.0}, "region_begin": {"ns": 30}}}
    rc = calibration.record_costs(cal)
    assert rc["event"] == (20.0, 19.0, 21.0, "event")
    assert rc["lock_request"][0] == 0.0 and rc["lock_request"][3] == "raw"  # negative -> 0, fallback
    assert "timer_start" not in rc and "pause" not in rc


def test_load_and_validate(tmp_path, monkeypatch):
    monkeypatch.setenv("OSLENS_CALIBRATION", str(tmp_path / "c.json"))
    assert calibration.load() is None
    (tmp_path / "c.json").write_text("{not json")
    with pytest.raises(OslensError):
        calibration.load()
    (tmp_path / "c.json").write_text(json.dumps({"schema": "other"}))
    with pytest.raises(OslensError):
        calibration.load()
    cal = {"schema": calibration.SCHEMA, "machine": {"hostname": "h"}, "costs": {"event": {"ns": 1.0}}}
    assert calibration.save(cal) == tmp_path / "c.json"
    assert calibration.load()["costs"]["event"]["ns"] == 1.0
    monkeypatch.delenv("OSLENS_CALIBRATION")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert calibration.calibration_path("box") == tmp_path / "cache" / "oslens" / "calibration-box.json"


def test_store_build_adds_columns_and_summary():
    from oslens_testing.store import compensation_oracle as compensation

    kinds = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, 1, 0], pa.int32()),
                                           pa.array(["region_begin", "region_end", "pause"]))
    ev = pa.table({"ts": pa.array([0, 100, 1000, 1200, 1300], pa.int64()), "pid": [1] * 5, "tid": [1] * 5,
                   "kind": kinds, "value": pa.array([0, 0, 500, 0, 0], pa.int64())})
    regions = pa.table({"pid": [1, 1], "tid": [1, 1], "begin_ns": pa.array([0, 1300], pa.int64()),
                        "end_ns": pa.array([100, 5000], pa.int64()), "duration_ns": pa.array([100, 3700], pa.int64())})
    cal = {"schema": calibration.SCHEMA, "costs": {"region_begin": {"ns": 10.0}, "region_end": {"ns": 20.0}}}
    out = compensation.build({"app_events": ev, "regions": regions}, cal)
    assert out["app_events"].column("ts_comp_ns").to_pylist() == [0, 90, 970, 670, 750]
    r = out["regions"]
    assert r.column("begin_comp_ns").to_pylist() == [0, 750]
    # the open region ends after the thread's last record: every cost of the thread is removed
    assert r.column("end_comp_ns").to_pylist() == [90, 5000 - 560]
    assert r.column("duration_comp_ns").to_pylist() == [90, 5000 - 560 - 750]
    s = {row["kind"]: row for row in out["compensation"].to_pylist()}
    assert s["region_begin"]["records"] == 2 and s["region_begin"]["cost_ns"] == 20.0
    assert s["pause"]["cost_ns"] == 500.0
    # without a calibration only the pause is removed, and the summary says why
    out = compensation.build({"app_events": ev, "regions": regions}, None, "no calibration")
    assert out["app_events"].column("ts_comp_ns").to_pylist() == [0, 100, 1000, 700, 800]
    s = {row["kind"]: row for row in out["compensation"].to_pylist()}
    assert s["region_begin"]["cost_ns"] == 0 and "no calibration" in s["region_begin"]["source"]


def test_refusal_names_each_difference_and_skips_what_a_side_does_not_state():
    cal = {"path": "/c.json", "machine": {"hostname": "a", "cpu_model": "X", "kernel": "6.1"}, "recorder_clock": "tsc"}
    recorded = [{"records": 3}]
    same = {"machine": {"hostname": "a", "cpu_model": "X", "kernel": "6.1"}, "clock": "tsc", "threads": recorded}
    assert calibration.refusal(cal, same) is None
    other = {"machine": {"hostname": "a", "cpu_model": "Y", "kernel": "6.2"}, "clock": "tsc", "threads": recorded}
    assert calibration.refusal(cal, other) == ("the full calibration /c.json is not used: it was measured on another "
                                               "CPU model 'X' where the trace's is 'Y'; another kernel '6.1' where the "
                                               "trace's is '6.2'")
    # a trace whose program recorded nothing has the kernel's clock: not the recorder's, not compared
    assert calibration.refusal(cal, {**same, "clock": "monotonic", "threads": []}) is None
    assert "recorder clock 'tsc'" in calibration.refusal(cal, {**same, "clock": "monotonic"})
    assert calibration.refusal({"path": "/h.json"}, other) is None  # a hand-written file names no machine
