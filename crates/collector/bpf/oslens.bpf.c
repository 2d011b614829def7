// SPDX-License-Identifier: GPL-2.0
/* oslens collector, eBPF half: the hot events (sched_switch, sched_waking, sched_wakeup, fork, sys_enter,
 * sys_exit) filtered in the kernel to the traced tree and written as oslens 32-byte records
 * (declared in crates/format/src/kernel.rs and packed by the osl_pack_* functions generated from it
 * into oslens_kinds.h; the check byte is filled in by the collector) into one BPF ring
 * buffer without wake-ups; the collector polls it. Switch records carry both comms after the
 * record (64 bytes), fork records the child's comm (48 bytes).
 * Build: crates/collector/bpf/build.sh (clang -target bpf, CO-RE against the kernel's BTF). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "oslens_kinds.h"

char LICENSE[] SEC("license") = "GPL";

#define OSL_CLONE_THREAD 0x10000

struct osl_rec {
    __u64 ts;
    __u32 id;
    __u16 cpu;
    __u8 kind;
    __u8 check;
    __u64 a;
    __u64 b;
};

struct osl_switch {
    struct osl_rec r;
    char prev_comm[16];
    char next_comm[16];
};

struct osl_fork {
    struct osl_rec r;
    char comm[16];
};

struct osl_named {
    struct osl_rec r;
    char name[128];
};

struct osl_irq {
    struct osl_rec r;
    char name[32];
};

/* tids of the traced tree: one bit per tid (word tid / 64, bit tid % 64), covering every tid
 * Linux can hand out (PID_MAX_LIMIT, 4 Mi: 512 KiB). Every task on the machine runs these
 * programs, so the test that drops a task outside the tree must be as cheap as possible: an
 * array lookup is inlined by the verifier into a bounds check and a load, where a hash lookup
 * is a helper call hashing the key (docs/kernel-collector.md, "What an untraced task pays"). */
#define OSL_TID_WORDS (1 << 16)
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, OSL_TID_WORDS);
    __type(key, __u32);
    __type(value, __u64);
} osl_traced SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 64 << 20);
} osl_rb SEC(".maps");

/* what the collector set (bpf.rs, Config: the same layout) */
struct osl_config {
    __u64 system_wide;  /* keep every task */
    __u64 pidns;        /* inode of the recording's PID namespace; 0: the initial one (no translation) */
    __u64 root;         /* the root's tid in that namespace, for osl_find_root */
    __u64 root_global;  /* written by osl_find_root: the root's tgid << 32 | tid as the kernel numbers them */
    __u64 wake_bytes;   /* wake the collector once this much waits in the ring (0: never; it drains on its tick) */
};
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct osl_config);
} osl_cfg SEC(".maps");

/* records dropped because the ring was full, per CPU */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u64);
} osl_lost SEC(".maps");

/* kernel tid -> namespace tid of the tree's tasks, written as each exits: a released task has no
 * struct pid left to read its number from, yet switches off its CPU once more (state X) */
struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 1 << 16);
    __type(key, __u32);
    __type(value, __u32);
} osl_vtids SEC(".maps");

static __always_inline struct osl_config *osl_config_get(void) {
    __u32 k = 0;
    return bpf_map_lookup_elem(&osl_cfg, &k);
}

static __always_inline int system_wide(void) {
    struct osl_config *c = osl_config_get();
    return c && c->system_wide;
}

/* Records are submitted without a wake-up, so a busy program does not wake the collector per
 * record; once a quarter of the ring waits, the submit wakes it, so its tick can be long. */
static __always_inline __u64 wake_flag(void) {
    struct osl_config *c = osl_config_get();
    if (!c || !c->wake_bytes || bpf_ringbuf_query(&osl_rb, BPF_RB_AVAIL_DATA) < c->wake_bytes)
        return BPF_RB_NO_WAKEUP;
    return BPF_RB_FORCE_WAKEUP;
}

static __always_inline __u64 pidns(void) {
    struct osl_config *c = osl_config_get();
    return c ? c->pidns : 0;
}

/* A task's tid as the recording's PID namespace `ns` numbers it (records speak in the pids the
 * program sees): its number at its own deepest level when that level is `ns`; a task the
 * namespace cannot see is OSL_PIDNS_OUTSIDE + its kernel tid, so it never equals one of the
 * namespace's pids. The idle task (0) and ns = 0 (the initial namespace) keep the kernel's. */
static __always_inline __u32 vtid(struct task_struct *t, __u64 ns) {
    __u32 tid = BPF_CORE_READ(t, pid);
    if (!ns || !tid)
        return tid;
    struct pid *p = BPF_CORE_READ(t, thread_pid);
    if (!p) {
        __u32 *known = bpf_map_lookup_elem(&osl_vtids, &tid);
        return known ? *known : OSL_PIDNS_OUTSIDE + tid;
    }
    unsigned int lvl = BPF_CORE_READ(p, level);
    struct upid u;
    if (lvl > 32 || bpf_core_read(&u, sizeof(u), &p->numbers[lvl]) < 0)
        return OSL_PIDNS_OUTSIDE + tid;
    if (BPF_CORE_READ(u.ns, ns.inum) == ns)
        return u.nr;
    return OSL_PIDNS_OUTSIDE + tid;
}

/* its thread group in the namespace: its leader's tid there */
static __always_inline __u32 vpid(struct task_struct *t, __u64 ns) {
    if (!ns)
        return BPF_CORE_READ(t, tgid);
    return vtid(BPF_CORE_READ(t, group_leader), ns);
}

/* the current task's tgid << 32 | tid in the namespace, from the kernel's `pt` */
static __always_inline __u64 in_ns(__u64 pt, __u64 ns) {
    if (!ns)
        return pt;
    struct task_struct *t = bpf_get_current_task_btf();
    return (__u64)vpid(t, ns) << 32 | vtid(t, ns);
}

static __always_inline int traced(__u32 tid) {
    __u32 word = tid >> 6;
    __u64 *bits = bpf_map_lookup_elem(&osl_traced, &word);
    return bits && (*bits >> (tid & 63)) & 1;
}

static __always_inline void add_traced(__u32 tid) {
    __u32 word = tid >> 6;
    __u64 *bits = bpf_map_lookup_elem(&osl_traced, &word);
    if (bits)
        __sync_fetch_and_or(bits, 1ULL << (tid & 63));
}

static __always_inline void count_lost(void) {
    __u32 k = 0;
    __u64 *v = bpf_map_lookup_elem(&osl_lost, &k);
    if (v)
        __sync_fetch_and_add(v, 1);
}

static __always_inline void fill(struct osl_rec *r, __u8 kind, struct osl_words w) {
    r->ts = bpf_ktime_get_ns();
    r->id = w.id;
    r->cpu = bpf_get_smp_processor_id();
    r->kind = kind;
    r->check = 0;
    r->a = w.a;
    r->b = w.b;
}

static __always_inline void emit(__u8 kind, struct osl_words w) {
    struct osl_rec *r = bpf_ringbuf_reserve(&osl_rb, sizeof(*r), 0);
    if (!r) {
        count_lost();
        return;
    }
    fill(r, kind, w);
    bpf_ringbuf_submit(r, wake_flag());
}

SEC("tp_btf/sys_enter")
int BPF_PROG(osl_sys_enter, struct pt_regs *regs, long id) {
    __u64 pt = bpf_get_current_pid_tgid();
    __u32 tid = (__u32)pt;
    if (!traced(tid) && !system_wide())
        return 0;
    __u64 arg0 = BPF_CORE_READ(regs, di);
    pt = in_ns(pt, pidns());
    tid = (__u32)pt;
    emit(OSL_K_SYS_ENTER, osl_pack_sys_enter(tid, id, pt >> 32, arg0));
    return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(osl_sys_exit, struct pt_regs *regs, long ret) {
    __u64 pt = bpf_get_current_pid_tgid();
    __u32 tid = (__u32)pt;
    if (!traced(tid) && !system_wide())
        return 0;
    long nr = BPF_CORE_READ(regs, orig_ax);
    pt = in_ns(pt, pidns());
    tid = (__u32)pt;
    emit(OSL_K_SYS_EXIT, osl_pack_sys_exit(tid, nr, pt >> 32, ret));
    return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(osl_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state) {
    __u32 p = prev->pid, n = next->pid;
    if (!traced(p) && !traced(n) && !system_wide())
        return 0;
    struct osl_switch *s = bpf_ringbuf_reserve(&osl_rb, sizeof(*s), 0);
    if (!s) {
        count_lost();
        return 0;
    }
    /* as the tracepoint reports it: TASK_REPORT bits, 0x100 (TASK_REPORT_MAX) when preempted */
    __u64 state;
    if (preempt)
        state = OSL_STATE_PREEMPTED;
    else if ((prev_state & 0x402) == 0x402) /* TASK_IDLE */
        state = OSL_STATE_IDLE;
    else if (prev_state & 0x80) /* TASK_DEAD: report the exit state (Z or X) */
        state = (BPF_CORE_READ(prev, exit_state) & 0x30) ?: OSL_STATE_DEAD;
    else
        state = prev_state & 0x7f;
    __u64 ns = pidns();
    __u32 ppid = prev->tgid;
    if (ns) { /* outside a namespace the fields are read directly, as cheap as before */
        p = vtid(prev, ns);
        n = vtid(next, ns);
        ppid = vpid(prev, ns);
    }
    fill(&s->r, OSL_K_SCHED_SWITCH, osl_pack_sched_switch(p, n, ppid, state, prev->prio));
    __builtin_memcpy(s->prev_comm, prev->comm, 16);
    __builtin_memcpy(s->next_comm, next->comm, 16);
    bpf_ringbuf_submit(s, wake_flag());
    return 0;
}

SEC("tp_btf/sched_waking")
int BPF_PROG(osl_sched_waking, struct task_struct *p) {
    __u64 pt = bpf_get_current_pid_tgid();
    __u32 waker = (__u32)pt, woken = p->pid;
    if (!traced(waker) && !traced(woken) && !system_wide())
        return 0;
    __u32 target = BPF_CORE_READ(p, thread_info.cpu); /* task_cpu(p), as the tracepoint reports */
    __u64 ns = pidns();
    if (ns) {
        pt = in_ns(pt, ns);
        waker = (__u32)pt;
        woken = vtid(p, ns);
    }
    emit(OSL_K_SCHED_WAKING, osl_pack_sched_waking(waker, woken, pt >> 32, target, p->prio));
    return 0;
}

/* the woken task joins a run queue; kept when it is traced (the current task is whichever runs
 * where the enqueue happens, often an IPI on the target CPU) */
SEC("tp_btf/sched_wakeup")
int BPF_PROG(osl_sched_wakeup, struct task_struct *p) {
    __u32 woken = p->pid;
    if (!traced(woken) && !system_wide())
        return 0;
    __u32 target = BPF_CORE_READ(p, thread_info.cpu);
    __u64 ns = pidns();
    __u32 current = (__u32)in_ns(bpf_get_current_pid_tgid(), ns);
    emit(OSL_K_SCHED_WAKEUP, osl_pack_sched_wakeup(current, ns ? vtid(p, ns) : woken, target, p->prio));
    return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(osl_sched_process_fork, struct task_struct *parent, struct task_struct *child) {
    __u32 ptid = (__u32)bpf_get_current_pid_tgid(); /* the task calling fork/clone */
    __u32 ctid = child->pid, ctgid = child->tgid, ptgid = parent->tgid;
    int keep = traced(ptid);
    if (keep) {
        add_traced(ctid);
    } else if (!system_wide()) {
        return 0;
    }
    struct osl_fork *f = bpf_ringbuf_reserve(&osl_rb, sizeof(*f), 0);
    if (!f) {
        count_lost();
        return 0;
    }
    __u64 flags = ctgid == ptgid ? OSL_CLONE_THREAD : 0;
    __u64 ns = pidns();
    __u32 vchild = ctid;
    if (ns) {
        vchild = vtid(child, ns);
        ptid = (__u32)in_ns(ptid, ns);
        ctgid = vpid(child, ns);
        ptgid = vpid(parent, ns);
    }
    fill(&f->r, OSL_K_FORK, osl_pack_fork(ptid, vchild, ctgid, ptgid, flags));
    __builtin_memcpy(f->comm, child->comm, 16);
    bpf_ringbuf_submit(f, wake_flag());
    /* the child's kernel ids, so its records (in the namespace's pids) join the kernel's view */
    if (ns && keep)
        emit(OSL_K_TASK_IDS, osl_pack_task_ids(vchild, ctid, child->tgid));
    return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(osl_sched_process_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm) {
    __u64 pt = bpf_get_current_pid_tgid();
    __u32 tid = (__u32)pt;
    if (!traced(tid) && !system_wide())
        return 0;
    struct osl_named *e = bpf_ringbuf_reserve(&osl_rb, sizeof(*e), 0);
    if (!e) {
        count_lost();
        return 0;
    }
    __u64 ns = pidns();
    pt = in_ns(pt, ns);
    /* a thread that exec'd took its leader's pid: its old one is the kernel's number */
    __u32 old = !ns ? old_pid : old_pid == tid ? (__u32)pt : OSL_PIDNS_OUTSIDE + old_pid;
    fill(&e->r, OSL_K_EXEC, osl_pack_exec((__u32)pt, pt >> 32, old));
    const char *fn = BPF_CORE_READ(bprm, filename);
    if (bpf_probe_read_kernel_str(e->name, sizeof(e->name), fn) < 0)
        e->name[0] = 0;
    bpf_ringbuf_submit(e, wake_flag());
    return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(osl_sched_process_exit, struct task_struct *p) {
    __u32 tid = p->pid;
    if (!traced(tid) && !system_wide())
        return 0;
    int live = BPF_CORE_READ(p, signal, live.counter);
    __u64 ns = pidns();
    __u32 v = tid, vp = p->tgid;
    if (ns) {
        v = vtid(p, ns);
        vp = vpid(p, ns);
        bpf_map_update_elem(&osl_vtids, &tid, &v, BPF_ANY);
    }
    emit(OSL_K_EXIT, osl_pack_exit(v, vp, live == 0));
    return 0;
}

SEC("tp_btf/sched_migrate_task")
int BPF_PROG(osl_sched_migrate_task, struct task_struct *p, int dest_cpu) {
    __u32 tid = p->pid;
    if (!traced(tid) && !system_wide())
        return 0;
    __u32 orig = BPF_CORE_READ(p, thread_info.cpu);
    __u64 ns = pidns();
    emit(OSL_K_MIGRATE, osl_pack_migrate(ns ? vtid(p, ns) : tid, orig, dest_cpu, (__u32)in_ns(bpf_get_current_pid_tgid(), ns)));
    return 0;
}

SEC("tp_btf/page_fault_user")
int BPF_PROG(osl_page_fault_user, unsigned long address, struct pt_regs *regs, unsigned long error_code) {
    __u32 tid = (__u32)bpf_get_current_pid_tgid();
    if (!traced(tid) && !system_wide())
        return 0;
    tid = (__u32)in_ns(tid, pidns());
    emit(OSL_K_PAGE_FAULT_USER, osl_pack_page_fault_user(tid, address, BPF_CORE_READ(regs, ip), error_code));
    return 0;
}

SEC("tp_btf/irq_handler_entry")
int BPF_PROG(osl_irq_handler_entry, int irq, struct irqaction *action) {
    __u64 pt = bpf_get_current_pid_tgid();
    __u32 tid = (__u32)pt;
    if (!traced(tid) && !system_wide())
        return 0;
    struct osl_irq *e = bpf_ringbuf_reserve(&osl_rb, sizeof(*e), 0);
    if (!e) {
        count_lost();
        return 0;
    }
    pt = in_ns(pt, pidns());
    fill(&e->r, OSL_K_IRQ_ENTRY, osl_pack_irq_entry((__u32)pt, irq, pt >> 32));
    const char *name = BPF_CORE_READ(action, name);
    if (bpf_probe_read_kernel_str(e->name, sizeof(e->name), name) < 0)
        e->name[0] = 0;
    bpf_ringbuf_submit(e, wake_flag());
    return 0;
}

SEC("tp_btf/irq_handler_exit")
int BPF_PROG(osl_irq_handler_exit, int irq, struct irqaction *action, int ret) {
    __u32 tid = (__u32)bpf_get_current_pid_tgid();
    if (!traced(tid) && !system_wide())
        return 0;
    tid = (__u32)in_ns(tid, pidns());
    emit(OSL_K_IRQ_EXIT, osl_pack_irq_exit(tid, irq, (__s64)ret));
    return 0;
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(osl_softirq_entry, unsigned int vec) {
    __u64 pt = bpf_get_current_pid_tgid();
    if (!traced((__u32)pt) && !system_wide())
        return 0;
    pt = in_ns(pt, pidns());
    emit(OSL_K_SOFTIRQ_ENTRY, osl_pack_softirq_entry((__u32)pt, vec, pt >> 32));
    return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(osl_softirq_exit, unsigned int vec) {
    __u64 pt = bpf_get_current_pid_tgid();
    if (!traced((__u32)pt) && !system_wide())
        return 0;
    pt = in_ns(pt, pidns());
    emit(OSL_K_SOFTIRQ_EXIT, osl_pack_softirq_exit((__u32)pt, vec, pt >> 32));
    return 0;
}

/* Run once by the collector (bpf.rs, find_root) when the recording runs in a PID namespace: it
 * knows the root by the namespace's pid, the filter by the kernel's, and only the kernel can say
 * which task that is. Marks it traced and hands its kernel ids back in osl_cfg. */
SEC("iter/task")
int osl_find_root(struct bpf_iter__task *ctx) {
    struct task_struct *t = ctx->task;
    struct osl_config *c = osl_config_get();
    if (!t || !c || !c->pidns || c->root_global)
        return 0;
    if (vtid(t, c->pidns) == c->root) {
        add_traced(t->pid);
        c->root_global = (__u64)t->tgid << 32 | (__u32)t->pid;
    }
    return 0;
}

/* Run by the collector (bpf.rs, find_group) when it attaches inside a PID namespace to a running
 * process: /proc there lists its threads by the namespace's tids, the filter wants the kernel's.
 * Marks every thread of the process whose namespace pid is `root` traced and writes its
 * (namespace tid, kernel tid, kernel tgid) to the iterator's output for the collector to read. */
SEC("iter/task")
int osl_find_group(struct bpf_iter__task *ctx) {
    struct task_struct *t = ctx->task;
    struct osl_config *c = osl_config_get();
    if (!t || !c || !c->pidns || vpid(t, c->pidns) != c->root)
        return 0;
    __u32 ids[3] = {vtid(t, c->pidns), t->pid, t->tgid};
    add_traced(ids[1]);
    bpf_seq_write(ctx->meta->seq, ids, sizeof(ids));
    return 0;
}
