"""What kind of phase a set of intervals is, from its resource figures: where the program's thread
time went (on a CPU, blocked on I/O, waiting on a lock, sleeping) and how often it faulted.
Without scheduling records the kind is `unknown`."""

from __future__ import annotations

import numpy as np

from oslens.phases import resources

DOMINANT = 0.5  # a kind needs half of the thread time; below that the phase is `mixed`
FAULTS_PER_S = 20_000  # with at least MEMORY_SYSTEM of system time: memory-bound
MEMORY_SYSTEM = 0.25

F = {name: i for i, name in enumerate(resources.FRACTIONS)}
R = {name: i for i, name in enumerate(resources.RATES)}


def classify(fractions: np.ndarray, rates: np.ndarray) -> str:
    """The kind of a phase from its mean fractions (resources.FRACTIONS) and rates (RATES)."""
    if rates[R["faults"]] >= FAULTS_PER_S and fractions[F["system"]] >= MEMORY_SYSTEM:
        return "memory"
    shares = {
        "compute": fractions[F["user"]] + fractions[F["system"]] + fractions[F["runnable"]],
        "io": fractions[F["io_wait"]],
        "sync": fractions[F["sync_wait"]],
        "sleep": fractions[F["sleeping"]],
    }
    kind = max(shares, key=lambda k: shares[k])
    return kind if shares[kind] >= DOMINANT else "mixed"
