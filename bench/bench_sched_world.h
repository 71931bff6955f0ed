/* The scheduler benchmarks' shared set-up (kace-bench-sched and
 * kace-bench-sched-growth): the reference data in a scratch store, the model
 * the scheduler predicts with, the scheduler's world built from it by the
 * library (kace/sched_world.h, as kace schedule and kace serve build it),
 * and the synthetic job stream. Header-only, like bench_common.h; the
 * including file defines BENCH_PROG (its name, for messages).
 * bench_sched_growth.sh also compiles it against the tree before the speed
 * work, which has no kace/sched_world.h: for that tree only, the world is
 * built by hand, as that tree's kace schedule built it. */
#ifndef KACE_BENCH_SCHED_WORLD_H
#define KACE_BENCH_SCHED_WORLD_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kace/sim.h"
#include "kace/store.h"
#if defined(__has_include)
#if __has_include("kace/sched_world.h")
#include "kace/sched_world.h"
#define BENCH_LIBRARY_WORLD 1
#endif
#endif

#include "bench_common.h"

#ifndef BENCH_PROG
#error "define BENCH_PROG before including bench_sched_world.h"
#endif

static int die(kace_ctx *ctx, const char *what)
{
    fprintf(stderr, BENCH_PROG ": %s: %s\n", what, kace_errmsg(ctx));
    return 1;
}

static uint64_t rng_state = 42;
static double uniform01(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return ((double)(rng_state >> 11) + 0.5) / 9007199254740992.0;
}

typedef struct world {
    kace_dataset *pairs, *triples;
    kace_model *model;
#ifdef BENCH_LIBRARY_WORLD
    kace_sched_world *sw; /* predicts with model; the fields below are its parts */
    const kace_dataset *profiles;
    const kace_truth *truth;
    const int *pool;
#else
    kace_dataset *profiles;
    kace_model_rates holder;
    kace_truth *truth;
    int pool[KACE_SCHED_MAX_WORKLOADS];
#endif
    kace_rate_source rates;
    int n_pool;
} world;

static void free_world(world *w)
{
#ifdef BENCH_LIBRARY_WORLD
    kace_sched_world_free(&w->sw);
#else
    kace_truth_free(&w->truth);
    kace_dataset_free(&w->profiles);
#endif
    kace_model_free(&w->model);
    kace_dataset_free(&w->pairs);
    kace_dataset_free(&w->triples);
}

static int load_world(kace_ctx *ctx, const char *data, world *w)
{
    char db[] = "/tmp/kace-bench-sched-XXXXXX";
    int fd = mkstemp(db);
    if (fd < 0)
        return -1;
    close(fd);
    unlink(db);
    kace_store *store = NULL;
    if (kace_store_open(ctx, db, &store))
        return die(ctx, "store");
    static const char *const files[] = {"kace-v100/profiles/system.csv", "kace-v100/colocations/pairs.csv",
                                        "kace-v100/colocations/triples.csv", "kace-v100/splits.csv"};
    const char *failed = NULL;
    if (bench_import(ctx, store, data, files, 4, &failed))
        return die(ctx, failed);
    kace_splits *splits = NULL;
    if (kace_store_load_dataset(ctx, store, "pairs", false, &w->pairs) ||
        kace_store_load_dataset(ctx, store, "triples", false, &w->triples) ||
        kace_store_load_splits(ctx, store, w->pairs, &splits))
        return die(ctx, "load");
    kace_store_close(&store);
    unlink(db);
    int rows[256];
    size_t n = 0;
    for (size_t i = 0; i < splits->n && n < 256; i++)
        if (splits->rows[i].train && splits->rows[i].n_occur == 3 && splits->rows[i].seed == 10)
            rows[n++] = splits->rows[i].colocation;
    kace_splits_free(&splits);
    kace_fit_spec spec = {.kind = KACE_MODEL_SLOWDOWN};
    kace_slowdown_params_default(&spec.slowdown);
    if (kace_model_fit_rows(ctx, w->pairs, rows, n, &spec, &w->model))
        return die(ctx, "model");
#ifdef BENCH_LIBRARY_WORLD
    if (kace_sched_world_from_sets(ctx, w->pairs, w->triples, kace_model_predictor(w->model), &w->sw))
        return die(ctx, "world");
    w->profiles = kace_sched_world_profiles(w->sw);
    w->truth = kace_sched_world_truth(w->sw);
    w->rates = *kace_sched_world_rates(w->sw);
    w->pool = kace_sched_world_pool(w->sw, &w->n_pool);
#else
    const kace_dataset *sets[2] = {w->pairs, w->triples};
    if (kace_truth_build(ctx, sets, 2, &w->truth) || kace_dataset_profiles_only(ctx, w->pairs, &w->profiles) ||
        kace_rate_source_model(ctx, &w->holder, kace_model_predictor(w->model), w->profiles, &w->rates))
        return die(ctx, "model");
    for (size_t i = 0; i < w->pairs->n_workloads; i++)
        for (size_t c = 0; c < w->pairs->n_colocations; c++)
            if (kace_colocation_has(&w->pairs->colocations[c], (int)i)) {
                w->pool[w->n_pool++] = (int)i;
                break;
            }
#endif
    return 0;
}

/* A busy synthetic cluster: jobs arrive at the rate that the cluster serves
 * at exclusive speed (offered load 1), run exponentially distributed times
 * (mean one hour), on a random workload; 40% are LS. */
static kace_sim_job *synthetic_jobs(const world *w, size_t n_gpus, size_t n_jobs)
{
    kace_sim_job *jobs = malloc(n_jobs * sizeof *jobs);
    if (!jobs)
        return NULL;
    int inf[KACE_SCHED_MAX_WORKLOADS], train[KACE_SCHED_MAX_WORKLOADS], ni = 0, nt = 0;
    for (int i = 0; i < w->n_pool; i++) {
        const char *name = w->profiles->workloads[w->pool[i]].name;
        size_t len = strlen(name);
        if (len > 4 && strcmp(name + len - 4, "-inf") == 0)
            inf[ni++] = w->pool[i];
        else
            train[nt++] = w->pool[i];
    }
    double mean_work = 3600, rate = (double)n_gpus / mean_work, t = 0;
    rng_state = 42;
    for (size_t i = 0; i < n_jobs; i++) {
        t += -log(uniform01()) / rate;
        bool ls = uniform01() < 0.4;
        int wl = ls ? inf[(size_t)(uniform01() * ni) % (size_t)ni] : train[(size_t)(uniform01() * nt) % (size_t)nt];
        jobs[i] = (kace_sim_job){.arrival = t,
                                 .work = fmax(1.0, -log(uniform01()) * mean_work),
                                 .workload = wl,
                                 .ls = ls,
                                 .gpu_milli = 1000,
                                 .num_gpu = 1};
    }
    return jobs;
}

#endif
