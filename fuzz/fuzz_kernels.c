/* libFuzzer harness: libkace_cupti.so recordings (lib/data/kernels.c).
 *
 * Invariants: a failure names "fuzz:<line>:<column>:" (or is out of
 * memory); a parsed recording reduces either to an error or to finite,
 * non-negative metrics, with the throughputs present exactly when some kernel
 * had counters; reducing a time range never counts more kernels. */
#include <math.h>

#include "fuzz_common.h"
#include "kace/kernels.h"
#include "kace/profile.h"

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
        /* The replay cap's signatures: every kernel in one, the longest GPU time first; the
         * cap takes a prefix whose share is a share. */
        kace_kernel_signature *sig = NULL;
        size_t n = 0, launches = 0;
        if (kace_kernels_signatures(ctx, r, 0, 0, &sig, &n) == KACE_OK) {
            for (size_t i = 0; i < n; i++) {
                launches += sig[i].launches;
                FUZZ_CHECK(sig[i].launches > 0 && isfinite(sig[i].time_s) && sig[i].time_s >= 0 && sig[i].name,
                           "signature %zu: %zu launches, %g s", i, sig[i].launches, sig[i].time_s);
                FUZZ_CHECK(i == 0 || sig[i - 1].time_s >= sig[i].time_s, "signature %zu out of order", i);
            }
            FUZZ_CHECK(launches == all.n_kernels, "%zu launches in signatures of %zu kernels", launches,
                       all.n_kernels);
            double share = -1;
            size_t k = kace_replay_cap_count(sig, n, 0.95, 40, &share);
            FUZZ_CHECK(k <= n && k <= 40 && share >= 0 && share <= 1 + 1e-9, "cap %zu of %zu, share %g", k, n, share);
            free(sig);
        }
    }
done:
    kace_kernels_free(&r);
    kace_ctx_free(&ctx);
    free(text);
    return 0;
}
