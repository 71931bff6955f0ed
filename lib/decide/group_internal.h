/* What the group searches share: scoring a complete group (group.c) and
 * the pressure model's branch and bound (group_pressure.c). Internal. */
#ifndef KACE_LIB_DECIDE_GROUP_INTERNAL_H
#define KACE_LIB_DECIDE_GROUP_INTERNAL_H

#include "kace/group.h"

/* Scores the group of q->target and pool[pos[0..k-1)] (pos sorted here)
 * and keeps it in *best when it fits in capacity, passes q's filter and
 * beats the best: a higher prediction, or an equal one with partners
 * earlier in the pool (best_pos: the best group's sorted positions). */
kace_status kace_group_consider(kace_ctx *ctx, const kace_dataset *ds, const kace_predictor *p,
                                const kace_group_query *q, const int *pool, int *pos, int k, double capacity,
                                kace_group_result *best, int *best_pos);

/* kace_group_best for a model that bounds through partner pressure sums
 * (kace_bound_ops.pressure_member): q->pool and q->n_pool hold the checked
 * pool, q->k >= 3 and the objective is the raw sum. */
kace_status kace_group_best_pressure(kace_ctx *ctx, const kace_dataset *ds, const kace_predictor *p,
                                     const kace_group_query *q, double capacity, kace_group_result *out);

#endif
