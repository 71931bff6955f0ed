/* libFuzzer harness for the model text format (lib/model/model.c, and through a
 * "kind forest" model the xgboost booster restore in lib/model/forest.c):
 * kace_model_from_text.
 *
 * Checks, beyond the sanitizers:
 *  - failure: *out is NULL and the message starts "<origin>:" (with
 *    ":<line>:<col>: " for KACE_ERR_PARSE);
 *  - success: a known feature set with its number of features, finite
 *    statistics with y_std > 0 and x_std >= 0, finite coefficients (linear)
 *    or a booster and its JSON (forest);
 *  - one row predicts: for a linear model, a row at the feature means (and
 *    any single row in KACE_NORM_CANDIDATES mode) is z = 0 everywhere, so its
 *    z-prediction is exactly the intercept, and kace_model_predict is
 *    pred_z * y_std + y_mean;
 *  - kace_model_to_text then kace_model_from_text succeeds and gives an equal
 *    model, and writing that one again gives the same text.
 *
 * Known library bug (reported, lib/ not changed here): kace_model_to_text
 * writes the booster with "%.*s", so a booster that xgboost accepted but that
 * holds a NUL byte (UBJSON, or JSON with a NUL inside a string) is cut short
 * and the written model no longer loads. The harness finds it within seconds;
 * A second one: xgboost 1.7 does not check the trees of a loaded booster, so
 * a child index that points back up the tree ("left_children":[0,...]) makes
 * kace_model_predict loop forever (libFuzzer timeout).
 * With KACE_FUZZ_ALLOW_KNOWN=1 in the environment the harness skips the round
 * trip for boosters holding a NUL byte and does not predict with forests, so
 * that fuzzing can go on past both. */
#include <math.h>

#include "fuzz_common.h"
#include "kace/model.h"
#include "model/slowdown.h"

static const char origin[] = "fuzz/model.txt";
static bool allow_known;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *e = getenv("KACE_FUZZ_ALLOW_KNOWN");
    allow_known = e && *e && strcmp(e, "0") != 0;
    return 0;
}

static bool same_double(double a, double b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

static void check_model(const kace_model *m)
{
    const kace_feature_set *fs = kace_model_features(m);
    /* a known set (kace, xu, xu-nvml or one restricted to fewer metrics), within the model's metric set */
    FUZZ_CHECK(fs && fs == kace_feature_set_find(fs->name), "feature set");
    FUZZ_CHECK(kace_model_metrics(m) <= kace_feature_set_metrics(fs), "metric set %d for features %s",
               (int)kace_model_metrics(m), fs->name);
    FUZZ_CHECK(m->n_features == fs->n && fs->n >= 1 && fs->n <= KACE_MAX_FEATURES, "n_features %d", m->n_features);
    double mean, std;
    kace_model_label_stats(m, &mean, &std);
    FUZZ_CHECK(isfinite(mean) && isfinite(std) && std > 0, "label stats %g %g", mean, std);
    for (int j = 0; j < m->n_features; j++)
        FUZZ_CHECK(isfinite(m->x_mean[j]) && isfinite(m->x_std[j]) && m->x_std[j] >= 0, "feature %d stats %g %g", j,
                   m->x_mean[j], m->x_std[j]);
    int n_coef = -1;
    const double *coef = kace_model_coefficients(m, &n_coef);
    if (kace_model_get_kind(m) == KACE_MODEL_LINEAR) {
        FUZZ_CHECK(coef && n_coef == m->n_features + 1, "%d coefficients", n_coef);
        for (int j = 0; j < n_coef; j++)
            FUZZ_CHECK(isfinite(coef[j]), "coefficient %d = %g", j, coef[j]);
    } else if (kace_model_get_kind(m) == KACE_MODEL_SLOWDOWN) {
        FUZZ_CHECK(!coef && n_coef == 0, "a slowdown model with linear coefficients");
        for (int j = 0; j <= m->n_member_features; j++)
            FUZZ_CHECK(isfinite(m->ridge[j]), "ridge coefficient %d = %g", j, m->ridge[j]);
    } else if (kace_model_get_kind(m) == KACE_MODEL_PRESSURE || kace_model_get_kind(m) == KACE_MODEL_STACKED) {
        FUZZ_CHECK(!coef && n_coef == 0 && m->state, "a %s model with coefficients or without its state",
                   kace_model_kind_name(kace_model_get_kind(m)));
    } else {
        FUZZ_CHECK(kace_model_get_kind(m) == KACE_MODEL_FOREST, "kind %d", (int)kace_model_get_kind(m));
        FUZZ_CHECK(!coef && n_coef == 0, "a forest with coefficients");
        FUZZ_CHECK(m->trees.n_trees >= 1 && m->booster_json && m->booster_json_len > 0, "forest without a booster");
    }
}

/* A slowdown model predicts groups: two made-up workloads. */
static void check_slowdown(kace_ctx *ctx, const kace_model *m)
{
    kace_dataset *ds = NULL;
    FUZZ_CHECK(kace_dataset_new(ctx, &ds) == KACE_OK, "dataset");
    int a, b;
    kace_dataset_intern(ctx, ds, "a_batch1-inf", &a);
    kace_dataset_intern(ctx, ds, "b_batch2-train", &b);
    for (int w = 0; w < 2; w++)
        for (int k = 0; k < KACE_N_METRICS; k++)
            ds->workloads[w].metric[k] = 10.0 + 7.0 * w + k;
    int group[2] = {a, b};
    double sum = NAN, conf = NAN, member[2];
    kace_status st = kace_slowdown_predict(ctx, m, ds, group, 2, &sum, &conf, member);
    FUZZ_CHECK(st == KACE_OK, "slowdown predict failed: %s", kace_errmsg(ctx));
    FUZZ_CHECK(isfinite(sum) && sum >= 0 && conf >= 0 && conf <= 1, "sum %g confidence %g", sum, conf);
    double pz;
    FUZZ_CHECK(kace_model_predict_z(ctx, m, ds->workloads[0].metric, 1, KACE_NORM_TRAIN, &pz) == KACE_ERR_MODEL,
               "a slowdown model must refuse feature rows");
    kace_dataset_free(&ds);
}

/* The pressure and stacked models predict groups through their predictor:
 * two made-up workloads, every member's throughput finite and >= 0. */
static void check_group(kace_ctx *ctx, const kace_model *m)
{
    kace_dataset *ds = NULL;
    FUZZ_CHECK(kace_dataset_new(ctx, &ds) == KACE_OK, "dataset");
    int group[2];
    kace_dataset_intern(ctx, ds, "a_batch1-inf", &group[0]);
    kace_dataset_intern(ctx, ds, "b_batch2-train", &group[1]);
    for (int w = 0; w < 2; w++)
        for (int k = 0; k < KACE_N_METRICS; k++)
            ds->workloads[w].metric[k] = 10.0 + 7.0 * w + k;
    double sum = NAN, member[2] = {NAN, NAN};
    kace_status st = kace_predict_group(ctx, kace_model_predictor(m), ds, group, 2, &sum, NULL, member);
    FUZZ_CHECK(st == KACE_OK, "%s predict failed: %s", kace_model_kind_name(m->kind), kace_errmsg(ctx));
    FUZZ_CHECK(isfinite(sum) && sum >= 0 && member[0] >= 0 && member[1] >= 0, "sum %g members %g %g", sum, member[0],
               member[1]);
    kace_dataset_free(&ds);
}

static void check_predict(kace_ctx *ctx, const kace_model *m)
{
    double x[KACE_MAX_FEATURES], pz = NAN, p = NAN;
    memcpy(x, m->x_mean, sizeof x);
    kace_status st = kace_model_predict_z(ctx, m, x, 1, KACE_NORM_TRAIN, &pz);
    FUZZ_CHECK(st == KACE_OK, "predict_z at the means failed: %s", kace_errmsg(ctx));
    st = kace_model_predict(ctx, m, x, 1, KACE_NORM_TRAIN, &p);
    FUZZ_CHECK(st == KACE_OK, "predict at the means failed: %s", kace_errmsg(ctx));
    FUZZ_CHECK(same_double(p, pz * m->y_std + m->y_mean) || (isnan(p) && isnan(pz * m->y_std + m->y_mean)),
               "predict %.17g != predict_z %.17g * %.17g + %.17g", p, pz, m->y_std, m->y_mean);
    if (m->kind == KACE_MODEL_LINEAR)
        FUZZ_CHECK(pz == m->coef[0], "z-prediction at the means %.17g, intercept %.17g", pz, m->coef[0]);
    /* Any single row in candidates mode: every z-score is 0. */
    for (int j = 0; j < m->n_features; j++)
        x[j] = m->x_mean[j] + (double)(j + 1) * 1e3;
    double pc = NAN;
    st = kace_model_predict_z(ctx, m, x, 1, KACE_NORM_CANDIDATES, &pc);
    FUZZ_CHECK(st == KACE_OK, "predict_z (candidates) failed: %s", kace_errmsg(ctx));
    if (m->kind == KACE_MODEL_LINEAR)
        FUZZ_CHECK(pc == m->coef[0], "candidates z-prediction %.17g, intercept %.17g", pc, m->coef[0]);
    /* Zero rows: nothing to do, still fine. */
    st = kace_model_predict_z(ctx, m, x, 0, KACE_NORM_TRAIN, &pc);
    FUZZ_CHECK(st == KACE_OK, "predicting 0 rows failed: %s", kace_errmsg(ctx));
}

static void check_equal(const kace_model *a, const kace_model *b)
{
    FUZZ_CHECK(a->kind == b->kind && a->features == b->features && a->n_features == b->n_features &&
                   a->n_fit == b->n_fit,
               "header differs after a round trip");
    FUZZ_CHECK(same_double(a->y_mean, b->y_mean) && same_double(a->y_std, b->y_std), "y_stats %.17g %.17g -> %.17g %.17g",
               a->y_mean, a->y_std, b->y_mean, b->y_std);
    for (int j = 0; j < a->n_features; j++)
        FUZZ_CHECK(same_double(a->x_mean[j], b->x_mean[j]) && same_double(a->x_std[j], b->x_std[j]),
                   "feature %d stats differ after a round trip", j);
    if (a->kind == KACE_MODEL_LINEAR) {
        for (int j = 0; j <= a->n_features; j++)
            FUZZ_CHECK(same_double(a->coef[j], b->coef[j]), "coef %d: %.17g -> %.17g", j, a->coef[j], b->coef[j]);
    } else if (a->kind != KACE_MODEL_PRESSURE && a->kind != KACE_MODEL_STACKED) { /* those: the text below */
        FUZZ_CHECK(memcmp(&a->forest, &b->forest, sizeof a->forest) == 0, "forest parameters differ");
        FUZZ_CHECK(a->booster_json_len == b->booster_json_len &&
                       memcmp(a->booster_json, b->booster_json, a->booster_json_len) == 0,
                   "booster JSON differs after a round trip (%zu -> %zu bytes)", a->booster_json_len,
                   b->booster_json_len);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kace_ctx *ctx = kace_ctx_new();
    char *copy = fuzz_copy(data, size);
    if (!ctx || !copy) {
        kace_ctx_free(&ctx);
        free(copy);
        return 0;
    }
    kace_model *m = (kace_model *)(uintptr_t)1; /* must be reset even on failure */
    kace_status st = kace_model_from_text(ctx, copy, size, origin, &m);
    if (st != KACE_OK) {
        FUZZ_CHECK(m == NULL, "failure left a model");
        fuzz_check_failure(ctx, st, origin);
        goto done;
    }
    FUZZ_CHECK(m != NULL, "success without a model");
    check_model(m);
    if (!(allow_known && m->kind == KACE_MODEL_FOREST)) {
        if (kace_model_get_kind(m) == KACE_MODEL_SLOWDOWN)
            check_slowdown(ctx, m);
        else if (kace_model_get_kind(m) == KACE_MODEL_PRESSURE || kace_model_get_kind(m) == KACE_MODEL_STACKED)
            check_group(ctx, m);
        else
            check_predict(ctx, m);
    }

    if (allow_known && m->kind == KACE_MODEL_FOREST && memchr(m->booster_json, '\0', m->booster_json_len))
        goto done;
    char *text = NULL;
    st = kace_model_to_text(ctx, m, &text);
    FUZZ_CHECK(st == KACE_OK && text, "to_text failed: %s", kace_errmsg(ctx));
    kace_model *m2 = NULL;
    st = kace_model_from_text(ctx, text, strlen(text), "round-trip", &m2);
    FUZZ_CHECK(st == KACE_OK, "the written model does not parse: %s", kace_errmsg(ctx));
    check_model(m2);
    check_equal(m, m2);
    char *text2 = NULL;
    st = kace_model_to_text(ctx, m2, &text2);
    FUZZ_CHECK(st == KACE_OK && text2, "to_text (again) failed: %s", kace_errmsg(ctx));
    FUZZ_CHECK(strcmp(text, text2) == 0, "writing a re-read model gives different text");
    free(text);
    free(text2);
    kace_model_free(&m2);
done:
    kace_model_free(&m);
    free(copy);
    kace_ctx_free(&ctx);
    return 0;
}
