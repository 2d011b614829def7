/* flight_stall LOG SECONDS STALL_AT[,STALL_AT...] [MARK]: regions "work" for SECONDS seconds,
 * each holding an event "seq" whose payload is the region's number and FILL events "fill" (so a
 * small flight ring is overwritten several times); the first region that starts after each
 * STALL_AT second holds one 100 ms nanosleep. Writes MARK (when given) as soon as the first
 * stalled region ended, and at the end LOG: one line "N BEGIN_NS END_NS" (CLOCK_MONOTONIC) per
 * region, "stall N" per slow one. FLIGHT_SPIN (environment) sets the work per event; FLIGHT_RATE
 * (regions a second; default 0, as fast as it can) paces the regions, sleeping between them in
 * 10 ms steps, so a long run does not hog a CPU. For tests/test_flight*.py and bench/flight. */
#define _GNU_SOURCE
#include <oslens.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define FILL 20
#define MAX_STALLS 16
#define PACE_NS 10000000ull /* sleep only when this far ahead of the rate: ~100 wake-ups a second */

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* Sleeps until region n's turn at `rate` regions a second, outside any region; a backlog of
 * more than 100 ms (a loaded machine) is dropped rather than caught up at full speed. */
static void pace(uint64_t *epoch, uint64_t n, double rate) {
    if (rate <= 0) return;
    uint64_t due = *epoch + (uint64_t)(n * 1e9 / rate), now = now_ns();
    if (now > due + 10 * PACE_NS) *epoch += now - due;
    if (due < now + PACE_NS) return;
    struct timespec t = {(time_t)(due / 1000000000ull), (long)(due % 1000000000ull)};
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL);
}

/* The stall times, seconds from the start, from "3" or "20,30". */
static int parse_stalls(char *s, double *at) {
    int k = 0;
    for (char *p = s; p && *p && k < MAX_STALLS; k++) {
        char *end;
        at[k] = strtod(p, &end);
        p = *end == ',' ? end + 1 : NULL;
    }
    return k;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: flight_stall LOG SECONDS STALL_AT[,STALL_AT...] [MARK]\n");
        return 2;
    }
    double seconds = atof(argv[2]), stall_at[MAX_STALLS];
    int stalls = parse_stalls(argv[3], stall_at), done = 0;
    /* FLIGHT_SPIN: work per FILL event (default 4000 additions; 0: record as fast as possible) */
    int spin = getenv("FLIGHT_SPIN") ? atoi(getenv("FLIGHT_SPIN")) : 4000;
    double rate = getenv("FLIGHT_RATE") ? atof(getenv("FLIGHT_RATE")) : 0;
    size_t cap = 1 << 22, n = 0;
    uint64_t(*log)[2] = calloc(cap, sizeof *log);
    uint64_t *stalled = calloc(MAX_STALLS, sizeof *stalled);
    osl_event_name(1, "seq");
    osl_event_name(2, "fill");
    uint64_t start = now_ns(), epoch = start;
    volatile unsigned long sink = 0;
    while (n < cap && now_ns() - start < (uint64_t)(seconds * 1e9)) {
        pace(&epoch, n, rate);
        uint64_t b = now_ns();
        osl_region_begin("work");
        uint64_t i = n;
        osl_event(1, &i, sizeof i);
        for (uint64_t j = 0; j < FILL; j++) {
            osl_event(2, &j, sizeof j);
            for (int k = 0; k < spin; k++) sink += k;
        }
        int stall = done < stalls && b - start >= (uint64_t)(stall_at[done] * 1e9);
        if (stall) {
            struct timespec t = {0, 100 * 1000000L};
            nanosleep(&t, NULL);
            stalled[done++] = n;
        }
        osl_region_end("work");
        log[n][0] = b;
        log[n][1] = now_ns();
        if (stall && done == 1 && argc > 4) {
            FILE *m = fopen(argv[4], "w");
            if (m) fclose(m);
        }
        n++;
    }
    FILE *f = fopen(argv[1], "w");
    if (!f) return 1;
    for (size_t k = 0; k < n; k++) fprintf(f, "%zu %llu %llu\n", k, (unsigned long long)log[k][0], (unsigned long long)log[k][1]);
    for (int k = 0; k < done; k++) fprintf(f, "stall %llu\n", (unsigned long long)stalled[k]);
    fclose(f);
    return 0;
}
