import numpy as np
import pytest

from oslens.osbench import stats


def test_median_ci_contains_median_and_has_95_coverage():
    rng = np.random.default_rng(3)
    for n in (6, 7, 11, 20, 41):
        x = rng.lognormal(0, 0.3, n)
        lo, hi, cov = stats.median_ci(x)
        assert lo <= np.median(x) <= hi
        assert cov >= 0.95
        assert lo >= x.min() and hi <= x.max()


def test_median_ci_small_samples_fall_back_to_range_with_true_coverage():
    lo, hi, cov = stats.median_ci([3.0, 1.0, 2.0, 5.0, 4.0])
    assert (lo, hi) == (1.0, 5.0)
    assert cov == pytest.approx(1 - 2 / 32)


def test_median_ci_known_order_statistics():
    # n = 11: the 95% interval is x(2)..x(10) (coverage 0.988); x(3)..x(9) only 0.935
    x = list(range(1, 12))
    lo, hi, cov = stats.median_ci(x)
    assert (lo, hi) == (2.0, 10.0)
    assert cov == pytest.approx(0.98828125)


def test_median_ci_coverage_is_honest():
    rng = np.random.default_rng(11)
    hits = 0
    trials = 2000
    for _ in range(trials):
        x = rng.exponential(1.0, 15)
        lo, hi, _ = stats.median_ci(x)
        hits += lo <= np.log(2) <= hi
    assert hits / trials >= 0.94


def test_summarize_fields():
    s = stats.summarize([1.0, 2.0, 3.0, 4.0, 100.0, 2.5, 3.5])
    assert s["median"] == 3.0 and s["min"] == 1.0 and s["max"] == 100.0 and s["n"] == 7
    assert s["ci_low"] <= s["median"] <= s["ci_high"]


def test_ratio_of_a_sample_with_itself_is_not_significant():
    x = np.random.default_rng(5).normal(100, 5, 11)
    r = stats.ratio_ci(x, x)
    assert r["ratio"] == 1.0
    assert r["low"] <= 1.0 <= r["high"]
    assert not r["significant"]


def test_ratio_detects_a_clear_difference():
    rng = np.random.default_rng(6)
    a = rng.normal(100, 2, 11)
    b = rng.normal(150, 2, 11)
    r = stats.ratio_ci(a, b)
    assert r["significant"] and r["low"] > 1.3 and r["ratio"] == pytest.approx(1.5, rel=0.05)


def test_repetitions_needed():
    assert stats.repetitions_needed([1.0, 1.0], 0.05)
    assert not stats.repetitions_needed([1.0] * 11, 0.05)
    assert stats.repetitions_needed([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], 0.05)
