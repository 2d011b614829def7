//! Record kinds. Application kinds are below 64, kernel kinds from 64 on.
//! The meaning of `id`, `a` and `b` for each kind is documented beside it and in
//! docs/raw-format.md.

/// Never written: an all-zero slot.
pub const EMPTY: u8 = 0;
/// Names an id. id = the id named, a = name class | manager id << 32, b = byte length;
/// followed by ceil(b / 30) `CONT` records holding the UTF-8 name.
pub const NAME: u8 = 1;
/// 30 bytes of the payload of the preceding NAME or EVENT record.
pub const CONT: u8 = 2;
/// User event. id = event id, a = payload length, b = first 8 payload bytes; the rest in CONT records.
pub const EVENT: u8 = 3;
/// Region begin / end. id = region id (a hash of its name).
pub const REGION_BEGIN: u8 = 4;
pub const REGION_END: u8 = 5;
/// Counter value. id = counter id, a = value, b = why (`COUNTER_*`).
pub const COUNTER: u8 = 6;
/// Timer start / stop. id = timer id; on stop a = elapsed raw clock ticks.
pub const TIMER_START: u8 = 7;
pub const TIMER_STOP: u8 = 8;
/// Manager control. id = manager id (0 = process-wide), a = `CONTROL_*`.
pub const CONTROL: u8 = 9;
/// The recorder itself stopped the program: id = 0, a = duration in raw ticks, b = `PAUSE_*`.
pub const PAUSE: u8 = 10;
/// Clock calibration pair: ts = raw clock, a = CLOCK_MONOTONIC ns read right after.
pub const CLOCK_PAIR: u8 = 11;
/// OS policy change by the kernel adaptation call: id = phase name id, a = 0 ok / errno, b = policy bits.
pub const ADAPT: u8 = 12;

/// Synchronisation (auto-instrumentation): id = object name id or 0, a = object address.
pub const LOCK_REQUEST: u8 = 32;
pub const LOCK_ACQUIRE: u8 = 33;
pub const LOCK_RELEASE: u8 = 34;
pub const BARRIER_ENTER: u8 = 35;
pub const BARRIER_EXIT: u8 = 36;
pub const COND_WAIT_ENTER: u8 = 37;
pub const COND_WAIT_EXIT: u8 = 38;
pub const COND_SIGNAL: u8 = 39;
/// Function entry / exit (-finstrument-functions): a = function address, b = call site.
pub const FUNC_ENTRY: u8 = 40;
pub const FUNC_EXIT: u8 = 41;
/// Threads, semaphores and processes (the preload library).
/// THREAD_CREATE (creator): a = pthread_t of the new thread, b = 0 or the error number.
pub const THREAD_CREATE: u8 = 42;
/// THREAD_START (first record of the new thread): a = creator's tid, b = its own pthread_t.
/// Also in a process's names chunk (its thread ledger), for a thread that had no chunk of its
/// own yet: id = the thread's tid, the rest as above (docs/recorder.md, "Start-up").
pub const THREAD_START: u8 = 43;
/// THREAD_JOIN_ENTER / EXIT: a = pthread_t joined; on exit b = 0 or the error number.
pub const THREAD_JOIN_ENTER: u8 = 44;
pub const THREAD_JOIN_EXIT: u8 = 45;
/// SEM_WAIT_ENTER / EXIT, SEM_POST: a = semaphore address; on exit b = 0 or the error number
/// (a failed sem_trywait/timedwait is not an acquisition).
pub const SEM_WAIT_ENTER: u8 = 46;
pub const SEM_WAIT_EXIT: u8 = 47;
pub const SEM_POST: u8 = 48;
/// fork / posix_spawn. Parent: a = child pid, b = 0 fork, 1 spawn; child: a = 0, b = parent pid.
pub const PROCESS_FORK: u8 = 49;
/// exec*: id = name id (NAME_COMMAND) of the program; a = 0 before the call, the error number
/// when it returned (failed).
pub const PROCESS_EXEC: u8 = 50;
/// exit / _exit: a = exit status.
pub const PROCESS_EXIT: u8 = 51;
/// Only in a names chunk's thread ledger: the end of the ledger's open entry of thread id (its
/// tid). ts = raw clock, a = CLOCK_MONOTONIC ns read with it (a calibration pair), b =
/// `THREAD_END_*`. A NAME (class thread, id = tid) written just before it holds the thread's
/// name at its end.
pub const THREAD_END: u8 = 52;

/// THREAD_END b: the thread ended having recorded nothing of its own (no chunk).
pub const THREAD_END_NOTHING: u64 = 0;
/// THREAD_END b: the thread recorded: its start and everything after are in its own chunk from
/// here, and this ledger entry is void.
pub const THREAD_END_OWN_CHUNK: u64 = 1;

/// First kernel kind; the collector defines the rest in this range.
pub const KERNEL_FIRST: u8 = 64;

/// NAME classes.
pub const NAME_THREAD: u64 = 1;
pub const NAME_MANAGER: u64 = 2;
pub const NAME_COUNTER: u64 = 3;
pub const NAME_TIMER: u64 = 4;
pub const NAME_REGION: u64 = 5;
pub const NAME_EVENT: u64 = 6;
pub const NAME_PHASE: u64 = 7;
/// Function names known when recording (Python functions): FUNC_ENTRY/EXIT id.
pub const NAME_FUNCTION: u64 = 8;
/// Programs started by exec (PROCESS_EXEC id).
pub const NAME_COMMAND: u64 = 9;

/// Every NAME class with the word the tables and tools use for it.
pub const NAME_CLASSES: [(u64, &str); 9] = [
    (NAME_THREAD, "thread"),
    (NAME_MANAGER, "manager"),
    (NAME_COUNTER, "counter"),
    (NAME_TIMER, "timer"),
    (NAME_REGION, "region"),
    (NAME_EVENT, "event"),
    (NAME_PHASE, "phase"),
    (NAME_FUNCTION, "function"),
    (NAME_COMMAND, "command"),
];

/// Which NAME class names the `id` of each kind whose `id` is a name (the sync kinds' `id` may
/// be named in any class; FUNC_ENTRY/EXIT name their address `a`).
pub const NAME_CLASS_OF_KIND: [(u8, u64); 11] = [
    (REGION_BEGIN, NAME_REGION),
    (REGION_END, NAME_REGION),
    (COUNTER, NAME_COUNTER),
    (TIMER_START, NAME_TIMER),
    (TIMER_STOP, NAME_TIMER),
    (EVENT, NAME_EVENT),
    (CONTROL, NAME_MANAGER),
    (ADAPT, NAME_PHASE),
    (FUNC_ENTRY, NAME_FUNCTION),
    (FUNC_EXIT, NAME_FUNCTION),
    (PROCESS_EXEC, NAME_COMMAND),
];

/// Why a counter value was recorded.
pub const COUNTER_PERIODIC: u64 = 1;
pub const COUNTER_ASKED: u64 = 2;
pub const COUNTER_FINAL: u64 = 3;
pub const COUNTER_RESET: u64 = 4;
/// Uncontended lock acquisitions (the preload's default `--sync contended`): the counter is
/// named after the lock's address ("0x…"), a = acquisitions by the recording thread since its
/// previous such record for that lock (a delta: the lock_counts view sums them).
pub const COUNTER_LOCK: u64 = 5;

/// The word the tables use for each counter reason (`counters.reason`).
pub const COUNTER_REASONS: [(u64, &str); 5] = [
    (COUNTER_PERIODIC, "periodic"),
    (COUNTER_ASKED, "asked"),
    (COUNTER_FINAL, "final"),
    (COUNTER_RESET, "reset"),
    (COUNTER_LOCK, "lock"),
];

/// Manager control actions.
pub const CONTROL_SUSPEND: u64 = 1;
pub const CONTROL_RESUME: u64 = 2;
pub const CONTROL_RESET: u64 = 3;
pub const CONTROL_ENABLE: u64 = 4;
pub const CONTROL_DISABLE: u64 = 5;
pub const CONTROL_TRIGGER: u64 = 6;

/// Why the recorder paused the program.
pub const PAUSE_NEW_CHUNK: u64 = 1;
pub const PAUSE_FLUSH: u64 = 2;
/// The thread's whole buffer was prepared before its first event (OSLENS_PREPARE_BUFFERS=1).
pub const PAUSE_PREPARE: u64 = 3;
/// The thread copied staging slots out itself: the helper had fallen behind (a buffer dump).
pub const PAUSE_COPY: u64 = 4;
/// The word the tables use for each pause reason (`pauses.reason`).
pub const PAUSE_REASONS: [(u64, &str); 4] =
    [(PAUSE_NEW_CHUNK, "new chunk"), (PAUSE_FLUSH, "flush"), (PAUSE_PREPARE, "prepare buffer"), (PAUSE_COPY, "copy out")];

/// The name of an application kind (a kind the recorder or the preload library writes), or
/// "unknown"; `kind_names::kind_name` names every kind, kernel kinds included.
pub fn app_kind_name(kind: u8) -> &'static str {
    match kind {
        NAME => "name",
        CONT => "cont",
        EVENT => "event",
        REGION_BEGIN => "region_begin",
        REGION_END => "region_end",
        COUNTER => "counter",
        TIMER_START => "timer_start",
        TIMER_STOP => "timer_stop",
        CONTROL => "control",
        PAUSE => "pause",
        CLOCK_PAIR => "clock_pair",
        ADAPT => "adapt",
        LOCK_REQUEST => "lock_request",
        LOCK_ACQUIRE => "lock_acquire",
        LOCK_RELEASE => "lock_release",
        BARRIER_ENTER => "barrier_enter",
        BARRIER_EXIT => "barrier_exit",
        COND_WAIT_ENTER => "cond_wait_enter",
        COND_WAIT_EXIT => "cond_wait_exit",
        COND_SIGNAL => "cond_signal",
        FUNC_ENTRY => "func_entry",
        FUNC_EXIT => "func_exit",
        THREAD_CREATE => "thread_create",
        THREAD_START => "thread_start",
        THREAD_JOIN_ENTER => "thread_join_enter",
        THREAD_JOIN_EXIT => "thread_join_exit",
        SEM_WAIT_ENTER => "sem_wait_enter",
        SEM_WAIT_EXIT => "sem_wait_exit",
        SEM_POST => "sem_post",
        PROCESS_FORK => "process_fork",
        PROCESS_EXEC => "process_exec",
        PROCESS_EXIT => "process_exit",
        THREAD_END => "thread_end",
        _ => "unknown",
    }
}
