/* getpid N: N getpid system calls; prints ELAPSED s. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 3000000;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long s = 0;
    for (long i = 0; i < n; i++) s += syscall(SYS_getpid);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    fprintf(stderr, "ELAPSED %.6f\n", (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9);
    return s == 0;
}
