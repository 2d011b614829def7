"""What kind of phase a set of intervals is, from its resource figures: where the program's thread
time went (on a CPU, blocked on I/O, waiting on a lock, sleeping) and how often it faulted.
Without scheduling records the kind is `unknown`."""

from __future__ import annotations

import numpy as np

from oslens.phases import resources

DOMINANT = 0.5  # a kind needs half of the thread time; below that the phase is `mixed`
SYNC_SHARE = 0.25  # a quarter of the thread time waiting on locks makes a phase `sync`
FAULTS_PER_S = 20_000  # faulting this often while on a CPU makes a compute phase `memory`
# (page faults without durations count as CPU time: the fault rate tells them apart)

R = {name: i for i, name in enumerate(resources.RATES)}


def classify(fractions: np.ndarray, rates: np.ndarray) -> str:
    """The kind of a phase from its mean fractions (resources.FRACTIONS) and rates (RATES), over
    the time it was not waiting for a CPU (resources.without_runnable)."""
    user, system, io_wait, sleeping, sync_wait = resources.without_runnable(fractions)
    shares = {"compute": user + system, "io": io_wait, "sync": sync_wait, "sleep": sleeping}
    if shares["sync"] >= SYNC_SHARE and shares["sync"] >= max(shares["io"], shares["sleep"]):
        return "sync"
    kind = max(shares, key=lambda k: shares[k])
    if shares[kind] < DOMINANT:
        return "mixed"
    if kind == "compute" and rates[R["faults"]] >= FAULTS_PER_S:
        return "memory"
    return kind
