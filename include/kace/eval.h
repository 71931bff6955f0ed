/* The KACE paper's evaluation (see docs/protocol in the README):
 *  - kace_eval_splits: partner choice per target on the published splits,
 *    per training size n_occur and seed, every policy, MSE/R2, fit time;
 *  - kace_eval_unseen: family-exclusion splits (unseen workloads), which
 *    also serves the 3-way study when given the triples dataset.
 * Scores are achieved / Oracle of the measured throughput sums.
 */
#ifndef KACE_EVAL_H
#define KACE_EVAL_H

#include "kace/policy.h"
#include "kace/protocol.h"
#include "kace/store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kace_eval_mode {
    KACE_MODE_PAPER = 0, /* fit paper_fit rows; z-score candidates with their own stats */
    KACE_MODE_CLEAN = 1  /* fit every training row; training stats everywhere */
} kace_eval_mode;

typedef struct kace_eval_options {
    kace_eval_mode mode;
    bool with_xu;                  /* also fit the Xu et al. random forest */
    const kace_feature_set *xu_features; /* its features (default kace_features_xu) */
    bool with_slowdown;            /* also fit kace's slowdown model */
    kace_slowdown_params slowdown;
    kace_model_kind kace_kind;     /* kace's model: KACE_MODEL_SLOWDOWN (default) or KACE_MODEL_PRESSURE */
    kace_forest_search xu_search;  /* its randomized search */
    int n_threads;                 /* splits/targets evaluated at once; 0 = one per CPU */
    /* kace_eval_unseen scores opt->mode only; the other mode's rows keep their
     * targets with NaN scores (kace eval --mode paper or clean prints one). */
    bool one_mode;
    /* The metrics every model reads (KACE_METRICS_FULL = 0: all): the
     * paper's linear model and Xu's forest on their features restricted to
     * the set, kace's model on the set's metrics. */
    kace_metric_set metrics;
    /* What a choice is scored by (KACE_OBJ_RAW = 0: the measured sum, the
     * paper's): every policy's pick and the Oracle under it, and kace's
     * model picks by its predicted objective (the paper's and Xu's models
     * predict sums, so they pick by the sum). */
    kace_objective objective;
} kace_eval_options;

/* Defaults: paper mode, Xu on (10 search iterations, 5 folds, seed 0, one
 * xgboost thread, tree counts scaled by 0.05, see kace_forest_search), the
 * slowdown model on with its default parameters. */
void kace_eval_options_default(kace_eval_options *o);

/* Fewest training rows a target's models are fitted on: a family-exclusion
 * split that leaves fewer (a small or partial data set) is not scored. */
#define KACE_EVAL_MIN_TRAIN 2

typedef struct kace_target_score {
    int target;        /* workload index */
    int n_candidates;
    double score[KACE_N_POLICIES]; /* NaN for a policy that was not run, and for
                                      every policy of a target not scored */
    size_t n_train;    /* its training rows; below KACE_EVAL_MIN_TRAIN: not scored */
} kace_target_score;

typedef struct kace_split_result {
    int n_occur, seed;
    size_t n_train, n_fit, n_test;
    double score[KACE_N_POLICIES];   /* mean over targets */
    double mse, r2;                  /* KACE model on the whole test set, z-units */
    double xu_mse, xu_r2;
    double slowdown_mse, slowdown_r2;
    double slowdown_mae_pct;         /* per-member |predicted - measured| in % of exclusive */
    /* Relative error of the predicted sum (%) over the test colocations whose
     * confidence is at or above the median, and below it. */
    double slowdown_err_confident, slowdown_err_unsure;
    double slowdown_fit_seconds;
    double fit_seconds, xu_fit_seconds;
    kace_target_score *targets;
    size_t n_targets;
} kace_split_result;

typedef struct kace_split_results {
    kace_split_result *items;
    size_t n;
} kace_split_results;

/* Runs every (n_occur, seed) of the splits. */
/* Score of the colocation p picks among candidate rows cand[0..n) (all
 * containing one target): its measured sum over the best measured sum. */
kace_status kace_eval_choice(kace_ctx *ctx, const kace_predictor *p, kace_norm norm, const kace_dataset *ds,
                             const int *cand, size_t n, double *score);

kace_status kace_eval_splits(kace_ctx *ctx, const kace_dataset *ds, const kace_splits *splits,
                             const kace_eval_options *opt, kace_split_results **out);
void kace_split_results_free(kace_split_results **r);

/* Does kace's confidence tell good predictions from bad ones? The mean
 * relative error (%) of the predicted sum over test colocations at or above
 * the median confidence, and below it (NaN with fewer than 2 rows). */
typedef struct kace_confidence_check {
    double err_confident, err_unsure;
} kace_confidence_check;

/* For each workload W in ds's colocations: fit on the colocations containing
 * no workload of W's family, choose among those containing W. Every
 * colocation is fitted in both modes (there is no published internal split
 * here), so one fit per target is scored both ways: out[KACE_MODE_PAPER] and
 * out[KACE_MODE_CLEAN] each receive *n_out rows, one per target, which the
 * caller frees with free. opt->mode is not used unless opt->one_mode. check (may be NULL)
 * receives the confidence check of kace's model over every target's test
 * rows pooled (NaN without the slowdown model). */
kace_status kace_eval_unseen(kace_ctx *ctx, const kace_dataset *ds, const kace_eval_options *opt,
                             kace_target_score *out[2], size_t *n_out, kace_confidence_check *check);

/* ---- any protocol (include/kace/protocol.h) ----------------------------- */

typedef struct kace_fold_result {
    size_t n_train, n_test;
    kace_target_score *targets;      /* one per scored target of the fold */
    size_t n_targets;
    double score[KACE_N_POLICIES];   /* mean over the fold's targets */
    double slowdown_mae_pct;         /* per-member |predicted - measured| in % of exclusive, test rows */
    double fit_seconds;              /* all models of the fold */
} kace_fold_result;

typedef struct kace_protocol_result {
    kace_fold_result *folds;         /* one per fold, in fold order */
    size_t n_folds;
    /* Per policy: the mean of the fold means and the half-width of its 95%
     * t-interval over folds (kace_mean_ci95; NaN with fewer than 2 folds). */
    double mean[KACE_N_POLICIES], ci95[KACE_N_POLICIES];
    double mae_mean, mae_ci95;       /* the same for slowdown_mae_pct */
    /* Per target: its scores averaged over the folds that scored it
     * (n_candidates summed), by workload name. */
    kace_target_score *targets;
    size_t n_targets;
} kace_protocol_result;

/* Fits the models opt asks for on each fold's training rows only and scores
 * every target of the fold among its candidates (opt->mode chooses the
 * normalization: paper = candidates' own statistics, clean = training's).
 * The fold's index seeds its fits. */
kace_status kace_eval_folds(kace_ctx *ctx, const kace_dataset *ds, const kace_folds *folds,
                            const kace_eval_options *opt, kace_protocol_result **out);
void kace_protocol_result_free(kace_protocol_result **r);

/* Means over seeds for each n_occur: means[n_occur][policy]. */
double kace_eval_mean(const kace_split_results *r, int n_occur, kace_policy p);

#ifdef __cplusplus
}
#endif

#endif
