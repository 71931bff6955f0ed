/* The pressure model (pressure.c): each member keeps the fraction
 *     f_i = exp(a_i) / (1 + exp(s_i) * sum over partners j of exp(p_j))
 * of its exclusive throughput, where sensitivity s and pressure p are smooth
 * functions of a workload's own solo metrics plus per-workload offsets with
 * a Gaussian-process prior over profile space. Internal. */
#ifndef KACE_LIB_MODEL_PRESSURE_H
#define KACE_LIB_MODEL_PRESSURE_H

#include "model_internal.h"

extern const kace_predictor_ops kace_pressure_ops;

/* The hyper-parameters a fit uses; mu = 0 chooses mu by cross-validation
 * over the fitting rows. */
typedef struct kace_pressure_params {
    double lambda;  /* penalty on the profile slopes s1, p1 */
    double mu;      /* penalty on the offsets (|eta|^2, d = L eta); 0 = by CV */
    double tau;     /* nugget: the share of an offset that does not transfer */
    double length;  /* length scale of the prior over kernel-mix features */
    bool prior_lw;  /* the prior's features include log threads */
    int folds;      /* CV folds (colocations dealt by a seeded shuffle) */
    uint64_t seed;
    bool independent; /* offsets with prior K = I (an unseen workload gets none) */
    bool blend;       /* the mean of the fractions of a smooth-prior fit and an independent one */
    /* The metrics it reads (KACE_METRICS_FULL = 0, the default): without
     * counters the throughput features drop out; with system metrics only,
     * log sm% stands in for log threads. */
    kace_metric_set metrics;
} kace_pressure_params;

void kace_pressure_params_default(kace_pressure_params *p);

/* Fits on colocations rows[0..n) of ds. */
kace_status kace_pressure_fit(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n,
                              const kace_pressure_params *params, kace_model **out);

/* A workload's latents under part `part` of model m (lat: a calibration,
 * s sensitivity, p pressure), from its metrics and, when the model was
 * fitted on it (by name), its own offsets. */
kace_status kace_pressure_latents(kace_ctx *ctx, const kace_model *m, int part, const kace_workload *w, double *lat);

/* What a fit chose (for tests and docs). */
typedef struct kace_pressure_info {
    int n_parts;       /* 2: the mean of the smooth-prior fit and the independent-offsets fit */
    int n_workloads;   /* training workloads */
    double s1[2], p1[2], mu[2];
} kace_pressure_info;
void kace_pressure_describe(const kace_model *m, kace_pressure_info *info);

#endif
