"""The wheel is the product: it leaves out the unit tests that live beside the code (test_*.py)
and the oslens_testing package (pyproject.toml). It is native (oslens/_native.abi3.so, and the
libraries, headers and tools `make wheel` puts in oslens/prefix: scripts/wheel.py), so it is
tagged for CPython's stable ABI from 3.11 on and this platform. Everything else is in pyproject.toml."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
LIMITED_API = "cp311"  # crates/native builds with pyo3's abi3-py311; requires-python says the same


class BuildWithoutTests(build_py):
    def find_package_modules(self, package, package_dir):
        return [m for m in super().find_package_modules(package, package_dir) if not m[1].startswith("test_")]


class NativeDistribution(Distribution):
    def has_ext_modules(self):
        return True  # built by cargo, not setuptools, but native all the same: no py3-none-any tag


def shared_files() -> list[tuple[str, list[str]]]:
    """The man page and shell completions scripts/wheel.py put in share/ beside this file
    (none in a clone), for the environment's share/ folder."""
    root = HERE / "share"
    folders = sorted({f.parent for f in root.rglob("*") if f.is_file()}) if root.is_dir() else []
    return [(str(d.relative_to(HERE)), sorted(str(f.relative_to(HERE)) for f in d.iterdir() if f.is_file()))
            for d in folders]


setup(cmdclass={"build_py": BuildWithoutTests}, distclass=NativeDistribution, data_files=shared_files(),
      options={"bdist_wheel": {"py_limited_api": LIMITED_API}})
