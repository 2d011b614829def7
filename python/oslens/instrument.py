"""Instruments for Python programs, recorded into the trace of `oslens record` (Kohr et al.'s
Counter / Event / region instruments, and function calls).

    import oslens
    with oslens.region("solve"):        # REGION_BEGIN / REGION_END, nested per thread
        ...
    @oslens.traced                      # a region named after the function, around each call
    def step(): ...
    hits = oslens.counter("hits"); hits.add(1)
    oslens.event("checkpoint", b"payload")
    oslens.trace_calls("mymod.*")       # FUNC_ENTRY / FUNC_EXIT of matching Python functions

Everything is a cheap no-op when the program does not run under `oslens record` (OSLENS_TRACE
unset): a call into the extension that reads the recorder's activation word and returns. Such a
program's instruments are dormant, and `oslens record -p PID` wakes them as a C program's
(docs/recorder.md, "Dormant instruments"). `oslens record --trace-python FILTER -- python3
script.py` starts `trace_calls(FILTER)` before the script runs.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import sys
import threading

from oslens import _native

_CLASS_ID = {name: cid for cid, name in _native.NAME_CLASSES.items()}  # crates/format, through the extension
NAME_FUNCTION, NAME_EVENT = _CLASS_ID["function"], _CLASS_ID["event"]
EXCLUDED_MODULES = ("oslens", "threading", "importlib", "_weakrefset", "sitecustomize")

_enabled = bool(os.environ.get("OSLENS_TRACE"))  # started under `oslens record` (function tracing needs it)


def enabled() -> bool:
    """True when this process records (runs under `oslens record`, or is attached, with recording on)."""
    return _native.recorder_enabled()


class region:
    """`with oslens.region("name"):` a named region; also usable as a decorator."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        _native.region_begin(self.name)  # dormant: the extension reads the word and returns
        return self

    def __exit__(self, *exc):
        _native.region_end(self.name)
        return False

    def __call__(self, fn):
        name = self.name

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            _native.region_begin(name)
            try:
                return fn(*args, **kwargs)
            finally:
                _native.region_end(name)

        return wrapper


def traced(fn=None, *, name: str | None = None):
    """Decorator: a region named `module.qualname` (or `name`) around every call of `fn`."""
    if fn is None:
        return lambda f: traced(f, name=name)
    return region(name or f"{fn.__module__}.{fn.__qualname__}")(fn)


class counter:
    """A Counter instrument: `c = oslens.counter("hits"); c.add(1)`. Its value is recorded
    periodically, when asked (`record()`) and at exit."""

    __slots__ = ("name", "_handle")

    def __init__(self, name: str):
        self.name = name
        self._handle = _native.counter_new(name)  # also while dormant: an attach names it

    def add(self, delta: int = 1) -> None:
        if self._handle:
            _native.counter_add(self._handle, delta)

    __iadd__ = lambda self, delta: (self.add(delta), self)[1]  # noqa: E731 - c += 1

    def record(self) -> None:
        if self._handle:
            _native.counter_record(self._handle)

    @property
    def value(self) -> int:
        return _native.counter_value(self._handle) if self._handle else 0


# An Event instrument, `oslens.event(name, payload=b"")`: a timestamped, named record with an
# optional payload (bytes or str). The extension's function itself, not a Python wrapper, so a
# dormant call is one call that reads the activation word; while recording, each thread defines
# a name once per attach session (crates/native/src/recorder_api.rs, `event_named`).
event = _native.event_named


def flush() -> None:
    """Record counters and sync buffers to disk now."""
    if not _native.dormant():
        _native.flush()


# ---- Python function tracing ----

_tracing = {"on": False, "pattern": None, "mode": None}


def _matcher(pattern: str):
    patterns = [p for p in pattern.replace(";", ",").split(",") if p.strip()] or ["*"]
    excludes = [p.strip()[1:] for p in patterns if p.strip().startswith("!")]
    includes = [p.strip() for p in patterns if not p.strip().startswith("!")] or ["*"]

    def match(module: str, qualname: str) -> bool:
        if module.split(".", 1)[0] in EXCLUDED_MODULES:
            return False
        full = f"{module}.{qualname}"
        if any(fnmatch.fnmatchcase(full, p) or fnmatch.fnmatchcase(qualname, p) for p in excludes):
            return False
        return any(fnmatch.fnmatchcase(full, p) or fnmatch.fnmatchcase(qualname, p) for p in includes)

    return match


def trace_calls(pattern: str = "*") -> bool:
    """Record entry and exit of every Python function whose `module.qualname` (or qualname)
    matches one of the comma-separated globs in `pattern` (`!glob` excludes). Functions of
    oslens itself are never traced. Returns False when not recording."""
    if not _enabled or _tracing["on"]:
        return _tracing["on"]
    match = _matcher(pattern)
    func_named, define = _native.func_named, _native.define_name
    ids: dict = {}

    def ident_of(code, module):
        i = ids.get(code)
        if i is None:
            qual = getattr(code, "co_qualname", code.co_name)
            i = ids[code] = define(NAME_FUNCTION, f"{module}.{qual}") if match(module, qual) else 0
        return i

    monitoring = getattr(sys, "monitoring", None)
    if monitoring is not None and monitoring.get_tool(monitoring.PROFILER_ID) is None:
        _trace_with_monitoring(monitoring, ident_of, func_named)
        _tracing["mode"] = "sys.monitoring"
    else:
        # A C-level profile function (one Python call per code object, not per event).
        def resolver(frame):
            return ident_of(frame.f_code, frame.f_globals.get("__name__", "?"))

        def thread_hook(frame, event, _arg):  # a new thread's first event: hand over to C
            _native.profile_install(resolver)
            if event == "call":
                i = resolver(frame)
                if i:
                    _native.profile_enter(i)

        threading.setprofile(thread_hook)
        _native.profile_install(resolver)
        _tracing["mode"] = "c-profile"
    _tracing.update(on=True, pattern=pattern)
    return True


def _trace_with_monitoring(mon, ident_of, func_named):  # Python >= 3.12
    tool = mon.PROFILER_ID
    mon.use_tool_id(tool, "oslens")
    ev = mon.events
    disable = mon.DISABLE

    def module_of(code):
        frame = sys._getframe(2)
        return frame.f_globals.get("__name__", "?") if frame.f_code is code else "?"

    def start(code, _offset):
        i = ident_of(code, module_of(code))
        if not i:
            return disable
        func_named(i, False)

    def stop(code, _offset, _value):
        i = ident_of(code, "?")
        if not i:
            return disable
        func_named(i, True)

    def unwind(code, _offset, _exc):
        i = ident_of(code, "?")
        if i:
            func_named(i, True)

    mon.register_callback(tool, ev.PY_START, start)
    mon.register_callback(tool, ev.PY_RESUME, start)
    mon.register_callback(tool, ev.PY_RETURN, stop)
    mon.register_callback(tool, ev.PY_YIELD, stop)
    mon.register_callback(tool, ev.PY_UNWIND, unwind)
    mon.set_events(tool, ev.PY_START | ev.PY_RESUME | ev.PY_RETURN | ev.PY_YIELD | ev.PY_UNWIND)


def stop_tracing() -> None:
    """Stop recording Python function calls."""
    if not _tracing["on"]:
        return
    if _tracing["mode"] == "sys.monitoring":
        mon = sys.monitoring
        mon.set_events(mon.PROFILER_ID, 0)
        mon.free_tool_id(mon.PROFILER_ID)
    else:  # c-profile
        threading.setprofile(None)
        _native.profile_remove()  # this thread; threads already running keep theirs (3.11 has no all-threads call)
    _tracing.update(on=False, mode=None)


__all__ = ["region", "traced", "counter", "event", "flush", "enabled", "trace_calls", "stop_tracing"]
