"""What a trace lost, and the one warning line that says so.

Sources of loss, each a row of the `lost` table (source, where, count, reason):
  app     events a thread's recorder dropped because its buffer was full (chunk headers);
  kernel  records the kernel collector lost (its `kernel_lost` table);
  damage  records the store could not read: truncated chunks, records that fail their check,
          unreadable headers, chunks that are missing (named in meta.json, or a gap in a
          writer's sequence numbers), a damaged meta.json.
A damaged trace is imported as far as it is intact; damage is never fatal to the rest.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from oslens.store import schema

_CHUNK_NAME = re.compile(r"^(?P<writer>.+)-(?P<seq>\d+)\.osl$")


@dataclass
class Losses:
    rows: list = field(default_factory=list)  # (source, where, count, reason)

    def add(self, source: str, where: str, count: int | None, reason: str) -> None:
        self.rows.append((source, where, None if count is None else int(count), reason))

    def damage(self) -> list:
        return [r for r in self.rows if r[0] == "damage"]

    def table(self) -> pa.Table:
        cols = list(zip(*self.rows)) if self.rows else [[], [], [], []]
        return schema.conform("lost", pa.table({
            "source": pa.array(cols[0], pa.string()), "where": pa.array(cols[1], pa.string()),
            "count": pa.array(cols[2], pa.int64()), "reason": pa.array(cols[3], pa.string()),
        }))


def chunk_damage(losses: Losses, chunk) -> None:
    for d in chunk.damage:
        losses.add("damage", f"raw/{d.get('file', chunk.path.name)}", d.get("records_lost", 0), d.get("reason", ""))


def missing_chunks(losses: Losses, trace: Path, present: list[str], meta: dict) -> None:
    """Chunks meta.json names that are gone, and gaps in a writer's chunk sequence numbers."""
    have = set(present)
    reported = set()
    for t in meta.get("threads") or []:
        name = t.get("chunk") if isinstance(t, dict) else None
        if name and name not in have and name not in reported:
            reported.add(name)
            losses.add("damage", f"raw/{name}", t.get("records"), "chunk missing (listed in meta.json)")
    seqs: dict[str, set[int]] = {}
    for name in present:
        m = _CHUNK_NAME.match(name)
        if m:
            seqs.setdefault(m.group("writer"), set()).add(int(m.group("seq")))
    # a flight recording deleted each writer's oldest chunks on purpose (capture/flight.py): overwritten, not lost
    overwrote = bool(meta.get("flight"))
    for writer, got in sorted(seqs.items()):
        for s in range(min(got) if overwrote else 0, max(got)):
            name = f"{writer}-{s}.osl"
            if s not in got and name not in reported:
                reported.add(name)
                losses.add("damage", f"raw/{name}", None, "chunk missing (gap in the writer's sequence numbers)")


def incomplete_reason(meta: dict) -> str | None:
    """Why a trace is incomplete, or None: `oslens record` writes meta.json when it starts and
    again, with the program's end and exit status, when it ends; a meta.json with a start and
    neither means the recording itself was stopped (killed) while the program ran."""
    if meta.get("start_ns") is None or meta.get("exit") or meta.get("end_ns") is not None:
        return None
    return "recording stopped before the program ended"


def warning_line(trace: Path, losses: Losses) -> str | None:
    dmg = losses.damage()
    if not dmg:
        return None
    counted = sum(r[2] for r in dmg if r[2])
    unknown = any(r[2] is None for r in dmg)
    what = f"{counted} records" + (" (and an unknown number)" if unknown and counted else "")
    if not counted and unknown:
        what = "an unknown number of records"
    elif not counted:
        what = "no records"
    first = f"{dmg[0][1]}: {dmg[0][3]}"
    more = f" and {len(dmg) - 1} more place(s)" if len(dmg) > 1 else ""
    return (f"oslens: warning: {trace} is damaged ({first}{more}): {what} lost; imported what was intact, "
            f"see `oslens sql {trace} \"SELECT * FROM lost\"`")


def warn(trace: Path, losses: Losses, quiet: bool = False) -> None:
    line = warning_line(trace, losses)
    if line and not quiet:
        print(line, file=sys.stderr)
