"""Kernel stacks merged into one call tree (outermost frame at the top), small branches folded
away, and the kernel functions a student meets in a page fault explained in a few words."""

from __future__ import annotations

from dataclasses import dataclass, field

# What a function on the fault path does, for a reader who has not read mm/ (Linux 6.x names).
NOTES = {
    "asm_exc_page_fault": "the CPU raised a page fault: the exception's entry point",
    "exc_page_fault": "x86 fault handler: reads the faulting address from CR2",
    "do_user_addr_fault": "a fault on a user address: find its VMA, check the access is allowed",
    "handle_mm_fault": "the architecture-independent fault handler",
    "__handle_mm_fault": "walks the page tables down to the entry for the address, making missing levels",
    "handle_pte_fault": "decides the kind of fault from the page-table entry and the VMA",
    "do_pte_missing": "no entry yet: anonymous memory or a file?",
    "do_anonymous_page": "first touch of anonymous memory: a zeroed page is mapped",
    "alloc_anon_folio": "allocates the page (a folio) for anonymous memory",
    "vma_alloc_folio_noprof": "allocates a folio with the VMA's memory policy",
    "alloc_pages_mpol": "page allocation under a NUMA memory policy",
    "__alloc_frozen_pages_noprof": "the buddy allocator's entry: takes pages from a free list",
    "get_page_from_freelist": "the buddy allocator's fast path",
    "__pte_alloc": "a new page-table page (one per 2 MiB of address space)",
    "pte_alloc_one": "allocates a page-table page",
    "do_fault": "the address is in a file mapping: read, shared or private",
    "do_read_fault": "a read of a file page: map it from the page cache",
    "do_cow_fault": "a write to a private file page: copy it",
    "do_shared_fault": "a write to a shared file page",
    "__do_fault": "asks the file system's fault handler for the page",
    "filemap_fault": "the page cache's fault handler: find the page or read it",
    "ext4_filemap_fault": "ext4's fault handler (takes a lock, then filemap_fault)",
    "do_sync_mmap_readahead": "the page is not cached: read it now (and ahead, unless MADV_RANDOM)",
    "page_cache_ra_unbounded": "reads a range of pages into the page cache",
    "page_cache_sync_ra": "synchronous read-ahead",
    "filemap_add_folio": "inserts the new page into the page cache (the file's xarray)",
    "__filemap_add_folio": "the page-cache insertion itself",
    "filemap_alloc_folio_noprof": "allocates the page that will hold the file's data",
    "read_pages": "asks the file system to read the new pages",
    "ext4_readahead": "ext4 reads pages: maps file blocks to disk blocks",
    "ext4_mpage_readpages": "builds the block I/O (a bio) for the pages",
    "submit_bio": "hands a bio to the block layer: the disk read starts here",
    "submit_bio_noacct": "the block layer's entry for a bio",
    "__submit_bio": "queues the bio on the device",
    "filemap_read_folio": "reads one page and waits for it",
    "do_wp_page": "a write to a write-protected page: copy-on-write, or reuse if not shared",
    "wp_page_copy": "copies the shared page into a new one for the writer",
    "do_huge_pmd_anonymous_page": "first touch of a huge-page-eligible range: one 2 MiB page",
    "__do_huge_pmd_anonymous_page": "maps the 2 MiB page with one page-middle-directory entry",
    "vma_alloc_anon_folio_pmd": "allocates a 2 MiB folio for the range",
    "clear_huge_page": "zeroes the 512 pages of the new huge page",
    "folio_zero_user": "zeroes the new huge page",
    "create_huge_pmd": "the fault can be served with a huge page",
    "do_page_mkwrite": "tells the file system a shared page is about to be written",
}

@dataclass
class Node:
    name: str
    count: int = 0
    children: dict = field(default_factory=dict)

    def add(self, path: list[str]) -> None:
        self.count += 1
        if path:
            child = self.children.setdefault(path[0], Node(path[0]))
            child.add(path[1:])


def merge(stacks: list[list[str]], start: str | None = None) -> Node:
    """One tree of the stacks (outermost frame first); with `start`, each stack from the first
    frame of that name on (stacks without it are left out)."""
    root = Node("")
    for stack in stacks:
        if start is not None:
            if start not in stack:
                continue
            stack = stack[stack.index(start):]
        root.add(stack)
    return root


def render(root: Node, share: float = 0.02, width: int = 44) -> list[str]:
    """The tree as lines "count  function  what it does". A chain of calls that all carry the
    same count is one column (no indent); a branch indents. Branches under `share` of the
    tree's total are folded into one '(N more in K small branches)' line."""
    lines: list[str] = []
    floor = max(1, int(root.count * share))

    def walk(node: Node, indent: int, first: bool, last_count: int | None) -> None:
        label = ("  " * indent) + ("└ " if indent and first else "") + node.name
        note = NOTES.get(node.name, "")
        count = f"{node.count:>9,}" if node.count != last_count else " " * 9
        lines.append(f"{count}  {label:<{width}} {note}".rstrip())
        kids = sorted(node.children.values(), key=lambda n: -n.count)
        big = [k for k in kids if k.count >= floor]
        small = [k for k in kids if k.count < floor]
        branch = len(big) > 1
        for k in big:
            walk(k, indent + 1 if branch else indent, branch, None if branch else node.count)
        if small:
            n = sum(k.count for k in small)
            lines.append(f"{n:>9,}  {'  ' * (indent + 1)}({n:,} more in {len(small)} small branch{'es' if len(small) > 1 else ''})")

    for top in sorted(root.children.values(), key=lambda n: -n.count):
        walk(top, 0, False, None)
    return lines


def count_under(stacks: list[list[str]], *functions: str, excluding: tuple = ()) -> int:
    """Stacks that pass through every one of `functions` and none of `excluding`."""
    return sum(1 for s in stacks if all(f in s for f in functions) and not any(f in s for f in excluding))
