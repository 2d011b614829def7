"""Plans: OS policies per program phase, in TOML, validated against this machine.

    [global]                      # applied by `oslens tune` for the whole run, then restored
    memory_max = "512M"           # cgroup memory cap (v1 memory.limit_in_bytes / v2 memory.max)
    cpu_max = 0.5                 # cgroup CPU cap in CPUs (v1 cpu.cfs_quota_us / v2 cpu.max)
    thp = "never"                 # /sys/kernel/mm/transparent_hugepage/enabled
    sched_rr_timeslice_ms = 10    # /proc/sys/kernel/sched_rr_timeslice_ms
    readahead_kb = { vda = 128 }  # /sys/block/DEV/queue/read_ahead_kb
    io_scheduler = { vda = "mq-deadline" }

    [phase.default]               # applied when the program starts
    class = "other"
    [phase.compute]               # osl_adapt("compute") / oslens.adapt("compute")
    class = "batch"
    slice_ms = 20
    nice = 5
    affinity = "0-1"              # or [0, 1]
    thp_disable = true            # prctl(PR_SET_THP_DISABLE) for the process

`load(path, machine)` returns a Plan whose `errors` hold one sentence per problem (the plan
is invalid when there is any) and whose `warnings` hold the knobs this user may not change
(`oslens tune` skips those and applies the rest)."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from oslens.control import kernel
from oslens.control.sysfs import format_cpu_list, parse_cpu_list

PHASE_KEYS = ("class", "priority", "slice_ms", "nice", "affinity", "thp_disable")
GLOBAL_KEYS = ("memory_max", "memory_high", "cpu_max", "thp", "sched_rr_timeslice_ms", "readahead_kb", "io_scheduler")
PLAN_CLASSES = ("other", "batch", "idle", "fifo", "rr", "ext")
SCHED_KEYS = ("class", "priority", "slice_ms", "nice")
PHASE_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B)?", re.IGNORECASE)
MIN_MEMORY = 1 << 20


@dataclass
class Plan:
    path: str
    phases: dict[str, dict] = field(default_factory=dict)   # as written (validated values)
    globals: dict = field(default_factory=dict)             # as written (validated values)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (where, key) this user may not set
    keep_nice: set[str] = field(default_factory=set)  # phases whose nice this user may not lower to

    @property
    def valid(self) -> bool:
        return not self.errors


def parse_size(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        return None
    m = SIZE.fullmatch(value.strip())
    if not m:
        return None
    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m.group(2).upper()]
    return int(float(m.group(1)) * mult)


def _fmt_num(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


class _Checker:
    def __init__(self, plan: Plan, machine: dict):
        self.plan = plan
        self.m = machine
        self.user = machine["user"]

    def err(self, where: str, msg: str):
        self.plan.errors.append(f"{where}: {msg}")

    def warn(self, where: str, key: str, msg: str):
        self.plan.warnings.append(f"{where}: {msg}")
        self.plan.skipped.append((where, key))

    # --- phases -------------------------------------------------------------------------
    def phase(self, name: str, table) -> dict | None:
        where = f"phase.{name}"
        if not PHASE_NAME.fullmatch(name):
            self.err(where, "a phase name is 1 to 64 letters, digits or '_.:-'; rename it")
            return None
        if not isinstance(table, dict):
            self.err(where, "must be a table of settings, e.g. [phase.%s] class = \"batch\"" % name)
            return None
        out: dict = {}
        for key, value in table.items():
            if key not in PHASE_KEYS:
                self.err(f"{where}.{key}", f"unknown setting; a phase takes {', '.join(PHASE_KEYS)}")
                continue
            checked = getattr(self, "p_" + key)(f"{where}.{key}", value)
            if checked is not None:
                out[key] = checked
        return out

    def p_class(self, where, value):
        classes = self.m["sched"]["classes"]
        if not isinstance(value, str) or value.lower() not in kernel.CLASS_POLICY:
            self.err(where, f"{value!r} is not a scheduling class; use one of {', '.join(PLAN_CLASSES)}")
            return None
        value = value.lower()
        if value == "deadline":
            self.err(where, "'deadline' is not supported in plans (it needs runtime/deadline/period and "
                            "admission control); use 'fifo' or 'rr' with a priority")
            return None
        entry = classes.get(value, {})
        if not entry.get("available", False):
            self.err(where, f"class '{value}' is not available here: {entry.get('reason', 'unknown')}")
            return None
        return value

    def p_priority(self, where, value):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 99:
            self.err(where, f"{value!r} is not a real-time priority; use an integer from 1 to 99")
            return None
        return value

    def p_slice_ms(self, where, value):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.err(where, f"{value!r} is not a number of milliseconds; write e.g. slice_ms = 20")
            return None
        sl = self.m["sched"]["slice"]
        if not sl.get("available"):
            self.err(where, f"no per-task slice on this machine: {sl.get('reason', 'unsupported')}")
            return None
        lo, hi = sl["min_ms"], sl["max_ms"]
        if not lo <= value <= hi:
            self.err(where, f"{_fmt_num(value)} ms is outside the per-task slice range {_fmt_num(lo)}-{_fmt_num(hi)} ms "
                            "(the kernel would clamp it); use a value in that range")
            return None
        return value

    def p_nice(self, where, value):
        if isinstance(value, bool) or not isinstance(value, int) or not -20 <= value <= 19:
            self.err(where, f"{value!r} is not a nice value; use an integer from -20 to 19")
            return None
        return value

    def p_affinity(self, where, value):
        cpus_here = self.m["sched"]["affinity"]["cpus"]
        try:
            if isinstance(value, str):
                cpus = parse_cpu_list(value)
            elif isinstance(value, list) and all(isinstance(c, int) and not isinstance(c, bool) for c in value):
                cpus = sorted(set(value))
            else:
                raise ValueError(f"{value!r} is not a CPU list")
        except ValueError as e:
            self.err(where, f"{e}; write a list like [0, 1] or a string like \"0-3,6\"")
            return None
        if not cpus:
            self.err(where, "the CPU list is empty; name at least one CPU")
            return None
        missing = [c for c in cpus if c not in cpus_here]
        if cpus_here and missing:
            noun = "CPU" if len(missing) == 1 else "CPUs"
            verb = "does" if len(missing) == 1 else "do"
            self.err(where, f"{noun} {format_cpu_list(missing)} {verb} not exist here (online: "
                            f"{format_cpu_list(cpus_here)}); use online CPUs")
            return None
        return cpus

    def p_thp_disable(self, where, value):
        if not isinstance(value, bool):
            self.err(where, f"{value!r} is not true or false")
            return None
        return value

    def phase_combination(self, name, merged: dict):
        where = f"phase.{name}"
        cls = merged.get("class", "other")
        if cls in kernel.RT_CLASSES and "priority" not in merged:
            self.err(where, f"class '{cls}' needs a priority (1-99); add priority = 10")
        if cls not in kernel.RT_CLASSES and "priority" in merged and "class" in merged:
            self.err(where, f"priority only applies to classes fifo and rr, not '{cls}'; remove it")
        if cls in kernel.RT_CLASSES and "slice_ms" in merged:
            self.err(where, f"slice_ms applies to classes other, batch and idle, not '{cls}' "
                            "(the rr time slice is the global sched_rr_timeslice_ms)")

    # --- globals ------------------------------------------------------------------------
    def g_memory_max(self, where, value):
        size = parse_size(value)
        if size is None:
            self.err(where, f"{value!r} is not a size; write bytes or e.g. \"512M\", \"2G\"")
            return None
        if size < MIN_MEMORY:
            self.err(where, f"{size} bytes is too small to run a program; use at least 1M")
            return None
        mem = self.m["cgroups"]["controllers"]["memory"]
        if not mem.get("available"):
            self.err(where, f"no memory cgroup controller here: {mem.get('reason')}")
            return None
        if not mem.get("allowed"):
            self.warn(where, "memory_max", f"a memory cap needs {mem.get('privilege')}; "
                                           "run as root to apply it (skipped)")
        return size

    def g_memory_high(self, where, value):
        return self.g_memory_max(where, value)

    def g_cpu_max(self, where, value):
        ncpu = len(self.m["sched"]["affinity"]["cpus"]) or 1
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.01 <= value <= ncpu:
            self.err(where, f"{value!r} is not a CPU cap; give the CPUs the run may use, from 0.01 to {ncpu} "
                            "(e.g. 0.5 = half of one CPU)")
            return None
        cpu = self.m["cgroups"]["controllers"]["cpu"]
        if not cpu.get("available"):
            self.err(where, f"no cpu cgroup controller here: {cpu.get('reason')}")
            return None
        if not cpu.get("allowed"):
            self.warn(where, "cpu_max", f"a CPU cap needs {cpu.get('privilege')}; run as root to apply it (skipped)")
        return value

    def g_thp(self, where, value):
        thp = self.m["thp"]
        if not thp.get("available"):
            self.err(where, f"transparent huge pages are not available: {thp.get('reason')}")
            return None
        if value not in thp["modes"]:
            self.err(where, f"{value!r} is not a THP mode here; use one of {', '.join(thp['modes'])}")
            return None
        if not thp.get("allowed"):
            self.warn(where, "thp", "the global THP mode needs root; run as root to apply it (skipped)")
        return value

    def g_sched_rr_timeslice_ms(self, where, value):
        rr = self.m["sched"]["sched_rr_timeslice_ms"]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10_000:
            self.err(where, f"{value!r} is not a time slice; use an integer from 1 to 10000 ms")
            return None
        if not rr.get("available"):
            self.err(where, f"not available here: {rr.get('reason')}")
            return None
        if not rr.get("allowed"):
            self.warn(where, "sched_rr_timeslice_ms", "sched_rr_timeslice_ms is a global sysctl and needs root; "
                                                      "run as root to apply it (skipped)")
        return value

    def _devices(self, where, value, check_one):
        if not isinstance(value, dict) or not value:
            self.err(where, "must name devices, e.g. { vda = ... }")
            return None
        devices = {d["device"]: d for d in self.m["block"]}
        out = {}
        for dev, v in value.items():
            w = f"{where}.{dev}"
            if dev not in devices:
                self.err(w, f"no block device '{dev}' here; use one of {', '.join(sorted(devices)) or '(none)'}")
                continue
            checked = check_one(w, devices[dev], v)
            if checked is not None:
                out[dev] = checked
                if not devices[dev].get("allowed"):
                    self.warn(w, where.rsplit(".", 1)[-1], f"changing {dev}'s settings needs root; "
                                                            "run as root to apply it (skipped)")
        return out or None

    def g_readahead_kb(self, where, value):
        def one(w, dev, v):
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 1 << 20:
                self.err(w, f"{v!r} is not a readahead size; use an integer number of KiB from 0 to 1048576")
                return None
            if dev.get("read_ahead_kb") is None:
                self.err(w, f"device {dev['device']} has no read_ahead_kb setting")
                return None
            return v
        return self._devices(where, value, one)

    def g_io_scheduler(self, where, value):
        def one(w, dev, v):
            if not dev["schedulers"]:
                self.err(w, f"device {dev['device']} has no I/O scheduler to choose")
                return None
            if v not in dev["schedulers"]:
                self.err(w, f"{v!r} is not an I/O scheduler of {dev['device']}; use one of {', '.join(dev['schedulers'])}")
                return None
            return v
        return self._devices(where, value, one)

    # --- privilege of per-task knobs ----------------------------------------------------
    def privilege(self, phases: dict[str, dict], baseline_nice: int):
        user = self.user
        cls = self.m["sched"]["classes"]
        for name, ph in phases.items():
            where = f"phase.{name}"
            c = ph.get("class")
            if c in kernel.RT_CLASSES and not cls[c].get("allowed"):
                self.warn(f"{where}.class", "class", f"class '{c}' needs {cls[c]['privilege']}; "
                                                     "run as root to apply it (skipped: the class stays as it is)")
        if not self.m["sched"]["nice"].get("can_lower"):
            if not any("nice" in ph for ph in phases.values()):
                return
            names = list(phases) if "default" in phases else ["default", *phases]
            nice = {}
            for name in names:
                ph = phases.get(name, {})
                nice[name] = ph.get("nice", phases.get("default", {}).get("nice", baseline_nice))
            top = max(nice, key=lambda k: nice[k])
            for name in names:
                if nice[name] < nice[top]:
                    self.plan.keep_nice.add(name)
                    self.warn(f"phase.{name}.nice", "nice",
                              f"phase '{name}' has nice {nice[name]}, lower than phase '{top}''s {nice[top]}: "
                              "lowering nice needs CAP_SYS_NICE or RLIMIT_NICE, so as this user "
                              f"'{name}' keeps the nice it has (skipped)")


def load(path: str | Path, machine: dict, baseline_nice: int = 0) -> Plan:
    plan = Plan(str(path))
    try:
        text = Path(path).read_text()
    except OSError as e:
        plan.errors.append(f"cannot read the plan ({e.strerror}); check the path")
        return plan
    return loads(text, machine, str(path), baseline_nice)


def loads(text: str, machine: dict, name: str = "<plan>", baseline_nice: int = 0) -> Plan:
    plan = Plan(name)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        plan.errors.append(f"not valid TOML ({e}); fix the syntax")
        return plan
    c = _Checker(plan, machine)
    for key in doc:
        if key not in ("global", "phase"):
            c.err(key, "unknown table; a plan has [global] and [phase.NAME] tables")
    g = doc.get("global", {})
    if not isinstance(g, dict):
        c.err("global", "must be a table: [global]")
        g = {}
    for key, value in g.items():
        if key not in GLOBAL_KEYS:
            c.err(f"global.{key}", f"unknown setting; [global] takes {', '.join(GLOBAL_KEYS)}")
            continue
        checked = getattr(c, "g_" + key)(f"global.{key}", value)
        if checked is not None:
            plan.globals[key] = checked
    phases = doc.get("phase", {})
    if not isinstance(phases, dict):
        c.err("phase", "must hold tables: [phase.NAME]")
        phases = {}
    for name, table in phases.items():
        checked = c.phase(name, table)
        if checked is not None:
            plan.phases[name] = checked
    default = plan.phases.get("default", {})
    for name, ph in phases.items():
        if name in plan.phases:
            merged = dict(default)
            if "class" in plan.phases[name] and plan.phases[name]["class"] != default.get("class"):
                merged.pop("priority", None)
                merged.pop("slice_ms", None)
            merged.update(plan.phases[name])
            if isinstance(ph, dict) and all(k in plan.phases[name] or k not in ph for k in ("class", "priority", "slice_ms")):
                c.phase_combination(name, merged)
    if not plan.phases and not plan.globals and not plan.errors:
        plan.errors.append("the plan sets nothing; add a [phase.default] or [global] table")
    if not plan.errors:
        c.privilege(plan.phases, baseline_nice)
    return plan


def drop_skipped(plan: Plan) -> None:
    """Remove the knobs this user may not change (after warning about them)."""
    for where, key in plan.skipped:
        parts = where.split(".")
        if parts[0] == "global":
            if len(parts) == 3:  # global.readahead_kb.vda
                plan.globals.get(parts[1], {}).pop(parts[2], None)
                if not plan.globals.get(parts[1]):
                    plan.globals.pop(parts[1], None)
            else:
                plan.globals.pop(key, None)
        elif parts[0] == "phase":
            ph = plan.phases.get(parts[1], {})
            ph.pop(key, None)
            if key == "class":
                ph.pop("priority", None)


def merged_phase(plan: Plan, name: str) -> dict:
    """A phase's settings with the default phase's filled in (class-specific ones only when
    the class is the same)."""
    default = dict(plan.phases.get("default", {}))
    ph = plan.phases.get(name, {})
    if "class" in ph and ph["class"] != default.get("class"):
        default.pop("priority", None)
        default.pop("slice_ms", None)
    default.update(ph)
    return default


def resolve(plan: Plan, baseline: dict) -> dict:
    """The resolved plan `osl_adapt` reads (JSON): every phase fully specified for the knobs
    the plan controls, so switching to a phase gives the same state whatever came before.

    baseline: {"class", "priority", "nice", "affinity", "thp_disable"} of the process that
    starts the program (the state for knobs a phase leaves unset)."""
    controls_sched = any(k in ph for ph in plan.phases.values() for k in SCHED_KEYS)
    controls_aff = any("affinity" in ph for ph in plan.phases.values())
    controls_thp = any("thp_disable" in ph for ph in plan.phases.values())
    controls_nice = any("nice" in ph for ph in plan.phases.values())
    names = list(plan.phases)
    if "default" not in names:
        names.insert(0, "default")
    phases = {}
    for name in names:
        ph = merged_phase(plan, name)
        out: dict = {"sched": controls_sched}
        if controls_sched:
            cls = ph.get("class", baseline.get("class", "other"))
            if cls in kernel.RT_CLASSES:
                prio = ph.get("priority", baseline.get("priority") or 1)
            else:
                prio = 0
            out.update({
                "class": cls,
                "policy": kernel.CLASS_POLICY[cls],
                "priority": prio,
                "slice_ns": int(round(ph["slice_ms"] * 1e6)) if "slice_ms" in ph else 0,
                "nice": (ph.get("nice", baseline.get("nice", 0))
                         if controls_nice and name not in plan.keep_nice else None),
            })
        out["affinity"] = (ph.get("affinity") or baseline.get("affinity")) if controls_aff else None
        out["thp_disable"] = ph.get("thp_disable", baseline.get("thp_disable", False)) if controls_thp else None
        phases[name] = out
    return {"version": 1, "plan": plan.path, "phases": phases, "globals": plan.globals}
