"""Reading a kernel record's fields from the one declaration of their layout
(crates/format/src/kernel.rs, exported as oslens._native.KERNEL_KINDS): which word (id, a or
b), shift, width and signedness. The kernel tables read fields only through `field_np` (numpy)
and `field_sql` (DuckDB, table `k` of kernel_records), never by shifting words themselves, so a
new kind or field is declared in Rust alone.
"""

from __future__ import annotations

import numpy as np

from oslens import _native

KINDS = _native.KERNEL_KINDS
# the width of each word of a record
WORD_BITS = {"id": 32, "a": 64, "b": 64}


def field(kind: str, name: str) -> tuple[str, int, int, bool]:
    """(word, shift, bits, signed) of a kind's field, by the names kernel.rs declares."""
    return KINDS[kind]["fields"][name]


def kind_of(name: str) -> int:
    return KINDS[name]["kind"]


def same_layout(kind_a: str, kind_b: str, *names: str) -> bool:
    """Whether two kinds hold the named fields in the same bits (so one query reads both)."""
    return all(field(kind_a, n) == field(kind_b, n) for n in names)


def field_np(kind: str, name: str, r) -> np.ndarray:
    """The field of each record of `r` (a raw record array or a dict of its word columns): int64
    when signed (sign-extended from its width), uint64 when not."""
    word, shift, bits, signed = field(kind, name)
    v = np.asarray(r[word]).astype(np.uint64)
    if shift:
        v = v >> np.uint64(shift)
    if bits < 64:
        v = v & np.uint64((1 << bits) - 1)
    if not signed:
        return v
    if bits == 64:
        return v.view(np.int64)
    s = v.astype(np.int64)
    return np.where(s >= 1 << (bits - 1), s - (1 << bits), s)


def field_sql(kind: str, name: str) -> str:
    """A DuckDB expression of the field over table `k`'s columns: the bare column when the field
    is its whole word and unsigned, else a BIGINT (sign-extended when signed)."""
    word, shift, bits, signed = field(kind, name)
    if bits == WORD_BITS[word] and not signed:
        return word
    x = f"({word} >> {shift})" if shift else word
    if bits < WORD_BITS[word]:
        x = f"({x} & {(1 << bits) - 1})"
    if not signed:
        return f"CAST({x} AS BIGINT)"
    return f"CAST(CAST({x} AS HUGEINT) - CASE WHEN {x} >= {1 << (bits - 1)} THEN {1 << bits} ELSE 0 END AS BIGINT)"
