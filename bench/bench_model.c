/* Training and prediction cost of kace's slowdown model against the paper's
 * linear KACE model, measured in the same run on the reference data:
 * fit on the ~120 training pairs of the published n_occur=10 split (seed 10),
 * predict one colocation at a time through the public API.
 * usage: kace-bench-model [SHARED_V100_DIR] [SCRATCH_DB] */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kace/eval.h"
#include "kace/store.h"

#include "bench_common.h"

static int die(kace_ctx *ctx, const char *what)
{
    fprintf(stderr, "kace-bench-model: %s: %s\n", what, kace_errmsg(ctx));
    return 1;
}

enum { FIT_RUNS = 21, PREDICT_ROUNDS = 1000, PREDICT_PASSES = 5 };

static double median_fit_ms(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n, const kace_fit_spec *spec)
{
    double t[FIT_RUNS];
    for (int i = 0; i < FIT_RUNS; i++) {
        kace_model *m = NULL;
        double t0 = bench_now();
        if (kace_model_fit_rows(ctx, ds, rows, n, spec, &m))
            return -1;
        t[i] = (bench_now() - t0) * 1e3;
        kace_model_free(&m);
    }
    qsort(t, FIT_RUNS, sizeof *t, bench_cmp_double);
    return t[FIT_RUNS / 2];
}

int main(int argc, char **argv)
{
    const char *data = argc > 1 ? argv[1] : "../shared/data/kace-v100";
    const char *db = argc > 2 ? argv[2] : "/tmp/kace-bench-model.db";
    remove(db);
    kace_ctx *ctx = kace_ctx_new();
    kace_store *store = NULL;
    if (kace_store_open(ctx, db, &store))
        return die(ctx, db);
    static const char *const files[] = {"profiles/system.csv", "colocations/pairs.csv", "splits.csv"};
    const char *failed = NULL;
    if (bench_import(ctx, store, data, files, 3, &failed))
        return die(ctx, failed);
    kace_dataset *ds = NULL;
    kace_splits *splits = NULL;
    if (kace_store_load_dataset(ctx, store, "pairs", false, &ds) || kace_store_load_splits(ctx, store, ds, &splits))
        return die(ctx, "load");
    int *rows = malloc(splits->n * sizeof *rows);
    size_t n = 0;
    for (size_t i = 0; i < splits->n; i++)
        if (splits->rows[i].n_occur == 10 && splits->rows[i].seed == 10 && splits->rows[i].train)
            rows[n++] = splits->rows[i].colocation;

    kace_fit_spec linear = {.kind = KACE_MODEL_LINEAR, .features = &kace_features_kace};
    kace_fit_spec slowdown = {.kind = KACE_MODEL_SLOWDOWN};
    kace_slowdown_params_default(&slowdown.slowdown);
    double fit_linear = median_fit_ms(ctx, ds, rows, n, &linear);
    double fit_slowdown = median_fit_ms(ctx, ds, rows, n, &slowdown);
    kace_fit_spec fixed = slowdown;
    fixed.slowdown.select = false; /* what the CV choice of the monotone constraints costs */
    double fit_fixed = median_fit_ms(ctx, ds, rows, n, &fixed);
    kace_fit_spec ridge_only = slowdown;
    ridge_only.slowdown.n_rounds = 0; /* where the time goes: the ridge part with its CV */
    double fit_ridge = median_fit_ms(ctx, ds, rows, n, &ridge_only);
    if (fit_linear < 0 || fit_slowdown < 0 || fit_ridge < 0 || fit_fixed < 0)
        return die(ctx, "fit");

    kace_model *ml = NULL, *ms = NULL;
    if (kace_model_fit_rows(ctx, ds, rows, n, &linear, &ml) || kace_model_fit_rows(ctx, ds, rows, n, &slowdown, &ms))
        return die(ctx, "fit");
    /* One colocation per call, every measured pair in turn; the median of
     * PREDICT_PASSES passes, interleaving the two models so that a noisy
     * moment of the machine hits both. */
    volatile double sink = 0;
    double pass_linear[PREDICT_PASSES], pass_slowdown[PREDICT_PASSES];
    for (int pass = 0; pass < PREDICT_PASSES; pass++) {
        double t0 = bench_now();
        for (int r = 0; r < PREDICT_ROUNDS; r++)
            for (size_t i = 0; i < ds->n_colocations; i++) {
                const kace_colocation *c = &ds->colocations[i];
                double x[KACE_MAX_FEATURES], p;
                kace_features_group(ctx, ds, &kace_features_kace, c->workload, c->k, x);
                kace_model_predict(ctx, ml, x, 1, KACE_NORM_TRAIN, &p);
                sink += p;
            }
        pass_linear[pass] = (bench_now() - t0) * 1e9 / ((double)PREDICT_ROUNDS * (double)ds->n_colocations);
        t0 = bench_now();
        for (int r = 0; r < PREDICT_ROUNDS; r++)
            for (size_t i = 0; i < ds->n_colocations; i++) {
                const kace_colocation *c = &ds->colocations[i];
                double p, conf;
                kace_slowdown_predict(ctx, ms, ds, c->workload, c->k, &p, &conf, NULL);
                sink += p;
            }
        pass_slowdown[pass] = (bench_now() - t0) * 1e9 / ((double)PREDICT_ROUNDS * (double)ds->n_colocations);
    }
    qsort(pass_linear, PREDICT_PASSES, sizeof *pass_linear, bench_cmp_double);
    qsort(pass_slowdown, PREDICT_PASSES, sizeof *pass_slowdown, bench_cmp_double);
    double ns_linear = pass_linear[PREDICT_PASSES / 2], ns_slowdown = pass_slowdown[PREDICT_PASSES / 2];
    (void)sink;

    printf("training rows: %zu pairs (published split n_occur=10, seed 10); one thread\n", n);
    printf("%-34s %14s %18s\n", "model", "fit (median ms)", "predict (median ns/coloc)");
    printf("%-34s %14.3f %18.1f\n", "paper KACE (linear, LAPACKE)", fit_linear, ns_linear);
    printf("%-34s %14.3f %18.1f\n", "kace slowdown (ridge + trees)", fit_slowdown, ns_slowdown);
    printf("ratio slowdown / linear: fit %.1fx, predict %.1fx\n", fit_slowdown / fit_linear, ns_slowdown / ns_linear);
    printf("of the slowdown fit: ridge part with its 5-fold CV of alpha %.3f ms; with the monotone constraints fixed\n"
           "instead of chosen by 3-fold CV (6 more tree fits), the whole fit takes %.3f ms\n",
           fit_ridge, fit_fixed);
    printf("goals: fit < 50 ms: %s; predict < 1000 ns: %s\n", fit_slowdown < 50 ? "met" : "MISSED",
           ns_slowdown < 1000 ? "met" : "MISSED");
    free(rows);
    kace_model_free(&ml);
    kace_model_free(&ms);
    kace_splits_free(&splits);
    kace_dataset_free(&ds);
    kace_store_close(&store);
    kace_ctx_free(&ctx);
    remove(db);
    return 0;
}
