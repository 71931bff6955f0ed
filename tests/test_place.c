/* Placing jobs on shared GPUs (lib/decide/place.c): scores against the slowdown
 * model's own predictions, the choice between GPUs, capacity, unknown
 * residents, MPS shares, and the tag, gres and configuration parsers. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/place.h"
#include "kace/store.h"
#include "testutil.h"

static kace_ctx *ctx;
static kace_dataset *ds;
static kace_model *model;
static kace_place_options opt;

static int setup(void **state)
{
    (void)state;
    ctx = kace_ctx_new();
    const char *dir = scratch_dir("place");
    char cmd[16384], db[4096];
    snprintf(db, sizeof db, "%s/kace.db", dir);
    snprintf(cmd, sizeof cmd, "%s import --db %s %s >/dev/null && %s train --db %s >/dev/null", KACE_CLI, db,
             ref_path(""), KACE_CLI, db);
    if (system(cmd) != 0)
        return -1;
    kace_store *store = NULL;
    int rc = kace_store_open(ctx, db, &store) || kace_store_load_dataset(ctx, store, NULL, false, &ds) ||
             kace_store_load_model(ctx, store, "default", &model);
    kace_store_close(&store);
    kace_place_options_default(&opt);
    return rc ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    kace_model_free(&model);
    kace_dataset_free(&ds);
    kace_ctx_free(&ctx);
    return 0;
}

static int find(const char *name)
{
    int w = kace_dataset_find(ds, name);
    if (w < 0)
        fail_msg("workload %s not in the reference data", name);
    return w;
}

/* Sum of predicted fractions of exclusive throughput, computed here from
 * kace_slowdown_predict directly. */
static double fractions(const int *group, int k)
{
    double sum, member[KACE_MAX_K], total = 0;
    assert_kace_ok(ctx, kace_slowdown_predict(ctx, model, ds, group, k, &sum, NULL, member));
    for (int i = 0; i < k; i++)
        total += member[i] / ds->workloads[group[i]].metric[KACE_M_EXCLUSIVE];
    return total;
}

static kace_place_gpu gpu(const char *node, int free, int n, const int *residents)
{
    kace_place_gpu g;
    memset(&g, 0, sizeof g);
    snprintf(g.node, sizeof g.node, "%s", node);
    g.share_free = free;
    g.usable = true;
    g.n_residents = n;
    for (int i = 0; i < n; i++)
        g.resident[i] = residents[i];
    return g;
}

static void test_group_score(void **state)
{
    (void)state;
    int a = find("bert-base-cased_batch8-train"), b = find("vit-base-patch16-224_batch16-inf");
    double score, conf;
    assert_kace_ok(ctx, kace_place_group_score(ctx, kace_model_predictor(model), ds, NULL, 0, &score, &conf));
    assert_true(score == 0);
    assert_kace_ok(ctx, kace_place_group_score(ctx, kace_model_predictor(model), ds, &a, 1, &score, &conf));
    assert_true(score == 1 && conf == 1);
    int pair[2] = {a, b};
    assert_kace_ok(ctx, kace_place_group_score(ctx, kace_model_predictor(model), ds, pair, 2, &score, &conf));
    assert_true(fabs(score - fractions(pair, 2)) < 1e-12);
    assert_true(score > 0 && score < 2.5 && conf >= 0 && conf <= 1);
}

static void test_idle_gpu_first(void **state)
{
    (void)state;
    int t = find("bert-base-cased_batch8-train"), r = find("whisper-large-v2_batch8-inf");
    kace_place_gpu gpus[2] = {gpu("n1", 70, 1, &r), gpu("n2", 100, 0, NULL)};
    kace_place_prepare(ctx, kace_model_predictor(model), ds, gpus, 2);
    assert_true(gpus[0].base_score == 1 && gpus[1].base_score == 0);
    kace_placement p;
    assert_kace_ok(ctx, kace_place_job(ctx, kace_model_predictor(model), ds, gpus, 2, t, &opt, &p));
    int pair[2] = {r, t};
    double shared_gain = fractions(pair, 2) - 1;
    /* The idle GPU gains a whole job's throughput; sharing gains less. */
    assert_int_equal(p.gpu, shared_gain < 1 ? 1 : 0);
    assert_int_equal(p.share, kace_place_share(ds, t, &opt));
    assert_int_equal(p.n_considered, 2);
}

/* Between two shared GPUs, the one whose resident is the better partner by
 * the model wins, and it follows the partner when the GPUs swap residents. */
static void test_best_partner(void **state)
{
    (void)state;
    int t = find("bert-base-cased_batch8-train");
    int a = find("vit-base-patch16-224_batch16-inf"), b = find("whisper-large-v2_batch16-inf");
    int ta[2] = {a, t}, tb[2] = {b, t};
    double gain_a = fractions(ta, 2) - 1, gain_b = fractions(tb, 2) - 1;
    assert_true(fabs(gain_a - gain_b) > 0.05); /* a real choice */
    for (int swap = 0; swap < 2; swap++) {
        kace_place_gpu gpus[2] = {gpu("n1", 40, 1, swap ? &b : &a), gpu("n2", 40, 1, swap ? &a : &b)};
        kace_place_prepare(ctx, kace_model_predictor(model), ds, gpus, 2);
        kace_placement p;
        assert_kace_ok(ctx, kace_place_job(ctx, kace_model_predictor(model), ds, gpus, 2, t, &opt, &p));
        int expect = (gain_a > gain_b) != (swap == 1) ? 0 : 1;
        assert_int_equal(p.gpu, expect);
        assert_true(fabs(p.gain - (gain_a > gain_b ? gain_a : gain_b)) < 1e-12);
        /* The job gets no more than is free. */
        assert_true(p.share <= 40 && p.share >= opt.min_share);
    }
}

static void test_no_room_or_unknown(void **state)
{
    (void)state;
    int t = find("bert-base-cased_batch8-train"), r = find("whisper-large-v2_batch8-inf");
    int unknown = -1;
    kace_place_gpu gpus[3] = {gpu("full", 5, 1, &r), gpu("foreign", 90, 1, &unknown), gpu("down", 100, 0, NULL)};
    gpus[2].usable = false;
    kace_place_prepare(ctx, kace_model_predictor(model), ds, gpus, 3);
    assert_true(isnan(gpus[1].base_score));
    kace_placement p;
    assert_int_equal(kace_place_job(ctx, kace_model_predictor(model), ds, gpus, 3, t, &opt, &p), KACE_ERR_NOT_FOUND);
    assert_int_equal(p.gpu, -1);
    assert_non_null(strstr(kace_errmsg(ctx), "1 without 10% free, 1 with residents kace cannot predict"));
    /* A workload without a kernel profile cannot be placed, and says so. */
    int np = find("resnet-50_batch32-train");
    kace_place_gpu idle = gpu("n1", 100, 0, NULL);
    kace_place_prepare(ctx, kace_model_predictor(model), ds, &idle, 1);
    assert_int_equal(kace_place_job(ctx, kace_model_predictor(model), ds, &idle, 1, np, &opt, &p), KACE_ERR_NOT_FOUND);
    assert_non_null(strstr(kace_errmsg(ctx), "cannot be predicted"));
}

/* A predictor that counts its predictions and forwards them to the model. */
static kace_predictor_ops counting_ops;
static size_t n_predictions;

static kace_status counting_predict(kace_ctx *c, const kace_predictor *p, const kace_dataset *d, const int *group,
                                    int k, double *sum, double *confidence, double *member)
{
    (void)p;
    n_predictions++;
    const kace_predictor *real = kace_model_predictor(model);
    return real->ops->predict(c, real, d, group, k, sum, confidence, member);
}

static uint32_t rng = 24;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng % n;
}

static void assert_same(kace_status a, const kace_placement *x, const char *msg_x, kace_status b,
                        const kace_placement *y, const char *msg_y, size_t step)
{
    if (a != b || x->gpu != y->gpu || x->share != y->share || x->n_considered != y->n_considered ||
        memcmp(&x->gain, &y->gain, sizeof x->gain) || memcmp(&x->score, &y->score, sizeof x->score) ||
        memcmp(&x->confidence, &y->confidence, sizeof x->confidence) || (a && strcmp(msg_x, msg_y) != 0))
        fail_msg("step %zu: without cache %d GPU %d share %d gain %.17g (%s), with cache %d GPU %d share %d gain "
                 "%.17g (%s)",
                 step, a, x->gpu, x->share, x->gain, msg_x, b, y->gpu, y->share, y->gain, msg_y);
}

/* The cache changes no decision: 4,000 decisions on a cluster whose jobs
 * start and end, with unknown residents, a GPU too full to take a job,
 * GPUs going down, a confidence threshold, workloads the model cannot
 * predict, and GPUs whose residents change without being prepared again
 * (a stale row must not be used), give the same result with and without
 * the cache; a cached decision predicts once (the job alone), and rows are
 * shared and swept. */
static void test_cache_same_decisions(void **state)
{
    (void)state;
    enum { GPUS = 48, STEPS = 4000 };
    const kace_predictor *real = kace_model_predictor(model);
    counting_ops = *real->ops;
    counting_ops.predict = counting_predict;
    kace_predictor counting = {&counting_ops, real->self};
    int n_w = (int)ds->n_workloads;
    kace_place_gpu plain[GPUS], cached[GPUS];
    for (int g = 0; g < GPUS; g++) {
        int res[KACE_MAX_K], n = (int)rnd(4);
        for (int i = 0; i < n; i++)
            res[i] = g % 11 == 5 && i == 0 ? -1 : (int)rnd((uint32_t)n_w); /* some unknown residents */
        char name[16];
        snprintf(name, sizeof name, "n%d", g);
        plain[g] = gpu(name, 100 - 20 * n, n, res);
    }
    /* One GPU holds as many jobs as a GPU may: it takes none. */
    int many[KACE_MAX_K];
    for (int i = 0; i < KACE_MAX_K; i++)
        many[i] = find("bert-base-cased_batch8-train");
    plain[7] = gpu("n7", 50, KACE_MAX_K, many);
    /* Two GPUs with the same residents share a row. */
    plain[9] = plain[8];
    memcpy(cached, plain, sizeof plain);
    kace_place_cache *cache = NULL;
    assert_kace_ok(ctx, kace_place_cache_new(ctx, &counting, ds, &cache));
    kace_place_prepare(ctx, &counting, ds, plain, GPUS);
    assert_kace_ok(ctx, kace_place_cache_prepare(ctx, cache, cached, GPUS));
    assert_null(cached[7].row);
    assert_true(cached[8].row != NULL && cached[8].row == cached[9].row);
    size_t placed = 0, failed = 0, stale = 0;
    int unprepared[2] = {0, 0};
    bool pending = false; /* unprepared GPUs wait */
    kace_place_options strict = opt;
    strict.min_confidence = 0.5;
    for (size_t step = 0; step < STEPS; step++) {
        int w = (int)rnd((uint32_t)n_w);
        const kace_place_options *o = step % 3 == 2 ? &strict : &opt;
        if (step % 13 == 0) { /* a node goes down or comes back */
            int g = (int)rnd(GPUS);
            plain[g].usable = cached[g].usable = !plain[g].usable;
        }
        kace_placement p, pc;
        char msg[1024];
        kace_status st = kace_place_job(ctx, &counting, ds, plain, GPUS, w, o, &p);
        snprintf(msg, sizeof msg, "%s", kace_errmsg(ctx));
        size_t before = n_predictions;
        kace_status stc = kace_place_job(ctx, &counting, ds, cached, GPUS, w, o, &pc);
        assert_same(st, &p, msg, stc, &pc, kace_errmsg(ctx), step);
        bool all_rows = true;
        for (int g = 0; g < GPUS; g++)
            all_rows = all_rows && (cached[g].row || isnan(cached[g].base_score) || g == 7);
        if (all_rows && !pending && ds->workloads[w].metric[KACE_M_EXCLUSIVE] > 0)
            assert_true(n_predictions - before <= 1); /* the job alone, nothing per GPU */
        if (st) {
            failed++;
            continue;
        }
        placed++;
        /* The job starts on its GPU (unless it would be the 8th), a random job ends. */
        int changed[2] = {p.gpu, (int)rnd(GPUS)};
        kace_place_gpu *g = &plain[changed[0]];
        if (g->n_residents < KACE_MAX_K - 1) {
            g->resident[g->n_residents++] = w;
            g->share_free -= p.share / 2;
        }
        g = &plain[changed[1]];
        if (g->n_residents > 0 && changed[1] != 7) {
            int r = (int)rnd((uint32_t)g->n_residents);
            memmove(&g->resident[r], &g->resident[r + 1], (size_t)(g->n_residents - r - 1) * sizeof *g->resident);
            g->n_residents--;
            g->share_free += 10;
        }
        for (int k = 0; k < 2; k++) {
            kace_place_gpu *c = &cached[changed[k]];
            memcpy(c->resident, plain[changed[k]].resident, sizeof c->resident);
            c->n_residents = plain[changed[k]].n_residents;
            c->share_free = plain[changed[k]].share_free;
        }
        if (step % 7 == 0) {
            /* Changed, not prepared until the next step: both decide on
             * the old score, the cached one without its row. */
            stale++;
            memcpy(unprepared, changed, sizeof changed);
            pending = true;
            continue;
        }
        for (int k = 0; k < 4; k++) {
            int c = k < 2 ? changed[k] : unprepared[k - 2];
            kace_place_prepare(ctx, &counting, ds, &plain[c], 1);
            assert_kace_ok(ctx, kace_place_cache_prepare(ctx, cache, &cached[c], 1));
        }
        pending = false;
        if (step % 50 == 49)
            kace_place_cache_sweep(cache, cached, GPUS);
    }
    assert_true(placed > STEPS / 4 && failed > 0 && stale > 0);
    /* After a sweep the cache holds one row per distinct list of residents
     * in use, and no more. */
    kace_place_prepare(ctx, &counting, ds, plain, GPUS);
    assert_kace_ok(ctx, kace_place_cache_prepare(ctx, cache, cached, GPUS));
    kace_place_cache_sweep(cache, cached, GPUS);
    size_t distinct = 0;
    for (int g = 0; g < GPUS; g++) {
        bool first = cached[g].row != NULL;
        for (int h = 0; h < g && first; h++)
            first = cached[h].row != cached[g].row;
        distinct += first;
        assert_true(memcmp(&plain[g].base_score, &cached[g].base_score, sizeof(double)) == 0);
    }
    assert_true(distinct > 10);
    assert_int_equal(kace_place_cache_rows(cache), distinct);
    kace_place_cache_free(&cache);
}

static void test_share(void **state)
{
    (void)state;
    kace_dataset *d = NULL;
    assert_kace_ok(ctx, kace_dataset_new(ctx, &d));
    int lin, flat, none;
    assert_kace_ok(ctx, kace_dataset_intern(ctx, d, "linear", &lin));
    assert_kace_ok(ctx, kace_dataset_intern(ctx, d, "flat", &flat));
    assert_kace_ok(ctx, kace_dataset_intern(ctx, d, "none", &none));
    for (int p = 0; p < 10; p++) {
        d->workloads[lin].metric[KACE_M_EXCLUSIVE_MPS10 + p] = 10.0 * (p + 1);
        d->workloads[flat].metric[KACE_M_EXCLUSIVE_MPS10 + p] = p == 4 ? 50 : 100; /* noisy dip */
    }
    d->workloads[none].metric[KACE_M_EXCLUSIVE] = 10;
    assert_int_equal(kace_place_share(d, lin, &opt), 90); /* 90 >= 0.9 * 100 */
    assert_int_equal(kace_place_share(d, flat, &opt), 10);
    assert_int_equal(kace_place_share(d, none, &opt), opt.default_share);
    kace_place_options half = opt;
    half.knee = 0.5;
    assert_int_equal(kace_place_share(d, lin, &half), 50);
    /* A curve measured at 10, 30, ..., 90 and 100 only: the first measured
     * percentage at the knee, never one between measured points. */
    for (int p = 2; p <= 8; p += 2)
        d->workloads[lin].metric[KACE_M_EXCLUSIVE_MPS10 + p - 1] = NAN;
    assert_int_equal(kace_place_share(d, lin, &half), 50);
    assert_int_equal(kace_place_share(d, lin, &opt), 90);
    kace_place_options knee45 = opt;
    knee45.knee = 0.45;
    assert_int_equal(kace_place_share(d, lin, &knee45), 50); /* 40 is not measured */
    /* 100% alone (a plain kace measure of the workload alone) is no curve. */
    for (int p = 1; p <= 9; p++)
        d->workloads[lin].metric[KACE_M_EXCLUSIVE_MPS10 + p - 1] = NAN;
    assert_int_equal(kace_place_share(d, lin, &opt), opt.default_share);
    kace_dataset_free(&d);
}

static void test_tag_and_gres(void **state)
{
    (void)state;
    char buf[256], w[KACE_NAME_MAX];
    int share = -1;
    assert_true(kace_place_tag_format(buf, sizeof buf, "bert_batch8-train", 30));
    assert_string_equal(buf, "kace:workload=bert_batch8-train,share=30");
    assert_true(kace_place_tag_parse("admin note kace:workload=bert_batch8-train,share=30", w, &share));
    assert_string_equal(w, "bert_batch8-train");
    assert_int_equal(share, 30);
    assert_false(kace_place_tag_parse("kace:workload=,share=30", w, &share));
    assert_false(kace_place_tag_parse("kace:workload=x,share=130", w, &share));
    assert_false(kace_place_tag_parse("kace:workload=x,share=3x", w, &share));
    assert_false(kace_place_tag_parse("kace:workload=x", w, &share));
    assert_false(kace_place_tag_parse(NULL, w, &share));
    assert_false(kace_place_tag_format(buf, 10, "bert_batch8-train", 30));
    assert_int_equal(kace_place_gres_count("gpu:1,mps:100", "gpu"), 1);
    assert_int_equal(kace_place_gres_count("gpu:1,mps:100", "mps"), 100);
    assert_int_equal(kace_place_gres_count("gpu:v100:2(S:0-1),shard:8", "gpu"), 2);
    assert_int_equal(kace_place_gres_count("gpu:v100:2(S:0-1),shard:8", "shard"), 8);
    assert_int_equal(kace_place_gres_count("gpu:1,mps:100", "shard"), 0);
    assert_int_equal(kace_place_gres_count("gpus:4", "gpu"), 0);
    assert_int_equal(kace_place_gres_count(NULL, "gpu"), 0);
}

static void test_config(void **state)
{
    (void)state;
    kace_place_config cfg;
    kace_place_config_default(&cfg);
    const char good[] = "# kace\nstore = /var/lib/kace/kace.db\nmodel_file=/m.txt \ngres = shard\n"
                        "refresh_seconds = 5\nknee = 0.8\nmin_share = 20\nmin_confidence = 0.5\nload_all_max = 0\n";
    assert_kace_ok(ctx, kace_place_config_parse(ctx, good, strlen(good), "kace.conf", &cfg));
    assert_string_equal(cfg.store, "/var/lib/kace/kace.db");
    assert_string_equal(cfg.model_file, "/m.txt");
    assert_string_equal(cfg.gres, "shard");
    assert_string_equal(cfg.model, "default");
    assert_int_equal(cfg.refresh_seconds, 5);
    assert_int_equal(cfg.load_all_max, 0);
    assert_true(cfg.options.knee == 0.8 && cfg.options.min_share == 20 && cfg.options.min_confidence == 0.5);
    /* a comment after a value, as slurm.conf allows; '#' inside a word is kept */
    const char comments[] = "store = /srv/a#b.db   # the store\ngres = mps\t# MPS shares\nknee = 0.7 #\n";
    kace_place_config_default(&cfg);
    assert_kace_ok(ctx, kace_place_config_parse(ctx, comments, strlen(comments), "kace.conf", &cfg));
    assert_string_equal(cfg.store, "/srv/a#b.db");
    assert_string_equal(cfg.gres, "mps");
    assert_true(cfg.options.knee == 0.7);
    static const struct {
        const char *text, *message;
    } bad[] = {
        {"store = x\nfoo = 1\n", "kace.conf:2:1: unknown key 'foo'"},
        {"store = x\nknee = 2\n", "kace.conf:2:8: knee must be a number in [0.01, 1], not '2'"},
        {"store = x\nrefresh_seconds = 1.5\n", "kace.conf:2:19: refresh_seconds must be an integer"},
        {"store = x\nload_all_max = -1\n", "kace.conf:2:16: load_all_max must be an integer in [0, 1e+09], not '-1'"},
        {"store = x\nload_all_max = many\n", "kace.conf:2:16: load_all_max must be an integer"},
        {"store = x\ngres = gpu\n", "kace.conf:2:8: gres must be mps or shard"},
        {"model = m\n", "kace.conf: 'store = PATH' is required"},
        {"store x\n", "kace.conf:1:1: expected 'key = value'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        kace_place_config_default(&cfg);
        assert_int_equal(kace_place_config_parse(ctx, bad[i].text, strlen(bad[i].text), "kace.conf", &cfg),
                         KACE_ERR_PARSE);
        if (!strstr(kace_errmsg(ctx), bad[i].message))
            fail_msg("expected '%s' in '%s'", bad[i].message, kace_errmsg(ctx));
    }
    assert_int_equal(kace_place_config_load(ctx, "/nonexistent/kace.conf", &cfg), KACE_ERR_IO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_group_score),   cmocka_unit_test(test_idle_gpu_first),
        cmocka_unit_test(test_best_partner),  cmocka_unit_test(test_no_room_or_unknown),
        cmocka_unit_test(test_cache_same_decisions),
        cmocka_unit_test(test_share),         cmocka_unit_test(test_tag_and_gres),
        cmocka_unit_test(test_config),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
