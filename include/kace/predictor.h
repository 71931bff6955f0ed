/* What every consumer of a model holds: a predictor, a table of functions
 * with capability bits (as curl's TLS backends or nvtop's vendor tables).
 *
 * Each model kind (linear, forest, slowdown) implements kace_predictor_ops
 * once; lib/model/predictor.c lists them in the one kind table, which is also the
 * only kind <-> name mapping. Eval, fit, group search, placement, the
 * scheduler, serve and the Slurm plugins call the kace_predict_* functions
 * below and test capability bits; they never ask which kind they hold. A
 * test can hand them a fake: fill a kace_predictor_ops and wrap it with
 * kace_predictor_new (or a kace_predictor on the stack).
 */
#ifndef KACE_PREDICTOR_H
#define KACE_PREDICTOR_H

#include "kace/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Capability bits (kace_predictor_ops.caps). */
enum {
    KACE_PRED_MEMBERS = 1u << 0,    /* each member's throughput, not only the group's sum */
    KACE_PRED_CONFIDENCE = 1u << 1, /* a confidence in [0, 1] that means something (else always 1) */
    KACE_PRED_NORM = 1u << 2,       /* honours kace_norm: in paper mode a batch's predictions depend on
                                       the batch (the published code z-scored the candidates together) */
    KACE_PRED_BOUNDS = 1u << 3,     /* upper bounds on member throughputs: branch-and-bound group search */
    KACE_PRED_COVERAGE = 1u << 4,   /* says how far a group lies from the training workloads */
};

/* One group of k workloads (indices into a dataset). */
typedef struct kace_group_ref {
    const int *workload;
    int k;
} kace_group_ref;

/* How far a group lies from what a model was trained on (see
 * kace_slowdown_coverage in model.h). */
typedef kace_slowdown_coverage kace_coverage;

typedef struct kace_predictor kace_predictor;
struct kace_bound_ops; /* library-internal: the bounds branch and bound needs */
struct kace_model_ops; /* library-internal: what the model object needs of a kind */

typedef struct kace_predictor_ops {
    const char *name;   /* "linear", "forest", "slowdown": model files, the store, replies */
    const char *policy; /* the evaluation policy whose choices it makes ("KACE", "Xu", "kace") */
    unsigned caps;      /* KACE_PRED_* */
    int max_k;          /* largest group it predicts */
    /* Required. Throughput sum of one group, features z-scored with the
     * training statistics. confidence and member may be NULL; the caller has
     * set them to 1 and NaN, which a predictor without the bit leaves. */
    kace_status (*predict)(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds, const int *group, int k,
                           double *sum, double *confidence, double *member);
    /* Optional (NULL: predict, group by group). n groups at once under norm;
     * confidence may be NULL. */
    kace_status (*predict_batch)(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds,
                                 const kace_group_ref *groups, size_t n, kace_norm norm, double *sum,
                                 double *confidence);
    /* Optional (NULL: the batch's sums z-scored with the label statistics
     * the caller gives). The predicted label in z-units, for models that
     * predict in z-units (MSE as the paper computes it). */
    kace_status (*predict_z)(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds,
                             const kace_group_ref *groups, size_t n, kace_norm norm, double *z);
    /* Optional (KACE_PRED_COVERAGE). */
    void (*coverage)(const kace_predictor *p, const kace_dataset *ds, const int *group, int k, kace_coverage *out);
    /* Optional (NULL: kace_features_kace). The features whose metrics a
     * workload needs to be predicted; error messages name the missing one. */
    const kace_feature_set *(*features)(const kace_predictor *p);
    /* Optional (KACE_PRED_BOUNDS). */
    const struct kace_bound_ops *bounds;
    /* Model kinds only (NULL for a fake): fits this kind. */
    kace_status (*fit)(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n, const kace_fit_spec *spec,
                       kace_model **out);
    /* Optional: frees self when a handle made by kace_predictor_new is freed. */
    void (*free)(void *self);
    /* Model kinds only (NULL for a fake): the kind's part of the model object
     * (restore after load, release, feature-row predictions). */
    const struct kace_model_ops *model;
} kace_predictor_ops;

/* A handle: the table and its state (a model, or a fake's data). Public so
 * that a handle may live on the stack; fill both fields. */
struct kace_predictor {
    const kace_predictor_ops *ops;
    void *self;
};

/* The predictor of a model; valid as long as the model. */
const kace_predictor *kace_model_predictor(const kace_model *m);

/* A heap handle around ops and self (ops->free, when set, frees self at
 * kace_predictor_free). Fails on missing name or predict. */
kace_status kace_predictor_new(kace_ctx *ctx, const kace_predictor_ops *ops, void *self, kace_predictor **out);
void kace_predictor_free(kace_predictor **p);

const char *kace_predictor_name(const kace_predictor *p);
const char *kace_predictor_policy(const kace_predictor *p);
/* Whether every capability bit of caps is set. */
bool kace_predictor_can(const kace_predictor *p, unsigned caps);
const kace_feature_set *kace_predictor_features(const kace_predictor *p);

/* Throughput sum of one group (samples/s); confidence (may be NULL) is 1
 * and member (may be NULL, k entries) NaN where the predictor does not give
 * them. */
kace_status kace_predict_group(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds, const int *group,
                               int k, double *sum, double *confidence, double *member);
/* n groups at once under norm; confidence may be NULL. */
kace_status kace_predict_batch(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds,
                               const kace_group_ref *groups, size_t n, kace_norm norm, double *sum,
                               double *confidence);
/* The groups of colocations rows[0..n) of ds. */
kace_status kace_predict_rows(kace_ctx *ctx, const kace_predictor *p, kace_norm norm, const kace_dataset *ds,
                              const int *rows, size_t n, double *pred);
/* Predicted labels of colocations rows[0..n) in z-units of a label with
 * mean label_mean and std label_std (what eval scores MSE on). */
kace_status kace_predict_rows_z(kace_ctx *ctx, const kace_predictor *p, kace_norm norm, const kace_dataset *ds,
                                const int *rows, size_t n, double label_mean, double label_std, double *z);
/* Coverage of a group; coverage 1 and member -1 when the predictor cannot tell. */
void kace_predictor_coverage(const kace_predictor *p, const kace_dataset *ds, const int *group, int k,
                             kace_coverage *out);

/* The model kinds: name <-> kind through the one kind table. */
const char *kace_model_kind_name(kace_model_kind kind);
/* -1 when unknown. */
int kace_model_kind_from_name(const char *name);
/* The table of a kind (NULL when out of range). */
const kace_predictor_ops *kace_model_kind_ops(kace_model_kind kind);

/* The profile metrics a complete profile has (every model can predict a
 * workload that has them), and their count. */
const kace_metric *kace_profile_metrics(int *n);

#ifdef __cplusplus
}
#endif

#endif
