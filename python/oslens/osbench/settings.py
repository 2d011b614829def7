"""The kernel settings a benchmark changes, journalled before the change and always restored.

Before a sysctl is written its original value goes to a journal file (fsync'd) under the state
directory; the value is restored on normal exit, on SIGINT/SIGTERM/SIGHUP (turned into exceptions
by `oslens.signals.signals_as_exceptions`), and, if the process died without a chance to (SIGKILL, a crash, a
power cut), by `recover()` at the start of the next `oslens bench`. A lock file held while the
journal is live keeps a second run from "restoring" under the feet of a first one."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import time
from pathlib import Path

JOURNAL = "bench-sysctl-journal.json"
LOCK = "bench-sysctl.lock"


def state_dir() -> Path:
    env = os.environ.get("OSLENS_STATE_DIR")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/lib/oslens")
    return Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "oslens"


PROC_SYS = Path("/proc/sys")  # tests point this at a directory of fake sysctls


def sysctl_path(name: str) -> Path:
    return PROC_SYS / name.replace(".", "/")


def read_sysctl(name: str) -> str:
    return sysctl_path(name).read_text().strip()


def write_sysctl(name: str, value) -> None:
    with open(sysctl_path(name), "w") as f:
        f.write(f"{value}\n")


@contextlib.contextmanager
def _signals_blocked():
    sigs = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _write_journal(path: Path, originals: dict) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        json.dump({"pid": os.getpid(), "time": time.time(), "sysctl": originals}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def recover(directory: Path | None = None) -> list[str]:
    """Restore what a run that died left changed. Returns one message per restored setting."""
    directory = directory or state_dir()
    journal = directory / JOURNAL
    if not journal.exists():
        return []
    try:
        lock_fd = os.open(directory / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return []
    try:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return []  # a live run owns it and will restore it itself
        try:
            data = json.loads(journal.read_text())
        except (OSError, ValueError):
            journal.unlink(missing_ok=True)
            return ["removed an unreadable settings journal; check kernel.sched_rr_timeslice_ms by hand"]
        messages = []
        with _signals_blocked():
            for name, value in data.get("sysctl", {}).items():
                now = read_sysctl(name)
                if now != str(value):
                    write_sysctl(name, value)
                messages.append(f"restored {name} to {value} (it was {now}), left changed by an "
                                f"interrupted run (pid {data.get('pid')})")
            journal.unlink(missing_ok=True)
        return messages
    finally:
        os.close(lock_fd)


@contextlib.contextmanager
def changed_sysctls(values: dict, directory: Path | None = None):
    """Set the sysctls in `values` for the duration of the block; journal first, restore always."""
    if not values:
        yield {}
        return
    directory = directory or state_dir()
    directory.mkdir(parents=True, exist_ok=True)
    lock_fd = os.open(directory / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    originals: dict = {}
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        journal = directory / JOURNAL
        originals = {name: read_sysctl(name) for name in values}
        with _signals_blocked():
            _write_journal(journal, originals)
        try:
            with _signals_blocked():
                for name, value in values.items():
                    write_sysctl(name, value)
            yield originals
        finally:
            with _signals_blocked():
                for name, value in originals.items():
                    write_sysctl(name, value)
                journal.unlink(missing_ok=True)
    finally:
        os.close(lock_fd)
