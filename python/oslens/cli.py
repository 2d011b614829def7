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


def _matplotlib_config_dir() -> None:
    """A user whose home cannot be written (no home, a service account) would get matplotlib's
    warning about its config directory on every report; oslens keeps no matplotlib settings, so
    a private directory under the temporary folder does (kept between runs for matplotlib's font
    cache, used only when this user owns it and no one else may write it)."""
    if "MPLCONFIGDIR" in os.environ:
        return
    home = os.path.expanduser("~")
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    target = os.path.join(config, "matplotlib")
    probe = target if os.path.isdir(target) else (config if os.path.isdir(config) else home)
    if os.path.isdir(probe) and os.access(probe, os.W_OK | os.X_OK):
        return
    import stat
    import tempfile

    path = os.path.join(tempfile.gettempdir(), f"oslens-matplotlib-{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022:
        os.environ["MPLCONFIGDIR"] = path


_matplotlib_config_dir()

from oslens import commands
from oslens.commands.invoke import invoke


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
