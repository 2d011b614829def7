from oslens.osbench import registry


def test_all_seven_groups_of_the_paper_exist():
    for group in ("calls", "timeslice", "ctx", "fault", "malloc", "file", "copy"):
        assert any(b.group == group for b in registry.BENCHMARKS), group


def test_names_are_unique():
    names = [b.name for b in registry.BENCHMARKS]
    assert len(names) == len(set(names))


def test_select_by_name_group_prefix_and_glob():
    chosen, unknown = registry.select(["calls.function", "fault", "ctx.thread", "*.uncached", "nope"])
    names = {b.name for b in chosen}
    assert "calls.function" in names and "fault.zero_fill.4MiB" in names
    assert "ctx.thread.pinned" in names and "ctx.thread_fp.pinned" not in names
    assert "file.read.direct.uncached" in names
    assert unknown == ["nope"]


def test_rr_benchmarks_need_root_and_a_sysctl():
    for b in registry.BENCHMARKS:
        if b.name.startswith("timeslice.rr"):
            assert b.root_only and "kernel.sched_rr_timeslice_ms" in b.sysctl
