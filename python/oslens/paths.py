"""Where the built pieces live: inside the package when it was installed from the wheel
(`oslens/prefix`: bin, lib, include, libexec, share, as `make wheel` lays them out), else in the
virtual environment `make` fills (a clone's .venv); $OSLENS_PREFIX names another prefix."""

import os
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
BUNDLED = PACKAGE_DIR / "prefix"  # the wheel's own prefix tree (absent in a clone)
REPO_ROOT = PACKAGE_DIR.parent.parent  # a clone's top folder: workloads/, docs/, osbench/ (not in a wheel)


def installed() -> bool:
    """Whether this package came from the wheel (its libraries and tools inside it), not a clone."""
    return (BUNDLED / "lib").is_dir()


def prefix() -> Path:
    """The install prefix holding lib/liboslens.so, include/oslens.h and bin/oslens-collector."""
    env = os.environ.get("OSLENS_PREFIX")
    if env:
        return Path(env)
    return BUNDLED if installed() else Path(sys.prefix)


def library_dir() -> Path:
    return prefix() / "lib"


def include_dir() -> Path:
    return prefix() / "include"


def pkgconfig_dir() -> Path:
    """The folder of oslens.pc, for PKG_CONFIG_PATH."""
    return library_dir() / "pkgconfig"


def liboslens() -> Path:
    return library_dir() / "liboslens.so"


def tool(name: str) -> Path:
    """A helper executable installed beside the CLI (e.g. oslens-collector)."""
    return prefix() / "bin" / name


def lab_programs() -> Path:
    """The labs' C programs: built by `make` in a clone's workloads/labs, shipped built (with
    their sources) in the wheel's libexec/oslens/labs."""
    return BUNDLED / "libexec" / "oslens" / "labs" if installed() else REPO_ROOT / "workloads" / "labs"


def lab_sheets() -> Path:
    """The labs' sheets: a clone's docs/labs, the wheel's share/oslens/labs."""
    return BUNDLED / "share" / "oslens" / "labs" if installed() else REPO_ROOT / "docs" / "labs"
