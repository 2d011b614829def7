/* phases: a program with a known phase script, the ground truth of `oslens phases`.
 *
 *   phases [--script KIND:MS,KIND:MS,...] [--dir DIR] [--threads N]
 *
 * Runs each phase of the script for MS milliseconds of wall time, in order:
 *   compute  floating-point loop on one thread (compute_kernel)
 *   io       4 KiB write + fdatasync to DIR/phases.dat, over and over (blocked on the disk)
 *   faults   map 32 MiB of anonymous memory, touch every page, unmap (a page-fault storm)
 *   sync     N threads take one mutex, ~20 us of work inside (lock contention; long enough that
 *            the acquisitions, which the recorder logs, stay ~10^4/s, not a million that fill its buffer)
 *   sleep    1 ms nanosleep, over and over
 * Default script: compute:500,io:550,compute:500 (the I/O phase is ~35% of the wall time).
 * Each phase is also an oslens region named after its kind, and its begin and end are printed
 * on stderr as CLOCK_MONOTONIC nanoseconds, one line per phase:
 *   phase KIND BEGIN_NS END_NS
 * so a test can compare phase boundaries found in a trace with the truth. A region `start`
 * before the first phase starts the recorder (under `oslens record`) outside the script. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <oslens.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static volatile double sink;

__attribute__((noinline)) static double compute_kernel(double x, int n) {
    for (int i = 0; i < n; i++)
        x = x * 1.0000001 + sin(x) * 1e-9;
    return x;
}

static void run_compute(long long deadline) {
    double x = 1.0;
    while (now_ns() < deadline)
        x = compute_kernel(x, 20000);
    sink = x;
}

__attribute__((noinline)) static void io_write_block(int fd, const char *block) {
    if (write(fd, block, 4096) != 4096 || fdatasync(fd) != 0) {
        perror("phases: write");
        exit(1);
    }
}

static void run_io(long long deadline, const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/phases.dat", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        fprintf(stderr, "phases: cannot open %s: %s\n", path, strerror(errno));
        exit(1);
    }
    static char block[4096];
    memset(block, 'x', sizeof block);
    while (now_ns() < deadline)
        io_write_block(fd, block);
    close(fd);
    unlink(path);
}

__attribute__((noinline)) static void fault_storm(size_t bytes) {
    char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("phases: mmap");
        exit(1);
    }
    for (size_t off = 0; off < bytes; off += 4096)
        p[off] = 1;
    munmap(p, bytes);
}

static void run_faults(long long deadline) {
    while (now_ns() < deadline)
        fault_storm(32u << 20);
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long long sync_deadline;
static volatile long shared_counter;

__attribute__((noinline)) static void *lock_contend(void *arg) {
    (void)arg;
    while (now_ns() < sync_deadline) {
        pthread_mutex_lock(&lock);
        for (int i = 0; i < 20000; i++)
            shared_counter++;
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

static void run_sync(long long deadline, int threads) {
    sync_deadline = deadline;
    pthread_t t[64];
    if (threads > 64)
        threads = 64;
    for (int i = 1; i < threads; i++)
        pthread_create(&t[i], NULL, lock_contend, NULL);
    lock_contend(NULL);
    for (int i = 1; i < threads; i++)
        pthread_join(t[i], NULL);
}

static void run_sleep(long long deadline) {
    struct timespec ms = {0, 1000000};
    while (now_ns() < deadline)
        nanosleep(&ms, NULL);
}

static void usage(void) {
    fprintf(stderr, "usage: phases [--script KIND:MS,...] [--dir DIR] [--threads N]\n"
                    "  KIND: compute, io, faults, sync, sleep; MS: milliseconds of wall time (> 0)\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *script = "compute:500,io:550,compute:500";
    const char *dir = ".";
    int threads = 4;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--script") && i + 1 < argc)
            script = argv[++i];
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else
            usage();
    }
    if (threads < 1)
        usage();
    /* Under `oslens record` the recorder starts on the first event and writes its files then
     * (tens of ms of I/O on a busy disk): let that happen before the script's first phase. */
    osl_region_begin("start");
    osl_region_end("start");
    char *copy = strdup(script);
    for (char *save = NULL, *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(item, ':');
        if (!colon)
            usage();
        *colon = 0;
        char *end;
        long ms = strtol(colon + 1, &end, 10);
        if (*end || ms <= 0)
            usage();
        const char *kind = item;
        if (strcmp(kind, "compute") && strcmp(kind, "io") && strcmp(kind, "faults") && strcmp(kind, "sync") &&
            strcmp(kind, "sleep"))
            usage();
        long long begin = now_ns(), deadline = begin + ms * 1000000LL;
        osl_region_begin(kind);
        if (!strcmp(kind, "compute"))
            run_compute(deadline);
        else if (!strcmp(kind, "io"))
            run_io(deadline, dir);
        else if (!strcmp(kind, "faults"))
            run_faults(deadline);
        else if (!strcmp(kind, "sync"))
            run_sync(deadline, threads);
        else
            run_sleep(deadline);
        osl_region_end(kind);
        fprintf(stderr, "phase %s %lld %lld\n", kind, begin, now_ns());
    }
    free(copy);
    return 0;
}
