/* Generalization of kace's default model (issue 22) on ../shared/data/kace-v100,
 * clean protocol (fit every training row, training statistics everywhere):
 *  - leave one batch size out on the pairs: fit on the pairs with no workload
 *    of batch B, choose a partner for each batch-B workload among all the
 *    pairs that contain it;
 *  - pairs only, choosing among the triples: for each triple workload W, fit
 *    on the pairs without W's family (protocol 7, but no triple is fitted),
 *    pick the triple containing W with the highest predicted sum;
 *  - per-member error at n_occur = 3: mean |predicted - measured| throughput
 *    of each member of the test colocations, in % of its exclusive
 *    throughput, over the 5 published splits.
 * Each figure is the mean over kace's seeds 0..N_SEEDS-1 (the trees subsample
 * rows and the selection deals folds at random). The test prints each figure
 * beside the goal and fails when one falls below the level the model
 * reached when this guard was set (a regression guard, not the goal). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/eval.h"
#include "kace/store.h"
#include "testutil.h"

#define N_SEEDS 4

static kace_ctx *ctx;
static kace_store *store;
static kace_dataset *pairs, *triples;
static kace_splits *splits;

static int setup(void **state)
{
    (void)state;
    ctx = kace_ctx_new();
    char db[4096];
    snprintf(db, sizeof db, "%s/kace.db", scratch_dir("generalize"));
    if (kace_store_open(ctx, db, &store))
        return -1;
    static const char *const files[] = {"profiles/system.csv", "colocations/pairs.csv", "colocations/triples.csv",
                                        "splits.csv"};
    if (import_reference(ctx, store, files, 4))
        return -1;
    if (kace_store_load_dataset(ctx, store, "pairs", false, &pairs) ||
        kace_store_load_dataset(ctx, store, "triples", false, &triples) ||
        kace_store_load_splits(ctx, store, pairs, &splits))
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kace_splits_free(&splits);
    kace_dataset_free(&pairs);
    kace_dataset_free(&triples);
    kace_store_close(&store);
    kace_ctx_free(&ctx);
    return 0;
}

static kace_model *fit(const kace_dataset *ds, const int *rows, size_t n, uint64_t seed)
{
    kace_fit_spec spec = {.kind = KACE_MODEL_SLOWDOWN};
    kace_slowdown_params_default(&spec.slowdown);
    spec.slowdown.seed = seed;
    kace_model *m = NULL;
    assert_kace_ok(ctx, kace_model_fit_rows(ctx, ds, rows, n, &spec, &m));
    return m;
}

static bool has_batch(const kace_dataset *ds, const kace_colocation *c, int batch)
{
    for (int j = 0; j < c->k; j++)
        if (ds->workloads[c->workload[j]].batch == batch)
            return true;
    return false;
}

/* Leave batch size `batch` out: the mean score over its workloads; the
 * per-target scores go to score[w] (NAN for other workloads). */
static double leave_batch_out(int batch, uint64_t seed, double *score)
{
    size_t nc = pairs->n_colocations;
    int *train = malloc(nc * sizeof *train), *cand = malloc(nc * sizeof *cand);
    assert_non_null(train);
    assert_non_null(cand);
    size_t n_train = 0;
    for (size_t i = 0; i < nc; i++)
        if (!has_batch(pairs, &pairs->colocations[i], batch))
            train[n_train++] = (int)i;
    kace_model *m = fit(pairs, train, n_train, seed);
    double total = 0;
    int n_targets = 0;
    for (size_t w = 0; w < pairs->n_workloads; w++) {
        score[w] = NAN;
        if (pairs->workloads[w].batch != batch)
            continue;
        size_t n = 0;
        for (size_t i = 0; i < nc; i++)
            if (kace_colocation_has(&pairs->colocations[i], (int)w))
                cand[n++] = (int)i;
        if (n == 0)
            continue;
        assert_kace_ok(ctx, kace_eval_choice(ctx, kace_model_predictor(m), KACE_NORM_TRAIN, pairs, cand, n, &score[w]));
        total += score[w];
        n_targets++;
    }
    assert_int_equal(n_targets, 7);
    kace_model_free(&m);
    free(train);
    free(cand);
    return total / n_targets;
}

/* Pairs-only model choosing among the triples (family exclusion). */
static double pairs_to_triples(uint64_t seed)
{
    double total = 0;
    int n_targets = 0;
    int *train = malloc(pairs->n_colocations * sizeof *train), *cand = malloc(triples->n_colocations * sizeof *cand);
    assert_non_null(train);
    assert_non_null(cand);
    for (size_t w = 0; w < triples->n_workloads; w++) {
        size_t n_train = 0, n = 0;
        for (size_t i = 0; i < triples->n_colocations; i++)
            if (kace_colocation_has(&triples->colocations[i], (int)w))
                cand[n++] = (int)i;
        if (n == 0)
            continue;
        /* Both datasets come from one store: workload indices agree. */
        assert_string_equal(pairs->workloads[w].name, triples->workloads[w].name);
        const char *family = triples->workloads[w].family;
        for (size_t i = 0; i < pairs->n_colocations; i++) {
            const kace_colocation *c = &pairs->colocations[i];
            bool same = false;
            for (int j = 0; j < c->k; j++)
                same |= strcmp(pairs->workloads[c->workload[j]].family, family) == 0;
            if (!same)
                train[n_train++] = (int)i;
        }
        kace_model *m = fit(pairs, train, n_train, seed);
        double s;
        assert_kace_ok(ctx, kace_eval_choice(ctx, kace_model_predictor(m), KACE_NORM_TRAIN, triples, cand, n, &s));
        total += s;
        n_targets++;
        kace_model_free(&m);
    }
    assert_int_equal(n_targets, 14);
    free(train);
    free(cand);
    return total / n_targets;
}

/* Per-member error (% of exclusive) at n_occur = 3, mean over the splits. */
static double member_error(uint64_t seed)
{
    kace_splits n3 = {malloc(splits->n * sizeof *splits->rows), 0};
    assert_non_null(n3.rows);
    for (size_t i = 0; i < splits->n; i++)
        if (splits->rows[i].n_occur == 3)
            n3.rows[n3.n++] = splits->rows[i];
    kace_eval_options opt;
    kace_eval_options_default(&opt);
    opt.mode = KACE_MODE_CLEAN;
    opt.with_xu = false;
    opt.slowdown.seed = seed;
    kace_split_results *r = NULL;
    assert_kace_ok(ctx, kace_eval_splits(ctx, pairs, &n3, &opt, &r));
    assert_int_equal(r->n, 5);
    double mae = 0;
    for (size_t i = 0; i < r->n; i++)
        mae += r->items[i].slowdown_mae_pct / (double)r->n;
    kace_split_results_free(&r);
    free(n3.rows);
    return mae;
}

/* Fails when got falls below the guard (the level reached when it was set). */
static void check(const char *what, double got, double guard, double goal, bool lower_is_better)
{
    bool met = lower_is_better ? got <= goal : got >= goal;
    printf("%-34s %.4f  (goal %s %.2f: %s; guard %.4f)\n", what, got, lower_is_better ? "<=" : ">=", goal,
           met ? "met" : "not met", guard);
    if (lower_is_better ? got > guard + 1e-9 : got < guard - 1e-9)
        fail_msg("%s: %.4f is %s the guard %.4f", what, got, lower_is_better ? "above" : "below", guard);
}

/* The held-out batch's colocations never reach the fit: with their
 * throughputs poisoned (NaN, which a fit refuses), the model is the same. */
static void test_held_out_batch_never_fitted(void **state)
{
    (void)state;
    size_t nc = pairs->n_colocations;
    kace_dataset poisoned = *pairs;
    poisoned.colocations = malloc(nc * sizeof *poisoned.colocations);
    int *train = malloc(nc * sizeof *train);
    assert_non_null(poisoned.colocations);
    assert_non_null(train);
    memcpy(poisoned.colocations, pairs->colocations, nc * sizeof *poisoned.colocations);
    size_t n_train = 0, n_poisoned = 0;
    for (size_t i = 0; i < nc; i++) {
        if (!has_batch(pairs, &pairs->colocations[i], 16)) {
            train[n_train++] = (int)i;
            continue;
        }
        for (int j = 0; j < poisoned.colocations[i].k; j++)
            poisoned.colocations[i].throughput[j] = NAN;
        n_poisoned++;
    }
    assert_true(n_train > 20 && n_poisoned > 20);
    kace_model *clean = fit(pairs, train, n_train, 0), *dirty = fit(&poisoned, train, n_train, 0);
    char *a = NULL, *b = NULL;
    assert_kace_ok(ctx, kace_model_to_text(ctx, clean, &a));
    assert_kace_ok(ctx, kace_model_to_text(ctx, dirty, &b));
    assert_string_equal(a, b);
    free(a);
    free(b);
    kace_model_free(&clean);
    kace_model_free(&dirty);
    free(train);
    free(poisoned.colocations);
}

static void test_leave_one_batch_size_out(void **state)
{
    (void)state;
    static const int batches[3] = {2, 8, 16};
    /* Set at the level reached (mean over seeds 0..3), to 3 decimals. */
    static const double guard[3] = {0.971, 0.981, 0.901};
    double *score = malloc(pairs->n_workloads * sizeof *score), *per = calloc(pairs->n_workloads, sizeof *per);
    assert_non_null(score);
    assert_non_null(per);
    for (int b = 0; b < 3; b++) {
        double mean = 0;
        for (int s = 0; s < N_SEEDS; s++) {
            double seed_mean = leave_batch_out(batches[b], (uint64_t)s, score);
            printf("  batch %2d seed %d: %.4f\n", batches[b], s, seed_mean);
            mean += seed_mean / N_SEEDS;
            for (size_t w = 0; w < pairs->n_workloads; w++)
                if (!isnan(score[w]))
                    per[w] += score[w] / N_SEEDS;
        }
        for (size_t w = 0; w < pairs->n_workloads; w++)
            if (pairs->workloads[w].batch == batches[b] && per[w] > 0)
                printf("    %-34s %.4f\n", pairs->workloads[w].name, per[w]);
        char what[64];
        snprintf(what, sizeof what, "leave batch %d out", batches[b]);
        check(what, mean, guard[b], 0.95, false);
    }
    free(score);
    free(per);
}

static void test_pairs_only_model_on_triples(void **state)
{
    (void)state;
    double mean = 0;
    for (int s = 0; s < N_SEEDS; s++) {
        double t = pairs_to_triples((uint64_t)s);
        printf("  seed %d: %.4f\n", s, t);
        mean += t / N_SEEDS;
    }
    check("pairs-only model on triples", mean, 0.952, 0.97, false);
}

static void test_member_error_n_occur_3(void **state)
{
    (void)state;
    double mean = 0;
    for (int s = 0; s < N_SEEDS; s++) {
        double e = member_error((uint64_t)s);
        printf("  seed %d: %.2f%%\n", s, e);
        mean += e / N_SEEDS;
    }
    check("per-member error at n_occur=3 (%)", mean, 13.52, 10, true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_held_out_batch_never_fitted),
        cmocka_unit_test(test_leave_one_batch_size_out),
        cmocka_unit_test(test_pairs_only_model_on_triples),
        cmocka_unit_test(test_member_error_n_occur_3),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
