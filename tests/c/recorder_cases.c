/* Programs with known numbers of events, for the recorder's end-to-end tests.
 * Usage: recorder_cases MODE [ARGS]; see each mode below. */
#include <oslens.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static osl_counter_t *shared_counter;
static osl_timer_t *shared_timer;
static int per_thread;

static void *worker(void *arg) {
    char name[32];
    snprintf(name, sizeof name, "worker-%ld", (long)arg);
    osl_thread_name(name);
    const char payload[20] = "0123456789abcdefghi";
    for (int i = 0; i < per_thread; i++) {
        osl_region_begin("step");
        osl_count(shared_counter, 1);
        osl_timer_start(shared_timer);
        osl_event(7, payload, sizeof payload);
        osl_timer_stop(shared_timer);
        osl_region_end("step");
    }
    return NULL;
}

/* threads N M: N threads, each M x (region step, count, timer, 20-byte event 7). */
static int mode_threads(int n, int m) {
    per_thread = m;
    shared_counter = osl_counter("iterations", NULL);
    shared_timer = osl_timer("event-timer", NULL);
    osl_event_name(7, "payload-event");
    pthread_t t[64];
    for (long i = 0; i < n; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    printf("counter=%lld\n", (long long)osl_counter_value(shared_counter));
    return 0;
}

/* One call site used by the parent before the fork and by the child after it: the child's
 * trace must name the region in its own names (the header caches ids per call site). */
static void shared_site(void) {
    osl_region_begin("shared-site");
    osl_region_end("shared-site");
}

/* fork M: parent M events id 1, child M events id 2 (and one region), both named; both run
 * shared_site once. */
static int mode_fork(int m) {
    osl_event_name(1, "parent-event");
    osl_event_name(2, "child-event");
    for (int i = 0; i < m; i++) osl_event(1, NULL, 0);
    shared_site();
    pid_t pid = fork();
    if (pid == 0) {
        osl_region_begin("child-work");
        for (int i = 0; i < m; i++) osl_event(2, NULL, 0);
        osl_region_end("child-work");
        shared_site(); /* after the child has a buffer: the cached id alone must not do */
        exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    return WEXITSTATUS(status);
}

/* managers: counter under manager m counts 10, suspended 5, resumed 3 (=13); reset then 2;
 * events: 5 recorded, 5 under global suspend (not recorded), 5 recorded. */
static int mode_managers(void) {
    osl_manager_t *m = osl_manager("io-instruments");
    osl_counter_t *c = osl_counter("bytes", m);
    osl_timer_t *t = osl_timer("io-timer", m);
    osl_count(c, 10);
    osl_timer_start(t);
    osl_timer_stop(t);
    osl_suspend(m);
    osl_count(c, 5);
    osl_timer_start(t); /* suspended: neither recorded nor added to the total */
    usleep(20000);
    osl_timer_stop(t);
    osl_resume(m);
    osl_count(c, 3);
    osl_timer_start(t);
    osl_timer_stop(t);
    printf("timer-total-under-10ms=%d\n", osl_timer_total_ns(t) < 10000000);
    printf("before-reset=%lld\n", (long long)osl_counter_value(c));
    osl_counter_record(c);
    osl_reset(m);
    osl_count(c, 2);
    printf("after-reset=%lld\n", (long long)osl_counter_value(c));
    for (int i = 0; i < 5; i++) osl_event(1, NULL, 0);
    osl_suspend(NULL);
    for (int i = 0; i < 5; i++) osl_event(1, NULL, 0);
    osl_resume(NULL);
    for (int i = 0; i < 5; i++) osl_event(1, NULL, 0);
    return 0;
}

/* flood N: N events of id 3 with an 8-byte payload (the loop index). */
static int mode_flood(long n) {
    for (long i = 0; i < n; i++) osl_event(3, &i, sizeof i);
    printf("dropped=%llu\n", (unsigned long long)osl_dropped());
    printf("paused_ns=%llu\n", (unsigned long long)osl_pause_ns());
    return 0;
}

/* die M SIGNAL: M events id 4, then kill itself (9 = SIGKILL, 6 = abort). */
static int mode_die(long m, int sig) {
    for (long i = 0; i < m; i++) osl_event(4, &i, sizeof i);
    if (sig == 6) abort();
    kill(getpid(), sig);
    pause();
    return 0;
}

/* payloads M BYTES: M times an 8-byte event id 8 (the index) then an event id 9 of BYTES
 * bytes, each byte (index + offset) % 251: large payloads straddle staging slots or, past a
 * slot's size, are written in place. */
static int mode_payloads(long m, long bytes) {
    unsigned char *p = malloc(bytes);
    for (long i = 0; i < m; i++) {
        osl_event(8, &i, sizeof i);
        for (long k = 0; k < bytes; k++) p[k] = (unsigned char)((i + k) % 251);
        osl_event(9, p, bytes);
    }
    free(p);
    return 0;
}

static long running_events;
static void *record_then_wait(void *arg) {
    (void)arg;
    for (long i = 0; i < running_events; i++) osl_event(10, &i, sizeof i);
    __atomic_store_n(&running_events, -1, __ATOMIC_RELEASE);
    pause();
    return NULL;
}

/* running M: a thread records M events id 10 and is still running when main returns. */
static int mode_running(long m) {
    running_events = m;
    pthread_t t;
    pthread_create(&t, NULL, record_then_wait, NULL);
    while (__atomic_load_n(&running_events, __ATOMIC_ACQUIRE) != -1) usleep(1000);
    return 0;
}

/* enable: starts disabled (OSLENS_ENABLE=0); 4 events before osl_enable, 3 after. */
static int mode_enable(void) {
    for (int i = 0; i < 4; i++) osl_event(5, NULL, 0);
    printf("enabled-before=%d\n", osl_enabled());
    osl_enable();
    for (int i = 0; i < 3; i++) osl_event(5, NULL, 0);
    return 0;
}

/* nested: regions outer > inner x3, for pairing and depth. */
static int mode_nested(void) {
    osl_region_begin("outer");
    for (int i = 0; i < 3; i++) {
        osl_region_begin("inner");
        usleep(1000);
        osl_region_end("inner");
    }
    osl_region_end("outer");
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *mode = argv[1];
    if (!strcmp(mode, "threads")) return mode_threads(atoi(argv[2]), atoi(argv[3]));
    if (!strcmp(mode, "fork")) return mode_fork(atoi(argv[2]));
    if (!strcmp(mode, "managers")) return mode_managers();
    if (!strcmp(mode, "flood")) return mode_flood(atol(argv[2]));
    if (!strcmp(mode, "die")) return mode_die(atol(argv[2]), atoi(argv[3]));
    if (!strcmp(mode, "enable")) return mode_enable();
    if (!strcmp(mode, "nested")) return mode_nested();
    if (!strcmp(mode, "payloads")) return mode_payloads(atol(argv[2]), atol(argv[3]));
    if (!strcmp(mode, "running")) return mode_running(atol(argv[2]));
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
