/* kernel_sleeps N: the main thread and one more thread each sleep N times for 100 us (a fixed
 * number of voluntary switches, wakeups and system calls, whatever the machine's load), then
 * print "tids MAIN OTHER". */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long n;
static pid_t other;

static void sleeps(void) {
    struct timespec t = {0, 100000};
    for (long i = 0; i < n; i++)
        nanosleep(&t, NULL);
}

static void *run(void *arg) {
    (void)arg;
    other = gettid();
    sleeps();
    return NULL;
}

int main(int argc, char **argv) {
    n = argc > 1 ? atol(argv[1]) : 1000;
    pthread_t t;
    if (pthread_create(&t, NULL, run, NULL)) return 1;
    pthread_setname_np(t, "sleeper");
    sleeps();
    pthread_join(t, NULL);
    printf("tids %d %d\n", (int)gettid(), (int)other);
    return 0;
}
