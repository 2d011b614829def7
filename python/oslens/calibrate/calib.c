/* In-vitro instrumentation cost (Kohr et al. 1994, section 5.1): the same loop run empty and
 * with one instrumentation point of each kind; oslens.calibrate computes C = (t_i - t_0) / N.
 *
 * Usage: calib N REPS KIND[,KIND...]
 * Prints one line per (repetition, kind): "KIND REP THREAD_NS PROCESS_NS": the CPU time of the
 * calling thread (CLOCK_THREAD_CPUTIME_ID, so time spent preempted by other load does not count)
 * and of the whole process (the recorder's oslens-helper thread included) for N iterations. Kinds run interleaved inside each repetition, the order rotated every repetition,
 * so drift and other load hit every kind alike.
 *
 * Kinds: empty, rdtsc, clock_gettime, counter (osl_count), counter_record, timer_start,
 * timer_stop, event (8-byte payload), region_begin, region_end (a 9-byte name), region_name1 and
 * region_name32 (osl_region_begin with a 1-byte and a 32-byte name: a region call hashes its name,
 * so its cost grows with the name's length), raw (osl_record_raw),
 * mutex (pthread_mutex_lock + unlock: run once plain and once with the preload wrappers),
 * off (osl_event with recording disabled by osl_disable), paced_empty and paced_event (PACE steps
 * of a dependent integer recurrence, ~2 us, then nothing or one osl_event: a program recording
 * about half a million events a second, for what a record costs outside the call at that rate),
 * thread (pthread_create of a thread that records one event, then pthread_join: what each further
 * recording thread costs a process, its buffer set up and released), paced_store_empty and
 * paced_store_event (the paced loop storing each step's value to a 4 KB array: code that keeps
 * the store buffer busy, in which a record's own stores cost more). */
#include <oslens.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <x86intrin.h>

static osl_counter_t *counter;
static osl_timer_t *timer;
static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static volatile uint64_t sink;
#define PACE 1500

static volatile uint64_t store_area[512];

static inline uint64_t pace_store(uint64_t x) {
    for (int w = 0; w < PACE; w++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        __asm__ volatile("" : "+r"(x));
        store_area[w & 511] = x;
    }
    return x;
}

static void *one_event(void *arg) {
    long v = (long)arg;
    osl_event(1, &v, sizeof v);
    return NULL;
}

static inline uint64_t pace(uint64_t x) {
    for (int w = 0; w < PACE; w++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

static uint64_t cpu_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static uint64_t process_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* One loop shape for every kind: the body is the instrumentation point alone. */
#define LOOP(body)                                   \
    do {                                             \
        for (long i = 0; i < n; i++) {               \
            __asm__ volatile("" ::: "memory");       \
            body;                                    \
        }                                            \
    } while (0)

static int run_kind(const char *kind, long n, uint64_t *out, uint64_t *out_process) {
    uint64_t p0 = process_ns();
    uint64_t paused0 = osl_pause_ns();
    uint64_t t0 = cpu_ns();
    if (!strcmp(kind, "empty")) {
        LOOP((void)0);
    } else if (!strcmp(kind, "rdtsc")) {
        LOOP(sink = __rdtsc());
    } else if (!strcmp(kind, "clock_gettime")) {
        struct timespec ts;
        LOOP((clock_gettime(CLOCK_MONOTONIC, &ts), sink = (uint64_t)ts.tv_nsec));
    } else if (!strcmp(kind, "counter")) {
        LOOP(osl_count(counter, 1));
    } else if (!strcmp(kind, "counter_record")) {
        LOOP(osl_counter_record(counter));
    } else if (!strcmp(kind, "timer_start")) {
        LOOP(osl_timer_start(timer));
    } else if (!strcmp(kind, "timer_stop")) {
        LOOP(osl_timer_stop(timer));
    } else if (!strcmp(kind, "event")) {
        LOOP(osl_event(1, &i, sizeof i));
    } else if (!strcmp(kind, "region_begin")) {
        LOOP(osl_region_begin("calibrate"));
    } else if (!strcmp(kind, "region_end")) {
        LOOP(osl_region_end("calibrate"));
    } else if (!strcmp(kind, "region_name1")) {
        LOOP(osl_region_begin("r"));
    } else if (!strcmp(kind, "region_name32")) {
        LOOP(osl_region_begin("calibrate-region-name-of-32bytes"));
    } else if (!strcmp(kind, "raw")) {
        LOOP(osl_record_raw(3, 1, 0, (uint64_t)i));
    } else if (!strcmp(kind, "mutex")) {
        LOOP((pthread_mutex_lock(&mutex), pthread_mutex_unlock(&mutex)));
    } else if (!strcmp(kind, "paced_empty")) {
        uint64_t x = 1;
        LOOP(x = pace(x));
        sink = x;
    } else if (!strcmp(kind, "paced_event")) {
        uint64_t x = 1;
        LOOP((x = pace(x), osl_event(1, &i, sizeof i)));
        sink = x;
    } else if (!strcmp(kind, "paced_store_empty")) {
        uint64_t x = 1;
        LOOP(x = pace_store(x));
        sink = x;
    } else if (!strcmp(kind, "paced_store_event")) {
        uint64_t x = 1;
        LOOP((x = pace_store(x), osl_event(1, &i, sizeof i)));
        sink = x;
    } else if (!strcmp(kind, "thread")) {
        LOOP(({
            pthread_t t;
            if (pthread_create(&t, NULL, one_event, (void *)i) == 0) pthread_join(t, NULL);
        }));
    } else if (!strcmp(kind, "off")) {
        osl_disable();
        LOOP(osl_event(1, &i, sizeof i));
        osl_enable();
    } else {
        return -1;
    }
    *out = cpu_ns() - t0;
    *out_process = process_ns() - p0;
    /* The recorder's own pauses (slots the thread copied out itself because the helper was
     * behind) are recorded as pause events and removed as such: they are not the call's cost. */
    uint64_t paused = osl_pause_ns() - paused0;
    *out = *out > paused ? *out - paused : 0;
    *out_process = *out_process > paused ? *out_process - paused : 0;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: calib N REPS KIND[,KIND...]\n");
        return 2;
    }
    long n = atol(argv[1]);
    int reps = atoi(argv[2]);
    char *kinds[64];
    int nk = 0;
    for (char *k = strtok(argv[3], ","); k && nk < 64; k = strtok(NULL, ",")) kinds[nk++] = k;
    counter = osl_counter("calibrate-counter", NULL);
    timer = osl_timer("calibrate-timer", NULL);
    osl_event_name(1, "calibrate");
    /* warm the recorder's per-thread state, the names and the code outside the timed loops */
    for (int k = 0; k < nk; k++) {
        uint64_t ignored, ignored_process;
        long saved = n;
        n = n < 1000 ? n : 1000;
        if (run_kind(kinds[k], n, &ignored, &ignored_process) < 0) {
            fprintf(stderr, "calib: unknown kind %s\n", kinds[k]);
            return 2;
        }
        n = saved;
    }
    for (int r = 0; r < reps; r++) {
        for (int j = 0; j < nk; j++) {
            int k = (j + r) % nk;
            uint64_t ns, pns;
            run_kind(kinds[k], n, &ns, &pns);
            printf("%s %d %llu %llu\n", kinds[k], r, (unsigned long long)ns, (unsigned long long)pns);
        }
    }
    return 0;
}
