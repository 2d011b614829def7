"""bench/import, kernel-pass case (issue 29): the import of kernel records by the native pass
against the build before it (DuckDB and numpy), on the SAME raw chunks, one run alternated with
the other.

Workloads (`oslens record --no-import`, default events, each recorded once and kept under
$OSLENS_BENCH_DIR (default /tmp)/oslens-bench-kernel-pass):
- getpid: tests/c/kernel_getpid.c N, a syscall-heavy loop (two records per call);
- pingpong: tests/c/kernel_pingpong.c N under `taskset -c 0`, a pipe round trip per iteration
  (switches, wakeups, enqueues and calls);
- switch: `stress-ng --switch 2 --switch-ops N` under `taskset -c LAST_CPU`, a switch storm;
- sizes: getpid loops of --sizes calls (peak RSS from ~2 M to ~50 M kernel records).

Each trace is imported in a fresh process by each build in turn (`store.import_trace(force=True)`
of this tree's .venv, then of --old's), --repeat times, alternating: wall and CPU seconds, peak RSS
(VmHWM, the largest of the runs), and kernel records per CPU-second (the kernel chunks' committed
records over the CPU seconds) of the whole import (application side included, empty here) and
of the kernel step alone (the thread CPU time inside _native.kernel_pass). "summary" lists them. After
each build's import its tables are digested (import.kernel_records.table_digests: sha256, rows,
column types, hashes of the rows' values in any order and in file order) and compared.

Usage: python bench/import/kernel_pass.py [--old /work/main] [--getpid N] [--pingpong N]
           [--switch N] [--sizes N ...] [--repeat N] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernel_records import kernel_records, loadavg, source_version, table_digests  # noqa: E402
from many_processes import OSLENS, ROOT  # noqa: E402

# The kernel step: the thread CPU time inside _native.kernel_pass (the merge, pairing, rows and
# Parquet pages, and the chunks it reads again; the pass runs in the calling thread).
IMPORT = ("import json, sys, time, resource; from pathlib import Path; from oslens import _native, store; "
          "step = []; real = _native.kernel_pass\n"
          "def timed(*a, **k):\n"
          "    t = time.thread_time(); out = real(*a, **k); step.append(time.thread_time() - t); return out\n"
          "_native.kernel_pass = timed; "
          "t = time.perf_counter(); store.import_trace(sys.argv[1], force=True, quiet=True); "
          "w = time.perf_counter() - t; r = resource.getrusage(resource.RUSAGE_SELF); "
          "hwm = [l for l in Path('/proc/self/status').read_text().splitlines() if l.startswith('VmHWM:')]; "
          "print(json.dumps({'wall_s': w, 'cpu_s': r.ru_utime + r.ru_stime, 'kernel_step_cpu_s': sum(step), "
          "'max_rss_mib': int(hwm[0].split()[1]) / 1024}))")


def compile_c(name: str, out: Path) -> Path:
    exe = out / Path(name).stem
    if not exe.exists():
        subprocess.run(["cc", "-O2", "-o", str(exe), str(ROOT / "tests" / "c" / name)], check=True)
    return exe


def record(trace: Path, command: list[str]) -> dict:
    """Records COMMAND into TRACE unless it was recorded there already (its stamp says so)."""
    stamp = trace / "bench.json"
    if stamp.is_file() and json.loads(stamp.read_text()).get("command") == command:
        return json.loads(stamp.read_text())
    trace.parent.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    subprocess.run([str(OSLENS), "record", "-f", "--no-import", "-o", str(trace), "--", *command], check=True,
                   capture_output=True)
    got = {"command": command, "record_s": round(time.perf_counter() - t, 2), "loadavg_at_record": loadavg()}
    stamp.write_text(json.dumps(got))
    return got


def import_with(root: Path, trace: Path) -> dict:
    python = root / ".venv" / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([str(python), "-c", IMPORT, str(trace)], check=True, capture_output=True, text=True,
                          env=env, cwd=str(root))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def compare(a: dict, b: dict) -> dict:
    """Per table: 'bytes' (the same files), 'values' (the same rows, order and column types) or
    what differs."""
    out = {}
    for t in sorted(set(a) | set(b)):
        x, y = a.get(t), b.get(t)
        if x is None or y is None:
            out[t] = "only in " + ("new" if x is not None else "old")
        elif x["sha256"] == y["sha256"]:
            out[t] = "bytes"
        else:
            diff = [k for k in ("rows", "columns", "content_hash", "ordered_hash") if x[k] != y[k]]
            out[t] = "values" if not diff else "differs: " + ", ".join(diff)
    return out


def measure(name: str, trace: Path, old: Path, repeat: int) -> dict:
    recs = kernel_records(trace)
    runs = {"new": [], "old": []}
    digests = {}
    for _ in range(max(1, repeat)):
        for which, root in (("new", ROOT), ("old", old)):
            got = import_with(root, trace)
            got["loadavg_before"] = loadavg()
            runs[which].append(got)
            digests[which] = table_digests(trace / "tables")
    out = {"workload": name, **recs}
    for which, rs in runs.items():
        best = sorted(rs, key=lambda r: r["cpu_s"])[(len(rs) - 1) // 2]
        step = sorted(r["kernel_step_cpu_s"] for r in rs)[(len(rs) - 1) // 2]
        out[which] = {"wall_s": round(best["wall_s"], 3), "cpu_s": round(best["cpu_s"], 3),
                      "max_rss_mib": round(max(r["max_rss_mib"] for r in rs), 1),
                      "records_per_cpu_s": round(recs["kernel_records"] / best["cpu_s"]) if best["cpu_s"] else None,
                      "kernel_step_cpu_s": round(step, 3),
                      "kernel_step_records_per_cpu_s": round(recs["kernel_records"] / step) if step else None,
                      "runs": rs if len(rs) > 1 else None}
    out["cpu_ratio_old_over_new"] = round(out["old"]["cpu_s"] / out["new"]["cpu_s"], 2)
    out["step_ratio_old_over_new"] = round(out["old"]["kernel_step_cpu_s"] / out["new"]["kernel_step_cpu_s"], 2)
    out["tables"] = compare(digests["new"], digests["old"])
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", type=Path, default=Path("/work/main"), help="the tree whose .venv imports the old way")
    ap.add_argument("--getpid", type=int, default=3_000_000)
    ap.add_argument("--pingpong", type=int, default=300_000)
    ap.add_argument("--switch", type=int, default=300_000)
    ap.add_argument("--sizes", type=int, nargs="*", default=[1_000_000, 25_000_000])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    base = Path(os.environ.get("OSLENS_BENCH_DIR", "/tmp")) / "oslens-bench-kernel-pass"
    base.mkdir(parents=True, exist_ok=True)
    bins = base / "bin"  # kept: the commands, hence the kept traces, stay the same from run to run
    bins.mkdir(exist_ok=True)
    getpid, pingpong = compile_c("kernel_getpid.c", bins), compile_c("kernel_pingpong.c", bins)
    last = str((os.cpu_count() or 1) - 1)
    work = [("getpid", [str(getpid), str(a.getpid)]),
            ("pingpong", ["taskset", "-c", "0", str(pingpong), str(a.pingpong), "0"]),
            ("switch", ["taskset", "-c", last, "stress-ng", "--switch", "2", "--switch-ops", str(a.switch)])]
    work += [(f"size-getpid-{n}", [str(getpid), str(n)]) for n in a.sizes]
    old_head = subprocess.run(["git", "-C", str(a.old), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = {"source": source_version(), "old": str(a.old), "old_head": old_head, "cpus": os.cpu_count(), "results": []}
    for name, command in work:
        trace = base / name
        stamp = record(trace, command)
        got = measure(name, trace, a.old, a.repeat)
        got["record"] = stamp
        result["results"].append(got)
        print(json.dumps({k: got[k] for k in ("workload", "kernel_records", "new", "old", "cpu_ratio_old_over_new")},
                         default=str), file=sys.stderr)
    result["summary"] = summary(result["results"])
    return write_result(result, a.out)


def summary(results: list[dict]) -> dict:
    """Per build: kernel records per CPU-second of the whole import and of the kernel step for
    each workload, and the peak RSS from the smallest to the largest size."""
    out = {}
    for which in ("new", "old"):
        sizes = sorted((r for r in results if r["workload"].startswith("size-")), key=lambda r: r["kernel_records"])
        out[which] = {r["workload"]: {"import": r[which]["records_per_cpu_s"], "kernel_step": r[which]["kernel_step_records_per_cpu_s"],
                                      "max_rss_mib": r[which]["max_rss_mib"]} for r in results}
        out[which]["peak_rss_mib_by_records"] = {r["kernel_records"]: r[which]["max_rss_mib"] for r in sizes}
    return out


def write_result(result: dict, out: Path | None) -> int:
    """Prints the result's JSON, and writes it to `out` when given."""
    text = json.dumps(result, indent=1)
    if out:
        out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
