/* Generated from crates/format/src/kernel.rs by `cargo test -p oslens-format` with
 * OSLENS_BLESS=1; do not edit (a test fails when it differs from the declaration). */
#ifndef OSLENS_KINDS_H
#define OSLENS_KINDS_H

struct osl_words {
    __u32 id;
    __u64 a;
    __u64 b;
};

/* added to the kernel's tid of a task outside the recording's PID namespace */
#define OSL_PIDNS_OUTSIDE 0x3b9aca00

/* SWITCH prev_state of a preempted task */
#define OSL_STATE_PREEMPTED 0x100

/* SWITCH prev_state of an idle kthread (TASK_REPORT_IDLE, letter I) */
#define OSL_STATE_IDLE 0x80

/* SWITCH prev_state of a dead task (X) */
#define OSL_STATE_DEAD 0x10

/* sched_switch: sched:sched_switch */
#define OSL_K_SCHED_SWITCH 64
static __always_inline struct osl_words osl_pack_sched_switch(__u64 prev_tid, __u64 next_tid, __u64 prev_pid, __u64 prev_state, __u64 prev_prio) {
    struct osl_words w = {0, 0, 0};
    w.id |= (__u32)((prev_tid & 0xffffffffULL) << 0); /* the task leaving the CPU */
    w.a |= ((next_tid & 0xffffffffULL) << 0); /* the task taking the CPU */
    w.a |= ((prev_pid & 0xffffffffULL) << 32); /* prev's thread group (0: unknown) */
    w.b |= ((prev_state & 0xffffffffULL) << 0); /* prev's state (STATE_BITS) */
    w.b |= ((prev_prio & 0xffffffffULL) << 32); /* prev's priority */
    return w;
}

/* sched_waking: sched:sched_waking */
#define OSL_K_SCHED_WAKING 65
static __always_inline struct osl_words osl_pack_sched_waking(__u64 waker_tid, __u64 tid, __u64 waker_pid, __u64 target_cpu, __u64 prio) {
    struct osl_words w = {0, 0, 0};
    w.id |= (__u32)((waker_tid & 0xffffffffULL) << 0); /* the current task */
    w.a |= ((tid & 0xffffffffULL) << 0); /* the woken task */
    w.a |= ((waker_pid & 0xffffffffULL) << 32); /* the waker's thread group */
    w.b |= ((target_cpu & 0xffffffffULL) << 0); /* the CPU the woken task will run on */
    w.b |= ((prio & 0xffffffffULL) << 32); /* the woken task's priority */
    return w;
}

/* fork: task:task_newtask / sched:sched_process_fork */
#define OSL_K_FORK 66
static __always_inline struct osl_words osl_pack_fork(__u64 parent_tid, __u64 child_tid, __u64 child_pid, __u64 parent_pid, __u64 clone_flags) {
    struct osl_words w = {0, 0, 0};
    w.id |= (__u32)((parent_tid & 0xffffffffULL) << 0); /* the task calling fork or clone */
    w.a |= ((child_tid & 0xffffffffULL) << 0); /* the new task */
    w.a |= ((child_pid & 0xffffffffULL) << 32); /* the new task's thread group */
    w.b |= ((parent_pid & 0xffffffffULL) << 0); /* the parent's thread group */
    w.b |= ((clone_flags & 0xffffffffULL) << 32); /* clone flags (low 32 bits) */
    return w;
}

/* exec: sched:sched_process_exec */
#define OSL_K_EXEC 67
static __always_inline struct osl_words osl_pack_exec(__u64 tid, __u64 pid, __u64 old_tid) {
    struct osl_words w = {0, 0, 0};
    w.id |= (__u32)((tid & 0xffffffffULL) << 0); /* the task */
    w.a |= ((pid & 0xffffffffULL) << 0); /* its thread group */
    w.a |= ((old_tid & 0xffffffffULL) << 32); /* its tid before the exec */
    return w;
}

/* exit: sched:sched_process_exit */
#define OSL_K_EXIT 68
static __always_inline struct osl_words osl_pack_exit(__u64 tid, __u64 pid, __u64 group_dead) {
    struct osl_words w = {0, 0, 0};
    w.id |= (__u32)((tid & 0xffffffffULL) << 0); /* the task */
    w.a |= ((pid & 0xffffffffULL) << 0); /* its thread group */
    w.b |= ((group_dead & 0xffffffffffffffffULL) << 0); /* 1 when the thread group is dead */
    return w;
}

/* migrate: sched:sched_migrate_task */
#define OSL_K_MIGRATE 69
static __always_inline struct osl_words osl_pack_migrate(__u64 tid, __u64 orig_cpu, __u64 dest_cpu, __u64 current_tid) {
    struct osl_words w = {0, 0, 0};
    w.id |= (__u32)((tid & 0xffffffffULL) << 0); /* the migrated task */
    w.a |= ((orig_cpu & 0xffffffffULL) << 0); /* the CPU it leaves */
    w.a |= ((dest_cpu & 0xffffffffULL) << 32); /* the CPU it goes to */
    w.b |= ((current_tid & 0xffffffffULL) << 0); /* the task running the migration */
    return w;
}

/* sys_enter: raw_syscalls:sys_enter */
#define OSL_K_SYS_ENTER 70
static __always_inline struct osl_words osl_pack_sys_enter(__u64 tid, __u64 nr, __u64 pid, __u64 arg0) {
    struct osl_words w = {0, 0, 0};
    w.id |= (__u32)((tid & 0xffffffffULL) << 0); /* the calling task */
    w.a |= ((nr & 0xffffffffULL) << 0); /* the system call's number */
    w.a |= ((pid & 0xffffffffULL) << 32); /* the caller's thread group */
    w.b |= ((arg0 & 0xffffffffffffffffULL) << 0); /* the first argument */
    return w;
}

/* sys_exit: raw_syscalls:sys_exit */
#define OSL_K_SYS_EXIT 71
static __always_inline struct osl_words osl_pack_sys_exit(__u64 tid, __u64 nr, __u64 pid, __u64 ret) {
    struct osl_words w = {0, 0, 0};
    w.id |= (__u32)((tid & 0xffffffffULL) << 0); /* the calling task */
    w.a |= ((nr & 0xffffffffULL) << 0); /* the system call's number (-1 after rt_sigreturn) */
    w.a |= ((pid & 0xffffffffULL) << 32); /* the caller's thread group */
    w.b |= ((ret & 0xffffffffffffffffULL) << 0); /* the return value */
    return w;
}

/* page_fault_user: exceptions:page_fault_user */
#define OSL_K_PAGE_FAULT_USER 72
static __always_inline struct osl_words osl_pack_page_fault_user(__u64 tid, __u64 address, __u64 ip, __u64 error_code) {
    struct osl_words w = {0, 0, 0};
    w.id |= (__u32)((tid & 0xffffffffULL) << 0); /* the faulting task */
    w.a |= ((address & 0xffffffffffffffffULL) << 0); /* the faulting address */
    w.b |= ((ip & 0xffffffffffffULL) << 0); /* the faulting instruction */
    w.b |= ((error_code & 0xffffULL) << 48); /* the fault's error code (low 16 bits) */
    return w;
}

/* block_rq_issue: block:block_rq_issue */
#define OSL_K_BLOCK_RQ_ISSUE 73
static __always_inline struct osl_words osl_pack_block_rq_issue(__u64 tid, __u64 sector, __u64 dev, __u64 sectors, __u64 rw) {
    struct osl_words w = {0, 0, 0};
    w.id |= (__u32)((tid & 0xffffffffULL) << 0); /* the task the request is for */
    w.a |= ((sector & 0xffffffffffffffffULL) << 0); /* the first sector */
    w.b |= ((dev & 0xffffffffULL) << 0); /* the device (dev_t as the kernel holds it) */
    w.b |= ((sectors & 0xffffffULL) << 32); /* the request's size in sectors */
    w.b |= ((rw & 0xffULL) << 56); /* RW_* flags */
    return w;
}

/* irq_entry: irq:irq_handler_entry */
#define OSL_K_IRQ_ENTRY 75
static __always_inline struct osl_words osl_pack_irq_entry(__u64 tid, __u64 irq, __u64 pid) {
    struct osl_words w = {0, 0, 0};
    w.id |= (__u32)((tid & 0xffffffffULL) << 0); /* the interrupted task */
    w.a |= ((irq & 0xffffffffULL) << 0); /* the interrupt line */
    w.b |= ((pid & 0xffffffffULL) << 0); /* the interrupted task's thread group */
    return w;
}

/* irq_exit: irq:irq_handler_exit */
#define OSL_K_IRQ_EXIT 76
static __always_inline struct osl_words osl_pack_irq_exit(__u64 tid, __u64 irq, __u64 ret) {
    struct osl_words w = {0, 0, 0};
    w.id |= (__u32)((tid & 0xffffffffULL) << 0); /* the interrupted task */
    w.a |= ((irq & 0xffffffffULL) << 0); /* the interrupt line */
    w.b |= ((ret & 0xffffffffffffffffULL) << 0); /* the handler's return value */
    return w;
}

/* softirq_entry: irq:softirq_entry */
#define OSL_K_SOFTIRQ_ENTRY 77
static __always_inline struct osl_words osl_pack_softirq_entry(__u64 tid, __u64 vec, __u64 pid) {
    struct osl_words w = {0, 0, 0};
    w.id |= (__u32)((tid & 0xffffffffULL) << 0); /* the interrupted task */
    w.a |= ((vec & 0xffffffffULL) << 0); /* the softirq vector */
    w.b |= ((pid & 0xffffffffULL) << 0); /* the interrupted task's thread group */
    return w;
}

/* sample: cpu-clock sample */
#define OSL_K_SAMPLE 79
static __always_inline struct osl_words osl_pack_sample(__u64 tid, __u64 ip, __u64 pid, __u64 in_kernel) {
    struct osl_words w = {0, 0, 0};
    w.id |= (__u32)((tid & 0xffffffffULL) << 0); /* the sampled task */
    w.a |= ((ip & 0xffffffffffffffffULL) << 0); /* the instruction pointer */
    w.b |= ((pid & 0xffffffffULL) << 0); /* the sampled task's thread group */
    w.b |= ((in_kernel & 0x1ULL) << 32); /* 1 when the IP is in the kernel */
    return w;
}

/* kernel_lost: PERF_RECORD_LOST */
#define OSL_K_KERNEL_LOST 80
static __always_inline struct osl_words osl_pack_kernel_lost(__u64 count) {
    struct osl_words w = {0, 0, 0};
    w.a |= ((count & 0xffffffffffffffffULL) << 0); /* records lost */
    return w;
}

/* kernel_counter: perf software counter */
#define OSL_K_KERNEL_COUNTER 81
static __always_inline struct osl_words osl_pack_kernel_counter(__u64 counter, __u64 value, __u64 time_enabled_ns) {
    struct osl_words w = {0, 0, 0};
    w.id |= (__u32)((counter & 0xffffffffULL) << 0); /* COUNTER_* */
    w.a |= ((value & 0xffffffffffffffffULL) << 0); /* the value, cumulative over the traced tree */
    w.b |= ((time_enabled_ns & 0xffffffffffffffffULL) << 0); /* time enabled */
    return w;
}

/* traced_root: the collector */
#define OSL_K_TRACED_ROOT 82
static __always_inline struct osl_words osl_pack_traced_root(__u64 root_pid, __u64 flags) {
    struct osl_words w = {0, 0, 0};
    w.id |= (__u32)((root_pid & 0xffffffffULL) << 0); /* the root's pid */
    w.a |= ((flags & 0xffffffffffffffffULL) << 0); /* 1 = system-wide */
    return w;
}

/* task: reserved */
#define OSL_K_TASK 83
static __always_inline struct osl_words osl_pack_task(void) {
    struct osl_words w = {0, 0, 0};
    return w;
}

/* sched_wakeup: sched:sched_wakeup */
#define OSL_K_SCHED_WAKEUP 85
static __always_inline struct osl_words osl_pack_sched_wakeup(__u64 current_tid, __u64 tid, __u64 target_cpu, __u64 prio) {
    struct osl_words w = {0, 0, 0};
    w.id |= (__u32)((current_tid & 0xffffffffULL) << 0); /* the task running where it was enqueued */
    w.a |= ((tid & 0xffffffffULL) << 0); /* the woken task */
    w.b |= ((target_cpu & 0xffffffffULL) << 0); /* the CPU whose run queue it joined */
    w.b |= ((prio & 0xffffffffULL) << 32); /* the woken task's priority */
    return w;
}

/* task_ids: the collector (eBPF sched_process_fork) */
#define OSL_K_TASK_IDS 86
static __always_inline struct osl_words osl_pack_task_ids(__u64 tid, __u64 global_tid, __u64 global_pid) {
    struct osl_words w = {0, 0, 0};
    w.id |= (__u32)((tid & 0xffffffffULL) << 0); /* the task's tid in the recording's PID namespace */
    w.a |= ((global_tid & 0xffffffffULL) << 0); /* its tid in the initial PID namespace (the kernel's) */
    w.a |= ((global_pid & 0xffffffffULL) << 32); /* its thread group there */
    return w;
}

/* block_rq_complete: block:block_rq_complete */
#define OSL_K_BLOCK_RQ_COMPLETE 74
#define osl_pack_block_rq_complete osl_pack_block_rq_issue

/* block_rq_issue_other: block:block_rq_issue */
#define OSL_K_BLOCK_RQ_ISSUE_OTHER 84
#define osl_pack_block_rq_issue_other osl_pack_block_rq_issue

/* softirq_exit: irq:softirq_exit */
#define OSL_K_SOFTIRQ_EXIT 78
#define osl_pack_softirq_exit osl_pack_softirq_entry

#endif
