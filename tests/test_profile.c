/* kace profile's recipe (lib/measure/profile.c) without a GPU: its
 * defaults, its refusal of missing inputs, and the batch it builds from the
 * two runs' results. The runs themselves are driven end to end against fake
 * NVML and CUDA libraries by tests/cli_profile.sh. */
#include "testutil.h"

#include <math.h>
#include <string.h>

#include "kace/profile.h"

static void test_defaults(void **state)
{
    (void)state;
    kace_profile_options o;
    kace_profile_options_init(&o);
    assert_true(o.clean.warmup_s == 10 && o.clean.window_s == 30);
    assert_true(o.counters.warmup_s == 10 && o.counters.window_s == 15);
    assert_null(o.progress);
    assert_null(o.cancel);
}

static void test_needs_inputs(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_profile_options o;
    kace_profile_options_init(&o);
    kace_profile_result r;
    assert_int_equal(kace_profile_run(ctx, NULL, &o, &r), KACE_ERR_INVALID);
    assert_int_equal(r.failure, KACE_PROFILE_FAIL_ERROR);
    assert_null(r.recording);
    kace_profile_result_release(&r);
    kace_ctx_free(&ctx);
}

static const kace_profile_value *find(const kace_import_batch *b, const char *metric)
{
    for (size_t i = 0; i < b->n_values; i++)
        if (strcmp(b->values[i].metric, metric) == 0)
            return &b->values[i];
    return NULL;
}

/* The clean run's throughput and NVML values, the counters run's kernel
 * metrics; what was not measured is stored as missing, never 0. */
static void test_batch(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_profile_result r;
    memset(&r, 0, sizeof r);
    kace_gpu_stats_init(&r.all);
    kace_gpu_stats_init(&r.steady);
    r.clean.throughput.samples_per_s = 1000;
    r.clean.throughput.sd = NAN;
    r.counters.throughput.samples_per_s = 250; /* slowed by replay: never stored */
    r.all.peak_mem_mib = 2048;
    r.kernels.have[KACE_KM_THREADS] = true;
    r.kernels.value[KACE_KM_THREADS] = 512;
    kace_import_batch *b = NULL;
    assert_kace_ok(ctx, kace_profile_batch(ctx, "w", &r, &b));
    assert_non_null(b);
    const kace_profile_value *v = find(b, "exclusive_throughput");
    assert_non_null(v);
    assert_string_equal(v->workload, "w");
    assert_true(v->value == 1000);
    assert_non_null(v = find(b, "exclusive_throughput_sd"));
    assert_true(isnan(v->value));
    assert_non_null(v = find(b, "memcap"));
    assert_true(v->value == 2.0);
    assert_non_null(v = find(b, "sm%"));
    assert_true(isnan(v->value));
    assert_non_null(v = find(b, kace_kernel_metric_name(KACE_KM_THREADS)));
    assert_true(v->value == 512);
    assert_null(find(b, kace_kernel_metric_name(KACE_KM_SM)));
    kace_import_batch_free(&b);
    kace_ctx_free(&ctx);
}

/* The cap: the fewest signatures (the longest first) that cover the share,
 * at most max; a total of 0 replays none. */
static void test_cap_count(void **state)
{
    (void)state;
    kace_kernel_signature s[4] = {{.time_s = 5}, {.time_s = 3}, {.time_s = 1}, {.time_s = 1}};
    double share = -1;
    assert_int_equal(kace_replay_cap_count(s, 4, 0.95, 40, &share), 4);
    assert_true(share == 1);
    assert_int_equal(kace_replay_cap_count(s, 4, 0.75, 40, &share), 2);
    assert_true(fabs(share - 0.8) < 1e-12);
    assert_int_equal(kace_replay_cap_count(s, 4, 0.95, 1, &share), 1);
    assert_true(fabs(share - 0.5) < 1e-12);
    assert_int_equal(kace_replay_cap_count(s, 4, 1, 0, &share), 4);
    assert_int_equal(kace_replay_cap_count(s, 0, 0.95, 40, &share), 0);
    assert_true(share == 1);
    kace_kernel_signature zero[2] = {{.time_s = 0}, {.time_s = 0}};
    assert_int_equal(kace_replay_cap_count(zero, 2, 0.95, 40, &share), 0);
    kace_profile_options o;
    kace_profile_options_init(&o);
    assert_true(o.replay_cover == 0.95 && o.replay_max == 40);
}

/* The cap is stored with a profile with counters: what was replayed, of
 * what, its share, the options; without a cap the counts are missing. */
static void test_batch_cap(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_profile_result r;
    memset(&r, 0, sizeof r);
    kace_gpu_stats_init(&r.all);
    kace_gpu_stats_init(&r.steady);
    r.clean.throughput.samples_per_s = 1000;
    r.cap = (kace_replay_cap){.on = true, .cover = 0.95, .max = 40, .seen = 300, .replayed = 40, .time_share = 0.9};
    kace_import_batch *b = NULL;
    assert_kace_ok(ctx, kace_profile_batch(ctx, "w", &r, &b));
    const kace_profile_value *v;
    assert_non_null(v = find(b, "replay_signatures"));
    assert_true(v->value == 40);
    assert_non_null(v = find(b, "replay_signatures_seen"));
    assert_true(v->value == 300);
    assert_non_null(v = find(b, "replay_time_share"));
    assert_true(v->value == 0.9);
    assert_non_null(v = find(b, "replay_max"));
    assert_true(v->value == 40);
    assert_non_null(v = find(b, "counters_time_share"));
    assert_true(v->value == 0); /* no kernel with counters in this made-up result */
    kace_import_batch_free(&b);
    r.cap = (kace_replay_cap){.on = false, .cover = 1, .max = 0};
    assert_kace_ok(ctx, kace_profile_batch(ctx, "w", &r, &b));
    assert_non_null(v = find(b, "replay_signatures"));
    assert_true(isnan(v->value));
    assert_non_null(v = find(b, "replay_time_share"));
    assert_true(v->value == 1);
    kace_import_batch_free(&b);
    r.no_counters = true;
    assert_kace_ok(ctx, kace_profile_batch(ctx, "w", &r, &b));
    assert_null(find(b, "replay_signatures"));
    kace_import_batch_free(&b);
    kace_ctx_free(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_needs_inputs),
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_cap_count),
        cmocka_unit_test(test_batch_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
