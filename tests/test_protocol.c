/* Evaluation protocols (include/kace/protocol.h): folds of every protocol
 * on a 4-workload fixture with hand-computed rule scores, fold properties
 * (disjointness, coverage, no held-out workload in training) on the V100
 * pairs, the candidate-list parser, and the poisoning check: the models a
 * fold scores with are fitted on its training rows only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/eval.h"
#include "kace/protocol.h"
#include "kace/store.h"
#include "testutil.h"

static kace_ctx *ctx;
static kace_dataset *fx;     /* the fixture */
static kace_dataset *pairs;  /* V100 pairs */
static kace_splits *splits;

/* Fixture: families a-train and b-inf, batch 2 and 8. Hand-computed below
 * from memcap (lowest summed memcap wins) and the measured sums. */
static const char *const fx_names[4] = {"a_batch2-train", "a_batch8-train", "b_batch2-inf", "b_batch8-inf"};
static const double fx_memcap[4] = {4, 8, 2, 6};
static const struct {
    int a, b;
    double ta, tb;
} fx_rows[10] = {
    {0, 0, 40, 40}, /* r0: sum 80, memcap 8 */
    {0, 1, 50, 30}, /* r1: 80, 12 */
    {0, 2, 60, 50}, /* r2: 110, 6 */
    {0, 3, 45, 45}, /* r3: 90, 10 */
    {1, 1, 30, 30}, /* r4: 60, 16 */
    {1, 2, 55, 45}, /* r5: 100, 10 */
    {1, 3, 35, 35}, /* r6: 70, 14 */
    {2, 2, 60, 60}, /* r7: 120, 4 */
    {2, 3, 40, 35}, /* r8: 75, 8 */
    {3, 3, 40, 40}, /* r9: 80, 12 */
};

static kace_dataset *make_fixture(void)
{
    kace_dataset *ds = NULL;
    if (kace_dataset_new(ctx, &ds))
        return NULL;
    for (int w = 0; w < 4; w++) {
        int idx;
        if (kace_dataset_intern(ctx, ds, fx_names[w], &idx))
            return NULL;
        kace_workload *wl = &ds->workloads[idx];
        for (int m = 0; m < KACE_N_METRICS; m++)
            wl->metric[m] = 10 + m + 3 * w + (m * w) % 7; /* distinct, nonzero */
        wl->metric[KACE_M_MEMCAP] = fx_memcap[w];
        wl->metric[KACE_M_EXCLUSIVE] = 100;
    }
    for (int r = 0; r < 10; r++) {
        kace_colocation c = {.k = 2,
                             .workload = {fx_rows[r].a, fx_rows[r].b},
                             .mps_pct = {100, 100},
                             .throughput = {fx_rows[r].ta, fx_rows[r].tb}};
        if (kace_dataset_add_colocation(ctx, ds, &c))
            return NULL;
    }
    return ds;
}

static int setup(void **state)
{
    (void)state;
    ctx = kace_ctx_new();
    if (!(fx = make_fixture()))
        return -1;
    kace_store *store = NULL;
    char db[4096];
    snprintf(db, sizeof db, "%s/kace.db", scratch_dir("protocol"));
    const char *files[] = {"profiles/system.csv", "colocations/pairs.csv", "splits.csv"};
    if (kace_store_open(ctx, db, &store) || import_reference(ctx, store, files, 3) ||
        kace_store_load_dataset(ctx, store, "pairs", false, &pairs) ||
        kace_store_load_splits(ctx, store, pairs, &splits)) {
        fprintf(stderr, "%s\n", kace_errmsg(ctx));
        return -1;
    }
    kace_store_close(&store);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kace_splits_free(&splits);
    kace_dataset_free(&pairs);
    kace_dataset_free(&fx);
    kace_ctx_free(&ctx);
    return 0;
}

static void assert_rows(const int *got, size_t n, const int *want, size_t n_want)
{
    assert_int_equal(n, n_want);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(got[i], want[i]);
}

static kace_eval_options fast_options(void)
{
    kace_eval_options o;
    kace_eval_options_default(&o);
    o.with_xu = false;
    o.with_slowdown = false; /* too few rows for its cross-validation */
    o.mode = KACE_MODE_CLEAN;
    o.n_threads = 2;
    return o;
}

static const kace_target_score *find_target(const kace_protocol_result *r, int w)
{
    for (size_t i = 0; i < r->n_targets; i++)
        if (r->targets[i].target == w)
            return &r->targets[i];
    return NULL;
}

#define EPS 1e-9

static void test_names(void **state)
{
    (void)state;
    for (int p = 0; p < KACE_N_PROTOCOLS; p++)
        assert_int_equal(kace_protocol_from_name(kace_protocol_name((kace_protocol)p)), p);
    assert_int_equal(kace_protocol_from_name("leave-batch-size-out"), KACE_PROTO_LEAVE_BATCH_OUT);
    assert_int_equal(kace_protocol_from_name("nope"), -1);
}

static void test_leave_family_out_fixture(void **state)
{
    (void)state;
    kace_protocol_spec spec;
    kace_protocol_spec_default(&spec);
    spec.protocol = KACE_PROTO_LEAVE_FAMILY_OUT;
    kace_folds *folds = NULL;
    assert_kace_ok(ctx, kace_protocol_folds(ctx, fx, &spec, &folds));
    assert_int_equal(folds->n, 2);
    assert_string_equal(folds->items[0].label, "family a-train");
    assert_string_equal(folds->items[1].label, "family b-inf");
    /* Family a held out: only rows among b's workloads train. */
    assert_rows(folds->items[0].train, folds->items[0].n_train, (int[]){7, 8, 9}, 3);
    assert_rows(folds->items[0].test, folds->items[0].n_test, (int[]){0, 1, 2, 3, 4, 5, 6}, 7);
    assert_rows(folds->items[0].targets, folds->items[0].n_targets, (int[]){0, 1}, 2);
    assert_rows(folds->items[0].held_out, folds->items[0].n_held_out, (int[]){0, 1}, 2);
    assert_rows(folds->items[1].train, folds->items[1].n_train, (int[]){0, 1, 4}, 3);
    assert_rows(folds->items[1].targets, folds->items[1].n_targets, (int[]){2, 3}, 2);

    kace_eval_options o = fast_options();
    kace_protocol_result *r = NULL;
    assert_kace_ok(ctx, kace_eval_folds(ctx, fx, folds, &o, &r));
    assert_int_equal(r->n_folds, 2);
    /* Target 0: candidates r0..r3 (sums 80 80 110 90, memcap 8 12 6 10):
     * MEMCAP takes r2 = the best; Random = 90/110. Target 1: r1 r4 r5 r6
     * (80 60 100 70; memcap 12 16 10 14): MEMCAP r5 = best, Random 77.5/100.
     * Target 2: r2 r5 r7 r8 (110 100 120 75; 6 10 4 8): MEMCAP r7 = best,
     * Random 101.25/120. Target 3: r3 r6 r8 r9 (90 70 75 80; 10 14 8 12):
     * MEMCAP r8 = 75/90, Random 78.75/90. */
    assert_float_equal(find_target(r, 0)->score[KACE_POL_MEMCAP], 1.0, EPS);
    assert_float_equal(find_target(r, 0)->score[KACE_POL_RANDOM], 90.0 / 110, EPS);
    assert_float_equal(find_target(r, 1)->score[KACE_POL_RANDOM], 0.775, EPS);
    assert_float_equal(find_target(r, 2)->score[KACE_POL_RANDOM], 101.25 / 120, EPS);
    assert_float_equal(find_target(r, 3)->score[KACE_POL_MEMCAP], 75.0 / 90, EPS);
    assert_float_equal(find_target(r, 3)->score[KACE_POL_RANDOM], 78.75 / 90, EPS);
    assert_int_equal(find_target(r, 3)->n_candidates, 4);
    /* Fold means 1 and (1 + 75/90)/2; their mean; the 95% t-interval with
     * 1 degree of freedom: t = 12.706, half-width = t x |a - b| / 2. */
    double b = (1 + 75.0 / 90) / 2;
    assert_float_equal(r->folds[0].score[KACE_POL_MEMCAP], 1.0, EPS);
    assert_float_equal(r->folds[1].score[KACE_POL_MEMCAP], b, EPS);
    assert_float_equal(r->mean[KACE_POL_MEMCAP], (1 + b) / 2, EPS);
    assert_float_equal(r->ci95[KACE_POL_MEMCAP], 12.706 * (1 - b) / 2, 1e-9);
    assert_float_equal(r->mean[KACE_POL_ORACLE], 1.0, EPS);
    assert_true(r->folds[0].score[KACE_POL_KACE] > 0 && r->folds[0].score[KACE_POL_KACE] <= 1);
    kace_protocol_result_free(&r);
    kace_folds_free(&folds);
}

static void test_leave_workload_and_batch_out_fixture(void **state)
{
    (void)state;
    kace_protocol_spec spec;
    kace_protocol_spec_default(&spec);
    spec.protocol = KACE_PROTO_LEAVE_WORKLOAD_OUT;
    kace_folds *folds = NULL;
    assert_kace_ok(ctx, kace_protocol_folds(ctx, fx, &spec, &folds));
    assert_int_equal(folds->n, 4);
    assert_string_equal(folds->items[0].label, "workload a_batch2-train");
    /* Workload 0 out: every row without it trains. */
    assert_rows(folds->items[0].train, folds->items[0].n_train, (int[]){4, 5, 6, 7, 8, 9}, 6);
    assert_rows(folds->items[0].test, folds->items[0].n_test, (int[]){0, 1, 2, 3}, 4);
    kace_eval_options o = fast_options();
    kace_protocol_result *r = NULL;
    assert_kace_ok(ctx, kace_eval_folds(ctx, fx, folds, &o, &r));
    /* One target per fold: fold means are the target scores 1, 1, 1, 75/90. */
    assert_float_equal(r->mean[KACE_POL_MEMCAP], (3 + 75.0 / 90) / 4, EPS);
    assert_float_equal(r->folds[3].score[KACE_POL_MEMCAP], 75.0 / 90, EPS);
    kace_protocol_result_free(&r);
    kace_folds_free(&folds);

    spec.protocol = KACE_PROTO_LEAVE_BATCH_OUT;
    assert_kace_ok(ctx, kace_protocol_folds(ctx, fx, &spec, &folds));
    assert_int_equal(folds->n, 2);
    assert_string_equal(folds->items[0].label, "batch 2");
    assert_string_equal(folds->items[1].label, "batch 8");
    /* Batch 2 out: no training row holds a_batch2 or b_batch2. */
    assert_rows(folds->items[0].train, folds->items[0].n_train, (int[]){4, 6, 9}, 3);
    assert_rows(folds->items[0].test, folds->items[0].n_test, (int[]){0, 1, 2, 3, 5, 7, 8}, 7);
    assert_rows(folds->items[0].targets, folds->items[0].n_targets, (int[]){0, 2}, 2);
    assert_rows(folds->items[1].train, folds->items[1].n_train, (int[]){0, 2, 7}, 3);
    assert_kace_ok(ctx, kace_eval_folds(ctx, fx, folds, &o, &r));
    assert_float_equal(r->folds[0].score[KACE_POL_MEMCAP], 1.0, EPS);
    assert_float_equal(r->folds[1].score[KACE_POL_MEMCAP], (1 + 75.0 / 90) / 2, EPS);
    /* Random for batch 2: targets 0 (90/110) and 2 (101.25/120). */
    assert_float_equal(r->folds[0].score[KACE_POL_RANDOM], (90.0 / 110 + 101.25 / 120) / 2, EPS);
    kace_protocol_result_free(&r);
    kace_folds_free(&folds);
}

static void test_kfold_fixture(void **state)
{
    (void)state;
    kace_protocol_spec spec;
    kace_protocol_spec_default(&spec);
    spec.protocol = KACE_PROTO_KFOLD;
    spec.n_folds = 2;
    spec.seed = 7;
    spec.min_candidates = 1;
    kace_folds *folds = NULL;
    assert_kace_ok(ctx, kace_protocol_folds(ctx, fx, &spec, &folds));
    assert_int_equal(folds->n, 2);
    /* Disjoint and covering: each row a test row of exactly one fold, and a
     * training row of the others. */
    int seen[10] = {0};
    for (size_t f = 0; f < folds->n; f++) {
        const kace_fold *x = &folds->items[f];
        assert_int_equal(x->n_test + x->n_train, 10);
        assert_int_equal(x->n_held_out, 0);
        for (size_t i = 0; i < x->n_test; i++) {
            seen[x->test[i]]++;
            for (size_t j = 0; j < x->n_train; j++)
                assert_int_not_equal(x->test[i], x->train[j]);
        }
    }
    for (int r = 0; r < 10; r++)
        assert_int_equal(seen[r], 1);
    /* Rule scores recomputed from each fold's rows independently. */
    kace_eval_options o = fast_options();
    kace_protocol_result *res = NULL;
    assert_kace_ok(ctx, kace_eval_folds(ctx, fx, folds, &o, &res));
    for (size_t f = 0; f < folds->n; f++) {
        const kace_fold *x = &folds->items[f];
        double total = 0;
        for (size_t t = 0; t < x->n_targets; t++) {
            double best = 0, best_mem = INFINITY, pick = 0;
            for (size_t i = 0; i < x->n_test; i++) {
                int r = x->test[i];
                if (fx_rows[r].a != x->targets[t] && fx_rows[r].b != x->targets[t])
                    continue;
                double sum = fx_rows[r].ta + fx_rows[r].tb, mem = fx_memcap[fx_rows[r].a] + fx_memcap[fx_rows[r].b];
                best = fmax(best, sum);
                if (mem < best_mem) {
                    best_mem = mem;
                    pick = sum;
                }
            }
            total += pick / best;
        }
        assert_float_equal(res->folds[f].score[KACE_POL_MEMCAP], total / (double)x->n_targets, EPS);
    }
    kace_protocol_result_free(&res);
    kace_folds_free(&folds);
    /* The same seed deals the same folds; K larger than the rows fails. */
    kace_folds *again = NULL;
    assert_kace_ok(ctx, kace_protocol_folds(ctx, fx, &spec, &folds));
    assert_kace_ok(ctx, kace_protocol_folds(ctx, fx, &spec, &again));
    assert_rows(again->items[0].test, again->items[0].n_test, folds->items[0].test, folds->items[0].n_test);
    kace_folds_free(&folds);
    kace_folds_free(&again);
    spec.n_folds = 11;
    assert_int_equal(kace_protocol_folds(ctx, fx, &spec, &folds), KACE_ERR_INVALID);
    assert_null(folds);
}

static void test_restricted_targets_and_candidates(void **state)
{
    (void)state;
    kace_protocol_spec spec;
    kace_protocol_spec_default(&spec);
    spec.protocol = KACE_PROTO_LEAVE_FAMILY_OUT;
    spec.targets = (int[]){3};
    spec.n_targets = 1;
    kace_folds *folds = NULL;
    assert_kace_ok(ctx, kace_protocol_folds(ctx, fx, &spec, &folds));
    /* Only b's fold; b_batch2 is still held out of training. */
    assert_int_equal(folds->n, 1);
    assert_rows(folds->items[0].targets, folds->items[0].n_targets, (int[]){3}, 1);
    assert_rows(folds->items[0].train, folds->items[0].n_train, (int[]){0, 1, 4}, 3);
    assert_rows(folds->items[0].test, folds->items[0].n_test, (int[]){3, 6, 8, 9}, 4);
    kace_folds_free(&folds);

    /* A candidate list: r2, r3, r8, r9 (any member order, a comment). */
    const char *text = "# candidates\nb_batch2-inf, a_batch2-train\na_batch2-train,b_batch8-inf\r\n\n"
                       "b_batch8-inf,b_batch2-inf\nb_batch8-inf,b_batch8-inf\n";
    int *rows = NULL;
    size_t n = 0;
    assert_kace_ok(ctx, kace_candidates_parse(ctx, fx, NULL, 0, text, strlen(text), "cand.csv", &rows, &n));
    assert_rows(rows, n, (int[]){2, 3, 8, 9}, 4);
    spec.targets = NULL;
    spec.protocol = KACE_PROTO_LEAVE_WORKLOAD_OUT;
    spec.candidates = rows;
    spec.n_candidates = n;
    assert_kace_ok(ctx, kace_protocol_folds(ctx, fx, &spec, &folds));
    /* a_batch8 has no candidate left: three folds. a_batch2's rows that
     * are not candidates (r0, r1) still never train its fold. */
    assert_int_equal(folds->n, 3);
    assert_rows(folds->items[0].test, folds->items[0].n_test, (int[]){2, 3}, 2);
    assert_rows(folds->items[0].train, folds->items[0].n_train, (int[]){4, 5, 6, 7, 8, 9}, 6);
    kace_eval_options o = fast_options();
    kace_protocol_result *r = NULL;
    assert_kace_ok(ctx, kace_eval_folds(ctx, fx, folds, &o, &r));
    /* Target 0 among r2 r3: MEMCAP r2 = best, Random 100/110; target 2
     * among r2 r8: MEMCAP r2 = best; target 3 among r3 r8 r9: MEMCAP r8. */
    assert_float_equal(find_target(r, 0)->score[KACE_POL_RANDOM], 100.0 / 110, EPS);
    assert_float_equal(find_target(r, 2)->score[KACE_POL_MEMCAP], 1.0, EPS);
    assert_float_equal(find_target(r, 3)->score[KACE_POL_MEMCAP], 75.0 / 90, EPS);
    assert_null(find_target(r, 1));
    kace_protocol_result_free(&r);
    kace_folds_free(&folds);
    free(rows);

    /* Bad lists name file:line:col. */
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"a_batch2-train,zz\n", "cand.csv:1:16: unknown workload 'zz'"},
        {"\na_batch2-train\n", "cand.csv:2:1: a candidate names at least 2"},
        {"a_batch2-train,,b_batch2-inf\n", "cand.csv:1:16: expected a workload name"},
        {"a_batch2-train,b_batch2-inf\nb_batch2-inf,a_batch2-train\n", "cand.csv:2:1: this candidate is listed twice"},
        {"a_batch2-train,a_batch2-train,b_batch2-inf\n", "cand.csv:1:1: no measured colocation"},
        {"# nothing\n", "cand.csv:1:1: no candidate listed"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(kace_candidates_parse(ctx, fx, NULL, 0, bad[i].text, strlen(bad[i].text), "cand.csv", &rows, &n),
                         KACE_ERR_PARSE);
        assert_null(rows);
        if (strncmp(kace_errmsg(ctx), bad[i].want, strlen(bad[i].want)) != 0)
            fail_msg("'%s' does not start with '%s'", kace_errmsg(ctx), bad[i].want);
    }
}

/* Properties of every protocol's folds on the V100 pairs: test and training
 * rows disjoint, no training row holds a held-out workload, every test row
 * holds a target, every target a held-out workload (leave-*-out); each
 * colocation a test row of exactly one k-fold fold. */
static void test_fold_properties_v100(void **state)
{
    (void)state;
    for (int p = 0; p < KACE_N_PROTOCOLS; p++) {
        kace_protocol_spec spec;
        kace_protocol_spec_default(&spec);
        spec.protocol = (kace_protocol)p;
        spec.splits = splits;
        spec.n_occur = 3;
        kace_folds *folds = NULL;
        assert_kace_ok(ctx, kace_protocol_folds(ctx, pairs, &spec, &folds));
        assert_true(folds->n >= 3);
        int *test_count = calloc(pairs->n_colocations, sizeof *test_count);
        for (size_t f = 0; f < folds->n; f++) {
            const kace_fold *x = &folds->items[f];
            char *in_test = calloc(pairs->n_colocations, 1), *held = calloc(pairs->n_workloads, 1),
                 *target = calloc(pairs->n_workloads, 1);
            assert_true(x->n_train > 0 && x->n_test > 0 && x->n_targets > 0);
            for (size_t i = 0; i < x->n_test; i++) {
                in_test[x->test[i]] = 1;
                test_count[x->test[i]]++;
            }
            for (size_t i = 0; i < x->n_held_out; i++)
                held[x->held_out[i]] = 1;
            for (size_t i = 0; i < x->n_targets; i++) {
                target[x->targets[i]] = 1;
                if (p != KACE_PROTO_KFOLD && p != KACE_PROTO_PAPER)
                    assert_true(held[x->targets[i]]);
            }
            for (size_t i = 0; i < x->n_train; i++) {
                const kace_colocation *c = &pairs->colocations[x->train[i]];
                assert_false(in_test[x->train[i]]);
                for (int j = 0; j < c->k; j++)
                    assert_false(held[c->workload[j]]);
            }
            for (size_t i = 0; i < x->n_test; i++) {
                const kace_colocation *c = &pairs->colocations[x->test[i]];
                bool has = false;
                for (int j = 0; j < c->k; j++)
                    has |= target[c->workload[j]];
                assert_true(has);
            }
            free(in_test);
            free(held);
            free(target);
        }
        if (p == KACE_PROTO_KFOLD) {
            assert_int_equal(folds->n, 5);
            for (size_t r = 0; r < pairs->n_colocations; r++)
                assert_int_equal(test_count[r], 1);
        }
        if (p == KACE_PROTO_LEAVE_BATCH_OUT) {
            assert_int_equal(folds->n, 3); /* batch 2, 8, 16 */
            assert_string_equal(folds->items[2].label, "batch 16");
        }
        if (p == KACE_PROTO_PAPER)
            assert_int_equal(folds->n, 5); /* 5 seeds at n_occur = 3 */
        free(test_count);
        kace_folds_free(&folds);
    }
}

/* The poisoning test: every colocation outside a fold's training rows gets
 * NaN throughputs; models fitted on that poisoned copy choose exactly as
 * the ones kace_eval_folds fitted, so no test row reached its fits. */
static void test_poisoned_rows_never_fitted(void **state)
{
    (void)state;
    kace_protocol_spec spec;
    kace_protocol_spec_default(&spec);
    spec.protocol = KACE_PROTO_LEAVE_BATCH_OUT;
    kace_folds *folds = NULL;
    assert_kace_ok(ctx, kace_protocol_folds(ctx, pairs, &spec, &folds));
    kace_eval_options o;
    kace_eval_options_default(&o);
    o.with_xu = false;
    o.mode = KACE_MODE_CLEAN;
    o.slowdown.n_rounds = 30;
    o.slowdown.ridge_alpha = 10;
    kace_protocol_result *res = NULL;
    assert_kace_ok(ctx, kace_eval_folds(ctx, pairs, folds, &o, &res));
    for (size_t f = 0; f < folds->n; f++) {
        const kace_fold *x = &folds->items[f];
        kace_dataset poisoned = *pairs;
        poisoned.colocations = malloc(pairs->n_colocations * sizeof *poisoned.colocations);
        memcpy(poisoned.colocations, pairs->colocations, pairs->n_colocations * sizeof *poisoned.colocations);
        char *train = calloc(pairs->n_colocations, 1);
        for (size_t i = 0; i < x->n_train; i++)
            train[x->train[i]] = 1;
        for (size_t r = 0; r < pairs->n_colocations; r++)
            if (!train[r])
                for (int j = 0; j < poisoned.colocations[r].k; j++)
                    poisoned.colocations[r].throughput[j] = NAN;
        kace_fit_spec lin = {.kind = KACE_MODEL_LINEAR, .features = &kace_features_kace};
        kace_fit_spec sd = {.kind = KACE_MODEL_SLOWDOWN, .slowdown = o.slowdown};
        sd.slowdown.seed = o.slowdown.seed ^ (uint64_t)(f + 1); /* as kace_eval_folds seeds fold f */
        kace_model *ml = NULL, *ms = NULL;
        assert_kace_ok(ctx, kace_model_fit_rows(ctx, &poisoned, x->train, x->n_train, &lin, &ml));
        assert_kace_ok(ctx, kace_model_fit_rows(ctx, &poisoned, x->train, x->n_train, &sd, &ms));
        const kace_fold_result *fr = &res->folds[f];
        assert_int_equal(fr->n_targets, x->n_targets);
        for (size_t t = 0; t < fr->n_targets; t++) {
            int cand[512];
            size_t n = 0;
            for (size_t i = 0; i < x->n_test; i++)
                if (kace_colocation_has(&pairs->colocations[x->test[i]], fr->targets[t].target))
                    cand[n++] = x->test[i];
            double s_lin, s_sd;
            assert_kace_ok(ctx, kace_eval_choice(ctx, kace_model_predictor(ml), KACE_NORM_TRAIN, pairs, cand, n, &s_lin));
            assert_kace_ok(ctx, kace_eval_choice(ctx, kace_model_predictor(ms), KACE_NORM_TRAIN, pairs, cand, n, &s_sd));
            assert_float_equal(s_lin, fr->targets[t].score[KACE_POL_KACE], 0);
            assert_float_equal(s_sd, fr->targets[t].score[KACE_POL_SLOWDOWN], 0);
        }
        printf("poison check, %s: %zu training rows, %zu test rows poisoned out, kace %.3f\n", x->label, x->n_train,
               pairs->n_colocations - x->n_train, fr->score[KACE_POL_SLOWDOWN]);
        /* A poisoned row handed to a fit is refused, so the check can fail. */
        kace_model *bad = NULL;
        int rows[2] = {x->train[0], x->test[0]};
        assert_int_not_equal(kace_model_fit_rows(ctx, &poisoned, rows, 2, &sd, &bad), KACE_OK);
        kace_model_free(&ml);
        kace_model_free(&ms);
        free(train);
        free(poisoned.colocations);
    }
    kace_protocol_result_free(&res);
    kace_folds_free(&folds);
}

/* kace_splits_make reproduces the artifact's published V100 splits row for
 * row: membership, order and paper_fit of all 45 (n_occur, seed). */
static void test_made_splits_equal_published(void **state)
{
    (void)state;
    /* NumPy: np.random.seed(0); np.random.permutation(10). */
    static const size_t numpy_seed0[10] = {2, 8, 4, 9, 1, 6, 7, 3, 0, 5};
    size_t perm[10];
    kace_numpy_permutation(10, 0, perm);
    for (int i = 0; i < 10; i++)
        assert_int_equal(perm[i], numpy_seed0[i]);

    kace_split_recipe r;
    kace_split_recipe_default(&r);
    kace_splits *made = NULL;
    assert_int_equal(kace_splits_make(ctx, pairs, &r, &made), KACE_OK);
    assert_int_equal(made->n, splits->n);
    assert_int_equal(made->n, 45 * pairs->n_colocations);
    size_t fitted = 0;
    for (size_t i = 0; i < made->n; i++) {
        const kace_split_row *a = &made->rows[i], *b = &splits->rows[i];
        if (a->n_occur != b->n_occur || a->seed != b->seed || a->train != b->train || a->paper_fit != b->paper_fit ||
            a->colocation != b->colocation)
            fail_msg("row %zu: made (n_occur %d seed %d %s fit %d row %d), published (%d %d %s %d row %d)", i,
                     a->n_occur, a->seed, a->train ? "train" : "test", a->paper_fit, a->colocation, b->n_occur, b->seed,
                     b->train ? "train" : "test", b->paper_fit, b->colocation);
        fitted += a->paper_fit;
    }
    assert_true(fitted > 0);
    kace_splits_free(&made);

    /* Another fit seed moves paper_fit only; a subset of rows is split in
     * its own order and names only its rows. */
    r.fit_seed = 31;
    assert_int_equal(kace_splits_make(ctx, pairs, &r, &made), KACE_OK);
    size_t moved = 0;
    for (size_t i = 0; i < made->n; i++) {
        assert_int_equal(made->rows[i].colocation, splits->rows[i].colocation);
        assert_int_equal(made->rows[i].train, splits->rows[i].train);
        moved += made->rows[i].paper_fit != splits->rows[i].paper_fit;
    }
    assert_true(moved > 0);
    kace_splits_free(&made);
    int rows[40];
    for (int i = 0; i < 40; i++)
        rows[i] = 100 + i;
    static const int one_n[] = {3};
    static const uint32_t one_seed[] = {7};
    kace_split_recipe_default(&r);
    r.rows = rows, r.n_rows = 40, r.n_occur = one_n, r.n_n_occur = 1, r.seeds = one_seed, r.n_seeds = 1;
    assert_int_equal(kace_splits_make(ctx, pairs, &r, &made), KACE_OK);
    assert_int_equal(made->n, 40);
    int *count = calloc(pairs->n_workloads, sizeof *count);
    assert_non_null(count);
    for (size_t i = 0; i < made->n; i++) {
        const kace_colocation *c = &pairs->colocations[made->rows[i].colocation];
        assert_true(made->rows[i].colocation >= 100 && made->rows[i].colocation < 140);
        if (made->rows[i].train) {
            assert_true(i == 0 || made->rows[i - 1].train); /* training rows first */
            assert_int_not_equal(c->workload[0], c->workload[1]);
            assert_true(count[c->workload[0]] < 3 || count[c->workload[1]] < 3);
            count[c->workload[0]]++, count[c->workload[1]]++;
        } else {
            assert_false(made->rows[i].paper_fit);
        }
    }
    free(count);
    kace_splits_free(&made);
    int bad_n[] = {0};
    r.n_occur = bad_n;
    assert_int_equal(kace_splits_make(ctx, pairs, &r, &made), KACE_ERR_INVALID);
    assert_null(made);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_leave_family_out_fixture),
        cmocka_unit_test(test_leave_workload_and_batch_out_fixture),
        cmocka_unit_test(test_kfold_fixture),
        cmocka_unit_test(test_restricted_targets_and_candidates),
        cmocka_unit_test(test_fold_properties_v100),
        cmocka_unit_test(test_poisoned_rows_never_fitted),
        cmocka_unit_test(test_made_splits_equal_published),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
