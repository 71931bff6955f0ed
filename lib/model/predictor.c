/* The predictor interface (include/kace/predictor.h): the one kind table
 * and the calls every consumer makes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fit.h"
#include "model_internal.h"
#include "pressure.h"
#include "slowdown.h"
#include "stacked.h"

/* The one place that knows the model kinds. */
static const kace_predictor_ops *const kinds[] = {
    [KACE_MODEL_LINEAR] = &kace_linear_ops,
    [KACE_MODEL_FOREST] = &kace_forest_ops,
    [KACE_MODEL_SLOWDOWN] = &kace_slowdown_ops,
    [KACE_MODEL_PRESSURE] = &kace_pressure_ops,
    [KACE_MODEL_STACKED] = &kace_stacked_ops,
};
enum { N_KINDS = sizeof kinds / sizeof kinds[0] };

const kace_predictor_ops *kace_model_kind_ops(kace_model_kind kind)
{
    return (int)kind >= 0 && (int)kind < N_KINDS ? kinds[kind] : NULL;
}

const char *kace_model_kind_name(kace_model_kind kind)
{
    const kace_predictor_ops *ops = kace_model_kind_ops(kind);
    return ops ? ops->name : "?";
}

int kace_model_kind_from_name(const char *name)
{
    for (int k = 0; k < N_KINDS; k++)
        if (name && strcmp(name, kinds[k]->name) == 0)
            return k;
    return -1;
}

const kace_predictor *kace_model_predictor(const kace_model *m)
{
    return m ? &m->predictor : NULL;
}

kace_status kace_model_fit_rows(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
                                const kace_fit_spec *spec, kace_model **out)
{
    *out = NULL;
    const kace_predictor_ops *ops = kace_model_kind_ops(spec->kind);
    if (!ops || !ops->fit)
        return kace_fail(ctx, KACE_ERR_INVALID, "unknown model kind %d", (int)spec->kind);
    return ops->fit(ctx, ds, rows, n, spec, out);
}

kace_status kace_predictor_new(kace_ctx *ctx, const kace_predictor_ops *ops, void *self, kace_predictor **out)
{
    *out = NULL;
    if (!ops || !ops->name || !ops->predict)
        return kace_fail(ctx, KACE_ERR_INVALID, "a predictor needs a name and a predict function");
    kace_predictor *p = malloc(sizeof *p);
    if (!p)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    p->ops = ops;
    p->self = self;
    *out = p;
    return KACE_OK;
}

void kace_predictor_free(kace_predictor **p)
{
    if (!p || !*p)
        return;
    if ((*p)->ops->free)
        (*p)->ops->free((*p)->self);
    free(*p);
    *p = NULL;
}

const char *kace_predictor_name(const kace_predictor *p)
{
    return p->ops->name;
}

const char *kace_predictor_policy(const kace_predictor *p)
{
    return p->ops->policy ? p->ops->policy : p->ops->name;
}

bool kace_predictor_can(const kace_predictor *p, unsigned caps)
{
    return p && (p->ops->caps & caps) == caps;
}

const kace_feature_set *kace_predictor_features(const kace_predictor *p)
{
    return p->ops->features ? p->ops->features(p) : &kace_features_kace;
}

kace_status kace_predict_group(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds, const int *group,
                               int k, double *sum, double *confidence, double *member)
{
    if (confidence)
        *confidence = 1;
    if (member)
        for (int i = 0; i < k; i++)
            member[i] = NAN;
    if (k < 1 || k > p->ops->max_k)
        return kace_fail(ctx, KACE_ERR_INVALID, "the %s model predicts groups of 1..%d workloads, not %d",
                         p->ops->name, p->ops->max_k, k);
    return p->ops->predict(ctx, p, ds, group, k, sum, confidence, member);
}

kace_status kace_predict_batch(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds,
                               const kace_group_ref *groups, size_t n, kace_norm norm, double *sum,
                               double *confidence)
{
    if (p->ops->predict_batch) {
        if (confidence)
            for (size_t i = 0; i < n; i++)
                confidence[i] = 1;
        return p->ops->predict_batch(ctx, p, ds, groups, n, norm, sum, confidence);
    }
    kace_status st = KACE_OK;
    for (size_t i = 0; i < n && !st; i++)
        st = kace_predict_group(ctx, p, ds, groups[i].workload, groups[i].k, &sum[i], confidence ? &confidence[i] : NULL,
                                NULL);
    return st;
}

static kace_status rows_refs(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n, kace_group_ref **out)
{
    *out = malloc((n ? n : 1) * sizeof **out);
    if (!*out)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const kace_colocation *c = &ds->colocations[rows[i]];
        (*out)[i] = (kace_group_ref){c->workload, c->k};
    }
    return KACE_OK;
}

kace_status kace_predict_rows(kace_ctx *ctx, const kace_predictor *p, kace_norm norm, const kace_dataset *ds,
                              const int *rows, size_t n, double *pred)
{
    kace_group_ref *refs;
    kace_status st = rows_refs(ctx, ds, rows, n, &refs);
    if (!st)
        st = kace_predict_batch(ctx, p, ds, refs, n, norm, pred, NULL);
    free(refs);
    return st;
}

kace_status kace_predict_rows_z(kace_ctx *ctx, const kace_predictor *p, kace_norm norm, const kace_dataset *ds,
                                const int *rows, size_t n, double label_mean, double label_std, double *z)
{
    kace_group_ref *refs;
    kace_status st = rows_refs(ctx, ds, rows, n, &refs);
    if (!st && p->ops->predict_z) {
        st = p->ops->predict_z(ctx, p, ds, refs, n, norm, z);
    } else if (!st && !(st = kace_predict_batch(ctx, p, ds, refs, n, norm, z, NULL))) {
        /* It predicts sums directly: z-score them like the labels. */
        for (size_t i = 0; i < n; i++)
            z[i] = label_std > 0 ? (z[i] - label_mean) / label_std : 0;
    }
    free(refs);
    return st;
}

void kace_predictor_coverage(const kace_predictor *p, const kace_dataset *ds, const int *group, int k,
                             kace_coverage *out)
{
    *out = (kace_coverage){.coverage = 1, .member = -1, .value = NAN, .lo = NAN, .hi = NAN};
    if (p->ops->coverage)
        p->ops->coverage(p, ds, group, k, out);
}

const kace_metric *kace_profile_metrics(int *n)
{
    return kace_slowdown_needed_metrics(n);
}

kace_status kace_model_predict_rows(kace_ctx *ctx, const kace_model *m, kace_norm norm, const kace_dataset *ds,
                                    const int *rows, size_t n, double *pred)
{
    return kace_predict_rows(ctx, kace_model_predictor(m), norm, ds, rows, n, pred);
}
