/* Lab 8 (mutex fast path): T threads each lock and unlock one shared pthread mutex N times, with a
 * short critical section (a few increments) and a little work outside it, optionally all pinned
 * to one CPU. Prints one JSON line: the lock operations done, the wall time, and the context
 * switches (getrusage). The futex calls are counted from outside (oslens record's syscalls table,
 * strace -f -c, perf stat -e syscalls:sys_enter_futex): the program cannot see its own.
 *
 *   mutex_ops --threads T --ops N [--cpu C] [--rr 1]
 *     C: pin every thread to CPU C (-1: no pinning); --rr 1: the workers run SCHED_RR priority 1, so
 *     that on a busy machine other programs cannot keep one of them off its CPU */
#define _GNU_SOURCE
#include "lab_common.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>

enum { CS_WORK = 100, OUT_WORK = 20 };  /* increments inside and outside the lock */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static volatile unsigned long shared_counter;
static long last_owner = -1;      /* under the lock: which thread held it last */
static long handoffs;             /* under the lock: acquisitions by another thread than the last holder */
static long ops_per_thread;
static int pin_cpu = -1;
static int realtime;
static struct timespec start_at;  /* every thread starts its loop then (CLOCK_MONOTONIC, absolute): a start
                                   * barrier without futex calls or sched_yield */

/* one thread's loop, timed: the part inside the critical section and the part outside, so the
 * lab knows the chance that a preempted worker holds the lock (cs_fraction) */
static double cs_fraction(long n) {
    volatile unsigned long local = 0;
    long long t0 = lab_now_ns();
    for (long i = 0; i < n; i++) {
        pthread_mutex_lock(&lock);
        for (int k = 0; k < CS_WORK; k++) shared_counter++;
        pthread_mutex_unlock(&lock);
    }
    long long t1 = lab_now_ns();
    for (long i = 0; i < n; i++)
        for (int k = 0; k < OUT_WORK; k++) local++;
    long long t2 = lab_now_ns();
    shared_counter = 0;
    return (double)(t1 - t0) / (double)(t2 - t0);
}

static void *worker(void *arg) {
    long me = (long)arg;
    if (pin_cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(pin_cpu, &set);
        if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
            fprintf(stderr, "mutex_ops: cannot pin to CPU %d\n", pin_cpu);
            exit(1);
        }
    }
    if (realtime) {
        struct sched_param sp = { .sched_priority = 1 };
        int err = pthread_setschedparam(pthread_self(), SCHED_RR, &sp);
        if (err) { fprintf(stderr, "mutex_ops: cannot use SCHED_RR: %s\n", strerror(err)); exit(1); }
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &start_at, NULL) == EINTR) {}
    volatile unsigned long local = 0;
    for (long i = 0; i < ops_per_thread; i++) {
        pthread_mutex_lock(&lock);
        if (last_owner != me) { handoffs++; last_owner = me; }
        for (int k = 0; k < CS_WORK; k++) shared_counter++;
        pthread_mutex_unlock(&lock);
        for (int k = 0; k < OUT_WORK; k++) local++;   /* work outside the lock */
    }
    return NULL;
}

int main(int argc, char **argv) {
    long threads = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) threads = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--ops")) ops_per_thread = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--cpu")) pin_cpu = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rr")) realtime = atoi(argv[i + 1]);
        else threads = -1;
    }
    if (threads <= 0 || threads > 64 || ops_per_thread <= 0) {
        fprintf(stderr, "usage: mutex_ops --threads T --ops N [--cpu C] [--rr 1]\n");
        return 2;
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    double fraction = cs_fraction(20000);
    pthread_t tid[64];
    long long t0 = lab_now_ns() + 50000000LL;  /* 50 ms: time for the threads to start and pin */
    start_at.tv_sec = t0 / 1000000000LL;
    start_at.tv_nsec = t0 % 1000000000LL;
    for (long t = 0; t < threads; t++)
        if (pthread_create(&tid[t], NULL, worker, (void *)t) != 0) { fprintf(stderr, "mutex_ops: pthread_create failed\n"); return 1; }
    for (long t = 0; t < threads; t++) pthread_join(tid[t], NULL);
    long long t1 = lab_now_ns();
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"threads\":%ld,\"ops\":%ld,\"cpu\":%d,\"rr\":%d,\"counter\":%lu,\"handoffs\":%ld,\"lock_addr\":%lu,\"cs_fraction\":%.3f,\"wall_ns\":%lld,\"nvcsw\":%ld,\"nivcsw\":%ld}\n",
           threads, threads * ops_per_thread, pin_cpu, realtime, shared_counter, handoffs, (unsigned long)(uintptr_t)&lock, fraction, t1 - t0, ru.ru_nvcsw, ru.ru_nivcsw);
    return shared_counter == (unsigned long)(CS_WORK * threads * ops_per_thread) ? 0 : 1;
}
