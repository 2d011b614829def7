"""`oslens lab check N --answers answers.toml`: each answer (and each prediction) against the
model's value, within a band widened by this machine's own measurement (lab.Expectation).

answers.toml:

    lab = 1
    quick = true            # the answers are about `oslens lab run 1 --quick` (default false)
    variant = "default"     # optional
    [prediction]            # written down before running
    row_major_faults = 5000
    [answers]
    row_major_faults = 4883
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from oslens.errors import OslensError


@dataclass
class Verdict:
    section: str      # "prediction" or "answers"
    key: str
    given: float
    ok: bool
    reason: str       # one line


def load_answers(path: Path, lab) -> dict:
    try:
        doc = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise OslensError(f"{path}: no such file; write your answers there (see 'oslens lab show {lab.number}')", 2) from None
    except (OSError, UnicodeDecodeError) as e:
        raise OslensError(f"{path}: cannot read it ({e}); check the file", 2) from None
    except tomllib.TOMLDecodeError as e:
        raise OslensError(f"{path}: not valid TOML ({e}); fix the line it names", 2) from None
    if "lab" in doc and str(doc["lab"]) != str(lab.number):
        raise OslensError(f"{path}: these answers are for lab {doc['lab']}, not lab {lab.number}; "
                          f"use 'oslens lab check {doc['lab']} --answers {path}'", 2)
    variant = doc.get("variant") or lab.default_variant
    if variant not in lab.variants:
        raise OslensError(f"{path}: lab {lab.number} has no variant '{variant}'; its variants are "
                          f"{', '.join(lab.variants)}", 2)
    known = {q.key for q in lab.questions_for(variant)}
    for section in ("prediction", "answers"):
        table = doc.get(section, {})
        if not isinstance(table, dict):
            raise OslensError(f"{path}: [{section}] must be a table of question = number", 2)
        for key, value in table.items():
            if key not in known:
                raise OslensError(f"{path}: [{section}] {key}: lab {lab.number}"
                                  f"{'' if variant == lab.default_variant else ' variant ' + variant} has no such question; "
                                  f"its questions are {', '.join(sorted(known))}", 2)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise OslensError(f"{path}: [{section}] {key}: {value!r} is not a number; answer with a number", 2)
    if not doc.get("prediction") and not doc.get("answers"):
        raise OslensError(f"{path}: no [prediction] or [answers] table; nothing to check", 2)
    return doc


def fmt(x: float) -> str:
    """4 883, 4.77, 0.25: thin-space thousands for counts, three digits for small values."""
    if abs(x) >= 100 or float(x).is_integer():
        return f"{round(x):,}".replace(",", "\u2009")
    return f"{x:.3g}"


def _band_text(exp) -> str:
    band = exp.effective_band()
    if exp.half_width() == 0:
        return f"exactly {fmt(exp.value)}"
    if exp.half_width() > band * abs(exp.value):
        return f"±{fmt(exp.half_width())} of {fmt(exp.value)}"
    return f"±{band:.0%} of {fmt(exp.value)}"


def judge(section: str, key: str, given: float, exp) -> Verdict:
    half = exp.half_width()
    ok = exp.value - half <= given <= exp.value + half
    machine = f"; this machine measured {fmt(exp.measured)}" if exp.measured is not None else ""
    if ok:
        text = _band_text(exp)
        reason = f"{text if text.startswith('exactly') else 'within ' + text}: {exp.model}{machine}"
    else:
        direction = "high" if given > exp.value else "low"
        off = f"{(given - exp.value) / exp.value:+.0%}" if exp.value else f"{given - exp.value:+g}"
        reason = f"{off} ({direction}), not {_band_text(exp)}: {exp.model}{machine}"
    return Verdict(section, key, given, ok, reason)


def check(lab, doc: dict, results: dict | None) -> list[Verdict]:
    quick = bool(doc.get("quick", False))
    variant = doc.get("variant") or lab.default_variant
    if variant not in lab.variants:
        raise OslensError(f"lab {lab.number} has no variant '{variant}'; its variants are {', '.join(lab.variants)}", 2)
    params = lab.params(quick, variant)
    expected = lab.variant(variant).expect(params, results)
    verdicts = []
    for section in ("prediction", "answers"):
        for key, given in doc.get(section, {}).items():
            exp = expected.get(key)
            if exp is None:
                verdicts.append(Verdict(section, key, given, False,
                                        "this question needs a run of the lab on this machine first: "
                                        f"oslens lab run {lab.number}{' --quick' if quick else ''}"
                                        f"{'' if variant == lab.default_variant else ' --variant ' + variant}"))
                continue
            verdicts.append(judge(section, key, float(given), exp))
    return verdicts
