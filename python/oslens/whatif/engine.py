"""simulate(): one entry to the simulator, the Rust core (native.py) when the policy has a form
there, else the Python reference (sim.py)."""

from __future__ import annotations

from oslens.whatif import native
from oslens.whatif.sim import SimResult, Simulator
from oslens.whatif.workload import Workload


def simulate(workload: Workload, policy, switch_ns: int = 0, migrate_ns: int = 0,
             keep_segments: bool = False, engine: str = "auto") -> SimResult:
    """engine: "auto" (the Rust core when the policy has one), "native" or "python"."""
    if engine == "native" or (engine == "auto" and native.available(policy, workload)):
        return native.simulate(workload, policy, switch_ns, migrate_ns, keep_segments)
    return Simulator(workload, policy, switch_ns, migrate_ns, keep_segments).run()
