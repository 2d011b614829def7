/* A region-dense program with a known number of events: ITER regions, each around WORK steps of a
 * dependent integer recurrence, plus an event every 64 iterations, on one thread (or THREADS
 * threads, each doing the same). Deterministic: the event count does not depend on timing.
 *
 * Usage: dense ITER WORK [THREADS]
 * Prints "loop_cpu_ns N" per thread: the thread's CPU time for the loop (CLOCK_THREAD_CPUTIME_ID)
 * and, last, "events E": the events one run records (regions x 2 + events + the outer region + one
 * event before the loop). The event before the loop, outside the timed part, lets the recorder set
 * up the thread (its buffer, the first pages) first: a trace's times start after that set-up, so
 * the loop's CPU time must not contain it either for the in-trace check to compare like with like. */
#include <oslens.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long iterations, work;
static volatile uint64_t sink;

static uint64_t cpu_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void *run(void *arg) {
    uint64_t *out = arg;
    uint64_t x = 88172645463325252ull;
    long before = -1;
    osl_event(1, &before, sizeof before);
    uint64_t t0 = cpu_ns();
    osl_region_begin("dense-loop");
    for (long i = 0; i < iterations; i++) {
        osl_region_begin("dense-step");
        for (long w = 0; w < work; w++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            __asm__ volatile("" : "+r"(x));
        }
        if ((i & 63) == 0) osl_event(1, &i, sizeof i);
        osl_region_end("dense-step");
    }
    osl_region_end("dense-loop");
    *out = cpu_ns() - t0;
    sink = x;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: dense ITER WORK [THREADS]\n");
        return 2;
    }
    iterations = atol(argv[1]);
    work = atol(argv[2]);
    int threads = argc > 3 ? atoi(argv[3]) : 1;
    if (threads < 1 || threads > 64) return 2;
    osl_event_name(1, "tick");
    uint64_t results[64];
    if (threads == 1) {
        run(&results[0]);
    } else {
        pthread_t t[64];
        for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, run, &results[i]);
        for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    }
    for (int i = 0; i < threads; i++) printf("loop_cpu_ns %llu\n", (unsigned long long)results[i]);
    long per_thread = 2 * iterations + (iterations + 63) / 64 + 3;
    printf("events %ld\n", per_thread * threads);
    return 0;
}
