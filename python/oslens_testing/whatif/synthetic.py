"""Synthetic workloads for the simulator's tests and benchmark (bench/whatif): arithmetic only;
real programs are what docs/whatif.md's figures come from."""

from __future__ import annotations

import random

from oslens.whatif.workload import SLEEP, SYNC, UNTIL, YIELD, Block, Dep, Task, Workload


def workload(seed: int, threads: int = 12, bursts: int = 30, ncpus: int = 3) -> Workload:
    """Threads of exponential CPU bursts (mean 1 ms) and sleeps (mean 2 ms), every third block
    of an odd thread waiting for a point of its even neighbour, every fifth of a thread 3k a
    sched_yield, threads from the tenth on created
    by thread 0, mixed nice values, and two background competitors with a release time."""
    rng = random.Random(seed)
    tasks = []
    for i in range(threads):
        bs = [int(rng.expovariate(1 / 1e6)) + 1 for _ in range(bursts)]
        blocks = []
        for b in range(bursts - 1):
            if i % 2 and b % 3 == 0:
                blocks.append(Block(0, SYNC, Dep(i - 1, rng.randrange(bursts), rng.randrange(2_000_000))))
            elif i % 3 == 0 and b % 5 == 2:
                blocks.append(Block(0, YIELD))
            else:
                blocks.append(Block(int(rng.expovariate(1 / 2e6)) + 1, SLEEP))
        dep = Dep(0, rng.randrange(bursts), 0) if i >= 10 else None
        tasks.append(Task(100 + i, f"t{i}", bs, blocks, arrival=int(rng.uniform(0, 5e6)), arrival_dep=dep,
                          nice=rng.choice([0, 0, 5, -3])))
    for c in range(2):
        tasks.append(Task(-1 - c, f"bg{c}", [3_000_000, 2_000_000], [Block(20_000_000, UNTIL)], arrival=1_000_000,
                          cpus=(c,), background=True, until=60_000_000))
    return Workload(tasks, ncpus)
