"""`oslens tune --plan PLAN -- CMD`: run a program under an OS policy plan and restore
everything afterwards.

Global settings of the plan are journaled and applied before the program starts; the
program starts in the plan's `default` phase; `osl_adapt(PHASE)` / `oslens.adapt(PHASE)`
switch it to other phases (OSLENS_PLAN names the resolved plan). At the end — normal exit,
SIGINT, SIGTERM or SIGHUP — every global setting is restored and the run's cgroup removed;
after a SIGKILL of tune the program is killed too (parent-death signal) and the next oslens
run restores from the journal."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from oslens.capture.child import Child
from oslens.control import apply, config, journal, kernel, plan as planmod
from oslens.control.sysfs import default_root as sysroot
from oslens.errors import OslensError

NAME = "tune"
HELP = "run a program with an OS policy plan applied per phase, then restore every setting"

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def add_arguments(parser):
    parser.add_argument("--plan", required=True, help="the plan (TOML); check it with 'oslens config check PLAN'")
    parser.add_argument("--record", action="store_true", help="record the run (via 'oslens record') into -o DIR")
    parser.add_argument("-o", "--output", help="trace directory when recording (default: traces/tune-<time>)")
    parser.add_argument("--no-kernel", action="store_true", help="when recording, record application events only")
    parser.add_argument("-q", "--quiet", action="store_true", help="print only warnings and errors")
    parser.add_argument("command", nargs="*", metavar="-- CMD", help="the program and its arguments")


def say(args, text: str) -> None:
    if not args.quiet:
        print(f"oslens: tune: {text}", file=sys.stderr)


def warn(text: str) -> None:
    print(f"oslens: warning: {text}", file=sys.stderr)


def recover_stale(quiet: bool = False) -> None:
    """Restore what an earlier run that was SIGKILLed left changed."""
    done, problems = journal.recover()
    for line in done:
        if not quiet:
            print(f"oslens: {line}", file=sys.stderr)
    for line in problems:
        warn(line)


def baseline() -> dict:
    try:
        me = kernel.sched_getattr(0)
        cls, prio = me.cls, me.priority
    except OSError:
        cls, prio = "other", 0
    if cls not in kernel.CLASS_POLICY or cls == "deadline":
        cls, prio = "other", 0
    return {"class": cls, "priority": prio, "nice": os.getpriority(os.PRIO_PROCESS, 0),
            "affinity": kernel.get_affinity(0), "thp_disable": kernel.get_thp_disable()}


class _Interrupted(Exception):
    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


class Runner:
    def __init__(self, args, command):
        self.args = args
        self.command = command
        self.child = None
        self.signum = None
        self.restoring = False

    def _on_signal(self, signum, _frame):
        self.signum = self.signum or signum
        if self.restoring:
            return
        if self.child is not None and self.child.returncode is None:
            self.child.send_signal(signum)
        else:
            raise _Interrupted(signum)

    def spawn(self, argv, env, cgroups, default_phase, fake=False) -> Child:
        """fork + exec with the run's cgroup and default phase applied in the child."""

        def prepare(parent: int) -> None:
            for s in FORWARDED:
                signal.signal(s, signal.SIG_DFL)
            kernel.set_parent_death_signal(signal.SIGKILL)
            if os.getppid() != parent:
                os._exit(137)
            for cg in cgroups:
                apply.join_cgroup(cg, create=fake)
            err, _bits = apply.apply_task(default_phase) if default_phase else (0, 0)
            if err:
                os.write(2, f"oslens: warning: the default phase was applied only in part: "
                            f"{os.strerror(err)}\n".encode())

        self.child = Child(argv, env, prepare)
        self.child.started()
        return self.child

    def wait(self) -> int:
        return self.child.wait()


def _log(trace: Path | None, events: list[dict]) -> None:
    if trace is None:
        return
    try:
        trace.mkdir(parents=True, exist_ok=True)
        with open(trace / "control.jsonl", "a") as f:
            for e in events:
                f.write(json.dumps(e) + "\n")
    except OSError as e:
        warn(f"cannot write {trace / 'control.jsonl'} ({e.strerror}); the changes are not in the trace")


def run(args):
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise OslensError("no program given: use 'oslens tune --plan PLAN -- PROGRAM ARGS'", 2)
    recover_stale(args.quiet)

    root = sysroot()
    fake = root != Path("/")
    machine = config.discover(root)
    base = baseline()
    plan = planmod.load(args.plan, machine, base["nice"])
    if plan.errors:
        for line in plan.errors:
            print(f"oslens: error: {args.plan}: {line}", file=sys.stderr)
        raise OslensError(f"the plan has {len(plan.errors)} problem(s); fix them "
                          f"(check with 'oslens config check {args.plan}')", 2)
    for line in plan.warnings:
        warn(f"{args.plan}: {line}")
    planmod.drop_skipped(plan)
    resolved = planmod.resolve(plan, base)

    trace = None
    if args.record:
        trace = Path(args.output) if args.output else Path("traces") / time.strftime("tune-%Y%m%d-%H%M%S")
        trace = trace.resolve()
    jr = journal.Journal(command=command)
    state_dir = jr.dir
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    plan_file = state_dir / f"plan-{os.getpid()}.json"
    resolved["phase_names"] = sorted(resolved["phases"])
    plan_file.write_text(json.dumps(resolved, indent=1))
    plan_file.chmod(0o644)
    os.chmod(state_dir, 0o755)

    runner = Runner(args, command)
    old_handlers = {s: signal.signal(s, runner._on_signal) for s in FORWARDED}
    events: list[dict] = []
    status = 0
    usage = None
    try:
        gstate = apply.apply_globals(plan.globals, jr, root, os.getpid())
        for c in gstate.changes:
            events.append({"t_ns": time.monotonic_ns(), "kind": "global", **c})
            if c["old"] is not None:
                say(args, f"{c['what']} = {c['new']} (was {c['old']})")
            else:
                say(args, f"{c['what']} = {c['new']} in cgroup {c.get('cgroup')}")
        env = dict(os.environ)
        env["OSLENS_PLAN"] = str(plan_file)
        argv = command
        if trace is not None:  # `oslens record` sets OSLENS_TRACE for the program itself
            argv = [sys.executable, "-m", "oslens.cli", "record", "--no-import", "-o", str(trace),
                    *(["--no-kernel"] if args.no_kernel else []), "--", *command]
        default = resolved["phases"].get("default")
        events.append({"t_ns": time.monotonic_ns(), "kind": "phase", "phase": "default", "policy": default})
        runner.spawn(argv, env, gstate.cgroups, default, fake)
        status = runner.wait()
        if gstate.cgroup is not None:
            usage = apply.cgroup_usage(gstate.cgroup, gstate.cgroup_version)
    except _Interrupted as e:
        runner.signum = e.signum
    finally:
        runner.restoring = True
        if runner.child is not None and runner.child.returncode is None:  # an error between spawn and wait:
            try:  # never leave the program behind
                os.kill(runner.child.pid, signal.SIGKILL)
                os.waitpid(runner.child.pid, 0)
            except OSError:
                pass
        problems = jr.restore()
        for e in reversed(jr.entries):
            events.append({"t_ns": time.monotonic_ns(), "kind": "restore", "what": e["what"],
                           "path": e["path"], "value": e.get("old"), "ok": bool(e.get("done"))})
        try:
            plan_file.unlink()
        except FileNotFoundError:
            pass
        for line in problems:
            warn(line)
        for s, h in old_handlers.items():
            signal.signal(s, h)
    if usage:
        events.append({"t_ns": time.monotonic_ns(), "kind": "usage", **usage})
        say(args, f"memory cgroup: peak {usage['peak_bytes']} bytes, limit reached {usage['limit_hits']} times")
        if usage.get("oom_kills"):
            warn(f"the memory cap made the kernel kill {usage['oom_kills']} process(es) of the run (OOM killer); "
                 "raise memory_max if that was not the point")
    if jr.entries:
        say(args, f"restored {sum(1 for e in jr.entries if e.get('done'))} of {len(jr.entries)} global settings")
    _log(trace, events)
    if trace is not None:
        try:
            (trace / "plan.json").write_text(json.dumps(resolved, indent=1))
            from oslens import store
            store.import_trace(trace)
        except Exception as e:  # noqa: BLE001 - the run itself succeeded
            warn(f"the trace in {trace} was not imported ({e}); run 'oslens report {trace}'")
    if runner.signum is not None:
        return 128 + runner.signum
    if status < 0:
        return 128 - status
    return status


if __name__ == "__main__":  # runs without the CLI's other commands (e.g. under a bare python3)
    from oslens.commands.invoke import standalone
    sys.exit(standalone(sys.modules[__name__]))
