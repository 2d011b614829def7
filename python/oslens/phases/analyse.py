"""The whole pipeline for one trace: interval vectors -> change points and phases -> kinds."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oslens.phases import kinds, segment, vectors

DOMINANT_FUNCTIONS = 3


@dataclass
class PhaseAnalysis:
    trace: str
    vectors: vectors.IntervalVectors
    segmentation: segment.Segmentation
    kinds: list[str]  # per phase
    matrix: np.ndarray  # the weighted interval vectors


def phase_kinds(vec: vectors.IntervalVectors, labels: np.ndarray, k: int) -> list[str]:
    if vec.resource is None:
        return ["unknown"] * k
    out = []
    for p in range(k):
        m = labels == p
        out.append(kinds.classify(vec.resource.fractions[m].mean(axis=0), vec.resource.rates[m].mean(axis=0)))
    return out


def dominant_functions(vec: vectors.IntervalVectors, mask: np.ndarray) -> list[str]:
    """The functions with most samples in these intervals (most first)."""
    if vec.code is None or not mask.any():
        return []
    totals = vec.code.counts[mask].sum(axis=0)
    order = [j for j in np.argsort(-totals, kind="stable") if totals[j] > 0]
    return [vec.code.names[j] for j in order[:DOMINANT_FUNCTIONS]]


def analyse(con, trace, interval_ns: int | None = None, weights: dict | None = None,
            penalty: float = segment.PENALTY) -> PhaseAnalysis:
    vec = vectors.interval_vectors(con, trace, interval_ns, weights)
    x = vec.matrix()
    used = [vec.weights[k] for k in vec.used()]
    seg = segment.segment(x, penalty, merge=segment.MERGE_L1 * (sum(used) / len(used)))
    return PhaseAnalysis(str(trace), vec, seg, phase_kinds(vec, seg.labels, seg.k), x)
