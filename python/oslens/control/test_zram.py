"""Swap on zram (zram.py) and its journal entries, on fake sysfs trees: the machine's real zram
device is used only by the end-to-end tests (tests/test_labs_variants.py). What a fake tree
cannot show: mkswap and swapon themselves; the restore paths below never call them, because
the fake devices are not in the real /proc/swaps."""

import signal

import pytest

from oslens.control import journal, zram
from oslens_testing.control import fakesys
from oslens.errors import OslensError


def _zram(root, n=0, initstate="0", algs="[lzo-rle] lzo lz4", disksize="0"):
    d = root / f"sys/block/zram{n}"
    d.mkdir(parents=True)
    for name, text in (("initstate", initstate), ("comp_algorithm", algs), ("disksize", disksize), ("reset", "")):
        (d / name).write_text(text + "\n")
    return d


def test_no_zram_in_the_kernel(tmp_path):
    root = fakesys.make(tmp_path / "root")
    assert "this kernel has no zram (CONFIG_ZRAM)" in zram.missing(root)
    (root / "sys/class/zram-control").mkdir(parents=True)
    assert "the zram module is loaded but has no device" in zram.missing(root)
    with pytest.raises(OslensError, match=r"cannot set up swap on zram: no zram device"):
        zram.swap_on_zram(journal.Journal(tmp_path / "state"), 1 << 26, root)


def test_busy_zram_devices_are_not_taken(tmp_path):
    root = fakesys.make(tmp_path / "root")
    _zram(root, 0, initstate="1")
    _zram(root, 1)
    (root / "proc/swaps").write_text("Filename Type Size Used Priority\n/dev/zram1 partition 65532 0 100\n")
    assert zram.free_device(root) is None
    assert zram.missing(root).startswith("every zram device (zram0, zram1) is in use")


def test_a_free_device_and_its_compressors(tmp_path, monkeypatch):
    root = fakesys.make(tmp_path / "root")
    _zram(root, 0, initstate="1")
    _zram(root, 2)
    dev = zram.free_device(root)
    assert dev.name == "zram2" and str(dev.node) == "/dev/zram2"
    assert zram.algorithms(dev) == (["lzo-rle", "lzo", "lz4"], "lzo-rle")
    monkeypatch.setattr(zram, "SEARCH", str(tmp_path / "empty"))
    assert zram.missing(root) == "no mkswap, swapon, swapoff on this machine: apt-get install -y util-linux mount"


def test_zram_and_swap_entries_restore_by_reset(tmp_path):
    """A zram entry whose device still has a size is reset; swap entries of a device not in
    /proc/swaps are done without swapoff."""
    root = fakesys.make(tmp_path / "root")
    d = _zram(root, 0, disksize="67108864")
    j = journal.Journal(tmp_path / "state")
    j.zram_device(d, "/dev/oslens-fake-zram0", "zram")
    j.swap_on("/dev/oslens-fake-zram0", "swap")
    assert [e["kind"] for e in j.entries] == ["zram", "swap"]
    assert j.restore() == []
    assert (d / "reset").read_text() == "1" and not j.path.exists()


def test_recover_after_kill_names_swap_and_zram(tmp_path):
    root = fakesys.make(tmp_path / "root")
    d = _zram(root, 0, disksize="67108864")
    state = tmp_path / "state"
    calls = [f"zram_device(Path({str(d)!r}), '/dev/oslens-fake-zram0', 'zram')", "swap_on('/dev/oslens-fake-zram0', 'swap')"]
    code = fakesys.journal_then_sigkill(state, calls, ", command=['oslens', 'lab'], tool='oslens lab run 1'")
    assert code == -signal.SIGKILL
    done, problems = journal.recover(state)
    assert problems == []
    assert done[0].startswith("turned off swap on /dev/oslens-fake-zram0 (left by oslens lab run 1 pid")
    assert done[1].startswith("reset /dev/oslens-fake-zram0 to disksize 0 (left by oslens lab run 1 pid")
    assert (d / "reset").read_text() == "1" and list(state.glob("tune-*.json")) == []


def test_usage_reads_mm_stat(tmp_path):
    root = fakesys.make(tmp_path / "root")
    d = _zram(root, 0, initstate="1")
    (d / "mm_stat").write_text("12288 4096 8192 0 16384 1 0 0 0\n")
    assert zram.usage("zram0", root) == {"orig_bytes": 12288, "compr_bytes": 4096, "mem_used_bytes": 8192,
                                         "mem_used_max_bytes": 16384}
