/* Labs 7, 9 and 10 (scheduler weights, CPU throttling, the quantum): spins on the CPU from
 * --start-ns to --end-ns (CLOCK_MONOTONIC, absolute, so two spinners compete over exactly the same
 * window) and reports, as one JSON line, the CPU time it got in that window (getrusage), its nice
 * value, its context switches in the window (getrusage; and the kernel's own
 * nr_involuntary_switches of /proc/self/sched over the whole run) and the round-robin quantum the
 * kernel gives it (sched_rr_get_interval: meaningful under SCHED_RR) and the fair-class slice it
 * keeps (se.slice of /proc/self/sched: the EEVDF per-task slice, lab 10's eevdf variant). */
#define _GNU_SOURCE
#include "lab_common.h"

#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* one integer field of /proc/self/sched (nr_involuntary_switches, se.slice), or -1 */
static long long sched_field(const char *name) {
    FILE *f = fopen("/proc/self/sched", "r");
    if (!f) return -1;
    char line[256];
    long long out = -1;
    size_t n = strlen(name);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, name, n) && (line[n] == ' ' || line[n] == ':')) {
            char *colon = strchr(line, ':');
            if (colon) out = atoll(colon + 1);
        }
    fclose(f);
    return out;
}

int main(int argc, char **argv) {
    long long start = 0, end = 0;
    const char *share = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--start-ns")) start = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--end-ns")) end = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--share")) share = argv[i + 1];
        else { fprintf(stderr, "usage: spin --start-ns T0 --end-ns T1 [--share FILE]\n"); return 2; }
    }
    /* --share FILE: spinners that map the same file note which of them ran last, so each counts
     * the times it got the CPU after another spinner had it (handovers), not after any task */
    volatile int *last = NULL;
    if (share) {
        int fd = open(share, O_RDWR | O_CREAT, 0600);
        if (fd < 0 || ftruncate(fd, 4096) != 0) { fprintf(stderr, "spin: %s: %s\n", share, strerror(errno)); return 1; }
        last = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (last == MAP_FAILED) { fprintf(stderr, "spin: mmap %s: %s\n", share, strerror(errno)); return 1; }
        close(fd);
        /* fault the page in writable before the window: two spinners first touching it at the
         * window's start could wait on its lock, a voluntary switch that would count a handover */
        __atomic_fetch_add(last, 0, __ATOMIC_RELAXED);
    }
    int me = (int)getpid();
    long handovers = 0;
    if (end <= start) { fprintf(stderr, "usage: spin --start-ns T0 --end-ns T1\n"); return 2; }
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    struct timespec ts = { start / 1000000000LL, start % 1000000000LL };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {}
    struct rusage r0;
    getrusage(RUSAGE_SELF, &r0);
    double c0 = cpu_s();
    volatile unsigned long x = 0;
    while (lab_now_ns() < end) {
        for (int k = 0; k < 1000; k++) x++;
        if (last && *last != me) {
            /* not once the window is over: the other spinner may have left its loop and exited
             * (a switch its window's getrusage does not see), handing this one the CPU */
            if (*last && lab_now_ns() < end) handovers++;
            *last = me;
        }
    }
    double c1 = cpu_s();
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, 0);
    struct timespec rr = {0, 0};
    sched_rr_get_interval(0, &rr);
    printf("{\"pid\":%d,\"nice\":%d,\"policy\":%d,\"cpu_s\":%.6f,\"wall_s\":%.3f,\"nvcsw\":%ld,\"nivcsw\":%ld,"
           "\"handovers\":%ld,\"slice_ns\":%lld,\"window_nvcsw\":%ld,\"window_nivcsw\":%ld,\"sched_nivcsw\":%lld,\"rr_interval_ns\":%lld}\n",
           (int)getpid(), nice, sched_getscheduler(0), c1 - c0, (end - start) / 1e9, ru.ru_nvcsw, ru.ru_nivcsw,
           handovers, sched_field("se.slice"), ru.ru_nvcsw - r0.ru_nvcsw, ru.ru_nivcsw - r0.ru_nivcsw, sched_field("nr_involuntary_switches"),
           (long long)rr.tv_sec * 1000000000LL + rr.tv_nsec);
    return 0;
}
