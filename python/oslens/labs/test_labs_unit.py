"""Unit tests of the lab framework: every lab's preflight on machines described by fake sysfs
trees (cgroup v1, v2, none; root or not), the answers file's errors, the band rule, and lab 1's
model against the page arithmetic done another way."""

from __future__ import annotations

import pytest

from oslens import labs
from oslens_testing.control import fakesys
from oslens.errors import OslensError
from oslens.labs import check, preflight, sheet, thrashing
from oslens.labs.lab import Expectation

MEMINFO_SWAP = "MemTotal: 24000000 kB\nSwapTotal: 1048576 kB\n"
MEMINFO_NOSWAP = "MemTotal: 24000000 kB\nSwapTotal: 0 kB\n"


def _machine(tmp_path, swap=False, **kw):
    root = fakesys.make(tmp_path / "root", **kw)
    (root / "proc/meminfo").write_text(MEMINFO_SWAP if swap else MEMINFO_NOSWAP)
    return root


def _checks(lab, root, data):
    return {c.name: c for c in preflight.preflight(lab, data, root)}


@pytest.mark.parametrize("lab", labs.all_labs(), ids=lambda lab: f"lab{lab.number}")
def test_every_lab_preflight_names_what_is_missing(tmp_path, lab):
    """Without a cgroup controller, root or swap, each lab's preflight blocks with a reason
    that names the missing piece; on a v1 machine with root those pass."""
    data = tmp_path
    bare = _machine(tmp_path / "bare", cgroup="none", root_user=False, cpus="0")
    full = _machine(tmp_path / "full", cgroup="v1", swap=True)
    missing = _checks(lab, bare, data)
    present = _checks(lab, full, data)
    assert set(missing) == set(lab.requires) | set(lab.optional)
    for name in ("memory-cgroup", "cpu-cgroup"):
        if name in missing:
            assert not missing[name].ok
            assert f"no {name.split('-')[0]} controller on cgroup v1 or v2" in missing[name].detail
            assert present[name].ok and "cgroup v1" in present[name].detail
    if "root" in missing:
        assert not missing["root"].ok and "run it with sudo" in missing["root"].detail
        assert present["root"].ok
    if "two-cpus" in missing:
        assert not missing["two-cpus"].ok and present["two-cpus"].ok
    if "swap" in missing:
        assert not missing["swap"].ok and "no swap is active" in missing["swap"].detail
    if "no-swap" in missing:
        assert missing["no-swap"].ok and not present["no-swap"].ok
        assert "swapoff" in present["no-swap"].detail
    if set(lab.requires) & {"root", "memory-cgroup", "cpu-cgroup", "two-cpus", "swap"}:
        assert preflight.blockers(list(missing.values())), "a machine with nothing must block the lab"


@pytest.mark.parametrize("lab", [lab for lab in labs.all_labs() if "compiler" in lab.requires],
                         ids=lambda lab: f"lab{lab.number}")
def test_preflight_without_a_compiler(tmp_path, monkeypatch, lab):
    monkeypatch.setenv("PATH", str(tmp_path))
    c = _checks(lab, _machine(tmp_path), tmp_path)["compiler"]
    assert not c.ok and c.detail.startswith("no cc and no make in PATH")


def test_memory_controller_on_cgroup_v2(tmp_path):
    """The fake v2 tree (memory on the unified hierarchy) satisfies the memory requirement and
    is stamped v2: this VM has no v2 memory controller, so only the fake tree tests it."""
    root = _machine(tmp_path, cgroup="v2")
    c = _checks(thrashing.LAB, root, tmp_path)["memory-cgroup"]
    assert c.ok and c.detail == "memory controller on cgroup v2 (/sys/fs/cgroup)"
    assert preflight.facts(tmp_path, root)["memory_cgroup"] == "v2"


def test_tmpfs_data_dir_blocks_the_paging_labs(tmp_path):
    root = _machine(tmp_path)
    (root / "proc/self/mounts").write_text(f"tmpfs {tmp_path} tmpfs rw 0 0\n")
    c = _checks(thrashing.LAB, root, tmp_path)["disk"]
    assert not c.ok and "is on tmpfs" in c.detail and "-o DIR" in c.detail


def test_every_lab_has_a_sheet_and_its_questions_in_the_template():
    for lab in labs.all_labs():
        text = sheet.text(lab)
        assert text.startswith(f"# Lab {lab.number} ")
        for variant in lab.variants:
            questions = lab.questions_for(variant)
            for q in questions:
                assert f"`{q.key}`" in text, f"lab {lab.number}'s sheet does not ask {q.key} ({variant})"
            if variant != lab.default_variant:
                assert f"--variant {variant}" in text, f"lab {lab.number}'s sheet does not name variant {variant}"
            template = sheet.answers_template(lab, variant)
            assert all(f"{q.key} = 0" in template for q in questions)
            assert (f'variant = "{variant}"' in template) == (variant != lab.default_variant)


def test_unknown_lab_is_one_clear_error():
    with pytest.raises(OslensError, match=r"there is no lab 99; the labs are 1"):
        labs.get(99)


@pytest.mark.parametrize("text,message", [
    ("lab = 2\n[answers]\nrow_major_faults = 1\n", "these answers are for lab 2, not lab 1"),
    ("lab = 1\n[answers]\nrow_faults = 1\n", "row_faults: lab 1 has no such question"),
    ("lab = 1\n[answers]\nrow_major_faults = 'many'\n", "'many' is not a number"),
    ("lab = 1\n[answers\n", "not valid TOML"),
    ("lab = 1\n", "no [prediction] or [answers] table"),
])
def test_bad_answers_files(tmp_path, text, message):
    p = tmp_path / "a.toml"
    p.write_text(text)
    with pytest.raises(OslensError, match=message.replace("[", r"\[").replace("]", r"\]")):
        check.load_answers(p, thrashing.LAB)


def test_band_widens_to_cover_this_machines_measurement():
    exp = Expectation(1000, 0.05, "m")
    assert exp.effective_band() == 0.05
    assert Expectation(1000, 0.05, "m", measured=1100).effective_band() == pytest.approx(0.15)
    assert check.judge("answers", "k", 1140, Expectation(1000, 0.05, "m", measured=1100)).ok
    v = check.judge("answers", "k", 1160, Expectation(1000, 0.05, "model line", measured=1100))
    assert not v.ok and v.reason.startswith("+16% (high), not ±15% of 1") and "model line" in v.reason
    exact = Expectation(137, 0.0, "SIGKILL", measured=0, widen=False)
    assert check.judge("answers", "k", 137, exact).ok
    v = check.judge("answers", "k", 9, exact)
    assert not v.ok and v.reason == "-93% (low), not exactly 137: SIGKILL; this machine measured 0"
    assert check.judge("answers", "k", 3, Expectation(0, 0.0, "none", abs_band=8)).ok
    assert not check.judge("answers", "k", 9, Expectation(0, 0.0, "none", abs_band=8)).ok


def _pages_by_elements(rows, cols, elem, page, columns):
    """(row, page) pairs and per-column pages by enumerating every element address."""
    pairs, per_col = set(), []
    for j in range(columns):
        per_col.append(len({(i * cols + j) * elem // page for i in range(rows)}))
    for i in range(rows):
        for j in range(cols):
            pairs.add((i, (i * cols + j) * elem // page))
    return pairs, per_col


@pytest.mark.parametrize("rows,cols", [(300, 1000), (100, 5000), (64, 1024), (50, 3000)])
def test_thrashing_model_matches_element_enumeration(rows, cols):
    pairs, per_col = _pages_by_elements(rows, cols, 4, 4096, 3)
    assert thrashing.row_page_pairs(rows, cols, 4, 4096) == len(pairs)
    assert [thrashing.column_pages(rows, cols, 4, 4096, j) for j in range(3)] == per_col
    assert thrashing.matrix_pages(rows, cols, 4, 4096) == len({p for _, p in pairs})


def test_thrashing_quick_model_figures():
    m = thrashing.model(thrashing.params(True))
    assert (m["pages"], m["column_pages"], m["fits_faults"], m["cap_pages"]) == (4883, 4882, 5875, 2048)
    assert m["thrashes"] and m["fits_column_pages"] <= m["cap_pages"]


def test_sched_weights_model_is_the_kernels_table():
    from oslens.labs import sched_weights as sw
    assert sw.weight(0) == 1024 and sw.weight(5) == 335 and sw.weight(10) == 110 and sw.weight(-20) == 88761
    assert round(sw.share(0, 5), 1) == 75.3 and round(sw.share(0, 10), 1) == 90.3
    ratios = [sw.weight(n) / sw.weight(n + 1) for n in range(-20, 19)]
    assert all(1.19 < r < 1.29 for r in ratios)  # the table rounds: 18/15 = 1.2 at nice 18/19


def test_read_ahead_model_uses_the_runs_read_ahead_kb():
    from oslens.labs import readahead
    p = {**readahead.params(True), "read_ahead_kb": 128}
    e = readahead.expect(p, {"params": {"read_ahead_kb": 8192}, "results": {}})
    assert e["readaround_pages"].value == 2048
    assert e["col_major_faults_per_column"].value == 1
    assert e["col_pages_read_per_column"].value == 19532  # the whole file: it starts at page 0, ends at its end
    assert readahead.expect(p, None)["readaround_pages"].value == 32  # no run: the device's own
    assert not any(x.widen for x in e.values())


def _simulated_walk(rows: int, stride: int, offset: int, file_pages: int, w: int, page: int = 4096) -> tuple[int, int]:
    """The kernel's read-ahead replayed element by element (mm/filemap.c, mm/readahead.c): a
    touch of an uncached page reads [p - W/2, p + W/2) and marks the page W/4 before its end; a
    touch of the marked page reads the next W pages and marks their first. (faults, pages read)"""
    cached, marker, ra_end, faults = set(), None, 0, 0

    def read(start, end):
        cached.update(range(start, min(end, file_pages)))

    for i in range(rows):
        p = (i * stride + offset) // page
        if p not in cached:
            faults += 1
            start = max(0, p - w // 2)
            read(start, start + w)
            marker, ra_end = start + w - w // 4, start + w
        elif p == marker:
            read(ra_end, ra_end + w)
            marker, ra_end = ra_end, ra_end + w
    return faults, len(cached)


@pytest.mark.parametrize("rows, offset, w", [(20000, 0, 2048), (100000, 8, 2048), (20000, 0, 32), (3000, 40_000_000, 256)])
def test_read_ahead_model_matches_the_kernels_logic_replayed_page_by_page(rows, offset, w):
    from oslens.labs import readahead
    file_pages = thrashing.matrix_pages(rows, 1000, 4, 4096) + offset // 4096
    first, last = offset // 4096, ((rows - 1) * 4000 + offset) // 4096
    assert readahead.read_ahead_walk(first, last, file_pages, w) == _simulated_walk(rows, 4000, offset, file_pages, w)


def test_read_ahead_model_of_the_labs_sizes():
    from oslens.labs import readahead
    quick = {**readahead.params(True), "read_ahead_kb": 8192, "page": 4096}
    assert readahead.column_model(quick) == {"faults": 1, "pages_read": 19532, "file_pages": 19532}
    full = {**readahead.params(False), "read_ahead_kb": 8192, "page": 4096}
    assert readahead.column_model(full)["pages_read"] == 97657  # a column's 97656 pages and the file's last
    # from the middle of a file: the first window's back half (1024 pages), the 2001 walked, and the
    # window started when the walk entered the one holding its last page (3119 past it): 3 windows
    assert readahead.read_ahead_walk(10_000, 12_000, 100_000, 2048) == (1, 1024 + 2001 + 3119)
    with pytest.raises(OslensError, match="more than a quarter of the 32 MiB cap"):
        readahead.refuse_small_cap({**quick, "read_ahead_kb": 8196}, 2049)
    readahead.refuse_small_cap(quick, 2048)  # four windows: allowed


def test_exact_questions_are_never_widened():
    from oslens.labs import oom
    e = oom.expect(oom.params(True), {"results": {"hard_exit": 0, "hard_oom_kills": 0, "soft_exit": 1}})
    assert not check.judge("answers", "exit_status", 0, e["exit_status"]).ok
    assert check.judge("answers", "exit_status", 137, e["exit_status"]).ok
    assert not check.judge("answers", "oom_kills", 0, e["oom_kills"]).ok


@pytest.mark.parametrize("asked,hz,kept", [(10, 250, 12), (30, 250, 32), (100, 250, 100), (10, 1000, 10),
                                           (5, 100, 10), (10, None, 10)])
def test_quantum_is_kept_in_whole_ticks(asked, hz, kept):
    from oslens.labs import quantum

    assert quantum.quantum_ms(asked, hz) == pytest.approx(kept)


def test_quantum_lab_without_kernel_config_takes_the_kernels_word():
    from oslens.labs import quantum

    p = {**quantum.params(True), "hz": None}
    exp = quantum.expect(p, {"params": {"hz": None}, "results": {"quantum_ms_10": 12.0}})
    assert exp["quantum_ms_10"].value == 12.0 and "CONFIG_HZ unknown" in exp["quantum_ms_10"].model
    assert exp["handovers_per_s_10"].value == pytest.approx(1000 / 12)  # the quantum the kernel gave
    assert exp["quantum_ms_30"].value == 30  # no measurement: the asked value


def test_rr_timeslice_preflight_names_the_missing_file(tmp_path):
    from oslens.labs import quantum

    root = _machine(tmp_path)
    (root / "proc/sys/kernel/sched_rr_timeslice_ms").unlink()
    c = _checks(quantum.LAB, root, tmp_path)["rr-timeslice"]
    assert not c.ok and "no /proc/sys/kernel/sched_rr_timeslice_ms" in c.detail
    c = _checks(quantum.LAB, _machine(tmp_path / "ok"), tmp_path)["rr-timeslice"]
    assert c.ok and "sched_rr_timeslice_ms 100" in c.detail


def test_mutex_models():
    from oslens.labs import mutex

    assert mutex.handover_model(1.0) == 0.5 and mutex.handover_model(0.0) == 0.0
    exp = mutex.expect(mutex.params(True), {"results": {"cs_fraction": 0.8, "one_futex_per_op": 0.0}})
    assert exp["pinned_contended_per_handover"].value == pytest.approx(0.8 / 1.8)
    one = exp["one_futex_per_op"]
    assert check.judge("answers", "one_futex_per_op", 0.0, one).ok
    assert not check.judge("answers", "one_futex_per_op", 0.01, one).ok  # one call in a hundred operations: wrong


def test_read_ahead_verdict_compares_a_window_with_its_pages_read_singly():
    # 2048-page window: slower only when the window costs more than 2048 single-page reads
    slower, text = preflight.read_ahead_verdict(100e-6, 0.21, 2048)
    assert slower and "the column walk gets slower" in text
    slower, text = preflight.read_ahead_verdict(100e-6, 0.15, 2048)
    assert not slower and "1× cheaper" in text
    slower, text = preflight.read_ahead_verdict(100e-6, 0.01, 2048)
    assert not slower and "20× cheaper" in text and "gets faster with read-ahead, not slower" in text


def test_zram_variant_preflight_says_why_it_cannot_run(tmp_path):
    """Fake machines (no real zram is touched): no zram in the kernel, every device busy, and a
    free one. The default variant does not ask for zram at all."""
    from oslens.control import zram

    root = _machine(tmp_path)
    assert "zram-swap" not in _checks(thrashing.LAB, root, tmp_path)
    c = {x.name: x for x in preflight.preflight(thrashing.LAB, tmp_path, root, variant="zram")}["zram-swap"]
    assert not c.ok and c.blocking and "no zram device (/sys/block/zram*)" in c.detail
    assert "swaps the capped program's pages to a compressed RAM disk" in c.detail
    dev = root / "sys/block/zram0"
    dev.mkdir(parents=True)
    (dev / "initstate").write_text("1\n")
    c = {x.name: x for x in preflight.preflight(thrashing.LAB, tmp_path, root, variant="zram")}["zram-swap"]
    assert not c.ok and "every zram device (zram0) is in use" in c.detail
    (dev / "initstate").write_text("0\n")
    (dev / "comp_algorithm").write_text("lzo [lz4]\n")
    c = {x.name: x for x in preflight.preflight(thrashing.LAB, tmp_path, root, variant="zram")}["zram-swap"]
    assert c.ok == (zram.missing(root) is None) and (not c.ok or "zram0 free (compressors lzo lz4, now lz4)" in c.detail)


def test_zram_variant_model_figures():
    from oslens.labs import thrashing_zram

    p = thrashing.params(True, "zram")
    e = thrashing_zram.expect(p, None)
    assert (e["fill_swap_outs"].value, e["row_swap_ins"].value, e["col_swap_ins_per_column"].value) == (2835, 4883, 4882)
    assert e["oom_kills"].value == 0 and not e["oom_kills"].widen
    assert thrashing_zram.swap_bytes(p) == 52 << 20  # the matrix rounded up to MiB, plus 32 MiB
    assert not check.judge("answers", "oom_kills", 1, e["oom_kills"]).ok  # lab 3's answer is wrong here


def test_variant_questions_are_checked_against_the_variant(tmp_path):
    a = tmp_path / "a.toml"
    a.write_text('lab = 1\nvariant = "zram"\n[answers]\nrow_major_faults = 4883\n')
    with pytest.raises(OslensError, match="row_major_faults: lab 1 variant zram has no such question"):
        check.load_answers(a, thrashing.LAB)
    a.write_text('lab = 1\nvariant = "swap"\n[answers]\nrow_swap_ins = 1\n')
    with pytest.raises(OslensError, match="lab 1 has no variant 'swap'; its variants are default, zram"):
        check.load_answers(a, thrashing.LAB)


@pytest.mark.parametrize("slice_us,hz,bounds", [(100, 250, (4, 4)), (3000, 250, (4, 4)), (10000, 250, (4, 12)),
                                                (4000, 250, (4, 4)), (3000, 1000, (1, 3)), (10000, 100, (10, 10))])
def test_eevdf_turns_are_whole_ticks(slice_us, hz, bounds):
    from oslens.labs import quantum_eevdf

    assert quantum_eevdf.turn_bounds(slice_us, hz) == pytest.approx(bounds)


def test_eevdf_variant_needs_per_task_slices(tmp_path):
    from oslens.labs import quantum

    old = _machine(tmp_path / "old", kernel="6.6.0")
    c = {x.name: x for x in preflight.preflight(quantum.LAB, tmp_path, old, variant="eevdf")}["eevdf-slice"]
    assert not c.ok and "kernel 6.6.0 is older than 6.12" in c.detail and "sets each spinner's slice" in c.detail
    new = _machine(tmp_path / "new")
    c = {x.name: x for x in preflight.preflight(quantum.LAB, tmp_path, new, variant="eevdf")}["eevdf-slice"]
    assert c.ok and "sched_runtime" in c.detail
    assert "rr-timeslice" not in {x.name for x in preflight.preflight(quantum.LAB, tmp_path, new, variant="eevdf")}


class _WalkContext:
    """What lab 2's walk reads of a run: the cgroup's OOM kills and refaults, and what it says."""

    def __init__(self):
        self.oom_kills, self.said = 0, []

    def cap_usage(self):
        return {"oom_kills": self.oom_kills}

    def refaults(self):
        return 100 * self.oom_kills

    def memory_stat(self, key):
        return {"pgmajfault": 7}[key]

    def say(self, text):
        self.said.append(text)


def _walks(monkeypatch, ctx, outcomes):
    """thrashing.walk replaced by one that, per call, OOM-kills ('oom'), fails otherwise ('fail'),
    or returns its number."""
    calls = iter(outcomes)

    def walk(*_args):
        what = next(calls)
        if what == "oom":
            ctx.oom_kills += 1
        if what in ("oom", "fail"):
            raise OslensError("matrix_sum printed no result (exit 137)", 1)
        return {"walk": what}

    monkeypatch.setattr(thrashing, "walk", walk)


def test_lab2_walk_is_run_again_only_after_an_oom_kill(monkeypatch):
    from oslens.labs import readahead

    p = readahead.params(True)
    ctx = _WalkContext()
    _walks(monkeypatch, ctx, ["oom", 2])
    assert readahead._walk(ctx, "col-normal", None, p, None, "normal") == ({"walk": 2}, {"refaults": 100, "pgmajfault": 7})
    assert len(ctx.said) == 1 and "OOM killer killed the normal walk" in ctx.said[0]
    _walks(monkeypatch, ctx, ["fail"])  # any other failure is not retried
    with pytest.raises(OslensError):
        readahead._walk(ctx, "col-normal", None, p, None, "normal")
    _walks(monkeypatch, ctx, ["oom"] * readahead.WALK_ATTEMPTS)
    with pytest.raises(OslensError):
        readahead._walk(ctx, "col-normal", None, p, None, "normal")
