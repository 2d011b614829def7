"""Kernel call stacks at tracepoints, for a few processes, through an ftrace instance of their
own (tracefs mounted for the run where it is not): each tracepoint gets a `stacktrace` trigger filtered to the processes' command name, so
the kernel writes the event and its stack into the instance's buffer. This kernel has neither
kprobes nor function_graph; event triggers need only CONFIG_STACKTRACE (docs/labs/04-fault-anatomy.md).
The instance is a directory: the caller's journal removes it (and unmounts a tracefs it mounted)
at the end, after a SIGKILL too."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from oslens.errors import OslensError

TRACEFS = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))
# the event line: "  comm-pid  [cpu] flags  ts: event: fields"
_EVENT = re.compile(r"^\s*(?P<comm>.+?)-(?P<pid>\d+)\s+\[\d+\]\s+\S+\s+[\d.]+:\s+(?P<event>\w+):\s*(?P<fields>.*)$")
_FRAME = re.compile(r"^\s*=> (?P<func>\S+)")
# the tracing machinery's own frames, above the function that hit the tracepoint
_TRACING = re.compile(r"^(trace_event_raw_event_|perf_trace_|trace_|__traceiter_|__bpf_trace_)")


@dataclass
class Hit:
    """One tracepoint hit: its event, its fields, and the kernel stack (outermost frame first)."""
    event: str
    pid: int
    fields: dict
    stack: list = field(default_factory=list)


def tracefs_root() -> Path | None:
    for root in TRACEFS:
        if (root / "instances").is_dir():
            return root
    return None


def parse(text: str) -> list[Hit]:
    """The hits of an instance's `trace` file: an event line, then '<stack trace>' and its frames."""
    hits: list[Hit] = []
    frames: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = _FRAME.match(line)
        if m and frames is not None:
            frames.append(m.group("func"))
            continue
        m = _EVENT.match(line)
        if not m:
            continue
        if m.group("event") == "kernel_stack" or m.group("fields").startswith("<stack trace>"):
            continue
        if frames is not None and hits:
            hits[-1].stack = _outermost_first(frames)
        frames = None
        fields = dict(kv.split("=", 1) for kv in m.group("fields").split() if "=" in kv)
        hits.append(Hit(m.group("event"), int(m.group("pid")), fields))
        frames = []
    if frames is not None and hits:
        hits[-1].stack = _outermost_first(frames)
    return hits


def _outermost_first(frames: list[str]) -> list[str]:
    kept = [f.split("+", 1)[0] for f in frames if not _TRACING.match(f)]
    return list(reversed(kept))


class StackCapture:
    """with StackCapture(journal, events, comm) as cap: cap.arm(); ...; cap.disarm(); cap.hits()"""

    def __init__(self, journal, events: list[str], comm: str, buffer_kb: int = 8192):
        self.journal, self.events, self.comm = journal, list(events), comm[:15]
        self.buffer_kb = buffer_kb
        self.dir = None

    def __enter__(self):
        root = tracefs_root()
        if root is None:
            # not mounted at boot on some machines: mounted for the run, and unmounted after it
            self.journal.mount("tracefs", TRACEFS[0], "tracefs")
            root = TRACEFS[0]
        self.dir = root / "instances" / f"oslens-{os.getpid()}-stacks"
        self.journal.make_tracing_instance(self.dir, "kernel stack capture")
        try:
            (self.dir / "buffer_size_kb").write_text(str(self.buffer_kb))
            for ev in self.events:
                d = self.dir / "events" / ev
                (d / "filter").write_text(f'comm == "{self.comm}"')
                (d / "trigger").write_text(f'stacktrace if comm == "{self.comm}"')
        except OSError as e:
            raise OslensError(f"cannot set up kernel stacks in {self.dir} ({e.filename}: {e.strerror})", 1) from e
        return self

    def arm(self) -> None:
        for ev in self.events:
            (self.dir / "events" / ev / "enable").write_text("1")

    def disarm(self) -> None:
        for ev in self.events:
            (self.dir / "events" / ev / "enable").write_text("0")

    def hits(self) -> list[Hit]:
        return parse((self.dir / "trace").read_text())

    def lost(self) -> int:
        """Events the instance's buffer overwrote or dropped (per_cpu/*/stats 'overrun')."""
        total = 0
        for stats in (self.dir / "per_cpu").glob("cpu*/stats"):
            for line in stats.read_text().splitlines():
                if line.startswith(("overrun:", "dropped events:")):
                    total += int(line.split(":")[1])
        return total

    def clear(self) -> None:
        (self.dir / "trace").write_text("")

    def __exit__(self, *exc):
        try:
            self.disarm()
        except OSError:
            pass
        return False
