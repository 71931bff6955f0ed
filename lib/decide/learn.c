/* The closed learning loop: retraining on observations, drift (see
 * include/kace/learn.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kace/eval.h"
#include "kace/learn.h"
#include "kace/predictor.h"
#include "kace/protocol.h"

#define CV_FOLDS 5

kace_status kace_learn_append_observations(kace_ctx *ctx, kace_dataset *ds, const kace_observed_list *obs, int **rows,
                                           size_t *n_rows)
{
    *rows = NULL;
    *n_rows = 0;
    int *out = malloc((obs->n ? obs->n : 1) * sizeof *out);
    if (!out)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < obs->n; i++) {
        const kace_observed_colocation *o = &obs->items[i];
        bool usable = o->n_members >= 2 && o->n_members <= KACE_MAX_K;
        for (size_t j = 0; usable && j < o->n_members; j++)
            usable = o->members[j].mps_pct == 100 && o->members[j].throughput > 0;
        if (!usable)
            continue;
        kace_colocation c;
        memset(&c, 0, sizeof c);
        c.k = (int)o->n_members;
        for (int j = 0; j < c.k; j++) {
            c.workload[j] = kace_dataset_find(ds, o->members[j].workload);
            if (c.workload[j] < 0) {
                free(out);
                return kace_fail(ctx, KACE_ERR_NOT_FOUND, "observation %s/%s names workload '%s', which the dataset "
                                                          "does not hold",
                                 o->origin, o->origin_id ? o->origin_id : "-", o->members[j].workload);
            }
            c.mps_pct[j] = 100;
            c.throughput[j] = o->members[j].throughput;
        }
        kace_status st = kace_dataset_add_colocation(ctx, ds, &c);
        if (st) {
            free(out);
            return st;
        }
        out[n++] = (int)ds->n_colocations - 1;
    }
    *rows = out;
    *n_rows = n;
    return KACE_OK;
}

kace_status kace_learn_error(kace_ctx *ctx, const kace_model *m, const kace_dataset *ds, const int *rows, size_t n,
                             double *err)
{
    *err = NAN;
    double sum = 0;
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        const kace_colocation *c = &ds->colocations[rows[i]];
        double pred, y = kace_colocation_sum(c);
        kace_status st = kace_predict_group(ctx, kace_model_predictor(m), ds, c->workload, c->k, &pred, NULL, NULL);
        if (st)
            return st;
        if (y > 0) {
            sum += 100.0 * fabs(pred - y) / y;
            count++;
        }
    }
    if (count)
        *err = sum / (double)count;
    return KACE_OK;
}

void kace_learn_spec_like(const kace_model *m, kace_fit_spec *spec)
{
    memset(spec, 0, sizeof *spec);
    spec->kind = kace_model_get_kind(m);
    spec->features = kace_model_features(m);
    spec->search = (kace_forest_search){10, 5, 0, 1, 1.0};
    kace_slowdown_params_default(&spec->slowdown);
}

kace_status kace_learn_cv_error(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
                                const kace_fit_spec *spec, int n_folds, double *err)
{
    *err = NAN;
    kace_protocol_spec ps;
    kace_protocol_spec_default(&ps);
    ps.protocol = KACE_PROTO_KFOLD;
    ps.n_folds = n_folds;
    ps.min_candidates = 1;
    ps.train_pool = ps.test_pool = rows;
    ps.n_train_pool = ps.n_test_pool = n;
    kace_folds *folds = NULL;
    kace_status st = kace_protocol_folds(ctx, ds, &ps, &folds);
    double sum = 0;
    size_t count = 0;
    for (size_t f = 0; !st && f < folds->n; f++) {
        const kace_fold *x = &folds->items[f];
        kace_model *m = NULL;
        double e;
        /* Each fold's rows are predicted by a fit on the other folds only. */
        if (!(st = kace_model_fit_rows(ctx, ds, x->train, x->n_train, spec, &m)) &&
            !(st = kace_learn_error(ctx, m, ds, x->test, x->n_test, &e)) && !isnan(e)) {
            sum += e * (double)x->n_test;
            count += x->n_test;
        }
        kace_model_free(&m);
    }
    kace_folds_free(&folds);
    if (!st && count)
        *err = sum / (double)count;
    return st;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_of(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Outlier-robust training: a few wild reports (a broken agent, a forged
 * burst) must not bend the candidate. Each observation's log ratio of
 * observed to current-predicted sum is compared with the observations'
 * median; those further than 4 robust standard deviations (1.4826 MAD),
 * and at least 50% off (log 1.5), are left out. A shift that most
 * observations share (real drift) moves the median with it and is kept.
 * Without a current model, or with fewer than MIN_ROBUST observations,
 * every row is kept. Appends the rows kept to out at *n_out. */
#define MIN_ROBUST 8
static kace_status keep_consistent(kace_ctx *ctx, const kace_model *current, const kace_dataset *ds, const int *rows,
                                   size_t n, int *out, size_t *n_out)
{
    double *ratio = NULL, *scratch = NULL;
    kace_status st = KACE_OK;
    bool filter = current && n >= MIN_ROBUST;
    if (filter && (!(ratio = malloc(n * sizeof *ratio)) || !(scratch = malloc(n * sizeof *scratch)))) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; filter && i < n; i++) {
        const kace_colocation *c = &ds->colocations[rows[i]];
        double pred;
        if ((st = kace_predict_group(ctx, kace_model_predictor(current), ds, c->workload, c->k, &pred, NULL, NULL)))
            goto done;
        double y = kace_colocation_sum(c);
        ratio[i] = pred > 0 && y > 0 ? log(y / pred) : NAN;
    }
    double mid = 0, spread = INFINITY;
    if (filter) {
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (isfinite(ratio[i]))
                scratch[m++] = ratio[i];
        filter = m >= MIN_ROBUST;
        if (filter) {
            mid = median_of(scratch, m);
            for (size_t i = 0; i < m; i++)
                scratch[i] = fabs(scratch[i] - mid);
            spread = fmax(4 * 1.4826 * median_of(scratch, m), log(1.5));
        }
    }
    for (size_t i = 0; i < n; i++)
        if (!filter || (isfinite(ratio[i]) && fabs(ratio[i] - mid) <= spread))
            out[(*n_out)++] = rows[i];
done:
    free(ratio);
    free(scratch);
    return st;
}

void kace_retrain_options_default(kace_retrain_options *o)
{
    o->holdout = 0.25;
    o->min_holdout = 3;
}

kace_status kace_retrain(kace_ctx *ctx, kace_dataset *ds, const int *base, size_t n_base,
                         const kace_observed_list *obs, const kace_model *current, const kace_fit_spec *spec,
                         const kace_retrain_options *o, kace_model **candidate, kace_retrain_report *r)
{
    *candidate = NULL;
    memset(r, 0, sizeof *r);
    r->current_err = r->candidate_err = NAN;
    if (!spec && !current)
        return kace_fail(ctx, KACE_ERR_INVALID, "retraining needs a fit spec or a current model");
    if (!(o->holdout > 0 && o->holdout < 1) || o->min_holdout < 1)
        return kace_fail(ctx, KACE_ERR_INVALID, "the held-out fraction must be in (0, 1) and at least 1 held out");
    int *obs_rows = NULL, *fit = NULL;
    kace_status st = kace_learn_append_observations(ctx, ds, obs, &obs_rows, &r->n_observed);
    if (st)
        return st;
    size_t hold = (size_t)ceil(o->holdout * (double)r->n_observed);
    if (hold < o->min_holdout)
        hold = o->min_holdout;
    if (r->n_observed < 2 * o->min_holdout || hold >= r->n_observed) {
        st = kace_fail(ctx, KACE_ERR_INVALID,
                       "%zu usable observations (k >= 2, every member at 100%% MPS): retraining needs at least %zu, "
                       "half of them to hold out",
                       r->n_observed, 2 * o->min_holdout);
        goto done;
    }
    r->n_holdout = hold;
    r->n_obs_train = r->n_observed - hold;
    r->n_stored = n_base;
    fit = malloc((n_base + r->n_obs_train + 1) * sizeof *fit);
    if (!fit) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    memcpy(fit, base, n_base * sizeof *fit);
    size_t n_fit = n_base;
    if ((st = keep_consistent(ctx, current, ds, obs_rows, r->n_obs_train, fit, &n_fit)))
        goto done;
    r->n_outliers = r->n_obs_train - (n_fit - n_base);
    kace_fit_spec like;
    if (spec)
        like = *spec;
    else
        kace_learn_spec_like(current, &like);
    /* The held-out slice (the most recent observations) never reaches the fit. */
    const int *held = obs_rows + r->n_obs_train;
    if ((st = kace_model_fit_rows(ctx, ds, fit, n_fit, &like, candidate)) ||
        (st = kace_learn_error(ctx, *candidate, ds, held, hold, &r->candidate_err)) ||
        (current && (st = kace_learn_error(ctx, current, ds, held, hold, &r->current_err))))
        goto done;
    r->better = !current || r->candidate_err <= r->current_err;
done:
    if (st)
        kace_model_free(candidate);
    free(obs_rows);
    free(fit);
    return st;
}

kace_status kace_learn_drift(kace_ctx *ctx, kace_dataset *ds, const int *base, size_t n_base,
                             const kace_observed_list *obs, const kace_model *m, size_t window, kace_drift *out)
{
    memset(out, 0, sizeof *out);
    out->recent_err = out->cv_err = out->ratio = NAN;
    int *obs_rows = NULL, *fit = NULL;
    size_t n_obs = 0;
    kace_status st = kace_learn_append_observations(ctx, ds, obs, &obs_rows, &n_obs);
    if (st)
        return st;
    out->n_recent = n_obs < window ? n_obs : window;
    size_t older = n_obs - out->n_recent;
    fit = malloc((n_base + older + 1) * sizeof *fit);
    if (!fit) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    memcpy(fit, base, n_base * sizeof *fit);
    memcpy(fit + n_base, obs_rows, older * sizeof *fit);
    kace_fit_spec spec;
    kace_learn_spec_like(m, &spec);
    if ((st = kace_learn_cv_error(ctx, ds, fit, n_base + older, &spec, CV_FOLDS, &out->cv_err)) ||
        (st = kace_learn_error(ctx, m, ds, obs_rows + older, out->n_recent, &out->recent_err)))
        goto done;
    if (out->n_recent && out->cv_err > 0)
        out->ratio = out->recent_err / out->cv_err;
done:
    free(obs_rows);
    free(fit);
    return st;
}

/* Mean over ds's workloads of the model's choice among all the measured
 * colocations holding each (achieved / Oracle). */
static kace_status decision_quality(kace_ctx *ctx, const kace_dataset *ds, const kace_model *m, int *cand, double *q)
{
    double sum = 0;
    size_t n_targets = 0;
    for (size_t w = 0; w < ds->n_workloads; w++) {
        size_t n = 0;
        for (size_t r = 0; r < ds->n_colocations; r++)
            if (kace_colocation_has(&ds->colocations[r], (int)w))
                cand[n++] = (int)r;
        if (n < 2)
            continue;
        double s;
        kace_status st = kace_eval_choice(ctx, kace_model_predictor(m), KACE_NORM_TRAIN, ds, cand, n, &s);
        if (st)
            return st;
        sum += s;
        n_targets++;
    }
    *q = n_targets ? sum / (double)n_targets : NAN;
    return KACE_OK;
}

kace_status kace_learn_curve(kace_ctx *ctx, const kace_dataset *ds, const int *initial, size_t n_initial,
                             const int *stream, size_t n_stream, size_t every, const kace_fit_spec *spec,
                             const kace_retrain_options *o, kace_curve_point **points, size_t *n_points)
{
    *points = NULL;
    *n_points = 0;
    if (every < 1)
        return kace_fail(ctx, KACE_ERR_INVALID, "retrain every >= 1 observations");
    size_t cap = n_stream / every + 2;
    kace_curve_point *pts = calloc(cap, sizeof *pts);
    int *cand = malloc((ds->n_colocations ? ds->n_colocations : 1) * sizeof *cand);
    int *fit = malloc((n_initial + n_stream + 1) * sizeof *fit);
    kace_model *never = NULL, *current = NULL, *candidate = NULL;
    kace_status st = KACE_OK;
    size_t n = 0;
    if (!pts || !cand || !fit) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    if ((st = kace_model_fit_rows(ctx, ds, initial, n_initial, spec, &never)) ||
        (st = kace_model_fit_rows(ctx, ds, initial, n_initial, spec, &current)))
        goto done;
    memcpy(fit, initial, n_initial * sizeof *fit);
    for (size_t seen = 0;; seen += every) {
        if (seen > n_stream)
            seen = n_stream;
        kace_curve_point *p = &pts[n++];
        p->n_seen = seen;
        p->candidate_err = p->current_err = NAN;
        size_t hold = (size_t)ceil(o->holdout * (double)seen);
        hold = hold < o->min_holdout ? o->min_holdout : hold;
        if (seen > 0 && seen >= 2 * o->min_holdout && hold < seen) {
            /* The most recent `hold` observations are the held-out slice. */
            memcpy(fit + n_initial, stream, (seen - hold) * sizeof *fit);
            if ((st = kace_model_fit_rows(ctx, ds, fit, n_initial + seen - hold, spec, &candidate)) ||
                (st = kace_learn_error(ctx, candidate, ds, stream + seen - hold, hold, &p->candidate_err)) ||
                (st = kace_learn_error(ctx, current, ds, stream + seen - hold, hold, &p->current_err)))
                goto done;
            if (p->candidate_err <= p->current_err) {
                kace_model_free(&current);
                current = candidate;
                candidate = NULL;
                p->promoted = true;
            }
            kace_model_free(&candidate);
        }
        if ((st = decision_quality(ctx, ds, current, cand, &p->learner)) ||
            (st = decision_quality(ctx, ds, never, cand, &p->never)))
            goto done;
        if (seen == n_stream)
            break;
    }
    *points = pts;
    *n_points = n;
    pts = NULL;
done:
    kace_model_free(&never);
    kace_model_free(&current);
    kace_model_free(&candidate);
    free(pts);
    free(cand);
    free(fit);
    return st;
}
