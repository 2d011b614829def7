"""docs/trace-schema.md's column tables, generated from the declaration (oslens.store.schema).

Each table's block lies between `<!-- schema:begin NAME -->` and `<!-- schema:end -->`; the prose
around the blocks is written by hand. `python -m oslens.store.schema_doc [DOC]` regenerates the
blocks in place; `--check` exits 1 when the file is not what regenerating gives (test_schema.py
runs it, so the doc cannot drift from the declaration).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pyarrow as pa

from oslens.store import schema

DOC = Path(__file__).resolve().parents[3] / "docs" / "trace-schema.md"
BLOCK = re.compile(r"(<!-- schema:begin (\w+) -->\n)(.*?)(<!-- schema:end -->)", re.S)

# DuckDB's names for the declared types, as `oslens sql` shows them
SQL_TYPES = {pa.int64(): "BIGINT", pa.int32(): "INTEGER", pa.uint64(): "UBIGINT", pa.uint32(): "UINTEGER",
             pa.string(): "VARCHAR", pa.bool_(): "BOOLEAN", pa.binary(): "BLOB", pa.float64(): "DOUBLE"}


def render(name: str) -> str:
    """A table's block: its one-line description and a row per column."""
    t = schema.TABLE_DECLS[name]
    lines = [t.doc, ""]
    if t.kernel_only:
        lines[-1:] = ["", "Written only when the trace has kernel events.", ""]
    lines += ["| column | type | meaning |", "|---|---|---|"]
    for c in t.columns:
        doc = c.doc.replace("|", "\\|")
        if c.extension and not t.extension:
            doc = f"(`{c.extension}` extension) {doc}"
        if c.kernel_only and not t.kernel_only:
            doc += " (absent when the trace has no kernel events)"
        lines.append(f"| {c.name} | {SQL_TYPES[c.type]} | {doc} |")
    return "\n".join(lines) + "\n"


def regenerate(text: str) -> str:
    """`text` with every block rendered again from the declaration."""
    return BLOCK.sub(lambda m: m.group(1) + render(m.group(2)) + m.group(4), text)


def blocks(text: str) -> list[str]:
    """The tables `text` has a block for, in order."""
    return [m.group(2) for m in BLOCK.finditer(text)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("doc", nargs="?", type=Path, default=DOC)
    ap.add_argument("--check", action="store_true", help="exit 1 when the file differs from its regeneration")
    args = ap.parse_args(argv)
    text = args.doc.read_text()
    new = regenerate(text)
    missing = [t.name for t in schema.TABLE_LIST if t.name not in blocks(text)]
    if missing:
        print(f"{args.doc}: no block for the tables {', '.join(missing)}", file=sys.stderr)
        return 1
    if args.check:
        return 0 if new == text else 1
    args.doc.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
