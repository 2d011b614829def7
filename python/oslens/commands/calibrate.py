"""`oslens calibrate`: what one instrumentation event costs on this machine (in vitro)."""

import json
import sys

from oslens.errors import OslensError
from oslens.progress import Progress

NAME = "calibrate"
HELP = "measure what each instrumentation kind and the clock read cost on this machine, with 95% CIs, and store it"


def add_arguments(parser):
    parser.add_argument("--json", action="store_true", help="print the calibration as JSON")
    parser.add_argument("--quick", action="store_true",
                        help="the quick calibration an import measures when there is none: a few seconds, wider "
                             "intervals, stored apart from the full one (which imports prefer)")
    parser.add_argument("--show", action="store_true", help="print the stored calibration (the quick one with --quick) instead of measuring")
    parser.add_argument("-o", "--output", help="store it here (default: $OSLENS_CALIBRATION, else ~/.cache/oslens/calibration-HOST.json, "
                                               "calibration-HOST-quick.json with --quick)")
    parser.add_argument("--no-save", action="store_true", help="measure and print, but do not store")
    parser.add_argument("--iterations", type=int, help="loop iterations per measurement")
    parser.add_argument("--repetitions", type=int, help="repetitions (at least 6 for a 95%% interval)")


def run(args):
    from oslens import calibrate
    from oslens.calibrate import invitro
    from oslens.store import calibration

    if args.show:
        cal = calibration.load(path=args.output, quick=args.quick)
        if cal is None:
            where = args.output or calibration.calibration_path(quick=args.quick)
            raise OslensError(f"no calibration stored at {where}; run 'oslens calibrate{' --quick' if args.quick else ''}'", 1)
        path = cal.get("path")
    else:
        for name in ("iterations", "repetitions"):
            v = getattr(args, name)
            if v is not None and v < 1:
                raise OslensError(f"--{name} must be at least 1", 2)
        with Progress("calibrate", total=invitro.STAGES) as bar:
            cal = calibrate.measure(quick=args.quick, iterations=args.iterations, repetitions=args.repetitions,
                                    progress=bar.step)
        path = None if args.no_save else str(calibration.save(cal, args.output))
        cal["path"] = path
    if args.json:
        json.dump(cal, sys.stdout, indent=2, sort_keys=True)
        print()
        return 0
    _print(cal, path)
    return 0


def _print(cal, path):
    from rich.console import Console
    from rich.table import Table

    m = cal.get("machine", {})
    table = Table(title=f"instrumentation cost on {m.get('hostname', '?')} ({m.get('cpu_model', '')})",
                  caption=f"in vitro, {cal['repetitions']} repetitions x {cal['iterations']} iterations, "
                          f"thread CPU time; lower quartile and its 95% CI")
    table.add_column("kind")
    table.add_column("ns per call", justify="right")
    table.add_column("95% CI", justify="right")
    table.add_column("records", justify="right")
    for kind, c in cal["costs"].items():
        table.add_row(kind, f"{c['ns']:.1f}", f"{c['ci_low']:.1f} - {c['ci_high']:.1f}",
                      str(c.get("records_per_call", "")))
    e = cal["empty_loop_ns"]
    table.add_row("(empty loop)", f"{e['ns']:.2f}", f"{e['ci_low']:.2f} - {e['ci_high']:.2f}", "0")
    console = Console()
    console.print(table)
    if path:
        also = " unless a full one is stored" if cal.get("quick") else ""
        console.print(f"stored in {path}; imports on this machine compensate with it{also}")
