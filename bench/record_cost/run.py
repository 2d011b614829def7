"""bench/record_cost: ns per recorded event for Counter, Timer, Event and region on 1 thread
and on all cores, next to a bare "read TSC + store 16 bytes" loop measured in the same run.

Prints JSON. Each figure is the median over repetitions of the per-thread CPU time per event
(CLOCK_THREAD_CPUTIME_ID, so time preempted by other load does not count); kinds alternate
within a repetition so drift hits all alike. Two baselines: `bare-hot` stores into a reused
64 KiB ring (the figure the target names), `bare-fresh` into fresh memory as a trace must.
The recorder's staging ring is copied out to the trace file by its oslens-helper helper
thread, whose CPU time is not in the per-event figure (the cost on the recording thread, which
includes the slots it copies out itself when the helper falls behind) but is in
`process_cpu_ns_per_event` (the whole process's CPU time per event, helper and start-up
included). `slots_copied_by_threads` is the share of staging slots the recording threads had to
copy out themselves because the helper was behind (their CPU for it is in the per-event figure). Rows marked
"(library call)" are built with -DOSLENS_NO_INLINE; rows marked "(prepared buffer)" are
recorded with --prepare-buffers: every page of the file ready before the timed loop and the
records written in place, without the staging ring. The row "dormant" is the event call of a
program started outside `oslens record`, whose instruments wait for `oslens record -p`."""

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
OSLENS = ROOT / ".venv" / "bin" / "oslens"
KINDS = ["bare-hot", "bare-fresh", "counter", "timer", "event", "region", "off"]
# The same calls built with -DOSLENS_NO_INLINE: every call through the C ABI, for comparison
# with oslens.h's inline fast path (not part of the target).
LIBRARY_KINDS = ["timer", "event", "region"]
# The same calls recorded with --prepare-buffers: every trace page is prepared before the timed
# loop and records go straight to it, so the figure is the record itself without page supply or
# copy-out.
PREPARED_KINDS = ["timer", "event", "region"]
# An event call of a program built with oslens.h and started outside `oslens record` (issue 31:
# its instruments wait for `oslens record -p`): what an instrument costs while nobody records.
DORMANT = ("dormant",)
ITERATIONS = int(os.environ.get("RECORD_COST_ITERATIONS", "2000000"))
REPS = int(os.environ.get("RECORD_COST_REPS", "5"))


def build(out: Path, *defines: str) -> Path:
    flags = subprocess.run([OSLENS, "flags", "--cflags", "--libs"], capture_output=True, text=True, check=True).stdout.split()
    subprocess.run(["gcc", "-O2", *defines, "-o", str(out), str(HERE / "record_cost.c"), *flags, "-lpthread"], check=True)
    return out


def run_once(program: Path, threads: int, kind: str, trace: Path, flags: tuple = ()) -> list[float]:
    env = dict(os.environ, OSLENS_BUFFER_MB=str(max(64, ITERATIONS * 32 // (1 << 20) + 16)))
    if flags == DORMANT:  # started outside oslens record: the instruments stay dormant
        env = {k: v for k, v in os.environ.items() if not k.startswith("OSLENS_")}
        cmd = [program, str(threads), str(ITERATIONS), kind]
    else:
        cmd = [OSLENS, "record", "--no-kernel", "--no-import", "--no-preload", *flags, "-f", "-o", trace, "--", program,
               str(threads), str(ITERATIONS), kind]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    lines = proc.stdout.split("\n")
    per_thread = [float(x) for x in lines if x and not x.startswith("process")]
    process = next(float(x.split()[1]) for x in lines if x.startswith("process"))
    if flags == DORMANT:
        return per_thread, process, None
    meta = json.loads((trace / "meta.json").read_text())
    by_threads = sum(t.get("ring_slots_self_copied", 0) for t in meta["threads"])
    by_helper = sum(h["ring_slots_copied"] for h in meta.get("recorder_helpers", []))
    return per_thread, process, (by_threads / (by_threads + by_helper) if by_threads + by_helper else None)


def main() -> int:
    ncpu = os.cpu_count() or 1
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        inline = build(Path(tmp) / "record_cost")
        library = build(Path(tmp) / "record_cost_library", "-DOSLENS_NO_INLINE")
        runs = [(k, inline, k, ()) for k in KINDS]
        runs += [(f"{k} (library call)", library, k, ()) for k in LIBRARY_KINDS]
        runs += [(f"{k} (prepared buffer)", inline, k, ("--prepare-buffers",)) for k in PREPARED_KINDS]
        runs += [("dormant", inline, "event", DORMANT)]
        for threads in sorted({1, ncpu}):
            samples = {label: [] for label, *_ in runs}
            process = {label: [] for label, *_ in runs}
            self_copied = {label: [] for label, *_ in runs}
            for _ in range(REPS):
                for label, program, kind, flags in runs:
                    per_thread, whole, share = run_once(program, threads, kind, Path(tmp) / "trace", flags)
                    samples[label].append(statistics.median(per_thread))
                    process[label].append(whole)
                    if share is not None:
                        self_copied[label].append(share)
            med = {k: statistics.median(v) for k, v in samples.items()}
            med_process = {k: statistics.median(v) for k, v in process.items()}
            for kind, *_ in runs:
                rows.append({
                    "threads": threads,
                    "kind": kind,
                    "ns_per_event": round(med[kind], 2),
                    "min_ns": round(min(samples[kind]), 2),
                    "ratio_to_bare_hot": round(med[kind] / med["bare-hot"], 3),
                    "ratio_to_bare_fresh": round(med[kind] / med["bare-fresh"], 3),
                    "process_cpu_ns_per_event": round(med_process[kind], 2),
                    # staging slots the recording threads copied out themselves (the helper was
                    # behind), share of all slots, median over repetitions
                    "slots_copied_by_threads": round(statistics.median(self_copied[kind]), 3) if self_copied[kind] else None,
                })
    instrument_rows = [r for r in rows if r["kind"] in ("counter", "timer", "event", "region")]
    result = {
        "benchmark": "record_cost",
        "iterations_per_thread": ITERATIONS,
        "repetitions": REPS,
        "cpus": ncpu,
        "rows": rows,
        "target": "ratio_to_bare_hot <= 1.5 on every instrument row",
        "worst_ratio_to_bare_hot": max(r["ratio_to_bare_hot"] for r in instrument_rows),
        "worst_ratio_to_bare_fresh": max(r["ratio_to_bare_fresh"] for r in instrument_rows),
        "worst_ratio_prepared_to_bare_hot": max(r["ratio_to_bare_hot"] for r in rows if r["kind"].endswith("(prepared buffer)")),
    }
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
