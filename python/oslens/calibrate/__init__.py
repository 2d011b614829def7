"""Instrumentation cost and perturbation compensation (Kohr et al. 1994, section 5): the measuring
side. The calibration file's model lives in the store (oslens.store.calibration), as does the
compensation applied at import (the importer's native pass, completed by oslens.store.compensation).

    measure(quick=False) -> calibration      in vitro, on this machine (oslens.calibrate.invitro)

In-vivo cost: oslens.calibrate.in_vivo (`oslens record --in-vivo N`); the partial-order
comparison: oslens.calibrate.order; the report's figures: oslens.calibrate.summary.
"""

from __future__ import annotations


def measure(quick: bool = False, **kw) -> dict:
    from oslens.calibrate import invitro

    return invitro.measure(quick=quick, **kw)
