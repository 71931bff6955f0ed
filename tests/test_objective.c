/* Objectives for partners, groups and evaluation: the raw throughput sum,
 * the normalized sum (each member's share of its solo throughput) and
 * max-min fairness of the shares, on a fixture where each objective picks
 * a different partner and a different group (answers computed by hand in
 * the comments). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kace/group.h"
#include "kace/place.h"
#include "kace/policy.h"
#include "kace/sched.h"
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

/* ---- rates a thousandfold apart: partners, groups, placements, scheduler ----
 *
 * Workloads J (exclusive 10 samples/s), F (10000), A (1000), B (100): F runs
 * 1000x faster than J. Member throughputs (and shares of exclusive), J first:
 *   pair   raw              normalized               fair
 *   J+F    3 + 9999 = 10002 0.3 + 0.9999 = 1.2999    0.3
 *   J+A    9 +  500 =   509 0.9 + 0.5    = 1.4       0.5
 *   J+B    6 +   60 =    66 0.6 + 0.6    = 1.2       0.6
 *  partner of J: raw F, normalized A, fair B.
 *   triple  raw                      normalized               fair
 *   J+F+A   2 + 9990 + 300 = 10292   0.2 + 0.999 + 0.3 = 1.499 0.2
 *   J+F+B   1 + 9000 +  70 =  9071   0.1 + 0.9   + 0.7 = 1.7   0.1
 *   J+A+B   4 +  400 +  45 =   449   0.4 + 0.4   + 0.45 = 1.25 0.4
 *  group of three with J: raw F+A, normalized F+B, fair A+B.
 * Placing J on one of three GPUs, each running one of F, A, B alone (each
 * at its exclusive rate, share 1):
 *   gain     raw (after - before)       normalized       fair (min after - 1)
 *   on F     10002 - 10000 =    2       1.2999 - 1 = 0.2999  0.3 - 1 = -0.7
 *   on A       509 -  1000 = -491       1.4 - 1    = 0.4     0.5 - 1 = -0.5
 *   on B        66 -   100 =  -34       1.2 - 1    = 0.2     0.6 - 1 = -0.4
 *  placement: raw F's GPU (J's 3 samples/s cost F only 1), normalized A's,
 *  fair B's. */
enum { J, F, A2, B2, N_K };
static const double k_exclusive[N_K] = {10, 10000, 1000, 100};
static const fixed k_table[] = {
    {2, {J, F}, {3, 9999}},         {2, {J, A2}, {9, 500}},          {2, {J, B2}, {6, 60}},
    {3, {J, F, A2}, {2, 9990, 300}}, {3, {J, F, B2}, {1, 9000, 70}}, {3, {J, A2, B2}, {4, 400, 45}},
};
enum { N_K_FIXED = sizeof k_table / sizeof *k_table };

static const fixed *k_lookup(const int *group, int k, int *order)
{
    for (int r = 0; r < N_K_FIXED; r++) {
        if (k_table[r].k != k)
            continue;
        bool all = true;
        for (int i = 0; i < k && all; i++) {
            order[i] = -1;
            for (int j = 0; j < k; j++)
                if (k_table[r].member[j] == group[i])
                    order[i] = j;
            all = order[i] >= 0;
        }
        if (all)
            return &k_table[r];
    }
    return NULL;
}

static kace_status k_predict(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds, const int *group, int k,
                             double *sum, double *confidence, double *member)
{
    (void)p;
    int order[3];
    if (confidence)
        *confidence = 1;
    if (k == 1) { /* alone: its exclusive rate */
        *sum = ds->workloads[group[0]].metric[KACE_M_EXCLUSIVE];
        if (member)
            member[0] = *sum;
        return KACE_OK;
    }
    const fixed *f = k_lookup(group, k, order);
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

static const kace_predictor_ops k_ops = {
    .name = "thousandfold", .caps = KACE_PRED_MEMBERS, .max_k = 3, .predict = k_predict};

static kace_dataset *k_fixture(kace_ctx *ctx)
{
    kace_dataset *ds = NULL;
    assert_kace_ok(ctx, kace_dataset_new(ctx, &ds));
    static const char *const names[N_K] = {"j_batch1-inf", "f_batch1-inf", "a_batch1-inf", "b_batch1-inf"};
    for (int w = 0; w < N_K; w++) {
        int at;
        assert_kace_ok(ctx, kace_dataset_intern(ctx, ds, names[w], &at));
        assert_int_equal(at, w);
        for (int m = 0; m < KACE_N_METRICS; m++)
            ds->workloads[w].metric[m] = 1; /* a complete profile; memcap 1 GB each */
        ds->workloads[w].metric[KACE_M_EXCLUSIVE] = k_exclusive[w];
    }
    for (int r = 0; r < N_K_FIXED; r++) {
        kace_colocation c = {.k = k_table[r].k, .status = KACE_RUN_OK};
        for (int i = 0; i < c.k; i++) {
            c.workload[i] = k_table[r].member[i];
            c.mps_pct[i] = 100;
            c.throughput[i] = k_table[r].thr[i];
        }
        assert_kace_ok(ctx, kace_dataset_add_colocation(ctx, ds, &c));
    }
    return ds;
}

static void test_thousandfold_partners_and_groups(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_dataset *ds = k_fixture(ctx);
    kace_predictor p = {&k_ops, NULL};
    static const int among[] = {F, A2, B2};
    static const int partner[KACE_N_OBJECTIVES] = {F, A2, B2};
    static const double partner_value[KACE_N_OBJECTIVES] = {10002, 1.4, 0.6};
    static const int group[KACE_N_OBJECTIVES][2] = {{F, A2}, {F, B2}, {A2, B2}};
    static const double group_value[KACE_N_OBJECTIVES] = {10292, 1.7, 0.4};
    for (int o = 0; o < KACE_N_OBJECTIVES; o++) {
        kace_partner ranked[3];
        size_t n = 0;
        assert_kace_ok(ctx, kace_rank_partners_by(ctx, ds, &p, KACE_NORM_TRAIN, (kace_objective)o, J, among, 3, ranked,
                                                  &n));
        assert_int_equal(ranked[0].workload, partner[o]);
        assert_near(ranked[0].predicted, partner_value[o], 1e-9);
        kace_group_query q = {.target = J, .k = 3, .pool = among, .n_pool = 3, .objective = (kace_objective)o};
        kace_group_result r;
        assert_kace_ok(ctx, kace_group_enumerate(ctx, ds, &p, &q, &r));
        assert_true(r.found);
        assert_int_equal(r.workload[1], group[o][0]);
        assert_int_equal(r.workload[2], group[o][1]);
        assert_near(r.predicted, group_value[o], 1e-9);
    }
    kace_dataset_free(&ds);
    kace_ctx_free(&ctx);
}

static kace_place_gpu k_gpu(const char *node, int resident)
{
    kace_place_gpu g;
    memset(&g, 0, sizeof g);
    snprintf(g.node, sizeof g.node, "%s", node);
    g.share_free = 50;
    g.usable = true;
    g.n_residents = resident >= 0;
    g.resident[0] = resident;
    return g;
}

static void test_thousandfold_placement(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_dataset *ds = k_fixture(ctx);
    kace_predictor p = {&k_ops, NULL};
    kace_place_gpu gpus[3] = {k_gpu("on-f", F), k_gpu("on-a", A2), k_gpu("on-b", B2)};
    kace_place_prepare(ctx, &p, ds, gpus, 3);
    static const int want[KACE_N_OBJECTIVES] = {0, 1, 2};
    static const double gain[KACE_N_OBJECTIVES] = {2, 0.4, -0.4};
    static const double after[KACE_N_OBJECTIVES] = {10002, 1.4, 0.6};
    kace_place_options opt;
    kace_place_options_default(&opt);
    assert_int_equal(opt.objective, KACE_OBJ_NORMALIZED); /* the placer's own default */
    for (int o = 0; o < KACE_N_OBJECTIVES; o++) {
        opt.objective = (kace_objective)o;
        kace_placement pl;
        assert_kace_ok(ctx, kace_place_job(ctx, &p, ds, gpus, 3, J, &opt, &pl));
        assert_int_equal(pl.gpu, want[o]);
        assert_near(pl.gain, gain[o], 1e-9);
        assert_near(pl.score, after[o], 1e-9);
        assert_int_equal(pl.n_considered, 3);
    }
    /* The gains on each GPU, as the table says. */
    static const double all[KACE_N_OBJECTIVES][3] = {{2, -491, -34}, {0.2999, 0.4, 0.2}, {-0.7, -0.5, -0.4}};
    for (int o = 0; o < KACE_N_OBJECTIVES; o++)
        for (int g = 0; g < 3; g++) {
            kace_gain x;
            assert_kace_ok(ctx, kace_place_gain_by(ctx, &p, ds, gpus[g].resident, 1, J, (kace_objective)o, &x));
            assert_near(x.gain, all[o][g], 1e-9);
        }
    /* An idle GPU: J alone keeps everything. Raw gains its 10 samples/s,
     * normalized 1, fair 0 (nobody loses): each prefers it here. */
    kace_gain idle;
    assert_kace_ok(ctx, kace_place_gain_by(ctx, &p, ds, NULL, 0, J, KACE_OBJ_RAW, &idle));
    assert_near(idle.gain, 10, 1e-12);
    assert_kace_ok(ctx, kace_place_gain_by(ctx, &p, ds, NULL, 0, J, KACE_OBJ_FAIR, &idle));
    assert_near(idle.gain, 0, 1e-12);
    /* The Slurm placer's configuration names the objective. */
    kace_place_config cfg;
    kace_place_config_default(&cfg);
    static const char text[] = "store = /s.db\nobjective = fair\n";
    assert_kace_ok(ctx, kace_place_config_parse(ctx, text, sizeof text - 1, "kace.conf", &cfg));
    assert_int_equal(cfg.options.objective, KACE_OBJ_FAIR);
    static const char bad[] = "objective = weighted\n";
    assert_int_equal(kace_place_config_parse(ctx, bad, sizeof bad - 1, "kace.conf", &cfg), KACE_ERR_PARSE);
    assert_non_null(strstr(kace_errmsg(ctx), "kace.conf:1:13: objective must be raw, normalized or fair"));
    kace_dataset_free(&ds);
    kace_ctx_free(&ctx);
}

/* The scheduler's rates: each member's share, from the same table. */
static kace_status k_rates(void *self, kace_ctx *ctx, const int *group, int k, double *fraction, double *confidence)
{
    const kace_dataset *ds = self;
    double sum, member[3];
    kace_status st = k_predict(ctx, NULL, ds, group, k, &sum, confidence, member);
    for (int i = 0; !st && i < k; i++)
        fraction[i] = member[i] / ds->workloads[group[i]].metric[KACE_M_EXCLUSIVE];
    return st;
}

static void on_start(void *user, int job, const int *gpus, int n)
{
    int *where = user;
    assert_int_equal(n, 1);
    where[job] = gpus[0];
}

static void test_thousandfold_scheduler(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_dataset *ds = k_fixture(ctx);
    kace_group_set *runnable = NULL;
    assert_kace_ok(ctx, kace_group_set_new(ctx, &runnable));
    for (int r = 0; r < 3; r++) /* J with each; F, A, B never together */
        assert_kace_ok(ctx, kace_group_set_add(ctx, runnable, k_table[r].member, 2));
    kace_rate_source rates = {k_rates, ds};
    static const int pool[] = {J, F, A2, B2};
    static const int three[] = {3};
    /* J arrives last, after F, A and B (jobs 0, 1, 2) took the three GPUs:
     * the job whose GPU it joins is the placement table's choice. */
    static const int want[KACE_N_OBJECTIVES] = {0, 1, 2};
    for (int o = 0; o < KACE_N_OBJECTIVES; o++) {
        kace_sched_config cfg;
        kace_sched_config_default(&cfg, KACE_SCHED_KACE);
        cfg.max_group = 2;
        cfg.min_gain = 0; /* every pair passes the gate; the objective ranks them */
        cfg.min_confidence = 0;
        cfg.objective = (kace_objective)o;
        int where[4] = {-1, -1, -1, -1};
        kace_sched *s = NULL;
        assert_kace_ok(ctx, kace_sched_new(ctx, &cfg, ds, pool, 4, runnable, &rates, three, 1, on_start, where, &s));
        static const int order[] = {F, A2, B2, J};
        for (int i = 0; i < 4; i++) {
            kace_sched_job job = {.id = i, .workload = order[i], .gpu_milli = 1000, .num_gpu = 1};
            assert_kace_ok(ctx, kace_sched_submit(ctx, s, &job));
        }
        /* F, A and B each took an idle GPU (F, A, B never share). */
        assert_true(where[0] >= 0 && where[1] >= 0 && where[2] >= 0);
        assert_true(where[0] != where[1] && where[0] != where[2] && where[1] != where[2]);
        assert_int_equal(where[3], where[want[o]]);
        kace_sched_free(&s);
    }
    /* The raw objective needs every workload's exclusive throughput. */
    ds->workloads[B2].metric[KACE_M_EXCLUSIVE] = NAN;
    kace_sched_config cfg;
    kace_sched_config_default(&cfg, KACE_SCHED_KACE);
    cfg.objective = KACE_OBJ_RAW;
    kace_sched *s = NULL;
    assert_int_equal(kace_sched_new(ctx, &cfg, ds, pool, 4, runnable, &rates, three, 1, on_start, NULL, &s),
                     KACE_ERR_INVALID);
    assert_non_null(strstr(kace_errmsg(ctx), "b_batch1-inf"));
    kace_group_set_free(&runnable);
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
        cmocka_unit_test(test_thousandfold_partners_and_groups),
        cmocka_unit_test(test_thousandfold_placement),
        cmocka_unit_test(test_thousandfold_scheduler),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
