"""The `oslens` command line: one subcommand per module of oslens.commands that has NAME, HELP,
add_arguments(parser) and run(args). Here, below cli.py, so that a command that needs the whole
parser (`oslens completion`) does not import the CLI that runs it."""

from __future__ import annotations

import argparse
import importlib
import pkgutil

from oslens import commands


def _command_modules():
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda i: i.name):
        if info.name.startswith("_") or info.name.startswith("test_"):
            continue
        module = importlib.import_module(f"oslens.commands.{info.name}")
        if hasattr(module, "NAME") and hasattr(module, "run"):
            yield module


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad command line is one line on stderr (what is wrong, where to look) and
    exit status 2, not the usage text followed by the error (docs/errors.md)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="oslens", description="How Linux serves your program, and what to change.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _command_modules():
        text = module.HELP.replace("%", "%%")  # argparse formats help strings with %
        p = sub.add_parser(module.NAME, help=text, description=module.HELP)  # a description is not %-formatted
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser
