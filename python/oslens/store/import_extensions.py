"""The import's fourth step: the extensions that complete the tables once built, called in
order: compensation (compensated times and the `compensation` table, docs/calibration.md: the
native pass computes them when it is listed here) and symbols (function names, the functions
filters). A failing extension costs the trace only its own work, with one warning.
"""

from __future__ import annotations

import sys
import time

from oslens.store import app_tables, compensation, symbols

# (name, extend(tables: dict, context: dict) -> None), run in this order
EXTENSIONS = (("compensation", compensation.extend), ("symbols", symbols.extend))


def compensation_costs(meta: dict) -> tuple | None:
    """(calibration, why none, per-kind cost table) for the one pass where the compensation
    extension runs, else None."""
    if "compensation" not in dict(EXTENSIONS):
        return None
    cal, why = compensation.find_calibration(meta)
    return cal, why, compensation.cost_table(cal, app_tables.KIND_LABELS.to_pylist())


def run(tables: dict, context: dict, extra: dict) -> dict[str, float]:
    """Each extension on `tables` (amended in place); a failure leaves the tables as they were
    before it and is kept in `extra` (the meta table's store.extension_error.NAME). Returns the
    seconds each took."""
    took = {}
    for name, extend in EXTENSIONS:
        t0 = time.perf_counter()
        before = dict(tables)
        try:
            extend(tables, context)
        except Exception as err:  # an extension's failure must not cost the trace its tables
            tables.clear()
            tables.update(before)
            extra[f"store.extension_error.{name}"] = f"{type(err).__name__}: {err}"
            print(f"oslens: warning: the {name} step of the import failed ({type(err).__name__}: {err}); "
                  "the tables are imported without it", file=sys.stderr)
        took[name] = time.perf_counter() - t0
    return took
