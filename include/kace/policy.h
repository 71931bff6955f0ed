/* Colocation policies: given candidate colocations (all containing a target
 * workload), which one to run. Model-based policies rank by predicted
 * throughput sum; rules rank by a single profile aggregate.
 */
#ifndef KACE_POLICY_H
#define KACE_POLICY_H

#include "kace/predictor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kace_policy {
    KACE_POL_KACE = 0,  /* the paper's KACE: linear model on summed features */
    KACE_POL_XU,        /* random forest on Xu et al. features */
    KACE_POL_ORACLE,    /* highest measured sum */
    KACE_POL_RANDOM,    /* expectation: mean measured sum */
    KACE_POL_MEMCAP,    /* lowest summed memcap */
    KACE_POL_SM,        /* highest mean sm% */
    KACE_POL_MEM,       /* lowest mean mem% */
    KACE_POL_BEST_RULE, /* per target, best of Random, MEMCAP, SM%, MEM% */
    KACE_POL_SLOWDOWN,  /* kace's default: the slowdown model */
    KACE_N_POLICIES
} kace_policy;

const char *kace_policy_name(kace_policy p);
/* -1 when unknown; matching ignores case ("memcap", "SM%", "best-rule"). */
int kace_policy_from_name(const char *name);

/* Index (into rows) chosen by a rule policy (MEMCAP, SM, MEM) or ORACLE.
 * The first row wins ties. */
kace_status kace_policy_pick_rule(kace_ctx *ctx, kace_policy p, const kace_dataset *ds, const int *rows,
                                  size_t n, size_t *pick);

/* Index (into rows) with the highest prediction; first wins ties. */
kace_status kace_policy_pick_model(kace_ctx *ctx, const kace_predictor *p, kace_norm norm, const kace_dataset *ds,
                                   const int *rows, size_t n, size_t *pick);

/* What a colocation is worth. Raw is the paper's: workloads whose rates
 * differ a thousandfold make it pick the fastest partner, so sites compare
 * colocations by each member's share of its solo rate instead. */
typedef enum kace_objective {
    KACE_OBJ_RAW = 0,        /* throughput sum, samples/s */
    KACE_OBJ_NORMALIZED = 1, /* sum of each member's throughput / its exclusive throughput */
    KACE_OBJ_FAIR = 2,       /* the smallest such share (max-min fairness) */
    KACE_N_OBJECTIVES
} kace_objective;

/* "raw", "normalized", "fair". */
const char *kace_objective_name(kace_objective o);
/* -1 when unknown. */
int kace_objective_from_name(const char *name);
/* The objective of members group[0..k) of ds running at throughput[0..k)
 * (samples/s each); NaN when a share is needed and a member has no
 * positive exclusive throughput. */
double kace_objective_of(kace_objective o, const kace_dataset *ds, const int *group, int k, const double *throughput);
/* The objective of a measured colocation. */
double kace_objective_measured(kace_objective o, const kace_dataset *ds, const kace_colocation *c);
/* The predicted objective of a group. Raw is the predicted sum; the others
 * need each member's throughput (KACE_PRED_MEMBERS: KACE_ERR_UNSUPPORTED
 * from a model that predicts sums only). confidence and member (k entries)
 * may be NULL. */
kace_status kace_predict_objective(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds, const int *group,
                                   int k, kace_objective o, double *value, double *confidence, double *member);
/* kace_policy_pick_model under objective o: the row with the highest
 * predicted objective, first wins ties. A predictor of sums only (the
 * paper's linear model, Xu's forest) ranks by the predicted sum under every
 * objective: that is the choice it makes. */
kace_status kace_policy_pick_objective(kace_ctx *ctx, const kace_predictor *p, kace_norm norm, kace_objective o,
                                       const kace_dataset *ds, const int *rows, size_t n, size_t *pick);

/* One candidate partner of a target, ranked. */
typedef struct kace_partner {
    int workload;        /* index into the dataset */
    double predicted;    /* predicted throughput sum, samples/s (or objective, kace_rank_partners_by) */
    double confidence;   /* 0..1 (1 from predictors without KACE_PRED_CONFIDENCE) */
    double measured;     /* measured sum where a 100% run exists, else NaN */
    double exclusive_sum;/* sum of exclusive throughputs (the no-interference bound) */
} kace_partner;

/* Ranks every workload of among (or every workload with a complete profile
 * when among is NULL) as partner of target, best first. out must hold
 * n_among (or ds->n_workloads) entries; *n_out receives how many were ranked. */
kace_status kace_rank_partners(kace_ctx *ctx, const kace_dataset *ds, const kace_predictor *p, kace_norm norm,
                               int target, const int *among, size_t n_among, kace_partner *out,
                               size_t *n_out);
/* The same under objective o: predicted and measured are the pair's
 * objective (kace_predict_objective, kace_objective_measured). */
kace_status kace_rank_partners_by(kace_ctx *ctx, const kace_dataset *ds, const kace_predictor *p, kace_norm norm,
                                  kace_objective o, int target, const int *among, size_t n_among, kace_partner *out,
                                  size_t *n_out);

#ifdef __cplusplus
}
#endif

#endif
