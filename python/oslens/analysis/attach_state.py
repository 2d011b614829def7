"""What was already going on when `oslens record -p` attached: the attached processes' threads by
state and scheduling class, their descriptors by kind, their cgroup limits (the `attach_*`
tables), so a report on such a trace opens with the program as it was found, not as if it had
started at the attach."""

from __future__ import annotations

from oslens.analysis import db, units


def summary(con) -> list[str]:
    """One line per attached process; [] for a trace of a program oslens started."""
    if not db.table_exists(con, "attach_processes") or not db.row_count(con, "attach_processes"):
        return []
    lines = []
    procs = db.fetch(con, "SELECT pid, ts, threads, fds, cgroup, memory_max, cpu_max, pids_max FROM attach_processes ORDER BY pid")
    for p in db.rows(procs):
        states = con.execute("SELECT state, count(*) FROM attach_threads WHERE pid = ? GROUP BY 1 ORDER BY 2 DESC, 1",
                             [p["pid"]]).fetchall()
        policies = con.execute("SELECT policy, count(*) FROM attach_threads WHERE pid = ? GROUP BY 1 ORDER BY 2 DESC, 1",
                               [p["pid"]]).fetchall()
        oldest = con.execute("SELECT min(started_ns) FROM attach_threads WHERE pid = ?", [p["pid"]]).fetchone()[0]
        kinds = con.execute("SELECT kind, count(*) FROM attach_fds WHERE pid = ? GROUP BY 1 ORDER BY 2 DESC, 1",
                            [p["pid"]]).fetchall()
        line = (f"attached to running pid {p['pid']}: {p['threads']} thread(s) already running "
                f"({', '.join(f'{n} {s}' for s, n in states)}; {', '.join(f'{n} {c}' for c, n in policies)})")
        if oldest is not None:
            line += f", the process started {units.fmt_ns(p['ts'] - oldest)} before the attach"
        line += f"; {p['fds']} open descriptor(s)" + (f" ({', '.join(f'{n} {k}' for k, n in kinds)})" if kinds else "")
        limits = [f"{k} {v}" for k, v in (("memory.max", p["memory_max"]), ("cpu.max", p["cpu_max"]), ("pids.max", p["pids_max"]))
                  if _is_limit(v)]
        line += f"; cgroup {_placed(p['cgroup'])}" + (f" ({', '.join(limits)})" if limits else "; no limit")
        lines.append(line)
    return lines


# cgroup v1 writes "no memory limit" as the largest page-aligned number
V1_UNLIMITED = 1 << 62


def _is_limit(value: str | None) -> bool:
    """A value that limits: not v2's `max`, nor v1's -1 quota or page-aligned infinity."""
    if value is None or value.startswith(("max", "-1")):
        return False
    return not (value.isdigit() and int(value) >= V1_UNLIMITED)


def _placed(cgroup: str | None) -> str:
    """The cgroup paths that are not a hierarchy's root (v1 lists one per controller)."""
    parts = [c for c in (cgroup or "").split(",") if c and not c.endswith(":/")]
    return ", ".join(parts) or "/"
