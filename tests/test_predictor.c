/* A fake predictor, made only from a kace_predictor_ops table, drives the
 * consumers: evaluation's choice, partner ranking, group search, placement
 * and the scheduler's rate source. Every expected number follows from the
 * fake's formula, so a consumer that asked the model's kind, or computed
 * its own predictions, would fail here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "kace/eval.h"
#include "kace/group.h"
#include "kace/place.h"
#include "kace/policy.h"
#include "kace/predictor.h"
#include "kace/sched.h"

enum { N_WORKLOADS = 5 };

/* cmocka's float check, spelled as the other tests do not need it. */
#define assert_double_equal(a, b, eps) assert_true(fabs((double)(a) - (double)(b)) <= (eps))

/* The fake: member i keeps 1 / (1 + the partners' summed load) of its
 * exclusive throughput; workload w has load w / 10. */
typedef struct fake {
    double load[N_WORKLOADS];
    int calls, freed;
} fake;

static kace_status fake_predict(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds, const int *group,
                                int k, double *sum, double *confidence, double *member)
{
    (void)ctx;
    fake *f = p->self;
    f->calls++;
    *sum = 0;
    for (int i = 0; i < k; i++) {
        double others = 0;
        for (int j = 0; j < k; j++)
            if (j != i)
                others += f->load[group[j]];
        double m = ds->workloads[group[i]].metric[KACE_M_EXCLUSIVE] / (1 + others);
        if (member && (p->ops->caps & KACE_PRED_MEMBERS))
            member[i] = m;
        *sum += m;
    }
    if (confidence && (p->ops->caps & KACE_PRED_CONFIDENCE))
        *confidence = 0.5;
    return KACE_OK;
}

static void fake_free(void *self)
{
    ((fake *)self)->freed++;
}

static const kace_predictor_ops fake_ops = {
    .name = "fake",
    .policy = "fake",
    .caps = KACE_PRED_MEMBERS | KACE_PRED_CONFIDENCE,
    .max_k = KACE_MAX_K,
    .predict = fake_predict,
    .free = fake_free,
};

/* The same, giving sums only. */
static const kace_predictor_ops fake_sum_ops = {
    .name = "fake-sum",
    .max_k = KACE_MAX_K,
    .predict = fake_predict,
};

static kace_ctx *ctx;
static kace_dataset *ds;
static fake state;
static kace_predictor *pred;

static int setup(void **unused)
{
    (void)unused;
    ctx = kace_ctx_new();
    if (!ctx || kace_dataset_new(ctx, &ds))
        return -1;
    int n_metric;
    const kace_metric *needed = kace_profile_metrics(&n_metric);
    for (int w = 0; w < N_WORKLOADS; w++) {
        char name[16];
        int at;
        snprintf(name, sizeof name, "w%d", w);
        if (kace_dataset_intern(ctx, ds, name, &at) || at != w)
            return -1;
        for (int i = 0; i < n_metric; i++)
            ds->workloads[w].metric[needed[i]] = 1;
        for (int i = 0; i < kace_features_kace.n; i++)
            ds->workloads[w].metric[kace_features_kace.metric[i]] = 1;
        ds->workloads[w].metric[KACE_M_EXCLUSIVE] = 100;
        ds->workloads[w].metric[KACE_M_MEMCAP] = 1;
        state.load[w] = w / 10.0;
    }
    /* Measured pairs of w0: the fake ranks (0,1) first, but (0,2) is best. */
    const double measured[][2] = {{70, 80}, {85, 95}, {60, 60}};
    const int partner[] = {1, 2, 4};
    for (int i = 0; i < 3; i++) {
        kace_colocation c = {.k = 2, .workload = {0, partner[i]}, .mps_pct = {100, 100},
                             .throughput = {measured[i][0], measured[i][1]}, .status = KACE_RUN_OK};
        if (kace_dataset_add_colocation(ctx, ds, &c))
            return -1;
    }
    return kace_predictor_new(ctx, &fake_ops, &state, &pred) ? -1 : 0;
}

static int teardown(void **unused)
{
    (void)unused;
    kace_predictor_free(&pred);
    kace_dataset_free(&ds);
    kace_ctx_free(&ctx);
    return state.freed == 1 ? 0 : -1;
}

static double fraction(int w, double others_load)
{
    (void)w;
    return 1 / (1 + others_load);
}

static void test_interface(void **unused)
{
    (void)unused;
    assert_string_equal(kace_predictor_name(pred), "fake");
    assert_true(kace_predictor_can(pred, KACE_PRED_MEMBERS | KACE_PRED_CONFIDENCE));
    assert_false(kace_predictor_can(pred, KACE_PRED_BOUNDS));
    int g[2] = {1, 3};
    double sum, conf, member[2];
    assert_kace_ok(ctx, kace_predict_group(ctx, pred, ds, g, 2, &sum, &conf, member));
    assert_double_equal(member[0], 100 / 1.3, 1e-12);
    assert_double_equal(member[1], 100 / 1.1, 1e-12);
    assert_double_equal(conf, 0.5, 0);
    /* Without the members bit the consumer sees NaN members and confidence 1. */
    kace_predictor sums = {&fake_sum_ops, &state};
    assert_kace_ok(ctx, kace_predict_group(ctx, &sums, ds, g, 2, &sum, &conf, member));
    assert_true(isnan(member[0]) && conf == 1);
    /* The model kinds are found by name in the one table. */
    assert_int_equal(kace_model_kind_from_name("slowdown"), KACE_MODEL_SLOWDOWN);
    assert_string_equal(kace_model_kind_name(KACE_MODEL_FOREST), "forest");
    assert_int_equal(kace_model_kind_from_name("fake"), -1);
}

static void test_eval_choice(void **unused)
{
    (void)unused;
    int rows[3] = {0, 1, 2};
    double score;
    assert_kace_ok(ctx, kace_eval_choice(ctx, pred, KACE_NORM_TRAIN, ds, rows, 3, &score));
    /* The fake picks (0,1), measured 150, against the best measured 180. */
    assert_double_equal(score, 150.0 / 180.0, 1e-12);
    kace_partner ranked[N_WORKLOADS];
    size_t n;
    assert_kace_ok(ctx, kace_rank_partners(ctx, ds, pred, KACE_NORM_TRAIN, 0, NULL, 0, ranked, &n));
    assert_int_equal(n, N_WORKLOADS); /* a second job of the target's kind included */
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(ranked[i].workload, (int)i); /* lighter partners first */
        assert_double_equal(ranked[i].predicted, 100 + 100 / (1 + i / 10.0), 1e-9);
        assert_double_equal(ranked[i].confidence, 0.5, 0);
    }
    assert_double_equal(ranked[2].measured, 180, 0);
}

static void test_group_search(void **unused)
{
    (void)unused;
    kace_group_query q = {.target = 0, .k = 3};
    kace_group_result best;
    assert_kace_ok(ctx, kace_group_enumerate(ctx, ds, pred, &q, &best));
    assert_true(best.found);
    assert_int_equal(best.workload[1], 1);
    assert_int_equal(best.workload[2], 2);
    assert_double_equal(best.predicted, 100 / 1.3 + 100 / 1.2 + 100 / 1.1, 1e-9);
    /* Branch and bound needs bounds, which the fake does not offer. */
    assert_int_equal(kace_group_best(ctx, ds, pred, &q, &best), KACE_ERR_UNSUPPORTED);
}

static void test_placement(void **unused)
{
    (void)unused;
    kace_place_gpu gpus[2] = {{.node = "a", .share_free = 100, .usable = true, .n_residents = 1, .resident = {4}},
                              {.node = "b", .share_free = 100, .usable = true, .n_residents = 1, .resident = {1}}};
    kace_place_options opt;
    kace_place_options_default(&opt);
    kace_place_prepare(ctx, pred, ds, gpus, 2);
    assert_double_equal(gpus[0].base_score, 1, 0);
    kace_placement out;
    assert_kace_ok(ctx, kace_place_job(ctx, pred, ds, gpus, 2, 2, &opt, &out));
    double on_a = fraction(4, 0.2) + fraction(2, 0.4) - 1, on_b = fraction(1, 0.2) + fraction(2, 0.1) - 1;
    assert_true(on_b > on_a);
    assert_int_equal(out.gpu, 1);
    assert_double_equal(out.gain, on_b, 1e-12);
    assert_double_equal(out.confidence, 0.5, 0);
    /* The scorer itself, residents predicted. */
    int residents[2] = {3, 4};
    kace_gain g;
    assert_kace_ok(ctx, kace_place_gain(ctx, pred, ds, residents, 2, 1, NULL, &g));
    assert_double_equal(g.before, fraction(3, 0.4) + fraction(4, 0.3), 1e-12);
    assert_double_equal(g.after, fraction(3, 0.5) + fraction(4, 0.4) + fraction(1, 0.7), 1e-12);
    assert_double_equal(g.gain, g.after - g.before, 0);
    assert_double_equal(g.job_fraction, fraction(1, 0.7), 1e-12);
    /* An idle GPU: the job alone keeps everything, without asking the model. */
    int calls = state.calls;
    assert_kace_ok(ctx, kace_place_gain(ctx, pred, ds, NULL, 0, 1, NULL, &g));
    assert_true(g.before == 0 && g.after == 1 && g.gain == 1 && g.confidence == 1);
    assert_int_equal(state.calls, calls);
}

static void test_scheduler_rates(void **unused)
{
    (void)unused;
    kace_model_rates holder;
    kace_rate_source src;
    assert_kace_ok(ctx, kace_rate_source_model(ctx, &holder, pred, ds, &src));
    int g[2] = {0, 3};
    double frac[2], conf;
    assert_kace_ok(ctx, src.rates(src.self, ctx, g, 2, frac, &conf));
    assert_double_equal(frac[0], fraction(0, 0.3), 1e-12);
    assert_double_equal(frac[1], 1, 1e-12);
    kace_predictor sums = {&fake_sum_ops, &state};
    assert_int_equal(kace_rate_source_model(ctx, &holder, &sums, ds, &src), KACE_ERR_MODEL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_interface),     cmocka_unit_test(test_eval_choice),
        cmocka_unit_test(test_group_search),  cmocka_unit_test(test_placement),
        cmocka_unit_test(test_scheduler_rates),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
