"""Phases from interval vectors: change points, then clustering of the segments between them into a
few recurring phases, each given a kind from its resource figures.

Change points: ruptures' KernelCPD with a linear kernel (PELT; the cost of a segment is the sum of
squared distances of its vectors to their mean) and a BIC-like penalty scaled by the run's own
noise (the median squared step between consecutive intervals, which change points barely move).
Clustering: Ward's agglomeration of the segments (weighted by their lengths), joining clusters
while the sum of squares a join adds stays below MERGE times the change-point penalty: the same
yardstick as the change points, so two stretches are one phase when telling them apart is not
worth much more than a change point. (k-means with k chosen by BIC, as SimPoint does, split one
I/O phase in two on this VM whenever the disk stalled; docs/phases.md.) No randomness: identical
vectors give identical phases."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_K = 8
MIN_SIZE = 2  # intervals per segment: one odd interval is noise, not a phase
PENALTY = 4.0  # times noise x log(n): calibrated on workloads/phases (docs/phases.md)
MIN_STRETCH = 3  # intervals: a phase seen only for less than this at a time is a transition
MERGE = 8.0  # segments join one phase while joining them costs less than MERGE x the penalty


@dataclass
class Segmentation:
    bounds: np.ndarray  # segment k = intervals [bounds[k], bounds[k+1])
    phase_of_segment: np.ndarray
    labels: np.ndarray  # phase of each interval
    centroids: np.ndarray  # phase x features (the weighted vectors)
    k: int
    penalty: float  # the change-point penalty used (squared-distance units)


def noise(x: np.ndarray) -> float:
    """Per-interval noise (total variance over features) from consecutive differences."""
    if len(x) < 2:
        return 0.0
    steps = ((x[1:] - x[:-1]) ** 2).sum(axis=1)
    return float(np.median(steps)) / 2.0


def change_points(x: np.ndarray, penalty: float = PENALTY) -> tuple[np.ndarray, float]:
    """(segment boundaries [0, ..., n] found by KernelCPD (linear kernel, PELT), its penalty)."""
    import ruptures

    n = len(x)
    if n < 2 * MIN_SIZE or x.shape[1] == 0:
        return np.array([0, n]), 0.0
    scale = max(noise(x), 1e-4 * max(float(x.var(axis=0).sum()), 1e-12))
    pen = penalty * scale * np.log(n)
    algo = ruptures.KernelCPD(kernel="linear", min_size=MIN_SIZE).fit(np.ascontiguousarray(x, dtype=np.float64))
    ends = algo.predict(pen=pen)
    return np.array([0] + [int(e) for e in ends], dtype=np.int64), float(pen)


def ward(means: np.ndarray, sizes: np.ndarray, threshold: float, max_k: int = MAX_K) -> np.ndarray:
    """Agglomerative (Ward) clustering of segments: repeatedly joins the two clusters whose
    union adds least to the sum of squares, n_a n_b / (n_a + n_b) |mu_a - mu_b|^2, while that
    is below `threshold` or more than max_k clusters remain. Returns each segment's cluster."""
    s = len(means)
    cluster = np.arange(s)
    if s <= 1:
        return cluster
    n = sizes.astype(np.float64).copy()
    sq = ((means[:, None, :] - means[None, :, :]) ** 2).sum(axis=2)
    cost = n[:, None] * n[None, :] / (n[:, None] + n[None, :]) * sq
    alive = np.ones(s, bool)
    np.fill_diagonal(cost, np.inf)
    while alive.sum() > 1:
        flat = int(np.argmin(cost))
        a, b = divmod(flat, s)
        if cost[a, b] >= threshold and alive.sum() <= max_k:
            break
        a, b = min(a, b), max(a, b)
        # Lance-Williams update for Ward's sum-of-squares increase
        na, nb = n[a], n[b]
        nc = n
        new = ((na + nc) * cost[a] + (nb + nc) * cost[b] - nc * cost[a, b]) / (na + nb + nc)
        cost[a, :] = new
        cost[:, a] = new
        cost[a, a] = np.inf
        cost[b, :] = np.inf
        cost[:, b] = np.inf
        n[a] = na + nb
        alive[b] = False
        cluster[cluster == b] = a
    return cluster


def _absorb_short(cluster: np.ndarray, lengths: np.ndarray, means: np.ndarray) -> np.ndarray:
    """A cluster that only ever lasts fewer than MIN_STRETCH intervals at a time (start-up, exit,
    the interval a switch falls in) is below the grid's resolution: each of its segments joins
    the neighbouring segment whose mean is nearest."""
    cluster = cluster.copy()
    longest = {c: max(int(n) for cc, n in zip(cluster, lengths) if cc == c) for c in set(cluster.tolist())}
    if all(v < MIN_STRETCH for v in longest.values()):
        return cluster
    for i in range(len(cluster)):
        if longest[int(cluster[i])] >= MIN_STRETCH:
            continue
        cands = [j for j in (i - 1, i + 1) if 0 <= j < len(cluster) and longest[int(cluster[j])] >= MIN_STRETCH]
        if cands:
            j = min(cands, key=lambda j: (float(np.abs(means[j] - means[i]).sum()), j))
            cluster[i] = cluster[j]
    return cluster


def _relabel(assign: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Phase numbers in order of first appearance (phase 0 is the first), so output is stable."""
    order: dict[int, int] = {}
    for a in assign:
        order.setdefault(int(a), len(order))
    return np.array([order[int(a)] for a in assign], dtype=np.int64)


def segment(x: np.ndarray, penalty: float = PENALTY, max_k: int = MAX_K, merge: float = MERGE) -> Segmentation:
    bounds, pen = change_points(x, penalty)
    nseg = len(bounds) - 1
    lengths = np.diff(bounds)
    means = np.array([x[bounds[i]:bounds[i + 1]].mean(axis=0) for i in range(nseg)]) if x.shape[1] else np.zeros((nseg, 0))
    cluster = _absorb_short(ward(means, lengths, merge * pen, max_k), lengths, means)
    phase_of_segment = _relabel(cluster, bounds)
    k = int(phase_of_segment.max()) + 1
    labels_all = np.repeat(phase_of_segment, lengths)
    cents = np.array([x[labels_all == p].mean(axis=0) for p in range(k)]) if x.shape[1] else np.zeros((k, 0))
    # neighbouring segments of one phase are one stretch: a boundary is only where the phase changes
    keep = np.concatenate([[True], phase_of_segment[1:] != phase_of_segment[:-1]])
    merged_bounds = np.concatenate([bounds[:-1][keep], [bounds[-1]]])
    merged_phase = phase_of_segment[keep]
    return Segmentation(merged_bounds, merged_phase, labels_all, cents, k, pen)
