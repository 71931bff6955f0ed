/* Regression trees in flat arrays (trees.c): read from xgboost-style JSON,
 * checked, and evaluated by kace itself, for the forest, the slowdown model
 * and kace's own booster. Internal. */
#ifndef KACE_LIB_MODEL_TREES_H
#define KACE_LIB_MODEL_TREES_H

#include <stddef.h>

#include "kace/kace.h"
#include "kace/model.h"

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
    /* Depth-3 trees also in blocks of 16 trees, structure of arrays (per
     * block 7 x 16 feature indices, 7 x 16 thresholds, 8 x 16 leaves, node
     * p's children at 2p+1 and 2p+2 as above; the last block padded with
     * trees whose leaves are never added), for the AVX-512 path, which is
     * used when simd is set: at build time when the CPU has AVX-512F. */
    int n_blocks;
    int *v_feature;
    float *v_threshold, *v_leaf;
    int v_max_feature;    /* the largest feature index a split reads */
    int simd;
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
/* Turns the AVX-512 path on or off (tests compare the two); returns whether
 * it is on now: never when the CPU or the build cannot run it. */
int kace_trees_use_simd(kace_trees *t, int on);

#endif
