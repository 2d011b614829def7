"""SIGTERM and SIGHUP as exceptions, so that `finally` blocks restore what a command changed (the
bench's sysctls, what-if validation's RR slice): a leaf every layer may use."""

from __future__ import annotations

import contextlib
import signal


class Interrupted(BaseException):
    """SIGTERM or SIGHUP arrived; raised like KeyboardInterrupt so `finally` blocks restore."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def signals_as_exceptions():
    def handler(signum, frame):
        raise Interrupted(signum)

    old = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            old[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread
            pass
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
