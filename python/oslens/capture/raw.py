"""Reading the raw chunks of a trace directory (through the Rust reader in oslens._native) and
turning raw clock values into CLOCK_MONOTONIC nanoseconds. This is the only module that reads
raw files; the store imports from here, and everything after the store reads tables."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from oslens import _native
from oslens.errors import OslensError

# A record's layout (crates/format/src/record.rs, through the extension): ts, id, cpu, kind, check, a, b.
RECORD_DTYPE = np.dtype({"names": [f[0] for f in _native.RECORD_FIELDS], "offsets": [f[1] for f in _native.RECORD_FIELDS],
                         "formats": [f[2] for f in _native.RECORD_FIELDS], "itemsize": _native.RECORD_SIZE})
CLOCK_TSC = _native.CLOCK_TSC
CLOCK_MONOTONIC_NS = _native.CLOCK_MONOTONIC_NS
SOURCE_APP_THREAD = _native.SOURCE_APP_THREAD
SOURCE_KERNEL_CPU = _native.SOURCE_KERNEL_CPU

# Record kinds and name classes, from crates/format through the extension.
KINDS = _native.KINDS
NAME, CONT, EVENT, REGION_BEGIN, REGION_END, COUNTER, TIMER_START, TIMER_STOP = (
    KINDS[k] for k in ("name", "cont", "event", "region_begin", "region_end", "counter", "timer_start", "timer_stop"))
CONTROL, PAUSE, CLOCK_PAIR, ADAPT = (KINDS[k] for k in ("control", "pause", "clock_pair", "adapt"))
FUNC_ENTRY, FUNC_EXIT = KINDS["func_entry"], KINDS["func_exit"]
PROCESS_EXEC = KINDS["process_exec"]
# The recorder's cost fields in a chunk header.
RING_SELF_COPIES, HELPER_CPU_NS, HELPER_COPIES = (
    _native.HEADER_OFFSETS[k] for k in ("ring_self_copies", "helper_cpu_ns", "helper_copies"))
NAME_CLASSES = dict(_native.NAME_CLASSES)
CLASS_ID = {name: cid for cid, name in NAME_CLASSES.items()}


@dataclass
class ChunkData:
    path: Path
    header: dict | None
    records: np.ndarray
    names: list
    payloads: dict
    damage: list = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.header["pid"] if self.header else _ids_from_name(self.path)[0]

    @property
    def tid(self) -> int:
        return self.header["tid"] if self.header else _ids_from_name(self.path)[1]


def _ids_from_name(path: Path) -> tuple[int, int]:
    """app-<pid>-<tid>-<seq>.osl / names-<pid>-<seq>.osl: who wrote a chunk whose header is gone."""
    parts = path.stem.split("-")
    try:
        if parts[0] == "app":
            return int(parts[1]), int(parts[2])
        if parts[0] == "names":
            return int(parts[1]), 0
    except (IndexError, ValueError):
        pass
    return 0, 0


def is_trace_dir(path: Path) -> bool:
    return path.is_dir() and ((path / "raw").is_dir() or (path / "meta.json").is_file())


# What `oslens record` and `oslens import` put in a trace directory, besides the chunks.
TRACE_ENTRIES = {"raw", "spare", "meta.json", "meta.json.tmp", "tables", "analysis", "report.html"}


def is_replaceable_trace(path: Path) -> bool:
    """Whether `oslens record --force` may delete `path`: an oslens trace, that is a raw/
    folder beside a meta.json naming an oslens version or, for a recording killed before its
    meta.json, a raw/ folder of chunk files (and the JSON notes oslens puts beside them) with
    nothing else in the directory that oslens does not write."""
    try:
        entries = list(path.iterdir())
        raw_files = list((path / "raw").iterdir())
    except OSError:
        return False
    try:
        meta = json.loads((path / "meta.json").read_text())
        if isinstance(meta, dict) and "oslens_version" in meta:
            return True
    except (OSError, ValueError):
        pass
    return (any(f.suffix == ".osl" for f in raw_files) and all(f.suffix in (".osl", ".json") for f in raw_files)
            and all(e.name in TRACE_ENTRIES or e.name.startswith((".tables.", ".app_events.")) for e in entries))


def require_trace_dir(path: str | Path) -> Path:
    p = Path(path)
    if not p.exists():
        raise OslensError(f"{p}: no such trace directory; record one with 'oslens record -o {p} -- CMD'", 2)
    if not is_trace_dir(p):
        raise OslensError(f"{p} is not an oslens trace (no raw/ folder or meta.json inside)", 2)
    return p


def read_chunk(path: Path) -> ChunkData:
    """A chunk with its records mapped from the file where they need no decoding (no copy: the
    end of `oslens record` reads every chunk, one the size of the cgroup's memory included)."""
    raw = _native.read_chunk_records(str(path))
    records = np.frombuffer(raw["records"], dtype=RECORD_DTYPE)
    return ChunkData(
        path=path,
        header=raw["header"],
        records=records,
        names=raw["names"],
        payloads=dict(raw["payloads"]),
        damage=[{"file": path.name, "reason": r, "offset": o, "records_lost": n} for r, o, n in raw["damage"]],
    )


def chunk_paths(trace: Path) -> list[Path]:
    return sorted((trace / "raw").glob("*.osl"))


def recorder_cost(path: Path) -> dict:
    """What the recorder itself spent, from a chunk's header: staging slots its writer copied out
    itself and, in a names chunk (at exit), the process's helper thread's CPU ns and the slots it
    copied. Zeros when absent (a killed process writes no helper figures)."""
    try:
        with open(path, "rb") as f:
            head = f.read(_native.HEADER_SIZE)
    except OSError:
        head = b""
    field = lambda off: int.from_bytes(head[off:off + 8], "little") if len(head) >= off + 8 else 0
    return {"ring_self_copies": field(RING_SELF_COPIES), "helper_cpu_ns": field(HELPER_CPU_NS),
            "helper_copies": field(HELPER_COPIES)}


def read_chunks(trace: Path) -> list[ChunkData]:
    return [read_chunk(p) for p in chunk_paths(trace)]


def read_meta(trace: Path) -> dict:
    try:
        return json.loads((trace / "meta.json").read_text())
    except FileNotFoundError:
        return {}
    except json.JSONDecodeError as err:
        raise OslensError(f"{trace / 'meta.json'} is damaged ({err}); the raw chunks can still be read", 3)


def _fit_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares slope and intercept in closed form (np.polyfit would go through BLAS,
    whose worker threads then spin through the rest of an import)."""
    dx, dy = x - x.mean(), y - y.mean()
    slope = float((dx * dy).sum() / (dx * dx).sum())
    return slope, float(y.mean() - slope * x.mean())


class ClockConverter:
    """Maps raw TSC values to CLOCK_MONOTONIC ns by a least-squares line through every
    calibration pair in the trace (chunk headers, CLOCK_PAIR records, and the pairs
    `oslens record` took before and after the program). All TSC chunks of a machine share it:
    an invariant TSC is synchronised across CPUs."""

    def __init__(self, pairs: list[tuple[int, int]]):
        pts = np.array(sorted({(r, n) for r, n in pairs if r and n}), dtype=np.float64)
        if len(pts) >= 2 and np.ptp(pts[:, 0]) > 0:
            r0, n0 = pts[0]
            slope, intercept = _fit_line(pts[:, 0] - r0, pts[:, 1] - n0)
            self.r0, self.n0, self.slope, self.intercept = r0, n0, slope, intercept
        elif len(pts) == 1:
            # One pair: assume the nominal rate recorded by `oslens record`, or 1 tick per ns.
            self.r0, self.n0, self.slope, self.intercept = pts[0][0], pts[0][1], 1.0, 0.0
        else:
            self.r0 = self.n0 = self.intercept = 0.0
            self.slope = 1.0
        self.pair_count = len(pts)

    def to_ns(self, raw: np.ndarray) -> np.ndarray:
        raw = np.asarray(raw, dtype=np.uint64)
        delta = raw.astype(np.int64) - np.int64(self.r0)
        return (np.int64(self.n0) + np.rint(delta * self.slope + self.intercept).astype(np.int64)).astype(np.int64)

    def ticks_to_ns(self, ticks: np.ndarray) -> np.ndarray:
        return np.rint(np.asarray(ticks, dtype=np.float64) * self.slope).astype(np.int64)


def clock_for(chunks: list[ChunkData], meta: dict) -> ClockConverter:
    pairs = [tuple(p) for p in meta.get("clock_pairs", [])]
    for c in chunks:
        if c.header and c.header["clock"] == CLOCK_TSC:
            pairs.extend(tuple(p) for p in c.header["calib"])
        if c.header is None or c.header["clock"] == CLOCK_TSC:
            cp = c.records[c.records["kind"] == CLOCK_PAIR]
            pairs.extend(zip(cp["ts"].tolist(), cp["a"].tolist()))
    return ClockConverter(pairs)


def chunk_clock(chunk: ChunkData) -> int:
    """The clock a chunk's timestamps count; a headless chunk of an app thread is assumed TSC
    when the trace's other app chunks are (the importer passes that in), else monotonic."""
    return chunk.header["clock"] if chunk.header else CLOCK_MONOTONIC_NS


def name_table(chunks: list[ChunkData]) -> dict[int, dict[tuple[int, int], str]]:
    """{pid: {(class, id): name}}; a later NAME for the same id wins (a renamed thread). A
    fork()ed child inherits its parent's names for ids it never named itself."""
    per_pid: dict[int, dict[tuple[int, int], str]] = {}
    parents: dict[int, int] = {}
    for c in chunks:
        table = per_pid.setdefault(c.pid, {})
        for ident, cls, _manager, name in c.names:
            table[(cls, ident)] = name
        if c.header and c.header.get("ppid"):
            parents.setdefault(c.pid, c.header["ppid"])
    resolved = {}
    for pid, table in per_pid.items():
        chain, p = [], parents.get(pid)
        while p and p in per_pid and p not in chain and p != pid:
            chain.append(p)
            p = parents.get(p)
        merged = {}
        # farthest ancestor first, so nearer processes' names override theirs
        for ancestor in reversed(chain):
            merged.update(per_pid[ancestor])
        merged.update(table)
        resolved[pid] = merged
    return resolved
