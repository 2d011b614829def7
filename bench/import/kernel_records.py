"""bench/import, kernel-records case: how the import's memory grows with a real trace's KERNEL
records (docs/trace-schema.md, "Import memory", covers the application side).

Traces (`oslens record --events sched,syscalls --no-import`, each recorded once):
- by size, for each N of --ops: `taskset -c LAST_CPU stress-ng --switch 2 --switch-ops N`, about
  8 kernel records per op (pipe write and read enters/exits, a switch, a wakeup): 1.25 M ops made
  9.9 M records, none lost. A size set by ops, on one CPU, is what makes the size repeatable on
  this loaded 2-CPU VM: `--syscall 1 -t S` beside it, or both CPUs, made the same command give
  0.16-1.8 M records for 8 s and the collector lose up to 90% of them (pinned()).
- mixed (--seconds S, 0: none): `stress-ng --switch 2 --syscall 1 -t S` as issue 16 gives it, for
  its variety (several hundred syscall kinds, ~60 forked and exited tasks) in the compared tables;
  its size and losses follow the host's load (both reported).

Each is imported in a fresh process (many_processes.import_in_child: store.import_trace(force=True),
as `oslens import --force`), and reported: its kernel records (the `committed` counts of the kernel
chunks' headers, and the collector's own count and losses from meta.json), the import's wall and
CPU seconds, its peak RSS (VmHWM of the importing process), the peak's bytes per kernel record,
and, over the sizes, the growth's bytes per record from the smallest to the largest trace (the
slope: what an import whose memory is bounded brings near 0).

To compare imports before and after a change of the importer on the SAME raw chunks, traces are
kept with --keep under $OSLENS_BENCH_DIR (default /tmp)/oslens-bench-kernel and imported again,
not recorded again, by the next run; every table except meta is reported by the sha256 of its
file and by what a change of Parquet writer cannot alter: its row count, its columns' names and
types, and two sums of DuckDB's 64-bit hash of its rows (`content`: the same rows in any order;
`ordered`: with each row's position in the file, the same rows in the same order).

--check records one more trace, `stress-ng --switch 2 --syscall 1 -t 1` under `perf stat -e
raw_syscalls:sys_enter,context-switches` (perf counts the stress-ng processes in the kernel, with
no ring buffer that could lose events) and compares its counts with the syscalls and switches
tables' rows of the same processes: on this VM the sys_enter counts were equal in 6 runs out of
6 with no event lost, the switch-outs within 0.03% (perf stops counting a task early in its
exit; see check()).

With --compare BEFORE.json the result also says, per trace imported in both runs, whether it is
the same recording and which tables differ in which digest (only sha256: the same values written
differently).

Usage: python bench/import/kernel_records.py [--ops N ...] [--seconds S] [--quick] [--keep]
                                             [--repeat N] [--check] [--compare BEFORE.json]
       python bench/import/run.py --kernel-ops N ... [--keep]  (puts it under "kernel_records")
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from many_processes import OSLENS, import_in_child  # noqa: E402

EVENTS = "sched,syscalls"
PERF_EVENTS = ("raw_syscalls:sys_enter", "context-switches")


def trace_base() -> Path:
    return Path(os.environ.get("OSLENS_BENCH_DIR", "/tmp")) / "oslens-bench-kernel"


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def pinned() -> list[str]:
    """taskset onto the last CPU, which leaves the others to the collector: with stress-ng on both
    CPUs of this VM the collector lost 6.9 M of 9 M kernel records (1.25 M switch ops); on one, none."""
    cpus = os.cpu_count() or 1
    return ["taskset", "-c", str(cpus - 1)] if cpus > 1 else []


def sized_workload(ops: int) -> list[str]:
    return [*pinned(), "stress-ng", "--switch", "2", "--switch-ops", str(ops)]


def mixed_workload(seconds: int) -> list[str]:
    return ["stress-ng", "--switch", "2", "--syscall", "1", "-t", str(seconds)]


def record(trace: Path, command: list[str]) -> dict:
    """Records COMMAND into TRACE unless a kept trace of the same command is there (its stamp,
    bench.json, says so); returns the stamp."""
    from oslens import _native

    want = {"command": command, "events": EVENTS, "format_version": _native.FORMAT_VERSION}
    stamp = trace / "bench.json"
    if stamp.is_file() and {k: v for k, v in json.loads(stamp.read_text()).items() if k in want} == want:
        return {**json.loads(stamp.read_text()), "recorded_now": False}
    shutil.rmtree(trace, ignore_errors=True)
    trace.parent.mkdir(parents=True, exist_ok=True)
    load = loadavg()
    t = time.perf_counter()
    subprocess.run([str(OSLENS), "record", "--events", EVENTS, "--no-import", "-o", str(trace), "--", *command],
                   check=True, capture_output=True)
    got = {**want, "record_s": round(time.perf_counter() - t, 2), "loadavg_at_record": load,
           "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    stamp.write_text(json.dumps(got))
    return {**got, "recorded_now": True}


def kernel_records(trace: Path) -> dict:
    """The kernel chunks' records (their headers' committed counts) and the collector's count."""
    from oslens import _native
    from oslens.capture import raw

    chunks = committed = 0
    for path in raw.chunk_paths(trace):
        header = _native.read_chunk_records(str(path))["header"]
        if header["source"] == _native.SOURCE_KERNEL_CPU:
            chunks += 1
            committed += header["committed"]
    meta = json.loads((trace / "meta.json").read_text())
    kernel = meta.get("kernel") or {}
    return {"kernel_records": committed, "kernel_chunks": chunks, "collector_records": kernel.get("records"),
            "collector_lost": kernel.get("lost")}


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def table_digests(tables: Path) -> dict:
    """Every table file but meta (which holds the import's time): its sha256, and what stays when
    only the Parquet writer changes: rows, columns and types, hashes of the rows' values."""
    import duckdb

    con = duckdb.connect()
    out = {}
    for path in sorted(tables.glob("*.parquet")):
        if path.stem == "meta":
            continue
        src = f"read_parquet('{path}', file_row_number = true)"
        rows, content, ordered = con.sql(
            f"SELECT (SELECT count(*) FROM {src}), "
            f"(SELECT coalesce(sum(hash(t)), 0) FROM (SELECT * EXCLUDE (file_row_number) FROM {src}) t)::VARCHAR, "
            f"(SELECT coalesce(sum(hash(o)), 0) FROM {src} o)::VARCHAR").fetchone()
        columns = con.sql(f"SELECT string_agg(column_name || ' ' || column_type, ', ') FROM "
                          f"(DESCRIBE SELECT * FROM read_parquet('{path}'))").fetchone()[0]
        out[path.stem] = {"rows": rows, "columns": columns, "content_hash": content, "ordered_hash": ordered,
                          "bytes": path.stat().st_size, "sha256": sha256(path)}
    return out


def bytes_per_record(mib: float, records: int) -> float | None:
    return round(mib * 2**20 / records, 1) if records else None


def growth_bytes_per_record(points: list[dict]) -> float | None:
    """Bytes of peak RSS per kernel record between the smallest and the largest trace: what the
    import keeps per record beyond its fixed cost (0 for an import whose memory is bounded)."""
    ordered = sorted(points, key=lambda p: p["kernel_records"])
    lo, hi = ordered[0], ordered[-1]
    if hi["kernel_records"] == lo["kernel_records"]:
        return None
    return round((hi["max_rss_mib"] - lo["max_rss_mib"]) * 2**20 / (hi["kernel_records"] - lo["kernel_records"]), 1)


def growth_steps(points: list[dict]) -> list[float]:
    """The same slope between each size and the next: equal steps are a linear growth."""
    ordered = sorted(points, key=lambda p: p["kernel_records"])
    return [growth_bytes_per_record([a, b]) for a, b in zip(ordered, ordered[1:])]


def source_version() -> dict:
    """The commit measured, and the tree of the importer's code (python/oslens/store and
    crates/native), which tells a before from an after whatever else moved on the branch."""
    from many_processes import ROOT

    def rev(spec: str) -> str | None:
        got = subprocess.run(["git", "-C", str(ROOT), "rev-parse", spec], capture_output=True, text=True)
        return got.stdout.strip() or None if got.returncode == 0 else None

    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "python/oslens/store", "crates"],
                           capture_output=True, text=True).stdout.strip()
    return {"head": rev("HEAD"), "store_tree": rev("HEAD:python/oslens/store"),
            "native_tree": rev("HEAD:crates/native"), "uncommitted_changes_there": bool(dirty)}


def import_fresh(trace: Path, repeat: int) -> dict:
    """The import in `repeat` fresh processes; the run of median CPU time is reported, and every
    run's figures beside it."""
    runs = []
    for _ in range(max(1, repeat)):
        load = loadavg()
        got = import_in_child(trace)
        runs.append({"wall_s": round(got["wall_s"], 3), "cpu_s": round(got["cpu_s"], 3),
                     "max_rss_mib": round(got["max_rss_mib"], 1), "loadavg_before": load})
    median = sorted(runs, key=lambda r: r["cpu_s"])[(len(runs) - 1) // 2]
    return {**median, "runs": runs if len(runs) > 1 else None}


def measure(name: str, command: list[str], repeat: int) -> dict:
    trace = trace_base() / name
    stamp = record(trace, command)
    counts = kernel_records(trace)
    shutil.rmtree(trace / "tables", ignore_errors=True)
    got = import_fresh(trace, repeat)
    manifest = json.loads((trace / "tables" / "manifest.json").read_text())
    return {
        "command": stamp["command"], "trace": str(trace), "recorded_now": stamp["recorded_now"],
        "recorded_at": stamp.get("recorded_at"), "record_s": stamp.get("record_s"),
        **counts, "imported_records": manifest["records"],
        "import_wall_s": got["wall_s"], "import_cpu_s": got["cpu_s"], "max_rss_mib": got["max_rss_mib"],
        "bytes_per_kernel_record": bytes_per_record(got["max_rss_mib"], counts["kernel_records"]),
        "loadavg_before_import": got["loadavg_before"], "runs": got["runs"],
        "tables": table_digests(trace / "tables"),
    }


def perf_stat_counts(text: str) -> dict[str, int]:
    """perf stat -x, output: {event: count} (events perf could not count are left out)."""
    out = {}
    for line in text.splitlines():
        fields = line.split(",")
        if len(fields) >= 3 and fields[0].strip().isdigit():
            out[fields[2]] = int(fields[0])
    return out


def check(seconds: int = 1) -> dict:
    """perf stat's counts of the stress-ng processes against the tables' rows of the same
    processes, in one recording. perf counts from stress-ng's exec on (enable_on_exec), so rows
    of perf itself and of its child before the exec are left out; and perf detaches a task's
    counter early in its exit, so the tables' switch-outs of exiting tasks are shown apart."""
    import duckdb

    trace = trace_base() / f"check-{seconds}s"
    counts_file = trace_base() / f"check-{seconds}s.perf"
    shutil.rmtree(trace, ignore_errors=True)
    command = [*pinned(), "perf", "stat", "-x,", "-o", str(counts_file), "-e", ",".join(PERF_EVENTS), "--",
               *mixed_workload(seconds)]
    record(trace, command)
    perf = perf_stat_counts(counts_file.read_text())
    import_in_child(trace)
    meta = json.loads((trace / "meta.json").read_text())
    con = duckdb.connect()
    t = trace / "tables"
    workload = f"SELECT tid FROM '{t}/tasks.parquet' WHERE is_traced AND pid <> {meta['pid']}"  # meta pid: perf
    exec_end = con.sql(f"SELECT min(end_ns) FROM '{t}/syscalls.parquet' WHERE name = 'execve' AND ret = 0 AND pid = "
                       f"(SELECT pid FROM '{t}/tasks.parquet' WHERE parent_pid = {meta['pid']} ORDER BY start_ns LIMIT 1)").fetchone()[0]
    syscalls = con.sql(f"SELECT count(*) FROM '{t}/syscalls.parquet' WHERE start_ns >= {exec_end} "
                       f"AND tid IN ({workload})").fetchone()[0]
    switches, exiting, dead = con.sql(
        f"WITH ex AS (SELECT tid, min(start_ns) AS s FROM '{t}/syscalls.parquet' "
        f"WHERE name IN ('exit', 'exit_group') GROUP BY tid) "
        f"SELECT count(*) FILTER (WHERE prev_state <> 'Z'), "
        f"count(*) FILTER (WHERE prev_state <> 'Z' AND sw.ts >= ex.s), count(*) FILTER (WHERE prev_state = 'Z') "
        f"FROM '{t}/switches.parquet' sw LEFT JOIN ex ON sw.prev_tid = ex.tid "
        f"WHERE sw.ts >= {exec_end} AND sw.prev_tid IN ({workload})").fetchone()
    shutil.rmtree(trace, ignore_errors=True)
    counts_file.unlink()
    return {
        "command": command,
        "kernel_lost": (meta.get("kernel") or {}).get("lost"),
        "comparable": (meta.get("kernel") or {}).get("lost") == 0,  # events lost by the collector are in perf's counts only
        "syscall_enters": {"tables": syscalls, "perf": perf.get(PERF_EVENTS[0])},
        "switches_out": {"tables": switches, "perf": perf.get(PERF_EVENTS[1]),
                         "tables_of_exiting_tasks": exiting, "tables_final_switch_of_dead_tasks_left_out": dead},
        "note": "tables: rows of stress-ng's threads from its exec on (perf's enable_on_exec); syscalls: rows "
                "with a start (a sys_enter); switches: rows whose prev_tid is such a thread, without the final "
                "switch-out of a dead task (prev_state Z, after perf's counter is gone); perf also misses "
                "switch-outs of a task that is exiting after its counter is detached (perf_event_exit_task): "
                "at most tables_of_exiting_tasks of the difference, plus those of tasks killed by a signal",
    }


def traces_of(result: dict) -> dict[str, dict]:
    """A result's traces by name (switch-N, mixed-Ss)."""
    points = [*result.get("by_size", []), *([result["mixed"]] if result.get("mixed") else [])]
    return {Path(p["trace"]).name: p for p in points}


def compare(before: dict, after: dict) -> dict:
    """Per trace imported in both results: whether it is the same recording, and per table the
    digests that differ (sha256 alone: only the Parquet bytes changed, the values did not)."""
    old, new = traces_of(before), traces_of(after)
    out = {}
    for name in sorted(old.keys() & new.keys()):
        a, b = old[name], new[name]
        tables = {}
        for table in sorted(a["tables"].keys() | b["tables"].keys()):
            x, y = a["tables"].get(table), b["tables"].get(table)
            if x is None or y is None:
                tables[table] = "only before" if y is None else "only after"
                continue
            differ = [k for k in ("rows", "columns", "content_hash", "ordered_hash", "sha256") if x[k] != y[k]]
            if differ:
                tables[table] = differ
        out[name] = {
            "same_recording": a.get("recorded_at") == b.get("recorded_at") and a["kernel_records"] == b["kernel_records"],
            "max_rss_mib": [a["max_rss_mib"], b["max_rss_mib"]], "import_cpu_s": [a["import_cpu_s"], b["import_cpu_s"]],
            "values_identical": not any(v != ["sha256"] for v in tables.values()),
            "tables_differing": tables,
        }
    return out


def run(ops: list[int], seconds: int = 0, keep: bool = False, repeat: int = 1, with_check: bool = False) -> dict:
    if not shutil.which("stress-ng"):
        raise SystemExit("bench/import/kernel_records: stress-ng is not installed (make setup installs it)")
    sizes = [{"switch_ops": n, **measure(f"switch-{n}", sized_workload(n), repeat)} for n in ops]
    result = {
        "events": EVENTS,
        "by_size": sizes,
        "growth_bytes_per_kernel_record": growth_bytes_per_record(sizes) if len(sizes) > 1 else None,
        "growth_steps_bytes_per_kernel_record": growth_steps(sizes),
        "mixed": {"seconds": seconds, **measure(f"mixed-{seconds}s", mixed_workload(seconds), repeat)} if seconds else None,
        "independent_check": check() if with_check else None,
        "loadavg_at_end": loadavg(), "cpus": os.cpu_count(), "source": source_version(),
        "note": "max_rss_mib is VmHWM of the fresh process that imported (Python and oslens's modules "
                "included); import_cpu_s is that process's user+system CPU over all its threads (its "
                "start-up included); a loaded host (loadavg) inflates CPU and wall time, not VmHWM",
    }
    if not keep:
        shutil.rmtree(trace_base(), ignore_errors=True)
    return result


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, nargs="+", default=[250_000, 1_250_000],
                    help="stress-ng switch ops, one trace each (default 250000 1250000: about 2 M and 10 M kernel "
                         "records)")
    ap.add_argument("--seconds", type=int, default=2,
                    help="seconds of the mixed trace (stress-ng --switch 2 --syscall 1 -t S; 0: none)")
    ap.add_argument("--quick", action="store_true", help="one trace of 50,000 ops and a 1-second mixed one (a smoke check)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the traces, so the next run imports the same raw chunks")
    ap.add_argument("--repeat", type=int, default=1, help="fresh imports per trace (the median CPU run is reported)")
    ap.add_argument("--check", action="store_true",
                    help="also compare a 1-second trace's syscalls and switches with perf stat's counts")
    ap.add_argument("--compare", type=Path,
                    help="a result of an earlier run (e.g. bench/import/result-kernel-before-2026-11-24.json): adds "
                         "which tables of the traces imported in both differ, and how")
    args = ap.parse_args()
    got = run([50_000] if args.quick else args.ops, 1 if args.quick else args.seconds, args.keep, args.repeat,
              args.check)
    if args.compare:
        got["compared_with"] = {"file": str(args.compare), "traces": compare(json.loads(args.compare.read_text()), got)}
    json.dump({"benchmark": "import/kernel_records", **got}, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
