"""The import's second step: the line that turns the recorder's TSC values into CLOCK_MONOTONIC
ns, fitted through every calibration pair of the trace (docs/trace-schema.md, conventions)."""

from __future__ import annotations

from oslens.capture import raw


def clock_for(chunks: list[raw.ChunkData], meta: dict, scans: dict) -> raw.ClockConverter:
    """raw.clock_for (the same pairs in the same order) with each chunk's CLOCK_PAIR records
    from its scan where there is one, rather than a second pass over every record."""
    if not all(c.path in scans for c in chunks):
        return raw.clock_for(chunks, meta)
    pairs = [tuple(p) for p in meta.get("clock_pairs", [])]
    for c in chunks:
        if c.header and c.header["clock"] == raw.CLOCK_TSC:
            pairs.extend(tuple(p) for p in c.header["calib"])
        if c.header is None or c.header["clock"] == raw.CLOCK_TSC:
            pairs.extend(scans[c.path][1])
    return raw.ClockConverter(pairs)
