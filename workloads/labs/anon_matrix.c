/* Lab 1, zram variant (thrashing with swap): the matrix of floats in anonymous memory instead of
 * a file. It joins the capped cgroup FIRST (anonymous pages are charged where they are first
 * touched), fills the matrix, then sums it row by row, then the first N columns, and prints one
 * JSON line: per phase its faults (getrusage), the machine's swap-ins and swap-outs
 * (/proc/vmstat pswpin / pswpout) and the phase's CLOCK_MONOTONIC bounds, so the trace's faults
 * can be counted per phase.
 *
 *   anon_matrix --rows R --cols C [--columns N] [--cgroup DIR]
 *
 * Anonymous pages over the cap have nowhere to go but swap: with swap on zram they are
 * compressed into memory outside the cap; without swap the kernel kills the program (lab 3). */
#define _GNU_SOURCE
#include "lab_common.h"

#include <stdint.h>
#include <sys/mman.h>

struct phase {
    const char *name;
    long long t0, t1, majflt, minflt, pswpin, pswpout;
};

static void vmstat(long long *in, long long *out) {
    *in = *out = -1;
    FILE *f = fopen("/proc/vmstat", "r");
    if (!f) return;
    char key[64];
    long long v;
    while (fscanf(f, "%63s %lld\n", key, &v) == 2) {
        if (!strcmp(key, "pswpin")) *in = v;
        else if (!strcmp(key, "pswpout")) *out = v;
    }
    fclose(f);
}

struct mark { long long t, in, out; struct lab_faults f; };

static struct mark mark_now(void) {
    struct mark m;
    vmstat(&m.in, &m.out);
    m.f = lab_faults_now();
    m.t = lab_now_ns();
    return m;
}

static struct phase between(const char *name, struct mark a, struct mark b) {
    struct phase p = { name, a.t, b.t, b.f.majflt - a.f.majflt, b.f.minflt - a.f.minflt, b.in - a.in, b.out - a.out };
    return p;
}

static void usage(void) {
    fprintf(stderr, "usage: anon_matrix --rows R --cols C [--columns N] [--cgroup DIR]\n");
    exit(2);
}

int main(int argc, char **argv) {
    long rows = 0, cols = 0, columns = -1;
    const char *cgroup = NULL;
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc) usage();
        if (!strcmp(argv[i], "--rows")) rows = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--cols")) cols = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--columns")) columns = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--cgroup")) cgroup = argv[i + 1];
        else usage();
    }
    if (rows <= 0 || cols <= 0) usage();
    if (columns < 0 || columns > cols) columns = cols;
    if (lab_join_cgroup(cgroup) != 0) return 1;

    size_t bytes = (size_t)rows * (size_t)cols * sizeof(float);
    float *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) { perror("anon_matrix: mmap"); return 1; }
    /* 4 KiB pages (a huge page would swap as one unit) and no swap read-ahead, as lab 1's MADV_RANDOM */
    if (madvise(m, bytes, MADV_NOHUGEPAGE) != 0 || madvise(m, bytes, MADV_RANDOM) != 0) {
        perror("anon_matrix: madvise");
        return 1;
    }
    long long *col_maj = calloc((size_t)(columns ? columns : 1), sizeof(long long));
    if (!col_maj) { perror("anon_matrix: calloc"); return 1; }

    struct mark m0 = mark_now();
    for (long k = 0; k < rows * cols; k++) m[k] = (float)(k % 1000) * 0.001f;
    struct mark m1 = mark_now();
    double sum = 0;
    for (long i = 0; i < rows; i++)
        for (long j = 0; j < cols; j++) sum += m[i * cols + j];
    struct mark m2 = mark_now();
    struct lab_faults prev = m2.f;
    for (long j = 0; j < columns; j++) {
        for (long i = 0; i < rows; i++) sum += m[i * cols + j];
        struct lab_faults now = lab_faults_now();
        col_maj[j] = now.majflt - prev.majflt;
        prev = now;
    }
    struct mark m3 = mark_now();

    struct phase ph[3] = { between("fill", m0, m1), between("row", m1, m2), between("col", m2, m3) };
    printf("{\"rows\":%ld,\"cols\":%ld,\"columns\":%ld,\"page\":%ld,\"base\":%llu,\"bytes\":%zu,\"sum\":%.3f,",
           rows, cols, columns, sysconf(_SC_PAGESIZE), (unsigned long long)(uintptr_t)m, bytes, sum);
    for (int k = 0; k < 3; k++)
        printf("\"%s\":{\"t0\":%lld,\"t1\":%lld,\"majflt\":%lld,\"minflt\":%lld,\"pswpin\":%lld,\"pswpout\":%lld},",
               ph[k].name, ph[k].t0, ph[k].t1, ph[k].majflt, ph[k].minflt, ph[k].pswpin, ph[k].pswpout);
    printf("\"per_column_majflt\":[");
    for (long j = 0; j < columns; j++) printf("%s%lld", j ? "," : "", col_maj[j]);
    printf("]}\n");
    return 0;
}
