/* What `kace schedule` and `kace simulate` build their scheduler from
 * (cli/cmd_simulate.c): the library's scheduler world (kace/sched_world.h:
 * the truth and the groups that may share, the profiles a policy may see,
 * the pool of workloads jobs may have) with a slowdown model fitted on one
 * published training split. kace serve's extender builds the same world from
 * the model it serves instead (lib/service/service.c). */
#ifndef KACE_CLI_SCHED_WORLD_H
#define KACE_CLI_SCHED_WORLD_H

#include "kace/sched.h"
#include "kace/sched_world.h"
#include "kace/sim.h"
#include "kace/store.h"

typedef struct sim_world {
    kace_dataset *pairs, *triples;
    kace_splits *splits;
    kace_model *model;
    kace_sched_world *world; /* predicts with model */
    /* the world's parts, for short: owned by world */
    kace_dataset *profiles; /* kace simulate --sacct adds a stand-in workload */
    const kace_truth *truth;
    kace_rate_source rates;
    const int *pool;
    int n_pool;
    size_t n_train;
} sim_world;

/* kace schedule's defaults: the training split of kace's model. */
#define SIM_WORLD_N_OCCUR 3
#define SIM_WORLD_SEED 10

/* EXIT_OK, or an exit code after a message on stderr. import_dir: import it
 * into the store first (NULL: none). */
int sim_world_load(kace_ctx *ctx, const char *db, const char *import_dir, int n_occur, int seed, sim_world *w);
void sim_world_free(sim_world *w);

#endif
