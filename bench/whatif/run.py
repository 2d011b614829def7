"""What-if simulator benchmark (issue 19), printing JSON:
  - decisions per CPU-second of the Rust core for each policy, on a synthetic workload of many
    threads with short bursts, sleeps and wake-up dependencies (oslens_testing.whatif.synthetic) (DESIGN.md target: >= 1 M/s), and
    its ratio to the Python reference (sim.py) on a smaller one;
  - with --validate: the prediction error on real runs under this machine's Linux policies
    (`oslens whatif --validate` on tests/c/whatif_mix.c; target <= 10% completion, <= 20% switches);
  - with --programs: the same on stress-ng, sysbench and a make -j2 build (results-*.json here).
Figures depend on the host's load (say so next to them); compare policies within one run."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

from oslens.whatif import spec  # noqa: E402
from oslens_testing.whatif import synthetic  # noqa: E402
from oslens_testing.whatif.sim import engines  # noqa: E402

ENGINES = engines()

POLICIES = ["fifo", "lifo", "rr:q=10ms", "mlfq", "unix", "hrrn", "srt", "srt:est=ewma", "eevdf:slice=3ms,tick=4ms",
            "batch", "sched_rr:q=100ms", "sched_fifo"]


def decision_rates(threads: int, bursts: int, engine: str, policies=POLICIES) -> list[dict]:
    wl = synthetic.workload(7, threads, bursts, ncpus=4)
    wl.check()
    out = []
    ENGINES[engine](wl, spec.make_policy(spec.parse(policies[0])), 3000, 10000)  # warm-up: first call ~40% slower
    for text in policies:
        policy = spec.make_policy(spec.parse(text))
        t0 = time.process_time()  # CPU time: less sensitive than wall time to the other helpers' load
        res = ENGINES[engine](wl, policy, 3000, 10000)
        dt = max(1e-9, time.process_time() - t0)
        out.append({"policy": text, "engine": engine, "decisions": res.decisions, "cpu_seconds": round(dt, 3),
                    "decisions_per_s": round(res.decisions / dt), "stalled": len(res.stalled)})
    return out


def validate(scale: str) -> dict:
    exe = ROOT / ".venv" / "bin" / "oslens"
    with tempfile.TemporaryDirectory() as tmp:
        prog = Path(tmp) / "mix"
        subprocess.run(["gcc", "-O2", "-pthread", "-o", str(prog), str(ROOT / "tests" / "c" / "whatif_mix.c")], check=True)
        out = subprocess.run([str(exe), "whatif", "--validate", "-o", str(Path(tmp) / "v"), "--json", "-", "--",
                              str(prog), scale], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


PROGRAMS = {  # third-party programs for --programs (docs/whatif.md "Validation"); make builds tests/c twice over
    "stress-ng": ["stress-ng", "--cpu", "2", "--cpu-ops", "2000", "--cpu-method", "fft"],
    "sysbench": ["sysbench", "threads", "--threads=4", "--thread-yields=2", "--events=4000", "run"],
    "make": ["make", "-B", "-j2", "-s"],
}
MAKEFILE = """SRC := $(wildcard *.c)
all: $(SRC:.c=.o)
%.o: %.c
\tgcc -O2 -pthread -I{include} -c -o $@ $<
"""


def programs(quick: bool, keep: str | None = None) -> dict:
    """`oslens whatif --validate` on each of PROGRAMS (stress-ng with an untraced `stress-ng --cpu 1`
    beside it); per program and run: recorded, predicted and the errors, as --validate's JSON gives,
    and the host's load average before and after each program. keep: a folder for the traces."""
    exe = ROOT / ".venv" / "bin" / "oslens"
    out = {"host_load_1min_before": os.getloadavg()[0], "programs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for f in (ROOT / "tests" / "c").glob("*.c"):
            for prefix in ("", "x_"):
                (src / (prefix + f.name)).write_text(f.read_text())
        (src / "Makefile").write_text(MAKEFILE.format(include=ROOT / "crates" / "recorder" / "include"))
        for name, cmd in PROGRAMS.items():
            cmd = cmd + ["-C", str(src)] if name == "make" else cmd
            other = subprocess.Popen(["stress-ng", "--cpu", "1", "--timeout", "300"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL) if name == "stress-ng" else None
            load_before = os.getloadavg()[0]
            try:
                res = subprocess.run([str(exe), "whatif", "--validate", *(["--quick"] if quick else []), "-o",
                                      str(Path(keep or tmp) / name), "--json", "-", "--", *cmd],
                                     capture_output=True, text=True, check=True)
            finally:
                if other is not None:
                    other.terminate()
                    other.wait()
            doc = json.loads(res.stdout)
            out["programs"][name] = {
                "load_1min": [load_before, os.getloadavg()[0]],
                "runs": [{"case": r["case"], "recorded": r["recorded"], "predicted": r["predicted"],
                          "error": r["error"], "own_load": r.get("own_load")} for r in doc["runs"]]}
    out["host_load_1min_after"] = os.getloadavg()[0]
    return out


def repredict(out_dir: str, replicates: int = 4) -> dict:
    """Re-predicts every run of a finished `oslens whatif --validate -o DIR` with the current model,
    twice: each run's clock from the process's start (the launcher's Python start-up, in the
    default class, counted) and from the launcher's sched_setattr (what --validate reports), so
    the two are compared on the same recorded runs (docs/whatif.md "Validation")."""
    from oslens.whatif import validate as v

    runs = [(case, Path(out_dir) / f"run{k}") for k, case in enumerate(v.CASES)]
    runs = [(c, t) for c, t in runs if t.exists()]
    out = {"dir": out_dir, "host_load_1min": os.getloadavg()[0], "clocks": {}}
    for name, from_policy in (("from_process_start", False), ("from_policy_call", True)):
        _mach, fit, rows = v.evaluate(runs, None, replicates, from_policy)
        out["clocks"][name] = {"fit": fit, "runs": [{"case": r["case"], "launcher_ns": r["launcher_ns"],
                                                       "recorded": r["recorded"],
                                                       "predicted": r["predicted"], "error": r["error"],
                                                       "own_load_error": r["own_load"]["error"]} for r in rows]}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=64)
    ap.add_argument("--bursts", type=int, default=2000)
    ap.add_argument("--validate", action="store_true", help="also run the real-run validation (root, ~2 min)")
    ap.add_argument("--scale", default="0.5", help="whatif_mix work scale for --validate")
    ap.add_argument("--repredict", metavar="DIR", help="only re-predict a finished `oslens whatif --validate -o "
                    "DIR` (no new runs), with and without the launcher's start-up")
    ap.add_argument("--programs", action="store_true", help="only validate on stress-ng, sysbench and a make "
                    "-j2 build (root, ~3 min; with --quick ~1 min)")
    ap.add_argument("--quick", action="store_true", help="with --programs: default and SCHED_RR 6 ms only")
    ap.add_argument("--keep", metavar="DIR", help="with --programs: keep the traces in DIR (for --repredict DIR/NAME)")
    args = ap.parse_args()
    if args.programs:
        print(json.dumps(programs(args.quick, args.keep), indent=1))
        return 0
    if args.repredict:
        print(json.dumps(repredict(args.repredict), indent=1))
        return 0
    doc = {"bench": "whatif", "host_load_1min": os.getloadavg()[0], "threads": args.threads, "bursts": args.bursts,
           "rates": decision_rates(args.threads, args.bursts, "native"), "target_decisions_per_s": 1_000_000}
    doc["slowest_native_decisions_per_s"] = min(r["decisions_per_s"] for r in doc["rates"])
    # the Python reference on a smaller workload, for the ratio (same policies' code, same decisions)
    small = max(1, args.bursts // 10)
    py = decision_rates(args.threads, small, "python", ["fifo", "rr:q=10ms", "eevdf:slice=3ms,tick=4ms"])
    nat = decision_rates(args.threads, small, "native", ["fifo", "rr:q=10ms", "eevdf:slice=3ms,tick=4ms"])
    doc["python_reference"] = py
    doc["native_over_python"] = [round(n["decisions_per_s"] / p["decisions_per_s"], 1) for n, p in zip(nat, py)]
    if args.validate:
        doc["validation"] = validate(args.scale)
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
