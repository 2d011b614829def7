/* Lab 3 (a cap without swap): allocates anonymous memory and touches it a MiB at a time,
 * printing how far it got, until it has touched --mb MiB or the kernel kills it.
 *
 *   alloc_touch --mb N [--cgroup DIR]
 *
 * Each line "touched K" is flushed at once, so the last one printed says how much memory the
 * program held when the OOM killer took it. */
#define _GNU_SOURCE
#include "lab_common.h"

#include <sys/mman.h>

int main(int argc, char **argv) {
    long mb = 0;
    const char *cgroup = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--mb")) mb = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--cgroup")) cgroup = argv[i + 1];
        else { fprintf(stderr, "usage: alloc_touch --mb N [--cgroup DIR]\n"); return 2; }
    }
    if (mb <= 0) { fprintf(stderr, "usage: alloc_touch --mb N [--cgroup DIR]\n"); return 2; }
    if (lab_join_cgroup(cgroup) != 0) return 1;
    size_t bytes = (size_t)mb << 20;
    char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 1; }
    madvise(p, bytes, MADV_NOHUGEPAGE); /* 4 KiB pages: the cap is reached a page at a time */
    long page = sysconf(_SC_PAGESIZE);
    for (long m = 0; m < mb; m++) {
        for (size_t off = 0; off < (1u << 20); off += (size_t)page) p[((size_t)m << 20) + off] = 1;
        printf("touched %ld\n", m + 1);
        fflush(stdout);
    }
    struct lab_faults f = lab_faults_now();
    printf("{\"mb\":%ld,\"minflt\":%lld,\"majflt\":%lld}\n", mb, f.minflt, f.majflt);
    return 0;
}
