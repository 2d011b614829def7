"""`oslens record -- CMD`: run a program with recording on and keep its trace."""

import os
import sys
from pathlib import Path

from oslens.capture.session import Session, default_trace_dir
from oslens.commands import _calibration, _flight, _options
from oslens.errors import OslensError

NAME = "record"
# `--phases`: ~10 samples per 10 ms interval of a busy thread; odd, so it does not beat with
# periodic work (perf's own default is 4000 Hz; 999 keeps the collector's cost low).
PHASES_SAMPLE_HZ = 999
HELP = "run a program with oslens recording on (application and kernel events, one clock)"


def add_arguments(parser):
    _calibration.add_option(parser)
    parser.add_argument("-o", "--output", help="trace directory (default: traces/<program>-<time>)")
    parser.add_argument("-f", "--force", action="store_true", help="replace an existing trace directory")
    parser.add_argument("--events", type=_options.event_sets, help="kernel event sets, comma separated (sched,syscalls,faults,io,irq)")
    parser.add_argument("--system-wide", action="store_true", help="keep kernel events of every task")
    parser.add_argument("--sample", type=_options.positive_int, metavar="HZ", help="sample instruction pointers at HZ")
    parser.add_argument("--phases", action="store_true", help=f"record for `oslens phases`: sample instruction pointers (at {PHASES_SAMPLE_HZ} Hz unless --sample says otherwise)")
    parser.add_argument("--no-kernel", action="store_true", help="record application events only")
    parser.add_argument("--no-import", action="store_true", help="do not import the trace into tables afterwards")
    parser.add_argument("--buffer-mb", type=_options.buffer_mb, help="per-thread buffer size in MiB (default 64)")
    parser.add_argument("--on-full", choices=["drop", "block"], help="when a buffer fills: drop and count (default) or pause to open another")
    parser.add_argument("--prepare-buffers", action="store_true", help="prepare each thread's whole buffer before its first event and write records in place, so no trace page is prepared or copied during the run: the cheapest way to record dense events (costs the buffer's memory and a pause per thread up front, recorded)")
    parser.add_argument("--limit-events", type=_options.positive_int, help="stop recording after this many events")
    parser.add_argument("--limit-bytes", type=_options.positive_int, help="stop recording after this many bytes of records")
    parser.add_argument("--disabled", action="store_true", help="start with recording off (the program calls osl_enable)")
    parser.add_argument("--counter-period-us", type=_options.positive_int, help="record counter values at most this often (default 1000)")
    parser.add_argument("--preload", dest="preload", action="store_true", default=None, help="trace pthread locks, barriers, condition variables, fork and exec through LD_PRELOAD (default for dynamically linked programs)")
    parser.add_argument("--no-preload", dest="preload", action="store_false", help="do not preload the synchronisation wrappers")
    parser.add_argument("--sync", choices=["contended", "all"], default="contended",
                        help="lock acquisitions recorded one by one: contended ones (default; uncontended ones are counted per thread and lock, table lock_counts) or all (needed by compare-order)")
    parser.add_argument("--trace-python", metavar="FILTER", help="trace Python function calls whose qualified name matches FILTER (a glob; '*' for all)")
    parser.add_argument("--in-vivo", type=_options.positive_int, metavar="N", help="run N times with and N times without instrumentation (alternating) and report the in-vivo cost per event next to the in-vitro one")
    parser.add_argument("--func-filter", metavar="GLOBS", help="keep only functions matching these comma-separated globs (!GLOB excludes) from -finstrument-functions builds")
    parser.add_argument("--func-min-ns", type=_options.non_negative_int, metavar="NS", help="do not record function calls shorter than NS (their callers are kept)")
    parser.add_argument("-p", "--pid", metavar="PID[,PID...]", help="attach to running processes instead of starting one: "
                        "kernel events of their threads and of whatever they create, until Ctrl-C, --duration or their exit")
    parser.add_argument("--duration", type=_options.duration_s, metavar="TIME", help="with -p: detach after TIME (10s, 500ms, 2m)")
    _flight.add_arguments(parser)
    parser.add_argument("command", nargs="*", metavar="-- CMD", help="the program and its arguments")


def recording_options(args) -> dict:
    """The session's options from record's command line (in-vivo runs start from the same)."""
    return {
        "force": args.force,
        "events": args.events,
        "system_wide": args.system_wide or None,
        "sample_hz": args.sample or (PHASES_SAMPLE_HZ if args.phases else None),
        "no_kernel": args.no_kernel or None,
        "buffer_mb": args.buffer_mb,
        "on_full": args.on_full,
        "limit_events": args.limit_events,
        "limit_bytes": args.limit_bytes,
        "disabled": args.disabled or None,
        "counter_period_us": args.counter_period_us,
        "prepare_buffers": 1 if args.prepare_buffers else None,
        "preload": args.preload,
        "sync": args.sync,
        "trace_python": args.trace_python,
        "func_filter": args.func_filter,
        "func_min_ns": args.func_min_ns,
        "command": args.command,
        **_flight.options(args),
    }


def run(args):
    if args.in_vivo:
        from oslens.calibrate.in_vivo import run_in_vivo
        return run_in_vivo(args, recording_options(args))
    if args.pid:
        return _attach(args)
    if args.duration:
        raise OslensError("--duration is for -p PID (a program oslens starts runs until it exits)", 2)
    command = args.command
    if not command:
        raise OslensError("no program given: use 'oslens record [options] -- PROGRAM ARGS', or 'oslens record -p PID' for a running one", 2)
    trace = Path(args.output) if args.output else default_trace_dir(command)
    options = recording_options(args)
    session = Session(trace, command, options)
    session.prepare()
    status = session.run()
    announced = session.collector is not None  # the collector said its tier when it attached
    try:
        meta = session.finish()
    except OSError as err:  # the trace's file system was removed or made read-only mid-run
        raise OslensError(f"the program exited with status {status}, but its trace {trace} can no longer be written "
                          f"({err.strerror or err}): its file system was removed or is read-only", status or 1) from None
    _summarise(trace, meta, announced)
    if meta.get("flight"):
        _flight.summarise(trace, meta["flight"])
    if not args.no_import and _import_within_memory(trace) and not meta.get("flight"):
        _crosscheck(trace)  # a flight recording keeps only its last window: nothing to hold to the run's figures
    return status


def _attach(args) -> int:
    """`record -p`: records running processes until Ctrl-C, --duration or their exit."""
    from oslens.capture.attach import AttachSession, check_pids

    if args.command:
        raise OslensError("give either -p PID or a program to run, not both", 2)
    pids = check_pids(args.pid)
    trace = Path(args.output) if args.output else default_trace_dir([f"pid{pids[0]}"])
    session = AttachSession(trace, pids, recording_options(args), args.duration)
    session.prepare()
    status = session.run()
    meta = session.finish()
    attach = meta["attach"]
    print(f"oslens: detached ({attach['ended_by'] or 'done'}) after {(attach['detach_ns'] - attach['ts_ns']) / 1e9:.2f} s; "
          f"{attach.get('threads', 0)} threads were running at the attach -> {trace}", file=sys.stderr)
    if meta.get("flight"):
        _flight.summarise(trace, meta["flight"])
    if not args.no_import and _import_within_memory(trace) and not meta.get("flight"):
        _crosscheck(trace)  # the attach window's counts against the threads' /proc readings
    return status


def _crosscheck(trace: Path) -> None:
    """Checks the trace's counts against the kernel's figures for the same run, says so in one
    line and keeps the result in meta (analysis/crosscheck.py, docs/report.md)."""
    from oslens import store
    from oslens.analysis import crosscheck
    from oslens.store import meta_update

    con = store.open_trace(trace, quiet=True)
    try:
        table = crosscheck.crosscheck(con)
    finally:
        con.close()
    line = crosscheck.summary_line(table)
    if line is None:
        return
    result = crosscheck.to_meta(table)
    meta_update.add(trace, "crosscheck", result)
    print(f"oslens: {'warning: ' if not result['agrees'] else ''}cross-check: {line}", file=sys.stderr)


def _summarise(trace: Path, meta: dict, announced: bool = False) -> None:
    threads = meta["threads"]
    records = sum(t["records"] for t in threads)
    pids = {t["pid"] for t in threads}
    line = f"oslens: {records} records from {len(threads)} threads in {len(pids)} processes -> {trace}"
    if meta["lost_events"]:
        line += f" ({meta['lost_events']} events lost: buffers full)"
    print(line, file=sys.stderr)
    helpers = meta.get("recorder_helpers") or []
    copied = sum(h["ring_slots_copied"] for h in helpers)
    self_copied = sum(t.get("ring_slots_self_copied", 0) for t in threads)
    if self_copied and not copied and not any(h["cpu_ns"] for h in helpers):
        # no helper ever ran (its thread could not start: out of memory, a thread limit)
        print(f"oslens: no recorder helper thread ran: the program's threads copied all {self_copied} buffer "
              "slots themselves", file=sys.stderr)
    elif copied + self_copied:
        print(f"oslens: recording cost outside the program's threads: {sum(h['cpu_ns'] for h in helpers) / 1e6:.1f} ms CPU "
              f"in the helper ({copied} buffer slots copied to the trace; {self_copied} copied by the program's threads "
              "while the helper was behind)",
              file=sys.stderr)
    hint = _copy_out_hint(copied, self_copied)
    if hint:
        print(hint, file=sys.stderr)
    kernel = meta.get("kernel") or {}
    if kernel.get("tier") and (not announced or "exited with status" in kernel.get("reason", "")):
        print(f"oslens: kernel events: {kernel['tier']}" + (f" ({kernel['reason']})" if kernel.get("reason") else ""), file=sys.stderr)
    exit_info = meta.get("exit", {})
    if "signal" in exit_info:
        print(f"oslens: the program was killed by {exit_info['signal_name']}; events committed before are kept", file=sys.stderr)
    for d in meta["damage"]:
        print(f"oslens: warning: {d['file']}: {d['reason']}", file=sys.stderr)


# Above this share of slots copied by the program's own threads, the copy-out is a visible part
# of what recording cost them (docs/recorder.md: on two busy threads it is ~40%).
SELF_COPY_HINT_SHARE = 0.1


def _copy_out_hint(copied: int, self_copied: int) -> str | None:
    """A hint when the program's threads copied many staging slots out themselves: the
    helper could not keep up, and prepared buffers avoid the copy-out altogether."""
    total = copied + self_copied
    if not total or self_copied / total < SELF_COPY_HINT_SHARE:
        return None
    return (f"oslens: hint: the program's threads copied {100 * self_copied / total:.0f}% of the buffer slots themselves "
            "(recorded as pauses); --prepare-buffers writes records in place with no copy-out, "
            "at the cost of each thread's buffer memory up front")


def _import(trace: Path) -> None:
    from oslens import store

    store.import_trace(trace)


def _import_within_memory(trace: Path) -> bool:
    """Imports the trace, True when it did. Under a memory cgroup too small for an import it
    says how to import it elsewhere instead; under any cap the import runs in a child, so that
    an OOM kill ends the import, never `oslens record` and the program's exit status (issue 30)."""
    from oslens.store import memory_budget

    why = memory_budget.refusal(trace)
    if why:
        print(why, file=sys.stderr)
        return False
    if memory_budget.headroom() is None:
        _import(trace)
        return True
    return _import_in_child(trace)


def _import_in_child(trace: Path) -> bool:
    """_import in a forked child; its OslensError comes back through a pipe and is raised here."""
    import json
    import signal

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: import, report an error, never return into the CLI
        os.close(read_end)
        code = 0
        try:
            _import(trace)
        except OslensError as err:
            os.write(write_end, json.dumps({"message": str(err), "code": err.exit_code}).encode())
            code = 1
        except BaseException as err:  # noqa: BLE001  (reported to the parent, which raises it)
            os.write(write_end, json.dumps({"message": f"the import failed: {err!r}", "code": 1}).encode())
            code = 1
        os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        said = pipe.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        print(f"oslens: the import was killed by {signal.Signals(os.WTERMSIG(status)).name} (the memory cgroup's "
              f"OOM killer?); the raw trace is whole: run 'oslens import {trace}' where more memory is free",
              file=sys.stderr)
        return False
    if said:
        err = json.loads(said)
        raise OslensError(err["message"], err["code"])
    return True
