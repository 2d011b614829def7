"""The wheel is the product: no test code in it (issue 28). The oracles, synthetic traces and
workloads, the fake sysfs and the Python what-if simulator live in python/oslens_testing, and the
unit tests beside the code are test_*.py; pyproject.toml and setup.py leave both out."""

import re
import shutil
import subprocess
import sys
import zipfile

from conftest import ROOT

TEST_CODE = re.compile(r"(^|/)(oslens_testing/|test_[^/]*\.py$|[^/]*_oracle[^/]*$|synthetic[^/]*$|fakesys[^/]*$)")


def test_the_wheel_carries_no_test_code(tmp_path):
    # built from a copy, so that the build's own files (build/, *.egg-info) stay out of the tree
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "python", src / "python", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    out = tmp_path / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(src)], check=True, capture_output=True, text=True)
    (wheel,) = out.glob("oslens-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "oslens/cli.py" in names and "oslens/whatif/engine.py" in names and "oslens/_native.abi3.so" in names
    assert sorted(n for n in names if TEST_CODE.search(n)) == []
    # and the test code is really there to be left out
    tree = [str(p.relative_to(ROOT / "python")) for p in (ROOT / "python").rglob("*") if p.is_file()]
    assert any(TEST_CODE.search(n) and "oracle" in n for n in tree) and any(n.endswith("test_native.py") for n in tree)
