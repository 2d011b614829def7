"""Findings: what is worth a reader's attention in a trace, in plain words with the numbers
behind them, ranked by the share of the program's thread time each explains.

Each finding is a row: severity, a short code, the subject it names (a task, a lock, a region),
a title, a sentence with the measured numbers, the main number it rests on (`value`) and the
share of the program's thread time it explains (`share`, null for a count such as migrations).
A WARNING explains at least WARN_SHARE (5%), an INFO at least MIN_SHARE (1%); caveats about the
trace itself (lost records, a cross-check that disagrees) come first and oslens's own cost last
unless it is large. The rules, one function each, are listed in rules.RULES (docs/report.md).
"""

from __future__ import annotations

import pyarrow as pa

from oslens.analysis import db
from oslens.analysis.findings.context import MIN_SHARE, OSLENS_LARGE_SHARE, WARN_SHARE, Context, finding
from oslens.analysis.findings.holders import UNRECORDED, preemption_counts, runnable_wait_holders
from oslens.analysis.findings.rules import RULES

__all__ = ["SCHEMA", "findings", "finding", "rank", "MIN_SHARE", "WARN_SHARE", "OSLENS_LARGE_SHARE", "UNRECORDED",
           "preemption_counts", "runnable_wait_holders", "threshold_note"]

SCHEMA = {
    "severity": pa.string(),
    "code": pa.string(),
    "subject": pa.string(),
    "title": pa.string(),
    "text": pa.string(),
    "value": pa.float64(),
    "share": pa.float64(),
}

_SEVERITY_ORDER = {"warning": 0, "info": 1}


def rank(rows: list[dict]) -> list[dict]:
    """Caveats first, then the program's findings (warnings, then infos) by the share of thread
    time they explain, those without a share (counts) after, notes, and oslens's cost last."""
    return sorted(rows, key=lambda f: (f["group"], _SEVERITY_ORDER.get(f["severity"], 2),
                                       f["share"] is None, -(f["share"] or 0.0)))


def threshold_note() -> str:
    return (f"Findings are ranked by the share of the program's thread time each explains: a WARNING explains "
            f"{100 * WARN_SHARE:.0f}% or more, an INFO {100 * MIN_SHARE:.0f}% or more (counts such as migrations "
            f"come after); oslens's own cost is listed last unless it reaches {100 * OSLENS_LARGE_SHARE:.0f}%.")


def findings(con, tables: dict[str, pa.Table] | None = None) -> pa.Table:
    """All findings, ranked. `tables` may carry already computed analyses ('breakdown', 'tasks',
    'sync') to avoid recomputing them."""
    ctx = Context(con, tables)
    if not ctx.prog.tids:
        rows = [finding("warning", "no_program", "", "No program threads",
                        "The trace holds no events from a traced program.", 0)]
        return db.from_rows(rows, SCHEMA)
    rows = [f for rule in RULES for f in rule(ctx)]
    return db.from_rows(rank(rows), SCHEMA)
