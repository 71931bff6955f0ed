/* The slowdown model's fast prediction paths give what a straightforward
 * evaluation of the same model gives: member features from
 * kace_slowdown_member_features_of, the ridge dot product, and a
 * node-by-node walk of every tree summing leaves in float in tree order, as
 * kace did before the fast paths. Both paths are checked where the CPU runs
 * both: the portable one (branch-free depth-3 trees, two rows at a time,
 * partner sums of the needed metrics only) and the AVX-512 one (blocks of 16
 * trees, features of all members at once, a vector validity and range
 * check), and the two must agree to the bit, confidence included. On the
 * V100 data: every pair and every triple, random groups of 1..8 workloads,
 * workloads outside the profile range, and a workload missing a metric. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/store.h"
#include "model/model_internal.h"
#include "model/slowdown.h"
#include "model/trees.h"
#include "testutil.h"

static kace_ctx *ctx;
static kace_dataset *pairs, *triples;
static kace_model *model;

static int setup(void **state)
{
    (void)state;
    ctx = kace_ctx_new();
    kace_store *store = NULL;
    char db[4096];
    snprintf(db, sizeof db, "%s/kace.db", scratch_dir("predict_exact"));
    remove(db);
    if (kace_store_open(ctx, db, &store))
        return -1;
    static const char *const files[] = {"profiles/system.csv", "colocations/pairs.csv", "colocations/triples.csv"};
    if (import_reference(ctx, store, files, 3) || kace_store_load_dataset(ctx, store, "pairs", false, &pairs) ||
        kace_store_load_dataset(ctx, store, "triples", false, &triples))
        return -1;
    kace_store_close(&store);
    int *rows = malloc(pairs->n_colocations * sizeof *rows);
    for (size_t i = 0; i < pairs->n_colocations; i++)
        rows[i] = (int)i;
    kace_status st = kace_model_fit_slowdown(ctx, pairs, rows, pairs->n_colocations, NULL, &model);
    free(rows);
    return st ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    kace_model_free(&model);
    kace_dataset_free(&pairs);
    kace_dataset_free(&triples);
    kace_ctx_free(&ctx);
    return 0;
}

/* The tree walk as kace did it before the fast path: node by node, the
 * feature in float against the threshold, leaves summed in float. */
static double reference_trees(const kace_trees *t, const double *x)
{
    float sum = 0;
    for (int i = 0; i < t->n_trees; i++) {
        const kace_tree_node *v = &t->node[t->tree_root[i]];
        while (v->left >= 0)
            v = &t->node[(float)x[v->feature] < v->threshold ? v->left : v->right];
        sum += v->threshold;
    }
    return (double)sum + t->base_score;
}

static double clampd(double v, double lo, double hi)
{
    return v < lo ? lo : (v > hi ? hi : v);
}

/* Member predictions and their sum, evaluated the straightforward way. */
static double reference_group(const kace_dataset *ds, const int *group, int k, double *member)
{
    int d = kace_slowdown_member_features();
    double sum_r = 0, sum_t = 0, w = model->tree_weight;
    for (int i = 0; i < k; i++) {
        double other[KACE_N_METRICS] = {0}, f[KACE_MAX_FEATURES];
        for (int j = 0; j < k; j++)
            if (j != i)
                for (int m = 0; m < KACE_N_METRICS; m++)
                    if (!isnan(ds->workloads[group[j]].metric[m]))
                        other[m] += ds->workloads[group[j]].metric[m];
        const double *own = ds->workloads[group[i]].metric;
        kace_slowdown_member_features_of(own, other, f);
        double z = model->ridge_raw[0];
        for (int j = 0; j < d; j++)
            z += model->ridge_raw[j + 1] * f[j];
        double excl = own[KACE_M_EXCLUSIVE];
        double r = excl * exp(clampd(z, log(0.02), log(1.2)));
        double t = model->trees.n_trees ? excl * clampd(reference_trees(&model->trees, f), 0.02, 1.2) : r;
        member[i] = (1 - w) * r + w * t;
        sum_r += r;
        sum_t += t;
    }
    return (1 - w) * sum_r + w * sum_t;
}

static double worst;
static int n_paths; /* 2 where the CPU runs the AVX-512 path, else 1 */

/* path 0: portable, 1: AVX-512 */
static void use_path(int path)
{
    assert_int_equal(kace_trees_use_simd(&model->trees, path), path);
}

static void check_group(const kace_dataset *ds, const int *group, int k)
{
    double want_member[KACE_MAX_K], got_member[2][KACE_MAX_K], got[2], conf[2];
    double want = reference_group(ds, group, k, want_member);
    for (int path = 0; path < n_paths; path++) {
        use_path(path);
        assert_kace_ok(ctx, kace_slowdown_predict(ctx, model, ds, group, k, &got[path], &conf[path], got_member[path]));
        double rel = fabs(got[path] - want) / fmax(fabs(want), 1e-300);
        for (int i = 0; i < k; i++)
            rel = fmax(rel, fabs(got_member[path][i] - want_member[i]) / fmax(fabs(want_member[i]), 1e-300));
        if (rel > worst)
            worst = rel;
        if (rel > 1e-9)
            fail_msg("group of %d (first %s), %s path: %.17g vs reference %.17g (relative %.3g)", k,
                     ds->workloads[group[0]].name, path ? "AVX-512" : "portable", got[path], want, rel);
        assert_true(conf[path] >= 0 && conf[path] <= 1);
    }
    if (n_paths == 2) { /* the same operations in the same order: the same bits */
        assert_memory_equal(&got[0], &got[1], sizeof got[0]);
        assert_memory_equal(&conf[0], &conf[1], sizeof conf[0]);
        assert_memory_equal(got_member[0], got_member[1], (size_t)k * sizeof got_member[0][0]);
    }
    use_path(n_paths - 1);
}

/* The AVX-512 path is on wherever the CPU has AVX-512F (x86-64 builds). */
static void test_paths(void **state)
{
    (void)state;
    int avx512 = 0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    avx512 = __builtin_cpu_supports("avx512f") != 0;
#endif
    assert_int_equal(model->trees.simd, avx512); /* chosen when the model was built */
    assert_int_equal(kace_trees_use_simd(&model->trees, 0), 0);
    assert_int_equal(kace_trees_use_simd(&model->trees, 1), avx512);
    n_paths = 1 + avx512;
    printf("# paths compared: portable%s\n", avx512 ? " and AVX-512" : " (no AVX-512 on this CPU)");
}

static void test_every_pair_and_triple(void **state)
{
    (void)state;
    assert_true(model->trees.n_trees > 0);
    assert_int_equal(model->trees.complete_depth, 3); /* the fast paths are the ones under test */
    size_t n = 0;
    for (size_t c = 0; c < pairs->n_colocations; c++, n++)
        check_group(pairs, pairs->colocations[c].workload, pairs->colocations[c].k);
    for (size_t c = 0; c < triples->n_colocations; c++, n++)
        check_group(triples, triples->colocations[c].workload, triples->colocations[c].k);
    assert_true(pairs->n_colocations > 100 && triples->n_colocations > 10);
    printf("# %zu colocations, worst relative difference %.3g\n", n, worst);
}

static void test_random_groups_of_every_size(void **state)
{
    (void)state;
    unsigned long long s = 0x9e3779b97f4a7c15ull;
    int usable[512], n_usable = 0;
    for (size_t w = 0; w < pairs->n_workloads && n_usable < 512; w++)
        if (pairs->workloads[w].metric[KACE_M_EXCLUSIVE] > 0 && !isnan(pairs->workloads[w].metric[KACE_M_MEMCAP]) &&
            !isnan(pairs->workloads[w].metric[KACE_M_SM_THROUGHPUT]))
            usable[n_usable++] = (int)w;
    assert_true(n_usable >= KACE_MAX_K);
    for (int round = 0; round < 400; round++) {
        int k = 1 + round % KACE_MAX_K, group[KACE_MAX_K];
        for (int i = 0; i < k; i++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            group[i] = usable[s % (unsigned long long)n_usable]; /* repeats allowed: the model takes them */
        }
        check_group(pairs, group, k);
    }
}

/* Coverage below 1 (a metric beyond the training range) and an error for a
 * missing metric, the same on both paths. */
static void test_out_of_range_and_missing(void **state)
{
    (void)state;
    const kace_colocation *c = &pairs->colocations[0];
    int w = c->workload[0];
    static const kace_metric bump[] = {KACE_M_SM_PCT, KACE_M_DRAM_THROUGHPUT, KACE_M_THREADS, KACE_M_MEMCAP};
    for (size_t b = 0; b < sizeof bump / sizeof *bump; b++) {
        double keep = pairs->workloads[w].metric[bump[b]];
        for (int side = 0; side < 2; side++) {
            pairs->workloads[w].metric[bump[b]] = side ? model->profile_hi[bump[b]] * 3 + 1 : 0;
            double conf[2], sum;
            for (int path = 0; path < n_paths; path++) {
                use_path(path);
                assert_kace_ok(ctx, kace_slowdown_predict(ctx, model, pairs, c->workload, c->k, &sum, &conf[path], NULL));
            }
            check_group(pairs, c->workload, c->k);
            if (side)
                assert_true(conf[0] < 1); /* beyond the range: less confidence */
            if (n_paths == 2)
                assert_memory_equal(&conf[0], &conf[1], sizeof conf[0]);
        }
        pairs->workloads[w].metric[bump[b]] = keep;
    }
    /* missing metric, and no exclusive throughput */
    for (int which = 0; which < 2; which++) {
        kace_metric mt = which ? KACE_M_EXCLUSIVE : KACE_M_MEM_THROUGHPUT;
        double keep = pairs->workloads[w].metric[mt];
        pairs->workloads[w].metric[mt] = which ? 0 : NAN;
        char msg[2][512];
        for (int path = 0; path < n_paths; path++) {
            use_path(path);
            double sum = -1;
            assert_int_equal(kace_slowdown_predict(ctx, model, pairs, c->workload, c->k, &sum, NULL, NULL),
                             KACE_ERR_INVALID);
            assert_true(sum == -1); /* nothing written */
            snprintf(msg[path], sizeof msg[path], "%s", kace_errmsg(ctx));
            assert_non_null(strstr(msg[path], pairs->workloads[w].name));
        }
        if (n_paths == 2)
            assert_string_equal(msg[0], msg[1]);
        pairs->workloads[w].metric[mt] = keep;
    }
    use_path(n_paths - 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paths),
        cmocka_unit_test(test_every_pair_and_triple),
        cmocka_unit_test(test_random_groups_of_every_size),
        cmocka_unit_test(test_out_of_range_and_missing),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
