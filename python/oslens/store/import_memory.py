"""The import's memory settings (docs/trace-schema.md, "The import's memory settings"): no
transparent huge pages for numpy's arrays, freed memory kept by glibc while importing and given
back afterwards, Python's cycle collector off. Each is a context manager the import runs inside.
"""

from __future__ import annotations

import contextlib

import numpy as np


@contextlib.contextmanager
def no_hugepage_advice():
    """numpy asks for transparent huge pages on large arrays; where THP defragments on demand
    (defrag = madvise) every such allocation can stall in compaction (docs/trace-schema.md, the
    import's memory settings). The import allocates many large temporaries, so it goes without."""
    setter = getattr(getattr(getattr(np, "_core", None), "multiarray", None), "_set_madvise_hugepage", None)
    if setter is None:
        yield
        return
    previous = setter(False)
    try:
        yield
    finally:
        setter(previous)


_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc mallopt parameters


_GLIBC_DEFAULTS = {_M_TRIM_THRESHOLD: 128 * 1024, _M_MMAP_MAX: 65536}


def _libc_mallopt():
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        return libc.mallopt if hasattr(libc, "mallopt") and hasattr(libc, "gnu_get_libc_version") else None
    except (OSError, AttributeError):
        return None


@contextlib.contextmanager
def keep_freed_memory():
    """The import allocates and frees many arrays of hundreds of MB. glibc serves each from a
    fresh mmap and unmaps it when freed, so every one costs a page fault per 4 KiB on first
    touch, a large share of the import's CPU time (docs/trace-schema.md, the import's memory
    settings). While importing, large blocks come from the heap and
    freed memory stays with the process for the next array (glibc only; restored after)."""
    mallopt = _libc_mallopt()
    if mallopt is None:
        yield
        return
    ok = mallopt(_M_MMAP_MAX, 0) and mallopt(_M_TRIM_THRESHOLD, 1 << 30)
    try:
        yield
    finally:
        if ok:
            mallopt(_M_MMAP_MAX, _GLIBC_DEFAULTS[_M_MMAP_MAX])
            mallopt(_M_TRIM_THRESHOLD, _GLIBC_DEFAULTS[_M_TRIM_THRESHOLD])


@contextlib.contextmanager
def no_cyclic_gc():
    """Python's cycle collector off while importing: the import makes few cycles but many
    container objects (chunk headers, names, payloads), and each collection they set off walks
    every object the process holds (measured: 1.5 % of the bench's import, none of it freeing
    anything the import made). Collected as usual afterwards."""
    import gc

    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def release_freed_memory() -> None:
    """Gives the memory the import freed back to the system (what keep_freed_memory kept, and
    the chunk reader's spare buffers)."""
    from oslens import _native

    _native.release_chunk_buffers()
    try:
        import ctypes

        trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
        if trim is not None:
            trim(0)
    except OSError:
        pass
