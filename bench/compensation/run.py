"""bench/compensation: instrumentation cost in vitro vs in vivo (Kohr et al. 1994, Table 1), and
how close the compensated run time comes to the uninstrumented one.

Prints JSON. For each program: the number of events per run; the in-vitro cost per event for its
mix of record kinds (`oslens calibrate`, measured at the start of this run unless
COMPENSATION_CALIBRATION names a stored one); the in-vivo cost per event (median CPU time of N
instrumented runs minus median of N runs with OSLENS_TRACE unset, alternating, divided by the
events; net of the recorder's per-process start-up); their ratio; the raw overhead; and the
error of the compensated run time against the uninstrumented one. CPU time (user + system of the
process, rusage) is the primary measure because the machine may carry other load; wall time is
reported beside it. For the region-dense program the in-trace compensation is checked too: the
loop's CPU time as the program measured it, less what the importer removed from the loop region
(duration_ns - duration_comp_ns), against the loop's CPU time without instrumentation.

Targets (issue 6): in vivo within 20% of in vitro; compensated within 2% of uninstrumented on a
program where raw instrumentation adds >= 10%.

Environment: COMPENSATION_RUNS (default 7), COMPENSATION_CALIBRATION (a stored calibration).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "python"))

from oslens import calibrate, paths  # noqa: E402
from oslens.calibrate import in_vivo  # noqa: E402

RUNS = int(os.environ.get("COMPENSATION_RUNS", "7"))
WATER = ROOT / "workloads" / "water" / "water"


def build_dense(out: Path) -> Path:
    subprocess.run(["gcc", "-O2", "-o", str(out), str(HERE / "dense.c"), f"-I{paths.include_dir()}",
                    f"-L{paths.library_dir()}", f"-Wl,-rpath,{paths.library_dir()}", "-loslens", "-lpthread"],
                   check=True)
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


def measure(name: str, command: list[str], cal: dict, workdir: Path, preload: bool, in_trace: bool) -> dict:
    options = {"force": True, "no_kernel": True, "preload": preload, "command": command}
    trace = workdir / f"trace-{name}"
    out = workdir / f"out-{name}.txt"
    with_runs, without_runs, loops_with, loops_without, loops_comp = [], [], [], [], []
    with stdout_to(out):
        in_vivo.run_without(command, quiet=False)  # warm-up
    meta = None
    for i in range(RUNS):
        for instrumented in ((True, False) if i % 2 == 0 else (False, True)):
            with stdout_to(out):
                if instrumented:
                    w, c, status, meta = in_vivo.run_with(trace, command, options, quiet=False)
                else:
                    w, c, status = in_vivo.run_without(command, quiet=False)
            if status != 0:
                raise SystemExit(f"{name}: exit {status}")
            lc = loop_cpu(out)
            if instrumented:
                with_runs.append({"wall_s": w, "cpu_s": c})
                if in_trace and lc is not None:
                    from oslens.store import import_trace, open_trace

                    import_trace(trace, force=True, quiet=True)
                    con = open_trace(trace, quiet=True)
                    loop, loop_comp = con.execute("SELECT duration_ns, duration_comp_ns FROM regions "
                                                  "WHERE name = 'dense-loop'").fetchone()
                    con.close()
                    loops_with.append(lc)
                    loops_comp.append(lc - (loop - loop_comp))
            else:
                without_runs.append({"wall_s": w, "cpu_s": c})
                if lc is not None:
                    loops_without.append(lc)
    counts, pause_ns, processes = in_vivo.trace_counts(trace, meta)
    r = in_vivo.analyse(with_runs, without_runs, counts, pause_ns, cal, processes)
    cpu, wall = r["measures"]["cpu_s"], r["measures"]["wall_s"]
    result = {
        "program": name,
        "command": [Path(command[0]).name, *command[1:]],
        "runs_each_way": RUNS,
        "events_per_run": r["events"],
        "record_kinds": r["record_kinds"],
        "in_vitro_call_ns_per_event": _r(cpu.get("in_vitro_ns_per_event")),
        "in_vitro_ns_per_event": _r(cpu.get("in_vitro_process_ns_per_event")),
        "in_vivo_ns_per_event": _r(cpu["in_vivo_net_ns_per_event"]),
        "in_vivo_gross_ns_per_event": _r(cpu["in_vivo_ns_per_event"]),
        "in_vivo_ci_ns_per_event": [_r(x) for x in (cpu["in_vivo_net_ci_ns_per_event"] or [])],
        "in_vivo_over_in_vitro": _r(cpu.get("in_vivo_over_in_vitro"), 3),
        "uninstrumented_cpu_s": _r(cpu["without_s"], 5),
        "instrumented_cpu_s": _r(cpu["with_s"], 5),
        "raw_overhead_pct": _r(cpu["overhead_pct"]),
        "compensated_cpu_s": _r(cpu.get("compensated_s"), 5),
        "compensated_error_pct": _r(cpu.get("compensated_error_pct")),
        "wall": {k: _r(wall.get(k), 4) for k in ("without_s", "with_s", "overhead_pct", "in_vivo_net_ns_per_event",
                                                 "compensated_error_pct")},
    }
    if loops_with:
        t0, tr, tc = (statistics.median(x) for x in (loops_without, loops_with, loops_comp))
        # the run without instrumentation still makes every call, as a no-op; in dense's loop they hide
        # in the work's dependency chain (the uninstrumented loop takes what WORK multiply-adds take,
        # ~1.35 ns each here), so the loop to match is the uninstrumented one as measured
        result["in_trace"] = {
            "what": "the loop's thread CPU time (the program's own figure) less what the importer removed "
                    "from the loop region, against the loop without instrumentation",
            "uninstrumented_loop_ms": _r(t0 / 1e6, 3), "instrumented_loop_ms": _r(tr / 1e6, 3),
            "compensated_loop_ms": _r(tc / 1e6, 3),
            "measured_ns_per_record": _r((tr - t0) / max(1, sum(n for k, n in counts.items()
                                                                 if k in ("region_begin", "region_end", "event")))),
            "raw_overhead_pct": _r(100 * (tr - t0) / t0), "compensated_error_pct": _r(100 * (tc - t0) / t0),
        }
    return result


def _r(v, digits=2):
    return None if v is None else round(float(v), digits)


def main() -> int:
    cal_path = os.environ.get("COMPENSATION_CALIBRATION")
    with tempfile.TemporaryDirectory(prefix="oslens-bench-compensation-") as tmp:
        tmp = Path(tmp)
        if cal_path:
            cal = calibrate.load(path=Path(cal_path))
        else:
            cal = calibrate.measure()
            cal["path"] = None
        os.environ["OSLENS_CALIBRATION"] = str(calibrate.save(cal, tmp / "calibration.json"))
        dense = build_dense(tmp / "dense")
        programs = []
        if WATER.exists():
            programs.append(("water", [str(WATER), "--threads", "1", "--steps", "500", "--molecules", "64"], True, False))
        programs += [
            ("dense-100", [str(dense), "500000", "100"], False, True),
            ("dense-20", [str(dense), "500000", "20"], False, True),
        ]
        rows = [measure(name, cmd, cal, tmp, preload, in_trace) for name, cmd, preload, in_trace in programs]
    target_rows = [r for r in rows if (r["raw_overhead_pct"] or 0) >= 10]
    result = {
        "benchmark": "compensation",
        "machine": cal.get("machine"),
        "calibration": {k: cal["costs"][k]["ns"] for k in cal["costs"]},
        "calibration_startup_cpu_ms": _r(cal["startup"]["cpu"]["ns"] / 1e6, 3),
        "calibration_per_record_outside_ns": cal["startup"]["per_record_outside"]["ns"],
        "rows": rows,
        "targets": {
            "in_vivo_within_20pct_of_in_vitro": {
                r["program"]: (r["in_vivo_over_in_vitro"] is not None and abs(r["in_vivo_over_in_vitro"] - 1) <= 0.2)
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
