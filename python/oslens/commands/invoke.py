"""Running one command: its user-facing errors become one line on stderr and an exit code
(`invoke`, for the `oslens` CLI and for `standalone`); `standalone` runs one command module on
its own (`python -m oslens.commands.tune ...`), for interpreters that lack the dependencies of
the other commands (e.g. a system python3 used by an unprivileged user who cannot reach the
virtual environment)."""

from __future__ import annotations

import argparse
import sys

from oslens.errors import OslensError


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
    except Exception as err:
        if not type(err).__module__.startswith(("duckdb", "_duckdb")):
            raise
        # a table the manifest's sizes did not show as damaged (changed bytes) fails in DuckDB
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        trace = getattr(args, "trace", None) or "TRACE"
        print(f"oslens: error: reading the trace's tables failed ({first}); if a table is damaged, "
              f"'oslens import {trace}' checks them and imports the trace again", file=sys.stderr)
        return 1


def standalone(module, argv=None) -> int:
    parser = argparse.ArgumentParser(prog=f"oslens {module.NAME}", description=module.HELP)
    module.add_arguments(parser)
    return invoke(module.run, parser.parse_args(argv))
