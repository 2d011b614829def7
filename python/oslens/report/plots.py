"""The report's figures, drawn with matplotlib and returned as inline SVG text (no files, no
remote resources). One function per section; each returns None when there is nothing to draw."""

from __future__ import annotations

import io as _io
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402

from oslens.analysis import transitions as transitions_mod  # noqa: E402

STATE_COLORS = {
    "computation_ns": "#4c72b0",
    "syscalls_ns": "#8172b2",
    "io_wait_ns": "#c44e52",
    "page_faults_ns": "#937860",
    "wakeup_latency_ns": "#f0b27a",
    "preempted_ns": "#dd8452",
    "sync_wait_ns": "#da8bc3",
    "sleeping_ns": "#8c8c8c",
    "instrumentation_ns": "#ccb974",
    "unknown_ns": "#dddddd",
}
KIND_COLORS = {
    "program": "#4c72b0",
    "idle": "#eeeeee",
    "kernel thread": "#c44e52",
    "daemon": "#dd8452",
    "oslens": "#55a868",
    "other process": "#8172b2",
    "other": "#8c8c8c",
    "unrecorded": "#ffffff",
}


def _svg(fig, salt: str) -> str:
    matplotlib.rcParams["svg.hashsalt"] = salt
    buf = _io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    # drop the XML prolog and DOCTYPE: the SVG is inlined into HTML
    start = text.find("<svg")
    text = text[start:]
    # make ids unique per figure even across identical content
    text = re.sub(r'id="([^"]+)"', lambda m: f'id="{salt}-{m.group(1)}"', text)
    text = re.sub(r'url\(#([^)]+)\)', lambda m: f"url(#{salt}-{m.group(1)})", text)
    text = re.sub(r'xlink:href="#([^"]+)"', lambda m: f'xlink:href="#{salt}-{m.group(1)}"', text)
    return text


def _setup():
    matplotlib.rcParams.update({"svg.fonttype": "none", "font.size": 9, "axes.spines.top": False,
                                "axes.spines.right": False})


def _ms(v):
    return np.asarray(v, dtype=float) / 1e6


def breakdown(report) -> str | None:
    t = report.tables["breakdown"]
    if t.num_rows == 0:
        return None
    _setup()
    rows = t.to_pylist()
    labels = [f"{r['name']} [{r['tid']}]" for r in rows]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.3))
    left = np.zeros(len(rows))
    for col, color in STATE_COLORS.items():
        vals = _ms([r[col] for r in rows])
        if vals.sum() <= 0:
            continue
        ax.barh(labels, vals, left=left, color=color, label=col[:-3].replace("_", " "))
        left += vals
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.legend(ncol=4, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.25 if len(rows) < 4 else -0.1),
              frameon=False)
    return _svg(fig, "breakdown")


def tasks(report) -> str | None:
    t = report.tables["tasks"]
    if t.num_rows == 0:
        return None
    _setup()
    rows = [r for r in t.to_pylist()][:15]
    fig, ax = plt.subplots(figsize=(8, 0.3 * len(rows) + 1.0))
    ax.barh([f"{r['comm']} [{r['tid']}]" for r in rows], _ms([r["cpu_ns"] for r in rows]),
            color=[KIND_COLORS.get(r["kind"], "#8c8c8c") for r in rows], edgecolor="#999999", linewidth=0.3)
    ax.invert_yaxis()
    ax.set_xlabel("CPU time on the program's CPUs (ms)")
    kinds = sorted({r["kind"] for r in rows})
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=KIND_COLORS.get(k, "#8c8c8c")) for k in kinds], labels=kinds,
              fontsize=7, frameon=False, loc="lower right")
    return _svg(fig, "tasks")


def phases(report) -> str | None:
    t = report.tables["phases"]
    if t.num_rows == 0:
        return None
    _setup()
    rows = t.to_pylist()
    threads = list(dict.fromkeys(f"{r['thread']} [{r['tid']}]" for r in rows))
    names = list(dict.fromkeys(r["name"] for r in rows))
    cmap = plt.get_cmap("tab20")
    color = {n: cmap(i % 20) for i, n in enumerate(names)}
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(threads) + 1.4))
    groups: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for r in rows:
        y = threads.index(f"{r['thread']} [{r['tid']}]")
        groups.setdefault((y, r["name"]), []).append((r["begin_ns"] / 1e6, r["duration_ns"] / 1e6))
    for (y, name), spans in groups.items():
        ax.broken_barh(spans, (y - 0.4, 0.8), facecolors=color[name], edgecolor="white", linewidth=0.5,
                       rasterized=len(rows) > 2000)
    ax.set_yticks(range(len(threads)), threads)
    ax.invert_yaxis()
    ax.set_xlabel("time since program start (ms)")
    shown = names[:12]
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=color[n]) for n in shown], labels=shown, fontsize=7,
              ncol=6, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.3 if len(threads) < 4 else -0.12))
    return _svg(fig, "phases")


def sync(report) -> str | None:
    t = report.tables["sync"]
    rows = [r for r in t.to_pylist() if r["object"] != "(all)"]
    if not rows:
        return None
    _setup()
    rows.sort(key=lambda r: -r["wait_total_ns"])
    rows = rows[:12]
    labels = [f"{r['kind']} {r['object']}" for r in rows]
    pre = _ms([r["wait_preempted_ns"] for r in rows])
    tot = _ms([r["wait_total_ns"] for r in rows])
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(rows) + 1.0))
    ax.barh(labels, tot - pre, color="#da8bc3", label="waiting")
    ax.barh(labels, pre, left=tot - pre, color="#dd8452", label="while a program thread was preempted")
    ax.invert_yaxis()
    ax.set_xlabel("total wait (ms)")
    ax.legend(fontsize=7, frameon=False, loc="lower right")
    return _svg(fig, "sync")


def regions(report) -> str | None:
    t = report.tables["region_histograms"]
    if t.num_rows == 0:
        return None
    _setup()
    rows = t.to_pylist()
    names = list(dict.fromkeys(r["name"] for r in rows))[:6]
    ncol = 3 if len(names) > 2 else len(names)
    nrow = (len(names) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(8, 2.2 * nrow + 0.3), squeeze=False)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    for ax, name in zip(axes.flat, names):
        rs = [r for r in rows if r["name"] == name]
        top_ns = max(r["hi_ns"] for r in rs)
        scale, unit = next((d, u) for d, u in ((1e9, "s"), (1e6, "ms"), (1e3, "µs"), (1.0, "ns")) if top_ns >= d or d == 1.0)
        lo = np.array([r["lo_ns"] for r in rs]) / scale
        hi = np.array([r["hi_ns"] for r in rs]) / scale
        cnt = np.array([r["count"] for r in rs])
        ax.bar(lo, cnt, width=hi - lo, align="edge", color="#4c72b0", edgecolor="white", linewidth=0.3)
        if len(lo) > 1 and lo[0] > 0 and (hi[-1] / lo[0]) > 2.0 and not np.allclose(np.diff(lo), np.diff(lo)[0]):
            ax.set_xscale("log")
        else:
            ax.ticklabel_format(axis="x", useOffset=False, style="plain")
        ax.set_title(f"{name} ({int(cnt.sum())})", fontsize=9)
        ax.set_xlabel(f"duration ({unit})", fontsize=8)
        ax.set_ylabel("count", fontsize=8)
    fig.tight_layout()
    return _svg(fig, "regions")


def switches(report) -> str | None:
    tl = report.tables["switch_timeline"]
    if tl.num_rows == 0:
        return None
    _setup()
    occ = report.tables["cpu_occupancy"].to_pylist()
    cpus = sorted({r["cpu"] for r in tl.to_pylist()})
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 1.2 + 0.35 * len(cpus) + 2.4),
                                   gridspec_kw={"height_ratios": [max(1, 0.35 * len(cpus)), 2.2]})
    kinds = list(KIND_COLORS)
    if occ:
        nb = max(r["bin"] for r in occ) + 1
        # bin width from the switch timeline's window
        end_ns = max(r["bin_end_ns"] for r in tl.to_pylist())
        grid = np.zeros((len(cpus), nb, len(kinds)))
        for r in occ:
            if r["cpu"] in cpus:
                grid[cpus.index(r["cpu"]), r["bin"], kinds.index(r["kind"])] += r["ns"]
        tot = grid.sum(axis=2)
        dom = np.where(tot > 0, grid.argmax(axis=2), kinds.index("idle"))
        # short interruptions must stay visible: a bin where other tasks held at least 5% of the
        # time shows the biggest of them
        others = grid.copy()
        others[:, :, kinds.index("program")] = 0
        others[:, :, kinds.index("idle")] = 0
        busy = others.sum(axis=2) >= 0.05 * np.maximum(tot, 1)
        dom = np.where(busy & (tot > 0), others.argmax(axis=2), dom)
        cmap = ListedColormap([KIND_COLORS[k] for k in kinds])
        ax1.imshow(dom, aspect="auto", interpolation="nearest", cmap=cmap, vmin=0, vmax=len(kinds) - 1,
                   extent=(0, end_ns / 1e9, len(cpus) - 0.5, -0.5))
        ax1.set_yticks(range(len(cpus)), [f"CPU {c}" for c in cpus])
        present = [k for k in kinds if grid[:, :, kinds.index(k)].sum() > 0]
        ax1.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=KIND_COLORS[k]) for k in present], labels=present,
                   fontsize=7, ncol=len(present), frameon=False, loc="lower center", bbox_to_anchor=(0.5, 1.0))
        ax1.set_title("who ran (the kind holding most of each time bin)", fontsize=9, pad=18)
    else:
        ax1.set_visible(False)
    for c in cpus:
        rs = [r for r in tl.to_pylist() if r["cpu"] == c]
        x = [0.0] + [r["bin_end_ns"] / 1e9 for r in rs]
        y = [0] + [r["cumulative"] for r in rs]
        ax2.step(x, y, where="post", label=f"CPU {c}")
    ax2.set_xlabel("time since program start (s)")
    ax2.set_ylabel("cumulative context switches")
    ax2.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return _svg(fig, "switches")


def io(report) -> str | None:
    t = report.tables["io_requests"]
    if t.num_rows == 0:
        return None
    _setup()
    rows = [r for r in t.to_pylist() if r["duration_ns"] is not None]
    if not rows:  # no completions: nothing to plot (the section's note says why), not empty axes
        return None
    fig, ax = plt.subplots(figsize=(8, 3.2))
    styles = {"read": ("o", "#4c72b0"), "write": ("x", "#c44e52"), "flush": ("s", "#55a868"),
              "discard": ("^", "#8172b2"), "other": (".", "#8c8c8c")}
    for d, (marker, color) in styles.items():
        rs = [r for r in rows if r["rw"] == d]
        if not rs:
            continue
        ax.scatter([r["issue_ns"] / 1e9 for r in rs], [r["duration_ns"] / 1e6 for r in rs], marker=marker,
                   color=color, s=14, label=f"{d} ({len(rs)})", linewidths=0.8,
                   rasterized=len(rows) > 5000)  # many points: an embedded image keeps the SVG small
    ax.set_xlabel("issue time since program start (s)")
    ax.set_ylabel("duration (ms)")
    ax.legend(fontsize=7, frameon=False)
    return _svg(fig, "io")


def transitions(report) -> str | None:
    t = report.tables["transitions"]
    if t.num_rows == 0:
        return None
    _setup()
    labels, m = transitions_mod.as_matrix(t)
    m = np.array(m, dtype=float)
    n = len(labels)
    size = min(8, 1.5 + 0.45 * n)
    fig, ax = plt.subplots(figsize=(size + 1.5, size))
    im = ax.imshow(np.log10(m + 1), cmap="Blues")
    ax.set_xticks(range(n), labels, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(n), labels, fontsize=7)
    ax.set_xlabel("switched to")
    ax.set_ylabel("switched from")
    hi = m.max() if m.size else 0
    for i in range(n):
        for j in range(n):
            if m[i, j]:
                ax.text(j, i, f"{int(m[i, j])}", ha="center", va="center", fontsize=6,
                        color="white" if m[i, j] > hi ** 0.7 else "black")
    fig.colorbar(im, ax=ax, label="log10(switches + 1)", shrink=0.7)
    return _svg(fig, "transitions")


def findings(report) -> str | None:
    _setup()
    tk = report.tables["tasks"]
    rows = [r for r in tk.to_pylist() if r["preemptions_of_program"] > 0] if tk.num_rows else []
    if rows:
        rows.sort(key=lambda r: -r["preemptions_of_program"])
        rows = rows[:10]
        fig, ax = plt.subplots(figsize=(8, 0.3 * len(rows) + 1.0))
        ax.barh([f"{r['comm']} [{r['tid']}]" for r in rows], [r["preemptions_of_program"] for r in rows],
                color=[KIND_COLORS.get(r["kind"], "#8c8c8c") for r in rows])
        ax.invert_yaxis()
        ax.set_xlabel("times it took a CPU from a runnable program thread")
        return _svg(fig, "findings")
    # without preemptions: where the program's thread time went, in total
    bd = report.tables["breakdown"]
    if bd.num_rows == 0:
        return None
    tot = {k: sum(bd.column(k).to_pylist()) for k in STATE_COLORS}
    tot = {k: v for k, v in tot.items() if v > 0}
    if not tot:
        return None
    fig, ax = plt.subplots(figsize=(8, 1.6))
    ax.barh(["program threads"], [1], color="white")
    left = 0.0
    s = sum(tot.values())
    for k, v in tot.items():
        ax.barh(["program threads"], [v / s], left=left, color=STATE_COLORS[k], label=k[:-3].replace("_", " "))
        left += v / s
    ax.set_xlabel("share of all program thread time (no task preempted the program)")
    ax.legend(ncol=5, fontsize=7, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.45))
    return _svg(fig, "findings")


PLOTS = {
    "breakdown": breakdown,
    "tasks": tasks,
    "phases": phases,
    "sync": sync,
    "regions": regions,
    "switches": switches,
    "io": io,
    "transitions": transitions,
    "findings": findings,
}


def render(report, name: str) -> str | None:
    fn = PLOTS.get(name)
    return fn(report) if fn else None
