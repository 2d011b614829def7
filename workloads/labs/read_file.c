/* Lab 6 (page cache): reads a file with read() and reports what the kernel read from storage
 * for it (/proc/self/io read_bytes) beside what it returned (rchar), as one JSON line.
 *
 *   read_file --file F --mb N [--drop] [--cgroup DIR]
 *
 * The file is (re)written when its size is wrong. --drop first evicts it from the page cache
 * (fsync + POSIX_FADV_DONTNEED): a cold read. Without it the read finds what is cached. */
#define _GNU_SOURCE
#include "lab_common.h"

#include <sys/stat.h>

static long long io_field(const char *name) {
    FILE *f = fopen("/proc/self/io", "r");
    if (!f) return -1;
    char key[64];
    long long v, out = -1;
    while (fscanf(f, "%63[^:]: %lld\n", key, &v) == 2)
        if (!strcmp(key, name)) out = v;
    fclose(f);
    return out;
}

int main(int argc, char **argv) {
    const char *file = NULL, *cgroup = NULL;
    long mb = 0;
    int drop = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--drop")) { drop = 1; continue; }
        if (i + 1 >= argc) goto usage;
        if (!strcmp(argv[i], "--file")) file = argv[++i];
        else if (!strcmp(argv[i], "--mb")) mb = atol(argv[++i]);
        else if (!strcmp(argv[i], "--cgroup")) cgroup = argv[++i];
        else goto usage;
    }
    if (!file || mb <= 0) goto usage;
    size_t bytes = (size_t)mb << 20;
    static char buf[1 << 20];
    struct stat st;
    if (stat(file, &st) != 0 || (size_t)st.st_size != bytes) {
        int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) { perror(file); return 1; }
        for (size_t k = 0; k < sizeof buf; k++) buf[k] = (char)('a' + k % 26);
        for (long m = 0; m < mb; m++)
            if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf) { perror("write"); return 1; }
        if (fsync(fd) != 0) { perror("fsync"); return 1; }
        close(fd);
        drop = 1; /* a file just written is cached: make the read cold as asked, or warm below */
    }
    int fd = open(file, O_RDONLY);
    if (fd < 0) { perror(file); return 1; }
    if (drop && posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0) { perror("posix_fadvise"); return 1; }
    if (lab_join_cgroup(cgroup) != 0) return 1;
    long long rb0 = io_field("read_bytes"), rc0 = io_field("rchar");
    long long t0 = lab_now_ns();
    ssize_t n;
    size_t total = 0;
    while ((n = read(fd, buf, sizeof buf)) > 0) total += (size_t)n;
    long long t1 = lab_now_ns();
    long long rb1 = io_field("read_bytes"), rc1 = io_field("rchar");
    close(fd);
    printf("{\"mb\":%ld,\"drop\":%d,\"bytes\":%zu,\"read_bytes\":%lld,\"rchar\":%lld,\"elapsed_ns\":%lld}\n",
           mb, drop, total, rb1 - rb0, rc1 - rc0, t1 - t0);
    return 0;
usage:
    fprintf(stderr, "usage: read_file --file F --mb N [--drop] [--cgroup DIR]\n");
    return 2;
}
