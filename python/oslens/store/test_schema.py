"""The declaration of the trace tables (store/schema.py) is what an import writes, column for
column and type for type, and docs/trace-schema.md is what the declaration generates."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from oslens import _native
from oslens.capture import raw
from oslens.store import importer, kernel_fields as kt, schema, schema_doc
from oslens_testing.store import synthetic


def test_the_doc_is_generated_from_the_declaration():
    text = schema_doc.DOC.read_text()
    assert schema_doc.regenerate(text) == text, "run: python -m oslens.store.schema_doc"
    assert sorted(schema_doc.blocks(text)) == sorted(schema.TABLE_DECLS)


def kernel_chunk(path):
    """One CPU's records of every kind a kernel table has a row for."""
    T, P = 70, 69
    recs = [
        (10, P, kt.SWITCH, T | (P << 32), 1 | (120 << 32)),
        (20, T, kt.WAKEUP, 71 | (T << 32), 1),
        (30, T, kt.FAULT, 0x7F0000001000, 0x401000 | (6 << 48)),
        (31, T, kt.SAMPLE, 0x401234, T),
        (40, T, kt.SYS_ENTER, 39 | (T << 32), 0), (41, T, kt.SYS_EXIT, 39 | (T << 32), 5),
        (50, T, kt.BLOCK_ISSUE, 2048, (8 << 20) | 16 | (8 << 32)), (60, 0, kt.BLOCK_COMPLETE, 2048, (8 << 20) | 16 | (8 << 32)),
        (70, T, kt.IRQ_ENTRY, 11, T), (71, T, kt.IRQ_EXIT, 11, T),
        (80, T, kt.MIGRATE, 0 | (1 << 32), 0),
        (90, T, kt.COUNTER, 0, 1000),
    ]
    _native.write_chunk(str(path), {"source": raw.SOURCE_KERNEL_CPU, "clock": raw.CLOCK_MONOTONIC_NS, "pid": 0, "tid": 0,
                                    "cpu": 0}, [(ts, i, 0, kind, a, b) for ts, i, kind, a, b in recs])


def written(trace) -> dict:
    """{table: [(column, type)]} of every Parquet file the import wrote."""
    out = {}
    for p in sorted((trace / "tables").glob("*.parquet")):
        s = pq.read_schema(p)
        out[p.stem] = [(f.name, f.type.value_type if hasattr(f.type, "value_type") else f.type) for f in s]
    return out


@pytest.mark.parametrize("with_kernel", [True, False])
def test_an_import_writes_the_declared_columns_in_order(tmp_path, monkeypatch, with_kernel):
    cal = tmp_path / "calibration.json"
    cal.write_text(json.dumps({"schema": "oslens-calibration/1", "measured_at": "test",
                               "costs": {"event": {"ns": 20.0, "ci_low": 18.0, "ci_high": 22.0}}}))
    monkeypatch.setenv("OSLENS_CALIBRATION", str(cal))
    trace = tmp_path / "t"
    synthetic.write_trace(trace, threads=2, iterations=5, sync_waits=True)
    if with_kernel:
        kernel_chunk(trace / "raw" / "kernel-cpu0-0.osl")
    importer.import_trace(trace, force=True, quiet=True)
    got = written(trace)
    want = {t.name: list(schema.columns(t.name, with_kernel=with_kernel).items()) for t in schema.TABLE_LIST
            if with_kernel or not t.kernel_only}
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name] == want[name], name


def test_the_native_pass_refuses_columns_other_than_declared(tmp_path, monkeypatch):
    from oslens.store import app_tables

    trace = tmp_path / "t"
    synthetic.write_trace(trace, threads=1, iterations=2)
    declared = app_tables.declared_columns

    def one_wrong(tables, compensated):
        got = declared(tables, compensated)
        got["regions"][3] = ("begin_ns", "string")
        return got

    monkeypatch.setattr(app_tables, "declared_columns", one_wrong)
    with pytest.raises(ValueError, match="table regions: column begin_ns is declared string"):
        importer.import_trace(trace, force=True, quiet=True)
