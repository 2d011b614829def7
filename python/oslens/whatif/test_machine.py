"""The preemption grid read from a trace (machine.observed_tick)."""

from oslens.whatif import machine

MS = 1_000_000
MACH = {"tick_ns": 4 * MS, "sources": {"tick": "CONFIG_HZ=250"}}


def test_half_tick_preemptions_halve_the_tick():
    ends = [k * 4 * MS + 10_000 for k in range(40)] + [k * 4 * MS + 2 * MS - 5_000 for k in range(30)]
    out = machine.observed_tick(MACH, ends)
    assert out["tick_ns"] == 2 * MS and "halved: 30 preempted slices" in out["sources"]["tick"]
    assert MACH["tick_ns"] == 4 * MS  # the defaults are not changed in place


def test_preemptions_on_the_tick_or_too_few_keep_config_hz():
    on_tick = [k * 4 * MS + 10_000 for k in range(60)] + [k * 4 * MS + 1 * MS for k in range(60)]
    assert machine.observed_tick(MACH, on_tick)["tick_ns"] == 4 * MS
    few = [k * 4 * MS for k in range(20)] + [k * 4 * MS + 2 * MS for k in range(20)]
    assert machine.observed_tick(MACH, few)["tick_ns"] == 4 * MS


def test_no_switch_cost_beyond_the_recorded_bursts_without_bench():
    # the recorded slices tile each CPU, so their bursts already hold their switches' cost
    costs = machine.switch_costs(None)
    assert (costs["switch_ns"], costs["migrate_ns"]) == (0, 0)
    assert "hold their switches' cost" in costs["source"] and "--bench FILE" in costs["source"]
