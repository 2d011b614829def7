"""Small text plots for lab observations (a terminal is all a lab needs)."""

from __future__ import annotations

BLOCKS = " ▁▂▃▄▅▆▇█"


def bars(rows: list[tuple[str, float]], width: int = 40, unit: str = "", digits: int = 0) -> list[str]:
    """One horizontal bar per (label, value), scaled to the largest, the value with `digits` decimals."""
    if not rows:
        return []
    top = max(v for _, v in rows) or 1
    pad = max(len(label) for label, _ in rows)
    out = []
    for label, v in rows:
        n = int(round(width * v / top))
        out.append(f"  {label:<{pad}} {'█' * n}{'' if n else '▏'} {v:,.{digits}f}{unit}")
    return out


def count(x) -> str:
    """A count with thousands separators, '-' where there is none."""
    return "-" if x is None else f"{x:,.0f}"


def sparkline(values: list[float]) -> str:
    if not values:
        return ""
    top = max(values) or 1
    return "".join(BLOCKS[min(len(BLOCKS) - 1, int(round((len(BLOCKS) - 1) * v / top)))] for v in values)
