"""Bad input: one clear line on stderr, a non-zero exit, no traceback and nothing lost. One test
per row of docs/errors.md (the table's rows are numbered in the test ids)."""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import OSLENS, run_oslens


def one_error_line(proc, *needles):
    """The run failed with exactly one line on stderr, which says each of `needles`."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode != 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A small imported trace with kernel scheduling events (copied by each test that damages it)."""
    trace = tmp_path_factory.mktemp("bad") / "trace"
    run_oslens("record", "--events", "sched", "-o", trace, "--", "/bin/sleep", "0.01")
    return trace


@pytest.fixture
def trace(recorded, tmp_path):
    copy = tmp_path / "trace"
    shutil.copytree(recorded, copy)
    return copy


# ------------------------------------------------------------------ rejected before the program runs


@pytest.mark.parametrize("options, needles", [
    (["--events", "bogus"], ["--events", "unknown event set 'bogus'", "sched,syscalls,faults,io,irq"]),
    (["--events", ","], ["--events", "no event set named"]),
    (["--buffer-mb", "-5"], ["--buffer-mb", "must be a positive whole number, not -5"]),
    (["--buffer-mb", "lots"], ["--buffer-mb", "must be a whole number, not 'lots'"]),
    (["--buffer-mb", "100000000"], ["--buffer-mb", "must be at most 65536 (64 GiB per thread)"]),
    (["--limit-events", "0"], ["--limit-events", "must be a positive whole number"]),
    (["--counter-period-us", "-1"], ["--counter-period-us", "must be a positive whole number"]),
    (["--sample", "0"], ["--sample", "must be a positive whole number"]),
    (["--func-min-ns", "-3"], ["--func-min-ns", "must be 0 or more"]),
], ids=["1-events-unknown", "1-events-empty", "2-buffer-negative", "2-buffer-not-a-number", "2-buffer-too-big", "2-limit-zero",
        "2-period-negative", "2-sample-zero", "2-func-min-negative"])
def test_bad_record_options_are_rejected_before_the_program_starts(tmp_path, options, needles):
    marker = tmp_path / "ran"
    proc = run_oslens("record", *options, "-o", tmp_path / "t", "--", "touch", marker, check=False)
    assert proc.returncode == 2
    one_error_line(proc, "oslens record: error:", *needles)
    assert not marker.exists() and not (tmp_path / "t").exists()


def test_output_onto_a_regular_file_is_refused_and_the_file_kept(tmp_path):
    target = tmp_path / "notes.txt"
    target.write_text("keep me")
    proc = run_oslens("record", "-o", target, "--", "true", check=False)
    assert proc.returncode == 2
    one_error_line(proc, f"{target} exists and is not a directory; choose another -o")
    assert target.read_text() == "keep me"


@contextlib.contextmanager
def read_only_dir(tmp_path):
    """A read-only tmpfs (root ignores directory permissions), unmounted whatever happens."""
    mnt = tmp_path / "ro"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a read-only tmpfs here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_output_into_a_read_only_directory_says_so(tmp_path):
    with read_only_dir(tmp_path) as ro:
        proc = run_oslens("record", "-o", ro / "t", "--", "true", check=False)
    assert proc.returncode == 1
    one_error_line(proc, f"cannot write the trace into {ro / 't'}: Read-only file system; choose a writable -o")


def test_force_refuses_a_directory_that_is_not_a_trace(tmp_path):
    victim = tmp_path / "photos"
    (victim / "raw").mkdir(parents=True)  # a raw/ folder alone does not make a trace
    (victim / "raw" / "img.cr2").write_bytes(b"\0" * 10)
    (victim / "album.txt").write_text("mine")
    proc = run_oslens("record", "-f", "-o", victim, "--", "true", check=False)
    assert proc.returncode == 2
    one_error_line(proc, f"{victim} is not an oslens trace; --force only replaces traces")
    assert (victim / "album.txt").read_text() == "mine" and (victim / "raw" / "img.cr2").exists()


def test_force_replaces_an_oslens_trace(trace):
    before = json.loads((trace / "meta.json").read_text())["start_ns"]
    proc = run_oslens("record", "-f", "--no-kernel", "-o", trace, "--", "true")
    assert json.loads((trace / "meta.json").read_text())["start_ns"] > before
    assert "Traceback" not in proc.stderr


# ------------------------------------------------------------------ damaged tables


@pytest.mark.parametrize("command", [
    ["sql", "{trace}", "SELECT count(*) AS n FROM switches", "--format", "json"],
    ["export", "{trace}", "--chrome", "{trace}/../out.json"],
    ["import", "{trace}"],
], ids=["3-sql", "3-export", "3-import"])
def test_a_truncated_table_is_imported_again_from_the_raw_chunks(trace, command):
    table = trace / "tables" / "switches.parquet"
    whole = table.read_bytes()
    os.truncate(table, 100)
    proc = run_oslens(*[a.format(trace=trace) for a in command])
    warning = [line for line in proc.stderr.splitlines() if "damaged" in line]
    assert warning == [f"oslens: warning: {trace}/tables/switches.parquet is damaged (100 bytes instead of {len(whole)}); "
                       "importing the trace again from its raw chunks"]
    assert "Traceback" not in proc.stderr
    assert table.read_bytes() == whole  # the same raw chunks give the same table
    if command[0] == "sql":
        assert json.loads(proc.stdout)[0]["n"] > 0


def test_import_notices_a_changed_byte_by_its_crc(trace):
    table = trace / "tables" / "switches.parquet"
    data = bytearray(table.read_bytes())
    data[len(data) // 2] ^= 0xFF
    table.write_bytes(bytes(data))
    proc = run_oslens("import", trace)
    assert f"{trace}/tables/switches.parquet is damaged (its CRC-32 is not the one written)" in proc.stderr
    assert table.read_bytes() != bytes(data)
    assert run_oslens("import", trace).stderr == ""  # whole again: nothing to say


def test_a_damaged_table_without_its_raw_chunks_says_how_to_recover(trace):
    shutil.rmtree(trace / "raw")
    os.truncate(trace / "tables" / "switches.parquet", 100)
    for command in (["import", trace], ["sql", trace, "SELECT 1"]):
        proc = run_oslens(*command, check=False)
        assert proc.returncode == 3
        one_error_line(proc, "switches.parquet is damaged (100 bytes instead of",
                       "the raw chunks it was built from are gone; restore raw/")
    assert (trace / "tables" / "switches.parquet").stat().st_size == 100  # nothing replaced


# ------------------------------------------------------------------ environment


def test_no_matplotlib_warning_for_a_user_without_a_home():
    """The CLI's start-up, then the report's plotting module (which loads matplotlib), as a user
    whose home does not exist."""
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8"}
    python = str(Path(OSLENS[0]).parent / "python")
    code = "import oslens.cli, oslens.report.plots, matplotlib.pyplot as p; p.figure(); print(p.matplotlib.get_configdir())"
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python, "-c", code],
                          capture_output=True, text=True, env=env, cwd="/")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.strip() == f"{tempfile.gettempdir()}/oslens-matplotlib-65534"


# ------------------------------------------------------------------ an aborted recording


def test_a_killed_recording_is_reported_incomplete(tmp_path):
    trace = tmp_path / "t"
    rec = subprocess.Popen([*OSLENS, "record", "--no-kernel", "-o", str(trace), "--", "sleep", "3"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    child = None
    try:
        deadline = time.monotonic() + 30
        while "pid" not in (json.loads((trace / "meta.json").read_text()) if (trace / "meta.json").exists() else {}):
            assert time.monotonic() < deadline and rec.poll() is None
            time.sleep(0.05)
        child = json.loads((trace / "meta.json").read_text())["pid"]
        rec.send_signal(signal.SIGKILL)
        rec.wait()
    finally:
        if rec.poll() is None:
            rec.kill()
            rec.wait()
        if child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
    proc = run_oslens("report", trace, "--no-html")
    assert "is incomplete: recording stopped before the program ended (meta.json has no exit status" in proc.stderr
    header = proc.stdout.split("Findings")[0]
    assert "incomplete trace: recording stopped before the program ended" in header
