"""`oslens export TRACE --perfetto FILE | --chrome FILE`: the trace's timeline for existing viewers
(ui.perfetto.dev opens both): regions per thread, who ran on each CPU, counters, syscalls, I/O."""

from pathlib import Path

from oslens.commands import _calibration
from oslens.errors import OslensError

NAME = "export"
HELP = "export the timeline as a Perfetto trace (--perfetto FILE) or Chrome JSON (--chrome FILE)"


def add_arguments(parser):
    _calibration.add_option(parser)
    parser.add_argument("trace", nargs="?", help="trace directory (default: the newest under ./traces)")
    parser.add_argument("--perfetto", metavar="FILE", help="write Perfetto's protobuf trace format")
    parser.add_argument("--chrome", metavar="FILE", help="write Chrome's JSON trace event format")


def run(args):
    from oslens import store
    from oslens.report.model import find_trace
    from oslens.store import export

    if not args.perfetto and not args.chrome:
        raise OslensError("say what to write: --perfetto FILE (for ui.perfetto.dev) or --chrome FILE (JSON)", 2)
    trace = find_trace(args.trace)
    con = store.open_trace(trace)
    for fmt, target, writer in (("Perfetto", args.perfetto, export.write_perfetto),
                                ("Chrome JSON", args.chrome, export.write_chrome)):
        if not target:
            continue
        path = Path(target)
        try:
            counts = writer(con, path)
        except OSError as err:
            raise OslensError(f"cannot write {path}: {err.strerror or err}", 1) from err
        print(f"oslens: {fmt}: {counts['tracks']} tracks, {counts['slices']:,} slices, "
              f"{counts['counter_values']:,} counter values -> {path} (open it in https://ui.perfetto.dev)")
    return 0
