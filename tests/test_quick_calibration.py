"""Issue 34: a machine with no calibration gets a quick one on its first import, so its first
report is compensated; --no-calibrate and $OSLENS_NO_CALIBRATE keep today's uncompensated
report; a full calibration wins over the quick one; a calibration measured on another machine,
CPU model, kernel or recorder clock is refused in one line. Each test starts from a fresh cache
($XDG_CACHE_HOME in a temporary folder). Asserts behaviour, never timings."""

import json
import os
import shutil
import socket
import threading

import pytest

from conftest import ROOT, run_oslens

from oslens.store import calibration
from oslens.store.calibration import NO_CALIBRATE_ENV

WATER = ROOT / "workloads" / "water" / "water"
WATER_ARGS = ("--threads", "2", "--steps", "2", "--molecules", "512")
QUICK_NOTE = "Compensated with a quick calibration"
TODAYS_NOTE = "The CPU cost of recording each event is not estimated (no calibration for"


def fresh_env(cache, **extra):
    """This process's environment with an empty cache and nothing that turns calibration off."""
    env = {k: v for k, v in os.environ.items() if k not in (NO_CALIBRATE_ENV, "OSLENS_CALIBRATION")}
    env.update({"XDG_CACHE_HOME": str(cache), **{k: str(v) for k, v in extra.items()}})
    return env


def quick_path(cache):
    return cache / "oslens" / f"calibration-{socket.gethostname()}-quick.json"


def full_path(cache):
    return cache / "oslens" / f"calibration-{socket.gethostname()}.json"


def run_meta(trace):
    out = run_oslens("sql", trace, "select key, value from meta where key like 'compensation.%'", "--format", "json").stdout
    return {r["key"]: r["value"] for r in json.loads(out)}


def report_text(trace, env, *options):
    proc = run_oslens("report", "--no-html", *options, trace, env={**env, "COLUMNS": "2000"})  # notes unwrapped
    return proc


@pytest.fixture(scope="module")
def unimported(tmp_path_factory):
    """A real water run (application events: the kernel's are not what is compensated), recorded
    without importing it."""
    trace = tmp_path_factory.mktemp("water") / "t"
    run_oslens("record", "--no-import", "--no-kernel", "-o", trace, "--", WATER, *WATER_ARGS)
    return trace


def copy_of(trace, tmp_path, name="t"):
    out = tmp_path / name
    shutil.copytree(trace, out, ignore=shutil.ignore_patterns("tables", "analysis", "report.html"))
    return out


@pytest.fixture(scope="module")
def quick(unimported, tmp_path_factory):
    """The trace imported on a fresh machine: (trace, cache, import's stderr)."""
    cache = tmp_path_factory.mktemp("cache")
    trace = copy_of(unimported, tmp_path_factory.mktemp("quick"))
    proc = run_oslens("import", trace, env=fresh_env(cache))
    return trace, cache, proc.stderr


def test_first_import_measures_a_quick_calibration_and_compensates(quick):
    trace, cache, stderr = quick
    assert "measuring a quick one" in stderr
    meta = run_meta(trace)
    assert meta["compensation.kind"] == "quick"
    assert meta["compensation.calibration"] == str(quick_path(cache))
    assert "compensation.missing" not in meta
    assert not full_path(cache).exists()
    text = report_text(trace, fresh_env(cache)).stdout
    assert QUICK_NOTE in text and "`oslens calibrate` for a full one" in text and str(quick_path(cache)) in text
    assert TODAYS_NOTE not in text
    out = run_oslens("sql", trace, "select count(*) filter (where duration_comp_ns < duration_ns), count(*) "
                     "from regions", "--format", "json").stdout
    shorter, regions = json.loads(out)[0].values()
    assert regions and shorter == regions  # every region loses the cost of the records in it
    sources = run_oslens("sql", trace, "select distinct source from compensation where kind = 'region_begin'",
                         "--format", "json").stdout
    assert [r["source"] for r in json.loads(sources)] == ["in vitro: region_begin"]


def test_the_quick_calibration_is_stored_with_its_key(quick):
    trace, cache, _ = quick
    cal = json.loads(quick_path(cache).read_text())
    machine = json.loads((trace / "meta.json").read_text())["machine"]
    assert cal["quick"] is True and cal["schema"] == calibration.SCHEMA
    for field in ("hostname", "cpu_model", "kernel"):
        assert cal["machine"][field] == machine[field]
    assert cal["recorder_clock"] == json.loads((trace / "meta.json").read_text())["clock"]
    # every figure compensation reads, each with its interval and that interval's coverage
    for kind in ("event", "region_begin", "region_end", "timer_start", "timer_stop", "counter_record", "raw"):
        c = cal["costs"][kind]
        assert c["ci_low"] <= c["ns"] <= c["ci_high"] and 0 < c["ci_coverage"] <= 1
    for part in ("cpu", "wall", "per_record_outside"):
        assert "ns" in cal["startup"][part]


def test_a_second_import_reuses_the_quick_calibration(quick, tmp_path):
    _, cache, _ = quick
    before = quick_path(cache).read_text()
    trace = copy_of(quick[0], tmp_path)
    proc = run_oslens("import", trace, env=fresh_env(cache))
    assert "measuring" not in proc.stderr and quick_path(cache).read_text() == before
    assert run_meta(trace)["compensation.kind"] == "quick"


@pytest.mark.parametrize("how", ["import --no-calibrate", "env", "report --no-calibrate"])
def test_no_calibrate_keeps_todays_uncompensated_report(unimported, tmp_path, how):
    cache = tmp_path / "cache"
    trace = copy_of(unimported, tmp_path)
    env = fresh_env(cache, **({NO_CALIBRATE_ENV: 1} if how == "env" else {}))
    if how == "import --no-calibrate":
        run_oslens("import", "--no-calibrate", trace, env=env)
    elif how == "env":
        run_oslens("import", trace, env=env)
    proc = report_text(trace, env, *(["--no-calibrate"] if how.startswith("report") else []))
    text = proc.stdout
    assert TODAYS_NOTE in text and QUICK_NOTE not in text
    assert "measuring" not in proc.stderr
    assert not (cache / "oslens").exists() or not list((cache / "oslens").glob("calibration-*.json"))
    assert run_meta(trace)["compensation.missing"].startswith("no calibration for ")


def test_record_no_calibrate(tmp_path):
    cache = tmp_path / "cache"
    trace = tmp_path / "t"
    proc = run_oslens("record", "--no-calibrate", "--no-kernel", "-o", trace, "--", WATER, *WATER_ARGS,
                      env=fresh_env(cache))
    assert "measuring" not in proc.stderr and not quick_path(cache).exists()
    assert "compensation.missing" in run_meta(trace)


def test_a_full_calibration_wins_over_the_quick_one(quick, tmp_path):
    _, quick_cache, _ = quick
    cache = tmp_path / "cache"
    shutil.copytree(quick_cache, cache)
    full = {**json.loads(quick_path(cache).read_text()), "quick": False, "measured_at": "2026-01-02T03:04:05+0000"}
    calibration.save(full, full_path(cache))
    trace = copy_of(quick[0], tmp_path)
    run_oslens("import", trace, env=fresh_env(cache))
    meta = run_meta(trace)
    assert meta["compensation.kind"] == "full" and meta["compensation.calibration"] == str(full_path(cache))
    text = report_text(trace, fresh_env(cache)).stdout
    assert f"Compensated with the full calibration ({full_path(cache)}, measured 2026-01-02T03:04:05+0000)" in text
    assert QUICK_NOTE not in text


@pytest.mark.parametrize("field, what, value", [
    (("machine", "hostname"), "machine", "another-host"),
    (("machine", "cpu_model"), "CPU model", "Some Other CPU @ 1.00GHz"),
    (("machine", "kernel"), "kernel", "0.0.0-other"),
    (("recorder_clock",), "recorder clock", "monotonic"),
])
def test_a_calibration_of_another_machine_is_refused_in_one_line(quick, tmp_path, field, what, value):
    trace_meta = json.loads((quick[0] / "meta.json").read_text())
    theirs = trace_meta["clock"] if field == ("recorder_clock",) else trace_meta["machine"][field[1]]
    cal = json.loads(quick_path(quick[1]).read_text())
    (cal if len(field) == 1 else cal["machine"])[field[-1]] = value
    cal["quick"] = False
    cache = tmp_path / "cache"
    path = calibration.save(cal, full_path(cache))
    trace = copy_of(quick[0], tmp_path)
    proc = run_oslens("import", trace, env=fresh_env(cache, **{NO_CALIBRATE_ENV: 1}))
    line = (f"the full calibration {path} is not used: it was measured on another {what} {value!r} "
            f"where the trace's is {theirs!r}")
    assert f"oslens: warning: {line}\n" in proc.stderr
    assert run_meta(trace)["compensation.missing"] == line
    # the same file named by $OSLENS_CALIBRATION is refused the same way
    proc = run_oslens("import", "--force", trace, env=fresh_env(cache, OSLENS_CALIBRATION=path))
    assert f"oslens: warning: {line}\n" in proc.stderr
    assert run_meta(trace)["compensation.missing"] == line


def test_racing_imports_measure_the_quick_calibration_once(unimported, tmp_path):
    cache = tmp_path / "cache"
    traces = [copy_of(unimported, tmp_path, f"t{i}") for i in range(2)]
    import subprocess

    from conftest import OSLENS

    procs = [subprocess.Popen([*OSLENS, "import", str(t)], env=fresh_env(cache), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for t in traces]
    errs = [p.communicate()[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert sum("measuring a quick one" in e for e in errs) == 1
    cal = json.loads(quick_path(cache).read_text())
    assert all(run_meta(t)["compensation.measured_at"] == cal["measured_at"] for t in traces)


def test_threads_racing_in_one_process_measure_once(tmp_path, monkeypatch):
    """The lock and the re-check under it (store.calibration.stored_quick_or_measure), with a
    measurer that counts its calls."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("OSLENS_CALIBRATION", raising=False)
    meta = {"machine": {"hostname": "racing-host"}}
    calls, results = [], []

    def measure():
        calls.append(1)
        threading.Event().wait(0.2)  # the other thread reaches the lock meanwhile, or after: either way once
        return {"schema": calibration.SCHEMA, "quick": True, "machine": {"hostname": "racing-host"},
                "costs": {"event": {"ns": 1.0}}}

    threads = [threading.Thread(target=lambda: results.append(calibration.stored_quick_or_measure(meta, measure)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert [cal["costs"] for cal, why in results] == [{"event": {"ns": 1.0}}] * 2
    assert json.loads((tmp_path / "oslens" / "calibration-racing-host-quick.json").read_text())["quick"] is True


def test_a_quick_calibration_that_cannot_be_measured_or_stored_leaves_the_import_uncompensated(tmp_path, monkeypatch):
    from oslens.errors import OslensError

    monkeypatch.delenv("OSLENS_CALIBRATION", raising=False)
    meta = {"machine": {"hostname": "h"}}

    def no_compiler():
        raise OslensError("no C compiler found (gcc or cc): install one to run oslens calibrate", 1)

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert calibration.stored_quick_or_measure(meta, no_compiler) == (
        None, "the quick calibration failed: no C compiler found (gcc or cc): install one to run oslens calibrate")
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))  # a cache under a file cannot be made
    cal, why = calibration.stored_quick_or_measure(meta, lambda: pytest.fail("measured without a place to keep it"))
    assert cal is None and why.startswith(f"cannot store the quick calibration in {tmp_path / 'file' / 'oslens'} (")
