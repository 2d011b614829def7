/* A program that exhausts its own address space, then records (tests/test_faults.py): run under
 * an address-space limit (prlimit --as=...). Two threads, both started before the memory runs
 * out, each record EVENTS events (osl_event 1, payload = index) while not one more byte can be
 * mapped or allocated, then the program gives its hoard back and prints the threads' sums, which
 * must be intact whatever the recorder could or could not do. With EARLY 1 the main thread
 * records one event (osl_event 2) before, so it has its buffer when the memory runs out.
 * With LATE 1 the second thread is created only after the memory ran out (on the stack of a
 * thread that ran and was joined before, which glibc keeps cached): its first instruction runs
 * with no memory left, so nothing it does at its start (the preload's, the recorder's) may need
 * any. All threads share one malloc arena, so the exhausted one is the one every thread sees.
 * Usage: fault_nomem EVENTS [EARLY [LATE]] */
#include <oslens.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <malloc.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>

static long events;
static pthread_barrier_t go;

struct block { struct block *next; uint32_t pages; uint32_t mapped; }; /* 16 bytes */
static struct block *hoard;
static size_t hoarded;

/* Each event under the thread's own lock: under the preload, a lock first taken once memory
 * is exhausted must not make the preload's own bookkeeping abort the program. */
static uint64_t work(uint64_t sum) {
    pthread_mutex_t own = PTHREAD_MUTEX_INITIALIZER;
    for (long i = 0; i < events; i++) {
        uint64_t v = (uint64_t)i;
        pthread_mutex_lock(&own);
        osl_event(1, &v, sizeof v);
        sum = sum * 31 + v;
        pthread_mutex_unlock(&own);
    }
    return sum;
}

static pthread_barrier_t started;

static int late;

static void *idle(void *arg) {
    return arg;
}

static void *worker(void *arg) {
    if (late)
        return (void *)(uintptr_t)work((uint64_t)(uintptr_t)arg);
    pthread_barrier_wait(&started); /* running (under the preload, its start recorded) before the memory runs out */
    pthread_barrier_wait(&go);
    return (void *)(uintptr_t)work((uint64_t)(uintptr_t)arg);
}

static void keep(void *p, size_t len, int mapped) {
    struct block *b = p;
    b->next = hoard;
    b->pages = (uint32_t)(len / 4096);
    b->mapped = mapped;
    hoard = b;
    hoarded += len;
}

/* Maps until not even a page fits, then takes malloc's last free bytes too. */
static void exhaust(void) {
    for (size_t len = (size_t)1 << 30; len >= 4096;) {
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            len /= 2;
        else
            keep(p, len, 1);
    }
    for (size_t len = 4096; len >= sizeof(struct block);) {
        void *p = malloc(len);
        if (!p)
            len /= 2;
        else
            keep(p, len, 0);
    }
}

static void give_back(void) {
    while (hoard) {
        struct block *b = hoard;
        hoard = b->next;
        if (b->mapped)
            munmap(b, (size_t)b->pages * 4096);
        else
            free(b);
    }
}

int main(int argc, char **argv) {
    events = argc > 1 ? atol(argv[1]) : 100000;
    int early = argc > 2 && atoi(argv[2]);
    late = argc > 3 && atoi(argv[3]);
    struct rlimit as;
    if (getrlimit(RLIMIT_AS, &as) != 0 || as.rlim_cur == RLIM_INFINITY) {
        fprintf(stderr, "fault_nomem: run it under an address-space limit (prlimit --as=...)\n");
        return 2;
    }
    pthread_t t;
    pthread_barrier_init(&go, NULL, 2);
    pthread_barrier_init(&started, NULL, 2);
    if (late) {
        /* one arena for every thread, and a stack left in glibc's cache for the late thread */
        mallopt(M_ARENA_MAX, 1);
        if (pthread_create(&t, NULL, idle, NULL) != 0 || pthread_join(t, NULL) != 0)
            return 3;
    } else {
        if (pthread_create(&t, NULL, worker, (void *)(uintptr_t)2) != 0)
            return 3;
        pthread_barrier_wait(&started);
    }
    if (early)
        osl_event(2, NULL, 0);
    exhaust();
    void *probe = malloc(16);
    int exhausted = probe == NULL;
    free(probe);
    if (late) {
        int r = pthread_create(&t, NULL, worker, (void *)(uintptr_t)2);
        if (r != 0) {
            give_back();
            fprintf(stderr, "fault_nomem: no thread could start once the memory ran out (%d)\n", r);
            return 4;
        }
    } else {
        pthread_barrier_wait(&go);
    }
    uint64_t mine = work(1);
    void *theirs;
    pthread_join(t, &theirs);
    give_back();
    printf("address space exhausted: %s\n", exhausted ? "yes" : "no");
    printf("thread 0 sum %llu\nthread 1 sum %llu\n", (unsigned long long)mine, (unsigned long long)(uintptr_t)theirs);
    return 0;
}
