"""The kernel collector seen from `oslens record`: starts `oslens-collector` attached to the
held program, waits until it is attached (so the first exec is seen), prints the tier it got,
and stops it afterwards, returning what it reports for meta.json["kernel"].

The collector runs in its own session (a Ctrl-C in the terminal reaches the program through
`oslens record`, not the collector directly), reads a pipe from us and exits when the pipe
closes, and has PR_SET_PDEATHSIG: if `oslens record` dies, the collector stops cleanly. Its perf
events die with it, so nothing is left switched on even after a SIGKILL."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from oslens import paths

ATTACH_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 60.0
TIER_NONE = "application events only"


def _say(line: str) -> None:
    print(f"oslens: kernel events: {line}", file=sys.stderr, flush=True)


def _say_fallback(line: str) -> None:
    """A tier below the best, or none: where to see what is missing."""
    _say(line + "; 'oslens doctor' lists what is missing and how to fix it")


def collector_command(trace: Path, pid: int, options: dict) -> list[str]:
    cmd = [str(paths.tool("oslens-collector")), "--trace", str(trace), "--watch-stdin"]
    if options.get("system_wide"):
        cmd.append("--system-wide")
    if options.get("attach"):  # running processes: the collector seeds their existing threads
        cmd += ["--attach", ",".join(str(p) for p in options["attach"])]
    elif pid:
        cmd += ["--pid", str(pid)]
    if options.get("events"):
        cmd += ["--events", str(options["events"])]
    if options.get("sample_hz"):
        cmd += ["--sample", str(int(options["sample_hz"]))]
    ring_mib = options.get("kernel_ring_mib") or os.environ.get("OSLENS_KERNEL_RING_MIB")
    if ring_mib:
        cmd += ["--ring-mib", str(int(ring_mib))]
    if options.get("kernel_chunk_records"):  # flight recorder: chunks of a quarter of the ring (capture/flight.py)
        cmd += ["--chunk-records", str(int(options["kernel_chunk_records"]))]
    mechanism = options.get("kernel_mechanism") or os.environ.get("OSLENS_KERNEL_MECHANISM")
    if mechanism:
        cmd += ["--mechanism", str(mechanism)]
    if options.get("kernel_tier"):
        cmd += ["--tier", str(int(options["kernel_tier"]))]
    return cmd


class _Nothing:
    """Stands in for a collector that could not start: stop() reports why."""

    def __init__(self, info: dict):
        self.info = info

    def stop(self) -> dict:
        return self.info


class KernelCollector:
    def __init__(self, proc: subprocess.Popen, ready: dict):
        self.proc = proc
        self.ready = ready
        self._stopped: dict | None = None

    def flush(self, timeout_s: float = 2.0) -> bool:
        """Has the collector drain its rings now (a quiet one drains every 250 ms) and waits for it to
        say so: a flight snapshot cut after this holds every kernel record made before the call."""
        if self._stopped is not None or self.proc.poll() is not None:
            return False
        try:
            self.proc.stdin.write("drain\n")
            self.proc.stdin.flush()
        except (OSError, ValueError):
            return False
        end = time.monotonic() + timeout_s
        while (left := end - time.monotonic()) > 0:
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if not ready:
                break
            line = self.proc.stdout.readline()
            if not line:
                return False
            if line.startswith("DRAINED"):
                return True
        return False

    def stop(self) -> dict:
        """Stops the collector (drains its rings, closes its chunks) and returns its report."""
        if self._stopped is not None:
            return self._stopped
        proc = self.proc
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            out, err = proc.communicate(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        info = dict(self.ready)
        done = None
        for line in (out or "").splitlines():
            if line.startswith("DONE "):
                try:
                    done = json.loads(line[5:])
                except json.JSONDecodeError:
                    pass
        if done is not None:
            info.update(done)
        else:
            # killed (or crashed): the importer counts kernel events as lost from its last record
            info["collector_died"] = {"status": proc.returncode}
            info["reason"] = (info.get("reason", "") + "; " if info.get("reason") else "") + (
                f"the collector exited with status {proc.returncode} before reporting; its chunks are kept "
                f"but lost counts are unknown" + (f" ({err.strip()})" if err and err.strip() else "")
            )
        if info.get("lost"):
            _say(f"{info['lost']} kernel records lost (rings full): see meta.json kernel.lost_per_cpu")
        if info.get("write_error"):
            _say(f"warning: {info['write_error']}")
        self._stopped = info
        return info


def start(trace: Path, pid: int, options: dict, meta: dict):
    """Starts the collector on `pid` (held before exec) and returns a handle with stop()."""
    exe = paths.tool("oslens-collector")
    if not exe.exists():
        info = {"tier": TIER_NONE, "reason": f"the kernel collector is not built ({exe} is missing; run 'make')"}
        _say_fallback(f"{info['tier']} ({info['reason']})")
        return _Nothing(info)
    cmd = collector_command(Path(trace), pid, options)
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as err:
        info = {"tier": TIER_NONE, "reason": f"cannot start {exe}: {err}"}
        _say_fallback(f"{info['tier']} ({info['reason']})")
        return _Nothing(info)
    ready = _wait_ready(proc)
    if ready is None:
        err = ""
        if proc.poll() is None:
            proc.kill()
        try:
            _, err = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        info = {"tier": TIER_NONE, "reason": f"the kernel collector did not attach: {(err or '').strip() or 'no answer'}"}
        _say_fallback(f"{info['tier']} ({info['reason']})")
        return _Nothing(info)
    line = ready["tier"]
    if ready.get("reason"):
        line += f" ({ready['reason']})"
    if ready.get("missing"):
        line += f"; missing: {', '.join(ready['missing'])}"
    (_say_fallback if ready.get("reason") or ready.get("missing") else _say)(line)
    return KernelCollector(proc, ready)


def _wait_ready(proc: subprocess.Popen) -> dict | None:
    deadline = time.monotonic() + ATTACH_TIMEOUT_S
    fd = proc.stdout.fileno()
    buf = b""
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            buf += chunk
            if b"\n" in buf:
                line = buf.split(b"\n", 1)[0]
                if line.startswith(b"READY "):
                    try:
                        return json.loads(line[6:])
                    except json.JSONDecodeError:
                        return None
                return None
        elif proc.poll() is not None:
            return None
    return None
