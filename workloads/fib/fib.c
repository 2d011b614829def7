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

#include "phase_stats.h"

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
