//! Managers, counters and timers (Kohr et al. 1994, section 3.2). Instruments are created once
//! (slow path, registered for reset and for the final counter values) and used through raw
//! pointers handed to C.

use crate::{clock, names, record_at, COUNTER_PERIOD_TICKS};
use oslens_format::kinds;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering::Relaxed};

pub struct Manager {
    pub id: u32,
    pub suspended: AtomicBool,
}

/// Cache-line aligned: two threads' instruments never share a line.
#[repr(align(64))]
pub struct Counter {
    pub value: AtomicI64,
    next_due: AtomicU64,
    pub id: u32,
    pub manager: &'static Manager,
}

/// Laid out as oslens.h's `osl__timer_layout` (the inline timer reads it): keep the order.
#[repr(C, align(64))]
pub struct Timer {
    pub started: AtomicU64,
    pub total_ticks: AtomicU64,
    pub id: u32,
    /// Its manager's suspension, mirrored here so the inline path reads one line.
    pub suspended: AtomicBool,
    pub manager: &'static Manager,
}

/// The process-wide manager (id 0). Its suspension is part of the global activation word.
pub static PROCESS_MANAGER: Manager = Manager { id: 0, suspended: AtomicBool::new(false) };

/// Instrument ids are handed out in sequence, with the top bit set so they never equal a
/// hashed region or phase id.
static NEXT_ID: AtomicU32 = AtomicU32::new(0x8000_0001);

#[derive(Clone, Copy)]
enum Instrument {
    Counter(&'static Counter),
    Timer(&'static Timer),
}

static REGISTRY_LOCK: AtomicBool = AtomicBool::new(false);
static mut REGISTRY: Vec<Instrument> = Vec::new();

pub fn lock_registry() {
    while REGISTRY_LOCK.compare_exchange_weak(false, true, std::sync::atomic::Ordering::Acquire, Relaxed).is_err() {
        std::thread::yield_now();
    }
}

pub fn unlock_registry() {
    REGISTRY_LOCK.store(false, std::sync::atomic::Ordering::Release);
}

fn registry() -> Vec<Instrument> {
    lock_registry();
    // SAFETY: REGISTRY is only touched with the lock held.
    let copy = unsafe { (*std::ptr::addr_of!(REGISTRY)).clone() };
    unlock_registry();
    copy
}

fn register(i: Instrument) {
    lock_registry();
    // SAFETY: as above.
    unsafe { (*std::ptr::addr_of_mut!(REGISTRY)).push(i) };
    unlock_registry();
}

pub fn new_manager(name: &str) -> &'static Manager {
    let m: &'static Manager = Box::leak(Box::new(Manager { id: NEXT_ID.fetch_add(1, Relaxed), suspended: AtomicBool::new(false) }));
    names::define_kept(kinds::NAME_MANAGER, m.id, 0, name);
    m
}

pub fn new_counter(name: &str, manager: &'static Manager) -> &'static Counter {
    crate::ensure_counter_period();
    let c: &'static Counter = Box::leak(Box::new(Counter {
        value: AtomicI64::new(0),
        next_due: AtomicU64::new(0),
        id: NEXT_ID.fetch_add(1, Relaxed),
        manager,
    }));
    register(Instrument::Counter(c));
    names::define_kept(kinds::NAME_COUNTER, c.id, manager.id, name);
    c
}

pub fn new_timer(name: &str, manager: &'static Manager) -> &'static Timer {
    let t: &'static Timer = Box::leak(Box::new(Timer {
        started: AtomicU64::new(0),
        total_ticks: AtomicU64::new(0),
        id: NEXT_ID.fetch_add(1, Relaxed),
        suspended: AtomicBool::new(manager.suspended.load(Relaxed)),
        manager,
    }));
    register(Instrument::Timer(t));
    names::define_kept(kinds::NAME_TIMER, t.id, manager.id, name);
    t
}

impl Counter {
    #[inline(always)]
    pub fn count(&self, delta: i64) {
        let before = self.value.fetch_add(delta, Relaxed);
        let value = before.wrapping_add(delta);
        let period = COUNTER_PERIOD_TICKS.load(Relaxed);
        // The clock is read only when the count crosses a multiple of 64 (and on the first
        // count), so counting stays an atomic add: the period is honoured to within 64 counts.
        if period != 0 && (before == 0 || (before ^ value) as u64 >= 64) {
            let now = clock::now();
            if now >= self.next_due.load(Relaxed) {
                self.next_due.store(now + period, Relaxed);
                record_at(now, kinds::COUNTER, self.id, value as u64, kinds::COUNTER_PERIODIC);
            }
        }
    }

    pub fn record(&self, why: u64) {
        record_at(clock::now(), kinds::COUNTER, self.id, self.value.load(Relaxed) as u64, why);
    }
}

impl Timer {
    #[inline(always)]
    pub fn start(&self) {
        let now = clock::now();
        self.started.store(now, Relaxed);
        record_at(now, kinds::TIMER_START, self.id, 0, 0);
    }

    #[inline(always)]
    pub fn stop(&self) {
        let now = clock::now();
        let elapsed = now.saturating_sub(self.started.load(Relaxed));
        // Not an atomic add: a timer times one fragment at a time (`started` is one value), so
        // one thread uses it at a time; the inlined stop in oslens.h does the same.
        self.total_ticks.store(self.total_ticks.load(Relaxed) + elapsed, Relaxed);
        record_at(now, kinds::TIMER_STOP, self.id, elapsed, 0);
    }
}

/// Suspends or resumes a manager's instruments (not the process-wide one's: that is a bit of
/// the activation word).
pub fn set_suspended(m: &Manager, on: bool) {
    m.suspended.store(on, Relaxed);
    for i in registry() {
        if let Instrument::Timer(t) = i {
            if t.manager.id == m.id {
                t.suspended.store(on, Relaxed);
            }
        }
    }
}

fn belongs(manager_id: u32, target: Option<&Manager>) -> bool {
    target.map_or(true, |m| m.id == manager_id)
}

/// Resets the instruments of one manager (None = all): counters to zero, timer totals to zero.
pub fn reset(target: Option<&Manager>) {
    for i in registry() {
        match i {
            Instrument::Counter(c) if belongs(c.manager.id, target) => {
                c.value.store(0, Relaxed);
                c.record(kinds::COUNTER_RESET);
            }
            Instrument::Timer(t) if belongs(t.manager.id, target) => t.total_ticks.store(0, Relaxed),
            _ => {}
        }
    }
}

/// Records every counter's current value (at exit, and on osl_flush).
pub fn record_all_counters(why: u64) {
    for i in registry() {
        if let Instrument::Counter(c) = i {
            if crate::active() && !c.manager.suspended.load(Relaxed) {
                c.record(why);
            }
        }
    }
}
