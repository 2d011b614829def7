"""In-vivo instrumentation cost (Kohr et al. 1994, section 5.2): `oslens record --in-vivo N`.

The program runs N times with recording on and N times with it off (OSLENS_TRACE unset, so every
oslens call is a no-op), alternating (ABBA order) after one untimed warm-up run; each round's
two runs form a pair. The cost per event is (time with - time without) / events, the two sides
taken by their lower quartiles (other load only adds time) with a bootstrap 95% interval over
rounds, and beside it by the median of the paired differences with the sign test's interval
(contrast()), for the process tree's CPU time (user + system of the waited-for children;
preemption by other load does not count) and for wall time. Next to it: the in-vitro figure for the same mix of record kinds and region-name
lengths (the stored calibration), the verdict on their agreement (within 20%, and whether the
interval is narrow enough to say), and the compensated run time (time with, minus what the
calibration says the recorded events cost, minus the recorder's pauses) against the time
without.

The kernel collector is not started (its cost is not instrumentation of the program); the
auto-instrumentation preload follows the record options. The last instrumented run's trace is
kept (and imported unless --no-import); `in-vivo.json` in it holds the figures.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from oslens.capture import raw
from oslens.errors import OslensError
from oslens.store import calibration

UNCHARGED = {"name", "cont", "clock_pair", "pause", "adapt", "unknown"}
REGION_NAME_CLASS = raw.CLASS_ID["region"]
REGION_NAME_ANCHOR = 9  # the name length region_begin/region_end are calibrated with


@contextlib.contextmanager
def _quiet_fds(enabled: bool):
    """Sends fds 1 and 2 to /dev/null (the program's output, N times over) while enabled."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def uninstrumented_env() -> dict:
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("OSLENS_") and k not in ("OSLENS_PREFIX",):
            env.pop(k)
    return env


def run_without(command: list[str], quiet: bool) -> tuple[float, float, int]:
    """(wall s, CPU s, exit status) of one run with every oslens call a no-op, launched the way
    `oslens record` launches (a held fork, then exec), so both sides pay the same launch cost."""
    from oslens.capture.child import Child

    with _quiet_fds(quiet):
        c0, t0 = _children_cpu(), time.monotonic()
        child = Child(command, uninstrumented_env(), held=True)
        child.release()
        status = child.wait()
        wall = time.monotonic() - t0
        cpu = _children_cpu() - c0
    return wall, cpu, status


def run_with(trace: Path, command: list[str], options: dict, quiet: bool) -> tuple[float, float, int, dict]:
    from oslens.capture.session import Session

    session = Session(trace, command, options)
    session.prepare()
    with _quiet_fds(quiet):
        c0, t0 = _children_cpu(), time.monotonic()
        status = session.run()
        wall = time.monotonic() - t0
        cpu = _children_cpu() - c0
    meta = session.finish()
    return wall, cpu, status, meta


def trace_profile(trace: Path, meta: dict | None = None) -> dict:
    """What one instrumented run recorded, over the trace's application threads: counts
    ({record kind name: n}), pause_ns (the recorder's own pauses), processes, region_records and
    threads (recording threads), region_name_bytes (the summed length of the names of the region
    records: a region call hashes its name), preload (whether the preload library was loaded)."""
    from oslens import _native

    chunks = raw.read_chunks(trace)
    meta = meta if meta is not None else raw.read_meta(trace)
    names = raw.name_table(chunks)
    counts = np.zeros(256, dtype=np.int64)
    pause_ns = 0.0
    region_records = region_bytes = 0
    pids, tids = set(), set()
    clock = raw.clock_for(chunks, meta)
    for c in chunks:
        h = c.header
        if h is None or h["source"] != raw.SOURCE_APP_THREAD or h["tid"] == 0 or len(c.records) == 0:
            continue
        pids.add(h["pid"])
        tids.add((h["pid"], h["tid"]))
        k = c.records["kind"]
        counts += np.bincount(k, minlength=256)
        p = c.records["a"][k == raw.PAUSE]
        if len(p):
            pause_ns += float(clock.ticks_to_ns(p).sum()) if h["clock"] == raw.CLOCK_TSC else float(p.sum())
        ids = c.records["id"][(k == raw.REGION_BEGIN) | (k == raw.REGION_END)]
        if len(ids):
            table = names.get(h["pid"], {})
            uniq, n = np.unique(ids, return_counts=True)
            for ident, count in zip(uniq.tolist(), n.tolist()):
                name = table.get((REGION_NAME_CLASS, ident))
                region_records += count
                region_bytes += count * (len(name.encode()) if name is not None else REGION_NAME_ANCHOR)
    return {"counts": {_native.kind_name(i): int(n) for i, n in enumerate(counts.tolist()) if n},
            "pause_ns": pause_ns, "processes": len(pids), "threads": len(tids), "region_records": int(region_records),
            "region_name_bytes": int(region_bytes), "preload": bool((meta.get("settings") or {}).get("preload"))}


def trace_counts(trace: Path, meta: dict | None = None) -> tuple[dict[str, int], float, int]:
    """({record kind name: count} over the trace's application threads, pause ns, processes)."""
    p = trace_profile(trace, meta)
    return p["counts"], p["pause_ns"], p["processes"]


def _pace_weight(cal: dict | None, records_per_s: float | None) -> float | None:
    """Where a run's pace lies between the calibration's paced loop (~0.5 M events/s: 1) and its
    tight loop (1 / (empty loop + event), ~60 M/s: 0), in log(rate), clamped to [0, 1]; None
    without the paced figures or a pace."""
    st = (cal or {}).get("startup") or {}
    try:
        slow_rate = float((st.get("paced") or {})["records_per_s"])
        fast_rate = 1e9 / (float(cal["empty_loop_ns"]["ns"]) + float(cal["costs"]["event"]["ns"]))
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    if records_per_s is None:
        return None
    if records_per_s <= 0 or fast_rate <= slow_rate:
        return 1.0
    x = (np.log(records_per_s) - np.log(slow_rate)) / (np.log(fast_rate) - np.log(slow_rate))
    return 1.0 - min(max(float(x), 0.0), 1.0)


def rate_matched_outside(cal: dict | None, records_per_s: float | None) -> float | None:
    """Each record's CPU outside the call at a program's pace: the calibration measures it in the
    tight loop (per_record_outside, at the loop's rate, 1 / (empty loop + event)) and at ~0.5 M
    events/s (startup.paced.outside_ns, its rate records_per_s); between the two rates the figure
    is interpolated in log(rate), beyond them the nearer one is taken. None without both."""
    w = _pace_weight(cal, records_per_s)
    st = (cal or {}).get("startup") or {}
    try:
        slow_ns = float(st["paced"]["outside_ns"]["ns"])
        fast_ns = float(st["per_record_outside"]["ns"])
    except (KeyError, TypeError, ValueError):
        return None
    return None if w is None else fast_ns + w * (slow_ns - fast_ns)


def context_factor(cal: dict | None, records_per_s: float | None) -> float:
    """What a call costs the recording thread in a program's code, over the empty loop's figure:
    the calibration's `context` (an event after ~2 us of work that stores as it goes, against the
    empty-loop event: `over_event`) at the paced end, 1 at the tight loop's, interpolated by pace
    as rate_matched_outside. 1 without the figures."""
    w = _pace_weight(cal, records_per_s)
    over = ((cal or {}).get("context") or {}).get("over_event")
    if w is None or not over:
        return 1.0
    return 1.0 + w * (float(over) - 1.0)


def in_vitro_cost(counts: dict[str, int], cal: dict | None, baseline_noop: bool = True,
                  region_name_bytes: int | None = None, records_per_s: float | None = None) -> dict | None:
    """What the calibration says the recorded events cost: in the calls (total, per event, 95%
    bounds), and in the whole process (plus the per-record share spent outside the calls).
    baseline_noop: the run without instrumentation still makes the API calls, as no-ops (the
    `off` figure), so they are charged less that; the preload wrappers are absent altogether.
    region_name_bytes: the summed name length of the region records; with a calibration that
    measured the per-byte cost of a region's name, each region record is charged for its own
    name's length rather than the 9 bytes region_begin/end were measured with.
    records_per_s: the run's pace (records per CPU second without instrumentation); with it, the
    labelled variant *_paced charges each call scaled by context_factor and each record's outside
    share at that pace (rate_matched_outside), rather than the empty loop's figures."""
    if not cal:
        return None
    per = calibration.record_costs(cal)
    _, _, outside = calibration.outside_costs(cal)
    off = max(float((cal["costs"].get("off") or {}).get("ns", 0.0)), 0.0) if baseline_noop else 0.0
    events = total = low = high = 0.0
    uncharged = {}
    for kind, n in counts.items():
        if kind in UNCHARGED:
            continue
        events += n
        if kind in per:
            ns, lo, hi, _ = per[kind]
            if kind not in calibration.SYNC_RECORD_KINDS:
                ns, lo, hi = max(ns - off, 0.0), max(lo - off, 0.0), max(hi - off, 0.0)
            total += n * ns
            low += n * lo
            high += n * hi
        else:
            uncharged[kind] = n
    name_adjust = 0.0
    rn = cal.get("region_name") or {}
    regions = counts.get("region_begin", 0) + counts.get("region_end", 0)
    if region_name_bytes is not None and regions and "ns_per_byte" in rn:
        name_adjust = float(rn["ns_per_byte"]) * (region_name_bytes - rn.get("anchor_bytes", REGION_NAME_ANCHOR) * regions)
        # never charge a region record less than nothing
        name_adjust = max(name_adjust, -sum(counts.get(k, 0) * per[k][0] for k in ("region_begin", "region_end") if k in per))
        total += name_adjust
        low += name_adjust
        high += name_adjust
    # a cost is never below nothing, whatever the interval's arithmetic gives
    total, low, high = max(total, 0.0), max(low, 0.0), max(high, 0.0)
    records = sum(counts.values())
    paced_outside = rate_matched_outside(cal, records_per_s)
    factor = context_factor(cal, records_per_s)
    return {"events": int(events), "cost_ns": total, "cost_low_ns": low, "cost_high_ns": high,
            "ns_per_event": total / events if events else None,
            "outside_ns": records * outside, "noop_call_ns_subtracted": off,
            "records_per_s": records_per_s,
            "paced_outside_ns_per_record": paced_outside,
            "paced_outside_ns": records * paced_outside if paced_outside is not None else None,
            "context_factor": factor,
            "paced_cost_ns": total * factor,
            "process_paced_ns_per_event": ((total * factor + records * paced_outside) / events
                                           if events and paced_outside is not None else None),
            "region_name_adjust_ns": name_adjust,
            "mean_region_name_bytes": region_name_bytes / regions if regions and region_name_bytes is not None else None,
            "process_ns_per_event": (total + records * outside) / events if events else None,
            "uncharged": uncharged}


def paired_diff(with_values, without_values) -> dict:
    """The in-vivo difference from paired runs: run i with instrumentation and run i without were
    made back to back (ABBA order), so d_i = with_i - without_i shares whatever load and drift the
    pair saw. median: the median of the d_i, with its distribution-free 95% interval (order
    statistics of Bin(n, 1/2), the sign test's interval: no assumption about the noise's shape, and
    a few runs hit by other load move it little); mean with its t-interval beside it."""
    from oslens.osbench.stats import median_ci

    d = np.asarray(with_values, float) - np.asarray(without_values, float)
    n = len(d)
    if n == 0:
        return {"n": 0, "median": None, "ci": None, "mean": None, "mean_ci": None, "ci_coverage": None}
    med = float(np.median(d))
    if n > 1:
        lo, hi, cov = median_ci(d)
        lo, hi = min(lo, med), max(hi, med)
    else:
        lo = hi = med
        cov = 0.0
    mean = float(d.mean())
    if n > 1:
        half = float(_t975(n - 1) * d.std(ddof=1) / np.sqrt(n))
        mean_ci = [mean - half, mean + half]
    else:
        mean_ci = [mean, mean]
    return {"n": n, "median": med, "ci": [float(lo), float(hi)], "ci_coverage": round(float(cov), 4), "mean": mean,
            "mean_ci": mean_ci, "differences": d.tolist()}


ESTIMATORS = ("lower_quartile", "paired_median")
QUARTILE = 0.25


def contrast(columns, signs, estimator: str = "lower_quartile", resamples: int = 4000, seed: int = 1994) -> dict:
    """A difference between kinds of runs made in rounds: columns[k][i] is round i's run of kind k,
    signs[k] its sign (+1 with instrumentation, -1 without; four kinds for the marginal figure).

    lower_quartile: sum of sign * (lower quartile of the kind's runs). Other load on the machine
        only ever adds CPU time to a run (a preempted process refills its caches, a busy sibling
        CPU slows memory), and on a loaded machine a third of the runs or more are hit, some by
        tens of per cent: the lower quartile of each kind stays in the undisturbed mode, as the
        in-vitro figures do. 95% interval: percentile bootstrap over rounds (a round's runs are
        resampled together).
    paired_median: the median over rounds of sum of sign * run, with the sign test's
        distribution-free interval (paired_diff): robust while disturbed runs are few.
    {"estimate", "ci", "estimator", "n"}"""
    cols = [np.asarray(c, float) for c in columns]
    n = min(len(c) for c in cols) if cols else 0
    if n == 0:
        return {"estimate": None, "ci": None, "estimator": estimator, "n": 0}
    cols = [c[:n] for c in cols]
    if estimator == "paired_median":
        per_round = sum(sg * c for sg, c in zip(signs, cols))
        pd = paired_diff(per_round, np.zeros(n))
        return {"estimate": pd["median"], "ci": pd["ci"], "ci_coverage": pd["ci_coverage"], "estimator": estimator,
                "n": n}
    if estimator != "lower_quartile":
        raise ValueError(f"unknown estimator {estimator}")
    est = float(sum(sg * np.quantile(c, QUARTILE) for sg, c in zip(signs, cols)))
    if n < 2:
        return {"estimate": est, "ci": [est, est], "ci_coverage": 0.0, "estimator": estimator, "n": n}
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, (resamples, n))
    boot = sum(sg * np.quantile(c[idx], QUARTILE, axis=1) for sg, c in zip(signs, cols))
    lo, hi = np.quantile(boot, [0.025, 0.975])
    return {"estimate": est, "ci": [float(min(lo, est)), float(max(hi, est))], "ci_coverage": 0.95,
            "estimator": estimator, "n": n}


def _t975(df: int) -> float:
    """The 97.5% quantile of Student's t with df degrees of freedom (a table, then the normal)."""
    table = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
             12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}
    if df in table:
        return table[df]
    keys = sorted(table)
    for a, b in zip(keys, keys[1:]):
        if a < df < b:  # linear in 1/df
            wa = (1 / df - 1 / b) / (1 / a - 1 / b)
            return table[a] * wa + table[b] * (1 - wa)
    return 1.96


AGREEMENT = 0.2  # Kohr et al.: in vivo within 20% of in vitro


def agreement(vivo: float | None, ci: list | None, vitro: float | None, tolerance: float = AGREEMENT) -> dict:
    """How the in-vivo figure (with its 95% interval) compares with the in-vitro prediction:
    ratio and its interval (in vitro taken as exact: its own interval is far narrower), and a
    verdict. met: the ratio lies within 1 +- tolerance; conclusive: the whole interval of the ratio
    does too (met) or none of it does (not met); otherwise the runs cannot tell, and say so."""
    if vivo is None or not vitro:
        return {"ratio": None, "ratio_ci": None, "met": None, "conclusive": False, "vitro_inside_vivo_ci": None,
                "verdict": "no in-vitro figure (no calibration)"}
    ratio = vivo / vitro
    rci = [ci[0] / vitro, ci[1] / vitro] if ci else [ratio, ratio]
    met = abs(ratio - 1) <= tolerance
    inside = bool(ci and ci[0] <= vitro <= ci[1])
    lo_ok, hi_ok = 1 - tolerance <= rci[0], rci[1] <= 1 + tolerance
    if met and lo_ok and hi_ok:
        verdict, conclusive = f"met: ratio {ratio:.2f}, its 95% interval [{rci[0]:.2f}, {rci[1]:.2f}] within 1 +- {tolerance:g}", True
    elif not met and (rci[0] > 1 + tolerance or rci[1] < 1 - tolerance):
        verdict, conclusive = f"not met: ratio {ratio:.2f}, its 95% interval [{rci[0]:.2f}, {rci[1]:.2f}] outside 1 +- {tolerance:g}", True
    else:
        verdict = (f"{'met' if met else 'not met'} at the point estimate (ratio {ratio:.2f}) but inconclusive: "
                   f"the 95% interval [{rci[0]:.2f}, {rci[1]:.2f}] reaches past 1 +- {tolerance:g}"
                   + ("; the in-vitro figure lies inside the in-vivo interval" if inside else ""))
        conclusive = False
    return {"ratio": ratio, "ratio_ci": rci, "met": met, "conclusive": conclusive, "vitro_inside_vivo_ci": inside,
            "verdict": verdict}


def _boot_diff(a, b, resamples=4000, seed=1994):
    """Percentile-bootstrap 95% interval of median(a) - median(b)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    rng = np.random.default_rng(seed)
    da = np.median(a[rng.integers(0, len(a), (resamples, len(a)))], axis=1)
    db = np.median(b[rng.integers(0, len(b), (resamples, len(b)))], axis=1)
    lo, hi = np.quantile(da - db, [0.025, 0.975])
    return float(lo), float(hi)


def analyse(with_runs: list[dict], without_runs: list[dict], counts: dict, pause_ns: float, cal: dict | None,
            processes: int = 1, profile: dict | None = None, estimator: str = "lower_quartile") -> dict:
    """In-vivo cost per event against the in-vitro prediction, for CPU and wall time.

    with_runs[i] and without_runs[i] are a pair run back to back (ABBA order). The difference is
    estimated by `estimator` (contrast()): the lower quartiles of the two sides by default, the
    median of the paired differences beside it (`paired_median`), each with its 95% interval.

    in_vivo_ns_per_event      difference / events (Kohr's figure), with its interval
    in_vivo_net_ns_per_event  the same less the recorder's start-up per process (with the preload
                              library's when the run had it) and per further recording thread
    in_vitro_ns_per_event     the calls' cost per event (the loop figures, this run's kind mix and
                              region-name lengths)
    in_vitro_process_ns_per_event  plus the per-record share spent outside the calls
    agreement                 ratio in vivo / in vitro, its interval, and the verdict (agreement())
    in_vitro_paced_ns_per_event, agreement_paced   the labelled variant taken at this run's pace:
                              calls scaled by context_factor (the calibration's `context`: a
                              call after store-heavy work at ~0.5 M events/s), outside share by
                              rate_matched_outside, both interpolated between the calibration's
                              paced and tight loops; compensated_paced_error_pct with it
    compensated_s             without + (difference - what is charged: the calls (calibration),
                              the helper's CPU (as the runs measured it, helper_measured_s; the
                              calibration's outside share for runs without the figure), pauses,
                              start-up), "without" by the same estimator;
                              compensated_calibrated_error_pct beside: with the calibrated share
    in_vivo_medians_ns_per_event  (median with - median without) / events, the unpaired figure
    """
    profile = profile or {}
    cpu_without = statistics.median(r["cpu_s"] for r in without_runs) if without_runs else 0.0
    rate = sum(counts.values()) / cpu_without if cpu_without > 0 else None
    vitro = in_vitro_cost(counts, cal, region_name_bytes=profile.get("region_name_bytes"), records_per_s=rate)
    startup_cpu, startup_wall, _ = calibration.outside_costs(cal)
    st = (cal or {}).get("startup") or {}
    preload = bool(profile.get("preload"))
    if preload and (st.get("cpu_preload") or {}).get("ns") is not None:
        startup_cpu = float(st["cpu_preload"]["ns"])
        startup_wall = float((st.get("wall_preload") or {}).get("ns") or startup_wall)
    # every recording thread beyond one per process sets up and releases a buffer of its own
    extra_threads = max(int(profile.get("threads") or processes) - processes, 0)
    per_thread = float((st.get("per_thread_cpu") or {}).get("ns") or 0.0)
    events = sum(n for k, n in counts.items() if k not in UNCHARGED)
    out = {"events": events, "records": sum(counts.values()), "processes": processes, "record_kinds": counts,
           "pause_ns": pause_ns, "preload": preload, "threads": processes + extra_threads, "in_vitro": vitro,
           "measures": {},
           "estimator": estimator,
           "method": (f"runs in ABBA pairs; in vivo = difference ({estimator}) / events with its 95% interval, net of "
                      "the recorder's start-up per process and per further recording thread")}
    for measure in ("cpu_s", "wall_s"):
        fixed_s = ((processes * (startup_cpu if measure == "cpu_s" else startup_wall) + extra_threads * per_thread) / 1e9
                   if cal else None)
        w = [r[measure] for r in with_runs]
        wo = [r[measure] for r in without_runs]
        if estimator == "lower_quartile":
            mw, mwo = float(np.quantile(w, QUARTILE)), float(np.quantile(wo, QUARTILE))
        else:
            mw, mwo = statistics.median(w), statistics.median(wo)
        c = contrast([w, wo], [1, -1], estimator)
        diff, (lo, hi) = c["estimate"], c["ci"]
        pd = paired_diff(w, wo)
        m = {
            "with_s": mw, "without_s": mwo, "pairs": pd["n"], "estimator": estimator,
            "overhead_s": diff, "overhead_ci_s": [lo, hi], "overhead_ci_coverage": c["ci_coverage"],
            "overhead_paired_median_s": pd["median"], "overhead_paired_median_ci_s": pd["ci"],
            "overhead_mean_s": pd["mean"], "overhead_mean_ci_s": pd["mean_ci"],
            "overhead_pct": 100.0 * diff / mwo if mwo > 0 else None,
            "in_vivo_ns_per_event": 1e9 * diff / events if events else None,
            "in_vivo_ci_ns_per_event": [1e9 * lo / events, 1e9 * hi / events] if events else None,
            "in_vivo_medians_ns_per_event": 1e9 * (mw - mwo) / events if events else None,
            "startup_s": fixed_s,
            "in_vivo_net_ns_per_event": 1e9 * (diff - fixed_s) / events if events and fixed_s is not None else None,
            "in_vivo_net_ci_ns_per_event": ([1e9 * (lo - fixed_s) / events, 1e9 * (hi - fixed_s) / events]
                                            if events and fixed_s is not None else None),
        }
        if vitro and vitro["ns_per_event"]:
            m["in_vitro_ns_per_event"] = vitro["ns_per_event"]
            m["in_vitro_process_ns_per_event"] = vitro["process_ns_per_event"]
            a = agreement(m["in_vivo_net_ns_per_event"], m["in_vivo_net_ci_ns_per_event"], vitro["process_ns_per_event"])
            m["in_vivo_over_in_vitro"] = a["ratio"]
            m["agreement"] = a
            if events and fixed_s is not None and pd["median"] is not None:
                # the other estimator's figure and verdict, beside
                pm = 1e9 * (pd["median"] - fixed_s) / events
                pci = [1e9 * (x - fixed_s) / events for x in pd["ci"]]
                m["paired_median"] = {"in_vivo_net_ns_per_event": pm, "in_vivo_net_ci_ns_per_event": pci,
                                      "agreement": agreement(pm, pci, vitro["process_ns_per_event"])}
            helper = [r.get("helper_s") for r in with_runs]
            outside_s = vitro["outside_ns"] / 1e9
            if measure == "cpu_s" and helper and all(h is not None for h in helper):
                # the helper's CPU as the runs measured it, in place of the calibrated outside share
                m["helper_measured_s"] = statistics.median(helper)
                m["outside_calibrated_s"] = outside_s
                calibrated = (vitro["cost_ns"] + pause_ns) / 1e9 + outside_s + (fixed_s or 0.0)
                m["compensated_calibrated_error_pct"] = 100.0 * (diff - calibrated) / mwo if mwo > 0 else None
                outside_s = m["helper_measured_s"]
            charged_s = (vitro["cost_ns"] + pause_ns) / 1e9 + outside_s + (fixed_s or 0.0)
            comp = mwo + diff - charged_s
            m["compensated_s"] = comp
            m["compensated_error_pct"] = 100.0 * (comp - mwo) / mwo if mwo > 0 else None
            m["compensated_error_ci_pct"] = ([100.0 * (lo - charged_s) / mwo, 100.0 * (hi - charged_s) / mwo]
                                             if mwo > 0 else None)
            if vitro.get("process_paced_ns_per_event"):
                # the labelled variant: the calls in context and each record's share outside the
                # call, both at this run's pace, rather than the empty and tight loop's
                m["in_vitro_paced_ns_per_event"] = vitro["process_paced_ns_per_event"]
                m["agreement_paced"] = agreement(m["in_vivo_net_ns_per_event"], m["in_vivo_net_ci_ns_per_event"],
                                                 vitro["process_paced_ns_per_event"])
                charged_p = (vitro["paced_cost_ns"] + vitro["paced_outside_ns"] + pause_ns) / 1e9 + (fixed_s or 0.0)
                m["compensated_paced_error_pct"] = 100.0 * (diff - charged_p) / mwo if mwo > 0 else None
        out["measures"][measure] = m
    return out


def helper_cpu_s(meta: dict | None) -> float | None:
    """CPU seconds the recorder's helper threads spent in a recorded run, as measured (meta.json
    `recorder_helpers`); None for a trace recorded before they were measured."""
    helpers = (meta or {}).get("recorder_helpers")
    return None if helpers is None else sum(h["cpu_ns"] for h in helpers) / 1e9


def run_in_vivo(args, options: dict) -> int:
    """`oslens record --in-vivo N`: `options` are the recording options record built from its
    command line."""
    from oslens.capture.session import default_trace_dir

    n = int(args.in_vivo)
    if n < 1:
        raise OslensError("--in-vivo needs a number of runs of at least 1", 2)
    command = args.command
    if not command:
        raise OslensError("no program given: use 'oslens record --in-vivo N -- PROGRAM ARGS'", 2)
    trace = Path(args.output) if args.output else default_trace_dir(command)
    # application events only: the kernel collector's cost is not the instruments'
    options = {**options, "no_kernel": True, "events": None, "system_wide": None, "sample_hz": None}
    host_cal = calibration.load() or calibration.load(quick=True)  # the full one when stored
    quiet = True
    print(f"oslens: in vivo: {n} runs with and {n} without instrumentation, alternating "
          "(kernel events off; the program's output is discarded)", file=sys.stderr)
    wall, cpu, status = run_without(command, quiet)  # warm-up: caches, page cache, binaries
    if status != 0:
        raise OslensError(f"{command[0]} exited {status} without instrumentation; in-vivo runs need a program "
                          "that succeeds", 1)
    with_runs, without_runs, meta = [], [], None
    for i in range(n):
        for instrumented in ((True, False) if i % 2 == 0 else (False, True)):
            if instrumented:
                w, c, status, meta = run_with(trace, command, options, quiet)
                options["force"] = True
                # the program's records: the recorder's pauses vary from run to run
                with_runs.append({"wall_s": w, "cpu_s": c,
                                  "records": sum(t["records"] - t.get("recorder_pauses", 0) for t in meta["threads"]),
                                  "helper_s": helper_cpu_s(meta)})
            else:
                w, c, status = run_without(command, quiet)
                without_runs.append({"wall_s": w, "cpu_s": c})
            if status != 0:
                raise OslensError(f"{command[0]} exited {status} in in-vivo run {i + 1}; stopping", 1)
    profile = trace_profile(trace, meta)
    records = [r["records"] for r in with_runs]
    result = analyse(with_runs, without_runs, profile["counts"], profile["pause_ns"], host_cal, profile["processes"],
                     profile)
    result.update({"command": command, "runs": n, "with": with_runs, "without": without_runs,
                   "records_per_run": records, "deterministic_event_count": len(set(records)) == 1,
                   "calibration": host_cal.get("path") if host_cal else None, "trace": str(trace)})
    (trace / "in-vivo.json").write_text(json.dumps(result, indent=2) + "\n")
    _print(result)
    if not args.no_import:
        from oslens import store

        store.import_trace(trace, quiet=True)
    return 0


def _fmt(v, spec=".1f", unit=""):
    return "-" if v is None else f"{v:{spec}}{unit}"


def _print(r: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    v = r["in_vitro"]
    table = Table(title=f"instrumentation cost in vivo: {' '.join(r['command'])}",
                  caption=f"{r['runs']} runs each way in ABBA pairs, {r.get('estimator', 'lower_quartile').replace('_', ' ')}s; "
                          f"{r['events']:,} events per run"
                          + ("" if r["deterministic_event_count"] else " (the count varied between runs)")
                          + "; ns per event net of the recorder's start-up, 95% CI")
    table.add_column("measure")
    table.add_column("without", justify="right")
    table.add_column("with", justify="right")
    table.add_column("overhead", justify="right")
    table.add_column("in vivo ns/event", justify="right")
    table.add_column("in vitro ns/event", justify="right")
    table.add_column("compensated", justify="right")
    for name, m in r["measures"].items():
        ci = m.get("in_vivo_net_ci_ns_per_event")
        vivo = _fmt(m["in_vivo_net_ns_per_event"])
        if ci:
            vivo += f" [{ci[0]:.1f}, {ci[1]:.1f}]"
        comp = m.get("compensated_s")
        table.add_row(
            "CPU" if name == "cpu_s" else "wall", f"{m['without_s']:.4f} s", f"{m['with_s']:.4f} s",
            _fmt(m["overhead_pct"], "+.1f", "%"), vivo, _fmt(m.get("in_vitro_process_ns_per_event")),
            "-" if comp is None else f"{comp:.4f} s ({m['compensated_error_pct']:+.1f}%)")
    console = Console(stderr=True)
    console.print(table)
    if not v:
        console.print("no calibration on this machine: run 'oslens calibrate' for the in-vitro figure and compensation")
    else:
        console.print(f"in vitro: {v['ns_per_event']:.1f} ns per event in the calls, "
                      f"{v['process_ns_per_event']:.1f} with each record's share outside them; "
                      "wall time also waits for other load and the helper thread")
        if v["uncharged"]:
            console.print(f"not charged (no in-vitro figure): {v['uncharged']}")
        cpu = r["measures"]["cpu_s"]
        a = cpu.get("agreement")
        if a:
            console.print(f"CPU time, in vivo against in vitro: {a['verdict']}")
        ap = cpu.get("agreement_paced")
        if ap and v.get("records_per_s"):
            console.print(f"variant at this run's pace ({v['records_per_s'] / 1e6:.2f} M records per CPU second: calls "
                          f"x {v['context_factor']:.2f} in context, outside share {v['paced_outside_ns_per_record']:.1f} ns): "
                          f"{cpu['in_vitro_paced_ns_per_event']:.1f} ns per event; {ap['verdict']}")
    console.print(f"figures in {Path(r['trace']) / 'in-vivo.json'}")
