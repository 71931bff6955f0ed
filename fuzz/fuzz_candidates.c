/* libFuzzer harness for the candidate-list parser (kace_candidates_parse,
 * lib/decide/protocol.c), the file `kace eval --candidates` reads.
 *
 * Checks, beyond the sanitizers: a failure carries "<origin>:line:col: ";
 * a success returns at least one row, ascending, without repeats, each a
 * colocation of the small built-in dataset. */
#include "fuzz_common.h"
#include "kace/protocol.h"

static const char origin[] = "fuzz/candidates.csv";

static kace_dataset *dataset(kace_ctx *ctx)
{
    static const char *const names[3] = {"x_batch2-train", "y_batch8-inf", "z-inf"};
    static const int rows[5][3] = {{0, 1, -1}, {1, 2, -1}, {0, 0, -1}, {0, 1, 2}, {1, 0, -1}};
    kace_dataset *ds = NULL;
    if (kace_dataset_new(ctx, &ds))
        return NULL;
    for (int i = 0; i < 3; i++) {
        int idx;
        if (kace_dataset_intern(ctx, ds, names[i], &idx))
            return NULL;
    }
    for (int r = 0; r < 5; r++) {
        kace_colocation c = {.k = rows[r][2] < 0 ? 2 : 3};
        for (int j = 0; j < c.k; j++) {
            c.workload[j] = rows[r][j];
            c.mps_pct[j] = 100;
            c.throughput[j] = 1 + r + j;
        }
        if (kace_dataset_add_colocation(ctx, ds, &c))
            return NULL;
    }
    return ds;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_copy(data, size);
    kace_ctx *ctx = kace_ctx_new();
    kace_dataset *ds = ctx ? dataset(ctx) : NULL;
    if (!text || !ds) {
        free(text);
        kace_dataset_free(&ds);
        kace_ctx_free(&ctx);
        return 0;
    }
    int *rows = NULL;
    size_t n = 0;
    kace_status st = kace_candidates_parse(ctx, ds, NULL, 0, text, size, origin, &rows, &n);
    if (st) {
        fuzz_check_failure(ctx, st, origin);
        FUZZ_CHECK(rows == NULL && n == 0, "rows on failure");
    } else {
        FUZZ_CHECK(n >= 1 && rows, "success without rows");
        for (size_t i = 0; i < n; i++) {
            FUZZ_CHECK(rows[i] >= 0 && (size_t)rows[i] < ds->n_colocations, "row %d out of range", rows[i]);
            FUZZ_CHECK(i == 0 || rows[i] > rows[i - 1], "rows not ascending");
        }
    }
    free(rows);
    free(text);
    kace_dataset_free(&ds);
    kace_ctx_free(&ctx);
    return 0;
}
