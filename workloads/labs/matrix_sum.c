/* Lab 1 and 2 (thrashing, read-ahead): sums a file-backed MAP_SHARED matrix of floats row by
 * row or column by column, and prints what getrusage saw as one JSON line.
 *
 *   matrix_sum --file F --rows R --cols C --walk row|col [--columns N] [--advice random|normal]
 *              [--cgroup DIR]
 *
 * The file is (re)written when its size is wrong, then dropped from the page cache, so every
 * walk starts cold. The program joins DIR (the capped cgroup) only after that, so only the
 * walk itself is charged to the cap. A column walk visits the first N columns (default all). */
#define _GNU_SOURCE
#include "lab_common.h"

#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>

static void die(const char *what) {
    fprintf(stderr, "matrix_sum: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void usage(void) {
    fprintf(stderr, "usage: matrix_sum --file F --rows R --cols C --walk row|col [--columns N] "
                    "[--advice random|normal] [--cgroup DIR]\n");
    exit(2);
}

/* bytes the kernel read from storage for this process (read-ahead included) */
static long long read_bytes(void) {
    FILE *f = fopen("/proc/self/io", "r");
    if (!f) return -1;
    char key[64];
    long long v, out = -1;
    while (fscanf(f, "%63[^:]: %lld\n", key, &v) == 2)
        if (!strcmp(key, "read_bytes")) out = v;
    fclose(f);
    return out;
}

static void write_matrix(const char *path, long rows, long cols) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) die(path);
    enum { CHUNK = 1 << 16 };
    float buf[CHUNK];
    long total = rows * cols, done = 0;
    while (done < total) {
        long n = total - done < CHUNK ? total - done : CHUNK;
        for (long k = 0; k < n; k++) buf[k] = (float)((done + k) % 1000) * 0.001f;
        if (write(fd, buf, (size_t)n * sizeof(float)) != (ssize_t)(n * sizeof(float))) die("write");
        done += n;
    }
    if (fsync(fd) != 0) die("fsync");
    close(fd);
}

int main(int argc, char **argv) {
    const char *file = NULL, *walk = NULL, *advice = "random", *cgroup = NULL;
    long rows = 0, cols = 0, columns = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) usage();
        if (!strcmp(a, "--file")) file = v;
        else if (!strcmp(a, "--rows")) rows = atol(v);
        else if (!strcmp(a, "--cols")) cols = atol(v);
        else if (!strcmp(a, "--walk")) walk = v;
        else if (!strcmp(a, "--columns")) columns = atol(v);
        else if (!strcmp(a, "--advice")) advice = v;
        else if (!strcmp(a, "--cgroup")) cgroup = v;
        else usage();
        i++;
    }
    if (!file || !walk || rows <= 0 || cols <= 0) usage();
    int by_row = !strcmp(walk, "row");
    if (!by_row && strcmp(walk, "col")) usage();
    if (strcmp(advice, "random") && strcmp(advice, "normal")) usage();
    if (columns < 0 || columns > cols) columns = cols;

    size_t bytes = (size_t)rows * (size_t)cols * sizeof(float);
    struct stat st;
    if (stat(file, &st) != 0 || (size_t)st.st_size != bytes) write_matrix(file, rows, cols);
    int fd = open(file, O_RDONLY);
    if (fd < 0) die(file);
    /* start cold: drop the file's clean pages from the page cache */
    if (posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0) die("posix_fadvise");
    if (lab_join_cgroup(cgroup) != 0) return 1;

    float *m = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) die("mmap");
    if (!strcmp(advice, "random") && madvise(m, bytes, MADV_RANDOM) != 0) die("madvise");

    double sum = 0;
    long visited = by_row ? 1 : (columns > 0 ? columns : 1);
    long long *col_maj = malloc((size_t)visited * sizeof(long long));
    if (!col_maj) die("malloc");
    memset(col_maj, 0, (size_t)visited * sizeof(long long)); /* its faults before the walk, not in it */
    long long rb0 = read_bytes();
    long long t0 = lab_now_ns();
    struct lab_faults f0 = lab_faults_now();
    if (by_row) {
        for (long i = 0; i < rows; i++)
            for (long j = 0; j < cols; j++) sum += m[i * cols + j];
    } else {
        struct lab_faults prev = f0;
        for (long j = 0; j < columns; j++) {
            for (long i = 0; i < rows; i++) sum += m[i * cols + j];
            struct lab_faults now = lab_faults_now();
            col_maj[j] = now.majflt - prev.majflt;
            prev = now;
        }
    }
    struct lab_faults f1 = lab_faults_now();
    long long t1 = lab_now_ns();
    long long rb1 = read_bytes();

    printf("{\"walk\":\"%s\",\"advice\":\"%s\",\"rows\":%ld,\"cols\":%ld,\"elem\":%zu,\"page\":%ld,"
           "\"base\":%llu,\"bytes\":%zu,\"columns\":%ld,\"majflt\":%lld,\"minflt\":%lld,"
           "\"elapsed_ns\":%lld,\"read_bytes\":%lld,\"sum\":%.3f,\"per_column_majflt\":[",
           walk, advice, rows, cols, sizeof(float), sysconf(_SC_PAGESIZE),
           (unsigned long long)(uintptr_t)m, bytes, by_row ? 0 : columns, f1.majflt - f0.majflt,
           f1.minflt - f0.minflt, t1 - t0, rb1 - rb0, sum);
    for (long j = 0; !by_row && j < columns; j++) printf("%s%lld", j ? "," : "", col_maj[j]);
    printf("]}\n");
    munmap(m, bytes);
    close(fd);
    return 0;
}
