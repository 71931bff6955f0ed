/* Fitting a model on stored colocations: features, labels, then the fit. */
#include <stdlib.h>

#include "kace/model.h"

kace_status kace_model_fit_rows(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
                                const kace_fit_spec *spec, kace_model **out)
{
    *out = NULL;
    if (spec->kind == KACE_MODEL_SLOWDOWN) {
        if (rows)
            return kace_model_fit_slowdown(ctx, ds, rows, n, &spec->slowdown, out);
        int *all = malloc((ds->n_colocations ? ds->n_colocations : 1) * sizeof *all);
        if (!all)
            return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < ds->n_colocations; i++)
            all[i] = (int)i;
        kace_status st = kace_model_fit_slowdown(ctx, ds, all, ds->n_colocations, &spec->slowdown, out);
        free(all);
        return st;
    }
    const kace_feature_set *fs = spec->features;
    size_t n_rows = rows ? n : ds->n_colocations;
    int *all = NULL;
    double *X = malloc((n_rows ? n_rows : 1) * (size_t)fs->n * sizeof *X);
    double *y = malloc((n_rows ? n_rows : 1) * sizeof *y);
    kace_status st = KACE_OK;
    if (!rows) {
        all = malloc((n_rows ? n_rows : 1) * sizeof *all);
        if (all)
            for (size_t i = 0; i < n_rows; i++)
                all[i] = (int)i;
        rows = all;
    }
    if (!X || !y || !rows) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    kace_labels_build(ds, rows, n_rows, y);
    if ((st = kace_features_build(ctx, ds, fs, rows, n_rows, X)))
        goto done;
    if (spec->kind == KACE_MODEL_FOREST)
        st = kace_model_fit_forest_search(ctx, fs, X, y, n_rows, &spec->search, NULL, out);
    else
        st = kace_model_fit_linear(ctx, fs, X, y, n_rows, out);
done:
    free(all);
    free(X);
    free(y);
    return st;
}

kace_status kace_model_predict_rows(kace_ctx *ctx, const kace_model *m, kace_norm norm, const kace_dataset *ds,
                                    const int *rows, size_t n, double *pred)
{
    kace_status st = KACE_OK;
    if (kace_model_get_kind(m) == KACE_MODEL_SLOWDOWN) {
        for (size_t i = 0; i < n && !st; i++) {
            const kace_colocation *c = &ds->colocations[rows[i]];
            st = kace_slowdown_predict(ctx, m, ds, c->workload, c->k, &pred[i], NULL, NULL);
        }
        return st;
    }
    const kace_feature_set *fs = kace_model_features(m);
    double *X = malloc((n ? n : 1) * (size_t)fs->n * sizeof *X);
    if (!X)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    if (!(st = kace_features_build(ctx, ds, fs, rows, n, X)))
        st = kace_model_predict(ctx, m, X, n, norm, pred);
    free(X);
    return st;
}
