/* Random-forest models (lib/model/forest.c): accuracy on a nonlinear function, the
 * sklearn -> xgboost parameter mapping, determinism, JSON round trip, the
 * randomized search and its errors. Works on the model internals so that it
 * tests forest.c by itself (z-scoring with kace_zscore, then predict_z). */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kace/model.h"
#include "model/forest.h"
#include "model/trees.h"

#define D 4
static const kace_feature_set fs_test = {"forest-test", D, {0}};

static uint64_t rng_state;
static double urand(void) /* xorshift64*, uniform in [0, 1) */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545F4914F6CDD1DULL) >> 11) * 0x1.0p-53;
}

/* y = x0 * x1 (+ noise); x2, x3 are noise features; x in [-1, 1]. The label
 * is scaled and shifted so that z-scoring matters. */
static void make_data(size_t n, uint64_t seed, double noise, double *X, double *y)
{
    rng_state = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        for (int j = 0; j < D; j++)
            X[i * D + j] = 2.0 * urand() - 1.0;
        X[i * D + 3] *= 1000.0; /* a feature on another scale */
        y[i] = 500.0 + 100.0 * (X[i * D] * X[i * D + 1] + noise * (urand() - 0.5));
    }
}

static void free_model(kace_model **m)
{
    if (*m) {
        kace_forest_release(*m);
        free(*m);
        *m = NULL;
    }
}

/* Predictions in label units. */
static void predict(kace_ctx *ctx, const kace_model *m, const double *X, size_t n, double *pred)
{
    double *Z = malloc(n * D * sizeof *Z);
    assert_non_null(Z);
    kace_zscore(X, n, D, m->x_mean, m->x_std, Z);
    assert_kace_ok(ctx, kace_forest_predict_z(ctx, m, Z, n, pred));
    for (size_t i = 0; i < n; i++)
        pred[i] = m->y_mean + pred[i] * m->y_std;
    free(Z);
}

static double r2(const double *y, const double *pred, size_t n)
{
    double mean = 0, ss_res = 0, ss_tot = 0;
    for (size_t i = 0; i < n; i++)
        mean += y[i];
    mean /= (double)n;
    for (size_t i = 0; i < n; i++) {
        ss_res += (y[i] - pred[i]) * (y[i] - pred[i]);
        ss_tot += (y[i] - mean) * (y[i] - mean);
    }
    return 1.0 - ss_res / ss_tot;
}

static size_t n_distinct(const double *v, size_t n)
{
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < i && v[j] != v[i])
            j++;
        if (j == i)
            count++;
    }
    return count;
}

static void test_fit_nonlinear(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    enum { N = 200, NT = 1000 };
    static double X[N * D], y[N], Xt[NT * D], yt[NT], pred[NT];
    make_data(N, 1, 0.1, X, y);
    make_data(NT, 2, 0.0, Xt, yt);
    kace_forest_params p = {.n_estimators = 100, .max_features = 2, .max_depth = 0,
                            .min_samples_split = 2, .min_samples_leaf = 1, .bootstrap = 1};
    kace_model *m = NULL;
    assert_kace_ok(ctx, kace_model_fit_forest(ctx, &fs_test, X, y, N, &p, 7, 1, &m));
    assert_non_null(m);
    assert_int_equal(m->kind, KACE_MODEL_FOREST);
    assert_ptr_equal(m->features, &fs_test);
    assert_int_equal(m->n_features, D);
    assert_int_equal(m->n_fit, N);
    assert_true(m->trees.n_trees >= 1 && m->trees.n_nodes >= m->trees.n_trees);
    assert_non_null(m->booster_json);
    assert_int_equal(m->booster_json_len, strlen(m->booster_json));
    assert_int_equal(m->booster_json[0], '{');
    assert_memory_equal(&m->forest, &p, sizeof p);
    assert_true(m->y_std > 20.0 && m->x_std[3] > 100.0);

    predict(ctx, m, Xt, NT, pred);
    double score = r2(yt, pred, NT);
    /* scikit-learn's RandomForestRegressor gets about 0.75 on these data
     * (sampling with replacement), this mapping about 0.69. */
    print_message("held-out R^2 of x0*x1: %.3f\n", score);
    assert_true(score > 0.6);
    free_model(&m);

    /* A linear-in-nothing label is not learnable from noise: R^2 stays low
     * (guards against the held-out set leaking into the fit). */
    static double ynoise[N];
    rng_state = 99;
    for (size_t i = 0; i < N; i++)
        ynoise[i] = urand();
    assert_kace_ok(ctx, kace_model_fit_forest(ctx, &fs_test, X, ynoise, N, &p, 7, 1, &m));
    predict(ctx, m, X, N, pred); /* training rows: a forest fits those well */
    assert_true(r2(ynoise, pred, N) > 0.5);
    predict(ctx, m, Xt, NT, pred);
    rng_state = 12345;
    for (size_t i = 0; i < NT; i++)
        yt[i] = urand();
    assert_true(r2(yt, pred, NT) < 0.2);
    free_model(&m);
    kace_ctx_free(&ctx);
}

/* The mapping: eta=1 with num_parallel_tree averages the trees; max_depth 0
 * is unlimited; min_samples_leaf and max_depth bound the leaves. */
static void test_mapping(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    enum { N = 60 };
    double X[N * D], y[N], pred[N];
    make_data(N, 3, 0.5, X, y);
    kace_model *m = NULL;

    /* All features, no bootstrap: 10 identical unlimited trees interpolate
     * the training rows (a sum of trees would give 10 times the label). */
    kace_forest_params p = {10, 2, 0, 2, 1, 0};
    assert_kace_ok(ctx, kace_model_fit_forest(ctx, &fs_test, X, y, N, &p, 1, 1, &m));
    predict(ctx, m, X, N, pred);
    for (size_t i = 0; i < N; i++)
        assert_true(fabs(pred[i] - y[i]) < 1e-4 * m->y_std);
    free_model(&m);

    /* max_depth 1: one split, so at most 2 distinct predictions. */
    p.max_depth = 1;
    assert_kace_ok(ctx, kace_model_fit_forest(ctx, &fs_test, X, y, N, &p, 1, 1, &m));
    predict(ctx, m, X, N, pred);
    assert_true(n_distinct(pred, N) <= 2);
    assert_true(n_distinct(pred, N) == 2);
    free_model(&m);

    /* max_depth 3: at most 8 leaves. */
    p.max_depth = 3;
    assert_kace_ok(ctx, kace_model_fit_forest(ctx, &fs_test, X, y, N, &p, 1, 1, &m));
    predict(ctx, m, X, N, pred);
    assert_true(n_distinct(pred, N) <= 8);
    assert_true(n_distinct(pred, N) > 2);
    free_model(&m);

    /* min_samples_leaf 20 of 60 rows: at most 3 leaves. */
    p.max_depth = 0;
    p.min_samples_leaf = 20;
    assert_kace_ok(ctx, kace_model_fit_forest(ctx, &fs_test, X, y, N, &p, 1, 1, &m));
    predict(ctx, m, X, N, pred);
    assert_true(n_distinct(pred, N) <= 3);
    free_model(&m);

    /* min_samples_split 40 (min_child_weight 20): at most 3 leaves as well. */
    p.min_samples_leaf = 1;
    p.min_samples_split = 40;
    assert_kace_ok(ctx, kace_model_fit_forest(ctx, &fs_test, X, y, N, &p, 1, 1, &m));
    predict(ctx, m, X, N, pred);
    assert_true(n_distinct(pred, N) <= 3);
    free_model(&m);

    /* A constant label is refused, as by the linear model. */
    for (size_t i = 0; i < N; i++)
        y[i] = 42.0;
    p.min_samples_split = 2;
    assert_int_equal(kace_model_fit_forest(ctx, &fs_test, X, y, N, &p, 1, 1, &m), KACE_ERR_MODEL);
    assert_null(m);
    assert_non_null(strstr(kace_errmsg(ctx), "same label"));
    kace_ctx_free(&ctx);
}

static void test_determinism(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    enum { N = 80 };
    double X[N * D], y[N], p1[N], p2[N];
    make_data(N, 4, 0.2, X, y);
    kace_forest_params p = {50, 0, 0, 2, 1, 1}; /* sqrt features, bootstrap: random */
    kace_model *a = NULL, *b = NULL, *c = NULL;
    assert_kace_ok(ctx, kace_model_fit_forest(ctx, &fs_test, X, y, N, &p, 11, 1, &a));
    assert_kace_ok(ctx, kace_model_fit_forest(ctx, &fs_test, X, y, N, &p, 11, 2, &b));
    assert_kace_ok(ctx, kace_model_fit_forest(ctx, &fs_test, X, y, N, &p, 12, 1, &c));
    assert_int_equal(a->booster_json_len, b->booster_json_len);
    assert_memory_equal(a->booster_json, b->booster_json, a->booster_json_len);
    predict(ctx, a, X, N, p1);
    predict(ctx, b, X, N, p2);
    assert_memory_equal(p1, p2, sizeof p1);
    /* Another seed gives another forest. */
    predict(ctx, c, X, N, p2);
    assert_true(memcmp(p1, p2, sizeof p1) != 0);
    free_model(&a);
    free_model(&b);
    free_model(&c);
    kace_ctx_free(&ctx);
}

/* The fast evaluator of NaN-free float rows (complete trees; depth 3 has
 * its own code) agrees with the general node walker for every depth and
 * row count, also on rows far outside the training range. */
static void test_fast_paths_match_walker(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    enum { N = 120, ROWS = 5 };
    double X[N * D], y[N];
    make_data(N, 11, 0.2, X, y);
    for (int depth = 1; depth <= 6; depth++) {
        kace_forest_params p = {20, 2, depth, 2, 1, 1};
        kace_model *m = NULL;
        assert_kace_ok(ctx, kace_model_fit_forest(ctx, &fs_test, X, y, N, &p, 7, 1, &m));
        if (depth <= 4)
            assert_int_equal(m->trees.complete_depth, depth < m->trees.max_depth ? depth : m->trees.max_depth);
        rng_state = 99 + (uint64_t)depth;
        for (int trial = 0; trial < 50; trial++) {
            float fx[ROWS * D];
            double fast[ROWS];
            for (int i = 0; i < ROWS * D; i++)
                fx[i] = (float)(3.0 * urand() - 1.5);
            if (trial % 5 == 0)
                fx[trial % (ROWS * D)] = trial % 10 ? 1e30f : -1e30f;
            for (int rows = 1; rows <= ROWS; rows++) {
                kace_trees_predict_rows_f(&m->trees, fx, D, rows, fast);
                for (int r = 0; r < rows; r++) {
                    double xd[D];
                    for (int j = 0; j < D; j++)
                        xd[j] = fx[r * D + j];
                    double want = kace_trees_predict(&m->trees, xd);
                    if (fabs(fast[r] - want) > 1e-5 * (1 + fabs(want)))
                        fail_msg("depth %d, %d rows, row %d: fast %.9g, walker %.9g", depth, rows, r, fast[r], want);
                }
            }
        }
        free_model(&m);
    }
    kace_ctx_free(&ctx);
}

static void test_restore(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    enum { N = 100 };
    double X[N * D], y[N], Xt[N * D], yt[N], p1[N], p2[N];
    make_data(N, 5, 0.2, X, y);
    make_data(N, 6, 0.2, Xt, yt);
    kace_forest_params p = {30, 1, 20, 5, 2, 1};
    kace_model *m = NULL;
    assert_kace_ok(ctx, kace_model_fit_forest(ctx, &fs_test, X, y, N, &p, 3, 1, &m));
    predict(ctx, m, Xt, N, p1);

    /* What model.c does on load: the fields, the JSON, then restore. */
    kace_model *r = calloc(1, sizeof *r);
    assert_non_null(r);
    *r = *m;
    r->booster = NULL;
    memset(&r->trees, 0, sizeof r->trees); /* m owns those */
    r->booster_json = malloc(m->booster_json_len + 1);
    assert_non_null(r->booster_json);
    memcpy(r->booster_json, m->booster_json, m->booster_json_len + 1);
    free_model(&m);
    assert_kace_ok(ctx, kace_forest_restore(ctx, r));
    assert_true(r->trees.n_trees >= 1);
    predict(ctx, r, Xt, N, p2);
    assert_memory_equal(p1, p2, sizeof p1);
    /* Restoring again replaces the booster (no leak, same predictions). */
    assert_kace_ok(ctx, kace_forest_restore(ctx, r));
    predict(ctx, r, Xt, N, p2);
    assert_memory_equal(p1, p2, sizeof p1);
    /* Zero rows: nothing to do. */
    assert_kace_ok(ctx, kace_forest_predict_z(ctx, r, NULL, 0, NULL));

    /* A corrupt JSON fails with a model error and leaves no trees behind. */
    char *good = r->booster_json;
    size_t good_len = r->booster_json_len;
    static const char bad[] = "{\"learner\": 17";
    r->booster_json = (char *)bad;
    r->booster_json_len = sizeof bad - 1;
    kace_status st = kace_forest_restore(ctx, r);
    assert_int_equal(st, KACE_ERR_MODEL);
    assert_true(strlen(kace_errmsg(ctx)) > 0);
    assert_int_equal(r->trees.n_trees, 0);
    /* A booster with another number of features is refused. */
    r->booster_json = good;
    r->booster_json_len = good_len;
    r->n_features = D - 1;
    st = kace_forest_restore(ctx, r);
    assert_int_equal(st, KACE_ERR_MODEL);
    assert_non_null(strstr(kace_errmsg(ctx), "features"));
    r->n_features = D;
    free_model(&r);

    /* No JSON, no booster. */
    kace_model empty = {.kind = KACE_MODEL_FOREST, .n_features = D};
    assert_int_equal(kace_forest_restore(ctx, &empty), KACE_ERR_MODEL);
    double z[D] = {0}, out1;
    assert_int_equal(kace_forest_predict_z(ctx, &empty, z, 1, &out1), KACE_ERR_MODEL);
    kace_forest_release(&empty); /* harmless */
    kace_ctx_free(&ctx);
}

static void test_search(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    enum { N = 40 };
    double X[N * D], y[N], Xt[N * D], yt[N], p1[N], p2[N];
    make_data(N, 8, 0.1, X, y);
    make_data(N, 9, 0.0, Xt, yt);
    /* An additive target, easy for forests that see 2 of the 4 features per node. */
    for (size_t i = 0; i < N; i++) {
        y[i] = sin(3.0 * X[i * D]) + X[i * D + 1] * X[i * D + 1];
        yt[i] = sin(3.0 * Xt[i * D]) + Xt[i * D + 1] * Xt[i * D + 1];
    }
    kace_forest_search s = {.n_iter = 2, .n_folds = 4, .seed = 42, .n_threads = 1};
    kace_forest_params b1, b2;
    kace_model *m1 = NULL, *m2 = NULL;
    assert_kace_ok(ctx, kace_model_fit_forest_search(ctx, &fs_test, X, y, N, &s, &b1, &m1));
    assert_kace_ok(ctx, kace_model_fit_forest_search(ctx, &fs_test, X, y, N, &s, &b2, &m2));
    /* The best configuration is a grid point and is what was refitted. */
    assert_true(b1.n_estimators >= 200 && b1.n_estimators <= 2000 && b1.n_estimators % 200 == 0);
    assert_true(b1.max_features == 0 || b1.max_features == 1);
    assert_true(b1.max_depth == 0 || (b1.max_depth >= 10 && b1.max_depth <= 110 && b1.max_depth % 10 == 0));
    assert_true(b1.min_samples_split == 2 || b1.min_samples_split == 5 || b1.min_samples_split == 10);
    assert_true(b1.min_samples_leaf == 1 || b1.min_samples_leaf == 2 || b1.min_samples_leaf == 4);
    assert_true(b1.bootstrap == 0 || b1.bootstrap == 1);
    assert_memory_equal(&m1->forest, &b1, sizeof b1);
    assert_int_equal(m1->n_fit, N);
    /* Deterministic. */
    assert_memory_equal(&b1, &b2, sizeof b1);
    assert_int_equal(m1->booster_json_len, m2->booster_json_len);
    assert_memory_equal(m1->booster_json, m2->booster_json, m1->booster_json_len);
    predict(ctx, m1, Xt, N, p1);
    predict(ctx, m2, Xt, N, p2);
    assert_memory_equal(p1, p2, sizeof p1);
    print_message("search: held-out R^2 %.3f\n", r2(yt, p1, N));
    assert_true(r2(yt, p1, N) > 0.6);
    free_model(&m2);

    /* best may be NULL; the refit equals a plain fit with the best parameters
     * and the search seed. */
    assert_kace_ok(ctx, kace_model_fit_forest_search(ctx, &fs_test, X, y, N, &s, NULL, &m2));
    free_model(&m2);
    assert_kace_ok(ctx, kace_model_fit_forest(ctx, &fs_test, X, y, N, &b1, s.seed, 1, &m2));
    assert_int_equal(m1->booster_json_len, m2->booster_json_len);
    assert_memory_equal(m1->booster_json, m2->booster_json, m1->booster_json_len);
    free_model(&m1);
    free_model(&m2);

    /* Different search seeds explore different configurations. */
    int differs = 0;
    for (uint64_t seed = 1; seed <= 4 && !differs; seed++) {
        kace_forest_search s2 = {.n_iter = 1, .n_folds = 2, .seed = seed, .n_threads = 1};
        kace_forest_search s3 = {.n_iter = 1, .n_folds = 2, .seed = seed + 100, .n_threads = 1};
        assert_kace_ok(ctx, kace_model_fit_forest_search(ctx, &fs_test, X, y, 12, &s2, &b1, &m1));
        assert_kace_ok(ctx, kace_model_fit_forest_search(ctx, &fs_test, X, y, 12, &s3, &b2, &m2));
        differs = memcmp(&b1, &b2, sizeof b1) != 0;
        free_model(&m1);
        free_model(&m2);
    }
    assert_true(differs);

    /* More folds than rows: clamped (3 rows -> 3 folds of one row). */
    assert_kace_ok(ctx, kace_model_fit_forest_search(ctx, &fs_test, X, y, 3, &s, &b1, &m1));
    assert_int_equal(m1->n_fit, 3);
    free_model(&m1);
    /* Two rows is the minimum. */
    assert_kace_ok(ctx, kace_model_fit_forest_search(ctx, &fs_test, X, y, 2, &s, &b1, &m1));
    free_model(&m1);
    kace_ctx_free(&ctx);
}

/* mp is read after the call (arguments are evaluated in no fixed order). */
static void expect_fail(kace_ctx *ctx, kace_status got, kace_status want, const char *word,
                        kace_model **mp)
{
    assert_int_equal(got, want);
    assert_null(*mp);
    if (!strstr(kace_errmsg(ctx), word))
        fail_msg("message '%s' does not name '%s'", kace_errmsg(ctx), word);
}

static void test_errors(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    enum { N = 20 };
    double X[N * D], y[N];
    make_data(N, 10, 0.1, X, y);
    kace_forest_params good = {20, 0, 0, 2, 1, 1};
    kace_model *m = (kace_model *)&m; /* must be reset to NULL on failure */

    expect_fail(ctx, kace_model_fit_forest(ctx, &fs_test, X, y, 1, &good, 1, 1, &m), KACE_ERR_MODEL,
                "at least 2 rows", &m);
    m = (kace_model *)&m;
    expect_fail(ctx, kace_model_fit_forest(ctx, &fs_test, X, y, 0, &good, 1, 1, &m), KACE_ERR_MODEL,
                "at least 2 rows", &m);

    struct {
        kace_forest_params p;
        const char *word;
    } bad[] = {
        {{0, 0, 0, 2, 1, 1}, "n_estimators"},     {{-5, 0, 0, 2, 1, 1}, "n_estimators"},
        {{20, 3, 0, 2, 1, 1}, "max_features"},    {{20, -1, 0, 2, 1, 1}, "max_features"},
        {{20, 0, -1, 2, 1, 1}, "max_depth"},      {{20, 0, 0, 1, 1, 1}, "min_samples_split"},
        {{20, 0, 0, 2, 0, 1}, "min_samples_leaf"}, {{20, 0, 0, 2, 1, 2}, "bootstrap"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        m = (kace_model *)&m;
        expect_fail(ctx, kace_model_fit_forest(ctx, &fs_test, X, y, N, &bad[i].p, 1, 1, &m),
                    KACE_ERR_INVALID, bad[i].word, &m);
    }
    expect_fail(ctx, kace_model_fit_forest(ctx, &fs_test, X, y, N, NULL, 1, 1, &m), KACE_ERR_INVALID,
                "parameters", &m);

    /* Non-finite input. */
    double Xn[N * D];
    memcpy(Xn, X, sizeof X);
    Xn[7] = NAN;
    expect_fail(ctx, kace_model_fit_forest(ctx, &fs_test, Xn, y, N, &good, 1, 1, &m), KACE_ERR_INVALID,
                "feature", &m);
    double yn[N];
    memcpy(yn, y, sizeof y);
    yn[3] = INFINITY;
    expect_fail(ctx, kace_model_fit_forest(ctx, &fs_test, X, yn, N, &good, 1, 1, &m), KACE_ERR_INVALID,
                "label", &m);
    kace_feature_set none = {"none", 0, {0}};
    expect_fail(ctx, kace_model_fit_forest(ctx, &none, X, y, N, &good, 1, 1, &m), KACE_ERR_INVALID,
                "features", &m);

    /* Search settings. */
    kace_forest_search s = {.n_iter = 2, .n_folds = 5, .seed = 1, .n_threads = 1};
    m = (kace_model *)&m;
    expect_fail(ctx, kace_model_fit_forest_search(ctx, &fs_test, X, y, 1, &s, NULL, &m), KACE_ERR_MODEL,
                "at least 2 rows", &m);
    s.n_iter = 0;
    expect_fail(ctx, kace_model_fit_forest_search(ctx, &fs_test, X, y, N, &s, NULL, &m), KACE_ERR_INVALID,
                "n_iter", &m);
    s.n_iter = 2;
    s.n_folds = 1;
    expect_fail(ctx, kace_model_fit_forest_search(ctx, &fs_test, X, y, N, &s, NULL, &m), KACE_ERR_INVALID,
                "n_folds", &m);
    s.n_folds = 5;
    s.n_threads = -1;
    expect_fail(ctx, kace_model_fit_forest_search(ctx, &fs_test, X, y, N, &s, NULL, &m), KACE_ERR_INVALID,
                "n_threads", &m);
    expect_fail(ctx, kace_model_fit_forest_search(ctx, &fs_test, X, y, N, NULL, NULL, &m), KACE_ERR_INVALID,
                "search", &m);
    assert_int_equal(kace_model_fit_forest(ctx, &fs_test, X, y, N, &good, 1, 1, NULL), KACE_ERR_INVALID);
    kace_ctx_free(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fit_nonlinear), cmocka_unit_test(test_mapping),
        cmocka_unit_test(test_determinism),   cmocka_unit_test(test_restore),
        cmocka_unit_test(test_fast_paths_match_walker),
        cmocka_unit_test(test_search),        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
