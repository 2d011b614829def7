/* Group 4 (paper Table 4): allocate and zero-fill anonymous memory by touching the first word
 * of every 4 KiB page; the figure is per 4 KiB page. mmap and munmap are outside the timing.
 * The 4 KiB-page runs ask for no transparent huge pages (MADV_NOHUGEPAGE); the thp run asks
 * for them (MADV_HUGEPAGE) and is still reported per 4 KiB of memory. */
#include "osb.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#define PAGE 4096ul
#define HUGE (2ul << 20)

static int touch_area(struct osb_run *r, size_t bytes, int thp)
{
    size_t len = bytes + (thp ? HUGE : 0);
    char *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return -1;
    char *p = base;
    if (thp) {
        p = (char *)(((uintptr_t)base + HUGE - 1) & ~(HUGE - 1));
        if (madvise(p, bytes, MADV_HUGEPAGE) != 0) { munmap(base, len); return -1; }
    } else {
        madvise(p, bytes, MADV_NOHUGEPAGE);
    }
    uint64_t t0 = osb_now();
    for (size_t off = 0; off < bytes; off += PAGE)
        *(volatile long *)(p + off) = 1;
    r->ns = osb_now() - t0;
    r->ops_done = (long)(bytes / PAGE);
    munmap(base, len);
    return 0;
}

static int b_4m(struct osb_run *r) { return touch_area(r, 4ul << 20, 0); }
static int b_64m(struct osb_run *r) { return touch_area(r, 64ul << 20, 0); }
static int b_thp(struct osb_run *r) { return touch_area(r, 64ul << 20, 1); }

static int s_thp(struct osb_run *r)
{
    char buf[128] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) { osb_skip(r, "this kernel has no transparent huge pages"); return 1; }
    if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
    fclose(f);
    if (strstr(buf, "[never]")) { osb_skip(r, "transparent huge pages are set to 'never' on this machine"); return 1; }
    return 0;
}

static const struct osb_bench table[] = {
    { "fault.zero_fill.4MiB", "touch 1024 fresh 4 KiB pages (4 MiB), per page", 1, NULL, b_4m, NULL },
    { "fault.zero_fill.64MiB", "touch 16384 fresh 4 KiB pages (64 MiB), per page", 1, NULL, b_64m, NULL },
    { "fault.zero_fill.thp.64MiB", "64 MiB with MADV_HUGEPAGE, per 4 KiB of memory", 1, s_thp, b_thp, NULL },
};

int main(int argc, char **argv) { return osb_main(argc, argv, table, sizeof table / sizeof table[0]); }
