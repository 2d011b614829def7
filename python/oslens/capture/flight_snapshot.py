"""A flight-recorder snapshot: `TRACE/snapshot-NNN/`, a normal trace directory holding every
stream's records at the cut T. Closed chunks are hard links (no copy, and the ring's later
deletion leaves them), chunks still being written are copied up to their committed count
(flight_chunks.copy_cut), names chunks are copied whole (the definitions every record needs).
meta.json is written first, marked incomplete, and again at the end: a snapshot cut short by a
SIGKILL is a directory of readable chunks that `oslens import` salvages (docs/flight.md)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from oslens import _native
from oslens.capture import flight_chunks


class Saved:
    """Per stream, how far earlier snapshots took it: (sequence number, committed count)."""

    def __init__(self):
        self.upto: dict[str, tuple[int, int]] = {}

    def from_slot(self, stream: str, seq: int) -> int | None:
        """Where this snapshot starts in chunk `seq` of `stream`; None: all of it was saved."""
        s, c = self.upto.get(stream, (-1, 0))
        if seq < s:
            return None
        return c if seq == s else 0

    def note(self, stream: str, seq: int, committed: int) -> None:
        self.upto[stream] = max(self.upto.get(stream, (-1, 0)), (seq, committed))


def cut(trace: Path, number: int, fired: dict, rec, drain_ns: int | None = None) -> dict:
    """Writes snapshot `number` of the recording `rec` (a FlightRecorder) for the trigger `fired`;
    `drain_ns` is how long the collector's drain before it took (in the step breakdown)."""
    out = trace / f"snapshot-{number:03d}"
    (out / "raw").mkdir(parents=True, exist_ok=True)
    cut_ns = time.monotonic_ns()
    steps = Steps(cut_ns)
    pairs = [tuple(p) for p in rec.pairs] + [tuple(_native.clock_pair())]
    meta = {**rec.meta, "clock_pairs": [list(p) for p in pairs], "end_ns": cut_ns, "snapshot_of": str(trace.resolve())}
    meta["flight"] = {"complete": False, "trigger": _trigger(fired), "cut_ns": cut_ns}
    _write_meta(out, meta)
    steps.mark("first_meta")
    _take_names(trace / "raw", out / "raw")  # first too: a snapshot cut short by a SIGKILL still names its records
    steps.mark("names")
    firsts, before, slots = _take_chunks(trace / "raw", out / "raw", rec, steps)
    steps.mark("scan")
    streams = {}
    for stream, path in sorted(firsts.items()):
        h = flight_chunks.held(path, pairs, rec.scans, closed=True)  # a link: the loop's scan of its chunk; a copy: read now
        streams[stream] = {"oldest_ns": h.first_ns, "first_chunk": path.name}
    steps.mark("oldest")
    cut_from = [s["oldest_ns"] for k, s in streams.items() if k in before and s["oldest_ns"] is not None]
    window = [max(cut_from) if cut_from else None, cut_ns]
    meta["flight"] = {"complete": True, "number": number, "trigger": _trigger(fired), "cut_ns": cut_ns,
                      "complete_window": window, "streams": streams, "overwritten": rec.overwritten_list(),
                      "earlier_snapshots": [s["dir"] for s in rec.snapshots], "overlap": rec.options.overlap}
    meta["threads"] = _threads(streams, slots)
    meta["clock"] = _clock(firsts)
    meta["lost_events"], meta["damage"] = 0, []
    meta["flight"]["save_ns"] = time.monotonic_ns() - cut_ns  # bench/flight: the time to save a window
    meta["flight"]["save_steps"] = steps.done(drain_ns)
    _write_meta(out, meta)
    return {"dir": out.name, "cut_ns": cut_ns, "complete_window": window, "save_ns": meta["flight"]["save_ns"],
            "save_steps": meta["flight"]["save_steps"]}


class Steps:
    """Where a save's time goes (bench/flight prints it): wall ms per step, the loop thread's CPU
    ms and run-queue wait over them, files linked and copied, bytes copied; the final meta.json
    write is not in it (it holds the breakdown)."""

    def __init__(self, t0_ns: int):
        self.t = t0_ns
        self.cpu0 = time.thread_time_ns()  # wall far above this thread's CPU: it waited (run queue, disk)
        self.runq0 = _run_delay_ns()
        self.ms: dict[str, float] = {}
        self.linked = self.copied = self.copied_bytes = 0

    def mark(self, step: str) -> None:
        now = time.monotonic_ns()
        self.ms[step] = round(self.ms.get(step, 0.0) + (now - self.t) / 1e6, 3)
        self.t = now

    def done(self, drain_ns: int | None) -> dict:
        return {"ms": {**({"drain": round(drain_ns / 1e6, 3)} if drain_ns is not None else {}), **self.ms},
                "cpu_ms": round((time.thread_time_ns() - self.cpu0) / 1e6, 3),
                **({"runq_ms": round((_run_delay_ns() - self.runq0) / 1e6, 3)} if self.runq0 is not None else {}),
                "linked": self.linked, "copied": self.copied, "copied_bytes": self.copied_bytes}


def _run_delay_ns() -> int | None:
    """The time this thread has waited runnable for a CPU (schedstat's second field); None without it."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _trigger(fired: dict) -> dict:
    return {k: fired[k] for k in ("spec", "detail", "t_ns", "tid", "begin_ns") if fired.get(k) is not None}


# raw/ files of no stream a snapshot keeps whole: `record -p`'s state dump (capture/attach_state.py)
# and the memory maps samples and functions are named through (capture/maps.py)
KEPT_WHOLE = ("attach-", "maps-")


def _take_chunks(raw: Path, dest: Path, rec, steps: Steps) -> tuple[dict[str, Path], set[str], dict[str, int]]:
    """Links or copies the chunks of raw/ into dest; returns each stream's first chunk there,
    the streams that had records before it (overwritten, or in an earlier snapshot) and the
    record slots taken per stream."""
    firsts: dict[str, Path] = {}
    slots: dict[str, int] = {}
    before = set(rec.overwritten) | (set() if rec.options.overlap else set(rec.saved.upto))
    for src in sorted(raw.iterdir(), key=_order):
        s = flight_chunks.stream_of(src.name)
        if s is None:
            if src.name.startswith(KEPT_WHOLE) and src.is_file():
                shutil.copy2(src, dest / src.name)  # the attach's state dump and the maps: small, and named for all
            continue
        stream, seq = s
        if stream.startswith("names-"):
            steps.mark("scan")
            flight_chunks.copy_cut(src, dest / src.name)
            _count_copy(steps, dest / src.name)
            steps.mark("copy_names")
            continue
        start = 0 if rec.options.overlap else rec.saved.from_slot(stream, seq)
        if start is None:
            continue
        committed = _take(src, dest / src.name, start, steps)
        if committed is None or committed <= start:
            (dest / src.name).unlink(missing_ok=True)
            continue
        rec.saved.note(stream, seq, committed)
        firsts.setdefault(stream, dest / src.name)
        slots[stream] = slots.get(stream, 0) + committed - start
    return firsts, before, slots


def _take_names(raw: Path, dest: Path) -> None:
    """The names chunks as they are now; _take_chunks copies them again, last, for later names."""
    for src in sorted(raw.glob("names-*.osl")):
        flight_chunks.copy_cut(src, dest / src.name)


def _take(src: Path, dst: Path, start: int, steps: Steps) -> int | None:
    """A closed chunk taken whole is a hard link; anything else is copied. Its committed count."""
    head = flight_chunks.read_header(src)
    steps.mark("scan")
    if start == 0 and flight_chunks.is_closed(head):
        try:
            os.link(src, dst)
            steps.linked += 1
            steps.mark("link")
            return int.from_bytes(head[flight_chunks.OFF["committed"]:][:8], "little")
        except OSError:
            pass  # another file system, or gone meanwhile: copy
    committed = flight_chunks.copy_cut(src, dst, start)
    _count_copy(steps, dst)
    steps.mark("copy_open")
    return committed


def _count_copy(steps: Steps, dst: Path) -> None:
    steps.copied += 1
    try:
        steps.copied_bytes += dst.stat().st_size
    except OSError:
        pass


def _order(p: Path):
    s = flight_chunks.stream_of(p.name)
    return (s[0], s[1]) if s else (p.name, 0)


def _threads(streams: dict, slots: dict[str, int]) -> list[dict]:
    """meta's threads for the snapshot's app streams (their names are in the names chunks;
    `records` counts record slots, continuations included)."""
    out = []
    for stream, s in streams.items():
        if stream.startswith("app-"):
            _, pid, tid = stream.split("-")
            out.append({"pid": int(pid), "tid": int(tid), "chunk": s["first_chunk"], "records": slots.get(stream, 0),
                        "dropped_events": 0, "dropped_bytes": 0, "suppressed_events": 0})
    return out


def _clock(firsts: dict[str, Path]) -> str:
    """The recorder's clock, as meta.json names it, from the snapshot's app chunks."""
    for stream, path in firsts.items():
        head = flight_chunks.read_header(path) if stream.startswith("app-") else None
        if head:
            return "tsc" if int.from_bytes(head[flight_chunks.OFF["clock"]:][:4], "little") == _native.CLOCK_TSC else "monotonic"
    return "monotonic"


def _write_meta(out: Path, meta: dict) -> None:
    tmp = out / "meta.json.tmp"
    tmp.write_text(json.dumps(meta, indent=2, sort_keys=True))
    tmp.replace(out / "meta.json")
