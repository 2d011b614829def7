"""workloads/fib and workloads/lu (the programs of Krintz & Wolski's quantum experiment) build,
run and print deterministic results; bench/quantum/run.py --quick prints JSON with every
setting and ratios to the default of the same run. No timing assertions."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
FIB = ROOT / "workloads" / "fib" / "fib"
LU = ROOT / "workloads" / "lu" / "lu"


@pytest.fixture(scope="module")
def built():
    if not (VENV / "include" / "oslens.h").exists() or not (VENV / "lib" / "liboslens.so").exists():
        pytest.skip("liboslens is not installed in .venv: run `make`")
    for d in ("fib", "lu"):
        subprocess.run(["make", "-s", "-C", str(ROOT / "workloads" / d), f"OSLENS_PREFIX={VENV}"], check=True)
    return FIB, LU


def run(*cmd):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=True, timeout=60)


def test_fib_is_right_and_deterministic(built):
    out = {run(FIB, 30).stdout for _ in range(2)}
    assert out == {"fib(30) = 832040\n"}
    assert run(FIB, 25).stdout == "fib(25) = 75025\n"


def test_lu_solves_and_is_deterministic(built):
    outs = {run(LU, 200).stdout for _ in range(2)}
    assert len(outs) == 1
    line = outs.pop().split()
    assert line[0] == "lu" and line[1] == "n=200"
    fields = dict(f.split("=") for f in line[1:])
    assert float(fields["residual"]) < 10  # LINPACK's normalised residual: O(1) for a good solve
    assert abs(float(fields["checksum"]) - 200.0) < 1e-6  # the solution is all ones


def test_stats_and_adapt_without_plan(built):
    # --stats reports the compute phase; --adapt without `oslens tune` is a no-op (returns 0)
    for prog, arg in ((FIB, 25), (LU, 100)):
        p = run(prog, arg, "--stats", "--adapt")
        stats = [l for l in p.stderr.splitlines() if l.startswith("stats ")]
        assert len(stats) == 1, p.stderr
        d = dict(kv.split("=") for kv in stats[0].split()[1:])
        assert set(d) == {"wall_ns", "cpu_ns", "nvcsw", "nivcsw", "policy", "slice_ns"}
        assert int(d["policy"]) == 0 and int(d["cpu_ns"]) > 0
        assert "osl_adapt" not in p.stderr


def test_bench_quick_schema(built):
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "quantum" / "run.py"), "--quick", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["repetitions"] == 1
    want = {"alone", "alone_slice100", "default", "slice100", "batch", "batch_slice100", "slice100_both"}
    assert want <= set(d["settings"])
    for name in ("fib", "lu"):
        prog = d["programs"][name]
        assert prog["deterministic"]
        assert set(prog["per_setting"]) == set(d["settings"]) == set(prog["ratio_to_default"])
        assert set(prog["ratio_to_alone"]) == set(d["settings"])
        for m in ("wall_s", "cpu_s", "share"):
            assert prog["ratio_to_default"]["default"][m]["median"] == 1.0
            assert prog["ratio_to_alone"]["alone"][m]["median"] == 1.0
        for s, per in prog["per_setting"].items():
            assert per["wall_s"]["n"] == 1 and per["switches"]["median"] >= 0
            assert ("hog_share" in per) == (not s.startswith("alone"))
        # the settings were really applied (read back by the program itself)
        assert prog["per_setting"]["slice100"]["slice_ms"] == [100.0]
        assert prog["per_setting"]["alone_slice100"]["slice_ms"] == [100.0]
        assert prog["per_setting"]["batch"]["policy"] == ["batch"]
        assert prog["per_setting"]["batch_slice100"]["policy"] == ["batch"]
        assert prog["per_setting"]["slice100_both"]["hog_slice_ms"] == [100.0]
        if "tune" in d["settings"]:
            assert prog["per_setting"]["tune"]["slice_ms"] == [100.0]
