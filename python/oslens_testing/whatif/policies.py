"""The scheduling policies of the Python what-if simulator (the test oracle of the Rust core's
crates/native/src/whatif/policies.rs), one small class each, all through one interface, built
from the same (name, parameters) the core runs (`from_native`).

A policy owns the ready queue: `add` puts a task in it (why: arrive, wake, preempt, expire),
`pick` takes the one to run on a CPU (respecting affinity), `quantum` says how long it may run
before the policy wants a say again, `expired` whether that time is used up, `preempts` whether a
task that became ready displaces a running one, `ran` charges CPU time. `period`/`tick` are for
policies that act on a clock (MLFQ's boost, Unix's decay). Adding a policy = its form in
oslens/whatif/policy.py, its arms in policies.rs, and here one class + one line in POLICIES. The simulator (sim.py) never looks inside."""

from __future__ import annotations

import collections

from oslens import _native
from oslens.whatif.result import RUNNING


# Linux's sched_prio_to_weight: nice -20..19 -> load weight (nice 0 = 1024), the Rust core's table
NICE_WEIGHT = _native.WHATIF_NICE_WEIGHT


class Policy:
    name = "?"
    period: int | None = None

    def __init__(self):
        self.sim = None

    def attach(self, sim):
        self.sim = sim


    def add(self, st, now, why):
        raise NotImplementedError

    def pick(self, cpu, now):
        raise NotImplementedError

    def quantum(self, st, start):
        return None

    def ran(self, st, ns, now):
        pass

    def expired(self, st, now) -> bool:
        return False

    def preempts(self, woken, running, now) -> bool:
        return False

    def slice_over(self, running, ran_ns) -> bool:
        """Has the running task used up its slice `ran_ns` after it was last accounted? (a wake-up
        on its CPU then reschedules it: see Eevdf)"""
        return False

    def worse(self, a, b, now) -> bool:
        """Is running task a a better victim than b?"""
        return False

    def should_yield(self, running, cpu, now) -> bool:
        return False

    def tick(self, now):
        pass

    def yielded(self, st, now):
        """`st` calls sched_yield while another task is ready; `add(st, now, "yield")` follows."""

    def burst_done(self, st, now):
        pass

    def left(self, st, now):
        pass


def _take(queue: collections.deque, cpu: int):
    """First task of the deque allowed on `cpu`, removed from it."""
    for k, st in enumerate(queue):
        if st.cpus is None or cpu in st.cpus:
            del queue[k]
            return st
    return None


def _take_best(ready: list, cpu: int, key):
    best, bk = -1, None
    for k, st in enumerate(ready):
        if st.cpus is None or cpu in st.cpus:
            v = key(st)
            if bk is None or v < bk:
                best, bk = k, v
    if best < 0:
        return None
    st = ready[best]
    ready[best] = ready[-1]
    ready.pop()
    return st


class Fifo(Policy):
    """First come, first served: runs each task until it blocks or exits."""

    name = "fifo"

    def __init__(self):
        super().__init__()
        self.q = collections.deque()

    def add(self, st, now, why):
        if why == "preempt":
            self.q.appendleft(st)
        else:
            self.q.append(st)

    def pick(self, cpu, now):
        return _take(self.q, cpu)


class Lifo(Fifo):
    """Last come, first served (non-preemptive), as Choices shipped it."""

    name = "lifo"

    def add(self, st, now, why):
        self.q.appendleft(st)


class _Sliced:
    """A fixed quantum `q_ns` per turn: `used` counts the CPU time of the current turn."""

    q_ns = 0

    @staticmethod
    def started(st):
        if st is not None:
            st.p["used"] = 0
        return st

    def quantum(self, st, start):
        return self.q_ns - st.p.get("used", 0)

    def ran(self, st, ns, now):
        st.p["used"] = st.p.get("used", 0) + ns

    def expired(self, st, now):
        return st.p.get("used", 0) >= self.q_ns


class RoundRobin(_Sliced, Fifo):
    """FIFO with a quantum: a task that used it goes to the back of the queue."""

    name = "rr"

    def __init__(self, q):
        super().__init__()
        self.q_ns = q

    def pick(self, cpu, now):
        return self.started(_take(self.q, cpu))

    def burst_done(self, st, now):
        st.p["used"] = 0


class Sjf(Policy):
    """Shortest job (CPU burst) first, non-preemptive, knowing each burst's length (an oracle)."""

    name = "sjf"

    def __init__(self):
        super().__init__()
        self.ready = []

    def add(self, st, now, why):
        st.seq = self.sim.seq if self.sim else 0
        self.ready.append(st)

    def key(self, st, now):
        return (st.remaining, st.ready_at, st.i)

    def pick(self, cpu, now):
        return _take_best(self.ready, cpu, lambda st: self.key(st, now))


class Srt(Sjf):
    """Shortest remaining time first (STCF), preemptive. est=oracle knows each burst; est=ewma
    predicts it as alpha * last burst + (1 - alpha) * previous prediction (init: first guess)."""

    name = "srt"

    def __init__(self, oracle, alpha, init):
        super().__init__()
        self.oracle, self.alpha, self.init = oracle, alpha, init

    def left_of(self, st, now):
        if self.oracle:
            return st.remaining - self._running_for(st, now)
        guess = st.p.get("tau", self.init)
        return max(0, guess - st.progress - self._running_for(st, now))

    def _running_for(self, st, now):
        sim = self.sim
        if st.state == RUNNING and sim.cur[st.last_cpu] is st:  # progress since it started
            return max(0, now - sim.since[st.last_cpu])
        return 0

    def key(self, st, now):
        return (self.left_of(st, now), st.ready_at, st.i)

    def preempts(self, woken, running, now):
        return self.left_of(woken, now) < self.left_of(running, now)

    def worse(self, a, b, now):
        return self.left_of(a, now) > self.left_of(b, now)

    def burst_done(self, st, now):
        if not self.oracle:
            done = st.bursts[st.seg]
            st.p["tau"] = self.alpha * done + (1 - self.alpha) * st.p.get("tau", self.init)


class Hrrn(Sjf):
    """Highest response ratio next: (waiting + burst) / burst, non-preemptive (burst: oracle)."""

    name = "hrrn"

    def key(self, st, now):
        s = max(1, st.remaining)
        return (-(now - st.ready_at + s) / s, st.ready_at, st.i)


class Mlfq(Policy):
    """Multi-level feedback queue (OSTEP ch. 8): new tasks enter the top level; using up a level's
    allotment (summed over its runs) moves a task down; a higher level preempts a lower one; round
    robin within a level; every `boost` all tasks go back to the top (0 = never)."""

    name = "mlfq"

    def __init__(self, levels, q, allot, period):
        super().__init__()
        self.levels, self.q, self.allot, self.period = levels, q, allot, period
        self.queues = [collections.deque() for _ in range(self.levels)]

    def add(self, st, now, why):
        if why == "arrive" or "level" not in st.p:
            st.p["level"], st.p["used"], st.p["qused"] = 0, 0, 0
        self.queues[st.p["level"]].append(st)

    def pick(self, cpu, now):
        for q in self.queues:
            st = _take(q, cpu)
            if st is not None:
                st.p["qused"] = 0
                return st
        return None

    def quantum(self, st, start):
        lv = st.p["level"]
        return min(self.q[lv] - st.p["qused"], self.allot[lv] - st.p["used"])

    def ran(self, st, ns, now):
        st.p["used"] += ns
        st.p["qused"] += ns
        lv = st.p["level"]
        if st.p["used"] >= self.allot[lv]:
            st.p["level"] = min(lv + 1, self.levels - 1)
            st.p["used"] = 0
            st.p["qused"] = self.q[st.p["level"]]  # demotion ends the turn

    def expired(self, st, now):
        return st.p["qused"] >= self.q[st.p["level"]]

    def preempts(self, woken, running, now):
        return woken.p["level"] < running.p["level"]

    def worse(self, a, b, now):
        return a.p["level"] > b.p["level"]

    def tick(self, now):
        moved = []
        for q in self.queues:
            moved.extend(q)
            q.clear()
        for st in self.sim.tasks:
            if "level" in st.p:
                st.p["level"], st.p["used"] = 0, 0
        self.queues[0].extend(moved)

    def should_yield(self, running, cpu, now):
        lv = running.p["level"]
        return any(any(st.cpus is None or cpu in st.cpus for st in q) for q in self.queues[:lv])


class UnixDecay(_Sliced, Policy):
    """4.3BSD decay-usage: priority = recent CPU / 4 ticks + 2 nice (lower runs first); once per
    `decay` the recent CPU of every task is multiplied by 2 load / (2 load + 1); round robin of
    `q` among equals; a woken task of a better priority queue (4 levels each) preempts."""

    name = "unix"

    def __init__(self, q, tick, period):
        super().__init__()
        self.q_ns, self.tick_ns, self.period = q, tick, period
        self.ready = []
        self.order = 0

    def prio(self, st):
        return int(st.p.get("est", 0) / (4 * self.tick_ns) + 2 * st.nice) // 4

    def add(self, st, now, why):
        self.order += 1
        st.p["order"] = self.order
        self.ready.append(st)

    def pick(self, cpu, now):
        return self.started(_take_best(self.ready, cpu, lambda s: (self.prio(s), s.p["order"])))

    def ran(self, st, ns, now):
        st.p["est"] = st.p.get("est", 0) + ns
        super().ran(st, ns, now)

    def preempts(self, woken, running, now):
        return self.prio(woken) < self.prio(running)

    def worse(self, a, b, now):
        return self.prio(a) > self.prio(b)

    def tick(self, now):
        load = len(self.ready) + sum(1 for c in self.sim.cur if c is not None)
        f = 2 * load / (2 * load + 1)
        for st in self.sim.tasks:
            if "est" in st.p:
                st.p["est"] = st.p["est"] * f + st.nice * self.tick_ns

    def should_yield(self, running, cpu, now):
        mine = self.prio(running)
        return any(self.prio(s) < mine and (s.cpus is None or cpu in s.cpus) for s in self.ready)


class Eevdf(Policy):
    """Linux's EEVDF, simplified to one run queue: each task has a weight (from nice), a virtual
    runtime v and a virtual deadline d = v + slice / weight; the eligible task (v <= the weighted
    average V) with the earliest deadline runs; a woken task that is eligible with an earlier
    deadline than the running one preempts it (what this kernel does: 68% of a CPU-bound program's
    preemptions follow the preempter's wake-up within 0.2 ms, docs/whatif.md); parity=1 is the
    RUN_TO_PARITY reading instead, where only a shorter slice (PREEMPT_SHORT) may cut the running
    one's; slice ends are noticed at the
    next scheduler tick, as without HRTICK. A task that blocks keeps its lag V - v for its return.
    wakeup_preempt=0 is SCHED_BATCH."""

    name = "eevdf"

    def __init__(self, slice, bg_slice, tick, wakeup_preempt, wake_resched, parity):
        super().__init__()
        self.slice, self.bg_slice, self.tick_ns = slice, bg_slice, tick
        self.wakeup_preempt, self.wake_resched, self.parity = wakeup_preempt, wake_resched, parity
        self.ready = []
        self.sum_w = 0
        self.sum_wv = 0.0
        self.v0 = 0.0
        self.yielder = None  # the task that just called sched_yield: the next pick takes another if it can

    def _setup(self, st):
        p = st.p
        if "w" not in p:
            p["w"] = NICE_WEIGHT[max(-20, min(19, st.nice)) + 20]
            sl = self.bg_slice if (st.background and self.bg_slice) else self.slice
            p["slice"] = st.task.slice_ns if getattr(st.task, "slice_ns", None) else sl
            p["lag"] = 0.0
        return p

    def V(self):
        return self.sum_wv / self.sum_w if self.sum_w else self.v0

    def _vslice(self, p):
        return p["slice"] * 1024 / p["w"]

    def add(self, st, now, why):
        p = self._setup(st)
        if why in ("arrive", "wake"):
            V = self.V()
            p["v"] = V - p["lag"] if why == "wake" else V
            p["d"] = p["v"] + (self._vslice(p) / 2 if why == "arrive" else self._vslice(p))
            self.sum_w += p["w"]
            self.sum_wv += p["w"] * p["v"]
        elif why == "preempt" and p["v"] >= p["d"] - 1e-6:  # preempted at its slice's end: update_deadline
            p["d"] = p["v"] + self._vslice(p)
        self.ready.append(st)

    def left(self, st, now):
        p = st.p
        V = self.V()
        limit = max(2 * self._vslice(p), self.tick_ns * 1024 / p["w"])
        p["lag"] = max(-limit, min(limit, V - p["v"]))
        self.sum_w -= p["w"]
        self.sum_wv -= p["w"] * p["v"]
        self.v0 = V if self.sum_w else V
        if not self.sum_w:
            self.sum_wv = 0.0

    def pick(self, cpu, now):
        V = self.V()
        best, bd, fb, fd, yk = -1, None, -1, None, -1
        for k, st in enumerate(self.ready):
            if st.cpus is None or cpu in st.cpus:
                if st is self.yielder:
                    yk = k
                    continue
                p = st.p
                if p["v"] <= V + 1e-6 and (bd is None or p["d"] < bd):
                    best, bd = k, p["d"]
                if fd is None or p["d"] < fd:
                    fb, fd = k, p["d"]
        self.yielder = None
        k = best if best >= 0 else fb if fb >= 0 else yk
        if k < 0:
            return None
        st = self.ready[k]
        self.ready[k] = self.ready[-1]
        self.ready.pop()
        return st

    def quantum(self, st, start):
        p = st.p
        t = max(0.0, (p["d"] - p["v"]) * p["w"] / 1024)
        end = start + int(t + 0.999)
        if self.tick_ns:
            end = -(-end // self.tick_ns) * self.tick_ns  # noticed at the next tick
        return max(1, end - start)

    def ran(self, st, ns, now):
        p = st.p
        dv = ns * 1024 / p["w"]
        p["v"] += dv
        self.sum_wv += p["w"] * dv

    def expired(self, st, now):
        p = st.p
        if p["v"] >= p["d"] - 1e-6:
            p["d"] = p["v"] + self._vslice(p)
            return True
        return False

    def preempts(self, woken, running, now):
        if not self.wakeup_preempt or (self.parity and woken.p["slice"] >= running.p["slice"]):
            return False
        return woken.p["v"] <= self.V() + 1e-6 and woken.p["d"] < running.p["d"]

    def slice_over(self, running, ran_ns):
        # the kernel's enqueue of a woken task runs update_curr, which reschedules a current task
        # past its deadline at once rather than at the next tick (docs/whatif.md, "wake-ups")
        p = running.p
        return self.wake_resched and p["v"] + max(0, ran_ns) * 1024 / p["w"] >= p["d"] - 1e-6

    def worse(self, a, b, now):
        return a.p["d"] > b.p["d"]

    def yielded(self, st, now):
        # yield_task_fair: update_curr (a used-up slice gets its next deadline), then the deadline
        # moves a slice on. 6.18 also moves an eligible yielder's v to its deadline ("forfeit"),
        # but against this model's one V (all CPUs' tasks, where the kernel's is per CPU) that
        # strands the yielder: sysbench's switches came out -42% with it, +0% without (docs/whatif.md)
        p = st.p
        if p["v"] >= p["d"] - 1e-6:
            p["d"] = p["v"] + self._vslice(p)
        p["d"] += self._vslice(p)
        # the kernel's run queue is per CPU, where a yielder with another task queued gives way;
        # on this model's one queue, eligibility is decided against other CPUs' tasks too, so
        # the next pick is told to pass the yielder by
        self.yielder = st


class LinuxRt(Policy):
    """SCHED_FIFO / SCHED_RR for the program's tasks (real-time priority `prio`), with every
    background task below them in a fair class approximated by round robin of one tick. RR's time
    slice `q` is counted in ticks; a preempted real-time task goes back to the head of its queue."""

    name = "sched_rr"

    def __init__(self, q, tick, rr):
        super().__init__()
        self.q_ns, self.tick_ns, self.rr = q, tick, rr
        self.rt = collections.deque()
        self.fair = collections.deque()

    def _rt(self, st):
        return not st.background

    def add(self, st, now, why):
        q = self.rt if self._rt(st) else self.fair
        if why == "preempt":
            q.appendleft(st)
        else:
            q.append(st)

    def pick(self, cpu, now):
        st = _take(self.rt, cpu) or _take(self.fair, cpu)
        if st is not None and st.p.get("used") is None:
            st.p["used"] = 0
        return st

    def quantum(self, st, start):
        if self._rt(st):
            return self.q_ns - st.p["used"] if self.rr else None
        return self.tick_ns or None

    def ran(self, st, ns, now):
        st.p["used"] = st.p.get("used", 0) + ns

    def expired(self, st, now):
        if self._rt(st) and not self.rr:
            return False
        limit = self.q_ns if self._rt(st) else (self.tick_ns or 1 << 62)
        if st.p.get("used", 0) >= limit:
            st.p["used"] = 0
            return True
        return False

    def preempts(self, woken, running, now):
        return self._rt(woken) and not self._rt(running)

    def worse(self, a, b, now):
        return not self._rt(a) and self._rt(b)


# the Rust core's name -> the class of the same policy (oslens.whatif.policy.FORMS maps specs to it)
POLICIES = {
    "fifo": Fifo, "lifo": Lifo, "rr": RoundRobin, "sjf": Sjf, "srt": Srt, "hrrn": Hrrn, "mlfq": Mlfq,
    "unix": UnixDecay, "eevdf": Eevdf, "rt": LinuxRt,
}


def from_native(policy):
    """The Python policy for an oslens.whatif.policy.Policy (the form the Rust core runs)."""
    name, params = policy.native()
    return POLICIES[name](**params)
