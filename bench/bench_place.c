/* Cost of one job_submit/kace decision (kace_place_job over every shared
 * GPU: the plugin's work under its lock for a submission) on a synthetic
 * cluster of 100 nodes x 4 GPUs holding 1,000 jobs of the profiled reference
 * workloads, while the cluster changes: after each decision the job starts
 * on the chosen GPU (with a 20-30% share like the others, so that GPUs keep
 * room and each decision scores nearly all 400) and a random running job
 * ends (so 1,000 stay), and the two changed GPUs
 * are prepared again (the refresher's work, off the decision path, timed
 * apart as "update").
 *
 * Built against this tree it decides each step twice, with the per-GPU
 * cache (kace_place_cache_prepare) and without it (kace_place_prepare, the
 * decision as before), and stops unless both give the same GPU, share,
 * gain, score and confidence. Built against a tree without the cache
 * (bench/bench_slurm.sh builds it at 2d3299e) it decides without. Either
 * way it prints a digest of the sequence of choices, so that two builds
 * can be compared.
 *
 * Output: "decision MODE wall_us p50 p99 max cpu_us p50 p99 max" lines
 * (MODE cached or uncached; cpu = the thread's CPU time), "update ...",
 * "prepare_all_ms", "digest", and decision_p50_us/decision_p99_us of the
 * path a plugin of this build takes.
 * usage: kace-bench-place STORE_DB [MODEL_FILE] [STEPS] */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kace/place.h"
#include "kace/store.h"

#include "bench_common.h"

enum { NODES = 100, GPUS_PER_NODE = 4, JOBS = 1000 };

static double thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A fixed generator, so that every build sees the same sequence. */
static uint64_t rng_state = 8;
static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)((rng_state >> 11) % n);
}

typedef struct cluster {
    kace_place_gpu gpus[NODES * GPUS_PER_NODE];
    int share[NODES * GPUS_PER_NODE][KACE_MAX_K]; /* each resident's share */
} cluster;

typedef struct timing {
    double *wall, *cpu;
    size_t n;
} timing;

static void timing_add(timing *t, double wall, double cpu)
{
    t->wall[t->n] = wall * 1e6;
    t->cpu[t->n] = cpu * 1e6;
    t->n++;
}

static void timing_print(const char *what, timing *t)
{
    qsort(t->wall, t->n, sizeof *t->wall, bench_cmp_double);
    qsort(t->cpu, t->n, sizeof *t->cpu, bench_cmp_double);
    printf("%s wall_us %.1f %.1f %.1f cpu_us %.1f %.1f %.1f (p50 p99 max of %zu)\n", what,
           bench_quantile(t->wall, t->n, 0.5), bench_quantile(t->wall, t->n, 0.99), t->wall[t->n - 1],
           bench_quantile(t->cpu, t->n, 0.5), bench_quantile(t->cpu, t->n, 0.99), t->cpu[t->n - 1], t->n);
}

#ifdef KACE_PLACE_CACHE
static bool same_placement(kace_status a, const kace_placement *x, kace_status b, const kace_placement *y)
{
    return a == b && x->gpu == y->gpu && x->share == y->share && x->n_considered == y->n_considered &&
           memcmp(&x->gain, &y->gain, sizeof x->gain) == 0 && memcmp(&x->score, &y->score, sizeof x->score) == 0 &&
           memcmp(&x->confidence, &y->confidence, sizeof x->confidence) == 0;
}
#endif

/* Starts workload w on GPU g with share, or ends resident r of GPU g. */
static void start_job(cluster *c, size_t g, int w, int share)
{
    kace_place_gpu *gpu = &c->gpus[g];
    c->share[g][gpu->n_residents] = share;
    gpu->resident[gpu->n_residents++] = w;
    gpu->share_free -= share;
}

static void end_job(cluster *c, size_t g, int r)
{
    kace_place_gpu *gpu = &c->gpus[g];
    gpu->share_free += c->share[g][r];
    for (int i = r; i + 1 < gpu->n_residents; i++) {
        gpu->resident[i] = gpu->resident[i + 1];
        c->share[g][i] = c->share[g][i + 1];
    }
    gpu->n_residents--;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: kace-bench-place STORE_DB [MODEL_FILE] [STEPS]\n");
        return 2;
    }
    size_t steps = argc > 3 ? strtoul(argv[3], NULL, 10) : 5000;
    if (steps < 1)
        steps = 1;
    kace_ctx *ctx = kace_ctx_new();
    kace_store *store = NULL;
    kace_dataset *ds = NULL;
    kace_model *m = NULL;
    if (kace_store_open(ctx, argv[1], &store) || kace_store_load_dataset(ctx, store, NULL, false, &ds) ||
        (argc > 2 && argv[2][0] ? kace_model_load(ctx, argv[2], &m)
                                : kace_store_load_model(ctx, store, "default", &m))) {
        fprintf(stderr, "kace-bench-place: %s\n", kace_errmsg(ctx));
        return 1;
    }
    const kace_predictor *pred = kace_model_predictor(m);
    /* Workloads the model can predict. */
    int *usable = malloc(ds->n_workloads * sizeof *usable), n_usable = 0;
    for (size_t w = 0; w < ds->n_workloads; w++) {
        int one = (int)w;
        double s;
        if (kace_predict_group(ctx, pred, ds, &one, 1, &s, NULL, NULL) == KACE_OK)
            usable[n_usable++] = one;
    }
    size_t n_gpus = NODES * GPUS_PER_NODE;
    cluster *plain = calloc(1, sizeof *plain);
    for (size_t g = 0; g < n_gpus; g++) {
        snprintf(plain->gpus[g].node, sizeof plain->gpus[g].node, "node%03zu", g / GPUS_PER_NODE);
        plain->gpus[g].share_free = 100;
        plain->gpus[g].usable = true;
    }
    /* 1,000 jobs spread over the GPUs, 20-30% each, so that most GPUs hold
     * two or three and still have room. */
    for (int j = 0; j < JOBS; j++)
        start_job(plain, (size_t)j % n_gpus, usable[rnd((uint32_t)n_usable)], 20 + 10 * (int)rnd(2));
    double t0 = bench_now();
    kace_place_prepare(ctx, pred, ds, plain->gpus, n_gpus);
    printf("prepare_all_ms uncached %.3f\n", (bench_now() - t0) * 1e3);
#ifdef KACE_PLACE_CACHE
    cluster *cached = malloc(sizeof *cached);
    memcpy(cached, plain, sizeof *cached);
    kace_place_cache *cache = NULL;
    if (kace_place_cache_new(ctx, pred, ds, &cache)) {
        fprintf(stderr, "kace-bench-place: %s\n", kace_errmsg(ctx));
        return 1;
    }
    t0 = bench_now();
    if (kace_place_cache_prepare(ctx, cache, cached->gpus, n_gpus)) {
        fprintf(stderr, "kace-bench-place: %s\n", kace_errmsg(ctx));
        return 1;
    }
    printf("prepare_all_ms cached %.3f (%zu rows, %zu predictions)\n", (bench_now() - t0) * 1e3,
           kace_place_cache_rows(cache), kace_place_cache_predictions(cache));
    timing dc = {malloc(steps * sizeof(double)), malloc(steps * sizeof(double)), 0};
    timing uc = {malloc(steps * sizeof(double)), malloc(steps * sizeof(double)), 0};
#endif
    timing du = {malloc(steps * sizeof(double)), malloc(steps * sizeof(double)), 0};
    timing uu = {malloc(steps * sizeof(double)), malloc(steps * sizeof(double)), 0};
    kace_place_options opt;
    kace_place_options_default(&opt);
    uint64_t digest = 1469598103934665603u;
    size_t placed = 0, considered = 0;
    for (size_t i = 0; i < steps; i++) {
        int w = usable[rnd((uint32_t)n_usable)];
        kace_placement p;
        double a = bench_now(), ac = thread_cpu();
        kace_status st = kace_place_job(ctx, pred, ds, plain->gpus, n_gpus, w, &opt, &p);
        timing_add(&du, bench_now() - a, thread_cpu() - ac);
#ifdef KACE_PLACE_CACHE
        kace_placement pc;
        a = bench_now(), ac = thread_cpu();
        kace_status stc = kace_place_job(ctx, pred, ds, cached->gpus, n_gpus, w, &opt, &pc);
        timing_add(&dc, bench_now() - a, thread_cpu() - ac);
        if (!same_placement(st, &p, stc, &pc)) {
            fprintf(stderr,
                    "kace-bench-place: step %zu (%s): without cache GPU %d share %d gain %.17g, with cache GPU %d "
                    "share %d gain %.17g\n",
                    i, ds->workloads[w].name, p.gpu, p.share, p.gain, pc.gpu, pc.share, pc.gain);
            return 1;
        }
#endif
        digest = (digest ^ (uint64_t)(uint32_t)(st ? -1 : p.gpu)) * 1099511628211u;
        digest = (digest ^ (uint64_t)(uint32_t)(st ? -1 : p.share)) * 1099511628211u;
        if (st)
            continue;
        placed++;
        /* The job starts where it was placed; a random running job ends. */
        size_t changed[2] = {(size_t)p.gpu, 0};
        start_job(plain, changed[0], w, 20 + 10 * (int)rnd(2)); /* not p.share: GPUs keep room */
        considered += (size_t)p.n_considered;
        uint32_t r = rnd(JOBS + 1); /* one job of all, so that the cluster keeps 1,000 */
        for (changed[1] = 0; r >= (uint32_t)plain->gpus[changed[1]].n_residents; changed[1]++)
            r -= (uint32_t)plain->gpus[changed[1]].n_residents;
        end_job(plain, changed[1], (int)r);
        a = bench_now(), ac = thread_cpu();
        kace_place_prepare(ctx, pred, ds, &plain->gpus[changed[0]], 1);
        kace_place_prepare(ctx, pred, ds, &plain->gpus[changed[1]], 1);
        timing_add(&uu, bench_now() - a, thread_cpu() - ac);
#ifdef KACE_PLACE_CACHE
        for (int k = 0; k < 2; k++) {
            size_t g = changed[k];
            memcpy(cached->gpus[g].resident, plain->gpus[g].resident, sizeof plain->gpus[g].resident);
            cached->gpus[g].n_residents = plain->gpus[g].n_residents;
            cached->gpus[g].share_free = plain->gpus[g].share_free;
        }
        a = bench_now(), ac = thread_cpu();
        kace_place_cache_prepare(ctx, cache, &cached->gpus[changed[0]], 1);
        kace_place_cache_prepare(ctx, cache, &cached->gpus[changed[1]], 1);
        if (i % 100 == 99) /* as the plugin does after each refresh */
            kace_place_cache_sweep(cache, cached->gpus, n_gpus);
        timing_add(&uc, bench_now() - a, thread_cpu() - ac);
#endif
    }
    printf("cluster: %d nodes x %d GPUs, %d jobs of %d profiled workloads; %zu of %zu decisions placed the job "
           "(then it starts and a random job ends); %.1f GPUs scored per decision\n",
           NODES, GPUS_PER_NODE, JOBS, n_usable, placed, steps, placed ? (double)considered / (double)placed : 0.0);
    timing_print("decision uncached", &du);
    timing_print("update uncached", &uu);
#ifdef KACE_PLACE_CACHE
    timing_print("decision cached", &dc);
    timing_print("update cached", &uc);
    printf("identical: %zu decisions with and without the cache gave the same GPU, share, gain, score and "
           "confidence; cache %zu rows, %zu predictions in all\n",
           steps, kace_place_cache_rows(cache), kace_place_cache_predictions(cache));
    timing *mine = &dc;
    kace_place_cache_free(&cache);
    free(cached);
    free(uc.wall), free(uc.cpu);
#else
    timing *mine = &du;
#endif
    printf("digest %016llx\n", (unsigned long long)digest);
    printf("decision_p50_us=%.1f decision_p99_us=%.1f\n", bench_quantile(mine->wall, mine->n, 0.5),
           bench_quantile(mine->wall, mine->n, 0.99));
#ifdef KACE_PLACE_CACHE
    free(dc.wall), free(dc.cpu);
#endif
    free(du.wall), free(du.cpu), free(uu.wall), free(uu.cpu);
    free(plain);
    free(usable);
    kace_model_free(&m);
    kace_dataset_free(&ds);
    kace_store_close(&store);
    kace_ctx_free(&ctx);
    return 0;
}
