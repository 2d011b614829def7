/* Group 3 (paper Table 3): context switch cost by kind. Two tasks pass a token through two
 * pipes (a ping-pong); one round trip is two switches, and the figure is half a round trip.
 * Kinds: two threads of one process or two processes; with or without floating-point (AVX)
 * state in use; pinned to one CPU (a real switch) or to two CPUs (a cross-CPU wakeup).
 * ctx.pipe_overhead is the write+read pair alone, in one task, with no switch. */
#include "osb.h"
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

struct pp {
    int to_partner[2], to_main[2];
    int threads, fp, cross, cpu_partner;
    size_t ws;        /* working set each side reads between switches (lmbench lat_ctx -s), bytes */
    pthread_t thread;
    pid_t child;
};
static struct pp pp;
static volatile double fp_sink;

__attribute__((target("avx"))) static void fp_touch_avx(void)
{
    typedef double v4d __attribute__((vector_size(32)));
    static v4d acc = { 1.0, 2.0, 3.0, 4.0 };
    v4d m = { 1.0000001, 0.9999999, 1.0000001, 0.9999999 };
    acc = acc * m + m;  /* leaves the upper halves of the ymm registers in use */
    fp_sink = acc[0] + acc[3];
}

static void fp_touch_sse(void)
{
    static double a = 1.0;
    a = a * 1.0000001 + 0.5;
    fp_sink = a;
}

static volatile long ws_sink;
static long *ws_alloc(size_t bytes)
{
    if (!bytes) return NULL;
    long *a = malloc(bytes);
    if (!a) osb_fail("malloc");
    for (size_t i = 0; i < bytes / sizeof(long); i++) a[i] = (long)i;
    return a;
}
static void ws_sum(const long *a, size_t bytes)
{
    long s = 0;
    for (size_t i = 0; i < bytes / sizeof(long); i++) s += a[i];
    ws_sink = s;
}
static long *main_ws;

static int have_avx;
static void fp_touch(void)
{
    if (have_avx) fp_touch_avx(); else fp_touch_sse();
}

static void partner_loop(int fp)
{
    char c;
    long *ws = ws_alloc(pp.ws);
    for (;;) {
        if (read(pp.to_partner[0], &c, 1) != 1 || c == 'q')
            return;
        if (ws) ws_sum(ws, pp.ws);
        if (fp) fp_touch();
        if (write(pp.to_main[1], &c, 1) != 1)
            return;
    }
}

static void *partner_thread(void *arg)
{
    (void)arg;
    if (osb_pin(pp.cpu_partner) != 0)
        return NULL;
    partner_loop(pp.fp);
    return NULL;
}

static int setup_kind(struct osb_run *r, int threads, int fp, int cross)
{
    memset(&pp, 0, sizeof pp);
    pp.threads = threads;
    pp.fp = fp;
    pp.cross = cross;
    pp.ws = r->param > 0 ? (size_t)r->param * 1024 : 0;
    main_ws = ws_alloc(pp.ws);
    __builtin_cpu_init();
    have_avx = __builtin_cpu_supports("avx");
    if (cross && osb_allowed_cpus() < 2) { osb_skip(r, "needs two CPUs, this process may use one"); return 1; }
    int cpu_main = r->cpu_a, cpu_partner = cross ? r->cpu_b : r->cpu_a;
    pp.cpu_partner = cpu_partner;
    if (pipe(pp.to_partner) || pipe(pp.to_main)) osb_fail("pipe");
    if (threads) {
        if (pthread_create(&pp.thread, NULL, partner_thread, NULL) != 0) osb_fail("pthread_create");
    } else {
        pp.child = fork();
        if (pp.child < 0) osb_fail("fork");
        if (pp.child == 0) {
            osb_die_with_parent();
            if (osb_pin(cpu_partner) != 0) _exit(1);
            partner_loop(fp);
            _exit(0);
        }
    }
    if (osb_pin(cpu_main) != 0) osb_fail("sched_setaffinity");
    return 0;
}

static void teardown_kind(struct osb_run *r)
{
    (void)r;
    char q = 'q';
    if (write(pp.to_partner[1], &q, 1) != 1) { /* partner gone */ }
    if (pp.threads) pthread_join(pp.thread, NULL);
    else if (pp.child > 0) waitpid(pp.child, NULL, 0);
}

static int b_pingpong(struct osb_run *r)
{
    long rounds = r->iters / 2 > 0 ? r->iters / 2 : 1;
    char c = 'x';
    uint64_t t0 = osb_now();
    for (long i = 0; i < rounds; i++) {
        if (main_ws) ws_sum(main_ws, pp.ws);
        if (pp.fp) fp_touch();
        if (write(pp.to_partner[1], &c, 1) != 1) return -1;
        if (read(pp.to_main[0], &c, 1) != 1) return -1;
    }
    r->ns = osb_now() - t0;
    r->ops_done = rounds * 2;
    snprintf(r->extra, sizeof r->extra, "\"avx\":%d", pp.fp ? have_avx : 0);
    return 0;
}

#define KIND(fn, threads, fp, cross) \
    static int fn(struct osb_run *r) { return setup_kind(r, threads, fp, cross); }
KIND(s_thread, 1, 0, 0)
KIND(s_thread_fp, 1, 1, 0)
KIND(s_process, 0, 0, 0)
KIND(s_process_fp, 0, 1, 0)
KIND(s_thread_x, 1, 0, 1)
KIND(s_thread_fp_x, 1, 1, 1)
KIND(s_process_x, 0, 0, 1)
KIND(s_process_fp_x, 0, 1, 1)

static int ovh[2];
static int s_overhead(struct osb_run *r)
{
    pp.ws = r->param > 0 ? (size_t)r->param * 1024 : 0;
    main_ws = ws_alloc(pp.ws);
    if (pipe(ovh)) osb_fail("pipe");
    if (osb_pin(r->cpu_a) != 0) osb_fail("sched_setaffinity");
    return 0;
}
static int b_overhead(struct osb_run *r)
{
    char c = 'x';
    uint64_t t0 = osb_now();
    for (long i = 0; i < r->iters; i++) {
        if (main_ws) ws_sum(main_ws, pp.ws);
        if (write(ovh[1], &c, 1) != 1) return -1;
        if (read(ovh[0], &c, 1) != 1) return -1;
    }
    r->ns = osb_now() - t0;
    return 0;
}

static const struct osb_bench table[] = {
    { "ctx.pipe_overhead", "one pipe write + read in one task, no switch", 0, s_overhead, b_overhead, NULL },
    { "ctx.thread.pinned", "switch between two threads of one process, one CPU", 0, s_thread, b_pingpong, teardown_kind },
    { "ctx.thread_fp.pinned", "threads, AVX state in use, one CPU", 0, s_thread_fp, b_pingpong, teardown_kind },
    { "ctx.process.pinned", "switch between two processes, one CPU", 0, s_process, b_pingpong, teardown_kind },
    { "ctx.process_fp.pinned", "processes, AVX state in use, one CPU", 0, s_process_fp, b_pingpong, teardown_kind },
    { "ctx.thread.cross_cpu", "threads on two CPUs: a cross-CPU wakeup, not a switch", 0, s_thread_x, b_pingpong, teardown_kind },
    { "ctx.thread_fp.cross_cpu", "threads, AVX state in use, two CPUs", 0, s_thread_fp_x, b_pingpong, teardown_kind },
    { "ctx.process.cross_cpu", "processes on two CPUs: a cross-CPU wakeup", 0, s_process_x, b_pingpong, teardown_kind },
    { "ctx.process_fp.cross_cpu", "processes, AVX state in use, two CPUs", 0, s_process_fp_x, b_pingpong, teardown_kind },
};

int main(int argc, char **argv) { return osb_main(argc, argv, table, sizeof table / sizeof table[0]); }
