"""Option types that reject bad values while the command line is parsed, before anything runs
(argparse turns the ValueError into one line: commands/parser.py: OneLineParser)."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An integer above 0 (sizes, counts, rates)."""
    value = _int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, not {text}")
    return value


# A per-thread buffer is a sparse file mapped whole: past a file system's file size limit
# (16 TiB on ext4) the recorder cannot create it and records nothing.
MAX_BUFFER_MB = 65536


def buffer_mb(text: str) -> int:
    """A per-thread buffer size in MiB: above 0, at most MAX_BUFFER_MB."""
    value = positive_int(text)
    if value > MAX_BUFFER_MB:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_BUFFER_MB} (64 GiB per thread), not {text}")
    return value


DURATION_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_s(text: str) -> float:
    """A duration above 0: `10s`, `500ms`, `2m`, `1h`, or plain seconds."""
    number, unit = text, "s"
    for suffix in sorted(DURATION_UNITS, key=len, reverse=True):
        if text.endswith(suffix):
            number, unit = text[: -len(suffix)], suffix
            break
    try:
        value = float(number) * DURATION_UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a duration such as 10s, 500ms or 2m, not {text}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a duration above 0, not {text}")
    return value


def non_negative_int(text: str) -> int:
    """An integer of 0 or more (thresholds where 0 means none)."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not '{text}'") from None


def event_sets(text: str) -> str:
    """A comma-separated list of kernel event sets, checked against the collector's (the names
    come from crates/format through oslens._native); returned normalised."""
    from oslens import _native

    try:
        return ",".join(_native.event_sets(text))
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
