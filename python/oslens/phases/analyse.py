"""The whole pipeline for one trace: interval vectors -> change points and phases -> kinds."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oslens.phases import kinds, resources, segment, vectors

DOMINANT_FUNCTIONS = 3


@dataclass
class PhaseAnalysis:
    trace: str
    vectors: vectors.IntervalVectors
    segmentation: segment.Segmentation
    kinds: list[str]  # per phase
    matrix: np.ndarray  # the weighted interval vectors

    def homogeneity(self) -> dict | None:
        return homogeneity(self.vectors, self.segmentation.labels)


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


def homogeneity(vec: vectors.IntervalVectors, labels: np.ndarray) -> dict | None:
    """How uniform CPU utilisation is within the phases. Per interval, the CPU demand: the share
    of thread time on a CPU, of the time not spent waiting for one (resources.without_runnable).
    `within_cv`: each phase's standard deviation of it, weighted by the phase's intervals, over the
    run's mean; `run_cv`: the run's standard deviation over its mean; `ratio` of the two (good
    phases: well below 1; issue 23 asks <= 1/3). `phase_cv` divides each phase's deviation by its
    own mean instead, as SimPoint's CoV of CPI does: near-idle phases (sleep, I/O: 3% +- 8%) blow
    it up, so it is printed but not the criterion (docs/phases.md)."""
    if vec.resource is None or vec.n < 2:
        return None
    cpu = resources.demand(vec.resource.fractions).sum(axis=1)
    mean = float(cpu.mean())
    if mean <= 0:
        return None
    phases = [cpu[labels == p] for p in np.unique(labels)]
    within = sum(float(x.std()) * len(x) for x in phases) / len(cpu) / mean
    per_phase = sum(float(x.std() / x.mean()) * len(x) for x in phases if x.mean() > 0) / len(cpu)
    run = float(cpu.std()) / mean
    return {"within_cv": within, "run_cv": run, "ratio": within / run if run > 0 else 0.0, "phase_cv": per_phase}


def merge_cut(weights: list[float]) -> float:
    """The Manhattan distance below which two segments are one phase: MERGE_L1 (more than one
    block's full change) times the mean weight; with a single vector, half its full change (2 x
    its weight), or a trace with regions only (no kernel events) would be one phase whatever it did."""
    if len(weights) == 1:
        return segment.SINGLE_BLOCK_L1 * weights[0]
    return segment.MERGE_L1 * (sum(weights) / len(weights))


def analyse(con, trace, interval_ns: int | None = None, weights: dict | None = None,
            penalty: float = segment.PENALTY) -> PhaseAnalysis:
    vec = vectors.interval_vectors(con, trace, interval_ns, weights)
    x = vec.matrix()
    seg = segment.segment(x, penalty, merge=merge_cut([vec.weights[k] for k in vec.used()]))
    return PhaseAnalysis(str(trace), vec, seg, phase_kinds(vec, seg.labels, seg.k), x)
