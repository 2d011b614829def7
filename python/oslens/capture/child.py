"""Starting the program oslens runs: fork, an optional step in the child before exec, exec, and a
wait that keeps the kernel's own figures for the run. One implementation for `oslens record` (the
child is held before exec until the collector is attached) and `oslens tune` (the child joins the
run's cgroup and default phase before exec). subprocess.Popen can do neither: it returns only
after the exec, and runs no Python in the child."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

from oslens.capture.steal import steal_during, steal_ticks
from oslens.errors import OslensError


class Child:
    """A forked program. `held`: it waits before exec until `release()`, so a collector can attach
    to its pid first; its exec failure is then its own (a message on stderr, exit status 127,
    like a shell's). Otherwise `started()` waits for the exec and raises OslensError when it
    failed. `prepare(parent_pid)` runs in the child just before exec; an exception from it fails
    the start the way a failed exec does."""

    def __init__(self, argv: list[str], env: dict, prepare: Callable[[int], None] | None = None,
                 held: bool = False):
        self.argv = argv
        self.returncode: int | None = None
        self.rusage: dict | None = None
        self.schedstat: dict | None = None
        self.before_release: dict | None = None
        self._steal_at_release: dict[str, int] = {}
        self.steal: dict | None = None  # hypervisor steal over the run (capture/steal.py)
        parent = os.getpid()
        gate_r, gate_w = os.pipe() if held else (-1, -1)
        err_r, err_w = (-1, -1) if held else os.pipe2(os.O_CLOEXEC)
        self.pid = os.fork()
        if self.pid == 0:  # the child: no Python-level cleanup, ever
            _exec_in_child(argv, env, prepare, parent, (gate_r, gate_w), (err_r, err_w))
        if held:
            os.close(gate_r)
        else:
            os.close(err_w)
        self._gate = gate_w
        self._errors = err_r

    def started(self) -> None:
        """Waits until the exec is done (a close-on-exec pipe closes); a failed exec raises."""
        msg = b""
        while True:
            chunk = os.read(self._errors, 4096)
            if not chunk:
                break
            msg += chunk
        os.close(self._errors)
        if msg:
            os.waitpid(self.pid, 0)
            self.returncode = 127
            _code, _, text = msg.decode(errors="replace").partition(":")
            raise OslensError(f"cannot run {self.argv[0]}: {text}; check the command", 127)

    def release(self) -> None:
        """Lets a held child exec, after noting what it did before (see `_launcher_figures`)."""
        self._until_blocked()
        self.before_release = self._launcher_figures()
        self._steal_at_release = steal_ticks()
        os.write(self._gate, b"g")

    def _until_blocked(self, timeout_s: float = 2.0) -> None:
        """Waits (briefly) until the held child sleeps on the gate: its figures read while it
        still ran would leave the rest of that run to neither the snapshot nor the trace."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{self.pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] in ("S", "D"):
                        return
            except (OSError, IndexError):
                return
            time.sleep(0.0005)
        os.close(self._gate)

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def wait(self) -> int:
        """Exit status as subprocess reports it: negative for a signal (1 when another waiter
        reaped it). Keeps the kernel's own figures for the run (`rusage`, `schedstat`) for the
        cross-check (analysis/crosscheck.py)."""
        self.schedstat = self._schedstat_before_reap()
        if self._steal_at_release:
            self.steal = steal_during(self._steal_at_release, steal_ticks())
        try:
            _, status, ru = os.wait4(self.pid, 0)
        except ChildProcessError:
            self.returncode = 1
            return 1
        self.rusage = {"utime_ns": round(ru.ru_utime * 1e9), "stime_ns": round(ru.ru_stime * 1e9),
                       "nvcsw": ru.ru_nvcsw, "nivcsw": ru.ru_nivcsw, "minflt": ru.ru_minflt,
                       "majflt": ru.ru_majflt, "maxrss_kb": ru.ru_maxrss}
        self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def _launcher_figures(self) -> dict | None:
        """What the held child did before the collector could see it (from fork until it
        blocked on the gate): the kernel counts it, the trace cannot; the cross-check takes it off."""
        try:
            with open(f"/proc/{self.pid}/schedstat") as f:
                cpu, _, runs = (int(x) for x in f.read().split()[:3])
            with open(f"/proc/{self.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            status = dict(line.split(":", 1) for line in Path(f"/proc/{self.pid}/status").read_text().splitlines()
                          if ":" in line)
            return {"cpu_ns": cpu, "timeslices": runs, "minflt": int(fields[7]), "majflt": int(fields[9]),
                    "nvcsw": int(status["voluntary_ctxt_switches"]), "nivcsw": int(status["nonvoluntary_ctxt_switches"])}
        except (OSError, ValueError, KeyError, IndexError):
            return None

    def _schedstat_before_reap(self) -> dict | None:
        """Waits for the child to exit without reaping it, then reads its main thread's
        /proc/PID/schedstat (CPU ns, runnable-wait ns, times run), gone once it is reaped, and,
        when the kernel's delay accounting is on (kernel.task_delayacct), its block I/O delay."""
        try:
            os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)
            with open(f"/proc/{self.pid}/schedstat") as f:
                cpu, delay, runs = (int(x) for x in f.read().split()[:3])
        except (OSError, ValueError):
            return None
        out = {"cpu_ns": cpu, "run_delay_ns": delay, "timeslices": runs}
        blkio = _blkio_delay_ns(self.pid)
        if blkio is not None:
            out["blkio_delay_ns"] = blkio
        return out


def _blkio_delay_ns(pid: int) -> int | None:
    """The main thread's delayacct_blkio_ticks (/proc/PID/stat field 42, clock ticks, so 10 ms
    steps): time off a CPU in io_schedule until the wakeup; None when delay accounting is off."""
    try:
        if Path("/proc/sys/kernel/task_delayacct").read_text().strip() != "1":
            return None
        with open(f"/proc/{pid}/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[39])
    except (OSError, ValueError, IndexError):
        return None
    return ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def _exec_in_child(argv, env, prepare, parent: int, gate: tuple[int, int], errors: tuple[int, int]) -> None:
    """The forked child's whole life: wait at the gate, prepare, exec; never returns."""
    gate_r, gate_w = gate
    err_r, err_w = errors
    try:
        if gate_r >= 0:
            os.close(gate_w)
            os.read(gate_r, 1)
            os.close(gate_r)
        else:
            os.close(err_r)
        if prepare is not None:
            prepare(parent)
        os.execvpe(argv[0], argv, env)
    except BaseException as err:  # noqa: BLE001 - must never return into the parent's code
        if err_w < 0:  # held: say why and exit like a shell would
            os.write(2, f"oslens: cannot run {argv[0]}: {err}\n".encode())
        elif isinstance(err, OSError):
            os.write(err_w, f"{err.errno or 1}:{err.strerror or err}".encode())
        else:
            os.write(err_w, f"1:{err}".encode())
    finally:
        os._exit(127)
