/* hog: the competing CPU-bound task of bench/quantum. Runs until killed.
 *   hog spin         a register-only loop (takes CPU time, leaves the caches alone)
 *   hog cache KB     walks a KB-kilobyte buffer, one write per 64-byte line (takes CPU time
 *                    and evicts the other task's data from the caches it shares)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "cache") == 0) {
        size_t n = (size_t)strtoul(argv[2], NULL, 10) * 1024;
        volatile unsigned char *buf = malloc(n);
        if (!buf) { perror("hog: malloc"); return 1; }
        for (unsigned char v = 0;; v++)
            for (size_t i = 0; i < n; i += 64) buf[i] += v;
    }
    volatile unsigned long x = 0;
    for (;;) x++;
}
