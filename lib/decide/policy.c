/* Colocation policies and partner ranking. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kace/policy.h"

static const char *const policy_names[KACE_N_POLICIES] = {
    [KACE_POL_KACE] = "KACE",     [KACE_POL_XU] = "Xu",   [KACE_POL_ORACLE] = "Oracle", [KACE_POL_RANDOM] = "Random",
    [KACE_POL_MEMCAP] = "MEMCAP", [KACE_POL_SM] = "SM%", [KACE_POL_MEM] = "MEM%",      [KACE_POL_BEST_RULE] = "Best rule",
    [KACE_POL_SLOWDOWN] = "kace",
};

const char *kace_policy_name(kace_policy p)
{
    return (p >= 0 && p < KACE_N_POLICIES) ? policy_names[p] : "?";
}

int kace_policy_from_name(const char *name)
{
    for (int p = 0; p < KACE_N_POLICIES; p++)
        if (strcasecmp(name, policy_names[p]) == 0)
            return p;
    if (strcasecmp(name, "best-rule") == 0 || strcasecmp(name, "best_rule") == 0)
        return KACE_POL_BEST_RULE;
    if (strcasecmp(name, "sm") == 0)
        return KACE_POL_SM;
    if (strcasecmp(name, "mem") == 0)
        return KACE_POL_MEM;
    if (strcasecmp(name, "slowdown") == 0)
        return KACE_POL_SLOWDOWN;
    return -1;
}

/* The profile aggregate a rule ranks by, and whether lower is better. */
static double rule_value(const kace_dataset *ds, const kace_colocation *c, kace_metric m)
{
    double s = 0;
    for (int i = 0; i < c->k; i++)
        s += ds->workloads[c->workload[i]].metric[m];
    return kace_metric_is_percent(m) ? s / c->k : s;
}

kace_status kace_policy_pick_rule(kace_ctx *ctx, kace_policy p, const kace_dataset *ds, const int *rows, size_t n,
                                  size_t *pick)
{
    if (n == 0)
        return kace_fail(ctx, KACE_ERR_INVALID, "no candidate colocations to choose from");
    kace_metric metric;
    bool lower_is_better;
    switch (p) {
    case KACE_POL_MEMCAP: metric = KACE_M_MEMCAP; lower_is_better = true; break;
    case KACE_POL_SM: metric = KACE_M_SM_PCT; lower_is_better = false; break;
    case KACE_POL_MEM: metric = KACE_M_MEM_PCT; lower_is_better = true; break;
    case KACE_POL_ORACLE: metric = KACE_N_METRICS; lower_is_better = false; break;
    default: return kace_fail(ctx, KACE_ERR_INVALID, "policy %s is not a rule", kace_policy_name(p));
    }
    size_t best = 0;
    double best_v = 0;
    for (size_t i = 0; i < n; i++) {
        const kace_colocation *c = &ds->colocations[rows[i]];
        double v = metric == KACE_N_METRICS ? kace_colocation_sum(c) : rule_value(ds, c, metric);
        if (isnan(v))
            return kace_fail(ctx, KACE_ERR_INVALID, "policy %s needs metric %s of every candidate's workloads",
                             kace_policy_name(p), kace_metric_name(metric));
        if (i == 0 || (lower_is_better ? v < best_v : v > best_v)) {
            best = i;
            best_v = v;
        }
    }
    *pick = best;
    return KACE_OK;
}

kace_status kace_policy_pick_model(kace_ctx *ctx, const kace_predictor *p, kace_norm norm, const kace_dataset *ds,
                                   const int *rows, size_t n, size_t *pick)
{
    if (n == 0)
        return kace_fail(ctx, KACE_ERR_INVALID, "no candidate colocations to choose from");
    double *pred = malloc(n * sizeof *pred);
    if (!pred)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    kace_status st = kace_predict_rows(ctx, p, norm, ds, rows, n, pred);
    if (!st) {
        size_t best = 0;
        for (size_t i = 1; i < n; i++)
            if (pred[i] > pred[best])
                best = i;
        *pick = best;
    }
    free(pred);
    return st;
}

const char *kace_objective_name(kace_objective o)
{
    switch (o) {
    case KACE_OBJ_RAW: return "raw";
    case KACE_OBJ_NORMALIZED: return "normalized";
    case KACE_OBJ_FAIR: return "fair";
    default: return "?";
    }
}

int kace_objective_from_name(const char *name)
{
    for (int o = 0; o < KACE_N_OBJECTIVES; o++)
        if (name && strcmp(name, kace_objective_name((kace_objective)o)) == 0)
            return o;
    return -1;
}

double kace_objective_of(kace_objective o, const kace_dataset *ds, const int *group, int k, const double *throughput)
{
    double sum = 0, least = INFINITY;
    for (int i = 0; i < k; i++) {
        if (o == KACE_OBJ_RAW) {
            sum += throughput[i];
            continue;
        }
        double excl = ds->workloads[group[i]].metric[KACE_M_EXCLUSIVE];
        if (!(excl > 0))
            return NAN;
        sum += throughput[i] / excl;
        least = fmin(least, throughput[i] / excl);
    }
    return o == KACE_OBJ_FAIR ? least : sum;
}

double kace_objective_measured(kace_objective o, const kace_dataset *ds, const kace_colocation *c)
{
    return o == KACE_OBJ_RAW ? kace_colocation_sum(c) : kace_objective_of(o, ds, c->workload, c->k, c->throughput);
}

kace_status kace_predict_objective(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds, const int *group,
                                   int k, kace_objective o, double *value, double *confidence, double *member)
{
    double own[KACE_MAX_K], sum;
    double *m = member ? member : own;
    if (o != KACE_OBJ_RAW && !kace_predictor_can(p, KACE_PRED_MEMBERS))
        return kace_fail(ctx, KACE_ERR_UNSUPPORTED,
                         "the %s model predicts throughput sums only: the %s objective needs each member's "
                         "throughput (kace's slowdown model predicts it)",
                         kace_predictor_name(p), kace_objective_name(o));
    if (k < 1 || k > KACE_MAX_K)
        return kace_fail(ctx, KACE_ERR_INVALID, "a group has 1..%d workloads, not %d", KACE_MAX_K, k);
    kace_status st = kace_predict_group(ctx, p, ds, group, k, &sum, confidence, m);
    if (st)
        return st;
    *value = o == KACE_OBJ_RAW ? sum : kace_objective_of(o, ds, group, k, m);
    if (isnan(*value))
        return kace_fail(ctx, KACE_ERR_INVALID, "the %s objective needs every member's exclusive throughput",
                         kace_objective_name(o));
    return KACE_OK;
}

kace_status kace_policy_pick_objective(kace_ctx *ctx, const kace_predictor *p, kace_norm norm, kace_objective o,
                                       const kace_dataset *ds, const int *rows, size_t n, size_t *pick)
{
    if (o == KACE_OBJ_RAW || !kace_predictor_can(p, KACE_PRED_MEMBERS))
        return kace_policy_pick_model(ctx, p, norm, ds, rows, n, pick);
    if (n == 0)
        return kace_fail(ctx, KACE_ERR_INVALID, "no candidate colocations to choose from");
    double best = -INFINITY;
    *pick = 0;
    for (size_t i = 0; i < n; i++) {
        const kace_colocation *c = &ds->colocations[rows[i]];
        double v;
        kace_status st = kace_predict_objective(ctx, p, ds, c->workload, c->k, o, &v, NULL, NULL);
        if (st)
            return st;
        if (i == 0 || v > best) {
            best = v;
            *pick = i;
        }
    }
    return KACE_OK;
}

static int by_predicted_desc(const void *a, const void *b)
{
    const kace_partner *x = a, *y = b;
    if (x->predicted != y->predicted)
        return x->predicted < y->predicted ? 1 : -1;
    return x->workload - y->workload;
}

/* measured[w] = the measured sum of the first 100%/100% pair of target and
 * w, NaN when none: one pass over the colocations for every candidate. */
static void measured_pairs(const kace_dataset *ds, int target, kace_objective o, double *measured)
{
    for (size_t w = 0; w < ds->n_workloads; w++)
        measured[w] = NAN;
    for (size_t i = 0; i < ds->n_colocations; i++) {
        const kace_colocation *c = &ds->colocations[i];
        if (c->k != 2 || c->mps_pct[0] != 100 || c->mps_pct[1] != 100)
            continue;
        int partner = c->workload[0] == target ? c->workload[1] : (c->workload[1] == target ? c->workload[0] : -1);
        if (partner >= 0 && isnan(measured[partner]))
            measured[partner] = kace_objective_measured(o, ds, c);
    }
}

static bool has_profile(const kace_dataset *ds, const kace_feature_set *fs, int w)
{
    for (int j = 0; j < fs->n; j++)
        if (isnan(ds->workloads[w].metric[fs->metric[j]]))
            return false;
    return true;
}

kace_status kace_rank_partners(kace_ctx *ctx, const kace_dataset *ds, const kace_predictor *p, kace_norm norm, int target,
                               const int *among, size_t n_among, kace_partner *out, size_t *n_out)
{
    return kace_rank_partners_by(ctx, ds, p, norm, KACE_OBJ_RAW, target, among, n_among, out, n_out);
}

kace_status kace_rank_partners_by(kace_ctx *ctx, const kace_dataset *ds, const kace_predictor *p, kace_norm norm,
                                  kace_objective o, int target, const int *among, size_t n_among, kace_partner *out,
                                  size_t *n_out)
{
    *n_out = 0;
    const kace_feature_set *fs = kace_predictor_features(p);
    double x[KACE_MAX_FEATURES];
    if (target < 0 || (size_t)target >= ds->n_workloads)
        return kace_fail(ctx, KACE_ERR_NOT_FOUND, "unknown target workload");
    if (!has_profile(ds, fs, target)) {
        int group[1] = {target};
        return kace_features_group(ctx, ds, fs, group, 1, x); /* names the missing metric */
    }
    size_t n_cand = among ? n_among : ds->n_workloads;
    kace_group_ref *refs = malloc((n_cand ? n_cand : 1) * sizeof *refs);
    int *pairs = malloc((n_cand ? n_cand : 1) * 2 * sizeof *pairs);
    double *pred = malloc((n_cand ? n_cand : 1) * sizeof *pred);
    double *conf = malloc((n_cand ? n_cand : 1) * sizeof *conf);
    double *measured = malloc((ds->n_workloads ? ds->n_workloads : 1) * sizeof *measured);
    kace_status st = KACE_OK;
    if (!refs || !pairs || !pred || !conf || !measured) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    size_t n = 0;
    for (size_t i = 0; i < n_cand; i++) {
        int w = among ? among[i] : (int)i;
        if (w < 0 || (size_t)w >= ds->n_workloads) {
            st = kace_fail(ctx, KACE_ERR_NOT_FOUND, "candidate %zu is not a workload of the dataset", i);
            goto done;
        }
        if (!has_profile(ds, fs, w)) {
            if (among) { /* the user asked for it: say why it cannot be ranked */
                int group[2] = {target, w};
                st = kace_features_group(ctx, ds, fs, group, 2, x);
                goto done;
            }
            continue;
        }
        pairs[2 * n] = target;
        pairs[2 * n + 1] = w;
        refs[n] = (kace_group_ref){&pairs[2 * n], 2};
        n++;
    }
    measured_pairs(ds, target, o, measured);
    if (o == KACE_OBJ_RAW) {
        if (n && (st = kace_predict_batch(ctx, p, ds, refs, n, norm, pred, conf)))
            goto done;
    } else {
        for (size_t i = 0; i < n; i++)
            if ((st = kace_predict_objective(ctx, p, ds, refs[i].workload, 2, o, &pred[i], &conf[i], NULL)))
                goto done;
    }
    for (size_t i = 0; i < n; i++) {
        int w = pairs[2 * i + 1];
        out[i].workload = w;
        out[i].confidence = conf[i];
        out[i].predicted = pred[i];
        out[i].measured = measured[w];
        out[i].exclusive_sum = ds->workloads[target].metric[KACE_M_EXCLUSIVE] + ds->workloads[w].metric[KACE_M_EXCLUSIVE];
    }
    qsort(out, n, sizeof *out, by_predicted_desc);
    *n_out = n;
done:
    free(refs);
    free(pairs);
    free(pred);
    free(conf);
    free(measured);
    return st;
}
