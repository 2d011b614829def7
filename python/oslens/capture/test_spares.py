import mmap
import os
import struct
import time

from oslens.capture import spares
from oslens.capture.spares import SparePool


def take(pool_dir, target):
    """What the recorder does (crates/recorder/src/spare.rs): an atomic add on the counter,
    then a rename of that spare."""
    fd = os.open(pool_dir / "next", os.O_RDWR)
    m = mmap.mmap(fd, 8)
    os.close(fd)
    n = struct.unpack_from("<Q", m, 0)[0]
    struct.pack_into("<Q", m, 0, n + 1)
    m.close()
    os.rename(pool_dir / str(n), target)
    return n


def test_pool_is_made_before_start_refilled_past_what_was_taken_and_removed_at_stop(tmp_path, monkeypatch):
    monkeypatch.setattr(spares, "PERIOD_S", 0.001)
    pool = SparePool(tmp_path, ahead=8).start()
    d = tmp_path / "spare"
    assert sorted(int(p.name) for p in d.iterdir() if p.name not in ("next", "make")) == list(range(spares.FIRST))
    for i in range(spares.FIRST + 5):  # past the first spares: the refill must keep up
        deadline = time.monotonic() + 30  # bounded, not timed: a refill that stopped fails here
        while not (d / str(i)).exists() and time.monotonic() < deadline:
            time.sleep(0.001)
        assert take(d, tmp_path / f"chunk-{i}") == i
    assert (tmp_path / "chunk-0").stat().st_size == 0
    pool.stop()
    assert not d.exists()
    assert pool.summary() == {"made": pool.made, "taken": spares.FIRST + 5}
    assert pool.made >= spares.FIRST + 5


def test_disabled_pool_makes_nothing(tmp_path):
    pool = SparePool(tmp_path, enabled=False).start()
    assert not (tmp_path / "spare").exists()
    pool.stop()
    assert pool.summary() == {"off": True}


def test_pool_sleeps_while_nobody_takes_and_wakes_on_a_take(tmp_path):
    pool = SparePool(tmp_path, ahead=4).start()
    d = tmp_path / "spare"
    time.sleep(0.2)  # the old pool polled every 2 ms: about 100 wake-ups here
    assert pool.wakes == 0
    first = spares.FIRST
    for i in range(first):  # every spare taken: refilled from the takes' events alone
        take(d, tmp_path / f"chunk-{i}")
    deadline = time.monotonic() + 30  # bounded, not timed
    while not (d / str(first + 3)).exists() and time.monotonic() < deadline:
        time.sleep(0.001)
    assert (d / str(first + 3)).exists()
    assert 1 <= pool.wakes <= first
    pool.stop()
    assert not d.exists()
