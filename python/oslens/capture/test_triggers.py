"""The flight recorder's triggers: the spec language (every form, bad specs' one-line messages)
and the watcher over a real recording of tests/c/trigger_target.c, replayed as it grew
(oslens_testing.capture.replay) and polled in steps."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from oslens.capture import triggers
from oslens.capture.trigger_spec import Cond

ROOT = Path(__file__).resolve().parents[3]
OSLENS = ROOT / ".venv" / "bin" / "oslens"
MS = 1_000_000


# -- the language -------------------------------------------------------------------------

@pytest.mark.parametrize("spec, first, within", [
    ("region:work>50ms", Cond("region", "work", 50 * MS), ()),
    ("timer:phase>1.5s", Cond("timer", "phase", 1_500_000_000), ()),
    ("event:checkpoint", Cond("event", "checkpoint", None), ()),
    ("counter:items>5", Cond("counter", "items", 5.0), ()),
    ("counter:items>-2.5", Cond("counter", "items", -2.5), ()),
    ("syscall:fsync>20ms", Cond("syscall", "fsync", 20 * MS), ()),
    ("runq>5ms", Cond("runq", "", 5 * MS), ()),
    ("offcpu>250us", Cond("offcpu", "", 250_000), ()),
    ("offcpu > 100 ns", Cond("offcpu", "", 100), ()),
    ("region:request>50ms and offcpu>20ms", Cond("region", "request", 50 * MS), (Cond("offcpu", "", 20 * MS),)),
    ("region:X>50ms AND runq>10ms and offcpu>1ms", Cond("region", "X", 50 * MS),
     (Cond("runq", "", 10 * MS), Cond("offcpu", "", MS))),
    ("syscall:clock_nanosleep>20ms and offcpu>10ms", Cond("syscall", "clock_nanosleep", 20 * MS), (Cond("offcpu", "", 10 * MS),)),
    ("region:db query>2ms", Cond("region", "db query", 2 * MS), ()),
])
def test_every_form_parses(spec, first, within):
    t = triggers.parse(spec)
    assert (t.first, t.within) == (first, within)
    assert t.spec == " ".join(spec.split())


@pytest.mark.parametrize("spec, message", [
    ("", "empty trigger (forms: region:NAME>DUR, timer:NAME>DUR, syscall:NAME>DUR, event:NAME, counter:NAME>VALUE, "
         "runq>DUR, offcpu>DUR)"),
    ("region:work>50", "trigger 'region:work>50': '50' is not a duration (a number and one of ns, us, ms, s: '50ms')"),
    ("region:work>50min", "trigger 'region:work>50min': '50min' is not a duration (a number and one of ns, us, ms, s: '50ms')"),
    ("region:work", "trigger 'region:work': 'region:work' needs a name and a threshold ('region:NAME>50ms')"),
    ("region:>5ms", "trigger 'region:>5ms': 'region:>5ms' needs a name and a threshold ('region:NAME>50ms')"),
    ("counter:items>many", "trigger 'counter:items>many': counter threshold 'many' is not a number"),
    ("counter:items", "trigger 'counter:items': 'counter:items' needs a name and a threshold ('counter:NAME>100')"),
    ("event:", "trigger 'event:': 'event:NAME' takes a name and no threshold"),
    ("event:x>5ms", "trigger 'event:x>5ms': 'event:NAME' takes a name and no threshold"),
    ("syscall:fsynk>20ms", "trigger 'syscall:fsynk>20ms': unknown system call 'fsynk' (x86_64 names, as in 'man 2 syscalls')"),
    ("runq", "trigger 'runq': 'runq' needs a threshold ('runq>5ms')"),
    ("idle>5ms", "trigger 'idle>5ms': unknown condition 'idle>5ms' (forms: region:NAME>DUR, timer:NAME>DUR, "
                 "syscall:NAME>DUR, event:NAME, counter:NAME>VALUE, runq>DUR, offcpu>DUR)"),
    ("lock:m>5ms", "trigger 'lock:m>5ms': unknown condition 'lock:m>5ms' (forms: region:NAME>DUR, timer:NAME>DUR, "
                   "syscall:NAME>DUR, event:NAME, counter:NAME>VALUE, runq>DUR, offcpu>DUR)"),
    ("offcpu>5ms and region:x>1ms", "trigger 'offcpu>5ms and region:x>1ms': 'and' joins one region, timer or syscall "
                                    "condition, first, with runq or offcpu conditions on its thread inside it"),
    ("event:a and offcpu>1ms", "trigger 'event:a and offcpu>1ms': 'and' joins one region, timer or syscall "
                               "condition, first, with runq or offcpu conditions on its thread inside it"),
    ("region:a>1ms and region:b>1ms", "trigger 'region:a>1ms and region:b>1ms': 'and' joins one region, timer or "
                                      "syscall condition, first, with runq or offcpu conditions on its thread inside it"),
])
def test_bad_specs_say_what_is_wrong_in_one_line(spec, message):
    with pytest.raises(ValueError) as err:
        triggers.parse(spec)
    assert str(err.value) == message
    assert "\n" not in str(err.value)
