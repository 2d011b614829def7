"""The wheel is the product (issues 28, 33): built by the project's own build from what `make`
built (scripts/wheel.py, `make wheel`), it carries no test code, and installed with pip into a
fresh virtual environment outside the clone, with no clone on PATH or PYTHONPATH, it records and
reports a program, runs a lab, gives the flags and pkg-config data a C build needs, and a C and a
Fortran program compiled against its oslens.h and libraries record events oslens reads back."""

import csv
import io
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT

TEST_CODE = re.compile(r"(^|/)(oslens_testing/|test_[^/]*\.py$|[^/]*_oracle[^/]*$|synthetic[^/]*$|fakesys[^/]*$)")
PREFIX = "oslens/prefix/"
# what a user's install needs, by its place in the wheel (scripts/wheel.py: FILES)
SHIPPED = ["oslens/cli.py", "oslens/whatif/engine.py", "oslens/_native.abi3.so", "oslens/calibrate/calib.c",
           "oslens/capture/pysite/sitecustomize.py", PREFIX + "lib/liboslens.so", PREFIX + "lib/liboslens.a",
           PREFIX + "lib/liboslens_fortran.a", PREFIX + "lib/pkgconfig/oslens.pc", PREFIX + "include/oslens.h",
           PREFIX + "include/oslens.mod", PREFIX + "bin/oslens-collector", PREFIX + "libexec/oslens/osbench/osb_calls",
           PREFIX + "libexec/oslens/labs/cow_fork", PREFIX + "libexec/oslens/labs/cow_fork.c",
           PREFIX + "share/oslens/labs/05-cow-fork.md"]
SHARED = ["share/man/man1/oslens.1", "share/bash-completion/completions/oslens", "share/zsh/site-functions/_oslens"]
APP = r"""
#include <oslens.h>
#include <stdio.h>
int main(void) {
    osl_counter_t *iters = osl_counter("iterations", NULL);
    for (int i = 0; i < 100; i++) {
        osl_region_begin("solve");
        osl_count(iters, 1);
        osl_region_end("solve");
    }
    printf("solved\n");
    return 0;
}
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "wheel.py"), "--out", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    print(proc.stdout)  # the wheel's name, size and auditwheel's verdict
    (whl,) = out.glob("oslens-*.whl")
    return whl


def test_the_wheel_carries_everything_and_no_test_code(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    print(f"wheel: {wheel.name}, {wheel.stat().st_size / 1e6:.1f} MB, {len(names)} files")
    assert [n for n in SHIPPED if n not in names] == []
    data = {n.split(".data/data/", 1)[1] for n in names if ".data/data/" in n}
    assert set(SHARED) <= data
    assert sorted(n for n in names if TEST_CODE.search(n)) == []
    # and the test code is really there to be left out
    tree = [str(p.relative_to(ROOT / "python")) for p in (ROOT / "python").rglob("*") if p.is_file()]
    assert any(TEST_CODE.search(n) and "oracle" in n for n in tree) and any(n.endswith("test_native.py") for n in tree)
    # a platform wheel for CPython's stable ABI from 3.11 (crates/native: abi3-py311; requires-python)
    assert re.fullmatch(r"oslens-[\d.]+-cp311-abi3-manylinux_\d+_\d+_x86_64\.whl", wheel.name), wheel.name


def _glibc_needed(root: Path) -> tuple[int, int]:
    """The newest GLIBC_2.x the wheel's ELF files need, by binutils' readelf (ld.so's needs too)."""
    newest = (2, 17)
    for p in root.rglob("*"):
        if p.is_file() and p.open("rb").read(4) == b"\x7fELF":
            needs = subprocess.run(["readelf", "-V", "-W", str(p)], capture_output=True, text=True, check=True).stdout
            for major, minor in re.findall(r"Name: GLIBC_(\d+)\.(\d+)", needs):
                newest = max(newest, (int(major), int(minor)))
    return newest


def test_the_wheel_tag_is_the_manylinux_policy_it_meets(wheel, tmp_path):
    """auditwheel's policy, raised to the newest glibc version any binary needs: auditwheel does
    not count what a library needs of ld.so (liboslens's __rseq_offset is GLIBC_2.35 there)."""
    show = subprocess.run([sys.executable, "-m", "auditwheel", "show", str(wheel)], capture_output=True, text=True)
    text = " ".join(show.stdout.split())
    print(text)
    policy = re.search(r'consistent with the following platform tag: "manylinux_(\d+)_(\d+)_x86_64"', text)
    assert show.returncode == 0 and policy, text
    zipfile.ZipFile(wheel).extractall(tmp_path)
    want = max((int(policy[1]), int(policy[2])), _glibc_needed(tmp_path))
    assert wheel.name.endswith("-manylinux_{}_{}_x86_64.whl".format(*want)), (wheel.name, want)


@pytest.fixture(scope="module")
def user(wheel, tmp_path_factory):
    """A fresh virtual environment outside the clone with the wheel and its pinned dependencies;
    the environment the user's commands run in (no clone on PATH or PYTHONPATH, cwd outside)."""
    home = tmp_path_factory.mktemp("user")
    assert ROOT not in home.parents
    venv = home / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
                          "-c", str(ROOT / "requirements.lock"), str(wheel)], capture_output=True, text=True)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    own = ("OSLENS_", "PYTHON", "VIRTUAL_ENV", "PKG_CONFIG", "MANPATH")  # the clone's settings stay behind
    keep = {k: v for k, v in os.environ.items() if not k.startswith(own)}
    env = dict(keep, PATH=f"{venv / 'bin'}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               XDG_CACHE_HOME=str(home / "cache"),  # a calibration of its own, measured on first use
               OSLENS_STATE_DIR=str(home / "state"))  # its own journal: recovery never touches other runs'
    work = home / "work"
    work.mkdir()
    return venv, env, work


def run(user, *argv, check=True, **kw):
    venv, env, work = user
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=kw.pop("env", env), cwd=work, **kw)
    if check:
        assert proc.returncode == 0, f"{' '.join(map(str, argv))} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_the_installed_package_is_the_one_running(user):
    venv, _, _ = user
    where = run(user, "python", "-c", "import oslens, oslens.paths as p; print(oslens.__file__, p.installed(), p.prefix())")
    package, installed, prefix = where.stdout.split()
    assert Path(package).is_relative_to(venv) and installed == "True" and Path(prefix).is_relative_to(venv)
    for name in SHARED:  # in the environment's share/, where man and the shells look
        assert (venv / name).is_file(), name
    completion = run(user, "bash", "-c", f"source {venv / SHARED[1]} && complete -p oslens")
    assert "oslens" in completion.stdout
    if shutil.which("man"):  # man-db finds the page from PATH's venv/bin (make setup installs man-db)
        man = run(user, "man", "-w", "oslens")
        assert Path(man.stdout.strip()).is_relative_to(venv)


def test_flags_and_pkg_config_point_into_the_wheel(user):
    venv, env, _ = user
    flags = run(user, "oslens", "flags", "--cflags", "--libs").stdout.split()
    include = Path(next(f[2:] for f in flags if f.startswith("-I")))
    assert (include / "oslens.h").is_file() and include.is_relative_to(venv) and "-loslens" in flags
    pc_dir = run(user, "oslens", "flags", "--pkg-config-path").stdout.strip()
    pc = run(user, "pkg-config", "--cflags", "--libs", "oslens", env=dict(env, PKG_CONFIG_PATH=pc_dir)).stdout.split()
    pc_include = Path(next(f[2:] for f in pc if f.startswith("-I")))
    assert pc_include.resolve() == include.resolve() and "-loslens" in pc


def _rows(user, trace, query) -> list[dict]:
    out = run(user, "oslens", "sql", trace, query, "--format", "csv").stdout
    return list(csv.DictReader(io.StringIO(out)))


def test_a_c_program_built_against_the_wheel_records_a_trace(user):
    """Compiled with pkg-config's flags, recorded by the installed `oslens record` (the kernel
    collector too, as far as this machine allows) and read back by `oslens report`; the first
    import measures a quick calibration, compiling calib.c on first use beside liboslens."""
    venv, env, work = user
    (work / "app.c").write_text(APP)
    pc_dir = run(user, "oslens", "flags", "--pkg-config-path").stdout.strip()
    pc = run(user, "pkg-config", "--cflags", "--libs", "oslens", env=dict(env, PKG_CONFIG_PATH=pc_dir)).stdout.split()
    run(user, "cc", "-O2", "-o", "app", "app.c", *pc)
    assert run(user, "./app").stdout == "solved\n"  # not recording: the instruments are no-ops
    rec = run(user, "oslens", "record", "-o", "traces/app", "--", "./app")
    assert "solved" in rec.stdout
    report = run(user, "oslens", "report", "traces/app")
    assert "solve" in report.stdout
    rows = _rows(user, "traces/app", "select count(*) as n from regions where name = 'solve'")
    assert rows == [{"n": "100"}]
    calib = run(user, "python", "-c", "from oslens.calibrate import invitro; print(invitro.prebuilt())").stdout.strip()
    assert Path(calib).is_file() and Path(calib).is_relative_to(venv)


def test_the_static_library_and_the_fortran_module(user):
    _, _, work = user
    (work / "app_static.c").write_text(APP)
    static = run(user, "oslens", "flags", "--cflags", "--static").stdout.split()
    run(user, "cc", "-O2", "-o", "app_static", "app_static.c", *static)
    run(user, "oslens", "record", "--no-calibrate", "-o", "traces/static", "--", "./app_static")
    assert _rows(user, "traces/static", "select count(*) as n from regions where name = 'solve'") == [{"n": "100"}]
    if shutil.which("gfortran") is None:
        pytest.skip("gfortran is not installed (make setup installs it)")
    shutil.copy(ROOT / "tests" / "c" / "recorder_fortran.f90", work / "app.f90")
    cflags = run(user, "oslens", "flags", "--cflags").stdout.split()
    libs = run(user, "oslens", "flags", "--fortran", "--libs").stdout.split()
    run(user, "gfortran", "-O2", "-o", "app_f", *cflags, "app.f90", *libs)
    run(user, "oslens", "record", "--no-calibrate", "-o", "traces/fortran", "--", "./app_f")
    rows = _rows(user, "traces/fortran", "select count(*) as n from regions where name = 'fortran-loop'")
    assert rows == [{"n": "1"}]


def test_a_lab_runs_from_the_wheel(user):
    """Lab 5 (copy-on-write fork) in its quick mode: its program came built in the wheel, its
    sheet with it; `lab run` needs no compiler and no clone."""
    _, _, work = user
    assert "Copy-on-write fork" in run(user, "oslens", "lab", "show", "5").stdout
    run(user, "oslens", "lab", "run", "5", "--quick", "-o", "labs")
    assert (work / "labs" / "lab05-default-quick" / "results.json").is_file()
