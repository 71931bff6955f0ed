/* Durable whole-file writes: temporary file, fsync, rename, folder fsync. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kace/kace.h"

/* The folder part of path ("." when it has none). */
static void folder_of(const char *path, char *dir, size_t size)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, size, ".");
    else if (slash == path)
        snprintf(dir, size, "/");
    else
        snprintf(dir, size, "%.*s", (int)(slash - path), path);
}

static bool write_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        data += n;
        len -= (size_t)n;
    }
    return true;
}

kace_status kace_write_file_durable(kace_ctx *ctx, const char *path, const char *data, size_t len)
{
    char dir[4096], tmp[4200];
    if (strlen(path) >= sizeof dir - 32)
        return kace_fail(ctx, KACE_ERR_IO, "%.200s...: path too long", path);
    folder_of(path, dir, sizeof dir);
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(tmp, sizeof tmp, "%s/.%s.tmpXXXXXX", dir, base);
    int fd = mkstemp(tmp);
    if (fd < 0)
        return kace_fail(ctx, KACE_ERR_IO, "%s: cannot create a temporary file beside it: %s", path, strerror(errno));
    bool ok = fchmod(fd, 0644) == 0 && write_all(fd, data, len) && fsync(fd) == 0;
    int err = errno;
    if (close(fd) != 0 && ok) {
        ok = false;
        err = errno;
    }
    if (!ok) {
        unlink(tmp);
        return kace_fail(ctx, KACE_ERR_IO, "%s: write failed: %s", path, strerror(err));
    }
    if (rename(tmp, path) != 0) {
        err = errno;
        unlink(tmp);
        return kace_fail(ctx, KACE_ERR_IO, "%s: cannot rename into place: %s", path, strerror(err));
    }
    /* The rename is in the folder: without this a crash may lose it. */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    if (dfd < 0)
        return kace_fail(ctx, KACE_ERR_IO, "%s: cannot open its folder to sync it: %s", path, strerror(errno));
    ok = fsync(dfd) == 0;
    err = errno;
    close(dfd);
    if (!ok)
        return kace_fail(ctx, KACE_ERR_IO, "%s: cannot sync its folder: %s", path, strerror(err));
    return KACE_OK;
}
