"""bench/import, the kernel step alone (issue 29): the CPU seconds of `write_kernel_tables` (the
kernel tables from the kernel chunks, the rest of the import left out: the chunk reader, the
application side, Python's start) for this tree's build and --old's, alternated, on the traces
kernel_pass.py kept. The chunks are read whole first (raw.read_chunks), so peak RSS here says
nothing; kernel_pass.py measures the import's.

Usage: python bench/import/kernel_step.py [--old /work/main] [--repeat N] [--out FILE] NAME...
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernel_pass import write_result  # noqa: E402
from kernel_records import kernel_records, loadavg  # noqa: E402
from many_processes import ROOT  # noqa: E402

STEP = ("import json, shutil, sys, tempfile, resource; from pathlib import Path; from oslens.capture import raw; "
        "from oslens.store import kernel_tables as k; t = Path(sys.argv[1]); "
        "chunks = [c for c in raw.read_chunks(t) if c.path.name.startswith('kernel-')]; meta = raw.read_meta(t); "
        "r0 = resource.getrusage(resource.RUSAGE_SELF); d = tempfile.mkdtemp(); "
        "out = k.write_kernel_tables(chunks, meta, Path(d)); r1 = resource.getrusage(resource.RUSAGE_SELF); shutil.rmtree(d); "
        "print(json.dumps({'cpu_s': r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime}))")


def step_with(root: Path, trace: Path) -> float:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([str(root / ".venv" / "bin" / "python"), "-c", STEP, str(trace)], check=True,
                          capture_output=True, text=True, env=env, cwd=str(root))
    return json.loads(proc.stdout.strip().splitlines()[-1])["cpu_s"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="+")
    ap.add_argument("--old", type=Path, default=Path("/work/main"))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    base = Path(os.environ.get("OSLENS_BENCH_DIR", "/tmp")) / "oslens-bench-kernel-pass"
    results = []
    for name in a.names:
        trace = base / name
        n = kernel_records(trace)["kernel_records"]
        runs = {"new": [], "old": []}
        for _ in range(max(1, a.repeat)):
            for which, root in (("new", ROOT), ("old", a.old)):
                runs[which].append(step_with(root, trace))
        got = {"workload": name, "kernel_records": n, "loadavg": loadavg()}
        for which, cpu in runs.items():
            best = sorted(cpu)[(len(cpu) - 1) // 2]
            got[which] = {"cpu_s": round(best, 3), "records_per_cpu_s": round(n / best) if best else None, "runs": cpu}
        results.append(got)
        print(json.dumps(got), file=sys.stderr)
    return write_result({"results": results}, a.out)


if __name__ == "__main__":
    sys.exit(main())
