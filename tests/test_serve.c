/* The advisor behind `kace serve` (lib/serve*.c), without sockets: every
 * endpoint's answers against the library computing the same thing, bad
 * requests, the Kubernetes extender protocol, the metrics text, the MPS
 * split advice against kace_split_advise (split model) and how it and the
 * profile rule do on the published partition campaigns. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "kace/import.h"
#include "kace/policy.h"
#include "kace/serve.h"
#include "kace/store.h"
#include "testutil.h"

static kace_ctx *ctx;
static kace_advisor *adv;      /* slowdown model, every 100% run */
static kace_advisor *adv_lin;  /* the paper's linear model */
static kace_advisor *adv_split; /* slowdown model + the split model fitted on the partition campaigns */
static kace_advisor *adv_coarse; /* adv, with two workloads' curves measured at 10, 30, 50, 70, 90, 100% only */
static const char *const COARSE[2] = {"bert-base-cased_batch8-train", "vit-base-patch16-224_batch2-inf"};
static const char *const SHORT = "whisper-large-v2_batch8-inf"; /* and one at 10, 50, 90, 100% only */
#define N_CAMPAIGNS 4
static const char *const campaigns[N_CAMPAIGNS] = {"partitions_0505_train-inf", "partitions_0520_inf-inf",
                                                   "partitions_0520_train-train", "partitions_0617_train-inf"};
static kace_dataset *campaign_ds[N_CAMPAIGNS]; /* each partition campaign, every split */

static const char *BERT8 = "bert-base-cased_batch8-train";
static const char *VIT2 = "vit-base-patch16-224_batch2-inf";
static const char *WHISPER8 = "whisper-large-v2_batch8-inf";

/* coarse: names (NULL-ended) whose exclusive_mps20/40/60/80 are removed,
 * as kace's device campaign measures the curve. */
static kace_advisor *make_advisor_coarse(kace_store *store, kace_model_kind kind, const char *const *coarse);

static kace_advisor *make_advisor(kace_store *store, kace_model_kind kind)
{
    return make_advisor_coarse(store, kind, NULL);
}

static kace_advisor *make_advisor_coarse(kace_store *store, kace_model_kind kind, const char *const *coarse)
{
    kace_dataset *pairs = NULL, *all = NULL;
    kace_model *m = NULL;
    kace_advisor *a = NULL;
    kace_fit_spec spec = {.kind = kind, .features = kace_feature_set_find("kace")};
    kace_slowdown_params_default(&spec.slowdown);
    if (kace_store_load_dataset(ctx, store, "pairs", false, &pairs) ||
        kace_model_fit_rows(ctx, pairs, NULL, 0, &spec, &m) ||
        kace_store_load_dataset(ctx, store, NULL, false, &all))
        a = NULL;
    for (const char *const *name = coarse; all && name && *name; name++) {
        int w = kace_dataset_find(all, *name);
        for (int pct = 20; w >= 0 && pct < 100; pct += 20)
            all->workloads[w].metric[KACE_M_EXCLUSIVE_MPS10 + pct / 10 - 1] = NAN;
    }
    int short_curve = coarse && all ? kace_dataset_find(all, SHORT) : -1;
    for (int pct = 20; short_curve >= 0 && pct < 90; pct += 10)
        if (pct != 50)
            all->workloads[short_curve].metric[KACE_M_EXCLUSIVE_MPS10 + pct / 10 - 1] = NAN;
    if (all && kace_advisor_new(ctx, &all, &m, NULL, &a))
        a = NULL;
    kace_dataset_free(&all);
    kace_model_free(&m);
    kace_dataset_free(&pairs);
    return a;
}

static int setup(void **state)
{
    (void)state;
    ctx = kace_ctx_new();
    char db[4200];
    snprintf(db, sizeof db, "%s/store.db", scratch_dir("test_serve"));
    kace_store *store = NULL;
    if (kace_store_open(ctx, db, &store))
        return -1;
    static const char *const files[] = {"profiles/system.csv",
                                        "profiles/exclusive_by_mps_pct.csv",
                                        "colocations/pairs.csv",
                                        "colocations/triples.csv",
                                        "colocations/raw/partitions_0505_train-inf.csv",
                                        "colocations/raw/partitions_0520_inf-inf.csv",
                                        "colocations/raw/partitions_0520_train-train.csv",
                                        "colocations/raw/partitions_0617_train-inf.csv"};
    if (import_reference(ctx, store, files, sizeof files / sizeof *files)) {
        fprintf(stderr, "%s\n", kace_errmsg(ctx));
        return -1;
    }
    adv = make_advisor(store, KACE_MODEL_SLOWDOWN);
    adv_lin = make_advisor(store, KACE_MODEL_LINEAR);
    static const char *const coarse[] = {COARSE[0], COARSE[1], NULL};
    adv_coarse = make_advisor_coarse(store, KACE_MODEL_SLOWDOWN, coarse);
    /* as kace serve loads it: every grid of the store's partitions_* sets */
    adv_split = make_advisor(store, KACE_MODEL_SLOWDOWN);
    kace_split_grid *grids = NULL;
    size_t n_grids = 0, *rows = NULL;
    kace_split_model *split = NULL;
    if (adv_split && !kace_split_grids_load(ctx, store, kace_advisor_dataset(adv_split), &grids, &n_grids) &&
        (rows = malloc(n_grids * sizeof *rows))) {
        for (size_t i = 0; i < n_grids; i++)
            rows[i] = i;
        if (!kace_split_fit(ctx, kace_advisor_dataset(adv_split), grids, rows, n_grids, 0, &split))
            kace_advisor_set_split_model(adv_split, &split, n_grids);
    }
    free(rows);
    free(grids);
    if (!adv_split || !kace_advisor_split_model(adv_split, NULL))
        kace_advisor_free(&adv_split);
    bool loaded = true;
    for (int i = 0; i < N_CAMPAIGNS; i++)
        loaded &= kace_store_load_dataset(ctx, store, campaigns[i], true, &campaign_ds[i]) == KACE_OK &&
                  campaign_ds[i]->n_colocations > 0;
    kace_store_close(&store);
    if (!adv || !adv_lin || !adv_split || !adv_coarse || !loaded) {
        fprintf(stderr, "setup: %s\n", kace_errmsg(ctx));
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kace_advisor_free(&adv);
    kace_advisor_free(&adv_lin);
    kace_advisor_free(&adv_split);
    kace_advisor_free(&adv_coarse);
    for (int i = 0; i < N_CAMPAIGNS; i++)
        kace_dataset_free(&campaign_ds[i]);
    kace_ctx_free(&ctx);
    return 0;
}

/* Sends body to route; checks the status; returns the parsed reply. */
static cJSON *ask(const kace_advisor *a, kace_route route, const char *body, int want_status, const char **decision)
{
    kace_reply r;
    kace_status st = kace_advisor_handle(ctx, a, route, body, body ? strlen(body) : 0, &r);
    if (r.http_status != want_status)
        fail_msg("%s %s: status %d (want %d): %s", kace_route_name(route), body ? body : "", r.http_status,
                 want_status, r.body ? r.body : "");
    assert_int_equal(st == KACE_OK, want_status == 200);
    assert_non_null(r.body);
    cJSON *j = cJSON_Parse(r.body);
    assert_non_null(j);
    if (decision)
        *decision = r.decision;
    if (want_status != 200) { /* the error shape */
        cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
        assert_non_null(e);
        assert_int_equal(cJSON_GetObjectItemCaseSensitive(e, "status")->valueint, want_status);
        assert_true(strlen(cJSON_GetObjectItemCaseSensitive(e, "message")->valuestring) > 10);
        assert_null(r.decision);
    }
    kace_reply_clear(&r);
    return j;
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(it))
        fail_msg("no number '%s'", key);
    return it->valuedouble;
}

static const char *error_message(cJSON *j)
{
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "error"), "message")->valuestring;
}

static void test_routes(void **state)
{
    (void)state;
    bool ok;
    assert_int_equal(kace_route_find("POST", "/v1/partners", &ok), KACE_ROUTE_PARTNERS);
    assert_true(ok);
    assert_int_equal(kace_route_find("GET", "/v1/partners", &ok), KACE_ROUTE_PARTNERS);
    assert_false(ok);
    assert_int_equal(kace_route_find("HEAD", "/metrics", &ok), KACE_ROUTE_METRICS);
    assert_true(ok);
    assert_int_equal(kace_route_find("GET", "/v1/partners/x", &ok), KACE_ROUTE_OTHER);
    assert_string_equal(kace_route_name(KACE_ROUTE_K8S_FILTER), "k8s_filter");
}

static void test_predict_matches_the_library(void **state)
{
    (void)state;
    const kace_dataset *ds = kace_advisor_dataset(adv);
    int g[2] = {kace_dataset_find(ds, BERT8), kace_dataset_find(ds, VIT2)};
    assert_true(g[0] >= 0 && g[1] >= 0);
    double sum, conf, member[2];
    assert_kace_ok(ctx, kace_slowdown_predict(ctx, kace_advisor_model(adv), ds, g, 2, &sum, &conf, member));
    char body[512];
    snprintf(body, sizeof body, "{\"Workloads\": [\"%s\", \"%s\"]}", BERT8, VIT2); /* keys ignore case */
    cJSON *j = ask(adv, KACE_ROUTE_PREDICT, body, 200, NULL);
    assert_float_equal(num(j, "predicted_sum"), sum, 1e-9 * sum);
    assert_float_equal(num(j, "confidence"), conf, 1e-12);
    const cJSON *members = cJSON_GetObjectItemCaseSensitive(j, "members");
    assert_int_equal(cJSON_GetArraySize(members), 2);
    double x0 = ds->workloads[g[0]].metric[KACE_M_EXCLUSIVE];
    assert_float_equal(num(cJSON_GetArrayItem(members, 0), "fraction"), member[0] / x0, 1e-12);
    /* this pair was measured: the mean of its 100% runs */
    double measured = 0;
    int n = 0;
    for (size_t c = 0; c < ds->n_colocations; c++)
        if (ds->colocations[c].k == 2 && kace_colocation_has(&ds->colocations[c], g[0]) &&
            kace_colocation_has(&ds->colocations[c], g[1])) {
            measured += kace_colocation_sum(&ds->colocations[c]);
            n++;
        }
    assert_true(n >= 1);
    assert_float_equal(num(j, "measured_sum"), measured / n, 1e-9 * measured);
    cJSON_Delete(j);

    /* alone: its exclusive throughput */
    snprintf(body, sizeof body, "{\"workloads\": [\"%s\"]}", BERT8);
    j = ask(adv, KACE_ROUTE_PREDICT, body, 200, NULL);
    assert_float_equal(num(j, "predicted_sum"), x0, 1e-9);
    cJSON_Delete(j);

    /* the linear model predicts sums only */
    snprintf(body, sizeof body, "{\"workloads\": [\"%s\", \"%s\"]}", BERT8, VIT2);
    j = ask(adv_lin, KACE_ROUTE_PREDICT, body, 200, NULL);
    double xl[KACE_MAX_FEATURES], pl;
    assert_kace_ok(ctx, kace_features_group(ctx, ds, kace_feature_set_find("kace"), g, 2, xl));
    assert_kace_ok(ctx, kace_model_predict(ctx, kace_advisor_model(adv_lin), xl, 1, KACE_NORM_TRAIN, &pl));
    assert_float_equal(num(j, "predicted_sum"), pl, 1e-9 * fabs(pl));
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "normalized")));
    cJSON_Delete(j);
}

static void test_partners_match_the_library(void **state)
{
    (void)state;
    const kace_dataset *ds = kace_advisor_dataset(adv);
    int t = kace_dataset_find(ds, BERT8);
    kace_partner *want = calloc(ds->n_workloads, sizeof *want);
    size_t n = 0;
    assert_kace_ok(ctx, kace_rank_partners(ctx, ds, kace_model_predictor(kace_advisor_model(adv)), KACE_NORM_TRAIN, t, NULL, 0, want, &n));
    assert_true(n > 10);
    char body[256];
    snprintf(body, sizeof body, "{\"target\": \"%s\", \"top\": 5}", BERT8);
    const char *decision = NULL;
    cJSON *j = ask(adv, KACE_ROUTE_PARTNERS, body, 200, &decision);
    assert_string_equal(decision, "kace");
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, "partners");
    assert_int_equal(cJSON_GetArraySize(list), 5);
    for (int i = 0; i < 5; i++) {
        const cJSON *p = cJSON_GetArrayItem(list, i);
        assert_string_equal(cJSON_GetObjectItemCaseSensitive(p, "workload")->valuestring,
                            ds->workloads[want[i].workload].name);
        assert_float_equal(num(p, "predicted_sum"), want[i].predicted, 1e-9 * want[i].predicted);
        if (i)
            assert_true(num(p, "predicted_sum") <= num(cJSON_GetArrayItem(list, i - 1), "predicted_sum"));
    }
    cJSON_Delete(j);
    /* among: only those, best first */
    snprintf(body, sizeof body, "{\"target\": \"%s\", \"among\": [\"%s\", \"%s\"]}", BERT8, VIT2, WHISPER8);
    j = ask(adv, KACE_ROUTE_PARTNERS, body, 200, NULL);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "partners")), 2);
    cJSON_Delete(j);
    free(want);
}

static void test_place_picks_the_largest_gain(void **state)
{
    (void)state;
    const kace_dataset *ds = kace_advisor_dataset(adv);
    const char *cands[] = {VIT2, WHISPER8, "bert-base-cased_batch2-inf", "albert-base-v2_batch8-train"};
    /* every GPU busy with one workload: the best is the partner whose pair gains most */
    char body[1024] = "{\"job\": \"bert-base-cased_batch8-train\", \"gpus\": [";
    for (int i = 0; i < 4; i++)
        snprintf(body + strlen(body), sizeof body - strlen(body), "%s{\"id\": \"g%d\", \"running\": [\"%s\"]}",
                 i ? "," : "", i, cands[i]);
    strcat(body, "]}");
    const char *decision = NULL;
    cJSON *j = ask(adv, KACE_ROUTE_PLACE, body, 200, &decision);
    int job = kace_dataset_find(ds, BERT8), best = -1;
    double best_gain = -INFINITY;
    for (int i = 0; i < 4; i++) {
        int g[2] = {kace_dataset_find(ds, cands[i]), job};
        double sum, conf, member[2];
        assert_kace_ok(ctx, kace_slowdown_predict(ctx, kace_advisor_model(adv), ds, g, 2, &sum, &conf, member));
        double gain = member[0] / ds->workloads[g[0]].metric[KACE_M_EXCLUSIVE] +
                      member[1] / ds->workloads[job].metric[KACE_M_EXCLUSIVE] - 1;
        assert_float_equal(num(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "gpus"), i), "gain"), gain,
                           1e-12);
        if (gain > best_gain) {
            best_gain = gain;
            best = i;
        }
    }
    char want[16];
    snprintf(want, sizeof want, "g%d", best);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "gpu")->valuestring, want);
    assert_string_equal(decision, "kace");
    cJSON_Delete(j);

    /* an empty GPU gains a whole exclusive job; a full one is not eligible */
    snprintf(body, sizeof body,
             "{\"job\": \"%s\", \"max_colocation\": 2, \"gpus\": [{\"id\": \"full\", \"running\": [\"%s\", \"%s\"]},"
             " {\"id\": \"empty\"}, {\"id\": \"shared\", \"running\": [\"%s\"]}]}",
             BERT8, VIT2, WHISPER8, VIT2);
    j = ask(adv, KACE_ROUTE_PLACE, body, 200, NULL);
    const cJSON *gpus = cJSON_GetObjectItemCaseSensitive(j, "gpus");
    assert_false(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(gpus, 0), "eligible")));
    assert_float_equal(num(cJSON_GetArrayItem(gpus, 1), "gain"), 1.0, 1e-12);
    double shared_gain = num(cJSON_GetArrayItem(gpus, 2), "gain");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "gpu")->valuestring, shared_gain > 1 ? "shared" : "empty");
    cJSON_Delete(j);

    /* a shared GPU below min_confidence is not trusted: the empty one wins */
    double conf_shared;
    {
        int g[2] = {kace_dataset_find(ds, VIT2), job};
        double sum, member[2];
        assert_kace_ok(ctx, kace_slowdown_predict(ctx, kace_advisor_model(adv), ds, g, 2, &sum, &conf_shared, member));
    }
    snprintf(body, sizeof body,
             "{\"job\": \"%s\", \"min_confidence\": %.17g, \"gpus\": [{\"id\": \"shared\", \"running\": [\"%s\"]}]}",
             BERT8, fmin(1, conf_shared + 1e-6), VIT2);
    j = ask(adv, KACE_ROUTE_PLACE, body, 200, &decision);
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "gpu")));
    assert_string_equal(decision, "none");
    cJSON_Delete(j);

    /* the linear model cannot say what each member keeps */
    j = ask(adv_lin, KACE_ROUTE_PLACE, body, 422, NULL);
    assert_non_null(strstr(error_message(j), "slowdown"));
    cJSON_Delete(j);
}

static void test_bad_requests(void **state)
{
    (void)state;
    static const struct {
        kace_route route;
        const char *body;
        int status;
        const char *says;
    } cases[] = {
        {KACE_ROUTE_PREDICT, "", 400, "empty"},
        {KACE_ROUTE_PREDICT, "{\"workloads\": [", 400, "request body:1:"},
        {KACE_ROUTE_PREDICT, "{\n  \"workloads\": [\"a\",]\n}", 400, "request body:2:"},
        {KACE_ROUTE_PREDICT, "{} {}", 400, "malformed"},
        {KACE_ROUTE_PREDICT, "[1, 2]", 400, "JSON object"},
        {KACE_ROUTE_PREDICT, "{}", 400, "'workloads' is required"},
        {KACE_ROUTE_PREDICT, "{\"workloads\": \"a\"}", 400, "array"},
        {KACE_ROUTE_PREDICT, "{\"workloads\": [1]}", 400, "workloads[0] must be"},
        {KACE_ROUTE_PREDICT, "{\"workloads\": []}", 400, "1..8"},
        {KACE_ROUTE_PREDICT, "{\"workloads\": [\"no-such-workload\"]}", 422, "unknown workload 'no-such-workload'"},
        {KACE_ROUTE_PREDICT, "{\"workloads\": [\"a\"], \"extra\": 1}", 400, "unknown field 'extra'"},
        {KACE_ROUTE_PARTNERS, "{\"target\": 7}", 400, "target must be"},
        {KACE_ROUTE_PARTNERS, "{\"target\": \"bert-base-cased_batch8-train\", \"top\": -1}", 400, "'top'"},
        {KACE_ROUTE_PARTNERS, "{\"target\": \"bert-base-cased_batch8-train\", \"top\": 1.5}", 400, "integer"},
        {KACE_ROUTE_PARTNERS, "{\"target\": \"bert-base-cased_batch8-train\", \"among\": [\"zz\"]}", 422, "among[0]"},
        {KACE_ROUTE_PLACE, "{\"job\": \"bert-base-cased_batch8-train\", \"gpus\": []}", 400, "gpus"},
        {KACE_ROUTE_PLACE, "{\"job\": \"bert-base-cased_batch8-train\", \"gpus\": [{\"running\": []}]}", 400, "id"},
        {KACE_ROUTE_PLACE, "{\"job\": \"bert-base-cased_batch8-train\", \"gpus\": [5]}", 400, "gpus[0]"},
        {KACE_ROUTE_MPS_SPLIT, "{\"workloads\": [\"bert-base-cased_batch8-train\"]}", 400, "2..8"},
        {KACE_ROUTE_MPS_SPLIT,
         "{\"workloads\": [\"bert-base-cased_batch8-train\", \"bert-base-cased_batch2-inf\"], \"min_fraction\": [2, 0]}",
         400, "min_fraction[0]"},
        {KACE_ROUTE_MPS_SPLIT,
         "{\"workloads\": [\"bert-base-cased_batch8-train\", \"bert-base-cased_batch2-inf\"], \"policy\": \"fast\"}",
         400, "max-sum"},
        {KACE_ROUTE_MPS_SPLIT,
         "{\"workloads\": [\"bert-base-cased_batch8-train\", \"bert-base-cased_batch2-inf\"], \"ls_target\": 1.5}",
         400, "ls_target"},
        {KACE_ROUTE_MPS_SPLIT,
         "{\"workloads\": [\"bert-base-cased_batch8-train\", \"bert-base-cased_batch2-inf\"], \"ls_member\": 2}",
         400, "ls_member"},
        {KACE_ROUTE_MPS_SPLIT,
         "{\"workloads\": [\"bert-base-cased_batch8-train\", \"bert-base-cased_batch2-inf\"], \"objective\": \"sum\"}",
         400, "unknown field 'objective'"},
        {KACE_ROUTE_OBSERVE, "{\"gpu\": \"g\", \"workloads\": [\"bert-base-cased_batch8-train\"], \"throughput\": []}",
         400, "throughput"},
        {KACE_ROUTE_K8S_FILTER, "{\"nodes\": {\"items\": []}}", 400, "pod"},
        {KACE_ROUTE_K8S_FILTER, "{\"pod\": {}}", 400, "nodenames"},
        {KACE_ROUTE_K8S_PRIORITIZE, "{\"pod\": {}, \"nodes\": {\"items\": [{}]}}", 400, "metadata.name"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cJSON *j = ask(adv, cases[i].route, cases[i].body, cases[i].status, NULL);
        if (!strstr(error_message(j), cases[i].says))
            fail_msg("case %zu: '%s' does not say '%s'", i, error_message(j), cases[i].says);
        cJSON_Delete(j);
    }
    /* more than the allowed body */
    size_t big = KACE_SERVE_MAX_BODY_DEFAULT + 1;
    char *body = malloc(big + 1);
    memset(body, ' ', big);
    body[big] = '\0';
    body[0] = '{';
    body[big - 1] = '}';
    cJSON *j = ask(adv, KACE_ROUTE_PREDICT, body, 400, NULL);
    assert_non_null(strstr(error_message(j), "more than"));
    cJSON_Delete(j);
    free(body);
    /* an error body built for the front end */
    char *e = kace_serve_error_json(413, "too \"big\"");
    cJSON *ej = cJSON_Parse(e);
    assert_string_equal(error_message(ej), "too \"big\"");
    cJSON_Delete(ej);
    free(e);
}

/* The split advice against what was measured: for every ordered pair of the
 * partition campaigns measured at every split 10/90 .. 90/10 and at 100/100,
 * the measured value of the advised split under the policy (throughput sum,
 * or the smallest fraction of exclusive throughput), against the best of
 * those ten, a fixed 50/50 split, no split (100/100) and a split picked
 * blindly. The rule is scored out of sample (nothing is fitted); the split
 * model was fitted on these very grids, so its score here is in-sample (its
 * leave-one-pair-out score is tests/test_split.c's). */
typedef struct split_score {
    double pick, half, full, blind;
    int n_pairs, n_no_split;
} split_score;

static split_score score_on_campaigns(const kace_advisor *a, kace_split_policy policy)
{
    split_score sc = {0};
    kace_split_goal goal = {.policy = policy};
    for (int camp = 0; camp < N_CAMPAIGNS; camp++) {
        const kace_dataset *sd = campaign_ds[camp];
        for (size_t c = 0; c < sd->n_colocations; c++) {
            const kace_colocation *first = &sd->colocations[c];
            if (first->k != 2 || first->mps_pct[0] != 50 || first->mps_pct[1] != 50 || first->status != KACE_RUN_OK)
                continue;
            const kace_workload *w0 = &sd->workloads[first->workload[0]], *w1 = &sd->workloads[first->workload[1]];
            double excl[2] = {w0->metric[KACE_M_EXCLUSIVE], w1->metric[KACE_M_EXCLUSIVE]};
            double measured[11]; /* value under the policy at [p / 10]; [10] = 100/100 */
            int have = 0;
            for (int p = 0; p <= 10; p++)
                measured[p] = NAN;
            for (size_t d = 0; d < sd->n_colocations; d++) {
                const kace_colocation *o = &sd->colocations[d];
                if (o->k != 2 || o->workload[0] != first->workload[0] || o->workload[1] != first->workload[1] ||
                    o->status != KACE_RUN_OK || o->mps_pct[0] % 10 != 0 ||
                    (o->mps_pct[0] + o->mps_pct[1] != 100 && o->mps_pct[0] + o->mps_pct[1] != 200))
                    continue;
                int at = o->mps_pct[0] / 10;
                if (isnan(measured[at])) {
                    measured[at] = kace_split_value(&goal, o->throughput, excl, 2, 1);
                    have++;
                }
            }
            if (have != 10 || !isfinite(excl[0] + excl[1]))
                continue;
            char body[512];
            snprintf(body, sizeof body, "{\"workloads\": [\"%s\", \"%s\"], \"policy\": \"%s\"}", w0->name, w1->name,
                     kace_split_policy_name(policy));
            cJSON *j = ask(a, KACE_ROUTE_MPS_SPLIT, body, 200, NULL);
            const cJSON *split = cJSON_GetObjectItemCaseSensitive(j, "split");
            assert_true(cJSON_IsArray(split));
            int p = cJSON_GetArrayItem(split, 0)->valueint, q = cJSON_GetArrayItem(split, 1)->valueint;
            assert_true(p + q == 100 || (p == 100 && q == 100));
            double best = -INFINITY, mean = 0;
            for (int i = 1; i <= 10; i++) {
                best = fmax(best, measured[i]);
                mean += measured[i] / 10;
            }
            if (getenv("KACE_TEST_VERBOSE"))
                printf("  %s + %s: advised %d/%d, measured there %.3f, best %.3f, 50/50 %.3f, 100/100 %.3f\n",
                       w0->name, w1->name, p, q, measured[p / 10], best, measured[5], measured[10]);
            sc.n_no_split += p == 100;
            sc.pick += measured[p / 10] / best;
            sc.half += measured[5] / best;
            sc.full += measured[10] / best;
            sc.blind += mean / best;
            sc.n_pairs++;
            cJSON_Delete(j);
        }
    }
    sc.pick /= sc.n_pairs;
    sc.half /= sc.n_pairs;
    sc.full /= sc.n_pairs;
    sc.blind /= sc.n_pairs;
    return sc;
}

static void test_mps_split_on_the_partition_campaigns(void **state)
{
    (void)state;
    static const kace_split_policy policies[] = {KACE_SPLIT_MAX_SUM, KACE_SPLIT_MAX_MIN};
    for (int model = 0; model < 2; model++)
        for (int p = 0; p < 2; p++) {
            split_score sc = score_on_campaigns(model ? adv_split : adv, policies[p]);
            printf("mps-split, %s, %s, on %d measured pairs (%d advised no split): advised %.3f, 50/50 %.3f, "
                   "100/100 %.3f, a blind pick %.3f of the best measured\n",
                   model ? "split model (in-sample)" : "profile rule", kace_split_policy_name(policies[p]), sc.n_pairs,
                   sc.n_no_split, sc.pick, sc.half, sc.full, sc.blind);
            assert_true(sc.n_pairs >= 100);
            /* the advice beats every fixed choice */
            assert_true(sc.pick > sc.half && sc.pick > sc.full && sc.pick > sc.blind);
        }
}

/* With a split model, the endpoint advises exactly as kace_split_advise
 * does on the same model and candidates (the 9 splits of two, then
 * 100/100), for every policy, and says so. */
static void test_mps_split_model_matches_the_library(void **state)
{
    (void)state;
    const kace_dataset *ds = kace_advisor_dataset(adv_split);
    const kace_split_model *m = kace_advisor_split_model(adv_split, NULL);
    int pcts[10 * 2];
    for (int s = 0; s < 10; s++) {
        pcts[2 * s] = kace_split_grid_pct(s, 0);
        pcts[2 * s + 1] = kace_split_grid_pct(s, 1);
    }
    static const char *const pairs[][2] = {{"bert-base-cased_batch8-train", "vit-base-patch16-224_batch2-inf"},
                                           {"whisper-large-v2_batch8-inf", "bert-base-cased_batch2-inf"},
                                           {"albert-base-v2_batch16-train", "wav2vec2-base-960h_batch2-inf"}};
    static const struct {
        kace_split_policy policy;
        int ls_member;
        double ls_target;
    } goals[] = {{KACE_SPLIT_MAX_SUM, 0, 0.8}, {KACE_SPLIT_MAX_MIN, 0, 0.8}, {KACE_SPLIT_LATENCY, 0, 0.5},
                 {KACE_SPLIT_LATENCY, 0, 0.9}, {KACE_SPLIT_LATENCY, 1, 0.7}};
    int n_checked = 0, n_distinct = 0;
    for (size_t p = 0; p < sizeof pairs / sizeof *pairs; p++) {
        int group[2] = {kace_dataset_find(ds, pairs[p][0]), kace_dataset_find(ds, pairs[p][1])};
        if (group[0] < 0 || group[1] < 0 || !kace_split_workload_ok(ds, group[0]) ||
            !kace_split_workload_ok(ds, group[1]))
            fail_msg("%s + %s: not usable by the split model", pairs[p][0], pairs[p][1]);
        int first_split = -1;
        bool differ = false;
        for (size_t g = 0; g < sizeof goals / sizeof *goals; g++) {
            kace_split_goal goal = {.policy = goals[g].policy, .ls_member = goals[g].ls_member,
                                    .ls_target = goals[g].ls_target};
            size_t choice;
            double pred[10 * 2];
            assert_kace_ok(ctx, kace_split_advise(ctx, m, ds, group, 2, &goal, pcts, 10, &choice, pred));
            char body[512];
            snprintf(body, sizeof body,
                     "{\"workloads\": [\"%s\", \"%s\"], \"policy\": \"%s\", \"ls_member\": %d, \"ls_target\": %g}",
                     pairs[p][0], pairs[p][1], kace_split_policy_name(goal.policy), goal.ls_member, goal.ls_target);
            const char *decision;
            cJSON *j = ask(adv_split, KACE_ROUTE_MPS_SPLIT, body, 200, &decision);
            assert_string_equal(decision, "split-model");
            assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "method")->valuestring, "split-model");
            assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "policy")->valuestring,
                                kace_split_policy_name(goal.policy));
            const cJSON *split = cJSON_GetObjectItemCaseSensitive(j, "split");
            assert_int_equal(cJSON_GetArrayItem(split, 0)->valueint, pcts[2 * choice]);
            assert_int_equal(cJSON_GetArrayItem(split, 1)->valueint, pcts[2 * choice + 1]);
            const cJSON *predicted = cJSON_GetObjectItemCaseSensitive(j, "predicted");
            for (int i = 0; i < 2; i++)
                assert_float_equal(cJSON_GetArrayItem(predicted, i)->valuedouble, pred[2 * choice + i],
                                   1e-9 * pred[2 * choice + i]);
            assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "candidates")), 10);
            if (goal.policy == KACE_SPLIT_LATENCY)
                assert_float_equal(num(j, "ls_margin"), kace_split_model_overshoot(m), 1e-12);
            if (first_split < 0)
                first_split = (int)choice;
            differ |= (int)choice != first_split;
            n_checked++;
            cJSON_Delete(j);
        }
        n_distinct += differ;
    }
    assert_int_equal(n_checked, 15);
    assert_true(n_distinct >= 1); /* the policy matters for some pair */
    /* the advisor without a split model says it used the rule */
    const char *decision;
    cJSON *j = ask(adv, KACE_ROUTE_MPS_SPLIT, "{\"workloads\": [\"bert-base-cased_batch8-train\", "
                   "\"vit-base-patch16-224_batch2-inf\"]}", 200, &decision);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "method")->valuestring, "mps-profile");
    assert_true(strcmp(decision, "mps-profile") == 0 || strcmp(decision, "kace") == 0);
    cJSON_Delete(j);
    j = ask(adv_split, KACE_ROUTE_HEALTH, NULL, 200, NULL);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "mps_split")->valuestring, "split-model");
    assert_true(num(j, "split_grids") >= 200);
    cJSON_Delete(j);
}

/* The profile rule takes a member's curve between its measured shares:
 * with 20/40/60/80% removed, every split is still a candidate, a split at
 * measured shares is predicted as before, and one between them on the
 * line. Before, the splits at unmeasured shares were left out. */
static void test_mps_split_rule_between_measured_shares(void **state)
{
    (void)state;
    char body[256];
    snprintf(body, sizeof body, "{\"workloads\": [\"%s\", \"%s\"]}", COARSE[0], COARSE[1]);
    cJSON *full = ask(adv, KACE_ROUTE_MPS_SPLIT, body, 200, NULL);
    cJSON *coarse = ask(adv_coarse, KACE_ROUTE_MPS_SPLIT, body, 200, NULL);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(coarse, "method")->valuestring, "mps-profile");
    const cJSON *fc = cJSON_GetObjectItemCaseSensitive(full, "candidates");
    const cJSON *cc = cJSON_GetObjectItemCaseSensitive(coarse, "candidates");
    assert_int_equal(cJSON_GetArraySize(cc), cJSON_GetArraySize(fc));
    assert_int_equal(cJSON_GetArraySize(cc), 10); /* 9 splits and 100/100 */
    const kace_dataset *ds = kace_advisor_dataset(adv);
    int checked_between = 0;
    for (int c = 0; c < cJSON_GetArraySize(cc); c++) {
        const cJSON *split = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cc, c), "split");
        const cJSON *pc = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cc, c), "predicted");
        const cJSON *pf = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(fc, c), "predicted");
        for (int i = 0; i < 2; i++) {
            int pct = cJSON_GetArrayItem(split, i)->valueint;
            const cJSON *split_full = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(fc, c), "split");
            assert_int_equal(pct, cJSON_GetArrayItem(split_full, i)->valueint);
            double got = cJSON_GetArrayItem(pc, i)->valuedouble, before = cJSON_GetArrayItem(pf, i)->valuedouble;
            if (pct == 100 || (pct / 10) % 2 == 1) {
                assert_float_equal(got, before, 1e-9 * before);
                continue;
            }
            /* between pct - 10 and pct + 10, both measured: their mean, scaled as the rule scales */
            const double *m = ds->workloads[kace_dataset_find(ds, COARSE[i])].metric;
            double lo = m[KACE_M_EXCLUSIVE_MPS10 + pct / 10 - 2], hi = m[KACE_M_EXCLUSIVE_MPS10 + pct / 10];
            double want = before / m[KACE_M_EXCLUSIVE_MPS10 + pct / 10 - 1] * (lo + hi) / 2;
            if (fabs(got - want) > 1e-9 * want)
                fail_msg("%s at %d%%: %g, expected %g (between %d%% and %d%%)", COARSE[i], pct, got, want, pct - 10,
                         pct + 10);
            checked_between++;
        }
    }
    assert_int_equal(checked_between, 8); /* 20, 40, 60, 80% for each member */
    cJSON_Delete(full);
    cJSON_Delete(coarse);

    /* A curve too short to interpolate (4 shares) still gives the splits at
     * its measured shares, as measured. */
    snprintf(body, sizeof body, "{\"workloads\": [\"%s\", \"%s\"]}", COARSE[0], SHORT);
    full = ask(adv, KACE_ROUTE_MPS_SPLIT, body, 200, NULL);
    coarse = ask(adv_coarse, KACE_ROUTE_MPS_SPLIT, body, 200, NULL);
    fc = cJSON_GetObjectItemCaseSensitive(full, "candidates");
    cc = cJSON_GetObjectItemCaseSensitive(coarse, "candidates");
    assert_int_equal(cJSON_GetArraySize(cc), 4); /* 90/10, 50/50, 10/90 and 100/100 */
    for (int c = 0; c < cJSON_GetArraySize(cc); c++) {
        const cJSON *cand = cJSON_GetArrayItem(cc, c);
        int pct = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cand, "split"), 1)->valueint;
        assert_true(pct == 10 || pct == 50 || pct == 90 || pct == 100);
        const cJSON *match = NULL;
        for (int f = 0; f < cJSON_GetArraySize(fc); f++)
            if (cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(fc, f), "split"), 1)->valueint ==
                pct)
                match = cJSON_GetArrayItem(fc, f);
        assert_non_null(match);
        for (int i = 0; i < 2; i++) {
            double got = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cand, "predicted"), i)->valuedouble;
            double want = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(match, "predicted"), i)->valuedouble;
            assert_float_equal(got, want, 1e-9 * want);
        }
    }
    cJSON_Delete(full);
    cJSON_Delete(coarse);
}

static void test_mps_split_min_fraction(void **state)
{
    (void)state;
    const kace_dataset *ds = kace_advisor_dataset(adv);
    const char *a = "bert-base-cased_batch2-inf", *b = "bert-base-cased_batch8-train";
    double xa = ds->workloads[kace_dataset_find(ds, a)].metric[KACE_M_EXCLUSIVE];
    static const double keep_a[] = {0, 0.5, 0.8, 0.95, 1.0};
    int n_chosen = 0;
    for (size_t t = 0; t < sizeof keep_a / sizeof *keep_a; t++) {
        char body[512];
        snprintf(body, sizeof body, "{\"workloads\": [\"%s\", \"%s\"], \"min_fraction\": [%g, 0]}", a, b, keep_a[t]);
        const char *decision;
        cJSON *j = ask(adv, KACE_ROUTE_MPS_SPLIT, body, 200, &decision);
        /* candidates: the 9 splits of two plus "no split"; the advice is the
         * best one by value (max-sum by default) among those that keep a's share */
        const cJSON *cands = cJSON_GetObjectItemCaseSensitive(j, "candidates");
        assert_int_equal(cJSON_GetArraySize(cands), 10);
        double best = -1;
        const cJSON *best_split = NULL;
        for (const cJSON *c = cands->child; c; c = c->next) {
            double pa = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(c, "predicted"), 0)->valuedouble;
            bool feasible = pa / xa >= keep_a[t];
            assert_int_equal(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "feasible")), feasible);
            assert_float_equal(num(c, "value"), num(c, "predicted_sum"), 0);
            if (feasible && num(c, "value") > best) {
                best = num(c, "value");
                best_split = cJSON_GetObjectItemCaseSensitive(c, "split");
            }
        }
        const cJSON *split = cJSON_GetObjectItemCaseSensitive(j, "split");
        if (best_split) {
            assert_true(cJSON_Compare(split, best_split, true));
            assert_float_equal(num(j, "value"), best, 0);
            assert_true(strcmp(decision, "mps-profile") == 0 || strcmp(decision, "kace") == 0);
            n_chosen++;
        } else {
            assert_true(cJSON_IsNull(split));
            assert_string_equal(decision, "none");
        }
        cJSON_Delete(j);
    }
    assert_true(n_chosen >= 2); /* keeping nothing is always possible */
}

static char *k8s_args(const char *pod_workload, const char *const *node_ann, int n_nodes, bool upper)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *pod = cJSON_AddObjectToObject(root, upper ? "Pod" : "pod");
    cJSON *meta = cJSON_AddObjectToObject(pod, upper ? "Metadata" : "metadata");
    cJSON_AddStringToObject(meta, "name", "job-1");
    if (pod_workload)
        cJSON_AddStringToObject(cJSON_AddObjectToObject(meta, "labels"), "kace.io/workload", pod_workload);
    cJSON *items = cJSON_AddArrayToObject(cJSON_AddObjectToObject(root, upper ? "Nodes" : "nodes"), "items");
    for (int i = 0; i < n_nodes; i++) {
        cJSON *node = cJSON_CreateObject();
        cJSON *nm = cJSON_AddObjectToObject(node, "metadata");
        char name[16];
        snprintf(name, sizeof name, "node%d", i);
        cJSON_AddStringToObject(nm, "name", name);
        if (node_ann[i])
            cJSON_AddStringToObject(cJSON_AddObjectToObject(nm, "annotations"), "kace.io/gpus", node_ann[i]);
        cJSON_AddItemToArray(items, node);
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

static void test_k8s_extender(void **state)
{
    (void)state;
    char full[256], one[256];
    snprintf(full, sizeof full, "{\"gpu0\": [\"%s\", \"%s\", \"%s\"]}", VIT2, WHISPER8, VIT2);
    snprintf(one, sizeof one, "{\"gpu0\": [\"%s\"], \"gpu1\": [\"%s\", \"%s\", \"%s\"]}", VIT2, VIT2, VIT2, VIT2);
    const char *ann[] = {full, one, NULL, "{\"gpu0\": []}", "not json"};
    char *args = k8s_args(BERT8, ann, 5, true);
    const char *decision;
    cJSON *j = ask(adv, KACE_ROUTE_K8S_FILTER, args, 200, &decision);
    assert_string_equal(decision, "kace");
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "nodes"), "items");
    assert_int_equal(cJSON_GetArraySize(items), 2); /* node1 (gpu0 has room) and node3 (empty GPU) */
    assert_string_equal(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(items, 0), "metadata"),
                                         "name")
            ->valuestring,
        "node1");
    /* a full GPU may free if pods are evicted (preemption may help); no kace
     * GPU, or an unreadable annotation, cannot change */
    const cJSON *failed = cJSON_GetObjectItemCaseSensitive(j, "failedNodes");
    const cJSON *unresolvable = cJSON_GetObjectItemCaseSensitive(j, "failedAndUnresolvableNodes");
    assert_int_equal(cJSON_GetArraySize(failed), 1);
    assert_int_equal(cJSON_GetArraySize(unresolvable), 2);
    assert_non_null(strstr(cJSON_GetObjectItemCaseSensitive(failed, "node0")->valuestring, "full"));
    assert_non_null(strstr(cJSON_GetObjectItemCaseSensitive(unresolvable, "node2")->valuestring, "annotation"));
    assert_non_null(cJSON_GetObjectItemCaseSensitive(unresolvable, "node4"));
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "error")->valuestring, "");
    cJSON_Delete(j);

    j = ask(adv, KACE_ROUTE_K8S_PRIORITIZE, args, 200, NULL);
    assert_int_equal(cJSON_GetArraySize(j), 5);
    double scores[5];
    for (int i = 0; i < 5; i++) {
        const cJSON *h = cJSON_GetArrayItem(j, i);
        scores[i] = num(h, "score");
        assert_true(scores[i] >= 0 && scores[i] <= 10 && scores[i] == floor(scores[i]));
    }
    assert_true(scores[0] == 0 && scores[2] == 0 && scores[4] == 0);
    assert_true(scores[3] == 10); /* an empty GPU keeps the whole job */
    /* node1: the gain of sharing gpu0 with VIT2, times 10 */
    const kace_dataset *ds = kace_advisor_dataset(adv);
    int g[2] = {kace_dataset_find(ds, VIT2), kace_dataset_find(ds, BERT8)};
    double sum, conf, member[2];
    assert_kace_ok(ctx, kace_slowdown_predict(ctx, kace_advisor_model(adv), ds, g, 2, &sum, &conf, member));
    double gain = member[0] / ds->workloads[g[0]].metric[KACE_M_EXCLUSIVE] +
                  member[1] / ds->workloads[g[1]].metric[KACE_M_EXCLUSIVE] - 1;
    assert_float_equal(scores[1], round(10 * fmin(1, fmax(0, gain))), 0);
    cJSON_Delete(j);
    free(args);

    /* a pod kace does not know: no opinion, every node passes, scores 0 */
    args = k8s_args("not-a-kace-workload", ann, 5, false);
    j = ask(adv, KACE_ROUTE_K8S_FILTER, args, 200, &decision);
    assert_string_equal(decision, "none");
    assert_int_equal(
        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "nodes"), "items")), 5);
    cJSON_Delete(j);
    j = ask(adv, KACE_ROUTE_K8S_PRIORITIZE, args, 200, NULL);
    for (int i = 0; i < 5; i++)
        assert_true(num(cJSON_GetArrayItem(j, i), "score") == 0);
    cJSON_Delete(j);
    free(args);

    /* node names only (nodeCacheCapable): passed through */
    j = ask(adv, KACE_ROUTE_K8S_FILTER, "{\"pod\": {}, \"nodenames\": [\"a\", \"b\"]}", 200, NULL);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "nodenames")), 2);
    cJSON_Delete(j);
}

/* Drift: the recent error over the latest observation of each
 * colocation, its prediction then, against the cross-validated error. */
static void test_drift_metrics(void **state)
{
    (void)state;
    kace_serve_metrics *m = NULL;
    assert_kace_ok(ctx, kace_serve_metrics_new(ctx, &m));
    char *text = NULL;
    assert_kace_ok(ctx, kace_serve_metrics_render(ctx, m, NULL, 0, 1000, &text));
    assert_non_null(strstr(text, "kace_model_drift_ratio NaN\n")); /* nothing known yet */
    free(text);
    kace_observation a = {.gpu = "GPU-0", .k = 2, .observed_sum = 100, .predicted_sum = 120, .label = "a+b"};
    kace_observation b = {.gpu = "GPU-0", .k = 2, .observed_sum = 50, .predicted_sum = 45, .label = "a+c"};
    kace_serve_metrics_observe(m, &a);
    kace_serve_metrics_observe(m, &b);
    a.predicted_sum = 110; /* the same colocation again: only its latest counts */
    kace_serve_metrics_observe(m, &a);
    kace_serve_metrics_model_cv_error(m, 5);
    assert_kace_ok(ctx, kace_serve_metrics_render(ctx, m, NULL, 0, 1000, &text));
    /* (10% + 10%) / 2 = 10%; over 5% cross-validated: 2. */
    assert_non_null(strstr(text, "kace_model_cv_error_percent 5\n"));
    assert_non_null(strstr(text, "kace_model_recent_error_percent 10\n"));
    assert_non_null(strstr(text, "kace_model_drift_ratio 2\n"));
    free(text);
    kace_serve_metrics_free(&m);
}

static void test_observations_and_metrics(void **state)
{
    (void)state;
    kace_serve_metrics *m = NULL;
    assert_kace_ok(ctx, kace_serve_metrics_new(ctx, &m));
    char body[512];
    snprintf(body, sizeof body, "{\"gpu\": \"GPU-\\\"x\\\"\", \"workloads\": [\"%s\", \"%s\"], \"throughput\": [20, 30]}",
             BERT8, VIT2);
    kace_reply r;
    assert_kace_ok(ctx, kace_advisor_handle(ctx, adv, KACE_ROUTE_OBSERVE, body, strlen(body), &r));
    assert_true(r.has_observation);
    assert_float_equal(r.observation.observed_sum, 50, 0);
    assert_true(r.observation.predicted_sum > 0);
    kace_serve_metrics_observe(m, &r.observation);
    kace_serve_metrics_observe(m, &r.observation); /* the same colocation again: one series */
    double predicted = r.observation.predicted_sum;
    kace_reply_clear(&r);
    /* where it runs, as DCGM exporter labels it; and a bad one is refused */
    snprintf(body, sizeof body,
             "{\"gpu\": \"GPU-abc\", \"workloads\": [\"%s\"], \"throughput\": [40], \"hostname\": \"node-1\", "
             "\"pod\": \"train-0\", \"namespace\": \"ml\"}",
             BERT8);
    assert_kace_ok(ctx, kace_advisor_handle(ctx, adv, KACE_ROUTE_OBSERVE, body, strlen(body), &r));
    assert_string_equal(r.observation.pod, "train-0");
    kace_serve_metrics_observe(m, &r.observation);
    double solo_error = (r.observation.predicted_sum - 40) / 40;
    kace_reply_clear(&r);
    snprintf(body, sizeof body, "{\"gpu\": \"g\", \"workloads\": [\"%s\"], \"throughput\": [40], \"pod\": 3}", BERT8);
    assert_int_equal(kace_advisor_handle(ctx, adv, KACE_ROUTE_OBSERVE, body, strlen(body), &r), KACE_ERR_INVALID);
    assert_non_null(strstr(kace_errmsg(ctx), "pod must be"));
    kace_reply_clear(&r);
    kace_serve_metrics_set_hostname(m, "node-9");

    kace_serve_metrics_request(m, KACE_ROUTE_PARTNERS, 200, 0.0003);
    kace_serve_metrics_request(m, KACE_ROUTE_PARTNERS, 200, 0.002);
    kace_serve_metrics_request(m, KACE_ROUTE_PARTNERS, 422, 5.0);
    kace_serve_metrics_request(m, KACE_ROUTE_OTHER, 418, 0.001);
    kace_serve_metrics_decision(m, KACE_ROUTE_PLACE, "kace");
    kace_serve_metrics_decision(m, KACE_ROUTE_PLACE, "kace");
    kace_serve_metrics_decision(m, KACE_ROUTE_PLACE, "made-up");
    kace_serve_metrics_model_loaded(m, true, 1000, 400);
    kace_serve_gpu_sample gpus[2] = {{"GPU-0", "Tesla V100", 0.5, 0.25, 0}, {"GPU-1", "Tesla V100", NAN, NAN, 1}};
    char *text = NULL;
    assert_kace_ok(ctx, kace_serve_metrics_render(ctx, m, gpus, 2, 1600, &text));
    static const char *const want[] = {
        "kace_http_requests_total{endpoint=\"partners\",code=\"200\"} 2\n",
        "kace_http_requests_total{endpoint=\"partners\",code=\"422\"} 1\n",
        "kace_http_requests_total{endpoint=\"other\",code=\"other\"} 1\n",
        "kace_http_request_duration_seconds_bucket{endpoint=\"partners\",le=\"0.00025\"} 0\n",
        "kace_http_request_duration_seconds_bucket{endpoint=\"partners\",le=\"0.0005\"} 1\n",
        "kace_http_request_duration_seconds_bucket{endpoint=\"partners\",le=\"0.0025\"} 2\n",
        "kace_http_request_duration_seconds_bucket{endpoint=\"partners\",le=\"2.5\"} 2\n",
        "kace_http_request_duration_seconds_bucket{endpoint=\"partners\",le=\"+Inf\"} 3\n",
        "kace_http_request_duration_seconds_count{endpoint=\"partners\"} 3\n",
        "kace_decisions_total{endpoint=\"place\",policy=\"kace\"} 2\n",
        "kace_decisions_total{endpoint=\"place\",policy=\"other\"} 1\n",
        "kace_model_age_seconds 1200\n",
        "kace_model_loads_total{result=\"ok\"} 1\n",
        "kace_colocation_throughput_samples_per_second{UUID=\"GPU-\\\"x\\\"\",colocation=\"bert-base-cased_batch8-train+vit-base-patch16-224_"
        "batch2-inf\",kind=\"observed\"} 50\n",
        "kace_gpu_utilization_ratio{gpu=\"0\",UUID=\"GPU-0\",modelName=\"Tesla V100\",Hostname=\"node-9\"} 0.5\n",
        "kace_gpu_memory_utilization_ratio{gpu=\"0\",UUID=\"GPU-0\",modelName=\"Tesla V100\",Hostname=\"node-9\"} 0.25\n",
        "kace_build_info{version=\"" KACE_VERSION "\"} 1\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!strstr(text, want[i]))
            fail_msg("metrics lack: %s", want[i]);
    assert_null(strstr(text, "GPU-1")); /* unreadable: left out, not 0 */
    char line[256];
    snprintf(line, sizeof line,
             "kace_colocation_prediction_error_ratio{UUID=\"GPU-abc\",Hostname=\"node-1\",pod=\"train-0\","
             "namespace=\"ml\",colocation=\"%s\"} %.17g\n",
             BERT8, solo_error);
    assert_non_null(strstr(text, line));
    snprintf(line, sizeof line, "kind=\"predicted\"} %.17g\n", predicted);
    assert_non_null(strstr(text, line));
    const char *obs = strstr(text, "kace_colocation_throughput_samples_per_second{");
    assert_non_null(obs);
    int n_predicted = 0; /* one series per kind and colocation: the pair reported twice, and the solo one */
    for (const char *p = obs; (p = strstr(p, "kind=\"predicted\"")); p++)
        n_predicted++;
    assert_int_equal(n_predicted, 2);
    /* every sample line is "name{labels} value" or "name value" */
    for (char *p = text; *p;) {
        char *nl = strchr(p, '\n');
        assert_non_null(nl);
        if (*p != '#') {
            char *space = nl;
            while (space > p && *space != ' ')
                space--;
            assert_true(*space == ' ');
            char *end;
            strtod(space + 1, &end);
            assert_true(end == nl);
        }
        p = nl + 1;
    }
    free(text);
    /* no GPU source: no GPU series */
    assert_kace_ok(ctx, kace_serve_metrics_render(ctx, m, NULL, 0, 1600, &text));
    assert_null(strstr(text, "kace_gpu_"));
    free(text);
    kace_serve_metrics_free(&m);
    assert_null(m);
}

/* Who may ask: Origin, Content-Type and bearer token, before a body is read. */
static void test_admission(void **state)
{
    (void)state;
    static const char *const extra[] = {"https://ui.example:8443"};
    kace_serve_guard open = {0}, locked = {.token = "s3cret", .origins = extra, .n_origins = 1},
                     split = {.token = "s3cret", .extender_elsewhere = true};
    const char *json = "application/json";
    const struct {
        const kace_serve_guard *g;
        const char *method;
        kace_route route;
        const char *host, *origin, *content_type, *authorization;
        int want;
        bool extender_listener;
    } cases[] = {
        /* no Origin (curl, kube-scheduler, Prometheus): admitted when JSON */
        {&open, "POST", KACE_ROUTE_PREDICT, "127.0.0.1:8080", NULL, "application/json", NULL, 0, false},
        {&open, "POST", KACE_ROUTE_PREDICT, "127.0.0.1:8080", NULL, "Application/JSON; charset=utf-8", NULL, 0, false},
        {&open, "POST", KACE_ROUTE_PREDICT, NULL, NULL, "application/json", NULL, 0, false},
        /* a form or text/plain body is what a page can send without a preflight */
        {&open, "POST", KACE_ROUTE_PREDICT, "127.0.0.1:8080", NULL, "text/plain", NULL, 415, false},
        {&open, "POST", KACE_ROUTE_PREDICT, "127.0.0.1:8080", NULL, "application/x-www-form-urlencoded", NULL, 415, false},
        {&open, "POST", KACE_ROUTE_PREDICT, "127.0.0.1:8080", NULL, "application/jsonx", NULL, 415, false},
        {&open, "POST", KACE_ROUTE_PREDICT, "127.0.0.1:8080", NULL, NULL, NULL, 415, false},
        {&open, "POST", KACE_ROUTE_K8S_FILTER, "127.0.0.1:8080", NULL, "text/plain", NULL, 415, false},
        /* same origin: scheme://Host */
        {&open, "POST", KACE_ROUTE_PREDICT, "127.0.0.1:8080", "http://127.0.0.1:8080", json, NULL, 0, false},
        {&open, "POST", KACE_ROUTE_PREDICT, "LocalHost:8080", "http://localhost:8080", json, NULL, 0, false},
        {&open, "POST", KACE_ROUTE_PREDICT, "[::1]:8080", "http://[::1]:8080", json, NULL, 0, false},
        {&open, "POST", KACE_ROUTE_PREDICT, "kace.example", "https://kace.example", json, NULL, 0, false},
        {&open, "POST", KACE_ROUTE_PREDICT, "kace.example", "http://kace.example:80", json, NULL, 0, false},
        /* foreign: another host, port, scheme's port, "null", garbage */
        {&open, "POST", KACE_ROUTE_PREDICT, "127.0.0.1:8080", "http://evil.example", "text/plain", NULL, 403, false},
        {&open, "POST", KACE_ROUTE_PREDICT, "127.0.0.1:8080", "http://evil.example", json, NULL, 403, false},
        {&open, "POST", KACE_ROUTE_PREDICT, "127.0.0.1:8080", "http://127.0.0.1:8081", json, NULL, 403, false},
        {&open, "POST", KACE_ROUTE_PREDICT, "127.0.0.1:8080", "http://127.0.0.1", json, NULL, 403, false},
        {&open, "POST", KACE_ROUTE_PREDICT, "127.0.0.1:8080", "http://127.0.0.1:8080.evil.example", json, NULL, 403, false},
        {&open, "POST", KACE_ROUTE_PREDICT, "kace.example:8080", "https://kace.example", json, NULL, 403, false},
        {&open, "POST", KACE_ROUTE_K8S_FILTER, "127.0.0.1:8080", "null", json, NULL, 403, false},
        {&open, "POST", KACE_ROUTE_PREDICT, NULL, "http://127.0.0.1:8080", json, NULL, 403, false},
        {&open, "DELETE", KACE_ROUTE_PREDICT, "127.0.0.1:8080", "http://evil.example", NULL, NULL, 403, false},
        {&open, "PUT", KACE_ROUTE_OTHER, "127.0.0.1:8080", "http://evil.example", NULL, NULL, 403, false},
        {&open, "POST", KACE_ROUTE_PREDICT, "127.0.0.1:8080", "https://ui.example:8443", json, NULL, 403, false},
        /* reads are not refused for their Origin */
        {&open, "GET", KACE_ROUTE_WORKLOADS, "127.0.0.1:8080", "http://evil.example", NULL, NULL, 0, false},
        {&open, "HEAD", KACE_ROUTE_HEALTH, "127.0.0.1:8080", "http://evil.example", NULL, NULL, 0, false},
        /* a token: everything but /healthz needs it, the extender's routes and reads included */
        {&locked, "POST", KACE_ROUTE_PREDICT, "127.0.0.1:8080", NULL, json, NULL, 401, false},
        {&locked, "POST", KACE_ROUTE_K8S_BIND, "127.0.0.1:8080", NULL, json, NULL, 401, false},
        {&locked, "POST", KACE_ROUTE_K8S_FILTER, "127.0.0.1:8080", NULL, json, "Bearer nope", 401, false},
        {&locked, "POST", KACE_ROUTE_K8S_NODES, "127.0.0.1:8080", NULL, json, NULL, 401, false},
        {&locked, "GET", KACE_ROUTE_K8S_STATE, "127.0.0.1:8080", NULL, NULL, NULL, 401, false},
        {&locked, "GET", KACE_ROUTE_K8S_STATE, "127.0.0.1:8080", NULL, NULL, "Bearer s3cret", 0, false},
        {&locked, "GET", KACE_ROUTE_WORKLOADS, "127.0.0.1:8080", NULL, NULL, NULL, 401, false},
        {&locked, "GET", KACE_ROUTE_HEALTH, "127.0.0.1:8080", NULL, NULL, NULL, 0, false},
        {&locked, "POST", KACE_ROUTE_K8S_BIND, "127.0.0.1:8080", NULL, json, "Bearer s3cret", 0, false},
        /* the extender listener: the extender's routes without a token, nothing else */
        {&locked, "POST", KACE_ROUTE_K8S_BIND, "127.0.0.1:8081", NULL, json, NULL, 0, true},
        {&locked, "POST", KACE_ROUTE_K8S_FILTER, "127.0.0.1:8081", NULL, "text/plain", NULL, 415, true},
        {&locked, "GET", KACE_ROUTE_HEALTH, "127.0.0.1:8081", NULL, NULL, NULL, 0, true},
        {&locked, "POST", KACE_ROUTE_OBSERVE, "127.0.0.1:8081", NULL, json, "Bearer s3cret", 404, true},
        {&locked, "POST", KACE_ROUTE_K8S_NODES, "127.0.0.1:8081", NULL, json, NULL, 404, true},
        {&locked, "GET", KACE_ROUTE_K8S_STATE, "127.0.0.1:8081", NULL, NULL, NULL, 404, true},
        {&locked, "GET", KACE_ROUTE_METRICS, "127.0.0.1:8081", NULL, NULL, NULL, 404, true},
        /* with an extender listener, its routes are refused elsewhere, token or not */
        {&split, "POST", KACE_ROUTE_K8S_BIND, "127.0.0.1:8080", NULL, json, "Bearer s3cret", 404, false},
        {&split, "POST", KACE_ROUTE_K8S_FILTER, "127.0.0.1:8080", NULL, json, NULL, 404, false},
        {&split, "POST", KACE_ROUTE_K8S_FILTER, "127.0.0.1:8081", NULL, json, NULL, 0, true},
        {&split, "POST", KACE_ROUTE_OBSERVE, "127.0.0.1:8080", NULL, json, NULL, 401, false},
        {&locked, "POST", KACE_ROUTE_OBSERVE, "127.0.0.1:8080", NULL, json, "Bearer s3cre", 401, false},
        {&locked, "POST", KACE_ROUTE_OBSERVE, "127.0.0.1:8080", NULL, json, "Bearer s3cret2", 401, false},
        {&locked, "POST", KACE_ROUTE_OBSERVE, "127.0.0.1:8080", NULL, json, "Basic s3cret", 401, false},
        {&locked, "POST", KACE_ROUTE_OBSERVE, "127.0.0.1:8080", NULL, json, "Bearer ", 401, false},
        {&locked, "POST", KACE_ROUTE_OBSERVE, "127.0.0.1:8080", NULL, json, "Bearer s3cret", 0, false},
        {&locked, "POST", KACE_ROUTE_OBSERVE, "127.0.0.1:8080", NULL, json, "bearer s3cret", 0, false},
        {&locked, "POST", KACE_ROUTE_K8S_PRIORITIZE, "127.0.0.1:8080", NULL, json, NULL, 401, false},
        {&locked, "GET", KACE_ROUTE_METRICS, "127.0.0.1:8080", NULL, NULL, NULL, 401, false},
        {&locked, "GET", KACE_ROUTE_METRICS, "127.0.0.1:8080", NULL, NULL, "Bearer s3cret", 0, false},
        /* listed origins pass; the token is still needed */
        {&locked, "POST", KACE_ROUTE_PLACE, "127.0.0.1:8080", "https://ui.example:8443", json, "Bearer s3cret", 0, false},
        {&locked, "POST", KACE_ROUTE_PLACE, "127.0.0.1:8080", "https://ui.example:8443", json, NULL, 401, false},
        {&locked, "POST", KACE_ROUTE_PLACE, "127.0.0.1:8080", "https://ui.example", json, "Bearer s3cret", 403, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        kace_serve_head h = {cases[i].method,       cases[i].route,        cases[i].host,
                             cases[i].origin,       cases[i].content_type, cases[i].authorization,
                             cases[i].extender_listener};
        char msg[600] = "";
        int got = kace_serve_admit(cases[i].g, &h, msg, sizeof msg);
        if (got != cases[i].want)
            fail_msg("case %zu (%s %s, Host %s, Origin %s, %s): %d, want %d (%s)", i, cases[i].method,
                     kace_route_name(cases[i].route), cases[i].host ? cases[i].host : "-",
                     cases[i].origin ? cases[i].origin : "-", cases[i].content_type ? cases[i].content_type : "-",
                     got, cases[i].want, msg);
        if (got)
            assert_true(strlen(msg) > 10);
    }
    assert_true(kace_serve_token_equal("abc", "abc"));
    assert_false(kace_serve_token_equal("abd", "abc"));
    assert_false(kace_serve_token_equal("ab", "abc"));
    assert_false(kace_serve_token_equal("abcd", "abc"));
    assert_false(kace_serve_token_equal("", "abc"));
}

/* --agent-tokens: the file's errors at line:col, and who may post what. */
static void test_agent_tokens(void **state)
{
    (void)state;
    kace_ctx *c = kace_ctx_new();
    kace_agent_tokens *t = NULL;
    static const char good[] = "# NAME TOKEN\n\nnode-a\ttok-a\n  node_b tok-b  \r\nnode-c tok-c";
    assert_int_equal(kace_agent_tokens_parse(c, "agents", good, sizeof good - 1, &t), KACE_OK);
    assert_int_equal(kace_agent_tokens_count(t), 3);
    assert_string_equal(kace_agent_of(t, "Bearer tok-b"), "node_b");
    assert_string_equal(kace_agent_of(t, "bearer tok-c"), "node-c");
    assert_null(kace_agent_of(t, "Bearer tok-"));
    assert_null(kace_agent_of(t, "Bearer tok-bb"));
    assert_null(kace_agent_of(t, "Basic tok-a"));
    assert_null(kace_agent_of(t, NULL));
    assert_true(kace_agent_tokens_has(t, "tok-a"));
    assert_false(kace_agent_tokens_has(t, "s3cret"));

    const struct {
        const char *text, *want;
    } bad[] = {
        {"", "agents:1:1: expected at least one line"},
        {"# only a comment\n", "agents:2:1: expected at least one line"},
        {"node-a\n", "agents:1:7: expected the agent's token"},
        {"Node-A tok\n", "agents:1:1: expected an agent name"},
        {"node.a tok\n", "agents:1:5: expected an agent name"},
        {"a23456789012345678901234567890123 tok\n", "agents:1:33: expected an agent name"},
        {"node-a tok extra\n", "agents:1:12: expected the end of the line"},
        {"node-a tok-a\nnode-a tok-b\n", "agents:2:1: agent 'node-a' already has a token (line 1)"},
        {"node-a tok-a\nnode-b tok-a\n", "agents:2:8: this token is also agent 'node-a''s (line 1)"},
        {"node-a tok\x01x\n", "agents:1:11: expected the end of the line"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        kace_agent_tokens *b = NULL;
        assert_int_equal(kace_agent_tokens_parse(c, "agents", bad[i].text, strlen(bad[i].text), &b), KACE_ERR_PARSE);
        assert_null(b);
        if (strncmp(kace_errmsg(c), bad[i].want, strlen(bad[i].want)) != 0)
            fail_msg("case %zu: '%s', want '%s...'", i, kace_errmsg(c), bad[i].want);
    }
    static const char nul[] = "node-a tok\0x\n";
    kace_agent_tokens *b = NULL;
    assert_int_equal(kace_agent_tokens_parse(c, "agents", nul, sizeof nul - 1, &b), KACE_ERR_PARSE);
    assert_non_null(strstr(kace_errmsg(c), "agents:1:11: a NUL byte"));

    /* with agents, an observation needs an agent's token, the administrator's
     * included; their reports of nodes take either; other routes as before */
    kace_serve_guard agents = {.token = "s3cret", .agents = t}, agents_only = {.agents = t};
    const char *json = "application/json";
    const struct {
        const kace_serve_guard *g;
        kace_route route;
        const char *authorization;
        int want;
    } cases[] = {
        {&agents, KACE_ROUTE_OBSERVE, NULL, 401},
        {&agents, KACE_ROUTE_OBSERVE, "Bearer s3cret", 401},
        {&agents, KACE_ROUTE_OBSERVE, "Bearer tok-a", 0},
        {&agents, KACE_ROUTE_OBSERVE, "Bearer tok-ab", 401},
        {&agents, KACE_ROUTE_K8S_NODES, "Bearer tok-b", 0},
        {&agents, KACE_ROUTE_K8S_NODES, "Bearer s3cret", 0},
        {&agents, KACE_ROUTE_K8S_NODES, NULL, 401},
        {&agents, KACE_ROUTE_PREDICT, "Bearer tok-a", 401},
        {&agents, KACE_ROUTE_PREDICT, "Bearer s3cret", 0},
        {&agents_only, KACE_ROUTE_OBSERVE, NULL, 401},
        {&agents_only, KACE_ROUTE_OBSERVE, "Bearer tok-c", 0},
        {&agents_only, KACE_ROUTE_K8S_NODES, "Bearer s3cret", 401},
        {&agents_only, KACE_ROUTE_PREDICT, NULL, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        kace_serve_head h = {.method = "POST", .route = cases[i].route, .host = "127.0.0.1:8080",
                             .content_type = json, .authorization = cases[i].authorization};
        char msg[600] = "";
        int got = kace_serve_admit(cases[i].g, &h, msg, sizeof msg);
        if (got != cases[i].want)
            fail_msg("case %zu (%s, %s): %d, want %d (%s)", i, kace_route_name(cases[i].route),
                     cases[i].authorization ? cases[i].authorization : "-", got, cases[i].want, msg);
    }
    kace_agent_tokens_free(&t);
    assert_null(t);
    kace_ctx_free(&c);
}

/* Body limits by endpoint, and a model that cannot answer every endpoint. */
static void test_limits_and_endpoint_check(void **state)
{
    (void)state;
    assert_true(kace_route_is_extender(KACE_ROUTE_K8S_FILTER));
    assert_true(kace_route_is_extender(KACE_ROUTE_K8S_PRIORITIZE));
    assert_false(kace_route_is_extender(KACE_ROUTE_PREDICT));
    assert_int_equal(kace_serve_body_limit(KACE_ROUTE_PREDICT), KACE_SERVE_MAX_BODY_DEFAULT);
    assert_true(kace_serve_body_limit(KACE_ROUTE_K8S_FILTER) >= KACE_SERVE_MAX_EXTENDER_BODY_DEFAULT);
    assert_true(KACE_SERVE_MAX_EXTENDER_BODY_DEFAULT >= 32u << 20);
    /* an extender body over the JSON endpoints' limit is parsed: a 2 MB one
     * (white space padding) gets the extender's own answer, not "more than" */
    size_t big = 2u << 20;
    char *body = malloc(big + 1);
    assert_non_null(body);
    memset(body, ' ', big);
    static const char pod[] = "{\"pod\": {}, \"nodenames\": [\"n0\"]}";
    memcpy(body, pod, sizeof pod - 1);
    body[big] = '\0';
    kace_reply r;
    kace_advisor_handle(ctx, adv, KACE_ROUTE_K8S_FILTER, body, big, &r);
    assert_int_equal(r.http_status, 200);
    kace_reply_clear(&r);
    kace_advisor_handle(ctx, adv, KACE_ROUTE_PREDICT, body, big, &r);
    assert_int_equal(r.http_status, 400);
    assert_non_null(strstr(r.body, "more than"));
    kace_reply_clear(&r);
    free(body);

    assert_kace_ok(ctx, kace_advisor_check_endpoints(ctx, adv));
    assert_int_equal(kace_advisor_check_endpoints(ctx, adv_lin), KACE_ERR_UNSUPPORTED);
    assert_non_null(strstr(kace_errmsg(ctx), "linear model cannot answer /v1/place"));
    assert_non_null(strstr(kace_errmsg(ctx), "--allow-partial-model"));

    /* a refused load in the metrics, until a load succeeds */
    kace_serve_metrics *m = NULL;
    assert_kace_ok(ctx, kace_serve_metrics_new(ctx, &m));
    kace_serve_metrics_model_loaded(m, true, 1000, 400);
    kace_serve_metrics_model_refused(m, "cannot_answer", "the linear model cannot answer \"/v1/place\"");
    kace_serve_metrics_model_refused(m, "made-up", "x");
    kace_serve_metrics_drop(m, KACE_DROP_BODY_MEMORY);
    kace_serve_metrics_drop(m, KACE_DROP_HEADER_TIMEOUT);
    kace_serve_metrics_drop(m, KACE_DROP_HEADER_TIMEOUT);
    kace_serve_metrics_pending(m, 12345, 7);
    kace_serve_metrics_request(m, KACE_ROUTE_PREDICT, 415, 0.001);
    char *text = NULL;
    assert_kace_ok(ctx, kace_serve_metrics_render(ctx, m, NULL, 0, 1600, &text));
    static const char *const want[] = {
        "kace_model_loads_total{result=\"error\"} 2\n",
        "kace_model_reload_failures_total{reason=\"cannot_answer\"} 1\n",
        "kace_model_reload_failures_total{reason=\"load_error\"} 0\n",
        "kace_model_reload_failures_total{reason=\"other\"} 1\n",
        "kace_model_reload_error_info{reason=\"other\",message=\"x\"} 1\n",
        "kace_http_dropped_total{reason=\"header_timeout\"} 2\n",
        "kace_http_dropped_total{reason=\"body_timeout\"} 0\n",
        "kace_http_dropped_total{reason=\"body_memory\"} 1\n",
        "kace_http_pending_body_bytes 12345\n",
        "kace_http_connections 7\n",
        "kace_http_requests_total{endpoint=\"predict\",code=\"415\"} 1\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!strstr(text, want[i]))
            fail_msg("metrics lack: %s", want[i]);
    free(text);
    kace_serve_metrics_model_refused(m, "cannot_answer", "the linear model cannot answer \"/v1/place\"");
    assert_kace_ok(ctx, kace_serve_metrics_render(ctx, m, NULL, 0, 1600, &text));
    assert_non_null(strstr(text, "kace_model_reload_error_info{reason=\"cannot_answer\",message=\"the linear model "
                                 "cannot answer \\\"/v1/place\\\"\"} 1\n"));
    free(text);
    kace_serve_metrics_model_loaded(m, true, 1100, 400);
    assert_kace_ok(ctx, kace_serve_metrics_render(ctx, m, NULL, 0, 1600, &text));
    assert_null(strstr(text, "kace_model_reload_error_info{"));
    assert_non_null(strstr(text, "kace_model_reload_failures_total{reason=\"cannot_answer\"} 2\n"));
    free(text);
    kace_serve_metrics_free(&m);
}

/* A fake GPU source: the function-table contract as kace serve uses it. */
static kace_status fake_open(kace_ctx *c, void **st)
{
    (void)c;
    *st = calloc(1, 1);
    return KACE_OK;
}
static kace_status fake_sample(kace_ctx *c, void *st, kace_serve_gpu_sample *out, size_t max, size_t *n)
{
    (void)c;
    (void)st;
    *n = 0;
    if (max) {
        snprintf(out[0].id, sizeof out[0].id, "fake0");
        snprintf(out[0].name, sizeof out[0].name, "fake");
        out[0].utilization = 0.75;
        out[0].memory_utilization = NAN;
        *n = 1;
    }
    return KACE_OK;
}
static void fake_close(void **st)
{
    free(*st);
    *st = NULL;
}

static void test_gpu_sources(void **state)
{
    (void)state;
    const kace_serve_gpu_source fake = {"fake", fake_open, fake_sample, fake_close};
    void *st = NULL;
    kace_serve_gpu_sample s[4];
    size_t n = 0;
    assert_kace_ok(ctx, fake.open(ctx, &st));
    assert_kace_ok(ctx, fake.sample(ctx, st, s, 4, &n));
    fake.close(&st);
    assert_null(st);
    kace_serve_metrics *m = NULL;
    char *text = NULL;
    assert_kace_ok(ctx, kace_serve_metrics_new(ctx, &m));
    assert_kace_ok(ctx, kace_serve_metrics_render(ctx, m, s, n, 0, &text));
    assert_non_null(strstr(text, "kace_gpu_utilization_ratio{gpu=\"0\",UUID=\"fake0\",modelName=\"fake\"} 0.75\n"));
    assert_null(strstr(text, "kace_gpu_memory_utilization_ratio{"));
    free(text);
    kace_serve_metrics_free(&m);
    /* NVML: here (no driver) it must say so rather than fail oddly */
    kace_status nst = kace_serve_gpu_nvml.open(ctx, &st);
    if (nst == KACE_OK) {
        assert_kace_ok(ctx, kace_serve_gpu_nvml.sample(ctx, st, s, 4, &n));
        kace_serve_gpu_nvml.close(&st);
    } else {
        assert_int_equal(nst, KACE_ERR_UNSUPPORTED);
        assert_non_null(strstr(kace_errmsg(ctx), "NVIDIA"));
        assert_null(st);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_routes),
        cmocka_unit_test(test_predict_matches_the_library),
        cmocka_unit_test(test_partners_match_the_library),
        cmocka_unit_test(test_place_picks_the_largest_gain),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_mps_split_on_the_partition_campaigns),
        cmocka_unit_test(test_mps_split_model_matches_the_library),
        cmocka_unit_test(test_mps_split_min_fraction),
        cmocka_unit_test(test_mps_split_rule_between_measured_shares),
        cmocka_unit_test(test_k8s_extender),
        cmocka_unit_test(test_observations_and_metrics),
        cmocka_unit_test(test_drift_metrics),
        cmocka_unit_test(test_gpu_sources),
        cmocka_unit_test(test_admission),
        cmocka_unit_test(test_agent_tokens),
        cmocka_unit_test(test_limits_and_endpoint_check),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
