/* The advisor's index of measured sums (lib/service/measured_index.c)
 * against the scans it replaced, on the V100 reference store and on a
 * small dataset built to hold every case the scans tell apart (repeated
 * runs, failed runs, runs below 100%, members in any order, a workload
 * with itself): every group's mean measured sum, every partner ranking
 * with and without "among", and /v1/predict's measured_sum for known,
 * unmeasured and unknown groups; under every objective, the groups' mean
 * value and the partner rankings of the library (kace_rank_partners_by). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "kace/policy.h"
#include "kace/serve.h"
#include "kace/store.h"
#include "service/advisor.h"
#include "service/measured_index.h"
#include "testutil.h"

static kace_ctx *ctx;
static kace_advisor *adv; /* V100: slowdown model on the pairs, every run of the store */

/* The scan /v1/predict made: the mean measured sum of the successful
 * all-100% runs of exactly this group. */
static double scan_group(const kace_dataset *ds, const int *group, int k)
{
    double s = 0;
    int n = 0;
    for (size_t c = 0; c < ds->n_colocations; c++) {
        const kace_colocation *col = &ds->colocations[c];
        if (col->k != k || col->status != KACE_RUN_OK)
            continue;
        bool used[KACE_MAX_K] = {false}, same = true;
        for (int i = 0; i < k && same; i++) {
            same = col->mps_pct[i] == 100;
            bool found = false;
            for (int j = 0; j < k && !found && same; j++)
                if (!used[j] && col->workload[j] == group[i])
                    used[j] = found = true;
            same = same && found;
        }
        if (same) {
            s += kace_colocation_sum(col);
            n++;
        }
    }
    return n ? s / n : NAN;
}

/* scan_group under objective o: the mean of kace_objective_measured. */
static double scan_group_by(const kace_dataset *ds, kace_objective o, const int *group, int k)
{
    double s = 0;
    int n = 0;
    for (size_t c = 0; c < ds->n_colocations; c++) {
        const kace_colocation *col = &ds->colocations[c];
        if (col->k != k || col->status != KACE_RUN_OK)
            continue;
        bool used[KACE_MAX_K] = {false}, same = true;
        for (int i = 0; i < k && same; i++) {
            same = col->mps_pct[i] == 100;
            bool found = false;
            for (int j = 0; j < k && !found && same; j++)
                if (!used[j] && col->workload[j] == group[i])
                    used[j] = found = true;
            same = same && found;
        }
        if (same) {
            s += kace_objective_measured(o, ds, col);
            n++;
        }
    }
    return n ? s / n : NAN;
}

/* The value kace_rank_partners_by reports for partner b of a: its first
 * 100%/100% run whose value is a number, whatever the run's status. */
static double scan_pair_by(const kace_dataset *ds, kace_objective o, int a, int b)
{
    for (size_t c = 0; c < ds->n_colocations; c++) {
        const kace_colocation *col = &ds->colocations[c];
        if (col->k != 2 || col->mps_pct[0] != 100 || col->mps_pct[1] != 100)
            continue;
        if (!((col->workload[0] == a && col->workload[1] == b) || (col->workload[0] == b && col->workload[1] == a)))
            continue;
        double v = kace_objective_measured(o, ds, col);
        if (!isnan(v))
            return v;
    }
    return NAN;
}

/* Equal to the last bit, or both NaN. */
static void assert_same(double want, double got, const char *what)
{
    if (isnan(want) && isnan(got))
        return;
    if (memcmp(&want, &got, sizeof want) != 0) {
        fprintf(stderr, "%s: scan %.17g, index %.17g\n", what, want, got);
        fail();
    }
}

/* Every group of 1..2 workloads of ws (with repeats), and of 3 whose first
 * is one of the first 16, looked up both ways;
 * returns how many had a measured sum. */
static int check_groups(const kace_dataset *ds, const kace_measured_index *ix, const int *ws, int n)
{
    int measured = 0;
    char what[64];
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
            int pair[2] = {ws[a], ws[b]};
            snprintf(what, sizeof what, "group %d,%d", pair[0], pair[1]);
            double want = scan_group(ds, pair, 2);
            assert_same(want, kace_measured_index_group(ix, pair, 2), what);
            measured += !isnan(want);
            if (a == 0) {
                assert_same(scan_group(ds, &ws[b], 1), kace_measured_index_group(ix, &ws[b], 1), "single");
            }
            for (int c = 0; c < n && c < 16; c++) { /* the store's own triples are asked below */
                int triple[3] = {ws[c], ws[a], ws[b]};
                snprintf(what, sizeof what, "group %d,%d,%d", triple[0], triple[1], triple[2]);
                want = scan_group(ds, triple, 3);
                assert_same(want, kace_measured_index_group(ix, triple, 3), what);
                measured += !isnan(want);
            }
        }
    return measured;
}

static void assert_same_ranking(const kace_partner *want, size_t n_want, const kace_partner *got, size_t n_got)
{
    assert_int_equal(n_want, n_got);
    for (size_t i = 0; i < n_want; i++) {
        assert_int_equal(want[i].workload, got[i].workload);
        assert_same(want[i].predicted, got[i].predicted, "predicted");
        assert_same(want[i].confidence, got[i].confidence, "confidence");
        assert_same(want[i].measured, got[i].measured, "measured");
        assert_same(want[i].exclusive_sum, got[i].exclusive_sum, "exclusive_sum");
    }
}

static int setup(void **state)
{
    (void)state;
    ctx = kace_ctx_new();
    char db[4200];
    snprintf(db, sizeof db, "%s/store.db", scratch_dir("test_advisor_index"));
    kace_store *store = NULL;
    if (kace_store_open(ctx, db, &store))
        return -1;
    static const char *const files[] = {"profiles/system.csv",
                                        "profiles/exclusive_by_mps_pct.csv",
                                        "colocations/pairs.csv",
                                        "colocations/triples.csv",
                                        "colocations/raw/partitions_0505_train-inf.csv",
                                        "colocations/raw/partitions_0617_train-inf.csv"};
    kace_dataset *pairs = NULL, *all = NULL;
    kace_model *m = NULL;
    kace_fit_spec spec = {.kind = KACE_MODEL_SLOWDOWN, .features = kace_feature_set_find("kace")};
    kace_slowdown_params_default(&spec.slowdown);
    kace_status st = import_reference(ctx, store, files, sizeof files / sizeof *files);
    if (!st)
        st = kace_store_load_dataset(ctx, store, "pairs", false, &pairs);
    if (!st)
        st = kace_model_fit_rows(ctx, pairs, NULL, 0, &spec, &m);
    if (!st)
        st = kace_store_load_dataset(ctx, store, NULL, false, &all);
    if (!st)
        st = kace_advisor_new(ctx, &all, &m, NULL, &adv);
    kace_dataset_free(&pairs);
    kace_dataset_free(&all);
    kace_model_free(&m);
    kace_store_close(&store);
    if (st) {
        fprintf(stderr, "setup: %s\n", kace_errmsg(ctx));
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kace_advisor_free(&adv);
    kace_ctx_free(&ctx);
    return 0;
}

/* Every group of up to three of the store's workloads: the index's mean
 * equals the scan's, and the store's pairs and triples are found. */
static void test_v100_groups(void **state)
{
    (void)state;
    const kace_dataset *ds = kace_advisor_dataset(adv);
    assert_true(ds->n_workloads >= 40 && ds->n_colocations > 200);
    int *ws = malloc(ds->n_workloads * sizeof *ws);
    assert_non_null(ws);
    for (size_t w = 0; w < ds->n_workloads; w++)
        ws[w] = (int)w;
    int measured = check_groups(ds, adv->measured, ws, (int)ds->n_workloads);
    /* the store's 100% pairs and triples, each asked in two orders */
    assert_true(measured > 100);
    for (size_t c = 0; c < ds->n_colocations; c++) {
        const kace_colocation *col = &ds->colocations[c];
        int rev[KACE_MAX_K];
        for (int i = 0; i < col->k; i++)
            rev[i] = col->workload[col->k - 1 - i];
        assert_same(scan_group(ds, col->workload, col->k), kace_advisor_measured_group(adv, rev, col->k), "stored");
        for (int o = 0; o < KACE_N_OBJECTIVES; o++)
            assert_same(scan_group_by(ds, (kace_objective)o, col->workload, col->k),
                        kace_advisor_measured_group_by(adv, (kace_objective)o, rev, col->k), "stored, objective");
    }
    /* the index holds every all-100% group once, in little memory */
    size_t bytes = kace_measured_index_bytes(adv->measured);
    size_t groups = kace_measured_index_groups(adv->measured);
    assert_true(groups > 100 && groups < ds->n_colocations);
    assert_true(bytes < 64 * groups + 1024);
    /* groups the index cannot hold: none of 0 or more than KACE_MAX_K */
    assert_true(isnan(kace_advisor_measured_group(adv, ws, 0)));
    free(ws);
}

/* Every target's ranking over every workload, and over a few candidates
 * (one repeated, the target itself among them), is the scan's. */
static void test_v100_partners(void **state)
{
    (void)state;
    const kace_dataset *ds = kace_advisor_dataset(adv);
    size_t n = ds->n_workloads;
    kace_partner *want = calloc(n, sizeof *want), *got = calloc(n, sizeof *got);
    assert_true(want && got);
    size_t measured[KACE_N_OBJECTIVES] = {0};
    for (int o = 0; o < KACE_N_OBJECTIVES; o++)
        for (size_t t = 0; t < n; t++) {
            kace_objective obj = (kace_objective)o;
            size_t n_want = 0, n_got = 0;
            kace_status a = o == KACE_OBJ_RAW ? kace_rank_partners(ctx, ds, kace_advisor_predictor(adv), KACE_NORM_TRAIN,
                                                                   (int)t, NULL, 0, want, &n_want)
                                              : kace_rank_partners_by(ctx, ds, kace_advisor_predictor(adv),
                                                                      KACE_NORM_TRAIN, obj, (int)t, NULL, 0, want,
                                                                      &n_want);
            kace_status b = kace_advisor_rank_partners(ctx, adv, obj, (int)t, NULL, 0, got, &n_got);
            assert_int_equal(a, b); /* a target without a profile fails both ways */
            if (a)
                continue;
            assert_same_ranking(want, n_want, got, n_got);
            for (size_t i = 0; i < n_got; i++) {
                measured[o] += !isnan(got[i].measured);
                assert_same(scan_pair_by(ds, obj, (int)t, got[i].workload),
                            kace_measured_index_pair_by(adv->measured, obj, got[i].workload, (int)t), "pair");
            }
            int among[5] = {(int)((t + 1) % n), (int)t, (int)((t + 7) % n), (int)((t + 1) % n), (int)((t + 30) % n)};
            a = kace_rank_partners_by(ctx, ds, kace_advisor_predictor(adv), KACE_NORM_TRAIN, obj, (int)t, among, 5,
                                      want, &n_want);
            b = kace_advisor_rank_partners(ctx, adv, obj, (int)t, among, 5, got, &n_got);
            assert_int_equal(a, b);
            if (!a)
                assert_same_ranking(want, n_want, got, n_got);
        }
    for (int o = 0; o < KACE_N_OBJECTIVES; o++)
        assert_true(measured[o] > 100); /* the rankings did carry measured values */
    free(want);
    free(got);
}

/* The measured_sum /v1/predict answers, for measured, unmeasured and
 * unknown groups. */
static void test_v100_predict(void **state)
{
    (void)state;
    const kace_dataset *ds = kace_advisor_dataset(adv);
    const kace_colocation *pair = NULL, *triple = NULL;
    for (size_t c = 0; c < ds->n_colocations; c++) {
        const kace_colocation *col = &ds->colocations[c];
        if (col->mps_pct[0] == 100 && col->status == KACE_RUN_OK && col->k == 2 && !pair)
            pair = col;
        if (col->mps_pct[0] == 100 && col->status == KACE_RUN_OK && col->k == 3 && !triple)
            triple = col;
    }
    assert_true(pair && triple);
    const char *p0 = ds->workloads[pair->workload[0]].name, *p1 = ds->workloads[pair->workload[1]].name;
    const char *t0 = ds->workloads[triple->workload[0]].name, *t1 = ds->workloads[triple->workload[1]].name,
               *t2 = ds->workloads[triple->workload[2]].name;
    struct {
        const char *names[4];
        int k;
        bool known;
    } cases[] = {
        {{p0, p1}, 2, true},          {{p1, p0}, 2, true},     {{t2, t0, t1}, 3, true},
        {{p0, p0}, 2, true},          {{p0}, 1, true},         {{t0, t1, p0, p1}, 4, true},
        {{p0, p1, p1}, 3, true},      {{p0, "no-such-workload"}, 2, false},
        {{"no-such-workload", t0, t1}, 3, false},
    };
    int nulls = 0, numbers = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char body[1024];
        int len = snprintf(body, sizeof body, "{\"workloads\": [");
        for (int j = 0; j < cases[i].k; j++)
            len += snprintf(body + len, sizeof body - (size_t)len, "%s\"%s\"", j ? ", " : "", cases[i].names[j]);
        snprintf(body + len, sizeof body - (size_t)len, "]}");
        kace_reply r = {0};
        kace_status st = kace_advisor_handle(ctx, adv, KACE_ROUTE_PREDICT, body, strlen(body), &r);
        if (!cases[i].known) {
            assert_int_not_equal(st, KACE_OK);
            assert_int_equal(r.http_status, 422);
            assert_non_null(strstr(r.body, "no-such-workload"));
            kace_reply_clear(&r);
            continue;
        }
        assert_kace_ok(ctx, st);
        int group[4];
        for (int j = 0; j < cases[i].k; j++)
            group[j] = kace_dataset_find(ds, cases[i].names[j]);
        double want = scan_group(ds, group, cases[i].k);
        cJSON *json = cJSON_Parse(r.body);
        const cJSON *got = cJSON_GetObjectItem(json, "measured_sum");
        assert_non_null(got);
        if (isnan(want)) {
            assert_true(cJSON_IsNull(got));
            nulls++;
        } else {
            assert_true(cJSON_IsNumber(got));
            assert_same(want, got->valuedouble, body);
            numbers++;
        }
        cJSON_Delete(json);
        kace_reply_clear(&r);
    }
    assert_true(nulls >= 2 && numbers >= 4);
}

static kace_colocation run(int k, const int *w, const int *pct, const double *x, kace_run_status status)
{
    kace_colocation c = {.k = k, .status = status};
    for (int i = 0; i < k; i++) {
        c.workload[i] = w[i];
        c.mps_pct[i] = pct[i];
        c.throughput[i] = x[i];
    }
    return c;
}

/* Repeated runs (mean), failed runs (left out of the mean, but a pair's
 * first run whatever its status), runs below 100% (left out), members in
 * any order, a workload with itself, an empty dataset. */
static void test_cases_the_scans_tell_apart(void **state)
{
    (void)state;
    kace_dataset *ds = NULL;
    assert_kace_ok(ctx, kace_dataset_new(ctx, &ds));
    int w[5];
    static const char *const names[5] = {"a", "b", "c", "d", "e"};
    for (int i = 0; i < 5; i++) {
        assert_kace_ok(ctx, kace_dataset_intern(ctx, ds, names[i], &w[i]));
        ds->workloads[w[i]].metric[KACE_M_EXCLUSIVE] = 0.5 + 0.25 * i; /* for the shares */
    }
    static const int full[3] = {100, 100, 100}, half[3] = {50, 100, 100};
    const int ab[2] = {w[0], w[1]}, ba[2] = {w[1], w[0]}, aa[2] = {w[0], w[0]}, cd[2] = {w[2], w[3]},
              de[2] = {w[3], w[4]}, abc[3] = {w[0], w[1], w[2]}, cba[3] = {w[2], w[1], w[0]};
    const double x[3] = {0.1, 0.2, 0.3}, y[3] = {1.0 / 3, 2.0 / 7, 5.0 / 11}, nan2[2] = {NAN, 1};
    kace_colocation runs[] = {
        run(2, cd, full, x, KACE_RUN_FAILED), /* cd: first pair failed, mean of the next two */
        run(2, ab, half, y, KACE_RUN_OK),     /* not at 100%: neither */
        run(2, ab, full, x, KACE_RUN_OK),     run(2, ba, full, y, KACE_RUN_OK),
        run(2, ab, full, y, KACE_RUN_OK),     run(2, cd, full, y, KACE_RUN_OK),
        run(2, cd, full, x, KACE_RUN_OOM),    run(2, cd, full, x, KACE_RUN_OK),
        run(2, aa, full, y, KACE_RUN_OK),     run(3, abc, full, x, KACE_RUN_OK),
        run(3, cba, full, y, KACE_RUN_OK),    run(3, abc, half, y, KACE_RUN_OK),
        run(2, de, full, nan2, KACE_RUN_OK), /* de: a first sum that is NaN gives way to the next */
        run(2, de, full, y, KACE_RUN_TIMEOUT),
    };
    kace_measured_index *ix = NULL;
    assert_kace_ok(ctx, kace_measured_index_build(ctx, ds, &ix)); /* no colocations yet */
    assert_int_equal(kace_measured_index_groups(ix), 0);
    assert_true(isnan(kace_measured_index_group(ix, ab, 2)) && isnan(kace_measured_index_pair(ix, w[0], w[1])));
    kace_measured_index_free(&ix);
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++)
        assert_kace_ok(ctx, kace_dataset_add_colocation(ctx, ds, &runs[i]));
    assert_kace_ok(ctx, kace_measured_index_build(ctx, ds, &ix));
    assert_int_equal(kace_measured_index_groups(ix), 5); /* cd, ab, aa, abc, de */
    assert_true(check_groups(ds, ix, w, 5) >= 4);
    /* the mean of ab's three runs, to the last bit */
    double mean = ((0.1 + 0.2) + (1.0 / 3 + 2.0 / 7) + (1.0 / 3 + 2.0 / 7)) / 3;
    assert_same(mean, kace_measured_index_group(ix, ba, 2), "ab mean");
    assert_true(isnan(kace_measured_index_group(ix, de, 2))); /* no successful finite run: NaN sum, or failed */
    /* a pair's first run, as kace_rank_partners reports it */
    assert_same(0.1 + 0.2, kace_measured_index_pair(ix, w[2], w[3]), "cd first (failed) run");
    assert_same(0.1 + 0.2, kace_measured_index_pair(ix, w[1], w[0]), "ab first 100% run");
    assert_same(1.0 / 3 + 2.0 / 7, kace_measured_index_pair(ix, w[0], w[0]), "aa");
    assert_same(1.0 / 3 + 2.0 / 7, kace_measured_index_pair(ix, w[4], w[3]), "de first finite run");
    assert_true(isnan(kace_measured_index_pair(ix, w[0], w[4])));
    /* the other objectives, from each group's runs */
    for (int o = 0; o < KACE_N_OBJECTIVES; o++) {
        kace_objective obj = (kace_objective)o;
        const int *groups[] = {ab, ba, aa, cd, de, abc, cba};
        const int ks[] = {2, 2, 2, 2, 2, 3, 3};
        for (size_t g = 0; g < sizeof ks / sizeof *ks; g++)
            assert_same(scan_group_by(ds, obj, groups[g], ks[g]), kace_measured_index_group_by(ix, obj, groups[g], ks[g]),
                        "group by objective");
        for (int a = 0; a < 5; a++)
            for (int b = 0; b < 5; b++)
                assert_same(scan_pair_by(ds, obj, w[a], w[b]), kace_measured_index_pair_by(ix, obj, w[a], w[b]),
                            "pair by objective");
    }
    /* ab's normalized mean by hand (exclusive 0.5 and 0.75), in the order of its runs */
    double ab_norm = ((0.1 / 0.5 + 0.2 / 0.75) + (2.0 / 7 / 0.5 + 1.0 / 3 / 0.75) + (1.0 / 3 / 0.5 + 2.0 / 7 / 0.75)) / 3;
    assert_same(ab_norm, kace_measured_index_group_by(ix, KACE_OBJ_NORMALIZED, ab, 2), "ab normalized");
    /* cd's fair value is its first run's (failed, kept for a partner as the raw sum is): min(0.1/1, 0.2/1.25) */
    assert_same(fmin(0.1 / 1.0, 0.2 / 1.25), kace_measured_index_pair_by(ix, KACE_OBJ_FAIR, w[2], w[3]), "cd fair");
    kace_measured_index_free(&ix);
    kace_dataset_free(&ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v100_groups),
        cmocka_unit_test(test_v100_partners),
        cmocka_unit_test(test_v100_predict),
        cmocka_unit_test(test_cases_the_scans_tell_apart),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
