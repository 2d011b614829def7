"""The flight recorder's trigger language (docs/flight.md, "Triggers"): a spec is one condition,
or one interval condition (a region, timer or system call) joined with `and` to conditions on
its own thread's time off CPU or waiting for a CPU inside that interval.

    region:NAME>50ms   timer:NAME>1s   syscall:NAME>20ms   event:NAME   counter:NAME>VALUE
    runq>5ms   offcpu>20ms   region:request>50ms and offcpu>20ms
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from oslens.capture import syscall_names

# ns per unit; a duration always names its unit (a bare 50 is ambiguous between ms and ns)
UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
# kinds with a name and a duration threshold: an interval on one thread
INTERVAL_KINDS = ("region", "timer", "syscall")
# kinds of the kernel's scheduling of a thread: alone, or qualifying an interval kind
THREAD_KINDS = ("runq", "offcpu")
KINDS = INTERVAL_KINDS + ("event", "counter") + THREAD_KINDS
FORMS = "region:NAME>DUR, timer:NAME>DUR, syscall:NAME>DUR, event:NAME, counter:NAME>VALUE, runq>DUR, offcpu>DUR"

_DURATION = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*(ns|us|ms|s)$")
_NUMBER = re.compile(r"^[-+]?(\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$")
_AND = re.compile(r"\s+and\s+", re.IGNORECASE)


@dataclass(frozen=True)
class Cond:
    """One condition: `kind`, the instrument's or system call's `name` ("" for runq/offcpu),
    and `threshold` (ns for durations, the value for a counter, None for an event)."""

    kind: str
    name: str
    threshold: float | None


@dataclass(frozen=True)
class Trigger:
    """A parsed spec: `first` fires, each of `within` must also hold inside its interval."""

    spec: str
    first: Cond
    within: tuple[Cond, ...] = ()


def parse_duration(text: str, where: str) -> int:
    """'50ms' -> 50_000_000 (ns); a one-line ValueError naming `where` otherwise."""
    m = _DURATION.match(text.strip())
    if not m:
        raise ValueError(f"{where}: '{text.strip()}' is not a duration (a number and one of ns, us, ms, s: '50ms')")
    return round(float(m.group(1)) * UNITS[m.group(2)])


def _parse_cond(text: str, spec: str) -> Cond:
    text = text.strip()
    kind, sep, rest = text.partition(":")
    kind = kind.strip().lower()
    if not sep:  # runq>5ms, offcpu>20ms
        kind, gt, value = text.partition(">")
        kind = kind.strip().lower()
        if kind not in THREAD_KINDS:
            raise ValueError(f"trigger '{spec}': unknown condition '{text}' (forms: {FORMS})")
        if not gt:
            raise ValueError(f"trigger '{spec}': '{text}' needs a threshold ('{kind}>5ms')")
        return Cond(kind, "", parse_duration(value, f"trigger '{spec}'"))
    if kind not in KINDS or kind in THREAD_KINDS:
        raise ValueError(f"trigger '{spec}': unknown condition '{text}' (forms: {FORMS})")
    if kind == "event":
        if not rest.strip() or ">" in rest:
            raise ValueError(f"trigger '{spec}': 'event:NAME' takes a name and no threshold")
        return Cond(kind, rest.strip(), None)
    name, gt, value = rest.rpartition(">")
    if not gt or not name.strip():
        raise ValueError(f"trigger '{spec}': '{text}' needs a name and a threshold ('{kind}:NAME>"
                         f"{'100' if kind == 'counter' else '50ms'}')")
    if kind == "counter":
        if not _NUMBER.match(value.strip()):
            raise ValueError(f"trigger '{spec}': counter threshold '{value.strip()}' is not a number")
        return Cond(kind, name.strip(), float(value))
    if kind == "syscall" and syscall_names.syscall_nr(name.strip()) is None:
        raise ValueError(f"trigger '{spec}': unknown system call '{name.strip()}' (x86_64 names, as in 'man 2 syscalls')")
    return Cond(kind, name.strip(), parse_duration(value, f"trigger '{spec}'"))


def parse(spec: str) -> Trigger:
    """A Trigger from its text; ValueError with a one-line message on bad input."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"empty trigger (forms: {FORMS})")
    spec = " ".join(spec.split())
    conds = [_parse_cond(part, spec) for part in _AND.split(spec)]
    if len(conds) == 1:
        return Trigger(spec, conds[0])
    first, within = conds[0], tuple(conds[1:])
    if first.kind not in INTERVAL_KINDS or any(c.kind not in THREAD_KINDS for c in within):
        raise ValueError(f"trigger '{spec}': 'and' joins one region, timer or syscall condition, first, "
                         "with runq or offcpu conditions on its thread inside it")
    return Trigger(spec, first, within)
