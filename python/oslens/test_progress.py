"""The one progress bar (oslens/progress.py): nothing when stderr is a pipe or $CI is set, drawn
on a pseudo-terminal; a program's stdout never goes through it; every long job uses it."""

import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
# three steps, each printing a result line to stdout while the bar is drawn
SCRIPT = """
from oslens.progress import Progress, shown
expected = shown()
with Progress("work", total=3) as bar:
    assert bar.drawn == expected
    for what in ("first-step", "second-step", "third-step"):
        bar.step(what)
        with Progress("inner") as inner:  # a bar inside another: a line of its own, gone with it
            assert inner.drawn == expected
            inner.step(what + "-inside")
        print("result line", flush=True)
"""


def _env(ci: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(PYTHONPATH=str(PACKAGE.parent), PYTHONIOENCODING="utf-8", COLUMNS="100", LINES="30", TERM="xterm")
    if ci is not None:
        env["CI"] = ci
    return env


def _run_on_pty(ci: str | None = None) -> tuple[str, str]:
    """(stdout through a pipe, what reached the terminal on stderr)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, stderr=slave, env=_env(ci))
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    out = proc.stdout.read().decode()
    assert proc.wait() == 0
    os.close(master)
    return out, seen.decode(errors="replace")


def test_nothing_on_a_pipe():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=_env(None))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "result line\n" * 3 and proc.stderr == ""


def test_drawn_on_a_terminal():
    out, seen = _run_on_pty()
    assert out == "result line\n" * 3  # the pipe gets the data, never the bar
    for what in ("first-step", "second-step", "third-step"):
        assert re.search(rf"work {what}", seen) and re.search(rf"inner {what}-inside", seen), seen
    assert "━" in seen  # the bar itself


def test_nothing_in_ci_even_on_a_terminal():
    for ci in ("true", "1"):
        out, seen = _run_on_pty(ci)
        assert out == "result line\n" * 3 and seen == "", seen
    out, seen = _run_on_pty("false")  # CI=false is not CI
    assert "work first-step" in seen


def test_every_long_job_uses_the_one_bar():
    users = ["store/importer.py", "commands/bench.py", "commands/calibrate.py", "labs/runner.py", "commands/phases.py",
             "whatif/validate.py", "commands/_calibration.py"]
    for rel in users:
        assert "from oslens.progress import Progress" in (PACKAGE / rel).read_text(), rel
    others = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
              if p.name != "progress.py" and not p.name.startswith("test_")
              and re.search(r"rich\.progress|\.status\(", p.read_text())]
    assert others == [], f"progress drawn outside oslens/progress.py: {others}"
