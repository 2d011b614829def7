"""How well phases found in a trace match a known phase script (workloads/phases prints one, and
so can any program): boundary F1 within a tolerance, adjusted Rand index per interval, and the
agreement of two runs of one script (run-to-run ARI). Used by tests/test_phases*.py and
bench/phases/truth.py; figures in docs/phases.md."""

from __future__ import annotations

import numpy as np


def parse_script(text: str) -> list[tuple[str, int, int]]:
    """The phases a program printed as `phase KIND BEGIN_NS END_NS` lines (workloads/phases does)."""
    return [(p[1], int(p[2]), int(p[3])) for p in (line.split() for line in text.splitlines())
            if len(p) == 4 and p[0] == "phase"]


def ari(a, b) -> float:
    """Adjusted Rand index of two labelings of the same items (Hubert & Arabie 1985)."""
    a = np.unique(np.asarray(a), return_inverse=True)[1].ravel()
    b = np.unique(np.asarray(b), return_inverse=True)[1].ravel()
    if len(a) < 2:
        return 1.0
    table = np.zeros((a.max() + 1, b.max() + 1))
    np.add.at(table, (a, b), 1)

    def pairs(x):
        return float((x * (x - 1) / 2).sum())

    index, ea, eb = pairs(table), pairs(table.sum(axis=1)), pairs(table.sum(axis=0))
    expected = ea * eb / pairs(np.array([len(a)]))
    top = (ea + eb) / 2
    return 1.0 if top == expected else (index - expected) / (top - expected)


def truth_boundaries(script: list[tuple[str, int, int]]) -> list[int]:
    """The times (ns) where the script's kind changes: the start of every phase of another kind
    than the one before it."""
    return [b for (k0, _, _), (k1, b, _) in zip(script, script[1:]) if k1 != k0]


def boundary_f1(found: list[int], truth: list[int], tolerance_ns: int) -> dict:
    """Precision, recall and F1 of found boundaries against the truth: each true boundary matches
    at most one found boundary within tolerance_ns, nearest first."""
    pairs = sorted((abs(f - t), i, j) for i, f in enumerate(found) for j, t in enumerate(truth)
                   if abs(f - t) <= tolerance_ns)
    used_f, used_t = set(), set()
    for _, i, j in pairs:
        if i not in used_f and j not in used_t:
            used_f.add(i)
            used_t.add(j)
    hits = len(used_f)
    precision = hits / len(found) if found else float(not truth)
    recall = hits / len(truth) if truth else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "found": len(found), "true": len(truth)}


def script_labels(script: list[tuple[str, int, int]], times_ns: np.ndarray) -> np.ndarray:
    """The script's kind (as an index into its sorted kinds) at each time; -1 outside the script."""
    kinds = sorted({k for k, _, _ in script})
    out = np.full(len(times_ns), -1, dtype=np.int64)
    for k, b, e in script:
        out[(times_ns >= b) & (times_ns < e)] = kinds.index(k)
    return out


def against_script(edges_ns: np.ndarray, labels: np.ndarray, script: list[tuple[str, int, int]]) -> dict:
    """Scores one analysis (interval edges in the trace's clock, each interval's phase) against a
    script: boundary F1 within one interval, ARI over the intervals whose middle lies inside the
    script, the number of phases found there against the number of kinds in the script."""
    edges_ns = np.asarray(edges_ns, dtype=np.int64)
    labels = np.asarray(labels)
    dt = int(edges_ns[1] - edges_ns[0])
    changes = np.flatnonzero(labels[1:] != labels[:-1]) + 1
    lo, hi = script[0][1], script[-1][2]
    found = [int(edges_ns[i]) for i in changes if lo + dt < edges_ns[i] < hi - dt]
    mids = (edges_ns[:-1] + edges_ns[1:]) // 2
    truth = script_labels(script, mids)
    inside = truth >= 0
    f1 = boundary_f1(found, truth_boundaries(script), dt)
    return {"f1": f1["f1"], "precision": f1["precision"], "recall": f1["recall"],
            "ari": ari(truth[inside], labels[inside]),
            "phases": int(len(np.unique(labels[inside]))), "script_kinds": int(len({k for k, _, _ in script}))}


def run_to_run(a: tuple[np.ndarray, np.ndarray, list], b: tuple[np.ndarray, np.ndarray, list],
               step_ns: int = 1_000_000) -> float:
    """ARI between two runs of one script, each given as (interval edges, labels, the script as the
    run printed it). Phases overrun their nominal length by different amounts in each run (a
    fault storm finishes its 32 MiB first), so the runs are compared at the same places of the
    script: every step_ns of each phase (the shorter run's length of it), spread over the phase
    in each run."""
    sa, sb = a[2], b[2]
    if [k for k, _, _ in sa] != [k for k, _, _ in sb]:
        raise ValueError("the two runs did not run the same script")
    ta, tb = [], []
    for (_, b0, e0), (_, b1, e1) in zip(sa, sb):
        n = max(1, min(e0 - b0, e1 - b1) // step_ns)
        frac = (np.arange(n) + 0.5) / n
        ta.append(b0 + (frac * (e0 - b0)).astype(np.int64))
        tb.append(b1 + (frac * (e1 - b1)).astype(np.int64))

    def at(run, t):
        edges, labels = run[0], np.asarray(run[1])
        return labels[np.clip(np.searchsorted(edges, t, side="right") - 1, 0, len(labels) - 1)]

    return ari(at(a, np.concatenate(ta)), at(b, np.concatenate(tb)))
