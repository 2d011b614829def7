"""Unit tests of `oslens record`'s summary (the end-to-end runs are in tests/test_recorder.py)."""

from oslens.commands.record import _copy_out_hint


def test_hint_when_threads_copied_a_tenth_of_the_slots_or_more():
    hint = _copy_out_hint(copied=60, self_copied=40)
    assert hint.startswith("oslens: hint: the program's threads copied 40% of the buffer slots themselves")
    assert "--prepare-buffers" in hint
    assert _copy_out_hint(copied=9, self_copied=1) is not None


def test_no_hint_below_a_tenth_or_without_slots():
    assert _copy_out_hint(copied=91, self_copied=9) is None
    assert _copy_out_hint(copied=0, self_copied=0) is None
    assert _copy_out_hint(copied=100, self_copied=0) is None
