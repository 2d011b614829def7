"""The `oslens` command. Each subcommand is one module in oslens.commands exposing
NAME, HELP, add_arguments(parser) and run(args) -> exit code."""

import os
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

from oslens.commands import _calibration
from oslens.commands.invoke import invoke
from oslens.commands.parser import build_parser


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
    _calibration.register(args)
    return invoke(args._run, args)


if __name__ == "__main__":
    sys.exit(main())
