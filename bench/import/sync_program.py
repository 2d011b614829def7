"""bench/import, sync case (issue 16 item 4): a real program's barrier waits (C, T pthreads each
calling pthread_barrier_wait N times; the preload library records each wait as BARRIER_ENTER and
BARRIER_EXIT, one sync row) recorded once per size with `oslens record --on-full block` and
imported in a fresh process: its peak RSS (VmHWM of the importing child, and /usr/bin/time's
maximum resident set), wall time, the sync table's rows and sha256, and its barrier rows per
thread against the N the program prints. --futex also counts the program's futex calls with
`perf stat -e syscalls:sys_enter_futex` (unrecorded): a barrier wait that blocks makes at least
one, so they lie between N and a few per wait.

--python names the interpreter of another checkout (its .venv/bin/python: main before a change)
to import the same kept traces with, alternated with this checkout's, so a before and an after
come from one run on the same raw chunks.

Usage: python bench/import/sync_program.py [--waits N ...] [--threads T] [--python PATH] [--futex]
       (prints JSON)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
OSLENS = ROOT / ".venv" / "bin" / "oslens"
BARRIER_C = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
static pthread_barrier_t b;
static long n;
static void *work(void *arg) { for (long i = 0; i < n; i++) pthread_barrier_wait(&b); return arg; }
int main(int argc, char **argv) {
    int t = atoi(argv[1]); n = atol(argv[2]);
    pthread_t th[64];
    pthread_barrier_init(&b, NULL, t);
    for (int i = 0; i < t; i++) pthread_create(&th[i], NULL, work, NULL);
    for (int i = 0; i < t; i++) pthread_join(th[i], NULL);
    printf("%d %ld\n", t, n);
    return 0;
}
"""
COUNT = """
import sys, collections, pyarrow.parquet as pq
t = pq.read_table(sys.argv[1], columns=["kind", "tid"]).to_pydict()
print(t and len(t["kind"]), sorted(collections.Counter(t["tid"][i] for i, k in enumerate(t["kind"]) if k == "barrier").values()))
"""


sys.path.insert(0, str(Path(__file__).parent))
from functions import alternated, records_of, timed_import  # noqa: E402 (the same timed import in a fresh process)
from run import CALIBRATION  # noqa: E402 (the bench's fixed calibration: compensation charged as an import does)


def program(d: Path) -> Path:
    exe = d / "barrier"
    if not exe.exists():
        (d / "barrier.c").write_text(BARRIER_C)
        subprocess.run(["gcc", "-O2", "-pthread", "-o", str(exe), str(d / "barrier.c")], check=True)
    return exe


def record(d: Path, threads: int, n: int) -> tuple[Path, str]:
    trace = d / f"barrier{threads}x{n}"
    printed = trace / "printed.txt"
    if not printed.exists():
        got = subprocess.run([str(OSLENS), "record", "--no-kernel", "--no-import", "--on-full", "block", "-f", "-o",
                              str(trace), "--", str(program(d)), str(threads), str(n)], check=True, capture_output=True,
                             text=True)
        printed.write_text(got.stdout)
    return trace, printed.read_text().strip()


def futex_calls(d: Path, threads: int, n: int) -> dict:
    """The program's futex calls, unrecorded: perf stat on the syscalls:sys_enter_futex
    tracepoint, else (no tracefs) strace -f -c."""
    cmd = [str(program(d)), str(threads), str(n)]
    got = subprocess.run(["perf", "stat", "-x,", "-e", "syscalls:sys_enter_futex", *cmd], capture_output=True, text=True)
    for line in got.stderr.splitlines():
        if "sys_enter_futex" in line and line.split(",")[0].isdigit():
            return {"tool": "perf stat -e syscalls:sys_enter_futex", "calls": int(line.split(",")[0])}
    got = subprocess.run(["strace", "-f", "-c", "-e", "trace=futex", *cmd], check=True, capture_output=True, text=True)
    line = next(line for line in got.stderr.splitlines() if line.rstrip().endswith("futex"))
    return {"tool": "strace -f -c -e trace=futex", "calls": int(line.split()[3])}


def import_with(python: str, trace: Path, calibration: Path) -> dict:
    timed = timed_import(python, trace, calibration)
    table = trace / "tables" / "sync.parquet"
    rows, per_thread = subprocess.run([python, "-c", COUNT, str(table)], check=True, capture_output=True,
                                      text=True).stdout.split(" ", 1)
    return {**timed, "rows": int(rows), "barrier_rows_per_thread": json.loads(per_thread),
            "sha256": hashlib.sha256(table.read_bytes()).hexdigest()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--waits", type=int, nargs="+", default=[500_000, 2_000_000], help="barrier waits per thread")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--python", help="another checkout's interpreter to import with too (before a change)")
    ap.add_argument("--dir", default="/tmp/oslens-bench-sync")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--futex", action="store_true", help="count the unrecorded program's futex calls (perf stat)")
    args = ap.parse_args()
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    calibration = d / "calibration.json"
    calibration.write_text(json.dumps(CALIBRATION))
    pythons = {"this": str(ROOT / ".venv" / "bin" / "python"), **({"other": args.python} if args.python else {})}
    result = {"host_load": open("/proc/loadavg").read().split()[:3], "threads": args.threads, "sizes": []}
    for n in args.waits:
        trace, printed = record(d, args.threads, n)
        size = {"waits_per_thread": n, "program_printed": printed, "records": records_of(trace)}
        if args.futex:
            size["futex_calls_unrecorded"] = futex_calls(d, args.threads, n)
        size["runs"] = alternated(pythons, trace, calibration, args.repeat, import_with)
        result["sizes"].append(size)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
