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


def trace(path):
    """A trace's tables for notebooks and scripts: .tables, .sql(), .df() (pandas), .pl() (polars),
    .report() (rendered inline in Jupyter)."""
    from oslens.report.notebook import Trace

    return Trace(path)


def load_ipython_extension(ipython):
    """`%load_ext oslens` in IPython / Jupyter: the %%oslens cell magic (oslens.report.notebook)."""
    from oslens.report.notebook import load_ipython_extension as load

    load(ipython)
