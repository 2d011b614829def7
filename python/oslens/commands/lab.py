"""`oslens lab list | show N | run N | check N`: gray-box labs on this machine's kernel, with a
preflight, constraints applied and restored through the control layer, and a self-check.
See docs/labs.md (teachers) and docs/labs/ (the sheets)."""

from __future__ import annotations

import sys
from pathlib import Path

from oslens.errors import OslensError

NAME = "lab"
HELP = "gray-box OS labs: list, show a sheet, run a lab on this kernel, check your answers"


def add_arguments(parser):
    sub = parser.add_subparsers(dest="lab_command", metavar="list|show|run|check|preflight")
    p = sub.add_parser("list", help="the labs, and whether this machine can run each")
    p.add_argument("-o", "--output", help="where runs keep their data (default ./traces)")
    p = sub.add_parser("show", help="a lab's sheet: goal, prediction, procedure, questions")
    p.add_argument("number")
    p.add_argument("--answers-template", action="store_true", help="print an answers.toml to fill in instead")
    p.add_argument("--variant", help="the answers template of a variant the sheet names")
    p = sub.add_parser("preflight", help="what this machine offers the lab, and what it lacks")
    p.add_argument("number")
    p.add_argument("--variant", help="a variant the sheet names")
    p.add_argument("-o", "--output", help="where runs keep their data (default ./traces)")
    p = sub.add_parser("run", help="run a lab's programs under its constraint, recorded, with observations")
    p.add_argument("number")
    p.add_argument("--variant", help="a variant the sheet names")
    p.add_argument("--quick", action="store_true", help="the scaled-down sizes (well under a minute)")
    p.add_argument("--no-record", action="store_true", help="rusage only, no oslens trace")
    p.add_argument("-o", "--output", help="where runs keep their data (default ./traces)")
    p = sub.add_parser("check", help="mark answers.toml against the model and this machine's run")
    p.add_argument("number")
    p.add_argument("--answers", required=True, help="your answers (TOML; 'oslens lab show N --answers-template')")
    p.add_argument("-o", "--output", help="where the run kept its results (default ./traces)")


def _base(args) -> Path:
    return Path(args.output) if getattr(args, "output", None) else Path("traces")


def run(args):
    from oslens import labs
    from oslens.labs import runner

    cmd = args.lab_command
    if cmd is None:
        raise OslensError("say what to do: oslens lab list | show N | preflight N | run N | check N --answers FILE", 2)
    runner.recover_stale()
    if cmd == "list":
        return _list(labs.all_labs(), _base(args))
    lab = labs.get(args.number)
    if cmd == "show":
        from oslens.labs import sheet
        variant = _variant(lab, args.variant)
        sys.stdout.write(sheet.answers_template(lab, variant) if args.answers_template else sheet.text(lab))
        return 0
    if cmd == "preflight":
        return _preflight(lab, _base(args), _variant(lab, args.variant))
    if cmd == "run":
        return _run(lab, args)
    return _check(lab, args)


def _variant(lab, variant: str | None) -> str:
    variant = variant or lab.default_variant
    if variant not in lab.variants:
        raise OslensError(f"lab {lab.number} has no variant '{variant}'; its variants are "
                          f"{', '.join(lab.variants)}", 2)
    return variant


def _data_dir(base: Path) -> Path:
    """The directory a run's data goes to, or the nearest existing parent (for preflight)."""
    p = base.resolve()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _list(all_labs, base: Path) -> int:
    from oslens.labs import preflight

    data = _data_dir(base)
    print(f"{'lab':>3}  {'title':<58} {'topic':<28} {'min':>4}  runs here")
    for lab in all_labs:
        missing = preflight.blockers(preflight.preflight(lab, data, optional=False))
        can = "yes" if not missing else "no: " + "; ".join(c.name for c in missing)
        print(f"{lab.number:>3}  {lab.title:<58} {lab.topic:<28} {lab.minutes:>4}  {can}")
    print("\n'oslens lab show N' prints a sheet; 'oslens lab preflight N' says what a lab needs.")
    return 0


def _print_checks(checks) -> None:
    for c in checks:
        mark = "ok  " if c.ok else ("MISSING" if c.blocking else "note")
        print(f"  {mark:<8}{c.name:<17}{c.detail}")


def _preflight(lab, base: Path, variant: str) -> int:
    from oslens.labs import preflight

    data = _data_dir(base)
    print(f"lab {lab.number}: {lab.title}{'' if variant == lab.default_variant else ' — variant ' + variant}")
    print(f"  machine: {preflight.stamp(preflight.facts(data))}")
    checks = preflight.preflight(lab, data, variant=variant)
    _print_checks(checks)
    missing = preflight.blockers(checks)
    if missing:
        print(f"lab {lab.number}{'' if variant == lab.default_variant else ' --variant ' + variant} cannot run here: "
              + "; ".join(c.detail for c in missing), file=sys.stderr)
        return 1
    return 0


def _run(lab, args) -> int:
    from oslens.labs import preflight, runner

    variant = _variant(lab, args.variant)
    directory = runner.lab_dir(lab, variant, args.quick, _base(args))
    data = _data_dir(directory)
    checks = preflight.preflight(lab, data, variant=variant)
    missing = preflight.blockers(checks)
    if missing:
        for c in missing:
            print(f"oslens: lab {lab.number} needs {c.name}: {c.detail}", file=sys.stderr)
        raise OslensError(f"lab {lab.number}{'' if variant == lab.default_variant else ' --variant ' + variant} cannot run on this machine (see above; nothing was changed)", 1)
    facts = preflight.facts(data)
    print(f"lab {lab.number}: {lab.title} — variant {variant}{', quick' if args.quick else ''}")
    print(f"machine: {preflight.stamp(facts)}")
    for c in checks:
        if not c.ok:
            print(f"note: {c.detail}")
    params = lab.params(args.quick, variant)
    runner.build_programs()
    record = not args.no_record and all(c.ok for c in checks if c.name == "collector")
    with runner.LabRun(lab, variant, args.quick, directory, record=record) as ctx:
        results = lab.variant(variant).run(ctx, params)
        saved = ctx.save(params, results, facts)
    print(f"\nresults: {saved}")
    print(f"check your answers: oslens lab check {lab.number} --answers answers.toml"
          f"{'' if args.output is None else ' -o ' + args.output}")
    return 0


def _check(lab, args) -> int:
    from oslens.labs import check, runner

    doc = check.load_answers(Path(args.answers), lab)
    quick = bool(doc.get("quick", False))
    variant = doc.get("variant") or lab.default_variant
    results = runner.load_results(runner.lab_dir(lab, variant, quick, _base(args)))
    if results is None:
        print(f"note: no run of lab {lab.number} here yet (oslens lab run {lab.number}"
              f"{' --quick' if quick else ''}); bands come from the model alone", file=sys.stderr)
    verdicts = check.check(lab, doc, results)
    width = max(len(v.key) for v in verdicts)
    for v in verdicts:
        mark = "right" if v.ok else "WRONG"
        print(f"{mark}  {v.section:<10} {v.key:<{width}} = {check.fmt(v.given)}: {v.reason}")
    wrong = sum(not v.ok for v in verdicts)
    print(f"{len(verdicts) - wrong} of {len(verdicts)} right")
    return 0 if wrong == 0 else 1
