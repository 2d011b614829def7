"""One function per finding rule; each takes the shared Context and returns its findings (rows
made by context.finding). RULES lists them; the order they run in does not matter, the ranking
in oslens.analysis.findings does."""

from __future__ import annotations

import numpy as np

from oslens.analysis import crosscheck as crosscheck_mod, db, states, units
from oslens.analysis.findings import holders as holders_mod
from oslens.analysis.findings.context import (CAVEAT, MIN_SHARE, NOTE, OSLENS, OSLENS_LARGE_SHARE, PROGRAM, WARN_SHARE,
                                              Context, finding, pct, severity)

fmt = units.fmt_ns

INTERFERENCE_RATE = 20  # preemptions per second: frequent enough to matter beyond the CPU taken (Kohr et al.)
HOG_CPU_SHARE = 0.05  # a task using this share of the program's CPUs while it ran is named
SHOWN_TASKS = 3  # tasks named one by one; the rest are in the preemption finding's list
PLURAL = {"mutex": "mutexes", "barrier": "barriers", "cond": "condition variables", "rwlock": "rwlocks"}


def no_kernel(ctx: Context) -> list[dict]:
    st = ctx.status
    if st["scheduling"]:
        return []
    return [finding("info", "no_kernel", "", "No kernel events",
                    f"This trace has application events only: {st['reason']}. Preemption, per-task CPU, context "
                    "switches, I/O and the OS-side findings are left out.", 0, group=NOTE)]


def lost(ctx: Context) -> list[dict]:
    # `lost` holds every loss, the kernel collector's included (kernel_lost is its per-CPU detail)
    if not db.row_count(ctx.con, "lost"):
        return []
    rows = ctx.con.execute(
        'SELECT CAST(source AS VARCHAR), CAST("where" AS VARCHAR), sum(count) FROM lost GROUP BY 1, 2').fetchall()
    rows.sort(key=lambda r: -(r[2] or 0))
    total = sum(int(n or 0) for _, _, n in rows)
    if not total:
        return []
    parts = "; ".join(f"{n} from {s} ({w})" for s, w, n in rows[:5])
    return [finding("warning", "lost", "", f"{total} records were lost",
                    f"The trace lost {total} records: {parts}. Figures that depend on them may be incomplete.",
                    total, group=CAVEAT)]


def crosscheck(ctx: Context) -> list[dict]:
    """The trace's counts disagree with the kernel's figures for the same run: name which."""
    table = ctx.tables.get("crosscheck") or crosscheck_mod.crosscheck(ctx.con)
    bad = [r for r in table.to_pylist() if not r["agrees"]]
    if not bad:
        return []
    names = ", ".join(r["count"] for r in bad)
    return [finding("warning", "crosscheck", names, f"The trace disagrees with the kernel on {names}",
                    f"Cross-check with the kernel's own figures for this run: {crosscheck_mod.summary_line(table)}. "
                    "Figures built on these counts may be incomplete (events lost or not traced).",
                    len(bad), group=CAVEAT)]


def _interferers(ctx: Context) -> list[dict]:
    """Tasks outside the program and oslens that preempted program threads, with what it cost."""
    cpu = {r["tid"]: r["cpu_ns"] for r in ctx.tasks}
    out = []
    for tid, n in ctx.preemptions.items():
        if tid <= 0 or tid in ctx.prog.tidset:
            continue
        kind, desc = ctx.classify(tid)
        if kind in ("oslens", "program"):
            continue
        pid, comm = ctx.task_names.get(tid, (None, None))
        stolen = ctx.holders.get(tid, 0)
        out.append({"tid": tid, "pid": pid, "comm": comm or "?", "kind": kind, "desc": desc, "n": n,
                    "stolen": stolen, "share": stolen / ctx.thread_ns, "cpu_ns": cpu.get(tid)})
    out.sort(key=lambda c: (-c["share"], -c["n"], c["tid"]))
    return out


def _cpu_used(c: dict) -> str:
    """The CPU an interferer used, or why it is not known: a task whose switches off the CPU were
    never recorded (one in another PID namespace, docs/report.md) has no slices of its own."""
    if c["cpu_ns"] is None:
        return "using CPU time the trace cannot tell (n/a: its switches off the CPU were not recorded)"
    return f"using {fmt(c['cpu_ns'])} of CPU on the program's CPUs ({fmt(c['cpu_ns'] / c['n'])} per preemption)"


def interference(ctx: Context) -> list[dict]:
    """A task that preempted program threads: named when the runnable time it cost them is at
    least MIN_SHARE, or when it preempted them often (the cost of a preemption is more than the
    CPU taken: a context switch and a cold cache)."""
    if not ctx.status["scheduling"]:
        return []
    out = []
    for c in _interferers(ctx):
        rate = c["n"] / ctx.seconds
        if c["n"] < 10 or (c["share"] < MIN_SHARE and rate < INTERFERENCE_RATE):
            continue
        if len(out) >= SHOWN_TASKS:
            break
        subject = f"{c['comm']} [{c['tid']}]"
        pid = c["pid"] if c["pid"] is not None and c["pid"] >= 0 else "?"
        unseen = c["cpu_ns"] is None
        out.append(finding(
            severity(c["share"]), "interference", subject,
            f"{c['comm']} (pid {pid}, {c['kind']}) preempted the program {c['n']} times"
            + ("" if unseen else f": {pct(c['share'])} of its thread time"),
            f"{subject} ({c['desc']}) preempted program threads {c['n']} times ({rate:.0f} per second) "
            f"{_cpu_used(c)}; each preemption also costs the program a context switch and its warm cache. "
            + ("The runnable time it cost them is counted with the tasks whose switches were not recorded."
               if unseen else f"Program threads spent {fmt(c['stolen'])} runnable waiting for CPUs it held "
               f"({pct(c['share'])} of their time)."),
            # named for its rate alone, it explains too little time to rank by: listed as a count
            c["n"], c["share"] if c["share"] >= MIN_SHARE else None))
    return out


def cpu_hog(ctx: Context) -> list[dict]:
    """A task outside the program and oslens that used HOG_CPU_SHARE of the program's CPUs while
    it ran (and was not already named for preempting it)."""
    if not ctx.status["scheduling"] or not ctx.prog.window or not ctx.prog.cpus:
        return []
    cap = ctx.wall_ns * len(ctx.prog.cpus)
    named = {f["subject"] for f in interference(ctx)}
    out = []
    for r in ctx.tasks:  # sorted by CPU time
        if r["kind"] in ("program", "idle", "unrecorded", "oslens") or not cap or r["cpu_ns"] / cap < HOG_CPU_SHARE:
            continue
        subject = f"{r['comm']} [{r['tid']}]"
        if subject in named or len(out) >= SHOWN_TASKS:
            continue
        share = ctx.holders.get(r["tid"], 0) / ctx.thread_ns
        out.append(finding(
            severity(share), "cpu_hog", subject, f"{r['comm']} used {pct(r['cpu_ns'] / cap)} of the program's CPUs",
            f"{subject} ({r['kind']}: {r['description']}) ran {fmt(r['cpu_ns'])} on the program's "
            f"{len(ctx.prog.cpus)} CPU(s) during its {fmt(ctx.wall_ns)} run, in {r['slices']} slices; program "
            f"threads spent {fmt(ctx.holders.get(r['tid'], 0))} runnable waiting for CPUs it held "
            f"({pct(share)} of their time).", r["cpu_ns"], share))
    return out


def preemption(ctx: Context) -> list[dict]:
    if not ctx.status["scheduling"]:
        return []
    pre = sum(r["preempted_ns"] for r in ctx.breakdown)
    share = pre / ctx.thread_ns
    if share < MIN_SHARE:
        return []
    ranked = sorted(ctx.holders.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    top = "; ".join(f"{ctx.label(tid)} {fmt(held)} ({ctx.preemptions.get(tid, 0)} preemptions)"
                    for tid, held in ranked) or "unknown tasks"
    return [finding(
        severity(share), "preemption", "", f"Program threads were runnable but off-CPU {pct(share)} of the time",
        f"Program threads spent {fmt(pre)} runnable waiting for a CPU out of {fmt(ctx.thread_ns)} of thread "
        f"time. The tasks that held their CPUs meanwhile: {top}.", pre, share)]


def wakeup_latency(ctx: Context) -> list[dict]:
    """Time from a thread's wakeup (sched_waking) to its joining a run queue (sched_wakeup):
    the wake-up's own cost (often an IPI to the target CPU), which no CPU holder explains."""
    if not ctx.status["scheduling"]:
        return []
    lat = sum(r.get("wakeup_latency_ns") or 0 for r in ctx.breakdown)
    share = lat / ctx.thread_ns
    if share < MIN_SHARE:
        return []
    n, mean, worst = ctx.con.execute(
        "SELECT count(*), avg(enqueue_ts_ns - ts), max(enqueue_ts_ns - ts) FROM wakeups "
        "WHERE enqueue_ts_ns IS NOT NULL AND tid IN (SELECT unnest(?::BIGINT[]))", [sorted(ctx.prog.tids)]).fetchone()
    return [finding(
        severity(share), "wakeup_latency", "", f"Program threads spent {pct(share)} of their time being woken up",
        f"{n} wakeup{'' if n == 1 else 's'} of program threads took {fmt(mean or 0)} on average (at most {fmt(worst or 0)}) from "
        f"sched_waking to sched_wakeup, {fmt(lat)} out of {fmt(ctx.thread_ns)} of thread time: the wake-up "
        "itself (often an inter-processor interrupt to the target CPU), not a wait for a CPU someone held.",
        lat, share)]


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


def _sync_objects(ctx: Context) -> dict[tuple[str, str], list[dict]]:
    """Objects worth a finding, by (code, kind): waited for at least MIN_SHARE of thread time
    (and 1 ms); 'sync_preempted' when at least half of the wait coincided with preemption."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in ctx.sync:
        if r["object"] == "(all)" or r["wait_total_ns"] < max(1_000_000, MIN_SHARE * ctx.thread_ns):
            continue
        code = "sync_preempted" if ctx.status["scheduling"] and r["preempted_share"] >= 0.5 else "sync_imbalance"
        groups.setdefault((code, r["kind"]), []).append(r)
    return groups


def _by_wait(r: dict):
    return (-r["wait_total_ns"], r["object"])


def _worst(objs: list[dict]) -> dict:
    return min(objs, key=_by_wait)


def _sync_preempted(ctx: Context, kind: str, objs: list[dict]) -> dict:
    worst = _worst(objs)
    total = sum(r["wait_total_ns"] for r in objs)
    share = total / ctx.thread_ns
    label = f"{kind} {worst['object']}"
    who = holders_mod.sync_preemptors(ctx.con, ctx.prog, worst["kind"], worst["object"])
    whos = ", ".join(f"{w} ({n}×)" for w, n in who) or "other program threads"
    detail = (f"{label} was waited for {_times(worst['count'])}, {fmt(worst['wait_total_ns'])} in all (mean "
              f"{fmt(worst['wait_mean_ns'])}); {pct(worst['preempted_share'])} of that wait coincided with program "
              f"threads being preempted, by {whos}.")
    if len(objs) == 1:
        title = f"Waits at {label} are dominated by preemption ({pct(share)} of thread time)"
        return finding(severity(share), "sync_preempted", label, title, detail, worst["preempted_share"], share)
    title = (f"{len(objs)} {PLURAL.get(kind, kind + 's')} are dominated by preemption: {fmt(total)} of waits, "
             f"{pct(share)} of thread time")
    others = ", ".join(r["object"] for r in sorted(objs, key=_by_wait)[1:4])
    text = (f"The worst, {detail} The others: {others}{', …' if len(objs) > 4 else ''} (the sync table lists "
            "them all). A wait that coincides with preemption is the scheduler's doing, not the program's.")
    return finding(severity(share), "sync_preempted", label, title, text, worst["preempted_share"], share)


def _sync_imbalance(ctx: Context, kind: str, objs: list[dict]) -> dict:
    worst = _worst(objs)
    total = sum(r["wait_total_ns"] for r in objs)
    share = total / ctx.thread_ns
    label = f"{kind} {worst['object']}"
    detail = (f"{label}: {worst['count']} waits, {fmt(worst['wait_total_ns'])} in all, mean "
              f"{fmt(worst['wait_mean_ns'])}, max {fmt(worst['wait_max_ns'])}; only {pct(worst['preempted_share'])} "
              "of it coincided with preemption, so the wait comes from the program (load imbalance, serial work or "
              "lock contention).")
    if len(objs) == 1:
        title = f"Threads spend {pct(share)} of their time waiting at {label}"
        return finding(severity(share), "sync_imbalance", label, title, detail, total, share)
    title = f"Threads spend {pct(share)} of their time waiting at {len(objs)} {PLURAL.get(kind, kind + 's')}"
    return finding(severity(share), "sync_imbalance", label, title, f"The worst is {detail}", total, share)


def sync(ctx: Context) -> list[dict]:
    """Waits at locks, barriers and condition variables, one finding per kind and cause (the
    worst object named), so a runtime's many condition variables make one line, not many."""
    out = []
    for (code, kind), objs in _sync_objects(ctx).items():
        out.append(_sync_preempted(ctx, kind, objs) if code == "sync_preempted" else _sync_imbalance(ctx, kind, objs))
    return out


def io_critical(ctx: Context) -> list[dict]:
    bdr = ctx.breakdown
    io_total = sum(r["io_wait_ns"] for r in bdr)
    share = io_total / ctx.thread_ns
    if io_total < 1_000_000 or share < MIN_SHARE:
        return []
    worst = max(bdr, key=lambda r: r["io_wait_ns"])
    s, e = states.timelines(ctx.con, ctx.prog)[worst["tid"]].intervals(states.IO_WAIT)
    region = holders_mod.innermost_region(ctx.con, worst["tid"], int(s[int(np.argmax(e - s))])) if len(s) else None
    where = f", mostly in region {region}" if region else ""
    return [finding(
        severity(share), "io_critical", region or worst["name"], f"The program waited {fmt(io_total)} for I/O",
        f"Program threads were blocked on I/O for {fmt(io_total)} ({pct(share)} of thread time); {worst['name']} "
        f"waited {fmt(worst['io_wait_ns'])}{where}. The trace holds {db.row_count(ctx.con, 'block_io')} block "
        "requests.", io_total, share)]


def migrations(ctx: Context) -> list[dict]:
    """Threads that changed CPU at least 10 times and 20 times a second: one finding, the worst named."""
    def rate(r):
        return r["migrations"] / max(r["wall_ns"] / 1e9, 1e-9)

    movers = [r for r in ctx.breakdown if r["migrations"] >= 10 and rate(r) >= 20]
    if not movers:
        return []
    worst = max(movers, key=lambda r: (r["migrations"], -r["tid"]))
    total = sum(r["migrations"] for r in movers)
    many = f"{len(movers)} threads migrated" if len(movers) > 1 else f"{worst['name']} migrated"
    return [finding(
        "info", "migrations", worst["name"], f"{many} between CPUs {total} times",
        f"{worst['name']} [{worst['tid']}] ran in {worst['cpu_slices']} slices and changed CPU {worst['migrations']} "
        f"times ({rate(worst):.0f} per second), losing its cache each time"
        + (f"; {len(movers) - 1} other thread(s) migrated often too." if len(movers) > 1 else "."),
        total)]


def page_faults(ctx: Context) -> list[dict]:
    nf = sum(r["faults"] for r in ctx.breakdown)
    if nf < 1000:
        return []
    worst = max(ctx.breakdown, key=lambda r: r["faults"])
    spent = sum(r["page_faults_ns"] for r in ctx.breakdown)
    share = spent / ctx.thread_ns if spent else None
    timed = f", {fmt(spent)} handling them ({pct(share)} of thread time)" if spent else ""
    return [finding(
        severity(share) if share else "info", "page_faults", worst["name"], f"{nf} page faults",
        f"Program threads took {nf} page faults ({nf / ctx.seconds:.0f} per second){timed}; {worst['name']} took "
        f"{worst['faults']}.", nf, share)]


def oslens_cost(ctx: Context) -> list[dict]:
    """What tracing cost the program: time in its own threads (instrumentation and recorder
    pauses) and runnable time while oslens's threads (recorder helper, collector, launcher)
    held its CPUs. An INFO at the end below OSLENS_LARGE_SHARE; a ranked WARNING above."""
    in_threads = sum(r["instrumentation_ns"] for r in ctx.breakdown)
    own = [t for t in ctx.holders if t > 0 and t not in ctx.prog.tidset and ctx.classify(t)[0] == "oslens"]
    held = sum(ctx.holders[t] for t in own)
    cpu = sum(r["cpu_ns"] for r in ctx.tasks if r["kind"] == "oslens")
    cost = in_threads + held
    if not cost and not cpu:
        return []
    share = cost / ctx.thread_ns
    large = share >= OSLENS_LARGE_SHARE
    advice = (" Record fewer events (coarser regions, --func-filter) or use --prepare-buffers for a less perturbed "
              "run." if large else "")
    return [finding(
        "warning" if large else "info", "oslens_cost", "oslens",
        f"Tracing cost the program an estimated {fmt(cost)} ({pct(share)} of thread time)",
        f"oslens's own activity: {fmt(in_threads)} inside the program's threads (recording events, recorder "
        f"pauses and closes), {fmt(held)} runnable while oslens's threads held their CPUs; oslens's threads used {fmt(cpu)} of "
        f"CPU on the program's CPUs. "
        + (f"It is ranked with the program's findings from {pct(OSLENS_LARGE_SHARE)} of thread time on." if large
           else f"It is listed last while below {pct(OSLENS_LARGE_SHARE)} of thread time.")
        + advice, cost, share, group=PROGRAM if large else OSLENS)]


RULES = [lost, crosscheck, no_kernel, interference, cpu_hog, preemption, wakeup_latency, sync, io_critical, migrations, page_faults, oslens_cost]
