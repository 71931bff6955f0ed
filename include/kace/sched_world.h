/* The world the online scheduler decides in: what `kace schedule`,
 * `kace simulate`, kace serve's Kubernetes extender and the scheduler
 * benchmarks build their kace_sched from.
 *
 * It is made of a store's measured sets and one predictor: the profiles a
 * policy may see (the pairs' workloads), the pool of workloads jobs may
 * have (those of a measured pair, in store order), the groups allowed to
 * share (the truth of pairs and triples: a group never measured cannot
 * share) and the rates the predictor gives each group. kace serve passes
 * the predictor it serves, so its extender decides with the served model;
 * `kace schedule` passes a model fitted on a published training split. */
#ifndef KACE_SCHED_WORLD_H
#define KACE_SCHED_WORLD_H

#include "kace/dataset.h"
#include "kace/predictor.h"
#include "kace/sched.h"
#include "kace/sim.h"
#include "kace/store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kace_sched_world kace_sched_world;

/* From measured pairs and triples (triples may be NULL) of one store; the
 * world keeps no pointer to them. predictor must give each member's
 * throughput (KACE_PRED_MEMBERS) and outlive the world. Fails when pairs
 * has no measured colocation. */
kace_status kace_sched_world_from_sets(kace_ctx *ctx, const kace_dataset *pairs, const kace_dataset *triples,
                                       const kace_predictor *predictor, kace_sched_world **out);
/* The same from the store's "pairs" and "triples" sets. */
kace_status kace_sched_world_new(kace_ctx *ctx, kace_store *store, const kace_predictor *predictor,
                                 kace_sched_world **out);
void kace_sched_world_free(kace_sched_world **w);

/* What kace_sched_new takes; all owned by the world. */
const kace_dataset *kace_sched_world_profiles(const kace_sched_world *w);
const int *kace_sched_world_pool(const kace_sched_world *w, int *n_pool);
const kace_truth *kace_sched_world_truth(const kace_sched_world *w);
const kace_group_set *kace_sched_world_runnable(const kace_sched_world *w);
const kace_rate_source *kace_sched_world_rates(const kace_sched_world *w);
/* The profiles, to add a workload to (kace_sim_jobs_from_sacct's stand-in
 * for jobs that name none): the rate source reads them as they are. */
kace_dataset *kace_sched_world_profiles_edit(kace_sched_world *w);

#ifdef __cplusplus
}
#endif

#endif
