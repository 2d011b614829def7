"""bench/compensation: instrumentation cost in vitro vs in vivo (Kohr et al. 1994, Table 1), and
how close the compensated run time comes to the uninstrumented one.

Prints JSON. What is measured, per program (water, and a region-dense program):

- in vitro (`oslens calibrate`, measured at the start of this run unless COMPENSATION_CALIBRATION
  names a stored one): the empty-loop cost of each record kind, weighted by the program's own mix
  of record kinds and region-name lengths, plus each record's share of CPU spent outside the call
  (the helper thread copying staged records to the trace file, unmapping at exit); and a labelled variant at the
  program's pace (calls in store-heavy context, outside share at that pace);
- in vivo, from rounds of four runs in rotated ABBA order: the program with and without
  instrumentation (OSLENS_TRACE unset: every call a no-op), and the same program doing no work
  (water --steps 0, dense 0 iterations) with and without. CPU time is the process's user + system
  (rusage): preemption by other load does not count. Differences are taken by
  COMPENSATION_ESTIMATOR: lower_quartile (default: each kind's lower quartile over the rounds, as the
  calibration's figures are; other load only adds time; 95% interval by bootstrap over rounds) or
  paired_median (the median of the per-round differences, the sign test's interval); the other
  estimator's in-vivo figure and verdict are printed beside:
    * in_vivo (Kohr's figure): (with - without) / events, net of the calibrated start-up;
    * in_vivo_marginal: ((with - without) - (with - without with no work)) / (events - events with
      no work): the program's own fixed cost (start-up, preload library, trace files) cancels,
      measured on the program rather than taken from the calibration;
    * split (programs run on one thread): the same marginal difference for the recording thread's
      CPU time, the other threads' (the helper thread) and exit's, from bench/compensation/
      cpu_split.c linked into the bench's copies of the programs;
- agreement: in vivo / in vitro with its interval and a verdict: met (within 20%), not met, or
  inconclusive when the interval of the ratio reaches past 1 +- 0.2 (`in_vivo.agreement`);
- compensated: the run time with instrumentation less what is charged (the calls, from the
  calibration; the recorder helper's CPU, as each run measured it (meta.json recorder_helpers);
  pauses; start-up), against the run without: the error and its interval; beside it the error
  with the calibration's outside share in place of the measured helper CPU;
- for the region-dense program, the in-trace check: the loop's thread CPU time (the program's own
  figure) less what the importer removed from the loop region, against the loop without;
- once, water_recording_thread_in_context: a copy of water that switches recording off and on by
  pairs of time steps in one process, so what its records cost the recording thread in water's
  own code is measured with the load, caches and helper shared by both kinds of step.

The calibration takes COMPENSATION_CAL_REPS (default 41) repetitions. Runs continue, round by
round, from COMPENSATION_RUNS_MIN (default 11) until the interval of the in-vivo figure is within +-COMPENSATION_CI_GOAL (default 0.1) of the in-vitro figure, or
COMPENSATION_RUNS_MAX rounds (default 41), or COMPENSATION_SECONDS (default 120) per program.

Targets (issue 6): in vivo within 20% of in vitro for each program; compensated within 2% of
uninstrumented on a program where raw instrumentation adds >= 10%.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "python"))

from oslens import calibrate, paths  # noqa: E402
from oslens.store import calibration  # noqa: E402
from oslens.calibrate import in_vivo  # noqa: E402

RUNS_MIN = int(os.environ.get("COMPENSATION_RUNS_MIN", os.environ.get("COMPENSATION_RUNS", "11")))
RUNS_MAX = max(RUNS_MIN, int(os.environ.get("COMPENSATION_RUNS_MAX", "41")))
CI_GOAL = float(os.environ.get("COMPENSATION_CI_GOAL", "0.1"))
SECONDS = float(os.environ.get("COMPENSATION_SECONDS", "120"))
WATER_SRC = ROOT / "workloads" / "water" / "water.c"
WATER_INPUT = ROOT / "workloads" / "water" / "water-input-64-12345.dat"
SPLIT_ENV = "COMPENSATION_CPU_SPLIT"
# the calibration's repetitions: its figures are lower quartiles over them, and a load that comes and
# goes spares more of 41 than of the 21 `oslens calibrate` takes
CAL_REPS = int(os.environ.get("COMPENSATION_CAL_REPS", "41"))
ESTIMATOR = os.environ.get("COMPENSATION_ESTIMATOR", "lower_quartile")


def build(out: Path, source: Path, std: str, *defines: str) -> Path:
    """The program with cpu_split.c linked in, flags as its own Makefile's (-O2, the installed header
    and liboslens: the inline fast path, when the header has one, is compiled in)."""
    subprocess.run(["gcc", "-O2", "-g", f"-std={std}", "-pthread", *defines, "-o", str(out), str(source), str(HERE / "cpu_split.c"),
                    f"-I{paths.include_dir()}", f"-L{paths.library_dir()}", f"-Wl,-rpath,{paths.library_dir()}",
                    "-loslens", "-lm", "-lpthread"], check=True)
    return out


@contextlib.contextmanager
def stdout_to(path: Path):
    sys.stdout.flush()
    saved = os.dup(1)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    null = os.open(os.devnull, os.O_WRONLY)
    saved_err = os.dup(2)
    try:
        os.dup2(fd, 1)
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 1)
        os.dup2(saved_err, 2)
        for f in (saved, saved_err, fd, null):
            os.close(f)


def loop_cpu(path: Path) -> int | None:
    for line in path.read_text().splitlines():
        if line.startswith("loop_cpu_ns"):
            return int(line.split()[1])
    return None


class Program:
    def __init__(self, name: str, full: list[str], empty: list[str], preload: bool, in_trace: bool, threads: int):
        self.name, self.full, self.empty = name, full, empty
        self.preload, self.in_trace, self.threads = preload, in_trace, threads


def _one(p: Program, which: str, instrumented: bool, workdir: Path) -> dict:
    command = p.full if which == "full" else p.empty
    split = workdir / "split.txt"
    split.unlink(missing_ok=True)
    out = workdir / f"out-{p.name}.txt"
    os.environ[SPLIT_ENV] = str(split)
    meta = None
    with stdout_to(out):
        if instrumented:
            trace = workdir / f"trace-{p.name}-{which}"
            options = {"force": True, "no_kernel": True, "preload": p.preload, "command": command}
            w, c, status, meta = in_vivo.run_with(trace, command, options, quiet=False)
        else:
            w, c, status = in_vivo.run_without(command, quiet=False)
    if status != 0:
        raise SystemExit(f"{p.name}: {' '.join(command)} exited {status}")
    run = {"cpu_s": c, "wall_s": w}
    if instrumented:
        run["helper_s"] = in_vivo.helper_cpu_s(meta)
    try:
        thread_ns, process_ns, thread_flt, process_flt = (int(x) for x in split.read_text().split()[:4])
        run.update({"thread_s": thread_ns / 1e9, "process_s": process_ns / 1e9,
                    "thread_minflt": thread_flt, "process_minflt": process_flt})
    except (OSError, ValueError):
        pass
    lc = loop_cpu(out)
    if lc is not None:
        run["loop_cpu_ns"] = lc
    if instrumented and which == "full" and p.in_trace and lc is not None:
        from oslens.store import import_trace, open_trace

        import_trace(workdir / f"trace-{p.name}-full", force=True, quiet=True)
        con = open_trace(workdir / f"trace-{p.name}-full", quiet=True)
        loop, loop_comp = con.execute("SELECT duration_ns, duration_comp_ns FROM regions "
                                      "WHERE name = 'dense-loop'").fetchone()
        con.close()
        run["loop_comp_ns"] = lc - (loop - loop_comp)
    return {"run": run, "meta": meta}


def _contrast(runs: dict, key: str, marginal: bool = True) -> dict:
    """(full with - full without) - (empty with - empty without) of one measure, or, with marginal
    False, (empty with - empty without): in_vivo.contrast with the bench's estimator."""
    g = {k: [r[key] for r in v] for k, v in runs.items()}
    if marginal:
        return in_vivo.contrast([g[("full", True)], g[("full", False)], g[("empty", True)], g[("empty", False)]],
                                [1, -1, -1, 1], ESTIMATOR)
    return in_vivo.contrast([g[("empty", True)], g[("empty", False)]], [1, -1], ESTIMATOR)


def _ns_per_event(c: dict, events: int) -> dict:
    return {"ns": _r(1e9 * c["estimate"] / events), "ci": [_r(1e9 * x / events) for x in c["ci"]]}


def _split(runs: dict, cal: dict, vitro_m: dict, extra: dict, d_events: int) -> dict:
    """The marginal in-vivo CPU per event by where it was spent (one-thread programs)."""
    for v in runs.values():
        for x in v:
            x["other_s"] = x["process_s"] - x["thread_s"]
            x["exit_s"] = x["cpu_s"] - x["process_s"]
    parts = {k: _ns_per_event(_contrast(runs, k), d_events) for k in ("thread_s", "other_s", "exit_s")}
    faults = {k: _contrast(runs, k)["estimate"] for k in ("thread_minflt", "process_minflt")}
    _, _, outside = calibration.outside_costs(cal)
    return {
        "what": "the marginal in-vivo CPU per event, by where it was spent: the recording thread (its calls, in "
                "the program's context), the other threads (the helper thread) and exit; in vitro beside each",
        "recording_thread": {**parts["thread_s"], "in_vitro_calls": _r(vitro_m["ns_per_event"]),
                             "in_vitro_calls_in_context": _r(vitro_m["paced_cost_ns"] / d_events)
                             if vitro_m.get("paced_cost_ns") is not None else None,
                             "minor_faults_per_1000_events": _r(1000 * faults["thread_minflt"] / d_events, 3)},
        "process_minor_faults_per_1000_events": _r(1000 * faults["process_minflt"] / d_events, 3),
        "other_threads": parts["other_s"],
        "exit": parts["exit_s"],
        "in_vitro_outside_per_event": _r(outside * sum(extra.values()) / d_events),
        "in_vitro_paced_outside_per_event": _r(vitro_m["paced_outside_ns"] / d_events)
        if vitro_m.get("paced_outside_ns") is not None else None,
    }


def _in_trace(runs: dict, full: dict) -> dict:
    """The loop's CPU time less what the importer removed from the loop region, against the
    loop without instrumentation."""
    loops = runs[("full", True)]
    q = (lambda v: float(np.quantile(list(v), in_vivo.QUARTILE))) if ESTIMATOR == "lower_quartile" else statistics.median
    t0 = q(x["loop_cpu_ns"] for x in runs[("full", False)])
    tr = q(x["loop_cpu_ns"] for x in loops)
    tc = q(x["loop_comp_ns"] for x in loops)
    loop_records = sum(n for k, n in full["counts"].items() if k in ("region_begin", "region_end", "event"))
    return {
        "what": "the loop's thread CPU time (the program's own figure) less what the importer removed "
                "from the loop region, against the loop without instrumentation",
        "uninstrumented_loop_ms": _r(t0 / 1e6, 3), "instrumented_loop_ms": _r(tr / 1e6, 3),
        "compensated_loop_ms": _r(tc / 1e6, 3),
        "measured_ns_per_record": _r((tr - t0) / max(1, loop_records)),
        "raw_overhead_pct": _r(100 * (tr - t0) / t0), "compensated_error_pct": _r(100 * (tc - t0) / t0),
    }


def analyse(p: Program, runs: dict, cal: dict, workdir: Path, metas: dict) -> dict:
    full = in_vivo.trace_profile(workdir / f"trace-{p.name}-full", metas["full"])
    empty = in_vivo.trace_profile(workdir / f"trace-{p.name}-empty", metas["empty"])
    r = in_vivo.analyse(runs[("full", True)], runs[("full", False)], full["counts"], full["pause_ns"], cal,
                        full["processes"], full, ESTIMATOR)
    cpu, wall = r["measures"]["cpu_s"], r["measures"]["wall_s"]
    events, events0 = r["events"], sum(n for k, n in empty["counts"].items() if k not in in_vivo.UNCHARGED)
    vitro = r["in_vitro"]
    # the marginal figure: the program's own fixed cost cancels; in vitro for the records the work adds
    extra = {k: full["counts"].get(k, 0) - empty["counts"].get(k, 0) for k in full["counts"]}
    vitro_m = in_vivo.in_vitro_cost(extra, cal, region_name_bytes=full["region_name_bytes"] - empty["region_name_bytes"],
                                    records_per_s=vitro.get("records_per_s"))
    d_events = events - events0
    marg_ns = _ns_per_event(_contrast(runs, "cpu_s"), d_events)
    agree_m = in_vivo.agreement(marg_ns["ns"], marg_ns["ci"], vitro_m["process_ns_per_event"])
    fixed = _contrast(runs, "cpu_s", marginal=False)
    result = {
        "program": p.name,
        "command": [Path(p.full[0]).name, *p.full[1:]],
        "threads": p.threads,
        "rounds": len(runs[("full", True)]),
        "events_per_run": events,
        "record_kinds": r["record_kinds"],
        "mean_region_name_bytes": _r(vitro.get("mean_region_name_bytes")),
        "preload": r["preload"],
        "in_vitro_call_ns_per_event": _r(vitro["ns_per_event"]),
        "in_vitro_ns_per_event": _r(vitro["process_ns_per_event"]),
        "in_vivo_ns_per_event": _r(cpu["in_vivo_net_ns_per_event"]),
        "in_vivo_ci_ns_per_event": [_r(x) for x in cpu["in_vivo_net_ci_ns_per_event"]],
        "in_vivo_gross_ns_per_event": _r(cpu["in_vivo_ns_per_event"]),
        "in_vivo_over_in_vitro": _r(cpu["agreement"]["ratio"], 3),
        "in_vivo_over_in_vitro_ci": [_r(x, 3) for x in cpu["agreement"]["ratio_ci"]],
        "agreement": cpu["agreement"]["verdict"],
        "estimator": ESTIMATOR,
        "paired_median": {
            "in_vivo_ns_per_event": _r((cpu.get("paired_median") or {}).get("in_vivo_net_ns_per_event")),
            "in_vivo_ci_ns_per_event": [_r(x) for x in (cpu.get("paired_median") or {}).get("in_vivo_net_ci_ns_per_event") or []],
            "agreement": ((cpu.get("paired_median") or {}).get("agreement") or {}).get("verdict"),
        },
        "records_per_cpu_s": _r(vitro.get("records_per_s"), 0),
        "paced_variant": {
            "what": "labelled in-vitro variant at this program's pace (records per CPU second): each call scaled by "
                    "what an event costs after store-heavy work at ~0.5 M events/s over the empty loop (calibration "
                    "`context`), each record's outside share as measured at that pace (`startup.paced`), both "
                    "interpolated in log(rate) between the calibration's paced and tight loops",
            "context_factor": _r(vitro.get("context_factor"), 3),
            "outside_ns_per_record": _r(vitro.get("paced_outside_ns_per_record")),
            "in_vitro_ns_per_event": _r(cpu.get("in_vitro_paced_ns_per_event")),
            "in_vivo_over_in_vitro": _r((cpu.get("agreement_paced") or {}).get("ratio"), 3),
            "in_vivo_over_in_vitro_ci": [_r(x, 3) for x in (cpu.get("agreement_paced") or {}).get("ratio_ci") or []],
            "agreement": (cpu.get("agreement_paced") or {}).get("verdict"),
            "compensated_error_pct": _r(cpu.get("compensated_paced_error_pct")),
        },
        "marginal": {
            "what": "((with - without) - (with - without doing no work)) / (events - events doing no work), "
                    "CPU; in vitro for the records the work adds",
            "events": d_events,
            "in_vitro_ns_per_event": _r(vitro_m["process_ns_per_event"]),
            "in_vivo_ns_per_event": marg_ns["ns"], "in_vivo_ci_ns_per_event": marg_ns["ci"],
            "in_vivo_over_in_vitro": _r(agree_m["ratio"], 3),
            "in_vivo_over_in_vitro_ci": [_r(x, 3) for x in agree_m["ratio_ci"]],
            "agreement": agree_m["verdict"],
            "in_vitro_paced_ns_per_event": _r(vitro_m.get("process_paced_ns_per_event")),
        },
        "fixed_cost": {
            "what": "CPU of the program doing no work, with - without (paired median), against the calibration's "
                    "start-up (with the preload library's when the run had it)",
            "in_vivo_ms": _r(1e3 * fixed["estimate"], 3), "in_vivo_ci_ms": [_r(1e3 * x, 3) for x in fixed["ci"]],
            "calibrated_ms": _r(1e3 * cpu["startup_s"], 3) if cpu["startup_s"] is not None else None,
            "events": events0,
        },
        "uninstrumented_cpu_s": _r(cpu["without_s"], 5),
        "instrumented_cpu_s": _r(cpu["with_s"], 5),
        "raw_overhead_pct": _r(cpu["overhead_pct"]),
        "compensated_cpu_s": _r(cpu.get("compensated_s"), 5),
        "compensated_error_pct": _r(cpu.get("compensated_error_pct")),
        "compensated_error_ci_pct": [_r(x) for x in cpu.get("compensated_error_ci_pct") or []],
        "helper_measured_ms": _r(1e3 * cpu["helper_measured_s"], 3) if cpu.get("helper_measured_s") is not None else None,
        "outside_calibrated_ms": _r(1e3 * cpu["outside_calibrated_s"], 3) if cpu.get("outside_calibrated_s") is not None else None,
        "compensated_calibrated_outside_error_pct": _r(cpu.get("compensated_calibrated_error_pct")),
        "wall": {k: _r(wall.get(k), 4) for k in ("without_s", "with_s", "overhead_pct", "in_vivo_net_ns_per_event",
                                                 "compensated_error_pct")},
    }
    if p.threads == 1 and all("thread_s" in x for v in runs.values() for x in v):
        result["split"] = _split(runs, cal, vitro_m, extra, d_events)
    loops = runs[("full", True)]
    if p.in_trace and all("loop_comp_ns" in x for x in loops):
        result["in_trace"] = _in_trace(runs, full)
    return result


def measure(p: Program, cal: dict, workdir: Path, progress) -> dict:
    kinds = [("full", True), ("full", False), ("empty", True), ("empty", False)]
    runs = {k: [] for k in kinds}
    metas = {}
    for which in ("full", "empty"):
        _one(p, which, False, workdir)  # warm-up: page cache, binaries
    t0 = time.monotonic()
    result = None
    for i in range(RUNS_MAX):
        order = kinds[i % 4:] + kinds[:i % 4]
        for k in (order if i % 2 == 0 else order[::-1]):
            got = _one(p, k[0], k[1], workdir)
            runs[k].append(got["run"])
            if got["meta"] is not None:
                metas[k[0]] = got["meta"]
        if i + 1 < RUNS_MIN:
            continue
        result = analyse(p, runs, cal, workdir, metas)
        ci, vitro = result["in_vivo_ci_ns_per_event"], result["in_vitro_ns_per_event"]
        half = (ci[1] - ci[0]) / 2 / vitro if vitro else float("inf")
        result["ci_halfwidth_of_in_vitro"] = _r(half, 3)
        progress(f"{p.name}: {i + 1} rounds, in vivo {result['in_vivo_ns_per_event']} {ci} ns/event, "
                 f"in vitro {vitro}")
        if half <= CI_GOAL or time.monotonic() - t0 > SECONDS:
            break
    result["seconds"] = _r(time.monotonic() - t0, 1)
    return result


STEP_LOOP = """    for (int step = 1; step <= nsteps; step++) {
        osl_region_begin("STEP");"""
STEP_END = """        osl_region_end("STEP");
    }
    osl_region_end("MDMAIN");"""


# The inline path's clock read (oslens.h) replaced by a constant: what water's records cost its
# thread without it. Every record of such a run has the same time: a diagnostic, not a trace.
NO_CLOCK_READ = "-D__builtin_ia32_rdtsc()=0x5eedull"


def build_toggle(out: Path, *defines: str) -> Path | None:
    """water with recording switched off and on by pairs of time steps (osl_disable/osl_enable) and
    each step's thread CPU time written to $COMPENSATION_STEPCPU: one process, so load, caches and
    the helper thread are shared by both kinds of step. None when water.c no longer has the
    lines the patch expects."""
    src = WATER_SRC.read_text()
    if STEP_LOOP not in src or STEP_END not in src:
        return None
    src = src.replace(STEP_LOOP, """    static unsigned long long stepcpu_[2][200000];
    int nstep_[2] = {0, 0};
    for (int step = 1; step <= nsteps; step++) {
        int on_ = (step / 2) % 2;
        if (on_) osl_enable(); else osl_disable();
        struct timespec c_;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c_);
        unsigned long long t_ = c_.tv_sec * 1000000000ull + c_.tv_nsec;
        osl_region_begin("STEP");""")
    src = src.replace(STEP_END, """        osl_region_end("STEP");
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c_);
        if (nstep_[on_] < 200000) stepcpu_[on_][nstep_[on_]++] = c_.tv_sec * 1000000000ull + c_.tv_nsec - t_;
    }
    osl_enable();
    if (getenv("COMPENSATION_STEPCPU")) {
        FILE *f_ = fopen(getenv("COMPENSATION_STEPCPU"), "w");
        for (int k_ = 0; f_ && k_ < 2; k_++) {
            for (int i_ = 0; i_ < nstep_[k_]; i_++) fprintf(f_, "%llu ", stepcpu_[k_][i_]);
            fprintf(f_, "\\n");
        }
        if (f_) fclose(f_);
    }
    osl_region_end("MDMAIN");""")
    patched = out.with_suffix(".c")
    patched.write_text(src)
    return build(out, patched, "gnu11", *defines)


def toggle_diagnostic(workdir: Path, cal: dict, progress, runs: int = 3, steps: int = 2000) -> dict | None:
    """What water's records cost its recording thread in water's own code: per pair of time steps
    recording on or off, thread CPU per step; (lower quartile on - lower quartile off) / records per
    recording step, with a bootstrap interval over steps, per run. Beside it the in-vitro calls for
    the same records, from the empty loop and in context (the variant's calls). And, run by run
    alternately, the same with the inline path's clock read (rdtsc) replaced by a constant: the
    share of a record's cost that is the clock read in water's code."""
    prog = build_toggle(workdir / "water-toggle")
    no_clock = build_toggle(workdir / "water-toggle-no-clock", NO_CLOCK_READ)
    if prog is None or no_clock is None:
        return None
    args = ["--threads", "1", "--molecules", "64", "--warm-input", "--quiet"]
    profiles, per_record = {}, {prog: [], no_clock: []}
    for which, n in (("empty", 0), ("full", steps)):
        trace = workdir / f"trace-toggle-{which}"
        stepfile = workdir / "stepcpu.txt"
        os.environ["COMPENSATION_STEPCPU"] = str(stepfile)
        for p in [prog, no_clock] * runs if which == "full" else [prog]:
            command = [str(p), "--steps", str(n), *args]
            with stdout_to(workdir / "out-toggle.txt"):
                _, _, status, meta = in_vivo.run_with(trace, command, {"force": True, "no_kernel": True, "preload": False,
                                                                       "command": command}, quiet=False)
            if status != 0:
                os.environ.pop("COMPENSATION_STEPCPU", None)
                return None
            if p == prog:
                profiles[which] = in_vivo.trace_profile(trace, meta)
            if which == "full":
                off, on = ([float(x) for x in line.split()] for line in stepfile.read_text().splitlines()[:2])
                per_record[p].append((np.array(off), np.array(on)))
        os.environ.pop("COMPENSATION_STEPCPU", None)
    events = {w: sum(n for k, n in p["counts"].items() if k not in in_vivo.UNCHARGED) for w, p in profiles.items()}
    recording_steps = len(per_record[prog][0][1])
    per_step = (events["full"] - events["empty"]) / recording_steps
    extra = {k: profiles["full"]["counts"].get(k, 0) - profiles["empty"]["counts"].get(k, 0) for k in profiles["full"]["counts"]}
    vitro = in_vivo.in_vitro_cost(extra, cal, region_name_bytes=profiles["full"]["region_name_bytes"]
                                  - profiles["empty"]["region_name_bytes"], records_per_s=0.47e6)
    def per_run(p):
        out = []
        for off, on in per_record[p]:
            c = in_vivo.contrast([on, off], [1, -1])  # lower quartiles, bootstrap over steps
            out.append({"ns_per_record": _r(c["estimate"] / per_step),
                        "ci": [_r(x / per_step) for x in c["ci"]], "steps_each_way": int(min(len(on), len(off)))})
        return out

    out_runs, no_clock_runs = per_run(prog), per_run(no_clock)
    progress(f"water, recording toggled per pair of steps: {[x['ns_per_record'] for x in out_runs]} ns per record, "
             f"{[x['ns_per_record'] for x in no_clock_runs]} without the clock read")
    return {
        "what": "water (1 thread, no preload) with recording switched off and on by pairs of time steps in one process; "
                "thread CPU per step, (lower quartile on - off) / records per recording step, bootstrap 95% interval "
                "over steps, one figure per run; in vitro beside: the same records' calls from the empty loop and in "
                "context (the variant's calls, at water's pace)",
        "records_per_recording_step": _r(per_step, 1),
        "runs": out_runs,
        "runs_without_clock_read": no_clock_runs,
        "in_vitro_calls_ns_per_record": _r(vitro["cost_ns"] / max(1, vitro["events"])),
        "in_vitro_calls_in_context_ns_per_record": _r(vitro["paced_cost_ns"] / max(1, vitro["events"])),
    }


def _r(v, digits=2):
    return None if v is None else round(float(v), digits)


def main() -> int:
    def progress(msg):
        print(f"bench/compensation: {msg}", file=sys.stderr, flush=True)

    cal_path = os.environ.get("COMPENSATION_CALIBRATION")
    with tempfile.TemporaryDirectory(prefix="oslens-bench-compensation-") as tmp:
        tmp = Path(tmp)
        if cal_path:
            cal = calibration.load(path=Path(cal_path))
        else:
            progress(f"calibrating (oslens calibrate, {CAL_REPS} repetitions)")
            cal = calibrate.measure(repetitions=CAL_REPS)
            cal["path"] = None
        os.environ["OSLENS_CALIBRATION"] = str(calibration.save(cal, tmp / "calibration.json"))
        dense = build(tmp / "dense", HERE / "dense.c", "gnu11")
        water = build(tmp / "water", WATER_SRC, "gnu11")
        w_args = ["--molecules", "64", "--warm-input", "--quiet"]
        if WATER_INPUT.exists():
            shutil.copy(WATER_INPUT, tmp / WATER_INPUT.name)  # beside the copy, where it looks by default
        programs = [
            Program("water", [str(water), "--threads", "1", "--steps", "500", *w_args],
                    [str(water), "--threads", "1", "--steps", "0", *w_args], True, False, 1),
            Program("water-2-threads", [str(water), "--threads", "2", "--steps", "500", *w_args],
                    [str(water), "--threads", "2", "--steps", "0", *w_args], True, False, 2),
            Program("dense-100", [str(dense), "500000", "100"], [str(dense), "0", "100"], False, True, 1),
            Program("dense-20", [str(dense), "500000", "20"], [str(dense), "0", "20"], False, True, 1),
        ]
        only = os.environ.get("COMPENSATION_PROGRAMS")
        if only:
            programs = [p for p in programs if p.name in only.split(",")]
        rows = [measure(p, cal, tmp, progress) for p in programs]
        toggle = toggle_diagnostic(tmp, cal, progress) if not only or "water" in only.split(",") else None
        os.environ.pop(SPLIT_ENV, None)
    target_rows = [r for r in rows if (r["raw_overhead_pct"] or 0) >= 10]
    result = {
        "benchmark": "compensation",
        "machine": cal.get("machine"),
        "liboslens": cal.get("liboslens"),
        "method": ("CPU time (rusage user + system); rounds of four runs (full and no-work, with and without "
                   f"instrumentation) in rotated ABBA order; differences by {ESTIMATOR} with 95% intervals; in vitro = "
                   "the empty-loop calibration weighted by the program's record kinds and region-name lengths, plus "
                   "each record's share outside the call"),
        "calibration": {k: cal["costs"][k]["ns"] for k in cal["costs"]},
        "calibration_ci": {k: [cal["costs"][k].get("ci_low"), cal["costs"][k].get("ci_high")] for k in cal["costs"]},
        "calibration_repetitions": cal.get("repetitions"),
        "calibration_region_name_ns_per_byte": (cal.get("region_name") or {}).get("ns_per_byte"),
        "calibration_context": {k: v for k, v in (cal.get("context") or {}).items() if k != "what"},
        "calibration_startup_cpu_ms": _r(cal["startup"]["cpu"]["ns"] / 1e6, 3),
        "calibration_startup_preload_cpu_ms": _r((cal["startup"].get("cpu_preload") or {}).get("ns", 0) / 1e6, 3),
        "calibration_per_record_outside_ns": cal["startup"]["per_record_outside"]["ns"],
        "calibration_paced": {k: (v["ns"] if isinstance(v, dict) else v)
                              for k, v in (cal["startup"].get("paced") or {}).items() if k != "what"},
        "rows": rows,
        "water_recording_thread_in_context": toggle,
        "targets": {
            "in_vivo_within_20pct_of_in_vitro": {
                r["program"]: {"met": r["in_vivo_over_in_vitro"] is not None and abs(r["in_vivo_over_in_vitro"] - 1) <= 0.2,
                               "verdict": r["agreement"], "paired_median": r["paired_median"]["agreement"],
                               "marginal": r["marginal"]["agreement"],
                               "paced_variant": r["paced_variant"]["agreement"]}
                for r in rows},
            "compensated_within_2pct_where_raw_adds_10pct": {
                r["program"]: (r["compensated_error_pct"] is not None and abs(r["compensated_error_pct"]) <= 2)
                for r in target_rows},
            "in_trace_compensated_within_2pct": {
                r["program"]: abs(r["in_trace"]["compensated_error_pct"]) <= 2
                for r in rows if "in_trace" in r and r["in_trace"]["raw_overhead_pct"] >= 10},
        },
    }
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
