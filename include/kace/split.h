/* MPS thread split advisor: how to divide a GPU's threads between
 * colocated workloads (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE).
 *
 * The split model predicts each member's throughput at any split from the
 * profiles and the member's exclusive throughput at its own percentage
 * (metrics exclusive_mps10..100): the member keeps a fraction of
 * exclusive(p) that depends on its partners' shares of the GPU and on how
 * much their thread percentages overlap (none at 30/70, full at 100/100).
 * The fraction is fitted by ridge regression on log(fraction) over measured
 * split campaigns (the raw partitions_* files: 10/90 ... 90/10 and 100/100).
 *
 * The advisor scores candidate splits by the model and picks one under a
 * policy: highest throughput sum, max-min fairness (highest smallest
 * fraction of exclusive throughput), or a latency-sensitive member that
 * must keep a target fraction of its exclusive throughput while the others
 * (best effort) get the rest.
 */
#ifndef KACE_SPLIT_H
#define KACE_SPLIT_H

#include "kace/dataset.h"
#include "kace/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A measured campaign row: a pair at the 9 partitions 10/90..90/10 (member
 * 0 gets 10*(s+1)%, member 1 the rest) and at 100/100 (s = 9). */
#define KACE_SPLIT_GRID 10
typedef struct kace_split_grid {
    int workload[2];                   /* member 0 is the campaign's "LS" column */
    double thr[KACE_SPLIT_GRID][2];    /* samples/s, NaN where not measured */
    int campaign;                      /* which dataset the grid came from (caller's numbering) */
} kace_split_grid;

/* Percentage of member (0 or 1) at grid split s. */
int kace_split_grid_pct(int s, int member);

/* Collects grids from the 2-way colocations of one campaign's dataset
 * `from` (loaded with all_splits) that ran at the grid's splits, with
 * workload indices of dataset `into` (matched by name; workloads missing
 * there are skipped). Appends to *grids (realloc'ed; the caller frees it),
 * tagging them with campaign. */
kace_status kace_split_grids_collect(kace_ctx *ctx, const kace_dataset *from, const kace_dataset *into, int campaign,
                                     kace_split_grid **grids, size_t *n);

/* Every 2-way partitions_* campaign of a store, and its "mps-splits" set (a
 * device dataset's, scripts/device), each loaded with all its splits,
 * as grids over ds's workloads, each campaign numbered in set order.
 * *grids is malloc'ed (NULL with *n = 0 when the store has none). */
kace_status kace_split_grids_load(kace_ctx *ctx, kace_store *store, const kace_dataset *ds, kace_split_grid **grids,
                                  size_t *n);

typedef struct kace_split_model kace_split_model;

/* True when workload w has every metric the split model reads: the
 * profile, and its exclusive throughput under MPS at 100% and at no fewer
 * than KACE_SPLIT_MIN_CURVE_POINTS of 10, 20, ..., 100% (the model takes
 * the curve linearly between measured points: kace's device campaign
 * measures 10, 30, 50, 70, 90 and 100). */
#define KACE_SPLIT_MIN_CURVE_POINTS 5
bool kace_split_workload_ok(const kace_dataset *ds, int w);

/* A workload's exclusive throughput under MPS at pct (1..100) from its
 * metric row, as the split model takes it: linear between the measured
 * shares around pct, proportional below the lowest. NaN when the row has
 * no exclusive_mps100 or fewer than KACE_SPLIT_MIN_CURVE_POINTS shares. */
double kace_split_exclusive_at(const double *metric, int pct);

/* Ridge penalties the fit chooses from (0.1, 1, 10, 100) and the number of
 * pair-grouped cross-validation folds it uses to choose. */
#define KACE_SPLIT_N_ALPHAS 4
extern const double kace_split_alphas[KACE_SPLIT_N_ALPHAS];
#define KACE_SPLIT_CV_FOLDS 5

/* Fits the split model on grids[rows[i]] (every measured cell of each);
 * workloads without a complete profile are skipped. alpha: ridge penalty on
 * z-scored features; 0 chooses it from kace_split_alphas by cross-validation
 * inside these rows only (folds of kace_split_cv_folds: a pair's grids never
 * straddle folds), on the held-out squared error of log(fraction), then
 * refits on all rows with the chosen penalty. */
kace_status kace_split_fit(kace_ctx *ctx, const kace_dataset *ds, const kace_split_grid *grids, const size_t *rows,
                           size_t n_rows, double alpha, kace_split_model **out);
void kace_split_model_free(kace_split_model **m);

/* The penalty the model was fitted with. cv_mse (may be NULL) receives, per
 * kace_split_alphas entry, the cross-validated mean squared error of
 * log(fraction) (NaN when the penalty was given, not chosen). */
double kace_split_model_alpha(const kace_split_model *m, double cv_mse[KACE_SPLIT_N_ALPHAS]);

/* Fits the split model on every grid of store (kace_split_grids_load) with
 * the default penalty choice; ds is store's whole dataset (NULL: loaded
 * here). The model then advises on any dataset's workloads: another GPU's,
 * whose few grids cannot fit one (kace predict/serve --split-train-db).
 * *n_grids receives the grids fitted on; KACE_ERR_MODEL when they are too
 * few (none included). */
kace_status kace_split_fit_store(kace_ctx *ctx, kace_store *store, const kace_dataset *ds, kace_split_model **out,
                                 size_t *n_grids);

/* Cross-validation fold of each of grids[rows[i]]: the distinct unordered
 * pairs with complete profiles, in order of first appearance, dealt
 * round-robin into min(KACE_SPLIT_CV_FOLDS, pairs) folds; -1 for grids the
 * fit skips. Returns the number of folds. */
int kace_split_cv_folds(const kace_dataset *ds, const kace_split_grid *grids, const size_t *rows, size_t n_rows,
                        int *fold);

/* Predicted throughput (samples/s) of each of the k members of group at
 * thread percentages pct[0..k) (1..100 each). */
kace_status kace_split_predict(kace_ctx *ctx, const kace_split_model *m, const kace_dataset *ds, const int *group,
                               int k, const int *pct, double *thr);

/* How much the model over-predicts, as a factor: the 90th percentile of
 * predicted / measured over its training cells. The latency policy asks for
 * target x this factor, so the target holds despite the model's error. */
double kace_split_model_overshoot(const kace_split_model *m);

typedef enum kace_split_policy {
    KACE_SPLIT_MAX_SUM = 0, /* highest throughput sum */
    KACE_SPLIT_MAX_MIN,     /* highest smallest throughput / exclusive */
    KACE_SPLIT_LATENCY,     /* member ls keeps >= target x exclusive; best effort for the rest */
    KACE_SPLIT_N_POLICIES
} kace_split_policy;

const char *kace_split_policy_name(kace_split_policy p);

typedef struct kace_split_goal {
    kace_split_policy policy;
    int ls_member;     /* latency policy: index into the group */
    double ls_target;  /* latency policy: fraction of its exclusive throughput, (0, 1] */
    double ls_margin;  /* latency policy: ask the model for target x margin (>= 1; 0 = the model's overshoot) */
} kace_split_goal;

/* Value of a split under a policy from throughputs thr[0..k) (measured or
 * predicted), for ranking: the sum, the smallest fraction of exclusive, or
 * the best-effort sum (latency; -1 - shortfall when the LS member misses
 * target x need). exclusive[i] is member i's exclusive throughput. */
double kace_split_value(const kace_split_goal *g, const double *thr, const double *exclusive, int k, double need);

/* Picks one of n candidate splits (pcts: n rows of k percentages) for the
 * group under goal; pred (may be NULL, n x k) receives the predictions.
 * Ties go to the earlier candidate. */
kace_status kace_split_advise(kace_ctx *ctx, const kace_split_model *m, const kace_dataset *ds, const int *group,
                              int k, const kace_split_goal *goal, const int *pcts, size_t n, size_t *choice,
                              double *pred);

/* Leave-one-pair-out evaluation on grids: for each unordered pair, fit on
 * the grids of every other pair, advise each of its grids, score with the
 * measured values. */
#define KACE_SPLIT_N_LS_TARGETS 4
extern const double kace_split_ls_targets[KACE_SPLIT_N_LS_TARGETS]; /* 0.3, 0.5, 0.7, 0.9 */

typedef struct kace_split_case {
    size_t grid;            /* index into grids */
    size_t n_train;         /* grids the model was fitted on */
    size_t n_train_same_pair; /* of those, grids of the advised pair (always 0: checked) */
    double alpha;           /* ridge penalty chosen by cross-validation inside the training grids */
    int n_measured;         /* measured splits of the grid */
    /* Achieved / best measured, per policy (MAX_SUM, MAX_MIN): the advisor,
     * fixed 50/50 and fixed 100/100 (NaN where that split was not measured). */
    double advisor[2], fixed50[2], fixed100[2];
    int chosen[2];          /* grid split chosen by the advisor for MAX_SUM, MAX_MIN */
    /* Latency policy, LS = member 0, per target: -1 when no measured split
     * meets it, else 1 when the advised split meets it, 0 when not; the
     * best-effort throughput over the best measured one meeting the target. */
    int ls_met[KACE_SPLIT_N_LS_TARGETS], ls_met50[KACE_SPLIT_N_LS_TARGETS], ls_met100[KACE_SPLIT_N_LS_TARGETS];
    double ls_be[KACE_SPLIT_N_LS_TARGETS];
} kace_split_case;

typedef struct kace_split_eval {
    kace_split_case *cases;
    size_t n;
    /* Means over cases. */
    double advisor[2], fixed50[2], fixed100[2];
    double ls_met_rate[KACE_SPLIT_N_LS_TARGETS], ls_met50_rate[KACE_SPLIT_N_LS_TARGETS],
        ls_met100_rate[KACE_SPLIT_N_LS_TARGETS], ls_be[KACE_SPLIT_N_LS_TARGETS];
    size_t ls_cases[KACE_SPLIT_N_LS_TARGETS]; /* cases where some measured split meets the target */
    size_t n_pairs;                            /* distinct unordered pairs (= fits) */
    size_t alpha_fits[KACE_SPLIT_N_ALPHAS];    /* fits that chose each kace_split_alphas entry */
} kace_split_eval;

kace_status kace_split_evaluate(kace_ctx *ctx, const kace_dataset *ds, const kace_split_grid *grids, size_t n_grids,
                                kace_split_eval **out);

/* The same, with the model fitted on another dataset's grids (another GPU:
 * train on V100 grids, advise on H100 ones): each pair of ds's grids is
 * advised by a model of train_ds's grids of the other pairs, matched by
 * workload name, and scored on its measured values in ds. */
kace_status kace_split_evaluate_across(kace_ctx *ctx, const kace_dataset *train_ds, const kace_split_grid *train_grids,
                                       size_t n_train_grids, const kace_dataset *ds, const kace_split_grid *grids,
                                       size_t n_grids, kace_split_eval **out);
void kace_split_eval_free(kace_split_eval **e);

/* The training grids for advising pair {a, b}: every grid of ds's grids
 * whose unordered pair differs. rows receives up to n_grids indices. */
size_t kace_split_training_rows(const kace_split_grid *grids, size_t n_grids, int a, int b, size_t *rows);

#ifdef __cplusplus
}
#endif

#endif
