"""Paths into procfs / sysfs under an injectable root, so every reader and writer of the
control layer can be pointed at a fake tree (a temp dir laid out like / ) in tests."""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT_ENV = "OSLENS_SYSROOT"  # tests: run the CLI against a fake /proc + /sys tree


def default_root() -> Path:
    return Path(os.environ.get(ROOT_ENV) or "/")


def under(root: Path | str, path: str | Path) -> Path:
    """`path` (absolute, as the kernel names it) inside `root`."""
    return Path(root) / str(path).lstrip("/")


def read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def read_int(path: Path) -> int | None:
    text = read(path)
    if text is None:
        return None
    try:
        return int(text.split()[0])
    except (ValueError, IndexError):
        return None


def bracketed(text: str | None) -> tuple[list[str], str | None]:
    """'always [madvise] never' -> (['always', 'madvise', 'never'], 'madvise')."""
    if not text:
        return [], None
    modes, current = [], None
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            word = word[1:-1]
            current = word
        modes.append(word)
    if current is None and len(modes) == 1:  # a file that names only its value
        current = modes[0]
    return modes, current


def parse_cpu_list(text: str) -> list[int]:
    """'0-3,6' -> [0, 1, 2, 3, 6]. Raises ValueError on bad input."""
    cpus: set[int] = set()
    text = text.strip()
    if not text:
        return []
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise ValueError(f"'{part}' is not a CPU number or range")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise ValueError(f"range '{part}' ends before it starts")
        cpus.update(range(lo, hi + 1))
    return sorted(cpus)


def format_cpu_list(cpus) -> str:
    cpus = sorted(set(cpus))
    out, i = [], 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        out.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(out)


def write(path: Path, value: str, create: bool = False) -> None:
    """Write one value the way `echo value > path` does (sysfs wants a single write).
    create: also make the file (only in fake trees; kernel files always exist)."""
    flags = os.O_WRONLY | os.O_TRUNC | (os.O_CREAT if create else 0)
    fd = os.open(path, flags, 0o644)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)
