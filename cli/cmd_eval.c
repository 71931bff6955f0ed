/* kace eval: the KACE paper's experiments, printed, as CSV and as figures. */
#include <getopt.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "figures.h"
#include "kace/protocol.h"

static const kace_policy shown[] = {KACE_POL_SLOWDOWN, KACE_POL_KACE, KACE_POL_XU,  KACE_POL_BEST_RULE,
                                    KACE_POL_MEMCAP,   KACE_POL_MEM,  KACE_POL_SM, KACE_POL_RANDOM};
#define N_SHOWN (sizeof shown / sizeof *shown)

static double seconds_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) * 1e-9;
}

static FILE *open_out(const char *dir, const char *name)
{
    if (!dir)
        return NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        fprintf(stderr, "kace: cannot write %s\n", path);
    return f;
}

static void print_header(void)
{
    printf("%7s", "n_occur");
    for (size_t p = 0; p < N_SHOWN; p++)
        printf(" %9s", kace_policy_name(shown[p]));
    printf(" %8s %8s %9s %8s %8s %9s\n", "MSE", "R2", "fit_ms", "n_fit", "kace_R2", "kace_MAE%");
}

/* Mean of a per-split field over the seeds of one n_occur (every split
 * when n_occur < 0), ignoring NaN. */
static double mean_field(const kace_split_results *r, int n_occur, size_t offset)
{
    double s = 0;
    int n = 0;
    for (size_t i = 0; i < r->n; i++)
        if (n_occur < 0 || r->items[i].n_occur == n_occur) {
            double v = *(const double *)((const char *)&r->items[i] + offset);
            if (!isnan(v)) {
                s += v;
                n++;
            }
        }
    return n ? s / n : NAN;
}

static double mean_n_fit(const kace_split_results *r, int n_occur)
{
    double s = 0;
    int c = 0;
    for (size_t i = 0; i < r->n; i++)
        if (r->items[i].n_occur == n_occur) {
            s += (double)r->items[i].n_fit;
            c++;
        }
    return c ? s / c : 0;
}

static void n_occur_range(const kace_split_results *r, int *lo, int *hi)
{
    *lo = 1 << 30;
    *hi = -1;
    for (size_t i = 0; i < r->n; i++) {
        if (r->items[i].n_occur < *lo)
            *lo = r->items[i].n_occur;
        if (r->items[i].n_occur > *hi)
            *hi = r->items[i].n_occur;
    }
}

/* Per-target means over seeds at one n_occur: fills score[target][policy]. */
static int per_target(const kace_split_results *r, int n_occur, size_t n_workloads, double *score, int *count)
{
    memset(count, 0, n_workloads * sizeof *count);
    for (size_t w = 0; w < n_workloads * KACE_N_POLICIES; w++)
        score[w] = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (r->items[i].n_occur != n_occur)
            continue;
        for (size_t t = 0; t < r->items[i].n_targets; t++) {
            const kace_target_score *ts = &r->items[i].targets[t];
            count[ts->target]++;
            for (int p = 0; p < KACE_N_POLICIES; p++)
                score[(size_t)ts->target * KACE_N_POLICIES + (size_t)p] += ts->score[p];
        }
    }
    int n = 0;
    for (size_t w = 0; w < n_workloads; w++)
        if (count[w]) {
            n++;
            for (int p = 0; p < KACE_N_POLICIES; p++)
                score[w * KACE_N_POLICIES + (size_t)p] /= count[w];
        }
    return n;
}

static int report_splits(const kace_dataset *ds, const kace_split_results *r, const char *mode, const char *origin,
                         const eval_request *req, double seconds)
{
    int lo, hi;
    n_occur_range(r, &lo, &hi);
    printf("\n== Partner choice on the %s splits, %s mode (normalized throughput sum, mean of %s) ==\n",
           strcmp(origin, "published") ? "made" : "published", mode, "5 seeds x targets");
    print_header();
    for (int n = lo; n <= hi; n++) {
        printf("%7d", n);
        for (size_t p = 0; p < N_SHOWN; p++)
            printf(" %9.3f", kace_eval_mean(r, n, shown[p]));
        printf(" %8.3f %8.3f %9.3f %8.1f %8.3f %9.2f\n", mean_field(r, n, offsetof(kace_split_result, mse)),
               mean_field(r, n, offsetof(kace_split_result, r2)),
               1e3 * mean_field(r, n, offsetof(kace_split_result, fit_seconds)), mean_n_fit(r, n),
               mean_field(r, n, offsetof(kace_split_result, slowdown_r2)),
               mean_field(r, n, offsetof(kace_split_result, slowdown_mae_pct)));
    }
    printf("(%zu train/test splits evaluated in %.3f s; kace = the slowdown model, KACE = the paper's linear model;\n"
           " kace_MAE%% = per-workload |predicted - measured| throughput in %% of its exclusive throughput)\n",
           r->n, seconds);
    printf("kace confidence: relative error of the predicted sum %.1f%% where confidence >= median, %.1f%% below "
           "(mean over splits)\n",
           mean_field(r, -1, offsetof(kace_split_result, slowdown_err_confident)),
           mean_field(r, -1, offsetof(kace_split_result, slowdown_err_unsure)));

    /* Per target at n_occur = 3 (paper Fig. 5). */
    double *score = malloc(ds->n_workloads * KACE_N_POLICIES * sizeof *score);
    int *count = malloc(ds->n_workloads * sizeof *count);
    if (!score || !count) {
        free(score);
        free(count);
        return -1;
    }
    int fig5_n = lo <= 3 && hi >= 3 ? 3 : lo;
    per_target(r, fig5_n, ds->n_workloads, score, count);
    printf("\nper target at n_occur=%d (mean over seeds):\n%-36s %9s %9s %9s %9s\n", fig5_n, "target", "kace",
           "KACE", "Xu", "MEMCAP");
    int kace_best = 0, n_targets = 0;
    for (size_t w = 0; w < ds->n_workloads; w++) {
        if (!count[w])
            continue;
        const double *s = &score[w * KACE_N_POLICIES];
        n_targets++;
        if (s[KACE_POL_KACE] > s[KACE_POL_MEMCAP] && (isnan(s[KACE_POL_XU]) || s[KACE_POL_KACE] > s[KACE_POL_XU]))
            kace_best++;
        printf("%-36s %9.3f %9.3f %9.3f %9.3f\n", ds->workloads[w].name, s[KACE_POL_SLOWDOWN], s[KACE_POL_KACE],
               s[KACE_POL_XU], s[KACE_POL_MEMCAP]);
    }
    printf("KACE strictly best of {KACE, Xu, MEMCAP} for %d of %d targets\n", kace_best, n_targets);

    if (req->out_dir) {
        char name[128];
        snprintf(name, sizeof name, "splits_%s.csv", mode);
        FILE *f = open_out(req->out_dir, name);
        if (f) {
            fprintf(f, "mode,n_occur,seed,n_train,n_fit,n_test,n_targets");
            for (int p = 0; p < KACE_N_POLICIES; p++)
                fprintf(f, ",%s", kace_policy_name(p));
            fprintf(f, ",mse,r2,xu_mse,xu_r2,fit_seconds,xu_fit_seconds,kace_mse,kace_r2,kace_mae_pct,kace_fit_seconds,"
                       "kace_err_confident_pct,kace_err_unsure_pct\n");
            for (size_t i = 0; i < r->n; i++) {
                const kace_split_result *s = &r->items[i];
                fprintf(f, "%s,%d,%d,%zu,%zu,%zu,%zu", mode, s->n_occur, s->seed, s->n_train, s->n_fit, s->n_test,
                        s->n_targets);
                for (int p = 0; p < KACE_N_POLICIES; p++)
                    fprintf(f, ",%.6f", s->score[p]);
                fprintf(f, ",%.6f,%.6f,%.6f,%.6f,%.9f,%.6f,%.6f,%.6f,%.6f,%.6f,%.4f,%.4f\n", s->mse, s->r2, s->xu_mse,
                        s->xu_r2, s->fit_seconds, s->xu_fit_seconds, s->slowdown_mse, s->slowdown_r2,
                        s->slowdown_mae_pct, s->slowdown_fit_seconds, s->slowdown_err_confident,
                        s->slowdown_err_unsure);
            }
            fclose(f);
        }
        snprintf(name, sizeof name, "summary_%s.csv", mode);
        f = open_out(req->out_dir, name);
        if (f) {
            fprintf(f, "n_occur");
            for (size_t p = 0; p < N_SHOWN; p++)
                fprintf(f, ",%s", kace_policy_name(shown[p]));
            fprintf(f, ",mse,r2,fit_ms,n_fit\n");
            for (int n = lo; n <= hi; n++) {
                fprintf(f, "%d", n);
                for (size_t p = 0; p < N_SHOWN; p++)
                    fprintf(f, ",%.6f", kace_eval_mean(r, n, shown[p]));
                fprintf(f, ",%.6f,%.6f,%.6f,%.1f\n", mean_field(r, n, offsetof(kace_split_result, mse)),
                        mean_field(r, n, offsetof(kace_split_result, r2)),
                        1e3 * mean_field(r, n, offsetof(kace_split_result, fit_seconds)), mean_n_fit(r, n));
            }
            fclose(f);
        }
        snprintf(name, sizeof name, "targets_%s_n%d.csv", mode, fig5_n);
        f = open_out(req->out_dir, name);
        if (f) {
            fprintf(f, "target");
            for (size_t p = 0; p < N_SHOWN; p++)
                fprintf(f, ",%s", kace_policy_name(shown[p]));
            fprintf(f, "\n");
            for (size_t w = 0; w < ds->n_workloads; w++) {
                if (!count[w])
                    continue;
                fprintf(f, "%s", ds->workloads[w].name);
                for (size_t p = 0; p < N_SHOWN; p++)
                    fprintf(f, ",%.6f", score[w * KACE_N_POLICIES + shown[p]]);
                fprintf(f, "\n");
            }
            fclose(f);
        }
    }
    free(score);
    free(count);
    return 0;
}

static void report_targets(const kace_dataset *ds, const kace_target_score *t, size_t n, const char *title,
                           const char *mode, const char *csv_name, const eval_request *req, double seconds)
{
    printf("\n== %s, %s mode (%zu targets, %.3f s) ==\n", title, mode, n, seconds);
    printf("%-36s %5s", "target", "cands");
    for (size_t p = 0; p < N_SHOWN; p++)
        printf(" %9s", kace_policy_name(shown[p]));
    printf("\n");
    /* Means over the scored targets: one with too few training rows has NaN scores. */
    double mean[KACE_N_POLICIES] = {0}, mean16[KACE_N_POLICIES] = {0};
    int n_mean[KACE_N_POLICIES] = {0}, n_mean16[KACE_N_POLICIES] = {0}, n16 = 0;
    size_t unscored = 0;
    for (size_t i = 0; i < n; i++) {
        printf("%-36s %5d", ds->workloads[t[i].target].name, t[i].n_candidates);
        bool b16 = ds->workloads[t[i].target].batch == 16;
        n16 += b16;
        unscored += t[i].n_train < KACE_EVAL_MIN_TRAIN;
        for (size_t p = 0; p < N_SHOWN; p++) {
            double v = t[i].score[shown[p]];
            printf(" %9.3f", v);
            if (isnan(v))
                continue;
            mean[shown[p]] += v;
            n_mean[shown[p]]++;
            if (b16) {
                mean16[shown[p]] += v;
                n_mean16[shown[p]]++;
            }
        }
        printf("\n");
    }
    printf("%-36s %5s", "mean", "");
    for (size_t p = 0; p < N_SHOWN; p++)
        printf(" %9.3f", n_mean[shown[p]] ? mean[shown[p]] / n_mean[shown[p]] : NAN);
    printf("\n");
    if (n16) {
        printf("%-36s %5s", "mean of batch-16 targets", "");
        for (size_t p = 0; p < N_SHOWN; p++)
            printf(" %9.3f", n_mean16[shown[p]] ? mean16[shown[p]] / n_mean16[shown[p]] : NAN);
        printf("\n");
    }
    if (unscored) {
        printf("(%zu target(s) not scored, their means left out: fewer than %d colocations without the target's "
               "family to fit on:",
               unscored, KACE_EVAL_MIN_TRAIN);
        for (size_t i = 0; i < n; i++)
            if (t[i].n_train < KACE_EVAL_MIN_TRAIN)
                printf(" %s (%zu)", ds->workloads[t[i].target].name, t[i].n_train);
        printf(")\n");
    }
    FILE *f = open_out(req->out_dir, csv_name);
    if (f) {
        fprintf(f, "target,candidates");
        for (size_t p = 0; p < N_SHOWN; p++)
            fprintf(f, ",%s", kace_policy_name(shown[p]));
        fprintf(f, "\n");
        for (size_t i = 0; i < n; i++) {
            fprintf(f, "%s,%d", ds->workloads[t[i].target].name, t[i].n_candidates);
            for (size_t p = 0; p < N_SHOWN; p++)
                fprintf(f, ",%.6f", t[i].score[shown[p]]);
            fprintf(f, "\n");
        }
        fclose(f);
    }
}

/* kace's model is stochastic (row subsampling, CV folds), so its scores
 * can be averaged over several seeds: the other runs fit kace's model (and
 * the cheap linear one) again with the next seeds, their kace fields are
 * summed into the first run's and divided at the end. The splits come in
 * the same order every run. */
static void add_slowdown_targets(kace_target_score *a, const kace_target_score *b, size_t n, double scale)
{
    for (size_t t = 0; t < n; t++)
        a[t].score[KACE_POL_SLOWDOWN] = (a[t].score[KACE_POL_SLOWDOWN] + (b ? b[t].score[KACE_POL_SLOWDOWN] : 0)) * scale;
}

static void add_slowdown_splits(kace_split_results *a, const kace_split_results *b, double scale)
{
    for (size_t i = 0; i < a->n; i++) {
        kace_split_result *x = &a->items[i];
        const kace_split_result *y = b ? &b->items[i] : NULL;
#define ADD(field) x->field = (x->field + (y ? y->field : 0)) * scale
        ADD(score[KACE_POL_SLOWDOWN]);
        ADD(slowdown_mse);
        ADD(slowdown_r2);
        ADD(slowdown_mae_pct);
        ADD(slowdown_err_confident);
        ADD(slowdown_err_unsure);
        ADD(slowdown_fit_seconds);
#undef ADD
        add_slowdown_targets(x->targets, y ? y->targets : NULL, x->n_targets, scale);
    }
}

/* The other seeds' runs of the published splits, summed into res and
 * averaged. */
static kace_status splits_other_seeds(kace_ctx *ctx, const kace_dataset *ds, const kace_splits *splits,
                                      const kace_eval_options *first, int n_seeds, kace_split_results *res)
{
    kace_eval_options opt = *first;
    opt.with_xu = false;
    for (int k = 1; k < n_seeds; k++) {
        opt.slowdown.seed = first->slowdown.seed + (uint64_t)k;
        kace_split_results *more = NULL;
        kace_status st = kace_eval_splits(ctx, ds, splits, &opt, &more);
        if (!st && more->n != res->n)
            st = kace_fail(ctx, KACE_ERR_INVALID, "split runs disagree on their splits");
        if (!st)
            add_slowdown_splits(res, more, 1);
        kace_split_results_free(&more);
        if (st)
            return st;
    }
    if (n_seeds > 1)
        add_slowdown_splits(res, NULL, 1.0 / n_seeds);
    return KACE_OK;
}

/* The other seeds' unseen-family (or 3-way) scores, summed into out and
 * averaged. */
static kace_status unseen_other_seeds(kace_ctx *ctx, const kace_dataset *ds, const kace_eval_options *common,
                                      int n_seeds, kace_target_score *out[2], size_t n_out,
                                      kace_confidence_check *check)
{
    kace_eval_options opt = *common;
    opt.with_xu = false;
    for (int k = 1; k < n_seeds; k++) {
        opt.slowdown.seed = common->slowdown.seed + (uint64_t)k;
        kace_target_score *more[2] = {NULL, NULL};
        size_t n_more = 0;
        kace_confidence_check more_check;
        kace_status st = kace_eval_unseen(ctx, ds, &opt, more, &n_more, &more_check);
        if (!st && n_more != n_out)
            st = kace_fail(ctx, KACE_ERR_INVALID, "unseen-family runs disagree on their targets");
        check->err_confident += more_check.err_confident;
        check->err_unsure += more_check.err_unsure;
        for (int m = 0; m < 2 && !st; m++)
            add_slowdown_targets(out[m], more[m], n_out, 1);
        free(more[0]);
        free(more[1]);
        if (st)
            return st;
    }
    for (int m = 0; m < 2 && n_seeds > 1; m++)
        add_slowdown_targets(out[m], NULL, n_out, 1.0 / n_seeds);
    check->err_confident /= n_seeds;
    check->err_unsure /= n_seeds;
    return KACE_OK;
}

/* The same confidence line as the training-size study's, for a
 * family-exclusion study (one fit per target, so every mode shares it). */
static void report_confidence(const kace_confidence_check *check)
{
    if (!isnan(check->err_confident))
        printf("kace confidence: relative error of the predicted sum %.1f%% where confidence >= median, %.1f%% below "
               "(every target's test colocations pooled)\n",
               check->err_confident, check->err_unsure);
}

/* The first workload of the sets' colocations that misses a value of one
 * of fs's features (that feature in *missing); NULL when none does. */
static const kace_workload *lacks(const kace_dataset *const *sets, size_t n_sets, const kace_feature_set *fs,
                                  kace_metric *missing)
{
    for (size_t s = 0; s < n_sets; s++) {
        const kace_dataset *ds = sets[s];
        if (!ds)
            continue;
        for (size_t c = 0; c < ds->n_colocations; c++)
            for (int i = 0; i < ds->colocations[c].k; i++) {
                const kace_workload *w = &ds->workloads[ds->colocations[c].workload[i]];
                for (int f = 0; f < fs->n; f++)
                    if (!isfinite(w->metric[fs->metric[f]])) {
                        *missing = fs->metric[f];
                        return w;
                    }
            }
    }
    return NULL;
}

/* Xu et al.'s features for the sets: its own (ncu's PCIe section), else
 * the same with NVML's PCIe throughput in its place (what kace profile
 * measures), said so; NULL when neither is there, the first gap named
 * (the baseline is left out, not failed). */
const kace_feature_set *cli_xu_features(const kace_dataset *const *sets, size_t n_sets, kace_metric_set metrics,
                                        bool quiet)
{
    kace_metric missing, missing_nvml;
    const kace_feature_set *xu = kace_feature_set_restrict(&kace_features_xu, metrics);
    const kace_feature_set *xu_nvml = kace_feature_set_restrict(&kace_features_xu_nvml, metrics);
    const kace_workload *w = lacks(sets, n_sets, xu, &missing);
    if (!w)
        return &kace_features_xu; /* eval restricts it to the metric set */
    const kace_workload *w_nvml = lacks(sets, n_sets, xu_nvml, &missing_nvml);
    if (!w_nvml) {
        if (!quiet)
            printf("(Xu et al. with NVML's PCIe throughput (pcie_rx_MBps, pcie_tx_MBps) in place of ncu's PCIe read "
                   "and write bandwidth: workload %s has no '%s')\n",
                   w->name, kace_metric_name(missing));
        return &kace_features_xu_nvml;
    }
    if (quiet)
        return NULL;
    if (missing_nvml == KACE_M_PCIE_RX_MBPS || missing_nvml == KACE_M_PCIE_TX_MBPS)
        printf("(Xu et al. left out: workload %s has no '%s' (ncu's PCIe) and workload %s no '%s' (NVML's), "
               "one of its features either way; --no-xu says so quietly)\n",
               w->name, kace_metric_name(missing), w_nvml->name, kace_metric_name(missing_nvml));
    else
        printf("(Xu et al. left out: workload %s has no '%s', one of its features; --no-xu says so quietly)\n",
               w_nvml->name, kace_metric_name(missing_nvml));
    return NULL;
}

kace_metric_set cli_eval_metrics(const eval_request *req, const kace_dataset *const *sets, size_t n_sets, bool quiet)
{
    if (req->metrics >= 0)
        return (kace_metric_set)req->metrics;
    /* The richest set both of kace's models (the paper's linear one and the
     * slowdown model) can read for every member of every colocation. */
    kace_metric_set set = KACE_METRICS_FULL;
    kace_fit_spec linear = {.kind = KACE_MODEL_LINEAR, .features = &kace_features_kace};
    kace_fit_spec slowdown = {.kind = KACE_MODEL_SLOWDOWN};
    for (size_t i = 0; i < n_sets; i++) {
        if (!sets[i] || !sets[i]->n_colocations)
            continue;
        kace_metric_set a = kace_metric_set_choose(sets[i], NULL, 0, &linear);
        kace_metric_set b = req->without_slowdown ? a : kace_metric_set_choose(sets[i], NULL, 0, &slowdown);
        set = a > set ? a : set;
        set = b > set ? b : set;
    }
    if (set != KACE_METRICS_FULL && !quiet)
        printf("(every model reads the %s metrics: not every workload has %s; --metrics chooses)\n",
               kace_metric_set_name(set),
               set == KACE_METRICS_SYSTEM ? "kernel launch records or counters" : "kernel counters");
    return set;
}

/* The splits the training-size study runs on: the published ones stored
 * with the set, else (or with made) the KACE artifact's splits made for the
 * set the way it made its own (kace_splits_make). *origin says which. */
kace_status cli_load_splits(kace_ctx *ctx, kace_store *store, const kace_dataset *ds, bool made, kace_splits **out,
                            const char **origin)
{
    *out = NULL;
    *origin = "published";
    kace_status st = made ? KACE_OK : kace_store_load_splits(ctx, store, ds, out);
    if (st && st != KACE_ERR_NOT_FOUND)
        return st;
    if (!made && !st && (*out)->n)
        return KACE_OK;
    if (st == KACE_ERR_NOT_FOUND)
        printf("(the stored splits do not fit this set: %s)\n", kace_errmsg(ctx));
    kace_splits_free(out);
    kace_split_recipe recipe;
    kace_split_recipe_default(&recipe);
    *origin = "made the KACE artifact's way";
    return kace_splits_make(ctx, ds, &recipe, out);
}

int cli_run_eval(kace_ctx *ctx, kace_store *store, const eval_request *req)
{
    kace_dataset *pairs = NULL, *triples = NULL;
    kace_splits *splits = NULL;
    kace_split_results *res = NULL;
    kace_target_score *unseen[2] = {NULL, NULL}, *three[2] = {NULL, NULL};
    size_t n_unseen = 0, n_three = 0;
    int rc = EXIT_FAILURE_RUN;
    kace_status st;
    if (req->out_dir && cli_mkdirs(req->out_dir) != 0) {
        fprintf(stderr, "kace: cannot create %s\n", req->out_dir);
        return EXIT_FAILURE_RUN;
    }
    /* Both sets in one read: the workloads and their profiles once. */
    const char *sets[2] = {req->pairs_set, req->triples_set};
    kace_dataset *loaded[2];
    if ((st = kace_store_load_datasets(ctx, store, sets, 2, false, loaded))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    pairs = loaded[0];
    triples = loaded[1];
    if (pairs->n_colocations == 0) {
        fprintf(stderr, "kace: the store has no runs in set '%s' (import the reference data first: kace import "
                        "../shared/data/kace-v100)\n", req->pairs_set);
        goto done;
    }
    const char *splits_origin;
    if ((st = cli_load_splits(ctx, store, pairs, req->made_splits, &splits, &splits_origin))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    if (strcmp(splits_origin, "published"))
        printf("(%s set '%s': the training-size study runs on splits %s: n_occur 2..10,\n"
               " seeds 10 20 30 40 50, the internal 80/20 fit split with seed 30; docs/eval.md)\n",
               req->made_splits ? "--made-splits for" : "no published splits for", req->pairs_set, splits_origin);
    /* Unseen families and triples fit every row in both modes: once. */
    kace_eval_options common;
    kace_eval_options_default(&common);
    const kace_dataset *both[2] = {pairs, triples};
    common.metrics = cli_eval_metrics(req, both, 2, false);
    common.objective = (kace_objective)req->objective;
    common.xu_features = req->with_xu ? cli_xu_features(both, 2, common.metrics, false) : NULL;
    common.with_xu = common.xu_features != NULL;
    common.xu_search.n_iter = req->xu_iter;
    if (req->xu_tree_scale > 0)
        common.xu_search.tree_scale = req->xu_tree_scale;
    common.slowdown = req->slowdown;
    if (req->kace_kind)
        common.kace_kind = (kace_model_kind)req->kace_kind;
    common.with_slowdown = !req->without_slowdown;
    /* One mode asked for: the unseen studies score that one only. */
    common.one_mode = !(req->paper && req->clean);
    common.mode = req->paper ? KACE_MODE_PAPER : KACE_MODE_CLEAN;
    struct timespec t_unseen;
    clock_gettime(CLOCK_MONOTONIC, &t_unseen);
    int n_seeds = common.with_slowdown && req->kace_seeds > 1 ? req->kace_seeds : 1;
    kace_confidence_check unseen_check, three_check = {NAN, NAN};
    if ((st = kace_eval_unseen(ctx, pairs, &common, unseen, &n_unseen, &unseen_check)) ||
        (st = unseen_other_seeds(ctx, pairs, &common, n_seeds, unseen, n_unseen, &unseen_check))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    double unseen_seconds = seconds_since(&t_unseen);
    clock_gettime(CLOCK_MONOTONIC, &t_unseen);
    if (triples->n_colocations &&
        ((st = kace_eval_unseen(ctx, triples, &common, three, &n_three, &three_check)) ||
         (st = unseen_other_seeds(ctx, triples, &common, n_seeds, three, n_three, &three_check)))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    double three_seconds = seconds_since(&t_unseen);
    for (int mode = 0; mode < 2; mode++) {
        if ((mode == KACE_MODE_PAPER && !req->paper) || (mode == KACE_MODE_CLEAN && !req->clean))
            continue;
        const char *mode_name = mode == KACE_MODE_PAPER ? "paper" : "clean";
        kace_eval_options opt = common;
        opt.mode = (kace_eval_mode)mode;
        struct timespec t0;
        if (splits->n) {
            clock_gettime(CLOCK_MONOTONIC, &t0);
            if ((st = kace_eval_splits(ctx, pairs, splits, &opt, &res)) ||
                (st = splits_other_seeds(ctx, pairs, splits, &opt, n_seeds, res))) {
                rc = cli_error(ctx, st);
                goto done;
            }
            fflush(stdout);
            if (report_splits(pairs, res, mode_name, splits_origin, req, seconds_since(&t0)) != 0)
                goto done;
            if (req->figures && req->out_dir)
                figures_splits(req->out_dir, mode_name, res, common.with_xu);
            kace_split_results_free(&res);
        }

        char csv[64];
        snprintf(csv, sizeof csv, "unseen_%s.csv", mode_name);
        report_targets(pairs, unseen[mode], n_unseen, "Unseen workload families (pairs)", mode_name, csv, req,
                       unseen_seconds);
        report_confidence(&unseen_check);
        if (n_three) {
            snprintf(csv, sizeof csv, "triples_%s.csv", mode_name);
            report_targets(triples, three[mode], n_three, "Three workloads at once (family-exclusion splits)",
                           mode_name, csv, req, three_seconds);
            report_confidence(&three_check);
        }
        if (req->figures && req->out_dir)
            figures_targets(req->out_dir, mode_name, common.with_xu);
    }
    if (req->out_dir)
        printf("\ntables (CSV) and figures (PNG) written to %s/\n", req->out_dir);
    rc = EXIT_OK;
done:
    for (int m = 0; m < 2; m++) {
        free(unseen[m]);
        free(three[m]);
    }
    kace_split_results_free(&res);
    kace_splits_free(&splits);
    kace_dataset_free(&pairs);
    kace_dataset_free(&triples);
    return rc;
}

/* Runs in set name, 0 when it has none. */
static size_t set_runs(const kace_set_info *sets, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(sets[i].name, name) == 0)
            return sets[i].n_runs;
    return 0;
}

/* The sets evaluated when none was named: MPS's ("pairs", "triples"), or,
 * in a store that measured its colocations time-sliced only (kace measure
 * without MPS names their sets "timeslice-..."), those. Said on stderr. */
static kace_status default_sets(kace_ctx *ctx, kace_store *store, eval_request *req, bool pairs_given,
                                bool triples_given)
{
    kace_set_info *sets = NULL;
    size_t n = 0;
    kace_status st = kace_store_list_sets(ctx, store, &sets, &n);
    if (st)
        return st;
    if (!pairs_given && !set_runs(sets, n, "pairs") && set_runs(sets, n, "timeslice-pairs")) {
        req->pairs_set = "timeslice-pairs";
        if (!triples_given)
            req->triples_set = "timeslice-triples";
        fprintf(stderr, "kace eval: the store's pairs are time-sliced: evaluating set 'timeslice-pairs'%s\n",
                triples_given ? "" : " (and 'timeslice-triples')");
    }
    free(sets);
    return KACE_OK;
}

int cmd_eval(int argc, char **argv)
{
    const char *db = cli_default_db(), *mode = "both";
    eval_request req = {.out_dir = "kace-eval", .pairs_set = "pairs", .triples_set = "triples", .with_xu = true,
                        .xu_iter = 10, .figures = true, .kace_seeds = 1, .protocol = -1, .folds = 5,
                        .metrics = -1};
    bool mode_given = false, curve = false, pairs_given = false, triples_given = false;
    int every = 0;
    static const struct option longopts[] = {
        {"db", required_argument, 0, 'd'},     {"mode", required_argument, 0, 'm'},
        {"out", required_argument, 0, 'o'},    {"no-xu", no_argument, 0, 'X'},
        {"xu-iter", required_argument, 0, 'i'}, {"xu-trees", required_argument, 0, 'T'}, {"pairs-set", required_argument, 0, 'p'},
        {"triples-set", required_argument, 0, 't'}, {"no-figures", no_argument, 0, 'F'},
        {"no-kace", no_argument, 0, 'K'}, {"kace-rounds", required_argument, 0, 'R'}, {"kace-eta", required_argument, 0, 'E'},
        {"kace-alpha", required_argument, 0, 'A'}, {"kace-tree-weight", required_argument, 0, 'W'},
        {"kace-depth", required_argument, 0, 'P'}, {"kace-select", no_argument, 0, 'Q'},
        {"kace-monotone", required_argument, 0, 'N'}, {"kace-seed", required_argument, 0, 'Y'},
        {"kace-seeds", required_argument, 0, 'Z'}, {"kace-kind", required_argument, 0, 40},
        {"groups", no_argument, 0, 'G'},       {"splits", no_argument, 0, 'S'},
        {"protocol", required_argument, 0, 1}, {"set", required_argument, 0, 'p'},
        {"train-set", required_argument, 0, 2}, {"targets", required_argument, 0, 3},
        {"candidates", required_argument, 0, 4}, {"folds", required_argument, 0, 5},
        {"seed", required_argument, 0, 6},     {"csv", no_argument, 0, 7},
        {"learning-curve", no_argument, 0, 8}, {"every", required_argument, 0, 9},
        {"made-splits", no_argument, 0, 10},  {"train-db", required_argument, 0, 11},
        {"metrics", required_argument, 0, 12}, {"objective", required_argument, 0, 13},
        {"ablation", no_argument, 0, 14},
        {"quiet", no_argument, 0, 'q'},        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    bool quiet = false;
    kace_slowdown_params_default(&req.slowdown);
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "d:m:o:Xi:T:p:t:FKR:E:A:W:P:GSQN:qh", longopts, NULL)) != -1) {
        switch (c) {
        case 'd': db = optarg; break;
        case 'm': mode = optarg; mode_given = true; break;
        case 'q': quiet = true; break;
        case 1:
            if ((req.protocol = kace_protocol_from_name(optarg)) < 0)
                return cli_usage("eval", "--protocol must be paper, leave-family-out, leave-workload-out, "
                                         "leave-batch-size-out or kfold");
            break;
        case 2: req.train_set = optarg; break;
        case 3: req.targets = optarg; break;
        case 4: req.candidates = optarg; break;
        case 5: if (!cli_int("eval", "folds", optarg, 2, 1000, &req.folds)) return EXIT_USAGE; break;
        case 6: {
            double seed;
            if (!cli_parse_number(optarg, 0, 9007199254740992.0, true, &seed))
                return cli_usage("eval", "--seed: '%s' is not a whole number >= 0", optarg);
            req.seed = (unsigned long long)seed;
            break;
        }
        case 7: req.csv = true; break;
        case 8: curve = true; break;
        case 9: if (!cli_int("eval", "every", optarg, 1, 100000, &every)) return EXIT_USAGE; break;
        case 10: req.made_splits = true; break;
        case 11: req.train_db = optarg; break;
        case 12:
            if (strcmp(optarg, "auto") != 0 && (req.metrics = kace_metric_set_from_name(optarg)) < 0)
                return cli_usage("eval", "--metrics must be full, no-counters, system or auto, not '%s'", optarg);
            break;
        case 13:
            if ((req.objective = kace_objective_from_name(optarg)) < 0)
                return cli_usage("eval", "--objective must be raw, normalized or fair, not '%s'", optarg);
            break;
        case 14: req.ablation = true; break;
        case 'o': req.out_dir = optarg[0] ? optarg : NULL; break; /* --out "": print only */
        case 'X': req.with_xu = false; break;
        case 'i': if (!cli_int("eval", "xu-iter", optarg, 1, 10000, &req.xu_iter)) return EXIT_USAGE; break;
        case 'T': if (!cli_number("eval", "xu-trees", optarg, 0, 1, &req.xu_tree_scale)) return EXIT_USAGE; break;
        case 'p': req.pairs_set = optarg; pairs_given = true; break;
        case 't': req.triples_set = optarg; triples_given = true; break;
        case 'F': req.figures = false; break;
        case 'K': req.without_slowdown = true; break;
        case 'G': req.groups = true; break;
        case 'S': req.splits = true; break;
        case 'R': if (!cli_int("eval", "kace-rounds", optarg, 0, 100000, &req.slowdown.n_rounds)) return EXIT_USAGE; break;
        case 'E': if (!cli_number("eval", "kace-eta", optarg, 1e-6, 1, &req.slowdown.learning_rate)) return EXIT_USAGE; break;
        case 'A': if (!cli_number("eval", "kace-alpha", optarg, 0, 1e12, &req.slowdown.ridge_alpha)) return EXIT_USAGE; break;
        case 'W': if (!cli_number("eval", "kace-tree-weight", optarg, 0, 1, &req.slowdown.tree_weight)) return EXIT_USAGE; break;
        case 'Q': req.slowdown.select = true; break;
        case 'N':
            /* a fixed constraint set instead of the cross-validated choice */
            if (strcmp(optarg, "none") == 0)
                req.slowdown.monotone = KACE_MONOTONE_NONE;
            else if (strcmp(optarg, "shares") == 0)
                req.slowdown.monotone = KACE_MONOTONE_SHARES;
            else if (strcmp(optarg, "partners") == 0)
                req.slowdown.monotone = KACE_MONOTONE_PARTNERS;
            else
                return cli_usage("eval", "--kace-monotone must be none, shares or partners");
            req.slowdown.select = false;
            break;
        case 'P': if (!cli_int("eval", "kace-depth", optarg, 1, 16, &req.slowdown.max_depth)) return EXIT_USAGE; break;
        case 'Y': {
            double seed;
            if (!cli_parse_number(optarg, 0, 9007199254740992.0, true, &seed))
                return cli_usage("eval", "--kace-seed: '%s' is not a whole number >= 0", optarg);
            req.slowdown.seed = (uint64_t)seed;
            break;
        }
        case 'Z': if (!cli_int("eval", "kace-seeds", optarg, 1, 100, &req.kace_seeds)) return EXIT_USAGE; break;
        case 40:
            if (strcmp(optarg, "slowdown") == 0)
                req.kace_kind = KACE_MODEL_SLOWDOWN;
            else if (strcmp(optarg, "pressure") == 0)
                req.kace_kind = KACE_MODEL_PRESSURE;
            else if (strcmp(optarg, "stacked") == 0)
                req.kace_kind = KACE_MODEL_STACKED;
            else
                return cli_usage("eval", "--kace-kind must be slowdown, pressure or stacked");
            break;
        case 'h':
            printf("usage: kace eval [--db PATH] [--mode paper|clean|both] [--out DIR] [--no-xu] [--no-kace] [--xu-iter N]\n"
                   "                 [--xu-trees SCALE] [--pairs-set pairs] [--triples-set triples] [--no-figures] [--quiet]\n"
                   "The KACE paper's experiments on the stored measurements: partner choice per training size\n"
                   "(published splits), MSE/R2 and fit time, per-target scores, unseen workload families and\n"
                   "3-way colocations. Paper mode reproduces the published code; clean mode fits every training\n"
                   "row and scales with training statistics. Writes CSV and PNG figures to DIR (kace-eval).\n"
                   "Xu et al.: random forest, randomized search (N configurations, 5-fold CV); --xu-trees 1 uses\n"
                   "the paper's 200..2000 trees (minutes), the default 0.05 uses 10..100 (same scores, seconds).\n"
                   "kace's slowdown model (--no-kace leaves it out): --kace-rounds N --kace-eta X --kace-depth D --kace-alpha A\n"
                   "--kace-tree-weight W override its defaults (100, 0.1, 3, CV, 0.5); --kace-monotone none|shares|partners\n"
                   "fixes the trees' monotone constraints instead of choosing them by 3-fold CV on the training rows;\n"
                   "--kace-seed S seeds the trees' row subsampling and the CV folds (default 0); --kace-seeds N\n"
                   "reports kace's scores as the mean over seeds S .. S+N-1 (default 1). --kace-kind pressure|stacked\n"
                   "makes kace's model the pressure model, or both blended (docs/pressure-model.md), instead of the\n"
                   "slowdown model.\n"
                   "--groups / --splits run instead the beyond-pairs sections: best group of k = 2, 3 around each\n"
                   "target (branch and bound vs Oracle and the rules) and the MPS split advisor (leave-one-pair-out;\n"
                   "--splits --train-db OTHER: fitted on OTHER's grids, another GPU's, each advised pair left out by name).\n"
                   "--protocol P evaluates set S (--set, any k) under another protocol (docs/eval.md):\n"
                   "  paper (the above, default), leave-family-out, leave-workload-out, leave-batch-size-out,\n"
                   "  kfold [--folds K] [--seed S]; --targets A,B scores only those workloads; --candidates FILE\n"
                   "  chooses only among the listed measured colocations (one per line, names comma-separated);\n"
                   "  --train-set T fits on set T only (e.g. pairs-only models choosing among triples);\n"
                   "  --train-db OTHER fits on OTHER's set (--train-set, else --set) only: across GPUs, e.g. V100 -> H100;\n"
                   "  --csv prints one CSV (folds, mean, 95%% t-interval over folds, targets). Mode: clean unless given.\n"
                   "--learning-curve [--every N] [--seed S]: the closed loop simulated: kace's model from the published\n"
                   "  n_occur=2 split, the set's other measurements replayed as observations (order: seed), retrained\n"
                   "  and promoted as kace train --from-observations every N (10), beside a model that never learns.\n"
                   "A set without published splits gets the KACE artifact's splits made for it the way it made its\n"
                   "own (n_occur 2..10, seeds 10..50; docs/eval.md); --made-splits uses those even where published\n"
                   "ones are stored (on the V100 set they are the same).\n"
                   "--metrics full|no-counters|system|auto: what every model reads of each workload (docs/model.md):\n"
                   "  kernel counters, launch records and system metrics; no-counters: launch records and system;\n"
                   "  system: NVML/DCGM and the exclusive throughput. auto (default): the richest the store holds.\n"
                   "--objective raw|normalized|fair: what a choice is scored by: the throughput sum (default), the\n"
                   "  sum of each member's share of its solo throughput, or the smallest share.\n"
                   "Sets: MPS's pairs and triples unless named; a store whose colocations were measured\n"
                   "  time-sliced only (kace measure without MPS: timeslice-pairs, timeslice-triples) evaluates those.\n"
                   "--ablation [--set S] [--triples-set T] [--csv]: what each metric set the store holds achieves\n"
                   "  under every protocol, for kace's model and the paper's (clean mode unless --mode).\n");
            return EXIT_OK;
        default: return cli_usage("eval", "unknown option");
        }
    }
    if (every && !curve)
        return cli_usage("eval", "--every goes with --learning-curve");
    req.learning_curve = curve ? (every ? every : 10) : 0;
    bool any_protocol = req.protocol >= 0 && req.protocol != KACE_PROTO_PAPER;
    if ((any_protocol || req.ablation) && !mode_given)
        mode = "clean"; /* the protocols' default: training statistics everywhere */
    if (req.ablation && (any_protocol || req.groups || req.splits || curve || req.train_set || req.train_db ||
                         req.targets || req.candidates || req.metrics >= 0))
        return cli_usage("eval", "--ablation runs every protocol and metric set itself: not with --protocol, "
                                 "--groups, --splits, --learning-curve, --train-set, --train-db, --targets, "
                                 "--candidates or --metrics");
    if (!any_protocol && (req.train_set || (req.train_db && !req.splits) || req.targets || req.candidates ||
                          (req.csv && !req.ablation)))
        return cli_usage("eval", "--train-set, --train-db, --targets, --candidates and --csv go with --protocol "
                                 "leave-family-out|leave-workload-out|leave-batch-size-out|kfold (--train-db also "
                                 "with --splits)");
    if (req.train_db && req.splits && req.groups)
        return cli_usage("eval", "--train-db goes with --splits alone, not with --groups");
    req.paper = strcmp(mode, "paper") == 0 || strcmp(mode, "both") == 0;
    req.clean = strcmp(mode, "clean") == 0 || strcmp(mode, "both") == 0;
    if (!req.paper && !req.clean)
        return cli_usage("eval", "--mode must be paper, clean or both");
    if (req.kace_seeds < 1 || req.kace_seeds > 100)
        return cli_usage("eval", "--kace-seeds must be 1..100");
    if (req.xu_iter < 1 || req.xu_iter > 10000)
        return cli_usage("eval", "--xu-iter must be 1..10000");
    if (req.xu_tree_scale < 0 || req.xu_tree_scale > 1)
        return cli_usage("eval", "--xu-trees must be in (0, 1]");
    kace_ctx *ctx = cli_ctx_new();
    cli_meter_attach(ctx, "eval", quiet);
    kace_store *store = cli_read_store(ctx, db);
    kace_status st = store ? default_sets(ctx, store, &req, pairs_given, triples_given) : KACE_OK;
    int rc = !store ? EXIT_FAILURE_RUN
             : st                       ? cli_error(ctx, st)
             : req.ablation             ? cli_eval_ablation(ctx, store, &req)
             : req.groups || req.splits ? cli_eval_beyond(ctx, store, &req)
             : req.learning_curve > 0   ? cli_learning_curve(ctx, store, req.pairs_set, req.out_dir, req.figures,
                                                          req.learning_curve, req.seed)
             : any_protocol             ? cli_eval_protocol(ctx, store, &req)
                                        : cli_run_eval(ctx, store, &req);
    kace_store_close(&store);
    kace_ctx_free(&ctx);
    return rc;
}
