#!/usr/bin/env python3
"""ns per traced function call: oslens (-finstrument-functions, liboslens preloaded) against
uftrace (Debian's `uftrace record`) on the same program, in one run.

The program (calls.c) times its own loop of N calls of a tiny function; the figure for each
tracer is (loop time traced - loop time of the plain build) / N, the median of --repeat runs
taken in rotation so drift hits every variant alike. Builds:
  plain      gcc -O2                          (baseline)
  fi         gcc -O2 -finstrument-functions   oslens; also uftrace (it handles these hooks too)
  pg         gcc -O2 -pg                      uftrace's usual mode (mcount)
Prints one JSON object. Both tracers write into the same temporary directory (--dir).

    .venv/bin/python bench/auto_overhead/run.py [--calls N] [--repeat R] [--dir D]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "python"))


def build(out: Path, *flags: str) -> Path:
    subprocess.run(["gcc", "-O2", *flags, "-o", str(out), str(HERE / "calls.c")], check=True)
    return out


def loop_ns(cmd: list[str], env: dict | None = None, cwd: Path | None = None) -> int:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, check=True)
    # The program's line is the last one starting with a number (uftrace may add its own).
    for line in reversed(proc.stdout.splitlines()):
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            return int(parts[0])
    raise RuntimeError(f"no timing in output of {cmd}: {proc.stdout!r} {proc.stderr!r}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--dir", help="where traces are written (default: a temporary directory)")
    ap.add_argument("--uftrace", help="uftrace executable (default: uftrace on PATH)")
    ap.add_argument("--libmcount-path", help="passed to uftrace (a copied uftrace's libmcount folder)")
    args = ap.parse_args()

    from oslens import paths

    liboslens = paths.liboslens()
    if not liboslens.is_file():
        liboslens = ROOT / "target" / "release" / "liboslens.so"
    uftrace = str(Path(args.uftrace).resolve()) if args.uftrace else shutil.which("uftrace")
    if args.libmcount_path:
        args.libmcount_path = str(Path(args.libmcount_path).resolve())
    work = Path(tempfile.mkdtemp(prefix="oslens-auto-overhead-", dir=args.dir))
    try:
        plain = build(work / "calls_plain")
        fi = build(work / "calls_fi", "-finstrument-functions")
        pg = build(work / "calls_pg", "-pg")
        n = str(args.calls)
        buffer_mb = str(max(64, (args.calls * 2 * 32 >> 20) + 16))

        def oslens_run(filtered: bool = False):
            trace = work / "oslens-trace"
            shutil.rmtree(trace, ignore_errors=True)
            env = dict(os.environ, OSLENS_TRACE=str(trace), OSLENS_BUFFER_MB=buffer_mb, LD_PRELOAD=str(liboslens))
            if filtered:
                env["OSLENS_FUNC_MIN_NS"] = "1000"
            return loop_ns([str(fi), n], env=env)

        def uftrace_run(binary: Path):
            out = work / "uftrace-data"
            shutil.rmtree(out, ignore_errors=True)
            extra = [f"--libmcount-path={args.libmcount_path}"] if args.libmcount_path else []
            return loop_ns([uftrace, "record", *extra, "-d", str(out), str(binary), n], cwd=work)

        variants = {
            "plain": lambda: loop_ns([str(plain), n]),
            "plain_pg": lambda: loop_ns([str(pg), n], cwd=work),  # mcount of glibc (gmon), untraced
            "oslens_fi": oslens_run,
            "oslens_fi_min_1us": lambda: oslens_run(filtered=True),
        }
        if uftrace:
            variants["uftrace_pg"] = lambda: uftrace_run(pg)
            variants["uftrace_fi"] = lambda: uftrace_run(fi)
        samples: dict[str, list[int]] = {k: [] for k in variants}
        for _ in range(args.repeat):
            for name, fn in variants.items():
                samples[name].append(fn())
        med = {k: statistics.median(v) for k, v in samples.items()}
        base = med["plain"]
        calls = args.calls

        def per_call(name):
            return round((med[name] - base) / calls, 1) if name in med else None

        # A trace's records must all be there, or the comparison is void.
        result = {
            "benchmark": "auto_overhead",
            "calls": calls,
            "repeat": args.repeat,
            "machine": {"kernel": platform.release(), "cpus": os.cpu_count()},
            "uftrace": subprocess.run([uftrace, "--version"], capture_output=True, text=True).stdout.split("\n")[0] if uftrace else None,
            "loop_ns_median": med,
            "ns_per_call": {
                "oslens_finstrument": per_call("oslens_fi"),
                "oslens_finstrument_min_duration_1us": per_call("oslens_fi_min_1us"),
                "uftrace_pg": per_call("uftrace_pg"),
                "uftrace_finstrument": per_call("uftrace_fi"),
                "pg_untraced_mcount": per_call("plain_pg"),
            },
            "plain_ns_per_call": round(base / calls, 2),
            "samples_ns": samples,
        }
        if uftrace:
            o, u = per_call("oslens_fi"), per_call("uftrace_pg")
            result["oslens_vs_uftrace_pg"] = round(o / u, 3) if u else None
            result["target_below_uftrace"] = bool(u and o < u)
        print(json.dumps(result, indent=2))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
