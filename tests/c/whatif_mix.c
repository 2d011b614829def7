/* whatif's validation workload: two CPU-bound threads, a sleeper that computes a little after
 * each sleep, and a producer/consumer pair over a pipe (wake-up dependencies).
 * Usage: mix [SCALE]  (SCALE multiplies the work; default 1 = about 0.3 s of CPU per spinner). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double scale = 1.0;
static int fds[2];

static volatile unsigned long sink;

static void spin(long iters) {
    unsigned long x = 1;
    for (long i = 0; i < iters; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
    sink += x;
}

static void *cpu_bound(void *arg) {
    (void)arg;
    spin((long)(300e6 * scale));
    return NULL;
}

static void *sleeper(void *arg) {
    (void)arg;
    struct timespec ts = {0, 5 * 1000 * 1000};
    for (int i = 0; i < (int)(40 * scale); i++) {
        nanosleep(&ts, NULL);
        spin(1000000);
    }
    return NULL;
}

static void *producer(void *arg) {
    (void)arg;
    char c = 'x';
    for (int i = 0; i < (int)(50 * scale); i++) {
        spin(2000000);
        if (write(fds[1], &c, 1) != 1) break;
    }
    close(fds[1]);
    return NULL;
}

static void *consumer(void *arg) {
    (void)arg;
    char c;
    while (read(fds[0], &c, 1) == 1) spin(500000);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) scale = atof(argv[1]);
    if (pipe(fds) != 0) return 1;
    pthread_t t[5];
    void *(*fn[5])(void *) = {cpu_bound, cpu_bound, sleeper, producer, consumer};
    for (int i = 0; i < 5; i++) pthread_create(&t[i], NULL, fn[i], NULL);
    for (int i = 0; i < 5; i++) pthread_join(t[i], NULL);
    printf("%lu\n", sink & 1);
    return 0;
}
