"""Runs the C benchmark programs: repetitions, warm-up, adaptive repetition counts, fresh scratch
directories, kernel settings changed and restored, children never left behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from oslens import paths
from oslens.errors import OslensError

from . import noise, settings, stats
from .registry import Benchmark

PREEMPT_SHARE = 0.005  # a repetition counts as preempted when it waited >0.5% of its time for the CPU
PROGRAMS = ("calls", "timeslice", "ctx", "fault", "malloc", "file", "copy", "proc")


@dataclass(frozen=True)
class Config:
    quick: bool
    reps: int          # repetitions of the first batch
    warmup: int        # unmeasured repetitions before them
    target_ms: float   # length of one repetition (the C harness calibrates the operation count)
    max_reps: int      # the most repetitions the adaptive loop may reach
    goal: float        # stop when the 95% interval of the median is within +-goal of it
    budget_s: float    # ... or when this benchmark has used this much time
    timeslice_ms: float  # length of one time-slice run (two hogs on one CPU)


QUICK = Config(quick=True, reps=7, warmup=1, target_ms=2, max_reps=7, goal=1.0, budget_s=4, timeslice_ms=60)
FULL = Config(quick=False, reps=11, warmup=2, target_ms=10, max_reps=41, goal=0.02, budget_s=6, timeslice_ms=200)


def programs_dir() -> Path:
    """Where the osb_* programs are: $OSLENS_OSBENCH_DIR, the checkout's osbench/build, or the
    prefix's libexec/oslens/osbench."""
    candidates = []
    if os.environ.get("OSLENS_OSBENCH_DIR"):
        candidates.append(Path(os.environ["OSLENS_OSBENCH_DIR"]))
    candidates += [paths.REPO_ROOT / "osbench" / "build", paths.prefix() / "libexec" / "oslens" / "osbench"]
    for c in candidates:
        if all(os.access(c / f"osb_{p}", os.X_OK) for p in PROGRAMS):
            return c
    raise OslensError("the benchmark programs (osb_*) are not built; run 'make' at the top of the oslens checkout", 2)


def remove_stale_scratch(base: Path) -> None:
    """Remove scratch directories left by runs that were killed (their pid no longer exists)."""
    for d in base.glob("oslens-bench-*-*"):
        try:
            pid = int(d.name.split("-")[2])
        except (IndexError, ValueError):
            continue
        if pid == os.getpid() or not d.is_dir() or d.stat().st_uid != os.geteuid():
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except PermissionError:
            pass


class Runner:
    def __init__(self, config: Config, scratch_root: str | None = None, progress=None):
        self.config = config
        self.bindir = programs_dir()
        self.progress = progress or (lambda text: None)
        self._child: subprocess.Popen | None = None
        self._own_scratch = scratch_root is None
        base = scratch_root or os.environ.get("OSLENS_BENCH_DIR") or "/var/tmp"
        try:
            Path(base).mkdir(parents=True, exist_ok=True)
            remove_stale_scratch(Path(base))
            self.scratch = Path(tempfile.mkdtemp(prefix=f"oslens-bench-{os.getpid()}-", dir=base))
        except OSError as err:
            raise OslensError(f"cannot create a scratch directory under {base}: {err.strerror}; "
                              "give a writable directory with --dir", 2)

    # -- cleanup ---------------------------------------------------------------------------
    def close(self) -> None:
        self._kill_child()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def _kill_child(self) -> None:
        child, self._child = self._child, None
        if child is None or child.poll() is not None:
            return
        try:
            os.killpg(child.pid, signal.SIGKILL)  # its own session: the group holds its helpers
        except ProcessLookupError:
            pass
        child.wait()

    # -- one invocation of a C program -----------------------------------------------------
    def _invoke(self, b: Benchmark, reps: int, warmup: int) -> tuple[list[dict], str | None]:
        """Run one batch; return (repetition records, skip reason or None)."""
        workdir = Path(tempfile.mkdtemp(prefix=b.name + ".", dir=self.scratch))
        cmd = [str(self.bindir / f"osb_{b.program}"), "run", b.cname, "--reps", str(reps),
               "--warmup", str(warmup), "--target-ms", str(self.config.target_ms), "--dir", str(workdir)]
        if b.param is not None:
            cmd += ["--param", str(b.param)]
        env = dict(os.environ, OSB_TIMESLICE_RUN_MS=str(self.config.timeslice_ms), **b.env)
        try:
            self._child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                           env=env, start_new_session=True)
            try:
                out, err = self._child.communicate(timeout=180)
            except subprocess.TimeoutExpired:
                self._kill_child()
                raise RuntimeError("did not finish within 180 s")
            rc = self._child.returncode
            self._child = None
        finally:
            self._kill_child()
            shutil.rmtree(workdir, ignore_errors=True)
        records, skip, error = [], None, None
        for line in out.splitlines():
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if "skip" in obj:
                skip = obj["skip"]
            elif "error" in obj:
                error = obj["error"]
            elif "rep" in obj:
                records.append(obj)
        if rc == 3 and skip:
            return [], skip
        if rc != 0 or error:
            raise RuntimeError(error or (err.strip().splitlines() or [f"exit status {rc}"])[-1])
        return records, None

    # -- one benchmark -----------------------------------------------------------------------
    def run(self, b: Benchmark) -> dict:
        base = {"name": b.name, "group": b.group, "label": b.label, "table": b.table, "unit": b.unit,
                "sysctl": dict(b.sysctl)}
        if b.root_only and os.geteuid() != 0:
            return dict(base, status="skipped", reason=b.root_only)
        cfg = self.config
        started = time.monotonic()
        before = noise.Snapshot.take()
        records: list[dict] = []
        try:
            with settings.changed_sysctls(b.sysctl):
                warmup = 0 if b.slow else cfg.warmup
                reps = cfg.reps
                while True:
                    got, skip = self._invoke(b, reps, warmup)
                    if skip:
                        return dict(base, status="skipped", reason=skip)
                    records += got
                    values = [r["value"] for r in records]
                    limit = min(cfg.max_reps, 21) if b.slow else cfg.max_reps
                    if (cfg.quick or len(records) >= limit
                            or time.monotonic() - started > cfg.budget_s
                            or not stats.repetitions_needed(values, cfg.goal)):
                        break
                    reps = min(10, limit - len(records))
                    warmup = 0 if b.slow else 1
        except (OSError, RuntimeError) as err:
            return dict(base, status="error", reason=str(err))
        after = noise.Snapshot.take()
        values = [r["value"] for r in records]
        if not values or min(values) <= 0:
            why = "no time slice ended during the run" if b.group == "timeslice" else "no positive figure"
            return dict(base, status="error", reason=why)
        s = stats.summarize(values)
        machine = noise.between(before, after)
        # preempted: an involuntary switch, and the run-queue wait it caused is not negligible
        preempted = sum(1 for r in records
                        if r.get("nivcsw", 0) > 0 and r.get("delay_ns", 0) > PREEMPT_SHARE * max(r.get("ns", 0), 1))
        notes, noisy = noise.judge(s, preempted, len(records), machine, b.preemption_expected)
        if s["ci_coverage"] < stats.LEVEL:
            notes.append(f"n={len(values)}: [min, max] is only a {s['ci_coverage']:.0%} interval")
        extra = {}
        for key in records[0].get("extra", {}):
            vals = [r["extra"][key] for r in records if isinstance(r.get("extra", {}).get(key), (int, float))]
            if vals:
                extra[key] = median(vals)
        return dict(
            base, status="ok", n=s["n"],
            median_ns=s["median"], min_ns=s["min"], max_ns=s["max"], mean_ns=s["mean"],
            ci_low_ns=s["ci_low"], ci_high_ns=s["ci_high"], ci_level=stats.LEVEL, ci_coverage=s["ci_coverage"],
            samples_ns=values, ops_per_rep=int(median(r["ops"] for r in records)),
            preempted_reps=preempted, delay_ns_median=median(r.get("delay_ns", 0) for r in records),
            machine_noise=machine, noisy=noisy, notes=notes, extra=extra,
            extra_reps=[r.get("extra", {}) for r in records] if b.group == "timeslice" else [],
            seconds=round(time.monotonic() - started, 3),
        )


def solved_timeslice(results: list[dict]) -> list[dict]:
    """The paper's Table 2 method: run the same loop under a short and a long slice, and solve
    lost(s) = lost_0 + slices(s) * c for c, the overhead of one slice, from the pair of runs.
    Lost time is the wall time neither hog spent in its loop, per second; repetition i of the
    short-slice run is paired with repetition i of the long-slice run, one solution per pair."""
    by = {r["name"]: r for r in results if r.get("status") == "ok"}
    out = []
    for policy, short, long_ in (("eevdf", "timeslice.eevdf.100us", "timeslice.eevdf.20ms"),
                                 ("rr", "timeslice.rr.4ms", "timeslice.rr.20ms")):
        if short not in by or long_ not in by:
            continue
        a, b = by[short], by[long_]
        solutions = []
        for ea, eb in zip(a.get("extra_reps", []), b.get("extra_reps", [])):
            try:
                la = ea["lost_per_slice_ns"] * ea["switches"] / ea["span_ms"]   # ns lost per ms
                lb = eb["lost_per_slice_ns"] * eb["switches"] / eb["span_ms"]
                na, nb = ea["switches"] / ea["span_ms"], eb["switches"] / eb["span_ms"]  # slices per ms
            except (KeyError, TypeError, ZeroDivisionError):
                continue
            if na - nb > 0:
                solutions.append((la - lb) / (na - nb))
        base = {"name": f"timeslice.{policy}.solved", "group": "timeslice", "unit": "slice", "table": a["table"],
                "label": f"slice overhead solved from {short} and {long_} (the paper's equations)",
                "sysctl": {}}
        if len(solutions) < 3:
            out.append(dict(base, status="unresolved", derived_from=[short, long_],
                            reason="too few paired repetitions to solve for the slice overhead"))
            continue
        s = stats.summarize(solutions)
        if s["ci_low"] <= 0:
            out.append(dict(base, status="unresolved", samples_ns=solutions, derived_from=[short, long_],
                            reason=f"the equations cannot resolve it here: the 95% interval "
                                   f"[{s['ci_low'] / 1e3:.3g}, {s['ci_high'] / 1e3:.3g}] us includes 0 "
                                   "(interrupts and noise swamp the lost time); use the direct figures above"))
            continue
        positive = solutions
        notes = []
        if s["ci_rel_halfwidth"] > noise.CI_LIMIT:
            notes.append(f"CI ±{s['ci_rel_halfwidth']:.0%}")
        out.append(dict(base, status="ok", n=s["n"], median_ns=s["median"], min_ns=s["min"], max_ns=s["max"],
                        mean_ns=s["mean"], ci_low_ns=s["ci_low"], ci_high_ns=s["ci_high"], ci_level=stats.LEVEL,
                        ci_coverage=s["ci_coverage"], samples_ns=positive, ops_per_rep=1, preempted_reps=0,
                        delay_ns_median=0, machine_noise={"steal_fraction": None, "cpu_pressure": None},
                        noisy=bool(notes), notes=notes, extra={}, extra_reps=[], derived_from=[short, long_]))
    return out
