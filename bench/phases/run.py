#!/usr/bin/env python3
"""How fast `oslens phases` is (DESIGN.md: 10,000 intervals in under a second).

Records workloads/phases once with `oslens record --phases` (a script of compute, I/O, page
faults, sleep and lock contention, repeated, about 10 s) and analyses it with 1 ms intervals
(~10,000): the CPU time to build the interval vectors from the trace's tables, to segment and
cluster them, and to compute the similarity matrix, each the median of --repeat runs in this
process (the per-thread state timelines, which the report shares, once, apart); the wall time of
the whole analysis; the peak RSS. Prints one JSON object. CPU time, because the host is shared:
its wall time depends on the other tenants.

    bench/phases/run.py [--repeat 3] [--trace DIR (reuse a recording)]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = ROOT / "workloads" / "phases" / "phases"
OSLENS = ROOT / ".venv" / "bin" / "oslens"
SCRIPT = ",".join(["compute:700,io:500,faults:400,sleep:400,sync:500"] * 4)


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--trace")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "python"))
    import numpy as np

    import oslens
    from oslens.phases import analyse, segment, similarity, vectors

    with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
        trace = Path(args.trace) if args.trace else Path(d) / "trace"
        if not args.trace:
            subprocess.run([str(OSLENS), "record", "--phases", "-o", str(trace), "--", str(WORKLOAD), "--script", SCRIPT,
                            "--dir", d], check=True, capture_output=True)
        con = oslens.open(trace)
        import ruptures  # noqa: F401  (its import, ~0.5 s with scipy, is not the analysis)

        from oslens.analysis import program, states

        t = time.process_time()
        states.timelines(con, program.program(con))  # shared with the report, cached per connection
        t_timelines = time.process_time() - t
        t_vec, t_seg, t_sim, t_all, w_all = [], [], [], [], []
        for _ in range(args.repeat):
            t = time.process_time()
            vec = vectors.interval_vectors(con, trace, 1_000_000)
            t_vec.append(time.process_time() - t)
            x = vec.matrix()
            t = time.process_time()
            seg = segment.segment(x)
            t_seg.append(time.process_time() - t)
            t = time.process_time()
            similarity.similarity(x)
            t_sim.append(time.process_time() - t)
            t, w = time.process_time(), time.perf_counter()
            a = analyse.analyse(con, trace, 1_000_000)
            t_all.append(time.process_time() - t)
            w_all.append(time.perf_counter() - w)
        out = {
            "intervals": int(vec.n), "features": int(x.shape[1]), "vectors": vec.used(), "phases": int(seg.k),
            "kinds": a.kinds, "segments": int(len(seg.bounds) - 1),
            "cpu_s": {"state_timelines_once": t_timelines, "vectors": median(t_vec),
                      "segment_and_cluster": median(t_seg), "similarity_matrix": median(t_sim),
                      "analysis": median(t_all)},
            "analysis_wall_s": median(w_all), "target_s": 1.0,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "load_average": os.getloadavg()[0],
            "samples": int(vec.code.samples) if vec.code else 0,
        }
        print(json.dumps(out, indent=1))
        del np
    return 0


if __name__ == "__main__":
    sys.exit(main())
