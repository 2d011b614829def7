"""What a what-if simulation gives back: per task its state and figures (SimTask), the schedule
(Segment), the totals (SimResult). The states are the Rust core's (oslens._native.WHATIF_STATES,
declared in crates/native/src/whatif/task.rs)."""

from __future__ import annotations

from dataclasses import dataclass, field

from oslens import _native

NOT_ARRIVED, READY, RUNNING, BLOCKED, DONE = (_native.WHATIF_STATES[k] for k in ("not_arrived", "ready", "running", "blocked", "done"))
INF = 1 << 62


class SimTask:
    """A task's state during one simulation (the policy keeps its own fields on it too)."""

    __slots__ = ("i", "task", "bursts", "blocks", "cpus", "nice", "priority", "background", "state", "seg",
                 "progress", "points", "pi", "fired", "last_cpu", "ready_at", "first_run", "done_at",
                 "waiting", "dispatches", "voluntary", "involuntary", "arrived_at", "p", "seq", "until")

    def __init__(self, i, task):
        self.i = i
        self.task = task
        self.bursts = task.bursts
        self.blocks = task.blocks
        self.cpus = frozenset(task.cpus) if task.cpus is not None else None
        self.nice = task.nice
        self.priority = task.priority
        self.background = task.background
        self.until = task.until if task.until is not None else INF
        self.state = NOT_ARRIVED
        self.seg = 0
        self.progress = 0  # CPU ns done in the current burst
        self.points: dict[int, list] = {}  # burst -> [(offset, target, block or -1)] sorted
        self.pi = 0  # next unfired point of the current burst
        self.fired: set[int] = set()  # blocks of this task whose waker already passed its point
        self.last_cpu = -1
        self.ready_at = 0
        self.first_run = -1
        self.done_at = -1
        self.arrived_at = -1
        self.waiting = 0
        self.dispatches = 0
        self.voluntary = 0
        self.involuntary = 0
        self.p = {}  # the policy's own per-task state
        self.seq = 0

    @property
    def remaining(self) -> int:
        return self.bursts[self.seg] - self.progress

    def allowed(self, cpu: int) -> bool:
        return self.cpus is None or cpu in self.cpus


@dataclass
class Segment:
    cpu: int
    task: int  # index into the workload
    start: int
    end: int


@dataclass
class SimResult:
    tasks: list[SimTask]
    makespan: int
    decisions: int
    switches: int
    segments: list[Segment] = field(default_factory=list)
    stalled: list[int] = field(default_factory=list)  # tasks left blocked on a point never reached
