"""One library (issue 31): the preload wrappers live in liboslens.so. A program linked with
liboslens and started under `oslens record` maps one copy of it (its SONAME matches the
preloaded one, even from another folder) and gets the same wrappers as an unmodified program;
with `--no-preload`, or not traced, the wrappers call straight through."""

import json
import shutil
import subprocess

import pytest

from conftest import C_DIR, VENV, dump, kinds_of, oslens_flags, run_oslens

LOCKS = 200


@pytest.fixture(scope="module")
def linked(tmp_path_factory):
    """tests/c/one_library.c linked with a copy of liboslens.so in a folder of its own, so the
    copy `oslens record` preloads is another path."""
    d = tmp_path_factory.mktemp("onelib")
    other = d / "other"
    other.mkdir()
    shutil.copy(VENV / "lib" / "liboslens.so", other / "liboslens.so")
    exe = d / "one_library"
    subprocess.run(["gcc", "-O2", "-o", exe, C_DIR / "one_library.c", *oslens_flags("--cflags"), f"-L{other}",
                    f"-Wl,-rpath,{other}", "-loslens", "-lpthread"], check=True)
    return exe


@pytest.fixture(scope="module")
def static(tmp_path_factory):
    """tests/c/one_library.c linked with liboslens.a: the wrappers are in the program too."""
    exe = tmp_path_factory.mktemp("onelib_static") / "one_library"
    subprocess.run(["gcc", "-O2", "-o", exe, C_DIR / "one_library.c", *oslens_flags("--cflags"), *oslens_flags("--static"),
                    "-lpthread"], check=True)
    return exe


def record(tmp_path, exe, *extra):
    trace = tmp_path / "trace"
    proc = run_oslens("record", "--no-kernel", "-f", "-o", trace, *extra, "--", exe, LOCKS)
    return trace, json.loads(proc.stdout)


def test_linked_program_under_record_maps_one_library_and_records_its_locks(tmp_path, linked):
    trace, out = record(tmp_path, linked, "--sync", "all")
    assert out == {"copies": 1, "preload_entries": 1, "locks": LOCKS}
    got = kinds_of(dump(trace))
    assert got["lock_acquire"] == got["lock_release"] == LOCKS
    assert got["thread_create"] == got["thread_start"] == got["thread_join_exit"] == 1
    assert got["event"] == 1


def test_linked_program_without_preload_keeps_its_locks_its_own(tmp_path, linked):
    trace, out = record(tmp_path, linked, "--no-preload")
    assert out == {"copies": 1, "preload_entries": 0, "locks": LOCKS}
    got = kinds_of(dump(trace))
    assert got["lock_acquire"] == got["thread_create"] == got["process_exit"] == 0
    assert got["event"] == 1


def test_untraced_linked_program_calls_through(tmp_path, linked):
    proc = subprocess.run([linked, str(LOCKS)], capture_output=True, text=True, check=True,
                          env={"PATH": "/usr/bin:/bin"})
    assert json.loads(proc.stdout) == {"copies": 1, "preload_entries": 0, "locks": LOCKS}


def test_statically_linked_program_under_record_records_each_lock_once(tmp_path, static):
    # the program's own copy of the wrappers calls through to the preloaded library's
    trace, out = record(tmp_path, static, "--sync", "all")
    assert out == {"copies": 1, "preload_entries": 1, "locks": LOCKS}
    got = kinds_of(dump(trace))
    assert got["lock_acquire"] == got["lock_release"] == LOCKS
    assert got["thread_create"] == got["thread_join_exit"] == 1
    assert got["event"] == 1
