/* What loading liboslens costs a process, its constructor included: one dlopen of the library
 * given as argv[1], timed with CLOCK_MONOTONIC, and (argv[2] = "cpuid") the two CPUID
 * instructions the recorder's clock check makes, timed the same way. Prints "<dlopen ns> <cpuid ns>".
 * Used by load_time.py. */
#include <cpuid.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static long ns_since(const struct timespec *a) {
    struct timespec b;
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (b.tv_sec - a->tv_sec) * 1000000000L + (b.tv_nsec - a->tv_nsec);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: load LIBRARY [cpuid]\n");
        return 2;
    }
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
    long load = ns_since(&t);
    if (!h) {
        fprintf(stderr, "load: %s\n", dlerror());
        return 1;
    }
    long cpuid = 0;
    if (argc > 2 && strcmp(argv[2], "cpuid") == 0) {
        unsigned a, b, c, d;
        clock_gettime(CLOCK_MONOTONIC, &t);
        __cpuid(0x80000000, a, b, c, d);
        __cpuid(0x80000007, a, b, c, d);
        cpuid = ns_since(&t);
    }
    printf("%ld %ld\n", load, cpuid);
    return 0;
}
