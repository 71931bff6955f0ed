/* The closed learning loop: models refitted on what production observed.
 *
 * Observations (kace_store_add_observation: kace serve --store-observations,
 * the Slurm channel, kace measure) become training rows beside the stored
 * colocations when they are usable: k >= 2 and every member at 100% MPS
 * (the models are fitted on 100% runs only).
 *
 * Retraining fits a candidate of the current model's kind on the stored
 * colocations plus every usable observation except the most recent slice,
 * and measures both models on that held-out slice: the mean relative error
 * of the predicted throughput sum, 100 |predicted - observed| / observed.
 * The caller promotes the candidate only when it does at least as well.
 *
 * Drift compares the current model's error on the most recent observations
 * with its cross-validated error: 5-fold CV (folds by colocation, seed 0)
 * of the same kind fitted on the stored colocations plus the older usable
 * observations, the error it should have on data like its training data.
 * A ratio well above 1 says production no longer looks like the training.
 */
#ifndef KACE_LEARN_H
#define KACE_LEARN_H

#include "kace/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Appends the usable observations of obs to ds (loaded from the same store:
 * members are found by name; one unknown there fails with
 * KACE_ERR_NOT_FOUND). rows (malloc'ed) receives their indices in ds, in
 * the list's order (oldest first); *n_rows how many were usable. */
kace_status kace_learn_append_observations(kace_ctx *ctx, kace_dataset *ds, const kace_observed_list *obs, int **rows,
                                           size_t *n_rows);

/* Mean relative error (%) of m's predicted sum over rows[0..n) of ds
 * (NaN when n is 0). */
kace_status kace_learn_error(kace_ctx *ctx, const kace_model *m, const kace_dataset *ds, const int *rows, size_t n,
                             double *err);

/* A fit spec for a candidate of m's kind (its feature set, default
 * parameters). */
void kace_learn_spec_like(const kace_model *m, kace_fit_spec *spec);

/* k-fold cross-validated relative error (%) of spec over rows[0..n) of ds:
 * each fold's rows predicted by a fit on the other folds only. */
kace_status kace_learn_cv_error(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
                                const kace_fit_spec *spec, int n_folds, double *err);

typedef struct kace_retrain_options {
    double holdout;     /* fraction of the usable observations (the most recent) held out; default 0.25 */
    size_t min_holdout; /* at least this many held out, and as many left to train on; default 3 */
} kace_retrain_options;

void kace_retrain_options_default(kace_retrain_options *o);

typedef struct kace_retrain_report {
    size_t n_stored;        /* stored colocations fitted */
    size_t n_observed;      /* usable observations in all */
    size_t n_obs_train;     /* of them fitted (the older ones) */
    size_t n_holdout;       /* of them held out (the most recent) */
    size_t n_outliers;      /* of the older ones, left out of the fit as outliers (see kace_retrain) */
    double current_err;     /* current model on the held-out slice (NaN without one) */
    double candidate_err;   /* candidate on the held-out slice */
    bool better;            /* candidate_err <= current_err, or no current model */
} kace_retrain_report;

/* Fits a candidate (as spec asks; NULL: current's kind, defaults) on
 * ds's rows base[0..n_base) plus the older usable observations of obs (ds
 * is extended with them) and compares it with current on the held-out
 * slice. Fails (KACE_ERR_INVALID) with fewer than 2 x min_holdout usable
 * observations. *candidate is the caller's. */
kace_status kace_retrain(kace_ctx *ctx, kace_dataset *ds, const int *base, size_t n_base,
                         const kace_observed_list *obs, const kace_model *current, const kace_fit_spec *spec,
                         const kace_retrain_options *o, kace_model **candidate, kace_retrain_report *report);

typedef struct kace_drift {
    size_t n_recent;   /* usable observations in the recent window */
    double recent_err; /* m's mean relative error (%) on them */
    double cv_err;     /* cross-validated error (%) of m's kind on the stored + older observed rows */
    double ratio;      /* recent_err / cv_err (NaN without recent observations) */
} kace_drift;

/* Drift of m over the last `window` usable observations of obs (ds, as
 * loaded from the store, is extended with the observations). */
kace_status kace_learn_drift(kace_ctx *ctx, kace_dataset *ds, const int *base, size_t n_base,
                             const kace_observed_list *obs, const kace_model *m, size_t window, kace_drift *out);

/* A simulation of the loop (the learning curve): a model fitted on the
 * initial rows, the stream rows replayed one by one as observations; every
 * `every` observations a candidate is fitted on the initial rows plus the
 * observations seen except the most recent slice (o) and promoted as in
 * kace_retrain. After each step, decision quality: for every workload, the
 * model's choice among all its measured colocations in ds (achieved /
 * Oracle), the mean over workloads; beside it a model that never learns. */
typedef struct kace_curve_point {
    size_t n_seen;        /* observations replayed so far */
    double learner;       /* decision quality of the model in use */
    double never;         /* the same for the model fitted on the initial rows only */
    double candidate_err, current_err; /* the retrain's held-out errors (NaN: no retrain here) */
    bool promoted;
} kace_curve_point;

/* spec: the kind to fit. *points (malloc'ed) receives one point per step,
 * the first at 0 observations. */
kace_status kace_learn_curve(kace_ctx *ctx, const kace_dataset *ds, const int *initial, size_t n_initial,
                             const int *stream, size_t n_stream, size_t every, const kace_fit_spec *spec,
                             const kace_retrain_options *o, kace_curve_point **points, size_t *n_points);

#ifdef __cplusplus
}
#endif

#endif
