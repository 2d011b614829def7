"""The calibration file: what one trace record of each kind cost on a machine, as measured by
`oslens calibrate` (oslens.calibrate), stored per machine and read by every import to compensate.

    save(cal) / load(hostname=None, quick=False)   stored per machine, reused by every import
    refusal(cal, meta)                             why a calibration does not cover a trace's machine
    stored_quick_or_measure(meta, ...)             the quick calibration, measured once under a lock
    record_costs(cal) -> {kind name: (ns, ci_low, ci_high, measured kind)}

Where the calibration lives: $OSLENS_CALIBRATION when set (one file, used for any trace), else
$XDG_CACHE_HOME/oslens/calibration-<hostname>.json for the full one and
calibration-<hostname>-quick.json for the quick one (~/.cache when XDG_CACHE_HOME is unset).
The store owns this model so that import never depends on the measuring code (docs/architecture.md):
the quick calibration an import runs when there is none is measured by a callable the commands
layer registers (set_quick_measurer), never imported from here.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from pathlib import Path

from oslens.errors import OslensError

SCHEMA = "oslens-calibration/1"

# Trace record kind (app_events.kind) -> the measured kind whose figure it is charged.
RECORD_KIND_SOURCES = {
    "event": "event",
    "region_begin": "region_begin",
    "region_end": "region_end",
    "timer_start": "timer_start",
    "timer_stop": "timer_stop",
    "counter": "counter_record",
    "control": "raw",
    "func_entry": "raw",
    "func_exit": "raw",
}
SYNC_RECORD_KINDS = (
    "lock_request", "lock_acquire", "lock_release", "barrier_enter", "barrier_exit", "cond_wait_enter",
    "cond_wait_exit", "cond_signal", "thread_create", "thread_start", "thread_join_enter", "thread_join_exit",
    "sem_wait_enter", "sem_wait_exit", "sem_post", "process_fork", "process_exec", "process_exit",
)
for _k in SYNC_RECORD_KINDS:
    RECORD_KIND_SOURCES[_k] = "preload_sync"
# Not charged: pause (its own measured duration is subtracted instead), clock_pair (written by the
# recorder when a chunk opens or closes, outside the program's instrumentation), adapt (a policy
# change the program asked for, not measurement), name/cont (not in app_events).


# Set (to anything but "" or "0") to never measure a quick calibration on import (`--no-calibrate`).
NO_CALIBRATE_ENV = "OSLENS_NO_CALIBRATE"


def one_file() -> Path | None:
    """$OSLENS_CALIBRATION: the one file every import uses (never measured on import)."""
    env = os.environ.get("OSLENS_CALIBRATION")
    return Path(env) if env else None


def calibration_path(hostname: str | None = None, quick: bool = False) -> Path:
    if one_file():
        return one_file()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    name = f"calibration-{hostname or socket.gethostname()}{'-quick' if quick else ''}.json"
    return cache / "oslens" / name


def save(cal: dict, path: Path | None = None) -> Path:
    path = Path(path) if path else calibration_path(cal.get("machine", {}).get("hostname"), bool(cal.get("quick")))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    tmp.write_text(json.dumps(cal, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
    return path


def validate(cal, where: str = "calibration") -> dict:
    if not isinstance(cal, dict) or cal.get("schema") != SCHEMA or not isinstance(cal.get("costs"), dict):
        raise OslensError(f"{where} is not an oslens calibration ({SCHEMA}); run 'oslens calibrate' again", 2)
    for kind, c in cal["costs"].items():
        if not isinstance(c, dict) or not isinstance(c.get("ns"), (int, float)):
            raise OslensError(f"{where}: cost of '{kind}' has no 'ns' figure; run 'oslens calibrate' again", 2)
    return cal


def load(hostname: str | None = None, path: Path | None = None, quick: bool = False) -> dict | None:
    """The stored calibration for `hostname` (this machine by default; its quick one with `quick`),
    or None when there is none. A file that exists but is not a calibration raises OslensError."""
    path = Path(path) if path else calibration_path(hostname, quick)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise OslensError(f"cannot read the calibration {path} ({err.strerror or err})", 1) from err
    try:
        cal = json.loads(text)
    except ValueError as err:
        raise OslensError(f"{path} is not valid JSON ({err}); run 'oslens calibrate' again", 2) from err
    cal = validate(cal, str(path))
    cal.setdefault("path", str(path))
    return cal


def cal_key(cal: dict) -> dict:
    """What a calibration covers, by the word a refusal uses: a figure measured on another
    machine, CPU, kernel or clock says nothing about a trace's records."""
    m = cal.get("machine") or {}
    return {"machine": m.get("hostname"), "CPU model": m.get("cpu_model"), "kernel": m.get("kernel"),
            "recorder clock": cal.get("recorder_clock")}


def trace_key(meta: dict) -> dict:
    """The same for the machine that recorded a trace (meta.json). Its `clock` names the recorder's
    only when the program recorded something (else the trace's clock is the kernel's)."""
    m = meta.get("machine") or {}
    recorded = any(t.get("records") for t in meta.get("threads") or [] if isinstance(t, dict))
    return {"machine": m.get("hostname"), "CPU model": m.get("cpu_model"), "kernel": m.get("kernel"),
            "recorder clock": meta.get("clock") if recorded else None}


def refusal(cal: dict, meta: dict) -> str | None:
    """One line naming what differs between the machine `cal` was measured on and the one that
    recorded the trace (meta.json), or None when it covers it. A field either side does not state
    (a hand-written file, a synthetic trace) is not compared."""
    mine, theirs = cal_key(cal), trace_key(meta)
    diffs = [f"{what} {mine[what]!r} where the trace's is {theirs[what]!r}" for what in mine
             if mine[what] and theirs[what] and str(mine[what]) != str(theirs[what])]
    if not diffs:
        return None
    return (f"the {kind_of(cal)} calibration {cal.get('path')} is not used: it was measured on another "
            + "; another ".join(diffs))


def kind_of(cal: dict) -> str:
    return "quick" if cal.get("quick") else "full"


def recorded_here(meta: dict) -> bool:
    """Whether the trace was recorded on this machine, as it is now (so that a calibration measured
    here covers it)."""
    from oslens.capture.session import machine_info, recorder_clock

    here = machine_info()
    return refusal({"machine": here, "recorder_clock": recorder_clock(here)}, meta) is None


def stored(meta: dict, quick: bool) -> tuple[dict | None, str]:
    """(the stored full or quick calibration when it covers the trace's machine, else None; why
    not when it was refused or unreadable, else "")."""
    try:
        cal = load(hostname=(meta.get("machine") or {}).get("hostname"), quick=quick)
    except OslensError as err:
        return None, str(err)
    why = refusal(cal, meta) if cal else None
    return (None, why) if why else (cal, "")


_quick_measurer = None


def set_quick_measurer(measure) -> None:
    """`measure()` -> a quick calibration of this machine: what an import runs when the trace's
    machine has none (the commands layer registers oslens.calibrate's; None turns it off)."""
    global _quick_measurer
    _quick_measurer = measure


def quick_measurer():
    """The registered measurer, unless $OSLENS_NO_CALIBRATE or $OSLENS_CALIBRATION says not to."""
    if os.environ.get(NO_CALIBRATE_ENV, "") not in ("", "0") or one_file():
        return None
    return _quick_measurer


def stored_quick_or_measure(meta: dict, measure) -> tuple[dict | None, str]:
    """The quick calibration for the trace's machine, measured with `measure()` and stored when
    there is none. Under a lock beside the file, re-checked once it is held: two imports that race
    measure once, and the file is replaced atomically (save)."""
    path = calibration_path((meta.get("machine") or {}).get("hostname"), quick=True)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_name(path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            cal, why = stored(meta, quick=True)
            if cal is None:
                cal = measure()
                cal["path"] = str(save(cal, path))
                why = refusal(cal, meta) or ""
    except OslensError as err:  # no compiler, liboslens missing: the import goes on uncompensated
        return None, f"the quick calibration failed: {err}"
    except OSError as err:  # a cache that cannot be written (no home, a full disk)
        return None, f"cannot store the quick calibration in {path.parent} ({err.strerror or err})"
    return (None, why) if why else (cal, "")


def record_costs(cal: dict) -> dict[str, tuple[float, float, float, str]]:
    """{record kind name: (ns, ci_low, ci_high, measured kind)} for every kind the calibration covers:
    the recording thread's CPU time in the call (what shifts its later timestamps). Negative medians
    (a kind cheaper than the noise) are charged as 0. Sync kinds fall back to the `raw` figure when
    the preload wrappers were not measured."""
    costs = cal["costs"]
    out = {}
    for rec, src in RECORD_KIND_SOURCES.items():
        if src not in costs and src == "preload_sync":
            src = "raw"
        c = costs.get(src)
        if c is None:
            continue
        ns = max(float(c["ns"]), 0.0)
        lo = c.get("ci_low", ns)
        hi = c.get("ci_high", ns)
        out[rec] = (ns, max(float(lo), 0.0), max(float(hi), 0.0), src)
    return out


def outside_costs(cal: dict | None) -> tuple[float, float, float]:
    """(start-up CPU ns per process, start-up wall ns per process, CPU ns per record outside the
    call): what a whole run pays besides the calls; zeros where the calibration lacks them."""
    st = (cal or {}).get("startup") or {}
    return (float((st.get("cpu") or {}).get("ns") or 0.0), float((st.get("wall") or {}).get("ns") or 0.0),
            float((st.get("per_record_outside") or {}).get("ns") or 0.0))
