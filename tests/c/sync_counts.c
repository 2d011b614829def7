/* Lock acquisitions with a known number each, for tests/test_sync_counts.py.
 *   sync_counts plain       every lock uncontended, counts distinct per object, then one
 *                           acquisition that is contended for certain (the main thread holds the
 *                           lock until the other thread sleeps in it); prints the counts as JSON
 *   sync_counts kill N how  N uncontended acquisitions, then "ready" on stdout and waits to be
 *                           killed: how = block (in sem_wait, a wrapped wait), sleep (nanosleep),
 *                           or lock (block, and another thread asleep in a contended lock)
 *   sync_counts many N K    N heap mutexes, each taken K times in a row, and the static `a` once
 *                           after each: more objects than a thread's count table holds */
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

static pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER, b = PTHREAD_MUTEX_INITIALIZER,
                       c = PTHREAD_MUTEX_INITIALIZER, d = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static sem_t started;
static volatile pid_t waiter_tid;

static void *waiter(void *arg) {
    (void)arg;
    waiter_tid = (pid_t)syscall(SYS_gettid);
    sem_post(&started);
    pthread_mutex_lock(&c); /* the main thread holds c: contended */
    pthread_mutex_unlock(&c);
    return NULL;
}

/* Whether thread `tid` sleeps (state S: blocked in the lock's futex). */
static int sleeping(pid_t tid) {
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && p[2] == 'S';
}

static void plain(void) {
    for (int i = 0; i < 5000; i++) { pthread_mutex_lock(&a); pthread_mutex_unlock(&a); }
    for (int i = 0; i < 7; i++) { if (pthread_mutex_trylock(&b) == 0) pthread_mutex_unlock(&b); }
    for (int i = 0; i < 11; i++) { pthread_rwlock_rdlock(&rw); pthread_rwlock_unlock(&rw); }
    for (int i = 0; i < 13; i++) { pthread_rwlock_wrlock(&rw); pthread_rwlock_unlock(&rw); }
    struct timespec far;
    clock_gettime(CLOCK_REALTIME, &far);
    far.tv_sec += 60;
    for (int i = 0; i < 5; i++) { pthread_mutex_timedlock(&d, &far); pthread_mutex_unlock(&d); }
    sem_init(&started, 0, 0);
    pthread_mutex_lock(&c);
    pthread_t t;
    pthread_create(&t, NULL, waiter, NULL);
    sem_wait(&started);
    while (!sleeping(waiter_tid)) usleep(1000);
    usleep(20000);
    pthread_mutex_unlock(&c);
    pthread_join(t, NULL);
    printf("{\"a\": 5000, \"b\": 7, \"rw\": 24, \"d\": 5, \"c\": 2, \"c_contended\": 1}\n");
}

static void *stuck(void *arg) {
    (void)arg;
    waiter_tid = (pid_t)syscall(SYS_gettid);
    pthread_mutex_lock(&c); /* held by the main thread until the kill */
    return NULL;
}

static void kill_me(long n, const char *how) {
    sem_t never;
    sem_init(&never, 0, 0);
    for (long i = 0; i < n; i++) { pthread_mutex_lock(&a); pthread_mutex_unlock(&a); }
    if (strcmp(how, "lock") == 0) {
        pthread_t t;
        pthread_mutex_lock(&c);
        pthread_create(&t, NULL, stuck, NULL);
        while (!waiter_tid || !sleeping(waiter_tid)) usleep(1000);
        how = "block";
    }
    printf("ready\n");
    fflush(stdout);
    if (strcmp(how, "block") == 0) sem_wait(&never);
    for (;;) sleep(1);
}

static void many(long n, long k) {
    pthread_mutex_t *m = calloc(n, sizeof *m);
    for (long i = 0; i < n; i++) pthread_mutex_init(&m[i], NULL);
    for (long i = 0; i < n; i++) {
        for (long j = 0; j < k; j++) { pthread_mutex_lock(&m[i]); pthread_mutex_unlock(&m[i]); }
        pthread_mutex_lock(&a);
        pthread_mutex_unlock(&a);
    }
    printf("{\"objects\": %ld, \"each\": %ld, \"a\": %ld}\n", n, k, n);
    free(m);
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "plain") == 0) plain();
    else if (argc >= 4 && strcmp(argv[1], "kill") == 0) kill_me(atol(argv[2]), argv[3]);
    else if (argc >= 4 && strcmp(argv[1], "many") == 0) many(atol(argv[2]), atol(argv[3]));
    else { fprintf(stderr, "usage: sync_counts plain | kill N block|sleep|lock | many N K\n"); return 2; }
    return 0;
}
