#!/usr/bin/env python3
"""What loading liboslens.so costs a process, its constructor included (`load.c`: one dlopen,
timed inside the process), this build's library against an earlier build's (`--before DIR`),
not tracing and with OSLENS_TRACE set, alternating process by process in one run; and what the
two CPUIDs of the recorder's clock check cost here (a VM traps them). The ~10 µs the clock's
lazy decision saves is below the noise of bench/process_start/run.py's fork + exec loops on a
shared host, so it is measured here, where the library's own start-up is all that is timed.

Prints one JSON object (medians and quartiles in µs). usage: load_time.py --before DIR [--procs 500]"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def quartiles(xs: list[float]) -> dict:
    q = statistics.quantiles(xs, n=4)
    return {"median_us": round(statistics.median(xs), 1), "q1_us": round(q[0], 1), "q3_us": round(q[2], 1), "n": len(xs)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", type=Path, required=True, help="folder with an earlier build's liboslens.so")
    ap.add_argument("--procs", type=int, default=500)
    args = ap.parse_args()
    libs = {"after": ROOT / ".venv" / "lib" / "liboslens.so", "before": args.before / "liboslens.so"}
    if not all(p.is_file() for p in libs.values()):
        print(f"load_time.py: no liboslens.so in {args.before} or .venv/lib", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="oslens-loadtime-"))
    exe = work / "load"
    subprocess.run(["gcc", "-O2", "-o", str(exe), str(HERE / "load.c"), "-ldl"], check=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith("OSLENS_") and k != "LD_PRELOAD"}
    envs = {"untraced": base, "traced": {**base, "OSLENS_TRACE": str(work / "trace")}}
    times = {f"{lib}_{mode}": [] for lib in libs for mode in envs}
    cpuid = []
    for i in range(args.procs):
        for lib, path in libs.items():
            for mode, env in envs.items():
                out = subprocess.run([str(exe), str(path), "cpuid"], capture_output=True, text=True, env=env, check=True).stdout.split()
                times[f"{lib}_{mode}"].append(int(out[0]) / 1000)
                cpuid.append(int(out[1]) / 1000)
    result = {"benchmark": "process_start/load_time", "procs": args.procs, "before": str(args.before),
              "load_average": os.getloadavg(), "machine": {"cpus": os.cpu_count(), "kernel": os.uname().release},
              "dlopen": {k: quartiles(v) for k, v in times.items()}, "two_cpuids": quartiles(cpuid)}
    for mode in envs:
        result[f"saved_median_us_{mode}"] = round(result["dlopen"][f"before_{mode}"]["median_us"] - result["dlopen"][f"after_{mode}"]["median_us"], 1)
    subprocess.run(["rm", "-rf", str(work)], check=False)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
