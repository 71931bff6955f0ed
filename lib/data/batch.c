/* The import batch (batch.h, include/kace/import.h): what a parser fills
 * and the store stores. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"

static kace_status grow(kace_ctx *ctx, void **items, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return KACE_OK;
    size_t ncap = *cap ? *cap * 2 : 64;
    void *p = realloc(*items, ncap * size);
    if (!p)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    *items = p;
    *cap = ncap;
    return KACE_OK;
}

kace_status kace_batch_add_value(kace_ctx *ctx, kace_import_batch *b, const char *workload, const char *metric,
                                 double value, bool embedded)
{
    kace_status st = grow(ctx, (void **)&b->values, &b->cap_values, b->n_values, sizeof *b->values);
    if (st)
        return st;
    kace_profile_value *v = &b->values[b->n_values++];
    memset(v, 0, sizeof *v);
    snprintf(v->workload, sizeof v->workload, "%s", workload);
    snprintf(v->metric, sizeof v->metric, "%s", metric);
    v->value = value;
    v->embedded = embedded;
    return KACE_OK;
}

kace_status kace_batch_add_run(kace_ctx *ctx, kace_import_batch *b, const kace_import_run *run)
{
    kace_status st = grow(ctx, (void **)&b->runs, &b->cap_runs, b->n_runs, sizeof *b->runs);
    if (st)
        return st;
    b->runs[b->n_runs++] = *run;
    return KACE_OK;
}

kace_status kace_batch_add_split(kace_ctx *ctx, kace_import_batch *b, const kace_import_split *s)
{
    kace_status st = grow(ctx, (void **)&b->splits, &b->cap_splits, b->n_splits, sizeof *b->splits);
    if (st)
        return st;
    b->splits[b->n_splits++] = *s;
    return KACE_OK;
}

void kace_import_batch_free(kace_import_batch **b)
{
    if (!b || !*b)
        return;
    free((*b)->values);
    free((*b)->runs);
    free((*b)->splits);
    free(*b);
    *b = NULL;
}
