/* libFuzzer harness for the Nsight Compute export parser (lib/data/ncu.c).
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -I include -I lib \
 *         fuzz/fuzz_ncu.c lib/data/ncu.c lib/base/csv.c lib/base/context.c lib/data/import.c ... -lm
 *   ./fuzz_ncu -max_total_time=60 corpus/ tests/data/ncu/
 *
 * Checks, beyond the sanitizers: a failure leaves the batch empty and sets a
 * message; a success appends only finite values >= 0 of known metrics. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/batch.h"
#include "kace/import.h"

static const char *const known[] = {
    "Threads",      "Compute (SM) Throughput", "DRAM Throughput", "Memory Throughput", "Registers",
    "Static Shared Memory", "avg_Thread",      "Short_Kernel",    "Long_Kernel",       "ave_Kernel_Length",
    "long/short_Ratio",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static kace_ctx *ctx;
    if (!ctx && !(ctx = kace_ctx_new()))
        return 0;
    /* An exact-size copy so that ASan sees any read past the end. */
    char *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    if (size)
        memcpy(copy, data, size);
    kace_import_batch batch;
    memset(&batch, 0, sizeof batch);
    kace_status st = kace_ncu_parse_buffer(ctx, copy, size, "fuzz.csv", "fuzz_batch2-train", &batch);
    if (st != KACE_OK) {
        if (batch.n_values != 0 || kace_errmsg(ctx)[0] == '\0')
            abort();
    } else {
        if (batch.n_values == 0 || batch.n_values > sizeof known / sizeof known[0])
            abort();
        for (size_t i = 0; i < batch.n_values; i++) {
            const kace_profile_value *v = &batch.values[i];
            if (!isfinite(v->value) || v->value < 0 || strcmp(v->workload, "fuzz_batch2-train") != 0)
                abort();
            bool ok = false;
            for (size_t j = 0; j < sizeof known / sizeof known[0]; j++)
                ok = ok || strcmp(v->metric, known[j]) == 0;
            if (!ok)
                abort();
        }
    }
    free(batch.values);
    free(batch.runs);
    free(batch.splits);
    free(copy);
    return 0;
}
