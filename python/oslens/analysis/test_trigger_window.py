"""The interval a snapshot's trigger section explains (trigger_window.window), from meta alone."""

import json

from oslens.analysis.trigger_window import LOOKBACK_NS, window


def _meta(**kw) -> dict:
    m = {"flight.trigger.spec": "region:work>50ms", "flight.trigger.t_ns": "5000000000",
         "flight.complete_window": json.dumps([4_500_000_000, 5_100_000_000])}
    m.update({f"flight.trigger.{k}": str(v) for k, v in kw.items()})
    return m


def test_a_trace_that_is_no_snapshot_has_no_window():
    assert window({}) is None
    assert window({"flight.ring_bytes_per_stream": "4194304"}) is None


def test_the_triggers_own_interval_and_thread():
    assert window(_meta(begin_ns=4_800_000_000, tid=17)) == (4_800_000_000, 5_000_000_000, 17)


def test_an_interval_reaching_before_the_complete_window_starts_at_it():
    assert window(_meta(begin_ns=4_000_000_000, tid=17)) == (4_500_000_000, 5_000_000_000, 17)


def test_a_trigger_with_no_interval_looks_back_a_second_within_the_complete_window():
    m = _meta()
    m["flight.complete_window"] = json.dumps([None, 5_100_000_000])  # nothing overwritten
    assert window(m) == (5_000_000_000 - LOOKBACK_NS, 5_000_000_000, None)
    assert window(_meta()) == (4_500_000_000, 5_000_000_000, None)
