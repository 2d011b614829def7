"""bench/import, functions case (issue 16 item 4): a real -finstrument-functions program's
function calls (a recursive fib, gcc -O1 -finstrument-functions) recorded once per size with
`oslens record --on-full block` and imported in a fresh process: its peak RSS (VmHWM of the
importing child, and /usr/bin/time's maximum resident set), wall time, the functions table's
rows and sha256, and the calls named fib against the arithmetic (fib(n) makes 2 F(n+1) - 1).

--python names the interpreter of another checkout (its .venv/bin/python: main before a change)
to import the same kept traces with, alternated with this checkout's, so a before and an after
come from one run on the same raw chunks.

Usage: python bench/import/functions.py [--fib N ...] [--python PATH] [--dir DIR]   (prints JSON)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
OSLENS = ROOT / ".venv" / "bin" / "oslens"
FIB_C = r"""
#include <stdio.h>
#include <stdlib.h>
long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
int main(int argc, char **argv) { printf("%ld\n", fib(atoi(argv[1]))); return 0; }
"""
IMPORT = """
import sys, time
from pathlib import Path
from oslens.store import importer
t = time.perf_counter()
importer.import_trace(Path(sys.argv[1]), force=True, quiet=True)
wall = time.perf_counter() - t
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
print(wall, int(hwm) // 1024)
"""


def fib_calls(n: int) -> int:
    a, b = 0, 1  # F(0), F(1)
    for _ in range(n + 1):
        a, b = b, a + b
    return 2 * a - 1  # a = F(n + 1)


def record(d: Path, n: int) -> Path:
    exe, trace = d / "fib", d / f"fib{n}"
    if not exe.exists():
        (d / "fib.c").write_text(FIB_C)
        subprocess.run(["gcc", "-O1", "-finstrument-functions", "-o", str(exe), str(d / "fib.c")], check=True)
    if not (trace / "meta.json").exists():
        subprocess.run([str(OSLENS), "record", "--no-kernel", "--no-import", "--on-full", "block", "-f", "-o", str(trace),
                        "--", str(exe), str(n)], check=True, capture_output=True)
    return trace


def timed_import(python: str, trace: Path, calibration: Path) -> dict:
    """`trace` imported by `python` in a fresh process under /usr/bin/time -v: its wall time and
    peak RSS (VmHWM, and time's maximum)."""
    env = {"OSLENS_CALIBRATION": str(calibration), "OPENBLAS_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    got = subprocess.run(["/usr/bin/time", "-v", python, "-c", IMPORT, str(trace)], check=True, capture_output=True,
                         text=True, env=env)
    wall, hwm = got.stdout.split()
    max_rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", got.stderr).group(1))
    return {"wall_s": round(float(wall), 2), "vmhwm_mib": int(hwm), "time_v_max_rss_mib": max_rss // 1024}


def records_of(trace: Path) -> int:
    return sum(int(t.get("records", 0)) for t in json.loads((trace / "meta.json").read_text()).get("threads", []))


def alternated(pythons: dict, trace: Path, calibration: Path, repeat: int, import_with) -> dict:
    """`repeat` imports of `trace` by each interpreter, alternated (a before and an after from one run)."""
    runs = {k: [] for k in pythons}
    for _ in range(repeat):
        for name, py in pythons.items():
            runs[name].append(import_with(py, trace, calibration))
    return runs


def import_with(python: str, trace: Path, calibration: Path) -> dict:
    timed = timed_import(python, trace, calibration)
    table = trace / "tables" / "functions.parquet"
    out = subprocess.run([python, "-c", "import sys, pyarrow.compute as pc, pyarrow.parquet as pq; t = pq.read_table(sys.argv[1]);"
                          "print(t.num_rows, t.filter(pc.equal(t['name'], 'fib')).num_rows)", str(table)],
                         check=True, capture_output=True, text=True).stdout.split()
    return {**timed, "rows": int(out[0]), "fib_rows": int(out[1]), "sha256": hashlib.sha256(table.read_bytes()).hexdigest()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fib", type=int, nargs="+", default=[30, 32])
    ap.add_argument("--python", help="another checkout's interpreter to import with too (before a change)")
    ap.add_argument("--dir", default="/tmp/oslens-bench-functions")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(Path(__file__).parent))
    from run import CALIBRATION  # the bench's fixed calibration: compensation charged as an import does

    calibration = d / "calibration.json"
    calibration.write_text(json.dumps(CALIBRATION))
    pythons = {"this": str(ROOT / ".venv" / "bin" / "python"), **({"other": args.python} if args.python else {})}
    result = {"host_load": open("/proc/loadavg").read().split()[:3], "sizes": []}
    for n in args.fib:
        trace = record(d, n)
        result["sizes"].append({"fib": n, "calls": fib_calls(n), "records": records_of(trace),
                                "runs": alternated(pythons, trace, calibration, args.repeat, import_with)})
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
