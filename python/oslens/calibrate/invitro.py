"""In-vitro instrumentation cost (Kohr et al. 1994, section 5.1).

calib.c runs one loop N times empty and N times with one instrumentation point of each kind,
interleaved and repeated; C = (t_i - t_0) / N per repetition (t = CPU time of the thread, so
preemption by other load does not count), summarised by the lower quartile over the repetitions
with its 95% order-statistic interval (the median, its interval and the mean beside it). The preload wrappers' cost per record is
measured the same way: a pthread_mutex_lock/unlock loop with and without the preloaded wrappers (liboslens.so),
whose difference per iteration covers three records (request, acquire, release).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from math import comb
from pathlib import Path

import numpy as np

from oslens import paths
from oslens.capture.session import machine_info, recorder_clock
from oslens.version import __version__
from oslens.errors import OslensError
from oslens.osbench.stats import summarize
from oslens.store.calibration import SCHEMA

SOURCE = Path(__file__).resolve().parent / "calib.c"

# What each measured kind is, and how many trace records one loop iteration writes.
KINDS = {
    "rdtsc": ("the TSC read the recorder's clock uses (one rdtsc)", 0),
    "clock_gettime": ("clock_gettime(CLOCK_MONOTONIC) through the vDSO (the fallback clock)", 0),
    "counter": ("osl_count(c, 1): an add; the value is recorded at most once per period", 0),
    "counter_record": ("osl_counter_record(c): one counter record", 1),
    "timer_start": ("osl_timer_start(t): one timer_start record", 1),
    "timer_stop": ("osl_timer_stop(t): one timer_stop record", 1),
    "event": ("osl_event(id, &x, 8): one event record, 8-byte payload", 1),
    "region_begin": ("osl_region_begin(name): one region_begin record (a 9-byte name)", 1),
    "region_end": ("osl_region_end(name): one region_end record (a 9-byte name)", 1),
    "region_name1": ("osl_region_begin(\"r\"): a region_begin record with a 1-byte name", 1),
    "region_name32": ("osl_region_begin(...): a region_begin record with a 32-byte name", 1),
    "raw": ("osl_record_raw(...): one record through the low-level entry (preload, function hooks)", 1),
    "off": ("osl_event(...) while recording is disabled: the cost of a no-op call", 0),
}
PRELOAD_KIND = ("preload_sync", "pthread_mutex_lock+unlock through the preloaded wrappers, per record (3 per iteration)", 3)

# region calls hash their name: the per-byte slope from the 1- and 32-byte names, anchored at the
# 9-byte name region_begin/region_end are measured with (in_vivo charges each trace's name lengths)
REGION_NAME_BYTES = {"region_begin": 9, "region_name1": 1, "region_name32": 32}

# The plans: loop iterations and repetitions of the in-call loops, iterations of the calls in
# context, and the whole-process runs of startup() (the slow part: each repetition starts ~14
# processes). The quick plan is what an import measures unasked when a machine has none, so it
# must take a few seconds: 11 cheap in-call repetitions still give a 95% interval (wider: the
# extreme repetitions); the start-up figures come from 6 repetitions of shorter runs.
# (lifetime_records: the long run per_record_outside is taken from; paced_records: calib.c
# paced_event, ~2 us of work per event; threads: calib.c thread, each recording one event).
FULL = {"iterations": 50_000, "repetitions": 21, "context_iterations": 50_000, "startup_repetitions": 9,
        "lifetime_records": 1_000_000, "paced_records": 150_000, "threads": 40}
QUICK = {"iterations": 20_000, "repetitions": 11, "context_iterations": 5_000, "startup_repetitions": 6,
         "lifetime_records": 250_000, "paced_records": 15_000, "threads": 10}


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


def prebuilt() -> Path:
    """Where calib.c is kept compiled: `make` builds it there (`build(prebuilt().parent)`,
    Makefile), an installed wheel on first use; the quick calibration an import runs then does
    not wait for the compiler (about a second of its few)."""
    return paths.library_dir() / "oslens" / "calib"


def calib_program(workdir: Path) -> Path:
    """The calibration program: the prebuilt one when it is newer than calib.c and liboslens,
    else compiled now, kept beside liboslens for the next time when that folder is writable
    (a wheel's first use), else into workdir."""
    try:
        built = prebuilt().stat().st_mtime
        if built >= max(SOURCE.stat().st_mtime, paths.liboslens().stat().st_mtime):
            return prebuilt()
    except OSError:
        pass
    try:
        prebuilt().parent.mkdir(parents=True, exist_ok=True)
        fresh = Path(tempfile.mkdtemp(prefix=".calib-", dir=prebuilt().parent))
    except OSError:
        return build(workdir)
    try:  # built aside and renamed, so that a concurrent import never runs a half-written program
        os.replace(build(fresh), prebuilt())
    finally:
        shutil.rmtree(fresh, ignore_errors=True)
    return prebuilt()


def _scratch_root() -> str | None:
    """Where the loops' throwaway trace goes: $OSLENS_CALIBRATE_DIR, else /dev/shm when there is
    one. The in-call figures are taken in memory, where nothing else (dirty-page throttling,
    block allocation) stalls a loop now and then; what the file system adds per record on a disk
    is measured separately, over whole runs with the trace in the temporary folder (startup())."""
    env = os.environ.get("OSLENS_CALIBRATE_DIR")
    if env:
        return env
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
    out.update({f"{k}@process": [0] * reps for k in kinds})
    for line in proc.stdout.splitlines():
        kind, rep, ns, pns = line.split()
        out[kind][int(rep)] = int(ns)
        out[f"{kind}@process"][int(rep)] = int(pns)
    return {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}


QUANTILE = 0.25  # the figure: interference (preemption, a lagging page helper, other load) only adds time


def quantile_ci(samples, p: float, level: float = 0.95) -> tuple[float, float, float]:
    """Distribution-free interval for the p-quantile from order statistics: the narrowest
    [x_(i), x_(j)] around rank p*n with P(i <= B < j) >= level, B ~ Bin(n, p). (low, high, coverage);
    with too few samples, the widest interval and its true, lower coverage."""
    x = np.sort(np.asarray(samples, dtype=float))
    n = len(x)
    pmf = np.array([comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)])
    best = (0, n - 1, float(pmf[1:n].sum()) if n > 1 else 0.0)  # [x_(1), x_(n)]: P(1 <= B < n)
    centre = int(round(p * n))
    found = None
    for width in range(1, n):
        for i in range(max(1, centre - width), min(centre, n - width) + 1):
            j = i + width  # 1-based ranks i < j
            if j > n:
                continue
            cov = float(pmf[i:j].sum())
            if cov >= level and (found is None or cov > found[2]):
                found = (i - 1, j - 1, cov)
        if found:
            break
    lo, hi, cov = found or best
    return float(x[lo]), float(x[hi]), cov


def _summary(per_iteration_ns: np.ndarray) -> dict:
    """ns: the lower quartile of the repetitions, with its 95% interval; the median (and its
    interval) and the mean beside it. Other work on the machine only ever adds time to a loop, and
    with enough of it half the repetitions are hit: the lower quartile estimates the call's own
    cost where the median would drift with the load."""
    s = summarize(per_iteration_ns)
    q = float(np.quantile(per_iteration_ns, QUANTILE))
    lo, hi, cov = quantile_ci(per_iteration_ns, QUANTILE)
    return {"ns": round(q, 3), "ci_low": round(min(lo, q), 3), "ci_high": round(max(hi, q), 3), "ci_coverage": round(cov, 4),
            "n": s["n"], "median": round(s["median"], 3), "median_ci": [round(s["ci_low"], 3), round(s["ci_high"], 3)],
            "mean": round(s["mean"], 3)}


def _preload_env() -> dict | None:
    from oslens.capture import preload

    lib, rec = preload.preload_library(), preload.recorder_library()
    if lib is None or rec is None:
        return None
    return {"LD_PRELOAD": f"{rec}:{lib}"}


def _timed(argv: list[str], env: dict, capture: bool = False):
    """(wall ns, CPU ns) of one run of argv, from its own rusage; with capture, its stdout third."""
    t0 = time.monotonic_ns()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, text=True)
    out = proc.stdout.read() if capture else None
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic_ns() - t0
    if proc.returncode != 0:
        raise OslensError(f"the calibration program failed (exit {proc.returncode}) measuring the recorder's start-up", 1)
    if capture:
        proc.stdout.close()
        return float(wall), (usage.ru_utime + usage.ru_stime) * 1e9, out
    return float(wall), (usage.ru_utime + usage.ru_stime) * 1e9


def _contrast_summary(columns, signs, scale: float = 1.0, digits: int = 1) -> dict:
    """in_vivo.contrast (lower quartiles, bootstrap interval over repetitions), scaled: ns, ci_low,
    ci_high, n."""
    from oslens.calibrate.in_vivo import contrast

    c = contrast(columns, signs, "lower_quartile")
    return {"ns": round(c["estimate"] * scale, digits), "ci_low": round(c["ci"][0] * scale, digits),
            "ci_high": round(c["ci"][1] * scale, digits), "n": c["n"], "estimator": "lower_quartile"}


def startup(program: Path, reps: int, workdir: Path, preload_env: dict | None = None, plan: dict = FULL) -> dict:
    """What recording costs a process besides its instrumentation calls, from whole-process CPU
    and wall time (rusage), traced against untraced runs, alternating:
      wall, cpu          the fixed cost: start-up and exit of a process that records one event
                         (trace files created, its thread's buffer set up, the helper thread
                         started, chunks closed);
      wall_preload, cpu_preload   the same with liboslens.so preloaded (its wrappers
                         on, its symbols resolved): what `oslens record --preload` adds to a
                         process that makes no synchronisation call;
      per_thread_cpu     what each further recording thread costs the process (its buffer set
                         up, its first window prepared, released when it exits);
      paced              the outside share per record at a program's pace (~2 us of work per event);
      lifetime_per_record_cpu   process CPU per record over a run of N events (the plan's
                         lifetime_records): (extra(N) - extra(0)) / records; measure() derives per_record_outside
                         from it (the share not spent in the call: page preparation, unmapping).
    The trace goes under the temporary folder, on a disk as a user's trace does."""
    base = dict(os.environ)
    for k in [k for k in base if k.startswith("OSLENS_") and k != "OSLENS_PREFIX"]:
        base.pop(k)
    base.pop("LD_PRELOAD", None)
    lifetime, paced_n, threads_n = plan["lifetime_records"], plan["paced_records"], plan["threads"]
    modes = ["traced", "untraced"] + (["preload"] if preload_env else [])
    samples = {(m, mode): ([], []) for m in (0, lifetime) for mode in modes}
    paced = {True: [], False: []}
    threads = {True: [], False: []}
    for r in range(reps):
        for m in (0, lifetime):
            # m = 0 still records one event: a process that records anything sets up its thread's
            # buffer, and that belongs to the fixed cost, not to the records
            argv = [str(program), str(max(m, 1)), "1", "event"]
            order = [x for x in modes if m == 0 or x != "preload"]
            for mode in (order if r % 2 == 0 else order[::-1]):
                if mode == "untraced":
                    w, c = _timed(argv, base)
                else:
                    trace = workdir / f"startup-{r}-{m}-{mode}"
                    env = dict(base, OSLENS_TRACE=str(trace), OSLENS_BUFFER_MB=str(m * 32 // (1 << 20) + 16))
                    if mode == "preload":
                        env.update(preload_env)
                    w, c = _timed(argv, env)
                    shutil.rmtree(trace, ignore_errors=True)
                samples[(m, mode)][0].append(w)
                samples[(m, mode)][1].append(c)
        argv = [str(program), str(paced_n), "1", "paced_event"]
        for traced in ((True, False) if r % 2 == 0 else (False, True)):
            env = base
            if traced:
                trace = workdir / f"startup-{r}-paced"
                env = dict(base, OSLENS_TRACE=str(trace), OSLENS_BUFFER_MB=str(paced_n * 32 // (1 << 20) + 16))
            w, c, text = _timed(argv, env, capture=True)
            if traced:
                shutil.rmtree(trace, ignore_errors=True)
            thread_ns = float(text.split()[2])
            paced[traced].append((c, thread_ns))
        argv = [str(program), str(threads_n), "1", "thread"]
        for traced in ((True, False) if r % 2 == 0 else (False, True)):
            env = base
            if traced:
                trace = workdir / f"startup-{r}-threads"
                env = dict(base, OSLENS_TRACE=str(trace))
            _, c, text = _timed(argv, env, capture=True)
            if traced:
                shutil.rmtree(trace, ignore_errors=True)
            threads[traced].append(float(text.split()[3]))  # the process's CPU over the loop
    out = {"what": "the recorder's fixed cost per process (start-up and exit with nothing recorded)",
           "method": ("whole runs, each kind taken by its lower quartile over the repetitions (other load only adds "
                      "time to a run), differences with a bootstrap 95% interval over repetitions")}
    col = lambda m, mode, i: np.array(samples[(m, mode)][i])  # noqa: E731
    for i, measure in enumerate(("wall", "cpu")):
        out[measure] = _contrast_summary([col(0, "traced", i), col(0, "untraced", i)], [1, -1])
        if preload_env:
            out[f"{measure}_preload"] = _contrast_summary([col(0, "preload", i), col(0, "untraced", i)], [1, -1])
    # CPU per record over the process's life: (extra with the long run's records - extra with none) / records
    # calib.c records min(N, 1000) warm-up events, then N: beyond the fixed-cost runs' 2
    records = lifetime + min(lifetime, 1000) - 2
    four = [col(lifetime, "traced", 1), col(lifetime, "untraced", 1), col(0, "traced", 1),
            col(0, "untraced", 1)]
    out["lifetime_per_record_cpu"] = {**_contrast_summary(four, [1, -1, -1, 1], 1 / records, 3), "records": records,
                                      "what": "process CPU per event over the process's life (call, page preparation, unmapping)"}
    # the same at a program's pace (~2 us of work between events): the call, measured on the loop's
    # thread, and what the process spends besides it (less the fixed cost), per record
    pc_t, pc_u = (np.array([x[0] for x in paced[t]]) for t in (True, False))
    pt_t, pt_u = (np.array([x[1] for x in paced[t]]) for t in (True, False))
    paced_records = paced_n + min(paced_n, 1000) - 2  # beyond the fixed-cost runs' own warm-up and event
    loop_s = float(np.median(pt_u)) / 1e9
    out["paced"] = {
        "records": paced_records,
        "records_per_s": round(paced_n / loop_s, 1) if loop_s > 0 else None,
        "call_ns": _contrast_summary([pt_t, pt_u], [1, -1], 1 / paced_n, 3),
        "outside_ns": _contrast_summary([pc_t, pc_u, col(0, "traced", 1), col(0, "untraced", 1), pt_t, pt_u],
                                        [1, -1, -1, 1, -1, 1], 1 / paced_records, 3),
        "what": ("calib.c paced_event: an event after every ~2 us of integer work; call_ns: the recording thread's CPU "
                 "per event, less the no-op call (in its context: the call overlaps the work); outside_ns: the rest of "
                 "the process's CPU per record, less the fixed cost (the helper thread woken every few staging slots, "
                 "unmapping at exit), which at this pace differs from the tight loop's per_record_outside"),
    }
    # each further recording thread: its buffer created, its first window prepared, released at exit
    out["per_thread_cpu"] = {**_contrast_summary([np.array(threads[True]), np.array(threads[False])], [1, -1],
                                                 1 / threads_n),
                             "threads": threads_n,
                             "what": ("process CPU per recording thread beyond the first: a thread created that records "
                                      "one event and exits, traced against untraced (the default buffer size)")}
    return out


STAGES = 5  # the steps measure() names to its progress callable (the preload one only with the library)


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
        if progress:
            progress("the calibration program")
        program = calib_program(Path(tmp))
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
        if progress:
            progress("calls in context")
        # an event after ~2 us of work that stores as it goes (calib.c paced_store_*): its cost on the
        # recording thread there, against the empty loop's, for the in-vivo context variant
        # (on the temporary folder's file system, where a program's trace goes, as for the start-up)
        n_ctx = min(n, plan["context_iterations"])
        ctx = _run(program, n_ctx, reps, ["paced_store_empty", "paced_store_event"], {}, Path(tmp) / "context")
        if progress:
            progress("recorder start-up")
        # the full plan's start-up runs as many repetitions as the loops (at least its own)
        startup_reps = plan["startup_repetitions"] if quick else max(reps, plan["startup_repetitions"])
        fixed = startup(program, startup_reps, Path(tmp), preload_env, plan)
    costs = {}
    machine = machine_info()
    life = fixed["lifetime_per_record_cpu"]
    # the untraced lifetime runs still call osl_event, as no-ops: their cost is in neither side
    event_call = _summary((t["event"] - t["empty"]) / n)["ns"] - _summary((t["off"] - t["empty"]) / n)["ns"]
    fixed["per_record_outside"] = {
        "ns": round(max(life["ns"] - event_call, 0.0), 3),
        "what": ("process CPU per record spent outside the call: the helper thread copying staged records to the trace file "
                 "and their unmapping at thread exit (lifetime_per_record_cpu - (event - off) in-call cost); "
                 "it does not delay the recording thread's timestamps"),
    }

    for kind, (what, records) in KINDS.items():
        c = _summary((t[kind] - t["empty"]) / n)
        c.update({"what": what, "records_per_call": records})
        costs[kind] = c
    # ns per byte of a region's name, per repetition: (32-byte name - 1-byte name) / 31
    slope = (t["region_name32"] - t["region_name1"]) / n / (REGION_NAME_BYTES["region_name32"] - REGION_NAME_BYTES["region_name1"])
    sl = summarize(slope)
    region_name = {
        "ns_per_byte": round(float(sl["median"]), 4),
        "ci_low": round(float(sl["ci_low"]), 4), "ci_high": round(float(sl["ci_high"]), 4),
        "anchor_bytes": REGION_NAME_BYTES["region_begin"],
        "what": ("a region call hashes its name: region_begin and region_end are measured with a 9-byte name, "
                 "a record whose name has L bytes costs (L - 9) * ns_per_byte more; the median over the repetitions "
                 "of (region_name32 - region_name1) / 31"),
    }
    if sync is not None:
        c = _summary(sync)
        c.update({"what": PRELOAD_KIND[1], "records_per_call": 1})
        costs[PRELOAD_KIND[0]] = c
    c = summarize((ctx["paced_store_event"] - ctx["paced_store_empty"]) / n_ctx)
    # the median: the effect itself varies from run to run (where the helper ran, what is cached)
    context = {"ns": round(c["median"], 3), "ci_low": round(c["ci_low"], 3), "ci_high": round(c["ci_high"], 3),
               "ci_coverage": c["ci_coverage"], "n": c["n"], "mean": round(c["mean"], 3)}
    context.update({
        "iterations": n_ctx,
        "records_per_s": round(1e9 * n_ctx / float(np.median(ctx["paced_store_empty"])), 1),
        "over_event": round(context["ns"] / costs["event"]["ns"], 3) if costs["event"]["ns"] > 0 else None,
        "what": ("osl_event after ~2 us of integer work that stores each step to a 4 KB array (calib.c paced_store_*): "
                 "the recording thread's CPU per event (median over the repetitions) in code that keeps the store "
                 "buffer busy, at ~0.5 M events/s, the trace on the temporary folder's file system; "
                 "over_event: against the empty loop's event figure (the in-vivo context variant scales every call by "
                 "it, at the run's pace)"),
    })
    return {
        "schema": SCHEMA,
        "machine": machine,  # with recorder_clock, what a trace is checked against (store.calibration.refusal)
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "oslens_version": __version__,
        "liboslens": str(paths.liboslens()),
        "recorder_clock": recorder_clock(machine),
        "method": ("in vitro: C = (t_kind - t_empty) / N per repetition, CPU time of the recording thread; "
                   "ns = lower quartile over the repetitions, with its 95% order-statistic interval"),
        "trace_folder": _scratch_root() or tempfile.gettempdir(),
        "iterations": n,
        "repetitions": reps,
        "quick": bool(quick),
        "empty_loop_ns": _summary(t["empty"] / n),
        "costs": costs,
        "region_name": region_name,
        "context": context,
        "startup": fixed,
        "seconds": round(time.time() - t0, 2),
    }
