"""One progress bar for every long piece of work (an import, `bench`, `calibrate`, `lab run`,
`phases`, `whatif --validate`): drawn on stderr when it is a terminal, nothing on a pipe, in a
file or in CI ($CI set), so that logs and captured output stay clean.

    with Progress("bench", total=len(chosen)) as bar:
        for b in chosen:
            bar.step(b.name)          # what runs now; advances by one
            ...

A bar opened while another is drawn becomes a second line of the same display (rich draws one
live display at a time): an import inside `oslens phases` shows under the phases' own line."""

from __future__ import annotations

import os
import sys

_OFF = ("", "0", "false", "no")
_live = {"display": None, "users": 0}  # the one rich display the open bars share


def shown(stream=None) -> bool:
    """Whether a bar would be drawn on `stream` (default stderr): a terminal, and not in CI."""
    if os.environ.get("CI", "").strip().lower() not in _OFF:
        return False
    return _isatty(sys.stderr if stream is None else stream)


class Progress:
    """A bar labelled `label`; total None draws a bar without an end (work of unknown length).
    enabled=False (a short job, --quiet) makes it silent like a pipe does."""

    def __init__(self, label: str, total: float | None = None, enabled: bool = True, stream=None):
        self.label, self.total = label, total
        self.task, self._steps = None, 0
        # a bar inside another joins its display (which took over sys.stderr), else asks the terminal
        if enabled and (_live["display"] is not None or shown(stream)):
            self._open(stream)

    def _open(self, stream) -> None:
        display = _live["display"]
        if display is None:
            from rich.console import Console
            from rich.progress import BarColumn, Progress as RichProgress, TextColumn, TimeElapsedColumn

            stream = sys.stderr if stream is None else stream
            # lines printed to stdout go above the bar only when stdout is that terminal too;
            # a piped stdout is left alone so that its data never lands on stderr
            display = RichProgress(TextColumn("{task.fields[label]} {task.description}"), BarColumn(),
                                   TimeElapsedColumn(), console=Console(file=stream), transient=True,
                                   redirect_stdout=_isatty(sys.stdout), redirect_stderr=stream is sys.stderr)
            display.start()
            _live["display"] = display
        _live["users"] += 1
        self.task = display.add_task("", total=self.total, label=self.label)

    @property
    def drawn(self) -> bool:
        return self.task is not None

    def step(self, what: str, done: float | None = None) -> None:
        """Say what runs now and how much is finished (of total): by default, the steps before this one."""
        if done is None:
            done, self._steps = self._steps, self._steps + 1
        if self.task is not None:
            display = _live["display"]
            # drawn at once when the work changes (not only at the next tick), so a step is always seen
            fresh = display.tasks[[t.id for t in display.tasks].index(self.task)].description != what
            display.update(self.task, description=what, completed=done, refresh=fresh)

    def close(self) -> None:
        if self.task is None:
            return
        display, task, self.task = _live["display"], self.task, None
        display.remove_task(task)
        _live["users"] -= 1
        if _live["users"] == 0:
            display.stop()
            _live["display"] = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _isatty(stream) -> bool:
    try:  # a closed or fake stream is no terminal
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
