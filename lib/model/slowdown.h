/* The slowdown model (slowdown.c): its predictor table and the member
 * bounds behind it. Internal. */
#ifndef KACE_LIB_MODEL_SLOWDOWN_H
#define KACE_LIB_MODEL_SLOWDOWN_H

#include "bounds.h"
#include "model_internal.h"

extern const kace_predictor_ops kace_slowdown_ops;

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
kace_status kace_slowdown_member_bound_init(kace_ctx *ctx, const kace_model *m, const double *own,
                                            kace_member_bound *mb);
/* The same in two steps: the ridge part (cheap), then the tree part. */
void kace_slowdown_member_bound_ridge(const kace_model *m, const double *own, kace_member_bound *mb);
kace_status kace_slowdown_member_bound_trees(kace_ctx *ctx, const kace_model *m, kace_member_bound *mb);
/* The tree part for a member whose trees are not prepared (looser). */
double kace_slowdown_member_trees_unprepared(const kace_model *m, const kace_member_bound *mb,
                                             const double *other_lo, const double *other_hi);
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

#endif
