/* The scheduler's world (kace/sched_world.h): one recipe for every caller,
 * so that kace serve's extender, kace schedule and the benchmarks cannot
 * drift apart. */
#include <stdlib.h>

#include "kace/sched_world.h"

struct kace_sched_world {
    kace_dataset *profiles;
    kace_truth *truth;
    kace_model_rates holder; /* the rate source's state: it points here */
    kace_rate_source rates;
    int pool[KACE_SCHED_MAX_WORKLOADS];
    int n_pool;
};

void kace_sched_world_free(kace_sched_world **w)
{
    if (!w || !*w)
        return;
    kace_dataset_free(&(*w)->profiles);
    kace_truth_free(&(*w)->truth);
    free(*w);
    *w = NULL;
}

kace_status kace_sched_world_from_sets(kace_ctx *ctx, const kace_dataset *pairs, const kace_dataset *triples,
                                       const kace_predictor *predictor, kace_sched_world **out)
{
    *out = NULL;
    if (!pairs || pairs->n_colocations == 0)
        return kace_fail(ctx, KACE_ERR_INVALID, "the store has no measured pairs: the scheduler has no group to judge "
                                                "(kace import the measurements first)");
    kace_sched_world *w = calloc(1, sizeof *w);
    if (!w)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    const kace_dataset *sets[2] = {pairs, triples};
    kace_status st;
    if ((st = kace_truth_build(ctx, sets, triples ? 2 : 1, &w->truth)) ||
        (st = kace_dataset_profiles_only(ctx, pairs, &w->profiles)) ||
        (st = kace_rate_source_model(ctx, &w->holder, predictor, w->profiles, &w->rates))) {
        kace_sched_world_free(&w);
        return st;
    }
    /* The pool: every workload of a measured pair, in store order. */
    for (size_t i = 0; i < pairs->n_workloads && w->n_pool < KACE_SCHED_MAX_WORKLOADS; i++) {
        bool used = false;
        for (size_t c = 0; c < pairs->n_colocations && !used; c++)
            used = kace_colocation_has(&pairs->colocations[c], (int)i);
        if (used)
            w->pool[w->n_pool++] = (int)i;
    }
    *out = w;
    return KACE_OK;
}

kace_status kace_sched_world_new(kace_ctx *ctx, kace_store *store, const kace_predictor *predictor,
                                 kace_sched_world **out)
{
    *out = NULL;
    kace_dataset *pairs = NULL, *triples = NULL;
    kace_status st;
    if (!(st = kace_store_load_dataset(ctx, store, "pairs", false, &pairs)) &&
        !(st = kace_store_load_dataset(ctx, store, "triples", false, &triples)))
        st = kace_sched_world_from_sets(ctx, pairs, triples, predictor, out);
    kace_dataset_free(&pairs);
    kace_dataset_free(&triples);
    return st;
}

const kace_dataset *kace_sched_world_profiles(const kace_sched_world *w)
{
    return w->profiles;
}

kace_dataset *kace_sched_world_profiles_edit(kace_sched_world *w)
{
    return w->profiles;
}

const int *kace_sched_world_pool(const kace_sched_world *w, int *n_pool)
{
    if (n_pool)
        *n_pool = w->n_pool;
    return w->pool;
}

const kace_truth *kace_sched_world_truth(const kace_sched_world *w)
{
    return w->truth;
}

const kace_group_set *kace_sched_world_runnable(const kace_sched_world *w)
{
    return kace_truth_runnable(w->truth);
}

const kace_rate_source *kace_sched_world_rates(const kace_sched_world *w)
{
    return &w->rates;
}
