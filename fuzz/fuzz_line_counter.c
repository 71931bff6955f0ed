/* libFuzzer harness: progress from a command's output lines (lib/base/line_counter.c,
 * kace progress-from-output).
 *
 * The input's first byte picks one of a few patterns (the fuzzer explores the
 * output, not the regex engine); the rest is output, cut into lines at \n and
 * \r as the wrapper cuts it. Invariants: the total is finite, within the
 * protocol's bounds and never goes down; a line counts exactly when the total
 * grows; a failure is KACE_ERR_PARSE with "fuzz:<line>:<col>: " and leaves the
 * total as it was; the counter takes the next line after a failure. */
#include <math.h>

#include "fuzz_common.h"
#include "kace/progress.h"

static const char *const patterns[] = {
    "^step [0-9]+",              /* no group: each match adds the samples */
    "([0-9]+)/[0-9]+ \\[",       /* tqdm's bar: a cumulative count */
    "(x)?it ([0-9]+)",           /* a group that may take no part */
    "iter ([0-9.a-f]+)",         /* a group that may hold a non-count */
    "^(.*)$",                    /* every line: group 1 is the whole line */
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t npat = sizeof patterns / sizeof *patterns;
    const char *pattern = patterns[data[0] % npat];
    double per_match = (data[0] / npat) % 2 ? 0.5 : 16;
    char *text = fuzz_copy(data + 1, size - 1);
    size_t len = size - 1;
    kace_ctx *ctx = kace_ctx_new();
    kace_line_counter *c = NULL;
    if (!text || !ctx)
        goto done;
    kace_status st = kace_line_counter_new(ctx, "fuzz", pattern, per_match, &c);
    FUZZ_CHECK(st == KACE_OK, "pattern '%s': %s", pattern, kace_errmsg(ctx));
    double last = 0;
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && text[i] != '\n' && text[i] != '\r')
            continue;
        bool counted = true;
        double total = -1;
        st = kace_line_counter_feed(ctx, c, text + start, i - start, &counted, &total);
        start = i + 1;
        if (st) {
            FUZZ_CHECK(st == KACE_ERR_PARSE, "status %d: %s", (int)st, kace_errmsg(ctx));
            fuzz_check_failure(ctx, st, "fuzz");
            FUZZ_CHECK(!counted && total == last, "a failed line changed the total: %g -> %g", last, total);
            continue;
        }
        FUZZ_CHECK(isfinite(total) && total >= last && total <= KACE_PROGRESS_MAX_SAMPLES, "total %g after %g", total,
                   last);
        FUZZ_CHECK(counted == (total > last), "counted %d, total %g after %g", counted, total, last);
        last = total;
    }
done:
    kace_line_counter_free(&c);
    kace_ctx_free(&ctx);
    free(text);
    return 0;
}
