"""Phases from interval vectors: change points, then clustering of the segments between them into a
few recurring phases, each given a kind from its resource figures.

Change points: ruptures' KernelCPD with a linear kernel (PELT; the cost of a segment is the sum of
squared distances of its vectors to their mean) and a BIC-like penalty scaled by the run's own
noise (the median squared step between consecutive intervals, which change points barely move).
Clustering: average-linkage agglomeration of the segments' mean vectors by Manhattan distance,
cut at MERGE_L1 (times the mean weight of the vectors used). k-means with k chosen by BIC, as
SimPoint does, and Ward's criterion both split one I/O phase in two whenever this VM's disk
stalled, or swallowed short phases (docs/phases.md). No randomness: identical vectors give
identical phases."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_K = 8
MIN_SIZE = 2  # intervals per segment: one odd interval is noise, not a phase
PENALTY = 4.0  # times noise x log(n): calibrated on workloads/phases (docs/phases.md)
MIN_STRETCH = 4  # intervals: a phase seen only for less than this at a time is a transition
# Segments whose mean vectors are closer than this (Manhattan; average linkage) are one phase.
# A vector block that changes completely moves ~2 (fractions and shares sum to about 1), so 2.5
# asks for more than one block's worth of difference; measured on workloads/phases (docs/phases.md):
# one phase's repeats 0.4-0.8 apart, an I/O phase with a disk stall 2.0-2.6 from the rest of it,
# sleep vs lock contention 3.7-4.0, compute vs I/O 4.4 and more.
MERGE_L1 = 2.5
SINGLE_BLOCK_L1 = 1.0  # with only one vector: half of its full change


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


def join(means: np.ndarray, threshold: float, max_k: int = MAX_K) -> np.ndarray:
    """Average-linkage clustering of segment means by Manhattan distance, cut at `threshold`
    (and at max_k clusters): each segment's cluster, numbered from 0."""
    from scipy.cluster.hierarchy import fcluster, linkage

    if len(means) <= 1:
        return np.zeros(len(means), dtype=np.int64)
    tree = linkage(means, method="average", metric="cityblock")
    labels = fcluster(tree, t=threshold, criterion="distance")
    if labels.max() > max_k:
        labels = fcluster(tree, t=max_k, criterion="maxclust")
    return labels.astype(np.int64) - 1


def _longest_stretches(cluster: np.ndarray, lengths: np.ndarray) -> dict[int, int]:
    """Each cluster's longest stretch in intervals, neighbouring segments of one cluster together."""
    longest: dict[int, int] = {}
    run_c, run_n = None, 0
    for c, n in zip(cluster.tolist(), lengths.tolist()):
        run_n = run_n + int(n) if c == run_c else int(n)
        run_c = c
        longest[c] = max(longest.get(c, 0), run_n)
    return longest


def _absorb_short(cluster: np.ndarray, lengths: np.ndarray, means: np.ndarray) -> np.ndarray:
    """A cluster that only ever lasts fewer than MIN_STRETCH intervals at a time (start-up, exit,
    the interval a switch falls in) is below the grid's resolution: each of its segments joins
    the neighbouring segment whose mean is nearest."""
    cluster = cluster.copy()
    longest = _longest_stretches(cluster, lengths)
    if all(v < MIN_STRETCH for v in longest.values()):
        return cluster
    short = [i for i in range(len(cluster)) if longest[int(cluster[i])] < MIN_STRETCH]
    while short:  # a run of short segments (the start-up in two pieces) is absorbed from its ends inwards
        left = []
        for i in short:
            cands = [j for j in (i - 1, i + 1) if 0 <= j < len(cluster) and j not in short]
            if cands:
                j = min(cands, key=lambda j: (float(np.abs(means[j] - means[i]).sum()), j))
                cluster[i] = cluster[j]
            else:
                left.append(i)
        if len(left) == len(short):
            break
        short = left
    return cluster


def interval_noise(x: np.ndarray, bounds: np.ndarray) -> float:
    """The typical Manhattan distance of one interval's vector to its segment's mean: how far a
    centroid of n intervals may lie from its phase's true centre is about this over sqrt(n)."""
    dev = np.concatenate([np.abs(x[b:e] - x[b:e].mean(axis=0)).sum(axis=1) for b, e in zip(bounds[:-1], bounds[1:])])
    return float(np.median(dev)) if len(dev) else 0.0


def _merge_within_noise(cluster: np.ndarray, lengths: np.ndarray, x: np.ndarray, bounds: np.ndarray,
                        threshold: float) -> np.ndarray:
    """Joins clusters whose centroids are closer than the cut plus what the smaller one's support
    leaves uncertain: `threshold` + noise / sqrt(n) for a cluster of n intervals. Long phases keep
    about the plain cut; a phase of a few intervals (the start-up, a lock phase's first 60 ms on a
    loaded host) must differ by more before it counts as one (docs/phases.md, "Ground truth")."""
    cluster = cluster.copy()
    sigma = interval_noise(x, bounds)
    labels_all = np.repeat(cluster, lengths)
    while True:
        ids = np.unique(cluster)
        if len(ids) < 2:
            return cluster
        cents = {c: x[labels_all == c].mean(axis=0) for c in ids}
        support = {c: int((labels_all == c).sum()) for c in ids}
        best = None
        for i, a in enumerate(ids):
            for b in ids[i + 1:]:
                d = float(np.abs(cents[a] - cents[b]).sum())
                limit = threshold + sigma / np.sqrt(min(support[a], support[b]))
                if d < limit and (best is None or d / limit < best[0]):
                    best = (d / limit, a, b)
        if best is None:
            return cluster
        _, a, b = best
        keep, gone = (a, b) if support[a] >= support[b] else (b, a)
        cluster[cluster == gone] = keep
        labels_all[labels_all == gone] = keep


def _relabel(assign: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Phase numbers in order of first appearance (phase 0 is the first), so output is stable."""
    order: dict[int, int] = {}
    for a in assign:
        order.setdefault(int(a), len(order))
    return np.array([order[int(a)] for a in assign], dtype=np.int64)


def segment(x: np.ndarray, penalty: float = PENALTY, max_k: int = MAX_K, merge: float = MERGE_L1) -> Segmentation:
    bounds, pen = change_points(x, penalty)
    nseg = len(bounds) - 1
    lengths = np.diff(bounds)
    means = np.array([x[bounds[i]:bounds[i + 1]].mean(axis=0) for i in range(nseg)]) if x.shape[1] else np.zeros((nseg, 0))
    cluster = _absorb_short(join(means, merge, max_k), lengths, means)
    cluster = _merge_within_noise(cluster, lengths, x, bounds, merge)
    phase_of_segment = _relabel(cluster, bounds)
    k = int(phase_of_segment.max()) + 1
    labels_all = np.repeat(phase_of_segment, lengths)
    cents = np.array([x[labels_all == p].mean(axis=0) for p in range(k)]) if x.shape[1] else np.zeros((k, 0))
    # neighbouring segments of one phase are one stretch: a boundary is only where the phase changes
    keep = np.concatenate([[True], phase_of_segment[1:] != phase_of_segment[:-1]])
    merged_bounds = np.concatenate([bounds[:-1][keep], [bounds[-1]]])
    merged_phase = phase_of_segment[keep]
    return Segmentation(merged_bounds, merged_phase, labels_all, cents, k, pen)
