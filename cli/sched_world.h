/* What `kace schedule`, `kace simulate` and kace serve's Kubernetes
 * extender build their scheduler from (cli/cmd_simulate.c): the store's
 * measured sets (the truth and the groups that may share), a slowdown model
 * fitted on one published training split, the profiles a policy may see,
 * and the pool of workloads jobs may have. */
#ifndef KACE_CLI_SCHED_WORLD_H
#define KACE_CLI_SCHED_WORLD_H

#include "kace/sched.h"
#include "kace/sim.h"
#include "kace/store.h"

typedef struct sim_world {
    kace_dataset *pairs, *triples, *profiles;
    kace_splits *splits;
    kace_model *model;
    kace_truth *truth;
    kace_model_rates holder;
    kace_rate_source rates;
    int pool[KACE_SCHED_MAX_WORKLOADS];
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
