/* The advisor behind `kace serve` (include/kace/serve.h): its dataset,
 * model and options, and the score of placing a job on a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "advisor.h"
#include "kace/place.h"

void kace_advisor_options_default(kace_advisor_options *opt)
{
    opt->min_confidence = 0;
    opt->max_colocation = 3;
    opt->min_fraction = 0;
    opt->objective = -1;
}

kace_status kace_advisor_new(kace_ctx *ctx, kace_dataset **ds, kace_model **m, const kace_advisor_options *opt,
                             kace_advisor **out)
{
    *out = NULL;
    kace_advisor_options o;
    if (opt)
        o = *opt;
    else
        kace_advisor_options_default(&o);
    kace_status st = KACE_OK;
    if (!*ds || !*m)
        st = kace_fail(ctx, KACE_ERR_INVALID, "an advisor needs a dataset and a model");
    else if (!(o.min_confidence >= 0 && o.min_confidence <= 1) || !(o.min_fraction >= 0 && o.min_fraction <= 1))
        st = kace_fail(ctx, KACE_ERR_INVALID, "min_confidence and min_fraction must be in [0, 1]");
    else if (o.max_colocation < 2 || o.max_colocation > KACE_MAX_K)
        st = kace_fail(ctx, KACE_ERR_INVALID, "max_colocation must be 2..%d, not %d", KACE_MAX_K, o.max_colocation);
    else if (o.objective < -1 || o.objective >= KACE_N_OBJECTIVES)
        st = kace_fail(ctx, KACE_ERR_INVALID, "objective must be -1 (each endpoint's own) or a kace_objective, not %d",
                       o.objective);
    kace_advisor *a = st ? NULL : calloc(1, sizeof *a);
    if (!st && !a)
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    if (!st && (st = kace_measured_index_build(ctx, *ds, &a->measured))) {
        free(a);
        a = NULL;
    }
    if (st) {
        kace_dataset_free(ds);
        kace_model_free(m);
        return st;
    }
    a->ds = *ds;
    a->m = *m;
    a->opt = o;
    *ds = NULL;
    *m = NULL;
    *out = a;
    return KACE_OK;
}

void kace_advisor_free(kace_advisor **a)
{
    if (a && *a) {
        kace_dataset_free(&(*a)->ds);
        kace_model_free(&(*a)->m);
        kace_split_model_free(&(*a)->split);
        kace_measured_index_free(&(*a)->measured);
        free(*a);
        *a = NULL;
    }
}

void kace_advisor_set_split_model(kace_advisor *a, kace_split_model **split, size_t n_grids)
{
    kace_split_model_free(&a->split);
    a->split = *split;
    a->split_grids = a->split ? n_grids : 0;
    *split = NULL;
}

const kace_split_model *kace_advisor_split_model(const kace_advisor *a, size_t *n_grids)
{
    if (n_grids)
        *n_grids = a->split_grids;
    return a->split;
}

const kace_dataset *kace_advisor_dataset(const kace_advisor *a)
{
    return a->ds;
}

const kace_model *kace_advisor_model(const kace_advisor *a)
{
    return a->m;
}

const kace_predictor *kace_advisor_predictor(const kace_advisor *a)
{
    return kace_model_predictor(a->m);
}

const char *kace_advisor_policy(const kace_advisor *a)
{
    return kace_predictor_policy(kace_advisor_predictor(a));
}

double kace_advisor_measured_group(const kace_advisor *a, const int *group, int k)
{
    return kace_measured_index_group(a->measured, group, k);
}

double kace_advisor_measured_group_by(const kace_advisor *a, kace_objective o, const int *group, int k)
{
    return kace_measured_index_group_by(a->measured, o, group, k);
}

kace_objective kace_advisor_objective(const kace_advisor *a, kace_objective dflt)
{
    return a->opt.objective >= 0 ? (kace_objective)a->opt.objective : dflt;
}

kace_status kace_advisor_rank_partners(kace_ctx *ctx, const kace_advisor *a, kace_objective o, int target,
                                       const int *among, size_t n_among, kace_partner *out, size_t *n_out)
{
    /* The ranking reads the colocations only for the measured sums, which
     * the index holds: it is given the dataset without them (a view that
     * shares everything else) and the sums are filled in after.
     * tests/test_advisor_index.c holds it to the ranking on the full dataset. */
    kace_dataset view = *a->ds;
    view.colocations = NULL;
    view.n_colocations = 0;
    kace_status st = kace_rank_partners_by(ctx, &view, kace_advisor_predictor(a), KACE_NORM_TRAIN, o, target, among,
                                           n_among, out, n_out);
    for (size_t i = 0; !st && i < *n_out; i++)
        out[i].measured = kace_measured_index_pair_by(a->measured, o, target, out[i].workload);
    return st;
}

kace_status kace_serve_score_gpu(kace_ctx *ctx, const kace_advisor *a, kace_objective o, int job, const int *resident,
                                 int n_resident, int max_colocation, kace_gpu_score *out)
{
    memset(out, 0, sizeof *out);
    out->before = out->after = out->gain = out->job_fraction = NAN;
    out->confidence = NAN;
    if (n_resident + 1 > max_colocation) {
        snprintf(out->reason, sizeof out->reason, "full: %d workloads already (max_colocation %d)", n_resident,
                 max_colocation);
        return KACE_OK;
    }
    kace_gain g;
    /* normalized is kace_place_gain, the scorer the Slurm placer and the scheduler share */
    kace_status st = o == KACE_OBJ_NORMALIZED
                         ? kace_place_gain(ctx, kace_advisor_predictor(a), a->ds, resident, n_resident, job, NULL, &g)
                         : kace_place_gain_by(ctx, kace_advisor_predictor(a), a->ds, resident, n_resident, job, o, &g);
    if (st)
        return st;
    out->before = g.before;
    out->after = g.after;
    out->job_fraction = g.job_fraction;
    out->gain = g.gain;
    out->confidence = g.confidence;
    out->eligible = true;
    return KACE_OK;
}
