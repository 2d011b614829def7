"""Unit tests of oslens.instrument that need no trace: filters and no-op behaviour."""

from oslens import instrument


def test_matcher_globs_and_excludes():
    m = instrument._matcher("pkg.*,!pkg.skip*")
    assert m("pkg", "run") and m("pkg.sub", "f") and not m("pkg", "skip_me")
    assert not m("oslens.instrument", "region.__enter__")  # never trace oslens itself
    assert instrument._matcher("solve")("any.module", "solve")  # bare qualname matches too


def test_instruments_are_no_ops_when_not_recording(monkeypatch):
    monkeypatch.setattr(instrument, "_enabled", False)
    with instrument.region("x"):
        pass
    c = instrument.counter("c")
    c.add(3)
    assert c.value == 0
    instrument.event("e", "payload")

    @instrument.traced
    def f(x):
        return x + 1

    assert f(1) == 2 and f.__name__ == "f"
    assert instrument.trace_calls("*") is False
