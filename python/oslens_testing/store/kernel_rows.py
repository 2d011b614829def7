"""The kernel tables that have one row per record (switches, wakeups, faults, samples, counters,
migrations): a function from a kind's records, in time order, to the table's rows. The import
calls them a batch at a time on the records DuckDB orders (kernel_tables); the oracle on all of
them at once (kernel_tables_oracle).

`r` is a raw record array (oslens.capture.raw.RECORD_DTYPE) or a dict of its columns ts, cpu,
id, a and b; `pid_of` a kernel_tasks.PidMap, `comms` a kernel_tasks.Comms.
"""

from __future__ import annotations

from functools import partial

import pyarrow as pa

from oslens.store.kernel_fields import COUNTER_NAMES, i64, nullable, state_letters, strings, table_of
from oslens.store.kernel_layout import field_np


def switch_rows(s, pid_of, comms) -> pa.Table:
    ts, cpu = i64(s["ts"]), i64(s["cpu"])
    f = partial(field_np, "sched_switch", r=s)
    prev, nxt, prev_pid = i64(f("prev_tid")), f("next_tid"), f("prev_pid")
    unknown = prev_pid <= 0
    prev_pid[unknown] = pid_of(prev[unknown])
    return table_of({
        "ts": ts, "cpu": cpu, "prev_pid": prev_pid, "prev_tid": prev,
        "prev_comm": pa.array(comms.at(prev, ts), type=pa.string()),
        "prev_state": strings(f("prev_state"), state_letters),
        "next_pid": pid_of(nxt), "next_tid": nxt,
        "next_comm": pa.array(comms.at(nxt, ts), type=pa.string()),
        "prev_prio": f("prev_prio"),
    })


def wakeup_rows(w, pid_of) -> pa.Table:
    """`w` carries `enqueue_ts` too: when the woken task joined a run queue (0: not recorded)."""
    f = partial(field_np, "sched_waking", r=w)
    tid, enqueue = f("tid"), i64(w["enqueue_ts"])
    return table_of({
        "ts": i64(w["ts"]), "cpu": i64(w["cpu"]), "tid": tid, "target_cpu": f("target_cpu"),
        "waker_tid": i64(f("waker_tid")), "pid": pid_of(tid), "waker_pid": f("waker_pid"),
        "enqueue_ts_ns": nullable(enqueue, enqueue > 0),
    })


def fault_rows(r, pid_of) -> pa.Table:
    f = partial(field_np, "page_fault_user", r=r)
    tid = i64(f("tid"))
    return table_of({
        "ts": i64(r["ts"]), "pid": pid_of(tid), "tid": tid, "address": pa.array(f("address")),
        "ip": pa.array(f("ip")), "error_code": i64(f("error_code")), "cpu": i64(r["cpu"]),
    })


def sample_rows(s) -> pa.Table:
    f = partial(field_np, "sample", r=s)
    return table_of({
        "ts": i64(s["ts"]), "pid": f("pid"), "tid": i64(f("tid")), "cpu": i64(s["cpu"]),
        "ip": pa.array(f("ip")), "in_kernel": f("in_kernel").astype(bool),
    })


def counter_rows(c) -> pa.Table:
    f = partial(field_np, "kernel_counter", r=c)
    return table_of({
        "ts": i64(c["ts"]), "name": strings(i64(f("counter")), lambda i: COUNTER_NAMES.get(i, str(i))),
        "value": i64(f("value")), "time_enabled_ns": i64(f("time_enabled_ns")),
    })


def migration_rows(m) -> pa.Table:
    f = partial(field_np, "migrate", r=m)
    return table_of({"ts": i64(m["ts"]), "tid": i64(f("tid")), "orig_cpu": f("orig_cpu"), "dest_cpu": f("dest_cpu")})
