"""`oslens snapshot DIR`: asks the `oslens record --flight -o DIR` running now to save a
snapshot (it writes its pid in DIR/flight.pid; the request is a SIGUSR2 to it)."""

import os
import signal
from pathlib import Path

from oslens.capture.flight import PID_FILE
from oslens.errors import OslensError

NAME = "snapshot"
HELP = "save a snapshot of a running flight recording (oslens record --flight -o DIR)"


def add_arguments(parser):
    parser.add_argument("trace", metavar="DIR", help="the trace directory of the running flight recording")


def run(args):
    trace = Path(args.trace)
    try:
        pid = int((trace / PID_FILE).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        raise OslensError(f"{trace}: no flight recording is running there (no {PID_FILE}); start one with "
                          f"'oslens record --flight -o {trace} -- CMD'", 2) from None
    if not _is_oslens(pid):
        raise OslensError(f"{trace}: the flight recording that wrote {PID_FILE} (pid {pid}) has ended", 2)
    os.kill(pid, signal.SIGUSR2)
    print(f"oslens: snapshot asked of pid {pid}; it appears as {trace}/snapshot-NNN", flush=True)
    return 0


def _is_oslens(pid: int) -> bool:
    """The pid is alive and runs oslens (not a later process that reused the number)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"oslens" in cmdline
