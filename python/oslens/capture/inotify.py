"""inotify through libc (Python's standard library has no binding): the recording's threads
sleep until a file appears in or leaves a folder instead of polling it."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

# <sys/inotify.h>
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE = 0x40, 0x80, 0x100


def watch(folder: Path, mask: int) -> int | None:
    """A non-blocking inotify descriptor reporting `mask`'s events in `folder`, or None where the
    kernel or libc has none (the caller then wakes on its period alone)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(os.O_CLOEXEC | os.O_NONBLOCK)
    except (OSError, AttributeError):
        return None
    if fd < 0:
        return None
    if libc.inotify_add_watch(fd, os.fsencode(folder), mask) < 0:
        os.close(fd)
        return None
    return fd
