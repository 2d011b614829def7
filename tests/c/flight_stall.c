/* flight_stall LOG SECONDS STALL_AT [MARK]: regions "work" for SECONDS seconds, each holding
 * an event "seq" whose payload is the region's number and FILL events "fill" (so a small flight
 * ring is overwritten several times); the region that starts after STALL_AT seconds holds one
 * 100 ms nanosleep. Writes MARK (when given) as soon as the stalled region ended, and at the
 * end LOG: one line "N BEGIN_NS END_NS" (CLOCK_MONOTONIC) per region, "stall N" for the slow
 * one. FLIGHT_SPIN (environment) sets the work per event. For tests/test_flight.py and bench/flight. */
#define _GNU_SOURCE
#include <oslens.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define FILL 20

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: flight_stall LOG SECONDS STALL_AT [MARK]\n");
        return 2;
    }
    double seconds = atof(argv[2]), stall_at = atof(argv[3]);
    /* FLIGHT_SPIN: work per FILL event (default 4000 additions; 0: record as fast as possible) */
    int spin = getenv("FLIGHT_SPIN") ? atoi(getenv("FLIGHT_SPIN")) : 4000;
    size_t cap = 1 << 22, n = 0;
    uint64_t(*log)[2] = calloc(cap, sizeof *log);
    osl_event_name(1, "seq");
    osl_event_name(2, "fill");
    uint64_t start = now_ns(), stalled = UINT64_MAX;
    volatile unsigned long sink = 0;
    while (n < cap && now_ns() - start < (uint64_t)(seconds * 1e9)) {
        uint64_t b = now_ns();
        osl_region_begin("work");
        uint64_t i = n;
        osl_event(1, &i, sizeof i);
        for (uint64_t j = 0; j < FILL; j++) {
            osl_event(2, &j, sizeof j);
            for (int k = 0; k < spin; k++) sink += k;
        }
        if (stalled == UINT64_MAX && b - start >= (uint64_t)(stall_at * 1e9)) {
            struct timespec t = {0, 100 * 1000000L};
            nanosleep(&t, NULL);
            stalled = n;
        }
        osl_region_end("work");
        log[n][0] = b;
        log[n][1] = now_ns();
        if (stalled == n && argc > 4) {
            FILE *m = fopen(argv[4], "w");
            if (m) fclose(m);
        }
        n++;
    }
    FILE *f = fopen(argv[1], "w");
    if (!f) return 1;
    for (size_t k = 0; k < n; k++) fprintf(f, "%zu %llu %llu\n", k, (unsigned long long)log[k][0], (unsigned long long)log[k][1]);
    if (stalled != UINT64_MAX) fprintf(f, "stall %llu\n", (unsigned long long)stalled);
    fclose(f);
    return 0;
}
