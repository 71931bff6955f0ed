/* libFuzzer harness for the request parsers of `kace serve` (lib/service/serve.c,
 * lib/service/serve_k8s.c): kace_advisor_handle on every JSON route.
 *
 * Input: the first byte picks the route (modulo the JSON routes), the rest
 * is the request body; bits of the second byte give the request a node cache
 * (1) deciding with kace schedule's scheduler (2), and the advisor of
 * kace serve --objective fair (4) instead of the one without a default
 * objective. Each advisor is built once from made-up workloads and
 * a slowdown model fitted on made-up colocations (ridge only, fast), with a
 * split model fitted on made-up split grids; workload e has no
 * exclusive_by_mps profile, so /v1/mps-split with e takes the profile rule.
 *
 * Checks, beyond the sanitizers:
 *  - there is always a reply body, and it is valid JSON;
 *  - 200 exactly when the handler returns KACE_OK; otherwise a 4xx/5xx
 *    matching the status, a body {"error": {"status": <same>, "message"}},
 *    no decision and no observation;
 *  - malformed JSON is reported at "request body:<line>:<col>";
 *  - k8s prioritize answers a list whose scores are integers 0..10;
 *  - /v1/predict, /v1/partners and /v1/place say which objective they
 *    ranked by, one of raw, normalized and fair: the request's when it
 *    names one, else the route's own; a partner is listed with
 *    predicted_sum / measured_sum under raw only (a share is no sum);
 *  - a partner ranking answered through the reply cache (one for the whole
 *    run, so later inputs hit what earlier ones built) is byte for byte the
 *    computed reply, with the same status and decision.
 *
 * A first byte of 0xF0 or more fuzzes the admission check instead
 * (kace_serve_admit): the rest is "method\nhost\norigin\ncontent-type\n
 * authorization\ntoken", an empty field meaning an absent header (no token:
 * no authentication). It must answer 0, 401, 403 or 415 (with a message),
 * never 403 without an Origin or for a GET, never 401 without a token. */
#include <math.h>

#include <cjson/cJSON.h>

#include "fuzz_common.h"
#include "kace/serve.h"

static kace_advisor *advisor;      /* no default objective */
static kace_advisor *advisor_fair; /* kace serve --objective fair */
/* the extender's scheduler (kace schedule's, policy kace) over a..d, with the measured pairs allowed to share */
static kace_group_set *runnable;
static kace_model_rates holder;
static kace_rate_source rates;
static const int pool[4] = {0, 1, 2, 3};
static kace_reply_cache *reply_cache, *reply_cache_fair; /* the advisors', shared by every input */

static const kace_route json_routes[] = {KACE_ROUTE_PREDICT,    KACE_ROUTE_PARTNERS,   KACE_ROUTE_PLACE,
                                         KACE_ROUTE_MPS_SPLIT,  KACE_ROUTE_OBSERVE,    KACE_ROUTE_K8S_FILTER,
                                         KACE_ROUTE_K8S_PRIORITIZE, KACE_ROUTE_WORKLOADS, KACE_ROUTE_HEALTH,
                                         KACE_ROUTE_K8S_BIND,   KACE_ROUTE_K8S_NODES,  KACE_ROUTE_K8S_STATE};
#define N_ROUTES (sizeof json_routes / sizeof *json_routes)

/* The made-up advisor, with a default objective (-1: none). */
static kace_advisor *make_advisor(kace_ctx *ctx, int objective)
{
    kace_advisor *a = NULL;
    kace_dataset *ds = NULL;
    kace_model *m = NULL;
    FUZZ_CHECK(ctx && kace_dataset_new(ctx, &ds) == KACE_OK, "dataset");
    static const char *const names[] = {"a_batch1-inf", "b_batch2-train", "c_batch4-inf", "d_batch8-train",
                                        "e_batch16-inf"};
    for (int w = 0; w < 5; w++) {
        int idx;
        FUZZ_CHECK(kace_dataset_intern(ctx, ds, names[w], &idx) == KACE_OK, "intern");
        for (int k = 0; k < KACE_N_METRICS; k++)
            ds->workloads[idx].metric[k] = 5.0 + 11.0 * w + 3.0 * k;
        for (int p = 0; p < 10; p++) /* throughput alone grows with the share */
            ds->workloads[idx].metric[KACE_M_EXCLUSIVE_MPS10 + p] = (10.0 + w) * (p + 1) / 10.0;
        ds->workloads[idx].metric[KACE_M_EXCLUSIVE] = 10.0 + w;
    }
    for (int p = 0; p < 10; p++)
        ds->workloads[4].metric[KACE_M_EXCLUSIVE_MPS10 + p] = NAN;
    int pairs[][2] = {{0, 1}, {0, 2}, {1, 2}, {0, 3}, {1, 3}, {2, 3}, {0, 0}, {3, 3}};
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
        kace_colocation c = {.k = 2, .workload = {pairs[i][0], pairs[i][1]}, .mps_pct = {100, 100}};
        c.throughput[0] = (10.0 + pairs[i][0]) * (0.5 + 0.05 * (double)i);
        c.throughput[1] = (10.0 + pairs[i][1]) * (0.8 - 0.04 * (double)i);
        FUZZ_CHECK(kace_dataset_add_colocation(ctx, ds, &c) == KACE_OK, "colocation");
    }
    kace_fit_spec spec = {.kind = KACE_MODEL_SLOWDOWN};
    kace_slowdown_params_default(&spec.slowdown);
    spec.slowdown.n_rounds = 0; /* ridge only: quick, and no xgboost in every run */
    spec.slowdown.tree_weight = 0;
    spec.slowdown.ridge_alpha = 1;
    FUZZ_CHECK(kace_model_fit_rows(ctx, ds, NULL, 0, &spec, &m) == KACE_OK, "fit: %s", kace_errmsg(ctx));
    /* made-up split grids of every pair of a..d: each member keeps a share
     * of its exclusive throughput at its percentage that varies by split */
    kace_split_grid grids[6];
    size_t rows[6], n_grids = 0;
    for (int x = 0; x < 4; x++)
        for (int y = x + 1; y < 4; y++, n_grids++) {
            kace_split_grid *g = &grids[n_grids];
            *g = (kace_split_grid){.workload = {x, y}};
            for (int sp = 0; sp < KACE_SPLIT_GRID; sp++)
                for (int i = 0; i < 2; i++) {
                    int pct = kace_split_grid_pct(sp, i);
                    g->thr[sp][i] = (10.0 + g->workload[i]) * pct / 100.0 * (0.6 + 0.03 * sp + 0.05 * i + 0.02 * x);
                }
            rows[n_grids] = n_grids;
        }
    kace_split_model *split = NULL;
    FUZZ_CHECK(kace_split_fit(ctx, ds, grids, rows, n_grids, 0, &split) == KACE_OK, "split fit: %s", kace_errmsg(ctx));
    kace_advisor_options opt;
    kace_advisor_options_default(&opt);
    opt.objective = objective;
    FUZZ_CHECK(kace_advisor_new(ctx, &ds, &m, &opt, &a) == KACE_OK, "advisor: %s", kace_errmsg(ctx));
    kace_advisor_set_split_model(a, &split, n_grids);
    return a;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    kace_ctx *ctx = kace_ctx_new();
    FUZZ_CHECK(ctx, "context");
    advisor = make_advisor(ctx, -1);
    advisor_fair = make_advisor(ctx, KACE_OBJ_FAIR);
    static const int pairs[][2] = {{0, 1}, {0, 2}, {1, 2}, {0, 3}, {1, 3}, {2, 3}, {0, 0}, {3, 3}};
    FUZZ_CHECK(kace_group_set_new(ctx, &runnable) == KACE_OK, "group set");
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++)
        FUZZ_CHECK(kace_group_set_add(ctx, runnable, pairs[i], 2) == KACE_OK, "group set add");
    FUZZ_CHECK(kace_rate_source_model(ctx, &holder, kace_advisor_predictor(advisor), kace_advisor_dataset(advisor),
                                      &rates) == KACE_OK,
               "rates: %s", kace_errmsg(ctx));
    FUZZ_CHECK(kace_reply_cache_new(ctx, advisor, &reply_cache) == KACE_OK &&
                   kace_reply_cache_new(ctx, advisor_fair, &reply_cache_fair) == KACE_OK,
               "reply cache");
    kace_ctx_free(&ctx);
    return 0;
}

/* flags: bit 0 the request came through the extender listener, bit 1 the
 * extender has a listener of its own (so its routes are refused elsewhere). */
static void fuzz_admission(unsigned flags, const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1); /* header values are strings */
    if (!text)
        return;
    memcpy(text, data, size);
    text[size] = '\0';
    const char *field[6] = {NULL};
    char *p = text;
    for (int i = 0; i < 6 && p; i++) {
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = '\0';
        field[i] = *p ? p : NULL;
        p = nl ? nl + 1 : NULL;
    }
    kace_serve_guard g = {.token = field[5], .extender_elsewhere = (flags & 2) != 0};
    kace_route route = json_routes[size % N_ROUTES];
    kace_serve_head h = {field[0] ? field[0] : "POST", route, field[1], field[2], field[3], field[4],
                         .extender_listener = (flags & 1) != 0};
    bool extender = kace_route_is_extender(route);
    char msg[600] = "";
    int got = kace_serve_admit(&g, &h, msg, sizeof msg);
    FUZZ_CHECK(got == 0 || got == 401 || got == 403 || got == 404 || got == 415, "admission answered %d", got);
    FUZZ_CHECK(got == 0 || strlen(msg) > 10, "refusal %d without a message", got);
    FUZZ_CHECK(got != 403 || (h.origin && strcmp(h.method, "GET") != 0), "403 without a foreign Origin");
    FUZZ_CHECK(got != 401 || g.token, "401 without a token");
    /* Only /healthz and preflights pass without the token, except on the
     * extender listener, which is the credential itself. */
    FUZZ_CHECK(got != 0 || !g.token || h.extender_listener || route == KACE_ROUTE_HEALTH ||
                   strcmp(h.method, "OPTIONS") == 0 || (h.authorization && strstr(h.authorization, g.token)),
               "a request admitted without its token");
    FUZZ_CHECK(got != 0 || !h.extender_listener || extender || route == KACE_ROUTE_HEALTH,
               "the extender listener admitted a route not the extender's");
    FUZZ_CHECK(got != 0 || h.extender_listener || !extender || !g.extender_elsewhere,
               "an extender route admitted outside the extender listener");
    if (g.token)
        FUZZ_CHECK(kace_serve_token_equal(g.token, g.token), "a token differs from itself");
    free(text);
}

/* The objective a 200 reply names, against the request's (none: dflt,
 * the advisor's, else the route's own). */
static void check_objective(kace_route route, const char *dflt, const char *body, size_t len, const cJSON *reply)
{
    const cJSON *named = cJSON_GetObjectItemCaseSensitive(reply, "objective");
    FUZZ_CHECK(cJSON_IsString(named) && kace_objective_from_name(named->valuestring) >= 0,
               "a %s reply without its objective", kace_route_name(route));
    cJSON *req = cJSON_ParseWithLength(body, len);
    const cJSON *asked = cJSON_GetObjectItem(req, "objective"); /* keys match without case, as the server's */
    const char *want = asked && !cJSON_IsNull(asked) ? asked->valuestring
                       : dflt                        ? dflt
                       : route == KACE_ROUTE_PLACE   ? "normalized"
                                                     : "raw";
    FUZZ_CHECK(want && strcmp(want, named->valuestring) == 0, "asked objective %s, answered %s", want ? want : "?",
               named->valuestring);
    cJSON_Delete(req);
    const cJSON *partners = cJSON_GetObjectItemCaseSensitive(reply, "partners");
    bool raw = strcmp(named->valuestring, "raw") == 0;
    for (const cJSON *p = partners ? partners->child : NULL; p; p = p->next)
        FUZZ_CHECK(!cJSON_GetObjectItemCaseSensitive(p, raw ? "predicted" : "predicted_sum") &&
                       !cJSON_GetObjectItemCaseSensitive(p, raw ? "measured" : "measured_sum"),
                   "a partner's values named for another objective than %s", named->valuestring);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] >= 0xF0) {
        fuzz_admission(data[0] & 3u, data + 1, size - 1);
        return 0;
    }
    kace_route route = json_routes[data[0] % N_ROUTES];
    /* kace serve --objective fair, on the routes that rank (the extender's
     * scheduler below is built on the other advisor) */
    bool fair = size > 1 && (data[1] & 4) &&
                (route == KACE_ROUTE_PREDICT || route == KACE_ROUTE_PARTNERS || route == KACE_ROUTE_PLACE);
    kace_advisor *a = fair ? advisor_fair : advisor;
    kace_reply_cache *cache = fair ? reply_cache_fair : reply_cache;
    kace_ctx *ctx = kace_ctx_new();
    char *body = fuzz_copy(data + 1, size - 1);
    if (!ctx || !body) {
        kace_ctx_free(&ctx);
        free(body);
        return 0;
    }
    /* Half the inputs run with a node cache, fresh each time: a
     * body is a report (POST /k8s/nodes) fed to it, then the route's request. */
    kace_k8s_cluster *cluster = NULL;
    if (size > 1 && (data[1] & 1) && kace_k8s_cluster_new(ctx, 60, &cluster) == KACE_OK) {
        if (data[1] & 2) { /* deciding with kace schedule's scheduler */
            kace_k8s_scheduler ks = {.profiles = kace_advisor_dataset(advisor), .pool = pool, .n_pool = 4,
                                     .runnable = runnable, .rates = &rates};
            kace_sched_config_default(&ks.config, KACE_SCHED_KACE);
            FUZZ_CHECK(kace_k8s_cluster_use_scheduler(ctx, cluster, &ks) == KACE_OK, "scheduler: %s", kace_errmsg(ctx));
        }
        kace_reply fed;
        kace_advisor_handle_k8s(ctx, advisor, cluster, 1000, KACE_ROUTE_K8S_NODES, body, size - 1, &fed);
        kace_reply_clear(&fed);
    }
    kace_reply reply;
    kace_status st = kace_advisor_handle_k8s(ctx, a, cluster, 1000, route, body, size - 1, &reply);
    FUZZ_CHECK(!reply.api_path == !reply.api_body, "a Binding path without a body, or the reverse");
    if (reply.api_path) {
        FUZZ_CHECK(st == KACE_OK && route == KACE_ROUTE_K8S_BIND, "a Binding from another route");
        FUZZ_CHECK(strncmp(reply.api_path, "/api/v1/namespaces/", 19) == 0 && !strchr(reply.api_path, '?') &&
                       !strchr(reply.api_path, '#'),
                   "a bad Binding path: %s", reply.api_path);
        cJSON *b = cJSON_Parse(reply.api_body);
        FUZZ_CHECK(cJSON_IsObject(b) && cJSON_GetObjectItemCaseSensitive(b, "target"), "a Binding without target");
        cJSON_Delete(b);
    }
    FUZZ_CHECK(reply.body != NULL, "no reply body (status %d)", (int)st);
    cJSON *j = cJSON_Parse(reply.body);
    FUZZ_CHECK(j != NULL, "the reply is not JSON: %.200s", reply.body);
    if (st == KACE_OK) {
        FUZZ_CHECK(reply.http_status == 200, "KACE_OK with HTTP %d", reply.http_status);
        if (route == KACE_ROUTE_K8S_PRIORITIZE) {
            FUZZ_CHECK(cJSON_IsArray(j), "prioritize must answer a list");
            for (const cJSON *h = j->child; h; h = h->next) {
                const cJSON *score = cJSON_GetObjectItemCaseSensitive(h, "score");
                FUZZ_CHECK(cJSON_IsNumber(score) && score->valuedouble >= 0 && score->valuedouble <= 10 &&
                               score->valuedouble == floor(score->valuedouble),
                           "score out of 0..10");
            }
        }
        if (route == KACE_ROUTE_PREDICT || route == KACE_ROUTE_PARTNERS || route == KACE_ROUTE_PLACE)
            check_objective(route, fair ? "fair" : NULL, body, size - 1, j);
    } else {
        FUZZ_CHECK(reply.http_status >= 400 && reply.http_status < 600, "failure with HTTP %d", reply.http_status);
        FUZZ_CHECK(reply.http_status == kace_serve_http_status(st), "HTTP %d for status %d", reply.http_status,
                   (int)st);
        FUZZ_CHECK(!reply.decision && !reply.has_observation, "a failed request decided something");
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
        const cJSON *es = cJSON_GetObjectItemCaseSensitive(e, "status");
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(e, "message");
        FUZZ_CHECK(cJSON_IsNumber(es) && es->valueint == reply.http_status, "error.status");
        FUZZ_CHECK(cJSON_IsString(msg) && msg->valuestring[0], "error.message");
        if (st == KACE_ERR_PARSE) {
            const char *p = strncmp(msg->valuestring, "request body:", 13) == 0 ? msg->valuestring + 13 : NULL;
            p = p ? fuzz_skip_number(p) : NULL;
            p = p ? fuzz_skip_number(p) : NULL;
            FUZZ_CHECK(p && *p == ' ', "parse error without 'request body:line:col: ': %s", msg->valuestring);
        }
    }
    cJSON_Delete(j);
    if (route == KACE_ROUTE_PARTNERS) {
        kace_reply cached;
        kace_status cst =
            kace_advisor_handle_cached(ctx, a, cache, cluster, 1000, route, body, size - 1, &cached);
        FUZZ_CHECK(cst == st && cached.http_status == reply.http_status && cached.decision == reply.decision &&
                       cached.body && strcmp(cached.body, reply.body) == 0,
                   "the cached reply differs: %.200s / %.200s", cached.body ? cached.body : "(none)", reply.body);
        kace_reply_clear(&cached);
    }
    kace_reply_clear(&reply);
    kace_k8s_cluster_free(&cluster);
    free(body);
    kace_ctx_free(&ctx);
    return 0;
}
