"""`oslens whatif --validate -- CMD`: run CMD under the Linux policies of this machine, predict
each run from the default run's trace, and report how far each prediction was from what the
run recorded. SCHED_RR's time slice is a global sysctl: it is journaled (oslens.control.journal)
before it is changed and restored after the run, on SIGINT/SIGTERM/SIGHUP, and after a crash by
the next run (journal.recover)."""

from __future__ import annotations

import copy
import json
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from oslens.errors import OslensError
from oslens.progress import Progress

RR_SYSCTL = Path("/proc/sys/kernel/sched_rr_timeslice_ms")


@dataclass(frozen=True)
class Case:
    label: str
    cls: str  # scheduling class of the program
    predict: str  # the policy spec that models it
    prio: int = 0
    nice: int = 0
    slice_ns: int = 0
    cpus: str = "-"
    rr_ms: int | None = None  # kernel.sched_rr_timeslice_ms for the run


CASES = [
    Case("default (SCHED_OTHER, EEVDF)", "other", "default"),
    Case("SCHED_BATCH", "batch", "batch"),
    Case("long slice (sched_runtime 20 ms)", "other", "eevdf:slice=20ms", slice_ns=20_000_000),
    # time slices no other oslens tool or test sets (osbench: 4, 20; control tests: 7-11), so that a
    # value left behind says who left it
    Case("SCHED_RR, sched_rr_timeslice_ms=6", "rr", "sched_rr:q=6ms", prio=10, rr_ms=6),
    Case("SCHED_RR, sched_rr_timeslice_ms=30", "rr", "sched_rr:q=30ms", prio=10, rr_ms=30),
    Case("SCHED_FIFO pinned to CPU 0", "fifo", "sched_fifo:cpus=0", prio=10, cpus="0"),
    Case("nice 10", "other", "default:nice=10", nice=10),
]
QUICK = [CASES[0], CASES[3]]


def _say(text: str) -> None:
    print(f"oslens: whatif: {text}", file=sys.stderr, flush=True)


def _record(case: Case, command: list[str], trace: Path, system_wide: bool = False) -> None:
    launcher = [sys.executable, "-I", "-S", str(Path(__file__).with_name("launch.py")), case.cls, str(case.prio),
                str(case.nice), str(case.slice_ns), case.cpus, "--"]
    wide = ["--system-wide"] if system_wide else []
    argv = [sys.executable, "-m", "oslens.cli", "record", "-f", *wide, "-o", str(trace), "--", *launcher, *command]
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, text=True)
        try:
            code = proc.wait()
        except BaseException:  # interrupted: let `oslens record` stop its program and collector itself
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise
        if code != 0:
            err.seek(0)
            last = (err.read().strip().splitlines() or ["(no message)"])[-1]
            raise OslensError(f"the run under {case.label} failed (exit {code}): {last}", 1)


def _run_case(case: Case, command: list[str], trace: Path, system_wide: bool = False) -> None:
    from oslens.control import journal
    from oslens.signals import signals_as_exceptions

    if case.rr_ms is None:
        _record(case, command, trace, system_wide)
        return
    from oslens.signals import Interrupted

    jr = journal.Journal(command=command)
    try:
        with signals_as_exceptions():
            try:
                _set_when_free(jr, case.rr_ms)
                _record(case, command, trace, system_wide)
            finally:
                for line in jr.restore():
                    print(f"oslens: warning: {line}", file=sys.stderr)
    except Interrupted as sig:
        raise OslensError(f"interrupted by {sig}; kernel.sched_rr_timeslice_ms was restored", 128 + sig.signum) from None


def _warm_up(command: list[str]) -> None:
    """Runs CMD once, unrecorded. The default run comes first and was the only one to read the
    program's files from disk: sysbench's main thread waited 12-20 ms in D (execve, openat, read)
    in the default runs and 0.1-8 ms in the others, and the model replays the default run's
    waits in every prediction (docs/whatif.md "What stays off")."""
    try:
        subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError as err:
        raise OslensError(f"cannot run {command[0]}: {err.strerror}", 127) from None


def _set_when_free(jr, value: int, wait_s: float = 120.0) -> None:
    """Set the RR time slice, waiting while another oslens run (tune, a test) holds it journaled."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            jr.set_file(RR_SYSCTL, str(value), "kernel.sched_rr_timeslice_ms")
            return
        except OslensError as err:
            if "already changed by another" not in str(err) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def policy_start(con) -> int | None:
    """When the policy under test took effect: the launcher's sched_setattr (launch.py), the first
    one of the process `oslens record` started. Before it the launcher (a Python start-up, 15-100 ms
    of CPU, more waiting on a loaded host) runs in the default class in every run; counting it made
    the real-time runs' recorded time long by that wait, which their prediction from the default
    run cannot know (docs/whatif.md "Validation"). None without system-call records."""
    from oslens.analysis import db, program

    tid = program.launched_tid(con)
    if tid is None or not db.row_count(con, "syscalls"):
        return None
    row = con.execute("SELECT min(start_ns) FROM syscalls WHERE tid = ? AND name = 'sched_setattr'", [tid]).fetchone()
    return int(row[0]) if row and row[0] is not None else None


def _error(pred, rec):
    if pred is None or not rec:
        return None
    return (pred - rec) / rec


def run(command: list[str], quick: bool, out_dir: str | None, bench: str | None, json_out: str | None,
        replicates: int = 4) -> int:
    import os

    from oslens.control import journal

    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise OslensError("no program given: use 'oslens whatif --validate [--quick] -- PROGRAM ARGS'", 2)
    if os.geteuid() != 0:
        raise OslensError("--validate changes scheduling classes and kernel.sched_rr_timeslice_ms: run it as root", 2)
    for line in journal.recover()[0]:
        _say(line)
    base = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="oslens-whatif-"))
    cases = QUICK if quick else CASES
    runs, walls = [], []
    with Progress("whatif --validate", total=1 + 2 * len(cases)) as bar:
        _say("one unrecorded run first, so that the default run does not alone find the page cache cold")
        bar.step("a warm-up run")
        _warm_up(command)
        for n, case in enumerate(cases):
            trace = base / f"run{n}"
            _say(f"running under {case.label} -> {trace}")
            bar.step(f"running under {case.label}")
            t0 = time.monotonic()
            # every run keeps every task's switches: the other tasks are then replayed one by one
            # (extract.others), and each run's own load can stand in for the default run's (below)
            _run_case(case, command, trace, system_wide=True)
            runs.append((case, trace))
            walls.append(round(time.monotonic() - t0, 2))
        mach, fit, rows = evaluate(runs, bench, replicates, step=bar.step)
    for row, wall in zip(rows, walls):
        row["wall_s"] = wall
    doc = {"schema": "oslens.whatif.validate/1", "command": command, "quick": quick, "machine": mach,
           "background_fit": fit, "runs": rows}
    if json_out:
        text = json.dumps(doc, indent=1)
        if json_out == "-":
            print(text)
            return 0
        Path(json_out).write_text(text + "\n")
    print(_text(doc))
    return 0


def evaluate(runs: list[tuple[Case, Path]], bench: str | None = None, replicates: int = 4,
             from_policy: bool = True, step=None) -> tuple[dict, dict, list[dict]]:
    """Predicts every recorded run from the first (the default run's) trace; per run the recorded
    and predicted figures and the errors. from_policy: each run's clock starts at the launcher's
    sched_setattr (policy_start), else at the process's start. step(what): told as each run starts."""
    from oslens import store
    from oslens.analysis import program
    from oslens.whatif import background, extract, machine, predict, spec as specmod

    rows = []
    wl = mach = first = fit = k = None
    for n, (case, trace) in enumerate(runs):
        if step:
            step(f"predicting {case.label}")
        con = store.open_trace(trace)
        since = policy_start(con) if from_policy else None
        got = extract.workload(con, since_ns=since)
        rec = predict.recorded(got)
        started = min(program.program(con).start.values())
        if wl is None:  # the default run: every prediction starts from it
            mach = machine.observed_tick(machine.defaults(got.ncpus, bench), got.preempted_ends)
            k, fit = background.fit(got, mach)
            wl, first = background.competitors(got, k), got
        pred = predict.run_policy(wl, specmod.parse(case.predict), mach, replicates)
        # the same program under this run's own other tasks: the policy model's error without the
        # load's change between runs (the host is shared; docs/whatif.md "Validation")
        own_wl = copy.copy(first)
        own_wl.others, own_wl.background = got.others, got.background
        own = pred if n == 0 else predict.run_policy(background.competitors(own_wl, k), specmod.parse(case.predict),
                                                     mach, 0)
        rows.append({"case": case.label, "policy": case.predict, "trace": str(trace),
                     # the launcher's time before the policy took effect, left out of every figure
                     "launcher_ns": since - started if since is not None else None,
                     "recorded": {"makespan_ns": rec["makespan_ns"], "switches": rec["switches"]},
                     "predicted": {"makespan_ns": pred["makespan_ns"], "makespan_bounds": pred["makespan_bounds"],
                                   "switches": pred["switches"], "switches_bounds": pred["switches_bounds"]},
                     "error": {"makespan": _error(pred["makespan_ns"], rec["makespan_ns"]),
                               "switches": _error(pred["switches"], rec["switches"])},
                     "within_bounds": {"makespan": _within(pred["makespan_bounds"], rec["makespan_ns"]),
                                       "switches": _within(pred["switches_bounds"], rec["switches"])},
                     "own_load": {"makespan_ns": own["makespan_ns"], "switches": own["switches"],
                                  "error": {"makespan": _error(own["makespan_ns"], rec["makespan_ns"]),
                                            "switches": _error(own["switches"], rec["switches"])}}})
    return mach, fit, rows


def _within(bounds, value) -> bool | None:
    if not bounds:
        return None
    return bounds[0] <= value <= bounds[1]


def _pct(x) -> str:
    return "-" if x is None else f"{x * 100:+.0f}%"


def _ms(ns) -> str:
    return "-" if ns is None else f"{ns / 1e6:.0f}"


def _text(doc: dict) -> str:
    lines = [f"whatif validation: {' '.join(doc['command'])}  (each run predicted from the default run's trace; "
             "makespan in ms, from the launcher's sched_setattr: its start-up before it, 'launcher', is left out)",
             f"  {'run':<36} {'policy':<20} {'makespan rec/pred':>22} {'err':>6} {'switches rec/pred':>20} {'err':>6}"
             "   own load: err makespan, switches   launcher ms"]
    for r in doc["runs"]:
        rec, pred, err = r["recorded"], r["predicted"], r["error"]
        own = (r.get("own_load") or {}).get("error") or {}
        lines.append(f"  {r['case']:<36} {r['policy']:<20} "
                     f"{rec['makespan_ns'] / 1e6:>10.1f} / {pred['makespan_ns'] / 1e6:<9.1f} {_pct(err['makespan']):>6} "
                     f"{rec['switches']:>9} / {pred['switches']:<8} {_pct(err['switches']):>6}"
                     f"   {_pct(own.get('makespan')):>6} {_pct(own.get('switches')):>6}"
                     f"   {_ms(r.get('launcher_ns')):>6}")
    return "\n".join(lines)
