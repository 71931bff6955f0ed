/* Cost of one job_submit/kace decision: the work the plugin does under its
 * lock for a submission (kace_place_job over every shared GPU, then the
 * re-scoring of the chosen GPU), on a synthetic cluster of 100 nodes with
 * 4 GPUs each and 1,000 running jobs of the profiled reference workloads.
 * Prints p50/p99 in microseconds as "decision_p50_us=... decision_p99_us=..."
 * and the cost of preparing a whole snapshot (the background refresher's work).
 * usage: kace-bench-place STORE_DB [MODEL_FILE] */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kace/place.h"
#include "kace/store.h"

#include "bench_common.h"

enum { NODES = 100, GPUS_PER_NODE = 4, JOBS = 1000, DECISIONS = 5000 };

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: kace-bench-place STORE_DB [MODEL_FILE]\n");
        return 2;
    }
    kace_ctx *ctx = kace_ctx_new();
    kace_store *store = NULL;
    kace_dataset *ds = NULL;
    kace_model *m = NULL;
    if (kace_store_open(ctx, argv[1], &store) || kace_store_load_dataset(ctx, store, NULL, false, &ds) ||
        (argc > 2 ? kace_model_load(ctx, argv[2], &m) : kace_store_load_model(ctx, store, "default", &m))) {
        fprintf(stderr, "kace-bench-place: %s\n", kace_errmsg(ctx));
        return 1;
    }
    /* Workloads the model can predict. */
    int *usable = malloc(ds->n_workloads * sizeof *usable), n_usable = 0;
    for (size_t w = 0; w < ds->n_workloads; w++) {
        int one = (int)w;
        double s;
        if (kace_predict_group(ctx, kace_model_predictor(m), ds, &one, 1, &s, NULL, NULL) == KACE_OK)
            usable[n_usable++] = one;
    }
    size_t n_gpus = NODES * GPUS_PER_NODE;
    kace_place_gpu *gpus = calloc(n_gpus, sizeof *gpus);
    srand(8);
    for (size_t g = 0; g < n_gpus; g++) {
        snprintf(gpus[g].node, sizeof gpus[g].node, "node%03zu", g / GPUS_PER_NODE);
        gpus[g].share_free = 100;
        gpus[g].usable = true;
    }
    /* 1,000 jobs spread over the GPUs, 20-30% each, so that most GPUs hold
     * two or three and still have room. */
    for (int j = 0; j < JOBS; j++) {
        size_t g = (size_t)j % n_gpus;
        kace_place_gpu *gpu = &gpus[g];
        int share = 20 + 10 * (rand() % 2);
        gpu->resident[gpu->n_residents++] = usable[rand() % n_usable];
        gpu->share_free -= share;
    }
    double t0 = bench_now();
    kace_place_prepare(ctx, kace_model_predictor(m), ds, gpus, n_gpus);
    double prepare_ms = (bench_now() - t0) * 1e3;

    double *lat = malloc(DECISIONS * sizeof *lat);
    kace_place_options opt;
    kace_place_options_default(&opt);
    int placed = 0;
    for (int i = 0; i < DECISIONS; i++) {
        int w = usable[rand() % n_usable];
        kace_placement p;
        double a = bench_now();
        if (kace_place_job(ctx, kace_model_predictor(m), ds, gpus, n_gpus, w, &opt, &p) == KACE_OK) {
            /* The plugin then re-scores the chosen GPU with the job on it;
             * here on a copy so that the cluster stays the same size. */
            kace_place_gpu chosen = gpus[p.gpu];
            chosen.resident[chosen.n_residents++] = w;
            kace_place_prepare(ctx, kace_model_predictor(m), ds, &chosen, 1);
            placed++;
        }
        lat[i] = (bench_now() - a) * 1e6;
    }
    qsort(lat, DECISIONS, sizeof *lat, bench_cmp_double);
    printf("cluster: %d nodes x %d GPUs, %d running jobs of %d profiled workloads; %d of %d decisions placed the job\n",
           NODES, GPUS_PER_NODE, JOBS, n_usable, placed, DECISIONS);
    printf("snapshot_prepare_ms=%.3f\n", prepare_ms);
    printf("decision_p50_us=%.1f decision_p99_us=%.1f\n", lat[DECISIONS / 2], lat[DECISIONS * 99 / 100]);
    free(lat);
    free(gpus);
    free(usable);
    kace_model_free(&m);
    kace_dataset_free(&ds);
    kace_store_close(&store);
    kace_ctx_free(&ctx);
    return 0;
}
