"""bench/flight: what the flight recorder costs, as ratios within one run (docs/flight.md).

1. Per-event cost: bench/record_cost's program (same build, same per-thread CPU time per event)
   recorded normally and with `--flight` (chunks rotated and deleted while it runs), alternating
   within each repetition; the ratio is flight / normal (target: within 10%).
2. Time to save a snapshot of a full 64 MiB-per-thread window: tests/c/flight_stall.c recording
   as fast as it can (FLIGHT_SPIN=0) under `--flight --ring-mb 64`, SIGUSR2 once the ring has gone
   round; the figure is the snapshot's own `save_ns` (from the cut to its meta.json written),
   next to the time `cp` takes to copy the same raw/ folder in the same run (target: <= 100 ms).

Prints JSON. Kernel events off for (1) (the app side is what rotates per event), on for (2).
"""

import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
OSLENS = ROOT / ".venv" / "bin" / "oslens"
REPS = int(os.environ.get("FLIGHT_REPS", "5"))
RING_MB = 64
SNAPSHOTS = int(os.environ.get("FLIGHT_SNAPSHOTS", "3"))


def _record_cost():
    spec = importlib.util.spec_from_file_location("record_cost_run", ROOT / "bench" / "record_cost" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def per_event(tmp: Path) -> dict:
    rc = _record_cost()
    program = rc.build(tmp / "record_cost")
    modes = {"normal": (), "flight": ("--flight", "--ring-mb", str(RING_MB))}
    samples = {m: [] for m in modes}
    for _ in range(REPS):
        for mode, flags in modes.items():
            per_thread, _, _ = rc.run_once(program, 1, "event", tmp / f"trace-{mode}", flags)
            samples[mode].append(statistics.median(per_thread))
    med = {m: statistics.median(v) for m, v in samples.items()}
    return {"iterations": rc.ITERATIONS, "ns_per_event": {m: round(v, 2) for m, v in med.items()},
            "samples": samples, "ratio_flight_to_normal": round(med["flight"] / med["normal"], 3)}


def snapshot_save(tmp: Path) -> dict:
    src = ROOT / "tests" / "c" / "flight_stall.c"
    flags = subprocess.run([OSLENS, "flags", "--cflags", "--libs"], capture_output=True, text=True, check=True).stdout.split()
    prog = tmp / "flight_stall"
    subprocess.run(["gcc", "-O2", "-o", prog, src, *flags, "-lpthread"], check=True)
    trace = tmp / "flight"
    env = dict(os.environ, FLIGHT_SPIN="0")
    proc = subprocess.Popen([OSLENS, "record", "--flight", "--ring-mb", str(RING_MB), "--no-import", "-o", trace, "--",
                             prog, tmp / "log", str(4 + 2 * SNAPSHOTS), "1000"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    copies = []
    time.sleep(4)  # 64 MiB per thread is written in about a second: the ring has gone round
    for i in range(SNAPSHOTS):
        t = time.monotonic()
        subprocess.run(["cp", "-r", trace / "raw", tmp / f"copy{i}"], capture_output=True)
        copies.append(round((time.monotonic() - t) * 1e3, 1))
        proc.send_signal(signal.SIGUSR2)
        time.sleep(2)
    proc.communicate()
    meta = json.loads((trace / "meta.json").read_text())["flight"]
    snaps = []
    for s in meta["snapshots"]:
        d = trace / s["dir"]
        size = sum(p.stat().st_size for p in (d / "raw").iterdir())
        snaps.append({"dir": s["dir"], "save_ms": round(s["save_ns"] / 1e6, 1), "raw_mib": round(size / (1 << 20), 1),
                      "trigger_to_cut_ms": round((s["cut_ns"] - s["t_ns"]) / 1e6, 1)})
    return {"ring_mb_per_stream": RING_MB, "snapshots": snaps, "cp_raw_ms": copies,
            "median_save_ms": statistics.median(x["save_ms"] for x in snaps) if snaps else None,
            "max_raw_mib_during_run": round(meta["max_raw_bytes"] / (1 << 20), 1)}


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        result = {"benchmark": "flight", "cpus": os.cpu_count(), "repetitions": REPS,
                  "per_event": per_event(Path(tmp)), "snapshot": snapshot_save(Path(tmp)),
                  "targets": "per_event.ratio_flight_to_normal <= 1.10; snapshot.median_save_ms <= 100"}
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
