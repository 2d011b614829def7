/* rotate_count LOG THREADS EVENTS: THREADS threads (the main one among them) each write EVENTS
 * events "seq" whose payload is the event's number, as fast as they can, so a small rotating
 * buffer (OSLENS_ON_FULL=rotate) opens a new chunk every few milliseconds while the threads
 * outnumber the CPUs. Writes LOG: one line "TID COUNT" per thread, the events it wrote. For
 * tests/test_flight_rotate.py. */
#define _GNU_SOURCE
#include <oslens.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_THREADS 16

static long events;
static struct { pid_t tid; long count; } done[MAX_THREADS];

static void *writer(void *arg) {
    long k = (long)arg;
    uint64_t i;
    for (i = 0; i < (uint64_t)events; i++) osl_event(1, &i, sizeof i);
    done[k].tid = gettid();
    done[k].count = (long)i;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    int threads = atoi(argv[2]);
    events = atol(argv[3]);
    if (threads < 1 || threads > MAX_THREADS || events <= 0) return 2;
    osl_event_name(1, "seq");
    pthread_t t[MAX_THREADS];
    for (long k = 1; k < threads; k++)
        if (pthread_create(&t[k], NULL, writer, (void *)k) != 0) return 1;
    writer((void *)0);
    for (long k = 1; k < threads; k++) pthread_join(t[k], NULL);
    FILE *log = fopen(argv[1], "w");
    if (!log) return 1;
    for (int k = 0; k < threads; k++) fprintf(log, "%d %ld\n", done[k].tid, done[k].count);
    return fclose(log) != 0;
}
