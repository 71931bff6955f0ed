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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_needs_inputs),
        cmocka_unit_test(test_batch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
