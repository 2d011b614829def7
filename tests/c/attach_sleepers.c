/* Many sleeping threads for `oslens record -p` (tests/test_attach_many.py): THREADS threads each
 * sleep 50 ms in a loop (a voluntary switch each time) until SIGTERM; "ready" on stdout once all
 * of them run, "done THREADS" at the end (nothing that depends on timing).
 * usage: attach_sleepers THREADS */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static int started;

static void on_term(int sig) {
    (void)sig;
    stop = 1;
}

static void *sleeper(void *arg) {
    (void)arg;
    __atomic_add_fetch(&started, 1, __ATOMIC_RELEASE);
    struct timespec s = {0, 50000000};
    while (!stop)
        nanosleep(&s, NULL);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s THREADS\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[1]);
    struct sigaction sa = {.sa_handler = on_term};
    sigaction(SIGTERM, &sa, NULL);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 64 << 10);
    pthread_t *th = calloc(n, sizeof *th);
    for (int i = 0; i < n; i++)
        pthread_create(&th[i], &a, sleeper, NULL);
    while (__atomic_load_n(&started, __ATOMIC_ACQUIRE) < n)
        usleep(1000);
    printf("ready\n");
    fflush(stdout);
    while (!stop)
        pause();
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    printf("done %d\n", n);
    return 0;
}
