"""The partial order of synchronisation events seen by two traces (Kohr et al. 1994, section 5.2).

Two traces of the same program (for instance recorded with different instrumentation levels)
saw the same partial order when every thread performed the same sequence of synchronisation
operations on the same objects. Threads are matched across traces by identity, not by tid:
(process number in order of first appearance, thread name, number among threads of that name
in order of start). Objects are numbered per thread in order of first use there (#0, #1, ...),
so addresses that differ between runs (ASLR, heap) compare equal when the program used them in
the same order; named objects keep their names.
"""

from __future__ import annotations

from dataclasses import dataclass

from oslens.store.calibration import SYNC_RECORD_KINDS

GROUPS = {
    "sync": SYNC_RECORD_KINDS,
    "regions": ("region_begin", "region_end"),
    "events": ("event",),
    "timers": ("timer_start", "timer_stop"),
}


@dataclass
class Step:
    kind: str
    obj: str
    ts: int

    def label(self) -> str:
        return f"{self.kind} {self.obj}"


@dataclass
class Divergence:
    thread: str
    index: int  # position in the thread's sequence (0-based); -1: the thread is in one trace only
    a: Step | None
    b: Step | None

    def describe(self) -> str:
        if self.index < 0:
            return f"{self.thread}: only in {'A' if self.a is not None or self.b is None else 'B'}"
        left = self.a.label() if self.a else "(end of sequence)"
        right = self.b.label() if self.b else "(end of sequence)"
        return f"{self.thread}: event {self.index}: A has {left}, B has {right}"


def _sql_list(items) -> str:
    return ", ".join("'" + k.replace("'", "''") + "'" for k in items)


def thread_keys(rows: list[tuple]) -> dict[tuple[int, int], str]:
    """rows (pid, tid, name, start_ns) -> {(pid, tid): identity that does not depend on ids}."""
    first = {}
    for pid, _tid, _name, start in rows:
        first[pid] = min(first.get(pid, start), start)
    proc_no = {pid: i for i, pid in enumerate(sorted(first, key=lambda p: (first[p], p)))}
    seen: dict[tuple, int] = {}
    out = {}
    for pid, tid, name, start in sorted(rows, key=lambda r: (proc_no[r[0]], r[3], r[1])):
        base = (proc_no[pid], name or "")
        n = seen.get(base, 0)
        seen[base] = n + 1
        out[(pid, tid)] = f"process {proc_no[pid]} thread '{name or '?'}'" + (f" #{n}" if n else "")
    return out


def sequences(con, groups=("sync",)) -> dict[str, list[Step]]:
    """{thread identity: its steps in recorded order} from an open trace (DuckDB connection)."""
    kinds = [k for g in groups for k in GROUPS[g]]
    rows = con.execute("SELECT pid, tid, name, start_ns FROM threads WHERE source IS NULL OR source <> 'kernel'"
                       ).fetchall()
    # In record order, not by ts: records a few ns apart share a timestamp where the TSC steps
    # coarsely (docs/calibration.md, compare-order), and a free lock's request and acquire share one by design.
    # app_events holds each thread's records in record order, and a scan keeps it (DuckDB's
    # preserve_insertion_order); sorted() is stable.
    ev = sorted(con.execute(
        f"SELECT pid, tid, CAST(kind AS VARCHAR), CAST(instrument AS VARCHAR), value, id, ts FROM app_events "
        f"WHERE CAST(kind AS VARCHAR) IN ({_sql_list(kinds)})").fetchall(), key=lambda r: (r[0], r[1]))
    known = {(r[0], r[1]) for r in rows}
    for pid, tid, *_ in ev:
        if (pid, tid) not in known:
            known.add((pid, tid))
            rows.append((pid, tid, "", 0))
    keys = thread_keys([(p, t, n, s if s is not None else 0) for p, t, n, s in rows])
    out: dict[str, list[Step]] = {}
    numbering: dict[tuple, dict] = {}
    for pid, tid, kind, name, value, ident, ts in ev:
        key = keys[(pid, tid)]
        nums = numbering.setdefault((pid, tid), {})
        if name:
            obj = name
        else:
            # regions and events are identified by their id; sync objects by their address
            raw = ("id", ident) if kind in ("region_begin", "region_end", "event") else ("obj", value)
            if raw not in nums:
                nums[raw] = f"#{len(nums)}"
            obj = nums[raw]
        out.setdefault(key, []).append(Step(kind, obj, int(ts)))
    return out


def compare(a: dict[str, list[Step]], b: dict[str, list[Step]]) -> list[Divergence]:
    """The first divergence of every thread whose sequences differ (threads in one trace only too)."""
    out = []
    for key in sorted(set(a) | set(b)):
        sa, sb = a.get(key), b.get(key)
        if sa is None or sb is None:
            out.append(Divergence(key, -1, Step("", "", 0) if sa is not None else None,
                                  Step("", "", 0) if sb is not None else None))
            continue
        for i in range(max(len(sa), len(sb))):
            x = sa[i] if i < len(sa) else None
            y = sb[i] if i < len(sb) else None
            if x is None or y is None or (x.kind, x.obj) != (y.kind, y.obj):
                out.append(Divergence(key, i, x, y))
                break
    return out
