/* Group 2 (paper Table 2): the overhead of one time slice.
 *
 * Two CPU-bound processes are pinned to one CPU and run a counting loop for a fixed wall-clock
 * time under the same scheduler slice: the EEVDF per-task slice (sched_setattr sched_runtime,
 * --policy eevdf --param SLICE_US) or SCHED_RR (--policy rr; the slice is the system-wide
 * kernel.sched_rr_timeslice_ms, which the Python runner sets, journals and restores).
 * Each loop reads the clock on every iteration and records every gap longer than 1 us: the
 * intervals where it ran are then known exactly. Merging both processes' run intervals gives,
 * for every time slice that ended, the time from the last instruction of one process to the
 * first of the next: the cost of ending a slice (timer interrupt, scheduling decision, context
 * switch, return to user). The repetition's value is the median of those; the extra fields give
 * the paper's aggregate form, (elapsed - useful run time) / number of slices, and the slice
 * length actually obtained. The scheduling class and slice are only ever set on the two
 * children, which die with their parent; nothing of this process's own policy changes. */
#include "osb.h"
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/sched.h>

#define MAXGAPS 200000
#define GAP_NS 1000

struct sattr {
    uint32_t size, sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime, sched_deadline, sched_period;
    uint32_t util_min, util_max;
};

struct task_log {
    uint64_t first, last;
    long ngaps;
    uint64_t gap[MAXGAPS][2];
};

static struct task_log *logs;   /* two, in shared memory */
static int policy_rr;
static double run_ms = 200;

static int set_policy(long slice_us)
{
    if (policy_rr) {
        struct sched_param sp = { .sched_priority = 1 };
        return sched_setscheduler(0, SCHED_RR, &sp);
    }
    struct sattr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.sched_policy = SCHED_OTHER;
    a.sched_runtime = (uint64_t)slice_us * 1000;
    return (int)syscall(SYS_sched_setattr, 0, &a, 0);
}

static void hog(struct task_log *log, int go_fd, int cpu, long slice_us, uint64_t duration_ns)
{
    osb_die_with_parent();
    /* a runaway real-time hog is killed by the kernel after a few seconds of CPU */
    struct rlimit rt = { .rlim_cur = 3000000, .rlim_max = 4000000 };
    setrlimit(RLIMIT_RTTIME, &rt);
    if (osb_pin(cpu) != 0) _exit(10);
    if (set_policy(slice_us) != 0) _exit(11);
    char c;
    if (read(go_fd, &c, 1) != 1) _exit(12);
    uint64_t prev = osb_now(), end = prev + duration_ns;
    long n = 0;
    log->first = prev;
    while (prev < end) {
        uint64_t t = osb_now();
        if (t - prev > GAP_NS && n < MAXGAPS) {
            log->gap[n][0] = prev;
            log->gap[n][1] = t;
            n++;
        }
        prev = t;
    }
    log->last = prev;
    log->ngaps = n;
    _exit(0);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

struct interval { uint64_t start, end; int task; };
static int cmp_iv(const void *a, const void *b)
{
    const struct interval *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int s_timeslice(struct osb_run *r)
{
    policy_rr = r->param < 0;
    if (!policy_rr && (r->param < 100 || r->param > 100000)) {
        osb_skip(r, "the EEVDF slice must be 100 us to 100 ms");
        return 1;
    }
    const char *ms = getenv("OSB_TIMESLICE_RUN_MS");
    if (ms) run_ms = atof(ms);
    logs = mmap(NULL, 2 * sizeof(struct task_log), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (logs == MAP_FAILED) osb_fail("mmap");
    /* try the policy in a throwaway child so a refusal becomes a clean skip */
    pid_t p = fork();
    if (p == 0) _exit(set_policy(policy_rr ? 0 : r->param) == 0 ? 0 : (errno == EPERM ? 1 : 2));
    int st = 0;
    waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        if (policy_rr)
            osb_skip(r, "SCHED_RR was refused: it needs root or CAP_SYS_NICE");
        else
            osb_skip(r, "sched_setattr refused the per-task EEVDF slice (needs Linux 6.12 or later)");
        return 1;
    }
    return 0;
}

static int b_timeslice(struct osb_run *r)
{
    int go[2];
    if (pipe(go)) return -1;
    memset(logs, 0, 2 * sizeof(struct task_log));
    uint64_t duration = (uint64_t)(run_ms * 1e6);
    pid_t kids[2];
    for (int k = 0; k < 2; k++) {
        kids[k] = fork();
        if (kids[k] < 0) return -1;
        if (kids[k] == 0) { close(go[1]); hog(&logs[k], go[0], r->cpu_a, r->param, duration); }
    }
    close(go[0]);
    usleep(20000);  /* let both children pin themselves and block on the pipe */
    if (write(go[1], "gg", 2) != 2) return -1;
    close(go[1]);
    long nivcsw = 0;
    for (int k = 0; k < 2; k++) {
        int st;
        struct rusage ru;
        if (wait4(kids[k], &st, 0, &ru) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            errno = ECHILD;
            return -1;
        }
        nivcsw += ru.ru_nivcsw;
    }
    /* run intervals of both tasks */
    long n = logs[0].ngaps + logs[1].ngaps + 2;
    struct interval *iv = malloc(sizeof *iv * (size_t)n);
    uint64_t *sw = malloc(sizeof *sw * (size_t)n);
    uint64_t *runs = malloc(sizeof *runs * (size_t)n);
    if (!iv || !sw || !runs) return -1;
    long m = 0;
    uint64_t useful = 0;
    for (int k = 0; k < 2; k++) {
        uint64_t start = logs[k].first;
        for (long g = 0; g <= logs[k].ngaps; g++) {
            uint64_t end = g < logs[k].ngaps ? logs[k].gap[g][0] : logs[k].last;
            iv[m].start = start; iv[m].end = end; iv[m].task = k;
            useful += end - start;
            m++;
            if (g < logs[k].ngaps) start = logs[k].gap[g][1];
        }
    }
    qsort(iv, (size_t)m, sizeof *iv, cmp_iv);
    /* consecutive intervals of one task form one slice; the gaps inside a slice are
     * interrupts (the tick, host exits), the gaps between slices of different tasks are switches */
    long nsw = 0, nruns = 0, nirq = 0;
    uint64_t slice_start = m ? iv[0].start : 0;
    uint64_t *irq = malloc(sizeof *irq * (size_t)n);
    if (!irq) return -1;
    for (long i = 1; i <= m; i++) {
        if (i == m || iv[i].task != iv[i - 1].task) {
            runs[nruns++] = iv[i - 1].end - slice_start;
            if (i < m) {
                if (iv[i].start > iv[i - 1].end)
                    sw[nsw++] = iv[i].start - iv[i - 1].end;
                slice_start = iv[i].start;
            }
        } else if (iv[i].start > iv[i - 1].end) {
            irq[nirq++] = iv[i].start - iv[i - 1].end;
        }
    }
    uint64_t span_start = logs[0].first < logs[1].first ? logs[0].first : logs[1].first;
    uint64_t span_end = logs[0].last > logs[1].last ? logs[0].last : logs[1].last;
    if (nsw < 1) {
        r->ns = 0; r->ops_done = 1;
        snprintf(r->extra, sizeof r->extra, "\"switches\":0");
    } else {
        qsort(sw, (size_t)nsw, sizeof *sw, cmp_u64);
        qsort(runs, (size_t)nruns, sizeof *runs, cmp_u64);
        if (nirq) qsort(irq, (size_t)nirq, sizeof *irq, cmp_u64);
        uint64_t median = sw[nsw / 2];
        /* the value is the median switch, reported as ns over one op */
        r->ns = median;
        r->ops_done = 1;
        double lost = (double)(span_end - span_start) - (double)useful;
        snprintf(r->extra, sizeof r->extra,
                 "\"switches\":%ld,\"min_switch_ns\":%llu,\"lost_per_slice_ns\":%.1f,"
                 "\"slice_median_us\":%.1f,\"span_ms\":%.2f,\"nivcsw_children\":%ld,"
                 "\"interrupts\":%ld,\"interrupt_median_ns\":%llu",
                 nsw, (unsigned long long)sw[0], lost / (double)nsw,
                 (double)runs[nruns / 2] / 1e3, (double)(span_end - span_start) / 1e6, nivcsw,
                 nirq, (unsigned long long)(nirq ? irq[nirq / 2] : 0));
    }
    free(iv); free(sw); free(runs); free(irq);
    return 0;
}

static const struct osb_bench table[] = {
    { "timeslice", "cost of ending one time slice between two CPU hogs on one CPU; --param SLICE_US (EEVDF) or -1 (SCHED_RR)",
      1, s_timeslice, b_timeslice, NULL },
};

int main(int argc, char **argv) { return osb_main(argc, argv, table, sizeof table / sizeof table[0]); }
