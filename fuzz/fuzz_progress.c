/* libFuzzer harness: progress records (lib/base/progress.c).
 *
 * The input is fed twice: whole, and in pieces whose sizes come from the
 * input's first byte. Invariants: both feeds agree (same status, same
 * records); records are non-decreasing in time and samples, finite, within
 * bounds; an error message names "fuzz:<line>:<column>:"; the throughput of
 * the records is finite and non-negative when it succeeds. */
#include <math.h>

#include "fuzz_common.h"
#include "kace/progress.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t step = (size_t)(data[0] % 17) + 1;
    char *text = fuzz_copy(data + 1, size - 1);
    size_t len = size - 1;
    kace_ctx *ctx = kace_ctx_new();
    kace_progress *whole = NULL, *pieces = NULL;
    if (!text || !ctx || kace_progress_new(ctx, "fuzz", &whole) || kace_progress_new(ctx, "fuzz", &pieces))
        goto done;
    kace_status a = kace_progress_feed(ctx, whole, text, len, 42);
    if (a)
        FUZZ_CHECK(strncmp(kace_errmsg(ctx), "fuzz:", 5) == 0 && fuzz_skip_number(kace_errmsg(ctx) + 5),
                   "message '%s'", kace_errmsg(ctx));
    kace_status b = KACE_OK;
    for (size_t off = 0; off < len && !b; off += step)
        b = kace_progress_feed(ctx, pieces, text + off, len - off < step ? len - off : step, 42);
    FUZZ_CHECK(a == b, "whole %d, pieces %d", a, b);
    size_t na, nb;
    const kace_progress_record *ra = kace_progress_records(whole, &na);
    const kace_progress_record *rb = kace_progress_records(pieces, &nb);
    FUZZ_CHECK(na == nb, "whole %zu records, pieces %zu", na, nb);
    for (size_t i = 0; i < na; i++) {
        FUZZ_CHECK(ra[i].t_ns == rb[i].t_ns && ra[i].samples == rb[i].samples, "record %zu differs", i);
        FUZZ_CHECK(isfinite(ra[i].samples) && ra[i].samples >= 0 && ra[i].samples <= KACE_PROGRESS_MAX_SAMPLES,
                   "samples %g", ra[i].samples);
        FUZZ_CHECK(ra[i].t_ns >= 0, "time %lld", (long long)ra[i].t_ns);
        if (i > 0)
            FUZZ_CHECK(ra[i].t_ns >= ra[i - 1].t_ns && ra[i].samples >= ra[i - 1].samples, "record %zu goes back", i);
    }
    kace_throughput tp;
    if (na >= 2 && kace_progress_throughput(ctx, ra, na, ra[0].t_ns, 1.0, 1, &tp) == KACE_OK)
        FUZZ_CHECK(isfinite(tp.samples_per_s) && tp.samples_per_s >= 0 && tp.window_s > 0, "throughput %g over %g s",
                   tp.samples_per_s, tp.window_s);
done:
    kace_progress_free(&whole);
    kace_progress_free(&pieces);
    kace_ctx_free(&ctx);
    free(text);
    return 0;
}
