"""Calibration on import: when a trace recorded on this machine is imported and the machine has
no calibration, a quick one is measured first and stored (docs/calibration.md). The store reads
calibrations but must not import the measuring code (docs/architecture.md), so the commands layer
hands it the measurer here, for every command that may import a trace."""

from __future__ import annotations

import sys

from oslens.progress import Progress


def add_option(parser) -> None:
    parser.add_argument("--no-calibrate", action="store_true",
                        help="when this machine has no calibration, import without measuring a quick one "
                             "(the report is then not compensated; also $OSLENS_NO_CALIBRATE=1)")


def measure_quick() -> dict:
    from oslens.calibrate import invitro

    print("oslens: this machine has no calibration: measuring a quick one (a few seconds; "
          "'oslens calibrate' for a full one, '--no-calibrate' to skip)", file=sys.stderr)
    with Progress("quick calibration", total=invitro.STAGES) as bar:
        cal = invitro.measure(quick=True, progress=bar.step)
    # the import's own summary line counts these seconds too
    print(f"oslens: quick calibration measured in {cal['seconds']:.1f} s", file=sys.stderr)
    return cal


def register(args) -> None:
    """Lets imports in this process measure a quick calibration, unless --no-calibrate."""
    from oslens.store import calibration

    if not getattr(args, "no_calibrate", False):
        calibration.set_quick_measurer(measure_quick)
