"""The calibration file: what one trace record of each kind cost on a machine, as measured by
`oslens calibrate` (oslens.calibrate), stored per machine and read by every import to compensate.

    save(cal) / load(hostname=None)          stored per machine, reused by every import
    record_costs(cal) -> {kind name: (ns, ci_low, ci_high, measured kind)}

Where the calibration lives: $OSLENS_CALIBRATION when set (one file, used for any trace), else
$XDG_CACHE_HOME/oslens/calibration-<hostname>.json (~/.cache when XDG_CACHE_HOME is unset).
The store owns this model so that import never depends on the measuring code (docs/architecture.md).
"""

from __future__ import annotations

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


def calibration_path(hostname: str | None = None) -> Path:
    env = os.environ.get("OSLENS_CALIBRATION")
    if env:
        return Path(env)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "oslens" / f"calibration-{hostname or socket.gethostname()}.json"


def save(cal: dict, path: Path | None = None) -> Path:
    path = Path(path) if path else calibration_path(cal.get("machine", {}).get("hostname"))
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


def load(hostname: str | None = None, path: Path | None = None) -> dict | None:
    """The stored calibration for `hostname` (this machine by default), or None when there is none.
    A file that exists but is not a calibration raises OslensError."""
    path = Path(path) if path else calibration_path(hostname)
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
