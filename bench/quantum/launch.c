/* launch: run a program pinned to one CPU with a scheduling class and EEVDF slice.
 *   launch CPU CLASS SLICE_US PROGRAM [ARGS...]
 * CLASS: other | batch; SLICE_US: 0 for the kernel's default slice, else the per-task slice
 * (sched_attr.sched_runtime, Linux >= 6.12, 100..100000 us). The settings are made with
 * sched_setaffinity and sched_setattr, then the program is exec'd (they survive exec). The
 * launched program gets SIGKILL when its parent dies (so a hog never outlives bench/quantum). */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

struct sched_attr_v1 {
    uint32_t size, sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime, sched_deadline, sched_period;
};

int main(int argc, char **argv) {
    if (argc < 5) { fprintf(stderr, "usage: launch CPU other|batch SLICE_US PROGRAM [ARGS...]\n"); return 2; }
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) { perror("launch: prctl"); return 1; }
    if (getppid() == 1) return 1; /* parent already gone */
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(atoi(argv[1]), &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) { perror("launch: sched_setaffinity"); return 1; }
    struct sched_attr_v1 attr;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    if (strcmp(argv[2], "other") == 0) attr.sched_policy = SCHED_OTHER;
    else if (strcmp(argv[2], "batch") == 0) attr.sched_policy = SCHED_BATCH;
    else { fprintf(stderr, "launch: class must be other or batch\n"); return 2; }
    attr.sched_runtime = strtoull(argv[3], NULL, 10) * 1000ULL;
    if (syscall(SYS_sched_setattr, 0, &attr, 0) != 0) { perror("launch: sched_setattr"); return 1; }
    execv(argv[4], argv + 4);
    fprintf(stderr, "launch: %s: %s\n", argv[4], strerror(errno));
    return 127;
}
