"""A policy as the what-if engine runs it: the Rust core's name for it and its parameters, every
default filled in (crates/native/src/whatif/mod.rs reads them). `native_form` turns a spec's
policy name and parameters into it; the defaults live here and nowhere else (the Python oracle,
oslens_testing.whatif.policies, is built from the same form)."""

from __future__ import annotations

from dataclasses import dataclass, field

MS = 1_000_000


@dataclass(frozen=True)
class Policy:
    name: str  # the Rust core's name: fifo, lifo, rr, sjf, srt, hrrn, mlfq, unix, eevdf, rt
    params: dict = field(default_factory=dict)

    def native(self) -> tuple[str, dict]:
        return self.name, dict(self.params)


def _per_level(value, levels, what):
    if isinstance(value, (list, tuple)):
        if len(value) != levels:
            raise ValueError(f"{what} gives {len(value)} values for {levels} levels")
        return [int(v) for v in value]
    return [int(value)] * levels


def _srt(est="oracle", alpha=0.5, init=1 * MS):
    return {"oracle": est == "oracle", "alpha": float(alpha), "init": int(init)}


def _mlfq(levels=3, q=10 * MS, allot=None, boost=1000 * MS):
    levels = int(levels)
    qs = _per_level(q, levels, "q")
    allots = _per_level(allot, levels, "allot") if allot is not None else list(qs)
    return {"levels": levels, "q": qs, "allot": allots, "period": int(boost) or None}


def _unix(q=100 * MS, decay=1000 * MS, tick=10 * MS):
    return {"q": int(q), "tick": int(tick), "period": int(decay)}


def _eevdf(slice=3 * MS, tick=4 * MS, wakeup_preempt=1, bg_slice=None, wake_resched=1, parity=0):
    return {"slice": int(slice), "bg_slice": int(bg_slice) if bg_slice is not None else None, "tick": int(tick),
            "wakeup_preempt": bool(int(wakeup_preempt)), "wake_resched": bool(int(wake_resched)),
            "parity": bool(int(parity))}


def _rt(q=100 * MS, prio=50, tick=4 * MS, rr=True):
    """SCHED_RR's slice is whole ticks (at least one); `prio` is accepted and, with one priority
    for all of the program's tasks, changes nothing."""
    tick = int(tick)
    q = max(tick, -(-int(q) // tick) * tick) if tick else int(q)
    return {"q": q, "tick": tick, "rr": bool(rr)}


# spec name -> (the core's name, its parameters from the spec's)
FORMS = {
    "fifo": ("fifo", lambda: {}), "recorded": ("fifo", lambda: {}), "lifo": ("lifo", lambda: {}),
    "rr": ("rr", lambda q=10 * MS: {"q": int(q)}), "sjf": ("sjf", lambda: {}), "srt": ("srt", _srt),
    "stcf": ("srt", _srt), "hrrn": ("hrrn", lambda: {}), "mlfq": ("mlfq", _mlfq), "unix": ("unix", _unix),
    "eevdf": ("eevdf", _eevdf), "sched_rr": ("rt", _rt),
    "sched_fifo": ("rt", lambda prio=50, tick=4 * MS: _rt(prio=prio, tick=tick, rr=False)),
}


def native_form(name: str, params: dict) -> Policy:
    core, resolve = FORMS[name]
    return Policy(core, resolve(**params))
