"""Memory maps of the recorded processes, for naming IP samples (`oslens record --sample/--phases`).

IP samples are addresses; naming them needs where each process mapped its executable and
libraries (ASLR). Programs built with -finstrument-functions write their maps themselves
(crates/recorder/src/funcs.rs); for every other program this watcher reads /proc/PID/maps of the
recorded process and its descendants every PERIOD_S while the program runs, and writes
`raw/maps-<pid>-<ns>.txt` (the format oslens.store.symbols reads) whenever a process's
executable mappings change; `<ns>` is CLOCK_MONOTONIC when that map was first seen. A process
that lives shorter than one period may be missed; its samples then count as `[user]`."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

PERIOD_S = 0.02


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                todo += [int(c) for c in Path(f"/proc/{p}/task/{t}/children").read_text().split()]
            except (OSError, ValueError):
                pass
    return out


def _executable_lines(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if len(line.split(None, 5)) == 6 and "x" in line.split(None, 2)[1])


def _is_held_fork(pid: int) -> bool:
    """The forked oslens process before it execs the program (same command line as ours)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes() == Path("/proc/self/cmdline").read_bytes()
    except OSError:
        return True


class MapsWatcher:
    def __init__(self, raw_dir: Path, pid: int, period_s: float = PERIOD_S):
        self.raw_dir = Path(raw_dir)
        self.pid = pid
        self.period_s = period_s
        self._seen: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="oslens-maps", daemon=True)

    def start(self) -> "MapsWatcher":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while True:
            self.snapshot()
            if self._stop.wait(self.period_s):
                return

    def snapshot(self) -> None:
        for p in _descendants(self.pid):
            if _is_held_fork(p):
                continue
            try:
                text = Path(f"/proc/{p}/maps").read_text(errors="replace")
            except OSError:
                continue
            key = _executable_lines(text)
            if not key or self._seen.get(p) == key:
                continue
            self._seen[p] = key
            path = self.raw_dir / f"maps-{p}-{time.monotonic_ns()}.txt"
            tmp = path.with_suffix(".tmp")
            try:
                tmp.write_text(text)
                tmp.replace(path)
            except OSError:
                pass
