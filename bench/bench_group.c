/* Best group of k workloads around a target: branch and bound against plain
 * enumeration, in the same run, one thread.
 *
 * The reference data has 21 workloads with complete profiles, so larger
 * pools are synthesized by a documented rule (kace_group_synthesize): each
 * synthetic workload copies a real workload's profile (round robin) and
 * multiplies each metric the model reads by exp(u * 0.4), u uniform in
 * [-1, 1] (about x0.67..x1.5), percentages capped at 100. The model is
 * kace's slowdown model fitted on the 181 measured pairs. For each pool
 * size and k, the same 5 targets (real workloads) are searched with a pool
 * of that many synthetic workloads; the table gives the median time per
 * search and the ratio to enumeration (skipped where enumeration would
 * take too long, marked '-'), the slowest target's branch-and-bound time,
 * and checks both give the same group. For k = 2 kace_group_best scores
 * every pair itself (cheaper than bounding them), so the ratio is ~1.
 * usage: kace-bench-group [SHARED_V100_DIR] [SCRATCH_DB] */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kace/group.h"
#include "kace/store.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int die(kace_ctx *ctx, const char *what)
{
    fprintf(stderr, "kace-bench-group: %s: %s\n", what, kace_errmsg(ctx));
    return 1;
}

enum { N_TARGETS = 5, N_SYNTH = 200 };

int main(int argc, char **argv)
{
    const char *data = argc > 1 ? argv[1] : "../shared/data/kace-v100";
    const char *db = argc > 2 ? argv[2] : "kace-bench-group.db";
    char path[2][4096];
    kace_ctx *ctx = kace_ctx_new();
    kace_store *store = NULL;
    kace_dataset *ds = NULL;
    kace_model *m = NULL;
    remove(db);
    if (kace_store_open(ctx, db, &store))
        return die(ctx, db);
    static const char *const files[] = {"profiles/system.csv", "colocations/pairs.csv"};
    snprintf(path[0], sizeof path[0], "%s/%s", data, files[0]);
    snprintf(path[1], sizeof path[1], "%s/%s", data, files[1]);
    const char *paths[2] = {path[0], path[1]};
    if (kace_store_import_files(ctx, store, paths, 2, NULL, NULL, NULL, NULL))
        return die(ctx, data);
    if (kace_store_load_dataset(ctx, store, "pairs", false, &ds))
        return die(ctx, "load");
    int *rows = malloc(ds->n_colocations * sizeof *rows);
    for (size_t i = 0; i < ds->n_colocations; i++)
        rows[i] = (int)i;
    if (kace_model_fit_slowdown(ctx, ds, rows, ds->n_colocations, NULL, &m))
        return die(ctx, "fit");
    free(rows);
    size_t n_real = ds->n_workloads;
    if (kace_group_synthesize(ctx, ds, N_SYNTH, 0.4, 1))
        return die(ctx, "synthesize");
    int targets[N_TARGETS], n_t = 0;
    for (size_t w = 0; w < n_real && n_t < N_TARGETS; w += 4)
        if (ds->workloads[w].metric[KACE_M_EXCLUSIVE] > 0 && !isnan(ds->workloads[w].metric[KACE_M_SM_THROUGHPUT]))
            targets[n_t++] = (int)w;
    int pool[N_SYNTH];
    for (int i = 0; i < N_SYNTH; i++)
        pool[i] = (int)(n_real + (size_t)i);

    static const int sizes[] = {25, 50, 100, 200};
    printf("best group around a target: branch and bound vs enumeration, median over %d targets, one thread\n",
           n_t);
    printf("%5s %2s %12s %12s %8s %12s %12s %12s %s\n", "pool", "k", "bb_ms", "enum_ms", "ratio", "bb_slowest_ms",
           "bb_scored", "enum_scored", "same");
    double worst_k4_200 = 0;
    int mismatches = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
        for (int k = 2; k <= 4; k++) {
            double tb[N_TARGETS], te[N_TARGETS];
            unsigned long long sb = 0, se = 0;
            int same = 0, enumerated = 0;
            double combos = 1;
            for (int i = 0; i < k - 1; i++)
                combos *= (double)(sizes[si] - i) / (i + 1);
            bool run_enum = combos <= 2e6;
            for (int t = 0; t < n_t; t++) {
                kace_group_query q = {.target = targets[t], .k = k, .pool = pool, .n_pool = (size_t)sizes[si]};
                kace_group_result bb, en;
                double t0 = now();
                if (kace_group_best(ctx, ds, kace_model_predictor(m), &q, &bb))
                    return die(ctx, "branch and bound");
                tb[t] = now() - t0;
                sb += bb.groups_scored;
                if (run_enum) {
                    t0 = now();
                    if (kace_group_enumerate(ctx, ds, kace_model_predictor(m), &q, &en))
                        return die(ctx, "enumerate");
                    te[t] = now() - t0;
                    se += en.groups_scored;
                    enumerated++;
                    bool eq = bb.found == en.found && (!bb.found || (bb.predicted == en.predicted &&
                                                                      memcmp(bb.workload, en.workload,
                                                                             (size_t)k * sizeof *bb.workload) == 0));
                    same += eq;
                    mismatches += !eq;
                }
                if (k == 4 && sizes[si] == 200 && tb[t] > worst_k4_200)
                    worst_k4_200 = tb[t];
            }
            qsort(tb, (size_t)n_t, sizeof *tb, cmp_double);
            double mb = tb[n_t / 2] * 1e3, slowest = tb[n_t - 1] * 1e3;
            if (enumerated) {
                qsort(te, (size_t)n_t, sizeof *te, cmp_double);
                double me = te[n_t / 2] * 1e3;
                printf("%5d %2d %12.3f %12.3f %7.1fx %12.3f %12llu %12llu %d/%d\n", sizes[si], k, mb, me, me / mb,
                       slowest, sb / (unsigned long long)n_t, se / (unsigned long long)n_t, same, enumerated);
            } else {
                printf("%5d %2d %12.3f %12s %8s %12.3f %12llu %12s -\n", sizes[si], k, mb, "-", "-", slowest,
                       sb / (unsigned long long)n_t, "-");
            }
        }
    printf("k=4 out of 200: slowest of the %d targets %.3f ms (goal < 10 ms)\n", n_t, worst_k4_200 * 1e3);
    if (mismatches)
        printf("MISMATCH: branch and bound differed from enumeration %d time(s)\n", mismatches);
    kace_model_free(&m);
    kace_dataset_free(&ds);
    kace_store_close(&store);
    kace_ctx_free(&ctx);
    remove(db);
    return mismatches ? 1 : 0;
}
