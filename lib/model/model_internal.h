/* The model object, shared by the linear and forest implementations. */
#ifndef KACE_LIB_MODEL_INTERNAL_H
#define KACE_LIB_MODEL_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "kace/model.h"
#include "kace/predictor.h"

/* 2 added the slowdown model's training profile ranges; version 1 files
 * still load (their predictions have no range to check against). */
#define KACE_MODEL_FORMAT_VERSION 2

/* Regression trees in flat arrays, as xgboost's JSON describes them. */
typedef struct kace_tree_node {
    float threshold;      /* split value, or the leaf's value */
    int feature;
    int left, right;      /* -1: a leaf */
    int default_left;     /* where a missing value goes */
} kace_tree_node;

typedef struct kace_trees {
    int n_trees, n_nodes;
    int *tree_root;       /* index of each tree's root in node[] */
    kace_tree_node *node; /* every tree's nodes, one tree after the other */
    int max_depth;        /* the deepest root-to-leaf path */
    /* Shallow ensembles (max_depth <= 4) also as complete trees of depth D
     * (per tree 2^D - 1 splits, 2^D leaves, children of p at 2p+1 and 2p+2):
     * exactly D branch-free steps per tree. */
    int complete_depth;   /* D, or 0 when not built */
    int *c_feature;       /* n_trees x (2^D - 1) */
    float *c_threshold;
    float *c_leaf;        /* n_trees x 2^D */
    double base_score;
    /* n_trees x n_features, from kace_trees_find_monotone (NULL: not
     * known): -1 when the tree never rises as the feature grows (all other
     * features fixed), +1 when it never falls, 0 otherwise. */
    signed char *monotone;
} kace_trees;

/* Reads and checks the trees of an xgboost JSON model with n_features
 * features (every node reached once, children and features in range). */
kace_status kace_trees_from_json(kace_ctx *ctx, const char *json, size_t len, int n_features, kace_trees *out);
void kace_trees_free(kace_trees *t);
/* For trees built in memory (n_trees, n_nodes, tree_root, node, max_depth
 * and base_score set): adds the complete-tree arrays of the fast path. */
void kace_trees_finish(kace_trees *t);
/* Fills t->monotone by checking every tree's leaves (trees with more than
 * 32 leaves get 0s). Leaves it NULL when out of memory. */
void kace_trees_find_monotone(kace_trees *t, int n_features);
/* Sum of the leaves x falls into, plus the base score, computed in float
 * like xgboost (x < threshold goes left; NaN goes the default way). */
double kace_trees_predict(const kace_trees *t, const double *x);
/* The same for n rows of d floats without NaN (the hot path). */
void kace_trees_predict_rows_f(const kace_trees *t, const float *x, int d, int n, double *out);

/* Gradient-boosted regression trees on squared error (boost.c): xgboost's
 * exact greedy method with lambda 0, min_child_weight 1, gamma 0, starting
 * from the label mean. subsample < 1 draws that share of the rows without
 * replacement for each tree. monotone (NULL = none): per feature -1 (the
 * prediction never rises with it), +1 (never falls) or 0. */
typedef struct kace_boost_params {
    int n_rounds, max_depth;
    double learning_rate, subsample;
    uint64_t seed;
    const signed char *monotone;
} kace_boost_params;

/* Fits n x d row-major X to y. json (may be NULL): the trees as an
 * xgboost-style JSON model (malloc'ed; read it with kace_trees_from_json).
 * eval_out (n_eval entries) receives the model's predictions for the rows
 * of X_eval, as kace_trees_predict would give them (cross-validation needs
 * nothing else). */
kace_status kace_boost_fit(kace_ctx *ctx, const double *X, const double *y, size_t n, int d,
                           const kace_boost_params *p, char **json, size_t *json_len, const double *X_eval,
                           size_t n_eval, double *eval_out);

/* The same in two steps, for many fits on subsets of one matrix
 * (cross-validation): the features are sorted once. A fit on the rows with
 * use[i] != 0 (use NULL: all) gives the same trees as kace_boost_fit on
 * those rows alone. */
typedef struct kace_boost_data kace_boost_data;
kace_status kace_boost_data_new(kace_ctx *ctx, const double *X, size_t n, int d, kace_boost_data **out);
void kace_boost_data_free(kace_boost_data **data);
kace_status kace_boost_train(kace_ctx *ctx, const kace_boost_data *data, const double *y, const unsigned char *use,
                             const kace_boost_params *p, char **json, size_t *json_len, const double *X_eval,
                             size_t n_eval, double *eval_out);
/* The trees of the fit as kace evaluates them (what kace_trees_from_json
 * reads from json), without writing and parsing the text. */
kace_status kace_boost_train_trees(kace_ctx *ctx, const kace_boost_data *data, const double *y,
                                   const kace_boost_params *p, char **json, size_t *json_len, kace_trees *trees);

struct kace_model {
    kace_model_kind kind;
    kace_predictor predictor; /* the kind's table and this model (kace_model_set_kind) */
    const kace_feature_set *features;
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

/* Sets the kind and the predictor every consumer uses. */
void kace_model_set_kind(kace_model *m, kace_model_kind kind);

/* Each kind's table (lib/model/predictor.c lists them): fit.c for the models on
 * summed features, slowdown.c for the slowdown model. */
extern const kace_predictor_ops kace_linear_ops, kace_forest_ops, kace_slowdown_ops;

/* Z-scores row-major X (n x d) into Z with the given stats (std 0 -> 0). */
void kace_zscore(const double *X, size_t n, int d, const double *mean, const double *std, double *Z);

/* Slowdown backend (slowdown.c). */
kace_status kace_slowdown_restore(kace_ctx *ctx, kace_model *m); /* trees from booster_json */
int kace_slowdown_member_features(void);
/* A member's features from its own metrics and its partners' summed ones
 * (both indexed by kace_metric); f has kace_slowdown_member_features(). */
void kace_slowdown_member_features_of(const double *own, const double *other, double *f);
/* An upper bound on the throughput (samples/s) the slowdown model predicts
 * for a workload with metrics own (indexed by kace_metric) whose partners'
 * summed metrics lie between other_lo and other_hi (indexed the same way;
 * only the profile metrics the model reads are used). Exact when lo == hi up
 * to a relative slack of about 1e-5 that covers rounding. */
double kace_slowdown_member_upper(const kace_model *m, const double *own, const double *other_lo,
                                  const double *other_hi);
/* The same bound, prepared once per workload for many boxes: the ridge
 * terms of its own metrics, and the trees specialized to its own features
 * (their splits on its own metrics resolved). */
typedef struct kace_member_node {
    float value;     /* split threshold, or the leaf's value */
    int32_t right;   /* index of the right child; the left child is next */
    int16_t feature; /* -1: a leaf; a member feature j: both ends of its range, j + 26 (the member feature
                        count): its low end only, j + 52: its high end only (the tree is monotone in j) */
} kace_member_node;

typedef struct kace_member_bound {
    double excl, own_memcap;
    double share[5];      /* own sm%, mem%, Nsight throughputs */
    double a[5];          /* ridge weight of a partner share, own product folded in */
    double d[5], peak[5]; /* own share + 1e-3, and where the share's ridge terms peak (NAN: nowhere) */
    double z_own, mag_own; /* ridge intercept plus own-feature terms, and their size */
    double tree_const, tree_const_mag; /* base score plus trees left with one leaf */
    kace_member_node *node;
    int n_nodes;
    int *active; /* first node of each tree that still splits on several features */
    int n_active;
    /* Trees left splitting on one partner feature, summed per feature into
     * a step function: thresholds step_thr[first .. first + n_thr), sorted,
     * and the sum's value in each of the n_thr + 1 cells between them,
     * step_cell[first + f .. first + f + n_thr] for step function f. */
    struct {
        int feature, first, n_thr;
    } step[32];
    int n_steps;
    float *step_thr;
    double *step_cell;
} kace_member_bound;

kace_status kace_slowdown_member_bound_init(kace_ctx *ctx, const kace_model *m, const double *own,
                                            kace_member_bound *mb);
void kace_slowdown_member_bound_release(kace_member_bound *mb);
/* kace_slowdown_member_upper for a prepared workload. */
double kace_slowdown_member_bound(const kace_model *m, const kace_member_bound *mb, const double *other_lo,
                                  const double *other_hi);
/* The bound's two parts: the ridge part and the tree part (0 for a model
 * without trees), each a bound over the box; kace_slowdown_blend_upper
 * blends the two into the member's bound. A part's bound over a box that
 * contains this one still holds, so a caller may reuse the costly tree
 * part. */
double kace_slowdown_member_ridge(const kace_model *m, const kace_member_bound *mb, const double *other_lo,
                                  const double *other_hi);
double kace_slowdown_member_trees(const kace_model *m, const kace_member_bound *mb, const double *other_lo,
                                  const double *other_hi);
double kace_slowdown_blend_upper(const kace_model *m, double ridge, double trees);
/* The profile metrics the slowdown model reads, and their count. */
const kace_metric *kace_slowdown_needed_metrics(int *n);

/* Upper bounds on a member's predicted throughput when its partners'
 * summed metrics lie in a box (the predictor's KACE_PRED_BOUNDS part; the
 * slowdown model's functions above, behind the predictor). */
typedef struct kace_bound_ops {
    kace_status (*member_init)(kace_ctx *ctx, const kace_predictor *p, const double *own, kace_member_bound *mb);
    void (*member_release)(kace_member_bound *mb);
    double (*ridge)(const kace_predictor *p, const kace_member_bound *mb, const double *lo, const double *hi);
    double (*trees)(const kace_predictor *p, const kace_member_bound *mb, const double *lo, const double *hi);
    double (*blend)(const kace_predictor *p, double ridge, double trees);
} kace_bound_ops;

/* Forest backend (forest.c). */
kace_status kace_forest_predict_z(kace_ctx *ctx, const kace_model *m, const double *Z, size_t n, double *pred_z);
kace_status kace_forest_restore(kace_ctx *ctx, kace_model *m); /* validated trees from booster_json */
void kace_forest_release(kace_model *m);

#endif
