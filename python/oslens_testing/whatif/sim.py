"""The Python what-if simulator, the test oracle of the Rust core (crates/native/src/whatif/, the
only engine `oslens whatif` runs; python/oslens/whatif/test_native.py holds both to the same
schedules). The discrete-event simulator: N CPUs, one ready queue owned by a policy, a workload of bursts.

Events are (time, seq, kind, a, b) on a heap: a task arrives, a fixed block ends, a CPU reaches the
point where its task must stop (burst done, quantum over, or a wake-up point of another task).
A context switch costs `switch_ns` of the CPU's time, a move to another CPU `migrate_ns` more.
The policy decides who runs (see policies.Policy); the simulator decides when things happen.
Decision count = every pick the policy made (bench/whatif measures decisions per second)."""

from __future__ import annotations

import heapq

from oslens.whatif.result import BLOCKED, DONE, READY, RUNNING, Segment, SimResult, SimTask
from oslens.whatif.workload import UNTIL, YIELD, Workload
from oslens_testing.whatif.policies import from_native

ARRIVE, UNBLOCK, STOP, TICK = 0, 1, 2, 3


class Simulator:
    def __init__(self, workload: Workload, policy, switch_ns: int = 0, migrate_ns: int = 0,
                 keep_segments: bool = False):
        self.wl = workload
        self.policy = policy
        self.switch_ns = int(switch_ns)
        self.migrate_ns = int(migrate_ns)
        self.keep = keep_segments
        self.segments: list[Segment] = []
        self.tasks = [SimTask(i, t) for i, t in enumerate(workload.tasks)]
        self.ncpu = max(1, workload.ncpus)
        self.cur: list[SimTask | None] = [None] * self.ncpu
        self.since = [0] * self.ncpu  # when the current task started progressing on the CPU
        self.version = [0] * self.ncpu
        self.stop_at = [0] * self.ncpu
        self.last: list[SimTask | None] = [None] * self.ncpu
        self.events: list = []
        self.pending: list[SimTask] = []
        self.seq = 0
        self.decisions = 0
        self.switches = 0
        self.now = 0
        self._index_points()

    def _index_points(self):
        for j, t in enumerate(self.wl.tasks):
            for b, block in enumerate(t.blocks):
                if block.dep is not None:
                    d = block.dep
                    self.tasks[d.task].points.setdefault(d.burst, []).append((d.offset, j, b))
            if t.arrival_dep is not None:
                d = t.arrival_dep
                self.tasks[d.task].points.setdefault(d.burst, []).append((d.offset, j, -1))
        for st in self.tasks:
            for lst in st.points.values():
                lst.sort()

    def push(self, time, kind, a, b=0):
        # arrivals and wake-ups at a time come before the CPU stops of that time
        self.seq += 1
        heapq.heappush(self.events, (time, kind, self.seq, a, b))

    # -- the run -------------------------------------------------------------------------
    def run(self) -> SimResult:
        for st in self.tasks:
            if st.task.arrival_dep is None:
                self.push(st.task.arrival, ARRIVE, st.i)
        self.policy.attach(self)
        period = self.policy.period
        if period:
            self.push(period, TICK, 0)
        events = self.events
        pop = heapq.heappop
        while events:
            time, kind, _s, a, b = pop(events)
            self.now = time
            if kind == STOP:
                if b == self.version[a]:
                    self._stop(a, time)
            elif kind == ARRIVE:
                self._make_ready(self.tasks[a], time, "arrive")
            elif kind == UNBLOCK:
                st = self.tasks[a]
                if st.state == BLOCKED and st.seg == b:
                    self._make_ready(st, time, "wake")
            elif kind == TICK:
                if not events or self._all_done():
                    continue  # nothing else can happen: only tasks waiting for a point never reached
                self.policy.tick(time)
                self._recheck_all(time)
                self.push(time + period, TICK, 0)
            if self.pending and (not events or events[0][0] != time or events[0][1] >= STOP):
                self._place_pending(time)
        stalled = [st.i for st in self.tasks if st.state != DONE]
        ends = [st.done_at for st in self.tasks if st.state == DONE and not st.background]
        starts = [st.task.arrival if st.arrived_at < 0 else st.arrived_at for st in self.tasks if not st.background]
        makespan = (max(ends) - min(starts)) if ends and starts else 0
        return SimResult(self.tasks, makespan, self.decisions, self.switches, self.segments, stalled)

    def _all_done(self) -> bool:
        return all(st.state == DONE for st in self.tasks)

    # -- state changes -------------------------------------------------------------------
    def _make_ready(self, st: SimTask, now: int, why: str):
        if st.arrived_at < 0:
            st.arrived_at = now
        st.state = READY
        st.ready_at = now
        self.policy.add(st, now, why)
        self.pending.append(st)  # placed once every arrival of this instant is in the queue

    def _place_pending(self, now: int):
        pending, self.pending = self.pending, []
        for st in pending:
            if st.state == READY:
                self._place(st, now)

    def _place(self, st: SimTask, now: int):
        """After `st` became ready: an idle CPU takes work, else it may preempt a running task."""
        for c in range(self.ncpu):
            if self.cur[c] is None and st.allowed(c):
                self._dispatch(c, now)
                if st.state != READY:
                    return
        if st.state != READY:
            return
        victim, worst = -1, None
        for c in range(self.ncpu):
            r = self.cur[c]
            if r is not None and st.allowed(c) and (self.policy.preempts(st, r, now)
                                                    or self.policy.slice_over(r, now - self.since[c])):
                if worst is None or self.policy.worse(r, worst, now):
                    victim, worst = c, r
        if victim >= 0:
            self._preempt(victim, now)

    def _recheck_all(self, now: int):
        """After a policy-wide change (priority boost, decay): preempt where the policy says so."""
        for c in range(self.ncpu):
            if self.cur[c] is None:
                self._dispatch(c, now)
        for c in range(self.ncpu):
            r = self.cur[c]
            if r is not None and self.policy.should_yield(r, c, now):
                self._preempt(c, now)

    def _account(self, c: int, now: int) -> SimTask:
        st = self.cur[c]
        ran = now - self.since[c]
        if ran > 0:
            st.progress += ran
            self.policy.ran(st, ran, now)
            if self.keep:
                self.segments.append(Segment(c, st.i, self.since[c], now))
        self.since[c] = now
        return st

    def _preempt(self, c: int, now: int):
        if now < self.since[c] or self.stop_at[c] <= now:
            return  # still paying for the switch in, or stopping now anyway: the policy picks then
        st = self._account(c, now)
        self._fire_points(st, now)
        self.version[c] += 1
        self.cur[c] = None
        st.state = READY
        st.ready_at = now
        st.involuntary += 1
        self.policy.add(st, now, "preempt")
        self._dispatch(c, now)

    def _dispatch(self, c: int, now: int):
        st = self.policy.pick(c, now)
        self.decisions += 1
        while st is not None and now >= st.until:  # a competitor whose time is over leaves
            self._leave(st, now)
            st = self.policy.pick(c, now)
        if st is None:
            self.cur[c] = None
            self.last[c] = None
            return
        cost = 0
        if self.last[c] is not st:
            cost = self.switch_ns
            self.switches += 1
            st.dispatches += 1
        if st.last_cpu >= 0 and st.last_cpu != c:
            cost += self.migrate_ns
        st.waiting += now - st.ready_at
        if st.first_run < 0:
            st.first_run = now
        st.state = RUNNING
        st.last_cpu = c
        self.cur[c] = st
        self.last[c] = st
        self.since[c] = now + cost
        self._plan(c, now + cost)

    def _leave(self, st: SimTask, now: int):
        st.state = DONE
        st.done_at = min(now, st.until)  # a ready competitor is dropped when next seen; it left at `until`
        self.policy.left(st, now)

    def _plan(self, c: int, start: int):
        st = self.cur[c]
        run = min(st.bursts[st.seg] - st.progress, max(0, st.until - start))
        pts = st.points.get(st.seg)
        if pts and st.pi < len(pts):
            run = min(run, max(0, pts[st.pi][0] - st.progress))
        q = self.policy.quantum(st, start)
        if q is not None:
            run = min(run, max(1, q))
        self.version[c] += 1
        self.stop_at[c] = start + run
        self.push(start + run, STOP, c, self.version[c])

    def _fire_points(self, st: SimTask, now: int):
        pts = st.points.get(st.seg)
        while pts and st.pi < len(pts) and pts[st.pi][0] <= st.progress:
            _off, j, b = pts[st.pi]
            st.pi += 1
            target = self.tasks[j]
            if b < 0:
                self.push(now, ARRIVE, j)
            elif target.state == BLOCKED and target.seg == b + 1:
                self.push(now, UNBLOCK, j, b + 1)
            else:
                target.fired.add(b)

    def _stop(self, c: int, now: int):
        st = self._account(c, now)
        self._fire_points(st, now)
        if now >= st.until:
            self._leave(st, now)
            self.cur[c] = None
            self.last[c] = None
            self.version[c] += 1
            self._dispatch(c, now)
            return
        if st.progress >= st.bursts[st.seg]:
            if st.seg < len(st.blocks) and st.blocks[st.seg].kind == YIELD:
                self._yield(c, st, now)
                return
            if self._next_burst(st, now):
                self._plan(c, now)  # the block was already over: keep running, no switch
                return
            self.cur[c] = None
            self.last[c] = None  # it left the CPU: running it again is a new switch
            self.version[c] += 1
            self._dispatch(c, now)
            return
        if self.policy.expired(st, now):
            self._requeue(c, st, now, "expire")
            return
        self._plan(c, now)

    def _requeue(self, c: int, st: SimTask, now: int, why: str):
        """`st` goes back to the ready queue and the CPU picks again (maybe `st` itself)."""
        self.cur[c] = None
        self.version[c] += 1
        st.state = READY
        st.ready_at = now
        self.policy.add(st, now, why)
        self._dispatch(c, now)
        if self.cur[c] is not st:
            st.involuntary += 1

    def _yield(self, c: int, st: SimTask, now: int):
        """sched_yield at the end of a burst: when another ready task may run on this CPU, the
        policy requeues the yielder behind it (EEVDF: its deadline a slice later); alone, it goes on."""
        st.seg += 1
        st.progress = 0
        st.pi = 0
        if not self._others_ready(c):
            self._plan(c, now)
            return
        self.policy.yielded(st, now)
        self._requeue(c, st, now, "yield")

    def _others_ready(self, c: int) -> bool:
        return any(t.state == READY and t.allowed(c) for t in self.tasks)

    def _next_burst(self, st: SimTask, now: int) -> bool:
        """The burst is done: block, or exit. True when the task goes straight on running."""
        b = st.seg
        self.policy.burst_done(st, now)
        if b >= len(st.blocks):
            st.state = DONE
            st.done_at = now
            self.policy.left(st, now)
            return False
        block = st.blocks[b]
        st.seg += 1
        st.progress = 0
        st.pi = 0
        if block.dep is not None:
            if b in st.fired:
                return True
            st.state = BLOCKED
        elif block.kind == UNTIL:
            if block.duration <= now:
                return True
            st.state = BLOCKED
            self.push(block.duration, UNBLOCK, st.i, st.seg)
        elif block.duration <= 0:
            return True
        else:
            st.state = BLOCKED
            self.push(now + block.duration, UNBLOCK, st.i, st.seg)
        st.voluntary += 1
        self.policy.left(st, now)
        return False


def simulate(workload: Workload, policy, switch_ns: int = 0, migrate_ns: int = 0,
             keep_segments: bool = False) -> SimResult:
    """The Python simulation, with the signature of oslens.whatif.engine.simulate."""
    return Simulator(workload, from_native(policy), switch_ns, migrate_ns, keep_segments).run()


def engines():
    """{"python": this oracle, "native": the runtime engine}, for tests that run both."""
    from oslens.whatif import engine

    return {"python": simulate, "native": engine.simulate}
