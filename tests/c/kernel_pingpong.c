/* kernel_pingpong N [CPU]: N pipe round trips between a parent and a forked child, both pinned
 * to CPU when given. Prints "pids PARENT CHILD". */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    if (argc > 2) {
        cpu_set_t s;
        CPU_ZERO(&s);
        CPU_SET(atoi(argv[2]), &s);
        if (sched_setaffinity(0, sizeof s, &s)) perror("sched_setaffinity");
    }
    int a[2], b[2];
    if (pipe(a) || pipe(b)) return 1;
    char c = 'x';
    pid_t p = fork();
    if (p == 0) {
        for (long i = 0; i < n; i++) {
            if (read(a[0], &c, 1) != 1) _exit(2);
            if (write(b[1], &c, 1) != 1) _exit(3);
        }
        _exit(0);
    }
    printf("pids %d %d\n", (int)getpid(), (int)p);
    fflush(stdout);
    for (long i = 0; i < n; i++) {
        if (write(a[1], &c, 1) != 1) return 4;
        if (read(b[0], &c, 1) != 1) return 5;
    }
    int st;
    waitpid(p, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 6;
}
