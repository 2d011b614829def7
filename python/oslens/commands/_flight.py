"""`oslens record --flight`'s flags: checked here, turned into the session's options (the
recorder rotates chunks of a quarter of the ring, the collector too) and summarised at the end
(capture/flight.py; docs/flight.md)."""

from __future__ import annotations

import sys

from oslens.commands import _options
from oslens.errors import OslensError

DEFAULT_RING_MB = 64  # per stream; LTTng's default sub-buffers total less, perf's --mmap-pages more
MIN_RING_MB = 4  # four chunks of at least 1 MiB: an app chunk is written through a 512 KiB staging ring
FLIGHT_ONLY = ("window", "ring_mb", "trigger", "after", "max_snapshots", "min_gap", "overlap")


def add_arguments(parser) -> None:
    g = parser.add_argument_group("flight recorder (docs/flight.md)")
    g.add_argument("--flight", action="store_true", help="keep only the last window of every thread and CPU; save it on a trigger")
    g.add_argument("--window", type=_options.duration_s, metavar="TIME", help="with --flight: keep records of the last TIME (also bounded by --ring-mb)")
    g.add_argument("--ring-mb", type=_options.positive_int, metavar="N", help=f"with --flight: keep at most N MiB per thread and per CPU (default {DEFAULT_RING_MB}, at least {MIN_RING_MB})")
    g.add_argument("--trigger", action="append", metavar="SPEC", help="with --flight: save a snapshot when SPEC fires (region:NAME>50ms, ...); SIGUSR2 and 'oslens snapshot DIR' always do")
    g.add_argument("--after", type=_options.duration_s, metavar="TIME", help="with --flight: cut the snapshot TIME after the trigger")
    g.add_argument("--max-snapshots", type=_options.positive_int, metavar="N", help="with --flight: at most N snapshots")
    g.add_argument("--min-gap", type=_options.duration_s, metavar="TIME", help="with --flight: ignore triggers within TIME of the previous one")
    g.add_argument("--overlap", action="store_true", help="with --flight: a snapshot repeats records an earlier one holds")


def options(args) -> dict:
    """The session's options for --flight (empty without it); one-line errors for bad combinations."""
    given = [f.replace("_", "-") for f in FLIGHT_ONLY if getattr(args, f, None) not in (None, False)]
    if not getattr(args, "flight", False):
        if given:
            raise OslensError(f"--{given[0]} is a flight-recorder option: add --flight", 2)
        return {}
    for flag, what in (("in_vivo", "--in-vivo"), ("on_full", "--on-full"), ("buffer_mb", "--buffer-mb"),
                       ("limit_events", "--limit-events"), ("limit_bytes", "--limit-bytes"), ("prepare_buffers", "--prepare-buffers")):
        if getattr(args, flag, None):
            raise OslensError(f"{what} cannot be combined with --flight (its ring sets the buffers: use --ring-mb)", 2)
    ring_mb = args.ring_mb or DEFAULT_RING_MB
    if ring_mb < MIN_RING_MB:
        raise OslensError(f"--ring-mb must be at least {MIN_RING_MB} (four chunks of 1 MiB), not {ring_mb}", 2)
    triggers = args.trigger or []
    if triggers:
        _check_triggers(triggers)
    chunk_mb = ring_mb // 4
    return {
        "on_full": "rotate",
        "buffer_mb": chunk_mb,
        "kernel_chunk_records": (chunk_mb << 20) // 32,
        "flight": {"ring_mb": chunk_mb * 4, "window_ns": int(args.window * 1e9) if args.window else None, "triggers": triggers,
                   "after_s": args.after or 0.0, "max_snapshots": args.max_snapshots, "min_gap_s": args.min_gap or 0.0,
                   "overlap": bool(args.overlap)},
    }


def _check_triggers(specs: list[str]) -> None:
    from oslens.capture import triggers

    for spec in specs:
        try:
            triggers.parse(spec)
        except ValueError as err:
            raise OslensError(f"--trigger {spec!r}: {err}", 2) from None


def summarise(trace, flight: dict) -> None:
    snaps = flight.get("snapshots") or []
    over = flight.get("overwritten") or []
    line = (f"oslens: flight recorder: {len(snaps)} snapshot{'s' if len(snaps) != 1 else ''}"
            + (f" ({', '.join(s['dir'] for s in snaps)})" if snaps else "")
            + f"; {sum(o['records'] for o in over)} older records overwritten in {sum(o['chunks'] for o in over)} chunks;"
            + f" {trace} holds the last window")
    if flight.get("ignored_triggers"):
        line += f"; {len(flight['ignored_triggers'])} triggers ignored ({flight['ignored_triggers'][0]['why']})"
    print(line, file=sys.stderr)
