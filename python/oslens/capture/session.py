"""One recording session: the trace directory, the traced program and (when available) the
kernel collector, started in an order that loses nothing: the program is held before exec
until the collector is attached, then released."""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import socket
import time
from pathlib import Path

from oslens import _native
from oslens.version import __version__
from oslens.capture import kernel, ledger, memory, preload, raw
from oslens.capture.child import Child
from oslens.capture.spares import SparePool
from oslens.capture.steal import sched_tick_ns
from oslens.errors import OslensError

RAW_SCHEMA_VERSION = 1


def default_trace_dir(command: list[str]) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("traces") / f"{Path(command[0]).name}-{stamp}"


def machine_info() -> dict:
    cpu_model = ""
    flags = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and not cpu_model:
                cpu_model = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return {
        "hostname": socket.gethostname(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model,
        "tsc_invariant": {"constant_tsc", "nonstop_tsc"} <= flags,
    }


def recorder_clock(machine: dict | None = None) -> str:
    """The clock the recorder reads here: the TSC when it is invariant, unless OSLENS_CLOCK says
    monotonic (crates/recorder/src/clock.rs decides the same from CPUID)."""
    tsc = (machine or machine_info())["tsc_invariant"] and os.environ.get("OSLENS_CLOCK") != "monotonic"
    return "tsc" if tsc else "monotonic"


def recorder_environment(trace: Path, options) -> dict:
    env = dict(os.environ)
    env["OSLENS_TRACE"] = str(trace.resolve())
    # the recorder's CPUID check, made here once instead of in every process (docs/recorder.md, "Start-up")
    env.setdefault("OSLENS_TSC_INVARIANT", "1" if _native.tsc_invariant() else "0")
    env.pop("OSLENS_ENABLE", None)
    if options.get("disabled"):
        env["OSLENS_ENABLE"] = "0"
    for key, var in (
        ("buffer_mb", "OSLENS_BUFFER_MB"),
        ("on_full", "OSLENS_ON_FULL"),
        ("limit_events", "OSLENS_LIMIT_EVENTS"),
        ("limit_bytes", "OSLENS_LIMIT_BYTES"),
        ("counter_period_us", "OSLENS_COUNTER_PERIOD_US"),
        ("prepare_buffers", "OSLENS_PREPARE_BUFFERS"),
    ):
        if options.get(key) is not None:
            env[var] = str(options[key])
    # Auto-instrumentation: LD_PRELOAD of the pthread/fork/exec wrappers, Python tracing.
    return preload.environment(env, options)


def _signal_name(sig: int) -> str:
    return signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)


def _resolve_command(command: list[str]) -> None:
    exe = command[0]
    if "/" in exe:
        if not os.path.exists(exe):
            raise OslensError(f"cannot run {exe}: no such file", 127)
        if not os.access(exe, os.X_OK):
            raise OslensError(f"cannot run {exe}: not executable", 126)
    elif shutil.which(exe) is None:
        raise OslensError(f"cannot run {exe}: command not found in PATH", 127)


def make_trace_dir(trace: Path, force: bool) -> None:
    """Creates TRACE/raw, where an existing non-empty TRACE is replaced only when `force` is
    given and it is an oslens trace (raw.is_replaceable_trace): --force never deletes anything
    else. Each refusal is one sentence saying what to do (docs/errors.md)."""
    if trace.is_symlink() or (trace.exists() and not trace.is_dir()):
        raise OslensError(f"{trace} exists and is not a directory; choose another -o", 2)
    if trace.is_dir() and any(trace.iterdir()):
        if not force:
            raise OslensError(f"{trace} exists and is not empty; choose another -o or pass --force", 2)
        if not raw.is_replaceable_trace(trace):
            raise OslensError(f"{trace} is not an oslens trace; --force only replaces traces, so remove it "
                              "yourself or choose another -o", 2)
        try:
            shutil.rmtree(trace)
        except OSError as err:
            raise OslensError(f"cannot replace {trace}: {err.strerror or err}", 1) from err
    try:
        (trace / "raw").mkdir(parents=True, exist_ok=True)
        probe = trace / "raw" / ".oslens-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise OslensError(f"cannot write the trace into {trace}: {err.strerror or err}; choose a writable -o", 1) from err


class Session:
    def __init__(self, trace: Path, command: list[str], options: dict):
        self.trace = trace
        self.command = command
        self.options = options
        self.collector = None
        self.child: Child | None = None
        self.clock_pairs: list[tuple[int, int]] = []
        self.meta: dict = {}

    def prepare(self) -> None:
        _resolve_command(self.command)
        make_trace_dir(self.trace, bool(self.options.get("force")))
        self.clock_pairs.append(_native.clock_pair())
        self.meta = {
            "oslens_version": __version__,
            "raw_schema_version": RAW_SCHEMA_VERSION,
            "command": self.command,
            "cwd": os.getcwd(),
            "start_time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "start_ns": time.monotonic_ns(),
            "machine": machine_info(),
            "settings": {k: v for k, v in self.options.items() if v is not None and k not in ("force", "command")},
        }
        self._write_meta()
        memory.warn_if_buffers_cannot_fit(self.trace, self.options)

    def _write_meta(self) -> None:
        tmp = self.trace / "meta.json.tmp"
        tmp.write_text(json.dumps(self.meta, indent=2, sort_keys=True))
        tmp.replace(self.trace / "meta.json")

    def run(self) -> int:
        """Runs the program to completion; returns its exit status (128+N when killed by signal N)."""
        env = recorder_environment(self.trace, self.options)
        self.child = Child(self.command, env, held=True)
        self.meta["pid"] = self.child.pid
        self._write_meta()  # a recording killed from here on still names its program
        self.collector = self._start_collector(self.child.pid)
        # this recording's own processes: other oslens runs on the machine are not its cost
        self.meta["oslens_pids"] = {"command": os.getpid(),
                                    **({"collector": self.collector.proc.pid} if getattr(self.collector, "proc", None) else {})}
        previous = {s: signal.signal(s, self._forward) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        maps = None
        spares = SparePool(self.trace, enabled=os.environ.get("OSLENS_SPARE_FILES") != "0").start()  # spares.py
        flight = self._start_flight()  # capture/flight.py: None unless --flight
        try:
            self.child.release()
            if self.options.get("sample_hz"):  # samples are named through the processes' maps
                from oslens.capture.maps import MapsWatcher
                maps = MapsWatcher(self.trace / "raw", self.child.pid).start()
            status = None
            status = self.child.wait()
        finally:
            if flight:
                self.meta["flight"] = flight.stop(_signal_name(-status) if status is not None and status < 0 else None)
            spares.stop()
            self.meta["spare_files"] = spares.summary()
            if maps:
                maps.stop()
            for s, h in previous.items():
                signal.signal(s, h)
        self.meta["end_ns"] = time.monotonic_ns()
        self.clock_pairs.append(_native.clock_pair())
        # the kernel's figures for the same run, which the trace's own counts are checked against
        self.meta["rusage"] = self.child.rusage
        if self.child.schedstat:
            self.meta["schedstat"] = self.child.schedstat
        if self.child.before_release:
            self.meta["before_release"] = self.child.before_release
        if self.child.steal:
            self.meta["steal"] = self.child.steal
        if tick := sched_tick_ns():  # bounds the kernel's skipped clock updates (analysis/crosscheck.py)
            self.meta["sched_tick_ns"] = tick
        return self._exit_status(status)

    def _start_flight(self):
        """The flight recorder's loop (docs/flight.md); it takes SIGUSR2 as a trigger until stopped."""
        if not self.options.get("flight"):
            return None
        from oslens.capture.flight import FlightRecorder, options_from
        return FlightRecorder(self.trace, options_from(self.options["flight"]), self.meta, self.clock_pairs,
                              flush_kernel=getattr(self.collector, "flush", None)).start()

    def _forward(self, signum, _frame):
        if self.child:
            self.child.send_signal(signum)

    def _start_collector(self, pid: int):
        if self.options.get("no_kernel"):
            self.meta["kernel"] = {"tier": "application events only", "reason": "--no-kernel was given"}
            return None
        return kernel.start(self.trace, pid, self.options, self.meta)

    def _exit_status(self, status: int) -> int:
        if status < 0:
            sig = -status
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
            self.meta["exit"] = {"signal": sig, "signal_name": name, "code": 128 + sig}
            return 128 + sig
        self.meta["exit"] = {"code": status}
        return status

    def finish(self) -> dict:
        """Stops the collector and writes meta.json with per-thread counts and losses."""
        if self.collector is not None:
            self.meta["kernel"] = self.collector.stop()
        self.meta["clock_pairs"] = [list(p) for p in self.clock_pairs]
        threads, damage, helpers, tsc = [], [], [], False
        names_chunks, chunked = [], set()  # for the threads in the names chunks' ledgers
        # one chunk in memory at a time: the trace may hold far more records than memory
        for path in raw.chunk_paths(self.trace):
            c = raw.read_chunk(path)
            tsc = tsc or bool(c.header and c.header["clock"] == raw.CLOCK_TSC)
            damage.extend(c.damage)
            h = c.header
            if h is None or h["source"] != raw.SOURCE_APP_THREAD:
                continue
            cost = raw.recorder_cost(c.path)
            if h["tid"] == 0:  # the process's names chunk: its helper's figures (zero if it never ran)
                helpers.append({"pid": h["pid"], "cpu_ns": cost["helper_cpu_ns"], "ring_slots_copied": cost["helper_copies"]})
                names_chunks.append(c)
                continue
            chunked.add((h["pid"], h["tid"]))
            threads.append(
                {
                    "pid": h["pid"],
                    "tid": h["tid"],
                    "name": h["name"],
                    "chunk": c.path.name,
                    "records": int(len(c.records)),
                    # the recorder's own pause records (a new chunk, a prepared buffer, slots copied out)
                    "recorder_pauses": int((c.records["kind"] == raw.PAUSE).sum()) if len(c.records) else 0,
                    "dropped_events": h["dropped_events"],
                    "dropped_bytes": h["dropped_bytes"],
                    "suppressed_events": h["suppressed_events"],
                    "ring_slots_self_copied": cost["ring_self_copies"],
                }
            )
        for c in ledger.from_names(names_chunks, chunked):  # threads that recorded nothing of their own
            h = c.header
            threads.append({"pid": h["pid"], "tid": h["tid"], "name": h["name"], "chunk": c.path.name.split("#")[0],
                            "records": int(len(c.records)), "recorder_pauses": 0, "dropped_events": 0,
                            "dropped_bytes": 0, "suppressed_events": 0, "ring_slots_self_copied": 0, "ledger": True})
        self.meta["clock"] = "tsc" if tsc else "monotonic"
        self.meta["threads"] = threads
        # the recorder's helper threads (one per process), measured: CPU outside the program's threads
        self.meta["recorder_helpers"] = helpers
        self.meta["lost_events"] = sum(t["dropped_events"] for t in threads)
        self.meta["damage"] = damage
        self._write_meta()
        return self.meta
