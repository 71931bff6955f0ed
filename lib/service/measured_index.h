/* The measured sums `kace serve` answers with, indexed by group
 * (measured_index.c): built once when an advisor is made, so that a request
 * costs the same on a store of a hundred colocations and on one of a
 * million. A group is a multiset of workloads: the index keys the sorted
 * workload ids of every colocation whose members all ran at 100%.
 * Internal. */
#ifndef KACE_LIB_SERVICE_MEASURED_INDEX_H
#define KACE_LIB_SERVICE_MEASURED_INDEX_H

#include <stddef.h>

#include "kace/dataset.h"
#include "kace/policy.h"

typedef struct kace_measured_index kace_measured_index;

/* Indexes ds, which must outlive the index and not change under it. */
kace_status kace_measured_index_build(kace_ctx *ctx, const kace_dataset *ds, kace_measured_index **out);
void kace_measured_index_free(kace_measured_index **ix);

/* The mean measured sum of the successful all-100% runs of exactly this
 * group (any order), NaN when there is none. */
double kace_measured_index_group(const kace_measured_index *ix, const int *group, int k);

/* The measured sum of the first all-100% run of the pair {a, b} in the
 * dataset's order, whatever its status (as kace_rank_partners reports a
 * partner's), NaN when there is none. */
double kace_measured_index_pair(const kace_measured_index *ix, int a, int b);

/* The same under objective o (kace_objective_measured of each run): the
 * group's mean over its successful all-100% runs, and the pair's value in
 * its first all-100% run that has one, as kace_rank_partners_by reports a
 * partner's. Raw is the two above. */
double kace_measured_index_group_by(const kace_measured_index *ix, kace_objective o, const int *group, int k);
double kace_measured_index_pair_by(const kace_measured_index *ix, kace_objective o, int a, int b);

/* Groups indexed, and the bytes the index holds. */
size_t kace_measured_index_groups(const kace_measured_index *ix);
size_t kace_measured_index_bytes(const kace_measured_index *ix);

#endif
