/* libFuzzer harness: libkace_cupti.so recordings (lib/data/kernels.c).
 *
 * Invariants: a failure names "fuzz:<line>:<column>:" (or is out of
 * memory); a parsed recording reduces either to an error or to finite,
 * non-negative metrics, with the throughputs present exactly when some kernel
 * had counters; reducing a time range never counts more kernels. */
#include <math.h>

#include "fuzz_common.h"
#include "kace/kernels.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_copy(data, size);
    kace_ctx *ctx = kace_ctx_new();
    kace_kernel_recording *r = NULL;
    if (!text || !ctx)
        goto done;
    kace_status st = kace_kernels_parse(ctx, text, size, "fuzz", &r);
    if (st) {
        FUZZ_CHECK(r == NULL, "recording returned on failure");
        FUZZ_CHECK(st == KACE_ERR_NOMEM ||
                       (strncmp(kace_errmsg(ctx), "fuzz:", 5) == 0 && fuzz_skip_number(kace_errmsg(ctx) + 5)),
                   "message '%s'", kace_errmsg(ctx));
        goto done;
    }
    kace_kernel_summary all, part;
    if (kace_kernels_reduce(ctx, r, 0, 0, &all) == KACE_OK) {
        for (int m = 0; m < KACE_KM_N; m++)
            if (all.have[m])
                FUZZ_CHECK(isfinite(all.value[m]) && all.value[m] >= 0, "metric %d = %g", m, all.value[m]);
        FUZZ_CHECK(!all.have[KACE_KM_SM] || all.n_with_counters > 0, "throughputs without counters");
        FUZZ_CHECK(all.n_with_counters <= all.n_kernels, "%zu with counters of %zu", all.n_with_counters,
                   all.n_kernels);
        if (kace_kernels_reduce(ctx, r, 1000, 1000000, &part) == KACE_OK)
            FUZZ_CHECK(part.n_kernels <= all.n_kernels, "range counted %zu of %zu", part.n_kernels, all.n_kernels);
    }
done:
    kace_kernels_free(&r);
    kace_ctx_free(&ctx);
    free(text);
    return 0;
}
