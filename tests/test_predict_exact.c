/* The slowdown model's fast prediction path (branch-free depth-3 trees,
 * several members at once, partner sums of the needed metrics only) gives
 * what a straightforward evaluation of the same model gives: member
 * features from kace_slowdown_member_features_of, the ridge dot product,
 * and a node-by-node walk of every tree summing leaves in float in tree
 * order, as kace did before the fast path. Checked on the V100 data for
 * every pair and every triple, and on random groups of 1..8 workloads (the
 * fast path takes rows four, two and one at a time). */
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

static int worst_line;
static double worst;

static void check_group(const kace_dataset *ds, const int *group, int k)
{
    double want_member[KACE_MAX_K], got_member[KACE_MAX_K], got, conf;
    double want = reference_group(ds, group, k, want_member);
    assert_kace_ok(ctx, kace_slowdown_predict(ctx, model, ds, group, k, &got, &conf, got_member));
    double rel = fabs(got - want) / fmax(fabs(want), 1e-300);
    for (int i = 0; i < k; i++)
        rel = fmax(rel, fabs(got_member[i] - want_member[i]) / fmax(fabs(want_member[i]), 1e-300));
    if (rel > worst)
        worst = rel;
    if (rel > 1e-9)
        fail_msg("group of %d (first %s): fast %.17g vs reference %.17g (relative %.3g)", k,
                 ds->workloads[group[0]].name, got, want, rel);
    assert_true(conf >= 0 && conf <= 1);
    (void)worst_line;
}

static void test_every_pair_and_triple(void **state)
{
    (void)state;
    assert_true(model->trees.n_trees > 0);
    assert_int_equal(model->trees.complete_depth, 3); /* the fast path is the one under test */
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_pair_and_triple),
        cmocka_unit_test(test_random_groups_of_every_size),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
