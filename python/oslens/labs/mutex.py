"""Lab 8, the mutex fast path: how often does a pthread mutex enter the kernel? glibc's mutex
(nptl lowlevellock, the three-state futex mutex of Drepper's "Futexes Are Tricky") takes a free
lock with one atomic compare-and-swap in user space; only a thread that finds it taken calls
FUTEX_WAIT, after marking it "taken, with waiters" (2). Whoever unlocks a lock in state 2 calls
FUTEX_WAKE, and the woken waiter takes the lock in state 2 again (it cannot know whether others
wait), so its own unlock calls FUTEX_WAKE too: a contended acquisition costs about three futex
calls (one wait, two wakes), an uncontended one none. One thread never finds the lock taken;
two threads pinned to one CPU only when one is preempted inside the critical section (at most
once per context switch); two threads on two CPUs whenever they overlap.

The program (workloads/labs/mutex_ops) is recorded with the application recorder (its lock
acquisitions: found taken -> `sync` rows, found free -> counted in `lock_counts`) and the kernel
collector's syscalls (the `syscalls` table's futex calls of the worker threads)."""

from __future__ import annotations

import os
import sys

from oslens.errors import OslensError
from oslens.labs import runner
from oslens.labs.lab import Expectation, Lab, Question

OPS = {True: 300_000, False: 3_000_000}  # lock operations per thread
CASES = ("one", "two", "pinned")
FUTEX_PER_CONTENDED = 3  # FUTEX_WAIT of the waiter, FUTEX_WAKE of the holder and of the waiter at its unlock


def params(quick: bool, variant: str = "default") -> dict:
    cpus = sorted(os.sched_getaffinity(0))
    return {"ops": OPS[bool(quick)], "cpu": cpus[-1], "quick": bool(quick), "variant": variant}


def _argv(case: str, p: dict) -> list[str]:
    argv = [runner.program("mutex_ops"), "--threads", "1" if case == "one" else "2", "--ops", str(p["ops"])]
    # two: real-time workers, so that other programs on a busy machine cannot keep one of them off
    # its CPU (then the two would rarely overlap and the lock would rarely be found taken)
    return argv + (["--cpu", str(p["cpu"])] if case == "pinned" else ["--rr", "1"] if case == "two" else [])


def trace_counts(trace, pid: int, lock_addr: int) -> dict | None:
    """The worker threads' lock acquisitions (sync rows = found taken, lock_counts = found free)
    and futex calls, from an oslens recording. The main thread's own acquisitions (its timing of
    the loop before the workers start) are left out."""
    if trace is None or pid is None:
        return None
    from oslens import store

    try:
        con = store.open_trace(trace, quiet=True)
        contended = dict(con.execute("SELECT tid, count(*) FROM sync WHERE pid = ? AND kind = 'mutex' AND address = ? "
                                     "AND tid <> pid GROUP BY tid", [pid, lock_addr]).fetchall())
        free = dict(con.execute("SELECT tid, sum(count) FROM lock_counts WHERE pid = ? AND address = ? AND tid <> pid "
                                "GROUP BY tid", [pid, lock_addr]).fetchall())
        workers = sorted(set(contended) | set(free))
        futex = con.execute("SELECT count(*) FROM syscalls WHERE pid = ? AND name = 'futex' AND tid IN "
                            f"({','.join('?' * len(workers)) or 'NULL'})", [pid, *workers]).fetchone()[0]
        process_futex = con.execute("SELECT count(*) FROM syscalls WHERE pid = ? AND name = 'futex'", [pid]).fetchone()[0]
        handovers = _handovers(con, workers)
    except Exception as e:  # noqa: BLE001 - one unreadable trace leaves the program's own figures
        print(f"oslens: warning: the trace {trace} could not be read ({e})", file=sys.stderr)
        return None
    return {"workers": len(workers), "contended": int(sum(contended.values())), "free": int(sum(free.values())),
            "futex": int(futex), "process_futex": int(process_futex), "handovers": handovers}


def _handovers(con, workers: list[int]) -> int:
    """Times a worker was preempted (switched out runnable, 'R') and the next worker to run on
    that CPU was the other one: on one CPU the only moments the lock can be found taken."""
    if len(workers) < 2:
        return 0
    marks = ",".join("?" * len(workers))
    return int(con.execute(
        f"WITH ins AS (SELECT ts, cpu, next_tid AS tid FROM switches WHERE next_tid IN ({marks})), "
        f"outs AS (SELECT ts, cpu, prev_tid AS tid FROM switches WHERE prev_tid IN ({marks}) AND prev_state = 'R') "
        "SELECT count(*) FROM outs o ASOF JOIN ins i ON o.cpu = i.cpu AND i.ts >= o.ts WHERE i.tid <> o.tid",
        [*workers, *workers]).fetchone()[0])


def _case(ctx, case: str, p: dict) -> dict:
    res = ctx.run(_argv(case, p), case, events="syscalls,sched", preload=True, block_when_full=True)
    out = res.json()
    if res.status != 0:
        raise OslensError(f"mutex_ops ({case}) failed (exit {res.status}): {res.stderr.strip()[-200:]}", 1)
    counts = trace_counts(res.trace, res.pid, out["lock_addr"])
    if counts is None:
        raise OslensError(f"lab 8 needs the recording of {case}'s futex calls and locks; "
                                 f"see 'oslens lab preflight 8'", 1)
    out.update(counts)
    return out


def run(ctx, p: dict) -> dict:
    ctx.say(f"mutex_ops: each thread locks and unlocks one pthread mutex {p['ops']:,} times (100 increments inside, "
            f"20 outside); recorded with the application recorder (lock tables) and the kernel's syscalls")
    out = {}
    for case, what in (("one", "one thread"), ("two", "two threads on two CPUs (SCHED_RR priority 1, so both run at once)"),
                       ("pinned", f"two threads pinned to CPU {p['cpu']}")):
        ctx.say(f"  {what} ...")
        out[case] = _case(ctx, case, p)
    _observations(ctx, out)
    return _answers(out)


def _answers(out: dict) -> dict:
    one, two, pinned = out["one"], out["two"], out["pinned"]
    return {
        **out,
        "one_futex_per_op": one["futex"] / one["ops"],
        "two_futex_per_contended": two["futex"] / two["contended"] if two["contended"] else None,
        "pinned_contended_per_handover": pinned["contended"] / pinned["handovers"] if pinned["handovers"] else None,
        "cs_fraction": pinned["cs_fraction"],
    }


def _observations(ctx, out: dict) -> None:
    ctx.say("\nObservations (worker threads; acquisitions from the lock tables, futex calls from the syscalls table)")
    ctx.say(f"  {'case':<8}{'ops':>11}{'found free':>12}{'found taken':>13}{'futex':>8}{'futex/op':>10}"
            f"{'invol. sw':>11}{'handoffs':>10}")
    for case in CASES:
        r = out[case]
        ctx.say(f"  {case:<8}{r['ops']:>11,}{r['free']:>12,}{r['contended']:>13,}{r['futex']:>8,}"
                f"{r['futex'] / r['ops']:>10.5f}{r['nivcsw']:>11,}{r['handoffs']:>10,}")
    for case in ("two", "pinned"):
        r = out[case]
        if r["contended"]:
            ctx.say(f"  {case}: {r['futex'] / r['contended']:.2f} futex calls per acquisition that found the lock "
                    f"taken (model {FUTEX_PER_CONTENDED})")
    p = out["pinned"]
    ctx.say(f"  pinned: {p['contended']} acquisitions found the lock taken in {p['handovers']} preemptions that handed "
            f"the CPU to the other worker ({p['contended'] / max(p['handovers'], 1):.2f} each); the critical section "
            f"is {p['cs_fraction']:.0%} of the loop's time (model {handover_model(p['cs_fraction']):.2f})")
    two = out["two"]
    ctx.say(f"  two: {two['futex'] / two['ops']:.2f} futex calls per lock operation; the lock changed hands "
            f"{two['handoffs']:,} times")


def handover_model(h: float) -> float:
    """Contended acquisitions per worker-to-worker preemption on one CPU: a preemption inside the
    critical section (chance h) makes the other worker find the lock taken, and the wake-up that
    ends its wait hands the CPU over once more, outside the critical section: h / (1 + h)."""
    return h / (1 + h)


def expect(p: dict, results: dict | None) -> dict:
    r = (results or {}).get("results") or {}
    h = r.get("cs_fraction") or 0.85
    return {
        "one_futex_per_op": Expectation(0.0, 0.0, "one thread always finds the lock free: one compare-and-swap in "
                                        "user space, no system call", r.get("one_futex_per_op"), abs_band=0.001,
                                        widen=False),
        "two_futex_per_contended": Expectation(FUTEX_PER_CONTENDED, 0.5,
                                               "a waiter's FUTEX_WAIT, the holder's FUTEX_WAKE, and the waiter's own "
                                               "FUTEX_WAKE at its unlock (it took the lock as 'maybe waiters'); a "
                                               "woken waiter that finds the lock retaken waits again",
                                               r.get("two_futex_per_contended")),
        "pinned_contended_per_handover": Expectation(
            handover_model(h), 0.4, f"on one CPU the lock is found taken only after its holder was preempted inside "
            f"the critical section ({h:.0%} of the loop), and the waiter's wake-up hands the CPU over once more: "
            f"h / (1 + h)", r.get("pinned_contended_per_handover")),
    }


LAB = Lab(
    number=8, slug="mutex", title="The mutex fast path: futex calls per lock operation",
    topic="synchronisation, system calls", minutes=20, requires=("compiler", "collector", "two-cpus"),
    sheet="08-mutex.md",
    questions=[
        Question("one_futex_per_op", "futex calls per lock operation with one thread", "calls"),
        Question("two_futex_per_contended", "futex calls per acquisition that found the lock taken (two CPUs)", "calls"),
        Question("pinned_contended_per_handover", "acquisitions that found the lock taken per preemption that handed "
                 "the CPU from one worker to the other, two threads on one CPU"),
    ],
    predictions=("one_futex_per_op", "two_futex_per_contended"),
    run=run, expect=expect, params=params,
)
