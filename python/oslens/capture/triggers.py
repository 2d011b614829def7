"""The flight recorder's triggers (docs/flight.md, "Triggers"): `parse` reads a spec
(capture/trigger_spec.py), and a `Watcher` tails a recording's raw chunks while they are written
(_native.ChunkTail: the records committed since its last read, staging ring included) and says
which triggers fired, when (CLOCK_MONOTONIC ns, the kernel records' clock) and with what numbers.

A poll reads each live chunk's header (one pread per chunk) and lists the raw folder; records
are read once. Application records are filtered with numpy to the instruments the specs name
before any Python loop; kernel records (only read when a spec needs them) are taken in time
order once they are `kernel_lag_ns` old, so every CPU's chunk has caught up with them.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from oslens import _native
from oslens.capture import raw, syscall_names
from oslens.capture.trigger_sched import Sched
from oslens.capture.trigger_spec import Cond, Trigger, parse, parse_duration  # noqa: F401 (the interface)

# how old a kernel record must be before it is taken: a quiet collector drains its rings every
# 250 ms (TICK_MS, crates/collector/src/collector.rs), and a joint condition waits for them
KERNEL_LAG_NS = 1_000_000_000
# at most this many calibration pairs are fitted (the first few and the latest)
MAX_PAIRS = 64
# the watcher's own (TSC, CLOCK_MONOTONIC) pair is taken at most this often, and kept when read
# within this long
OWN_PAIR_NS = 1_000_000_000
TIGHT_PAIR_NS = 20_000
CLASS_OF = {"region": raw.CLASS_ID["region"], "timer": raw.CLASS_ID["timer"], "event": raw.CLASS_ID["event"],
            "counter": raw.CLASS_ID["counter"]}
APP_KINDS = {"region": (raw.REGION_BEGIN, raw.REGION_END), "timer": (raw.TIMER_STOP,), "event": (raw.EVENT,),
             "counter": (raw.COUNTER,)}


@dataclass(frozen=True)
class Fired:
    """A trigger that fired: when (CLOCK_MONOTONIC ns), which spec, and what, in one line; the
    thread it names and when the interval it measured began (a region, a call, an off-CPU wait)."""

    t_ns: int
    spec: str
    detail: str
    tid: int | None = None
    begin_ns: int | None = None


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.1f} ms"


class _Clock:
    """Raw TSC values to CLOCK_MONOTONIC ns, by raw.ClockConverter's line through the pairs of
    the app chunks' headers, their CLOCK_PAIR records and the watcher's own pairs."""

    def __init__(self):
        self.pairs: set[tuple[int, int]] = set()
        self.conv = raw.ClockConverter([])
        self.own_at = 0
        self.dirty = False

    def add(self, pairs):
        for p in pairs:
            if p[0] and p[1] and p not in self.pairs:
                self.pairs.add((int(p[0]), int(p[1])))
                self.dirty = True

    def refit(self, now_ns: int):
        if self.pairs and now_ns - self.own_at >= OWN_PAIR_NS:
            self.own_at = now_ns
            for _ in range(3):  # a pair read across a preemption is off by the preemption: read again
                t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
                pair = _native.clock_pair()
                if time.clock_gettime_ns(time.CLOCK_MONOTONIC) - t0 < TIGHT_PAIR_NS:
                    self.add([pair])
                    break
        if self.dirty:
            pts = sorted(self.pairs)
            if len(pts) > MAX_PAIRS:
                pts = pts[:8] + pts[-(MAX_PAIRS - 8):]
                self.pairs = set(pts)
            self.conv, self.dirty = raw.ClockConverter(pts), False


class _Names:
    """{pid: {(class, id): name}} from the names chunks (read whole when they grew), a fork()ed
    child falling back on its parent's, and the ids each pid's watched names have."""

    def __init__(self, watched: dict[int, set[str]]):
        self.by_pid: dict[int, dict] = {}
        self.parent: dict[int, int] = {}
        self.watched = watched  # class -> names the specs name
        self.ids: dict[int, dict[int, dict[int, str]]] = {}  # pid -> class -> {id: name}

    def reread(self, path: Path):
        got = _native.read_chunk(str(path))
        h = got["header"]
        if not h:
            return
        table = self.by_pid.setdefault(h["pid"], {})
        for ident, cls, _manager, name in got["names"]:
            table[(cls, ident)] = name
        if h.get("ppid"):
            self.parent.setdefault(h["pid"], h["ppid"])
        self.ids.clear()

    def name(self, pid: int, cls: int, ident: int) -> str | None:
        seen = set()
        while pid and pid not in seen:
            seen.add(pid)
            n = self.by_pid.get(pid, {}).get((cls, ident))
            if n is not None:
                return n
            pid = self.parent.get(pid, 0)
        return None

    def watched_ids(self, pid: int) -> dict[int, dict[int, str]]:
        """class -> {id: name} of the watched names as process `pid` knows them."""
        if pid not in self.ids:
            out = {}
            for cls, names in self.watched.items():
                keys = {i for p in self._chain(pid) for (c, i) in self.by_pid.get(p, {}) if c == cls}
                found = {i: self.name(pid, cls, i) for i in keys}
                out[cls] = {i: n for i, n in found.items() if n in names}
            self.ids[pid] = out
        return self.ids[pid]

    def _chain(self, pid: int):
        seen = []
        while pid and pid not in seen:
            seen.append(pid)
            pid = self.parent.get(pid, 0)
        return seen


class Watcher:
    """Tails the chunks of `raw_dir` and fires `specs` (Trigger objects from parse)."""

    def __init__(self, raw_dir: Path, specs: list[Trigger], kernel_lag_ns: int = KERNEL_LAG_NS):
        self.raw_dir = Path(raw_dir)
        self.specs = list(specs)
        self.lag = kernel_lag_ns
        watched: dict[int, set[str]] = {}
        for t in self.specs:
            if t.first.kind in CLASS_OF:
                watched.setdefault(CLASS_OF[t.first.kind], set()).add(t.first.name)
        self.names = _Names(watched)
        self.app_kinds = np.array(sorted({k for t in self.specs for k in APP_KINDS.get(t.first.kind, ())}), dtype=np.uint8)
        nrs = {syscall_names.syscall_nr(t.first.name) for t in self.specs if t.first.kind == "syscall"}
        self.kernel = any(t.first.kind in ("syscall", "runq", "offcpu") or t.within for t in self.specs)
        self.sched = Sched(nrs, any(t.first.kind in ("runq", "offcpu") or t.within for t in self.specs))
        self.tails: dict[str, _native.ChunkTail] = {}
        self.done: set[str] = set()
        self.execd: set[str] = set()  # open chunks whose last record is an exec: their successors may be read
        self.listed: set[str] = set()
        self.clock = _Clock()
        self.stacks: dict[tuple[int, int], list[int]] = {}   # (tid, region id) -> begin timestamps
        self.counters: dict[tuple[int, int], int] = {}       # (pid, counter id) -> last value
        self.pending = np.empty(0, dtype=raw.RECORD_DTYPE)    # kernel records not yet old enough
        self.joint: list[tuple] = []                          # (end, tid, begin, trigger, what) waiting for the kernel
        self.taken_to = 0                                     # the latest kernel record taken
        self.late = 0                                         # kernel records that came after later ones were taken
        self.deferred: list[tuple] = []                       # app records of a process whose names are not read yet

    def close(self):
        self.tails.clear()

    # -- reading ---------------------------------------------------------------------------

    def _discover(self):
        try:
            entries = os.listdir(self.raw_dir)
        except OSError:
            return  # not there yet (armed before the program's first instruction)
        self.listed = set(entries)
        for name in entries:
            if name.endswith(".osl") and name not in self.tails and name not in self.done:
                if name.startswith("kernel-") and not self.kernel:
                    continue
                try:
                    self.tails[name] = _native.ChunkTail(str(self.raw_dir / name))
                except OSError:
                    continue  # gone already (a spare renamed away): listed again next time

    def _read(self, name: str) -> tuple[dict | None, np.ndarray]:
        tail = self.tails[name]
        try:
            records = np.frombuffer(tail.read(), dtype=raw.RECORD_DTYPE)
        except OSError:
            records = np.empty(0, dtype=raw.RECORD_DTYPE)
        h = tail.header()
        if name not in self.listed or h is not None and h["closed"] and tail.seen >= h["committed"]:
            del self.tails[name]  # a closed chunk gets nothing more, nor one deleted (read to its end above)
            self.done.add(name)
        elif len(records):
            # an image that exec'd away never closes its chunk; the next image (same pid and tid) goes on in the next
            if records["kind"][-1] == raw.PROCESS_EXEC:
                self.execd.add(name)
            else:
                self.execd.discard(name)
        return h, records

    def _in_order(self, prefix: str):
        """The chunks named prefix*, each stream's (a thread's, a CPU's) in sequence order, a later
        chunk only once the one before it was closed and read to its end: a writer closes a full
        chunk before it writes into the next, so records are read in the order written."""
        streams: dict[str, list] = {}
        for n in self.tails:
            if n.startswith(prefix):
                stem, _, seq = n[:-len(".osl")].rpartition("-")
                streams.setdefault(stem, []).append((int(seq) if seq.isdigit() else 0, n))
        for chunks in streams.values():
            for _, n in sorted(chunks):
                yield n
                if n in self.tails and n not in self.execd:  # still open after its read: its successors wait
                    break

    # -- polling ---------------------------------------------------------------------------

    def poll(self) -> list[Fired]:
        """The triggers that fired since the last poll, in time order."""
        self._discover()
        now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        app, self.deferred = self.deferred, []  # (header, records, deferred already)
        for name in self._in_order("app-"):  # before the names they use
            h, r = self._read(name)
            if h is not None:
                if h["clock"] == raw.CLOCK_TSC:
                    self.clock.add(h["calib"])
                    cp = r[r["kind"] == raw.CLOCK_PAIR]
                    self.clock.add(zip(cp["ts"].tolist(), cp["a"].tolist()))
                if len(r) and len(self.app_kinds):
                    app.append((h, r[np.isin(r["kind"], self.app_kinds)], False))
        for name in [n for n in self.tails if n.startswith("names-")]:  # one per image or session: any order
            h, r = self._read(name)
            if len(r) and (r["kind"] == raw.NAME).any():
                try:
                    self.names.reread(self.raw_dir / name)
                except OSError:
                    pass  # deleted since (the flight ring's oldest): its names were read before
        self.clock.refit(now)
        fired = []
        for h, r, again in app:
            if h["pid"] in self.names.by_pid or again:
                fired += self._app(h, r)
            elif len(r):  # its process's names chunk was not listed yet: once more, next poll
                self.deferred.append((h, r, True))
        if self.kernel:
            fired += self._kernel(now)
        fired.sort(key=lambda f: f.t_ns)
        return fired

    def _horizon(self, now: int) -> int:
        """Kernel records up to this time are taken: all of them once every kernel chunk is
        closed and the recording wrote its meta.json (the collector ended), else those `lag` old."""
        if (any(n.startswith("kernel-") for n in self.done) and not any(n.startswith("kernel-") for n in self.tails)
                and (self.raw_dir.parent / "meta.json").exists()):  # not a chunk closed as the next one opens
            return 2**63 - 1
        return now - self.lag

    def _ns(self, h: dict, ts: np.ndarray) -> np.ndarray:
        """Timestamps of chunk `h` in CLOCK_MONOTONIC ns."""
        return self.clock.conv.to_ns(ts) if h["clock"] == raw.CLOCK_TSC else ts.astype(np.int64)

    def _ticks_ns(self, h: dict, ticks: np.ndarray) -> np.ndarray:
        return ticks.astype(np.float64) * (self.clock.conv.slope if h["clock"] == raw.CLOCK_TSC else 1.0)

    def _app(self, h: dict, r: np.ndarray) -> list[Fired]:
        """The watched instruments' records of one chunk, each instrument's with numpy."""
        if not len(r):
            return []
        ids = self.names.watched_ids(h["pid"])
        out = []
        for kind, kinds in APP_KINDS.items():
            known = ids.get(CLASS_OF[kind], {})
            if not known:
                continue
            sel = r[np.isin(r["kind"], kinds) & np.isin(r["id"], np.fromiter(known, dtype=np.uint32, count=len(known)))]
            for ident in np.unique(sel["id"]).tolist():
                out += getattr(self, "_" + kind)(h, known[ident], ident, sel[sel["id"] == ident])
        return out

    def _pairs(self, tid: int, ident: int, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(begin, end) raw timestamps of the regions `r` (one thread's, one name's) closes, the
        begins still open kept for the next records."""
        stack = self.stacks.setdefault((tid, ident), [])
        is_begin = r["kind"] == raw.REGION_BEGIN
        ts = r["ts"]
        if len(stack) <= 1 and np.array_equal(is_begin, np.arange(len(r)) % 2 == len(stack)):
            # alternating begin, end (no region nested in one of its own name): paired by position
            b = np.concatenate([np.array(stack, dtype=np.uint64), ts[is_begin]])
            e = ts[~is_begin]
            stack[:] = b[len(e):].tolist()
            return b[:len(e)], e
        begins, ends = [], []
        for t, opens in zip(ts.tolist(), is_begin.tolist()):
            if opens:
                stack.append(t)
            elif stack:  # an end without its begin (recorded before the watcher could see) is left
                begins.append(stack.pop())
                ends.append(t)
        return np.array(begins, dtype=np.uint64), np.array(ends, dtype=np.uint64)

    def _region(self, h: dict, name: str, ident: int, r: np.ndarray) -> list[Fired]:
        b, e = self._pairs(h["tid"], ident, r)
        ok = e >= b  # an end before its begin is damage, not a region lasting 2**64 ticks
        return self._intervals("region", name, h, self._ticks_ns(h, e[ok] - b[ok]), e[ok])

    def _timer(self, h: dict, name: str, ident: int, r: np.ndarray) -> list[Fired]:
        return self._intervals("timer", name, h, self._ticks_ns(h, r["a"]), r["ts"])

    def _intervals(self, kind: str, name: str, h: dict, took: np.ndarray, end_raw: np.ndarray) -> list[Fired]:
        least = min((t.first.threshold for t in self.specs if t.first.kind == kind and t.first.name == name), default=None)
        if least is None or not len(took):
            return []
        over = took > least
        out = []
        for d, end in zip(took[over].tolist(), self._ns(h, end_raw[over]).tolist()):
            out += self._fire_interval(kind, name, h["tid"], end - round(d), end, d)
        return out

    def _event(self, h: dict, name: str, ident: int, r: np.ndarray) -> list[Fired]:
        specs = [t.spec for t in self.specs if t.first.kind == "event" and t.first.name == name]
        return [Fired(t, s, f"event {name} on tid {h['tid']}", h["tid"]) for t in self._ns(h, r["ts"]).tolist() for s in specs]

    def _counter(self, h: dict, name: str, ident: int, r: np.ndarray) -> list[Fired]:
        """A value over the threshold whose predecessor (of the same process's counter) was not."""
        key = (h["pid"], ident)
        value = r["a"].view(np.int64)
        before = np.concatenate([[self.counters.get(key, -np.inf)], value[:-1]])
        self.counters[key] = int(value[-1])
        out = []
        for t in self.specs:
            if t.first.kind == "counter" and t.first.name == name:
                up = (before <= t.first.threshold) & (value > t.first.threshold)
                out += [Fired(ts, t.spec, f"counter {name} reached {v} (over {t.first.threshold:g}) on tid {h['tid']}", h["tid"])
                        for ts, v in zip(self._ns(h, r["ts"][up]).tolist(), value[up].tolist())]
        return out

    def _fire_interval(self, kind: str, name: str, tid: int, begin: int, end: int, took: float) -> list[Fired]:
        out = []
        verb = "ran" if kind == "timer" else "took"
        for t in self.specs:
            if t.first.kind == kind and t.first.name == name and took > t.first.threshold:
                what = f"{kind} {name} {verb} {_ms(took)} on tid {tid}"
                if t.within:
                    self.joint.append((end, tid, begin, t, what))
                else:
                    out.append(Fired(end, t.spec, what, tid, begin))
        return out

    def _kernel(self, now: int) -> list[Fired]:
        new = [r for name in self._in_order("kernel-") for r in [self._read(name)[1]] if len(r)]
        horizon = self._horizon(now)  # after the reads, which drop the chunks closed and read
        if new:
            r = np.concatenate(new)
            r = r[self.sched.keep(r)]
            # records older than what was already taken came later than the lag allowed for: left
            # out and counted (a switch-out or -in missed loses one interval; taken out of order,
            # it would pair with the wrong one)
            late = r["ts"] <= np.uint64(max(self.taken_to, 0))
            self.late += int(np.count_nonzero(late))
            self.pending = np.concatenate([self.pending, r[~late]])
            self.pending = self.pending[np.argsort(self.pending["ts"], kind="stable")]
        out = []
        n = int(np.searchsorted(self.pending["ts"], np.uint64(max(horizon, 0)), side="right"))
        if n:
            ready, self.pending = self.pending[:n], self.pending[n:]
            self.taken_to = int(ready["ts"][-1])
            intervals, calls = self.sched.feed(ready)
            out += self._offcpu(intervals)
            for tid, enter, exit_, nr in calls:
                out += self._fire_interval("syscall", syscall_names.syscall_name(nr), tid, enter, exit_, exit_ - enter)
        still = []
        for j in self.joint:
            if j[0] > horizon:
                still.append(j)
            else:
                out += self._joint(*j)
        self.joint = still
        return out

    def _offcpu(self, got: np.ndarray) -> list[Fired]:
        """Standalone offcpu / runq conditions on the off-CPU intervals that just ended."""
        out = []
        off, runq = got["back"] - got["left"], got["back"] - got["ready"]
        for t in self.specs:
            if t.first.kind == "offcpu":
                for x in got[off > t.first.threshold].tolist():
                    out.append(Fired(x[2], t.spec, f"tid {x[0]} was off CPU {_ms(x[2] - x[1])}, "
                                                   f"{_ms(x[2] - x[3])} of it waiting for a CPU", x[0], x[1]))
            elif t.first.kind == "runq":
                for x in got[runq > t.first.threshold].tolist():
                    out.append(Fired(x[2], t.spec, f"tid {x[0]} waited {_ms(x[2] - x[3])} for a CPU", x[0], x[3]))
        return out

    def _joint(self, end: int, tid: int, begin: int, t: Trigger, what: str) -> list[Fired]:
        off, runq = self.sched.within(tid, begin, end)
        got = {"offcpu": off, "runq": runq}
        if all(got[c.kind] > c.threshold for c in t.within):
            words = {"offcpu": "off CPU", "runq": "waiting for a CPU"}
            parts = [f"{_ms(got[c.kind])} of it {words[c.kind]}" for c in t.within]
            return [Fired(end, t.spec, f"{what}, {', '.join(parts)}", tid, begin)]
        return []
