/* An event flood for the fault tests (tests/test_faults.py): THREADS threads each record
 * EVENTS events (osl_event 1 "flood", payload = the event's index, after one event 2 "ready"
 * that every thread records before any floods) and sum what they computed; the
 * program prints the sums, which must be intact whatever happens to the trace.
 * Usage: fault_flood THREADS EVENTS [MIB_OF_OWN_MEMORY [PAUSE_MS_EVERY_100K]] */
#include <oslens.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long events;
static long pause_ms;
static pthread_barrier_t ready;

static void *flood(void *arg) {
    uint64_t sum = (uint64_t)(uintptr_t)arg;
    /* every thread has its buffer before any floods (event 2 creates it) */
    osl_event(2, NULL, 0);
    pthread_barrier_wait(&ready);
    for (long i = 0; i < events; i++) {
        uint64_t v = (uint64_t)i;
        osl_event(1, &v, sizeof v);
        sum = sum * 31 + v;
        if (pause_ms && i % 100000 == 99999) {
            struct timespec ts = { pause_ms / 1000, (pause_ms % 1000) * 1000000L };
            nanosleep(&ts, NULL);
        }
    }
    return (void *)(uintptr_t)sum;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    events = argc > 2 ? atol(argv[2]) : 1000000;
    long own_mib = argc > 3 ? atol(argv[3]) : 0;
    pause_ms = argc > 4 ? atol(argv[4]) : 0;
    osl_event_name(1, "flood");
    osl_event_name(2, "ready");
    /* memory of the program's own, touched page by page (the memory-cap tests) */
    char *own = own_mib ? malloc((size_t)own_mib << 20) : NULL;
    if (own_mib && !own)
        return 3;
    for (long i = 0; i < (own_mib << 20); i += 4096)
        own[i] = (char)i;
    pthread_t t[64];
    if (threads > 64)
        threads = 64;
    pthread_barrier_init(&ready, NULL, (unsigned)threads);
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, flood, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < threads; i++) {
        void *sum;
        pthread_join(t[i], &sum);
        printf("thread %d sum %llu\n", i, (unsigned long long)(uintptr_t)sum);
    }
    long touched = 0;
    for (long i = 0; i < (own_mib << 20); i += 4096)
        touched += own[i] == (char)i;
    printf("own pages intact %ld of %ld\n", touched, own_mib << 8);
    return 0;
}
