/* The three model-speed goals, measured the same way for any
 * build of the library (bench/bench_speed.sh compiles this file against the
 * library before that work and against this one, and prints the ratios):
 *  - predict: kace_slowdown_predict of one pair per call (sum and
 *    confidence), every one of the 181 measured pairs in turn, ns per pair;
 *  - fit: the default slowdown model on all 181 measured pairs, ms;
 *  - group: the best group of 4 around each of 5 targets from a pool of 200
 *    synthetic workloads (as kace-bench-group), the slowest target's ms.
 * Each figure is given as min/median/max over repeated runs, in the
 * thread's CPU time (what the work costs, even on a machine shared with
 * other processes) and in wall time. One thread.
 * usage: kace-bench-speed [SHARED_V100_DIR] [SCRATCH_DB] */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kace/group.h"
#include "kace/store.h"

#include "bench_common.h"

enum { PREDICT_PASSES = 7, PREDICT_ROUNDS = 300, FIT_RUNS = 7, GROUP_RUNS = 10, N_TARGETS = 5, N_SYNTH = 200 };

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int die(kace_ctx *ctx, const char *what)
{
    fprintf(stderr, "kace-bench-speed: %s: %s\n", what, kace_errmsg(ctx));
    return 1;
}

/* One line: NAME UNIT cpu MIN MED MAX wall MIN MED MAX (sorts its inputs). */
static void report(const char *name, const char *unit, double *cpu, double *wall, size_t n)
{
    qsort(cpu, n, sizeof *cpu, bench_cmp_double);
    qsort(wall, n, sizeof *wall, bench_cmp_double);
    printf("%-8s %-6s cpu %10.3f %10.3f %10.3f  wall %10.3f %10.3f %10.3f  runs %zu\n", name, unit, cpu[0],
           cpu[n / 2], cpu[n - 1], wall[0], wall[n / 2], wall[n - 1], n);
}

int main(int argc, char **argv)
{
    const char *data = argc > 1 ? argv[1] : "../shared/data/kace-v100";
    const char *db = argc > 2 ? argv[2] : "/tmp/kace-bench-speed.db";
    remove(db);
    kace_ctx *ctx = kace_ctx_new();
    kace_store *store = NULL;
    if (kace_store_open(ctx, db, &store))
        return die(ctx, db);
    static const char *const files[] = {"profiles/system.csv", "colocations/pairs.csv"};
    const char *failed = NULL;
    if (bench_import(ctx, store, data, files, 2, &failed))
        return die(ctx, failed);
    kace_dataset *ds = NULL;
    if (kace_store_load_dataset(ctx, store, "pairs", false, &ds))
        return die(ctx, "load");
    size_t n = ds->n_colocations;
    int *rows = malloc(n * sizeof *rows);
    for (size_t i = 0; i < n; i++)
        rows[i] = (int)i;
    kace_fit_spec spec = {.kind = KACE_MODEL_SLOWDOWN};
    kace_slowdown_params_default(&spec.slowdown);

    /* fit */
    double cpu[GROUP_RUNS], wall[GROUP_RUNS];
    kace_model *m = NULL;
    for (int run = 0; run < FIT_RUNS; run++) {
        kace_model_free(&m);
        double w0 = bench_now(), c0 = cpu_now();
        if (kace_model_fit_rows(ctx, ds, rows, n, &spec, &m))
            return die(ctx, "fit");
        cpu[run] = (cpu_now() - c0) * 1e3;
        wall[run] = (bench_now() - w0) * 1e3;
    }
    printf("kace-bench-speed: %zu pairs; one thread; cpu = the thread's CPU time\n", n);
    report("fit", "ms", cpu, wall, FIT_RUNS);

    /* predict, one pair per call */
    volatile double sink = 0;
    for (int pass = 0; pass < PREDICT_PASSES; pass++) {
        double w0 = bench_now(), c0 = cpu_now();
        for (int r = 0; r < PREDICT_ROUNDS; r++)
            for (size_t i = 0; i < n; i++) {
                const kace_colocation *c = &ds->colocations[i];
                double p, conf;
                kace_slowdown_predict(ctx, m, ds, c->workload, c->k, &p, &conf, NULL);
                sink += p;
            }
        double per = 1e9 / ((double)PREDICT_ROUNDS * (double)n);
        cpu[pass] = (cpu_now() - c0) * per;
        wall[pass] = (bench_now() - w0) * per;
    }
    (void)sink;
    report("predict", "ns", cpu, wall, PREDICT_PASSES);

    /* best group of 4 from 200: per run, the slowest of the targets */
    size_t n_real = ds->n_workloads;
    if (kace_group_synthesize(ctx, ds, N_SYNTH, 0.4, 1))
        return die(ctx, "synthesize");
    int targets[N_TARGETS], n_t = 0, pool[N_SYNTH];
    for (size_t w = 0; w < n_real && n_t < N_TARGETS; w += 4)
        if (ds->workloads[w].metric[KACE_M_EXCLUSIVE] > 0 && !isnan(ds->workloads[w].metric[KACE_M_SM_THROUGHPUT]))
            targets[n_t++] = (int)w;
    for (int i = 0; i < N_SYNTH; i++)
        pool[i] = (int)(n_real + (size_t)i);
    double predicted[N_TARGETS];
    for (int run = 0; run < GROUP_RUNS; run++) {
        cpu[run] = wall[run] = 0;
        for (int t = 0; t < n_t; t++) {
            kace_group_query q = {.target = targets[t], .k = 4, .pool = pool, .n_pool = N_SYNTH};
            kace_group_result res;
            double w0 = bench_now(), c0 = cpu_now();
            if (kace_group_best(ctx, ds, kace_model_predictor(m), &q, &res))
                return die(ctx, "group");
            double c = (cpu_now() - c0) * 1e3, w = (bench_now() - w0) * 1e3;
            cpu[run] = fmax(cpu[run], c);
            wall[run] = fmax(wall[run], w);
            if (run == 0)
                predicted[t] = res.predicted;
            else if (predicted[t] != res.predicted)
                return die(ctx, "group: another answer on a repeated search");
        }
    }
    report("group4", "ms", cpu, wall, GROUP_RUNS);
    printf("group4: the slowest of %d targets per run; predicted sums:", n_t);
    for (int t = 0; t < n_t; t++)
        printf(" %.6f", predicted[t]);
    printf("\n");
    free(rows);
    kace_model_free(&m);
    kace_dataset_free(&ds);
    kace_store_close(&store);
    kace_ctx_free(&ctx);
    remove(db);
    return 0;
}
