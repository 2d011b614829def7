/* Lab 5 (copy-on-write fork): the parent writes --mb MiB of private anonymous memory, forks, and
 * the child writes (or reads) all of it; the child reports the page faults that took.
 *
 *   cow_fork --mb N --mode write|read
 *
 * Prints one JSON line: the child's pid, the faults of its walk (getrusage in the child), the
 * walk's address range. THP is off for the range (MADV_NOHUGEPAGE): one fault per 4 KiB page. */
#define _GNU_SOURCE
#include "lab_common.h"

#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>

int main(int argc, char **argv) {
    long mb = 0;
    const char *mode = "write";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--mb")) mb = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--mode")) mode = argv[i + 1];
        else { fprintf(stderr, "usage: cow_fork --mb N --mode write|read\n"); return 2; }
    }
    int writing = !strcmp(mode, "write");
    if (mb <= 0 || (!writing && strcmp(mode, "read"))) {
        fprintf(stderr, "usage: cow_fork --mb N --mode write|read\n");
        return 2;
    }
    size_t bytes = (size_t)mb << 20;
    long page = sysconf(_SC_PAGESIZE);
    volatile char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 1; }
    madvise((void *)p, bytes, MADV_NOHUGEPAGE);
    for (size_t off = 0; off < bytes; off += (size_t)page) p[off] = 1; /* the parent owns every page */
    int fds[2];
    if (pipe(fds) != 0) { perror("pipe"); return 1; }
    pid_t child = fork();
    if (child < 0) { perror("fork"); return 1; }
    if (child == 0) {
        close(fds[0]);
        long sum = 0;
        struct lab_faults f0 = lab_faults_now();
        long long t0 = lab_now_ns();
        for (size_t off = 0; off < bytes; off += (size_t)page) {
            if (writing) p[off] = 2;
            else sum += p[off];
        }
        long long t1 = lab_now_ns();
        struct lab_faults f1 = lab_faults_now();
        char line[512];
        int n = snprintf(line, sizeof line,
                         "{\"mode\":\"%s\",\"mb\":%ld,\"page\":%ld,\"child\":%d,\"base\":%llu,\"bytes\":%zu,"
                         "\"minflt\":%lld,\"majflt\":%lld,\"elapsed_ns\":%lld,\"sum\":%ld}\n",
                         mode, mb, page, (int)getpid(), (unsigned long long)(uintptr_t)p, bytes,
                         f1.minflt - f0.minflt, f1.majflt - f0.majflt, t1 - t0, sum);
        if (write(fds[1], line, (size_t)n) != n) _exit(1);
        _exit(0);
    }
    close(fds[1]);
    char buf[512];
    ssize_t n = read(fds[0], buf, sizeof buf - 1);
    int status;
    waitpid(child, &status, 0);
    if (n <= 0 || !WIFEXITED(status) || WEXITSTATUS(status)) { fprintf(stderr, "cow_fork: the child failed\n"); return 1; }
    buf[n] = 0;
    fputs(buf, stdout);
    return 0;
}
