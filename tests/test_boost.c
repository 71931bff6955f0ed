/* kace's booster (lib/model/boost.c) against libxgboost's exact greedy method on
 * the same data and settings: the same trees, so the same predictions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xgboost/c_api.h>

#include "model/boost.h"
#include "testutil.h"

#define N_ROWS 240
#define N_COLS 12

static double uniform(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(*s >> 11) / 9007199254740992.0;
}

/* A target with interactions and a monotone fall in columns 0 and 1. */
static void make_data(double *X, double *y, uint64_t seed)
{
    for (int i = 0; i < N_ROWS; i++) {
        for (int j = 0; j < N_COLS; j++)
            X[i * N_COLS + j] = 100 * uniform(&seed);
        const double *x = X + i * N_COLS;
        y[i] = 1.0 / (1.0 + x[0] / 50 + x[1] * x[2] / 4000) + 0.1 * sin(x[3] / 10) + 0.05 * uniform(&seed);
    }
}

static char *xgboost_json(const double *X, const double *y, const char *monotone, size_t *len)
{
    float fx[N_ROWS * N_COLS], fy[N_ROWS];
    double mean = 0;
    for (int i = 0; i < N_ROWS * N_COLS; i++)
        fx[i] = (float)X[i];
    for (int i = 0; i < N_ROWS; i++) {
        fy[i] = (float)y[i];
        mean += y[i] / N_ROWS;
    }
    DMatrixHandle dm;
    BoosterHandle b;
    assert_int_equal(XGDMatrixCreateFromMat(fx, N_ROWS, N_COLS, NAN, &dm), 0);
    assert_int_equal(XGDMatrixSetFloatInfo(dm, "label", fy, N_ROWS), 0);
    assert_int_equal(XGBoosterCreate(&dm, 1, &b), 0);
    char base[32];
    snprintf(base, sizeof base, "%.9g", mean);
    const char *kv[][2] = {{"verbosity", "0"}, {"nthread", "1"},      {"objective", "reg:squarederror"},
                           {"tree_method", "exact"}, {"eta", "0.1"},  {"max_depth", "3"},
                           {"lambda", "0"},     {"min_child_weight", "1"}, {"base_score", base}};
    for (size_t i = 0; i < sizeof kv / sizeof *kv; i++)
        assert_int_equal(XGBoosterSetParam(b, kv[i][0], kv[i][1]), 0);
    if (monotone)
        assert_int_equal(XGBoosterSetParam(b, "monotone_constraints", monotone), 0);
    for (int it = 0; it < 60; it++)
        assert_int_equal(XGBoosterUpdateOneIter(b, it, dm), 0);
    bst_ulong n = 0;
    const char *json = NULL;
    assert_int_equal(XGBoosterSaveModelToBuffer(b, "{\"format\": \"json\"}", &n, &json), 0);
    char *copy = malloc(n + 1);
    memcpy(copy, json, n);
    copy[n] = '\0';
    *len = n;
    XGBoosterFree(b);
    XGDMatrixFree(dm);
    return copy;
}

static void compare(const char *xgb_monotone, const signed char *monotone, uint64_t seed)
{
    double X[N_ROWS * N_COLS], y[N_ROWS];
    make_data(X, y, seed);
    kace_ctx *ctx = kace_ctx_new();
    size_t xlen = 0, klen = 0;
    char *xjson = xgboost_json(X, y, xgb_monotone, &xlen), *kjson = NULL;
    kace_boost_params p = {.n_rounds = 60, .max_depth = 3, .learning_rate = 0.1, .subsample = 1, .monotone = monotone};
    assert_kace_ok(ctx, kace_boost_fit(ctx, X, y, N_ROWS, N_COLS, &p, &kjson, &klen, NULL, 0, NULL));
    kace_trees xt, kt;
    assert_kace_ok(ctx, kace_trees_from_json(ctx, xjson, xlen, N_COLS, &xt));
    assert_kace_ok(ctx, kace_trees_from_json(ctx, kjson, klen, N_COLS, &kt));
    assert_int_equal(kt.n_trees, 60);
    /* The same trees: predictions agree on the training rows and on new ones. */
    double Z[N_ROWS * N_COLS], yz[N_ROWS];
    make_data(Z, yz, seed + 1000);
    double worst = 0;
    for (int i = 0; i < N_ROWS; i++) {
        worst = fmax(worst, fabs(kace_trees_predict(&xt, X + i * N_COLS) - kace_trees_predict(&kt, X + i * N_COLS)));
        worst = fmax(worst, fabs(kace_trees_predict(&xt, Z + i * N_COLS) - kace_trees_predict(&kt, Z + i * N_COLS)));
    }
    printf("seed %llu monotone %s: largest prediction difference %.3g\n", (unsigned long long)seed,
           xgb_monotone ? xgb_monotone : "none", worst);
    assert_true(worst < 1e-4);
    /* Predictions asked of the fit itself are the stored model's. */
    double *eval = malloc(N_ROWS * sizeof *eval);
    char *again = NULL;
    size_t again_len = 0;
    assert_kace_ok(ctx, kace_boost_fit(ctx, X, y, N_ROWS, N_COLS, &p, &again, &again_len, Z, N_ROWS, eval));
    assert_int_equal(again_len, klen);
    assert_memory_equal(again, kjson, klen);
    for (int i = 0; i < N_ROWS; i++)
        assert_true(fabs(eval[i] - kace_trees_predict(&kt, Z + i * N_COLS)) < 1e-6);
    /* The trees built in memory are the ones the JSON text describes. */
    kace_boost_data *data = NULL;
    kace_trees mt;
    char *third = NULL;
    size_t third_len = 0;
    assert_kace_ok(ctx, kace_boost_data_new(ctx, X, N_ROWS, N_COLS, &data));
    assert_kace_ok(ctx, kace_boost_train_trees(ctx, data, y, &p, &third, &third_len, &mt));
    assert_int_equal(third_len, klen);
    assert_int_equal(mt.n_trees, kt.n_trees);
    assert_int_equal(mt.n_nodes, kt.n_nodes);
    assert_int_equal(mt.max_depth, kt.max_depth);
    assert_int_equal(mt.complete_depth, kt.complete_depth);
    assert_true(mt.base_score == kt.base_score);
    assert_memory_equal(mt.tree_root, kt.tree_root, (size_t)kt.n_trees * sizeof *kt.tree_root);
    assert_memory_equal(mt.node, kt.node, (size_t)kt.n_nodes * sizeof *kt.node);
    /* The JSON made later from the kept trees (a fitted slowdown model's,
     * when it is saved) is the fit's text. */
    char *later = NULL;
    size_t later_len = 0;
    assert_kace_ok(ctx, kace_boost_json(ctx, &mt, N_COLS, &later, &later_len));
    assert_int_equal(later_len, klen);
    assert_memory_equal(later, kjson, klen);
    free(later);
    /* A fit on a subset of the rows gives the trees of a fit on them alone. */
    unsigned char use[N_ROWS];
    double Xs[N_ROWS * N_COLS], ys[N_ROWS], sub_eval[N_ROWS], alone_eval[N_ROWS];
    int ns = 0;
    for (int i = 0; i < N_ROWS; i++) {
        use[i] = i % 3 != 1;
        if (use[i]) {
            memcpy(Xs + ns * N_COLS, X + i * N_COLS, N_COLS * sizeof *X);
            ys[ns++] = y[i];
        }
    }
    kace_boost_params ps = p;
    ps.subsample = 0.8;
    ps.seed = seed;
    char *alone = NULL;
    size_t alone_len = 0;
    assert_kace_ok(ctx, kace_boost_train(ctx, data, y, use, &ps, NULL, NULL, Z, N_ROWS, sub_eval));
    assert_kace_ok(ctx, kace_boost_fit(ctx, Xs, ys, (size_t)ns, N_COLS, &ps, &alone, &alone_len, Z, N_ROWS, alone_eval));
    assert_memory_equal(sub_eval, alone_eval, sizeof sub_eval);
    free(alone);
    kace_boost_data_free(&data);
    kace_trees_free(&mt);
    free(third);
    free(eval);
    free(again);
    kace_trees_free(&xt);
    kace_trees_free(&kt);
    free(xjson);
    free(kjson);
    kace_ctx_free(&ctx);
}

static void test_same_trees_as_xgboost(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 3; seed++)
        compare(NULL, NULL, seed);
}

static void test_same_monotone_trees_as_xgboost(void **state)
{
    (void)state;
    signed char mono[N_COLS] = {-1, -1, -1, 0, 1};
    for (uint64_t seed = 1; seed <= 3; seed++)
        compare("(-1,-1,-1,0,1,0,0,0,0,0,0,0)", mono, seed);
}

/* The constraint holds: raising a "never rising" feature never raises the
 * prediction, wherever the other features sit. */
static void test_monotone_holds(void **state)
{
    (void)state;
    double X[N_ROWS * N_COLS], y[N_ROWS];
    make_data(X, y, 7);
    signed char mono[N_COLS] = {-1, -1, 0, 0, 1};
    kace_ctx *ctx = kace_ctx_new();
    kace_boost_params p = {.n_rounds = 100, .max_depth = 3, .learning_rate = 0.1, .subsample = 0.8, .seed = 3,
                           .monotone = mono};
    char *json = NULL;
    size_t len = 0;
    assert_kace_ok(ctx, kace_boost_fit(ctx, X, y, N_ROWS, N_COLS, &p, &json, &len, NULL, 0, NULL));
    kace_trees t;
    assert_kace_ok(ctx, kace_trees_from_json(ctx, json, len, N_COLS, &t));
    int checked = 0;
    for (int i = 0; i < N_ROWS; i++)
        for (int j = 0; j < 5; j++) {
            if (!mono[j])
                continue;
            double x[N_COLS];
            memcpy(x, X + i * N_COLS, sizeof x);
            double prev = NAN;
            for (double v = 0; v <= 100; v += 2.5) {
                x[j] = v;
                double f = kace_trees_predict(&t, x);
                if (!isnan(prev))
                    assert_true(mono[j] < 0 ? f <= prev + 1e-6 : f >= prev - 1e-6);
                prev = f;
                checked++;
            }
        }
    assert_true(checked > 1000);
    kace_trees_free(&t);
    free(json);
    kace_ctx_free(&ctx);
}

/* The vector paths (AVX-512 histogram passes, scans) grow the same trees
 * as the portable code, bit for bit: on continuous features, on features
 * with a few repeated values (bins holding many rows), with constraints,
 * row sampling and deeper trees, and with labels whose gradients span too
 * many binades for sums in any order to be exact. */
static void test_vector_paths_same_trees(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    static double X[N_ROWS * N_COLS], y[N_ROWS];
    signed char mono[N_COLS] = {-1, 1, 0, -1, 0, 0, 0, 0, 0, 0, 0, 1};
    int compared = 0;
    for (uint64_t seed = 1; seed <= 4; seed++)
        for (int variant = 0; variant < 4; variant++) {
            make_data(X, y, seed);
            if (variant & 1) /* a few levels per feature in half the columns */
                for (int i = 0; i < N_ROWS; i++)
                    for (int j = 0; j < N_COLS; j += 2)
                        X[i * N_COLS + j] = floor(X[i * N_COLS + j] / (10.0 + j));
            if (seed == 2) /* column 5 twice column 4, 9 three times 8: ties between features */
                for (int i = 0; i < N_ROWS; i++) {
                    X[i * N_COLS + 5] = 2 * X[i * N_COLS + 4];
                    X[i * N_COLS + 9] = 3 * X[i * N_COLS + 8];
                }
            if (variant & 2) /* labels from 1e-12 to 1e3 */
                for (int i = 0; i < N_ROWS; i++)
                    y[i] = pow(10, -12 + 15 * (double)((i * 7919) % N_ROWS) / N_ROWS) * (y[i] + 0.01);
            kace_boost_params p = {.n_rounds = 40, .max_depth = seed == 4 ? 5 : 3, .learning_rate = 0.3,
                                   .subsample = seed == 1 ? 1 : 0.8, .seed = seed, .monotone = seed & 1 ? mono : NULL};
            char *fast = NULL, *portable = NULL;
            size_t fast_len = 0, portable_len = 0;
            double eval_fast[N_ROWS], eval_portable[N_ROWS];
            assert_kace_ok(ctx, kace_boost_fit(ctx, X, y, N_ROWS, N_COLS, &p, &fast, &fast_len, X, N_ROWS, eval_fast));
            p.scalar = true;
            assert_kace_ok(ctx, kace_boost_fit(ctx, X, y, N_ROWS, N_COLS, &p, &portable, &portable_len, X, N_ROWS,
                                               eval_portable));
            assert_int_equal(fast_len, portable_len);
            assert_memory_equal(fast, portable, fast_len);
            assert_memory_equal(eval_fast, eval_portable, sizeof eval_fast);
            assert_non_null(strstr(fast, "\"split_indices\""));
            compared++;
            free(fast);
            free(portable);
        }
    assert_int_equal(compared, 16);
    kace_ctx_free(&ctx);
}

/* The test that lets the scans add gradients in any order: exact sums. */
static bool exact(const double *pred, const double *y, int n)
{
    int finest = 255, widest = 0;
    for (int i = 0; i < n; i++) {
        float g = (float)pred[i] - (float)y[i];
        int ep = kace_boost_binade((float)pred[i]), ey = kace_boost_binade((float)y[i]), eg = kace_boost_binade(g);
        finest = ep < finest ? ep : finest;
        finest = ey < finest ? ey : finest;
        widest = eg > widest ? eg : widest;
    }
    return kace_boost_sums_exact(finest, widest, n);
}

static void test_sums_exact(void **state)
{
    (void)state;
    enum { N = 300 };
    static double pred[N], y[N];
    for (int i = 0; i < N; i++) {
        y[i] = 0.02 + 1.1 * (double)((i * 37) % N) / N;
        pred[i] = 0.5 + 0.3 * sin(i);
    }
    assert_true(exact(pred, y, N));
    /* a label 1e-12 next to gradients near 1: too fine a spacing */
    y[0] = 1e-12;
    assert_false(exact(pred, y, N));
    /* what such spacings allow: three floats whose sum depends on the order */
    double a = (double)1.0f, b = (double)0x1p-53f, c = (double)0x1p-53f;
    assert_true((a + b) + c != a + (b + c));
    /* At the edge: 300 rows (9 binades of sum), gradients below 0.5 and a
     * prediction 2^-22 (spacing 2^-45): 53 bits. 2^-23 needs 54, and so do
     * 513 rows. */
    for (int i = 0; i < N; i++)
        pred[i] = y[i] = 0.5;
    pred[2] = 0x1p-22;
    assert_true(exact(pred, y, N));
    assert_false(kace_boost_sums_exact(kace_boost_binade(0x1p-22f), kace_boost_binade(0.49f), 513));
    pred[2] = 0x1p-23;
    assert_false(exact(pred, y, N));
    assert_int_equal(kace_boost_binade(0x1p-149f), kace_boost_binade(0x1p-126f));
    assert_int_equal(kace_boost_binade(0.0f), 1);
}

/* The draws' reduction is x % d, at the edges too. */
static void test_mod_by(void **state)
{
    (void)state;
    uint64_t s = 12345, xs[] = {0, 1, UINT64_MAX, UINT64_MAX - 1, (uint64_t)1 << 63};
    long checked = 0;
    for (uint64_t d = 1; d <= 4100; d += d < 70 ? 1 : 37) {
        uint64_t magic = UINT64_MAX / d;
        for (int i = 0; i < 300; i++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            uint64_t x = i < 5 ? xs[i] : i < 40 ? (s >> 20) / d * d + (uint64_t)i % 3 : s;
            assert_int_equal(kace_boost_mod_by(x, d, magic), x % d);
            checked++;
        }
    }
    assert_true(checked > 30000);
}

static void test_bad_input(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    double X[4] = {1, 2, NAN, 4}, y[2] = {1, 2};
    kace_boost_params p = {.n_rounds = 10, .max_depth = 3, .learning_rate = 0.1, .subsample = 1};
    char *json = NULL;
    size_t len = 0;
    assert_int_equal(kace_boost_fit(ctx, X, y, 2, 2, &p, &json, &len, NULL, 0, NULL), KACE_ERR_INVALID);
    assert_non_null(strstr(kace_errmsg(ctx), "not finite"));
    X[2] = 3;
    p.max_depth = 0;
    assert_int_equal(kace_boost_fit(ctx, X, y, 2, 2, &p, &json, &len, NULL, 0, NULL), KACE_ERR_INVALID);
    assert_null(json);
    kace_ctx_free(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_trees_as_xgboost),
        cmocka_unit_test(test_same_monotone_trees_as_xgboost),
        cmocka_unit_test(test_monotone_holds),
        cmocka_unit_test(test_vector_paths_same_trees),
        cmocka_unit_test(test_sums_exact),
        cmocka_unit_test(test_mod_by),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
