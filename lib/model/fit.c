/* The models on summed features (linear and forest) behind the predictor
 * interface: fitting on stored colocations and predicting groups. */
#include <math.h>
#include <stdlib.h>

#include "fit.h"
#include "forest.h"
#include "model_internal.h"

static kace_status fit_features(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
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

/* The groups' summed features, one row each. */
static kace_status group_features(kace_ctx *ctx, const kace_model *m, const kace_dataset *ds,
                                  const kace_group_ref *g, size_t n, double **X)
{
    const kace_feature_set *fs = m->features;
    *X = malloc((n ? n : 1) * (size_t)fs->n * sizeof **X);
    if (!*X)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        kace_status st = kace_features_group(ctx, ds, fs, g[i].workload, g[i].k, *X + i * (size_t)fs->n);
        if (st)
            return st;
    }
    return KACE_OK;
}

static kace_status features_batch(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds,
                                  const kace_group_ref *g, size_t n, kace_norm norm, double *sum, double *confidence)
{
    (void)confidence; /* stays 1 */
    double *X;
    kace_status st = group_features(ctx, p->self, ds, g, n, &X);
    if (!st)
        st = kace_model_predict(ctx, p->self, X, n, norm, sum);
    free(X);
    return st;
}

static kace_status features_z(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds, const kace_group_ref *g,
                              size_t n, kace_norm norm, double *z)
{
    double *X;
    kace_status st = group_features(ctx, p->self, ds, g, n, &X);
    if (!st)
        st = kace_model_predict_z(ctx, p->self, X, n, norm, z);
    free(X);
    return st;
}

static kace_status features_predict(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds, const int *group,
                                    int k, double *sum, double *confidence, double *member)
{
    (void)member; /* a sum only */
    kace_group_ref g = {group, k};
    return features_batch(ctx, p, ds, &g, 1, KACE_NORM_TRAIN, sum, confidence);
}

static const kace_feature_set *features_of(const kace_predictor *p)
{
    return kace_model_features(p->self);
}

const kace_predictor_ops kace_linear_ops = {
    .name = "linear",
    .policy = "KACE",
    .caps = KACE_PRED_NORM,
    .max_k = KACE_MAX_K,
    .predict = features_predict,
    .predict_batch = features_batch,
    .predict_z = features_z,
    .features = features_of,
    .fit = fit_features,
};

const kace_predictor_ops kace_forest_ops = {
    .name = "forest",
    .policy = "Xu",
    .caps = KACE_PRED_NORM,
    .max_k = KACE_MAX_K,
    .predict = features_predict,
    .predict_batch = features_batch,
    .predict_z = features_z,
    .features = features_of,
    .fit = fit_features,
    .model = &kace_forest_model_ops,
};
