/* GPU backends (include/kace/gpu.h): a fake backend added only through the
 * table (kace_gpu_register) reaches a consumer, serve's GPU source
 * (kace_serve_gpu_nvml), and the handle respects the capabilities the fake
 * lacks: no UUID (the index names the GPU), no PCIe (NaN), no per-process
 * values (device-wide only), no MPS client list (unsupported, never asked). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kace/gpu.h"
#include "kace/nvml.h"
#include "kace/serve.h"
#include "testutil.h"

static kace_ctx *ctx;

/* ---- the fake: two GPUs, SM% 40 + 10 * index ---------------------------------- */

typedef struct fake_gpu {
    unsigned dev;
} fake_gpu;

static int opens, closes, uuid_calls, mps_calls, fail_open;
static size_t last_n_pgids;

static kace_status fake_open(kace_ctx *c, unsigned index, void **impl)
{
    *impl = NULL;
    if (fail_open)
        return kace_fail(c, KACE_ERR_UNSUPPORTED, "fake GPU: no device");
    if (index > 1)
        return kace_fail(c, KACE_ERR_NOT_FOUND, "fake GPU: no device %u", index);
    fake_gpu *f = calloc(1, sizeof *f);
    if (!f)
        return kace_fail(c, KACE_ERR_NOMEM, "out of memory");
    f->dev = index;
    opens++;
    *impl = f;
    return KACE_OK;
}

static void fake_close(void *impl)
{
    closes++;
    free(impl);
}

static kace_status fake_count(kace_ctx *c, void *impl, unsigned *count)
{
    (void)c;
    (void)impl;
    *count = 2;
    return KACE_OK;
}

static kace_status fake_select(kace_ctx *c, void *impl, unsigned index)
{
    if (index > 1)
        return kace_fail(c, KACE_ERR_NOT_FOUND, "fake GPU: no device %u", index);
    ((fake_gpu *)impl)->dev = index;
    return KACE_OK;
}

static const char *fake_name(const void *impl)
{
    return ((const fake_gpu *)impl)->dev ? "Fake B" : "Fake A";
}

static const char *fake_uuid(const void *impl)
{
    uuid_calls++;
    return ((const fake_gpu *)impl)->dev ? "GPU-fake-b" : "GPU-fake-a";
}

/* Claims per-process values and PCIe whatever it was promised: the handle
 * must not pass on what the capability bits leave out. */
static kace_status fake_sample(kace_ctx *c, void *impl, const int *pgids, size_t n_pgids, kace_gpu_sample *out)
{
    (void)c;
    (void)pgids;
    last_n_pgids = n_pgids;
    for (int i = 0; i < KACE_GPU_N_FIELDS; i++) {
        out->v[i] = NAN;
        out->per_process[i] = n_pgids > 0;
    }
    out->mps_client = false;
    out->v[KACE_GPU_SM_PCT] = 40 + 10.0 * ((fake_gpu *)impl)->dev;
    out->v[KACE_GPU_MEM_PCT] = 20;
    out->v[KACE_GPU_PCIE_TX_MBPS] = 5;
    out->v[KACE_GPU_PCIE_RX_MBPS] = 6;
    return KACE_OK;
}

static kace_status fake_mps(kace_ctx *c, void *impl, kace_gpu_process *out, size_t max, size_t *n_out)
{
    (void)c;
    (void)impl;
    (void)out;
    (void)max;
    mps_calls++;
    *n_out = 0;
    return KACE_OK;
}

/* Offers nothing but names and device-wide samples, though it has functions
 * for UUIDs and MPS lists. */
static const kace_gpu_backend_ops fake_plain = {
    .name = "fake-plain",
    .caps = 0,
    .open = fake_open,
    .close = fake_close,
    .device_count = fake_count,
    .select = fake_select,
    .device_name = fake_name,
    .device_uuid = fake_uuid,
    .sample = fake_sample,
    .mps_processes = fake_mps,
};

/* Everything. */
static const kace_gpu_backend_ops fake_full = {
    .name = "fake-full",
    .caps = KACE_GPU_CAP_PER_PROCESS | KACE_GPU_CAP_MPS_LIST | KACE_GPU_CAP_UUID | KACE_GPU_CAP_PCIE,
    .open = fake_open,
    .close = fake_close,
    .device_count = fake_count,
    .select = fake_select,
    .device_name = fake_name,
    .device_uuid = fake_uuid,
    .sample = fake_sample,
    .mps_processes = fake_mps,
};

static int setup(void **state)
{
    (void)state;
    ctx = kace_ctx_new();
    if (!ctx)
        return -1;
    unsetenv(KACE_GPU_BACKEND_ENV);
    setenv(KACE_NVML_LIBRARY_ENV, "/nonexistent/libnvidia-ml.so.1", 1); /* no NVIDIA driver here */
    if (kace_gpu_register(ctx, &fake_plain) || kace_gpu_register(ctx, &fake_full))
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unsetenv(KACE_GPU_BACKEND_ENV);
    unsetenv(KACE_NVML_LIBRARY_ENV);
    kace_ctx_free(&ctx);
    return 0;
}

static void test_the_list(void **state)
{
    (void)state;
    size_t n = 0;
    const kace_gpu_backend_ops *const *list = kace_gpu_backends(&n);
    assert_int_equal(n, 3);
    assert_string_equal(list[0]->name, "nvml"); /* the built-in one first */
    assert_ptr_equal(list[1], &fake_plain);
    assert_ptr_equal(list[2], &fake_full);
    /* A taken name, a table without the required functions. */
    assert_int_equal(kace_gpu_register(ctx, &fake_full), KACE_ERR_INVALID);
    kace_gpu_backend_ops broken = fake_full;
    broken.name = "broken";
    broken.sample = NULL;
    assert_int_equal(kace_gpu_register(ctx, &broken), KACE_ERR_INVALID);
    kace_gpu_backends(&n);
    assert_int_equal(n, 3);
}

static void test_open_picks_first_that_opens_or_named(void **state)
{
    (void)state;
    kace_gpu *g = NULL;
    /* NVML cannot load: the next backend in the list opens. */
    assert_kace_ok(ctx, kace_gpu_open(ctx, 0, &g));
    assert_string_equal(kace_gpu_backend_name(g), "fake-plain");
    kace_gpu_close(&g);
    assert_null(g);
    /* Named. */
    setenv(KACE_GPU_BACKEND_ENV, "fake-full", 1);
    assert_kace_ok(ctx, kace_gpu_open(ctx, 1, &g));
    assert_string_equal(kace_gpu_backend_name(g), "fake-full");
    assert_string_equal(kace_gpu_device_name(g), "Fake B");
    kace_gpu_close(&g);
    setenv(KACE_GPU_BACKEND_ENV, "nosuch", 1);
    assert_int_equal(kace_gpu_open(ctx, 0, &g), KACE_ERR_UNSUPPORTED);
    assert_non_null(strstr(kace_errmsg(ctx), "unknown GPU backend 'nosuch'"));
    assert_non_null(strstr(kace_errmsg(ctx), "nvml, fake-plain, fake-full"));
    assert_null(g);
    /* None opens: the first backend's (NVML's) message stands. */
    unsetenv(KACE_GPU_BACKEND_ENV);
    fail_open = 1;
    assert_int_equal(kace_gpu_open(ctx, 0, &g), KACE_ERR_UNSUPPORTED);
    assert_non_null(strstr(kace_errmsg(ctx), "no NVIDIA driver found"));
    assert_null(g);
    fail_open = 0;
}

static void test_missing_capabilities_are_respected(void **state)
{
    (void)state;
    kace_gpu *g = NULL;
    assert_kace_ok(ctx, kace_gpu_open_backend(ctx, &fake_plain, 0, &g));
    assert_int_equal(kace_gpu_caps(g), 0);
    assert_false(kace_gpu_has(g, KACE_GPU_CAP_MPS_LIST));
    uuid_calls = mps_calls = 0;
    assert_string_equal(kace_gpu_device_uuid(g), "");
    kace_gpu_process procs[4];
    size_t count = 9;
    assert_int_equal(kace_gpu_mps_processes(ctx, g, procs, 4, &count), KACE_ERR_UNSUPPORTED);
    assert_int_equal(count, 0);
    assert_int_equal(uuid_calls + mps_calls, 0); /* never asked */
    int pg = 1234;
    kace_gpu_sample x;
    last_n_pgids = 99;
    assert_kace_ok(ctx, kace_gpu_read(ctx, g, &pg, 1, &x));
    assert_int_equal(last_n_pgids, 0); /* device-wide only */
    assert_false(x.per_process[KACE_GPU_SM_PCT]);
    assert_true(isnan(x.v[KACE_GPU_PCIE_TX_MBPS]) && isnan(x.v[KACE_GPU_PCIE_RX_MBPS]));
    assert_true(x.v[KACE_GPU_SM_PCT] == 40);
    kace_gpu_close(&g);

    /* The same functions with every bit: all of it comes through. */
    assert_kace_ok(ctx, kace_gpu_open_backend(ctx, &fake_full, 0, &g));
    assert_true(kace_gpu_has(g, KACE_GPU_CAP_MPS_LIST | KACE_GPU_CAP_UUID));
    assert_string_equal(kace_gpu_device_uuid(g), "GPU-fake-a");
    assert_kace_ok(ctx, kace_gpu_mps_processes(ctx, g, procs, 4, &count));
    assert_int_equal(mps_calls, 1);
    assert_kace_ok(ctx, kace_gpu_read(ctx, g, &pg, 1, &x));
    assert_int_equal(last_n_pgids, 1);
    assert_true(x.per_process[KACE_GPU_SM_PCT]);
    assert_true(x.v[KACE_GPU_PCIE_TX_MBPS] == 5);
    kace_gpu_close(&g);
    assert_int_equal(opens, closes);
}

/* The consumer: serve's GPU source reaches the fake through the list alone. */
static void test_serve_source_uses_the_backend(void **state)
{
    (void)state;
    kace_serve_gpu_sample s[4];
    size_t got = 0;
    void *src = NULL;
    uuid_calls = 0;
    setenv(KACE_GPU_BACKEND_ENV, "fake-plain", 1);
    assert_kace_ok(ctx, kace_serve_gpu_nvml.open(ctx, &src));
    assert_kace_ok(ctx, kace_serve_gpu_nvml.sample(ctx, src, s, 4, &got));
    kace_serve_gpu_nvml.close(&src);
    assert_null(src);
    assert_int_equal(got, 2);
    assert_string_equal(s[0].id, "0"); /* no UUID capability: the index */
    assert_string_equal(s[1].id, "1");
    assert_int_equal(uuid_calls, 0);
    assert_string_equal(s[0].name, "Fake A");
    assert_string_equal(s[1].name, "Fake B");
    assert_true(fabs(s[0].utilization - 0.40) < 1e-12);
    assert_true(fabs(s[1].utilization - 0.50) < 1e-12);
    assert_true(fabs(s[1].memory_utilization - 0.20) < 1e-12);

    setenv(KACE_GPU_BACKEND_ENV, "fake-full", 1);
    assert_kace_ok(ctx, kace_serve_gpu_nvml.open(ctx, &src));
    assert_kace_ok(ctx, kace_serve_gpu_nvml.sample(ctx, src, s, 4, &got));
    kace_serve_gpu_nvml.close(&src);
    assert_int_equal(got, 2);
    assert_string_equal(s[0].id, "GPU-fake-a");
    assert_string_equal(s[1].id, "GPU-fake-b");
    unsetenv(KACE_GPU_BACKEND_ENV);
    assert_int_equal(opens, closes);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_list),
        cmocka_unit_test(test_open_picks_first_that_opens_or_named),
        cmocka_unit_test(test_missing_capabilities_are_respected),
        cmocka_unit_test(test_serve_source_uses_the_backend),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
