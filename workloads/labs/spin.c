/* Lab 7 (scheduler weights): spins on the CPU from --start-ns to --end-ns (CLOCK_MONOTONIC,
 * absolute, so two spinners compete over exactly the same window) and reports the CPU time it
 * got in that window (getrusage) and its nice value, as one JSON line. */
#define _GNU_SOURCE
#include "lab_common.h"

#include <sys/resource.h>

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

int main(int argc, char **argv) {
    long long start = 0, end = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--start-ns")) start = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--end-ns")) end = atoll(argv[i + 1]);
        else { fprintf(stderr, "usage: spin --start-ns T0 --end-ns T1\n"); return 2; }
    }
    if (end <= start) { fprintf(stderr, "usage: spin --start-ns T0 --end-ns T1\n"); return 2; }
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    struct timespec ts = { start / 1000000000LL, start % 1000000000LL };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {}
    double c0 = cpu_s();
    volatile unsigned long x = 0;
    while (lab_now_ns() < end)
        for (int k = 0; k < 1000; k++) x++;
    double c1 = cpu_s();
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, 0);
    printf("{\"pid\":%d,\"nice\":%d,\"cpu_s\":%.6f,\"wall_s\":%.3f,\"nvcsw\":%ld,\"nivcsw\":%ld}\n",
           (int)getpid(), nice, c1 - c0, (end - start) / 1e9, ru.ru_nvcsw, ru.ru_nivcsw);
    return 0;
}
