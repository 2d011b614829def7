"""End to end: record a real `water` run, report it, and check the report against what we know about
the program; then run water next to an injected interfering task (a process that wakes every 1 ms,
pinned to the same CPU) and check that the findings name it."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WATER = ROOT / "workloads" / "water" / "water"
STEPS = 4
THREADS = 2

TABLE2 = ["main", "CNSTNT", "SYSCNS", "INITIA", "WorkStart", "MDMAIN", "PREDIC", "CORREC", "BNDRY", "KINETI",
          "POTENG", "INTRAF", "INTERF", "CSHIFT", "UPDATE_FORCES"]


def _store_or_skip():
    from oslens import store

    return store


def _water_or_skip():
    if WATER.exists():
        return WATER
    prefix = Path(sys.prefix)
    if not (prefix / "lib" / "liboslens.so").exists():
        pytest.skip("workloads/water/water is not built and liboslens is not installed: run `make`")
    r = subprocess.run(["make", "-s", "-C", str(WATER.parent), f"OSLENS_PREFIX={prefix}"], capture_output=True,
                       text=True)
    if r.returncode != 0 or not WATER.exists():
        pytest.fail(f"building water failed: {r.stderr.strip()[-2000:]}")
    return WATER


def _oslens(*args, timeout=600, **kw):
    return subprocess.run([sys.executable, "-m", "oslens.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, **kw)


def _record(trace: Path, water_args, prefix=()):
    r = subprocess.run(
        [*prefix, sys.executable, "-m", "oslens.cli", "record", "-f", "-o", str(trace), "--", str(WATER), *map(str, water_args)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )
    assert r.returncode == 0, f"oslens record failed ({r.returncode}): {r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def water_trace(tmp_path_factory):
    store = _store_or_skip()
    _water_or_skip()
    trace = tmp_path_factory.mktemp("e2e") / "water"
    r = _record(trace, ["--threads", THREADS, "--steps", STEPS])
    m = re.search(r"water: .* ([0-9.]+) s", r.stdout)
    con = store.open_trace(trace)
    return trace, con, float(m.group(1)) if m else None


def test_water_regions_and_threads(water_trace):
    trace, con, _ = water_trace
    names = {r[0] for r in con.execute("SELECT DISTINCT name FROM regions").fetchall()}
    missing = [n for n in TABLE2 if n not in names]
    assert not missing, f"regions missing from the trace: {missing}"
    steps = con.execute("SELECT count(*) FROM regions WHERE name = 'STEP'").fetchone()[0]
    assert steps == THREADS * STEPS
    tnames = {r[0] for r in con.execute("SELECT name FROM threads").fetchall()}
    assert "water parent" in tnames and "water child 1" in tnames


def test_per_thread_times_add_up_to_wall_time(water_trace):
    from oslens.analysis import breakdown, db, program

    _, con, printed = water_trace
    bd = breakdown.time_breakdown(con).to_pylist()
    assert len(bd) >= THREADS
    has_sched = db.kernel_status(con)["scheduling"]
    for r in bd:
        parts = sum(r[c] for c in breakdown.TIME_COLUMNS)
        assert abs(parts - r["wall_ns"]) <= 0.01 * r["wall_ns"], r
        if has_sched:
            # with kernel events nearly every nanosecond is attributed to a known state, except the
            # window of a slice whose switch-in the kernel did not deliver (cpu_slices.start_inferred:
            # a CI run saw 171 ms of one), which is unknown by design; after a sleep that window
            # starts no earlier than the thread's first wakeup (it could not run before it)
            inferred = con.execute("SELECT coalesce(sum(end_ns - start_ns), 0) FROM cpu_slices WHERE tid = ? AND "
                                   "start_inferred", [r["tid"]]).fetchone()[0]
            assert r["unknown_ns"] <= 0.01 * r["wall_ns"] + inferred, (r, inferred)
            early = con.execute(
                "SELECT s.start_ns, s.end_ns FROM cpu_slices s "
                "ASOF JOIN (SELECT prev_tid AS tid, ts, prev_state FROM switches) o ON o.tid = s.tid AND o.ts < s.end_ns "
                "WHERE s.tid = ? AND s.start_inferred AND CAST(o.prev_state AS VARCHAR) <> 'R' AND s.start_ns < "
                "(SELECT min(w.ts) FROM wakeups w WHERE w.tid = s.tid AND w.ts >= o.ts AND w.ts <= s.end_ns)",
                [r["tid"]]).fetchall()
            assert not early, (r["tid"], early)
    # the main thread's wall time is the program's: within 1% of its outermost region
    prog = program.program(con)
    main = next(r for r in bd if r["tid"] == prog.main_tid)
    region = con.execute("SELECT max(duration_ns) FROM regions WHERE name = 'main' AND tid = ?",
                         [prog.main_tid]).fetchone()[0]
    assert region and abs(main["wall_ns"] - region) <= 0.01 * region + 2_000_000, (main["wall_ns"], region)
    if printed:
        assert abs(main["wall_ns"] / 1e9 - printed) <= 0.01 * printed + 0.005


def test_transition_matrix_and_sync(water_trace):
    from oslens.analysis import db, sync_summary, transitions

    _, con, _ = water_trace
    if db.row_count(con, "switches"):
        tm = transitions.transition_matrix(con)
        assert sum(tm.column("count").to_pylist()) == db.row_count(con, "switches")
    if db.row_count(con, "sync"):
        rows = sync_summary.sync_summary(con).to_pylist()
        barrier = [r for r in rows if "barrier" in r["kind"] and r["object"] == "(all)"]
        if barrier:
            # per thread: two barriers in SETUP, one after it, five per time step
            assert barrier[0]["count"] == THREADS * (3 + 5 * STEPS)


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


def test_report_command_terminal_json_html(water_trace):
    trace, _, _ = water_trace
    r = _oslens("report", trace)
    assert r.returncode == 0, r.stderr
    assert "Where each thread's time went" in r.stdout and "Findings" in r.stdout
    r = _oslens("report", trace, "--json", "--no-html")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert [s["id"] for s in d["sections"]][:2] == ["breakdown", "tasks"]
    page = trace / "report.html"
    assert page.exists()
    text = page.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)
    exe = _chromium()
    if exe is None:
        pytest.skip("chromium is not installed: the HTML was not opened in a browser")
    with tempfile.TemporaryDirectory() as prof:
        out = subprocess.run(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={prof}", "--window-size=1280,2000", "--virtual-time-budget=3000", "--dump-dom",
             page.resolve().as_uri()], capture_output=True, text=True, timeout=180,
        ).stdout
    assert 'data-report-ready="1"' in out
    for s in d["sections"]:
        m = re.search(rf'<section id="{s["id"]}"[^>]*data-rendered="([^"]+)"', out)
        assert m, s["id"]
        body = out[m.start():out.find("</section>", m.start())]
        if s["available"] and "<figure" in body:
            assert re.match(r"\d+x\d+:\d+", m.group(1)) and not m.group(1).startswith("0x"), (s["id"], m.group(1))
        elif s["available"]:  # a section with nothing to draw (block I/O without completions) says why instead
            assert m.group(1) == "none" and "class=\"note\"" in body, (s["id"], m.group(1))


INTERFERER = r"""
#define _GNU_SOURCE
#include <sys/prctl.h>
#include <time.h>
#include <stdio.h>
int main(void) {
    prctl(PR_SET_NAME, "interferer", 0, 0, 0);
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    volatile unsigned long x = 0;
    for (;;) {
        next.tv_nsec += 1000000;
        if (next.tv_nsec >= 1000000000) { next.tv_nsec -= 1000000000; next.tv_sec++; }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
        for (int i = 0; i < 2000; i++) x += i;  /* a few microseconds of work */
    }
}
"""


def test_findings_name_an_injected_interfering_task(tmp_path):
    store = _store_or_skip()
    _water_or_skip()
    if not shutil.which("gcc") and not shutil.which("cc"):
        pytest.skip("no C compiler to build the interfering task")
    src = tmp_path / "interferer.c"
    src.write_text(INTERFERER)
    exe = tmp_path / "interferer"
    subprocess.run([shutil.which("gcc") or shutil.which("cc"), "-O1", "-o", str(exe), str(src)], check=True)
    cpu = sorted(os.sched_getaffinity(0))[0]
    noise = subprocess.Popen([str(exe)], preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    try:
        trace = tmp_path / "water-noisy"
        _record(trace, ["--threads", THREADS, "--steps", STEPS], prefix=("taskset", "-c", str(cpu)))
    finally:
        noise.kill()
        noise.wait()
    from oslens.analysis import db, findings

    con = store.open_trace(trace)
    st = db.kernel_status(con)
    if not st["scheduling"]:
        pytest.skip(f"no kernel scheduling events in this environment: {st['reason']}")
    f = findings.findings(con).to_pylist()
    named = [x for x in f if x["code"] == "interference" and "interferer" in x["subject"]]
    assert named, "the findings do not name the interfering task: " + json.dumps(f, indent=1)
    assert str(noise.pid) in named[0]["subject"]
    r = _oslens("report", trace, "--no-html")
    assert "interferer" in r.stdout


def test_the_first_finding_is_about_water_not_oslens(water_trace):
    """Issue 21: the demo's first finding speaks about the workload (its barrier waits, or its
    threads kept off their CPUs); oslens's own cost comes last while it is small."""
    from oslens.analysis import findings

    _trace, con, _ = water_trace
    f = findings.findings(con).to_pylist()
    assert f, "water's report has no findings"
    assert f[0]["code"] != "oslens_cost" and "oslens" not in f[0]["subject"], f[0]
    own = [i for i, x in enumerate(f) if x["code"] == "oslens_cost"]
    assert not own or own[0] == len(f) - 1 or f[own[0]]["severity"] == "warning", [x["title"] for x in f]
