"""The lines a flight-recorder trace's report opens with (docs/flight.md): for a snapshot, what
fired, when, where it was cut and the window in which every thread and CPU is complete; for the
recording's own directory, that it holds the last window and which snapshots were saved. Read
from the `meta` table (meta.json's `flight` section, flattened by the store)."""

from __future__ import annotations

import json

from oslens.analysis import units


def _list(m: dict, key: str) -> list:
    try:
        return json.loads(m.get(key) or "[]")
    except ValueError:
        return []


def _int(m: dict, key: str) -> int | None:
    try:
        return int(m[key])
    except (KeyError, TypeError, ValueError):
        return None


def lines(m: dict) -> list[str]:
    """The report's opening lines for a flight-recorder trace; none for any other trace."""
    if m.get("flight.trigger.spec"):
        return _snapshot_lines(m)
    if m.get("flight.ring_bytes_per_stream"):
        snaps = _list(m, "flight.snapshots")
        saved = ", ".join(f"{s['dir']} ({s['spec']})" for s in snaps) or "none"
        return [f"flight recording: this directory holds the last window (ring {int(m['flight.ring_bytes_per_stream']) >> 20} MiB "
                f"per thread and CPU); snapshots: {saved}", _overwritten_line(m)]
    return []


def _snapshot_lines(m: dict) -> list[str]:
    start = _int(m, "start_ns") or 0
    fired, cut = _int(m, "flight.trigger.t_ns"), _int(m, "flight.cut_ns")
    window = _list(m, "flight.complete_window")
    at = lambda ns: f"{(ns - start) / 1e9:.3f} s into the recording" if ns is not None else "?"
    out = [f"snapshot {m.get('flight.number', '?')}: {m['flight.trigger.spec']} fired at {at(fired)}"
           + (f": {m['flight.trigger.detail']}" if m.get("flight.trigger.detail") else ""),
           f"cut at {at(cut)}" + (f" ({units.fmt_ns(cut - fired)} after the trigger)" if fired is not None and cut is not None else "")]
    if len(window) == 2 and window[0] is not None:
        out.append(f"complete window: {at(window[0])} to the cut ({units.fmt_ns(window[1] - window[0])}): every thread "
                   "and CPU holds every record in it; before it, older records were overwritten (not lost)")
    elif len(window) == 2:
        out.append("complete window: from the start of the recording to the cut (nothing was overwritten)")
    out.append(_overwritten_line(m))
    return [line for line in out if line]


def _overwritten_line(m: dict) -> str | None:
    over = _list(m, "flight.overwritten")
    if not over:
        return None
    return (f"overwritten by the ring before this: {sum(o['records'] for o in over):,} records in "
            f"{sum(o['chunks'] for o in over):,} chunks of {len(over)} stream(s)")
