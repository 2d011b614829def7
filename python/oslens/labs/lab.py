"""What a lab is: its sheet's metadata, the requirements its preflight checks, its variants, the
questions its check marks, and two functions — `run` (programs under a constraint, observations)
and `expect` (the model's answer and band for every question)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Question:
    key: str          # the key in answers.toml ([answers] and, for predictions, [prediction])
    text: str         # the question as the sheet asks it
    unit: str = ""


@dataclass
class Expectation:
    """The model's answer to one question and how far an answer may be from it."""
    value: float
    band: float                   # relative half-width the model alone allows (0.05 = ±5 %)
    model: str                    # one line: how the value follows from the mechanism
    measured: float | None = None  # this machine's own measurement, when the lab was run
    abs_band: float = 0.0         # absolute half-width floor (for values near 0)
    widen: bool = True            # False for exact facts (an exit status): never widened

    def effective_band(self) -> float:
        """The model's band, widened to cover what this machine measured (1.5 × its deviation),
        so a kernel that rounds differently does not fail a student who measured it."""
        if not self.widen or self.measured is None or not self.value:
            return self.band
        return max(self.band, 1.5 * abs(self.measured - self.value) / abs(self.value))

    def half_width(self) -> float:
        return max(self.effective_band() * abs(self.value), self.abs_band)


@dataclass
class Lab:
    number: int
    slug: str
    title: str
    topic: str
    minutes: int                       # the full lab, reading included
    requires: tuple[str, ...]          # preflight requirement names (preflight.REQUIREMENTS)
    sheet: str                         # file name under docs/labs/
    questions: list[Question]
    run: Callable                      # run(ctx: runner.LabRun, params: dict) -> results dict
    expect: Callable                   # expect(params, results | None) -> {key: Expectation}
    params: Callable                   # params(quick: bool, variant: str) -> dict
    variants: dict[str, str] = field(default_factory=lambda: {"default": "the lab as the sheet describes it"})
    predictions: tuple[str, ...] = ()  # question keys the sheet asks to predict before running
    optional: tuple[str, ...] = ()     # requirements whose absence only narrows what the run shows

    @property
    def default_variant(self) -> str:
        return next(iter(self.variants))
