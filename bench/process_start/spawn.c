/* bench/process_start driver: what starting processes and threads costs.
 *   spawn fork N      N times fork + execv("/bin/true") + waitpid
 *   spawn thread N    N pthread_create + pthread_join of a thread that records nothing
 *   spawn thread1 N   the same, each thread recording one event (osl_event)
 * Prints "ELAPSED <s> CPU <s>" of the loop on stderr (the program's own timing, so the tool's
 * start-up and shutdown are not in it; CPU: this process and its children), and for threads
 * "PAIR_MEDIAN <s>": the median create + join pair, which the other sessions' load on a shared
 * host moves far less than the loop's total (a pair preempted by them is one of N). */
#include <oslens.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* CPU seconds of this process and its waited-for children (the tools' own processes are not
 * in it): steadier than wall time on a loaded host. */
static double cpu(void) {
    struct rusage s, c;
    getrusage(RUSAGE_SELF, &s);
    getrusage(RUSAGE_CHILDREN, &c);
    return s.ru_utime.tv_sec + s.ru_stime.tv_sec + c.ru_utime.tv_sec + c.ru_stime.tv_sec +
           (s.ru_utime.tv_usec + s.ru_stime.tv_usec + c.ru_utime.tv_usec + c.ru_stime.tv_usec) * 1e-6;
}

static void *nothing(void *arg) { return arg; }

static void *one_event(void *arg) {
    uint64_t v = 1;
    osl_event(1, &v, sizeof v);
    return arg;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: spawn fork|thread|thread1 N\n");
        return 2;
    }
    int n = atoi(argv[2]);
    double *pairs = NULL;
    double t0 = now(), c0 = cpu();
    if (!strcmp(argv[1], "fork")) {
        for (int i = 0; i < n; i++) {
            pid_t p = fork();
            if (p == 0) {
                char *args[] = {"true", NULL};
                execv("/bin/true", args);
                _exit(127);
            }
            int st;
            if (p < 0 || waitpid(p, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                fprintf(stderr, "child %d failed\n", i);
                return 1;
            }
        }
    } else {
        void *(*fn)(void *) = !strcmp(argv[1], "thread1") ? one_event : nothing;
        pairs = malloc(sizeof *pairs * n);
        for (int i = 0; i < n; i++) {
            pthread_t t;
            double p0 = now();
            if (pthread_create(&t, NULL, fn, NULL) != 0 || pthread_join(t, NULL) != 0) {
                fprintf(stderr, "thread %d failed\n", i);
                return 1;
            }
            pairs[i] = now() - p0;
        }
    }
    double wall = now() - t0;
    fprintf(stderr, "ELAPSED %.6f CPU %.6f\n", wall, cpu() - c0);
    if (pairs) {
        qsort(pairs, n, sizeof *pairs, by_value);
        fprintf(stderr, "PAIR_MEDIAN %.9f\n", pairs[n / 2]);
    }
    return 0;
}
