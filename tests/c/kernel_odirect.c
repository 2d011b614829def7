/* kernel_odirect PATH K: writes K MiB to PATH with O_DIRECT, fsyncs, removes it. Exits 77 when
 * the file system refuses O_DIRECT (tmpfs, some overlays). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    long k = atol(argv[2]);
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
    if (fd < 0) {
        fprintf(stderr, "open O_DIRECT: %s\n", strerror(errno));
        return errno == EINVAL ? 77 : 1;
    }
    size_t chunk = 1 << 20;
    void *buf;
    if (posix_memalign(&buf, 4096, chunk)) return 1;
    memset(buf, 0xab, chunk);
    for (long i = 0; i < k; i++) {
        ssize_t w = write(fd, buf, chunk);
        if (w != (ssize_t)chunk) {
            fprintf(stderr, "write: %s\n", strerror(errno));
            unlink(argv[1]);
            return errno == EINVAL ? 77 : 1;
        }
    }
    if (fsync(fd)) return 1;
    close(fd);
    unlink(argv[1]);
    return 0;
}
