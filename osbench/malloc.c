/* Group 5 (paper Table 5): malloc/free by size, and an atomic reference count.
 * malloc.pair.S: malloc(S) then free at once (the allocator's fast path, tcache for small S).
 * malloc.alloc.S / malloc.free.S: a batch of B blocks allocated, then freed; the figure is the
 * allocation (or the free) per block. Heap trimming is switched off (M_TRIM_THRESHOLD) so a
 * batch free does not hand memory back to the kernel and pollute the figure; the mmap threshold
 * is pinned at glibc's default 128 KiB so 1 MiB blocks are mmap/munmap calls. */
#include "osb.h"
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

static void *volatile sink;
static void *blocks[1024];

static size_t size_of(struct osb_run *r) { return (size_t)r->param; }
static long batch_of(size_t size) { return size >= 65536 ? 64 : 1000; }

static int s_malloc(struct osb_run *r)
{
    if (r->param <= 0) { osb_skip(r, "needs --param SIZE"); return 1; }
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    return 0;
}

static int b_pair(struct osb_run *r)
{
    size_t s = size_of(r);
    uint64_t t0 = osb_now();
    for (long i = 0; i < r->iters; i++) {
        void *p = malloc(s);
        sink = p;
        free(p);
    }
    r->ns = osb_now() - t0;
    return 0;
}

static int batches(struct osb_run *r, int time_free)
{
    size_t s = size_of(r);
    long b = batch_of(s), nb = r->iters / b > 0 ? r->iters / b : 1;
    uint64_t total = 0;
    for (long k = 0; k < nb; k++) {
        uint64_t t0 = osb_now();
        for (long i = 0; i < b; i++)
            blocks[i] = malloc(s);
        uint64_t t1 = osb_now();
        for (long i = 0; i < b; i++)
            if (!blocks[i]) return -1;
        sink = blocks[b - 1];
        uint64_t t2 = osb_now();
        for (long i = 0; i < b; i++)
            free(blocks[i]);
        uint64_t t3 = osb_now();
        total += time_free ? t3 - t2 : t1 - t0;
    }
    r->ns = total;
    r->ops_done = nb * b;
    return 0;
}
static int b_alloc(struct osb_run *r) { return batches(r, 0); }
static int b_free(struct osb_run *r) { return batches(r, 1); }

static long refcount;
static int b_refcount(struct osb_run *r)
{
    uint64_t t0 = osb_now();
    for (long i = 0; i < r->iters; i++) {
        __atomic_fetch_add(&refcount, 1, __ATOMIC_ACQ_REL);
        if (__atomic_sub_fetch(&refcount, 1, __ATOMIC_ACQ_REL) < 0) return -1;
    }
    r->ns = osb_now() - t0;
    return 0;
}

static const struct osb_bench table[] = {
    { "malloc.pair", "malloc(--param) then free at once", 0, s_malloc, b_pair, NULL },
    { "malloc.alloc", "malloc(--param) in a batch, per block", 0, s_malloc, b_alloc, NULL },
    { "malloc.free", "free of a batch of --param blocks, per block", 0, s_malloc, b_free, NULL },
    { "malloc.refcount", "atomic reference count increment + decrement", 0, NULL, b_refcount, NULL },
};

int main(int argc, char **argv) { return osb_main(argc, argv, table, sizeof table / sizeof table[0]); }
