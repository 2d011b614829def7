"""bench/flight: what the flight recorder costs, as ratios within one run (docs/flight.md).

1. Per-event cost: bench/flight/event_cost.c (one thread, EVENTS osl_event calls, thread CPU
   time and wall time per event) recorded normally (one chunk holds the round) and with
   `--flight --ring-mb 64` (16 MiB chunks: 7 rotations a round, 4 chunks deleted by the loop),
   the same binary in PAIRS short rounds alternating AB BA AB ..., pinned (taskset) to the last
   CPU. The figure is the median of the paired ratios flight / normal, with its IQR and a 95%
   interval of the median (target: within 10%). A third mode, `flight_one_chunk` (a ring so
   large that no rotation happens in a round), tells a per-record difference from the cost of
   the rotations; `per_rotation_us` is that cost on the thread. The `rotation` part measures it
   from the dose: rings of 4, 16 and 64 MiB (123, 31 and 7 rotations a round) against normal.
2. Time to save a snapshot of a full 64 MiB-per-thread window: tests/c/flight_stall.c writing
   ~100 MB/s under `--flight --ring-mb 64`, SIGUSR2 every GAP_S once the ring has gone round;
   the figure is each snapshot's own `save_ns` (from the cut to its meta.json written) with its
   step breakdown (flight_snapshot.Steps: the loop thread's CPU and run-queue wait too), next to
   the time `cp` takes to copy the same raw/ folder in the same run (target: <= 100 ms).
3. Kernel side against perf: bench/kernel_overhead's pinned pipe ping-pong and getpid loop run
   bare, under `oslens record --flight --ring-mb 16 --no-import --no-preload --events
   sched,syscalls` and under `perf record --overwrite -m 16M -e <the same tracepoints>`,
   alternating (rotated order per round); medians of the programs' own ELAPSED; the ratio
   oslens_added / perf_added (target: <= 1).

Prints JSON, with the load average before and after. Kernel events off for (1) (the app side
is what rotates per event), on for (2), (3).

usage: run.py [--parts per_event,rotation,snapshot,kernel] [--rounds 3] [--pp 200000] [--gp 3000000]
environment: FLIGHT_PAIRS (30), FLIGHT_EVENTS (4000000), FLIGHT_SNAPSHOTS (12)
"""

import argparse
import importlib.util
import json
import os
import shutil
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
RING_MB = 64
SNAPSHOTS = int(os.environ.get("FLIGHT_SNAPSHOTS", "12"))
SPIN = 400  # flight_stall's work per event in the snapshot part (see snapshot_save)
GAP_S = 1.5  # between SIGUSR2s


def _bench_module(name: str):
    """Another bench's run.py as a module (bench/ is not a package; its main is guarded)."""
    spec = importlib.util.spec_from_file_location(f"{name}_run", ROOT / "bench" / name / "run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


PAIRS = int(os.environ.get("FLIGHT_PAIRS", "30"))
EVENTS = int(os.environ.get("FLIGHT_EVENTS", "4000000"))  # 128 MiB: 8 chunks of 16 MiB, 4 deleted by the loop


def _pinned_cpu() -> int:
    """The CPU the program is pinned to: the last one this process may use."""
    return max(os.sched_getaffinity(0))


def _quartiles(v: list[float]) -> list[float]:
    q = statistics.quantiles(v, n=4, method="inclusive") if len(v) > 1 else [v[0]] * 3
    return [round(x, 4) for x in q]


def _median_ci95(v: list[float]) -> list[float] | None:
    """A distribution-free 95% interval of the median: order statistics by the binomial (n >= 6)."""
    n = len(v)
    if n < 6:
        return None
    from math import comb
    s = sorted(v)
    k = max(j for j in range(n // 2) if sum(comb(n, i) for i in range(j + 1)) / 2 ** n <= 0.025)  # P(at most k below) <= 2.5%
    return [round(s[k], 4), round(s[n - 1 - k], 4)]


def _chunks_made(trace: Path) -> int:
    """Application chunk files the recording thread opened (sequence numbers, deleted ones too)."""
    seqs = [int(p.stem.rsplit("-", 1)[1]) for p in (trace / "raw").glob("app-*.osl")]
    return max(seqs) + 1 if seqs else 0


def _event_run(program: Path, trace: Path, flags: tuple, cpu: int) -> tuple[float, float, dict]:
    """One round of one mode: (thread CPU ns/event, wall ns/event, what the recording did)."""
    env = dict(os.environ, OSLENS_BUFFER_MB=str(EVENTS * 32 // (1 << 20) + 16))  # normal mode: one chunk holds the round
    cmd = [str(OSLENS), "record", "--no-kernel", "--no-import", "--no-preload", *flags, "-f", "-o", str(trace), "--",
           "taskset", "-c", str(cpu), str(program), str(EVENTS)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout.split()
    meta = json.loads((trace / "meta.json").read_text())
    by_threads = sum(t.get("ring_slots_self_copied", 0) for t in meta["threads"])
    by_helper = sum(h["ring_slots_copied"] for h in meta.get("recorder_helpers", []))
    over = (meta.get("flight") or {}).get("overwritten") or []
    info = {"chunks": _chunks_made(trace), "deleted": sum(o["chunks"] for o in over),
            "self_copied": round(by_threads / (by_threads + by_helper), 3) if by_threads + by_helper else None}
    return float(out[0]), float(out[1]), info


def per_event(tmp: Path) -> dict:
    """Flight against normal recording, same binary, PAIRS short rounds alternating (AB BA AB ...),
    the program pinned to one CPU; the figure is the median of the paired ratios, with its IQR.
    `flight_one_chunk` (a ring four times larger: no rotation in a round) tells a per-record
    difference from the cost of the rotations themselves."""
    flags = subprocess.run([OSLENS, "flags", "--cflags", "--libs"], capture_output=True, text=True, check=True).stdout.split()
    program = tmp / "event_cost"
    subprocess.run(["gcc", "-O2", "-o", program, HERE / "event_cost.c", *flags], check=True)
    ring_big = 4 * (EVENTS * 32 // (1 << 20) + 16)
    modes = {"normal": (), "flight": ("--flight", "--ring-mb", str(RING_MB)),
             "flight_one_chunk": ("--flight", "--ring-mb", str(ring_big))}
    cpu = _pinned_cpu()
    cpu_ns = {m: [] for m in modes}
    wall_ns = {m: [] for m in modes}
    info = {m: [] for m in modes}
    for r in range(PAIRS):
        order = ["normal", "flight"] if r % 2 == 0 else ["flight", "normal"]
        for mode in order + ["flight_one_chunk"]:
            c, w, i = _event_run(program, tmp / f"trace-{mode}", modes[mode], cpu)
            cpu_ns[mode].append(c)
            wall_ns[mode].append(w)
            info[mode].append(i)
    out = {"events_per_round": EVENTS, "pairs": PAIRS, "pinned_cpu": cpu, "ring_mb": {"flight": RING_MB, "flight_one_chunk": ring_big}}
    for name, by_mode in (("thread_cpu", cpu_ns), ("wall", wall_ns)):
        entry = {"ns_per_event_median": {m: round(statistics.median(v), 3) for m, v in by_mode.items()},
                 "ns_per_event_iqr": {m: _quartiles(v)[::2] for m, v in by_mode.items()}}
        for other in ("flight", "flight_one_chunk"):
            ratios = [f / n for f, n in zip(by_mode[other], by_mode["normal"])]
            q = _quartiles(ratios)
            entry[f"ratio_{other}_to_normal"] = {"median": q[1], "iqr": [q[0], q[2]], "median_ci95": _median_ci95(ratios)}
        # what one rotation costs the thread: the paired difference to the no-rotation control, over its rotations
        rot = [(f - o) * EVENTS / max(1, i["chunks"] - 1) / 1e3 for f, o, i in zip(by_mode["flight"], by_mode["flight_one_chunk"], info["flight"])]
        entry["per_rotation_us"] = {"median": round(statistics.median(rot), 1), "iqr": [round(x, 1) for x in _quartiles(rot)[::2]]}
        entry["samples"] = {m: [round(x, 3) for x in v] for m, v in by_mode.items()}
        out[name] = entry
    out["per_round"] = {m: {"chunks_made": [i["chunks"] for i in v], "chunks_deleted": [i["deleted"] for i in v],
                            "slots_self_copied_share": [i["self_copied"] for i in v]} for m, v in info.items()}
    return out


def snapshot_save(tmp: Path) -> dict:
    src = ROOT / "tests" / "c" / "flight_stall.c"
    flags = subprocess.run([OSLENS, "flags", "--cflags", "--libs"], capture_output=True, text=True, check=True).stdout.split()
    prog = tmp / "flight_stall"
    subprocess.run(["gcc", "-O2", "-o", prog, src, *flags, "-lpthread"], check=True)
    trace = tmp / "flight"
    # Not FLIGHT_SPIN=0: as fast as it can, flight_stall reaches its log's cap (2^22 regions) in
    # 5-11 s and exits, and SIGUSR2s sent after that make no snapshot (the first run's "3 SIGUSR2,
    # 1 snapshot"). At this spin it writes ~100 MB/s (the ring goes round in under a second) and
    # outlives the triggers; signals the program did not outlive are counted, not sent.
    env = dict(os.environ, FLIGHT_SPIN=str(SPIN))
    seconds = 4 + GAP_S * SNAPSHOTS + 3
    proc = subprocess.Popen([OSLENS, "record", "--flight", "--ring-mb", str(RING_MB), "--no-import", "-o", trace, "--",
                             prog, tmp / "log", str(seconds), "1000"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    copies, sent, not_sent = [], [], 0
    time.sleep(4)  # the ring has gone round several times
    for i in range(SNAPSHOTS):
        t = time.monotonic()
        subprocess.run(["cp", "-r", trace / "raw", tmp / "copy"], capture_output=True)
        copies.append(round((time.monotonic() - t) * 1e3, 1))
        shutil.rmtree(tmp / "copy", ignore_errors=True)
        if _program_running(proc.pid):
            sent.append(time.monotonic_ns())
            proc.send_signal(signal.SIGUSR2)
        else:
            not_sent += 1
        time.sleep(GAP_S)
    proc.communicate()
    regions = (tmp / "log").read_text().count("\n")
    meta = json.loads((trace / "meta.json").read_text())["flight"]
    snaps = []
    for s in meta["snapshots"]:
        d = trace / s["dir"]
        size = sum(p.stat().st_size for p in (d / "raw").iterdir())
        snaps.append({"dir": s["dir"], "save_ms": round(s["save_ns"] / 1e6, 1), "raw_mib": round(size / (1 << 20), 1),
                      "trigger_to_cut_ms": round((s["cut_ns"] - s["t_ns"]) / 1e6, 1), "steps": s.get("save_steps")})
    saves = [x["save_ms"] for x in snaps]
    return {"ring_mb_per_stream": RING_MB, "program_seconds": seconds, "flight_spin": SPIN, "program_regions": regions,
            "sigusr2_sent": len(sent), "sigusr2_not_sent_program_ended": not_sent, "snapshots": snaps, "cp_raw_ms": copies,
            "median_save_ms": statistics.median(saves) if saves else None, "max_save_ms": max(saves) if saves else None,
            "median_steps_ms": _median_steps(snaps),
            "max_raw_mib_during_run": round(meta["max_raw_bytes"] / (1 << 20), 1),
            # why a SIGUSR2 gave no snapshot, when fewer than asked for were saved
            "ignored_triggers": meta.get("ignored_triggers", []), "record_rc": proc.returncode}


def _program_running(oslens_pid: int) -> bool:
    """Whether `oslens record` still has its program (a child) running."""
    try:
        kids = Path(f"/proc/{oslens_pid}/task/{oslens_pid}/children").read_text().split()
    except OSError:
        return False
    return any(Path(f"/proc/{k}/stat").exists() and Path(f"/proc/{k}/stat").read_text().split(") ")[-1][0] != "Z" for k in kids)


ROTATION_RINGS_MB = (4, 16, 64)  # 1, 4 and 16 MiB chunks: 123, 31 and 7 rotations a round


def rotation(tmp: Path) -> dict:
    """The thread's cost per rotation, from the dose: flight with rings of 4, 16 and 64 MiB (more
    rotations per round as the chunk shrinks) and with no rotation, each paired with normal
    recording in the same round (order reversed every round); per ring, the median paired ratio
    and the thread CPU per rotation (the paired difference to the no-rotation run over the
    rotations)."""
    flags = subprocess.run([OSLENS, "flags", "--cflags", "--libs"], capture_output=True, text=True, check=True).stdout.split()
    program = tmp / "event_cost"
    subprocess.run(["gcc", "-O2", "-o", program, HERE / "event_cost.c", *flags], check=True)
    big = 4 * (EVENTS * 32 // (1 << 20) + 16)
    modes = {"normal": ()} | {f"ring_{mb}": ("--flight", "--ring-mb", str(mb)) for mb in (*ROTATION_RINGS_MB, big)}
    cpu, rounds = _pinned_cpu(), max(6, PAIRS // 3)
    got = {m: [] for m in modes}
    for r in range(rounds):
        for mode in (list(modes) if r % 2 == 0 else list(modes)[::-1]):
            c, _, i = _event_run(program, tmp / f"rot-{mode}", modes[mode], cpu)
            got[mode].append((c, i["chunks"]))
    out = {"rounds": rounds, "events_per_round": EVENTS, "no_rotation_ring_mb": big, "rings": {}}
    for mb in (*ROTATION_RINGS_MB, big):
        m = f"ring_{mb}"
        ratios = [a[0] / b[0] for a, b in zip(got[m], got["normal"])]
        per_rot = [(a[0] - z[0]) * EVENTS / max(1, a[1] - 1) / 1e3 for a, z in zip(got[m], got[f"ring_{big}"])]
        out["rings"][str(mb)] = {"rotations_per_round": got[m][0][1] - 1, "thread_cpu_ratio_to_normal": _quartiles(ratios),
                                 "thread_cpu_us_per_rotation": _quartiles(per_rot) if mb != big else None,
                                 "ns_per_event": [round(x[0], 3) for x in got[m]]}
    out["normal_ns_per_event"] = [round(x[0], 3) for x in got["normal"]]
    out["note"] = "ratio and per-rotation figures are [q1, median, q3] over the rounds"
    return out


def _median_steps(snaps: list[dict]) -> dict:
    """Per step of a save (flight_snapshot.Steps), the median ms over the snapshots; with the
    loop thread's CPU and run-queue wait over the whole save."""
    steps = [{**x["steps"]["ms"], "thread_cpu": x["steps"]["cpu_ms"], "thread_runq": x["steps"].get("runq_ms", 0.0)}
             for x in snaps if x.get("steps")]
    return {k: round(statistics.median(st.get(k, 0.0) for st in steps), 2) for k in sorted({k for st in steps for k in st})}


KERNEL_EVENTS = "sched,syscalls"
KERNEL_RING_MB = 16


def kernel_command(cfg: str, cmd: list[str], tmp: Path, ko) -> list[str]:
    """`cmd` bare, under oslens's flight recorder, or under perf's overwrite ring, same tracepoints."""
    if cfg == "base":
        return cmd
    if cfg == "oslens_flight":
        return [str(OSLENS), "record", "--flight", "--ring-mb", str(KERNEL_RING_MB), "--no-import", "--no-preload",
                "-f", "-o", str(tmp / "kflight"), "--events", KERNEL_EVENTS, "--", *cmd]
    full = ["perf", "record", "-q", "--overwrite", "-m", f"{KERNEL_RING_MB}M", "-o", str(tmp / "kperf.data")]
    for e in (e for s in KERNEL_EVENTS.split(",") for e in ko.TRACEPOINTS[s]):
        full += ["-e", e]
    return full + ["--", *cmd]


def _kernel_tier(trace: Path) -> str:
    """What the collector traced with (so a fallback to counters is not read as a win)."""
    try:
        k = json.loads((trace / "meta.json").read_text()).get("kernel", {})
        return f"{k.get('tier')} ({k.get('mechanism', '')[:40]})"
    except (OSError, ValueError):
        return "no meta.json"


def kernel_vs_perf(tmp: Path, rounds: int, pp: int, gp: int) -> dict:
    ko = _bench_module("kernel_overhead")
    exe = ko.build(tmp)
    cpu = (os.cpu_count() or 1) - 1
    programs = {"pingpong_pinned": [str(exe["pingpong"]), str(pp), str(cpu)], "getpid": [str(exe["getpid"]), str(gp)]}
    cfgs = ["base", "oslens_flight", "perf_overwrite"]
    runs = {name: {c: [] for c in cfgs} for name in programs}
    failures, tiers = [], set()
    for r in range(rounds):
        order = cfgs[r % len(cfgs):] + cfgs[: r % len(cfgs)]
        for name, cmd in programs.items():
            for cfg in order:
                p = subprocess.run(kernel_command(cfg, cmd, tmp, ko), capture_output=True, text=True, timeout=300)
                t = ko.elapsed(p.stderr)
                print(json.dumps({"kernel": name, "cfg": cfg, "round": r, "elapsed": t, "rc": p.returncode}), file=sys.stderr, flush=True)
                if cfg == "oslens_flight":
                    tiers.add(_kernel_tier(tmp / "kflight"))
                if p.returncode == 0 and t is not None:
                    runs[name][cfg].append(t)
                else:
                    failures.append({"program": name, "cfg": cfg, "round": r, "rc": p.returncode, "stderr": p.stderr[-300:]})
    out = {"events": KERNEL_EVENTS, "rounds": rounds, "ring_mb": KERNEL_RING_MB,
           "perf": f"perf record --overwrite -m {KERNEL_RING_MB}M -e <same tracepoints>", "oslens_tier": sorted(tiers), "programs": {}, "failures": failures}
    for name, by_cfg in runs.items():
        med = {c: statistics.median(v) if v else None for c, v in by_cfg.items()}
        entry = {"median_s": med, "runs": by_cfg}
        if med["base"] and med["oslens_flight"] and med["perf_overwrite"]:
            entry["oslens_added_s"] = round(med["oslens_flight"] - med["base"], 4)
            entry["perf_added_s"] = round(med["perf_overwrite"] - med["base"], 4)
            if entry["perf_added_s"] > 0:
                entry["added_ratio_oslens_over_perf"] = round(entry["oslens_added_s"] / entry["perf_added_s"], 3)
        out["programs"][name] = entry
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default="per_event,rotation,snapshot,kernel")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the kernel-side comparison")
    ap.add_argument("--pp", type=int, default=200_000, help="ping-pong round trips")
    ap.add_argument("--gp", type=int, default=3_000_000, help="getpid calls")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    if parts - {"per_event", "rotation", "snapshot", "kernel"}:
        print(f"bench/flight: unknown part in --parts {args.parts}", file=sys.stderr)
        return 2
    if "kernel" in parts and (os.geteuid() != 0 or shutil.which("perf") is None):
        print("bench/flight: the kernel part needs root and perf", file=sys.stderr)
        return 2
    result = {"benchmark": "flight", "cpus": os.cpu_count(), "load_before": list(os.getloadavg())}
    with tempfile.TemporaryDirectory() as tmp:
        if "per_event" in parts:
            result["per_event"] = per_event(Path(tmp))
        if "rotation" in parts:
            result["rotation"] = rotation(Path(tmp))
        if "snapshot" in parts:
            result["snapshot"] = snapshot_save(Path(tmp))
        if "kernel" in parts:
            result["kernel_vs_perf"] = kernel_vs_perf(Path(tmp), args.rounds, args.pp, args.gp)
    result["load_after"] = list(os.getloadavg())
    result["targets"] = ("per_event.thread_cpu.ratio_flight_to_normal.median <= 1.10 (and wall); snapshot.median_save_ms <= 100; "
                         "kernel_vs_perf.programs.*.added_ratio_oslens_over_perf <= 1")
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    # perf record mounts tracefs when it is not: leave it as found
    sys.exit(_bench_module("kernel_overhead").leaving_tracefs_as_found(main))
