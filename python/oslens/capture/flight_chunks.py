"""The flight recorder's work on single chunk files: which stream a chunk belongs to, whether its
writer closed it, what an overwritten chunk held (records and time range), and a copy of a chunk
still being written, cut at its committed count, as a plain closed chunk. Header offsets and the
staging ring's layout come from crates/format through the extension (HEADER_OFFSETS)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from oslens import _native
from oslens.capture import raw

OFF = _native.HEADER_OFFSETS
HEADER = _native.HEADER_SIZE
RECORD = _native.RECORD_SIZE
STAGE = _native.STAGE_STATES
_NAME = re.compile(r"^(?P<stream>(?:app-\d+-\d+)|(?:kernel-cpu\d+)|(?:names-\d+))-(?P<seq>\d+)\.osl$")


def stream_of(name: str) -> tuple[str, int] | None:
    """(stream, sequence number) of a chunk file name; None for files of no stream."""
    m = _NAME.match(name)
    return (m["stream"], int(m["seq"])) if m else None


def _u32(head: bytes, at: int) -> int:
    return int.from_bytes(head[at:at + 4], "little")


def _u64(head: bytes, at: int) -> int:
    return int.from_bytes(head[at:at + 8], "little")


def read_header(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER)
    except OSError:
        return None
    return head if len(head) == HEADER else None


def is_closed(head: bytes | None) -> bool:
    return head is not None and _u32(head, OFF["closed"]) == 1


@dataclass
class Held:
    """What one chunk held: its record count and time range in CLOCK_MONOTONIC ns."""
    stream: str
    seq: int
    records: int
    first_ns: int | None
    last_ns: int | None

    def as_dict(self) -> dict:
        return {"stream": self.stream, "seq": self.seq, "records": self.records, "first_ns": self.first_ns, "last_ns": self.last_ns}


@dataclass(frozen=True)
class Scan:
    """A chunk's records read once: counts and raw time range (the clock's own units) with
    what converts them; a closed chunk never changes, so its scan is kept (HeldCache)."""
    records: int
    lo: int | None
    hi: int | None
    tsc_pairs: tuple = ()  # the chunk's own calibration pairs when its clock is the TSC, else ()


def scan(path: Path) -> Scan | None:
    """Reads a chunk's records in place (mapped; no copy of a field): a 16 MiB chunk in a few
    ms. Records are its committed slots less continuation slots. None: unreadable."""
    head = read_header(path)
    if head is None:
        return None
    slots = min(_u64(head, OFF["committed"]), _u64(head, OFF["capacity"]), max(0, (path.stat().st_size - HEADER) // RECORD))
    tsc = ()
    if _u32(head, OFF["clock"]) == raw.CLOCK_TSC:
        tsc = tuple((_u64(head, OFF[f"calib{i}_tsc"]), _u64(head, OFF[f"calib{i}_ns"])) for i in (0, 1))
    if not slots:
        return Scan(0, None, None, tsc)
    recs = np.memmap(path, dtype=raw.RECORD_DTYPE, mode="r", offset=HEADER, shape=(slots,))
    kinds = recs["kind"]
    cont = kinds == raw.CONT
    timed = ~(cont | (kinds == raw.NAME))
    records = int(slots - np.count_nonzero(cont))
    if not timed.any():
        return Scan(records, None, None, tsc)
    ts = recs["ts"]
    lo, hi = int(ts.min(where=timed, initial=np.iinfo(ts.dtype).max)), int(ts.max(where=timed, initial=0))
    del recs, kinds, ts
    return Scan(records, lo, hi, tsc)


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """A closed chunk's file as it stays: a hard link shares it; a new file on a reused inode
    has another size or modification time (a link changes only ctime)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class HeldCache:
    """Scans of closed chunks by file (`_identity`): the flight loop scans each closed chunk
    once (while idle), and a snapshot's hard link to it, or the ring's deletion of it, reuses that."""

    def __init__(self):
        self._by_inode: dict[tuple[int, int, int, int], Scan] = {}

    def scan(self, path: Path, closed: bool) -> Scan | None:
        try:
            st = path.stat()
        except OSError:
            return None
        key = _identity(st)
        got = self._by_inode.get(key)
        if got is None:
            got = scan(path)
            if closed and got is not None:
                self._by_inode[key] = got
        return got

    def keep_only(self, paths: list[Path]) -> None:
        """Forgets chunks no longer in raw/ (deleted by the ring; a snapshot's link keeps the inode but is never trimmed)."""
        live = set()
        for p in paths:
            try:
                live.add(_identity(p.stat()))
            except OSError:
                pass
        self._by_inode = {k: v for k, v in self._by_inode.items() if k in live}


def held(path: Path, pairs: list[tuple[int, int]], cache: HeldCache | None = None, closed: bool = False) -> Held:
    """What a chunk held, in CLOCK_MONOTONIC ns (`scan`, through `cache` when given; `closed`:
    the chunk will not change, so its scan may be kept); `pairs` are calibration pairs for TSC
    chunks (the recording's), besides the chunk's own."""
    stream, seq = stream_of(path.name) or (path.stem, 0)
    sc = cache.scan(path, closed) if cache is not None else scan(path)
    if sc is None:
        return Held(stream, seq, 0, None, None)
    lo, hi = sc.lo, sc.hi
    if lo is not None and sc.tsc_pairs:
        conv = raw.ClockConverter([tuple(p) for p in pairs] + list(sc.tsc_pairs))
        lo, hi = (int(v) for v in conv.to_ns([lo, hi]))
    return Held(stream, seq, sc.records, lo, hi)


def _pread(fd: int, n: int, at: int) -> bytes:
    out = b""
    while len(out) < n:
        got = os.pread(fd, n - len(out), at + len(out))
        if not got:
            break
        out += got
    return out


def copy_cut(src: Path, dst: Path, from_slot: int = 0) -> int | None:
    """Writes `dst`, a closed chunk holding `src`'s committed records from `from_slot` on, as the
    reader sees them (staging-ring slots laid over the record slots). The record slots are copied
    in the kernel (copy_file_range); a ring slot's bytes are laid over them only when its
    descriptor still names the same start after they were read: otherwise the writer reused the
    slot, after copying it out, and those record slots are read again. Returns the committed
    count copied up to (None when `src` is gone or unreadable)."""
    try:
        fd = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    tmp = dst.with_name(dst.name + ".part")
    try:
        head = _pread(fd, HEADER, 0)
        if len(head) < HEADER:
            return None
        committed = min(_u64(head, OFF["committed"]), _u64(head, OFF["capacity"]))
        capacity = _u64(head, OFF["capacity"])
        from_slot = min(from_slot, committed)
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.pwrite(out, _closed_header(head, committed - from_slot), 0)
            _copy_range(fd, out, HEADER + from_slot * RECORD, HEADER, (committed - from_slot) * RECORD)
            for start, n, ring_at in _ring_slots(head, committed, capacity):
                data = _pread(fd, n * RECORD, ring_at)
                if len(data) < n * RECORD or _descriptor_start(_pread(fd, HEADER, 0), ring_at, head) != start:
                    data = _pread(fd, n * RECORD, HEADER + start * RECORD)  # copied out meanwhile
                skip = max(0, from_slot - start)
                if skip < n:
                    os.pwrite(out, data[skip * RECORD:], HEADER + (start + skip - from_slot) * RECORD)
        finally:
            os.close(out)
    finally:
        os.close(fd)
    tmp.replace(dst)
    return committed


def _closed_header(head: bytes, slots: int) -> bytes:
    """The header of a plain closed chunk of `slots` records: no staging ring."""
    out = bytearray(head)
    out[OFF["capacity"]:OFF["capacity"] + 8] = slots.to_bytes(8, "little")
    out[OFF["committed"]:OFF["committed"] + 8] = slots.to_bytes(8, "little")
    out[OFF["closed"]:OFF["closed"] + 4] = (1).to_bytes(4, "little")
    out[OFF["stage_slots"]:OFF["stage_slots"] + 8] = bytes(8)
    out[OFF["stage_descriptors"]:HEADER] = bytes(HEADER - OFF["stage_descriptors"])
    return bytes(out)


def _copy_range(src: int, dst: int, src_at: int, dst_at: int, n: int) -> None:
    """n bytes from src_at to dst_at, in the kernel where it can (zeros where the source ends)."""
    done = 0
    while done < n:
        try:
            got = os.copy_file_range(src, dst, n - done, src_at + done, dst_at + done)
        except OSError:
            got = len(data := _pread(src, n - done, src_at + done)) and os.pwrite(dst, data, dst_at + done)
        if not got:
            break
        done += got
    if done < n:
        os.ftruncate(dst, dst_at + n)  # slots past the source's end read as zeros: the reader says so


def _ring_slots(head: bytes, committed: int, capacity: int):
    """(first position, count, file offset) of each ring slot holding committed records."""
    count, per = _u32(head, OFF["stage_slots"]), _u32(head, OFF["stage_slot_records"])
    if not count or not per:
        return
    base, size = OFF["stage_descriptors"], OFF["stage_descriptor_size"]
    for j in range(count):
        d = base + j * size
        state, start, length = _u32(head, d), _u64(head, d + 8), _u64(head, d + 16)
        if state == STAGE["free"]:
            continue
        end = min(committed if state == STAGE["writing"] else start + length, committed)
        if end > start:
            yield start, end - start, HEADER + capacity * RECORD + j * per * RECORD


def _descriptor_start(head: bytes, ring_at: int, first_head: bytes) -> int | None:
    """The start the slot at file offset `ring_at` names now (None: unreadable)."""
    if len(head) < HEADER:
        return None
    capacity, per = _u64(first_head, OFF["capacity"]), _u32(first_head, OFF["stage_slot_records"])
    j = (ring_at - HEADER - capacity * RECORD) // (per * RECORD)
    d = OFF["stage_descriptors"] + j * OFF["stage_descriptor_size"]
    return _u64(head, d + 8)  # a reused slot names a later start, whatever its state
