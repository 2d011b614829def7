"""Region (procedure) duration distributions (Kohr et al. Figures 10-11).

`region_stats` gives, per region name, the count and the distribution of its durations (mean,
standard deviation, min, median, 90th and 99th percentile, max, total), and, when the store
compensated the trace for the instrumentation's cost, the mean compensated duration. `region_histograms` bins
the durations of the regions with the most total time into logarithmic bins (equal-width when all
durations lie within a factor of two), so that banding such as CSHIFT's shows.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from oslens.analysis import db

STATS_SCHEMA = {
    "name": pa.string(),
    "count": pa.int64(),
    "threads": pa.int64(),
    "total_ns": pa.int64(),
    "mean_ns": pa.float64(),
    "std_ns": pa.float64(),
    "min_ns": pa.int64(),
    "p50_ns": pa.float64(),
    "p90_ns": pa.float64(),
    "p99_ns": pa.float64(),
    "max_ns": pa.int64(),
    "mean_comp_ns": pa.float64(),  # mean duration with the instrumentation's cost taken out (when imported)
}

HIST_SCHEMA = {
    "name": pa.string(),
    "bin": pa.int64(),
    "lo_ns": pa.float64(),
    "hi_ns": pa.float64(),
    "count": pa.int64(),
}


def region_stats(con) -> pa.Table:
    if not db.row_count(con, "regions"):
        return db.empty_table(STATS_SCHEMA)
    comp = ("avg(duration_comp_ns)::DOUBLE" if "duration_comp_ns" in db.columns(con, "regions")
            else "NULL::DOUBLE")
    return db.fetch(
        con,
        f"""SELECT name, count(*)::BIGINT AS count, count(DISTINCT tid)::BIGINT AS threads,
                  sum(duration_ns)::BIGINT AS total_ns, avg(duration_ns)::DOUBLE AS mean_ns,
                  coalesce(stddev_pop(duration_ns), 0)::DOUBLE AS std_ns,
                  min(duration_ns)::BIGINT AS min_ns,
                  quantile_cont(duration_ns, 0.5)::DOUBLE AS p50_ns,
                  quantile_cont(duration_ns, 0.9)::DOUBLE AS p90_ns,
                  quantile_cont(duration_ns, 0.99)::DOUBLE AS p99_ns,
                  max(duration_ns)::BIGINT AS max_ns,
                  {comp} AS mean_comp_ns
           FROM regions WHERE duration_ns IS NOT NULL
           GROUP BY name ORDER BY total_ns DESC, name""",
    ).cast(pa.schema(STATS_SCHEMA.items()))


def bin_edges(values: np.ndarray, bins: int) -> np.ndarray:
    lo, hi = float(values.min()), float(values.max())
    if hi <= lo:  # one value: one bin around it
        half = max(abs(lo) * 0.05, 0.5)
        return np.array([lo - half, lo + half])
    if lo > 0 and hi / lo > 2.0:
        return np.geomspace(lo, hi, bins + 1)
    return np.linspace(lo, hi, bins + 1)


def region_histograms(con, names: list[str] | None = None, top: int = 6, bins: int = 30) -> pa.Table:
    """Histograms of the durations of `names` (default: the `top` regions by total time among
    those with at least 20 instances - a distribution needs them - then the others)."""
    if not db.row_count(con, "regions"):
        return db.empty_table(HIST_SCHEMA)
    if names is None:
        names = [
            r[0]
            for r in con.execute(
                "SELECT name FROM regions WHERE duration_ns IS NOT NULL GROUP BY name "
                "ORDER BY count(*) >= 20 DESC, sum(duration_ns) DESC, name LIMIT ?",
                [top],
            ).fetchall()
        ]
    out = []
    for name in names:
        vals = np.array(
            [r[0] for r in con.execute(
                "SELECT duration_ns FROM regions WHERE name = ? AND duration_ns IS NOT NULL", [name]).fetchall()],
            dtype=np.float64,
        )
        if len(vals) == 0:
            continue
        edges = bin_edges(vals, bins)
        counts, _ = np.histogram(vals, bins=edges)
        for i, c in enumerate(counts):
            out.append({"name": name, "bin": i, "lo_ns": float(edges[i]), "hi_ns": float(edges[i + 1]), "count": int(c)})
    return db.from_rows(out, HIST_SCHEMA)
