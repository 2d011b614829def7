"""The `attach_*` tables: the state of the processes `oslens record -p` attached to, read at the
attach (capture/attach_state.py writes `raw/attach-<pid>.json`), one table for the processes,
their threads and their open descriptors."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from oslens.store import schema

TABLES = ("attach_processes", "attach_threads", "attach_fds")


def _table(name: str, rows: list[dict]) -> pa.Table:
    columns = schema.own_columns(name)
    return pa.table({c: pa.array([r.get(c) for r in rows], type=t) for c, t in columns.items()},
                    schema=pa.schema([pa.field(c, t) for c, t in columns.items()]))


def _cgroup_text(paths: dict) -> str:
    if "unified" in paths and len(paths) == 1:
        return paths["unified"]
    return ",".join(f"{k}:{v}" for k, v in sorted(paths.items()))


def _process_row(state: dict, detach_ns: int | None) -> dict:
    proc, limits = state["process"], state["process"]["cgroup"]["limits"]
    quota = limits.get("cpu.cfs_quota_us")
    return {
        "ts": state["ts_ns"], "read_ns": state["ts_end_ns"] - state["ts_ns"], "pid": proc["pid"],
        "global_pid": proc.get("global_pid", proc["pid"]), "exe": proc["exe"],
        "command": " ".join(proc["command"]), "threads": len(state["threads"]), "fds": len(state["fds"]),
        "cgroup": _cgroup_text(state["process"]["cgroup"]["paths"]),
        "memory_max": limits.get("memory.max", limits.get("memory.limit_in_bytes")),
        "cpu_max": limits.get("cpu.max", f"{quota} {limits.get('cpu.cfs_period_us')}" if quota else None),
        "pids_max": limits.get("pids.max"), "limits": json.dumps(limits, sort_keys=True), "detach_ns": detach_ns,
    }


def build(trace: Path, meta: dict) -> dict[str, pa.Table]:
    """The three tables from the trace's attach states ({} when it has none)."""
    files = sorted((Path(trace) / "raw").glob("attach-*.json"))
    if not files:
        return {}
    detach_ns = (meta.get("attach") or {}).get("detach_ns")
    procs, threads, fds = [], [], []
    for f in files:
        try:
            state = json.loads(f.read_text())
        except (OSError, ValueError):
            continue  # a recording killed while writing it: the rest of the trace imports
        procs.append(_process_row(state, detach_ns))
        threads += [{"global_tid": t["tid"], **t, "ts": state["ts_ns"]} for t in state["threads"]]  # older traces lack it
        fds += [{**d, "ts": state["ts_ns"]} for d in state["fds"]]
    return {"attach_processes": _table("attach_processes", procs), "attach_threads": _table("attach_threads", threads),
            "attach_fds": _table("attach_fds", fds)}


def empty() -> dict[str, pa.Table]:
    return {name: _table(name, []) for name in TABLES}
