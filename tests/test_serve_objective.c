/* What `kace serve` ranks by (the "objective" of /v1/predict, /v1/partners
 * and /v1/place, and kace serve --objective): on the V100 reference store,
 * a partner request under each objective answers the library's ranking
 * under it (kace_rank_partners_by, on the full dataset), and the raw and
 * normalized rankings are not the same; /v1/predict answers
 * kace_predict_objective and the mean of kace_objective_measured over the
 * stored runs; /v1/place scores by kace_place_gain_by; an unknown objective
 * is a 400 naming the accepted ones; the advisor's default applies to
 * requests without one; and the reply cache keeps objectives apart. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "kace/import.h"
#include "kace/place.h"
#include "kace/policy.h"
#include "kace/serve.h"
#include "kace/store.h"
#include "testutil.h"

static kace_ctx *ctx;
static kace_advisor *adv;      /* slowdown model, no default objective */
static kace_advisor *adv_norm; /* the same, kace serve --objective normalized */
static kace_advisor *adv_lin;  /* the paper's linear model: sums only */

static const char *BERT8 = "bert-base-cased_batch8-train";
static const char *VIT2 = "vit-base-patch16-224_batch2-inf";
static const char *WHISPER8 = "whisper-large-v2_batch8-inf";

static kace_advisor *make_advisor(kace_store *store, kace_model_kind kind, int objective)
{
    kace_dataset *pairs = NULL, *all = NULL;
    kace_model *m = NULL;
    kace_advisor *a = NULL;
    kace_advisor_options opt;
    kace_advisor_options_default(&opt);
    opt.objective = objective;
    kace_fit_spec spec = {.kind = kind, .features = kace_feature_set_find("kace")};
    kace_slowdown_params_default(&spec.slowdown);
    if (kace_store_load_dataset(ctx, store, "pairs", false, &pairs) ||
        kace_model_fit_rows(ctx, pairs, NULL, 0, &spec, &m) ||
        kace_store_load_dataset(ctx, store, NULL, false, &all) || kace_advisor_new(ctx, &all, &m, &opt, &a))
        a = NULL;
    kace_dataset_free(&pairs);
    kace_dataset_free(&all);
    kace_model_free(&m);
    return a;
}

static int setup(void **state)
{
    (void)state;
    ctx = kace_ctx_new();
    char db[4200];
    snprintf(db, sizeof db, "%s/store.db", scratch_dir("test_serve_objective"));
    kace_store *store = NULL;
    if (kace_store_open(ctx, db, &store))
        return -1;
    static const char *const files[] = {"profiles/system.csv", "profiles/exclusive_by_mps_pct.csv",
                                        "colocations/pairs.csv", "colocations/triples.csv"};
    if (import_reference(ctx, store, files, sizeof files / sizeof *files)) {
        fprintf(stderr, "%s\n", kace_errmsg(ctx));
        return -1;
    }
    adv = make_advisor(store, KACE_MODEL_SLOWDOWN, -1);
    adv_norm = make_advisor(store, KACE_MODEL_SLOWDOWN, KACE_OBJ_NORMALIZED);
    adv_lin = make_advisor(store, KACE_MODEL_LINEAR, -1);
    kace_store_close(&store);
    if (!adv || !adv_norm || !adv_lin) {
        fprintf(stderr, "setup: %s\n", kace_errmsg(ctx));
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kace_advisor_free(&adv);
    kace_advisor_free(&adv_norm);
    kace_advisor_free(&adv_lin);
    kace_ctx_free(&ctx);
    return 0;
}

/* The reply text (cache NULL: computed); checks the status. */
static char *answer(const kace_advisor *a, kace_reply_cache *cache, kace_route route, const char *body,
                    int want_status)
{
    kace_reply r;
    kace_advisor_handle_cached(ctx, a, cache, NULL, 0, route, body, strlen(body), &r);
    assert_non_null(r.body);
    if (r.http_status != want_status)
        fail_msg("%s %s: status %d (want %d): %s", kace_route_name(route), body, r.http_status, want_status, r.body);
    char *text = r.body;
    r.body = NULL;
    kace_reply_clear(&r);
    return text;
}

static cJSON *ask(const kace_advisor *a, kace_route route, const char *body, int want_status)
{
    char *text = answer(a, NULL, route, body, want_status);
    cJSON *j = cJSON_Parse(text);
    assert_non_null(j);
    free(text);
    return j;
}

static const cJSON *item(const cJSON *o, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!it)
        fail_msg("no '%s'", key);
    return it;
}

/* A JSON number or null as the double it stands for (null: NaN). */
static double value(const cJSON *o, const char *key)
{
    const cJSON *it = item(o, key);
    if (cJSON_IsNull(it))
        return NAN;
    if (!cJSON_IsNumber(it))
        fail_msg("'%s' is neither a number nor null", key);
    return it->valuedouble;
}

/* Equal to the last bit (the reply prints %.17g), or both NaN. */
static void assert_same(double want, double got, const char *what)
{
    if ((isnan(want) && isnan(got)) || memcmp(&want, &got, sizeof want) == 0)
        return;
    fail_msg("%s: want %.17g, got %.17g", what, want, got);
}

/* Checks the reply j against the library's ranking of target under o over
 * every workload (all of it: top 0). Returns the best partner. */
static int check_ranking(const cJSON *j, int target, kace_objective o)
{
    const kace_dataset *ds = kace_advisor_dataset(adv);
    kace_partner *want = calloc(ds->n_workloads, sizeof *want);
    size_t n = 0;
    assert_non_null(want);
    assert_kace_ok(ctx, kace_rank_partners_by(ctx, ds, kace_advisor_predictor(adv), KACE_NORM_TRAIN, o, target, NULL,
                                              0, want, &n));
    assert_true(n > 10);
    assert_string_equal(item(j, "objective")->valuestring, kace_objective_name(o));
    const cJSON *list = item(j, "partners");
    assert_int_equal(cJSON_GetArraySize(list), (int)n);
    bool raw = o == KACE_OBJ_RAW;
    size_t measured = 0;
    for (size_t i = 0; i < n; i++) {
        const cJSON *p = cJSON_GetArrayItem(list, (int)i);
        assert_string_equal(item(p, "workload")->valuestring, ds->workloads[want[i].workload].name);
        assert_same(want[i].predicted, value(p, raw ? "predicted_sum" : "predicted"), "predicted");
        assert_same(want[i].measured, value(p, raw ? "measured_sum" : "measured"), "measured");
        assert_same(want[i].confidence, value(p, "confidence"), "confidence");
        /* no field names a sum that is not one */
        assert_null(cJSON_GetObjectItemCaseSensitive(p, raw ? "predicted" : "predicted_sum"));
        measured += !isnan(want[i].measured);
    }
    assert_true(measured >= 1);
    int best = want[0].workload;
    free(want);
    return best;
}

static void test_partners_under_each_objective(void **state)
{
    (void)state;
    const kace_dataset *ds = kace_advisor_dataset(adv);
    char body[256];
    int raw_differs = 0;
    /* a few targets; the raw and normalized choices must differ somewhere:
     * rates a thousandfold apart make raw pick the fastest partner */
    const char *targets[] = {BERT8, VIT2, WHISPER8};
    for (size_t t = 0; t < sizeof targets / sizeof *targets; t++) {
        int target = kace_dataset_find(ds, targets[t]);
        assert_true(target >= 0);
        int best[KACE_N_OBJECTIVES];
        for (int o = 0; o < KACE_N_OBJECTIVES; o++) {
            snprintf(body, sizeof body, "{\"target\": \"%s\", \"objective\": \"%s\"}", targets[t],
                     kace_objective_name((kace_objective)o));
            cJSON *j = ask(adv, KACE_ROUTE_PARTNERS, body, 200);
            best[o] = check_ranking(j, target, (kace_objective)o);
            cJSON_Delete(j);
        }
        /* without the field: raw, as before objectives (kace_rank_partners) */
        snprintf(body, sizeof body, "{\"target\": \"%s\"}", targets[t]);
        cJSON *j = ask(adv, KACE_ROUTE_PARTNERS, body, 200);
        assert_int_equal(check_ranking(j, target, KACE_OBJ_RAW), best[KACE_OBJ_RAW]);
        cJSON_Delete(j);
        raw_differs += best[KACE_OBJ_RAW] != best[KACE_OBJ_NORMALIZED];
    }
    assert_true(raw_differs >= 1);
    /* raw is kace_rank_partners itself */
    int target = kace_dataset_find(ds, BERT8);
    kace_partner *want = calloc(ds->n_workloads, sizeof *want);
    size_t n = 0;
    assert_kace_ok(ctx, kace_rank_partners(ctx, ds, kace_advisor_predictor(adv), KACE_NORM_TRAIN, target, NULL, 0,
                                           want, &n));
    snprintf(body, sizeof body, "{\"target\": \"%s\", \"objective\": \"raw\", \"top\": 3}", BERT8);
    cJSON *j = ask(adv, KACE_ROUTE_PARTNERS, body, 200);
    for (int i = 0; i < 3; i++)
        assert_same(want[i].predicted, value(cJSON_GetArrayItem(item(j, "partners"), i), "predicted_sum"), "raw");
    cJSON_Delete(j);
    free(want);
    /* among, under normalized: only those, by the objective */
    snprintf(body, sizeof body, "{\"target\": \"%s\", \"among\": [\"%s\", \"%s\"], \"objective\": \"normalized\"}",
             BERT8, VIT2, WHISPER8);
    j = ask(adv, KACE_ROUTE_PARTNERS, body, 200);
    const cJSON *list = item(j, "partners");
    assert_int_equal(cJSON_GetArraySize(list), 2);
    assert_true(value(cJSON_GetArrayItem(list, 0), "predicted") >= value(cJSON_GetArrayItem(list, 1), "predicted"));
    cJSON_Delete(j);
}

/* kace serve --objective normalized: requests without the field are ranked
 * under it, and a request's own field still wins. */
static void test_default_objective(void **state)
{
    (void)state;
    const kace_dataset *ds = kace_advisor_dataset(adv);
    int target = kace_dataset_find(ds, BERT8);
    char body[256];
    snprintf(body, sizeof body, "{\"target\": \"%s\"}", BERT8);
    cJSON *j = ask(adv_norm, KACE_ROUTE_PARTNERS, body, 200);
    check_ranking(j, target, KACE_OBJ_NORMALIZED);
    cJSON_Delete(j);
    snprintf(body, sizeof body, "{\"target\": \"%s\", \"objective\": null}", BERT8);
    j = ask(adv_norm, KACE_ROUTE_PARTNERS, body, 200);
    check_ranking(j, target, KACE_OBJ_NORMALIZED);
    cJSON_Delete(j);
    snprintf(body, sizeof body, "{\"target\": \"%s\", \"objective\": \"raw\"}", BERT8);
    j = ask(adv_norm, KACE_ROUTE_PARTNERS, body, 200);
    check_ranking(j, target, KACE_OBJ_RAW);
    cJSON_Delete(j);
    snprintf(body, sizeof body, "{\"workloads\": [\"%s\", \"%s\"]}", BERT8, VIT2);
    j = ask(adv_norm, KACE_ROUTE_PREDICT, body, 200);
    assert_string_equal(item(j, "objective")->valuestring, "normalized");
    cJSON_Delete(j);
    kace_advisor_options opt;
    kace_advisor_options_default(&opt);
    assert_int_equal(opt.objective, -1); /* each endpoint's own, unless kace serve --objective */
}

static void test_predict_under_each_objective(void **state)
{
    (void)state;
    const kace_dataset *ds = kace_advisor_dataset(adv);
    int g[2] = {kace_dataset_find(ds, BERT8), kace_dataset_find(ds, VIT2)};
    char body[256];
    for (int o = 0; o < KACE_N_OBJECTIVES; o++) {
        kace_objective obj = (kace_objective)o;
        snprintf(body, sizeof body, "{\"workloads\": [\"%s\", \"%s\"], \"objective\": \"%s\"}", BERT8, VIT2,
                 kace_objective_name(obj));
        cJSON *j = ask(adv, KACE_ROUTE_PREDICT, body, 200);
        assert_string_equal(item(j, "objective")->valuestring, kace_objective_name(obj));
        double want;
        assert_kace_ok(ctx, kace_predict_objective(ctx, kace_advisor_predictor(adv), ds, g, 2, obj, &want, NULL, NULL));
        assert_float_equal(value(j, "predicted"), want, 1e-12 * fabs(want));
        /* measured: the mean of the objective over this pair's successful all-100% runs */
        double sum = 0;
        int n = 0;
        for (size_t c = 0; c < ds->n_colocations; c++) {
            const kace_colocation *col = &ds->colocations[c];
            if (col->k == 2 && col->status == KACE_RUN_OK && col->mps_pct[0] == 100 && col->mps_pct[1] == 100 &&
                kace_colocation_has(col, g[0]) && kace_colocation_has(col, g[1])) {
                sum += kace_objective_measured(obj, ds, col);
                n++;
            }
        }
        assert_true(n >= 1);
        assert_float_equal(value(j, "measured"), sum / n, 1e-12 * fabs(sum / n));
        cJSON_Delete(j);
    }
    /* a model of sums only has no share to give: null, not a wrong number */
    snprintf(body, sizeof body, "{\"workloads\": [\"%s\", \"%s\"], \"objective\": \"fair\"}", BERT8, VIT2);
    cJSON *j = ask(adv_lin, KACE_ROUTE_PREDICT, body, 200);
    assert_true(cJSON_IsNull(item(j, "predicted")));
    assert_true(cJSON_IsNumber(item(j, "measured")));
    cJSON_Delete(j);
    /* ... and ranks no partners by one (422, naming the objective) */
    snprintf(body, sizeof body, "{\"target\": \"%s\", \"objective\": \"normalized\"}", BERT8);
    char *text = answer(adv_lin, NULL, KACE_ROUTE_PARTNERS, body, 422);
    assert_non_null(strstr(text, "normalized"));
    free(text);
}

static void test_place_under_each_objective(void **state)
{
    (void)state;
    const kace_dataset *ds = kace_advisor_dataset(adv);
    const char *cands[] = {VIT2, WHISPER8, "bert-base-cased_batch2-inf", "albert-base-v2_batch8-train"};
    int job = kace_dataset_find(ds, BERT8);
    for (int o = -1; o < KACE_N_OBJECTIVES; o++) {
        kace_objective obj = o < 0 ? KACE_OBJ_NORMALIZED : (kace_objective)o; /* none: normalized, as before */
        char body[1024];
        int len = snprintf(body, sizeof body, "{\"job\": \"%s\",%s%s%s \"gpus\": [{\"id\": \"empty\"}", BERT8,
                           o < 0 ? "" : " \"objective\": \"", o < 0 ? "" : kace_objective_name(obj), o < 0 ? "" : "\",");
        for (int i = 0; i < 4; i++)
            len += snprintf(body + len, sizeof body - (size_t)len, ", {\"id\": \"g%d\", \"running\": [\"%s\"]}", i,
                            cands[i]);
        snprintf(body + len, sizeof body - (size_t)len, "]}");
        cJSON *j = ask(adv, KACE_ROUTE_PLACE, body, 200);
        assert_string_equal(item(j, "objective")->valuestring, kace_objective_name(obj));
        const cJSON *gpus = item(j, "gpus");
        const char *best = NULL;
        double best_gain = -INFINITY;
        for (int i = 0; i < 5; i++) {
            int resident = i ? kace_dataset_find(ds, cands[i - 1]) : -1;
            kace_gain g;
            assert_kace_ok(ctx, kace_place_gain_by(ctx, kace_advisor_predictor(adv), ds, i ? &resident : NULL,
                                                   i ? 1 : 0, job, obj, &g));
            const cJSON *gpu = cJSON_GetArrayItem(gpus, i);
            assert_float_equal(value(gpu, "gain"), g.gain, 1e-9 * fmax(1, fabs(g.gain)));
            assert_float_equal(value(gpu, "after"), g.after, 1e-9 * fmax(1, fabs(g.after)));
            assert_true((cJSON_GetObjectItemCaseSensitive(gpu, "normalized_after") != NULL) ==
                        (obj == KACE_OBJ_NORMALIZED));
            if (g.gain > best_gain) {
                best_gain = g.gain;
                best = item(gpu, "id")->valuestring;
            }
        }
        assert_string_equal(item(j, "gpu")->valuestring, best);
        cJSON_Delete(j);
    }
}

static void test_bad_objectives(void **state)
{
    (void)state;
    char body[512];
    const char *bad[] = {"\"Normalized\"", "\"throughput\"", "\"\"", "3", "true", "[\"raw\"]", "{}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *bodies[3];
        char b0[256], b1[256], b2[256];
        snprintf(b0, sizeof b0, "{\"target\": \"%s\", \"objective\": %s}", BERT8, bad[i]);
        snprintf(b1, sizeof b1, "{\"workloads\": [\"%s\"], \"objective\": %s}", BERT8, bad[i]);
        snprintf(b2, sizeof b2, "{\"job\": \"%s\", \"gpus\": [{\"id\": \"g\"}], \"objective\": %s}", BERT8, bad[i]);
        bodies[0] = b0;
        bodies[1] = b1;
        bodies[2] = b2;
        const kace_route routes[3] = {KACE_ROUTE_PARTNERS, KACE_ROUTE_PREDICT, KACE_ROUTE_PLACE};
        for (int r = 0; r < 3; r++) {
            char *text = answer(adv, NULL, routes[r], bodies[r], 400);
            assert_non_null(strstr(text, "objective"));
            assert_non_null(strstr(text, "raw"));
            assert_non_null(strstr(text, "normalized"));
            assert_non_null(strstr(text, "fair"));
            free(text);
        }
    }
    /* the cache refuses it the same way */
    kace_reply_cache *cache = NULL;
    assert_kace_ok(ctx, kace_reply_cache_new(ctx, adv, &cache));
    snprintf(body, sizeof body, "{\"target\": \"%s\", \"objective\": \"speed\"}", BERT8);
    char *text = answer(adv, cache, KACE_ROUTE_PARTNERS, body, 400);
    assert_non_null(strstr(text, "'speed'"));
    free(text);
    assert_int_equal(kace_reply_cache_entries(cache), 0);
    kace_reply_cache_free(&cache);
}

/* One cache, one target, every objective in turn, and again: each reply
 * is byte for byte the computed one of its own objective, never another's. */
static void test_cache_keeps_objectives_apart(void **state)
{
    (void)state;
    for (int round = 0; round < 2; round++) {
        const kace_advisor *a = round ? adv_norm : adv;
        kace_reply_cache *cache = NULL;
        assert_kace_ok(ctx, kace_reply_cache_new(ctx, a, &cache));
        char *first[KACE_N_OBJECTIVES] = {NULL};
        for (int pass = 0; pass < 2; pass++)
            for (int o = KACE_N_OBJECTIVES - 1; o >= 0; o--) { /* normalized and fair before raw */
                char body[256];
                snprintf(body, sizeof body, "{\"target\": \"%s\", \"top\": 4, \"objective\": \"%s\"}", BERT8,
                         kace_objective_name((kace_objective)o));
                char *computed = answer(a, NULL, KACE_ROUTE_PARTNERS, body, 200);
                char *cached = answer(a, cache, KACE_ROUTE_PARTNERS, body, 200);
                assert_string_equal(cached, computed);
                if (pass == 0)
                    first[o] = strdup(cached);
                else
                    assert_string_equal(cached, first[o]);
                free(computed);
                free(cached);
            }
        assert_int_equal(kace_reply_cache_entries(cache), KACE_N_OBJECTIVES);
        for (int o = 1; o < KACE_N_OBJECTIVES; o++)
            assert_string_not_equal(first[o], first[0]);
        assert_string_not_equal(first[KACE_OBJ_NORMALIZED], first[KACE_OBJ_FAIR]);
        /* without the field: the advisor's default, from the same entry */
        char body[256];
        snprintf(body, sizeof body, "{\"target\": \"%s\", \"top\": 4}", BERT8);
        char *cached = answer(a, cache, KACE_ROUTE_PARTNERS, body, 200);
        assert_string_equal(cached, first[round ? KACE_OBJ_NORMALIZED : KACE_OBJ_RAW]);
        free(cached);
        assert_int_equal(kace_reply_cache_entries(cache), KACE_N_OBJECTIVES);
        for (int o = 0; o < KACE_N_OBJECTIVES; o++)
            free(first[o]);
        kace_reply_cache_free(&cache);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_partners_under_each_objective),
        cmocka_unit_test(test_default_objective),
        cmocka_unit_test(test_predict_under_each_objective),
        cmocka_unit_test(test_place_under_each_objective),
        cmocka_unit_test(test_bad_objectives),
        cmocka_unit_test(test_cache_keeps_objectives_apart),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
