"""`oslens phases [TRACE]`: the program's run cut into intervals, each described by what it ran
(IP samples), what the OS did (kernel events) and its regions; the similarity matrix of the
intervals (PNG and SVG) and the phases found in them. See docs/phases.md."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from oslens.commands import _calibration
from oslens.errors import OslensError
from oslens.progress import Progress

NAME = "phases"
HELP = "interval vectors, similarity matrix and recurring phases (compute, I/O, sync, ...) of a trace"


def add_arguments(parser):
    _calibration.add_option(parser)
    parser.add_argument("trace", nargs="?", help="trace directory (default: the newest under ./traces)")
    parser.add_argument("--interval", metavar="DURATION", help="interval length, e.g. 10ms (default: automatic, >= 50 intervals)")
    parser.add_argument("--weights", metavar="W", help="vector weights, e.g. code=1,resource=1,region=0 (default: 1 each)")
    parser.add_argument("--compare", metavar="OTHER", help="another trace (e.g. another input): matrices side by side")
    parser.add_argument("--json", action="store_true", help="print the phases as JSON")
    parser.add_argument("--png", metavar="FILE", help="similarity matrix as PNG (default: TRACE/phases.png)")
    parser.add_argument("--svg", metavar="FILE", help="similarity matrix as SVG (default: TRACE/phases.svg)")
    parser.add_argument("--no-store", action="store_true", help="do not write the intervals/phases tables into TRACE/tables")
    parser.add_argument("--plan-out", metavar="PLAN", help="write a starting plan (one [phase.KIND] per kind found) for oslens tune, "
                        "and the phase model beside it (PLAN with .phases.json)")


def _open(path: str | None):
    from oslens.report import model
    from oslens.store import open_trace

    trace = model.find_trace(path)
    con = open_trace(trace)
    return trace, con, _program_name(con)


def _analyse(trace, con, args):
    from oslens.phases import analyse, grid, vectors

    interval = grid.parse_interval(args.interval) if args.interval else None
    return analyse.analyse(con, trace, interval, vectors.parse_weights(args.weights))


def _program_name(con) -> str | None:
    """The program's main thread's name (after its exec), to tell whether two traces ran one program."""
    from oslens.analysis import program

    prog = program.program(con)
    return prog.names.get(prog.main_tid) if prog.main_tid is not None else None


def run(args) -> int:
    with Progress("phases", total=5 + 2 * bool(args.compare)) as bar:
        a, other, images = _compute(args, bar)
    if args.json:
        out = _as_json(a)
        if other is not None:
            out["compare"] = _as_json(other)
        out["images"] = [str(p) for p in images]
        sys.stdout.write(json.dumps(out, indent=1) + "\n")
    else:
        _print(a)
        if other is not None:
            _print(other)
        for p in images:
            print(f"similarity matrix: {p}")
    return 0


def _compute(args, bar):
    """The analysis (and the other trace's), the tables stored, the images and plan written."""
    from oslens.phases import render, tables

    bar.step("opening the trace")
    trace, con, name = _open(args.trace)
    other = None
    if args.compare:  # two programs are refused before either is analysed
        bar.step("opening the other trace")
        other_trace, other_con, other_name = _open(args.compare)
        if name != other_name:
            raise OslensError(f"--compare: {trace} ran {name or 'an unknown program'} and {other_trace} ran "
                              f"{other_name or 'an unknown program'}; compare two runs of one program", 2)
    bar.step("interval vectors and phases")
    a = _analyse(trace, con, args)
    panels = [render.panel(a)]
    if args.compare:
        bar.step("the other trace's vectors and phases")
        other = _analyse(other_trace, other_con, args)
        panels.append(render.panel(other))
    for note in a.vectors.notes:
        print(f"oslens: {note}", file=sys.stderr)
    bar.step("storing the tables")
    if not args.no_store:
        try:
            tables.write(a, trace)
        except OSError as err:
            print(f"oslens: cannot store the phase tables in {trace}/tables: {err.strerror}", file=sys.stderr)
    bar.step("drawing the similarity matrix")
    images = _write_images(panels, trace, args)
    bar.step("writing the plan")
    if args.plan_out:
        from oslens.phases import plan_out

        try:
            plan, model = plan_out.write(a, Path(args.plan_out))
        except OSError as err:
            raise OslensError(f"cannot write {args.plan_out}: {err.strerror}", 1) from None
        print(f"oslens: plan {plan} (check: oslens config check {plan}); phase model {model}", file=sys.stderr)
    return a, other, images


def _write_images(panels, trace: Path, args) -> list[Path]:
    from oslens.phases import render

    out = []
    for fmt, given in (("png", args.png), ("svg", args.svg)):
        path = Path(given) if given else Path(trace) / f"phases.{fmt}"
        try:
            out.append(render.write(panels, path.with_suffix(f".{fmt}") if not given else path))
        except ValueError:
            raise OslensError(f"--{fmt} {given}: the file name must end in .{fmt}", 2) from None
        except OSError as err:
            raise OslensError(f"cannot write {path}: {err.strerror}", 1) from None
    return out


def _as_json(a) -> dict:
    from oslens.phases import tables

    vec = a.vectors
    return {
        "trace": a.trace,
        "origin_ns": vec.origin_ns,
        "interval_ns": vec.interval_ns,
        "intervals": vec.n,
        "vectors": vec.used(),
        "weights": {k: vec.weights[k] for k in vec.used()},
        "notes": vec.notes,
        "k": a.segmentation.k,
        "homogeneity": a.homogeneity(),
        "penalty": a.segmentation.penalty,
        "phases": tables.phases_table(a).to_pylist(),
        "segments": tables.segments_table(a).to_pylist(),
    }


def _print(a) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from oslens.analysis.units import fmt_ns
    from oslens.phases import tables

    vec = a.vectors
    console = Console()
    console.print(f"[bold]{a.trace}[/bold]: {vec.n} intervals of {fmt_ns(vec.interval_ns)} "
                  f"({', '.join(vec.used())} vectors); {a.segmentation.k} phase{'s' if a.segmentation.k != 1 else ''}")
    h = a.homogeneity()
    if h:
        console.print(f"CPU utilisation within phases: coefficient of variation {h['within_cv']:.3g} "
                      f"against {h['run_cv']:.3g} over the whole run (ratio {h['ratio']:.2f})")
    t = Table(title="Phases over time", title_justify="left", show_edge=False, header_style="bold", pad_edge=False)
    for c in ("start", "end", "phase", "kind", "share", "dominant functions"):
        t.add_column(c, justify="right" if c in ("start", "end", "share", "phase") else "left")
    for r in tables.segments_table(a).to_pylist():
        t.add_row(fmt_ns(r["start_ns"]), fmt_ns(r["end_ns"]), str(r["phase"]), r["kind"], f"{100 * r['share']:.1f}%",
                  escape(r["functions"] or "-"))
    console.print(t)
    p = Table(title="Phases", title_justify="left", show_edge=False, header_style="bold", pad_edge=False)
    for c in ("phase", "kind", "share", "times", "typical at", "user", "sys", "runnable", "io", "sleep", "sync"):
        p.add_column(c, justify="left" if c == "kind" else "right")
    for r in tables.phases_table(a).to_pylist():
        fr = [f"{100 * r[n]:.0f}%" if r[n] is not None else "-" for n in
              ("user", "system", "runnable", "io_wait", "sleeping", "sync_wait")]
        p.add_row(str(r["phase"]), r["kind"], f"{100 * r['share']:.1f}%", str(r["recurrences"]),
                  fmt_ns(r["representative_start_ns"]), *fr)
    console.print(p)
