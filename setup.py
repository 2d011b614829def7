"""The wheel is the product: it leaves out the unit tests that live beside the code (test_*.py)
and the oslens_testing package (pyproject.toml). Everything else is in pyproject.toml."""

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithoutTests(build_py):
    def find_package_modules(self, package, package_dir):
        return [m for m in super().find_package_modules(package, package_dir) if not m[1].startswith("test_")]


setup(cmdclass={"build_py": BuildWithoutTests})
