"""oslens: a gray-box information and control layer for Linux.

Layers (data flows one way): capture -> store -> analysis -> control -> presentation.
"""

from oslens.version import __version__  # noqa: F401 - oslens.__version__

# The Python recorder API: regions, counters, events and function tracing into the same trace.
from oslens.instrument import counter, enabled, event, flush, region, stop_tracing, trace_calls, traced  # noqa: E402,F401


def open(trace):  # noqa: A001 - the natural name: oslens.open(TRACE)
    """A DuckDB connection with the trace's tables as views (imports the trace on first use)."""
    from oslens.store import open_trace

    return open_trace(trace)


def adapt(phase: str) -> int:
    """The kernel adaptation call: switch this thread to the plan's policy for `phase`."""
    from oslens.control.adapt import adapt as _adapt

    return _adapt(phase)
