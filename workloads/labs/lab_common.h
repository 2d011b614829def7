/* Shared by the lab programs of oslens (workloads/labs): joining the cgroup the control layer
 * made for the run, and reading the program's own fault counters. See docs/labs.md. */
#ifndef OSLENS_LAB_COMMON_H
#define OSLENS_LAB_COMMON_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* Join DIR (a cgroup directory) ourselves, so the recorder that started us stays outside the
 * cap and its buffers are not charged to it (oslens issue 20). */
static inline int lab_join_cgroup(const char *dir) {
    /* die with whoever started us (oslens record under oslens lab run): a SIGKILLed lab must
     * not leave a program behind in its cgroup */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1) { fprintf(stderr, "lab: the process that started us is gone\n"); return -1; }
    if (!dir || !*dir) return 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    int fd = open(path, O_WRONLY);
    if (fd < 0) { fprintf(stderr, "lab: cannot open %s: %s\n", path, strerror(errno)); return -1; }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%d", (int)getpid());
    int ok = write(fd, pid, (size_t)n) == n;
    int err = errno;
    close(fd);
    if (!ok) { fprintf(stderr, "lab: cannot join %s: %s\n", dir, strerror(err)); return -1; }
    return 0;
}

static inline long long lab_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

struct lab_faults { long long minflt, majflt; };

static inline struct lab_faults lab_faults_now(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    struct lab_faults f = { ru.ru_minflt, ru.ru_majflt };
    return f;
}

#endif
