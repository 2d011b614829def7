#!/usr/bin/env python3
"""A real build recorded end to end: a small C project (N source files, a static library and a
program; `make -j2` runs gcc's driver, cc1, as, ar and ld, a few hundred processes) built bare,
under `oslens record` (application + kernel events, the default), under `oslens record
--no-kernel` and under `perf record` on the same tracepoints, alternating; each oslens trace is
imported and reported. Prints one JSON object: wall times (medians), the ratios to bare, what
oslens recorded (processes, records, losses) and whether import and report succeeded.

usage: build.py [--rounds 3] [--files 24]
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
OSLENS = ROOT / ".venv" / "bin" / "oslens"
sys.path.insert(0, str(HERE.parent / "kernel_overhead"))
from run import leaving_tracefs_as_found, under_tool  # noqa: E402

EVENTS = "sched,syscalls"
CFGS = ["bare", "oslens", "oslens_no_kernel", "perf"]


def write_project(src: Path, files: int) -> None:
    src.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        (src / f"m{i}.c").write_text(
            f'#include <stdio.h>\n#include <string.h>\n'
            f'static int table{i}[256];\n'
            f'int f{i}(const char *s) {{ int h = {i}; for (size_t k = 0; k < strlen(s); k++) {{ h = h * 31 + s[k]; table{i}[h & 255]++; }}\n'
            f'  for (int k = 0; k < 256; k++) h ^= table{i}[k] << (k & 7); return h; }}\n')
    calls = " + ".join(f"f{i}(argv[0])" for i in range(files))
    decls = "".join(f"int f{i}(const char *);\n" for i in range(files))
    (src / "main.c").write_text(f'#include <stdio.h>\n{decls}int main(int argc, char **argv) {{ (void)argc; printf("%d\\n", {calls}); return 0; }}\n')
    objs = " ".join(f"m{i}.o" for i in range(files))
    (src / "Makefile").write_text(
        f"CFLAGS = -O2 -g\nOBJS = {objs}\n"
        "prog: main.o libm.a\n\t$(CC) -o $@ main.o libm.a\n"
        "libm.a: $(OBJS)\n\t$(AR) rcs $@ $(OBJS)\n"
        "%.o: %.c\n\t$(CC) $(CFLAGS) -c -o $@ $<\n"
        "clean:\n\trm -f *.o libm.a prog\n")


def run_one(cfg: str, src: Path, work: Path) -> dict:
    subprocess.run(["make", "-s", "-C", str(src), "clean"], check=True)
    trace = work / "trace"
    shutil.rmtree(trace, ignore_errors=True)
    make = ["make", "-s", "-j2", "-C", str(src)]
    cmd = make if cfg == "bare" else under_tool(cfg, make, trace, work / "perf.data", EVENTS)
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    rec = {"cfg": cfg, "wall": round(time.monotonic() - t0, 3), "rc": p.returncode}
    if p.returncode != 0:
        rec["stderr"] = p.stderr[-400:]
    if cfg.startswith("oslens") and p.returncode == 0:
        m = re.search(r"(\d+) records from (\d+) threads in (\d+) processes", p.stderr)
        if m:
            rec["records"], rec["threads"], rec["processes"] = map(int, m.groups())
        rec["lost"] = json.loads((trace / "meta.json").read_text()).get("lost_events")
        t0 = time.monotonic()
        imp = subprocess.run([str(OSLENS), "import", str(trace)], capture_output=True, text=True, timeout=900)
        rec["import_s"] = round(time.monotonic() - t0, 2)
        rep = subprocess.run([str(OSLENS), "report", str(trace)], capture_output=True, text=True, timeout=900)
        rec["import_ok"], rec["report_ok"] = imp.returncode == 0, rep.returncode == 0 and len(rep.stdout) > 0
    return rec


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--files", type=int, default=24)
    args = ap.parse_args()
    have_perf = shutil.which("perf") is not None and os.geteuid() == 0
    cfgs = [c for c in CFGS if (have_perf or c not in ("perf", "oslens"))]
    work = Path(tempfile.mkdtemp(prefix="oslens-buildbench-"))
    try:
        write_project(work / "src", args.files)
        runs = []
        for r in range(args.rounds):
            order = cfgs[r % len(cfgs):] + cfgs[: r % len(cfgs)]
            for cfg in order:
                rec = {"round": r, **run_one(cfg, work / "src", work)}
                runs.append(rec)
                print(json.dumps(rec), file=sys.stderr, flush=True)
        med = {c: statistics.median(x["wall"] for x in runs if x["cfg"] == c and x["rc"] == 0) for c in cfgs
               if any(x["cfg"] == c and x["rc"] == 0 for x in runs)}
        result = {"benchmark": "build", "make": "make -j2", "files": args.files, "rounds": args.rounds,
                  "kernel_events": EVENTS, "load_average": os.getloadavg(), "median_wall_s": med,
                  "ratio_to_bare": {c: round(v / med["bare"], 2) for c, v in med.items() if "bare" in med},
                  "runs": runs}
        print(json.dumps(result, indent=2))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(leaving_tracefs_as_found(main))
