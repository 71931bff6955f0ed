/* The KACE paper's evaluation protocol (see include/kace/eval.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kace/eval.h"

void kace_eval_options_default(kace_eval_options *o)
{
    memset(o, 0, sizeof *o);
    o->mode = KACE_MODE_PAPER;
    o->with_xu = true;
    o->xu_search.n_iter = 10;
    o->xu_search.n_folds = 5;
    o->xu_search.seed = 0;
    o->xu_search.n_threads = 1; /* xgboost's own default is 2x slower on tiny data */
    o->xu_search.tree_scale = 0.05;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int by_name(const void *a, const void *b, void *ds_)
{
    const kace_dataset *ds = ds_;
    return strcmp(ds->workloads[*(const int *)a].name, ds->workloads[*(const int *)b].name);
}

/* The workloads that appear in ds's colocations, sorted by name. */
static kace_status list_targets(kace_ctx *ctx, const kace_dataset *ds, int **out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    bool *seen = calloc(ds->n_workloads ? ds->n_workloads : 1, sizeof *seen);
    int *t = malloc((ds->n_workloads ? ds->n_workloads : 1) * sizeof *t);
    if (!seen || !t) {
        free(seen);
        free(t);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < ds->n_colocations; i++)
        for (int j = 0; j < ds->colocations[i].k; j++)
            seen[ds->colocations[i].workload[j]] = true;
    size_t n = 0;
    for (size_t w = 0; w < ds->n_workloads; w++)
        if (seen[w])
            t[n++] = (int)w;
    free(seen);
    /* Insertion sort by name: at most a few hundred targets. */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && by_name(&t[j - 1], &t[j], (void *)ds) > 0; j--) {
            int tmp = t[j];
            t[j] = t[j - 1];
            t[j - 1] = tmp;
        }
    *out = t;
    *n_out = n;
    return KACE_OK;
}

typedef struct fitted {
    kace_model *kace, *xu;
    double kace_seconds, xu_seconds;
} fitted;

static double seconds_of(kace_ctx *ctx, kace_status *st, const kace_dataset *ds, const int *rows, size_t n,
                         const kace_fit_spec *spec, kace_model **out)
{
    double t0 = now_seconds();
    *st = kace_model_fit_rows(ctx, ds, rows, n, spec, out);
    return now_seconds() - t0;
}

static kace_status fit_models(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
                              const kace_eval_options *opt, uint64_t seed, fitted *f)
{
    memset(f, 0, sizeof *f);
    kace_status st;
    kace_fit_spec linear = {KACE_MODEL_LINEAR, &kace_features_kace, {0}};
    f->kace_seconds = seconds_of(ctx, &st, ds, rows, n, &linear, &f->kace);
    if (!st && opt->with_xu) {
        kace_fit_spec forest = {KACE_MODEL_FOREST, &kace_features_xu, opt->xu_search};
        forest.search.seed = opt->xu_search.seed ^ (seed * 0x9E3779B97F4A7C15ull);
        f->xu_seconds = seconds_of(ctx, &st, ds, rows, n, &forest, &f->xu);
    }
    if (st) {
        kace_model_free(&f->kace);
        kace_model_free(&f->xu);
    }
    return st;
}

static void fitted_free(fitted *f)
{
    kace_model_free(&f->kace);
    kace_model_free(&f->xu);
}

/* Scores every policy for one target's candidate rows. */
static kace_status score_target(kace_ctx *ctx, const kace_dataset *ds, const fitted *f, kace_norm norm,
                                const int *cand, size_t n, kace_target_score *out)
{
    for (int p = 0; p < KACE_N_POLICIES; p++)
        out->score[p] = NAN;
    out->n_candidates = (int)n;
    double oracle = 0, mean = 0;
    for (size_t i = 0; i < n; i++) {
        double s = kace_colocation_sum(&ds->colocations[cand[i]]);
        oracle = (i == 0 || s > oracle) ? s : oracle;
        mean += s / (double)n;
    }
    if (!(oracle > 0))
        return kace_fail(ctx, KACE_ERR_INVALID, "target %s: every candidate has zero throughput",
                         ds->workloads[out->target].name);
    size_t pick;
    kace_status st;
    out->score[KACE_POL_ORACLE] = 1.0;
    out->score[KACE_POL_RANDOM] = mean / oracle;
    static const kace_policy rules[] = {KACE_POL_MEMCAP, KACE_POL_SM, KACE_POL_MEM};
    for (size_t r = 0; r < 3; r++) {
        if ((st = kace_policy_pick_rule(ctx, rules[r], ds, cand, n, &pick)))
            return st;
        out->score[rules[r]] = kace_colocation_sum(&ds->colocations[cand[pick]]) / oracle;
    }
    double best = out->score[KACE_POL_RANDOM];
    for (size_t r = 0; r < 3; r++)
        best = out->score[rules[r]] > best ? out->score[rules[r]] : best;
    out->score[KACE_POL_BEST_RULE] = best;
    if ((st = kace_policy_pick_model(ctx, f->kace, norm, ds, cand, n, &pick)))
        return st;
    out->score[KACE_POL_KACE] = kace_colocation_sum(&ds->colocations[cand[pick]]) / oracle;
    if (f->xu) {
        if ((st = kace_policy_pick_model(ctx, f->xu, norm, ds, cand, n, &pick)))
            return st;
        out->score[KACE_POL_XU] = kace_colocation_sum(&ds->colocations[cand[pick]]) / oracle;
    }
    return KACE_OK;
}

/* MSE and R^2 of the predicted z-label over the test rows: paper mode uses
 * the test set's own statistics for features and label, clean mode the
 * training statistics. */
static kace_status test_error(kace_ctx *ctx, const kace_dataset *ds, const kace_model *m, kace_norm norm,
                              const int *rows, size_t n, double *mse, double *r2)
{
    *mse = *r2 = NAN;
    if (n < 2)
        return KACE_OK;
    const kace_feature_set *fs = kace_model_features(m);
    double *X = malloc(n * (size_t)fs->n * sizeof *X), *y = malloc(n * sizeof *y), *p = malloc(n * sizeof *p);
    kace_status st = KACE_OK;
    if (!X || !y || !p) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    kace_labels_build(ds, rows, n, y);
    if ((st = kace_features_build(ctx, ds, fs, rows, n, X)) || (st = kace_model_predict_z(ctx, m, X, n, norm, p)))
        goto done;
    double mu, sd;
    if (norm == KACE_NORM_CANDIDATES)
        kace_column_stats(y, n, 1, &mu, &sd);
    else
        kace_model_label_stats(m, &mu, &sd);
    double se = 0, tot = 0, zmean = 0;
    for (size_t i = 0; i < n; i++) {
        y[i] = sd > 0 ? (y[i] - mu) / sd : 0;
        zmean += y[i] / (double)n;
    }
    for (size_t i = 0; i < n; i++) {
        se += (y[i] - p[i]) * (y[i] - p[i]);
        tot += (y[i] - zmean) * (y[i] - zmean);
    }
    *mse = se / (double)n;
    *r2 = tot > 0 ? 1.0 - se / tot : NAN;
done:
    free(X);
    free(y);
    free(p);
    return st;
}

static kace_status grow_rows(kace_ctx *ctx, int **rows, size_t *cap, size_t n)
{
    if (n < *cap)
        return KACE_OK;
    size_t ncap = *cap ? *cap * 2 : 256;
    int *r = realloc(*rows, ncap * sizeof *r);
    if (!r)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    *rows = r;
    *cap = ncap;
    return KACE_OK;
}

/* Scores every target of one train/test partition. */
static kace_status score_targets(kace_ctx *ctx, const kace_dataset *ds, const fitted *f, kace_norm norm,
                                 const int *targets, size_t n_targets, const int *test, size_t n_test,
                                 kace_target_score **out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    kace_target_score *scores = calloc(n_targets ? n_targets : 1, sizeof *scores);
    int *cand = malloc((n_test ? n_test : 1) * sizeof *cand);
    kace_status st = KACE_OK;
    if (!scores || !cand) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    size_t n_scored = 0;
    for (size_t t = 0; t < n_targets; t++) {
        size_t n = 0;
        for (size_t i = 0; i < n_test; i++)
            if (kace_colocation_has(&ds->colocations[test[i]], targets[t]))
                cand[n++] = test[i];
        if (n == 0)
            continue; /* no candidate: the target is skipped */
        kace_target_score *ts = &scores[n_scored];
        ts->target = targets[t];
        if ((st = score_target(ctx, ds, f, norm, cand, n, ts)))
            goto done;
        n_scored++;
    }
    *out = scores;
    *n_out = n_scored;
    scores = NULL;
done:
    free(scores);
    free(cand);
    return st;
}

static void mean_scores(const kace_target_score *t, size_t n, double *score)
{
    for (int p = 0; p < KACE_N_POLICIES; p++) {
        double s = 0;
        for (size_t i = 0; i < n; i++)
            s += t[i].score[p];
        score[p] = n ? s / (double)n : NAN;
    }
}

kace_status kace_eval_splits(kace_ctx *ctx, const kace_dataset *ds, const kace_splits *splits,
                             const kace_eval_options *opt, kace_split_results **out)
{
    *out = NULL;
    kace_split_results *res = calloc(1, sizeof *res);
    int *targets = NULL, *train = NULL, *fit = NULL, *test = NULL;
    size_t n_targets = 0, cap_train = 0, cap_fit = 0, cap_test = 0, cap_res = 0;
    kace_status st;
    if (!res)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    if ((st = list_targets(ctx, ds, &targets, &n_targets)))
        goto fail;
    kace_norm norm = opt->mode == KACE_MODE_PAPER ? KACE_NORM_CANDIDATES : KACE_NORM_TRAIN;
    /* Splits come grouped by (n_occur, seed), in file order. */
    size_t i = 0;
    while (i < splits->n) {
        int n_occur = splits->rows[i].n_occur, seed = splits->rows[i].seed;
        size_t n_train = 0, n_fit = 0, n_test = 0;
        for (; i < splits->n && splits->rows[i].n_occur == n_occur && splits->rows[i].seed == seed; i++) {
            const kace_split_row *r = &splits->rows[i];
            if (r->train) {
                if ((st = grow_rows(ctx, &train, &cap_train, n_train)))
                    goto fail;
                train[n_train++] = r->colocation;
                if (r->paper_fit || opt->mode == KACE_MODE_CLEAN) {
                    if ((st = grow_rows(ctx, &fit, &cap_fit, n_fit)))
                        goto fail;
                    fit[n_fit++] = r->colocation;
                }
            } else {
                if ((st = grow_rows(ctx, &test, &cap_test, n_test)))
                    goto fail;
                test[n_test++] = r->colocation;
            }
        }
        if (res->n == cap_res) {
            cap_res = cap_res ? cap_res * 2 : 64;
            kace_split_result *items = realloc(res->items, cap_res * sizeof *items);
            if (!items) {
                st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
                goto fail;
            }
            res->items = items;
        }
        kace_split_result *r = &res->items[res->n];
        memset(r, 0, sizeof *r);
        r->n_occur = n_occur;
        r->seed = seed;
        r->n_train = n_train;
        r->n_fit = n_fit;
        r->n_test = n_test;
        fitted f;
        if ((st = fit_models(ctx, ds, fit, n_fit, opt, (uint64_t)seed, &f))) {
            kace_status inner = st;
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", kace_errmsg(ctx));
            st = kace_fail(ctx, inner, "n_occur=%d seed=%d: %s", n_occur, seed, msg);
            goto fail;
        }
        r->fit_seconds = f.kace_seconds;
        r->xu_fit_seconds = f.xu_seconds;
        st = score_targets(ctx, ds, &f, norm, targets, n_targets, test, n_test, &r->targets, &r->n_targets);
        if (!st)
            st = test_error(ctx, ds, f.kace, norm, test, n_test, &r->mse, &r->r2);
        r->xu_mse = r->xu_r2 = NAN;
        if (!st && f.xu)
            st = test_error(ctx, ds, f.xu, norm, test, n_test, &r->xu_mse, &r->xu_r2);
        fitted_free(&f);
        res->n++; /* owns r->targets from here on */
        if (st)
            goto fail;
        mean_scores(r->targets, r->n_targets, r->score);
    }
    free(targets);
    free(train);
    free(fit);
    free(test);
    *out = res;
    return KACE_OK;
fail:
    free(targets);
    free(train);
    free(fit);
    free(test);
    kace_split_results_free(&res);
    return st;
}

void kace_split_results_free(kace_split_results **r)
{
    if (!r || !*r)
        return;
    for (size_t i = 0; i < (*r)->n; i++)
        free((*r)->items[i].targets);
    free((*r)->items);
    free(*r);
    *r = NULL;
}

double kace_eval_mean(const kace_split_results *r, int n_occur, kace_policy p)
{
    double s = 0;
    int n = 0;
    for (size_t i = 0; i < r->n; i++)
        if (r->items[i].n_occur == n_occur && !isnan(r->items[i].score[p])) {
            s += r->items[i].score[p];
            n++;
        }
    return n ? s / n : NAN;
}

kace_status kace_eval_unseen(kace_ctx *ctx, const kace_dataset *ds, const kace_eval_options *opt,
                             kace_target_score **out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    int *targets = NULL, *train = NULL, *test = NULL;
    size_t n_targets = 0;
    kace_target_score *scores = NULL;
    kace_status st;
    if ((st = list_targets(ctx, ds, &targets, &n_targets)))
        return st;
    size_t nc = ds->n_colocations ? ds->n_colocations : 1;
    train = malloc(nc * sizeof *train);
    test = malloc(nc * sizeof *test);
    scores = calloc(n_targets ? n_targets : 1, sizeof *scores);
    if (!train || !test || !scores) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    kace_norm norm = opt->mode == KACE_MODE_PAPER ? KACE_NORM_CANDIDATES : KACE_NORM_TRAIN;
    size_t n_scored = 0;
    for (size_t t = 0; t < n_targets; t++) {
        const char *family = ds->workloads[targets[t]].family;
        size_t n_train = 0, n_test = 0;
        for (size_t i = 0; i < ds->n_colocations; i++) {
            const kace_colocation *c = &ds->colocations[i];
            bool same_family = false;
            for (int j = 0; j < c->k; j++)
                same_family |= strcmp(ds->workloads[c->workload[j]].family, family) == 0;
            if (!same_family)
                train[n_train++] = (int)i;
            if (kace_colocation_has(c, targets[t]))
                test[n_test++] = (int)i;
        }
        fitted f;
        if ((st = fit_models(ctx, ds, train, n_train, opt, (uint64_t)t + 1, &f))) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", kace_errmsg(ctx));
            st = kace_fail(ctx, st, "unseen target %s: %s", ds->workloads[targets[t]].name, msg);
            goto done;
        }
        scores[n_scored].target = targets[t];
        st = score_target(ctx, ds, &f, norm, test, n_test, &scores[n_scored]);
        fitted_free(&f);
        if (st)
            goto done;
        n_scored++;
    }
    *out = scores;
    *n_out = n_scored;
    scores = NULL;
done:
    free(targets);
    free(train);
    free(test);
    free(scores);
    return st;
}
