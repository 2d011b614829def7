"""Policy specifications as users write them: NAME[:KEY=VALUE[,KEY=VALUE...]].

    rr:q=10ms   mlfq:levels=3,q=10ms/20ms/40ms,boost=1s   srt:est=ewma,alpha=0.5   eevdf:slice=3ms
    sched_rr:q=100ms   sched_fifo   unix   hrrn   fifo   lifo   sjf   default (= eevdf here)
Every policy also takes nice=N, cpus=LIST (the program's affinity, e.g. 0 or 0-1) and ncpus=N
(simulate another number of CPUs). A bad spec is one ValueError sentence saying what is wrong."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from oslens.whatif.policy import Policy, native_form

DUR = re.compile(r"(\d+(?:\.\d+)?)(ns|us|ms|s)")
UNIT = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}

# parameter -> kind: dur (duration), durs (durations, / separated), int, float, or a set of words
PARAMS = {
    "fifo": {}, "lifo": {}, "sjf": {}, "hrrn": {}, "recorded": {},
    "rr": {"q": "dur"},
    "srt": {"est": {"oracle", "ewma"}, "alpha": "float", "init": "dur"},
    "stcf": {"est": {"oracle", "ewma"}, "alpha": "float", "init": "dur"},
    "mlfq": {"levels": "int", "q": "durs", "allot": "durs", "boost": "dur"},
    "unix": {"q": "dur", "decay": "dur", "tick": "dur"},
    "eevdf": {"slice": "dur", "tick": "dur", "wakeup_preempt": "int", "bg_slice": "dur", "wake_resched": "int",
              "parity": "int"},
    "batch": {"slice": "dur", "tick": "dur", "bg_slice": "dur", "wake_resched": "int", "parity": "int"},
    "sched_rr": {"q": "dur", "prio": "int", "tick": "dur"},
    "sched_fifo": {"prio": "int", "tick": "dur"},
}
ALIASES = {"default": "eevdf", "cfs": "eevdf", "linux": "eevdf", "rt-rr": "sched_rr", "rt-fifo": "sched_fifo",
           "fcfs": "fifo", "stcf": "srt", "psjf": "srt"}
COMMON = {"nice": "int", "cpus": "cpus", "ncpus": "int"}


@dataclass
class Spec:
    text: str
    name: str  # canonical policy name (batch stays batch)
    params: dict = field(default_factory=dict)  # policy parameters, parsed
    nice: int | None = None
    cpus: tuple[int, ...] | None = None
    ncpus: int | None = None

    @property
    def label(self) -> str:
        return self.text


def duration(text: str, what: str) -> int:
    m = DUR.fullmatch(text.strip())
    if not m:
        raise ValueError(f"{what}={text!r} is not a duration; write it with a unit, e.g. 10ms, 500us, 1s")
    return int(round(float(m.group(1)) * UNIT[m.group(2)]))


def _cpus(text: str) -> tuple[int, ...]:
    out = []
    for part in text.replace("+", " ").replace(";", " ").split():
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"cpus={text!r} is not a CPU list; write e.g. cpus=0 or cpus=0-1")
        out.extend(range(int(lo), int(hi or lo) + 1))
    if not out:
        raise ValueError("cpus= is empty; write e.g. cpus=0 or cpus=0-1")
    return tuple(sorted(set(out)))


def _value(key: str, kind, raw: str):
    if kind == "dur":
        v = duration(raw, key)
        if v <= 0 and key not in ("boost", "tick"):
            raise ValueError(f"{key}={raw} must be longer than 0")
        return v
    if kind == "durs":
        vals = [duration(x, key) for x in raw.split("/")]
        if any(v <= 0 for v in vals):
            raise ValueError(f"{key}={raw}: every duration must be longer than 0")
        return vals if len(vals) > 1 else vals[0]
    if kind == "cpus":
        return _cpus(raw)
    if kind == "int":
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"{key}={raw!r} is not a whole number") from None
    if kind == "float":
        try:
            return float(raw)
        except ValueError:
            raise ValueError(f"{key}={raw!r} is not a number") from None
    if raw not in kind:
        raise ValueError(f"{key}={raw!r} is not one of {', '.join(sorted(kind))}")
    return raw


def parse(text: str) -> Spec:
    """One spec; ValueError with one sentence when it is wrong."""
    name, _, rest = text.strip().partition(":")
    name = ALIASES.get(name.strip().lower(), name.strip().lower())
    if name not in PARAMS:
        known = ", ".join(sorted(set(PARAMS) | {"default"}))
        raise ValueError(f"unknown policy {text.split(':')[0]!r}; known: {known}")
    spec = Spec(text.strip(), name)
    allowed = PARAMS[name]
    for item in filter(None, (x.strip() for x in rest.split(","))):
        key, eq, raw = item.partition("=")
        key = key.strip().lower()
        if not eq or not raw.strip():
            raise ValueError(f"{name}: {item!r} is not KEY=VALUE")
        if key in COMMON:
            setattr(spec, key, _value(key, COMMON[key], raw.strip()))
        elif key in allowed:
            spec.params[key] = _value(key, allowed[key], raw.strip())
        else:
            keys = ", ".join(sorted(set(allowed) | set(COMMON)))
            raise ValueError(f"{name} has no parameter {key!r}; it takes: {keys}")
    _check(spec)
    return spec


def _check(spec: Spec) -> None:
    p = spec.params
    if spec.nice is not None and not -20 <= spec.nice <= 19:
        raise ValueError(f"nice={spec.nice} is outside -20..19")
    if spec.ncpus is not None and not 1 <= spec.ncpus <= 4096:
        raise ValueError(f"ncpus={spec.ncpus} must be between 1 and 4096")
    if spec.name == "mlfq":
        levels = p.get("levels", len(p["q"]) if isinstance(p.get("q"), list) else 3)
        if not 1 <= levels <= 64:
            raise ValueError(f"mlfq: levels={levels} must be between 1 and 64")
        p["levels"] = levels
        for key in ("q", "allot"):
            if isinstance(p.get(key), list) and len(p[key]) != levels:
                raise ValueError(f"mlfq: {key} lists {len(p[key])} durations for {levels} levels")
    if "prio" in p and not 1 <= p["prio"] <= 99:
        raise ValueError(f"{spec.name}: prio={p['prio']} is outside 1..99")
    if "alpha" in p and not 0 < p["alpha"] <= 1:
        raise ValueError(f"{spec.name}: alpha={p['alpha']} must be in (0, 1]")


def make_policy(spec: Spec, machine_defaults: dict | None = None) -> Policy:
    """The policy for a spec, as the engine runs it; `machine_defaults` fills Linux-like parameters the spec left
    out (eevdf slice and tick, sched_rr q) from this machine."""
    d = machine_defaults or {}
    params = dict(spec.params)
    name = spec.name
    if name == "batch":
        name = "eevdf"
        params["wakeup_preempt"] = 0
    if name == "eevdf":
        # the other tasks keep the machine's base slice (a 20 ms slice set on the program, as
        # sched_setattr does, does not change theirs) unless bg_slice says otherwise
        params.setdefault("bg_slice", d.get("base_slice_ns", 3_000_000))
        params.setdefault("slice", d.get("base_slice_ns", 3_000_000))
        params.setdefault("tick", d.get("tick_ns", 4_000_000))
    if name in ("sched_rr", "sched_fifo"):
        params.setdefault("tick", d.get("tick_ns", 4_000_000))
    if name == "sched_rr":
        params.setdefault("q", d.get("rr_timeslice_ns", 100_000_000))
    return native_form(name, params)
