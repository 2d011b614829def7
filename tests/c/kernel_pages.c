/* kernel_pages M: maps M fresh anonymous pages and writes one byte in each. Prints
 * "range START END" (hex) of the mapping. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long m = argc > 1 ? atol(argv[1]) : 1000;
    long page = sysconf(_SC_PAGESIZE);
    char *p = mmap(NULL, m * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 1;
    madvise(p, m * page, MADV_NOHUGEPAGE);
    for (long i = 0; i < m; i++) p[i * page] = (char)i;
    printf("range %lx %lx\n", (unsigned long)p, (unsigned long)(p + m * page));
    return 0;
}
