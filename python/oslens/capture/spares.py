"""A pool of empty chunk files kept ready in TRACE/spare/ while a program is recorded.

A traced thread's or process's first chunk takes one of them (crates/recorder/src/spare.rs:
an atomic add on the shared counter TRACE/spare/next, then a rename into raw/) instead of
creating a file: on an ext4 file system without a journal, allocating an inode scans every
inode deleted in its group in the last 30 s, 0.1-1 ms per file on a busy machine, and that
time would otherwise be spent by the traced program (docs/recorder.md, "Start-up"). This thread
spends it instead, ahead of need, on another CPU. A writer that finds no spare creates its file
itself, so the pool changes only when the cost is paid, never what is recorded.

The thread sleeps until a writer takes a spare (inotify's IN_MOVED_FROM on spare/), so a program
that starts no processes is never preempted by it; it polled every 2 ms before, which in the demo
preempted the program's threads 1,102 times in 2.7 s (issue 32).
"""

import mmap
import os
import select
import shutil
import struct
import threading
from pathlib import Path

from oslens.capture import inotify

SPARE_DIR = "spare"
AHEAD = 128  # spares kept ahead of the counter, for a burst of process starts (docs/recorder.md, Start-up)
FIRST = 32  # made before the program starts, so its first processes find them
PERIOD_S = 0.002  # the polling period where inotify cannot be had
IDLE_S = 1.0  # a wake-up even without an event: the pool never depends on an event alone


class SparePool:
    def __init__(self, trace: Path, ahead: int = AHEAD, enabled: bool = True):
        self.enabled = enabled
        self.dir = Path(trace) / SPARE_DIR
        self.ahead = ahead
        self.made = 0
        self.taken_at_stop = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="oslens-spares", daemon=True)
        self._map: mmap.mmap | None = None
        self._watch: int | None = None  # the inotify descriptor watching spare/
        self._wake_r, self._wake_w = -1, -1  # stop() writes a byte here to end the wait
        self.wakes = 0  # times the thread woke and looked (tests: none while nobody takes)

    def start(self) -> "SparePool":
        """Creates the counter and the first spares; on any error the pool stays off (writers
        then create their files themselves). OSLENS_SPARE_FILES=0 turns it off (bench/process_start)."""
        if not self.enabled:
            return self
        try:
            (self.dir / "make").mkdir(parents=True, exist_ok=True)
            with open(self.dir / "next.tmp", "wb") as f:
                f.write(bytes(8))
            fd = os.open(self.dir / "next.tmp", os.O_RDWR)
            try:
                self._map = mmap.mmap(fd, 8)
            finally:
                os.close(fd)
            self._fill(FIRST)
            os.replace(self.dir / "next.tmp", self.dir / "next")  # writers see a pool from here
        except OSError:
            self.remove()
            return self
        self._watch = inotify.watch(self.dir, inotify.IN_MOVED_FROM)  # a writer took a spare
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._thread.start()
        return self

    def taken(self) -> int:
        return struct.unpack_from("<Q", self._map, 0)[0] if self._map else 0

    def _fill(self, upto: int) -> None:
        # numbers a writer took before their spare existed are past: start from the counter
        self.made = max(self.made, self.taken())
        while self.made < upto:
            # made in make/ and then renamed: creating holds its directory's lock for the whole
            # inode allocation, which a writer renaming from spare/ would otherwise wait for
            made = self.dir / "make" / str(self.made)
            os.close(os.open(made, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644))
            os.rename(made, self.dir / str(self.made))
            self.made += 1

    def _loop(self) -> None:
        try:
            while self._wait():
                self.wakes += 1
                self._fill(self.taken() + self.ahead)
        except OSError:
            pass  # a full or failing file system: writers create their own files (and say so)

    def _wait(self) -> bool:
        """Until a spare was taken (or IDLE_S passed); False once stop() was called. A spare that
        runs out makes no event, but every number a writer takes past the pool follows takes of
        spares that did, so the fill after their events catches up with it."""
        if self._watch is None:
            return not self._stop.wait(PERIOD_S)
        ready, _, _ = select.select([self._watch, self._wake_r], [], [], IDLE_S)
        if self._stop.is_set():
            return False
        if self._watch in ready:
            _drain(self._watch)
        return True

    def stop(self) -> None:
        """Stops refilling and removes the spares nobody took."""
        self._stop.set()
        if self._wake_w >= 0:
            os.write(self._wake_w, b"x")
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        for fd in (self._watch, self._wake_r, self._wake_w):
            if fd is not None and fd >= 0:
                os.close(fd)
        self._watch, self._wake_r, self._wake_w = None, -1, -1
        self.taken_at_stop = self.taken()
        self.remove()

    def summary(self) -> dict:
        """For meta.json: spares made, and numbers taken (one per chunk file the program's
        recorder created, whether it found its spare or, the pool being dry, made the file)."""
        return {"made": self.made, "taken": self.taken_at_stop} if self.enabled else {"off": True}

    def remove(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
        shutil.rmtree(self.dir, ignore_errors=True)


def _drain(fd: int) -> None:
    """Reads every pending event: one fill answers them all."""
    try:
        while os.read(fd, 65536):
            pass
    except BlockingIOError:
        pass
