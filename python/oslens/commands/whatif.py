"""`oslens whatif [TRACE] --policy SPEC ...`: predict the recorded program under other scheduling
policies (docs/whatif.md). `oslens whatif --validate [--quick] -- CMD` runs CMD under the Linux
policies of this machine and reports how far the predictions from its default run were."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from oslens.commands import _calibration
from oslens.errors import OslensError

NAME = "whatif"
HELP = ("predict the recorded program under other scheduling policies (fifo, lifo, rr:q=10ms, mlfq, unix, hrrn, "
        "srt, eevdf, sched_rr, sched_fifo...); --validate -- CMD checks the predictions against real runs")

DEFAULT_POLICIES = ["default", "fifo", "rr:q=10ms", "mlfq", "srt", "sched_fifo"]


def add_arguments(parser):
    _calibration.add_option(parser)
    parser.add_argument("args", nargs="*", metavar="TRACE | -- CMD",
                        help="trace directory (default: the newest under ./traces); with --validate, the program")
    parser.add_argument("--policy", "-p", action="append", metavar="SPEC",
                        help="a policy, e.g. rr:q=10ms, mlfq:levels=3,q=10ms,boost=1s, srt:est=ewma, eevdf:slice=3ms, "
                             "sched_rr:q=100ms, sched_fifo; each also takes nice=, cpus=, ncpus= (repeatable; "
                             f"default: {' '.join(DEFAULT_POLICIES)})")
    parser.add_argument("--json", nargs="?", const="-", metavar="FILE", help="write the predictions as JSON (- or no FILE: stdout)")
    parser.add_argument("--html", metavar="FILE", help="write a page with a Gantt chart per policy")
    parser.add_argument("--bench", metavar="FILE", help="'oslens bench --json' results giving this machine's "
                                                       "context-switch and migration costs")
    parser.add_argument("--replicates", type=int, default=8, metavar="N",
                        help="perturbed replays for the bounds (default 8; 0: no bounds)")
    parser.add_argument("--no-background", action="store_true", help="leave other tasks' load out of the model")
    parser.add_argument("--validate", action="store_true",
                        help="run -- CMD under this machine's Linux policies and report the prediction error")
    parser.add_argument("--quick", action="store_true", help="with --validate: two policies, one run each")
    parser.add_argument("-o", "--output", metavar="DIR", help="with --validate: where the traces go")


def _specs(texts):
    from oslens.whatif import spec

    out = []
    for text in texts:
        try:
            out.append(spec.parse(text))
        except ValueError as err:
            raise OslensError(f"--policy {text}: {err}", 2) from None
    return out


def run(args) -> int:
    if args.replicates < 0 or args.replicates > 1000:
        raise OslensError("--replicates must be between 0 and 1000", 2)
    specs = _specs(args.policy or DEFAULT_POLICIES)
    if args.validate:
        from oslens.whatif import validate

        return validate.run(args.args, quick=args.quick, out_dir=args.output, bench=args.bench,
                            json_out=args.json, replicates=min(args.replicates, 4))
    if len(args.args) > 1:
        raise OslensError("give one trace directory (or --validate -- CMD to run a program)", 2)
    from oslens import store
    from oslens.report.model import find_trace
    from oslens.whatif import background, extract, machine, predict, report

    trace = find_trace(args.args[0] if args.args else None)
    con = store.open_trace(trace)
    wl = extract.workload(con, include_background=not args.no_background)
    mach = machine.observed_tick(machine.defaults(wl.ncpus, args.bench), wl.preempted_ends)
    k, fit = background.fit(wl, mach)
    wl = background.competitors(wl, k)
    preds = [predict.run_policy(wl, s, mach, args.replicates, keep_segments=bool(args.html)) for s in specs]
    doc = report.document(wl, mach, predict.recorded(wl), preds, str(trace))
    doc["workload"]["background_fit"] = fit
    if args.html:
        _write_html(args.html, doc, preds, wl)
    if args.json:
        text = json.dumps(doc, indent=1)
        if args.json == "-":
            print(text)
        else:
            _write(args.json, text + "\n")
    if args.json != "-":
        print(report.text(doc))
    return 0


def _write(path: str, text: str) -> None:
    try:
        Path(path).write_text(text)
    except OSError as err:
        raise OslensError(f"cannot write {path}: {err.strerror}; choose a writable path", 1) from None


def _write_html(path: str, doc: dict, preds: list[dict], wl) -> None:
    from oslens.whatif import gantt

    charts = [(p["policy"], gantt.svg(p["segments"], wl.tasks, wl.ncpus)) for p in preds]
    _write(path, gantt.page(doc, charts, wl.tasks))
    print(f"oslens: whatif: wrote {path}", file=sys.stderr)
