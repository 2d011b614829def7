"""Findings: anomalies pointed at in plain words, with the numbers behind them.

Each finding is a row: severity ('warning' or 'info'), a short code, the subject it names (a
task, a lock, a region), a title, a sentence with the measured numbers, and the main number
(`value`) it rests on. The rules:

  interference   a task that preempted program threads often (Kohr et al.'s ARB retransmit
                 daemon): count, rate, its own CPU time, and the runnable time it cost the program;
  cpu_hog        a task that used a large share of the program's CPUs while the program ran;
  preemption     program threads spent a noticeable part of their time runnable but off-CPU;
  sync_preempted a lock or barrier whose wait mostly coincided with program threads being
                 preempted (the wait is the scheduler's doing, not the program's);
  sync_imbalance a lock or barrier wait that is large but not explained by preemption;
  io_critical    the program waited for disk I/O (and in which region);
  migrations     program threads moved between CPUs often;
  page_faults    many page faults;
  instrumentation the estimated instrumentation cost is a large share of the run;
  lost           records were lost;
  no_kernel      the trace has no kernel events, so most of this report is missing.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from oslens.analysis import breakdown as breakdown_mod
from oslens.analysis import common, states, tasks as tasks_mod
from oslens.analysis import sync_summary as sync_mod

SCHEMA = {
    "severity": pa.string(),
    "code": pa.string(),
    "subject": pa.string(),
    "title": pa.string(),
    "text": pa.string(),
    "value": pa.float64(),
}

fmt = common.fmt_ns


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def preemption_counts(con, prog) -> dict[int, int]:
    """For each task, how many times it took a CPU from a still-runnable program thread
    (program threads included)."""
    if not common.table_exists(con, "switches") or not prog.tids:
        return {}
    tids = ",".join(str(t) for t in prog.tids)
    rows = con.execute(
        f"""SELECT next_tid, count(*) FROM switches
            WHERE prev_tid IN ({tids}) AND next_tid <> prev_tid
              AND upper(substr(CAST(prev_state AS VARCHAR), 1, 1)) IN ('R', '0')
            GROUP BY next_tid"""
    ).fetchall()
    return {int(t): int(n) for t, n in rows}


def runnable_wait_holders(con, prog) -> dict[int, int]:
    """For each task: the time program threads spent runnable, waiting for the CPU they last ran
    on, while that task held it (summed over the waiting threads)."""
    if not common.table_exists(con, "cpu_slices") or not prog.tids or not prog.window:
        return {}
    tls = states.timelines(con, prog)
    # every preempted interval of every program thread, with the CPU it waits for
    w_s, w_e, w_cpu, w_tid = [], [], [], []
    for tid in prog.tids:
        tl = tls[tid]
        ps, pe = common.merge_intervals(*tl.intervals(states.PREEMPTED))
        if len(ps) == 0 or tl.slice_start is None or len(tl.slice_start) == 0:
            continue
        order = np.argsort(tl.slice_end, kind="stable")
        ends, cpus = tl.slice_end[order], tl.slice_cpu[order]
        before = np.searchsorted(ends, ps, side="right") - 1
        first_cpu = tl.slice_cpu[np.argmin(tl.slice_start)]
        w_s.append(ps)
        w_e.append(pe)
        w_cpu.append(np.where(before >= 0, cpus[np.maximum(before, 0)], first_cpu))
        w_tid.append(np.full(len(ps), tid, np.int64))
    if not w_s:
        return {}
    w_s, w_e = np.concatenate(w_s), np.concatenate(w_e)
    w_cpu, w_tid = np.concatenate(w_cpu), np.concatenate(w_tid)
    lo, hi = prog.window
    out: dict[int, int] = {}
    for c in np.unique(w_cpu).tolist():
        t = con.execute(
            "SELECT start_ns, end_ns, tid FROM cpu_slices WHERE cpu = ? AND end_ns > ? AND start_ns < ? ORDER BY start_ns",
            [c, lo, hi],
        ).fetch_arrow_table()
        if t.num_rows == 0:
            continue
        S = t.column(0).to_numpy().astype(np.int64)
        E = t.column(1).to_numpy().astype(np.int64)
        T = t.column(2).to_numpy().astype(np.int64)
        m = w_cpu == c
        qs, qe, qt = w_s[m], w_e[m], w_tid[m]
        j0 = np.searchsorted(E, qs, side="right")  # first slice ending after the wait starts
        j1 = np.searchsorted(S, qe, side="left")  # first slice starting at or after it ends
        k = np.maximum(j1 - j0, 0)
        total = int(k.sum())
        if total == 0:
            continue
        q = np.repeat(np.arange(len(qs)), k)
        offs = np.concatenate([[0], np.cumsum(k)[:-1]])
        j = j0[q] + (np.arange(total) - offs[q])
        ov = np.minimum(E[j], qe[q]) - np.maximum(S[j], qs[q])
        keep = (ov > 0) & (T[j] != qt[q])
        tasks, inv = np.unique(T[j][keep], return_inverse=True)
        sums = np.bincount(inv, weights=ov[keep], minlength=len(tasks))
        for task, v in zip(tasks.tolist(), sums.tolist()):
            out[int(task)] = out.get(int(task), 0) + int(round(v))
    # waiting time no recorded slice covers: the CPU ran tasks whose switches were not recorded
    covered = sum(out.values())
    waited = int((w_e - w_s).sum())
    if waited - covered > 0:
        out[UNRECORDED] = waited - covered
    return out


UNRECORDED = -1  # holder key for runnable waits during CPU time the trace does not attribute


def _innermost_region(con, tid: int, t: int) -> str | None:
    if not common.table_exists(con, "regions"):
        return None
    row = con.execute(
        "SELECT name FROM regions WHERE tid = ? AND begin_ns <= ? AND coalesce(end_ns, ?) > ? "
        "ORDER BY depth DESC LIMIT 1",
        [tid, t, t + 1, t],
    ).fetchone()
    return row[0] if row else None


def _sync_preemptors(con, prog, kind: str, obj: str, limit: int = 3) -> list[tuple[str, int]]:
    """Tasks that preempted program threads while `obj` was being waited for."""
    if not common.table_exists(con, "switches"):
        return []
    tids = ",".join(str(t) for t in prog.tids)
    rows = con.execute(
        f"""WITH w AS (SELECT DISTINCT request_ns AS lo, coalesce(acquire_ns, request_ns) AS hi FROM sync
                       WHERE kind = ? AND CAST(object AS VARCHAR) = ?)
            SELECT coalesce(any_value(s.next_comm), '?'), s.next_tid, count(DISTINCT s.ts)
            FROM switches s JOIN w ON s.ts >= w.lo AND s.ts < w.hi
            WHERE s.prev_tid IN ({tids}) AND s.next_tid NOT IN ({tids})
              AND upper(substr(CAST(s.prev_state AS VARCHAR), 1, 1)) IN ('R', '0')
            GROUP BY s.next_tid ORDER BY 3 DESC LIMIT ?""",
        [kind, obj, limit],
    ).fetchall()
    return [(f"{c} [{t}]" if t else "idle", int(n)) for c, t, n in rows]


def findings(con, tables: dict[str, pa.Table] | None = None) -> pa.Table:
    """All findings, warnings first. `tables` may carry already computed analyses
    ('breakdown', 'tasks', 'sync') to avoid recomputing them."""
    tables = tables or {}
    prog = common.program(con)
    out: list[dict] = []
    st = common.kernel_status(con)

    def add(severity, code, subject, title, text, value):
        out.append(
            {"severity": severity, "code": code, "subject": subject, "title": title, "text": text, "value": float(value)}
        )

    if not prog.tids:
        add("warning", "no_program", "", "No program threads", "The trace holds no events from a traced program.", 0)
        return common.from_rows(out, SCHEMA)

    bd = tables.get("breakdown") or breakdown_mod.time_breakdown(con)
    bdr = bd.to_pylist()
    total_thread_ns = sum(r["wall_ns"] for r in bdr) or 1
    wall = (prog.window[1] - prog.window[0]) if prog.window else 0
    secs = max(wall, 1) / 1e9

    if not st["scheduling"]:
        add(
            "info",
            "no_kernel",
            "",
            "No kernel events",
            f"This trace has application events only: {st['reason']}. Preemption, per-task CPU, context "
            "switches, I/O and the OS-side findings are left out.",
            0,
        )

    # ---- interference: who preempts the program
    if st["scheduling"]:
        tk = tables.get("tasks") or tasks_mod.task_cpu(con)
        info = {r["tid"]: r for r in tk.to_pylist()}
        counts = preemption_counts(con, prog)
        holders = runnable_wait_holders(con, prog)
        host = common.same_host(con)
        parents = common.task_parents(con)
        cands = []
        names = {}
        if counts or holders:
            ids = ",".join(str(t) for t in set(counts) | set(holders))
            for tid, pid, comm in con.execute(
                f"SELECT next_tid, any_value(next_pid), mode(next_comm) FROM switches WHERE next_tid IN ({ids}) GROUP BY 1"
            ).fetchall():
                names[int(tid)] = (pid, comm)
        for tid, n in counts.items():
            stolen = holders.get(tid, 0)
            if tid <= 0 or tid in prog.tidset:
                continue
            pid, comm = names.get(tid, (None, None))
            r = info.get(tid)
            kind, desc = common.classify_task(tid, pid, comm, prog, host, parents)
            cpu_ns = r["cpu_ns"] if r else 0
            cands.append((n, stolen, tid, pid, comm or "?", kind, desc, cpu_ns))
        cands.sort(key=lambda c: (-c[0], -c[1], c[2]))
        shown = 0
        for n, stolen, tid, pid, comm, kind, desc, cpu_ns in cands:
            rate = n / secs
            share = stolen / total_thread_ns
            if n < 10 or (rate < 20 and share < 0.01):
                continue
            if shown >= 3 and kind != "oslens":
                continue
            shown += 1
            per = cpu_ns / n if n else 0
            sev = "warning" if (rate >= 100 or share >= 0.02) else "info"
            extra = " This is oslens itself: the cost of tracing." if kind == "oslens" else ""
            add(
                sev,
                "interference",
                f"{comm} [{tid}]",
                f"{comm} (pid {pid if pid is not None else '?'}, {kind}) keeps preempting the program",
                f"{comm} [{tid}] ({desc}) preempted program threads {n} times ({rate:.0f} per second) while "
                f"using only {fmt(cpu_ns)} of CPU on the program's CPUs ({fmt(per)} per preemption); each "
                f"preemption also costs the program a context switch and its warm cache. Program threads spent "
                f"{fmt(stolen)} runnable waiting for CPUs it held ({_pct(share)} of their time).{extra}",
                n,
            )
        # CPU hogs
        if prog.window and prog.cpus:
            cap = wall * len(prog.cpus)
            hogs = 0
            for r in tk.to_pylist():  # sorted by CPU time: the three biggest
                if r["kind"] in ("program", "idle", "unrecorded"):
                    continue
                if cap and r["cpu_ns"] / cap >= 0.05 and hogs < 3:
                    hogs += 1
                    add(
                        "warning",
                        "cpu_hog",
                        f"{r['comm']} [{r['tid']}]",
                        f"{r['comm']} used {_pct(r['cpu_ns'] / cap)} of the program's CPUs",
                        f"{r['comm']} [{r['tid']}] ({r['kind']}: {r['description']}) ran {fmt(r['cpu_ns'])} on "
                        f"the program's {len(prog.cpus)} CPU(s) during its {fmt(wall)} run, in {r['slices']} "
                        f"slices.",
                        r["cpu_ns"],
                    )
        # overall preemption
        pre = sum(r["preempted_ns"] for r in bdr)
        if pre / total_thread_ns >= 0.05:
            ranked = sorted(holders.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
            parts = []
            for tid, held in ranked:
                label = (f"{prog.names.get(tid, tid)} [{tid}] (a program thread)" if tid in prog.tidset
                         else "idle" if tid == 0
                         else "tasks whose switches were not recorded" if tid == UNRECORDED
                         else f"{names.get(tid, (None, '?'))[1]} [{tid}]")
                parts.append(f"{label} {fmt(held)} ({counts.get(tid, 0)} preemptions)")
            top = "; ".join(parts) or "unknown tasks"
            add(
                "warning",
                "preemption",
                "",
                f"Program threads were runnable but off-CPU {_pct(pre / total_thread_ns)} of the time",
                f"Program threads spent {fmt(pre)} runnable waiting for a CPU out of {fmt(total_thread_ns)} "
                f"of thread time. The tasks that held their CPUs meanwhile: {top}.",
                pre,
            )

    # ---- synchronisation
    sy = tables.get("sync") or sync_mod.sync_summary(con)
    for r in sy.to_pylist():
        if r["object"] == "(all)":
            continue
        tot = r["wait_total_ns"]
        if tot < max(1_000_000, 0.01 * total_thread_ns):
            continue
        label = f"{r['kind']} {r['object']}"
        if st["scheduling"] and r["preempted_share"] >= 0.5:
            who = _sync_preemptors(con, prog, r["kind"], r["object"])
            whos = ", ".join(f"{w} ({n}×)" for w, n in who) or "other program threads"
            add(
                "warning",
                "sync_preempted",
                label,
                f"Waits at {label} are dominated by preemption",
                f"{label} was waited for {r['count']} times, {fmt(tot)} in all (mean {fmt(r['wait_mean_ns'])}); "
                f"{_pct(r['preempted_share'])} of that wait coincided with program threads being preempted, "
                f"by {whos}.",
                r["preempted_share"],
            )
        elif tot >= 0.05 * total_thread_ns:
            add(
                "info",
                "sync_imbalance",
                label,
                f"Threads spend {_pct(tot / total_thread_ns)} of their time waiting at {label}",
                f"{label}: {r['count']} waits, {fmt(tot)} in all, mean {fmt(r['wait_mean_ns'])}, max "
                f"{fmt(r['wait_max_ns'])}; only {_pct(r['preempted_share'])} of it coincided with preemption, so "
                "the wait comes from the program (load imbalance, serial work or lock contention).",
                tot,
            )

    # ---- I/O on the critical path
    io_total = sum(r["io_wait_ns"] for r in bdr)
    if io_total >= 1_000_000 and io_total >= 0.005 * total_thread_ns:
        worst = max(bdr, key=lambda r: r["io_wait_ns"])
        tl = states.timelines(con, prog)[worst["tid"]]
        s, e = tl.intervals(states.IO_WAIT)
        region = None
        if len(s):
            k = int(np.argmax(e - s))
            region = _innermost_region(con, worst["tid"], int(s[k]))
        nreq = common.row_count(con, "block_io")
        where = f", mostly in region {region}" if region else ""
        add(
            "warning" if io_total >= 0.05 * total_thread_ns else "info",
            "io_critical",
            region or worst["name"],
            f"The program waited {fmt(io_total)} for I/O",
            f"Program threads were blocked on I/O for {fmt(io_total)} ({_pct(io_total / total_thread_ns)} of thread "
            f"time); {worst['name']} waited {fmt(worst['io_wait_ns'])}{where}. The trace holds {nreq} block "
            "requests.",
            io_total,
        )

    # ---- migrations
    for r in bdr:
        if r["migrations"] >= 10 and r["migrations"] / max(r["wall_ns"] / 1e9, 1e-9) >= 20:
            add(
                "info",
                "migrations",
                r["name"],
                f"{r['name']} migrated between CPUs {r['migrations']} times",
                f"{r['name']} [{r['tid']}] ran in {r['cpu_slices']} slices and changed CPU {r['migrations']} times "
                f"({r['migrations'] / max(r['wall_ns'] / 1e9, 1e-9):.0f} per second), losing its cache each time.",
                r["migrations"],
            )

    # ---- page faults
    nf = sum(r["faults"] for r in bdr)
    if nf >= 1000:
        worst = max(bdr, key=lambda r: r["faults"])
        add(
            "info",
            "page_faults",
            worst["name"],
            f"{nf} page faults",
            f"Program threads took {nf} page faults ({nf / secs:.0f} per second); {worst['name']} took "
            f"{worst['faults']}.",
            nf,
        )

    # ---- instrumentation
    instr = sum(r["instrumentation_ns"] for r in bdr)
    if instr >= 0.05 * total_thread_ns:
        add(
            "warning",
            "instrumentation",
            "",
            f"Instrumentation is an estimated {_pct(instr / total_thread_ns)} of thread time",
            f"The program recorded {sum(r['events'] for r in bdr)} events, an estimated {fmt(instr)} of its "
            "threads' time: record fewer events (coarser regions) for a less perturbed run.",
            instr,
        )

    # ---- lost records
    # `lost` holds every loss, the kernel collector's included (kernel_lost is its per-CPU detail)
    lost = []
    if common.row_count(con, "lost"):
        lost = con.execute(
            'SELECT CAST(source AS VARCHAR), CAST("where" AS VARCHAR), sum(count) FROM lost GROUP BY 1, 2'
        ).fetchall()
    lost.sort(key=lambda r: -(r[2] or 0))
    if lost:
        total = sum(int(n or 0) for _, _, n in lost)
        if total:
            parts = "; ".join(f"{n} from {s} ({w})" for s, w, n in lost[:5])
            add(
                "warning",
                "lost",
                "",
                f"{total} records were lost",
                f"The trace lost {total} records: {parts}. Figures that depend on them may be incomplete.",
                total,
            )

    order = {"warning": 0, "info": 1}
    out.sort(key=lambda f: (order.get(f["severity"], 2),))
    return common.from_rows(out, SCHEMA)
