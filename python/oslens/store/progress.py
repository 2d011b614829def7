"""A rich progress bar on stderr for long imports (silent for short ones and off a terminal)."""

from __future__ import annotations

from pathlib import Path

PROGRESS_BYTES = 256 << 20  # show a progress bar when the raw records exceed this


class Progress:
    """A rich progress bar on stderr for long imports; silent otherwise."""

    def __init__(self, total_bytes: int, enabled: bool):
        self.bar = None
        if enabled and total_bytes >= PROGRESS_BYTES:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("import {task.description}"), BarColumn(), TimeElapsedColumn(),
                                console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("reading", total=100)

    def step(self, what: str, done: float) -> None:
        if self.bar:
            self.bar.update(self.task, description=what, completed=done)

    def close(self) -> None:
        if self.bar:
            self.bar.stop()


def committed_bytes(paths: list[Path]) -> int:
    """The bytes the raw files hold on disk (a chunk is a sparse file: its size overstates it)."""
    total = 0
    for p in paths:
        try:
            total += min(p.stat().st_blocks * 512, p.stat().st_size)
        except OSError:
            pass
    return total
