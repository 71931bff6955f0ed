/* Evaluation protocols: which measured colocations a model may be fitted on
 * and which it is scored on, for any colocation set (any k >= 2).
 *
 * A protocol cuts a dataset into folds. Each fold has
 *  - held-out workloads: no training colocation of the fold contains one;
 *  - targets: the workloads scored (the held-out ones, or for k-fold every
 *    workload with candidates in the fold), optionally only those asked for;
 *  - candidates (test rows): the measured colocations containing a target;
 *  - training rows: every row of the training pool that is not a test row
 *    of the fold and contains no held-out workload.
 *
 *  paper               the published splits (one fold per n_occur and seed;
 *                      training rows = the split's train rows)
 *  leave-family-out    one fold per family F: held out = F's workloads
 *  leave-workload-out  one fold per workload W: held out = {W}
 *  leave-batch-size-out one fold per batch size B: held out = the workloads
 *                      of batch B ("train with no workload of that batch size")
 *  kfold               colocations shuffled (seed) and dealt into K folds;
 *                      nothing held out: a target's other colocations train
 *
 * Folds come in a fixed order (family, workload names, batch sizes
 * ascending, fold number), so results are reproducible.
 */
#ifndef KACE_PROTOCOL_H
#define KACE_PROTOCOL_H

#include <stdint.h>

#include "kace/dataset.h"
#include "kace/store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kace_protocol {
    KACE_PROTO_PAPER = 0,
    KACE_PROTO_LEAVE_FAMILY_OUT,
    KACE_PROTO_LEAVE_WORKLOAD_OUT,
    KACE_PROTO_LEAVE_BATCH_OUT,
    KACE_PROTO_KFOLD,
    KACE_N_PROTOCOLS
} kace_protocol;

/* "paper", "leave-family-out", "leave-workload-out", "leave-batch-size-out", "kfold". */
const char *kace_protocol_name(kace_protocol p);
/* -1 when unknown. */
int kace_protocol_from_name(const char *name);

typedef struct kace_protocol_spec {
    kace_protocol protocol;
    int n_folds;                  /* kfold: K, 2..1000 (default 5) */
    uint64_t seed;                /* kfold: the shuffle (default 0) */
    /* Optional restrictions (NULL: none). targets: workload indices; only
     * folds holding one of them are built, and only they are scored.
     * candidates: colocation indices; test rows are taken only from them. */
    const int *targets;
    size_t n_targets;
    const int *candidates;
    size_t n_candidates;
    /* Rows training may use and rows candidates come from (NULL: every row
     * of the dataset), e.g. pairs for training and triples as candidates:
     * the held-out rule applies to the training pool all the same. */
    const int *train_pool;
    size_t n_train_pool;
    const int *test_pool;
    size_t n_test_pool;
    /* A target with fewer candidates in a fold is not scored there: with
     * one there is nothing to choose (default 2). */
    int min_candidates;
    /* paper: the published splits (resolved against this dataset) and the
     * n_occur to keep (0: every one). */
    const kace_splits *splits;
    int n_occur;
} kace_protocol_spec;

void kace_protocol_spec_default(kace_protocol_spec *s);

typedef struct kace_fold {
    char label[KACE_NAME_MAX + 32];  /* "family bert-base-cased-train", "batch 16", "fold 3/5", ... */
    int *train;                      /* training rows, ascending */
    size_t n_train;
    int *test;                       /* candidate rows (each holds >= 1 target), ascending */
    size_t n_test;
    int *targets;                    /* workloads scored here, by name */
    size_t n_targets;
    int *held_out;                   /* workloads no training row contains */
    size_t n_held_out;
} kace_fold;

typedef struct kace_folds {
    kace_fold *items;
    size_t n;
} kace_folds;

/* Builds the folds of spec over ds. A fold without a target to score is
 * left out. Fails (KACE_ERR_INVALID) on a bad spec: an index out of range,
 * kfold with K < 2 or more folds than test rows, paper without splits. */
kace_status kace_protocol_folds(kace_ctx *ctx, const kace_dataset *ds, const kace_protocol_spec *spec,
                                kace_folds **out);
void kace_folds_free(kace_folds **f);

/* Parses a candidate list: one measured colocation per line, its workload
 * names separated by commas (any order); blank lines and lines starting
 * with '#' are skipped. Each line must match a colocation of pool (NULL:
 * every row of ds) with exactly those members; every matching row is
 * taken (repeated runs). Errors name origin:line:col. *rows is malloc'ed,
 * ascending, without repeats. */
kace_status kace_candidates_parse(kace_ctx *ctx, const kace_dataset *ds, const int *pool, size_t n_pool,
                                  const char *text, size_t len, const char *origin, int **rows, size_t *n_rows);

/* The KACE artifact's train/test splits made for any set, as it made its
 * own (lib/decide/paper_splits.c says how; the V100 set's 45 published
 * splits come out row for row): per n_occur and seed, the rows shuffled by
 * NumPy's legacy RandomState(seed).permutation, one pass taking a row whose
 * members are all distinct into training while any member has been taken
 * fewer than n_occur times, the rest tested; paper_fit marks the training
 * rows outside the internal hold-out (the first ceil(fit_holdout m) of a
 * permutation of the m training rows with fit_seed). */
typedef struct kace_split_recipe {
    const int *n_occur;      /* default 2..10 */
    size_t n_n_occur;
    const uint32_t *seeds;   /* default 10, 20, 30, 40, 50 */
    size_t n_seeds;
    uint32_t fit_seed;       /* default 30 (the published code's random_state) */
    double fit_holdout;      /* default 0.2 */
    const int *rows;         /* the rows split, in this order (NULL: every colocation, in dataset order) */
    size_t n_rows;
} kace_split_recipe;

void kace_split_recipe_default(kace_split_recipe *r);

/* One split per (n_occur, seed), n_occur outermost; within a split the
 * training rows in the order taken, then the test rows in shuffled order
 * (the order of the published file). Free with kace_splits_free. */
kace_status kace_splits_make(kace_ctx *ctx, const kace_dataset *ds, const kace_split_recipe *recipe,
                             kace_splits **out);

/* NumPy's legacy RandomState(seed).permutation(n) (MT19937), into perm[0..n). */
void kace_numpy_permutation(size_t n, uint32_t seed, size_t *perm);

/* Mean of the finite values of v[0..n) and the half-width of its 95%
 * Student t confidence interval (NaN with fewer than 2 finite values). */
void kace_mean_ci95(const double *v, size_t n, double *mean, double *half_width);

#ifdef __cplusplus
}
#endif

#endif
