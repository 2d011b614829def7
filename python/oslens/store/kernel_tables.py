"""Kernel tables from the kernel collector's per-CPU raw chunks. Called by the store's importer:
`write_kernel_tables(chunks, meta, folder) -> {table name: WrittenTable or pyarrow.Table}`.

One native pass builds them (oslens._native.kernel_scan then kernel_pass; crates/native/src/
kernel_rows): the scan reads each chunk once for what grows with tasks, not records (each
thread's pid, exit times, the fork/exec/exit records, the codes of the string columns); this
module turns that into the dictionaries, the comm history and the `tasks` table (kernel_tasks);
then the pass merges the chunks by time and writes every big table to Parquet a page at a time,
so the import's memory does not grow with the kernel records (docs/trace-schema.md, "Import
memory"). oslens_testing.store.kernel_tables_oracle builds the same tables with numpy over every
record, for the tests.

Times are CLOCK_MONOTONIC ns (the collector asks perf for that clock), so they share the
application's time base once its TSC values are converted at import. Rows that tie on time keep
the order of their records, as a stable sort does.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa

from oslens import _native
from oslens.capture import raw
from oslens.store import held, native_parquet, parquet_options, schema
from oslens.store.app_tables import WrittenTable, declared_columns
from oslens.store.kernel_fields import (
    COUNTER_NAMES, SOFTIRQ_NAMES, dev_name, rw_letters, state_letters, syscall_name)
from oslens.store.kernel_tasks import SMALL_KINDS, Comms, PidMap, tasks, whole_tasks

# the prefix of the tables written in the trace folder while the pass runs, followed by the
# importing pid (importer.remove_stale_files)
SPILL_PREFIX = ".kernel-tables-"

# the tables the pass writes, with their string columns' dictionaries (kernel_pass's order)
PASS_TABLES = ("switches", "wakeups", "faults", "samples", "kernel_counters", "migrations", "syscalls", "block_io",
               "irqs", "cpu_slices")


def _plain(texts: list[str]) -> bytes:
    return native_parquet.plain_dictionary(pa.array(texts, type=pa.string()))[2]


def _dict(codes: list[int], label) -> tuple[list[int], int, bytes]:
    codes = sorted(int(c) for c in codes)
    return codes, len(codes), _plain([label(c) for c in codes])


def _irq_name(comms: Comms, code: int) -> str:
    num, soft = code >> 1, code & 1
    if not soft:
        return comms.irq.get(num, str(num))
    return SOFTIRQ_NAMES[num] if 0 <= num < len(SOFTIRQ_NAMES) else str(num)


def _dictionaries(codes: list, comms: Comms):
    """The pass's dictionaries (kernel_rows::context's order) and the comm history as indices."""
    states, nrs, counters, rws, devs, hard, soft = codes
    texts = ["", "<idle>"] + sorted(set(comms.text[:len(comms.ts)].tolist()))
    index = {t: i for i, t in enumerate(texts)}
    history = (comms.tid.tolist(), comms.ts.tolist(), [index[t] for t in comms.text[:len(comms.ts)].tolist()], 1, 0)
    irqs = sorted({2 * n for n in hard} | {2 * n + 1 for n in soft})
    dicts = [
        (list(range(len(texts))), len(texts), _plain(texts)),
        _dict(states, state_letters),
        _dict(nrs, syscall_name),
        _dict(counters, lambda i: COUNTER_NAMES.get(i, str(i))),
        _dict(rws, rw_letters),
        _dict(devs, dev_name),
        _dict(irqs, lambda c: _irq_name(comms, c)),
        _dict([0, 1], lambda g: ("hard", "soft")[g]),
    ]
    return dicts, history


def _encodings(tables) -> dict:
    """Per table, each column's (delta-encoded, with statistics), as parquet_options decides."""
    out = {}
    for t in tables:
        cols = schema.columns(t, extensions=False)
        out[t] = [(c in parquet_options.DELTA_COLUMNS and pa.types.is_integer(typ),
                   pa.types.is_integer(typ) and parquet_options.prunes(c)) for c, typ in cols.items()]
    return out


def _names_and_losses(chunks: list, s: dict):
    """(NAME rows (ts, id, class, text), lost rows (cpu, lost in the header, lost in records)):
    a name's time is its NAME record's where the records and names align, else 0."""
    names, lost_rows = [], []
    for c, name_ts, lost, first_cpu in zip(chunks, s["name_ts"], s["lost"], s["first_cpu"]):
        dropped = int(c.header["dropped_events"]) if c.header else 0
        if len(c.records) == 0:  # a chunk without records names nothing
            if c.header:
                lost_rows.append((c.header["cpu"], dropped, 0))
            continue
        aligned = len(name_ts) == len(c.names)
        names.extend((int(name_ts[j]) if aligned else 0, int(i), int(cls), n) for j, (i, cls, _m, n) in enumerate(c.names))
        lost_rows.append((c.header["cpu"] if c.header else first_cpu, dropped, int(lost)))
    return names, lost_rows


def kernel_lost(lost_rows: list) -> pa.Table:
    """The `kernel_lost` table: per CPU, the larger of the two counts of each chunk, summed."""
    per_cpu: dict[int, int] = {}
    for cpu, header, records in lost_rows:
        per_cpu[cpu] = per_cpu.get(cpu, 0) + max(header, records)
    cpus = sorted(per_cpu)
    return pa.table({
        "source": pa.array(["kernel collector"] * len(cpus), type=pa.string()),
        "where": pa.array([f"cpu {c}" for c in cpus], type=pa.string()),
        "count": pa.array([per_cpu[c] for c in cpus], type=pa.int64()),
        "cpu": pa.array(cpus, type=pa.int64()),
    })


def _small(s: dict) -> dict:
    r = np.frombuffer(s["small"], dtype=raw.RECORD_DTYPE)
    return {k: r[r["kind"] == k] for k in SMALL_KINDS}


def scan_chunk(records) -> dict:
    """One chunk's kernel scan (oslens._native.kernel_scan), best taken while its records are in
    memory from the first read (chunk_reader)."""
    return _native.kernel_scan([held.pass_input(records)])


def combine(scans: list[dict]) -> dict:
    """The chunks' scans as one scan of them all, in the order given: a thread's pid is the one
    named last in (group, time, chunk, record) order, as kernel_scan orders them."""
    out = {"chunks": [], "name_ts": [], "lost": [], "first_cpu": [], "records": 0, "last_seen": 0}
    pids: dict[int, tuple] = {}
    seen: set[int] = set()
    exit_at: dict[int, int] = {}
    codes: list[set] = [set() for _ in range(7)]
    small = []
    for c, s in enumerate(scans):
        for k in ("chunks", "name_ts", "lost", "first_cpu"):
            out[k].extend(s[k])
        out["records"] += s["records"]
        out["last_seen"] = max(out["last_seen"], s["last_seen"])
        for tid, pid, (g, ts, i) in zip(s["pid_tids"], s["pid_pids"], s["pid_keys"]):
            key = (g, ts, c, i & 0xFFFFFFFF)
            if tid not in pids or key >= pids[tid][0]:
                pids[tid] = (key, pid)
        seen.update(s["seen"])
        for tid, ts in zip(s["exit_tids"], s["exit_ts"]):
            exit_at[tid] = max(ts, exit_at.get(tid, ts))
        for mine, theirs in zip(codes, s["codes"]):
            mine.update(theirs)
        small.append(np.frombuffer(s["small"], dtype=raw.RECORD_DTYPE))
    r = np.concatenate(small) if small else np.zeros(0, raw.RECORD_DTYPE)
    out["small"] = r[np.argsort(r["ts"], kind="stable")].tobytes()  # time, then chunk and record
    out["pid_tids"], out["pid_pids"] = list(pids), [p for _k, p in pids.values()]
    out["seen"], out["exit_tids"], out["exit_ts"] = sorted(seen), list(exit_at), list(exit_at.values())
    out["codes"] = [sorted(c) for c in codes]
    return out


def write_kernel_tables(chunks: list, meta: dict, folder: Path, progress=None, scans: dict | None = None) -> dict:
    """The kernel tables of a trace from its kernel chunks (source = SOURCE_KERNEL_CPU): the big
    ones written to Parquet files in `folder` (WrittenTable), `tasks` and `kernel_lost` in memory.
    progress(fraction done) is called now and then while the pass runs; `scans`: {chunk path:
    scan_chunk of its records} taken at the read (the others are scanned here)."""
    meta = meta or {}
    scans = scans or {}
    s = combine([scans.get(c.path) or scan_chunk(c.records) for c in chunks])
    inputs = [held.pass_input(c.records) for c in chunks]
    names, lost_rows = _names_and_losses(chunks, s)
    small = _small(s)
    pid_of, comms = PidMap(np.array(s["pid_tids"], np.int64), np.array(s["pid_pids"], np.int64)), Comms(names)
    dicts, history = _dictionaries(s["codes"], comms)
    whole = whole_tasks(small, meta)
    tag = f"{SPILL_PREFIX}{os.getpid()}-{os.urandom(4).hex()}"
    paths = {t: str(Path(folder) / f".{t}-{tag}.parquet") for t in PASS_TABLES}
    total = max(1, int(s["records"]))
    rows = _native.kernel_pass(
        inputs, s["chunks"], (pid_of.keys.tolist(), pid_of.vals.tolist()), (s["exit_tids"], s["exit_ts"]), history, dicts,
        None if whole is None else sorted(int(t) for t in whole), paths, declared_columns(list(PASS_TABLES), False),
        _encodings(PASS_TABLES), parquet_options.ROW_GROUP, (lambda n: progress(n / total)) if progress else None)
    out: dict = {t: WrittenTable(paths[t], rows[t], group_rows=parquet_options.ROW_GROUP) for t in PASS_TABLES}
    out["tasks"] = tasks(small, np.array(s["seen"], np.int64), int(s["last_seen"]), pid_of, comms, meta)
    out["kernel_lost"] = kernel_lost(lost_rows)
    return out


def build_kernel_tables(chunks: list, meta: dict, folder: Path | None = None) -> dict[str, pa.Table]:
    """write_kernel_tables with every table read back into memory (tests, small traces)."""
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        out = write_kernel_tables(chunks, meta, Path(tmp))
        return {n: (t.read() if isinstance(t, WrittenTable) else t) for n, t in out.items()}
