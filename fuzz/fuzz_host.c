/* libFuzzer harness: /proc/PID/stat lines (lib/gpu/host.c).
 *
 * Invariants: a line is read or refused with "fuzz:1:<col>: " (no read
 * past its end: the copy is exact-size under ASan); a line that is read
 * holds a ')', a non-negative process group, and reads the same again. */
#include "fuzz_common.h"
#include "kace/host.h"

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
done:
    free(text);
    kace_ctx_free(&ctx);
    return 0;
}
