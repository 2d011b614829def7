"""The JSON document `oslens bench --json` writes, the machine description it carries, and the
comparison of two such documents."""

from __future__ import annotations

import json
import os
import platform
import socket
import time
from pathlib import Path

from oslens.errors import OslensError

from . import stats

SCHEMA = "oslens.bench/1"


def _read(path: str, default: str = "") -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return default


def _cpu_model() -> str:
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def _virtualized() -> bool:
    return " hypervisor" in " " + " ".join(
        line for line in _read("/proc/cpuinfo").splitlines() if line.startswith("flags"))


def _bracketed(text: str) -> str:
    if "[" in text:
        return text.split("[", 1)[1].split("]", 1)[0]
    return text


def machine() -> dict:
    mem_kib = 0
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    vulns = {}
    vdir = Path("/sys/devices/system/cpu/vulnerabilities")
    if vdir.is_dir():
        for p in sorted(vdir.iterdir()):
            vulns[p.name] = _read(str(p))
    return {
        "hostname": socket.gethostname(),
        "kernel": platform.release(),
        "kernel_version": platform.version(),
        "arch": platform.machine(),
        "cpu_model": _cpu_model(),
        "cpus_online": os.cpu_count(),
        "cpus_allowed": len(os.sched_getaffinity(0)),
        "memory_gib": round(mem_kib / 2**20, 1),
        "virtualized": _virtualized(),
        "clocksource": _read("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
        "cpufreq_governor": _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "unavailable"),
        "vulnerabilities": vulns,
    }


def _policy() -> str:
    names = {getattr(os, n): n[6:].lower() for n in ("SCHED_OTHER", "SCHED_BATCH", "SCHED_IDLE", "SCHED_FIFO", "SCHED_RR")
             if hasattr(os, n)}
    try:
        return names.get(os.sched_getscheduler(0), str(os.sched_getscheduler(0)))
    except OSError:
        return "unknown"


def settings() -> dict:
    return {
        "runner_sched_policy": _policy(),
        "runner_nice": os.getpriority(os.PRIO_PROCESS, 0),
        "runner_affinity": sorted(os.sched_getaffinity(0)),
        "kernel.sched_rr_timeslice_ms": _read("/proc/sys/kernel/sched_rr_timeslice_ms"),
        "kernel.sched_rt_runtime_us": _read("/proc/sys/kernel/sched_rt_runtime_us"),
        "transparent_hugepage": _bracketed(_read("/sys/kernel/mm/transparent_hugepage/enabled")),
        "transparent_hugepage_defrag": _bracketed(_read("/sys/kernel/mm/transparent_hugepage/defrag")),
        "preempt": _bracketed(_read("/sys/kernel/debug/sched/preempt", "unreadable")),
        "base_slice_ns": _read("/sys/kernel/debug/sched/base_slice_ns", "unreadable"),
    }


def document(results: list[dict], quick: bool, scratch_fs: str, notes: list[str]) -> dict:
    return {
        "schema": SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine(),
        "settings": settings(),
        "run": {"quick": quick, "euid": os.geteuid(), "scratch_filesystem": scratch_fs, "notes": notes},
        "results": results,
    }


def save(doc: dict, path: str) -> None:
    try:
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    except OSError as err:
        raise OslensError(f"cannot write {path}: {err.strerror}; choose a writable path for --json", 1)


def load(path: str) -> dict:
    try:
        with open(path) as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise OslensError(f"{path} does not exist; give a file written by 'oslens bench --json FILE'", 2)
    except (OSError, ValueError) as err:
        raise OslensError(f"{path} is not a readable JSON file ({err}); give a file written by 'oslens bench --json FILE'", 2)
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise OslensError(f"{path} is not an oslens bench result (schema {SCHEMA}); write one with 'oslens bench --json FILE'", 2)
    return doc


NEGLIGIBLE = 0.03  # a significant ratio within 1 +- 3% is reported as negligible


def compare(a: dict, b: dict) -> dict:
    """Side by side, as the paper put Choices next to UNIX: for every benchmark both documents
    measured, both medians with their intervals, the ratio B/A with a bootstrap interval, and
    whether the difference is significant."""
    ra = {r["name"]: r for r in a["results"] if r.get("status") == "ok"}
    rb = {r["name"]: r for r in b["results"] if r.get("status") == "ok"}
    rows = []
    for name in [n for n in ra if n in rb]:
        x, y = ra[name], rb[name]
        rc = stats.ratio_ci(x["samples_ns"], y["samples_ns"])
        if not rc["significant"]:
            verdict = "no significant difference"
        elif abs(rc["ratio"] - 1) < NEGLIGIBLE:
            verdict = f"negligible (under {NEGLIGIBLE:.0%})"
        elif rc["ratio"] > 1:
            verdict = "B slower"
        else:
            verdict = "B faster"
        rows.append({
            "name": name, "label": x.get("label", name), "table": x.get("table", ""), "unit": x.get("unit", "op"),
            "a": {k: x[k] for k in ("median_ns", "min_ns", "ci_low_ns", "ci_high_ns", "n")},
            "b": {k: y[k] for k in ("median_ns", "min_ns", "ci_low_ns", "ci_high_ns", "n")},
            "ratio": rc["ratio"], "ratio_low": rc["low"], "ratio_high": rc["high"],
            "significant": rc["significant"], "verdict": verdict,
            "noisy": bool(x.get("noisy") or y.get("noisy")),
        })
    return {
        "a": {"kernel": a["machine"].get("kernel"), "host": a["machine"].get("hostname"), "created": a.get("created")},
        "b": {"kernel": b["machine"].get("kernel"), "host": b["machine"].get("hostname"), "created": b.get("created")},
        "rows": rows,
        "only_a": sorted(set(ra) - set(rb)),
        "only_b": sorted(set(rb) - set(ra)),
    }
