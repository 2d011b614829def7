"""Similarity matrices as images (Krintz & Wolski, Figure 1): the upper triangle of the Manhattan
distances between intervals in gray, black = similar, white = dissimilar, time running left to
right and top to bottom, with the phases found as a coloured strip along the top. Several traces
(`--compare`) are drawn side by side on one gray scale."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from oslens.phases import similarity

PHASE_COLOURS = ["#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb", "#000000"]


def figure(panels: list[dict]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    top = max((float(p["distances"].max()) for p in panels), default=1.0) or 1.0
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.9), squeeze=False)
    for ax, p in zip(axes[0], panels):
        # one gray scale for traces of one kind (--compare); a panel of other vectors brings its own
        d = p["distances"] / (float(p["distances"].max()) or 1.0 if p.get("own_scale") else top)
        upper = np.where(np.triu(np.ones_like(d, dtype=bool)), d, np.nan)
        cmap = matplotlib.colormaps["gray"].copy()
        cmap.set_bad("white")
        n = len(d)
        extent_ms = p.get("extent", p["wall_ns"] / 1e6)  # another axis (e.g. instructions) when given
        ax.imshow(upper, cmap=cmap, vmin=0.0, vmax=1.0, interpolation="nearest",
                  extent=(0, extent_ms, extent_ms, 0))
        strip = np.asarray(p["phases"], dtype=float)[None, :]
        ax.imshow(strip, cmap=ListedColormap(PHASE_COLOURS[: max(int(strip.max()) + 1, 1)]), aspect="auto",
                  interpolation="nearest", extent=(0, extent_ms, -0.06 * extent_ms, -0.01 * extent_ms),
                  vmin=0, vmax=max(int(strip.max()), 1) if strip.max() > 0 else 1)
        ax.set_ylim(extent_ms, -0.07 * extent_ms)
        ax.set_xlim(0, extent_ms)
        ax.set_title(p["title"], fontsize=9)
        unit = p.get("axis", "time (ms)")
        ax.set_xlabel(f"{unit}; {n} {'intervals' if p['per'] == 1 else 'blocks of ' + str(p['per']) + ' intervals'}",
                      fontsize=8)
        ax.set_ylabel(unit, fontsize=8)
        ax.tick_params(labelsize=7)
        for spine in ax.spines.values():
            spine.set_visible(False)
    fig.tight_layout()
    return fig, plt


def panel(analysis, title: str | None = None) -> dict:
    """What one matrix needs from a PhaseAnalysis: its distances (of blocks when the run has many
    intervals), the phase of each row, the run's length."""
    d, per = similarity.similarity(analysis.matrix)
    labels = analysis.segmentation.labels
    phases = labels[::per][: len(d)]
    vec = analysis.vectors
    return {"distances": d, "per": per, "phases": phases, "wall_ns": int(vec.edges[-1] - vec.edges[0]),
            "title": title or Path(analysis.trace).name}


def render(panels: list[dict], fmt: str) -> bytes:
    """The matrices drawn side by side as PNG or SVG bytes."""
    fig, plt = figure(panels)
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=110, metadata={"Date": None} if fmt == "svg" else None)
    plt.close(fig)
    return buf.getvalue()


def write(panels: list[dict], path: Path) -> Path:
    """Writes PATH as .png or .svg (from its suffix; no suffix: both, PATH.png and PATH.svg)."""
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in ("png", "svg"):
        raise ValueError(fmt)
    path.write_bytes(render(panels, fmt))
    return path
