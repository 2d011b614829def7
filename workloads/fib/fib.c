/* fib: the CPU-bound "toy Fibonacci" of Krintz & Wolski's quantum experiment (Table 1).
 * Naive recursive Fibonacci: no memory traffic to speak of, so any change in its run time
 * under a competing task comes from the scheduler (share of the CPU, preemptions) alone.
 *
 *   fib [N] [--adapt] [--stats]      default N = 42
 *
 * --stats prints the compute phase's times, context switches and policy on stderr (below).
 * --adapt calls osl_adapt("compute") before the computation (the kernel adaptation call:
 * under `oslens tune --plan examples/plans/quantum.toml` that gives this thread the compute
 * phase's policy; without a plan it does nothing). The computation is an oslens region
 * "compute". Output (deterministic): "fib(N) = VALUE". */
#define _GNU_SOURCE
#include <oslens.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/resource.h>
#include <time.h>

/* --stats: one line on stderr about the compute phase, for bench/quantum:
 *   stats wall_ns=W cpu_ns=C nvcsw=V nivcsw=I policy=P slice_ns=S
 * W, C: wall and thread CPU time of the compute phase; V, I: voluntary and involuntary
 * context switches during it (getrusage RUSAGE_THREAD); P, S: the scheduling policy and the
 * EEVDF slice (se.slice in /proc/thread-self/sched) in force at its end. */
static struct timespec st_w0, st_c0;
static struct rusage st_r0;

static long long st_ns(struct timespec a, struct timespec b) {
    return (b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec);
}

static void stats_begin(void) {
    getrusage(RUSAGE_THREAD, &st_r0);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &st_c0);
    clock_gettime(CLOCK_MONOTONIC, &st_w0);
}

static void stats_end(void) {
    struct timespec w1, c1;
    struct rusage r1;
    clock_gettime(CLOCK_MONOTONIC, &w1);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    getrusage(RUSAGE_THREAD, &r1);
    long long slice = -1;
    FILE *f = fopen("/proc/thread-self/sched", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "se.slice", 8) == 0) {
                char *colon = strchr(line, ':');
                if (colon) slice = atoll(colon + 1);
            }
        fclose(f);
    }
    fprintf(stderr, "stats wall_ns=%lld cpu_ns=%lld nvcsw=%ld nivcsw=%ld policy=%d slice_ns=%lld\n",
            st_ns(st_w0, w1), st_ns(st_c0, c1), r1.ru_nvcsw - st_r0.ru_nvcsw,
            r1.ru_nivcsw - st_r0.ru_nivcsw, sched_getscheduler(0), slice);
}

static unsigned long long fib(unsigned n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

int main(int argc, char **argv) {
    unsigned n = 42;
    int adapt = 0, stats = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--adapt") == 0) adapt = 1;
        else if (strcmp(argv[i], "--stats") == 0) stats = 1;
        else if (argv[i][0] >= '0' && argv[i][0] <= '9') n = (unsigned)strtoul(argv[i], NULL, 10);
        else { fprintf(stderr, "usage: fib [N] [--adapt] [--stats]\n"); return 2; }
    }
    if (n > 90) { fprintf(stderr, "fib: N must be at most 90\n"); return 2; }
    if (adapt) {
        int err = osl_adapt("compute");
        if (err) fprintf(stderr, "fib: osl_adapt(\"compute\"): %s\n", strerror(err));
    }
    if (stats) stats_begin();
    osl_region_begin("compute");
    unsigned long long v = fib(n);
    osl_region_end("compute");
    if (stats) stats_end();
    if (adapt) osl_adapt("default");
    printf("fib(%u) = %llu\n", n, v);
    return 0;
}
