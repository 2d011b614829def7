"""`oslens doctor`: what this machine and this user can record and change, each missing part with
its one-line fix, and a measured check that the application's clock and the kernel collector's
agree here. Exit 0 when everything oslens uses is available, 1 with the list otherwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from oslens.control import doctor
from oslens.control.sysfs import ROOT_ENV, default_root
from oslens.store.calibration import NO_CALIBRATE_ENV

NAME = "doctor"
HELP = "what this machine and user can record and change, how to fix what is missing, and whether the clocks agree"

# The probe: an event, one getpid, an event; the brackets bound the two clocks' offset
# (analysis/clock_agreement.py). Python's API records through the same recorder as oslens.h.
PROBE_CALLS = 2000
PROBE = ("import os, oslens\n"
         f"for _ in range({PROBE_CALLS}):\n"
         "    oslens.event('doctor.before'); os.getpid(); oslens.event('doctor.after')\n")


def add_arguments(parser):
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--no-clock", action="store_true",
                        help="skip the measured clock check (it records a short probe with kernel events)")


def clock_check() -> dict:
    """Records the probe with kernel events and bounds the clocks' offset from its brackets."""
    from oslens import store
    from oslens.analysis.clock_agreement import clock_agreement

    with tempfile.TemporaryDirectory(prefix="oslens-doctor-") as tmp:
        trace = Path(tmp) / "probe"
        cmd = [sys.executable, "-m", "oslens.cli", "record", "--events", "syscalls", "-o", str(trace),
               "--", sys.executable, "-c", PROBE]
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, NO_CALIBRATE_ENV: "1"})
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            return doctor.check_result("clocks agree", False, f"the probe could not be recorded: {last}",
                                       "see the kernel tracepoints check", "one timeline for app and kernel events")
        row = clock_agreement(store.open_trace(trace), "doctor.before", "doctor.after").to_pylist()[0]
    return doctor.clock_verdict(row)


def run(args):
    root = default_root()
    results = doctor.checks(root)
    if not args.no_clock and root == Path("/") and os.environ.get(ROOT_ENV) is None:
        if all(r["ok"] for r in results if r["name"] == "kernel tracepoints"):
            results.append(clock_check())
    missing = [r for r in results if not r["ok"]]
    if args.json:
        json.dump({"ok": not missing, "checks": results}, sys.stdout, indent=2)
        print()
    else:
        _print(results)
    if missing and not args.json:
        print(f"\n{len(missing)} missing: " + ", ".join(r["name"] for r in missing), file=sys.stderr)
    return 1 if missing else 0


def _print(results: list[dict]) -> None:
    width = max(len(r["name"]) for r in results)
    for r in results:
        mark = "ok     " if r["ok"] else "MISSING"
        print(f"{mark} {r['name']:<{width}}  {r['detail']}  [{r['for']}]")
        if r["fix"]:
            print(f"        {'':<{width}}  fix: {r['fix']}")
