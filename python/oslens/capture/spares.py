"""A pool of empty chunk files kept ready in TRACE/spare/ while a program is recorded.

A traced thread's or process's first chunk takes one of them (crates/recorder/src/spare.rs:
an atomic add on the shared counter TRACE/spare/next, then a rename into raw/) instead of
creating a file: on an ext4 file system without a journal, allocating an inode scans every
inode deleted in its group in the last 30 s, 0.1-1 ms per file on a busy machine, and that
time would otherwise be spent by the traced program (docs/recorder.md, "Start-up"). This thread
spends it instead, ahead of need, on another CPU. A writer that finds no spare creates its file
itself, so the pool changes only when the cost is paid, never what is recorded.
"""

import mmap
import os
import shutil
import struct
import threading
from pathlib import Path

SPARE_DIR = "spare"
AHEAD = 128  # spares kept ahead of the counter, for a burst of process starts (docs/recorder.md, Start-up)
FIRST = 32  # made before the program starts, so its first processes find them
PERIOD_S = 0.002


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
            while not self._stop.wait(PERIOD_S):
                self._fill(self.taken() + self.ahead)
        except OSError:
            pass  # a full or failing file system: writers create their own files (and say so)

    def stop(self) -> None:
        """Stops refilling and removes the spares nobody took."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
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
