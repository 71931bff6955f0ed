/* kace's own gradient-boosted trees (boost.c). Internal. */
#ifndef KACE_LIB_MODEL_BOOST_H
#define KACE_LIB_MODEL_BOOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trees.h"

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
    bool scalar; /* the portable code even where AVX-512 is there (tests compare) */
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

/* Whether every sum of n gradients, each the float difference of two
 * floats, is exact in double whatever the order of addition (then the
 * booster's scans may add them as vectors): finest is the smallest binade
 * (kace_boost_binade) of the floats subtracted, widest the largest of the
 * differences. */
int kace_boost_binade(float v);
bool kace_boost_sums_exact(int finest, int widest, int n);

/* x mod d, d >= 1, given magic = UINT64_MAX / d: the row draws' reduction. */
uint64_t kace_boost_mod_by(uint64_t x, uint64_t d, uint64_t magic);

/* The xgboost-style JSON of trees a fit built (kace_boost_train_trees;
 * malloc'ed): the text kace_boost_fit gives for the same fit. */
kace_status kace_boost_json(kace_ctx *ctx, const kace_trees *trees, int n_features, char **json, size_t *json_len);

#endif
