/* Lab 4 (anatomy of a page fault): one kind of page fault, many times, on cue, so the lab can
 * capture the kernel's stacks inside the fault path for exactly the walk.
 *
 *   fault_kinds --kind zero|file|cow|thp --mb N [--file PATH]
 *
 * zero: first writes to private anonymous memory (THP off): a zero-filled page each.
 * file: reads of a file evicted from the page cache first, mapped MADV_RANDOM: a read from disk
 *       each (PATH, created and removed here; it must be on a disk, not tmpfs).
 * cow:  a child's writes to memory its parent wrote before fork(): a copy each.
 * thp:  first writes to 2 MiB-aligned anonymous memory with MADV_HUGEPAGE: a huge page per 2 MiB
 *       where the kernel can get one.
 * Protocol on stdin/stdout: prints "ready" after setting up, waits for a line, walks (the child
 * walks for cow), prints one JSON line (the walker's pid, its faults from getrusage, the walk's
 * time), waits for a line, exits: the lab arms the capture between the two. */
#define _GNU_SOURCE
#include "lab_common.h"

#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>

#define HUGE (2ul << 20)

static void wait_line(void) {
    char buf[16];
    if (!fgets(buf, sizeof buf, stdin)) exit(3);
}

static void say(const char *kind, long mb, size_t base, size_t bytes, struct lab_faults f0, struct lab_faults f1,
                long long ns) {
    printf("{\"kind\":\"%s\",\"mb\":%ld,\"pid\":%d,\"base\":%zu,\"bytes\":%zu,\"minflt\":%lld,\"majflt\":%lld,"
           "\"elapsed_ns\":%lld}\n", kind, mb, (int)getpid(), base, bytes, f1.minflt - f0.minflt, f1.majflt - f0.majflt, ns);
    fflush(stdout);
}

/* Touches one byte per page of [p, p + bytes): writing, or reading into a sum. */
static long walk(volatile char *p, size_t bytes, int writing) {
    long sum = 0;
    for (size_t off = 0; off < bytes; off += 4096) {
        if (writing) p[off] = 1;
        else sum += p[off];
    }
    return sum;
}

static volatile char *file_mapping(const char *path, size_t bytes) {
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) { perror(path); return NULL; }
    char block[1 << 16];
    memset(block, 7, sizeof block);
    for (size_t done = 0; done < bytes; done += sizeof block)
        if (write(fd, block, sizeof block) != (ssize_t)sizeof block) { perror("write"); return NULL; }
    /* written back, then dropped from the page cache: every page must come from the disk */
    fsync(fd);
    posix_fadvise(fd, 0, (off_t)bytes, POSIX_FADV_DONTNEED);
    volatile char *p = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    unlink(path);
    if (p == MAP_FAILED) { perror("mmap"); return NULL; }
    madvise((void *)p, bytes, MADV_RANDOM); /* no read-ahead: one read per fault */
    return p;
}

int main(int argc, char **argv) {
    const char *kind = "", *path = "fault_kinds.data";
    long mb = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--kind")) kind = argv[i + 1];
        else if (!strcmp(argv[i], "--mb")) mb = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--file")) path = argv[i + 1];
    }
    int k = !strcmp(kind, "zero") ? 0 : !strcmp(kind, "file") ? 1 : !strcmp(kind, "cow") ? 2 : !strcmp(kind, "thp") ? 3 : -1;
    if (k < 0 || mb <= 0 || (k == 3 && mb % 2)) {
        fprintf(stderr, "usage: fault_kinds --kind zero|file|cow|thp --mb N [--file PATH] (thp: N even)\n");
        return 2;
    }
    size_t bytes = (size_t)mb << 20;
    volatile char *p;
    if (k == 1) {
        p = file_mapping(path, bytes);
        if (!p) return 1;
    } else {
        char *base = mmap(NULL, bytes + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base == MAP_FAILED) { perror("mmap"); return 1; }
        p = (volatile char *)(((uintptr_t)base + HUGE - 1) & ~(HUGE - 1));
        if (madvise((void *)p, bytes, k == 3 ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) != 0) { perror("madvise"); return 1; }
        if (k == 2) walk(p, bytes, 1); /* the parent owns every page before the fork */
    }
    printf("ready\n");
    fflush(stdout);
    wait_line();
    if (k == 2) {
        pid_t child = fork();
        if (child < 0) { perror("fork"); return 1; }
        if (child == 0) {
            struct lab_faults f0 = lab_faults_now();
            long long t0 = lab_now_ns();
            walk(p, bytes, 1);
            long long t1 = lab_now_ns();
            say(kind, mb, (size_t)(uintptr_t)p, bytes, f0, lab_faults_now(), t1 - t0);
            wait_line();
            _exit(0);
        }
        int status;
        waitpid(child, &status, 0);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    }
    struct lab_faults f0 = lab_faults_now();
    long long t0 = lab_now_ns();
    long sum = walk(p, bytes, k != 1);
    long long t1 = lab_now_ns();
    say(kind, mb, (size_t)(uintptr_t)p, bytes, f0, lab_faults_now(), t1 - t0);
    wait_line();
    return sum == 12345 ? 4 : 0;
}
