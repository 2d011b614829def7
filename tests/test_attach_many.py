"""`oslens record -p` on the perf_event_open tier (issue 31) against a program with a thousand
sleeping threads (tests/c/attach_sleepers.c): the per-task events of every thread are opened (in
parallel, one group per thread and CPU), so each thread's voluntary switches over its own window
are in the trace as /proc counted them, the cross-check agrees, and nothing is lost. No assertion
is on a timing."""

import os
import signal
import subprocess
import time

import pytest

from conftest import meta
from oslens import store
from oslens.analysis import crosscheck
from test_attach import COLLECTOR, _attach, _need, _wait_attached

THREADS = 1000
pytestmark = pytest.mark.skipif(not (COLLECTOR.exists() and os.geteuid() == 0),
                                reason="needs the built oslens-collector (make) and root, to attach to tracepoints")


def test_the_perf_tier_follows_every_one_of_a_thousand_threads(compile_c, tmp_path):
    program = subprocess.Popen([str(compile_c("attach_sleepers.c")), str(THREADS)], stdout=subprocess.PIPE, text=True)
    try:
        assert program.stdout.readline() == "ready\n"
        trace = tmp_path / "t"
        rec = _attach(program.pid, trace, mechanism="perf")
        _wait_attached(rec)
        time.sleep(1.5)
        rec.send_signal(signal.SIGINT)
        _, err = rec.communicate(timeout=300)
    finally:
        program.terminate()
        out, _ = program.communicate(timeout=120)
    assert rec.returncode == 0, err
    assert out.endswith(f"done {THREADS}\n")
    _need(trace, "perf")
    m = meta(trace)
    assert m["kernel"]["mechanism"].startswith("perf_event_open") and m["kernel"]["lost"] == 0, m["kernel"]
    before, after = m["attach"]["kernel_counts"]["at_attach"], m["attach"]["kernel_counts"]["at_detach"]
    assert len(before) == len(after) == THREADS + 1
    assert m["crosscheck"]["agrees"] is True, m["crosscheck"]["line"]
    # per thread, not only summed: each sleeper's switches over its own window against /proc's, by
    # the cross-check's rule, its slack at each of the two readings (each taken at its own instant,
    # a switch may fall between a thread's read and its timestamp)
    first = {r["tid"]: r for r in before}
    con = store.open_trace(trace, quiet=True)
    try:
        seen = crosscheck.window_counts(con, {r["tid"]: (first[r["tid"]]["ts"], r["ts"]) for r in after})
    finally:
        con.close()
    sleepers = [r for r in after if r["tid"] != program.pid]
    assert len(sleepers) == THREADS
    for r in sleepers:
        kernel = r["voluntary"] - first[r["tid"]]["voluntary"]
        slack = max(crosscheck.TOLERANCE * kernel, 2 * crosscheck.SLACK)
        assert kernel > 0 and abs(seen[r["tid"]]["voluntary"] - kernel) <= slack, (r["tid"], seen[r["tid"]], kernel)
