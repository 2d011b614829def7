/* calls.c: N calls of a tiny function, timed inside the program (the loop only).
 * Built plain, with -finstrument-functions (oslens) and with -pg (uftrace) by run.py. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

__attribute__((noinline)) long step(long x) { return x * 3 + 1; }

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    volatile long sink = 0;
    for (long i = 0; i < 1000; i++)
        sink += step(i);
    long t0 = now_ns();
    for (long i = 0; i < n; i++)
        sink += step(i);
    long t1 = now_ns();
    printf("%ld %ld\n", t1 - t0, (long)sink);
    return 0;
}
