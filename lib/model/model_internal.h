/* The model object (model.c): its fields, the file format version, and
 * what it needs of each kind. Internal. */
#ifndef KACE_LIB_MODEL_INTERNAL_H
#define KACE_LIB_MODEL_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "kace/model.h"
#include "kace/predictor.h"
#include "trees.h"

/* 2 added the slowdown model's training profile ranges; version 1 files
 * still load (their predictions have no range to check against). 3 added
 * the metric set ("metrics <set>" after the features line); a model that
 * reads every metric is still written as version 2, the oldest format that
 * carries it, so files and readers from before metric sets stay as they
 * were, and a version-2 reader rejects a model it would misread. */
#define KACE_MODEL_FORMAT_VERSION 3
#define KACE_MODEL_FORMAT_FULL_METRICS 2

struct kace_model {
    kace_model_kind kind;
    kace_predictor predictor; /* the kind's table and this model (kace_model_set_kind) */
    const kace_feature_set *features;
    kace_metric_set metrics; /* what the model reads of each workload */
    int n_features;
    double x_mean[KACE_MAX_FEATURES], x_std[KACE_MAX_FEATURES]; /* std 0 -> feature ignored */
    double y_mean, y_std;
    size_t n_fit;                           /* rows it was fitted on */
    /* Linear: coef[0] intercept, coef[1 + j] feature j, in z-units. */
    double coef[KACE_MAX_FEATURES + 1];
    /* Forest: an xgboost booster and its serialized JSON (for saving). */
    void *booster;
    char *booster_json;
    size_t booster_json_len;
    kace_forest_params forest;
    /* The trees as kace evaluates them, read from booster_json (xgboost is
     * never handed a model buffer from a file: it trusts it blindly). */
    kace_trees trees;
    /* A kind's own fitted state, when it keeps one (the pressure model):
     * freed by its release, written and read by its write and read. */
    void *state;
    /* Slowdown model (slowdown.c): ridge on log(throughput / exclusive) of
     * each member, averaged with boosted trees on the same member features. */
    int n_member_features;
    double m_mean[KACE_MAX_FEATURES], m_std[KACE_MAX_FEATURES];
    double ridge[KACE_MAX_FEATURES + 1];
    double ridge_raw[KACE_MAX_FEATURES + 1]; /* the same on unscaled features (derived, for speed) */
    double ridge_alpha, tree_weight;
    /* The range of each profile metric the model reads, over the workloads
     * of its training rows (indexed by kace_metric): a workload outside it
     * is one the model has to extrapolate to, which lowers the confidence. */
    bool has_profile_range;
    double profile_lo[KACE_N_METRICS], profile_hi[KACE_N_METRICS];
};

/* What the model object (model.c: free, predict_z, the model file) needs of
 * a kind beyond its predictor table, reached through m->predictor.ops->model
 * so that model.c names no kind's file. */
struct text_buf; /* base/text_buf.h */

typedef struct kace_model_ops {
    /* Rebuilds what a loaded model derives from its saved fields (the trees
     * from booster_json); NULL: nothing to rebuild. */
    kace_status (*restore)(kace_ctx *ctx, kace_model *m);
    /* Frees what the kind holds (booster, its JSON, trees); NULL: nothing. */
    void (*release)(kace_model *m);
    /* The prediction of z-scored feature rows in z-units; NULL: the kind
     * predicts groups, not feature rows. */
    kace_status (*predict_z)(kace_ctx *ctx, const kace_model *m, const double *Z, size_t n, double *pred_z);
    /* The member feature count a saved model must have (NULL: 0). */
    int (*member_features)(void);
    /* The booster JSON to save when the model holds none (malloc'ed; a
     * fitted slowdown model makes it from its trees only when saved);
     * NULL: the held booster_json is saved as it is. */
    kace_status (*booster_json)(kace_ctx *ctx, const kace_model *m, char **json, size_t *len);
    /* The kind's own section of the model file after the feature lines
     * (NULL: model.c writes the kind's fields). read parses it from *p
     * (up to end), counting lines in *line for messages, and leaves *p after it. */
    kace_status (*write)(kace_ctx *ctx, const kace_model *m, struct text_buf *t);
    kace_status (*read)(kace_ctx *ctx, kace_model *m, const char **p, const char *end, int *line,
                        const char *origin);
} kace_model_ops;

/* Sets the kind and the predictor every consumer uses (the kind's table
 * from kace_model_kind_ops). */
void kace_model_set_kind(kace_model *m, kace_model_kind kind);

/* Mean and sample standard deviation (1 when 0) of the measured sums of
 * rows, kept for the model file's header, and every x_std 1: for a model
 * whose features are not standardized. */
void kace_model_set_label_stats(kace_model *m, const kace_dataset *ds, const int *rows, size_t n);

/* Z-scores row-major X (n x d) into Z with the given stats (std 0 -> 0). */
void kace_zscore(const double *X, size_t n, int d, const double *mean, const double *std, double *Z);

#endif
