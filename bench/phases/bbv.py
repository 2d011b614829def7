#!/usr/bin/env python3
"""oslens phases against basic-block vectors (SimPoint's own input) on workloads/phases: a
compute phase, an I/O phase (write + fdatasync, ~35% of the wall time) and compute again.

BBV side: the program runs under valgrind's exp-bbv (intervals of --bbv-interval instructions);
each interval's vector is normalised to sum 1, projected to 15 random dimensions and clustered
by k-means with k chosen by BIC as SimPoint 3 does (the smallest k whose BIC is within 90% of
the best score's range; k-means++ from fixed seeds, the best of 5 starts), and again told k (the
number of kinds of phase in the script, `told_k`): SimPoint's best case. Which intervals ran the
I/O phase is known from the block addresses (exp-bbv's --pc-out-file names each block's
function: io_write_block). The program prints its phase switch times (CLOCK_MONOTONIC) under
valgrind too, so each wall-clock millisecond of the run is given the cluster of the BBV
interval(s) running then: the I/O phase's time goes to the intervals holding io_write_block
blocks (in proportion to those blocks' instructions), each compute phase's time to its
intervals in proportion to their instructions.

oslens side: the same program and script recorded natively with `oslens record --phases`,
analysed by `oslens phases` (default weights and, to be fair to a program without regions,
--weights region=0); each millisecond gets the phase of the interval it falls in.

Both are scored against the program's own script with the adjusted Rand index over wall-clock
milliseconds, and the BBV side also by where the I/O phase went: the share of BBV intervals that
ran it whether its cluster is the compute phases' main cluster, and how many compute-only intervals
share its cluster (then SimPoint labels the I/O phase's time as that compute behaviour). Prints one JSON object.

    bench/phases/bbv.py [--script compute:500,io:550,compute:500] [--bbv-interval 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
from oslens.phases.score import ari, parse_script as truth  # noqa: E402

WORKLOAD = ROOT / "workloads" / "phases" / "phases"
OSLENS = ROOT / ".venv" / "bin" / "oslens"
PROJECTED_DIMS = 15
MAX_K = 10


def truth_labels(script, t0: int, ms: int) -> np.ndarray:
    """The script's phase kind at each millisecond from t0 (compute phases share one label)."""
    kinds = sorted({k for k, _, _ in script})
    out = np.full(ms, -1)
    for k, b, e in script:
        out[max(0, (b - t0) // 1_000_000):max(0, (e - t0) // 1_000_000)] = kinds.index(k)
    return out


# ---------------------------------------------------------------- BBV / SimPoint


def read_bbv(bb_out: Path):
    rows = []
    for line in bb_out.read_text().splitlines():
        if not line.startswith("T"):
            continue
        rows.append({int(i): int(c) for i, c in (tok.split(":")[1:3] for tok in line[1:].split())})
    ids = sorted({i for r in rows for i in r})
    col = {i: j for j, i in enumerate(ids)}
    m = np.zeros((len(rows), len(ids)))
    for r, row in enumerate(rows):
        for i, c in row.items():
            m[r, col[i]] = c
    return m, ids


def blocks_of(pc_out: Path, function_prefix: str) -> set[int]:
    out = set()
    for line in pc_out.read_text().splitlines():
        parts = line.split(":")
        if len(parts) >= 4 and parts[0] == "F" and parts[3].startswith(function_prefix):
            out.add(int(parts[1]))
    return out


def kmeans(x, k, rng, iters=100):
    c = x[[rng.integers(len(x))]]
    for _ in range(1, k):
        d = ((x[:, None] - c[None]) ** 2).sum(-1).min(1)
        c = np.vstack([c, x[rng.choice(len(x), p=d / d.sum()) if d.sum() > 0 else rng.integers(len(x))]])
    for _ in range(iters):
        lab = ((x[:, None] - c[None]) ** 2).sum(-1).argmin(1)
        new = np.array([x[lab == j].mean(0) if (lab == j).any() else c[j] for j in range(k)])
        if np.allclose(new, c):
            break
        c = new
    return lab, c, float(((x - c[lab]) ** 2).sum())


def bic(x, lab, c):
    n, d = x.shape
    k = len(c)
    var = max(((x - c[lab]) ** 2).sum() / max(n - k, 1) / d, 1e-12)
    sizes = np.bincount(lab, minlength=k)
    nz = sizes[sizes > 0].astype(float)
    ll = (nz * np.log(nz)).sum() - n * np.log(n) - n * d / 2 * np.log(2 * np.pi * var) - (n - k) * d / 2
    return ll - k * (d + 1) / 2 * np.log(n)


def simpoint(m: np.ndarray, seed: int = 0, k_fixed: int | None = None):
    """SimPoint 3's clustering of BBVs: normalise, project to 15 dims, k-means, k by BIC (or
    k_fixed, as when told how many kinds of phase the script has)."""
    rng = np.random.default_rng(seed)
    x = m / np.maximum(m.sum(axis=1, keepdims=True), 1)
    x = x @ rng.uniform(-1, 1, (x.shape[1], PROJECTED_DIMS))
    results = []
    for k in ([k_fixed] if k_fixed else range(1, min(MAX_K, len(x)) + 1)):
        best = min((kmeans(x, k, np.random.default_rng(seed * 100 + k * 10 + s)) for s in range(5)), key=lambda r: r[2])
        results.append((best[0], bic(x, best[0], best[1])))
    scores = [s for _, s in results]
    lo, hi = min(scores), max(scores)
    pick = next(i for i, s in enumerate(scores) if hi == lo or s >= lo + 0.9 * (hi - lo))
    return results[pick][0], (k_fixed or pick + 1)


def bbv_panel(m: np.ndarray, labels: np.ndarray, interval: int) -> dict:
    """The BBVs' own similarity matrix (Manhattan between normalised vectors, as Krintz & Wolski
    drew theirs), on an axis of instructions."""
    from oslens.phases import similarity

    x = m / np.maximum(m.sum(axis=1, keepdims=True), 1)
    d, per = similarity.similarity(x)
    return {"distances": d, "per": per, "phases": labels[::per][: len(d)], "wall_ns": 0,
            "extent": len(m) * interval / 1e6, "axis": "instructions (millions)", "title": "basic-block vectors (exp-bbv)",
            "own_scale": True}


FIGURES: list = []


def bbv_run(script: str, interval: int, work: Path) -> dict:
    bb, pc = work / "bb.out", work / "pc.out"
    proc = subprocess.run(["valgrind", "--tool=exp-bbv", f"--interval-size={interval}", f"--bb-out-file={bb}",
                           f"--pc-out-file={pc}", str(WORKLOAD), "--script", script, "--dir", str(work)],
                          capture_output=True, text=True, check=True)
    script_t = truth(proc.stderr)
    m, ids = read_bbv(bb)
    io_blocks = blocks_of(pc, "io_write_block")
    clustering = simpoint(m)
    if not FIGURES:
        FIGURES.append(bbv_panel(m, clustering[0], interval))
    out = score_bbv(m, ids, io_blocks, script_t, interval, clustering)
    out["told_k"] = score_bbv(m, ids, io_blocks, script_t, interval,
                              simpoint(m, k_fixed=len({k for k, _, _ in script_t})))
    return out


def score_bbv(m, ids, io_blocks, script_t, interval, clustering) -> dict:
    labels, k = clustering
    io_cols = [j for j, i in enumerate(ids) if i in io_blocks]
    io_instr = m[:, io_cols].sum(axis=1)
    io_rows = np.flatnonzero(io_instr > 0)
    # wall-clock milliseconds -> BBV cluster
    t0, t1 = script_t[0][1], script_t[-1][2]
    ms = (t1 - t0) // 1_000_000
    guess = np.zeros(ms, dtype=np.int64)
    cum = np.cumsum(m.sum(axis=1))
    first_io, last_io = (int(io_rows[0]), int(io_rows[-1])) if len(io_rows) else (len(m), len(m))
    phase_rows = [range(0, first_io + 1), io_rows, range(last_io, len(m))]
    for (kind, b, e), rows in zip(script_t, phase_rows):
        lo, hi = (b - t0) // 1_000_000, (e - t0) // 1_000_000
        rows = list(rows)
        w = io_instr[rows] if kind == "io" else m[rows].sum(axis=1)
        w = w / w.sum() if w.sum() > 0 else np.full(len(rows), 1 / max(len(rows), 1))
        edges = lo + np.round(np.cumsum(np.concatenate([[0], w])) * (hi - lo)).astype(int)
        for r, a, z in zip(rows, edges[:-1], edges[1:]):
            guess[a:z] = labels[r]
    want = truth_labels(script_t, t0, ms)
    compute_rows = np.setdiff1d(np.arange(len(m)), io_rows)
    compute_cluster = np.bincount(labels[compute_rows]).argmax() if len(compute_rows) else -1
    io_clusters = sorted({int(labels[r]) for r in io_rows})
    io_cluster_rows = np.flatnonzero(np.isin(labels, io_clusters))
    compute_mates = np.setdiff1d(io_cluster_rows, io_rows)
    return {
        "intervals": int(len(m)), "instructions_per_interval": interval, "k": int(k),
        "io_share_of_wall": (script_t[1][2] - script_t[1][1]) / (t1 - t0),
        "intervals_running_io": int(len(io_rows)),
        "io_share_of_intervals": float(len(io_rows) / len(m)),
        "io_instruction_share_of_those_intervals": float(io_instr[io_rows].sum() / max(m[io_rows].sum(), 1)),
        "io_in_compute_cluster": bool(compute_cluster in io_clusters),
        "io_cluster_intervals": int(len(io_cluster_rows)),
        "io_cluster_compute_only_intervals": int(len(compute_mates)),
        "io_time_labelled_like_compute": bool(len(compute_mates) > 0),
        "ari": ari(want[want >= 0], guess[want >= 0]),
        "instructions": int(cum[-1]),
    }


def oslens_run(script: str, work: Path, weights: list[str]) -> dict:
    trace = work / "trace"
    rec = subprocess.run([str(OSLENS), "record", "--phases", "-f", "-o", str(trace), "--", str(WORKLOAD), "--script",
                          script, "--dir", str(work)], capture_output=True, text=True, check=True)
    script_t = truth(rec.stderr)
    out = {}
    for w in weights:
        args = [str(OSLENS), "phases", str(trace), "--json", "--no-store"] + (["--weights", w] if w else [])
        res = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)
        t0, t1 = script_t[0][1], script_t[-1][2]
        ms = (t1 - t0) // 1_000_000
        guess = np.zeros(ms, dtype=np.int64)
        for s in res["segments"]:
            a = (s["start_ns"] + res["origin_ns"] - t0) // 1_000_000
            z = (s["end_ns"] + res["origin_ns"] - t0) // 1_000_000
            guess[max(a, 0):max(min(z, ms), 0)] = s["phase"]
        want = truth_labels(script_t, t0, ms)
        io = script_t[1]
        io_mid = (io[1] + io[2]) // 2 - res["origin_ns"]
        io_seg = next(s for s in res["segments"] if s["start_ns"] <= io_mid < s["end_ns"])
        c_mid = (script_t[0][1] + script_t[0][2]) // 2 - res["origin_ns"]
        c_seg = next(s for s in res["segments"] if s["start_ns"] <= c_mid < s["end_ns"])
        out[w or "default"] = {
            "intervals": res["intervals"], "interval_ns": res["interval_ns"], "k": res["k"],
            "vectors": res["vectors"], "ari": ari(want[want >= 0], guess[want >= 0]),
            "io_phase_kind": io_seg["kind"], "io_in_compute_phase": io_seg["phase"] == c_seg["phase"],
        }
    return out


def oslens_panel(trace: Path) -> dict:
    import oslens
    from oslens.phases import analyse, render, vectors

    a = analyse.analyse(oslens.open(trace), trace, None, vectors.parse_weights("region=0"))
    return {**render.panel(a, "oslens phases (code + resource vectors)"), "own_scale": True}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--script", default="compute:500,io:550,compute:500")
    ap.add_argument("--bbv-interval", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--figure", metavar="PNG", help="draw the first run's BBV and oslens matrices side by side here")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "python"))
    if not WORKLOAD.exists():
        print("bench/phases/bbv.py: build first (make build)", file=sys.stderr)
        return 1
    runs = []
    for i in range(args.repeat):
        with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/var/tmp")) as d:
            work = Path(d)
            runs.append({"bbv": bbv_run(args.script, args.bbv_interval, work),
                         "oslens": oslens_run(args.script, work, ["", "region=0"])})
            if args.figure and len(FIGURES) == 1:
                FIGURES.append(oslens_panel(work / "trace"))
            print(f"run {i + 1}: bbv ari {runs[-1]['bbv']['ari']:.2f}, oslens ari "
                  f"{runs[-1]['oslens']['region=0']['ari']:.2f}", file=sys.stderr)
    if args.figure:
        from oslens.phases import render

        render.write(FIGURES, Path(args.figure))
    print(json.dumps({"script": args.script, "runs": runs,
                      "median_ari": {"bbv": float(np.median([r["bbv"]["ari"] for r in runs])),
                                     "bbv_told_k": float(np.median([r["bbv"]["told_k"]["ari"] for r in runs])),
                                     "oslens": float(np.median([r["oslens"]["default"]["ari"] for r in runs])),
                                     "oslens_no_regions": float(np.median([r["oslens"]["region=0"]["ari"] for r in runs]))}},
                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
