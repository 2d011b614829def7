"""`oslens import TRACE`: convert a trace's raw chunks into Parquet tables (TRACE/tables/), once.
`oslens record` runs it automatically (unless --no-import), and every command that reads tables
runs it on first use."""

from oslens.commands import _calibration
from oslens.errors import OslensError

NAME = "import"
HELP = "import a trace's raw chunks into Parquet tables (done automatically after recording)"


def add_arguments(parser):
    _calibration.add_option(parser)
    parser.add_argument("trace", help="trace directory")
    parser.add_argument("--force", action="store_true", help="import again even when the tables are current")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar or summary line")


def run(args):
    from oslens import store
    from oslens.capture import raw
    from oslens.store import importer

    trace = raw.require_trace_dir(args.trace)
    force, damaged = args.force, None
    if not force and importer.is_current(trace):
        # current by the manifest's sizes; here every table's CRC-32 is checked too
        damaged = importer.verify_tables(trace)
        force = bool(damaged)
    try:
        store.import_trace(trace, force=force, quiet=args.quiet, damaged=damaged)
    except MemoryError:
        raise OslensError(f"{args.trace}: not enough memory to import this trace in one go", 1)
    return 0
