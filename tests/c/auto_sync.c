/* auto_sync.c: an ordinary pthread program with no oslens calls, for the preload tests.
 *
 *   auto_sync THREADS ITERS BARRIERS   each thread takes a shared mutex ITERS times (plus one
 *                                      trylock of its own mutex), waits at a barrier BARRIERS
 *                                      times, posts and waits a semaphore once;
 *   auto_sync fork                     forks a child that takes a mutex once, then waits for it;
 *   auto_sync cond N                   a producer hands N items to a consumer through a
 *                                      condition variable (N signals; waits depend on timing).
 *
 * Prints the expected record counts as one JSON line. */
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static pthread_mutex_t shared = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t barrier;
static sem_t sem;
static int iters, barriers;
static long total;

static void *worker(void *arg) {
    pthread_mutex_t own = PTHREAD_MUTEX_INITIALIZER;
    (void)arg;
    for (int i = 0; i < iters; i++) {
        pthread_mutex_lock(&shared);
        total += i;
        pthread_mutex_unlock(&shared);
    }
    if (pthread_mutex_trylock(&own) == 0)
        pthread_mutex_unlock(&own);
    for (int b = 0; b < barriers; b++)
        pthread_barrier_wait(&barrier);
    sem_post(&sem);
    sem_wait(&sem);
    return NULL;
}

static pthread_cond_t ready = PTHREAD_COND_INITIALIZER;
static int items, consumed;

static void *consumer(void *arg) {
    long n = (long)arg;
    pthread_mutex_lock(&shared);
    while (consumed < n) {
        while (items == 0)
            pthread_cond_wait(&ready, &shared);
        items--;
        consumed++;
    }
    pthread_mutex_unlock(&shared);
    return NULL;
}

static int mode_cond(long n) {
    pthread_t c;
    pthread_create(&c, NULL, consumer, (void *)n);
    for (long i = 0; i < n; i++) {
        pthread_mutex_lock(&shared);
        items++;
        pthread_cond_signal(&ready);
        pthread_mutex_unlock(&shared);
        usleep(50); /* let the consumer catch up and wait again */
    }
    pthread_join(c, NULL);
    printf("{\"cond_signal\": %ld, \"consumed\": %d}\n", n, consumed);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "cond") == 0)
        return mode_cond(atol(argv[2]));
    if (argc > 1 && strcmp(argv[1], "fork") == 0) {
        pid_t pid = fork();
        if (pid == 0) {
            pthread_mutex_lock(&shared);
            pthread_mutex_unlock(&shared);
            exit(0);
        }
        int status;
        waitpid(pid, &status, 0);
        printf("{\"child\": %d}\n", (int)pid);
        return 0;
    }
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    iters = argc > 2 ? atoi(argv[2]) : 100;
    barriers = argc > 3 ? atoi(argv[3]) : 5;
    pthread_t tids[64];
    if (threads > 64)
        threads = 64;
    pthread_barrier_init(&barrier, NULL, threads);
    sem_init(&sem, 0, 0);
    for (int t = 0; t < threads; t++)
        pthread_create(&tids[t], NULL, worker, NULL);
    for (int t = 0; t < threads; t++)
        pthread_join(tids[t], NULL);
    printf("{\"lock_acquire\": %d, \"barrier_exit\": %d, \"barrier_episodes\": %d, \"sem_post\": %d, "
           "\"thread_create\": %d, \"total\": %ld}\n",
           threads * (iters + 1), threads * barriers, barriers, threads, threads, total);
    return 0;
}
