"""Run one command module on its own (`python -m oslens.commands.tune ...`), for interpreters
that lack the dependencies of the other commands (e.g. a system python3 used by an
unprivileged user who cannot reach the virtual environment)."""

from __future__ import annotations

import argparse
import sys

from oslens.errors import OslensError


def main(module, argv=None) -> int:
    parser = argparse.ArgumentParser(prog=f"oslens {module.NAME}", description=module.HELP)
    module.add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return int(module.run(args) or 0)
    except OslensError as err:
        print(f"oslens: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("oslens: interrupted", file=sys.stderr)
        return 130
