import pytest

from oslens.store import memory_budget
from oslens_testing.control import fakesys


def fake_cgroup(monkeypatch, tmp_path, limit, usage, cache, version=1):
    keys = ("total_inactive_file", "total_active_file") if version == 1 else ("inactive_file", "active_file")
    (tmp_path / "memory.stat").write_text(f"{keys[0]} {cache // 2}\n{keys[1]} {cache - cache // 2}\nother 7\n")
    monkeypatch.setattr(memory_budget._native, "memory_limit", lambda: (limit, usage, str(tmp_path)))


def test_a_cap_too_small_for_an_import_is_refused_in_one_line(monkeypatch, tmp_path):
    fake_cgroup(monkeypatch, tmp_path, 128 << 20, 100 << 20, 63 << 20)
    assert memory_budget.headroom() == (91 << 20, 128 << 20, str(tmp_path))
    line = memory_budget.refusal(tmp_path / "t")
    assert line == (f"oslens: the trace was not imported: the memory cgroup {tmp_path} has 91 MiB of its 128 MiB limit "
                    f"left and an import needs about 320 MiB; the raw trace is whole: run 'oslens import {tmp_path / 't'}' "
                    "where more memory is free")
    assert "\n" not in line


def test_file_cache_counts_as_free_and_a_large_cap_imports(monkeypatch, tmp_path):
    fake_cgroup(monkeypatch, tmp_path, 1 << 30, 900 << 20, 800 << 20, version=2)
    assert memory_budget.headroom()[0] == (1 << 30) - (100 << 20)
    assert memory_budget.refusal(tmp_path) is None


def test_no_cap_imports(monkeypatch, tmp_path):
    monkeypatch.setattr(memory_budget._native, "memory_limit", lambda: None)
    assert memory_budget.refusal(tmp_path) is None


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_a_cap_is_read_from_the_cgroup_files_of_each_version_on_a_fake_machine(monkeypatch, tmp_path, version):
    # v2 on a fake machine (python/oslens_testing/control/fakesys.py): this machine's cgroup v2
    # has no memory controller, so v2's memory.max / memory.current / *_file are tested here only
    root = fakesys.make(tmp_path / "machine", cgroup=version)
    folder = fakesys.memory_cap(root, 128 << 20, 100 << 20, 63 << 20)
    real = memory_budget._native.memory_limit
    assert real(str(root)) == (128 << 20, 100 << 20, str(folder))
    monkeypatch.setattr(memory_budget._native, "memory_limit", lambda: real(str(root)))
    assert memory_budget.headroom() == (91 << 20, 128 << 20, str(folder))
    assert memory_budget.refusal(tmp_path / "t").startswith(f"oslens: the trace was not imported: the memory cgroup {folder} ")
    # "max" (v2) is no cap, whichever ancestor
    fakesys.memory_cap(root, None, 100 << 20, 0)
    assert real(str(root)) is None
