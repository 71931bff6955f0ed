/* The stacked model (lib/model/stacked.c): each member's prediction lies
 * between the pressure and slowdown models' fitted on the same rows, it
 * predicts groups of any k and gives the slowdown part's confidence, the
 * model file round-trips and names a damaged line, and no row outside the
 * fitting rows reaches the fit (its weight's cross-validation included). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/predictor.h"
#include "kace/store.h"
#include "model/stacked.h"
#include "testutil.h"

static kace_ctx *ctx;
static kace_store *store;
static kace_dataset *pairs;
static int used[64], n_used; /* the workloads of the pairs' colocations */

static int setup(void **state)
{
    (void)state;
    ctx = kace_ctx_new();
    char db[4096];
    snprintf(db, sizeof db, "%s/kace.db", scratch_dir("stacked"));
    if (kace_store_open(ctx, db, &store))
        return -1;
    static const char *const files[] = {"profiles/system.csv", "colocations/pairs.csv"};
    if (import_reference(ctx, store, files, 2))
        return -1;
    if (kace_store_load_dataset(ctx, store, "pairs", false, &pairs))
        return -1;
    for (size_t w = 0; w < pairs->n_workloads && n_used < 64; w++)
        for (size_t i = 0; i < pairs->n_colocations; i++)
            if (kace_colocation_has(&pairs->colocations[i], (int)w)) {
                used[n_used++] = (int)w;
                break;
            }
    return n_used >= 20 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    kace_dataset_free(&pairs);
    kace_store_close(&store);
    kace_ctx_free(&ctx);
    return 0;
}

static kace_model *fit(kace_model_kind kind, const kace_dataset *ds, const int *rows, size_t n)
{
    kace_fit_spec spec = {.kind = kind};
    kace_slowdown_params_default(&spec.slowdown);
    kace_model *m = NULL;
    assert_kace_ok(ctx, kace_model_fit_rows(ctx, ds, rows, n, &spec, &m));
    assert_non_null(m);
    return m;
}

static double predict(const kace_model *m, const int *group, int k, double *member, double *confidence)
{
    double sum;
    assert_kace_ok(ctx, kace_predict_group(ctx, kace_model_predictor(m), pairs, group, k, &sum, confidence, member));
    return sum;
}

/* A member's blended log throughput lies between its parts': every member
 * of every pair and of some triples, the sum the members' sum. */
static void test_blend_lies_between_parts(void **state)
{
    (void)state;
    kace_model *st = fit(KACE_MODEL_STACKED, pairs, NULL, 0), *pr = fit(KACE_MODEL_PRESSURE, pairs, NULL, 0),
               *sd = fit(KACE_MODEL_SLOWDOWN, pairs, NULL, 0);
    assert_int_equal(kace_model_get_kind(st), KACE_MODEL_STACKED);
    assert_string_equal(kace_predictor_name(kace_model_predictor(st)), "stacked");
    double w = kace_stacked_weight(st);
    assert_true(w >= 0 && w <= 1);
    int checked = 0;
    for (int k = 2; k <= 3; k++)
        for (int i = 0; i < n_used; i++)
            for (int j = 0; j < n_used; j += k == 2 ? 1 : 5) {
                int g[3] = {used[i], used[j], used[(i + j + 1) % n_used]};
                double s[3], p[3], d[3], conf_s, conf_d;
                double sum = predict(st, g, k, s, &conf_s);
                predict(pr, g, k, p, NULL);
                predict(sd, g, k, d, &conf_d);
                double total = 0;
                for (int m = 0; m < k; m++) {
                    double lo = fmin(p[m], d[m]), hi = fmax(p[m], d[m]);
                    assert_true(s[m] >= lo * (1 - 1e-12) && s[m] <= hi * (1 + 1e-12));
                    total += s[m];
                    checked++;
                }
                assert_true(fabs(sum - total) <= 1e-9 * total);
                assert_true(conf_s == conf_d);
            }
    assert_true(checked > 2 * n_used * n_used);
    kace_model_free(&st);
    kace_model_free(&pr);
    kace_model_free(&sd);
}

static void test_model_file_round_trip(void **state)
{
    (void)state;
    int rows[80];
    for (int i = 0; i < 80; i++)
        rows[i] = i * (int)pairs->n_colocations / 80;
    kace_model *m = fit(KACE_MODEL_STACKED, pairs, rows, 80), *back = NULL;
    char *text = NULL, *again = NULL;
    assert_kace_ok(ctx, kace_model_to_text(ctx, m, &text));
    assert_non_null(strstr(text, "kind stacked\n"));
    assert_non_null(strstr(text, "kind pressure\n"));
    assert_non_null(strstr(text, "kind slowdown\n"));
    assert_kace_ok(ctx, kace_model_from_text(ctx, text, strlen(text), "test", &back));
    assert_int_equal(kace_model_get_kind(back), KACE_MODEL_STACKED);
    assert_kace_ok(ctx, kace_model_to_text(ctx, back, &again));
    assert_string_equal(text, again);
    for (int i = 0; i < n_used; i++)
        for (int j = 0; j < n_used; j++) {
            double a[2], b[2];
            predict(m, (int[]){used[i], used[j]}, 2, a, NULL);
            predict(back, (int[]){used[i], used[j]}, 2, b, NULL);
            assert_true(a[0] == b[0] && a[1] == b[1]);
        }
    /* A damaged stacked line is named with its file and line. */
    char *bad = strdup(text);
    char *at = strstr(bad, "stacked ");
    assert_non_null(at);
    at[8] = 'x';
    kace_model *none = NULL;
    assert_int_equal(kace_model_from_text(ctx, bad, strlen(bad), "bad.model", &none), KACE_ERR_PARSE);
    assert_null(none);
    assert_non_null(strstr(kace_errmsg(ctx), "bad.model:"));
    assert_non_null(strstr(kace_errmsg(ctx), "stacked"));
    /* A damaged part names the part, at this file's line. */
    memcpy(bad, text, strlen(text));
    at = strstr(bad, "pworkload ");
    assert_non_null(at);
    memcpy(at, "pworkload x", 11);
    int line = 1;
    for (const char *c = bad; c < at; c++)
        line += *c == '\n';
    char where[64];
    snprintf(where, sizeof where, "bad.model:%d:", line);
    assert_int_equal(kace_model_from_text(ctx, bad, strlen(bad), "bad.model", &none), KACE_ERR_PARSE);
    assert_null(none);
    assert_ptr_equal(strstr(kace_errmsg(ctx), where), kace_errmsg(ctx));
    assert_non_null(strstr(kace_errmsg(ctx), "the pressure part: "));
    /* A part of another kind is refused before it is read: no stacked
     * model inside a stacked one. */
    memcpy(bad, text, strlen(text));
    at = strstr(bad, "kind slowdown\n");
    memcpy(at, "kind stacked\n ", 14);
    assert_int_equal(kace_model_from_text(ctx, bad, strlen(bad), "bad.model", &none), KACE_ERR_PARSE);
    assert_null(none);
    assert_non_null(strstr(kace_errmsg(ctx), "expected the slowdown part"));
    /* A truncated file is refused. */
    size_t cut = (size_t)(strstr(text, "kind slowdown") - text) + 3;
    assert_int_equal(kace_model_from_text(ctx, text, cut, "cut.model", &none), KACE_ERR_PARSE);
    assert_null(none);
    free(bad);
    free(text);
    free(again);
    kace_model_free(&m);
    kace_model_free(&back);
}

/* With every other row poisoned (NaN throughputs, which a fit refuses),
 * the model is the same: the weight's inner folds see the fitting rows only. */
static void test_other_rows_never_reach_the_fit(void **state)
{
    (void)state;
    size_t nc = pairs->n_colocations, n_train = 0;
    int *train = malloc(nc * sizeof *train);
    assert_non_null(train);
    for (size_t i = 0; i < nc; i++)
        if (i % 3 != 0)
            train[n_train++] = (int)i;
    kace_dataset poisoned = *pairs;
    poisoned.colocations = malloc(nc * sizeof *poisoned.colocations);
    assert_non_null(poisoned.colocations);
    memcpy(poisoned.colocations, pairs->colocations, nc * sizeof *poisoned.colocations);
    for (size_t i = 0; i < nc; i += 3)
        for (int j = 0; j < poisoned.colocations[i].k; j++)
            poisoned.colocations[i].throughput[j] = NAN;
    kace_model *clean = fit(KACE_MODEL_STACKED, pairs, train, n_train),
               *dirty = fit(KACE_MODEL_STACKED, &poisoned, train, n_train);
    char *a = NULL, *b = NULL;
    assert_kace_ok(ctx, kace_model_to_text(ctx, clean, &a));
    assert_kace_ok(ctx, kace_model_to_text(ctx, dirty, &b));
    assert_string_equal(a, b);
    free(a);
    free(b);
    kace_model_free(&clean);
    kace_model_free(&dirty);
    free(poisoned.colocations);
    free(train);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blend_lies_between_parts),
        cmocka_unit_test(test_model_file_round_trip),
        cmocka_unit_test(test_other_rows_never_reach_the_fit),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
