"""bench/import, many-processes case: a real trace of N short processes (`oslens record` of a
shell running /bin/true N times: one preallocated 64 MiB chunk per process and one per exec'd
program, almost all of it never written), imported in a fresh process.

Reports the import's wall and CPU time, its peak RSS (VmHWM of the importing child), and
what the import brought into the page cache: the trace's raw files resident afterwards
(mincore through util-linux `fincore`, after dropping clean caches when run as root) against
their size on disk. Before chunks were read by their committed part only, 100 runs of
/bin/true (4.5 MB on disk) left 6.8 GB of their files in the page cache.

Usage: python bench/import/many_processes.py [--processes N]   (prints JSON)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
OSLENS = ROOT / ".venv" / "bin" / "oslens"


def record(trace: Path, processes: int) -> float:
    t = time.perf_counter()
    subprocess.run([str(OSLENS), "record", "--no-kernel", "--no-import", "-o", str(trace), "--",
                    "sh", "-c", f"i=0; while [ $i -lt {processes} ]; do /bin/true; i=$((i+1)); done"],
                   check=True, capture_output=True)
    return time.perf_counter() - t


def disk_bytes(paths: list[Path]) -> tuple[int, int]:
    """(bytes allocated on disk, apparent size) of the files."""
    st = [p.stat() for p in paths]
    return sum(s.st_blocks * 512 for s in st), sum(s.st_size for s in st)


def resident_bytes(paths: list[Path]) -> int | None:
    """Bytes of the files in the page cache (util-linux fincore), None without it."""
    if not shutil.which("fincore") or not paths:
        return None
    out = subprocess.run(["fincore", "-b", "-n", "-o", "RES", *map(str, paths)], capture_output=True, text=True)
    return sum(int(x) for x in out.stdout.split()) if out.returncode == 0 else None


def drop_clean_caches() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("1")
        return True
    except OSError:
        return False


def peak_rss_mib() -> float:
    """This process's peak RSS since it was exec'd (VmHWM). Not ru_maxrss: Linux carries the
    pre-exec memory's high-water mark into it, so a child forked from a big bench process would
    report the parent's size."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def import_in_child(trace: Path) -> dict:
    """`oslens.store.import_trace` in a fresh Python process: wall, CPU and peak RSS."""
    code = ("import json, resource, sys, time; sys.path.insert(0, sys.argv[2]); import many_processes as m; "
            "from oslens import store; t = time.perf_counter(); "
            "store.import_trace(sys.argv[1], force=True, quiet=True); w = time.perf_counter() - t; "
            "r = resource.getrusage(resource.RUSAGE_SELF); "
            "print(json.dumps({'wall_s': w, 'cpu_s': r.ru_utime + r.ru_stime, 'max_rss_mib': m.peak_rss_mib()}))")
    proc = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-c", code, str(trace), str(Path(__file__).parent)],
                          check=True, capture_output=True, text=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(processes: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="oslens-bench-procs-") as tmp:
        trace = Path(tmp) / "trace"
        record_s = record(trace, processes)
        chunks = sorted((trace / "raw").glob("*.osl"))
        on_disk, apparent = disk_bytes(chunks)
        dropped = drop_clean_caches()
        before = resident_bytes(chunks)
        got = import_in_child(trace)
        after = resident_bytes(chunks)
        return {
            "processes": processes,
            "chunks": len(chunks),
            "record_s": round(record_s, 2),
            "raw_on_disk_mib": round(on_disk / 2**20, 2),
            "raw_apparent_mib": round(apparent / 2**20, 1),
            "import_wall_s": round(got["wall_s"], 3),
            "import_cpu_s": round(got["cpu_s"], 3),
            "import_max_rss_mib": round(got["max_rss_mib"], 1),
            "caches_dropped_first": dropped,
            "raw_resident_before_mib": None if before is None else round(before / 2**20, 2),
            "raw_resident_after_import_mib": None if after is None else round(after / 2**20, 2),
            "resident_over_on_disk": None if after is None or not on_disk else round(after / on_disk, 2),
        }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, default=1000)
    args = ap.parse_args()
    json.dump({"benchmark": "import/many_processes", **run(args.processes),
               "loadavg": [round(x, 2) for x in os.getloadavg()]}, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
