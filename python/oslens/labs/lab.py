"""What a lab is: its sheet's metadata, the requirements its preflight checks, its variants, the
questions its check marks, and two functions — `run` (programs under a constraint, observations)
and `expect` (the model's answer and band for every question)."""

from __future__ import annotations

import importlib
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
class Variant:
    """A variant that asks its own questions, needs its own things and runs its own programs
    (lab 1's zram swap, lab 10's fair-class slices). A module of its own exports it as VARIANT."""
    questions: list[Question]
    predictions: tuple[str, ...]
    requires: tuple[str, ...]
    run: Callable
    expect: Callable


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
    # variants with their own questions and programs: variant -> the module that exports its
    # VARIANT (imported when used: that module builds on the lab's own); the others share the lab's
    variant_modules: dict[str, str] = field(default_factory=dict)

    @property
    def default_variant(self) -> str:
        return next(iter(self.variants))

    def variant(self, name: str | None) -> Variant:
        module = self.variant_modules.get(name or "")
        if module:
            return importlib.import_module(module).VARIANT
        return Variant(self.questions, self.predictions, self.requires, self.run, self.expect)

    def questions_for(self, variant: str | None) -> list[Question]:
        return self.variant(variant).questions

    def predictions_for(self, variant: str | None) -> tuple[str, ...]:
        return self.variant(variant).predictions

    def requires_for(self, variant: str | None) -> tuple[str, ...]:
        return self.variant(variant).requires
