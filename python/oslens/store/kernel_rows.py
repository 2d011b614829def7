"""The kernel tables that have one row per record (switches, wakeups, faults, samples, counters,
migrations): a function from a kind's records, in time order, to the table's rows. The import
calls them a batch at a time on the records DuckDB orders (kernel_tables); the oracle on all of
them at once (kernel_tables_oracle).

`r` is a raw record array (oslens.capture.raw.RECORD_DTYPE) or a dict of its columns ts, cpu,
id, a and b; `pid_of` a kernel_tasks.PidMap, `comms` a kernel_tasks.Comms.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from oslens.store.kernel_fields import COUNTER_NAMES, FAULT_IP_BITS, hi32, i32, i64, state_letters, strings, table_of


def switch_rows(s, pid_of, comms) -> pa.Table:
    ts, cpu = i64(s["ts"]), i64(s["cpu"])
    prev, nxt = i64(s["id"]), i32(s["a"])
    prev_pid = hi32(s["a"])
    unknown = prev_pid <= 0
    prev_pid[unknown] = pid_of(prev[unknown])
    state = i32(s["b"])
    return table_of({
        "ts": ts, "cpu": cpu, "prev_pid": prev_pid, "prev_tid": prev,
        "prev_comm": pa.array(comms.at(prev, ts), type=pa.string()),
        "prev_state": strings(state, state_letters),
        "next_pid": pid_of(nxt), "next_tid": nxt,
        "next_comm": pa.array(comms.at(nxt, ts), type=pa.string()),
        "prev_prio": hi32(s["b"]).astype(np.int32).astype(np.int64),
    })


def wakeup_rows(w, pid_of) -> pa.Table:
    tid = i32(w["a"])
    return table_of({
        "ts": i64(w["ts"]), "cpu": i64(w["cpu"]), "tid": tid, "target_cpu": i32(w["b"]),
        "waker_tid": i64(w["id"]), "pid": pid_of(tid), "waker_pid": hi32(w["a"]),
    })


def fault_rows(f, pid_of) -> pa.Table:
    tid = i64(f["id"])
    b = f["b"].astype(np.uint64)
    return table_of({
        "ts": i64(f["ts"]), "pid": pid_of(tid), "tid": tid, "address": pa.array(f["a"].astype(np.uint64)),
        "ip": pa.array(b & np.uint64((1 << FAULT_IP_BITS) - 1)), "error_code": (b >> np.uint64(FAULT_IP_BITS)).astype(np.int64),
        "cpu": i64(f["cpu"]),
    })


def sample_rows(s) -> pa.Table:
    return table_of({
        "ts": i64(s["ts"]), "pid": i32(s["b"]), "tid": i64(s["id"]), "cpu": i64(s["cpu"]),
        "ip": pa.array(s["a"].astype(np.uint64)), "in_kernel": (hi32(s["b"]) & 1).astype(bool),
    })


def counter_rows(c) -> pa.Table:
    return table_of({
        "ts": i64(c["ts"]), "name": strings(i64(c["id"]), lambda i: COUNTER_NAMES.get(i, str(i))),
        "value": i64(c["a"]), "time_enabled_ns": i64(c["b"]),
    })


def migration_rows(m) -> pa.Table:
    return table_of({"ts": i64(m["ts"]), "tid": i64(m["id"]), "orig_cpu": i32(m["a"]), "dest_cpu": hi32(m["a"])})
