"""`oslens.adapt(phase)`: the kernel adaptation call for Python programs (Krintz & Wolski).

Switches the calling thread to the policy that the plan loaded by `oslens tune` (the
resolved plan named by OSLENS_PLAN) gives `phase`. A phase the plan does not name gets the
plan's `default` phase. Without OSLENS_PLAN it does nothing and returns 0, so programs can
keep the calls in place. Returns 0 or an errno value, like osl_adapt() in C."""

from __future__ import annotations

import errno
import json
import os

from oslens import _native
from oslens.control.apply import apply_task

PLAN_ENV = "OSLENS_PLAN"
ADAPT_KIND = _native.KINDS["adapt"]
NAME_PHASE = next(cid for cid, name in _native.NAME_CLASSES.items() if name == "phase")

_cache: dict[str, dict | None] = {}


def load_resolved(path: str) -> dict | None:
    if path not in _cache:
        try:
            with open(path) as f:
                doc = json.load(f)
            _cache[path] = doc if isinstance(doc, dict) and isinstance(doc.get("phases"), dict) else None
        except (OSError, ValueError):
            _cache[path] = None
    return _cache[path]


def _record(phase: str, err: int, bits: int) -> None:
    """Record the change in the trace (a no-op when the program is not being recorded)."""
    try:
        _native.record_raw(ADAPT_KIND, _native.define_name(NAME_PHASE, phase), err, bits)
    except Exception:  # recording must never break the program
        pass


def adapt(phase: str) -> int:
    path = os.environ.get(PLAN_ENV)
    if not path:
        return 0
    plan = load_resolved(path)
    if plan is None:
        err = errno.ENOENT if not os.path.exists(path) else errno.EINVAL
        _record(phase, err, 0)
        return err
    phases = plan["phases"]
    policy = phases.get(phase) or phases.get("default")
    if policy is None:
        _record(phase, errno.ENOENT, 0)
        return errno.ENOENT
    err, bits = apply_task(policy)
    _record(phase, err, bits)
    return err
