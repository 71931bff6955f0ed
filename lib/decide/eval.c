/* The KACE paper's evaluation protocol (see include/kace/eval.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "kace/eval.h"
#include "kace/meter.h"
#include "kace/predictor.h"

void kace_eval_options_default(kace_eval_options *o)
{
    memset(o, 0, sizeof *o);
    o->mode = KACE_MODE_PAPER;
    o->with_xu = true;
    o->xu_features = &kace_features_xu;
    o->xu_search.n_iter = 10;
    o->xu_search.n_folds = 5;
    o->xu_search.seed = 0;
    o->xu_search.n_threads = 1; /* xgboost's own default is 2x slower on tiny data */
    o->xu_search.tree_scale = 0.05;
    o->with_slowdown = true;
    kace_slowdown_params_default(&o->slowdown);
    o->kace_kind = KACE_MODEL_SLOWDOWN;
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
    kace_model *kace, *xu, *slowdown;
    double kace_seconds, xu_seconds, slowdown_seconds;
    bool kace_shared; /* kace is another task's fit, not freed here */
} fitted;

static void fitted_free(fitted *f);

static double seconds_of(kace_ctx *ctx, kace_status *st, const kace_dataset *ds, const int *rows, size_t n,
                         const kace_fit_spec *spec, kace_model **out)
{
    double t0 = now_seconds();
    *st = kace_model_fit_rows(ctx, ds, rows, n, spec, out);
    return now_seconds() - t0;
}

static kace_status fit_linear(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
                              kace_metric_set metrics, kace_model **out, double *seconds)
{
    kace_status st;
    kace_fit_spec linear = {.kind = KACE_MODEL_LINEAR, .features = kace_feature_set_restrict(&kace_features_kace, metrics)};
    *seconds = seconds_of(ctx, &st, ds, rows, n, &linear, out);
    return st;
}

/* The paper's linear model (unless `linear`, fitted on the same rows, is
 * given: it is used, not copied), then Xu's forest and kace's model as opt
 * asks, seeded by seed. */
static kace_status fit_models(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
                              const kace_eval_options *opt, uint64_t seed, kace_model *linear, fitted *f)
{
    memset(f, 0, sizeof *f);
    kace_status st = KACE_OK;
    if (linear) {
        f->kace = linear;
        f->kace_shared = true;
    } else {
        st = fit_linear(ctx, ds, rows, n, opt->metrics, &f->kace, &f->kace_seconds);
    }
    if (!st && opt->with_xu) {
        const kace_feature_set *xu = opt->xu_features ? opt->xu_features : &kace_features_xu;
        kace_fit_spec forest = {.kind = KACE_MODEL_FOREST, .features = kace_feature_set_restrict(xu, opt->metrics),
                                .search = opt->xu_search};
        forest.search.seed = opt->xu_search.seed ^ (seed * 0x9E3779B97F4A7C15ull);
        f->xu_seconds = seconds_of(ctx, &st, ds, rows, n, &forest, &f->xu);
    }
    if (!st && opt->with_slowdown) {
        kace_fit_spec sd = {.kind = opt->kace_kind, .slowdown = opt->slowdown};
        sd.slowdown.seed = opt->slowdown.seed ^ seed;
        sd.slowdown.metrics = opt->metrics;
        f->slowdown_seconds = seconds_of(ctx, &st, ds, rows, n, &sd, &f->slowdown);
    }
    if (st)
        fitted_free(f);
    return st;
}

static void fitted_free(fitted *f)
{
    if (f->kace_shared)
        f->kace = NULL;
    kace_model_free(&f->kace);
    kace_model_free(&f->xu);
    kace_model_free(&f->slowdown);
}

kace_status kace_eval_choice(kace_ctx *ctx, const kace_predictor *p, kace_norm norm, const kace_dataset *ds,
                             const int *cand, size_t n, double *score)
{
    *score = NAN;
    double oracle = 0;
    for (size_t i = 0; i < n; i++) {
        double s = kace_colocation_sum(&ds->colocations[cand[i]]);
        oracle = (i == 0 || s > oracle) ? s : oracle;
    }
    size_t pick;
    kace_status st = kace_policy_pick_model(ctx, p, norm, ds, cand, n, &pick);
    if (!st)
        *score = kace_colocation_sum(&ds->colocations[cand[pick]]) / oracle;
    return st;
}

/* The score of a model's choice among cand[0..n) under objective o: its
 * measured objective over the best measured one. */
static kace_status model_choice(kace_ctx *ctx, const kace_predictor *p, kace_norm norm, kace_objective o,
                                const kace_dataset *ds, const int *cand, size_t n, double oracle, double *score)
{
    if (o == KACE_OBJ_RAW)
        return kace_eval_choice(ctx, p, norm, ds, cand, n, score);
    size_t pick;
    kace_status st = kace_policy_pick_objective(ctx, p, norm, o, ds, cand, n, &pick);
    *score = st ? NAN : kace_objective_measured(o, ds, &ds->colocations[cand[pick]]) / oracle;
    return st;
}

/* Scores every policy for one target's candidate rows under objective o. */
static kace_status score_target(kace_ctx *ctx, const kace_dataset *ds, const fitted *f, kace_norm norm,
                                kace_objective o, const int *cand, size_t n, kace_target_score *out)
{
    for (int p = 0; p < KACE_N_POLICIES; p++)
        out->score[p] = NAN;
    out->n_candidates = (int)n;
    double oracle = 0, mean = 0;
    for (size_t i = 0; i < n; i++) {
        double s = kace_objective_measured(o, ds, &ds->colocations[cand[i]]);
        if (isnan(s))
            return kace_fail(ctx, KACE_ERR_INVALID, "target %s: the %s objective needs every member's exclusive "
                                                    "throughput",
                             ds->workloads[out->target].name, kace_objective_name(o));
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
        out->score[rules[r]] = kace_objective_measured(o, ds, &ds->colocations[cand[pick]]) / oracle;
    }
    double best = out->score[KACE_POL_RANDOM];
    for (size_t r = 0; r < 3; r++)
        best = out->score[rules[r]] > best ? out->score[rules[r]] : best;
    out->score[KACE_POL_BEST_RULE] = best;
    if ((st = model_choice(ctx, kace_model_predictor(f->kace), norm, o, ds, cand, n, oracle,
                           &out->score[KACE_POL_KACE])))
        return st;
    if (f->xu &&
        (st = model_choice(ctx, kace_model_predictor(f->xu), norm, o, ds, cand, n, oracle, &out->score[KACE_POL_XU])))
        return st;
    if (f->slowdown && (st = model_choice(ctx, kace_model_predictor(f->slowdown), norm, o, ds, cand, n, oracle,
                                          &out->score[KACE_POL_SLOWDOWN])))
        return st;
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
    double *y = malloc(n * sizeof *y), *p = malloc(n * sizeof *p);
    kace_status st = KACE_OK;
    if (!y || !p) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    kace_labels_build(ds, rows, n, y);
    double mu, sd;
    if (norm == KACE_NORM_CANDIDATES)
        kace_column_stats(y, n, 1, &mu, &sd);
    else
        kace_model_label_stats(m, &mu, &sd);
    if ((st = kace_predict_rows_z(ctx, kace_model_predictor(m), norm, ds, rows, n, mu, sd, p)))
        goto done;
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
    free(y);
    free(p);
    return st;
}

/* Scores every target of one train/test partition. */
static kace_status score_targets(kace_ctx *ctx, const kace_dataset *ds, const fitted *f, kace_norm norm,
                                 kace_objective o, const int *targets, size_t n_targets, const int *test, size_t n_test,
                                 kace_target_score **out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    /* Every workload's candidates (the test rows holding it, in row order) in
     * one pass over the rows: cand[first[w] .. first[w + 1]). */
    size_t nw = ds->n_workloads;
    kace_target_score *scores = calloc(n_targets ? n_targets : 1, sizeof *scores);
    int *cand = malloc((n_test ? n_test : 1) * KACE_MAX_K * sizeof *cand);
    size_t *first = calloc(nw + 1, sizeof *first), *next = malloc((nw ? nw : 1) * sizeof *next);
    kace_status st = KACE_OK;
    if (!scores || !cand || !first || !next) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < n_test; i++) {
            const kace_colocation *c = &ds->colocations[test[i]];
            for (int j = 0; j < c->k; j++) {
                int w = c->workload[j];
                bool again = false; /* a workload twice in one colocation is one candidate row */
                for (int l = 0; l < j; l++)
                    again |= c->workload[l] == w;
                if (w < 0 || (size_t)w >= nw || again)
                    continue;
                if (pass == 0)
                    first[w + 1]++;
                else
                    cand[next[w]++] = test[i];
            }
        }
        if (pass == 0)
            for (size_t w = 0; w < nw; w++) {
                first[w + 1] += first[w];
                next[w] = first[w];
            }
    }
    size_t n_scored = 0;
    for (size_t t = 0; t < n_targets; t++) {
        int w = targets[t];
        size_t n = w >= 0 && (size_t)w < nw ? first[w + 1] - first[w] : 0;
        if (n == 0)
            continue; /* no candidate: the target is skipped */
        kace_target_score *ts = &scores[n_scored];
        ts->target = targets[t];
        if ((st = score_target(ctx, ds, f, norm, o, cand + first[w], n, ts)))
            goto done;
        n_scored++;
    }
    *out = scores;
    *n_out = n_scored;
    scores = NULL;
done:
    free(scores);
    free(cand);
    free(first);
    free(next);
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

/* Mean over the members of the test colocations of |predicted - measured|
 * throughput, in % of the member's exclusive throughput. */
static kace_status member_mae(kace_ctx *ctx, const kace_dataset *ds, const kace_model *m, const int *rows, size_t n,
                              double *mae)
{
    double sum = 0;
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        const kace_colocation *c = &ds->colocations[rows[i]];
        double member[KACE_MAX_K], total;
        kace_status st = kace_predict_group(ctx, kace_model_predictor(m), ds, c->workload, c->k, &total, NULL, member);
        if (st)
            return st;
        for (int j = 0; j < c->k; j++) {
            sum += 100.0 * fabs(member[j] - c->throughput[j]) / ds->workloads[c->workload[j]].metric[KACE_M_EXCLUSIVE];
            count++;
        }
    }
    *mae = count ? sum / (double)count : NAN;
    return KACE_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The confidence and the relative error (%) of the predicted sum of
 * colocations rows[0..n). */
static kace_status confidence_errors(kace_ctx *ctx, const kace_dataset *ds, const kace_model *m, const int *rows,
                                     size_t n, double *conf, double *err)
{
    for (size_t i = 0; i < n; i++) {
        const kace_colocation *c = &ds->colocations[rows[i]];
        double pred;
        kace_status st = kace_predict_group(ctx, kace_model_predictor(m), ds, c->workload, c->k, &pred, &conf[i], NULL);
        if (st)
            return st;
        double y = kace_colocation_sum(c);
        err[i] = y > 0 ? 100.0 * fabs(pred - y) / y : 0;
    }
    return KACE_OK;
}

/* Does the confidence tell good predictions from bad ones? Mean error above
 * and below the median confidence. */
static kace_status split_at_median(kace_ctx *ctx, const double *conf, const double *err, size_t n,
                                   kace_confidence_check *out)
{
    out->err_confident = out->err_unsure = NAN;
    if (n < 2)
        return KACE_OK;
    double *sorted = malloc(n * sizeof *sorted);
    if (!sorted)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    memcpy(sorted, conf, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_double);
    double median = sorted[n / 2], hi = 0, lo = 0;
    size_t n_hi = 0, n_lo = 0;
    for (size_t i = 0; i < n; i++) {
        if (conf[i] >= median) {
            hi += err[i];
            n_hi++;
        } else {
            lo += err[i];
            n_lo++;
        }
    }
    out->err_confident = n_hi ? hi / (double)n_hi : NAN;
    out->err_unsure = n_lo ? lo / (double)n_lo : NAN;
    free(sorted);
    return KACE_OK;
}

static kace_status confidence_split(kace_ctx *ctx, const kace_dataset *ds, const kace_model *m, const int *rows,
                                    size_t n, double *confident, double *unsure)
{
    kace_confidence_check check = {NAN, NAN};
    double *conf = malloc((n ? n : 1) * sizeof *conf), *err = malloc((n ? n : 1) * sizeof *err);
    kace_status st = !conf || !err ? kace_fail(ctx, KACE_ERR_NOMEM, "out of memory")
                                   : confidence_errors(ctx, ds, m, rows, n, conf, err);
    if (!st)
        st = split_at_median(ctx, conf, err, n, &check);
    *confident = check.err_confident;
    *unsure = check.err_unsure;
    free(conf);
    free(err);
    return st;
}

/* ---- running independent tasks on a few threads ----------------------- */

typedef kace_status (*task_fn)(kace_ctx *ctx, void *arg, size_t i);

typedef struct task_pool {
    task_fn fn;
    void *arg;
    size_t n;
    atomic_size_t next;
    atomic_int failed;
    kace_status status;  /* the first failure, with its message */
    char message[1024];
    size_t failed_task;
    pthread_mutex_t lock;
    /* Progress goes to the caller's context, from the caller's thread only. */
    kace_ctx *owner;
    pthread_t owner_thread;
    atomic_size_t done;
} task_pool;

static void *pool_worker(void *p_)
{
    task_pool *p = p_;
    kace_ctx *ctx = kace_ctx_new();
    for (;;) {
        size_t i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n || atomic_load(&p->failed))
            break;
        kace_status st = ctx ? p->fn(ctx, p->arg, i) : KACE_ERR_NOMEM;
        if (st) {
            pthread_mutex_lock(&p->lock);
            if (!atomic_load(&p->failed) || i < p->failed_task) {
                p->status = st;
                p->failed_task = i;
                snprintf(p->message, sizeof p->message, "%s", ctx ? kace_errmsg(ctx) : "out of memory");
            }
            atomic_store(&p->failed, 1);
            pthread_mutex_unlock(&p->lock);
        }
        size_t done = atomic_fetch_add(&p->done, 1) + 1;
        if (pthread_equal(pthread_self(), p->owner_thread))
            kace_meter_to(p->owner, (double)done);
    }
    kace_ctx_free(&ctx);
    return NULL;
}

/* Runs fn(i) for i in [0, n) on up to n_threads threads (0: one per CPU, at
 * most 8). Each task writes only its own slot, so results keep their order
 * and do not depend on the number of threads. */
static kace_status run_tasks(kace_ctx *ctx, const char *what, int n_threads, size_t n, task_fn fn, void *arg)
{
    if (n_threads <= 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = cpus > 8 ? 8 : (cpus < 1 ? 1 : (int)cpus);
    }
    if ((size_t)n_threads > n)
        n_threads = n ? (int)n : 1;
    task_pool p = {.fn = fn, .arg = arg, .n = n, .owner = ctx, .owner_thread = pthread_self()};
    atomic_init(&p.next, 0);
    atomic_init(&p.done, 0);
    kace_meter_begin(ctx, what, "tasks", (double)n);
    atomic_init(&p.failed, 0);
    pthread_mutex_init(&p.lock, NULL);
    pthread_t threads[8];
    int started = 0;
    for (int t = 1; t < n_threads; t++)
        if (pthread_create(&threads[started], NULL, pool_worker, &p) == 0)
            started++;
    pool_worker(&p); /* the calling thread works too */
    for (int t = 0; t < started; t++)
        pthread_join(threads[t], NULL);
    pthread_mutex_destroy(&p.lock);
    kace_meter_end(ctx);
    if (atomic_load(&p.failed))
        return kace_fail(ctx, p.status, "%s", p.message);
    return KACE_OK;
}

/* ---- the published splits ---------------------------------------------- */

typedef struct split_job {
    const kace_dataset *ds;
    const kace_splits *splits;
    const kace_eval_options *opt;
    const int *targets;
    size_t n_targets;
    size_t *start;            /* task i covers splits->rows[start[i] .. start[i+1]) */
    kace_split_result *items; /* one per task */
} split_job;

static kace_status split_task(kace_ctx *ctx, void *arg, size_t t)
{
    split_job *job = arg;
    const kace_dataset *ds = job->ds;
    const kace_eval_options *opt = job->opt;
    size_t from = job->start[t], to = job->start[t + 1];
    kace_split_result *r = &job->items[t];
    r->n_occur = job->splits->rows[from].n_occur;
    r->seed = job->splits->rows[from].seed;
    r->mse = r->r2 = r->xu_mse = r->xu_r2 = r->slowdown_mse = r->slowdown_r2 = r->slowdown_mae_pct = NAN;
    r->slowdown_err_confident = r->slowdown_err_unsure = NAN;
    size_t n = to - from;
    int *fit = malloc(n * sizeof *fit), *test = malloc(n * sizeof *test);
    kace_status st = KACE_OK;
    fitted f = {0};
    if (!fit || !test) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t i = from; i < to; i++) {
        const kace_split_row *row = &job->splits->rows[i];
        if (row->train) {
            r->n_train++;
            if (row->paper_fit || opt->mode == KACE_MODE_CLEAN)
                fit[r->n_fit++] = row->colocation;
        } else {
            test[r->n_test++] = row->colocation;
        }
    }
    /* Only training rows reach the fitting code. */
    if ((st = fit_models(ctx, ds, fit, r->n_fit, opt, (uint64_t)r->seed, NULL, &f))) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", kace_errmsg(ctx));
        st = kace_fail(ctx, st, "n_occur=%d seed=%d: %s", r->n_occur, r->seed, msg);
        goto done;
    }
    r->fit_seconds = f.kace_seconds;
    r->xu_fit_seconds = f.xu_seconds;
    r->slowdown_fit_seconds = f.slowdown_seconds;
    kace_norm norm = opt->mode == KACE_MODE_PAPER ? KACE_NORM_CANDIDATES : KACE_NORM_TRAIN;
    if ((st = score_targets(ctx, ds, &f, norm, opt->objective, job->targets, job->n_targets, test, r->n_test, &r->targets,
                            &r->n_targets)) ||
        (st = test_error(ctx, ds, f.kace, norm, test, r->n_test, &r->mse, &r->r2)) ||
        (f.xu && (st = test_error(ctx, ds, f.xu, norm, test, r->n_test, &r->xu_mse, &r->xu_r2))) ||
        (f.slowdown &&
         ((st = test_error(ctx, ds, f.slowdown, norm, test, r->n_test, &r->slowdown_mse, &r->slowdown_r2)) ||
          (st = member_mae(ctx, ds, f.slowdown, test, r->n_test, &r->slowdown_mae_pct)) ||
          (st = confidence_split(ctx, ds, f.slowdown, test, r->n_test, &r->slowdown_err_confident,
                                 &r->slowdown_err_unsure)))))
        goto done;
    mean_scores(r->targets, r->n_targets, r->score);
done:
    fitted_free(&f);
    free(fit);
    free(test);
    return st;
}

kace_status kace_eval_splits(kace_ctx *ctx, const kace_dataset *ds, const kace_splits *splits,
                             const kace_eval_options *opt, kace_split_results **out)
{
    *out = NULL;
    split_job job = {ds, splits, opt, NULL, 0, NULL, NULL};
    kace_split_results *res = calloc(1, sizeof *res);
    size_t n_tasks = 0;
    kace_status st;
    if (!res)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    if ((st = list_targets(ctx, ds, (int **)&job.targets, &job.n_targets)))
        goto fail;
    /* Splits come grouped by (n_occur, seed), in file order: one task each. */
    job.start = malloc((splits->n + 1) * sizeof *job.start);
    if (!job.start) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < splits->n; i++)
        if (i == 0 || splits->rows[i].n_occur != splits->rows[i - 1].n_occur ||
            splits->rows[i].seed != splits->rows[i - 1].seed)
            job.start[n_tasks++] = i;
    job.start[n_tasks] = splits->n;
    res->items = calloc(n_tasks ? n_tasks : 1, sizeof *res->items);
    if (!res->items) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto fail;
    }
    res->n = n_tasks;
    job.items = res->items;
    if ((st = run_tasks(ctx, "evaluating splits", opt->n_threads, n_tasks, split_task, &job)))
        goto fail;
    free((void *)job.targets);
    free(job.start);
    *out = res;
    return KACE_OK;
fail:
    free((void *)job.targets);
    free(job.start);
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

typedef struct unseen_job {
    const kace_dataset *ds;
    const kace_eval_options *opt;
    const int *targets;
    /* Per target: the first target of its family, and (for those) the linear
     * model. Targets of a family train on the same rows, and the linear fit
     * has no seed: one fit serves them all. */
    size_t *first_of_family;
    kace_model **linear;
    kace_target_score *scores[2]; /* by kace_eval_mode */
    /* Per target: kace's confidence and error on each test row. */
    double **conf, **err;
    size_t *n_rows;
} unseen_job;

/* The colocations with no workload of target's family (train) and those
 * with target (test, may be NULL). */
static void family_rows(const kace_dataset *ds, int target, int *train, size_t *n_train, int *test, size_t *n_test)
{
    const char *family = ds->workloads[target].family;
    *n_train = 0;
    if (test)
        *n_test = 0;
    for (size_t i = 0; i < ds->n_colocations; i++) {
        const kace_colocation *c = &ds->colocations[i];
        bool same_family = false;
        for (int j = 0; j < c->k; j++)
            same_family |= strcmp(ds->workloads[c->workload[j]].family, family) == 0;
        if (!same_family)
            train[(*n_train)++] = (int)i;
        if (test && kace_colocation_has(c, target))
            test[(*n_test)++] = (int)i;
    }
}

/* The linear model of the family whose first target is t. */
static kace_status unseen_linear_task(kace_ctx *ctx, void *arg, size_t t)
{
    unseen_job *job = arg;
    if (job->first_of_family[t] != t)
        return KACE_OK;
    const kace_dataset *ds = job->ds;
    int *train = malloc((ds->n_colocations ? ds->n_colocations : 1) * sizeof *train);
    if (!train)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    size_t n_train;
    double seconds;
    family_rows(ds, job->targets[t], train, &n_train, NULL, NULL);
    if (n_train < KACE_EVAL_MIN_TRAIN) { /* not scored (unseen_task) */
        free(train);
        return KACE_OK;
    }
    kace_status st = fit_linear(ctx, ds, train, n_train, job->opt->metrics, &job->linear[t], &seconds);
    if (st) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", kace_errmsg(ctx));
        st = kace_fail(ctx, st, "unseen target %s: %s", ds->workloads[job->targets[t]].name, msg);
    }
    free(train);
    return st;
}

static kace_status unseen_task(kace_ctx *ctx, void *arg, size_t t)
{
    unseen_job *job = arg;
    const kace_dataset *ds = job->ds;
    int target = job->targets[t];
    size_t nc = ds->n_colocations ? ds->n_colocations : 1, n_train = 0, n_test = 0;
    int *train = malloc(nc * sizeof *train), *test = malloc(nc * sizeof *test);
    kace_status st = KACE_OK;
    fitted f = {0};
    if (!train || !test) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    family_rows(ds, target, train, &n_train, test, &n_test);
    if (n_train < KACE_EVAL_MIN_TRAIN) {
        /* Too few colocations without its family (a small data set): the
         * target is listed, every score NaN, n_train says why. */
        for (int mode = 0; mode < 2; mode++) {
            kace_target_score *s = &job->scores[mode][t];
            s->target = target;
            s->n_candidates = (int)n_test;
            s->n_train = n_train;
            for (int p = 0; p < KACE_N_POLICIES; p++)
                s->score[p] = NAN;
        }
        goto done;
    }
    if ((st = fit_models(ctx, ds, train, n_train, job->opt, (uint64_t)t + 1, job->linear[job->first_of_family[t]],
                         &f))) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", kace_errmsg(ctx));
        st = kace_fail(ctx, st, "unseen target %s: %s", ds->workloads[target].name, msg);
        goto done;
    }
    /* Both modes fit every row here: one fit, scored both ways. */
    for (int mode = 0; mode < 2 && !st; mode++) {
        job->scores[mode][t].target = target;
        job->scores[mode][t].n_train = n_train;
        if (job->opt->one_mode && mode != (int)job->opt->mode) {
            for (int p = 0; p < KACE_N_POLICIES; p++)
                job->scores[mode][t].score[p] = NAN;
            continue;
        }
        st = score_target(ctx, ds, &f, mode == KACE_MODE_PAPER ? KACE_NORM_CANDIDATES : KACE_NORM_TRAIN,
                          job->opt->objective, test, n_test, &job->scores[mode][t]);
    }
    if (!st && f.slowdown && n_test) {
        job->conf[t] = malloc(n_test * sizeof **job->conf);
        job->err[t] = malloc(n_test * sizeof **job->err);
        if (!job->conf[t] || !job->err[t])
            st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        else if (!(st = confidence_errors(ctx, ds, f.slowdown, test, n_test, job->conf[t], job->err[t])))
            job->n_rows[t] = n_test;
    }
done:
    fitted_free(&f);
    free(train);
    free(test);
    return st;
}

/* The confidence check pooled over every target's test rows. */
static kace_status pooled_check(kace_ctx *ctx, const unseen_job *job, size_t n_targets, kace_confidence_check *out)
{
    size_t n = 0;
    for (size_t t = 0; t < n_targets; t++)
        n += job->n_rows[t];
    double *conf = malloc((n ? n : 1) * sizeof *conf), *err = malloc((n ? n : 1) * sizeof *err);
    kace_status st = KACE_OK;
    if (!conf || !err)
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    for (size_t t = 0, at = 0; t < n_targets && !st; t++) {
        if (!job->n_rows[t])
            continue; /* no rows, and no arrays without kace's model (memcpy from NULL is undefined) */
        memcpy(conf + at, job->conf[t], job->n_rows[t] * sizeof *conf);
        memcpy(err + at, job->err[t], job->n_rows[t] * sizeof *err);
        at += job->n_rows[t];
    }
    if (!st)
        st = split_at_median(ctx, conf, err, n, out);
    free(conf);
    free(err);
    return st;
}

kace_status kace_eval_unseen(kace_ctx *ctx, const kace_dataset *ds, const kace_eval_options *opt,
                             kace_target_score *out[2], size_t *n_out, kace_confidence_check *check)
{
    out[0] = out[1] = NULL;
    *n_out = 0;
    if (check)
        *check = (kace_confidence_check){NAN, NAN};
    int *targets = NULL;
    size_t n_targets = 0;
    kace_status st;
    if ((st = list_targets(ctx, ds, &targets, &n_targets)))
        return st;
    size_t n = n_targets ? n_targets : 1;
    unseen_job job = {ds,
                      opt,
                      targets,
                      calloc(n, sizeof(size_t)),
                      calloc(n, sizeof(kace_model *)),
                      {calloc(n, sizeof(kace_target_score)), calloc(n, sizeof(kace_target_score))},
                      calloc(n, sizeof(double *)),
                      calloc(n, sizeof(double *)),
                      calloc(n, sizeof(size_t))};
    if (!job.first_of_family || !job.linear || !job.scores[0] || !job.scores[1] || !job.conf || !job.err ||
        !job.n_rows) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    } else {
        for (size_t t = 0; t < n_targets; t++) {
            size_t first = 0;
            while (strcmp(ds->workloads[targets[first]].family, ds->workloads[targets[t]].family) != 0)
                first++;
            job.first_of_family[t] = first;
        }
        /* Here, not on the pool: 7 small fits for the reference pairs. */
        for (size_t t = 0; t < n_targets && !st; t++)
            st = unseen_linear_task(ctx, &job, t);
        if (!st)
            st = run_tasks(ctx, "evaluating unseen workloads", opt->n_threads, n_targets, unseen_task, &job);
    }
    if (!st && check)
        st = pooled_check(ctx, &job, n_targets, check);
    for (size_t t = 0; job.conf && job.err && t < n_targets; t++) {
        free(job.conf[t]);
        free(job.err[t]);
    }
    for (size_t t = 0; job.linear && t < n_targets; t++)
        kace_model_free(&job.linear[t]);
    free(job.linear);
    free(job.first_of_family);
    free(job.conf);
    free(job.err);
    free(job.n_rows);
    free(targets);
    if (st) {
        free(job.scores[0]);
        free(job.scores[1]);
        return st;
    }
    out[0] = job.scores[0];
    out[1] = job.scores[1];
    *n_out = n_targets;
    return KACE_OK;
}

/* ---- any protocol's folds ------------------------------------------------ */

typedef struct folds_job {
    const kace_dataset *ds;
    const kace_folds *folds;
    const kace_eval_options *opt;
    kace_fold_result *items;
} folds_job;

static kace_status fold_task(kace_ctx *ctx, void *arg, size_t t)
{
    folds_job *job = arg;
    const kace_fold *fold = &job->folds->items[t];
    kace_fold_result *r = &job->items[t];
    r->n_train = fold->n_train;
    r->n_test = fold->n_test;
    r->slowdown_mae_pct = NAN;
    for (int p = 0; p < KACE_N_POLICIES; p++)
        r->score[p] = NAN;
    if (fold->n_train < KACE_EVAL_MIN_TRAIN)
        return KACE_OK; /* not scored: NaN scores, no targets; the means leave it out */
    fitted f = {0};
    /* Only the fold's training rows reach the fitting code. */
    kace_status st = fit_models(ctx, job->ds, fold->train, fold->n_train, job->opt, (uint64_t)t + 1, NULL, &f);
    if (st) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", kace_errmsg(ctx));
        return kace_fail(ctx, st, "%s: %s", fold->label, msg);
    }
    r->fit_seconds = f.kace_seconds + f.xu_seconds + f.slowdown_seconds;
    kace_norm norm = job->opt->mode == KACE_MODE_PAPER ? KACE_NORM_CANDIDATES : KACE_NORM_TRAIN;
    /* score_targets takes every target with a candidate; the fold lists
     * only those with enough of them. */
    if ((st = score_targets(ctx, job->ds, &f, norm, job->opt->objective, fold->targets, fold->n_targets, fold->test, fold->n_test,
                            &r->targets, &r->n_targets)) ||
        (f.slowdown && (st = member_mae(ctx, job->ds, f.slowdown, fold->test, fold->n_test, &r->slowdown_mae_pct))))
        goto done;
    mean_scores(r->targets, r->n_targets, r->score);
done:
    fitted_free(&f);
    return st;
}

void kace_protocol_result_free(kace_protocol_result **r)
{
    if (!r || !*r)
        return;
    for (size_t i = 0; i < (*r)->n_folds; i++)
        free((*r)->folds[i].targets);
    free((*r)->folds);
    free((*r)->targets);
    free(*r);
    *r = NULL;
}

/* Per-target means over the folds that scored each target, by name. */
static kace_status target_means(kace_ctx *ctx, const kace_dataset *ds, kace_protocol_result *res)
{
    size_t nw = ds->n_workloads ? ds->n_workloads : 1;
    int *count = calloc(nw, sizeof *count), *targets = NULL;
    kace_target_score *sum = calloc(nw, sizeof *sum);
    size_t n_targets = 0;
    kace_status st = KACE_OK;
    if (!count || !sum) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t f = 0; f < res->n_folds; f++)
        for (size_t i = 0; i < res->folds[f].n_targets; i++) {
            const kace_target_score *ts = &res->folds[f].targets[i];
            count[ts->target]++;
            sum[ts->target].n_candidates += ts->n_candidates;
            for (int p = 0; p < KACE_N_POLICIES; p++)
                sum[ts->target].score[p] += ts->score[p];
        }
    if ((st = list_targets(ctx, ds, &targets, &n_targets)))
        goto done;
    res->targets = calloc(n_targets ? n_targets : 1, sizeof *res->targets);
    if (!res->targets) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n_targets; i++) {
        int w = targets[i];
        if (!count[w])
            continue;
        kace_target_score *ts = &res->targets[res->n_targets++];
        *ts = sum[w];
        ts->target = w;
        for (int p = 0; p < KACE_N_POLICIES; p++)
            ts->score[p] /= count[w];
    }
done:
    free(count);
    free(sum);
    free(targets);
    return st;
}

kace_status kace_eval_folds(kace_ctx *ctx, const kace_dataset *ds, const kace_folds *folds,
                            const kace_eval_options *opt, kace_protocol_result **out)
{
    *out = NULL;
    kace_protocol_result *res = calloc(1, sizeof *res);
    double *v = malloc((folds->n ? folds->n : 1) * sizeof *v);
    kace_status st = KACE_OK;
    if (!res || !v || !(res->folds = calloc(folds->n ? folds->n : 1, sizeof *res->folds))) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    res->n_folds = folds->n;
    folds_job job = {ds, folds, opt, res->folds};
    if ((st = run_tasks(ctx, "evaluating folds", opt->n_threads, folds->n, fold_task, &job)) || (st = target_means(ctx, ds, res)))
        goto done;
    for (int p = 0; p < KACE_N_POLICIES; p++) {
        for (size_t f = 0; f < folds->n; f++)
            v[f] = res->folds[f].score[p];
        kace_mean_ci95(v, folds->n, &res->mean[p], &res->ci95[p]);
    }
    for (size_t f = 0; f < folds->n; f++)
        v[f] = res->folds[f].slowdown_mae_pct;
    kace_mean_ci95(v, folds->n, &res->mae_mean, &res->mae_ci95);
    *out = res;
    res = NULL;
done:
    kace_protocol_result_free(&res);
    free(v);
    return st;
}
