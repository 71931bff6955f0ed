/* Files read without blocking (see files.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files.h"

static const char *kind_of(mode_t mode)
{
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISDIR(mode))
        return "a directory";
    return "not a regular file";
}

kace_status kace_slurm_open_regular(kace_ctx *ctx, const char *path, const char *what, int *fd, bool *refused)
{
    *fd = -1;
    *refused = false;
    /* O_NONBLOCK: opening a FIFO that no process writes returns at once
     * instead of waiting for a writer. */
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (f < 0)
        return kace_fail(ctx, KACE_ERR_IO, "%s %s: cannot open: %s", what, path, strerror(errno));
    struct stat st;
    if (fstat(f, &st) != 0) {
        int err = errno;
        close(f);
        return kace_fail(ctx, KACE_ERR_IO, "%s %s: cannot stat: %s", what, path, strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(f);
        *refused = true;
        return kace_fail(ctx, KACE_ERR_IO, "%s %s is %s, not a regular file: refused (kace reads only regular files)",
                         what, path, kind_of(st.st_mode));
    }
    /* A regular file never blocks; later reads may as well wait on a slow disk. */
    int flags = fcntl(f, F_GETFL);
    if (flags >= 0)
        fcntl(f, F_SETFL, flags & ~O_NONBLOCK);
    *fd = f;
    return KACE_OK;
}

kace_status kace_slurm_config_load(kace_ctx *ctx, const char *path, kace_place_config *cfg, bool *refused)
{
    int fd;
    kace_status st = kace_slurm_open_regular(ctx, path, "configuration", &fd, refused);
    if (st)
        return st;
    enum { MAX_CONFIG = 65536 };
    char *text = malloc(MAX_CONFIG);
    if (!text) {
        close(fd);
        return kace_fail(ctx, KACE_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t n = 0;
    ssize_t got = 0;
    while (n < MAX_CONFIG && (got = read(fd, text + n, MAX_CONFIG - n)) > 0)
        n += (size_t)got;
    int err = errno;
    close(fd);
    if (got < 0 && n < MAX_CONFIG)
        st = kace_fail(ctx, KACE_ERR_IO, "%s: read error: %s", path, strerror(err));
    else if (n == MAX_CONFIG)
        st = kace_fail(ctx, KACE_ERR_PARSE, "%s: longer than %d bytes", path, MAX_CONFIG - 1);
    else
        st = kace_place_config_parse(ctx, text, n, path, cfg);
    free(text);
    return st;
}
