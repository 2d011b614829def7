"""Laying a table out for a terminal of a given width without clipping it or splitting a word:
every column as it is when it fits; else the table turned on its side (one column per row) when
that fits; else the columns that fit, from the left, with the ones left out named."""

from __future__ import annotations

from dataclasses import dataclass, field

SEPARATOR = 3  # per column: a space either side (rich pads the outer columns too) and a rule between


def _longest_word(s: str) -> int:
    return max((len(w) for w in s.split()), default=0)


def column_width(label: str, cells: list[str], text: bool) -> int:
    """The narrowest a column can be without splitting a word: a header may wrap at its spaces,
    a text cell too, a number never."""
    cell = max((_longest_word(c) if text else len(c) for c in cells), default=0)
    return max(_longest_word(label), cell, 1)


def table_width(widths: list[int]) -> int:
    return sum(widths) + SEPARATOR * len(widths) - 1 if widths else 0


@dataclass
class Layout:
    kind: str  # "full" | "vertical" | "partial"
    labels: list[str]
    rows: list[list[str]]
    text: list[bool]  # per column: left-aligned text that may wrap at spaces
    widths: list[int]
    left_out: list[str] = field(default_factory=list)


def _natural(label: str, cells: list[str]) -> int:
    return max([len(label), *map(len, cells)])


def _shrink(natural: list[int], minimum: list[int], width: int) -> list[int] | None:
    """Column widths from natural down towards their minimums, widest first, until the table
    fits `width`; None when even the minimums do not."""
    if table_width(minimum) > width:
        return None
    w = list(natural)
    while table_width(w) > width:
        i = max(range(len(w)), key=lambda k: (w[k] - minimum[k] > 0, w[k]))
        w[i] -= 1
    return w


def _layout(kind, labels, rows, text, width, left_out=()) -> Layout | None:
    cols = list(zip(*rows)) if rows else [()] * len(labels)
    natural = [_natural(lab, list(cols[i])) for i, lab in enumerate(labels)]
    minimum = [column_width(lab, list(cols[i]), text[i]) for i, lab in enumerate(labels)]
    widths = _shrink(natural, minimum, width)
    return None if widths is None else Layout(kind, labels, rows, text, widths, list(left_out))


def fit(labels: list[str], rows: list[list[str]], text: list[bool], width: int, keep: int = 1) -> Layout:
    """The layout of a table (labels, formatted rows, which columns are text) for `width`
    columns; `keep` leading columns name a row and are never left out. Layout.widths are the
    exact column widths to draw with."""
    full = _layout("full", labels, rows, text, width)
    if full is not None:
        return full
    if rows and len(rows) <= 8:
        heads = [" ".join(r[:keep]) for r in rows]
        body = [[labels[i], *[r[i] for r in rows]] for i in range(keep, len(labels))]
        vtext = [True] + [all(text[i] for i in range(keep, len(labels)))] * len(rows)
        vertical = _layout("vertical", ["", *heads], body, vtext, width)
        if vertical is not None:
            return vertical
    n = len(labels)
    while n > keep:
        n -= 1
        part = _layout("partial", labels[:n], [r[:n] for r in rows], text[:n], width, labels[n:])
        if part is not None:
            return part
    # not even the naming columns fit: give them the width and let words fold
    return Layout("partial", labels[:keep], [r[:keep] for r in rows], text[:keep],
                  [max(width // max(keep, 1) - SEPARATOR, 1)] * keep, labels[keep:])
