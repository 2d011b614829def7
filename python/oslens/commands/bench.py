"""`oslens bench`: the OS micro-benchmark suite (Russo, Madany, Campbell 1990) with confidence
intervals, noise detection and comparisons. Method of every benchmark: docs/bench.md."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from oslens.errors import OslensError
from oslens.progress import Progress

NAME = "bench"
HELP = "run the OS micro-benchmark suite (calls, time slices, switches, faults, malloc, files, copies) with 95% CIs"


def add_arguments(parser):
    parser.add_argument("words", nargs="*", metavar="compare A.json B.json | list",
                        help="'compare A.json B.json' is the same as --compare A.json B.json; 'list' as --list")
    parser.add_argument("--only", action="append", metavar="NAMES",
                        help="comma-separated benchmark names, groups (calls, timeslice, ctx, fault, malloc, "
                             "file, copy, proc) or globs such as '*.cached'")
    parser.add_argument("--quick", action="store_true", help="few repetitions, short runs: a first look in seconds")
    parser.add_argument("--json", metavar="FILE", help="write the results (or the comparison) as JSON")
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two --json results side by side")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument("--dir", metavar="DIR", help="where the file benchmarks make their scratch directories "
                        "(default /var/tmp; the file system under test)")
    parser.add_argument("--under", metavar="PLAN", help="run the suite under an OS policy plan (via 'oslens tune')")


def _say(text: str) -> None:
    print(f"oslens: bench: {text}", file=sys.stderr)


def _names(only) -> list[str] | None:
    if not only:
        return None
    return [n.strip() for item in only for n in item.split(",") if n.strip()]


def _do_list() -> int:
    from oslens.osbench.registry import BENCHMARKS
    for b in BENCHMARKS:
        extra = f"  [{b.root_only}]" if b.root_only else ""
        print(f"{b.name:32s} {b.table:9s} {b.label}{extra}")
    return 0


def _do_compare(a_path: str, b_path: str, json_out: str | None) -> int:
    from oslens.osbench import display, results
    a, b = results.load(a_path), results.load(b_path)
    cmp = results.compare(a, b)
    if not cmp["rows"]:
        raise OslensError(f"{a_path} and {b_path} have no benchmark in common; run the same benchmarks on both", 2)
    display.console().print(display.compare_table(cmp, Path(a_path).name, Path(b_path).name))
    if cmp["only_a"] or cmp["only_b"]:
        _say(f"only in A: {', '.join(cmp['only_a']) or '-'}; only in B: {', '.join(cmp['only_b']) or '-'}")
    if json_out:
        results.save(cmp, json_out)
    return 0


def _reexec_under(args) -> int:
    plan = Path(args.under)
    if not plan.is_file():
        raise OslensError(f"the plan {args.under} does not exist; write one (see 'oslens config') or fix the path", 2)
    if importlib.util.find_spec("oslens.commands.tune") is None:
        raise OslensError("--under needs 'oslens tune' (the control layer), which this build lacks; "
                          "run the suite without --under", 2)
    inner = [sys.executable, "-m", "oslens.cli", "bench"]
    for item in args.only or []:
        inner += ["--only", item]
    if args.quick:
        inner.append("--quick")
    if args.json:
        inner += ["--json", str(Path(args.json).resolve())]
    if args.dir:
        inner += ["--dir", str(Path(args.dir).resolve())]
    cmd = [sys.executable, "-m", "oslens.cli", "tune", "--plan", str(plan.resolve()), "--"] + inner
    env = dict(os.environ, OSLENS_BENCH_UNDER=str(plan.resolve()))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, cmd, env)
    return 1  # not reached


def run(args) -> int:
    from oslens.osbench import settings

    for line in settings.recover():
        _say(line)
    words = list(args.words or [])
    if words:
        if words[0] == "compare" and len(words) == 3 and not args.compare:
            args.compare = words[1:]
        elif words == ["list"]:
            args.list = True
        else:
            raise OslensError(f"unexpected arguments '{' '.join(words)}'; use 'oslens bench [--only NAMES] "
                              "[--quick] [--json FILE]' or 'oslens bench compare A.json B.json'", 2)
    if args.list:
        return _do_list()
    if args.compare:
        return _do_compare(args.compare[0], args.compare[1], args.json)
    if args.under and not os.environ.get("OSLENS_BENCH_UNDER"):
        return _reexec_under(args)
    return _do_run(args)


def _do_run(args) -> int:
    from oslens import signals
    from oslens.osbench import display, registry, results, runner

    chosen, unknown = registry.select(_names(args.only))
    if unknown:
        raise OslensError(f"unknown benchmark {', '.join(repr(u) for u in unknown)}; "
                          "'oslens bench --list' shows the names", 2)
    config = runner.QUICK if args.quick else runner.FULL
    out: list[dict] = []
    bench_runner = None
    try:
        with signals.signals_as_exceptions():
            bench_runner = runner.Runner(config, scratch_root=args.dir)
            scratch_fs = _filesystem(bench_runner.scratch)
            with Progress("bench", total=len(chosen)) as bar:
                for b in chosen:
                    bar.step(b.name)
                    out.append(bench_runner.run(b))
    except signals.Interrupted as sig:
        _say(f"interrupted by {sig}; every changed setting has been restored")
        return 128 + sig.signum
    finally:
        if bench_runner is not None:
            bench_runner.close()
    derived = runner.solved_timeslice(out)
    if derived:  # place them after the time-slice runs they come from
        last = max(i for i, r in enumerate(out) if r["group"] == "timeslice")
        out[last + 1:last + 1] = derived
    notes = []
    if os.environ.get("OSLENS_BENCH_UNDER"):
        notes.append(f"run under the plan {os.environ['OSLENS_BENCH_UNDER']}")
    doc = results.document(out, quick=args.quick, scratch_fs=scratch_fs, notes=notes)
    if os.environ.get("OSLENS_BENCH_UNDER"):
        doc["run"]["under"] = os.environ["OSLENS_BENCH_UNDER"]
    display.console().print(display.results_table(doc))
    for r in out:
        if r["status"] == "skipped":
            _say(f"skipped {r['name']}: {r['reason']}")
    failed = [r for r in out if r["status"] == "error"]
    for r in failed:
        _say(f"{r['name']} failed: {r['reason']}")
    noisy = [r["name"] for r in out if r.get("noisy")]
    if noisy:
        _say(f"{len(noisy)} figure(s) came from a noisy machine (see the notes); rerun when it is quiet "
             "and trust the minimums more than the medians")
    if args.json:
        results.save(doc, args.json)
    return 1 if failed else 0


def _filesystem(path: Path) -> str:
    best, fstype = "", "unknown"
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                mnt = parts[1]
                if str(path).startswith(mnt.rstrip("/") + "/") or str(path) == mnt:
                    if len(mnt) >= len(best):
                        best, fstype = mnt, parts[2]
    except OSError:
        pass
    return f"{fstype} at {best}" if best else fstype
