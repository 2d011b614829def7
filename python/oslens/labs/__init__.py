"""The labs of `oslens lab` (docs/labs.md): prepared programs run on this machine's real kernel
under a constraint applied through the control layer, recorded with oslens, and checked
against a model of the mechanism. One module per lab; the framework is lab.py (what a lab is),
sheet.py, preflight.py, runner.py and check.py."""

from __future__ import annotations

from oslens.errors import OslensError


def all_labs() -> list:
    """Every lab, by number (imported here so that listing never fails half way)."""
    from oslens.labs import (cow_fork, fault_anatomy, mutex, oom, pagecache, quantum, readahead, real_app,
                             sched_weights, thrashing, throttle)

    labs = [thrashing.LAB, readahead.LAB, oom.LAB, fault_anatomy.LAB, cow_fork.LAB, pagecache.LAB, sched_weights.LAB,
            mutex.LAB, throttle.LAB, quantum.LAB, real_app.LAB]
    return sorted(labs, key=lambda lab: lab.number)


def get(number) -> object:
    for lab in all_labs():
        if str(lab.number) == str(number).lstrip("0") or lab.slug == str(number):
            return lab
    known = ", ".join(str(lab.number) for lab in all_labs())
    raise OslensError(f"there is no lab {number}; the labs are {known} (see 'oslens lab list')", 2)
