"""oslens.adapt(phase) in Python: reads OSLENS_PLAN, applies to the calling thread."""

import errno
import json
import threading

from oslens.control import adapt, kernel


def in_thread(fn):
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("v", fn()))
    t.start()
    t.join()
    return out["v"]


PLAN = {"version": 1, "phases": {
    "default": {"sched": True, "class": "other", "policy": 0, "priority": 0, "slice_ns": 0, "nice": None,
                "affinity": None, "thp_disable": None},
    "compute": {"sched": True, "class": "batch", "policy": 3, "priority": 0, "slice_ns": 30_000_000, "nice": None,
                "affinity": None, "thp_disable": None}}}


def test_no_plan_is_a_no_op(monkeypatch):
    monkeypatch.delenv("OSLENS_PLAN", raising=False)
    assert adapt.adapt("compute") == 0


def test_phases(tmp_path, monkeypatch):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(PLAN))
    monkeypatch.setenv("OSLENS_PLAN", str(path))

    def run():
        r1 = adapt.adapt("compute")
        a1 = kernel.sched_getattr(0)
        r2 = adapt.adapt("unknown-phase")  # falls back to default
        a2 = kernel.sched_getattr(0)
        return r1, a1, r2, a2
    r1, a1, r2, a2 = in_thread(run)
    assert (r1, a1.cls) == (0, "batch") and a1.runtime_ns in (30_000_000, 0)
    assert (r2, a2.cls) == (0, "other")


def test_bad_plans(tmp_path, monkeypatch):
    monkeypatch.setenv("OSLENS_PLAN", str(tmp_path / "missing.json"))
    assert adapt.adapt("compute") == errno.ENOENT
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    monkeypatch.setenv("OSLENS_PLAN", str(bad))
    assert adapt.adapt("compute") == errno.EINVAL
    nodefault = tmp_path / "nd.json"
    nodefault.write_text(json.dumps({"phases": {"io": PLAN["phases"]["default"]}}))
    monkeypatch.setenv("OSLENS_PLAN", str(nodefault))
    assert adapt.adapt("compute") == errno.ENOENT
