/* A running program for `oslens record -p` (tests/test_attach.py): THREADS workers each run
 * BATCHES batches of GETPIDS getpid system calls followed by a 1 ms nanosleep, noting each
 * batch's CLOCK_MONOTONIC start and end in memory; at the end the log goes to LOG ("tid t0 t1"
 * per batch, then "sleep tid t1 t2" per sleep) and one line to stdout that does not depend on timing.
 * SIGUSR1 makes the main thread fork a child and start a thread that each make EXTRA getpid
 * calls (a child and a thread created after the attach); their tids go to the log. Built with
 * -DATTACH_EVENTS (and oslens.h) each batch also records an event (id 7, the batch's number) right
 * after its start and counts it on the counter "batches": started outside `oslens record`, those
 * instruments are dormant until an attach.
 * usage: attach_target THREADS BATCHES LOG */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef ATTACH_EVENTS
#include <oslens.h>
#endif

#define GETPIDS 50
#define EXTRA 1000

static long batches;
static volatile sig_atomic_t spawn;
static int finished;
#ifdef ATTACH_EVENTS
static osl_counter_t *counted;
#endif

struct worker {
    pthread_t th;
    pid_t tid;
    long long *t0, *t1;
};

static long long now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *work(void *arg) {
    struct worker *w = arg;
    w->tid = (pid_t)syscall(SYS_gettid);
    struct timespec ms = {0, 1000000};
    for (long b = 0; b < batches; b++) {
        w->t0[b] = now();
#ifdef ATTACH_EVENTS
        uint64_t v = (uint64_t)b;
        osl_event(7, &v, sizeof v);
        osl_count(counted, 1);
#endif
        for (int i = 0; i < GETPIDS; i++)
            syscall(SYS_getpid);
        w->t1[b] = now();
        if (b + 1 < batches) /* every sleep is between two logged batches */
            nanosleep(&ms, NULL);
    }
    __atomic_add_fetch(&finished, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void *extra(void *arg) {
    *(pid_t *)arg = (pid_t)syscall(SYS_gettid);
    for (int i = 0; i < EXTRA; i++)
        syscall(SYS_getpid);
    return NULL;
}

static void on_usr1(int sig) {
    (void)sig;
    spawn = 1;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s THREADS BATCHES LOG\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[1]);
    batches = atol(argv[2]);
    signal(SIGUSR1, on_usr1);
#ifdef ATTACH_EVENTS
    counted = osl_counter("batches", NULL);
#endif
    struct worker *w = calloc(n, sizeof *w);
    for (int i = 0; i < n; i++) {
        w[i].t0 = calloc(batches, sizeof(long long));
        w[i].t1 = calloc(batches, sizeof(long long));
        pthread_create(&w[i].th, NULL, work, &w[i]);
    }
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    pid_t child = 0, thread_tid = 0;
    while (__atomic_load_n(&finished, __ATOMIC_ACQUIRE) < n) {
        usleep(2000);
        if (spawn && !child) {
            child = fork();
            if (child == 0) {
                for (int i = 0; i < EXTRA; i++)
                    syscall(SYS_getpid);
                _exit(0);
            }
            pthread_t th;
            pthread_create(&th, NULL, extra, &thread_tid);
            pthread_join(th, NULL);
            waitpid(child, NULL, 0);
        }
    }
    for (int i = 0; i < n; i++)
        pthread_join(w[i].th, NULL);
    FILE *log = fopen(argv[3], "w");
    for (int i = 0; i < n; i++) {
        for (long b = 0; b < batches; b++)
            fprintf(log, "batch %d %lld %lld\n", w[i].tid, w[i].t0[b], w[i].t1[b]);
        for (long b = 0; b + 1 < batches; b++)
            fprintf(log, "sleep %d %lld %lld\n", w[i].tid, w[i].t1[b], w[i].t0[b + 1]);
    }
    if (child)
        fprintf(log, "child %d\nthread %d\n", (int)child, (int)thread_tid);
    fclose(log);
    printf("done %d threads x %ld batches of %d getpid\n", n, batches, GETPIDS);
    return 0;
}
