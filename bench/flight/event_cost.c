/* bench/flight's per-event program: N osl_event calls on one thread, timed by thread CPU time
 * (CLOCK_THREAD_CPUTIME_ID: time preempted by other load does not count) and by wall time
 * (CLOCK_MONOTONIC: the pauses a rotation makes the thread wait count too).
 * Usage: event_cost EVENTS   Prints "cpu_ns_per_event wall_ns_per_event". */
#include <oslens.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double ns(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    long n = atol(argv[1]);
    if (n <= 0) return 2;
    /* the thread's chunk is opened outside the timed loop */
    osl_region_begin("warm");
    osl_region_end("warm");
    double c0 = ns(CLOCK_THREAD_CPUTIME_ID), w0 = ns(CLOCK_MONOTONIC);
    for (long i = 0; i < n; i++) osl_event(1, &i, sizeof i);
    double c1 = ns(CLOCK_THREAD_CPUTIME_ID), w1 = ns(CLOCK_MONOTONIC);
    printf("%.3f %.3f\n", (c1 - c0) / n, (w1 - w0) / n);
    return 0;
}
