"""bench/import: how fast the store imports raw chunks into tables.

Writes a synthetic trace of >= 20 M records with oslens._native.write_chunk (8 threads, TSC
clock; each thread repeats nested regions, a counter, an event with a payload, a timer and a
lock acquisition: oslens.store.synthetic), imports it, and prints JSON: records per second of
wall time and per CPU second (user + system of this process, all its threads), the wall and CPU
time of each phase (reading chunks, building tables, writing Parquet) and the bytes of each
table written. With --keep the trace is kept under $OSLENS_BENCH_DIR (default /tmp) for the
next run (written again when the raw format version changes). bench/import/compression.py
compares Parquet codecs on it.

The core import runs without the importer's extensions, so it is the one native pass
(oslens.store.importer.build_tables(stream=True): app_events, regions, counters, timers,
pauses and adapt written to Parquet a page at a time while the records are split, never held
whole in memory): its build_tables phase includes writing those tables, write_parquet writes
the rest (sync, functions, threads, kernel tables, meta, lost) and moves the files in place. Importer extensions of other layers
(compensation, symbol names) read app_events in memory, so with them the tables are built in
memory first; they are timed separately on a tenth of the records and not counted in the core
rate.

Usage: python bench/import/run.py [--records N] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import sys
import time
from pathlib import Path

# numpy's OpenBLAS starts a worker thread per core when numpy loads, and they spin ~0.1 CPU-s
# waiting for work, inside the timed import when the trace was kept (measured: python -c
# "import numpy" 0.19 CPU-s, 0.08 with one thread). The import does no BLAS work: the bench
# counts the import, not numpy's start-up.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def phase(fn):
    w, c = time.perf_counter(), cpu_s()
    out = fn()
    return out, time.perf_counter() - w, cpu_s() - c


def make_trace(path: Path, records: int, threads: int = 8) -> dict:
    from oslens.store import synthetic

    per_iteration = len(synthetic.PATTERN)
    iterations = -(-records // (threads * per_iteration))
    stamp = path / "bench.json"
    from oslens import _native

    # a trace written in another raw format version would import as damage: written again
    want = {"records": iterations * threads * per_iteration, "threads": threads, "iterations": iterations,
            "format_version": getattr(_native, "FORMAT_VERSION", 1)}
    if stamp.is_file() and json.loads(stamp.read_text()) == want:
        return want
    shutil.rmtree(path, ignore_errors=True)
    synthetic.write_trace(path, threads=threads, iterations=iterations, chunk_records=1 << 20)
    stamp.write_text(json.dumps(want))
    return want


def import_once(path: Path, extensions: bool) -> dict:
    from oslens.store import importer, salvage

    shutil.rmtree(path / "tables", ignore_errors=True)
    losses = salvage.Losses()
    w0, c0, r0 = time.perf_counter(), cpu_s(), resource.getrusage(resource.RUSAGE_SELF)
    tables, build_w, build_c = phase(lambda: importer.build_tables(path, losses, extensions=extensions))
    _, write_w, write_c = phase(lambda: importer.write_tables(path, tables))
    total_w, total_c = time.perf_counter() - w0, cpu_s() - c0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    n = tables["_records"]
    read = tables["_read"]
    sizes = {p.stem: p.stat().st_size for p in sorted((path / "tables").glob("*.parquet"))}
    return {
        "records": n,
        "wall_s": round(total_w, 3),
        "cpu_s": round(total_c, 3),
        "records_per_s": round(n / total_w),
        "records_per_cpu_s": round(n / total_c),
        # system time is mostly first-touch page faults on the arrays built (costly on VMs)
        "user_s": round(r1.ru_utime - r0.ru_utime, 3), "sys_s": round(r1.ru_stime - r0.ru_stime, 3),
        "minor_faults": r1.ru_minflt - r0.ru_minflt,
        # CPU seconds of the whole process (all threads) in each phase; build = read_and_build - read
        "phases": {"read_chunks": {k: round(v, 3) for k, v in read.items()},
                   "build_tables": {"wall_s": round(build_w - read["wall_s"], 3), "cpu_s": round(build_c - read["cpu_s"], 3)},
                   "read_and_build": {"wall_s": round(build_w, 3), "cpu_s": round(build_c, 3)},
                   "write_parquet": {"wall_s": round(write_w, 3), "cpu_s": round(write_c, 3)}},
        "parquet_bytes": {"total": sum(sizes.values()), **{k: v for k, v in sizes.items() if v >= 1 << 20}},
        "extensions_s": {k: round(v, 3) for k, v in tables.get("_extension_s", {}).items()},
        "rows": {k: v.num_rows for k, v in tables.items() if not k.startswith("_") and v.num_rows},
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=20_000_000)
    ap.add_argument("--keep", action="store_true", help="keep the generated traces")
    args = ap.parse_args()
    base = Path(os.environ.get("OSLENS_BENCH_DIR", "/tmp")) / "oslens-bench-import"
    big = base / f"trace-{args.records}"
    small = base / f"trace-{args.records // 10}"
    w = time.perf_counter()
    spec = make_trace(big, args.records)
    gen_s = time.perf_counter() - w
    core = import_once(big, extensions=False)
    make_trace(small, args.records // 10)
    ext = import_once(small, extensions=True)
    ext_core = import_once(small, extensions=False)
    load = os.getloadavg()
    result = {
        "benchmark": "import",
        "target_records_per_cpu_s": 10_000_000,
        "trace": {**spec, "generate_s": round(gen_s, 1), "path": str(big)},
        "core": core,
        "with_extensions_at_tenth": {
            "records": ext["records"], "wall_s": ext["wall_s"], "records_per_s": ext["records_per_s"],
            "extensions_s": ext["extensions_s"], "core_wall_s": ext_core["wall_s"],
        },
        "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "loadavg": [round(x, 2) for x in load]},
        "note": "records_per_cpu_s counts this process's user+system CPU over all its threads; a loaded "
                "machine (see loadavg) inflates CPU time through cache and memory contention",
    }
    print(json.dumps(result, indent=2))
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
