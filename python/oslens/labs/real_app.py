"""Lab 11, observe a real application (Salahi & Tarzia's emacs experiment, with a compiler): the
system's gcc compiles a generated C file at -O2, recorded with the kernel collector, three times
in memory cgroups of this run — with room to spare (its peak measured), under a cap it fits
(1.5 × that peak) and under one it does not (half of it). The student answers from the traces:
which process of the compile faults, in which part of its life, what the fitting cap changed
(nothing: the program asks for the same pages) and what the kernel did under the tight one (no
swap: the OOM killer ends cc1, and the gcc driver reports it)."""

from __future__ import annotations

import random
import shutil
import sys

from oslens.errors import OslensError
from oslens.labs.lab import Expectation, Lab, Question

MiB = 1 << 20
FUNCTIONS = {True: 60, False: 400}  # functions in the generated source (the quick run: a few seconds of cc1)
ROOMY_MB = 4096                     # "no cap": far above any peak of the compile
PARTS = 3                           # cc1's life in thirds: parsing, optimising, writing out (roughly)


def params(quick: bool, variant: str = "default") -> dict:
    return {"functions": FUNCTIONS[bool(quick)], "quick": bool(quick), "variant": variant}


def write_source(path, functions: int) -> None:
    """A deterministic C file: chained functions with loops over switches, which -O2 works hard on."""
    rnd = random.Random(18)
    lines = ["#include <stdint.h>"]
    for i in range(functions):
        lines.append(f"uint64_t f{i}(uint64_t x, uint64_t y) {{\n  uint64_t a = x * {rnd.randint(3, 999)}u + y;")
        lines.append("  for (int i = 0; i < 64; i++) {\n    switch ((a + i) % 7) {")
        lines += [f"      case {c}: a = a * {rnd.randint(3, 99)}u ^ (y >> {c + 1}); break;" for c in range(7)]
        lines.append("    }\n  }")
        lines.append(f"  return a + f{i - 1}(a, y + 1);\n}}" if i else "  return a;\n}")
    path.write_text("\n".join(lines) + "\n")


def _faults_by_program(trace) -> dict:
    """{name: (faults, [faults in each PARTS-th of that program's life])} of the traced tasks."""
    if trace is None:
        return {}
    from oslens import store

    try:
        con = store.open_trace(trace, quiet=True)
        rows = con.execute(
            "SELECT t.name, f.ts, t.start_ns, t.end_ns FROM faults f JOIN threads t USING (tid) "
            "WHERE t.is_traced AND NOT t.is_oslens").fetchall()
    except Exception as e:  # noqa: BLE001 - a trace that cannot be read leaves rusage's figures
        print(f"oslens: warning: the trace {trace} could not be read ({e})", file=sys.stderr)
        return {}
    out: dict = {}
    for name, ts, start, end in rows:
        total, parts = out.setdefault(name, [0, [0] * PARTS])
        span = max((end or ts) - (start or ts), 1)
        parts[min(int((ts - (start or ts)) * PARTS / span), PARTS - 1)] += 1
        out[name][0] = total + 1
    return {k: (v[0], v[1]) for k, v in out.items()}


def _compile(ctx, cg, label: str, src, obj) -> dict:
    script = f'echo $$ > {cg}/cgroup.procs && exec gcc -O2 -c {src} -o {obj}'
    res = ctx.run(["sh", "-c", script], label, events="faults")
    use = ctx.cap_usage()
    by_program = _faults_by_program(res.trace)
    return {"exit": res.status, "peak_mb": (use.get("peak_bytes") or 0) / MiB, "oom_kills": use.get("oom_kills"),
            "killed_message": "Killed signal terminated program cc1" in res.stderr,
            "faults": {k: v[0] for k, v in by_program.items()}, "cc1_parts": (by_program.get("cc1") or (0, []))[1]}


def run(ctx, p: dict) -> dict:
    if shutil.which("gcc") is None:
        raise OslensError("lab 11 compiles with the system's gcc, which is not installed (apt-get install -y gcc)", 1)
    src, obj = ctx.dir / "generated.c", ctx.dir / "generated.o"
    write_source(src, p["functions"])
    ctx.say(f"gcc -O2 -c generated.c: {p['functions']} generated functions ({src.stat().st_size // 1024} KiB), "
            "recorded with the kernel collector, in a memory cgroup of this run")
    out = {}
    roomy = ctx.cap_memory(ROOMY_MB * MiB, name="roomy")
    out["roomy"] = _compile(ctx, roomy, "roomy", src, obj)
    peak = max(out["roomy"]["peak_mb"], 1.0)
    caps = {"fits": round(peak * 1.5), "tight": max(round(peak * 0.5), 4)}
    for label, cap_mb in caps.items():
        cg = ctx.cap_memory(cap_mb * MiB, name=label)
        out[label] = {"cap_mb": cap_mb, **_compile(ctx, cg, label, src, obj)}
    ctx.say("\nObservations (faults from the trace, by program; peak and oom_kill from the cgroup)")
    ctx.say(f"  {'run':<8}{'cap MiB':>9}{'exit':>6}{'peak MiB':>10}{'oom_kill':>10}  faults by program")
    for label in ("roomy", "fits", "tight"):
        r = out[label]
        faults = ", ".join(f"{k} {v:,}" for k, v in sorted(r["faults"].items(), key=lambda kv: -kv[1])) or "-"
        ctx.say(f"  {label:<8}{r.get('cap_mb', ROOMY_MB):>9}{r['exit']:>6}{r['peak_mb']:>10.1f}"
                f"{'-' if r['oom_kills'] is None else r['oom_kills']:>10}  {faults}")
    parts = out["roomy"]["cc1_parts"]
    if parts and sum(parts):
        ctx.say("  cc1's faults over its life, in thirds: " + " | ".join(f"{n:,}" for n in parts))
    if out["tight"]["killed_message"]:
        ctx.say("  gcc said: 'Killed signal terminated program cc1' (the OOM killer's SIGKILL, reported by the driver)")
    return out


def _share(r: dict, name: str) -> float | None:
    faults = r.get("faults") or {}
    total = sum(faults.values())
    return 100.0 * faults.get(name, 0) / total if total else None


def expect(p: dict, results: dict | None) -> dict:
    r = (results or {}).get("results") or {}
    roomy, fits, tight = r.get("roomy") or {}, r.get("fits") or {}, r.get("tight") or {}
    parts = roomy.get("cc1_parts") or []
    first = 100.0 * parts[0] / sum(parts) if parts and sum(parts) else None
    ratio = None
    if (roomy.get("faults") or {}).get("cc1") and (fits.get("faults") or {}).get("cc1"):
        ratio = fits["faults"]["cc1"] / roomy["faults"]["cc1"]
    # A real program has no closed-form model for its own figures: those questions check that the
    # answer was read off this run's report (the band is the run's own measurement ± 10 %).
    return {
        "cc1_fault_share": Expectation(_share(roomy, "cc1") or 90.0, 0.10,
                                       "cc1 (the compiler proper) holds the compile's memory; the driver and as are small",
                                       None),
        "first_third_share": Expectation(first if first is not None else 50.0, 0.15,
                                         "read off the report: cc1's faults in the first third of its life", None,
                                         abs_band=5),
        "roomy_peak_mb": Expectation(roomy.get("peak_mb") or 50.0, 0.10,
                                     "read off the report: the roomy cgroup's peak (memory.max_usage_in_bytes / memory.peak)"),
        "fits_fault_ratio": Expectation(1.0, 0.10, "a cap the program fits changes nothing it asks for: the same pages "
                                        "are touched, so the same faults", ratio),
        "tight_exit_status": Expectation(1, 0.0, "no swap: the OOM killer SIGKILLs cc1 and the gcc driver exits 1 "
                                         "('Killed signal terminated program cc1'), not 137", tight.get("exit"), widen=False),
        "tight_oom_kills": Expectation(1, 0.0, "cc1 is the one process killed", tight.get("oom_kills"), widen=False),
    }


LAB = Lab(
    number=11, slug="real-app", title="Observe a real application: a compiler under a cap",
    topic="virtual memory, applications", minutes=25,
    requires=("root", "memory-cgroup", "no-swap", "collector"), sheet="11-real-app.md",
    questions=[
        Question("cc1_fault_share", "percent of the compile's page faults taken by cc1", "%"),
        Question("first_third_share", "percent of cc1's faults in the first third of its life", "%"),
        Question("roomy_peak_mb", "the compile's peak memory with room to spare", "MiB"),
        Question("fits_fault_ratio", "cc1's faults under the fitting cap / with room to spare"),
        Question("tight_exit_status", "gcc's exit status under the tight cap"),
        Question("tight_oom_kills", "the tight cgroup's oom_kill count"),
    ],
    predictions=("fits_fault_ratio", "tight_exit_status"),
    run=run, expect=expect, params=params,
)
