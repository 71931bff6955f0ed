/* Fitting a model on stored colocations: features, labels, then the fit. */
#include <stdlib.h>

#include "kace/model.h"

kace_status kace_model_fit_rows(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
                                const kace_fit_spec *spec, kace_model **out)
{
    *out = NULL;
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
