//! The recorder's heap allocations never abort the program. Rust aborts the process when an
//! allocation fails (and stable Rust has no hook to change that), so a recorder loaded into a
//! program that has exhausted its address space (RLIMIT_AS, `vm.overcommit_memory=2`) would
//! kill it on a thread's first event. The recorder's allocations go through `Guarded`: when
//! the system allocator fails, the allocation is served from a small static reserve instead
//! and counted as a fault of the process (ENOMEM): threads that have no chunk yet get none and
//! are counted (`lost`: "out of memory at ..."), threads that have one keep recording into it,
//! and no new chunk is tried, so the reserve only has to carry the allocations in flight. The
//! hot path allocates nothing.
//! Figures and the test: docs/recorder.md, "Faults"; tests/test_faults.py.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::*};

/// 256 KiB: a thread's or a chunk's slow-path allocations take a few hundred bytes each, and
/// after the first failure no new chunk is tried (space::note_process_fault).
const RESERVE_BYTES: usize = 256 << 10;

#[repr(C, align(4096))]
struct Reserve(UnsafeCell<[u8; RESERVE_BYTES]>);
// SAFETY: disjoint ranges are handed out by an atomic bump pointer.
unsafe impl Sync for Reserve {}

static RESERVE: Reserve = Reserve(UnsafeCell::new([0; RESERVE_BYTES]));
static RESERVE_USED: AtomicUsize = AtomicUsize::new(0);
/// Allocations the system allocator refused since the process started.
static FAILURES: AtomicU64 = AtomicU64::new(0);

pub struct Guarded;

fn reserve_start() -> usize {
    RESERVE.0.get() as usize
}

fn in_reserve(p: *mut u8) -> bool {
    let at = p as usize;
    at >= reserve_start() && at < reserve_start() + RESERVE_BYTES
}

/// Bump-allocates from the reserve (never freed: it only carries the recorder to a stop);
/// null when it is used up, and Rust then aborts as it would have.
fn from_reserve(layout: Layout) -> *mut u8 {
    let mut used = RESERVE_USED.load(Relaxed);
    loop {
        let at = (reserve_start() + used).next_multiple_of(layout.align()) - reserve_start();
        let end = at + layout.size();
        if end > RESERVE_BYTES {
            return std::ptr::null_mut();
        }
        match RESERVE_USED.compare_exchange_weak(used, end, Relaxed, Relaxed) {
            Ok(_) => return (reserve_start() + at) as *mut u8,
            Err(now) => used = now,
        }
    }
}

fn failed(layout: Layout) -> *mut u8 {
    FAILURES.fetch_add(1, Relaxed);
    // threads with no chunk yet get none from now on, and are counted (space.rs)
    crate::space::note_process_fault(libc::ENOMEM as u32);
    from_reserve(layout)
}

// SAFETY: every pointer handed out is either the system allocator's (freed and resized by it)
// or a disjoint range of the reserve of the requested size and alignment (never freed).
unsafe impl GlobalAlloc for Guarded {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if p.is_null() { failed(layout) } else { p }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        // the reserve's bytes are zero: they are handed out once
        if p.is_null() { failed(layout) } else { p }
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        if !in_reserve(p) {
            System.dealloc(p, layout);
        }
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !in_reserve(p) {
            let q = System.realloc(p, layout, new_size);
            if !q.is_null() {
                return q;
            }
        }
        let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
        let q = if in_reserve(p) { self.alloc(new_layout) } else { failed(new_layout) };
        if !q.is_null() {
            std::ptr::copy_nonoverlapping(p, q, layout.size().min(new_size));
            self.dealloc(p, layout);
        }
        q
    }
}

/// True once any allocation failed: the recorder then opens no new chunk in this process.
pub fn any_failed() -> bool {
    FAILURES.load(Relaxed) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_serves_aligned_disjoint_blocks_and_runs_out() {
        let a = from_reserve(Layout::from_size_align(10, 8).unwrap());
        let b = from_reserve(Layout::from_size_align(100, 64).unwrap());
        assert!(in_reserve(a) && in_reserve(b));
        assert_eq!(b as usize % 64, 0);
        assert!(b as usize >= a as usize + 10);
        assert!(from_reserve(Layout::from_size_align(RESERVE_BYTES, 8).unwrap()).is_null());
        assert!(!in_reserve(Box::into_raw(Box::new(1u64)) as *mut u8));
    }

    #[test]
    fn a_block_of_the_reserve_moves_out_when_it_grows() {
        // (a real failure, which marks the process faulted, is tested end to end: test_faults.py)
        let p = from_reserve(Layout::from_size_align(32, 8).unwrap());
        // SAFETY: the reserve's blocks are ignored by dealloc and moved by realloc.
        unsafe {
            p.write(7);
            let q = Guarded.realloc(p, Layout::from_size_align(32, 8).unwrap(), 64);
            assert!(!q.is_null() && !in_reserve(q) && *q == 7);
            Guarded.dealloc(q, Layout::from_size_align(64, 8).unwrap());
        }
    }
}
