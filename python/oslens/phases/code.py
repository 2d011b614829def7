"""The code vector: where the program's CPU time went in each interval, from its IP samples.

User samples are named through the process's recorded memory maps and the ELF symbols of what
was mapped (oslens.store.symbols); an address in a mapping without a symbol counts as
`[library]`, one outside every mapping as `[user]`. Kernel samples count as `sys:NAME` when the
thread was inside system call NAME, else `[kernel]` (faults, interrupts). Each interval's vector
is its mix of samples times its CPU demand where the trace has scheduling records
(scale_by_demand), else samples per function divided by the typical busy interval's sample
count (the 95th percentile): either way a phase that computes reads ~1, one that waits ~0."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from oslens.analysis import db
from oslens.phases import binning

TOP_FUNCTIONS = 48  # features kept; the rest are summed into [other]


@dataclass
class CodeVector:
    matrix: np.ndarray  # intervals x features, scaled as above
    counts: np.ndarray  # intervals x features, raw samples
    names: list[str]
    samples: int


def _program_samples(con, tids: list[int], lo: int, hi: int):
    tid_list = ",".join(str(int(t)) for t in tids) or "NULL"
    if db.table_exists(con, "syscalls") and db.row_count(con, "syscalls"):
        sql = f"""SELECT s.ts, s.pid, s.ip, s.in_kernel,
                     CASE WHEN s.in_kernel AND y.start_ns IS NOT NULL AND (y.end_ns IS NULL OR s.ts <= y.end_ns)
                          THEN 'sys:' || coalesce(y.name, CAST(y.nr AS VARCHAR)) END AS sysname
                  FROM (SELECT * FROM samples WHERE tid IN ({tid_list}) AND ts >= {int(lo)} AND ts < {int(hi)}) s
                  ASOF LEFT JOIN (SELECT * FROM syscalls WHERE tid IN ({tid_list})) y
                    ON s.tid = y.tid AND s.ts >= y.start_ns
                  ORDER BY s.ts"""
    else:
        sql = f"""SELECT ts, pid, ip, in_kernel, NULL::VARCHAR AS sysname FROM samples
                  WHERE tid IN ({tid_list}) AND ts >= {int(lo)} AND ts < {int(hi)} ORDER BY ts"""
    return con.execute(sql).fetchnumpy()


def _user_names(trace, pids: np.ndarray, ips: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Function names of user samples, each against the map its process had at the time: one
    symbol lookup per distinct (process image, address)."""
    from oslens.store import symbols

    out = np.full(len(ips), "[user]", dtype=object)
    sym = symbols.Symbolizer(trace) if trace else None
    for pid in np.unique(pids):
        images = sym._files.get(int(pid)) if sym else None
        if not images:
            continue
        rows = np.flatnonzero(pids == pid)
        starts = np.array([s for s, _ in images], dtype=np.int64)
        which = np.maximum(np.searchsorted(starts, ts[rows], side="right") - 1, 0)
        for k in np.unique(which):
            sel = rows[which == k]
            image = sym._image(int(pid), int(starts[k]))
            uniq, inverse = np.unique(ips[sel], return_inverse=True)
            names = symbols.demangle([image.resolve_one(int(a)) for a in uniq])
            named = np.array([n or _mapping_name(image, int(a)) for n, a in zip(names, uniq)], dtype=object)
            out[sel] = named[inverse]
    return out


def _mapping_name(image, address: int) -> str:
    """`[basename]` of the file mapped at an address without a symbol, else `[user]`."""
    i = bisect.bisect_right(image.starts, address) - 1
    if i >= 0 and address < image.maps[i].end:
        return f"[{Path(image.maps[i].path).name}]"
    return "[user]"


def has_samples(con) -> bool:
    return db.table_exists(con, "samples") and db.row_count(con, "samples") > 0


def sample_count(con, tids: list[int], lo: int, hi: int) -> int:
    if not has_samples(con):
        return 0
    tid_list = ",".join(str(int(t)) for t in tids) or "NULL"
    return int(con.execute(f"SELECT count(*) FROM samples WHERE tid IN ({tid_list}) AND ts >= ? AND ts < ?",
                           [int(lo), int(hi)]).fetchone()[0])


def code_vector(con, trace, tids: list[int], edges: np.ndarray) -> CodeVector | None:
    """The code vector of each interval, or None when the trace has no IP samples of the program."""
    if not has_samples(con):
        return None
    cols = _program_samples(con, tids, int(edges[0]), int(edges[-1]))
    ts = np.asarray(cols["ts"], dtype=np.int64)
    if len(ts) == 0:
        return None
    in_kernel = np.asarray(cols["in_kernel"], dtype=bool)
    names = np.empty(len(ts), dtype=object)
    sysname = np.asarray(cols["sysname"], dtype=object)
    names[in_kernel] = np.where(np.asarray([s is not None for s in sysname[in_kernel]], dtype=bool),
                                sysname[in_kernel], "[kernel]")
    user = ~in_kernel
    if user.any():
        names[user] = _user_names(trace, np.asarray(cols["pid"], dtype=np.int64)[user],
                                  np.asarray(cols["ip"], dtype=np.uint64)[user], ts[user])
    uniq, inverse, totals = np.unique(names.astype(str), return_inverse=True, return_counts=True)
    order = sorted(range(len(uniq)), key=lambda i: (-totals[i], uniq[i]))
    keep = order[:TOP_FUNCTIONS]
    feature = np.full(len(uniq), len(keep), dtype=np.int64)
    feature[keep] = np.arange(len(keep))
    labels = [str(uniq[i]) for i in keep] + (["[other]"] if len(order) > len(keep) else [])
    counts = np.zeros((len(edges) - 1, len(labels)))
    for j in range(len(labels)):
        counts[:, j] = binning.counts(ts[feature[inverse] == j], edges)
    busy = float(np.percentile(counts.sum(axis=1), 95)) or 1.0
    return CodeVector(counts / busy, counts, labels, int(len(ts)))


def scale_by_demand(cv: CodeVector, cpu_demand: np.ndarray) -> None:
    """With scheduling records, each interval's code vector becomes its sample mix times its CPU
    demand (on-CPU share of the time not spent waiting for a CPU): an interval starved by other load keeps
    its code (the mix carried over from the last interval with samples) instead of reading 0."""
    totals = cv.counts.sum(axis=1)
    mix = np.zeros_like(cv.counts)
    last = None
    for i in range(len(totals)):
        if totals[i] > 0:
            last = cv.counts[i] / totals[i]
        if last is not None:
            mix[i] = last
    first = int(np.argmax(totals > 0)) if (totals > 0).any() else None
    if first is not None:
        mix[:first] = cv.counts[first] / totals[first]
    cv.matrix = mix * np.clip(cpu_demand, 0.0, None)[:, None]
