/* trigger_target [MODE]: known regions, timers, events, counters and system calls for the
 * flight-recorder trigger tests (python/oslens/capture/test_triggers.py).
 *
 * MODE "basic" (default), main thread, in this order:
 *   - 5 x region "fast" (a few us of work);
 *   - region "work" slowed by a 120 ms nanosleep (off CPU);
 *   - region "work" slowed by computing: 80 ms of this thread's CPU time;
 *   - timer "phase": 60 ms nanosleep between start and stop; timer "phase" again: no sleep;
 *   - event "checkpoint" 3 times; counter "items" recorded at 1..8;
 *   - a 30 ms nanosleep outside any region; an fsync of FILE (argv[2], when given);
 *   - a second thread's region "work" slowed by a 70 ms nanosleep, joined at the end.
 * MODE "hog" CPU: puts itself on CPU alone and under SCHED_FIFO RT_PRIO (as chrt and taskset
 * would, without exec'ing the program in place), so that no normal task can take its CPU. A hog
 * thread, SCHED_FIFO HOG_PRIO_ABOVE above it on the same CPU, waits on a pipe. Region "slow"
 * computes LONG_MS of CPU time (it never waits for the CPU); region "slow" again computes 10 ms,
 * wakes the hog, which holds the CPU for HOG_MS of wall time, then computes 10 ms more: about
 * HOG_MS of it waiting for the CPU. OTHER is the hog's tid.
 * Prints "tids MAIN OTHER" at the end. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <oslens.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pid_t other;

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Burns `ms` of this thread's CPU time (not wall time: the same work whatever the load). */
static volatile unsigned long sink;
static void compute_ms(double ms) {
    double until = cpu_ms() + ms;
    while (cpu_ms() < until)
        for (int i = 0; i < 10000; i++) sink += i;
}

static void *second(void *arg) {
    (void)arg;
    other = gettid();
    osl_thread_name("second");
    osl_region_begin("work");
    sleep_ms(70);
    osl_region_end("work");
    return NULL;
}

static int basic(const char *file) {
    for (int i = 0; i < 5; i++) {
        osl_region_begin("fast");
        compute_ms(0.01);
        osl_region_end("fast");
    }
    osl_region_begin("work");
    sleep_ms(120);
    osl_region_end("work");
    osl_region_begin("work");
    compute_ms(80);
    osl_region_end("work");
    osl_timer_t *phase = osl_timer("phase", NULL);
    osl_timer_start(phase);
    sleep_ms(60);
    osl_timer_stop(phase);
    osl_timer_start(phase);
    osl_timer_stop(phase);
    osl_event_name(1, "checkpoint");
    for (int i = 0; i < 3; i++) osl_event(1, &i, sizeof i);
    osl_counter_t *items = osl_counter("items", NULL);
    for (int i = 0; i < 8; i++) {
        osl_count(items, 1);
        osl_counter_record(items);
    }
    sleep_ms(30);
    if (file) {
        int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || write(fd, "x", 1) != 1 || fsync(fd) != 0) return 1;
        close(fd);
    }
    pthread_t t;
    if (pthread_create(&t, NULL, second, NULL)) return 1;
    pthread_join(t, NULL);
    return 0;
}

#define LONG_MS 150
#define HOG_MS 80
#define HOG_PRIO_ABOVE 10
#define RT_PRIO 10

static double wall_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Holds the CPU for HOG_MS of wall time per byte read; ends when the pipe is closed. */
static void *hog_thread(void *arg) {
    int fd = (int)(intptr_t)arg;
    char c;
    other = gettid();
    while (read(fd, &c, 1) == 1) {
        double until = wall_ms() + HOG_MS;
        while (wall_ms() < until)
            for (int i = 0; i < 10000; i++) sink += i;
    }
    return NULL;
}

static int hog(int cpu) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    struct sched_param me = {.sched_priority = RT_PRIO};
    int fds[2];
    if (sched_setaffinity(0, sizeof one, &one) != 0 || sched_setscheduler(0, SCHED_FIFO, &me) != 0) {
        perror("trigger_target hog: SCHED_FIFO on one CPU");
        return 3;
    }
    pthread_attr_t attr;
    struct sched_param above = {.sched_priority = me.sched_priority + HOG_PRIO_ABOVE};
    pthread_attr_init(&attr);
    pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
    pthread_attr_setschedpolicy(&attr, SCHED_FIFO);
    pthread_attr_setschedparam(&attr, &above);
    pthread_t t;
    if (pipe(fds) || pthread_create(&t, &attr, hog_thread, (void *)(intptr_t)fds[0])) return 1;
    osl_region_begin("slow");
    compute_ms(LONG_MS);
    osl_region_end("slow");
    osl_region_begin("slow");
    compute_ms(10);
    if (write(fds[1], "h", 1) != 1) return 1; /* the hog takes the CPU here, being above us on it */
    compute_ms(10);
    osl_region_end("slow");
    close(fds[1]);
    pthread_join(t, NULL);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "basic";
    int rc = strcmp(mode, "hog") == 0 ? hog(argc > 2 ? atoi(argv[2]) : 0) : basic(argc > 2 ? argv[2] : NULL);
    printf("tids %d %d\n", (int)gettid(), (int)other);
    return rc;
}
