"""The workload a simulation replays: per task, CPU bursts separated by blocking intervals.

A task runs burst 0, blocks (block 0), runs burst 1, ... and exits after its last burst. A block
either lasts a fixed time (I/O, a sleep, anything outside the program) or ends when another
task of the workload reaches a point of its own execution (the wake-up the trace recorded: a
consumer cannot run before its producer, whatever the policy). Creation is a dependency of the
same kind: a thread arrives when its parent reaches the point where it created it."""

from __future__ import annotations

from dataclasses import dataclass, field

IO, SLEEP, SYNC, UNTIL, YIELD = "io", "sleep", "sync", "until", "yield"


@dataclass(frozen=True)
class Dep:
    """A point of another task's execution: CPU time `offset` ns into its burst `burst`."""

    task: int  # index into Workload.tasks
    burst: int
    offset: int


@dataclass
class Block:
    duration: int  # ns as recorded (used when dep is None, and as the recorded figure)
    kind: str  # IO, SLEEP or SYNC; UNTIL: lasts until the time in `duration` (a release time);
    # YIELD: no block, sched_yield: the task offers its CPU (it moves behind the others that are ready)
    dep: Dep | None = None


@dataclass
class Task:
    tid: int
    name: str
    bursts: list[int]  # CPU ns of each burst
    blocks: list[Block]  # len(bursts) - 1
    arrival: int = 0  # ns after the origin, when dep is None
    arrival_dep: Dep | None = None
    cpus: tuple[int, ...] | None = None  # affinity (None: any CPU)
    nice: int = 0
    priority: int = 0  # real-time priority (SCHED_FIFO / SCHED_RR policies), 1..99
    background: bool = False  # not the program: competes for CPUs, not reported
    until: int | None = None  # leaves at this time whatever is left of its work (background competitors)
    recorded: dict = field(default_factory=dict)  # completion_ns, waiting_ns, response_ns, switches
    slices: list | None = None  # (start, end) ns after the origin of each recorded slice (policy `recorded`)

    @property
    def cpu_ns(self) -> int:
        return sum(self.bursts)


@dataclass
class Workload:
    tasks: list[Task]
    ncpus: int
    origin_ns: int = 0  # trace time of simulated time 0
    recorded: dict = field(default_factory=dict)  # makespan_ns, switches, notes
    background: dict = field(default_factory=dict)  # cpu -> {cpu_ns, stretches, bin_ns, bins} (extract.py)
    others: list[Task] = field(default_factory=list)  # other tasks one by one (system-wide traces, extract.others)
    preempted_ends: list[int] = field(default_factory=list)  # trace ns where a program slice ended preempted (machine.observed_tick)
    notes: list[str] = field(default_factory=list)

    @property
    def program(self) -> list[Task]:
        return [t for t in self.tasks if not t.background]

    def check(self) -> None:
        """Raises ValueError when the workload cannot be simulated (a bug of its producer)."""
        n = len(self.tasks)
        for i, t in enumerate(self.tasks):
            if not t.bursts or len(t.blocks) != len(t.bursts) - 1:
                raise ValueError(f"task {t.tid}: {len(t.bursts)} bursts and {len(t.blocks)} blocks")
            if any(b < 0 for b in t.bursts) or any(b.duration < 0 for b in t.blocks):
                raise ValueError(f"task {t.tid}: a negative duration")
            for d in [b.dep for b in t.blocks if b.dep] + ([t.arrival_dep] if t.arrival_dep else []):
                if not (0 <= d.task < n) or d.task == i or not (0 <= d.burst < len(self.tasks[d.task].bursts)):
                    raise ValueError(f"task {t.tid}: dependency on a point that does not exist ({d})")
