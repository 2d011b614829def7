"""Where the built pieces live: the virtual environment that `make` fills."""

import os
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent.parent


def prefix() -> Path:
    """The install prefix holding lib/liboslens.so, include/oslens.h and bin/oslens-collector."""
    env = os.environ.get("OSLENS_PREFIX")
    if env:
        return Path(env)
    return Path(sys.prefix)


def library_dir() -> Path:
    return prefix() / "lib"


def include_dir() -> Path:
    return prefix() / "include"


def liboslens() -> Path:
    return library_dir() / "liboslens.so"


def tool(name: str) -> Path:
    """A helper executable installed beside the CLI (e.g. oslens-collector)."""
    return prefix() / "bin" / name
