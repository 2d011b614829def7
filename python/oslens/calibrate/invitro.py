"""In-vitro instrumentation cost (Kohr et al. 1994, section 5.1).

calib.c runs one loop N times empty and N times with one instrumentation point of each kind,
interleaved and repeated; C = (t_i - t_0) / N per repetition (t = CPU time of the thread, so
preemption by other load does not count), summarised by the median and its 95% order-statistic
interval over the repetitions (oslens.osbench.stats). The preload wrappers' cost per record is
measured the same way: a pthread_mutex_lock/unlock loop with and without liboslens_preload.so,
whose difference per iteration covers three records (request, acquire, release).
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from oslens import __version__, paths
from oslens.errors import OslensError
from oslens.osbench.stats import summarize

SOURCE = Path(__file__).resolve().parent / "calib.c"
SCHEMA = "oslens-calibration/1"

# What each measured kind is, and how many trace records one loop iteration writes.
KINDS = {
    "rdtsc": ("the TSC read the recorder's clock uses (one rdtsc)", 0),
    "clock_gettime": ("clock_gettime(CLOCK_MONOTONIC) through the vDSO (the fallback clock)", 0),
    "counter": ("osl_count(c, 1): an add; the value is recorded at most once per period", 0),
    "counter_record": ("osl_counter_record(c): one counter record", 1),
    "timer_start": ("osl_timer_start(t): one timer_start record", 1),
    "timer_stop": ("osl_timer_stop(t): one timer_stop record", 1),
    "event": ("osl_event(id, &x, 8): one event record, 8-byte payload", 1),
    "region_begin": ("osl_region_begin(name): one region_begin record", 1),
    "region_end": ("osl_region_end(name): one region_end record", 1),
    "raw": ("osl_record_raw(...): one record through the low-level entry (preload, function hooks)", 1),
    "off": ("osl_event(...) while recording is disabled: the cost of a no-op call", 0),
}
PRELOAD_KIND = ("preload_sync", "pthread_mutex_lock+unlock through liboslens_preload.so, per record (3 per iteration)", 3)

FULL = {"iterations": 50_000, "repetitions": 21}
QUICK = {"iterations": 20_000, "repetitions": 7}


def build(workdir: Path) -> Path:
    """Compiles calib.c against the installed liboslens; returns the program."""
    cc = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
    if not cc:
        raise OslensError("no C compiler found (gcc or cc): install one to run oslens calibrate", 1)
    lib = paths.liboslens()
    if not lib.is_file():
        raise OslensError(f"liboslens is not built ({lib} is missing): run make first", 1)
    out = workdir / "calib"
    cmd = [cc, "-O2", "-o", str(out), str(SOURCE), f"-I{paths.include_dir()}", f"-L{paths.library_dir()}",
           f"-Wl,-rpath,{paths.library_dir()}", "-loslens", "-lpthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise OslensError(f"cannot compile the calibration program: {proc.stderr.strip().splitlines()[-1:]}", 1)
    return out


def _scratch_root() -> str | None:
    """A memory-backed folder for the throwaway trace when there is one (nothing reaches a disk)."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _run(program: Path, iterations: int, reps: int, kinds: list[str], env_extra: dict, scratch: Path) -> dict:
    records = iterations * reps * len(kinds) + 1_000_000
    env = dict(os.environ)
    for k in ("OSLENS_LIMIT_EVENTS", "OSLENS_LIMIT_BYTES", "OSLENS_ON_FULL", "OSLENS_ENABLE", "LD_PRELOAD"):
        env.pop(k, None)
    env.update({"OSLENS_TRACE": str(scratch), "OSLENS_BUFFER_MB": str(records * 32 // (1 << 20) + 16)})
    env.update(env_extra)
    proc = subprocess.run([str(program), str(iterations), str(reps), ",".join(kinds)], capture_output=True,
                          text=True, env=env)
    if proc.returncode != 0:
        raise OslensError(f"the calibration program failed (exit {proc.returncode}): {proc.stderr.strip()[:200]}", 1)
    out: dict[str, list] = {k: [0] * reps for k in kinds}
    for line in proc.stdout.splitlines():
        kind, rep, ns = line.split()
        out[kind][int(rep)] = int(ns)
    return {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}


def _summary(per_iteration_ns: np.ndarray) -> dict:
    s = summarize(per_iteration_ns)
    return {"ns": round(s["median"], 3), "ci_low": round(s["ci_low"], 3), "ci_high": round(s["ci_high"], 3),
            "ci_coverage": s["ci_coverage"], "n": s["n"], "mean": round(s["mean"], 3)}


def machine() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"hostname": socket.gethostname(), "kernel": platform.release(), "cpus": os.cpu_count(), "cpu_model": model}


def _preload_env() -> dict | None:
    try:
        from oslens.capture import preload
    except ImportError:
        return None
    lib, rec = preload.preload_library(), preload.recorder_library()
    if lib is None or rec is None:
        return None
    return {"LD_PRELOAD": f"{rec}:{lib}"}


def measure(quick: bool = False, iterations: int | None = None, repetitions: int | None = None,
            progress=None) -> dict:
    """Measures every kind on this machine; returns the calibration (see docs/calibration.md)."""
    plan = QUICK if quick else FULL
    n = iterations or plan["iterations"]
    reps = repetitions or plan["repetitions"]
    t0 = time.time()
    kinds = ["empty", *KINDS]
    with tempfile.TemporaryDirectory(prefix="oslens-calibrate-") as tmp, \
            tempfile.TemporaryDirectory(prefix="oslens-calibrate-trace-", dir=_scratch_root()) as scratch:
        program = build(Path(tmp))
        if progress:
            progress("instrument kinds")
        t = _run(program, n, reps, kinds, {}, Path(scratch) / "main")
        preload_env = _preload_env()
        sync = None
        if preload_env:
            if progress:
                progress("preload wrappers")
            plain = _run(program, n, reps, ["empty", "mutex"], {}, Path(scratch) / "plain")
            wrapped = _run(program, n, reps, ["empty", "mutex"], preload_env, Path(scratch) / "preload")
            sync = ((wrapped["mutex"] - wrapped["empty"]) - (plain["mutex"] - plain["empty"])) / n / PRELOAD_KIND[2]
    costs = {}
    for kind, (what, records) in KINDS.items():
        c = _summary((t[kind] - t["empty"]) / n)
        c.update({"what": what, "records_per_call": records})
        costs[kind] = c
    if sync is not None:
        c = _summary(sync)
        c.update({"what": PRELOAD_KIND[1], "records_per_call": 1})
        costs[PRELOAD_KIND[0]] = c
    clock = "monotonic" if os.environ.get("OSLENS_CLOCK") == "monotonic" else "tsc"
    return {
        "schema": SCHEMA,
        "machine": machine(),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "oslens_version": __version__,
        "liboslens": str(paths.liboslens()),
        "recorder_clock": clock,
        "method": "in vitro: C = (t_kind - t_empty) / N per repetition, thread CPU time; median and 95% CI",
        "iterations": n,
        "repetitions": reps,
        "quick": bool(quick),
        "empty_loop_ns": _summary(t["empty"] / n),
        "costs": costs,
        "seconds": round(time.time() - t0, 2),
    }
