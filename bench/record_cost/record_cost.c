/* ns per recorded event for each instrument kind, on 1..N threads, next to a bare
 * "read TSC + store 16 bytes" loop measured in the same run. Run under `oslens record`.
 * Usage: record_cost THREADS ITERATIONS KIND  (KIND: bare-hot bare-fresh counter timer event region off)
 * Prints one line per thread: CPU ns per event (thread CPU time, so time spent preempted by
 * other load on the machine does not count). */
#include <oslens.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <x86intrin.h>

struct entry { uint64_t ts, value; };

static long iterations;
static const char *kind;
static pthread_barrier_t start_line;

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void *run(void *arg) {
    double *result = arg;
    struct entry *log = NULL;
    size_t bytes = iterations * sizeof(struct entry);
    if (!strcmp(kind, "bare-fresh"))
        log = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    else if (!strcmp(kind, "bare-hot"))
        log = aligned_alloc(64, 4096 * sizeof(struct entry));
    /* per-thread instruments: a counter shared by threads would measure cache-line contention
     * on the user's object, not the cost of recording */
    osl_counter_t *counter = osl_counter("bench-counter", NULL);
    osl_timer_t *timer = osl_timer("bench-timer", NULL);
    /* warm the recorder's per-thread state outside the timed loop */
    osl_region_begin("warm");
    osl_region_end("warm");
    pthread_barrier_wait(&start_line);
    double t0 = now_ns();
    long n = iterations;
    if (!strcmp(kind, "bare-hot")) {
        for (long i = 0; i < n; i++) { log[i & 4095].ts = __rdtsc(); log[i & 4095].value = i; __asm__ volatile("" ::: "memory"); }
    } else if (!strcmp(kind, "bare-fresh")) {
        for (long i = 0; i < n; i++) { log[i].ts = __rdtsc(); log[i].value = i; __asm__ volatile("" ::: "memory"); }
    } else if (!strcmp(kind, "counter")) {
        for (long i = 0; i < n; i++) osl_count(counter, 1);
    } else if (!strcmp(kind, "timer")) {
        for (long i = 0; i < n / 2; i++) { osl_timer_start(timer); osl_timer_stop(timer); }
    } else if (!strcmp(kind, "event")) {
        for (long i = 0; i < n; i++) osl_event(1, &i, sizeof i);
    } else if (!strcmp(kind, "region")) {
        for (long i = 0; i < n / 2; i++) { osl_region_begin("bench"); osl_region_end("bench"); }
    } else if (!strcmp(kind, "off")) {
        osl_disable();
        for (long i = 0; i < n; i++) osl_event(1, &i, sizeof i);
    }
    *result = (now_ns() - t0) / n;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    int threads = atoi(argv[1]);
    iterations = atol(argv[2]);
    kind = argv[3];
    pthread_barrier_init(&start_line, NULL, threads);
    pthread_t t[256];
    double results[256];
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, run, &results[i]);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < threads; i++) printf("%.3f\n", results[i]);
    /* CPU of the whole process per event, the helper thread included (and thread start-up) */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu_ns = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e9 + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e3;
    printf("process %.3f\n", cpu_ns / ((double)iterations * threads));
    return 0;
}
