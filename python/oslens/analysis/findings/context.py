"""What every findings rule reads: the program, its time breakdown and the thresholds that
decide what is worth saying, computed once per report."""

from __future__ import annotations

from functools import cached_property

import pyarrow as pa

from oslens.analysis import breakdown as breakdown_mod
from oslens.analysis import db, program, task_kinds, tasks as tasks_mod
from oslens.analysis import sync_summary as sync_mod
from oslens.analysis.findings import holders

# A finding's weight is the share of the program's thread time it explains (docs/report.md).
WARN_SHARE = 0.05  # at or above: a WARNING
MIN_SHARE = 0.01  # below: not worth a finding (unless a rule says why, e.g. a frequent preemptor)
OSLENS_LARGE_SHARE = 0.05  # oslens's own cost is an INFO at the end below this, a ranked WARNING above

# where a finding goes in the list: caveats about the trace first, the program's findings by
# share, then notes about what the trace lacks, and oslens's own cost last
CAVEAT, PROGRAM, NOTE, OSLENS = 0, 1, 2, 3


def severity(share: float) -> str:
    return "warning" if share >= WARN_SHARE else "info"


def pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def finding(severity: str, code: str, subject: str, title: str, text: str, value: float,
            share: float | None = None, group: int = PROGRAM) -> dict:
    return {"severity": severity, "code": code, "subject": subject, "title": title, "text": text,
            "value": float(value), "share": None if share is None else float(share), "group": group}


class Context:
    """The program and the analyses the rules share (`tables` may carry 'breakdown', 'tasks'
    and 'sync' already computed)."""

    def __init__(self, con, tables: dict[str, pa.Table] | None = None):
        self.con = con
        self.tables = tables or {}
        self.prog = program.program(con)
        self.status = db.kernel_status(con)

    @cached_property
    def breakdown(self) -> list[dict]:
        bd = self.tables.get("breakdown") or breakdown_mod.time_breakdown(self.con)
        return bd.to_pylist()

    @cached_property
    def thread_ns(self) -> int:
        """The program's thread time: the denominator of every share."""
        return sum(r["wall_ns"] for r in self.breakdown) or 1

    @property
    def wall_ns(self) -> int:
        w = self.prog.window
        return (w[1] - w[0]) if w else 0

    @property
    def seconds(self) -> float:
        return max(self.wall_ns, 1) / 1e9

    @cached_property
    def tasks(self) -> list[dict]:
        tk = self.tables.get("tasks") or tasks_mod.task_cpu(self.con)
        return tk.to_pylist()

    @cached_property
    def sync(self) -> list[dict]:
        sy = self.tables.get("sync") or sync_mod.sync_summary(self.con)
        return sy.to_pylist()

    @cached_property
    def preemptions(self) -> dict[int, int]:
        return holders.preemption_counts(self.con, self.prog)

    @cached_property
    def holders(self) -> dict[int, int]:
        return holders.runnable_wait_holders(self.con, self.prog)

    @cached_property
    def task_names(self) -> dict[int, tuple[int | None, str]]:
        """(pid, comm) of every task that preempted or held a CPU a program thread waited for."""
        ids = {t for t in set(self.preemptions) | set(self.holders) if t > 0}
        if not ids:
            return {}
        rows = self.con.execute(
            f"SELECT next_tid, any_value(next_pid), mode(next_comm) FROM switches "
            f"WHERE next_tid IN ({','.join(map(str, ids))}) GROUP BY 1").fetchall()
        return {int(t): (p, c) for t, p, c in rows}

    @cached_property
    def _classes(self):
        return program.same_host(self.con), task_kinds.task_parents(self.con)

    def classify(self, tid: int) -> tuple[str, str]:
        pid, comm = self.task_names.get(tid, (None, None))
        host, parents = self._classes
        return task_kinds.classify_task(tid, pid, comm, self.prog, host, parents)

    def label(self, tid: int) -> str:
        if tid in self.prog.tidset:
            return f"{self.prog.names.get(tid, tid)} [{tid}] (a program thread)"
        if tid == 0:
            return "idle"
        if tid == holders.UNRECORDED:
            return "tasks whose switches were not recorded"
        return f"{self.task_names.get(tid, (None, '?'))[1]} [{tid}]"
