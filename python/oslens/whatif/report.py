"""Presentation of predictions: a terminal table per policy next to what was recorded, and the
JSON document (`oslens whatif --json`, schema oslens.whatif/1)."""

from __future__ import annotations

from oslens.analysis.units import fmt_ns

SCHEMA = "oslens.whatif/1"


def _ms(ns) -> str:
    return "-" if ns is None else f"{ns / 1e6:.1f}"


def _with_bounds(value, bounds, fmt=_ms) -> str:
    if value is None:
        return "-"
    if not bounds or bounds[0] == bounds[1]:
        return fmt(value)
    return f"{fmt(value)} [{fmt(bounds[0])}-{fmt(bounds[1])}]"


def document(wl, machine: dict, recorded: dict, predictions: list[dict], trace: str) -> dict:
    tasks = [{"tid": t.tid, "name": t.name, "cpu_ns": t.cpu_ns, "bursts": len(t.bursts),
              "blocks": {k: sum(1 for b in t.blocks if b.kind == k) for k in ("io", "sleep", "sync", "yield")}}
             for t in wl.program]
    preds = []
    for p in predictions:
        q = {k: v for k, v in p.items() if k != "segments"}
        q["tasks"] = [{"tid": tid, **row} for tid, row in p["tasks"].items()]
        preds.append(q)
    return {
        "schema": SCHEMA, "trace": str(trace), "cpus": wl.ncpus, "machine": machine, "tasks": tasks,
        "workload": {**{k: v for k, v in wl.recorded.items() if k not in ("makespan_ns", "switches")},
                     "other_tasks_replayed": len(wl.others)},
        "notes": list(wl.notes),
        "recorded": {"makespan_ns": recorded["makespan_ns"], "switches": recorded["switches"],
                     "tasks": [{"tid": tid, **row} for tid, row in recorded["tasks"].items()]},
        "predictions": preds,
    }


def text(doc: dict) -> str:
    names = {t["tid"]: t["name"] for t in doc["tasks"]}
    rec = {r["tid"]: r for r in doc["recorded"]["tasks"]}
    m = doc["machine"]
    lines = [f"what if: {doc['trace']}  ({doc['cpus']} CPUs, {len(doc['tasks'])} program threads; "
             f"times in ms, [bounds] from the trace's own variability)",
             f"  costs: switch {fmt_ns(m['switch_ns'])}, migration {fmt_ns(m['migrate_ns'])} "
             f"({m['sources']['switch']}); tick {fmt_ns(m['tick_ns'])}, EEVDF slice {fmt_ns(m['base_slice_ns'])}, "
             f"SCHED_RR slice {fmt_ns(m['rr_timeslice_ns'])}"]
    w = doc["workload"]
    bl = w.get("blocks", {})
    fit = w.get("background_fit") or {}
    lines.append(f"  workload: blocks io {bl.get('io', 0)}, sleep {bl.get('sleep', 0)}, sync (waker-dependent) "
                 f"{bl.get('sync', 0)}, sched_yield {bl.get('yield', 0)}; other tasks took {fmt_ns(w.get('background_cpu_ns', 0))} of CPU, modelled as "
                 f"{_others(w.get('other_tasks_replayed', 0))} + {fit.get('k', 0)} always-ready competitor(s) per CPU (fitted: default-policy waiting "
                 f"{fmt_ns(fit.get('fitted_waiting_ns'))} vs {fmt_ns(fit.get('recorded_waiting_ns'))} recorded)")
    for note in doc["notes"]:
        lines.append(f"  note: {note}")
    lines.append("")
    lines.append(f"  {'policy':<28} {'makespan':>26} {'switches':>18}")
    lines.append(f"  {'recorded':<28} {_ms(doc['recorded']['makespan_ns']):>26} {doc['recorded']['switches']:>18}")
    for p in doc["predictions"]:
        lines.append(f"  {p['policy']:<28} {_with_bounds(p['makespan_ns'], p['makespan_bounds']):>26} "
                     f"{_with_bounds(p['switches'], p['switches_bounds'], str):>18}")
    for p in doc["predictions"]:
        lines.append("")
        lines.append(f"  {p['policy']}: per thread (predicted / recorded)")
        lines.append(f"    {'thread':<22} {'completion':>28} {'waiting':>28} {'response':>22} {'switches':>16}")
        for row in p["tasks"]:
            r = rec.get(row["tid"], {})
            label = f"{names.get(row['tid'], '?')[:14]} {row['tid']}"
            lines.append(
                f"    {label:<22} "
                f"{_with_bounds(row['completion_ns'], row['completion_bounds']) + ' / ' + _ms(r.get('completion_ns')):>28} "
                f"{_with_bounds(row['waiting_ns'], row['waiting_bounds']) + ' / ' + _ms(r.get('waiting_ns')):>28} "
                f"{_ms(row['response_ns']) + ' / ' + _ms(r.get('response_ns')):>22} "
                f"{str(row['switches']) + ' / ' + str(r.get('switches', '-')):>16}")
        if p.get("stalled"):
            lines.append(f"    never finished (waiting for a wake-up that never came): {p['stalled']}")
    return "\n".join(lines)


def _others(n: int) -> str:
    return (f"each of {n} other tasks replayed as it ran (system-wide trace)" if n
            else "their recorded stretches replayed per CPU (record with --system-wide for each task's)")
