"""The import's last step and what decides whether to run it: TRACE/tables/manifest.json (the
schema version, the raw files the tables were built from, each table's size and CRC-32), whether
the tables on disk are current or damaged, and the files an import killed before its end left.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
from pathlib import Path

from oslens.capture import raw
from oslens.errors import OslensError
from oslens.store import kernel_tables, schema

TABLES_DIR = "tables"
MANIFEST = "manifest.json"


def tables_dir(trace: Path) -> Path:
    return Path(trace) / TABLES_DIR


def fingerprint(trace: Path) -> list:
    out = []
    for p in [trace / "meta.json", *raw.chunk_paths(trace)]:
        try:
            st = p.stat()
        except OSError:
            continue
        out.append([p.name, st.st_size, st.st_mtime_ns])
    return out


def read_manifest(trace: Path) -> dict | None:
    try:
        return json.loads((tables_dir(trace) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def is_current(trace: Path) -> bool:
    """Whether the tables on disk are those of the trace's raw chunks, whole. A table whose size
    differs from the manifest's is damaged, and the trace is imported again; so is a trace whose
    chunks changed. A trace whose chunks are all gone keeps its tables (nothing to rebuild them
    from: store.damaged_tables tells what is wrong with them)."""
    m = read_manifest(trace)
    if not m or m.get("schema_version") != schema.SCHEMA_VERSION:
        return False
    if damaged_tables(trace, m):
        return False
    if m.get("fingerprint") != fingerprint(trace):
        return chunks_gone(trace, m)
    return True


def chunks_gone(trace: Path, m: dict) -> bool:
    """Whether every raw chunk the manifest's tables were built from is gone (tables copied
    without raw/): importing again would replace them with empty ones."""
    listed = [f[0] for f in m.get("fingerprint") or [] if str(f[0]).endswith(".osl")]
    return bool(listed) and not raw.chunk_paths(trace)


def _table_files(m: dict) -> dict:
    """{table: {"size": bytes, "crc32": ...}} from a manifest; tables of a manifest written
    before sizes were kept carry only their presence."""
    files = m.get("files") or {}
    return {t: files.get(t, {}) for t in m.get("tables", {})}


def damaged_tables(trace: Path, m: dict | None = None, checksums: bool = False) -> dict[str, str]:
    """{table: what is wrong} for the manifest's tables that are missing, of another size than
    written, or (with `checksums`, which reads every table) of another CRC-32."""
    m = m if m is not None else read_manifest(trace)
    out: dict[str, str] = {}
    for name, want in _table_files(m or {}).items():
        path = tables_dir(trace) / f"{name}.parquet"
        try:
            size = path.stat().st_size
        except OSError:
            out[name] = "missing"
            continue
        if "size" in want and size != want["size"]:
            out[name] = f"{size} bytes instead of {want['size']}"
        elif checksums and "crc32" in want and file_crc32(path) != want["crc32"]:
            out[name] = "its CRC-32 is not the one written"
    return out


def table_file(path: Path) -> dict:
    """What the manifest keeps of a table's file to notice damage: its size and CRC-32."""
    return {"size": path.stat().st_size, "crc32": file_crc32(path)}


def file_crc32(path: Path) -> int:
    import zlib

    crc = 0
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            crc = zlib.crc32(block, crc)
    return crc


def check_rebuildable(trace: Path, damaged: dict | None = None) -> None:
    """Says why the tables are built again when some were damaged; refuses when the raw chunks
    they came from are gone (an empty import would replace what is left of them)."""
    m = read_manifest(trace)
    if damaged is None:
        damaged = damaged_tables(trace, m) if m else {}
    if not damaged:
        return
    t, why = next(iter(damaged.items()))
    more = f" (and {len(damaged) - 1} more table(s))" if len(damaged) > 1 else ""
    if chunks_gone(trace, m):
        raise OslensError(f"{trace}/tables/{t}.parquet is damaged ({why}){more} and the raw chunks it was built from "
                          "are gone; restore raw/ (or the tables) from a copy of the trace", 3)
    print(f"oslens: warning: {trace}/tables/{t}.parquet is damaged ({why}){more}; importing the trace again "
          "from its raw chunks", file=sys.stderr)


def verify_tables(trace: Path) -> dict[str, str]:
    """`oslens import` on a trace already imported: every table's size and CRC-32 against the
    manifest ({table: what is wrong}; empty when all are whole)."""
    m = read_manifest(trace)
    return damaged_tables(trace, m, checksums=True) if m else {}


# what an import writes in the trace folder while it runs, named by its pid: the pass's tables
# (.app_events.tmp-PID.parquet, .regions..., .functions.tmp-PID-named.parquet: app_tables,
# symbols), the tables folder being written, the kernel tables' folder and files
# (kernel_tables.SPILL_PREFIX)
# (not .tables.old-PID: killed between its two renames, it holds the only tables)
STALE_PATTERNS = (".*.tmp-*.parquet", f".{TABLES_DIR}.tmp-*", f"{kernel_tables.SPILL_PREFIX}*",
                  f".*-{kernel_tables.SPILL_PREFIX}*.parquet")


def remove_stale_files(trace: Path) -> list[Path]:
    """Removes what an import killed before its end left in the trace folder (SIGKILL, a crash):
    the files and folders of STALE_PATTERNS whose pid is not a running process. Returns them."""
    gone = []
    for pattern in STALE_PATTERNS:
        for p in trace.glob(pattern):
            pid = _pid_in_name(p.name)
            if pid is None or pid == os.getpid() or Path(f"/proc/{pid}").exists():
                continue
            with contextlib.suppress(OSError):
                shutil.rmtree(p) if p.is_dir() else p.unlink()
                gone.append(p)
    return gone


def _pid_in_name(name: str) -> int | None:
    """The pid in an import's temporary name: the digits after 'tmp-' or the spill prefix."""
    import re

    m = re.search(r"(?:tmp-|kernel-tables-)(\d+)", name)
    return int(m.group(1)) if m else None
