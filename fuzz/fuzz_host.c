/* libFuzzer harness: the host files of lib/gpu/host.c, each parser on the
 * same bytes: a /proc/PID/stat line, a /proc/self/cgroup file, a
 * /proc/self/mountinfo file and a cgroup memory limit file.
 *
 * Invariants: no read past the input (the copy is exact-size under ASan);
 * a stat line is read or refused with "fuzz:1:<col>: ", and one that is
 * read holds a ')', a non-negative process group, and reads the same
 * again; a cgroup file gives "" or a path starting with '/' that fits, or
 * is refused with "fuzz:<line>:<col>: "; a mountinfo file gives a mount
 * point and root that fit, or none, or is refused with "fuzz:<line>:<col>: ";
 * a limit is "max" (infinite) or a finite number, or is refused with
 * "fuzz:1:<col>: ". */
#include <stdbool.h>
#include <math.h>

#include "fuzz_common.h"
#include "kace/host.h"

/* "fuzz:<line>:<col>: " at the start of the message. */
static bool names_line_and_column(const char *m)
{
    if (strncmp(m, "fuzz:", 5) != 0)
        return false;
    m += 5;
    for (int part = 0; part < 2; part++) {
        if (!isdigit((unsigned char)*m))
            return false;
        while (isdigit((unsigned char)*m))
            m++;
        if (*m++ != ':')
            return false;
    }
    return *m == ' ';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_copy(data, size);
    kace_ctx *ctx = kace_ctx_new();
    if (!text || !ctx)
        goto done;
    int pgrp = -1;
    uint64_t ticks = 0, rss = 0;
    kace_status st = kace_host_parse_stat(ctx, "fuzz", text, size, &pgrp, &ticks, &rss);
    if (st) {
        fuzz_check_failure(ctx, st, "fuzz");
        FUZZ_CHECK(strncmp(kace_errmsg(ctx), "fuzz:1:", 7) == 0, "message '%s'", kace_errmsg(ctx));
    } else {
        FUZZ_CHECK(memchr(text, ')', size) != NULL, "read a line without ')'");
        FUZZ_CHECK(pgrp >= 0, "process group %d", pgrp);
        /* The same line again gives the same values. */
        int pgrp2 = -2;
        uint64_t ticks2 = 1, rss2 = 1;
        FUZZ_CHECK(kace_host_parse_stat(ctx, "fuzz", text, size, &pgrp2, &ticks2, &rss2) == KACE_OK, "second read");
        FUZZ_CHECK(pgrp == pgrp2 && ticks == ticks2 && rss == rss2, "reads differ");
    }
    char path[64];
    bool v2 = true;
    st = kace_host_parse_cgroup(ctx, "fuzz", text, size, path, sizeof path, &v2);
    if (st) {
        fuzz_check_failure(ctx, st, "fuzz");
        FUZZ_CHECK(names_line_and_column(kace_errmsg(ctx)), "message '%s'", kace_errmsg(ctx));
    } else {
        FUZZ_CHECK(path[0] == '\0' || (path[0] == '/' && strlen(path) < sizeof path), "path '%s'", path);
        FUZZ_CHECK(path[0] != '\0' || !v2, "v2 without a path");
    }
    for (int v = 0; v < 2; v++) {
        char mount_point[48], mount_root[48];
        bool found = false;
        st = kace_host_parse_mountinfo(ctx, "fuzz", text, size, v == 1, mount_point, sizeof mount_point, mount_root,
                                       sizeof mount_root, &found);
        if (st) {
            fuzz_check_failure(ctx, st, "fuzz");
            FUZZ_CHECK(names_line_and_column(kace_errmsg(ctx)), "message '%s'", kace_errmsg(ctx));
        } else if (found) {
            FUZZ_CHECK(strlen(mount_point) < sizeof mount_point && strlen(mount_root) < sizeof mount_root,
                       "paths do not fit");
        }
    }
    double limit = -1;
    st = kace_host_parse_memory_limit(ctx, "fuzz", text, size, &limit);
    if (st) {
        fuzz_check_failure(ctx, st, "fuzz");
        FUZZ_CHECK(strncmp(kace_errmsg(ctx), "fuzz:1:", 7) == 0, "message '%s'", kace_errmsg(ctx));
    } else {
        FUZZ_CHECK(limit >= 0 && (isfinite(limit) || (size >= 3 && memcmp(text, "max", 3) == 0)), "limit %g", limit);
    }
done:
    free(text);
    kace_ctx_free(&ctx);
    return 0;
}
