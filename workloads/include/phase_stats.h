/* phase_stats.h: the --stats line of the quantum-experiment workloads (fib, lu), shared.
 * Header-only; include after defining _GNU_SOURCE (RUSAGE_THREAD). */
#ifndef OSLENS_WORKLOADS_PHASE_STATS_H
#define OSLENS_WORKLOADS_PHASE_STATS_H
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

#endif
