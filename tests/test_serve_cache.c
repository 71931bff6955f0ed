/* The reply cache of `kace serve` (kace_reply_cache): a cached
 * partner ranking is byte for byte the computed one, for every target and
 * many "top" values, when first built and when answered from the cache,
 * also with several threads asking at once; requests it does not hold
 * ("among", errors) are computed; and a cache made for one advisor never
 * answers for another (a reload gets a new advisor and a new cache). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/import.h"
#include "kace/serve.h"
#include "kace/store.h"
#include "testutil.h"

static kace_ctx *ctx;
static kace_advisor *adv;     /* slowdown model */
static kace_advisor *adv_lin; /* the paper's linear model: other predictions, other "model" */

static kace_advisor *make_advisor(kace_store *store, kace_model_kind kind)
{
    kace_dataset *pairs = NULL, *all = NULL;
    kace_model *m = NULL;
    kace_advisor *a = NULL;
    kace_fit_spec spec = {.kind = kind, .features = kace_feature_set_find("kace")};
    kace_slowdown_params_default(&spec.slowdown);
    if (kace_store_load_dataset(ctx, store, "pairs", false, &pairs) ||
        kace_model_fit_rows(ctx, pairs, NULL, 0, &spec, &m) ||
        kace_store_load_dataset(ctx, store, NULL, false, &all) || kace_advisor_new(ctx, &all, &m, NULL, &a))
        a = NULL;
    kace_dataset_free(&pairs);
    return a;
}

static int setup(void **state)
{
    (void)state;
    ctx = kace_ctx_new();
    char db[4200];
    snprintf(db, sizeof db, "%s/store.db", scratch_dir("test_serve_cache"));
    kace_store *store = NULL;
    if (kace_store_open(ctx, db, &store))
        return -1;
    static const char *const files[] = {"profiles/system.csv", "profiles/exclusive_by_mps_pct.csv",
                                        "colocations/pairs.csv", "colocations/triples.csv"};
    if (import_reference(ctx, store, files, sizeof files / sizeof *files)) {
        fprintf(stderr, "%s\n", kace_errmsg(ctx));
        return -1;
    }
    adv = make_advisor(store, KACE_MODEL_SLOWDOWN);
    adv_lin = make_advisor(store, KACE_MODEL_LINEAR);
    kace_store_close(&store);
    if (!adv || !adv_lin) {
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
    kace_ctx_free(&ctx);
    return 0;
}

/* body's reply from a with cache (NULL: computed); the caller frees it. */
static char *answer(kace_ctx *c, const kace_advisor *a, kace_reply_cache *cache, const char *body, int *status,
                    const char **decision)
{
    kace_reply r;
    kace_advisor_handle_cached(c, a, cache, NULL, 0, KACE_ROUTE_PARTNERS, body, strlen(body), &r);
    assert_non_null(r.body);
    *status = r.http_status;
    *decision = r.decision;
    char *text = r.body;
    r.body = NULL;
    kace_reply_clear(&r);
    return text;
}

/* The cached reply (asked twice: built, then held) equals the computed one;
 * returns its status. */
static int check_same(const kace_advisor *a, kace_reply_cache *cache, const char *body)
{
    int s0, s1, s2;
    const char *d0, *d1, *d2;
    char *computed = answer(ctx, a, NULL, body, &s0, &d0);
    char *first = answer(ctx, a, cache, body, &s1, &d1);
    char *again = answer(ctx, a, cache, body, &s2, &d2);
    if (strcmp(first, computed) != 0 || strcmp(again, computed) != 0)
        fail_msg("%s:\ncomputed %s\ncached   %s\nheld     %s", body, computed, first, again);
    assert_int_equal(s1, s0);
    assert_int_equal(s2, s0);
    assert_ptr_equal(d1, d0);
    assert_ptr_equal(d2, d0);
    free(computed);
    free(first);
    free(again);
    return s0;
}

static void test_cached_replies_are_the_computed_ones(void **state)
{
    (void)state;
    kace_reply_cache *cache = NULL;
    assert_kace_ok(ctx, kace_reply_cache_new(ctx, adv, &cache));
    const kace_dataset *ds = kace_advisor_dataset(adv);
    assert_true(ds->n_workloads > 40);
    assert_int_equal(kace_reply_cache_entries(cache), 0);
    static const char *const tops[] = {"", ", \"top\": 0", ", \"top\": 1", ", \"top\": 5", ", \"top\": 51",
                                       ", \"top\": 52", ", \"top\": 1000", ", \"among\": null, \"top\": 3"};
    char body[512];
    size_t ranked = 0; /* targets with a ranking (the others lack a profile: 400) */
    for (size_t w = 0; w < ds->n_workloads; w++) {
        int status = 0;
        for (size_t t = 0; t < sizeof tops / sizeof *tops; t++) {
            snprintf(body, sizeof body, "{\"target\": \"%s\"%s}", ds->workloads[w].name, tops[t]);
            status = check_same(adv, cache, body);
        }
        ranked += status == 200;
    }
    assert_true(ranked >= 20);
    /* every target with a ranking was answered, so each is held */
    assert_int_equal(kace_reply_cache_entries(cache), ranked);
    /* not held: a ranking among a list, and bad requests (computed, same errors) */
    static const char *const others[] = {
        "{\"target\": \"bert-base-cased_batch8-train\", \"among\": [\"vit-base-patch16-224_batch2-inf\", "
        "\"whisper-large-v2_batch8-inf\"]}",
        "{\"target\": \"bert-base-cased_batch8-train\", \"among\": []}",
        "{\"target\": \"no-such-workload\", \"top\": 5}",
        "{\"target\": 3}",
        "{\"top\": 2}",
        "{\"target\": \"bert-base-cased_batch8-train\", \"top\": -1}",
        "{\"target\": \"bert-base-cased_batch8-train\", \"top\": 2.5}",
        "{\"target\": \"bert-base-cased_batch8-train\", \"tops\": 2}",
        "{\"target\": \"bert-base-cased_batch8-train\", \"among\": [\"nope\"]}",
        "{\"target\": \"bert-base-cased_batch8-train\"} trailing",
        "[1, 2]",
        "{\"TARGET\": \"bert-base-cased_batch8-train\", \"Top\": 2}",
    };
    for (size_t i = 0; i < sizeof others / sizeof *others; i++)
        check_same(adv, cache, others[i]);
    int status;
    const char *decision;
    char *text = answer(ctx, adv, cache, others[2], &status, &decision);
    assert_int_equal(status, 422);
    assert_null(decision);
    free(text);
    kace_reply_cache_free(&cache);
    assert_null(cache);
}

/* A cache is its advisor's: handed another advisor it is not used, so a
 * reloaded model never answers with the previous one's ranking. */
static void test_cache_answers_for_its_advisor_only(void **state)
{
    (void)state;
    kace_reply_cache *cache = NULL;
    assert_kace_ok(ctx, kace_reply_cache_new(ctx, adv, &cache));
    const char *body = "{\"target\": \"bert-base-cased_batch8-train\", \"top\": 5}";
    int status;
    const char *decision;
    char *slowdown = answer(ctx, adv, cache, body, &status, &decision);
    assert_int_equal(kace_reply_cache_entries(cache), 1);
    char *linear = answer(ctx, adv_lin, cache, body, &status, &decision);
    char *linear_computed = answer(ctx, adv_lin, NULL, body, &status, &decision);
    assert_string_equal(linear, linear_computed);
    assert_string_not_equal(linear, slowdown);
    assert_non_null(strstr(linear, "\"model\":\"linear\""));
    assert_int_equal(kace_reply_cache_entries(cache), 1); /* nothing of the linear model's went in */
    free(slowdown);
    free(linear);
    free(linear_computed);
    kace_reply_cache_free(&cache);
}

/* Several threads asking for the same targets at once, the cache empty:
 * every reply is the computed one, and each target is held once. */
typedef struct worker_arg {
    kace_reply_cache *cache;
    char **expected; /* per target */
    int offset, mismatches;
} worker_arg;

static void *worker(void *p)
{
    worker_arg *w = p;
    kace_ctx *c = kace_ctx_new();
    const kace_dataset *ds = kace_advisor_dataset(adv);
    char body[512];
    for (int round = 0; c && round < 3; round++)
        for (size_t i = 0; i < ds->n_workloads; i++) {
            size_t t = (i + (size_t)w->offset) % ds->n_workloads;
            snprintf(body, sizeof body, "{\"target\": \"%s\", \"top\": 7}", ds->workloads[t].name);
            kace_reply r;
            kace_advisor_handle_cached(c, adv, w->cache, NULL, 0, KACE_ROUTE_PARTNERS, body, strlen(body), &r);
            if (!r.body || strcmp(r.body, w->expected[t]) != 0)
                w->mismatches++;
            kace_reply_clear(&r);
        }
    kace_ctx_free(&c);
    return NULL;
}

static void test_threads_share_one_cache(void **state)
{
    (void)state;
    const kace_dataset *ds = kace_advisor_dataset(adv);
    char **expected = calloc(ds->n_workloads, sizeof *expected);
    assert_non_null(expected);
    char body[512];
    size_t ranked = 0;
    for (size_t t = 0; t < ds->n_workloads; t++) {
        int status;
        const char *decision;
        snprintf(body, sizeof body, "{\"target\": \"%s\", \"top\": 7}", ds->workloads[t].name);
        expected[t] = answer(ctx, adv, NULL, body, &status, &decision);
        ranked += status == 200;
    }
    kace_reply_cache *cache = NULL;
    assert_kace_ok(ctx, kace_reply_cache_new(ctx, adv, &cache));
    enum { N_THREADS = 4 };
    pthread_t th[N_THREADS];
    worker_arg args[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        args[i] = (worker_arg){.cache = cache, .expected = expected, .offset = i % 2};
        assert_int_equal(pthread_create(&th[i], NULL, worker, &args[i]), 0);
    }
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].mismatches, 0);
    }
    assert_int_equal(kace_reply_cache_entries(cache), ranked);
    kace_reply_cache_free(&cache);
    for (size_t t = 0; t < ds->n_workloads; t++)
        free(expected[t]);
    free(expected);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cached_replies_are_the_computed_ones),
        cmocka_unit_test(test_cache_answers_for_its_advisor_only),
        cmocka_unit_test(test_threads_share_one_cache),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
