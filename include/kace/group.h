/* The best group of k workloads around a target: which k-1 jobs of a
 * candidate pool to run next to it on one GPU so that the predicted
 * throughput sum is highest.
 *
 * kace_group_best searches exactly by branch and bound over kace's slowdown
 * model: a partial group is abandoned when an upper bound on every group
 * that completes it (interval bounds through the model, see lib/decide/group.c) is
 * below the best group found so far, and when its memory cannot fit. It
 * returns the same group as kace_group_enumerate, which scores every
 * combination, in a small fraction of the time on large pools.
 *
 * A group whose summed memcap (GB, the profile's peak GPU memory) exceeds
 * the GPU's memory is never proposed.
 */
#ifndef KACE_GROUP_H
#define KACE_GROUP_H

#include <stdbool.h>
#include <stdint.h>

#include "kace/policy.h"
#include "kace/predictor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KACE_GROUP_MAX_K 4
#define KACE_GPU_MEMORY_V100_GB 32.0

/* Optional filter on complete groups (e.g. "was this group measured"):
 * group[0] is the target, then the partners. Return false to skip it. */
typedef bool (*kace_group_filter)(void *user, const int *group, int k);

typedef struct kace_group_query {
    int target;             /* workload index in the dataset; always in the group */
    int k;                  /* group size with the target, 2..KACE_GROUP_MAX_K */
    /* Candidate jobs (workload indices). A workload may appear more than
     * once (two jobs of the same kind) and may be the target's own kind.
     * NULL: every other workload of the dataset with a complete profile. */
    const int *pool;
    size_t n_pool;
    double gpu_memory_gb;   /* capacity; 0 = KACE_GPU_MEMORY_V100_GB */
    kace_group_filter filter; /* NULL = every group is allowed */
    void *filter_user;
    /* What the best group maximises (KACE_OBJ_RAW = 0: the predicted sum).
     * The others need a predictor of each member (KACE_PRED_MEMBERS) and
     * are searched by enumeration. */
    kace_objective objective;
} kace_group_query;

typedef struct kace_group_result {
    bool found;                    /* false when no allowed group fits in memory */
    int k;
    int workload[KACE_GROUP_MAX_K]; /* target first, then partners in pool order */
    double predicted;              /* predicted throughput sum, samples/s (the query's objective) */
    double member[KACE_GROUP_MAX_K]; /* each member's predicted throughput */
    double memcap_gb;              /* summed memcap of the group */
    /* Work done: partial groups bounded and complete groups scored. */
    uint64_t nodes_bounded, groups_scored;
} kace_group_result;

/* Exact best group by branch and bound. Needs a predictor with
 * KACE_PRED_BOUNDS (others give KACE_ERR_UNSUPPORTED: use kace_group_enumerate) and the model's profile
 * metrics for the target and every pool entry. Ties go to the group whose
 * partners come first in the pool, as in kace_group_enumerate. */
kace_status kace_group_best(kace_ctx *ctx, const kace_dataset *ds, const kace_predictor *p, const kace_group_query *q,
                            kace_group_result *out);

/* The same answer by scoring every combination of k-1 pool entries (any
 * model kind; linear and forest models use training statistics). */
kace_status kace_group_enumerate(kace_ctx *ctx, const kace_dataset *ds, const kace_predictor *p,
                                 const kace_group_query *q, kace_group_result *out);

/* Appends n synthetic workloads to ds, for benchmarks and tests of large
 * pools: workload i copies the profile of the dataset's i-th complete
 * workload (round robin over those having every metric the slowdown model
 * reads), multiplies each of those metrics by exp(u * spread) with u
 * uniform in [-1, 1] (a seeded xorshift generator), and keeps percentages
 * at or below 100. Names are "synth<i>-<original>". */
kace_status kace_group_synthesize(kace_ctx *ctx, kace_dataset *ds, size_t n, double spread, uint64_t seed);

#ifdef __cplusplus
}
#endif

#endif
