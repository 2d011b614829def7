"""Unit tests of the traced program's environment (preload library, Python tracing)."""

import json
import shutil
import subprocess

import pytest

from oslens.capture import preload


def test_dynamic_static_and_scripts(tmp_path):
    assert preload.is_dynamic(preload.resolve_program("sh")) is True
    script = tmp_path / "s.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    assert preload.is_dynamic(script) is True
    env_script = tmp_path / "e.py"
    env_script.write_text("#!/usr/bin/env sh\n")
    assert preload.is_dynamic(env_script) is True
    text = tmp_path / "t.txt"
    text.write_text("hello")
    assert preload.is_dynamic(text) is None
    if shutil.which("gcc"):
        src = tmp_path / "m.c"
        src.write_text("int main(void){return 0;}\n")
        static = tmp_path / "m"
        if subprocess.run(["gcc", "-static", "-o", str(static), str(src)], capture_output=True).returncode == 0:
            assert preload.is_dynamic(static) is False


def test_environment_preloads_one_library(tmp_path, monkeypatch):
    rec = tmp_path / "liboslens.so"
    rec.write_bytes(b"")
    monkeypatch.setattr(preload, "recorder_library", lambda: rec)
    trace = tmp_path / "trace"
    env = preload.environment({"OSLENS_TRACE": str(trace), "LD_PRELOAD": "/x/libother.so /y/liboslens.so"},
                              {"command": ["sh"], "preload": None, "trace_python": "mod.*", "func_min_ns": 500})
    # the wrappers are in liboslens.so: one entry, and another copy of it is not preloaded too
    assert env["LD_PRELOAD"].split() == [str(rec), "/x/libother.so"]
    assert env["OSLENS_PYTHON_FILTER"] == "mod.*"
    assert env["PYTHONPATH"].split(":")[0] == str(preload.PYSITE)
    assert env["OSLENS_FUNC_MIN_NS"] == "500"
    saved = json.loads((trace / "raw" / "autoinstrument.json").read_text())
    assert saved["func_min_ns"] == 500 and saved["python_filter"] == "mod.*"
    off = preload.environment({"OSLENS_TRACE": str(trace)}, {"command": ["sh"], "preload": False})
    assert "LD_PRELOAD" not in off


def test_explicit_preload_without_library_is_an_error(monkeypatch):
    from oslens.errors import OslensError

    monkeypatch.setattr(preload, "recorder_library", lambda: None)
    with pytest.raises(OslensError, match="not built"):
        preload.environment({}, {"command": ["sh"], "preload": True})
