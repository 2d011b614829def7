"""A trace in a folder that cannot be written is imported into memory (store.open_trace): the one
native pass writes its files in $TMPDIR instead, and the tables are those of a writable copy."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile

import pytest

from oslens.store import open_trace
from oslens_testing.store import synthetic
from oslens.store.test_app_tables import CALIBRATION


def views_of(con) -> list[str]:
    return sorted(r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal "
                                            "AND NOT starts_with(view_name, '_')").fetchall())


@contextlib.contextmanager
def read_only_copy(trace, tmp_path):
    """`trace` copied into a tmpfs remounted read-only, unmounted whatever happens."""
    mnt = tmp_path / "ro"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        shutil.copytree(trace, mnt / "t")
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        yield mnt / "t"
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_a_read_only_trace_is_imported_in_memory_with_the_same_tables(tmp_path, monkeypatch):
    trace = tmp_path / "t"
    synthetic.write_trace(trace, threads=3, iterations=200, chunk_records=300, unnamed_locks=True)
    (tmp_path / "calibration.json").write_text(json.dumps(CALIBRATION))
    monkeypatch.setenv("OSLENS_CALIBRATION", str(tmp_path / "calibration.json"))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    with read_only_copy(trace, tmp_path) as ro:
        con = open_trace(ro, quiet=True)
        assert not (ro / "tables").exists()
        assert list(scratch.iterdir()) == []  # the pass's files were read into memory and removed
        written = open_trace(trace, quiet=True)
        assert (trace / "tables" / "app_events.parquet").exists()
        views = views_of(written)
        assert views == views_of(con)
        assert "ts_comp_ns" in [r[0] for r in con.execute("DESCRIBE app_events").fetchall()]
        for view in views:
            if view == "meta":  # holds the import's time
                continue
            q = f'SELECT * FROM "{view}"'
            assert con.execute(q).fetchall() == written.execute(q).fetchall(), view
        assert con.execute("SELECT count(*) FROM sync").fetchone()[0] == 3 * 200
