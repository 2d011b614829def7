"""Losses from faults of the machine, as the writers kept them in their chunk headers: a chunk
the recorder or the kernel collector stopped writing (disk full, quota, I/O error, file system
read-only or gone: see docs/recorder.md, "Faults") and, in a process's names chunk, the events of
threads that could get no chunk at all. Each becomes a `lost` row whose reason says what failed
and when (seconds from the start of the run)."""

from __future__ import annotations

from oslens.capture import raw
from oslens.store.held import records_of


def add_losses(losses, chunks: list, meta: dict) -> None:
    start = meta.get("start_ns") if isinstance(meta, dict) else None
    _collector_died(losses, chunks, meta, start)
    for c in chunks:
        h = c.header
        if not h or not h.get("fault_errno"):
            continue
        source, where = _where(h)
        when = ""
        if isinstance(start, int) and h.get("fault_ns", 0) >= start:
            when = f" at {(h['fault_ns'] - start) / 1e9:.3f} s"
        what = "records" if source == "kernel" else "events"
        losses.add(source, where, int(h.get("fault_dropped") or 0),
                   f"{h.get('fault_reason', 'fault')}{when}: recording stopped, {what} after it not kept")


def _collector_died(losses, chunks: list, meta: dict, start) -> None:
    """The kernel collector was killed mid-run: kernel events after its last record are lost,
    how many is unknown."""
    kernel = meta.get("kernel") if isinstance(meta, dict) else None
    died = kernel.get("collector_died") if isinstance(kernel, dict) else None
    if not isinstance(died, dict):
        return
    last = max((int(records_of(c)["ts"].max()) for c in chunks
                if c.header and c.header.get("source") == raw.SOURCE_KERNEL_CPU and len(c.records)), default=None)
    when = f" after {(last - start) / 1e9:.3f} s (its last record)" if last is not None and isinstance(start, int) else ""
    losses.add("kernel", "collector", None,
               f"kernel collector died (exit status {died.get('status')}){when}: kernel events after it not recorded")


def _where(h: dict) -> tuple[str, str]:
    if h.get("source") == raw.SOURCE_KERNEL_CPU:
        return "kernel", f"cpu {h.get('cpu')}"
    if h.get("tid") == 0:
        return "app", f"threads of process {h.get('pid')} that got no buffer (and its names)"
    return "app", f"thread {h.get('tid')} ({h.get('name') or '?'}) of process {h.get('pid')}"
