"""store.held: chunks whose records were let go after the read are read again by the pass, and
the tables are the same, byte for byte, as when every chunk's records are held."""

from __future__ import annotations

import shutil

import pytest

from oslens.errors import OslensError
from oslens.store import importer, salvage, synthetic
from oslens.store.test_app_tables import _nested_trace, _random_trace


def _import(trace, tables_copy):
    tables = importer.build_tables(trace, salvage.Losses(), stream=importer.one_pass())
    let_go = tables["_read"]["chunks_let_go"]
    importer.write_tables(trace, tables)
    shutil.copytree(trace / "tables", tables_copy)
    return let_go


@pytest.mark.parametrize("case", ["synthetic", "random-disordered", "nested"])
def test_records_read_again_give_the_same_tables(tmp_path, monkeypatch, case):
    trace = tmp_path / "t"
    if case == "synthetic":  # several mapped chunks per thread, preload-style unnamed locks
        synthetic.write_trace(trace, threads=3, iterations=300, chunk_records=500, unnamed_locks=True)
    elif case == "nested":  # regions out of order: the pass reads a thread's chunks again at its end
        _nested_trace(trace, seed=3)
    else:  # decoded chunks (long payloads), times stepping back
        _random_trace(trace, seed=7, disordered=True)
    app_chunks = len([p for p in (trace / "raw").glob("*.osl") if not p.name.startswith("kernel-")])
    monkeypatch.setenv("OSLENS_IMPORT_HELD_MB", str(1 << 20))
    assert _import(trace, tmp_path / "held") == 0
    monkeypatch.setenv("OSLENS_IMPORT_HELD_MB", "0")
    assert _import(trace, tmp_path / "let-go") == app_chunks > 0
    held = sorted(p.name for p in (tmp_path / "held").glob("*.parquet"))
    assert held == sorted(p.name for p in (tmp_path / "let-go").glob("*.parquet"))
    for name in held:
        if name != "meta.parquet":  # meta holds the import's time
            assert (tmp_path / "held" / name).read_bytes() == (tmp_path / "let-go" / name).read_bytes(), name


def test_a_chunk_that_shrank_before_the_pass_is_one_clear_error(tmp_path, monkeypatch):
    """A chunk read again with fewer records than first read (rewritten meanwhile) stops the
    import with one line, rather than tables missing rows."""
    trace = tmp_path / "t"
    synthetic.write_trace(trace, threads=2, iterations=100, chunk_records=300)
    monkeypatch.setenv("OSLENS_IMPORT_HELD_MB", "0")
    read_again = importer._read_again
    monkeypatch.setattr(importer, "_read_again", lambda p: read_again(p)[:-1])
    with pytest.raises(OslensError, match="could not be read again while importing .*when read again"):
        importer.import_trace(trace, quiet=True)
    assert not (trace / "tables").exists()
    assert not list(trace.glob(".*.tmp-*"))
