"""The flight recorder's loop in the `oslens record --flight` process (docs/flight.md).

The program's threads and the kernel collector write chunks of a quarter of the ring each and
open the next when one is full (OSLENS_ON_FULL=rotate; the collector's --chunk-records). This
thread wakes every ~100 ms, or when a chunk file appears in raw/ (inotify), and deletes each
stream's oldest closed chunks beyond the bound, after reading what they held: that is kept as
an overwritten interval per stream, never counted as lost. On a trigger (a Fired from the
watcher of capture/triggers.py, SIGUSR2 to this process, `oslens snapshot DIR`, the program
dying of a signal) it cuts a snapshot at T (capture/flight_snapshot.py). Recording goes on.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from oslens.capture import flight_chunks, flight_snapshot, inotify

TICK_S = 0.1  # the loop's period with triggers to watch: perf and LTTng consumers wake on timers of 100 ms and more
IDLE_S = 1.0  # without: new chunk files wake it (inotify), this only in case an event is missed
RING_PARTS = 4  # a stream's ring is this many chunks (LTTng: sub-buffers of a ring)
PID_FILE = "flight.pid"  # where `oslens snapshot DIR` finds this process


@dataclass
class FlightOptions:
    ring_bytes: int  # per stream (each app thread, each CPU of the kernel collector)
    window_ns: int | None = None
    triggers: list = field(default_factory=list)  # parsed specs (capture/triggers.py)
    after_s: float = 0.0
    max_snapshots: int | None = None
    min_gap_s: float = 0.0
    overlap: bool = False

    @property
    def chunk_bytes(self) -> int:
        return self.ring_bytes // RING_PARTS


def options_from(settings: dict) -> FlightOptions:
    """FlightOptions from the session's `flight` settings (plain JSON, kept in meta.json)."""
    triggers = []
    if settings.get("triggers"):
        from oslens.capture import triggers as trigger_language
        triggers = [trigger_language.parse(t) for t in settings["triggers"]]
    return FlightOptions(ring_bytes=settings["ring_mb"] << 20, window_ns=settings.get("window_ns"), triggers=triggers,
                         after_s=settings.get("after_s") or 0.0, max_snapshots=settings.get("max_snapshots"),
                         min_gap_s=settings.get("min_gap_s") or 0.0, overlap=bool(settings.get("overlap")))


@dataclass
class Overwritten:
    """One stream's deleted chunks, merged: they are always its oldest, so one interval."""
    chunks: int = 0
    records: int = 0
    first_ns: int | None = None
    last_ns: int | None = None

    def add(self, h: flight_chunks.Held) -> None:
        self.chunks += 1
        self.records += h.records
        if h.first_ns is not None:
            self.first_ns = h.first_ns if self.first_ns is None else min(self.first_ns, h.first_ns)
            self.last_ns = h.last_ns if self.last_ns is None else max(self.last_ns, h.last_ns)


class FlightRecorder:
    def __init__(self, trace: Path, options: FlightOptions, meta: dict, pairs: list, flush_kernel=None):
        self.trace, self.raw, self.options = trace, trace / "raw", options
        # the collector's drain-now (capture/kernel.py): a quiet collector drains every 250 ms only
        self.flush_kernel = flush_kernel
        self.meta, self.pairs = meta, pairs  # the recording's meta so far and clock pairs
        self.overwritten: dict[str, Overwritten] = {}
        self.saved = flight_snapshot.Saved()  # what earlier snapshots took, per stream
        self.snapshots: list[dict] = []
        self.ignored: list[dict] = []
        self.pending: list[dict] = []  # triggers waiting for their --after
        self.last_trigger_ns: int | None = None
        self.max_raw_bytes = 0
        self.failed: str | None = None  # the first error of the loop, said once and kept in meta
        self._requests: list[dict] = []  # from signal handlers, taken by the loop
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._watch = inotify.watch(self.raw, inotify.IN_CREATE | inotify.IN_MOVED_TO)  # a new chunk
        # Signals: Python runs handlers in the main thread, which waits in wait4 for the program
        # while the kernel may deliver SIGUSR2 to another thread; the C-level handler writes the
        # signal's number to this pipe at once, whichever thread took it (signal.set_wakeup_fd).
        self._sig_r, self._sig_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._previous_wakeup = -1
        self._thread = threading.Thread(target=self._loop, name="oslens-flight", daemon=True)
        self.watcher = None

    def start(self) -> "FlightRecorder":
        signal.signal(signal.SIGUSR2, lambda _s, _f: None)  # the byte in the pipe is the trigger
        self._previous_wakeup = signal.set_wakeup_fd(self._sig_w, warn_on_full_buffer=False)
        (self.trace / PID_FILE).write_text(f"{os.getpid()}\n")
        if self.options.triggers:
            from oslens.capture import triggers
            self.watcher = triggers.Watcher(self.raw, self.options.triggers)
        self._thread.start()
        return self

    def request(self, spec: str, detail: str = "") -> None:
        """A trigger from outside the loop (a signal handler: no lock, one append, one write)."""
        self._requests.append({"spec": spec, "detail": detail, "t_ns": time.monotonic_ns()})
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def stop(self, exit_signal: str | None = None) -> dict:
        """Ends the loop; a program that died of a signal is a trigger. Returns meta's flight section."""
        (self.trace / PID_FILE).unlink(missing_ok=True)
        signal.set_wakeup_fd(self._previous_wakeup)
        # a SIGUSR2 that comes after the loop (`oslens snapshot` racing the program's end) must not
        # kill the import by its default action: it is said and dropped
        signal.signal(signal.SIGUSR2, _too_late)
        self._stop.set()
        os.write(self._wake_w, b"x")
        self._thread.join(timeout=30)
        if exit_signal:
            self._trigger({"spec": f"exit:{exit_signal}", "detail": f"the program was killed by {exit_signal}",
                           "t_ns": time.monotonic_ns()}, immediate=True)
        for p in list(self.pending):  # a trigger still waiting for its --after: cut now
            self.pending.remove(p)
            self._cut(p)
        self.trim()
        for fd in (self._watch, self._wake_r, self._wake_w, self._sig_r, self._sig_w):
            if fd is not None and fd >= 0:
                os.close(fd)
        return self.summary()

    def summary(self) -> dict:
        o = self.options
        return {"ring_bytes_per_stream": o.ring_bytes, "chunk_bytes": o.chunk_bytes, "window_ns": o.window_ns,
                "after_s": o.after_s, "max_snapshots": o.max_snapshots, "min_gap_s": o.min_gap_s, "overlap": o.overlap,
                "snapshots": self.snapshots, "ignored_triggers": self.ignored, "overwritten": self.overwritten_list(),
                "max_raw_bytes": self.max_raw_bytes, **({"error": self.failed} if self.failed else {})}

    def overwritten_list(self) -> list[dict]:
        return [{"stream": s, **vars(o)} for s, o in sorted(self.overwritten.items())]

    # the loop

    def _loop(self) -> None:
        while not self._stop.is_set():
            # a chunk closes only when the next one is created, which inotify reports: without a
            # watcher to feed or a cut to make, the loop sleeps until then (or IDLE_S)
            idle = TICK_S if self.watcher is not None or self.pending or self._watch is None else IDLE_S
            ready, _, _ = select.select([fd for fd in (self._watch, self._wake_r, self._sig_r) if fd is not None], [], [], idle)
            for fd in ready:
                got = _drain(fd)
                for _ in range(got.count(int(signal.SIGUSR2)) if fd == self._sig_r else 0):
                    self.request("SIGUSR2", "SIGUSR2 sent to oslens record")  # each one handled is a snapshot asked for
            try:
                self._take_triggers()  # first: the watcher reads what trim may delete
                self.trim()
            except OSError:
                pass  # a failing file system: the chunks stay, the recording goes on
            except Exception as err:  # noqa: BLE001  (the loop must outlive a bug: the ring is its job)
                if not self.failed:
                    print(f"oslens: flight recorder: {err!r}; the ring is still trimmed", file=sys.stderr)
                self.failed = repr(err)

    def _take_triggers(self) -> None:
        while self._requests:
            self._trigger(self._requests.pop(0))
        if self.watcher is not None:
            for f in self.watcher.poll():
                self._trigger({"spec": f.spec, "detail": f.detail, "t_ns": f.t_ns, "tid": f.tid, "begin_ns": f.begin_ns})
        now = time.monotonic_ns()
        for p in [p for p in self.pending if p["cut_at_ns"] <= now]:
            self.pending.remove(p)
            self._cut(p)

    def _trigger(self, fired: dict, immediate: bool = False) -> None:
        o = self.options
        why = None
        if o.max_snapshots is not None and len(self.snapshots) + len(self.pending) >= o.max_snapshots:
            why = f"--max-snapshots {o.max_snapshots} reached"
        elif self.last_trigger_ns is not None and fired["t_ns"] - self.last_trigger_ns < o.min_gap_s * 1e9:
            why = f"within --min-gap {o.min_gap_s:g}s of the previous trigger"
        if why:
            self.ignored.append({**fired, "why": why})
            return
        self.last_trigger_ns = fired["t_ns"]
        fired = {**fired, "cut_at_ns": fired["t_ns"] + (0 if immediate else int(o.after_s * 1e9))}
        if fired["cut_at_ns"] <= time.monotonic_ns():
            self._cut(fired)
        else:
            self.pending.append(fired)

    def _cut(self, fired: dict) -> None:
        number = len(self.snapshots) + 1
        if self.flush_kernel is not None:
            self.flush_kernel()  # the kernel's records up to now into its chunks before they are cut
        info = flight_snapshot.cut(self.trace, number, fired, self)
        self.snapshots.append({"dir": info["dir"], "spec": fired["spec"], "t_ns": fired["t_ns"], "cut_ns": info["cut_ns"],
                               "complete_from_ns": info["complete_window"][0], "save_ns": info["save_ns"]})

    # the bound

    def _watched(self, name: str) -> bool:
        """Whether the watcher has read all of a closed chunk (its `done`), so deleting it hides nothing from a trigger."""
        done = getattr(self.watcher, "done", None)
        return done is None or name in done or (name.startswith("kernel-") and not self.watcher.kernel)

    def trim(self) -> None:
        """Deletes each stream's oldest closed chunks beyond RING_PARTS (and, with --window,
        closed chunks whose last record is older than the window), after reading what they held."""
        streams: dict[str, list[tuple[int, Path]]] = {}
        total = 0
        for p in self.raw.iterdir():
            s = flight_chunks.stream_of(p.name)
            if s and not s[0].startswith("names-"):
                streams.setdefault(s[0], []).append((s[1], p))
                total += _disk_bytes(p)
        self.max_raw_bytes = max(self.max_raw_bytes, total)
        horizon = time.monotonic_ns() - self.options.window_ns if self.options.window_ns else None
        for stream, chunks in streams.items():
            chunks.sort()
            excess = len(chunks) - RING_PARTS
            for seq, path in chunks:
                if excess <= 0 and horizon is None:
                    break
                head = flight_chunks.read_header(path)
                if not flight_chunks.is_closed(head) or not self._watched(path.name):
                    break  # the stream's open chunk (nothing after it is closed either), or one the watcher has not read
                h = flight_chunks.held(path, self.pairs)
                if excess <= 0 and (h.last_ns is None or h.last_ns >= horizon):
                    break
                self.overwritten.setdefault(stream, Overwritten()).add(h)
                path.unlink(missing_ok=True)
                excess -= 1


def _disk_bytes(p: Path) -> int:
    try:
        return p.stat().st_blocks * 512
    except OSError:
        return 0


def _drain(fd: int) -> bytes:
    got = b""
    try:
        while chunk := os.read(fd, 65536):
            got += chunk
    except (BlockingIOError, OSError):
        pass
    return got


def _too_late(_signum, _frame) -> None:
    print("oslens: SIGUSR2 after the program ended: no snapshot taken (the flight recording is over)", file=sys.stderr, flush=True)
