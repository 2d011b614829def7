"""In-vivo instrumentation cost (Kohr et al. 1994, section 5.2): `oslens record --in-vivo N`.

The program runs N times with recording on and N times with it off (OSLENS_TRACE unset, so every
oslens call is a no-op), alternating (ABBA order) after one untimed warm-up run. The cost per
event is (median time with - median time without) / events, for the process tree's CPU time
(user + system of the waited-for children; other load on the machine does not inflate it) and
for wall time. Next to it: the in-vitro figure for the same mix of record kinds (the stored
calibration), and the compensated run time (time with, minus what the calibration says the
recorded events cost, minus the recorder's pauses) against the time without.

The kernel collector is not started (its cost is not instrumentation of the program); the
auto-instrumentation preload follows the record options. The last instrumented run's trace is
kept (and imported unless --no-import); `in-vivo.json` in it holds the figures.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from oslens import calibrate
from oslens.capture import raw
from oslens.errors import OslensError

UNCHARGED = {"name", "cont", "clock_pair", "pause", "adapt", "unknown"}


@contextlib.contextmanager
def _quiet_fds(enabled: bool):
    """Sends fds 1 and 2 to /dev/null (the program's output, N times over) while enabled."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def uninstrumented_env() -> dict:
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("OSLENS_") and k not in ("OSLENS_PREFIX",):
            env.pop(k)
    return env


def run_without(command: list[str], quiet: bool) -> tuple[float, float, int]:
    """(wall s, CPU s, exit status) of one run with every oslens call a no-op, launched the way
    `oslens record` launches (a held fork, then exec), so both sides pay the same launch cost."""
    from oslens.capture.session import HeldChild

    with _quiet_fds(quiet):
        c0, t0 = _children_cpu(), time.monotonic()
        child = HeldChild(command, uninstrumented_env())
        child.release()
        status = child.wait()
        wall = time.monotonic() - t0
        cpu = _children_cpu() - c0
    return wall, cpu, status


def run_with(trace: Path, command: list[str], options: dict, quiet: bool) -> tuple[float, float, int, dict]:
    from oslens.capture.session import Session

    session = Session(trace, command, options)
    session.prepare()
    with _quiet_fds(quiet):
        c0, t0 = _children_cpu(), time.monotonic()
        status = session.run()
        wall = time.monotonic() - t0
        cpu = _children_cpu() - c0
    meta = session.finish()
    return wall, cpu, status, meta


def trace_counts(trace: Path, meta: dict | None = None) -> tuple[dict[str, int], float, int]:
    """({record kind name: count} over the trace's application threads, pause ns, processes)."""
    from oslens import _native

    chunks = raw.read_chunks(trace)
    meta = meta if meta is not None else raw.read_meta(trace)
    counts = np.zeros(256, dtype=np.int64)
    pause_ns = 0.0
    pids = set()
    clock = raw.clock_for(chunks, meta)
    for c in chunks:
        h = c.header
        if h is None or h["source"] != raw.SOURCE_APP_THREAD or h["tid"] == 0 or len(c.records) == 0:
            continue
        pids.add(h["pid"])
        k = c.records["kind"]
        counts += np.bincount(k, minlength=256)
        p = c.records["a"][k == raw.PAUSE]
        if len(p):
            pause_ns += float(clock.ticks_to_ns(p).sum()) if h["clock"] == raw.CLOCK_TSC else float(p.sum())
    return {_native.kind_name(i): int(n) for i, n in enumerate(counts.tolist()) if n}, pause_ns, len(pids)


def in_vitro_cost(counts: dict[str, int], cal: dict | None, baseline_noop: bool = True) -> dict | None:
    """What the calibration says the recorded events cost: in the calls (total, per event, 95%
    bounds), and in the whole process (plus the per-record share spent outside the calls).
    baseline_noop: the run without instrumentation still makes the API calls, as no-ops (the
    `off` figure), so they are charged less that; the preload wrappers are absent altogether."""
    if not cal:
        return None
    per = calibrate.record_costs(cal)
    _, _, outside = calibrate.outside_costs(cal)
    off = max(float((cal["costs"].get("off") or {}).get("ns", 0.0)), 0.0) if baseline_noop else 0.0
    events = total = low = high = 0.0
    uncharged = {}
    for kind, n in counts.items():
        if kind in UNCHARGED:
            continue
        events += n
        if kind in per:
            ns, lo, hi, _ = per[kind]
            if kind not in calibrate.SYNC_RECORD_KINDS:
                ns, lo, hi = max(ns - off, 0.0), max(lo - off, 0.0), max(hi - off, 0.0)
            total += n * ns
            low += n * lo
            high += n * hi
        else:
            uncharged[kind] = n
    records = sum(counts.values())
    return {"events": int(events), "cost_ns": total, "cost_low_ns": low, "cost_high_ns": high,
            "ns_per_event": total / events if events else None,
            "outside_ns": records * outside, "noop_call_ns_subtracted": off,
            "process_ns_per_event": (total + records * outside) / events if events else None,
            "uncharged": uncharged}


def _boot_diff(a, b, resamples=4000, seed=1994):
    """Percentile-bootstrap 95% interval of median(a) - median(b)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    rng = np.random.default_rng(seed)
    da = np.median(a[rng.integers(0, len(a), (resamples, len(a)))], axis=1)
    db = np.median(b[rng.integers(0, len(b), (resamples, len(b)))], axis=1)
    lo, hi = np.quantile(da - db, [0.025, 0.975])
    return float(lo), float(hi)


def analyse(with_runs: list[dict], without_runs: list[dict], counts: dict, pause_ns: float, cal: dict | None,
            processes: int = 1) -> dict:
    """In-vivo cost per event against the in-vitro prediction, for CPU and wall time.

    in_vivo_ns_per_event      (median with - median without) / events (Kohr's figure)
    in_vivo_net_ns_per_event  the same less the recorder's start-up per process
    in_vitro_ns_per_event     the calls' cost per event (the loop figures, this run's kind mix)
    in_vitro_process_ns_per_event  plus the per-record share spent outside the calls
    compensated_s             median with - (calls + outside share + pauses + start-up)
    """
    vitro = in_vitro_cost(counts, cal)
    startup_cpu, startup_wall, _ = calibrate.outside_costs(cal)
    events = sum(n for k, n in counts.items() if k not in UNCHARGED)
    out = {"events": events, "records": sum(counts.values()), "processes": processes, "record_kinds": counts,
           "pause_ns": pause_ns, "in_vitro": vitro, "measures": {}}
    for measure in ("cpu_s", "wall_s"):
        fixed_s = processes * (startup_cpu if measure == "cpu_s" else startup_wall) / 1e9 if cal else None
        w = [r[measure] for r in with_runs]
        wo = [r[measure] for r in without_runs]
        mw, mwo = statistics.median(w), statistics.median(wo)
        lo, hi = _boot_diff(w, wo) if len(w) > 1 and len(wo) > 1 else (mw - mwo, mw - mwo)
        m = {
            "with_s": mw, "without_s": mwo, "overhead_s": mw - mwo, "overhead_ci_s": [lo, hi],
            "overhead_pct": 100.0 * (mw - mwo) / mwo if mwo > 0 else None,
            "in_vivo_ns_per_event": 1e9 * (mw - mwo) / events if events else None,
            "in_vivo_ci_ns_per_event": [1e9 * lo / events, 1e9 * hi / events] if events else None,
            "startup_s": fixed_s,
            "in_vivo_net_ns_per_event": 1e9 * (mw - mwo - fixed_s) / events if events and fixed_s is not None else None,
            "in_vivo_net_ci_ns_per_event": ([1e9 * (lo - fixed_s) / events, 1e9 * (hi - fixed_s) / events]
                                            if events and fixed_s is not None else None),
        }
        if vitro and vitro["ns_per_event"]:
            m["in_vitro_ns_per_event"] = vitro["ns_per_event"]
            m["in_vitro_process_ns_per_event"] = vitro["process_ns_per_event"]
            m["in_vivo_over_in_vitro"] = m["in_vivo_net_ns_per_event"] / vitro["process_ns_per_event"]
            comp = mw - (vitro["cost_ns"] + vitro["outside_ns"] + pause_ns) / 1e9 - (fixed_s or 0.0)
            m["compensated_s"] = comp
            m["compensated_error_pct"] = 100.0 * (comp - mwo) / mwo if mwo > 0 else None
        out["measures"][measure] = m
    return out


def run_in_vivo(args) -> int:
    from oslens.capture.session import default_trace_dir

    n = int(args.in_vivo)
    if n < 1:
        raise OslensError("--in-vivo needs a number of runs of at least 1", 2)
    command = args.command
    if not command:
        raise OslensError("no program given: use 'oslens record --in-vivo N -- PROGRAM ARGS'", 2)
    trace = Path(args.output) if args.output else default_trace_dir(command)
    options = {
        "force": args.force, "no_kernel": True, "buffer_mb": args.buffer_mb, "on_full": args.on_full,
        "limit_events": args.limit_events, "limit_bytes": args.limit_bytes, "disabled": args.disabled or None,
        "counter_period_us": args.counter_period_us, "preload": args.preload, "trace_python": args.trace_python,
        "command": command,
    }
    for name in ("func_filter", "func_min_ns"):  # auto-instrumentation options, where record has them
        if getattr(args, name, None) is not None:
            options[name] = getattr(args, name)
    host_cal = calibrate.load()
    quiet = True
    print(f"oslens: in vivo: {n} runs with and {n} without instrumentation, alternating "
          "(kernel events off; the program's output is discarded)", file=sys.stderr)
    wall, cpu, status = run_without(command, quiet)  # warm-up: caches, page cache, binaries
    if status != 0:
        raise OslensError(f"{command[0]} exited {status} without instrumentation; in-vivo runs need a program "
                          "that succeeds", 1)
    with_runs, without_runs, meta = [], [], None
    for i in range(n):
        for instrumented in ((True, False) if i % 2 == 0 else (False, True)):
            if instrumented:
                w, c, status, meta = run_with(trace, command, options, quiet)
                options["force"] = True
                with_runs.append({"wall_s": w, "cpu_s": c, "records": sum(t["records"] for t in meta["threads"])})
            else:
                w, c, status = run_without(command, quiet)
                without_runs.append({"wall_s": w, "cpu_s": c})
            if status != 0:
                raise OslensError(f"{command[0]} exited {status} in in-vivo run {i + 1}; stopping", 1)
    counts, pause_ns, processes = trace_counts(trace, meta)
    records = [r["records"] for r in with_runs]
    result = analyse(with_runs, without_runs, counts, pause_ns, host_cal, processes)
    result.update({"command": command, "runs": n, "with": with_runs, "without": without_runs,
                   "records_per_run": records, "deterministic_event_count": len(set(records)) == 1,
                   "calibration": host_cal.get("path") if host_cal else None, "trace": str(trace)})
    (trace / "in-vivo.json").write_text(json.dumps(result, indent=2) + "\n")
    _print(result)
    if not args.no_import:
        from oslens import store

        store.import_trace(trace, quiet=True)
    return 0


def _fmt(v, spec=".1f", unit=""):
    return "-" if v is None else f"{v:{spec}}{unit}"


def _print(r: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    v = r["in_vitro"]
    table = Table(title=f"instrumentation cost in vivo: {' '.join(r['command'])}",
                  caption=f"{r['runs']} runs each way, medians; {r['events']:,} events per run"
                          + ("" if r["deterministic_event_count"] else " (the count varied between runs)")
                          + "; ns per event net of the recorder's start-up, 95% CI")
    table.add_column("measure")
    table.add_column("without", justify="right")
    table.add_column("with", justify="right")
    table.add_column("overhead", justify="right")
    table.add_column("in vivo ns/event", justify="right")
    table.add_column("in vitro ns/event", justify="right")
    table.add_column("compensated", justify="right")
    for name, m in r["measures"].items():
        ci = m.get("in_vivo_net_ci_ns_per_event")
        vivo = _fmt(m["in_vivo_net_ns_per_event"])
        if ci:
            vivo += f" [{ci[0]:.1f}, {ci[1]:.1f}]"
        comp = m.get("compensated_s")
        table.add_row(
            "CPU" if name == "cpu_s" else "wall", f"{m['without_s']:.4f} s", f"{m['with_s']:.4f} s",
            _fmt(m["overhead_pct"], "+.1f", "%"), vivo, _fmt(m.get("in_vitro_process_ns_per_event")),
            "-" if comp is None else f"{comp:.4f} s ({m['compensated_error_pct']:+.1f}%)")
    console = Console(stderr=True)
    console.print(table)
    if not v:
        console.print("no calibration on this machine: run 'oslens calibrate' for the in-vitro figure and compensation")
    else:
        console.print(f"in vitro: {v['ns_per_event']:.1f} ns per event in the calls, "
                      f"{v['process_ns_per_event']:.1f} with each record's share outside them; "
                      "wall time also waits for other load and the prefault helper")
        if v["uncharged"]:
            console.print(f"not charged (no in-vitro figure): {v['uncharged']}")
    console.print(f"figures in {Path(r['trace']) / 'in-vivo.json'}")
