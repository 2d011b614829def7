"""Run one command module on its own (`python -m oslens.commands.tune ...`), for interpreters
that lack the dependencies of the other commands (e.g. a system python3 used by an
unprivileged user who cannot reach the virtual environment)."""

from __future__ import annotations

import argparse

from oslens.cli import invoke


def main(module, argv=None) -> int:
    parser = argparse.ArgumentParser(prog=f"oslens {module.NAME}", description=module.HELP)
    module.add_arguments(parser)
    return invoke(module.run, parser.parse_args(argv))
