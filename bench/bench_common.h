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

/* Imports files (paths relative to dir) of the reference data into store,
 * in the library's import order; on failure *failed names the folder (the
 * message names the file). */
static inline kace_status bench_import(kace_ctx *ctx, kace_store *store, const char *dir, const char *const *files,
                                       size_t n_files, const char **failed)
{
    enum { MAX_FILES = 16 };
    static char path[MAX_FILES][4096];
    const char *paths[MAX_FILES];
    if (n_files > MAX_FILES)
        return kace_fail(ctx, KACE_ERR_INVALID, "bench_import: at most %d files", MAX_FILES);
    for (size_t i = 0; i < n_files; i++) {
        snprintf(path[i], sizeof path[i], "%s/%s", dir, files[i]);
        paths[i] = path[i];
    }
    kace_status st = kace_store_import_files(ctx, store, paths, n_files, NULL, NULL, NULL, NULL);
    if (st)
        *failed = dir;
    return st;
}

#endif
