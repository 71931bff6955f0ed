/* Small helpers the C benchmarks share: a monotonic clock, a comparison for
 * qsort (medians and percentiles), and the reference data loaded into a
 * scratch store. Header-only: each benchmark is one executable. */
#ifndef KACE_BENCH_COMMON_H
#define KACE_BENCH_COMMON_H

#include <stdio.h>
#include <time.h>

#include "kace/import.h"
#include "kace/store.h"

/* CLOCK_MONOTONIC in seconds. */
static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The value at quantile q (0..1) of n sorted values. */
static inline double bench_quantile(const double *sorted, size_t n, double q)
{
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return sorted[i < n ? i : n - 1];
}

/* Imports files (paths relative to dir) of the reference data into store;
 * on failure *failed names the file. */
static inline kace_status bench_import(kace_ctx *ctx, kace_store *store, const char *dir, const char *const *files,
                                       size_t n_files, const char **failed)
{
    static char path[4096];
    for (size_t i = 0; i < n_files; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        kace_import_batch *b = NULL;
        kace_status st = kace_import_parse_file(ctx, path, NULL, &b);
        if (!st)
            st = kace_store_import(ctx, store, b, NULL, NULL);
        kace_import_batch_free(&b);
        if (st) {
            *failed = path;
            return st;
        }
    }
    return KACE_OK;
}

#endif
