"""Waking the dormant instruments of a running process (`oslens record -p`): a program built with
oslens.h and started outside `oslens record` records nothing; the attach writes the trace's path
(and, with `--flight`, the rotate settings) into the library's `osl__attach_request` and sets
its activation word `osl__inactive` to UNINIT through /proc/PID/mem, so the next instrument call asks the library, which starts recording into
the trace; the detach sets NOT_TRACING again (docs/recorder.md, "Dormant instruments"). While
attached this process holds a shared flock on `<trace>/.attach-lock`, which the kernel drops if
oslens is killed: the library's helper then puts the instruments back to sleep itself
(crates/recorder/src/session.rs, which names the file)."""

from __future__ import annotations

import fcntl
import os
import struct
import subprocess
from pathlib import Path

# the activation word's bits (crates/recorder/src/lib.rs)
UNINIT, NOT_TRACING = 1, 2
SYMBOLS = ("osl__inactive", "osl__attach_request")
LOCK_FILE = ".attach-lock"
REQUEST_BYTES = 4096  # the size of osl__attach_request (crates/recorder/src/lib.rs)
# the recorder's settings a request may carry (crates/recorder/src/config.rs ATTACH_SETTINGS):
# `-p --flight` wakes the instruments in the rotate mode with the flight chunk size
ATTACH_SETTINGS = ("OSLENS_ON_FULL", "OSLENS_BUFFER_MB")
# {pid: (descriptor holding a shared lock on its trace's LOCK_FILE, the file)}, while attached
_held: dict[int, tuple[int, Path]] = {}


def _objects(pid: int) -> dict[str, int]:
    """{path: load base} of the files mapped into `pid` (the lowest address of each)."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/"):
            start = int(parts[0].split("-")[0], 16)
            out[parts[5]] = min(out.get(parts[5], start), start)
    return out


def _symbols(path: str) -> dict[str, int]:
    """The two symbols' values where `path` defines them: its dynamic symbols, else (a static
    program) its symbol table."""
    found: dict[str, int] = {}
    for flags in (["-D"], []):
        r = subprocess.run(["nm", *flags, "--defined-only", path], capture_output=True, text=True)
        for line in r.stdout.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[2] in SYMBOLS:
                found.setdefault(parts[2], int(parts[0], 16))
    return found


def find(pid: int) -> dict[str, int] | None:
    """The addresses of the two symbols in `pid`, or None when it did not load oslens's recorder.
    The program's own definition comes first: a program that reads `osl__inactive` inline holds
    the variable itself (a copy relocation), and the library then uses that copy."""
    try:
        objects = _objects(pid)
    except OSError:
        return None
    exe = _exe(pid)
    # then liboslens, then a Python program's extension (its own copy of the recorder is the one
    # it uses when no liboslens is loaded: crates/native/src/recorder_api.rs)
    rest = [p for p in objects if p != exe]
    order = ([p for p in objects if p == exe] + [p for p in rest if "liboslens" in Path(p).name]
             + [p for p in rest if Path(p).name.startswith("_native.") and Path(p).parent.name == "oslens"])
    where: dict[str, int] = {}
    for path in order:
        base = objects[path]
        for name, value in _symbols(path).items():
            # a position-independent object's values are offsets from its load base
            where.setdefault(name, base + value if value < base else value)
    return where if len(where) == len(SYMBOLS) else None


def _exe(pid: int) -> str:
    try:
        return str(Path(f"/proc/{pid}/exe").resolve())
    except OSError:
        return ""


def _word(mem, addr: int) -> int:
    mem.seek(addr)
    return struct.unpack("<I", mem.read(4))[0]


def request(trace: Path, settings: dict[str, str] | None = None) -> bytes:
    """The bytes of an attach request: the trace's path and each setting, each ended by a NUL,
    the whole by a second NUL (crates/recorder/src/session.rs `asked`)."""
    parts = [str(Path(trace).resolve())] + [f"{k}={v}" for k, v in (settings or {}).items() if k in ATTACH_SETTINGS]
    return b"".join(p.encode() + b"\0" for p in parts) + b"\0"


def wake(pid: int, trace: Path, settings: dict[str, str] | None = None) -> str | None:
    """Asks `pid`'s instruments to record into `trace` with `settings` (environment variables of
    the recorder among ATTACH_SETTINGS); None when done, else why not."""
    where = find(pid)
    if where is None:
        return "it did not load oslens's recorder"
    asked = request(trace, settings)
    if len(asked) > REQUEST_BYTES:
        return "the trace's path is too long"
    try:
        with open(f"/proc/{pid}/mem", "r+b", buffering=0) as mem:
            if not _word(mem, where["osl__inactive"]) & (NOT_TRACING | UNINIT):  # UNINIT: a request a killed attach left
                return "it records into a trace of its own already"
            _hold(pid, Path(trace).resolve())
            mem.seek(where["osl__attach_request"])
            mem.write(asked)
            mem.seek(where["osl__inactive"])
            mem.write(struct.pack("<I", UNINIT))
    except OSError as err:
        _release(pid)
        return f"its memory cannot be written ({err.strerror or err}: ptrace attach access is needed)"
    return None


def sleep(pid: int) -> None:
    """Sends `pid`'s instruments back to dormancy (the detach)."""
    where = find(pid)
    if where is None:
        _release(pid)
        return
    try:
        with open(f"/proc/{pid}/mem", "r+b", buffering=0) as mem:
            mem.seek(where["osl__inactive"])
            mem.write(struct.pack("<I", NOT_TRACING))
    except OSError:
        pass  # it exited
    _release(pid)


def _hold(pid: int, trace: Path) -> None:
    """Holds the lock the woken process's helper checks, before the word wakes it."""
    _release(pid)
    path = trace / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    fcntl.flock(fd, fcntl.LOCK_SH)
    _held[pid] = (fd, path)


def _release(pid: int) -> None:
    """Lets go of `pid`'s lock; the file goes with the trace's last one (a process that opened
    it keeps its lock on it)."""
    fd, path = _held.pop(pid, (None, None))
    if fd is not None:
        os.close(fd)
        if all(p != path for _, p in _held.values()):
            path.unlink(missing_ok=True)
