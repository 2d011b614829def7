/* Group 6 (paper Tables 6 and 7): file open / create / close, cached and uncached; 8 KiB
 * reads and writes at offsets reached directly and through an index; lseek.
 * Everything happens under the scratch directory --dir, which the runner creates fresh.
 *
 * "direct" / "indirect": ext4 has no direct and indirect blocks but extents. A small
 * contiguous file keeps its extents in the inode (the direct case). A file written as 8 KiB
 * blocks separated by holes has hundreds of extents, so they live in an extent-tree leaf block
 * reached from the inode (the indirect case); the extent count is reported (FIEMAP).
 * "uncached" reads drop the file's pages first with posix_fadvise(POSIX_FADV_DONTNEED).
 * "uncached" open needs the dentry, the inode and the directory and inode-table blocks out of
 * memory: only root can do that (vm.drop_caches=2, which frees clean dentries and inodes
 * machine-wide and changes no setting, then POSIX_FADV_DONTNEED on the block device). */
#include "osb.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#define NFILES 256
#define BLK 8192
static char names[NFILES][PATH_MAX];
static int fds[2 * NFILES];
static char buf[BLK] __attribute__((aligned(4096)));
static int data_fd = -1;
static long nblocks;          /* 8 KiB blocks one can address in data_fd */
static int indirect;          /* data_fd is the holey file */
static unsigned extents;

static int make_files(struct osb_run *r)
{
    for (int i = 0; i < NFILES; i++) {
        snprintf(names[i], PATH_MAX, "%s/f%03d", r->dir, i);
        int fd = open(names[i], O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (fd < 0) { osb_skip(r, "cannot create files in %s: %s", r->dir, strerror(errno)); return 1; }
        if (write(fd, "x", 1) != 1) osb_fail("write");
        close(fd);
    }
    return 0;
}

static int s_files(struct osb_run *r) { return make_files(r); }

/* open NFILES different cached files that are not open */
static int b_open_cached(struct osb_run *r)
{
    long nb = r->iters / NFILES > 0 ? r->iters / NFILES : 1;
    uint64_t total = 0;
    for (long b = 0; b < nb; b++) {
        uint64_t t0 = osb_now();
        for (int i = 0; i < NFILES; i++)
            fds[i] = open(names[i], O_RDONLY);
        total += osb_now() - t0;
        for (int i = 0; i < NFILES; i++) { if (fds[i] < 0) return -1; close(fds[i]); }
    }
    r->ns = total;
    r->ops_done = nb * NFILES;
    return 0;
}

/* open files that this process already has open */
static int b_open_again(struct osb_run *r)
{
    long nb = r->iters / NFILES > 0 ? r->iters / NFILES : 1;
    uint64_t total = 0;
    for (long b = 0; b < nb; b++) {
        for (int i = 0; i < NFILES; i++)
            if ((fds[i] = open(names[i], O_RDONLY)) < 0) return -1;
        uint64_t t0 = osb_now();
        for (int i = 0; i < NFILES; i++)
            fds[NFILES + i] = open(names[i], O_RDONLY);
        total += osb_now() - t0;
        for (int i = 0; i < 2 * NFILES; i++) { if (fds[i] < 0) return -1; close(fds[i]); }
    }
    r->ns = total;
    r->ops_done = nb * NFILES;
    return 0;
}

static int b_close(struct osb_run *r)
{
    long nb = r->iters / NFILES > 0 ? r->iters / NFILES : 1;
    uint64_t total = 0;
    for (long b = 0; b < nb; b++) {
        for (int i = 0; i < NFILES; i++)
            if ((fds[i] = open(names[i], O_RDONLY)) < 0) return -1;
        uint64_t t0 = osb_now();
        for (int i = 0; i < NFILES; i++)
            close(fds[i]);
        total += osb_now() - t0;
    }
    r->ns = total;
    r->ops_done = nb * NFILES;
    return 0;
}

static int b_open_close(struct osb_run *r)
{
    uint64_t t0 = osb_now();
    for (long i = 0; i < r->iters; i++) {
        int fd = open(names[0], O_RDONLY);
        if (fd < 0) return -1;
        close(fd);
    }
    r->ns = osb_now() - t0;
    return 0;
}

static int b_stat(struct osb_run *r)
{
    struct stat st;
    uint64_t t0 = osb_now();
    for (long i = 0; i < r->iters; i++)
        if (stat(names[i & (NFILES - 1)], &st) != 0) return -1;
    r->ns = osb_now() - t0;
    return 0;
}

static int b_fstat(struct osb_run *r)
{
    struct stat st;
    int fd = open(names[0], O_RDONLY);
    if (fd < 0) return -1;
    uint64_t t0 = osb_now();
    for (long i = 0; i < r->iters; i++)
        if (fstat(fd, &st) != 0) return -1;
    r->ns = osb_now() - t0;
    close(fd);
    return 0;
}

/* uncached open: root only */
static int bdev_fd = -1;
static int s_open_uncached(struct osb_run *r)
{
    if (geteuid() != 0) { osb_skip(r, "needs root to drop the dentry and inode caches (vm.drop_caches)"); return 1; }
    if (make_files(r)) return 1;
    int dfd = open(r->dir, O_RDONLY | O_DIRECTORY);
    if (dfd < 0 || syncfs(dfd) != 0) osb_fail("syncfs");
    struct stat st;
    if (fstat(dfd, &st) != 0) osb_fail("fstat");
    close(dfd);
    char path[320], line[256];
    snprintf(path, sizeof path, "/sys/dev/block/%u:%u/uevent", major(st.st_dev), minor(st.st_dev));
    FILE *f = fopen(path, "r");
    if (f) {
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "DEVNAME=", 8)) {
                line[strcspn(line, "\n")] = 0;
                snprintf(path, sizeof path, "/dev/%s", line + 8);
                bdev_fd = open(path, O_RDONLY);
            }
        fclose(f);
    }
    return 0;
}

static int drop_metadata(void)
{
    int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
    if (fd < 0) return -1;
    int ok = write(fd, "2", 1) == 1;
    close(fd);
    if (bdev_fd >= 0) posix_fadvise(bdev_fd, 0, 0, POSIX_FADV_DONTNEED);
    return ok ? 0 : -1;
}

static int b_open_uncached(struct osb_run *r)
{
    uint64_t total = 0;
    long n = r->iters;
    for (long i = 0; i < n; i++) {
        if (drop_metadata() != 0) return -1;
        const char *name = names[(r->rep + 1 + i * 17) & (NFILES - 1)];
        uint64_t t0 = osb_now();
        int fd = open(name, O_RDONLY);
        total += osb_now() - t0;
        if (fd < 0) return -1;
        close(fd);
    }
    r->ns = total;
    snprintf(r->extra, sizeof r->extra, "\"bdev_dropped\":%d", bdev_fd >= 0);
    return 0;
}

static void t_open_uncached(struct osb_run *r) { (void)r; if (bdev_fd >= 0) close(bdev_fd); }

/* create in a fresh directory each repetition */
static int b_create(struct osb_run *r)
{
    static long seq;
    char dir[PATH_MAX], name[PATH_MAX + 32];
    long n = r->iters < 1 ? 1 : (r->iters > 4000 ? 4000 : r->iters);
    snprintf(dir, sizeof dir, "%s/create%ld", r->dir, seq++);
    if (mkdir(dir, 0755) != 0) return -1;
    int *cfds = malloc(sizeof(int) * (size_t)n);
    uint64_t total = 0;
    for (long i = 0; i < n; i++) {
        snprintf(name, sizeof name, "%s/n%ld", dir, i);
        uint64_t t0 = osb_now();
        cfds[i] = open(name, O_CREAT | O_EXCL | O_WRONLY, 0644);
        total += osb_now() - t0;
        if (cfds[i] < 0) return -1;
        close(cfds[i]);
    }
    for (long i = 0; i < n; i++) {
        snprintf(name, sizeof name, "%s/n%ld", dir, i);
        unlink(name);
    }
    rmdir(dir);
    free(cfds);
    r->ns = total;
    r->ops_done = n;
    return 0;
}

static unsigned count_extents(int fd)
{
    struct fiemap fm;
    memset(&fm, 0, sizeof fm);
    fm.fm_length = ~0ull;
    fm.fm_flags = FIEMAP_FLAG_SYNC;
    if (ioctl(fd, FS_IOC_FIEMAP, &fm) != 0) return 0;
    return fm.fm_mapped_extents;
}

static int make_data(struct osb_run *r, int holey)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", r->dir, holey ? "holey" : "small");
    data_fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (data_fd < 0) { osb_skip(r, "cannot create %s: %s", path, strerror(errno)); return 1; }
    memset(buf, 'a', sizeof buf);
    indirect = holey;
    nblocks = holey ? 512 : 6;
    for (long b = 0; b < nblocks; b++)
        if (pwrite(data_fd, buf, BLK, (off_t)(holey ? 2 * b : b) * BLK) != BLK) osb_fail("pwrite");
    if (fsync(data_fd) != 0) osb_fail("fsync");
    extents = count_extents(data_fd);
    return 0;
}

static off_t block_offset(long i)
{
    /* the indirect case uses the second half of the holey file, the direct case all 6 blocks */
    long b = indirect ? nblocks / 2 + (i % (nblocks / 2)) : i % nblocks;
    return (off_t)(indirect ? 2 * b : b) * BLK;
}

static int s_direct(struct osb_run *r) { return make_data(r, 0); }
static int s_indirect(struct osb_run *r) { return make_data(r, 1); }
static void t_data(struct osb_run *r) { (void)r; if (data_fd >= 0) close(data_fd); }

static void note_extents(struct osb_run *r) { snprintf(r->extra, sizeof r->extra, "\"extents\":%u", extents); }

static int b_read_cached(struct osb_run *r)
{
    uint64_t t0 = osb_now();
    for (long i = 0; i < r->iters; i++)
        if (pread(data_fd, buf, BLK, block_offset(i)) != BLK) return -1;
    r->ns = osb_now() - t0;
    note_extents(r);
    return 0;
}

static int b_read_uncached(struct osb_run *r)
{
    uint64_t total = 0;
    for (long i = 0; i < r->iters; i++) {
        if (posix_fadvise(data_fd, 0, 0, POSIX_FADV_DONTNEED) != 0) return -1;
        uint64_t t0 = osb_now();
        if (pread(data_fd, buf, BLK, block_offset(i)) != BLK) return -1;
        total += osb_now() - t0;
    }
    r->ns = total;
    note_extents(r);
    return 0;
}

static int b_write_cached(struct osb_run *r)
{
    uint64_t t0 = osb_now();
    for (long i = 0; i < r->iters; i++)
        if (pwrite(data_fd, buf, BLK, block_offset(i)) != BLK) return -1;
    r->ns = osb_now() - t0;
    note_extents(r);
    return 0;
}

static int b_lseek(struct osb_run *r)
{
    long acc = 0;
    uint64_t t0 = osb_now();
    for (long i = 0; i < r->iters; i++)
        acc += lseek(data_fd, block_offset(i), SEEK_SET);
    r->ns = osb_now() - t0;
    return acc < 0 ? -1 : 0;
}

static const struct osb_bench table[] = {
    { "file.open.cached", "open an existing file whose inode is cached, not open", 0, s_files, b_open_cached, NULL },
    { "file.open.already_open", "open a file this process already has open", 0, s_files, b_open_again, NULL },
    { "file.open.uncached", "open after dropping dentries, inodes and metadata blocks (root)", 1, s_open_uncached, b_open_uncached, t_open_uncached },
    { "file.close", "close a file opened for reading", 0, s_files, b_close, NULL },
    { "file.create", "create 200 new files in a fresh directory, per file", 200, NULL, b_create, NULL },
    { "file.open_close", "open + close of one cached file (lmbench 'open')", 0, s_files, b_open_close, NULL },
    { "file.stat", "stat of a cached file", 0, s_files, b_stat, NULL },
    { "file.fstat", "fstat of an open file", 0, s_files, b_fstat, NULL },
    { "file.read.direct.cached", "pread 8 KiB, cached, extents in the inode", 0, s_direct, b_read_cached, t_data },
    { "file.read.direct.uncached", "pread 8 KiB after dropping the file's pages", 0, s_direct, b_read_uncached, t_data },
    { "file.read.indirect.cached", "pread 8 KiB, cached, extents in a tree leaf", 0, s_indirect, b_read_cached, t_data },
    { "file.read.indirect.uncached", "pread 8 KiB through the extent tree after dropping pages", 0, s_indirect, b_read_uncached, t_data },
    { "file.write.direct", "pwrite 8 KiB over a cached block, extents in the inode", 0, s_direct, b_write_cached, t_data },
    { "file.write.indirect", "pwrite 8 KiB over a cached block, extents in a tree leaf", 0, s_indirect, b_write_cached, t_data },
    { "file.lseek", "lseek(SEEK_SET)", 0, s_direct, b_lseek, t_data },
};

int main(int argc, char **argv) { return osb_main(argc, argv, table, sizeof table / sizeof table[0]); }
