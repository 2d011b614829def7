"""`oslens record -p PID`: a recording of processes that are already running. The kernel collector
attaches to their existing threads and follows whatever they create from then on; the state they
were in at the attach is read once (attach_state.py). The processes are never stopped, signalled
or waited for: the recording ends on Ctrl-C, SIGTERM, SIGHUP, --duration, or when they have all
exited, and the collector's events die with it whatever ends oslens (kernel.py). With --flight the
instruments wake in the rotate mode and the flight loop keeps the last window (docs/flight.md)."""

from __future__ import annotations

import os
import pwd
import signal
import sys
import threading
import time
from pathlib import Path

from oslens import _native
from oslens.capture import attach_state, instruments, kernel
from oslens.capture.steal import steal_during, steal_ticks
from oslens.capture.session import RAW_SCHEMA_VERSION, Session, machine_info, make_trace_dir, recorder_environment
from oslens.errors import OslensError
from oslens.version import __version__

# how often the wait looks whether the attached processes still exist
POLL_S = 0.05


def _owner(pid: int) -> str:
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return "?"
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _ptrace_scope() -> str:
    try:
        return Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip()
    except OSError:
        return "none"


def refusal(pid: int) -> str | None:
    """Why this user may not attach to `pid` (one sentence with what would allow it), or None.
    Reading its memory maps needs the same access the kernel asks of perf_event_open on its
    threads (ptrace read access), so a refused read is a refused attach."""
    if not Path(f"/proc/{pid}").is_dir():
        return f"cannot attach to {pid}: no such process"
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            f.read(1)
    except PermissionError:
        me = pwd.getpwuid(os.geteuid()).pw_name if os.geteuid() != 0 else "root"
        return (f"cannot attach to {pid}: it belongs to {_owner(pid)} and {me} may not trace it (ptrace access: "
                f"kernel.yama.ptrace_scope = {_ptrace_scope()}); run as its owner or as root, or grant CAP_SYS_PTRACE "
                "with CAP_PERFMON and CAP_BPF; 'oslens doctor' lists what this user can record")
    except OSError:
        return f"cannot attach to {pid}: no such process"
    return None


def check_pids(text: str) -> list[int]:
    try:
        pids = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise OslensError(f"-p needs process ids, comma separated (got {text!r})", 2) from None
    if not pids or any(p <= 0 for p in pids):
        raise OslensError(f"-p needs process ids, comma separated (got {text!r})", 2)
    for p in pids:
        why = refusal(p)
        if why:
            raise OslensError(why, 1)
    for p in pids:
        offsets = _clock_offsets(p)
        if offsets is None:
            raise OslensError(f"cannot attach to {p}: no such process (it ended)", 1)
        if offsets != _clock_offsets("self"):
            # its instruments stamp the container's clock, the kernel the host's: no one timeline
            raise OslensError(f"cannot attach to {p} from here: it runs in a time namespace whose clocks are offset from "
                              f"this one's; run 'oslens record -p' inside its namespaces (nsenter -t {p} -a)", 2)
    spaces = {_pid_namespace(p) for p in pids}
    if len(spaces) > 1:
        raise OslensError(f"cannot attach to {text} together: they live in different PID namespaces (containers); "
                          "attach to each with its own 'oslens record -p'", 2)
    return list(dict.fromkeys(pids))


def _clock_offsets(pid) -> str | None:
    """/proc/PID/timens_offsets ('' where the kernel has no time namespaces; None: the process is gone)."""
    try:
        return Path(f"/proc/{pid}/timens_offsets").read_text()
    except FileNotFoundError:
        return "" if Path(f"/proc/{pid}").exists() else None
    except ProcessLookupError:
        return None
    except OSError:
        return ""


def _pid_namespace(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return None


def kernel_counts(pids: list[int]) -> list[dict]:
    """The kernel's own counters of every thread of `pids` now (the attach cross-check,
    analysis/crosscheck.py): context switches from status, run time and runs from schedstat,
    each with the instant it was read and the tid the trace names it by (its PID namespace's)."""
    rows = []
    for pid in pids:
        try:
            tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
        except OSError:
            continue
        for tid in tids:
            row = _thread_counts(pid, tid)
            if row is not None:
                rows.append(row)
    return rows


def _thread_counts(pid: int, tid: int) -> dict | None:
    base = f"/proc/{pid}/task/{tid}"
    try:
        status = Path(f"{base}/status").read_text()
        sched = Path(f"{base}/schedstat").read_text().split()
    except OSError:
        return None  # it exited between the listing and the read
    ts = time.monotonic_ns()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    try:
        return {"tid": int(fields.get("NSpid", str(tid)).split()[-1]), "pid": int(fields.get("NStgid", str(pid)).split()[-1]),
                "ts": ts, "voluntary": int(fields["voluntary_ctxt_switches"]),
                "involuntary": int(fields["nonvoluntary_ctxt_switches"]),
                "cpu_ns": int(sched[0]), "wait_ns": int(sched[1]), "runs": int(sched[2])}
    except (KeyError, IndexError, ValueError):
        return None  # a zombie thread's status lacks the counters


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie has exited: its parent has yet to reap it
    state = attach_state.thread_row(pid, pid)
    return state is not None and state["state"] != "Z"


class AttachSession(Session):
    """A Session whose program is running already: no child, no preload, the collector seeded
    with the processes' threads."""

    def __init__(self, trace: Path, pids: list[int], options: dict, duration_s: float | None = None):
        command = attach_state.process(pids[0])["command"] or [str(pids[0])]
        super().__init__(trace, command, {**options, "attach": pids})
        self.pids = pids
        self.duration_s = duration_s
        self._stop = threading.Event()
        self.ended_by = ""

    def prepare(self) -> None:
        make_trace_dir(self.trace, bool(self.options.get("force")))
        self.clock_pairs.append(_native.clock_pair())
        self.meta = {
            "oslens_version": __version__, "raw_schema_version": RAW_SCHEMA_VERSION, "command": self.command,
            "cwd": os.getcwd(), "start_time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "start_ns": time.monotonic_ns(),
            # the tables speak in the pids the program sees (its PID namespace's), as its app records do
            "machine": machine_info(), "pid": attach_state.innermost(self.pids[0], key="NStgid:") or self.pids[0],
            "attach": {"pids": self.pids},
            "settings": {k: v for k, v in self.options.items() if v is not None and k not in ("force", "command")},
        }
        self._write_meta()

    def _on_signal(self, signum, _frame):
        self.ended_by = signal.Signals(signum).name
        self._stop.set()

    def run(self) -> int:
        """Records until a signal, the duration, or the end of every attached process; returns 0."""
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        maps, flight = [], None
        try:
            if self.options.get("no_kernel"):
                self.meta["kernel"] = {"tier": kernel.TIER_NONE, "reason": "--no-kernel was given"}
            else:
                began = time.monotonic_ns()
                self.collector = kernel.start(self.trace, self.pids[0], self.options, self.meta)
                self.meta["attach"]["collector_ns"] = time.monotonic_ns() - began  # bench/attach reads it
                self.meta["oslens_pids"] = {"command": os.getpid(),
                                            **({"collector": self.collector.proc.pid} if getattr(self.collector, "proc", None) else {})}
            flight = self._start_flight()  # --flight: armed before the instruments wake (capture/flight.py)
            self.meta["attach"]["ts_ns"] = time.monotonic_ns()
            self.meta["attach"]["kernel_counts"] = {"at_attach": kernel_counts(self.pids)}
            steal_at_attach = steal_ticks()  # the slices hold stolen time, the kernel's CPU times do not
            states = [attach_state.dump(self.trace / "raw", p) for p in self.pids]
            self.meta["attach"]["state_dump_ns"] = time.monotonic_ns() - self.meta["attach"]["ts_ns"]
            self._wake_instruments()
            self.meta["attach"]["threads"] = sum(len(s["threads"]) for s in states)
            self._write_meta()
            print(f"oslens: attached to {', '.join(map(str, self.pids))}; Ctrl-C detaches"
                  + (f" (or after {self.duration_s:g} s)" if self.duration_s else ""), file=sys.stderr, flush=True)
            if self.options.get("sample_hz"):  # samples are named through the processes' maps
                from oslens.capture.maps import MapsWatcher
                maps = [MapsWatcher(self.trace / "raw", p).start() for p in self.pids]
            self._wait()
            if "kernel_counts" in self.meta["attach"]:  # read while the collector still records
                self.meta["attach"]["kernel_counts"]["at_detach"] = kernel_counts(self.pids)
                stolen = steal_during(steal_at_attach, steal_ticks())
                if stolen:
                    self.meta["steal"] = stolen
        finally:
            if self.meta["attach"].get("instruments"):
                began = time.monotonic_ns()
                for p in self.meta["attach"]["instruments"]:
                    instruments.sleep(p)
                self.meta["attach"]["instruments_asleep_ns"] = [began, time.monotonic_ns()]
            if flight:  # after the detach: a trigger still waiting for its --after is cut with all it had
                self.meta["flight"] = flight.stop()
            for m in maps:
                m.stop()
            for s, h in previous.items():
                signal.signal(s, h)
        self.meta["end_ns"] = time.monotonic_ns()
        self.meta["attach"]["detach_ns"] = self.meta["end_ns"]
        self.meta["attach"]["ended_by"] = self.ended_by
        self.clock_pairs.append(_native.clock_pair())
        self.meta["exit"] = {"code": 0, "detached": True}
        return 0

    def _wake_instruments(self) -> None:
        """The processes' own instruments (oslens.h) record from now, where they can."""
        woken, began = [], time.monotonic_ns()
        for p in self.pids:
            why = instruments.wake(p, self.trace, self._request_settings())
            if why is None:
                woken.append(p)
            elif why != "it did not load oslens's recorder":
                print(f"oslens: the instruments of {p} stay dormant: {why}", file=sys.stderr)
        self.meta["attach"]["instruments"] = woken
        self.meta["attach"]["instruments_woken_ns"] = [began, time.monotonic_ns()]  # tests/test_attach.py

    def _request_settings(self) -> dict[str, str]:
        """The recorder settings the attach request carries: with --flight, the rotate mode and
        the chunk size, as a started program's environment has them; none otherwise."""
        if not self.options.get("flight"):
            return {}
        env = recorder_environment(self.trace, self.options)
        return {k: env[k] for k in instruments.ATTACH_SETTINGS if k in env}

    def _wait(self) -> None:
        deadline = time.monotonic() + self.duration_s if self.duration_s else None
        while not self._stop.wait(POLL_S):
            if deadline is not None and time.monotonic() >= deadline:
                self.ended_by = "duration"
                return
            if not any(_alive(p) for p in self.pids):
                self.ended_by = "exit"
                return
