"""The report for machines: the same sections, notes, reasons and every row of every table."""

from __future__ import annotations

import json
import math

from oslens.report.model import Report


def _clean(v):
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    return v


def to_dict(report: Report) -> dict:
    sections = []
    for s in report.sections:
        names = list(dict.fromkeys(v.name for v in s.views))
        if s.id == "regions":
            names.append("region_histograms")
        if s.id == "switches":
            names += ["switch_timeline", "cpu_occupancy"]
        if s.id == "io":
            names.append("io_requests")
        if s.id == "phases":
            pass
        sections.append(
            {
                "id": s.id,
                "title": s.title,
                "reference": s.reference,
                "description": s.description,
                "available": s.available,
                "reason": s.reason,
                "notes": s.notes,
                "tables": names,
            }
        )
    tables = {}
    for name, t in report.tables.items():
        tables[name] = {
            "columns": t.column_names,
            "rows": [[_clean(v) for v in row.values()] for row in t.to_pylist()],
        }
    header = dict(report.header)
    return {
        "format": "oslens-report",
        "version": 1,
        "trace": report.trace,
        "header": header,
        "kernel": report.kernel,
        "findings": report.tables["findings"].to_pylist(),
        "sections": sections,
        "tables": tables,
    }


def dumps(report: Report) -> str:
    return json.dumps(to_dict(report), indent=1, default=str)
