"""`oslens config`: which OS policies this machine offers, the current settings and the
privilege each needs; `oslens config check PLAN` validates a plan against this machine;
`oslens config restore` restores what a killed `oslens tune` left changed (every config and
tune run does that first anyway)."""

from __future__ import annotations

import json
import os
import sys

from oslens.control import config, journal, plan as planmod
from oslens.control.sysfs import format_cpu_list
from oslens.errors import OslensError

NAME = "config"
HELP = "show the OS policies this machine offers (and their privilege), or check a plan against them"


def add_arguments(parser):
    parser.add_argument("action", nargs="?", choices=["show", "check", "restore"], default="show",
                        help="show (default), check PLAN, or restore")
    parser.add_argument("plan", nargs="?", help="the plan to check (TOML)")
    parser.add_argument("--json", action="store_true", help="print JSON")


def _recover(quiet_json: bool) -> dict:
    done, problems = journal.recover()
    out = sys.stderr
    for line in done:
        print(f"oslens: {line}", file=out)
    for line in problems:
        print(f"oslens: warning: {line}", file=out)
    return {"restored": done, "problems": problems}


def run(args):
    recovered = _recover(args.json)
    if args.action == "restore":
        if args.json:
            print(json.dumps(recovered, indent=1))
        elif not recovered["restored"] and not recovered["problems"]:
            print("nothing to restore: no oslens tune run left settings changed")
        return 1 if recovered["problems"] else 0
    machine = config.discover()
    if args.action == "check":
        if not args.plan:
            raise OslensError("no plan given: use 'oslens config check PLAN.toml'", 2)
        return _check(args, machine)
    if args.plan:
        raise OslensError(f"unexpected argument {args.plan!r}: did you mean 'oslens config check {args.plan}'?", 2)
    if args.json:
        print(json.dumps(machine, indent=1))
    else:
        print(render(machine))
    return 0


def _check(args, machine) -> int:
    plan = planmod.load(args.plan, machine, os.getpriority(os.PRIO_PROCESS, 0))
    if args.json:
        print(json.dumps({"plan": args.plan, "valid": plan.valid, "errors": plan.errors,
                          "warnings": plan.warnings, "phases": plan.phases, "global": plan.globals}, indent=1))
        return 0 if plan.valid else 2
    for line in plan.errors:
        print(f"oslens: error: {args.plan}: {line}", file=sys.stderr)
    for line in plan.warnings:
        print(f"oslens: warning: {args.plan}: {line}", file=sys.stderr)
    if not plan.valid:
        return 2
    phases = ", ".join(plan.phases) or "none"
    globs = ", ".join(plan.globals) or "none"
    print(f"{args.plan}: valid on this machine (phases: {phases}; global: {globs})")
    return 0


def _yn(entry: dict) -> str:
    if not entry.get("available"):
        return "absent"
    return "yes" if entry.get("allowed") else "yes (not for you)"


def render(m: dict) -> str:
    user = m["user"]
    who = "root" if user["root"] else f"uid {user['uid']}"
    caps = ", ".join(user["capabilities"]) or "no capabilities"
    s = m["sched"]
    lines = [f"kernel {s['kernel']}, running as {who} ({caps})", ""]
    row = "  {:<24} {:<34} {:<10} {}"
    lines.append("Scheduling")
    lines.append(row.format("knob", "offered", "current", "privilege"))
    for name, c in s["classes"].items():
        cur = "*" if c.get("current") else ""
        offered = _yn(c) if c.get("available") else "absent: " + c.get("reason", "")
        if not c.get("available"):
            lines.append(row.format(f"class {name}", "absent", "", c.get("reason", "")))
            continue
        extra = " (not in plans)" if c.get("in_plans") is False else ""
        lines.append(row.format(f"class {name}", offered + extra, cur, c["privilege"]))
    sl = s["slice"]
    if sl["available"]:
        cur = f"{sl['current_ms']:g} ms" if "current_ms" in sl else ""
        lines.append(row.format("per-task slice (EEVDF)", f"{sl['min_ms']:g}-{sl['max_ms']:g} ms", cur, sl["privilege"]))
    else:
        lines.append(row.format("per-task slice (EEVDF)", "absent", "", sl.get("reason", "")))
    rr = s["sched_rr_timeslice_ms"]
    lines.append(row.format("sched_rr_timeslice_ms", _yn(rr), str(rr.get("current", "")), rr["privilege"]))
    n = s["nice"]
    lines.append(row.format("nice", "-20..19", str(n.get("current", "")), n["privilege"]))
    a = s["affinity"]
    lines.append(row.format("affinity", "CPUs " + format_cpu_list(a["cpus"]),
                            format_cpu_list(a.get("current", [])), a["privilege"]))
    lines.append("")
    cg = m["cgroups"]
    lines.append("Cgroups")
    v1 = cg["v1"]
    lines.append("  v1: " + (", ".join(f"{c}" for c in v1) if v1 else "not mounted"))
    v2 = cg["v2"]
    lines.append("  v2: " + (f"{v2['mount']} (controllers: {' '.join(v2['controllers']) or 'none'})" if v2 else "not mounted"))
    for name, c in cg["controllers"].items():
        if c["available"]:
            lines.append(row.format(f"{name} controller", f"v{c['version']} " + ("" if c["allowed"] else "(not for you)"),
                                    "", c["privilege"]))
        else:
            lines.append(row.format(f"{name} controller", "absent", "", c["reason"]))
    lines.append("")
    t = m["thp"]
    lines.append("Memory")
    if t["available"]:
        lines.append(row.format("THP mode (global)", " ".join(t["modes"]), t["current"], t["privilege"]))
        lines.append(row.format("THP defrag (global)", "", t["defrag"] or "", t["privilege"]))
        lines.append(row.format("THP per process", "disable/enable", "", t["per_task"]["how"] + ": none"))
    else:
        lines.append(row.format("THP", "absent", "", t["reason"]))
    lines.append("")
    lines.append("Block devices")
    hidden = 0
    for d in m["block"]:
        if d["device"].startswith(("loop", "ram")) and not d.get("size_sectors"):
            hidden += 1
            continue
        sched = f"{d['scheduler'] or '-'} of {' '.join(d['schedulers'])}" if d["schedulers"] else "no scheduler"
        ra = f"readahead {d['read_ahead_kb']} KiB" if d["read_ahead_kb"] is not None else ""
        lines.append(row.format(d["device"], sched, ra, d["privilege"]))
    if hidden:
        lines.append(f"  ({hidden} unused loop/ram devices not shown; see --json)")
    lines.append("")
    f = m["cpufreq"]
    if f["available"]:
        govs = sorted({p["governor"] for p in f["cpus"]})
        lines.append(row.format("cpufreq governor", " ".join(f["cpus"][0]["governors"]), ",".join(govs), f["privilege"]))
    else:
        lines.append(f"cpufreq: absent: {f['reason']}")
    lines.append("")
    lines.append("Plans set class, priority, slice_ms, nice, affinity, thp_disable per phase, and memory_max, cpu_max,")
    lines.append("thp, readahead_kb, io_scheduler, sched_rr_timeslice_ms globally: see docs/control.md.")
    return "\n".join(lines)


if __name__ == "__main__":
    from oslens.commands.invoke import standalone
    sys.exit(standalone(sys.modules[__name__]))
