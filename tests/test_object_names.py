"""Sync objects named by symbol: a lock that is a static variable of the program shows in the
sync table (and the report's sync rows) by its ELF symbol, not its address; the recorder writes
the process's memory map at its first synchronisation record (docs/trace-schema.md, sync)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OSLENS = ROOT / ".venv" / "bin" / "oslens"

PROGRAM = r"""
#include <pthread.h>
#include <stdio.h>
pthread_mutex_t counter_lock = PTHREAD_MUTEX_INITIALIZER;
static struct { long hits; pthread_mutex_t guard; } table = { 0, PTHREAD_MUTEX_INITIALIZER };
static long counter;
static void *work(void *arg) {
    pthread_mutex_t heap_like;
    pthread_mutex_init(&heap_like, NULL);
    for (int i = 0; i < 2000; i++) {
        pthread_mutex_lock(&counter_lock); counter++; pthread_mutex_unlock(&counter_lock);
        pthread_mutex_lock(&table.guard); table.hits++; pthread_mutex_unlock(&table.guard);
        pthread_mutex_lock(&heap_like); pthread_mutex_unlock(&heap_like);
    }
    return arg;
}
int main(void) {
    pthread_t t[3];
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, work, NULL);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    printf("%ld %ld\n", counter, table.hits);
    return 0;
}
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("objects")
    (d / "locks.c").write_text(PROGRAM)
    # a PIE, so the objects' addresses differ from their link-time ones (ASLR)
    subprocess.run([cc, "-O1", "-pie", "-fPIE", "-pthread", "-o", str(d / "locks"), str(d / "locks.c")], check=True)
    trace = d / "trace"
    # --sync all: the test counts every acquisition as a sync row
    run = subprocess.run([str(OSLENS), "record", "--no-kernel", "--sync", "all", "-o", str(trace), "--", str(d / "locks")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["6000", "6000"]
    return trace


def test_static_locks_are_named_by_symbol(recorded):
    import duckdb

    rows = dict(duckdb.sql(f"SELECT CAST(object AS VARCHAR), count(*) FROM '{recorded}/tables/sync.parquet' "
                           "WHERE kind = 'mutex' GROUP BY ALL").fetchall())
    assert rows.get("counter_lock") == 6000, rows
    assert rows.get("table+0x8") == 6000, rows  # a lock inside a static struct: symbol+offset
    # the three stack locks are no static object: their addresses, in hex
    stack = {o: n for o, n in rows.items() if o not in ("counter_lock", "table+0x8")}
    assert len(stack) == 3 and all(o.startswith("0x") and n == 2000 for o, n in stack.items()), rows
    assert list((recorded / "raw").glob("maps-*.txt"))  # written at the first lock


def test_the_report_names_them(recorded):
    out = subprocess.run([str(OSLENS), "sql", str(recorded),
                          "SELECT DISTINCT CAST(object AS VARCHAR) AS o FROM sync ORDER BY o"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "counter_lock" in out.stdout and "table+0x8" in out.stdout


def test_the_in_memory_build_names_them_alike(recorded):
    """The tables built in memory (the numpy build the one pass is tested against) name the objects
    as the one pass does."""
    import pyarrow.parquet as pq

    from oslens.store import salvage
    from oslens_testing.store import app_tables_oracle

    tables = app_tables_oracle.build_tables(recorded, salvage.Losses())
    in_memory = tables["sync"].column("object").to_pylist()
    assert in_memory == pq.read_table(recorded / "tables" / "sync.parquet").column("object").to_pylist()
    assert "counter_lock" in in_memory
