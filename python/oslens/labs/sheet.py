"""The lab sheets: Markdown files in docs/labs/ (goal, the prediction to write down first,
procedure, questions), printed by `oslens lab show N`."""

from __future__ import annotations

from pathlib import Path

from oslens import paths
from oslens.errors import OslensError

SHEETS = paths.lab_sheets()


def path(lab) -> Path:
    return SHEETS / lab.sheet


def text(lab) -> str:
    p = path(lab)
    try:
        return p.read_text()
    except OSError as e:
        raise OslensError(f"the sheet of lab {lab.number} is missing ({p}: {e.strerror}); "
                          "run oslens from its checkout", 1) from None


def answers_template(lab, variant: str | None = None) -> str:
    """An answers.toml skeleton with every question of the variant, to fill in."""
    variant = variant or lab.default_variant
    questions, predictions = lab.questions_for(variant), lab.predictions_for(variant)
    lines = [f"lab = {lab.number}", "quick = true   # false for the full-size run"]
    if variant != lab.default_variant:
        lines.append(f'variant = "{variant}"')
    lines.append("")
    if predictions:
        lines.append("[prediction]   # before you run it")
        lines += [f"# {q.text}\n{q.key} = 0" for q in questions if q.key in predictions]
        lines.append("")
    lines.append("[answers]")
    lines += [f"# {q.text}" + (f" ({q.unit})" if q.unit else "") + f"\n{q.key} = 0" for q in questions]
    return "\n".join(lines) + "\n"
