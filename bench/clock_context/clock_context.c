/* What a clock read costs the code around it: a loop of W read-modify-writes (each on its own
 * cache line of a 16 MiB array, so they miss the caches and overlap each other, or on one line,
 * so they hit), run plain and with one rdtsc, rdtscp or lfence after each W. Prints one line per
 * (repetition, work, instruction): "WORK W INSTRUCTION REP NS_PER_ITERATION" (thread CPU time).
 * An instruction that waits for earlier ones to complete costs the overlap it prevents, which
 * grows with the work's memory-level parallelism; one that does not costs its own latency.
 * Usage: clock_context ITERATIONS REPS */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>

static volatile uint64_t sink;
static double *area;
#define AREA_DOUBLES (1u << 21)

static double cpu_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

/* The loop, with INSTR after each W updates; stride 8 doubles = one cache line. */
#define RUN(INSTR)                                                           \
    do {                                                                     \
        size_t p = 0;                                                        \
        for (long i = 0; i < n; i++) {                                       \
            for (int j = 0; j < w; j++) {                                    \
                area[p] += 1.0;                                              \
                p = (p + stride) & (AREA_DOUBLES - 1);                       \
            }                                                                \
            INSTR;                                                           \
        }                                                                    \
    } while (0)

static double timed(int which, long n, int w, size_t stride) {
    double t0 = cpu_ns();
    switch (which) {
    case 0: RUN(__asm__ volatile("" ::: "memory")); break;
    case 1: RUN(sink = __rdtsc()); break;
    case 2: RUN(({ unsigned aux; sink = __rdtscp(&aux); })); break;
    default: RUN(_mm_lfence()); break;
    }
    return (cpu_ns() - t0) / n;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 200000;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    static const char *instr[] = {"none", "rdtsc", "rdtscp", "lfence"};
    static const int works[] = {0, 4, 16, 64};
    area = calloc(AREA_DOUBLES, sizeof(double));
    if (!area)
        return 1;
    for (int r = 0; r < reps; r++)
        for (int s = 0; s < 2; s++)
            for (int k = 0; k < 4; k++)
                for (int j = 0; j < 4; j++) {
                    int which = (j + r) % 4; /* rotated, so drift hits every instruction alike */
                    size_t stride = s ? 8 : 0;
                    if (works[k] == 0 && s)
                        continue;
                    printf("%s %d %s %d %.3f\n", s ? "lines" : "one-line", works[k], instr[which], r,
                           timed(which, n, works[k], stride));
                }
    return 0;
}
