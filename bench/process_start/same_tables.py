#!/usr/bin/env python3
"""Do two builds of oslens give the same tables for the same workload? Records a few process
start-up workloads (a shell loop of /bin/true, a Python program that forks in every way the
preload sees, `make -j2` of a small C project, tests/c/fork_markers.c) with the `oslens` given, then compares two such
sets of traces table by table, row for row, with what differs between any two runs taken out:
timestamps and durations (columns ending in `ns`, `ts`, floats), CPU numbers, paths, and pids,
which are replaced by their rank in the trace (a sequential workload forks in the same order
every run; `make -j2` does not, so its pid columns are dropped instead). Also compares
`oslens dump --json` and meta.json's thread list the same way.

usage: same_tables.py record OSLENS OUTDIR
       same_tables.py compare DIR_A DIR_B      (exit 1 and the first differences when they differ)
"""

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from build import write_project  # noqa: E402

FORKING_PY = r"""
import os, signal, subprocess, sys, time
log = []
def child(f):
    pid = os.fork()
    if pid == 0:
        f()
    log.append(pid)
    os.waitpid(pid, 0)
child(lambda: os.execv("/bin/true", ["true"]))
child(lambda: os._exit(0))
child(lambda: sys.exit(0))
def failed_exec():
    try:
        os.execv("/nonexistent/prog", ["x"])
    except OSError:
        pass
    os.execv("/bin/true", ["true"])
child(failed_exec)
subprocess.run(["/bin/true"], check=True)
pid = os.fork()
if pid == 0:
    time.sleep(30)
    os._exit(0)
time.sleep(0.2)
os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
log.append(pid)
print(len(log))
"""

WORKLOADS = {
    "shell_loop": (["sh", "-c", "for i in $(seq 20); do /bin/true; done"], True),
    "python_forks": ([sys.executable, "-c", FORKING_PY], True),
    "make_j2": (["make", "-s", "-j2", "-C", "{src}"], False),
    # children that exec, fail an exec, exit(), _exit(), record an event, are killed
    "fork_markers": (["{src}/fork_markers", "4"], True),
}
PID_COLUMNS = {"pid", "tid", "parent_tid", "ppid"}


def record(oslens: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    src = out / "src"
    write_project(src, 6)
    flags = subprocess.run([oslens, "flags", "--cflags", "--libs"], capture_output=True, text=True, check=True).stdout.split()
    subprocess.run(["gcc", "-O2", "-o", str(src / "fork_markers"), str(HERE.parent.parent / "tests" / "c" / "fork_markers.c"), *flags], check=True)
    for name, (cmd, _ordered) in WORKLOADS.items():
        subprocess.run(["make", "-s", "-C", str(src), "clean"], check=True)
        cmd = [c.format(src=src) for c in cmd]
        subprocess.run([oslens, "record", "--no-kernel", "-o", str(out / name), "--", *cmd], check=True, capture_output=True)
        dump = subprocess.run([oslens, "dump", "--json", str(out / name)], check=True, capture_output=True, text=True).stdout
        (out / name / "dump.jsonl").write_text(dump)


def _timing(col: str) -> bool:
    return col in ("ts", "cpu", "chunk", "path") or col.endswith("ns") or col.endswith("_s")


def _ranks(trace: Path) -> dict:
    import pyarrow.parquet as pq

    t = pq.read_table(trace / "tables" / "threads.parquet").to_pydict()
    ids = sorted({v for c in ("pid", "tid") for v in t[c] if v})
    return {v: i + 1 for i, v in enumerate(ids)}


def _norm(row: dict, ranks: dict, ordered: bool) -> tuple:
    out = []
    process = str(row.get("kind", "")).startswith("process_")
    for k in sorted(row):
        v = row[k]
        if _timing(k) or isinstance(v, float):
            out.append((k, v is None))  # whether the time is known, not its value
            continue
        if k in PID_COLUMNS and not ordered:
            continue
        if k in ("value", "b") and "kind" in row and not process:
            continue  # clock pairs' times, locks' addresses (ASLR)
        if k == "id" and row.get("kind") == "counter":
            continue  # a lock count's id: its address's hash
        if k in ("name", "instrument") and isinstance(v, str) and v.startswith("0x"):
            v = "0x"  # an unnamed object's address
        if k in PID_COLUMNS or (k in ("value", "b") and row.get("kind") == "process_fork"):
            v = ranks.get(v, 0 if v else v) if ordered else None  # 0: a pid outside the trace
        out.append((k, v))
    return tuple(out)


def normalized(trace: Path, ordered: bool) -> dict:
    import pyarrow.parquet as pq

    ranks = _ranks(trace)
    got = {}
    for f in sorted((trace / "tables").glob("*.parquet")):
        t = pq.read_table(f).to_pylist()
        if f.stem == "meta":
            got["meta keys"] = sorted(r["key"] for r in t)
            continue
        got[f.stem] = sorted(map(repr, (_norm(r, ranks, ordered) for r in t)))
    dump = [json.loads(line) for line in (trace / "dump.jsonl").read_text().splitlines()]
    got["dump"] = sorted(map(repr, (_norm(r, ranks, ordered) for r in dump)))
    threads = json.loads((trace / "meta.json").read_text())["threads"]
    got["meta.json threads"] = sorted(map(repr, (_norm({k: v for k, v in t.items() if k != "ledger"}, ranks, ordered) for t in threads)))
    return got


def compare(a: Path, b: Path) -> int:
    bad = 0
    for name, (_cmd, ordered) in WORKLOADS.items():
        na, nb = normalized(a / name, ordered), normalized(b / name, ordered)
        for table in sorted(set(na) | set(nb)):
            ra, rb = na.get(table, []), nb.get(table, [])
            same = ra == rb
            print(f"{name:13} {table:18} {len(ra):5} / {len(rb):5} rows  {'same' if same else 'DIFFERENT'}")
            if not same:
                bad += 1
                for r in sorted(set(ra) ^ set(rb))[:6]:
                    print(f"    {'A' if r in ra else 'B'}: {r}")
        files = [len(list((d / name / "raw").glob("*.osl"))) for d in (a, b)]
        print(f"{name:13} raw chunk files  {files[0]:5} / {files[1]:5}")
    return 1 if bad else 0


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "record":
        record(sys.argv[2], Path(sys.argv[3]))
        return 0
    if len(sys.argv) == 4 and sys.argv[1] == "compare":
        return compare(Path(sys.argv[2]), Path(sys.argv[3]))
    print(__doc__.split("usage:")[1].strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
