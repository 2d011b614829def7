"""The memory of a running recording, read from /proc (the kernel's own figures), for the flight
recorder's bound test (tests/test_flight.py): the resident and peak resident size of `oslens record`
and of its kernel collector, and the resident pages of the chunk files the program has mapped."""

from __future__ import annotations

import threading
import time
from pathlib import Path

COLLECTOR_COMM = "oslens-collecto"  # /proc/PID/comm keeps 15 characters of "oslens-collector"


def status_kib(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM and RssFile of /proc/PID/status in KiB; {} once the process is gone."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssFile"):
            out[key] = int(value.split()[0])
    return out


def children(pid: int) -> list[int]:
    """The children of every thread of PID (/proc/PID/task/TID/children)."""
    out = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            out += [int(c) for c in (task / "children").read_text().split()]
    except OSError:
        pass
    return out


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def mapped_under(pid: int, folder: Path) -> int | None:
    """KiB resident of PID's mappings of files under `folder` (deleted ones too: the ring may
    delete a chunk a thread still maps); None once the process is gone."""
    prefix, total, counting = str(folder.resolve()) + "/", 0, False
    try:
        lines = Path(f"/proc/{pid}/smaps").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        head = line.split(None, 5)
        if len(head) >= 5 and "-" in head[0] and not head[0].endswith(":"):
            counting = len(head) == 6 and head[5].startswith(prefix)
        elif counting and head and head[0] == "Rss:":
            total += int(head[1])
    return total


class Sampler:
    """Samples, every `period_s` in a thread until stop(): seconds since start, then for
    `oslens record` (pid), its collector child and the program (pid in TRACE/meta.json) their
    status figures, and the program's resident chunk pages under TRACE/raw."""

    def __init__(self, record_pid: int, trace: Path, period_s: float = 0.5):
        self.record_pid, self.trace, self.period_s = record_pid, trace, period_s
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> list[dict]:
        self._stop.set()
        self._thread.join()
        return self.samples

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.samples.append(self.sample())

    def sample(self) -> dict:
        s = {"t": time.monotonic() - self._start, "record": status_kib(self.record_pid)}
        collector = [c for c in children(self.record_pid) if comm(c) == COLLECTOR_COMM]
        s["collector"] = status_kib(collector[0]) if collector else {}
        program = self._program()
        if program:
            s["program"] = status_kib(program)
            s["program"]["chunks"] = mapped_under(program, self.trace / "raw")
        return s

    def _program(self) -> int | None:
        import json

        try:
            return int(json.loads((self.trace / "meta.json").read_text())["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
