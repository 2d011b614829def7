"""A finished recording's raw chunks replayed as they grew: copied, each chunk's `committed`
count cut back to the records timed up to an instant and raised as the instant advances (and
`closed` left unset until the end), so a tailing reader (capture/triggers.Watcher) sees the same
prefixes a live recording would have shown it, at instants the test chooses."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from oslens import _native
from oslens.capture import raw

OFFSETS = dict(_native.TAIL_HEADER_OFFSETS)


class Replay:
    """`src` (a trace's raw folder) copied to `dst` with nothing committed but names; `at(t_ns)`
    commits every chunk's records up to CLOCK_MONOTONIC `t_ns`; `finish()` restores them all."""

    def __init__(self, src: Path, dst: Path):
        self.dst = Path(dst)
        self.dst.mkdir(parents=True, exist_ok=True)
        chunks = [raw.read_chunk(p) for p in sorted(Path(src).glob("*.osl"))]
        conv = raw.clock_for(chunks, raw.read_meta(Path(src).parent))
        self.times: dict[Path, np.ndarray] = {}
        self.final: dict[Path, tuple[int, int]] = {}
        for c in chunks:
            out = self.dst / c.path.name
            shutil.copyfile(c.path, out)
            if c.header is None or c.header["source"] == raw.SOURCE_APP_THREAD and c.header["tid"] == 0:
                continue  # names chunks are whole from the start (a name precedes its use)
            self.final[out] = (c.header["committed"], int(c.header["closed"]))
            self.times[out] = self._slot_times(out, c.header, conv)
        self.at(0)

    @staticmethod
    def _slot_times(path: Path, header: dict, conv) -> np.ndarray:
        """Each committed slot's time in ns; a continuation slot takes its record's time."""
        n = header["committed"]
        body = np.fromfile(path, dtype=raw.RECORD_DTYPE, count=n, offset=_native.HEADER_SIZE)
        ts = body["ts"].copy()
        cont = body["kind"] == raw.CONT
        ts[cont] = 0
        ts = np.maximum.accumulate(ts)  # also a record timed a little before its predecessor
        return conv.to_ns(ts) if header["clock"] == raw.CLOCK_TSC else ts.astype(np.int64)

    def _set(self, path: Path, committed: int, closed: int):
        with open(path, "r+b") as f:
            f.seek(OFFSETS["committed"])
            f.write(int(committed).to_bytes(8, "little"))
            f.seek(OFFSETS["closed"])
            f.write(int(closed).to_bytes(4, "little"))

    def at(self, t_ns: int):
        for path, ts in self.times.items():
            self._set(path, int(np.searchsorted(ts, t_ns, side="right")), 0)

    def finish(self):
        for path, (committed, closed) in self.final.items():
            self._set(path, committed, closed)

    def span(self) -> tuple[int, int]:
        """The first and last record times (ns) over every chunk."""
        firsts = [int(t[0]) for t in self.times.values() if len(t)]
        lasts = [int(t[-1]) for t in self.times.values() if len(t)]
        return min(firsts), max(lasts)
