/* Random-forest models (the Xu et al. baseline) on top of libxgboost's C API.
 *
 * The forest is fitted on z-scored features and a z-scored label, exactly like
 * the linear model: model.c z-scores rows before kace_forest_predict_z and
 * turns z-predictions back into label units.
 *
 * scikit-learn RandomForestRegressor -> xgboost (random-forest mode):
 *
 *   forest                 booster=gbtree, num_parallel_tree=n_estimators,
 *                          a single boosting round (one XGBoosterUpdateOneIter),
 *                          eta=1 (xgboost divides the learning rate by the
 *                          number of parallel trees, so the prediction is the
 *                          mean of the trees, as in scikit-learn), lambda=0,
 *                          alpha=0, gamma=0 (leaf value = mean label of its
 *                          rows, split whenever the squared error drops),
 *                          objective=reg:squarederror, base_score=0 (the label
 *                          is z-scored, so the trees fit the label itself),
 *                          tree_method=exact (every threshold, midpoints, as
 *                          scikit-learn; the data are tiny).
 *   max_features           colsample_bynode = k/d with k = max(1, int(sqrt(d)))
 *                          for sqrt, max(1, int(log2(d))) for log2, d for all
 *                          (colsample 1). xgboost takes int(colsample * d)
 *                          features per node, so (k + 0.5)/d is passed to get
 *                          exactly k whatever the float rounding.
 *   max_depth              the same; 0 (None, unlimited) -> the number of
 *                          fitting rows, which no tree can reach (every child
 *                          keeps at least one row), so it is unlimited in
 *                          effect (xgboost's exact grower needs a bound).
 *   min_samples_leaf       min_child_weight (the squared-error hessian is 1 per
 *                          row, so it is a minimum number of rows per child).
 *   min_samples_split      no xgboost equivalent. Approximation: min_child_weight
 *                          = max(min_samples_leaf, floor(min_samples_split / 2)).
 *                          A node then needs >= 2 * that many rows to be split,
 *                          which is exactly min_samples_split when it is even
 *                          (2 and 10 in the grid) and one less for 5; unlike
 *                          scikit-learn it also forbids children smaller than
 *                          half of min_samples_split.
 *   bootstrap              xgboost cannot sample with replacement. bootstrap=1
 *                          -> subsample=0.632 (each row kept with probability
 *                          0.632 per tree, the expected fraction of distinct
 *                          rows in a bootstrap sample, without multiplicities);
 *                          bootstrap=0 -> subsample=1.
 *   random_state           xgboost "seed" (a 31-bit mix of the 64-bit seed).
 *   n_jobs                 "nthread" when n_threads > 0, else xgboost's default.
 *
 * The randomized search (kace_model_fit_forest_search) draws search->n_iter
 * distinct configurations of the Xu et al. grid (without replacement, like
 * scikit-learn's ParameterSampler on an all-list grid) with a splitmix64
 * generator seeded by search->seed, scores each by k-fold cross-validation
 * (contiguous folds over a seeded shuffle of the rows, fold sizes as
 * scikit-learn's KFold) with the mean over folds of the mean squared error of
 * the z-scored label, and refits the best (first one on ties) on all rows.
 * Each fold's DMatrix pair is built once and reused by every configuration.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <xgboost/c_api.h>

#include "forest.h"
#include "kace/kace.h"
#include "kace/model.h"
#include "trees.h"

/* ------------------------------------------------------------ PRNG */

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Uniform integer in [0, m), m > 0, without modulo bias. */
static uint64_t rand_below(uint64_t *state, uint64_t m)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % m;
    uint64_t r;
    do {
        r = splitmix64(state);
    } while (r >= limit);
    return r % m;
}

/* ------------------------------------------------------------ helpers */

/* xgboost's message is "[time] file:line: what" followed by a snippet and a
 * stack trace on later lines: keep the first line. */
static kace_status xgb_fail(kace_ctx *ctx, const char *what)
{
    const char *msg = XGBGetLastError();
    if (!msg || !*msg)
        msg = "unknown xgboost error";
    int len = (int)strcspn(msg, "\n");
    return kace_fail(ctx, KACE_ERR_MODEL, "random forest: %s failed: %.*s", what, len, msg);
}

static int all_finite(const double *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return 0;
    return 1;
}

static kace_status check_params(kace_ctx *ctx, const kace_forest_params *p)
{
    if (!p)
        return kace_fail(ctx, KACE_ERR_INVALID, "random forest: no parameters given");
    if (p->n_estimators < 1 || p->n_estimators > 100000)
        return kace_fail(ctx, KACE_ERR_INVALID,
                         "random forest: n_estimators must be in 1..100000, got %d", p->n_estimators);
    if (p->max_features < 0 || p->max_features > 2)
        return kace_fail(ctx, KACE_ERR_INVALID,
                         "random forest: max_features must be 0 (sqrt), 1 (log2) or 2 (all), got %d",
                         p->max_features);
    if (p->max_depth < 0)
        return kace_fail(ctx, KACE_ERR_INVALID,
                         "random forest: max_depth must be >= 0 (0 = unlimited), got %d", p->max_depth);
    if (p->min_samples_split < 2)
        return kace_fail(ctx, KACE_ERR_INVALID,
                         "random forest: min_samples_split must be >= 2, got %d", p->min_samples_split);
    if (p->min_samples_leaf < 1)
        return kace_fail(ctx, KACE_ERR_INVALID,
                         "random forest: min_samples_leaf must be >= 1, got %d", p->min_samples_leaf);
    if (p->bootstrap != 0 && p->bootstrap != 1)
        return kace_fail(ctx, KACE_ERR_INVALID,
                         "random forest: bootstrap must be 0 or 1, got %d", p->bootstrap);
    return KACE_OK;
}

/* Checks what every fitting entry point shares. */
static kace_status check_inputs(kace_ctx *ctx, const kace_feature_set *fs, const double *X,
                                const double *y, size_t n, kace_model **out)
{
    if (!out)
        return kace_fail(ctx, KACE_ERR_INVALID, "random forest: no output model pointer");
    *out = NULL;
    if (!fs || !X || !y)
        return kace_fail(ctx, KACE_ERR_INVALID, "random forest: missing feature set, features or labels");
    if (fs->n < 1 || fs->n > KACE_MAX_FEATURES)
        return kace_fail(ctx, KACE_ERR_INVALID, "random forest: feature set '%s' has %d features (1..%d)",
                         fs->name ? fs->name : "?", fs->n, KACE_MAX_FEATURES);
    if (n < 2)
        return kace_fail(ctx, KACE_ERR_MODEL, "random forest: needs at least 2 rows to fit, got %zu", n);
    if (n > (size_t)INT32_MAX / KACE_MAX_FEATURES)
        return kace_fail(ctx, KACE_ERR_INVALID, "random forest: too many rows (%zu)", n);
    if (!all_finite(X, n * (size_t)fs->n))
        return kace_fail(ctx, KACE_ERR_INVALID, "random forest: a feature value is not finite");
    if (!all_finite(y, n))
        return kace_fail(ctx, KACE_ERR_INVALID, "random forest: a label is not finite");
    return KACE_OK;
}

/* Features per node, rounded as scikit-learn does. */
static int features_per_node(int max_features, int d)
{
    int k;
    switch (max_features) {
    case 0: k = (int)sqrt((double)d); break;
    case 1: k = (int)log2((double)d); break;
    default: k = d; break;
    }
    if (k < 1)
        k = 1;
    if (k > d)
        k = d;
    return k;
}

static int xgb_seed(uint64_t seed)
{
    uint64_t s = seed;
    return (int)(splitmix64(&s) & 0x7fffffff);
}

/* A DMatrix of n rows of Z (row-major, d columns) with labels yz (may be
 * NULL); rows, when not NULL, selects the rows. */
static kace_status make_dmatrix(kace_ctx *ctx, const double *Z, const double *yz, const size_t *rows,
                                size_t n, int d, float *fbuf, float *lbuf, DMatrixHandle *out)
{
    *out = NULL;
    for (size_t i = 0; i < n; i++) {
        size_t r = rows ? rows[i] : i;
        for (int j = 0; j < d; j++)
            fbuf[i * (size_t)d + (size_t)j] = (float)Z[r * (size_t)d + (size_t)j];
        if (yz)
            lbuf[i] = (float)yz[r];
    }
    DMatrixHandle h = NULL;
    if (XGDMatrixCreateFromMat(fbuf, (bst_ulong)n, (bst_ulong)d, NAN, &h) != 0)
        return xgb_fail(ctx, "XGDMatrixCreateFromMat");
    if (yz && XGDMatrixSetFloatInfo(h, "label", lbuf, (bst_ulong)n) != 0) {
        kace_status st = xgb_fail(ctx, "XGDMatrixSetFloatInfo(label)");
        XGDMatrixFree(h);
        return st;
    }
    *out = h;
    return KACE_OK;
}

/* Trains one forest on dtrain (n_rows rows, d features). */
static kace_status train_booster(kace_ctx *ctx, DMatrixHandle dtrain, size_t n_rows, int d,
                                 const kace_forest_params *p, uint64_t seed, int n_threads,
                                 BoosterHandle *out)
{
    *out = NULL;
    char buf[64];
    int k = features_per_node(p->max_features, d);
    int mcw = p->min_samples_split / 2;
    if (mcw < p->min_samples_leaf)
        mcw = p->min_samples_leaf;
    long depth = p->max_depth > 0 ? p->max_depth : (long)(n_rows < 1 ? 1 : n_rows);

    BoosterHandle b = NULL;
    if (XGBoosterCreate(&dtrain, 1, &b) != 0)
        return xgb_fail(ctx, "XGBoosterCreate");

    struct {
        const char *name;
        char value[32];
    } kv[20];
    int nkv = 0;
#define KV(n_, ...)                                                     \
    do {                                                                \
        kv[nkv].name = (n_);                                            \
        snprintf(kv[nkv].value, sizeof kv[nkv].value, __VA_ARGS__);     \
        nkv++;                                                          \
    } while (0)
    KV("verbosity", "0");
    KV("booster", "gbtree");
    KV("objective", "reg:squarederror");
    KV("tree_method", "exact");
    KV("num_parallel_tree", "%d", p->n_estimators);
    KV("eta", "1");
    KV("lambda", "0");
    KV("alpha", "0");
    KV("gamma", "0");
    KV("base_score", "0");
    KV("max_depth", "%ld", depth);
    KV("min_child_weight", "%d", mcw);
    KV("subsample", "%s", p->bootstrap ? "0.632" : "1");
    if (k >= d)
        KV("colsample_bynode", "1");
    else
        KV("colsample_bynode", "%.9g", ((double)k + 0.5) / (double)d);
    KV("seed", "%d", xgb_seed(seed));
    if (n_threads > 0)
        KV("nthread", "%d", n_threads);
#undef KV

    kace_status st = KACE_OK;
    for (int i = 0; i < nkv; i++) {
        if (XGBoosterSetParam(b, kv[i].name, kv[i].value) != 0) {
            snprintf(buf, sizeof buf, "XGBoosterSetParam(%s)", kv[i].name);
            st = xgb_fail(ctx, buf);
            goto cleanup;
        }
    }
    if (XGBoosterUpdateOneIter(b, 0, dtrain) != 0) {
        st = xgb_fail(ctx, "XGBoosterUpdateOneIter");
        goto cleanup;
    }
    *out = b;
    b = NULL;
cleanup:
    if (b)
        XGBoosterFree(b);
    return st;
}

/* Predicts the rows of dmat into pred (n values). */
static kace_status booster_predict(kace_ctx *ctx, BoosterHandle b, DMatrixHandle dmat, size_t n,
                                   double *pred)
{
    static const char config[] =
        "{\"type\": 0, \"training\": false, \"iteration_begin\": 0, \"iteration_end\": 0, "
        "\"strict_shape\": false}";
    const bst_ulong *shape = NULL;
    bst_ulong dim = 0;
    const float *res = NULL;
    if (XGBoosterPredictFromDMatrix(b, dmat, config, &shape, &dim, &res) != 0)
        return xgb_fail(ctx, "XGBoosterPredictFromDMatrix");
    bst_ulong total = 1;
    for (bst_ulong i = 0; i < dim; i++)
        total *= shape[i];
    if (dim < 1 || total != (bst_ulong)n)
        return kace_fail(ctx, KACE_ERR_MODEL, "random forest: xgboost returned %llu predictions for %zu rows",
                         (unsigned long long)total, n);
    for (size_t i = 0; i < n; i++)
        pred[i] = (double)res[i];
    return KACE_OK;
}

/* Serializes b as JSON into m->booster_json. */
static kace_status save_json(kace_ctx *ctx, BoosterHandle b, kace_model *m)
{
    bst_ulong len = 0;
    const char *data = NULL;
    if (XGBoosterSaveModelToBuffer(b, "{\"format\": \"json\"}", &len, &data) != 0)
        return xgb_fail(ctx, "XGBoosterSaveModelToBuffer");
    char *json = malloc((size_t)len + 1);
    if (!json)
        return kace_fail(ctx, KACE_ERR_NOMEM, "random forest: out of memory for a %llu-byte model",
                         (unsigned long long)len);
    memcpy(json, data, (size_t)len);
    json[len] = '\0';
    free(m->booster_json);
    m->booster_json = json;
    m->booster_json_len = (size_t)len;
    return KACE_OK;
}

/* ------------------------------------------------------------ backend for model.c */

void kace_forest_release(kace_model *m)
{
    if (!m)
        return;
    if (m->booster)
        XGBoosterFree((BoosterHandle)m->booster);
    m->booster = NULL;
    free(m->booster_json);
    m->booster_json = NULL;
    m->booster_json_len = 0;
    kace_trees_free(&m->trees);
}

/* A model read from a file: its trees are checked and evaluated by kace
 * itself; xgboost never sees the buffer (it trusts it blindly). */
kace_status kace_forest_restore(kace_ctx *ctx, kace_model *m)
{
    if (!m)
        return kace_fail(ctx, KACE_ERR_MODEL, "random forest: no model");
    kace_trees_free(&m->trees);
    return kace_trees_from_json(ctx, m->booster_json, m->booster_json_len, m->n_features, &m->trees);
}

const kace_model_ops kace_forest_model_ops = {
    .restore = kace_forest_restore,
    .release = kace_forest_release,
    .predict_z = kace_forest_predict_z,
};

/* xgboost already divided each leaf by the number of parallel trees, so the
 * sum of the leaves is the forest's mean. */
kace_status kace_forest_predict_z(kace_ctx *ctx, const kace_model *m, const double *Z, size_t n, double *pred_z)
{
    if (!m || m->kind != KACE_MODEL_FOREST || m->trees.n_trees < 1)
        return kace_fail(ctx, KACE_ERR_MODEL, "random forest: model has no trees");
    for (size_t i = 0; i < n; i++)
        pred_z[i] = kace_trees_predict(&m->trees, Z + i * (size_t)m->n_features);
    return KACE_OK;
}

static kace_status prepare(kace_ctx *ctx, const kace_feature_set *fs, const double *X, const double *y,
                           size_t n, kace_model **mout, double **Zout, double **yzout)
{
    *mout = NULL;
    *Zout = NULL;
    *yzout = NULL;
    int d = fs->n;
    kace_model *m = calloc(1, sizeof *m);
    double *Z = malloc(n * (size_t)d * sizeof *Z);
    double *yz = malloc(n * sizeof *yz);
    if (!m || !Z || !yz) {
        free(m);
        free(Z);
        free(yz);
        return kace_fail(ctx, KACE_ERR_NOMEM, "random forest: out of memory for %zu rows", n);
    }
    kace_model_set_kind(m, KACE_MODEL_FOREST);
    m->features = fs;
    m->metrics = kace_feature_set_metrics(fs);
    m->n_features = d;
    m->n_fit = n;
    kace_column_stats(X, n, d, m->x_mean, m->x_std);
    kace_zscore(X, n, d, m->x_mean, m->x_std, Z);
    kace_column_stats(y, n, 1, &m->y_mean, &m->y_std);
    if (!(m->y_std > 0)) { /* as the linear model */
        free(m);
        free(Z);
        free(yz);
        return kace_fail(ctx, KACE_ERR_MODEL, "every fitting row has the same label: nothing to learn");
    }
    kace_zscore(y, n, 1, &m->y_mean, &m->y_std, yz);
    *mout = m;
    *Zout = Z;
    *yzout = yz;
    return KACE_OK;
}

/* Fits the forest on all of Z, yz into m (booster and JSON). */
static kace_status fit_into(kace_ctx *ctx, kace_model *m, const double *Z, const double *yz, size_t n,
                            const kace_forest_params *p, uint64_t seed, int n_threads)
{
    int d = m->n_features;
    kace_status st = KACE_OK;
    DMatrixHandle dm = NULL;
    BoosterHandle b = NULL;
    float *fbuf = malloc(n * (size_t)d * sizeof *fbuf);
    float *lbuf = malloc(n * sizeof *lbuf);
    if (!fbuf || !lbuf) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "random forest: out of memory for %zu rows", n);
        goto cleanup;
    }
    st = make_dmatrix(ctx, Z, yz, NULL, n, d, fbuf, lbuf, &dm);
    if (st != KACE_OK)
        goto cleanup;
    st = train_booster(ctx, dm, n, d, p, seed, n_threads, &b);
    if (st != KACE_OK)
        goto cleanup;
    st = save_json(ctx, b, m);
    if (st != KACE_OK)
        goto cleanup;
    /* From here on the model predicts with its own copy of the trees. */
    kace_trees_free(&m->trees);
    st = kace_trees_from_json(ctx, m->booster_json, m->booster_json_len, m->n_features, &m->trees);
    if (st != KACE_OK)
        goto cleanup;
    m->forest = *p;
cleanup:
    if (b)
        XGBoosterFree(b);
    if (dm)
        XGDMatrixFree(dm);
    free(fbuf);
    free(lbuf);
    return st;
}

kace_status kace_model_fit_forest(kace_ctx *ctx, const kace_feature_set *fs, const double *X,
                                  const double *y, size_t n, const kace_forest_params *params,
                                  uint64_t seed, int n_threads, kace_model **out)
{
    kace_status st = check_inputs(ctx, fs, X, y, n, out);
    if (st != KACE_OK)
        return st;
    st = check_params(ctx, params);
    if (st != KACE_OK)
        return st;
    kace_model *m = NULL;
    double *Z = NULL, *yz = NULL;
    st = prepare(ctx, fs, X, y, n, &m, &Z, &yz);
    if (st != KACE_OK)
        goto cleanup;
    st = fit_into(ctx, m, Z, yz, n, params, seed, n_threads);
    if (st != KACE_OK)
        goto cleanup;
    *out = m;
    m = NULL;
cleanup:
    if (m) {
        kace_forest_release(m);
        free(m);
    }
    free(Z);
    free(yz);
    return st;
}

/* ------------------------------------------------------------ randomized search */

/* The Xu et al. grid, as the KACE artifact ran it. */
static const int grid_n_estimators[] = {200, 400, 600, 800, 1000, 1200, 1400, 1600, 1800, 2000};
static const int grid_max_features[] = {0, 1};                  /* sqrt, log2 */
static const int grid_max_depth[] = {10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 0};
static const int grid_min_samples_split[] = {2, 5, 10};
static const int grid_min_samples_leaf[] = {1, 2, 4};
static const int grid_bootstrap[] = {1, 0};
#define GRID_LEN(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define GRID_SIZE                                                                           \
    (GRID_LEN(grid_n_estimators) * GRID_LEN(grid_max_features) * GRID_LEN(grid_max_depth) * \
     GRID_LEN(grid_min_samples_split) * GRID_LEN(grid_min_samples_leaf) * GRID_LEN(grid_bootstrap))

/* Grid point number idx (mixed radix, bootstrap fastest). */
static kace_forest_params grid_point(int idx)
{
    kace_forest_params p;
    p.bootstrap = grid_bootstrap[idx % GRID_LEN(grid_bootstrap)];
    idx /= GRID_LEN(grid_bootstrap);
    p.min_samples_leaf = grid_min_samples_leaf[idx % GRID_LEN(grid_min_samples_leaf)];
    idx /= GRID_LEN(grid_min_samples_leaf);
    p.min_samples_split = grid_min_samples_split[idx % GRID_LEN(grid_min_samples_split)];
    idx /= GRID_LEN(grid_min_samples_split);
    p.max_depth = grid_max_depth[idx % GRID_LEN(grid_max_depth)];
    idx /= GRID_LEN(grid_max_depth);
    p.max_features = grid_max_features[idx % GRID_LEN(grid_max_features)];
    idx /= GRID_LEN(grid_max_features);
    p.n_estimators = grid_n_estimators[idx % GRID_LEN(grid_n_estimators)];
    return p;
}

/* The paper's grid point with n_estimators multiplied by tree_scale (rounded,
 * at least 1 tree); tree_scale 1 is the paper's grid. */
static kace_forest_params scaled_grid_point(int idx, double tree_scale)
{
    kace_forest_params p = grid_point(idx);
    if (tree_scale != 1.0) {
        long t = lround((double)p.n_estimators * tree_scale);
        p.n_estimators = t < 1 ? 1 : (int)t;
    }
    return p;
}

/* The search with every n_estimators of the grid scaled by tree_scale (in
 * (0, 1]; the public entry point uses 1, the paper's grid). Measured on the
 * 45 paper-mode Xu train sets of the KACE data (22..97 rows): mean normalized
 * throughput 0.856 with the paper's 200..2000 trees, 0.853 with 0.1 and 0.858
 * with 0.05 (10..100 trees), in 207 s, 15 s and 6 s on 2 busy cores. */
static kace_status forest_search(kace_ctx *ctx, const kace_feature_set *fs, const double *X,
                                 const double *y, size_t n, const kace_forest_search *search,
                                 double tree_scale, kace_forest_params *best, kace_model **out)
{
    kace_status st = check_inputs(ctx, fs, X, y, n, out);
    if (st != KACE_OK)
        return st;
    if (!search)
        return kace_fail(ctx, KACE_ERR_INVALID, "random forest search: no search settings given");
    if (search->n_iter < 1)
        return kace_fail(ctx, KACE_ERR_INVALID, "random forest search: n_iter must be >= 1, got %d",
                         search->n_iter);
    if (search->n_folds < 2)
        return kace_fail(ctx, KACE_ERR_INVALID, "random forest search: n_folds must be >= 2, got %d",
                         search->n_folds);
    if (search->n_threads < 0)
        return kace_fail(ctx, KACE_ERR_INVALID, "random forest search: n_threads must be >= 0, got %d",
                         search->n_threads);
    if (!(tree_scale > 0.0 && tree_scale <= 1.0))
        return kace_fail(ctx, KACE_ERR_INVALID, "random forest search: tree scale must be in (0, 1], got %g",
                         tree_scale);

    int d = fs->n;
    size_t k = (size_t)search->n_folds < n ? (size_t)search->n_folds : n;
    int n_iter = search->n_iter < GRID_SIZE ? search->n_iter : GRID_SIZE;

    kace_model *m = NULL;
    double *Z = NULL, *yz = NULL, *pred = NULL;
    size_t *perm = NULL, *train_rows = NULL;
    int *cand = NULL;
    float *fbuf = NULL, *lbuf = NULL;
    DMatrixHandle *dtrain = NULL, *dtest = NULL;
    size_t *fold_start = NULL;
    BoosterHandle b = NULL;

    st = prepare(ctx, fs, X, y, n, &m, &Z, &yz);
    if (st != KACE_OK)
        goto cleanup;
    perm = malloc(n * sizeof *perm);
    train_rows = malloc(n * sizeof *train_rows);
    cand = malloc(GRID_SIZE * sizeof *cand);
    fbuf = malloc(n * (size_t)d * sizeof *fbuf);
    lbuf = malloc(n * sizeof *lbuf);
    pred = malloc(n * sizeof *pred);
    dtrain = calloc(k, sizeof *dtrain);
    dtest = calloc(k, sizeof *dtest);
    fold_start = malloc((k + 1) * sizeof *fold_start);
    if (!perm || !train_rows || !cand || !fbuf || !lbuf || !pred || !dtrain || !dtest || !fold_start) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "random forest search: out of memory for %zu rows", n);
        goto cleanup;
    }

    /* Configurations: the first n_iter of a partial Fisher-Yates shuffle of the grid. */
    uint64_t rng = search->seed;
    for (int i = 0; i < GRID_SIZE; i++)
        cand[i] = i;
    for (int i = 0; i < n_iter; i++) {
        int j = i + (int)rand_below(&rng, (uint64_t)(GRID_SIZE - i));
        int t = cand[i];
        cand[i] = cand[j];
        cand[j] = t;
    }
    /* Folds: contiguous blocks of a shuffled row order; the first n % k folds
     * have one row more (as scikit-learn's KFold). */
    for (size_t i = 0; i < n; i++)
        perm[i] = i;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)rand_below(&rng, (uint64_t)i + 1);
        size_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    fold_start[0] = 0;
    for (size_t f = 0; f < k; f++)
        fold_start[f + 1] = fold_start[f] + n / k + (f < n % k ? 1 : 0);
    for (size_t f = 0; f < k; f++) {
        size_t a = fold_start[f], e = fold_start[f + 1], nt = 0;
        for (size_t i = 0; i < n; i++)
            if (i < a || i >= e)
                train_rows[nt++] = perm[i];
        st = make_dmatrix(ctx, Z, yz, train_rows, nt, d, fbuf, lbuf, &dtrain[f]);
        if (st != KACE_OK)
            goto cleanup;
        st = make_dmatrix(ctx, Z, yz, perm + a, e - a, d, fbuf, lbuf, &dtest[f]);
        if (st != KACE_OK)
            goto cleanup;
    }

    int best_i = -1;
    double best_mse = INFINITY;
    for (int c = 0; c < n_iter; c++) {
        kace_forest_params p = scaled_grid_point(cand[c], tree_scale);
        double sum_mse = 0.0;
        for (size_t f = 0; f < k; f++) {
            size_t a = fold_start[f], e = fold_start[f + 1];
            st = train_booster(ctx, dtrain[f], n - (e - a), d, &p, search->seed, search->n_threads, &b);
            if (st != KACE_OK)
                goto cleanup;
            st = booster_predict(ctx, b, dtest[f], e - a, pred);
            if (st != KACE_OK)
                goto cleanup;
            XGBoosterFree(b);
            b = NULL;
            double se = 0.0;
            for (size_t i = a; i < e; i++) {
                double r = pred[i - a] - yz[perm[i]];
                se += r * r;
            }
            sum_mse += se / (double)(e - a);
        }
        double mse = sum_mse / (double)k;
        if (mse < best_mse || best_i < 0) {
            best_mse = mse;
            best_i = c;
        }
    }

    kace_forest_params bp = scaled_grid_point(cand[best_i], tree_scale);
    st = fit_into(ctx, m, Z, yz, n, &bp, search->seed, search->n_threads);
    if (st != KACE_OK)
        goto cleanup;
    if (best)
        *best = bp;
    kace_log(ctx, KACE_LOG_DEBUG,
             "random forest search: %d configurations, %zu folds, best CV MSE %.6g with n_estimators=%d "
             "max_features=%d max_depth=%d min_samples_split=%d min_samples_leaf=%d bootstrap=%d",
             n_iter, k, best_mse, bp.n_estimators, bp.max_features, bp.max_depth, bp.min_samples_split,
             bp.min_samples_leaf, bp.bootstrap);
    *out = m;
    m = NULL;
cleanup:
    if (b)
        XGBoosterFree(b);
    for (size_t f = 0; dtrain && f < k; f++)
        if (dtrain[f])
            XGDMatrixFree(dtrain[f]);
    for (size_t f = 0; dtest && f < k; f++)
        if (dtest[f])
            XGDMatrixFree(dtest[f]);
    if (m) {
        kace_forest_release(m);
        free(m);
    }
    free(Z);
    free(yz);
    free(pred);
    free(perm);
    free(train_rows);
    free(cand);
    free(fbuf);
    free(lbuf);
    free(dtrain);
    free(dtest);
    free(fold_start);
    return st;
}

kace_status kace_model_fit_forest_search(kace_ctx *ctx, const kace_feature_set *fs, const double *X,
                                         const double *y, size_t n, const kace_forest_search *search,
                                         kace_forest_params *best, kace_model **out)
{
    double scale = search && search->tree_scale > 0 ? search->tree_scale : 1.0;
    return forest_search(ctx, fs, X, y, n, search, scale, best, out);
}
