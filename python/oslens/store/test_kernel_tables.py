"""build_kernel_tables on synthetic per-CPU kernel chunks with known answers, each built by the
numpy oracle too and compared with it, row for row and type for type."""

import copy

import numpy as np
import pyarrow as pa
import pytest

from oslens import _native
from oslens.capture import raw
from oslens.store import held, kernel_fields as kt, kernel_tables
from oslens_testing.store import kernel_tables_oracle

NAME = raw.NAME


def chunk(tmp_path, cpu, records, names=(), dropped=0, seq=0):
    """records: (ts, id, kind, a, b); names: (ts, id, class, text) interleaved by time."""
    rows = [(ts, i, cpu, kind, a, b) for ts, i, kind, a, b in records]
    # NAME records go through `names=` (written first); give them times by interleaving as
    # NAME-kind rows is not possible with write_chunk, so the reader pairs them in file order.
    path = tmp_path / f"kernel-cpu{cpu}-{seq}.osl"
    _native.write_chunk(
        str(path),
        {"source": raw.SOURCE_KERNEL_CPU, "clock": raw.CLOCK_MONOTONIC_NS, "pid": 0, "tid": 0, "cpu": cpu,
         "dropped_events": dropped},
        rows,
        names=[(i, cls, 0, text) for _ts, i, cls, text in names],
    )
    return raw.read_chunk(path)


def hi(pid):
    return pid << 32


def same_tables(got: dict, want: dict) -> None:
    """The native pass and the oracle agree on every table: names, columns, types and rows."""
    assert sorted(got) == sorted(want)
    for name in want:
        g, w = got[name], want[name]
        assert g.schema.names == w.schema.names, name
        assert [f.type for f in g.schema] == [f.type if not pa.types.is_dictionary(f.type) else f.type.value_type
                                             for f in w.schema], name
        assert g.to_pylist() == w.to_pylist(), name


def split(chunks, size):
    """Each chunk cut into chunks of `size` records (its names with the piece holding their NAME
    records, its header's losses with the first), so that every pair crosses chunks."""
    out = []
    for c in chunks:
        r = c.records
        is_name = r["kind"] == raw.NAME
        aligned = int(is_name.sum()) == len(c.names)
        for lo in range(0, max(len(r), 1), size):
            piece = copy.copy(c)
            piece.records = r[lo:lo + size]
            before, inside = int(is_name[:lo].sum()), int(is_name[lo:lo + size].sum())
            piece.names = c.names[before:before + inside] if aligned else (c.names if lo == 0 else [])
            if c.header and lo:
                piece.header = {**c.header, "dropped_events": 0}
            out.append(piece)
    return out


def let_go(chunks):
    """The chunks with their records let go, read again when the pass reaches them."""
    out = []
    for c in chunks:
        piece = copy.copy(c)
        piece.records = held.LetGo(len(c.records), lambda r=c.records: np.array(r))
        out.append(piece)
    return out


def build(chunks, meta=None):
    """The tables as the import builds them, checked against the oracle, and again with the
    chunks cut into chunks of 1 and 3 records (every pair and neighbour across two chunks) and
    with their records let go (read again when the merge reaches them)."""
    want = kernel_tables_oracle.build_kernel_tables_oracle(chunks, meta or {})
    got = kernel_tables.build_kernel_tables(chunks, meta or {})
    same_tables(got, want)
    same_tables(kernel_tables.build_kernel_tables(let_go(chunks), meta or {}), want)
    for rows in (1, 3):
        pieces = split(chunks, rows)
        same_tables(kernel_tables.build_kernel_tables(pieces, meta or {}),
                    kernel_tables_oracle.build_kernel_tables_oracle(pieces, meta or {}))
    return got


def test_switches_slices_and_states(tmp_path):
    A, B, X = 100, 101, 7
    recs = [
        (10, 0, kt.TRACED, 0, 0),
        (100, A, kt.SWITCH, B | hi(A), 1 | (120 << 32)),  # A sleeps, B runs
        (200, B, kt.SWITCH, X | hi(A), 0),  # B preempted by X
        (300, X, kt.SWITCH, A | hi(X), 0x100),  # X -> A (preempted)
        (400, A, kt.SWITCH, 0 | hi(A), 2),  # A in D, idle runs
    ]
    c = chunk(tmp_path, 1, recs, names=[(0, A, kt.NAME_TASK, "alpha"), (0, B, kt.NAME_TASK, "beta"), (0, X, kt.NAME_TASK, "kworker")])
    t = build([c], {"pid": A})
    sw = t["switches"].to_pylist()
    assert [s["prev_state"] for s in sw] == ["S", "R", "R", "D"]
    assert sw[0]["prev_comm"] == "alpha" and sw[0]["next_comm"] == "beta" and sw[0]["prev_prio"] == 120
    assert sw[1]["next_pid"] == X and sw[1]["next_tid"] == X
    assert sw[3]["next_comm"] == "<idle>" and sw[3]["next_pid"] == 0
    sl = t["cpu_slices"].to_pylist()
    assert [(s["tid"], s["start_ns"], s["end_ns"]) for s in sl] == [(B, 100, 200), (X, 200, 300), (A, 300, 400)]
    assert sl[0]["pid"] == A  # B is a thread of A (from its switch-out's pid)
    assert all(s["cpu"] == 1 for s in sl)


def test_slices_skip_gaps_left_by_filtering(tmp_path):
    # X took the CPU from A, then (unrecorded) Y ran, then Y gave it back to A
    recs = [(100, 5, kt.SWITCH, 9 | hi(5), 0), (300, 11, kt.SWITCH, 5 | hi(11), 1)]
    t = build([chunk(tmp_path, 0, recs)])
    assert t["cpu_slices"].num_rows == 0
    assert t["switches"].num_rows == 2


def test_a_traced_tasks_lost_switch_in_starts_its_slice_at_the_evidence(tmp_path):
    # A (traced) is preempted on CPU 0 by Y at 100; Y's switch back to A is not delivered; A is
    # switched off at 500: it ran for part of 100-500. On CPU 1, A ran 600-700, then was switched
    # off CPU 0 at 900 after C left CPU 0 at 650: its slice starts at its own switch-off, 700.
    # U (not traced) shows the same gap on CPU 1 and gets no slice (its switches are filtered).
    A, C, Y, Z, U = 100, 101, 7, 8, 300
    cpu0 = [(10, A, kt.TRACED, 0, 0), (20, A, kt.FORK, C | hi(C), A | (0x11 << 32)),
            (100, A, kt.SWITCH, Y | hi(A), 0), (500, A, kt.SWITCH, 0 | hi(A), 1),
            (650, C, kt.SWITCH, 0 | hi(A), 1), (900, A, kt.SWITCH, C | hi(A), 1)]
    cpu1 = [(600, 0, kt.SWITCH, A | 0, 0), (700, A, kt.SWITCH, Z | hi(A), 0), (800, U, kt.SWITCH, C | hi(U), 1)]
    t = build([chunk(tmp_path, 0, cpu0), chunk(tmp_path, 1, cpu1, seq=1)], {"pid": A})
    sl = [(s["tid"], s["cpu"], s["start_ns"], s["end_ns"], s["start_inferred"]) for s in t["cpu_slices"].to_pylist()]
    assert (A, 0, 100, 500, True) in sl and (A, 0, 700, 900, True) in sl
    assert (A, 1, 600, 700, False) in sl and (C, 0, 500, 650, True) in sl
    assert not [s for s in sl if s[0] == U and s[4]]
    # system-wide every task's switches are kept, so U's gap is inferred too
    t = build([chunk(tmp_path, 0, cpu0, seq=2), chunk(tmp_path, 1, cpu1, seq=3)],
              {"pid": A, "settings": {"system_wide": True}})
    assert (U, 1, 700, 800, True) in [(s["tid"], s["cpu"], s["start_ns"], s["end_ns"], s["start_inferred"])
                                      for s in t["cpu_slices"].to_pylist()]


def test_a_lost_switch_ins_window_starts_no_earlier_than_the_wakeup(tmp_path):
    # A goes to sleep at 100 (Y runs), is woken at 350 and again at 420 (while it runs: a wait
    # that lost the race), and is switched off at 500, its switch-in lost: it ran for part of
    # 350-500, not before its first wakeup. C, preempted at 100 on CPU 1 (runnable: no wakeup
    # needed to run again), keeps the window from that switch-off although a wakeup came at 200.
    A, C, Y, Z = 100, 101, 7, 8
    cpu0 = [(10, A, kt.TRACED, 0, 0), (20, A, kt.FORK, C | hi(C), A | (0x11 << 32)),
            (100, A, kt.SWITCH, Y | hi(A), 1), (350, Y, kt.WAKEUP, A | hi(Y), 0 | (120 << 32)),
            (420, Z, kt.WAKEUP, A | hi(Z), 0 | (120 << 32)), (500, A, kt.SWITCH, Y | hi(A), 1)]
    cpu1 = [(100, C, kt.SWITCH, Z | hi(A), 0), (200, Z, kt.WAKEUP, C | hi(Z), 1 | (120 << 32)),
            (400, C, kt.SWITCH, Z | hi(A), 1)]
    t = build([chunk(tmp_path, 0, cpu0), chunk(tmp_path, 1, cpu1, seq=1)], {"pid": A})
    sl = {(s["tid"], s["start_ns"], s["end_ns"]) for s in t["cpu_slices"].to_pylist() if s["start_inferred"]}
    assert sl == {(A, 350, 500), (C, 100, 400)}


def test_syscalls_pair_per_thread_and_keep_unmatched(tmp_path):
    P = 50
    c0 = chunk(tmp_path, 0, [
        (5, P, kt.SYS_EXIT, 0 | hi(P), 1),  # read that began before attach
        (10, P, kt.SYS_ENTER, 39 | hi(P), 0),
        (12, P + 1, kt.SYS_ENTER, 1 | hi(P), 3),
        (15, P, kt.SYS_EXIT, 39 | hi(P), P),
        (40, P, kt.SYS_ENTER, 231 | hi(P), 0),  # exit_group never returns
    ])
    c1 = chunk(tmp_path, 1, [(20, P + 1, kt.SYS_EXIT, 1 | hi(P), (-9) & (2**64 - 1))])
    sc = build([c0, c1])["syscalls"].to_pylist()
    by = {(r["tid"], r["name"]): r for r in sc}
    assert by[(P, "getpid")]["start_ns"] == 10 and by[(P, "getpid")]["end_ns"] == 15 and by[(P, "getpid")]["ret"] == P
    assert by[(P + 1, "write")]["ret"] == -9 and by[(P + 1, "write")]["end_ns"] == 20  # across CPUs
    assert by[(P, "read")]["start_ns"] is None and by[(P, "read")]["end_ns"] == 5
    assert by[(P, "exit_group")]["end_ns"] is None and by[(P, "exit_group")]["ret"] is None
    assert all(r["pid"] == P for r in sc)
    assert kt.syscall_name(100000) == "syscall_100000"


def _calls(tmp_path, recs):
    return [(r["tid"], r["name"], r["start_ns"], r["end_ns"], r["ret"]) for r in build([chunk(tmp_path, 0, recs)])["syscalls"].to_pylist()]


NEG = 2**64 - 1


def test_rt_sigreturn_exit_with_nr_minus_one_closes_its_enter(tmp_path):
    P = 60
    calls = _calls(tmp_path, [
        (10, P, kt.SYS_ENTER, 62 | hi(P), 0), (12, P, kt.SYS_EXIT, 62 | hi(P), 0),  # kill(self)
        (20, P, kt.SYS_ENTER, 15 | hi(P), 0), (21, P, kt.SYS_EXIT, (-1 & 0xFFFFFFFF) | hi(P), 7),  # rt_sigreturn
        (30, P, kt.SYS_ENTER, 39 | hi(P), 0), (31, P, kt.SYS_EXIT, 39 | hi(P), P),
    ])
    assert calls == [(P, "kill", 10, 12, 0), (P, "rt_sigreturn", 20, 21, 7), (P, "getpid", 30, 31, P)]


def test_clone_returns_once_in_the_parent_and_the_child_makes_no_row(tmp_path):
    P, C, T = 70, 71, 72
    calls = _calls(tmp_path, [
        (10, P, kt.SYS_ENTER, 56 | hi(P), 0), (11, P, kt.FORK, C | hi(C), P), (12, C, kt.SYS_EXIT, 56 | hi(C), 0),
        (13, P, kt.SYS_EXIT, 56 | hi(P), C),
        (20, P, kt.SYS_ENTER, 435 | hi(P), 0), (22, T, kt.SYS_EXIT, 435 | hi(P), 0), (23, P, kt.SYS_EXIT, 435 | hi(P), T),
        (30, P, kt.SYS_ENTER, 57 | hi(P), 0), (31, P, kt.SYS_EXIT, 57 | hi(P), (-11) & NEG),  # fork failed: EAGAIN
        (40, P, kt.SYS_ENTER, 58 | hi(P), 0), (41, C + 10, kt.SYS_EXIT, 58 | hi(C + 10), 0), (45, P, kt.SYS_EXIT, 58 | hi(P), C + 10),
    ])
    assert calls == [(P, "clone", 10, 13, C), (P, "clone3", 20, 23, T), (P, "fork", 30, 31, -11), (P, "vfork", 40, 45, C + 10)]


def test_execve_success_returns_in_the_new_image_and_failure_returns_normally(tmp_path):
    P = 80
    calls = _calls(tmp_path, [
        (10, P, kt.SYS_ENTER, 59 | hi(P), 0), (11, P, kt.SYS_EXIT, 59 | hi(P), (-2) & NEG),  # ENOENT (PATH search)
        (20, P, kt.SYS_ENTER, 59 | hi(P), 0), (25, P, kt.EXEC, P, 0), (26, P, kt.SYS_EXIT, 59 | hi(P), 0),
        (30, P, kt.SYS_ENTER, 12 | hi(P), 0), (31, P, kt.SYS_EXIT, 12 | hi(P), 4096),
    ])
    assert calls == [(P, "execve", 10, 11, -2), (P, "execve", 20, 26, 0), (P, "brk", 30, 31, 4096)]


def test_exit_and_exit_group_end_at_the_thread_exit_without_a_return_value(tmp_path):
    P, T = 90, 91
    calls = _calls(tmp_path, [
        (10, T, kt.SYS_ENTER, 202 | hi(P), 0),  # futex: killed inside it by exit_group
        (20, P, kt.SYS_ENTER, 231 | hi(P), 0), (24, T, kt.EXIT, P, 0), (25, P, kt.EXIT, P, 0),
        (30, P + 5, kt.SYS_ENTER, 60 | hi(P + 5), 0), (33, P + 5, kt.EXIT, P + 5, 0),
        (40, P + 6, kt.SYS_ENTER, 0 | hi(P + 6), 0),  # still in read when the trace ended: stays open
    ])
    assert calls == [(T, "futex", 10, 24, None), (P, "exit_group", 20, 25, None), (P + 5, "exit", 30, 33, None),
                     (P + 6, "read", 40, None, None)]


def test_a_restarted_call_is_two_rows_around_the_signal_handler(tmp_path):
    P = 100
    calls = _calls(tmp_path, [
        (10, P, kt.SYS_ENTER, 0 | hi(P), 0), (20, P, kt.SYS_EXIT, 0 | hi(P), (-512) & NEG),  # ERESTARTSYS
        (22, P, kt.SYS_ENTER, 15 | hi(P), 0), (23, P, kt.SYS_EXIT, (-1 & 0xFFFFFFFF) | hi(P), 0),  # handler returns
        (24, P, kt.SYS_ENTER, 0 | hi(P), 0), (30, P, kt.SYS_EXIT, 0 | hi(P), 5),  # read restarted
        (40, P, kt.SYS_ENTER, 35 | hi(P), 0), (45, P, kt.SYS_EXIT, 35 | hi(P), (-516) & NEG),  # ERESTART_RESTARTBLOCK
        (47, P, kt.SYS_ENTER, 219 | hi(P), 0), (50, P, kt.SYS_EXIT, 219 | hi(P), 0),  # restart_syscall
    ])
    assert calls == [(P, "read", 10, 20, -512), (P, "rt_sigreturn", 22, 23, 0), (P, "read", 24, 30, 5),
                     (P, "nanosleep", 40, 45, -516), (P, "restart_syscall", 47, 50, 0)]


def test_faults_wakeups_samples(tmp_path):
    T = 70
    recs = [
        (10, T, kt.FAULT, 0x7F0000001000, 0x401000 | (6 << 48)),
        (20, T, kt.WAKEUP, 71 | hi(T), 1 | (120 << 32)),
        (30, T, kt.SAMPLE, 0xFFFFFFFF81000000, T | (1 << 32)),
        (31, T, kt.SAMPLE, 0x401234, T),
        (40, T, kt.SYS_ENTER, 39 | hi(T), 0),
    ]
    t = build([chunk(tmp_path, 0, recs)])
    f = t["faults"].to_pylist()[0]
    assert (f["address"], f["ip"], f["error_code"], f["pid"]) == (0x7F0000001000, 0x401000, 6, T)
    w = t["wakeups"].to_pylist()[0]
    assert (w["tid"], w["waker_tid"], w["target_cpu"], w["cpu"]) == (71, T, 1, 0)
    s = t["samples"].to_pylist()
    assert s[0]["in_kernel"] and not s[1]["in_kernel"] and s[0]["ip"] == 0xFFFFFFFF81000000 and s[1]["pid"] == T


def test_each_wakeup_has_the_time_its_task_joined_a_run_queue(tmp_path):
    """A wakeup's enqueue is its task's next wakeup-or-enqueue record when that is an enqueue,
    on whichever CPU it ran; a wakeup followed by another wakeup, or never enqueued, has none."""
    W, A, B = 5, 71, 72
    enq = _native.KINDS["sched_wakeup"]
    cpu0 = [(100, W, kt.WAKEUP, A | hi(W), 1), (300, W, kt.WAKEUP, A | hi(W), 1), (400, W, kt.WAKEUP, B | hi(W), 0),
            (400, W, enq, B, 0), (600, W, kt.WAKEUP, A | hi(W), 1), (900, W, kt.WAKEUP, B | hi(W), 0)]
    cpu1 = [(150, 9, enq, A, 1), (650, 9, enq, A, 1), (660, 9, enq, A, 1)]
    t = build([chunk(tmp_path, 0, cpu0), chunk(tmp_path, 1, cpu1, seq=1)])
    got = [(w["ts"], w["tid"], w["enqueue_ts_ns"]) for w in t["wakeups"].to_pylist()]
    assert got == [(100, A, 150), (300, A, None), (400, B, 400), (600, A, 650), (900, B, None)]


def test_block_io_pairs_by_device_and_sector(tmp_path):
    dev = (8 << 20) | 16
    w = kt.RW_LETTERS[0][0] | 16  # W + S
    issue = [(100, 9, kt.BLOCK_ISSUE, 2048, dev | (8 << 32) | (w << 56)), (110, 9, kt.BLOCK_ISSUE, 4096, dev | (8 << 32) | (2 << 56))]
    done = [(150, 0, kt.BLOCK_COMPLETE, 2048, dev | (8 << 32) | (w << 56))]
    t = build([chunk(tmp_path, 0, issue), chunk(tmp_path, 1, done)])
    b = t["block_io"].to_pylist()
    assert b[0]["complete_ns"] == 150 and b[0]["bytes"] == 4096 and b[0]["rw"] == "WS" and b[0]["dev"] == "8:16"
    assert b[1]["complete_ns"] is None and b[1]["rw"] == "R" and b[1]["tid"] == 9


def test_block_issue_of_an_untraced_task_ends_a_request_whose_completion_was_lost(tmp_path):
    # seen on the virtio disk: a traced discard's completion never came, and 1.8 s later jbd2's
    # discard of the same sector completed; that completion is jbd2's, not the traced request's
    dev, ds = (254 << 20), (4 | 16) << 56  # D + S
    recs = [(100, 9, kt.BLOCK_ISSUE, 4096, dev | (8 << 32) | ds), (1_800_000, 77, kt.BLOCK_ISSUE_OTHER, 4096, dev | (8 << 32) | ds),
            (1_800_050, 0, kt.BLOCK_COMPLETE, 4096, dev | (8 << 32) | ds),
            (2_000_000, 9, kt.BLOCK_ISSUE, 4096, dev | (8 << 32) | ds), (2_000_040, 0, kt.BLOCK_COMPLETE, 4096, dev | (8 << 32) | ds)]
    b = build([chunk(tmp_path, 0, recs)])["block_io"].to_pylist()
    assert [(r["issue_ns"], r["complete_ns"], r["tid"]) for r in b] == [(100, None, 9), (2_000_000, 2_000_040, 9)]


def test_tasks_tree_comm_history_and_lost(tmp_path):
    R, C, T, O = 10, 11, 12, 99
    recs = [
        (1, R, kt.TRACED, 0, 0),
        (5, R, kt.FORK, C | hi(C), R | (0x11 << 32)),  # a process
        (6, R, kt.FORK, T | hi(R), R | (0x10000 << 32)),  # a thread
        (7, O, kt.FORK, 100 | hi(100), O),  # someone else's fork (system-wide)
        (8, C, kt.EXEC, C, 0),
        (9, C, kt.SWITCH, R | hi(C), 0),
        (20, C, kt.EXIT, C, 1),
        (30, 0, kt.LOST, 3, 0),
    ]
    names = [(0, C, kt.NAME_TASK, "parent"), (0, C, kt.NAME_EXEC, "/bin/true"), (0, C, kt.NAME_TASK, "true")]
    c = chunk(tmp_path, 0, recs, names=names, dropped=3)
    t = build([c], {"pid": R})
    tasks = {r["tid"]: r for r in t["tasks"].to_pylist()}
    assert tasks[R]["is_traced"] and tasks[R]["start_ns"] == 1
    assert tasks[C]["is_traced"] and tasks[C]["parent_pid"] == R and tasks[C]["pid"] == C
    assert tasks[C]["start_ns"] == 5 and tasks[C]["end_ns"] == 20 and tasks[C]["exe"] == "/bin/true" and tasks[C]["comm"] == "true"
    assert tasks[T]["is_traced"] and tasks[T]["pid"] == R
    assert not tasks[100]["is_traced"] and not tasks[O]["is_traced"]
    lost = t["kernel_lost"].to_pylist()
    assert lost == [{"source": "kernel collector", "where": "cpu 0", "count": 3, "cpu": 0}]


def test_inside_a_pid_namespace_tasks_keep_the_kernels_tids(tmp_path):
    # the records name tasks as the namespace does (root 1, its thread 2); the collector's
    # task_ids records give their kernel tids; a task the namespace cannot see comes encoded
    R, T, OUT = 1, 2, kt.PIDNS_OUTSIDE + 45
    recs = [
        (1, R, kt.TRACED, 0, 0),
        (1, R, kt.TASK_IDS, 5001 | hi(5001), 0),
        (5, R, kt.FORK, T | hi(R), R | (0x10000 << 32)),
        (5, T, kt.TASK_IDS, 5002 | hi(5001), 0),
        (9, T, kt.SWITCH, OUT | hi(R), 0),
        (12, 3, kt.SWITCH, R, 0),  # a task of the namespace outside the tree (oslens record)
    ]
    t = build([chunk(tmp_path, 0, recs)], {"pid": R, "kernel": {"pid_namespace": 4026532178}})
    got = {r["tid"]: r["global_tid"] for r in t["tasks"].to_pylist()}
    assert got == {R: 5001, T: 5002, 3: None, OUT: 45}
    # outside a namespace the kernel's tids are the tables' own
    t = build([chunk(tmp_path, 0, recs[:1] + recs[2:3], seq=1)], {"pid": R})
    assert {r["tid"]: r["global_tid"] for r in t["tasks"].to_pylist()} == {R: R, T: T}


def test_empty_and_header_only_chunks(tmp_path):
    t = build([chunk(tmp_path, 0, [], dropped=5)])
    assert t["switches"].num_rows == 0 and t["syscalls"].num_rows == 0
    assert t["kernel_lost"].to_pylist()[0]["count"] == 5
    assert set(t) >= {"switches", "cpu_slices", "wakeups", "syscalls", "faults", "block_io", "samples", "tasks", "kernel_lost"}


def test_importer_conforms_our_tables(tmp_path):
    schema = pytest.importorskip("oslens.store.schema")
    recs = [(100, 5, kt.SWITCH, 6 | hi(5), 1), (110, 5, kt.SYS_ENTER, 39 | hi(5), 0), (111, 5, kt.SYS_EXIT, 39 | hi(5), 5)]
    t = build([chunk(tmp_path, 0, recs)], {"pid": 5})
    for name in schema.KERNEL_SCHEMAS:
        conformed = schema.conform(name, t.get(name))
        assert conformed.column_names[: len(schema.KERNEL_SCHEMAS[name])] == list(schema.KERNEL_SCHEMAS[name])
