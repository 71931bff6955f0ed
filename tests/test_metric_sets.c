/* Metric sets: every model kind trains and predicts on the metrics a store
 * holds (full, no counters, system only), records its set in the model
 * file, and names what to import when a workload lacks a metric it reads.
 * The V100 pairs stand in for a site's data; the metrics outside a set are
 * removed (NaN) so that reading one would show. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/predictor.h"
#include "kace/store.h"
#include "testutil.h"

static kace_ctx *ctx;
static kace_store *store;

static int setup(void **state)
{
    (void)state;
    ctx = kace_ctx_new();
    char db[4096];
    snprintf(db, sizeof db, "%s/kace.db", scratch_dir("metric_sets"));
    if (kace_store_open(ctx, db, &store))
        return -1;
    static const char *const files[] = {"profiles/system.csv", "colocations/pairs.csv"};
    return import_reference(ctx, store, files, 2) ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    kace_store_close(&store);
    kace_ctx_free(&ctx);
    return 0;
}

/* The stored pairs with every metric outside set removed. */
static kace_dataset *pairs_with(kace_metric_set set)
{
    kace_dataset *ds = NULL;
    assert_kace_ok(ctx, kace_store_load_dataset(ctx, store, "pairs", false, &ds));
    for (size_t w = 0; w < ds->n_workloads; w++)
        for (int m = 0; m < KACE_N_METRICS; m++)
            if (!kace_metric_set_has(set, (kace_metric)m))
                ds->workloads[w].metric[m] = NAN;
    return ds;
}

static void test_sets_nest_and_restrict(void **state)
{
    (void)state;
    for (int m = 0; m < KACE_N_METRICS; m++) {
        if (kace_metric_set_has(KACE_METRICS_SYSTEM, (kace_metric)m))
            assert_true(kace_metric_set_has(KACE_METRICS_NO_COUNTERS, (kace_metric)m));
        assert_true(kace_metric_set_has(KACE_METRICS_FULL, (kace_metric)m));
    }
    assert_false(kace_metric_set_has(KACE_METRICS_NO_COUNTERS, KACE_M_SM_THROUGHPUT));
    assert_false(kace_metric_set_has(KACE_METRICS_NO_COUNTERS, KACE_M_PCIE_READ));
    assert_true(kace_metric_set_has(KACE_METRICS_NO_COUNTERS, KACE_M_THREADS));
    assert_false(kace_metric_set_has(KACE_METRICS_SYSTEM, KACE_M_THREADS));
    assert_true(kace_metric_set_has(KACE_METRICS_SYSTEM, KACE_M_MEMCAP));
    assert_true(kace_metric_set_has(KACE_METRICS_SYSTEM, KACE_M_PCIE_RX_MBPS));
    for (int s = 0; s < KACE_N_METRIC_SETS; s++)
        assert_int_equal(kace_metric_set_from_name(kace_metric_set_name((kace_metric_set)s)), s);
    assert_int_equal(kace_metric_set_from_name("counters"), -1);

    const kace_feature_set *sys = kace_feature_set_restrict(&kace_features_kace, KACE_METRICS_SYSTEM);
    assert_string_equal(sys->name, "kace-system");
    assert_int_equal(sys->n, 4);
    for (int j = 0; j < sys->n; j++)
        assert_true(kace_metric_set_has(KACE_METRICS_SYSTEM, sys->metric[j]));
    /* A restricted set never becomes richer, and each name finds its set. */
    assert_ptr_equal(kace_feature_set_restrict(sys, KACE_METRICS_FULL), sys);
    const kace_feature_set *nc = kace_feature_set_restrict(&kace_features_kace, KACE_METRICS_NO_COUNTERS);
    assert_string_equal(nc->name, "kace-no-counters");
    assert_int_equal(nc->n, 7);
    assert_ptr_equal(kace_feature_set_find("kace-no-counters"), nc);
    assert_int_equal(kace_feature_set_metrics(&kace_features_kace), KACE_METRICS_FULL);
    assert_int_equal(kace_feature_set_metrics(nc), KACE_METRICS_NO_COUNTERS);
    assert_int_equal(kace_feature_set_metrics(sys), KACE_METRICS_SYSTEM);
    /* NVML's PCIe is a system metric: xu-nvml needs no counters. */
    assert_ptr_equal(kace_feature_set_restrict(&kace_features_xu_nvml, KACE_METRICS_NO_COUNTERS),
                     &kace_features_xu_nvml);
    assert_string_equal(kace_feature_set_restrict(&kace_features_xu, KACE_METRICS_SYSTEM)->name, "xu-system");
}

static void test_chosen_from_what_is_stored(void **state)
{
    (void)state;
    kace_fit_spec linear = {.kind = KACE_MODEL_LINEAR, .features = &kace_features_kace};
    kace_fit_spec slowdown = {.kind = KACE_MODEL_SLOWDOWN};
    for (int s = 0; s < KACE_N_METRIC_SETS; s++) {
        kace_dataset *ds = pairs_with((kace_metric_set)s);
        assert_int_equal(kace_metric_set_choose(ds, NULL, 0, &linear), s);
        assert_int_equal(kace_metric_set_choose(ds, NULL, 0, &slowdown), s);
        kace_dataset_free(&ds);
    }
    /* One workload without counters makes the whole set no-counters, but
     * only for the rows it is in. */
    kace_dataset *ds = pairs_with(KACE_METRICS_FULL);
    int w = ds->colocations[0].workload[0];
    ds->workloads[w].metric[KACE_M_DRAM_THROUGHPUT] = NAN;
    assert_int_equal(kace_metric_set_choose(ds, NULL, 0, &slowdown), KACE_METRICS_NO_COUNTERS);
    int without = -1;
    for (size_t i = 0; i < ds->n_colocations && without < 0; i++)
        if (!kace_colocation_has(&ds->colocations[i], w))
            without = (int)i;
    assert_true(without >= 0);
    assert_int_equal(kace_metric_set_choose(ds, &without, 1, &slowdown), KACE_METRICS_FULL);
    kace_dataset_free(&ds);
}

/* Fits kind on every row of a store holding only set's metrics, predicts
 * every row, and checks the model file records the set and predicts the
 * same after a round trip. */
static void fit_on(kace_model_kind kind, kace_metric_set set)
{
    kace_dataset *ds = pairs_with(set);
    kace_fit_spec spec = {.kind = kind, .features = &kace_features_kace};
    kace_slowdown_params_default(&spec.slowdown);
    kace_fit_spec_restrict(&spec, kace_metric_set_choose(ds, NULL, 0, &spec));
    kace_model *m = NULL, *back = NULL;
    assert_kace_ok(ctx, kace_model_fit_rows(ctx, ds, NULL, 0, &spec, &m));
    assert_int_equal(kace_model_metrics(m), set);
    size_t n = ds->n_colocations;
    int *rows = malloc(n * sizeof *rows);
    double *pred = malloc(n * sizeof *pred), *again = malloc(n * sizeof *again);
    assert_non_null(rows);
    assert_non_null(pred);
    assert_non_null(again);
    for (size_t i = 0; i < n; i++)
        rows[i] = (int)i;
    assert_kace_ok(ctx, kace_model_predict_rows(ctx, m, KACE_NORM_TRAIN, ds, rows, n, pred));
    double err = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(isfinite(pred[i]));
        double truth = kace_colocation_sum(&ds->colocations[i]);
        err += fabs(pred[i] - truth) / truth / (double)n;
    }
    /* In-sample: a model that reads nothing useful would be far off. */
    printf("%s on %s metrics: mean relative error of the sum in sample %.3f\n", kace_model_kind_name(kind),
           kace_metric_set_name(set), err);
    assert_true(err < 0.5);
    char *text = NULL;
    assert_kace_ok(ctx, kace_model_to_text(ctx, m, &text));
    if (set == KACE_METRICS_FULL) {
        assert_memory_equal(text, "kace-model 2\n", 13); /* as before metric sets */
        assert_null(strstr(text, "\nmetrics "));
    } else {
        char line[64];
        snprintf(line, sizeof line, "\nmetrics %s\n", kace_metric_set_name(set));
        assert_memory_equal(text, "kace-model 3\n", 13);
        assert_non_null(strstr(text, line));
    }
    assert_kace_ok(ctx, kace_model_from_text(ctx, text, strlen(text), "round trip", &back));
    assert_int_equal(kace_model_metrics(back), set);
    assert_kace_ok(ctx, kace_model_predict_rows(ctx, back, KACE_NORM_TRAIN, ds, rows, n, again));
    for (size_t i = 0; i < n; i++)
        assert_true(fabs(again[i] - pred[i]) <= 1e-9 * fabs(pred[i]));
    if (kind == KACE_MODEL_SLOWDOWN) {
        /* Each member is predicted, whatever the set; the member bounds
         * are the full model's only. */
        assert_true(kace_predictor_can(kace_model_predictor(back), KACE_PRED_MEMBERS));
        assert_int_equal(kace_predictor_can(kace_model_predictor(back), KACE_PRED_BOUNDS), set == KACE_METRICS_FULL);
    }
    free(text);
    free(rows);
    free(pred);
    free(again);
    kace_model_free(&m);
    kace_model_free(&back);
    kace_dataset_free(&ds);
}

static void test_every_kind_on_every_set(void **state)
{
    (void)state;
    for (int s = 0; s < KACE_N_METRIC_SETS; s++) {
        fit_on(KACE_MODEL_LINEAR, (kace_metric_set)s);
        fit_on(KACE_MODEL_SLOWDOWN, (kace_metric_set)s);
    }
}

static void test_forest_on_system_metrics(void **state)
{
    (void)state;
    kace_dataset *ds = pairs_with(KACE_METRICS_SYSTEM);
    /* Xu's host metrics are not in the V100 system.csv: the NVML ones stand in. */
    for (size_t w = 0; w < ds->n_workloads; w++) {
        ds->workloads[w].metric[KACE_M_CPU_PCT] = 100;
        ds->workloads[w].metric[KACE_M_MAINMEM_PCT] = 5;
    }
    kace_fit_spec spec = {.kind = KACE_MODEL_FOREST, .features = &kace_features_xu, .search = {2, 3, 1, 1, 0.05}};
    kace_fit_spec_restrict(&spec, kace_metric_set_choose(ds, NULL, 0, &spec));
    assert_string_equal(spec.features->name, "xu-system");
    kace_model *m = NULL;
    assert_kace_ok(ctx, kace_model_fit_rows(ctx, ds, NULL, 0, &spec, &m));
    assert_int_equal(kace_model_metrics(m), KACE_METRICS_SYSTEM);
    int row = 0;
    double pred;
    assert_kace_ok(ctx, kace_model_predict_rows(ctx, m, KACE_NORM_TRAIN, ds, &row, 1, &pred));
    assert_true(isfinite(pred));
    kace_model_free(&m);
    kace_dataset_free(&ds);
}

static void test_missing_metric_says_what_to_import(void **state)
{
    (void)state;
    kace_dataset *ds = pairs_with(KACE_METRICS_SYSTEM);
    kace_model *m = NULL;
    kace_fit_spec spec = {.kind = KACE_MODEL_SLOWDOWN};
    kace_slowdown_params_default(&spec.slowdown); /* full metrics, asked for */
    assert_int_equal(kace_model_fit_rows(ctx, ds, NULL, 0, &spec, &m), KACE_ERR_INVALID);
    const char *msg = kace_errmsg(ctx);
    assert_non_null(strstr(msg, "workload '"));
    assert_non_null(strstr(msg, "no value for metric"));
    assert_non_null(strstr(msg, "import"));
    assert_non_null(strstr(msg, "--metrics"));
    spec = (kace_fit_spec){.kind = KACE_MODEL_LINEAR, .features = &kace_features_kace};
    assert_int_equal(kace_model_fit_rows(ctx, ds, NULL, 0, &spec, &m), KACE_ERR_INVALID);
    msg = kace_errmsg(ctx);
    assert_non_null(strstr(msg, "'Threads'"));
    assert_non_null(strstr(msg, "launch records"));
    assert_null(m);
    /* A full model asked about a system-only workload says the same. */
    kace_dataset *full = pairs_with(KACE_METRICS_FULL);
    kace_slowdown_params_default(&spec.slowdown);
    spec.kind = KACE_MODEL_SLOWDOWN;
    assert_kace_ok(ctx, kace_model_fit_rows(ctx, full, NULL, 0, &spec, &m));
    double sum;
    assert_int_equal(kace_predict_group(ctx, kace_model_predictor(m), ds, ds->colocations[0].workload, 2, &sum, NULL,
                                        NULL),
                     KACE_ERR_INVALID);
    assert_non_null(strstr(kace_errmsg(ctx), "import"));
    kace_model_free(&m);
    kace_dataset_free(&full);
    kace_dataset_free(&ds);
}

static void test_model_file_checks_the_set(void **state)
{
    (void)state;
    kace_dataset *ds = pairs_with(KACE_METRICS_FULL);
    kace_fit_spec spec = {.kind = KACE_MODEL_LINEAR, .features = &kace_features_kace};
    kace_model *m = NULL, *back = NULL;
    assert_kace_ok(ctx, kace_model_fit_rows(ctx, ds, NULL, 0, &spec, &m));
    char *text = NULL;
    assert_kace_ok(ctx, kace_model_to_text(ctx, m, &text));
    /* Version 3 with a set that lacks the features' metrics: refused. */
    size_t len = strlen(text);
    char *v3 = malloc(len + 64);
    assert_non_null(v3);
    const char *after = strstr(text, "n_features ");
    assert_non_null(after);
    int head = (int)(after - text);
    snprintf(v3, len + 64, "kace-model 3\n%.*smetrics system\n%s", head - 13, text + 13, after);
    assert_int_equal(kace_model_from_text(ctx, v3, strlen(v3), "v3", &back), KACE_ERR_PARSE);
    assert_non_null(strstr(kace_errmsg(ctx), "v3:4:1"));
    /* ... and with the full set it loads. */
    snprintf(v3, len + 64, "kace-model 3\n%.*smetrics full\n%s", head - 13, text + 13, after);
    assert_kace_ok(ctx, kace_model_from_text(ctx, v3, strlen(v3), "v3", &back));
    assert_int_equal(kace_model_metrics(back), KACE_METRICS_FULL);
    kace_model_free(&back);
    free(v3);
    free(text);
    kace_model_free(&m);
    kace_dataset_free(&ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sets_nest_and_restrict),
        cmocka_unit_test(test_chosen_from_what_is_stored),
        cmocka_unit_test(test_every_kind_on_every_set),
        cmocka_unit_test(test_forest_on_system_metrics),
        cmocka_unit_test(test_missing_metric_says_what_to_import),
        cmocka_unit_test(test_model_file_checks_the_set),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
