"""The kernel tables whose rows pair two records (a call's entry and exit, a slice's two switches,
an I/O's issue and completion, an interrupt's entry and exit), built from records DuckDB sorts
(out of core) and streams a batch at a time: each batch is seen with its neighbours, the row
before it and the row after it, so that a pair across two batches is still found and the
memory held is two batches, however many records. The rows made go to a staging table, which
kernel_tables sorts into the table's order. kernel_tables_oracle builds the same rows in memory.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pyarrow as pa

from oslens.store.kernel_fields import (BLOCK_COMPLETE, BLOCK_ISSUE, BLOCK_ISSUE_OTHER, FORK_CALLS, IRQ_ENTRY, IRQ_EXIT, SOFTIRQ_ENTRY,
                                        SOFTIRQ_EXIT, STATE_ASLEEP, SWITCH, SYS_ENTER, SYS_EXIT, WAKEUP)
from oslens.store.kernel_layout import field, field_sql, same_layout

# one query reads each group of kinds, so they must hold what it reads in the same bits
assert same_layout("sys_enter", "sys_exit", "tid", "nr", "pid")
assert same_layout("block_rq_issue", "block_rq_complete", "sector", "dev") and same_layout(
    "block_rq_issue", "block_rq_issue_other", "sector", "dev")
assert all(field("irq_entry", "irq")[:3] == field(k, n)[:3] for k, n in (
    ("irq_exit", "irq"), ("softirq_entry", "vec"), ("softirq_exit", "vec")))

BATCH_ROWS = 1 << 18


class Window:
    """A batch of sorted rows (`cur`), the same columns shifted one row back (`prev`, valid where
    `has_prev`) and one row forward (`next`, valid where `has_next`), across batch boundaries."""

    def __init__(self, cur: dict, prev: dict, has_prev: np.ndarray, nxt: dict, has_next: np.ndarray):
        self.cur, self.prev, self.has_prev, self.next, self.has_next = cur, prev, has_prev, nxt, has_next

    def same(self, side: str, *keys: str) -> np.ndarray:
        """Rows whose previous (side 'prev') or next row has the same values of `keys`."""
        other, valid = (self.prev, self.has_prev) if side == "prev" else (self.next, self.has_next)
        out = valid.copy()
        for k in keys:
            out &= other[k] == self.cur[k]
        return out


def _numpy(batch: pa.RecordBatch) -> dict:
    return {name: batch.column(i).to_numpy(zero_copy_only=False) for i, name in enumerate(batch.schema.names)}


def windows(con, sql: str) -> Iterator[Window]:
    """The rows of `sql` (no NULLs), a batch at a time, each with its neighbours. Read on a cursor
    of its own: a query on `con` while the rows stream (stage's inserts) would end the stream."""
    reader = con.cursor().execute(sql).fetch_record_batch(BATCH_ROWS)
    held, last = None, None  # the batch waiting for its next row; the row before it
    for batch in reader:
        if batch.num_rows == 0:
            continue
        b = _numpy(batch)
        if held is not None:
            yield _window(held, last, {k: v[:1] for k, v in b.items()})
            last = {k: v[-1:] for k, v in held.items()}
        held = b
    if held is not None:
        yield _window(held, last, None)


def _window(cur: dict, last: dict | None, first_of_next: dict | None) -> Window:
    n = len(next(iter(cur.values())))
    prev = {k: np.concatenate([last[k] if last else v[:1], v[:-1]]) for k, v in cur.items()}
    nxt = {k: np.concatenate([v[1:], first_of_next[k] if first_of_next else v[:1]]) for k, v in cur.items()}
    has_prev, has_next = np.ones(n, bool), np.ones(n, bool)
    has_prev[0] = last is not None
    has_next[-1] = first_of_next is not None
    return Window(cur, prev, has_prev, nxt, has_next)


def stage(con, table: str, columns: dict[str, str], batches: Iterator[dict]) -> None:
    """Creates `table` (column -> DuckDB type) and inserts each batch (column -> numpy array or
    pyarrow array) into it."""
    con.execute(f"CREATE TABLE {table} ({', '.join(f'{c} {t}' for c, t in columns.items())})")
    for b in batches:
        part = pa.table({c: b[c] for c in columns})  # noqa: F841 (read by the query below)
        con.register("stage_part", part)
        con.execute(f"INSERT INTO {table} SELECT * FROM stage_part")
        con.unregister("stage_part")


def _ints(values: np.ndarray, valid: np.ndarray) -> pa.Array:
    return pa.array(values.astype(np.int64), type=pa.int64(), mask=~valid)


# ---------------------------------------------------------------- syscalls

SYSCALL_RECORDS = f"""
    SELECT {field_sql("sys_enter", "tid")} AS tid, {field_sql("sys_enter", "nr")} AS nr, ts,
           {field_sql("sys_enter", "pid")} AS pid, CASE WHEN kind = {SYS_EXIT} THEN {field_sql("sys_exit", "ret")} ELSE 0 END AS v,
           kind = {SYS_EXIT} AS e, seq
    FROM k WHERE kind IN ({SYS_ENTER}, {SYS_EXIT}) ORDER BY tid, ts, e, seq"""
CALL_COLUMNS = {"pid": "BIGINT", "tid": "BIGINT", "nr": "BIGINT", "start_ns": "BIGINT", "end_ns": "BIGINT", "ret": "BIGINT",
                "grp": "TINYINT", "seq": "BIGINT"}


def call_rows(con, exit_at: dict) -> Iterator[dict]:
    """One row per system call, from each thread's enter and exit records in time order.

    An exit closes the enter just before it in the same thread when the numbers agree, or when
    the exit carries nr -1: rt_sigreturn restores the registers of the interrupted code, so its
    exit no longer knows its own number. The child's first return from clone/clone3/fork/vfork
    (ret 0 in a thread that never entered the call) is not a call and makes no row. A call still
    open when its thread exits (exit, exit_group, or a thread killed inside a call) ends at the
    kernel's exit record (`exit_at`: tid -> time) with ret NULL. An interrupted call that the
    kernel restarts is two rows: the first returns -512..-516 (ERESTART*), the second is the
    restart. grp (0 paired, 1 enter alone, 2 exit alone) orders rows that start together (an
    exit alone "starts" at its end), then tid and seq.
    """
    for w in windows(con, SYSCALL_RECORDS):
        c, p, n = w.cur, w.prev, w.next
        e, nr, ts = c["e"], c["nr"], c["ts"]
        v = c["v"].view(np.int64)
        paired_start = ~e & w.same("next", "tid") & n["e"] & ((nr == n["nr"]) | (n["nr"] == -1))
        paired_end = e & w.same("prev", "tid") & ~p["e"] & ((p["nr"] == nr) | (nr == -1))
        lone_enter = ~e & ~paired_start
        lone_exit = e & ~paired_end & ~(np.isin(nr, FORK_CALLS) & (v == 0))
        tid = c["tid"].astype(np.int64)
        died = np.array([exit_at.get(int(t), -1) for t in tid[lone_enter]], np.int64)
        died_ok = ~w.same("next", "tid")[lone_enter] & (died >= ts[lone_enter])
        groups = (
            (paired_start, 0, ts, np.ones(len(ts), bool), n["ts"], np.ones(len(ts), bool), n["v"].view(np.int64), True),
            (lone_enter, 1, ts, np.ones(len(ts), bool), None, None, None, False),
            (lone_exit, 2, ts, np.zeros(len(ts), bool), ts, np.ones(len(ts), bool), v, True),
        )
        for mask, grp, start, start_ok, end, end_ok, ret, ret_ok in groups:
            if grp == 1:
                end_v, end_m = np.where(died_ok, died, 0), died_ok
            else:
                end_v, end_m = end[mask], end_ok[mask]
            k = int(mask.sum())
            yield {"pid": c["pid"][mask].astype(np.int64), "tid": tid[mask], "nr": nr[mask].astype(np.int64),
                   "start_ns": _ints(start[mask], start_ok[mask]), "end_ns": _ints(end_v, end_m),
                   "ret": _ints(ret[mask] if ret is not None else np.zeros(k, np.int64), np.full(k, ret_ok)),
                   "grp": np.full(k, grp, np.int8), "seq": c["seq"][mask]}


# ---------------------------------------------------------------- block I/O

BLOCK_RECORDS = f"""
    SELECT {field_sql("block_rq_issue", "dev")} AS dev, {field_sql("block_rq_issue", "sector")} AS sector, ts, b,
           {field_sql("block_rq_issue", "tid")} AS tid, kind = {BLOCK_COMPLETE} AS e,
           kind = {BLOCK_ISSUE_OTHER} AS other, seq
    FROM k WHERE kind IN ({BLOCK_ISSUE}, {BLOCK_COMPLETE}, {BLOCK_ISSUE_OTHER}) ORDER BY dev, sector, ts, e, seq"""
BLOCK_COLUMNS = {"issue_ns": "BIGINT", "complete_ns": "BIGINT", "dev": "BIGINT", "sector": "BIGINT", "b": "UBIGINT",
                 "tid": "BIGINT", "grp": "TINYINT", "seq": "BIGINT"}


def block_rows(con) -> Iterator[dict]:
    """One row per traced issue: completed by the next record of its device and sector when that
    is a completion (grp 0), else never completed before the end (grp 1, after grp 0 among issues
    at the same time, as the oracle orders them). An untraced task's issue at the sector
    (BLOCK_ISSUE_OTHER) comes between a request whose completion was lost and that task's own
    completion, so it makes no row and leaves the request unanswered."""
    for w in windows(con, BLOCK_RECORDS):
        c = w.cur
        issue = ~c["e"] & ~c["other"]
        paired = issue & w.same("next", "dev", "sector") & w.next["e"]
        yield {"issue_ns": c["ts"][issue], "complete_ns": _ints(w.next["ts"][issue], paired[issue]),
               "dev": c["dev"][issue].astype(np.int64), "sector": c["sector"][issue].view(np.int64), "b": c["b"][issue],
               "tid": c["tid"][issue].astype(np.int64), "grp": np.where(paired[issue], 0, 1).astype(np.int8),
               "seq": c["seq"][issue]}


# ---------------------------------------------------------------- interrupts

IRQ_RECORDS = f"""
    SELECT CASE WHEN kind IN ({IRQ_ENTRY}, {IRQ_EXIT}) THEN 0 ELSE 1 END AS grp, cpu, {field_sql("irq_entry", "irq")} AS num, ts,
           {field_sql("irq_entry", "tid")} AS tid,
           kind IN ({IRQ_EXIT}, {SOFTIRQ_EXIT}) AS e, seq
    FROM k WHERE kind IN ({IRQ_ENTRY}, {IRQ_EXIT}, {SOFTIRQ_ENTRY}, {SOFTIRQ_EXIT}) ORDER BY grp, cpu, ts, e, seq"""
IRQ_COLUMNS = {"cpu": "BIGINT", "tid": "BIGINT", "num": "BIGINT", "grp": "INTEGER", "start_ns": "BIGINT", "end_ns": "BIGINT",
               "seq": "BIGINT"}


def irq_rows(con) -> Iterator[dict]:
    """One row per entry followed, on its CPU, by the exit of the same number (hard irqs grp 0,
    softirqs grp 1)."""
    for w in windows(con, IRQ_RECORDS):
        c = w.cur
        ok = ~c["e"] & w.same("next", "grp", "cpu") & w.next["e"] & (w.next["num"] == c["num"])
        yield {"cpu": c["cpu"][ok].astype(np.int64), "tid": c["tid"][ok].astype(np.int64), "num": c["num"][ok].view(np.int64),
               "grp": c["grp"][ok].astype(np.int32), "start_ns": c["ts"][ok], "end_ns": w.next["ts"][ok], "seq": c["seq"][ok]}


# ---------------------------------------------------------------- CPU slices

SWITCHES_BY_CPU = f"""
    SELECT ts, cpu, seq, {field_sql("sched_switch", "prev_tid")} AS prev, {field_sql("sched_switch", "next_tid")} AS nxt
    FROM k WHERE kind = {SWITCH} ORDER BY cpu, ts, seq"""
SWITCHES_BY_TASK = f"""
    SELECT ts, cpu, seq, {field_sql("sched_switch", "prev_tid")} AS prev, ({field_sql("sched_switch", "prev_state")} & {STATE_ASLEEP}) != 0 AS asleep
    FROM k WHERE kind = {SWITCH} ORDER BY prev, ts, cpu, seq"""
SLICE_COLUMNS = {"tid": "BIGINT", "cpu": "BIGINT", "start_ns": "BIGINT", "end_ns": "BIGINT", "start_inferred": "BOOLEAN",
                 "o": "BIGINT"}


def slice_rows(con, whole: set | None) -> Iterator[dict]:
    """One row per time a task held a CPU: from the switch that put it on to the next switch of
    that CPU, which takes it off. A switch *onto* a task can be missing while the one taking it
    off is there (a ring loss, or a switch away from a task the kernel does not deliver, such as
    one in another PID namespace: docs/report.md, the cross-check); for a task in `whole` (whose
    every switch is kept; None: every task) that slice starts at the evidence: the latest of the
    CPU's previous switch, the task's own previous switch off a CPU and, when that switch put it
    to sleep, its first wakeup after it (it could not run before it), flagged `start_inferred`.
    Not its last wakeup: a task woken between setting its sleep state and switching off (a futex
    wait that loses the race) is woken while it runs. `o` is the switch's place in CPU order."""
    whole_tids = None if whole is None else np.fromiter(whole, np.int64, len(whole))
    seen = 0
    starts = []  # the switches off a CPU whose switch on was not seen: (seq, prev, cpu, ts, CPU's previous ts, o)
    for w in windows(con, SWITCHES_BY_CPU):
        c, n = w.cur, w.next
        o = np.arange(seen, seen + len(c["ts"]), dtype=np.int64)
        seen += len(o)
        ok = w.same("next", "cpu") & (c["nxt"] == n["prev"])
        yield {"tid": c["nxt"][ok].astype(np.int64), "cpu": c["cpu"][ok].astype(np.int64), "start_ns": c["ts"][ok],
               "end_ns": n["ts"][ok], "start_inferred": np.zeros(int(ok.sum()), bool), "o": o[ok]}
        j = w.same("prev", "cpu") & (w.prev["nxt"] != c["prev"]) & (c["prev"] != 0)
        if whole_tids is not None:
            j &= np.isin(c["prev"].astype(np.int64), whole_tids)
        starts.append((c["seq"][j], c["prev"][j].astype(np.int64), c["cpu"][j].astype(np.int64), c["ts"][j], w.prev["ts"][j], o[j]))
    if not starts or not sum(len(s[0]) for s in starts):
        return
    seq, prev, cpu, ts, cpu_prev_ts, o = (np.concatenate(x) for x in zip(*starts))
    off, off_asleep = _previous_switch_off(con, seq)
    lo = np.maximum(cpu_prev_ts, off)
    first = _first_wakeup(con, prev, off, ts)
    lo = np.where(off_asleep & (first > 0), np.maximum(lo, first), lo)
    yield {"tid": prev, "cpu": cpu, "start_ns": lo, "end_ns": ts, "start_inferred": np.ones(len(seq), bool), "o": o}


def _previous_switch_off(con, seq: np.ndarray):
    """For the switches `seq`, the time their task was last switched off any CPU before (0 if
    never) and whether that switch put it to sleep, in order of `seq`."""
    order = np.argsort(seq)
    wanted = seq[order]
    off, asleep = np.zeros(len(seq), np.int64), np.zeros(len(seq), bool)
    for w in windows(con, SWITCHES_BY_TASK):
        c = w.cur
        i = np.searchsorted(wanted, c["seq"])
        hit = (i < len(wanted)) & (wanted[np.minimum(i, len(wanted) - 1)] == c["seq"])
        if not hit.any():
            continue
        before = w.same("prev", "prev")[hit]
        at = order[i[hit]]
        off[at] = np.where(before, w.prev["ts"][hit], 0)
        asleep[at] = before & w.prev["asleep"][hit]
    return off, asleep


def _first_wakeup(con, tids: np.ndarray, after: np.ndarray, until: np.ndarray) -> np.ndarray:
    """For each task, the time of its first wakeup in [after, until] (0 if none)."""
    con.register("wake_query", pa.table({"i": np.arange(len(tids), dtype=np.int64), "tid": tids, "lo": after, "hi": until}))
    got = con.execute(f"""SELECT q.i, min(w.ts) AS ts FROM wake_query q
                          JOIN (SELECT ts, {field_sql("sched_waking", "tid")} AS tid FROM k WHERE kind = {WAKEUP}) w
                          ON w.tid = q.tid AND w.ts >= q.lo AND w.ts <= q.hi GROUP BY q.i""").fetchnumpy()
    con.unregister("wake_query")
    out = np.zeros(len(tids), np.int64)
    out[got["i"]] = got["ts"]
    return out
