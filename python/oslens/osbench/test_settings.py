import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from oslens.osbench import settings


@pytest.fixture
def fake_sysctl(tmp_path, monkeypatch):
    root = tmp_path / "proc_sys"
    (root / "kernel").mkdir(parents=True)
    (root / "kernel" / "sched_rr_timeslice_ms").write_text("100\n")
    monkeypatch.setattr(settings, "PROC_SYS", root)
    state = tmp_path / "state"
    return root / "kernel" / "sched_rr_timeslice_ms", state


def test_changed_and_restored(fake_sysctl):
    path, state = fake_sysctl
    with settings.changed_sysctls({"kernel.sched_rr_timeslice_ms": 4}, state) as orig:
        assert orig == {"kernel.sched_rr_timeslice_ms": "100"}
        assert path.read_text().strip() == "4"
        journal = json.loads((state / settings.JOURNAL).read_text())
        assert journal["sysctl"] == {"kernel.sched_rr_timeslice_ms": "100"}
    assert path.read_text().strip() == "100"
    assert not (state / settings.JOURNAL).exists()


def test_restored_when_the_block_raises(fake_sysctl):
    path, state = fake_sysctl
    with pytest.raises(KeyboardInterrupt):
        with settings.changed_sysctls({"kernel.sched_rr_timeslice_ms": 4}, state):
            raise KeyboardInterrupt
    assert path.read_text().strip() == "100"


def test_recover_restores_a_journal_left_by_a_dead_run(fake_sysctl):
    path, state = fake_sysctl
    state.mkdir()
    path.write_text("4\n")
    (state / settings.JOURNAL).write_text(json.dumps({"pid": 999999, "sysctl": {"kernel.sched_rr_timeslice_ms": "100"}}))
    msgs = settings.recover(state)
    assert len(msgs) == 1 and "restored kernel.sched_rr_timeslice_ms to 100" in msgs[0]
    assert path.read_text().strip() == "100"
    assert not (state / settings.JOURNAL).exists()
    assert settings.recover(state) == []


def test_sigterm_becomes_an_exception_and_restores(fake_sysctl, tmp_path):
    path, state = fake_sysctl
    script = tmp_path / "victim.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from oslens import signals
        from oslens.osbench import settings
        settings.PROC_SYS = Path({str(path.parent.parent)!r})
        try:
            with signals.signals_as_exceptions():
                with settings.changed_sysctls({{"kernel.sched_rr_timeslice_ms": 4}}, Path({str(state)!r})):
                    print("changed", flush=True)
                    # short sleeps: a signal caught just before one long sleep began would be
                    # handled only when it ended (CPython runs handlers between bytecodes)
                    for _ in range(300):
                        time.sleep(0.1)
        except signals.Interrupted as e:
            print("interrupted", e.signum, flush=True)
            sys.exit(3)
    """))
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "changed"
    assert path.read_text().strip() == "4"
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=10)
    assert p.returncode == 3 and "interrupted 15" in out
    assert path.read_text().strip() == "100"
    assert not (state / settings.JOURNAL).exists()
