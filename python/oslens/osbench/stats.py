"""Statistics over repetitions: the median with a distribution-free confidence interval (order
statistics of the binomial), and the ratio of two medians with a bootstrap interval."""

from __future__ import annotations

from math import comb

import numpy as np

LEVEL = 0.95


def _coverage(n: int, k: int) -> float:
    """P(x_(k) <= true median <= x_(n-k+1)) for n samples, 1-based k: P(k <= B <= n-k), B ~ Bin(n, 1/2)."""
    return sum(comb(n, i) for i in range(k, n - k + 1)) / 2.0**n


def median_ci(samples, level: float = LEVEL) -> tuple[float, float, float]:
    """(low, high, coverage): the narrowest symmetric order-statistic interval whose coverage of
    the population median is at least `level`. With fewer than 6 samples no interval reaches 95%;
    then [min, max] is returned with its true, lower coverage."""
    x = np.sort(np.asarray(samples, dtype=float))
    n = len(x)
    if n == 0:
        raise ValueError("no samples")
    if n == 1:
        return float(x[0]), float(x[0]), 0.0
    best = 1
    for k in range(1, (n + 1) // 2 + 1):
        if _coverage(n, k) >= level:
            best = k
        else:
            break
    return float(x[best - 1]), float(x[n - best]), _coverage(n, best)


def summarize(samples) -> dict:
    """Median, min, max, mean and the 95% interval of the median, all in the samples' unit."""
    x = np.asarray(samples, dtype=float)
    lo, hi, cov = median_ci(x)
    med = float(np.median(x))
    return {
        "n": int(len(x)),
        "median": med,
        "min": float(x.min()),
        "max": float(x.max()),
        "mean": float(x.mean()),
        "ci_low": lo,
        "ci_high": hi,
        "ci_coverage": round(cov, 4),
        "ci_rel_halfwidth": float((hi - lo) / 2 / med) if med > 0 else float("inf"),
    }


def ratio_ci(a, b, level: float = LEVEL, resamples: int = 4000, seed: int = 1990) -> dict:
    """median(b) / median(a) with a percentile-bootstrap interval; the difference is significant
    when the interval excludes 1."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    ma, mb = float(np.median(a)), float(np.median(b))
    if ma <= 0:
        return {"ratio": float("nan"), "low": float("nan"), "high": float("nan"), "significant": False}
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, len(a), size=(resamples, len(a)))
    ib = rng.integers(0, len(b), size=(resamples, len(b)))
    ra = np.median(a[ia], axis=1)
    rb = np.median(b[ib], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = rb / ra
    ratios = ratios[np.isfinite(ratios)]
    alpha = (1 - level) / 2
    low, high = (float(v) for v in np.quantile(ratios, [alpha, 1 - alpha]))
    return {"ratio": mb / ma, "low": low, "high": high, "significant": bool(low > 1 or high < 1)}


def repetitions_needed(samples, goal: float) -> bool:
    """True while the interval of the median is wider than +-goal of the median."""
    if len(samples) < 6:
        return True
    return summarize(samples)["ci_rel_halfwidth"] > goal
