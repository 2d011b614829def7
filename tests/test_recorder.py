"""End-to-end tests of the in-process recorder: C programs with known numbers of events,
recorded with `oslens record`, read back with `oslens dump`."""

import collections
import json
import os
import signal
import subprocess

import pytest

from conftest import dump, kinds_of, meta, run_oslens


@pytest.fixture(scope="module", params=["inline", "library"])
def cases(compile_c, request):
    """The test program built twice: with oslens.h's inline fast path (the default) and with
    every call going to the library (-DOSLENS_NO_INLINE); both must record the same."""
    return compile_c("recorder_cases.c", *(["-DOSLENS_NO_INLINE"] if request.param == "library" else []))


def record(tmp_path, program, *args, env=None, extra=(), check=True):
    trace = tmp_path / "trace"
    # --no-preload: these tests count the program's own events exactly.
    proc = run_oslens("record", "--no-kernel", "--no-preload", "-f", "-o", trace, *extra, "--", program, *args, env=env, check=check)
    return trace, proc


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_exact_counts_per_instrument_across_threads(tmp_path, cases, threads):
    per_thread = 500
    trace, proc = record(tmp_path, cases, "threads", threads, per_thread)
    assert f"counter={threads * per_thread}" in proc.stdout
    records = dump(trace)
    workers = {r["tid"] for r in records if r["thread"].startswith("worker-")}
    assert len(workers) == threads
    for tid in workers:
        mine = kinds_of(records, tid=tid)
        assert mine["region_begin"] == per_thread
        assert mine["region_end"] == per_thread
        assert mine["timer_start"] == per_thread
        assert mine["timer_stop"] == per_thread
        assert mine["event"] == per_thread
    events = [r for r in records if r["kind"] == "event"]
    assert {r["name"] for r in events} == {"payload-event"}
    assert {r["payload"] for r in events} == {b"0123456789abcdefghi\0".hex()}
    regions = {r["name"] for r in records if r["kind"].startswith("region")}
    assert regions == {"step"}
    # The final counter value is recorded at exit, exactly.
    finals = [r for r in records if r["kind"] == "counter" and r["b"] == 3]
    assert [r["value"] for r in finals] == [threads * per_thread]
    # Every record carries a CPU and a thread id; thread names are kept in meta.json.
    assert all(r["cpu"] < os.cpu_count() for r in records)
    names = {t["name"] for t in meta(trace)["threads"]}
    assert {f"worker-{i}" for i in range(threads)} <= names


def test_timestamps_are_monotonic_per_thread(tmp_path, cases):
    trace, _ = record(tmp_path, cases, "threads", 2, 200)
    by_thread = collections.defaultdict(list)
    for r in dump(trace):
        by_thread[r["tid"]].append(r["ts"])
    for ts in by_thread.values():
        assert ts == sorted(ts)


def test_forked_child_records_into_its_own_buffers(tmp_path, cases):
    trace, _ = record(tmp_path, cases, "fork", 25)
    records = dump(trace)
    pids = {r["pid"] for r in records if r["kind"] == "event"}
    assert len(pids) == 2
    parent = next(r["pid"] for r in records if r["name"] == "parent-event")
    child = next(r["pid"] for r in records if r["name"] == "child-event")
    assert parent != child
    assert kinds_of(records, pid=parent, name="parent-event")["event"] == 25
    assert kinds_of(records, pid=child, name="child-event")["event"] == 25
    assert kinds_of(records, pid=parent, name="child-event")["event"] == 0
    assert kinds_of(records, pid=child, name="child-work") == {"region_begin": 1, "region_end": 1}
    for pid in (parent, child):
        assert kinds_of(records, pid=pid, name="shared-site") == {"region_begin": 1, "region_end": 1}
    # Each process names what it recorded in its own names chunk (not only through its parent).
    from oslens.capture import raw
    child_names = {name for c in raw.read_chunks(trace) if c.pid == child for (_i, _c, _m, name) in c.names}
    assert {"shared-site", "child-work"} <= child_names
    files = sorted(p.name for p in (trace / "raw").iterdir())
    assert any(f.startswith(f"app-{child}-") for f in files)


def test_suspend_resume_reset(tmp_path, cases):
    trace, proc = record(tmp_path, cases, "managers")
    assert "before-reset=13" in proc.stdout
    assert "after-reset=2" in proc.stdout
    assert "timer-total-under-10ms=1" in proc.stdout
    records = dump(trace)
    assert kinds_of(records, name="io-timer") == {"timer_start": 2, "timer_stop": 2}
    assert kinds_of(records, kind="event")["event"] == 10
    counter_values = [(r["value"], r["b"]) for r in records if r["kind"] == "counter" and r["name"] == "bytes"]
    # asked (13), reset (0), final (2)
    assert (13, 2) in counter_values
    assert (0, 4) in counter_values
    assert counter_values[-1] == (2, 3)
    controls = [r["value"] for r in records if r["kind"] == "control"]
    assert controls.count(1) == 2 and controls.count(2) == 2 and controls.count(3) == 1


def test_disabled_at_start_by_environment_then_enabled_by_api(tmp_path, cases):
    trace, proc = record(tmp_path, cases, "enable", extra=("--disabled",))
    assert "enabled-before=0" in proc.stdout
    assert kinds_of(dump(trace), kind="event")["event"] == 3


def test_trigger_stops_after_n_events(tmp_path, cases):
    trace, _ = record(tmp_path, cases, "flood", 1000, extra=("--limit-events", "300"))
    records = dump(trace)
    assert kinds_of(records, kind="event")["event"] == 300
    thread = next(t for t in meta(trace)["threads"] if t["records"])
    assert thread["suppressed_events"] == 700
    assert thread["dropped_events"] == 0


def test_trigger_by_bytes(tmp_path, cases):
    trace, _ = record(tmp_path, cases, "flood", 1000, extra=("--limit-bytes", str(32 * 100)))
    assert kinds_of(dump(trace), kind="event")["event"] == 100


def test_full_buffer_drops_and_counts_exactly(tmp_path, cases):
    env = dict(os.environ, OSLENS_BUFFER_RECORDS="100")
    trace, proc = record(tmp_path, cases, "flood", 250, env=env)
    assert "dropped=150" in proc.stdout
    assert kinds_of(dump(trace), kind="event")["event"] == 100
    m = meta(trace)
    assert m["lost_events"] == 150
    assert sum(t["dropped_bytes"] for t in m["threads"]) == 150 * 32
    assert "150 events lost" in proc.stderr


@pytest.mark.parametrize("prepared", [False, True])
def test_blocking_mode_opens_more_chunks_and_loses_nothing(tmp_path, cases, prepared):
    env = dict(os.environ, OSLENS_BUFFER_RECORDS="100")
    extra = ("--on-full", "block") + (("--prepare-buffers",) if prepared else ())
    trace, proc = record(tmp_path, cases, "flood", 250, env=env, extra=extra)
    assert "dropped=0" in proc.stdout
    records = dump(trace)
    payloads = [int.from_bytes(bytes.fromhex(r["payload"]), "little") for r in records if r["kind"] == "event"]
    assert payloads == list(range(250))
    pauses = collections.Counter(r["b"] for r in records if r["kind"] == "pause")
    # two further chunks opened (reason 1); a prepared thread also paused once to prepare its
    # first buffer (reason 3: the further chunks are prepared inside their pause)
    assert pauses == ({1: 2, 3: 1} if prepared else {1: 2})
    if prepared:
        assert all(ring_slots == 0 for _, ring_slots, _ in app_chunks(trace))


def app_chunks(trace):
    """(capacity, staging ring slots, file size) of each application chunk (header offsets
    from crates/format/src/header.rs)."""
    out = []
    for path in sorted((trace / "raw").glob("app-*.osl")):
        head = path.read_bytes()[:4096]
        out.append((int.from_bytes(head[40:48], "little"), int.from_bytes(head[120:124], "little"), path.stat().st_size))
    return out


def event_values(records, id):
    return [int.from_bytes(bytes.fromhex(r["payload"]), "little") for r in records if r["kind"] == "event" and r["id"] == id]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGABRT])
def test_killed_program_keeps_every_committed_event(tmp_path, cases, sig):
    trace, proc = record(tmp_path, cases, "die", 5000, int(sig), check=False)
    assert proc.returncode == 128 + sig
    assert f"killed by {signal.Signals(sig).name}" in proc.stderr
    assert event_values(dump(trace), 4) == list(range(5000))
    assert meta(trace)["exit"]["signal"] == sig
    # the last events were still in the staging ring (never copied out): read from there
    [(capacity, ring_slots, size)] = app_chunks(trace)
    assert ring_slots > 0 and size > 4096 + capacity * 32


def test_thread_running_at_exit_keeps_its_staged_events(tmp_path, cases):
    trace, _ = record(tmp_path, cases, "running", 5000)
    assert event_values(dump(trace), 10) == list(range(5000))
    assert not any(r["damage"] for r in [meta(trace)] if "damage" in r)


def test_staging_ring_is_copied_out_and_cut_off_at_normal_exit(tmp_path, cases):
    trace, _ = record(tmp_path, cases, "threads", 3, 2000)
    chunks = app_chunks(trace)
    assert len(chunks) == 4  # main and three threads
    # no ring left, and every finished chunk cut to its records (its capacity with it; the exiting
    # thread's with room for exit handlers: docs/recorder.md "Faults")
    assert all(ring_slots == 0 and size == 4096 + capacity * 32 for capacity, ring_slots, size in chunks)
    assert all(capacity < (64 << 20) // 32 for capacity, _, _ in chunks)  # not the 64 MiB buffer


@pytest.mark.parametrize("size, count", [(1000, 150), (100_000, 4)])
def test_large_payloads_across_and_beyond_staging_slots(tmp_path, cases, size, count):
    """1000 bytes = 35 records, groups that cross slot boundaries; 100 kB = 3334 records,
    more than a staging slot holds, written in place."""
    trace, _ = record(tmp_path, cases, "payloads", count, size)
    records = [r for r in dump(trace) if r["kind"] == "event"]
    assert [r["id"] for r in records] == [8, 9] * count
    for i in range(count):
        assert int.from_bytes(bytes.fromhex(records[2 * i]["payload"]), "little") == i
        assert bytes.fromhex(records[2 * i + 1]["payload"]) == bytes((i + k) % 251 for k in range(size))


def test_exit_status_is_kept(tmp_path):
    trace = tmp_path / "t"
    proc = run_oslens("record", "--no-kernel", "-o", trace, "--", "sh", "-c", "exit 7", check=False)
    assert proc.returncode == 7
    assert meta(trace)["exit"] == {"code": 7}


def test_missing_program_is_one_line_error(tmp_path):
    proc = run_oslens("record", "--no-kernel", "-o", tmp_path / "t", "--", "/nonexistent/prog", check=False)
    assert proc.returncode == 127
    assert proc.stderr.strip().splitlines() == ["oslens: error: cannot run /nonexistent/prog: no such file"]


def test_not_a_trace_is_one_line_error(tmp_path):
    proc = run_oslens("dump", tmp_path, check=False)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "is not an oslens trace" in proc.stderr


def test_corrupt_chunk_is_salvaged_with_a_warning(tmp_path, cases):
    trace, _ = record(tmp_path, cases, "flood", 100)
    chunk = max((p for p in (trace / "raw").iterdir() if p.name.startswith("app-")), key=lambda p: p.stat().st_size)
    data = bytearray(chunk.read_bytes())
    committed = int.from_bytes(data[48:56], "little")
    slots = [i for i in range(committed) if data[4096 + 32 * i + 14] == 3][:32]  # event records
    assert len(slots) == 32
    damaged = bytearray(data)
    # one byte of each of 32 event records flipped, each at another of the 32 positions: the
    # check catches every single-byte change, whatever the record's timestamp (format 2's let
    # some timestamp flips through, depending on the TSC value, i.e. on the machine's uptime)
    for at, slot in enumerate(slots):
        damaged[4096 + 32 * slot + at] ^= 0xFF
    chunk.write_bytes(bytes(damaged))
    events = [r for r in dump(trace) if r["kind"] == "event"]
    assert len(events) == 100 - 32
    # A truncated chunk: only the intact prefix survives, no crash.
    chunk.write_bytes(bytes(data[: 4096 + 40 * 32 + 3]))
    events = [r for r in dump(trace) if r["kind"] == "event"]
    assert len(events) == sum(data[4096 + 32 * i + 14] == 3 for i in range(40))


def test_garbage_file_in_raw_does_not_crash(tmp_path, cases):
    trace, _ = record(tmp_path, cases, "flood", 10)
    (trace / "raw" / "app-1-1-0.osl").write_bytes(b"not a chunk at all" * 10)
    events = [r for r in dump(trace) if r["kind"] == "event"]
    assert len(events) == 10


def test_no_op_without_oslens_record(cases):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OSLENS_")}
    proc = subprocess.run([str(cases), "threads", "2", "100"], capture_output=True, text=True, env=env, check=True)
    # Counting is recording: without a trace nothing is counted or written.
    assert "counter=0" in proc.stdout


def test_nested_regions_keep_order(tmp_path, cases):
    trace, _ = record(tmp_path, cases, "nested")
    seq = [(r["kind"], r["name"]) for r in dump(trace) if r["kind"].startswith("region")]
    assert seq == [("region_begin", "outer")] + [("region_begin", "inner"), ("region_end", "inner")] * 3 + [("region_end", "outer")]


def test_cxx_raii_region_and_static_link(tmp_path, compile_c):
    prog = compile_c("recorder_cxx.cc", "-lstdc++", compiler="g++", static=True)
    trace, _ = record(tmp_path, prog)
    seq = [(r["kind"], r["name"]) for r in dump(trace) if r["kind"].startswith("region")]
    assert seq == [("region_begin", "cxx-scope"), ("region_end", "cxx-scope")] * 4


def test_fortran_module(tmp_path, build_dir):
    if subprocess.run(["which", "gfortran"], capture_output=True).returncode != 0:
        pytest.skip("gfortran is not installed (make setup installs it)")
    from conftest import C_DIR, oslens_flags

    out = build_dir / "fortran_case"
    subprocess.run(["gfortran", "-O2", "-o", str(out), str(C_DIR / "recorder_fortran.f90"), *oslens_flags("--cflags"), *oslens_flags("--fortran"), *oslens_flags("--libs")], check=True)
    trace, proc = record(tmp_path, out)
    assert proc.stdout.split() == ["count=", "42"]
    records = dump(trace)
    assert kinds_of(records, name="fortran-loop") == {"region_begin": 1, "region_end": 1}
    assert [r["value"] for r in records if r["kind"] == "counter" and r["b"] == 3] == [42]


def test_flags_and_pkg_config():
    cflags = run_oslens("flags", "--cflags").stdout.split()
    libs = run_oslens("flags", "--libs").stdout.split()
    assert any(f.startswith("-I") and os.path.exists(os.path.join(f[2:], "oslens.h")) for f in cflags)
    assert "-loslens" in libs
    pc = subprocess.run(["pkg-config", "--cflags", "--libs", "oslens"], capture_output=True, text=True,
                        env=dict(os.environ, PKG_CONFIG_PATH=os.path.join(cflags[0][2:], "..", "lib", "pkgconfig")))
    assert pc.returncode == 0 and "-loslens" in pc.stdout


@pytest.mark.parametrize("clock", ["tsc", "monotonic"])
def test_timestamps_fall_inside_the_run_on_the_monotonic_clock(tmp_path, cases, clock):
    env = dict(os.environ, OSLENS_CLOCK=clock)
    trace, _ = record(tmp_path, cases, "threads", 2, 100, env=env)
    m = meta(trace)
    stamps = [r["ts"] for r in dump(trace) if r["kind"] != "clock_pair"]
    assert stamps and m["start_ns"] <= min(stamps) and max(stamps) <= m["end_ns"]
    expected = "tsc" if clock == "tsc" and m["machine"]["tsc_invariant"] else "monotonic"
    assert m["clock"] == expected


def test_the_clock_follows_the_tsc_check_oslens_record_hands_down(tmp_path, cases):
    """OSLENS_TSC_INVARIANT, `oslens record`'s CPUID check given to the programs it starts, is
    what the recorder's clock follows (it does not check again): 0 makes it CLOCK_MONOTONIC."""
    trace, _ = record(tmp_path, cases, "threads", 2, 100, env=dict(os.environ, OSLENS_TSC_INVARIANT="0"))
    m = meta(trace)
    stamps = [r["ts"] for r in dump(trace) if r["kind"] != "clock_pair"]
    assert m["clock"] == "monotonic" and stamps and m["start_ns"] <= min(stamps) and max(stamps) <= m["end_ns"]


def test_corrupt_meta_json_is_one_line_error(tmp_path, cases):
    trace, _ = record(tmp_path, cases, "flood", 10)
    (trace / "meta.json").write_text("{not json")
    proc = run_oslens("dump", trace, check=False)
    assert proc.returncode == 3
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "meta.json is damaged" in proc.stderr


def test_prepared_buffers_pause_once_per_thread_and_lose_nothing(tmp_path, cases):
    trace, proc = record(tmp_path, cases, "threads", 2, 300, extra=("--prepare-buffers", "--buffer-mb", "4"))
    records = dump(trace)
    recording = {r["tid"] for r in records if r["kind"] not in ("pause", "clock_pair")}
    prepares = collections.Counter(r["tid"] for r in records if r["kind"] == "pause" and r["b"] == 3)
    assert set(prepares) == recording and set(prepares.values()) == {1}
    workers = {r["tid"] for r in records if r["thread"].startswith("worker-")}
    for tid in workers:
        assert kinds_of(records, tid=tid)["event"] == 300
    assert all(t["dropped_events"] == 0 for t in meta(trace)["threads"])
    # written in place: no staging ring, so no helper and no slots copied
    assert all(ring_slots == 0 and size == 4096 + capacity * 32 for capacity, ring_slots, size in app_chunks(trace))
    assert all(h["cpu_ns"] == 0 and h["ring_slots_copied"] == 0 for h in meta(trace)["recorder_helpers"])
    # the prepared pages past the last record were given back and the files cut there: they
    # hold what was recorded, on disk and in length (the exiting thread keeps 64 KiB spare)
    for path in (trace / "raw").glob("app-*.osl"):
        assert path.stat().st_blocks * 512 <= 64 * 1024 and path.stat().st_size <= 128 * 1024, path


def test_prepared_buffer_killed_keeps_every_committed_event(tmp_path, cases):
    """A prepared buffer has no staging ring: the records are in the file's pages as they are
    written, so SIGKILL loses none."""
    trace, proc = record(tmp_path, cases, "die", 5000, int(signal.SIGKILL), check=False, extra=("--prepare-buffers", "--buffer-mb", "4"))
    assert proc.returncode == 128 + signal.SIGKILL
    assert event_values(dump(trace), 4) == list(range(5000))
    [(capacity, ring_slots, size)] = app_chunks(trace)
    assert ring_slots == 0 and size == 4096 + capacity * 32


def test_recorder_cost_outside_the_program_is_measured(tmp_path, cases):
    """Every staging slot a thread filled was copied out once: by the helper, by the thread while
    recording (the helper behind), or by the thread at its end; meta.json and the summary say
    which and what the helper's CPU was."""
    trace, proc = record(tmp_path, cases, "flood", 100_000)
    m = meta(trace)
    [thread] = m["threads"]
    [helper] = m["recorder_helpers"]
    assert helper["pid"] == thread["pid"]
    # the first 1,024 records are written in place, before the chunk gets its ring
    # (crates/recorder/src/growth.rs); then crates/recorder/src/stage.rs: SLOT_RECORDS, SLOTS
    slots = -(-(thread["records"] - 1024) // 1024)
    # the rest (at most a ring's worth) the thread copied out when it ended
    assert slots - 16 <= helper["ring_slots_copied"] + thread["ring_slots_self_copied"] <= slots
    if helper["ring_slots_copied"]:
        assert helper["cpu_ns"] > 0  # a helper that copied ran
    # each time the thread copied slots out itself it recorded the pause (reason 4, copy out)
    records = dump(trace)
    copies = [r for r in records if r["kind"] == "pause" and r["b"] == 4]
    assert len(copies) <= thread["ring_slots_self_copied"]
    assert bool(copies) == (thread["ring_slots_self_copied"] > 0)
    paused_ns = int(next(x for x in proc.stdout.split() if x.startswith("paused_ns=")).split("=")[1])
    assert (paused_ns > 0) == bool(copies)
    assert event_values(records, 3) == list(range(100_000))
    # the store names them in the pauses table
    out = run_oslens("sql", trace, "SELECT count(*) FROM pauses WHERE reason = 'copy out'", "--format", "csv").stdout
    assert out.split()[-1] == str(len(copies))
    if helper["ring_slots_copied"] or helper["cpu_ns"]:
        assert f"{helper['ring_slots_copied']} buffer slots copied to the trace" in proc.stderr
        assert f"{thread['ring_slots_self_copied']} copied by the program's threads while the helper was behind" in proc.stderr
    else:
        # on a busy host the helper may not get a CPU before 100,000 records are done
        assert f"no recorder helper thread ran: the program's threads copied all {thread['ring_slots_self_copied']} buffer slots" in proc.stderr


def test_low_descriptor_limit_still_records_everything(tmp_path, cases):
    """Under a descriptor limit below the recorder's preferred high descriptor numbers, the
    staging ring is copied out through a low descriptor (or the mapping), losing nothing."""
    trace, _ = record(tmp_path, "sh", "-c", f"ulimit -n 64 && exec {cases} flood 20000")
    assert event_values(dump(trace), 3) == list(range(20000))
    [thread] = meta(trace)["threads"]
    assert thread["dropped_events"] == 0


def test_chunk_files_come_from_the_spare_pool_and_record_the_same(tmp_path):
    """Each chunk file the recorder makes takes one spare (docs/recorder.md, "Start-up"); with
    the pool or without it, the same files and the same records."""
    script = "for i in 1 2 3 4 5 6; do /bin/true; done"
    seen = {}
    for pool in ("on", "off"):
        trace = tmp_path / pool
        env = {**os.environ, "OSLENS_SPARE_FILES": "1" if pool == "on" else "0"}
        run_oslens("record", "--no-kernel", "--no-import", "-o", trace, "--", "/bin/sh", "-c", script, env=env)
        files = sorted(p.name for p in (trace / "raw").glob("*.osl"))
        assert not (trace / "spare").exists()
        seen[pool] = (len(files), collections.Counter(r["kind"] for r in dump(trace)), meta(trace)["spare_files"])
    assert seen["off"][2] == {"off": True}
    # one number taken per chunk file (sh: a chunk and a names chunk; its six children, which
    # only fork and exec: a names chunk each, their markers in its thread ledger)
    assert seen["on"][2]["taken"] == seen["on"][0] == seen["off"][0] == 8
    assert seen["on"][1] == seen["off"][1]
    assert seen["on"][1]["process_exec"] == 6
