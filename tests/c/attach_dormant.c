/* A program built with oslens.h for `oslens record -p` (tests/test_attach.py): THREADS threads
 * each record BATCHES events (osl_event, id 7, the batch number) 1 ms apart and note when each
 * was recorded; started outside `oslens record` its instruments are dormant until an attach.
 * At the end LOG gets "tid t" per event and stdout one line that does not depend on timing.
 * usage: attach_dormant THREADS BATCHES LOG */
#define _GNU_SOURCE
#include <oslens.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long batches;

struct worker {
    pthread_t th;
    pid_t tid;
    long long *t;
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
        uint64_t v = (uint64_t)b;
        w->t[b] = now();
        osl_event(7, &v, sizeof v);
        nanosleep(&ms, NULL);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s THREADS BATCHES LOG\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[1]);
    batches = atol(argv[2]);
    struct worker *w = calloc(n, sizeof *w);
    for (int i = 0; i < n; i++) {
        w[i].t = calloc(batches, sizeof(long long));
        pthread_create(&w[i].th, NULL, work, &w[i]);
    }
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    for (int i = 0; i < n; i++)
        pthread_join(w[i].th, NULL);
    FILE *log = fopen(argv[3], "w");
    for (int i = 0; i < n; i++)
        for (long b = 0; b < batches; b++)
            fprintf(log, "%d %lld\n", w[i].tid, w[i].t[b]);
    fclose(log);
    printf("done %d threads x %ld events\n", n, batches);
    return 0;
}
