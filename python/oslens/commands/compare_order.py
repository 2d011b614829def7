"""`oslens compare-order TRACE_A TRACE_B`: did two traces of one program see the same partial
order of synchronisation events per thread? Prints "same", or the first divergence per thread
(exit 1)."""

import json
import sys
from oslens.commands import _calibration

NAME = "compare-order"
HELP = "check that two traces of the same program saw the same order of synchronisation events per thread"


def add_arguments(parser):
    _calibration.add_option(parser)
    parser.add_argument("trace_a", metavar="TRACE_A")
    parser.add_argument("trace_b", metavar="TRACE_B")
    parser.add_argument("--include", default="sync",
                        help="what to compare, comma separated: sync (default), regions, events, timers")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _require_every_acquisition(con, trace) -> None:
    """The sync order needs every lock acquisition: a trace recorded with `--sync contended`
    (the default) holds only the contended ones, so its order would differ by chance."""
    from oslens.errors import OslensError

    row = con.execute("SELECT value FROM meta WHERE key = 'settings.sync'").fetchone()
    if row and row[0] != "all":
        raise OslensError(f"{trace} was recorded with --sync {row[0]}: it holds only contended lock acquisitions, "
                          f"and compare-order needs every one; record both traces with 'oslens record --sync all' "
                          f"(or compare --include regions,events,timers)", 2)


def run(args):
    from oslens.calibrate import order
    from oslens.capture import raw
    from oslens.errors import OslensError
    from oslens.store import open_trace

    groups = [g.strip() for g in args.include.split(",") if g.strip()]
    bad = [g for g in groups if g not in order.GROUPS]
    if bad or not groups:
        raise OslensError(f"unknown --include '{','.join(bad) or args.include}': choose from {', '.join(order.GROUPS)}", 2)
    seqs = []
    for t in (args.trace_a, args.trace_b):
        trace = raw.require_trace_dir(t)
        con = open_trace(trace, quiet=True)
        try:
            if "sync" in groups:
                _require_every_acquisition(con, t)
            seqs.append(order.sequences(con, groups))
        finally:
            con.close()
    a, b = seqs
    divergences = order.compare(a, b)
    steps = sum(len(v) for v in a.values())
    if args.json:
        json.dump({"same": not divergences, "threads": len(set(a) | set(b)), "events_a": steps,
                   "events_b": sum(len(v) for v in b.values()), "compared": groups,
                   "divergences": [{"thread": d.thread, "index": d.index,
                                    "a": d.a.label() if d.a and d.index >= 0 else None,
                                    "b": d.b.label() if d.b and d.index >= 0 else None,
                                    "a_ts": d.a.ts if d.a and d.index >= 0 else None,
                                    "b_ts": d.b.ts if d.b and d.index >= 0 else None,
                                    "description": d.describe()} for d in divergences]},
                  sys.stdout, indent=2)
        print()
    elif not divergences:
        print("same")
        print(f"oslens: {len(a)} threads, {steps} {'/'.join(groups)} events each, in the same order per thread",
              file=sys.stderr)
    else:
        print(f"different: {len(divergences)} of {len(set(a) | set(b))} threads diverge")
        for d in divergences:
            print(d.describe())
    return 0 if not divergences else 1
