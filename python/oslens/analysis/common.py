"""The helpers the analyses share, one concern a module: `db` (tables, meta, kernel status),
`program` (who the program is, its window), `task_kinds` (what each task is), `intervals` (numpy
interval algebra) and `units` (readable durations). This module only gathers them under the one
name the analyses call them by (`common.row_count(con, ...)`); new code imports the module it needs.

Every analysis takes a DuckDB connection whose views are the trace tables (docs/trace-schema.md)
and returns pyarrow tables.
"""

from oslens.analysis.db import (columns, empty_table, fetch, from_rows, has_column as common_has, kernel_status,
                                meta, missing_reason, row_count, rows, table_exists)
from oslens.analysis.intervals import merge_intervals, overlap_each, overlap_total, point_in
from oslens.analysis.program import Program, launched_tid, program, same_host, trace_origin
from oslens.analysis.task_kinds import DAEMONS, KERNEL_THREADS, classify_task, task_parents
from oslens.analysis.units import fmt_ns

__all__ = ["columns", "empty_table", "fetch", "from_rows", "common_has", "kernel_status", "meta", "missing_reason",
           "row_count", "rows", "table_exists", "fmt_ns", "merge_intervals", "overlap_each", "overlap_total",
           "point_in", "Program", "launched_tid", "program", "same_host", "trace_origin", "DAEMONS",
           "KERNEL_THREADS", "classify_task", "task_parents"]
