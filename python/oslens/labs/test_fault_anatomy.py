"""Lab 4's parts without a kernel: the ftrace stack parser on text as this kernel writes it, the
merged call tree (chains, branches, folding), the counts under a path, the preflight on fake
sysfs trees, and the model's figures."""

from __future__ import annotations

from oslens.capture import kstacks
from oslens_testing.control import fakesys
from oslens.labs import calltree, fault_anatomy, preflight

TRACE = """# tracer: nop
#
            fault_kinds-4771    [001] ...1. 12322.778932: mm_page_alloc: page=0000000026af3221 pfn=0x213648 order=0 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE|__GFP_ZERO
            fault_kinds-4771    [001] ...1. 12322.778935: <stack trace>
 => trace_event_raw_event_mm_page_alloc
 => __alloc_frozen_pages_noprof+0x1c4/0x330
 => alloc_pages_mpol
 => vma_alloc_folio_noprof
 => do_anonymous_page
 => __handle_mm_fault
 => handle_mm_fault
 => exc_page_fault
 => asm_exc_page_fault
            fault_kinds-4771    [001] ...1. 12322.778990: mm_page_alloc: page=00000000b6315950 pfn=0x212a4e order=0 migratetype=1 gfp_flags=GFP_PGTABLE_USER
            fault_kinds-4771    [001] ...1. 12322.778991: <stack trace>
 => trace_event_raw_event_mm_page_alloc
 => __alloc_frozen_pages_noprof
 => alloc_pages_noprof
 => __pte_alloc
 => do_anonymous_page
 => __handle_mm_fault
 => handle_mm_fault
 => exc_page_fault
 => asm_exc_page_fault
"""


def test_parse_keeps_fields_and_the_stack_outermost_first_without_the_tracing_frames():
    hits = kstacks.parse(TRACE)
    assert [h.event for h in hits] == ["mm_page_alloc", "mm_page_alloc"]
    assert hits[0].pid == 4771 and hits[0].fields["order"] == "0"
    assert hits[0].stack == ["asm_exc_page_fault", "exc_page_fault", "handle_mm_fault", "__handle_mm_fault",
                             "do_anonymous_page", "vma_alloc_folio_noprof", "alloc_pages_mpol", "__alloc_frozen_pages_noprof"]
    assert hits[1].stack[-3:] == ["__pte_alloc", "alloc_pages_noprof", "__alloc_frozen_pages_noprof"]


def test_counts_under_a_path_leave_page_tables_out():
    stacks = [h.stack for h in kstacks.parse(TRACE)]
    assert calltree.count_under(stacks, "do_anonymous_page") == 2
    assert calltree.count_under(stacks, "do_anonymous_page", excluding=fault_anatomy.PAGE_TABLES) == 1
    assert calltree.count_under(stacks, "do_anonymous_page", "__pte_alloc") == 1


def test_tree_chains_share_a_column_branches_indent_and_small_ones_fold():
    stacks = [["f", "a", "b"]] * 60 + [["f", "a", "c"]] * 39 + [["f", "a", "d"]]
    lines = calltree.render(calltree.merge(stacks), share=0.02)
    assert lines[0].split() == ["100", "f"]
    assert lines[1].split() == ["a"]  # same count: a chain, no count repeated
    assert lines[2].split() == ["60", "└", "b"] and lines[3].split() == ["39", "└", "c"]
    assert lines[4].split()[0] == "1" and "(1 more in 1 small branch)" in lines[4]
    noted = calltree.render(calltree.merge([["asm_exc_page_fault", "do_wp_page"]]))
    assert "copy-on-write" in noted[1]


def test_merge_from_the_fault_entry_leaves_other_stacks_out():
    tree = calltree.merge([["x", "asm_exc_page_fault", "y"], ["do_exit", "z"]], start="asm_exc_page_fault")
    assert tree.count == 1 and list(tree.children) == ["asm_exc_page_fault"]


def test_preflight_names_what_kernel_stacks_need(tmp_path):
    root = fakesys.make(tmp_path / "root")
    check = preflight.REQUIREMENTS["kernel-stacks"]
    ok, detail = check(None, tmp_path, root)
    assert not ok and detail.startswith("no tracefs in this kernel")
    (root / "proc/filesystems").write_text("nodev\ttmpfs\nnodev\ttracefs\n")
    (root / "sys/kernel/tracing").mkdir(parents=True)
    ok, detail = check(None, tmp_path, root)
    assert ok and "the lab mounts it on /sys/kernel/tracing for the run" in detail
    (root / "sys/kernel/tracing/instances").mkdir(parents=True)
    ok, detail = check(None, tmp_path, root)
    assert not ok and "no kmem:mm_page_alloc trigger file" in detail
    trigger = root / "sys/kernel/tracing/events/kmem/mm_page_alloc/trigger"
    trigger.parent.mkdir(parents=True)
    trigger.write_text("")
    assert check(None, tmp_path, root)[0]


def test_model_figures_quick():
    p = fault_anatomy.params(True)
    e = fault_anatomy.expect({**p, "page": 4096}, None)
    assert {k: v.value for k, v in e.items()} == {
        "zero_allocs": 1024, "zero_pagetables": 2, "file_major_faults": 1024, "file_inserts": 1024,
        "file_bios": 1024, "cow_copies": 1024, "thp_faults": 4, "thp_order": 9}
    assert not e["thp_order"].widen
