/* Group 7 (paper Table 8): copy a 1 MiB file. The figure is the whole copy: open the source,
 * create the destination, move the data, close both (and fsync the destination for the
 * disk-to-disk case, whose source pages are dropped with POSIX_FADV_DONTNEED first).
 * The destination is unlinked outside the timing. */
#include "osb.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB (1 << 20)
static char src[PATH_MAX], dst[PATH_MAX];
static char *buf;

static int s_copy(struct osb_run *r)
{
    snprintf(src, sizeof src, "%s/copy-src", r->dir);
    snprintf(dst, sizeof dst, "%s/copy-dst", r->dir);
    buf = aligned_alloc(4096, MIB);
    memset(buf, 'c', MIB);
    int fd = open(src, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0) { osb_skip(r, "cannot create %s: %s", src, strerror(errno)); return 1; }
    if (write(fd, buf, MIB) != MIB || fsync(fd) != 0) osb_fail("write source");
    close(fd);
    return 0;
}

static void t_copy(struct osb_run *r) { (void)r; unlink(dst); unlink(src); free(buf); }

static int drop_source(void)
{
    int fd = open(src, O_RDONLY);
    if (fd < 0) return -1;
    int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    return rc;
}

static int copy_once(size_t block, int use_cfr, int disk, uint64_t *ns)
{
    if (disk && drop_source() != 0) return -1;
    uint64_t t0 = osb_now();
    int in = open(src, O_RDONLY);
    int out = open(dst, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (in < 0 || out < 0) return -1;
    if (use_cfr) {
        size_t left = MIB;
        while (left > 0) {
            ssize_t n = copy_file_range(in, NULL, out, NULL, left, 0);
            if (n <= 0) return -1;
            left -= (size_t)n;
        }
    } else {
        for (;;) {
            ssize_t n = read(in, buf, block);
            if (n < 0) return -1;
            if (n == 0) break;
            if (write(out, buf, (size_t)n) != n) return -1;
        }
    }
    if (disk && fsync(out) != 0) return -1;
    close(in);
    close(out);
    *ns += osb_now() - t0;
    unlink(dst);
    return 0;
}

#define COPY(fn, block, cfr, disk) \
    static int fn(struct osb_run *r) { \
        uint64_t ns = 0; \
        for (long i = 0; i < r->iters; i++) if (copy_once(block, cfr, disk, &ns) != 0) return -1; \
        r->ns = ns; return 0; }
COPY(b_rw8k_cached, 8192, 0, 0)
COPY(b_rw8k_disk, 8192, 0, 1)
COPY(b_rw1m_cached, MIB, 0, 0)
COPY(b_cfr_cached, 0, 1, 0)
COPY(b_cfr_disk, 0, 1, 1)

static const struct osb_bench table[] = {
    { "copy.rw_8k.cached", "copy 1 MiB with 8 KiB read/write, cache to cache", 0, s_copy, b_rw8k_cached, t_copy },
    { "copy.rw_8k.disk", "copy 1 MiB with 8 KiB read/write, source uncached, destination fsync'd", 0, s_copy, b_rw8k_disk, t_copy },
    { "copy.rw_1m.cached", "copy 1 MiB with one 1 MiB read and one write, cache to cache", 0, s_copy, b_rw1m_cached, t_copy },
    { "copy.copy_file_range.cached", "copy 1 MiB with copy_file_range, cache to cache", 0, s_copy, b_cfr_cached, t_copy },
    { "copy.copy_file_range.disk", "copy_file_range, source uncached, destination fsync'd", 0, s_copy, b_cfr_disk, t_copy },
};

int main(int argc, char **argv) { return osb_main(argc, argv, table, sizeof table / sizeof table[0]); }
