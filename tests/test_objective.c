/* Objectives for partners, groups and evaluation: the raw throughput sum,
 * the normalized sum (each member's share of its solo throughput) and
 * max-min fairness of the shares, on a fixture where each objective picks
 * a different partner and a different group (answers computed by hand in
 * the comments). */
#include <math.h>
#include <string.h>

#include "kace/group.h"
#include "kace/policy.h"
#include "testutil.h"

/* |a - b| <= eps, both printed when not. */
#define assert_near(a, b, eps)                                                                  \
    do {                                                                                       \
        double a__ = (a), b__ = (b);                                                           \
        if (!(fabs(a__ - b__) <= (eps)))                                                       \
            fail_msg("%s = %.17g, expected %.17g", #a, a__, b__);                              \
    } while (0)

/* Workloads: T (exclusive 100), A (1000), B (10), C (50). */
enum { T, A, B, C, N_WORKLOADS };
static const double exclusive[N_WORKLOADS] = {100, 1000, 10, 50};

/* Member throughputs the fake model predicts (and the fixture measured),
 * target first:
 *   pairs   raw     normalized          fair
 *   T+A     1040    0.50 + 0.99 = 1.49  0.50
 *   T+B      102    0.95 + 0.70 = 1.65  0.70
 *   T+C      112.5  0.75 + 0.75 = 1.50  0.75
 *  raw picks A, normalized B, fair C.
 *   triples raw     normalized                 fair
 *   T+A+B   1036    0.40 + 0.99 + 0.60 = 1.99  0.40
 *   T+A+C    995    0.60 + 0.90 + 0.70 = 2.20  0.60
 *   T+B+C    109.5  0.70 + 0.65 + 0.66 = 2.01  0.65
 *  raw picks A+B, normalized A+C, fair B+C. */
typedef struct fixed {
    int k, member[3];
    double thr[3];
} fixed;
static const fixed table[] = {
    {2, {T, A}, {50, 990}},         {2, {T, B}, {95, 7}},          {2, {T, C}, {75, 37.5}},
    {3, {T, A, B}, {40, 990, 6}},   {3, {T, A, C}, {60, 900, 35}}, {3, {T, B, C}, {70, 6.5, 33}},
};
enum { N_FIXED = sizeof table / sizeof *table };

/* The row of the table holding the same members (any order). */
static const fixed *lookup(const int *group, int k, int *order)
{
    for (int r = 0; r < N_FIXED; r++) {
        if (table[r].k != k)
            continue;
        bool all = true;
        for (int i = 0; i < k && all; i++) {
            order[i] = -1;
            for (int j = 0; j < k; j++)
                if (table[r].member[j] == group[i])
                    order[i] = j;
            all = order[i] >= 0;
        }
        if (all)
            return &table[r];
    }
    return NULL;
}

static kace_status fake_predict(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds, const int *group, int k,
                                double *sum, double *confidence, double *member)
{
    (void)p;
    (void)ds;
    (void)confidence;
    int order[3];
    const fixed *f = lookup(group, k, order);
    if (!f)
        return kace_fail(ctx, KACE_ERR_INVALID, "no fixture for this group");
    *sum = 0;
    for (int i = 0; i < k; i++) {
        *sum += f->thr[order[i]];
        if (member)
            member[i] = f->thr[order[i]];
    }
    return KACE_OK;
}

static const kace_predictor_ops members_ops = {
    .name = "fixture", .caps = KACE_PRED_MEMBERS, .max_k = 3, .predict = fake_predict};
static const kace_predictor_ops sums_ops = {.name = "sums", .caps = 0, .max_k = 3, .predict = fake_predict};

static kace_dataset *fixture(kace_ctx *ctx)
{
    kace_dataset *ds = NULL;
    assert_kace_ok(ctx, kace_dataset_new(ctx, &ds));
    static const char *const names[N_WORKLOADS] = {"t_batch1-inf", "a_batch1-inf", "b_batch1-inf", "c_batch1-inf"};
    for (int w = 0; w < N_WORKLOADS; w++) {
        int at;
        assert_kace_ok(ctx, kace_dataset_intern(ctx, ds, names[w], &at));
        assert_int_equal(at, w);
        for (int m = 0; m < KACE_N_METRICS; m++)
            ds->workloads[w].metric[m] = 1; /* a complete profile; memcap 1 GB each */
        ds->workloads[w].metric[KACE_M_EXCLUSIVE] = exclusive[w];
    }
    for (int r = 0; r < N_FIXED; r++) {
        kace_colocation c = {.k = table[r].k, .status = KACE_RUN_OK};
        for (int i = 0; i < c.k; i++) {
            c.workload[i] = table[r].member[i];
            c.mps_pct[i] = 100;
            c.throughput[i] = table[r].thr[i];
        }
        assert_kace_ok(ctx, kace_dataset_add_colocation(ctx, ds, &c));
    }
    return ds;
}

static void test_values_by_hand(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_dataset *ds = fixture(ctx);
    const kace_colocation *ta = &ds->colocations[0];
    assert_near(kace_objective_measured(KACE_OBJ_RAW, ds, ta), 1040, 1e-9);
    assert_near(kace_objective_measured(KACE_OBJ_NORMALIZED, ds, ta), 1.49, 1e-12);
    assert_near(kace_objective_measured(KACE_OBJ_FAIR, ds, ta), 0.5, 1e-12);
    for (int o = 0; o < KACE_N_OBJECTIVES; o++)
        assert_int_equal(kace_objective_from_name(kace_objective_name((kace_objective)o)), o);
    assert_int_equal(kace_objective_from_name("weighted"), -1);
    /* No exclusive throughput: no share. */
    ds->workloads[A].metric[KACE_M_EXCLUSIVE] = NAN;
    assert_true(isnan(kace_objective_measured(KACE_OBJ_NORMALIZED, ds, ta)));
    assert_near(kace_objective_measured(KACE_OBJ_RAW, ds, ta), 1040, 1e-9);
    kace_dataset_free(&ds);
    kace_ctx_free(&ctx);
}

static void test_partners(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_dataset *ds = fixture(ctx);
    kace_predictor p = {&members_ops, NULL};
    static const int among[] = {A, B, C};
    static const int want[KACE_N_OBJECTIVES] = {A, B, C};
    static const double best[KACE_N_OBJECTIVES] = {1040, 1.65, 0.75};
    for (int o = 0; o < KACE_N_OBJECTIVES; o++) {
        kace_partner ranked[3];
        size_t n = 0;
        assert_kace_ok(ctx, kace_rank_partners_by(ctx, ds, &p, KACE_NORM_TRAIN, (kace_objective)o, T, among, 3, ranked,
                                                  &n));
        assert_int_equal(n, 3);
        assert_int_equal(ranked[0].workload, want[o]);
        assert_near(ranked[0].predicted, best[o], 1e-9);
        assert_near(ranked[0].measured, best[o], 1e-9); /* the fixture measured the same */
        assert_true(ranked[0].predicted >= ranked[1].predicted && ranked[1].predicted >= ranked[2].predicted);
    }
    /* The raw ranking is kace_rank_partners's. */
    kace_partner raw[3];
    size_t n = 0;
    assert_kace_ok(ctx, kace_rank_partners(ctx, ds, &p, KACE_NORM_TRAIN, T, among, 3, raw, &n));
    assert_int_equal(raw[0].workload, A);
    /* A model of sums only cannot rank by shares: said, not guessed. */
    kace_predictor sums = {&sums_ops, NULL};
    kace_partner ranked[3];
    assert_int_equal(kace_rank_partners_by(ctx, ds, &sums, KACE_NORM_TRAIN, KACE_OBJ_FAIR, T, among, 3, ranked, &n),
                     KACE_ERR_UNSUPPORTED);
    assert_non_null(strstr(kace_errmsg(ctx), "each member"));
    kace_dataset_free(&ds);
    kace_ctx_free(&ctx);
}

static void test_groups(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_dataset *ds = fixture(ctx);
    kace_predictor p = {&members_ops, NULL};
    static const int pool[] = {A, B, C};
    static const int want[KACE_N_OBJECTIVES][2] = {{A, B}, {A, C}, {B, C}};
    static const double best[KACE_N_OBJECTIVES] = {1036, 2.2, 0.65};
    for (int o = 0; o < KACE_N_OBJECTIVES; o++) {
        kace_group_query q = {.target = T, .k = 3, .pool = pool, .n_pool = 3, .objective = (kace_objective)o};
        kace_group_result r;
        assert_kace_ok(ctx, kace_group_enumerate(ctx, ds, &p, &q, &r));
        assert_true(r.found);
        assert_int_equal(r.workload[0], T);
        assert_int_equal(r.workload[1], want[o][0]);
        assert_int_equal(r.workload[2], want[o][1]);
        assert_near(r.predicted, best[o], 1e-9);
        assert_int_equal(r.groups_scored, 3);
    }
    /* A group of 2 under each objective: the partners above. */
    static const int pair_want[KACE_N_OBJECTIVES] = {A, B, C};
    for (int o = 0; o < KACE_N_OBJECTIVES; o++) {
        kace_group_query q = {.target = T, .k = 2, .pool = pool, .n_pool = 3, .objective = (kace_objective)o};
        kace_group_result r;
        assert_kace_ok(ctx, kace_group_enumerate(ctx, ds, &p, &q, &r));
        assert_int_equal(r.workload[1], pair_want[o]);
    }
    /* Memory still rules: with 2 GB, no group of three fits. */
    kace_group_query tight = {.target = T, .k = 3, .pool = pool, .n_pool = 3, .gpu_memory_gb = 2,
                              .objective = KACE_OBJ_FAIR};
    kace_group_result r;
    assert_kace_ok(ctx, kace_group_enumerate(ctx, ds, &p, &tight, &r));
    assert_false(r.found);
    kace_dataset_free(&ds);
    kace_ctx_free(&ctx);
}

/* What kace eval scores: the pick of a model under each objective and the
 * best measured value (the Oracle). */
static void test_choice_scored_under_each(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_dataset *ds = fixture(ctx);
    kace_predictor p = {&members_ops, NULL}, sums = {&sums_ops, NULL};
    static const int pairs[] = {0, 1, 2}; /* T+A, T+B, T+C */
    static const size_t want[KACE_N_OBJECTIVES] = {0, 1, 2};
    for (int o = 0; o < KACE_N_OBJECTIVES; o++) {
        size_t pick = 9;
        assert_kace_ok(ctx, kace_policy_pick_objective(ctx, &p, KACE_NORM_TRAIN, (kace_objective)o, ds, pairs, 3,
                                                       &pick));
        assert_int_equal(pick, want[o]);
        /* A model of sums picks by the sum under every objective: T+A. */
        assert_kace_ok(ctx, kace_policy_pick_objective(ctx, &sums, KACE_NORM_TRAIN, (kace_objective)o, ds, pairs, 3,
                                                       &pick));
        assert_int_equal(pick, 0);
    }
    /* Under fairness the sum's pick scores 0.50 / 0.75 of the Oracle. */
    double oracle = 0;
    for (int i = 0; i < 3; i++)
        oracle = fmax(oracle, kace_objective_measured(KACE_OBJ_FAIR, ds, &ds->colocations[pairs[i]]));
    assert_near(kace_objective_measured(KACE_OBJ_FAIR, ds, &ds->colocations[0]) / oracle, 0.5 / 0.75, 1e-12);
    kace_dataset_free(&ds);
    kace_ctx_free(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values_by_hand),
        cmocka_unit_test(test_partners),
        cmocka_unit_test(test_groups),
        cmocka_unit_test(test_choice_scored_under_each),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
