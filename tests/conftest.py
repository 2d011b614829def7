"""Shared helpers for the end-to-end tests: the built CLI, compiling C against liboslens, and
reading traces back."""

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
OSLENS = [str(VENV / "bin" / "oslens")]
C_DIR = Path(__file__).resolve().parent / "c"


def run_oslens(*args, check=True, env=None, **kw):
    proc = subprocess.run([*OSLENS, *map(str, args)], capture_output=True, text=True, env=env, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"oslens {' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def oslens_flags(*which):
    return run_oslens("flags", *which).stdout.split()


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cbuild")


@pytest.fixture(scope="session")
def compile_c(build_dir):
    """compile_c(source name in tests/c, extra flags) -> path of the built program."""
    built = {}

    def compile_one(source, *extra, compiler="gcc", static=False):
        key = (source, extra, compiler, static)
        if key not in built:
            out = build_dir / (Path(source).stem + ("-static" if static else "") + f"-{len(built)}")
            libs = oslens_flags("--static") if static else oslens_flags("--libs")
            cmd = [compiler, "-O2", "-g", "-o", str(out), str(C_DIR / source), *oslens_flags("--cflags"), *libs, "-lpthread", *extra]
            subprocess.run(cmd, check=True)
            built[key] = out
        return built[key]

    return compile_one


def dump(trace):
    out = run_oslens("dump", "--json", trace).stdout
    return [json.loads(line) for line in out.splitlines()]


def meta(trace):
    return json.loads((Path(trace) / "meta.json").read_text())


def kinds_of(records, **match):
    """How many records of each kind match every key=value given."""
    out = collections.Counter()
    for r in records:
        if all(r.get(k) == v for k, v in match.items()):
            out[r["kind"]] += 1
    return out
