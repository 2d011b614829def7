"""bench/clock_context: what a clock read costs the code around it.

Builds clock_context.c and prints JSON: for loops of W read-modify-writes (on W separate cache
lines of a 16 MiB array, which miss the caches and overlap one another, or W times on one line),
the CPU time per iteration added by one rdtsc (what oslens records with), rdtscp or lfence after
each W, median over repetitions, next to the plain loop. An instruction that waits for earlier
instructions to complete costs the overlap it prevents, so its cost grows with the work's
memory-level parallelism; an empty-loop calibration (`oslens calibrate`, Kohr et al.'s in-vitro
figure) only sees its latency. docs/calibration.md uses this to explain why a record costs water's
thread about twice the empty-loop figure."""

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ITERATIONS = int(os.environ.get("CLOCK_CONTEXT_ITERATIONS", "200000"))
REPS = int(os.environ.get("CLOCK_CONTEXT_REPS", "7"))


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        prog = Path(tmp) / "clock_context"
        subprocess.run(["gcc", "-O2", "-o", str(prog), str(HERE / "clock_context.c")], check=True)
        out = subprocess.run([str(prog), str(ITERATIONS), str(REPS)], capture_output=True, text=True, check=True).stdout
    samples: dict = {}
    for line in out.splitlines():
        work, w, instr, _rep, ns = line.split()
        samples.setdefault((work, int(w)), {}).setdefault(instr, []).append(float(ns))
    rows = []
    for (work, w), by in sorted(samples.items(), key=lambda kv: (kv[0][0] != "one-line", kv[0][1])):
        plain = statistics.median(by["none"])
        row = {"work": f"{w} updates, {'each on its own line' if work == 'lines' else 'one line'}" if w else "empty loop",
               "plain_ns": round(plain, 2)}
        for instr in ("rdtsc", "rdtscp", "lfence"):
            row[f"{instr}_added_ns"] = round(statistics.median(by[instr]) - plain, 2)
        rows.append(row)
    json.dump({"benchmark": "clock_context", "iterations": ITERATIONS, "repetitions": REPS, "rows": rows,
               "note": "CPU time per loop iteration (thread CPU); *_added_ns: with the instruction less the plain loop"},
              sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
