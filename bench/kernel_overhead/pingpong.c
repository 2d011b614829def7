/* pingpong N CPU: N pipe round trips between two processes pinned to CPU; prints ELAPSED s. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 200000;
    if (argc > 2) {
        cpu_set_t s;
        CPU_ZERO(&s);
        CPU_SET(atoi(argv[2]), &s);
        sched_setaffinity(0, sizeof s, &s);
    }
    double t0 = now();
    int a[2], b[2];
    if (pipe(a) || pipe(b)) return 1;
    char c = 'x';
    pid_t p = fork();
    if (p == 0) {
        for (long i = 0; i < n; i++)
            if (read(a[0], &c, 1) != 1 || write(b[1], &c, 1) != 1) _exit(2);
        _exit(0);
    }
    for (long i = 0; i < n; i++)
        if (write(a[1], &c, 1) != 1 || read(b[0], &c, 1) != 1) return 4;
    int st;
    waitpid(p, &st, 0);
    fprintf(stderr, "ELAPSED %.6f\n", now() - t0);
    return WEXITSTATUS(st);
}
