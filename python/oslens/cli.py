"""The `oslens` command. Each subcommand is one module in oslens.commands exposing
NAME, HELP, add_arguments(parser) and run(args) -> exit code."""

import argparse
import importlib
import os
import pkgutil
import sys
import warnings

# Before numpy loads: the CLI does no sizeable linear algebra, and OpenBLAS's worker threads
# spin for ~0.1 CPU-s after numpy starts them, on the CPUs a recording or an import needs.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from oslens import commands
from oslens.errors import OslensError


def _command_modules():
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda i: i.name):
        if info.name.startswith("_") or info.name.startswith("test_"):
            continue
        module = importlib.import_module(f"oslens.commands.{info.name}")
        if hasattr(module, "NAME") and hasattr(module, "run"):
            yield module


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="oslens", description="How Linux serves your program, and what to change.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _command_modules():
        text = module.HELP.replace("%", "%%")  # argparse formats help strings with %
        p = sub.add_parser(module.NAME, help=text, description=module.HELP)  # a description is not %-formatted
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def invoke(run, args) -> int:
    """Runs a command, turning user-facing errors into one line on stderr and an exit code."""
    try:
        return int(run(args) or 0)
    except OslensError as err:
        print(f"oslens: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("oslens: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


def quiet_warnings() -> None:
    """Library warnings (numpy on an empty slice, matplotlib's cache) are not a user's business:
    oslens says what matters in its own words. OSLENS_DEBUG=1 shows them."""
    if not os.environ.get("OSLENS_DEBUG"):
        warnings.simplefilter("ignore")


def main(argv=None) -> int:
    quiet_warnings()
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    return invoke(args._run, args)


if __name__ == "__main__":
    sys.exit(main())
