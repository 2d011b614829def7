/* bench/attach's target: THREADS threads sleeping in a loop (attach time grows with threads), and
 * WORKERS threads making getpid calls in batches of 1,000, each batch's end time kept in memory
 * and written to LOG at exit (the cost of a tracer is read from the batch rate in its window).
 * SIGTERM ends it before SECONDS. usage: spin THREADS WORKERS SECONDS LOG */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long long end_ns;
static volatile sig_atomic_t stop; /* SIGTERM ends the run early, the log still written */

static void on_term(int sig) {
    (void)sig;
    stop = 1;
}
static long long now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

struct worker {
    pthread_t th;
    long n;
    long long *ends;
};

#define MAX_BATCHES (1 << 22)

static void *spin(void *arg) {
    struct worker *w = arg;
    while (w->n < MAX_BATCHES) {
        for (int i = 0; i < 1000; i++)
            syscall(SYS_getpid);
        long long t = now();
        w->ends[w->n++] = t;
        if (t > end_ns || stop)
            break;
    }
    return NULL;
}

static void *sleeper(void *arg) {
    (void)arg;
    struct timespec s = {0, 50000000};
    while (now() < end_ns && !stop)
        nanosleep(&s, NULL);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s THREADS WORKERS SECONDS LOG\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[1]), nw = atoi(argv[2]);
    end_ns = now() + (long long)(atof(argv[3]) * 1e9);
    signal(SIGTERM, on_term);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 64 << 10);
    pthread_t *th = calloc(n, sizeof *th);
    for (int i = 0; i < n; i++)
        pthread_create(&th[i], &a, sleeper, NULL);
    struct worker *w = calloc(nw, sizeof *w);
    for (int i = 0; i < nw; i++) {
        w[i].ends = malloc(sizeof(long long) * MAX_BATCHES);
        pthread_create(&w[i].th, NULL, spin, &w[i]);
    }
    printf("ready\n");
    fflush(stdout);
    for (int i = 0; i < nw; i++)
        pthread_join(w[i].th, NULL);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    FILE *log = fopen(argv[4], "w");
    for (int i = 0; i < nw; i++)
        for (long b = 0; b < w[i].n; b++)
            fprintf(log, "%d %lld\n", i, w[i].ends[b]);
    fclose(log);
    return 0;
}
