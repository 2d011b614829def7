"""The in-vivo arithmetic (oslens.calibrate.in_vivo) on exact synthetic inputs: paired
differences and their interval, the agreement verdict, the in-vitro charge for a run's kind mix
and region-name lengths, the start-up charged with and without the preload library."""

import numpy as np
import pytest

from oslens.calibrate import in_vivo


def test_paired_diff_is_the_median_of_the_pairs():
    diffs = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 100.0]
    without = [10.0 * (i + 1) for i in range(11)]
    with_ = [w + d for w, d in zip(without, diffs)]
    pd = in_vivo.paired_diff(with_, without)
    assert pd["n"] == 11 and pd["median"] == 6.0
    # the pair hit by load (100) moves the median not at all, nor the interval's ends
    assert pd["ci"] == [2.0, 10.0] and pd["ci_coverage"] >= 0.95
    assert pd["differences"] == diffs
    # the mean and its t-interval are beside it, and do feel the outlier
    assert pd["mean"] == pytest.approx(155 / 11)
    assert pd["mean_ci"][0] < pd["mean"] < pd["mean_ci"][1]


def test_paired_diff_cancels_what_hits_both_sides_of_a_pair():
    rng = np.random.default_rng(6)
    load = rng.uniform(0, 50, 21)  # drift / load shared by the two runs of a pair, far above the effect
    without = 100 + load
    with_ = 103 + load
    pd = in_vivo.paired_diff(with_, without)
    assert pd["median"] == pytest.approx(3.0) and pd["ci"] == pytest.approx([3.0, 3.0])


def test_paired_diff_degenerate_sizes():
    assert in_vivo.paired_diff([], [])["median"] is None
    one = in_vivo.paired_diff([5.0], [2.0])
    assert one["median"] == 3.0 and one["ci"] == [3.0, 3.0] and one["ci_coverage"] == 0.0


def test_agreement_verdicts():
    met = in_vivo.agreement(11.0, [10.0, 11.5], 10.0)
    assert met["met"] and met["conclusive"] and met["verdict"].startswith("met:")
    assert met["ratio"] == pytest.approx(1.1) and met["ratio_ci"] == pytest.approx([1.0, 1.15])
    not_met = in_vivo.agreement(15.0, [14.0, 16.0], 10.0)
    assert not not_met["met"] and not_met["conclusive"] and not_met["verdict"].startswith("not met:")
    assert not not_met["vitro_inside_vivo_ci"]
    # a wide interval: the point estimate says one thing, the runs cannot tell; said so
    wide = in_vivo.agreement(14.6, [5.0, 20.0], 10.0)
    assert not wide["met"] and not wide["conclusive"] and wide["vitro_inside_vivo_ci"]
    assert "inconclusive" in wide["verdict"] and "inside the in-vivo interval" in wide["verdict"]
    wide_met = in_vivo.agreement(10.5, [7.0, 12.5], 10.0)
    assert wide_met["met"] and not wide_met["conclusive"] and "inconclusive" in wide_met["verdict"]
    assert in_vivo.agreement(None, None, 10.0)["met"] is None


CAL = {
    "costs": {"event": {"ns": 20.0}, "region_begin": {"ns": 30.0}, "region_end": {"ns": 32.0}, "off": {"ns": 2.0},
              "preload_sync": {"ns": 40.0}},
    "region_name": {"ns_per_byte": 1.5, "anchor_bytes": 9},
    "startup": {"cpu": {"ns": 3e6}, "wall": {"ns": 4e6}, "cpu_preload": {"ns": 5e6}, "wall_preload": {"ns": 6e6},
                "per_record_outside": {"ns": 10.0}},
}


def test_in_vitro_cost_weights_kinds_and_region_names():
    counts = {"event": 10, "region_begin": 100, "region_end": 100, "lock_request": 5, "clock_pair": 1}
    v = in_vivo.in_vitro_cost(counts, CAL)
    # calls less the no-op the uninstrumented run makes (not for the preload wrappers, absent there)
    calls = 10 * 18 + 100 * 28 + 100 * 30 + 5 * 40
    assert v["cost_ns"] == pytest.approx(calls) and v["events"] == 215
    assert v["outside_ns"] == pytest.approx(216 * 10.0)  # every record, clock_pair included
    assert v["region_name_adjust_ns"] == 0.0
    # 200 region records with 6-byte names: 3 bytes shorter than the calibrated 9, 1.5 ns each
    v6 = in_vivo.in_vitro_cost(counts, CAL, region_name_bytes=200 * 6)
    assert v6["region_name_adjust_ns"] == pytest.approx(-200 * 3 * 1.5)
    assert v6["cost_ns"] == pytest.approx(calls - 900) and v6["mean_region_name_bytes"] == 6
    # a calibration without the per-byte figure charges the 9-byte cost whatever the names
    old = {k: v for k, v in CAL.items() if k != "region_name"}
    assert in_vivo.in_vitro_cost(counts, old, region_name_bytes=1200)["cost_ns"] == pytest.approx(calls)


def test_analyse_pairs_runs_and_charges_the_preload_start_up():
    counts = {"event": 1000, "region_begin": 0}
    without = [{"cpu_s": 1.0 + 0.1 * i, "wall_s": 1.0 + 0.1 * i} for i in range(7)]
    with_ = [{"cpu_s": r["cpu_s"] + 0.004, "wall_s": r["wall_s"] + 0.005} for r in without]
    r = in_vivo.analyse(with_, without, counts, 0.0, CAL, 1, {"preload": False})
    cpu = r["measures"]["cpu_s"]
    assert cpu["pairs"] == 7 and cpu["overhead_s"] == pytest.approx(0.004)
    assert cpu["startup_s"] == pytest.approx(0.003)
    assert cpu["in_vivo_ns_per_event"] == pytest.approx(4000.0)
    assert cpu["in_vivo_net_ns_per_event"] == pytest.approx(1000.0)
    vitro = (1000 * 18 + 1000 * 10) / 1000
    assert cpu["in_vitro_process_ns_per_event"] == pytest.approx(vitro)
    assert cpu["in_vivo_over_in_vitro"] == pytest.approx(1000 / vitro)
    assert cpu["agreement"]["conclusive"] and not cpu["agreement"]["met"]
    # compensated: the paired overhead less everything charged, on top of the run without
    charged = (1000 * 18 + 1000 * 10) / 1e9 + 0.003
    assert cpu["compensated_s"] == pytest.approx(cpu["without_s"] + 0.004 - charged)
    rp = in_vivo.analyse(with_, without, counts, 0.0, CAL, 1, {"preload": True})
    assert rp["preload"] and rp["measures"]["cpu_s"]["startup_s"] == pytest.approx(0.005)
    assert rp["measures"]["wall_s"]["startup_s"] == pytest.approx(0.006)


def test_rate_matched_outside_interpolates_between_the_two_paces():
    cal = {"costs": {"event": {"ns": 9.0}}, "empty_loop_ns": {"ns": 1.0},  # the tight loop: 1e8 records/s
           "startup": {"per_record_outside": {"ns": 10.0},
                       "paced": {"outside_ns": {"ns": 20.0}, "records_per_s": 1e6}}}
    assert in_vivo.rate_matched_outside(cal, 1e6) == pytest.approx(20.0)
    assert in_vivo.rate_matched_outside(cal, 1e8) == pytest.approx(10.0)
    assert in_vivo.rate_matched_outside(cal, 1e7) == pytest.approx(15.0)  # halfway in log(rate)
    assert in_vivo.rate_matched_outside(cal, 1e3) == pytest.approx(20.0)  # beyond the range: the nearer end
    assert in_vivo.rate_matched_outside(cal, 1e10) == pytest.approx(10.0)
    assert in_vivo.rate_matched_outside({"costs": {}, "startup": {}}, 1e6) is None
    v = in_vivo.in_vitro_cost({"event": 100}, {**cal, "costs": {"event": {"ns": 9.0}, "off": {"ns": 1.0}}},
                              records_per_s=1e7)
    assert v["process_ns_per_event"] == pytest.approx(8.0 + 10.0)
    assert v["process_paced_ns_per_event"] == pytest.approx(8.0 + 15.0)


def test_analyse_charges_each_further_recording_thread():
    cal = {**CAL, "startup": {**CAL["startup"], "per_thread_cpu": {"ns": 2e6}}}
    counts = {"event": 1000}
    runs = [{"cpu_s": 1.0, "wall_s": 1.0}] * 3
    one = in_vivo.analyse(runs, runs, counts, 0.0, cal, 1, {"threads": 1})
    three = in_vivo.analyse(runs, runs, counts, 0.0, cal, 1, {"threads": 3})
    assert one["threads"] == 1 and three["threads"] == 3
    assert one["measures"]["cpu_s"]["startup_s"] == pytest.approx(0.003)
    assert three["measures"]["cpu_s"]["startup_s"] == pytest.approx(0.003 + 2 * 0.002)


def test_contrast_lower_quartile_stays_in_the_undisturbed_mode():
    # 12 rounds: clean runs take 100 (without) and 104 (with); a third of the runs of each kind
    # are hit by other load, which only ever adds time, and not in the same rounds
    without = np.full(12, 100.0)
    with_ = np.full(12, 104.0)
    without[[0, 3, 6, 9]] += [30, 50, 20, 40]
    with_[[1, 4, 7, 10]] += [60, 10, 35, 45]
    c = in_vivo.contrast([with_, without], [1, -1])
    assert c["estimator"] == "lower_quartile" and c["n"] == 12
    assert c["estimate"] == pytest.approx(4.0)
    assert c["ci"][0] <= 4.0 <= c["ci"][1]
    # the per-round differences are thrown about by the disturbed runs: the paired median is not 4
    p = in_vivo.contrast([with_, without], [1, -1], "paired_median")
    assert p["estimate"] == in_vivo.paired_diff(with_, without)["median"]
    assert p["ci"][1] - p["ci"][0] > c["ci"][1] - c["ci"][0]


def test_contrast_of_four_kinds_cancels_the_fixed_cost():
    # with - without = 3 (fixed) + 7 (the work's records); doing no work: with - without = 3
    full_with, full_without = np.array([110.0, 111.0, 110.5]), np.array([100.0, 101.0, 100.5])
    empty_with, empty_without = np.array([13.0, 13.5, 14.0]), np.array([10.0, 10.5, 11.0])
    c = in_vivo.contrast([full_with, full_without, empty_with, empty_without], [1, -1, -1, 1])
    assert c["estimate"] == pytest.approx(7.0)
    m = in_vivo.contrast([full_with, full_without, empty_with, empty_without], [1, -1, -1, 1], "paired_median")
    assert m["estimate"] == pytest.approx(7.0)
    with pytest.raises(ValueError):
        in_vivo.contrast([full_with], [1], "mean")
    assert in_vivo.contrast([[], []], [1, -1])["estimate"] is None


def test_context_factor_scales_the_calls_at_a_programs_pace():
    cal = {"costs": {"event": {"ns": 9.0}, "off": {"ns": 1.0}}, "empty_loop_ns": {"ns": 1.0},
           "context": {"ns": 18.0, "over_event": 2.0},
           "startup": {"per_record_outside": {"ns": 10.0},
                       "paced": {"outside_ns": {"ns": 20.0}, "records_per_s": 1e6}}}
    assert in_vivo.context_factor(cal, 1e6) == pytest.approx(2.0)
    assert in_vivo.context_factor(cal, 1e8) == pytest.approx(1.0)
    assert in_vivo.context_factor(cal, 1e7) == pytest.approx(1.5)
    assert in_vivo.context_factor({"costs": {}}, 1e6) == 1.0
    v = in_vivo.in_vitro_cost({"event": 100}, cal, records_per_s=1e6)
    # Kohr's figure untouched; the variant: calls x 2, outside share at the paced end
    assert v["process_ns_per_event"] == pytest.approx(8.0 + 10.0)
    assert v["process_paced_ns_per_event"] == pytest.approx(16.0 + 20.0)


def test_compensation_charges_the_helper_cpu_the_runs_measured():
    counts = {"event": 1000}
    without = [{"cpu_s": 1.0 + 0.1 * i, "wall_s": 1.0 + 0.1 * i} for i in range(7)]
    # each run: calls 18 us + the helper's 50 us (measured, 5x the calibrated 10 ns per record) + start-up 3 ms
    with_ = [{"cpu_s": r["cpu_s"] + 0.000018 + 0.00005 + 0.003, "wall_s": r["wall_s"], "helper_s": 0.00005} for r in without]
    cpu = in_vivo.analyse(with_, without, counts, 0.0, CAL, 1, {})["measures"]["cpu_s"]
    assert cpu["helper_measured_s"] == pytest.approx(0.00005)
    assert cpu["outside_calibrated_s"] == pytest.approx(1000 * 10.0 / 1e9)
    assert cpu["compensated_error_pct"] == pytest.approx(0.0, abs=1e-9)
    # with the calibrated share instead, 40 us of the helper's CPU stay in the compensated time
    assert cpu["compensated_calibrated_error_pct"] == pytest.approx(100 * 0.00004 / cpu["without_s"])
    # runs recorded before the helper was measured: the calibrated share, and no comparison
    old = [{k: v for k, v in r.items() if k != "helper_s"} for r in with_]
    cpu_old = in_vivo.analyse(old, without, counts, 0.0, CAL, 1, {})["measures"]["cpu_s"]
    assert "helper_measured_s" not in cpu_old
    assert cpu_old["compensated_error_pct"] == pytest.approx(cpu["compensated_calibrated_error_pct"])


def test_helper_cpu_from_meta():
    assert in_vivo.helper_cpu_s({"recorder_helpers": [{"pid": 1, "cpu_ns": 2_000_000, "ring_slots_copied": 3},
                                                      {"pid": 2, "cpu_ns": 500_000, "ring_slots_copied": 1}]}) == 0.0025
    assert in_vivo.helper_cpu_s({"recorder_helpers": []}) == 0.0
    assert in_vivo.helper_cpu_s({}) is None and in_vivo.helper_cpu_s(None) is None


def test_cost_bounds_are_never_negative():
    # short names take 2700 ns off the region records' cost, more than their lower bound (0 here)
    cal = {**CAL, "costs": {**CAL["costs"], "region_begin": {"ns": 30.0, "ci_low": 1.0, "ci_high": 40.0},
                            "region_end": {"ns": 32.0, "ci_low": 1.0, "ci_high": 40.0}}}
    v = in_vivo.in_vitro_cost({"region_begin": 100, "region_end": 100}, cal, region_name_bytes=0)
    assert v["region_name_adjust_ns"] == pytest.approx(-2700)
    assert v["cost_low_ns"] == 0.0 and v["cost_ns"] == pytest.approx(5800 - 2700) and v["cost_high_ns"] > v["cost_ns"]
