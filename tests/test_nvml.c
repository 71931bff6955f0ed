/* The NVML sampler against fake libnvidia-ml.so libraries built by the tests
 * (tests/helpers/fake_nvml.c): a complete one with scripted values, one with
 * only the old unversioned entry points, one that lacks a required symbol,
 * one whose calls fail, one without a driver; and a path that does not exist. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kace/nvml.h"
#include "kace/serve.h"
#include "testutil.h"

static kace_ctx *ctx;
static char script[4096];

/* sm mem used_MiB power_mW sm_MHz tx_KBps rx_KBps proc_sm proc_mem proc_used_MiB */
static const double rows[4][10] = {
    {90, 40, 20000, 300000, 1980, 5000, 9000, 80, 30, 12000},
    {70, 60, 24000, 400000, 1755, 3000, 7000, 60, 50, 16000},
    {80, 50, 22000, 350000, 1980, 4000, 8000, 70, 40, 14000},
    {100, 70, 26000, 500000, 1410, 6000, 10000, 90, 60, 18000},
};

static int setup(void **state)
{
    ctx = kace_ctx_new();
    const char *dir = scratch_dir("test_nvml");
    snprintf(script, sizeof script, "%s/script.txt", dir);
    FILE *f = fopen(script, "w");
    if (!f)
        return -1;
    for (int i = 0; i < 4; i++) {
        for (int j = 0; j < 10; j++)
            fprintf(f, "%g%s", rows[i][j], j < 9 ? " " : "\n");
    }
    fclose(f);
    setenv("KACE_FAKE_NVML_SCRIPT", script, 1);
    char pid[32];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    setenv("KACE_FAKE_NVML_PID", pid, 1);
    unsetenv(KACE_NVML_LIBRARY_ENV);
    return ctx ? 0 : -1;
}

static int teardown(void **state)
{
    kace_ctx_free(&ctx);
    return 0;
}

static const char *fake(const char *variant)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/libfake_nvml_%s.so", KACE_FAKE_NVML_DIR, variant);
    return path;
}

static void test_full_library_scripted_values(void **state)
{
    kace_nvml *n = NULL;
    assert_kace_ok(ctx, kace_nvml_open(ctx, fake("full"), 0, &n));
    assert_string_equal(kace_nvml_device_name(n), "Fake GPU 80GB");
    /* Newest entry points first. */
    assert_non_null(strstr(kace_nvml_symbols(n), "nvmlInit_v2"));
    assert_null(strstr(kace_nvml_symbols(n), "nvmlInit "));
    assert_non_null(strstr(kace_nvml_symbols(n), "nvmlDeviceGetComputeRunningProcesses_v3"));
    int pg = (int)getpgrp();
    kace_gpu_stats all;
    kace_gpu_stats_init(&all);
    for (int i = 0; i < 4; i++) {
        kace_gpu_sample s;
        assert_kace_ok(ctx, kace_nvml_sample(ctx, n, &pg, 1, &s));
        /* Per process: the mean of our two samples, the foreign pid left out. */
        assert_true(s.per_process[KACE_GPU_SM_PCT] && s.per_process[KACE_GPU_MEM_USED_MIB]);
        assert_true(fabs(s.v[KACE_GPU_SM_PCT] - rows[i][7]) < 1e-9);
        assert_true(fabs(s.v[KACE_GPU_MEM_PCT] - rows[i][8]) < 1e-9);
        assert_true(fabs(s.v[KACE_GPU_MEM_USED_MIB] - rows[i][9]) < 1e-6);
        assert_false(s.per_process[KACE_GPU_POWER_W]);
        assert_true(fabs(s.v[KACE_GPU_POWER_W] - rows[i][3] / 1000) < 1e-9);
        assert_true(fabs(s.v[KACE_GPU_SM_CLOCK_MHZ] - rows[i][4]) < 1e-9);
        assert_true(fabs(s.v[KACE_GPU_PCIE_TX_MBPS] - rows[i][5] / 1000) < 1e-9);
        assert_true(fabs(s.v[KACE_GPU_PCIE_RX_MBPS] - rows[i][6] / 1000) < 1e-9);
        kace_gpu_stats_add(&all, &s);
    }
    assert_true(fabs(kace_gpu_stats_mean(&all, KACE_GPU_SM_PCT) - 75) < 1e-9);
    assert_true(fabs(kace_gpu_stats_mean(&all, KACE_GPU_POWER_W) - 387.5) < 1e-9);
    assert_true(fabs(all.peak_mem_mib - 18000) < 1e-6);
    assert_int_equal(all.per_process[KACE_GPU_SM_PCT], 4);
    /* Without the workload's groups: device-wide values. */
    kace_gpu_sample s;
    assert_kace_ok(ctx, kace_nvml_sample(ctx, n, NULL, 0, &s));
    assert_false(s.per_process[KACE_GPU_SM_PCT]);
    assert_true(fabs(s.v[KACE_GPU_SM_PCT] - 100) < 1e-9); /* the last row repeats */
    assert_true(fabs(s.v[KACE_GPU_MEM_USED_MIB] - 26000) < 1e-6);
    kace_nvml_close(&n);
    assert_null(n);
}

static void test_old_library_falls_back(void **state)
{
    setenv(KACE_NVML_LIBRARY_ENV, fake("old"), 1); /* through the environment this time */
    kace_nvml *n = NULL;
    assert_kace_ok(ctx, kace_nvml_open(ctx, NULL, 0, &n));
    unsetenv(KACE_NVML_LIBRARY_ENV);
    assert_non_null(strstr(kace_nvml_symbols(n), "nvmlInit"));
    assert_null(strstr(kace_nvml_symbols(n), "_v2"));
    int pg = (int)getpgrp();
    kace_gpu_sample s;
    assert_kace_ok(ctx, kace_nvml_sample(ctx, n, &pg, 1, &s));
    /* No per-process utilization: the device's; memory from the v1 process list. */
    assert_false(s.per_process[KACE_GPU_SM_PCT]);
    assert_true(fabs(s.v[KACE_GPU_SM_PCT] - rows[0][0]) < 1e-9);
    assert_true(s.per_process[KACE_GPU_MEM_USED_MIB]);
    assert_true(fabs(s.v[KACE_GPU_MEM_USED_MIB] - rows[0][9]) < 1e-6);
    /* What the library cannot give is missing, not 0. */
    assert_true(isnan(s.v[KACE_GPU_PCIE_TX_MBPS]) && isnan(s.v[KACE_GPU_PCIE_RX_MBPS]));
    kace_gpu_stats st;
    kace_gpu_stats_init(&st);
    kace_gpu_stats_add(&st, &s);
    assert_true(isnan(kace_gpu_stats_mean(&st, KACE_GPU_PCIE_TX_MBPS)));
    kace_nvml_close(&n);
}

static void test_missing_symbol(void **state)
{
    kace_nvml *n = NULL;
    assert_int_equal(kace_nvml_open(ctx, fake("missing"), 0, &n), KACE_ERR_UNSUPPORTED);
    assert_null(n);
    assert_non_null(strstr(kace_errmsg(ctx), "lacks nvmlDeviceGetUtilizationRates"));
}

static void test_failing_calls(void **state)
{
    kace_nvml *n = NULL;
    assert_kace_ok(ctx, kace_nvml_open(ctx, fake("failing"), 0, &n));
    kace_gpu_sample s;
    assert_int_equal(kace_nvml_sample(ctx, n, NULL, 0, &s), KACE_ERR_IO);
    assert_non_null(strstr(kace_errmsg(ctx), "nvmlDeviceGetUtilizationRates failed"));
    assert_non_null(strstr(kace_errmsg(ctx), "GPU is lost"));
    kace_nvml_close(&n);
    /* A device that does not exist. */
    assert_int_equal(kace_nvml_open(ctx, fake("full"), 3, &n), KACE_ERR_UNSUPPORTED);
    assert_non_null(strstr(kace_errmsg(ctx), "no GPU 3"));
}

static void test_no_driver(void **state)
{
    kace_nvml *n = NULL;
    assert_int_equal(kace_nvml_open(ctx, fake("nodriver"), 0, &n), KACE_ERR_UNSUPPORTED);
    assert_non_null(strstr(kace_errmsg(ctx), "no NVIDIA driver is loaded"));
    assert_non_null(strstr(kace_errmsg(ctx), "Driver Not Loaded"));
    assert_int_equal(kace_nvml_open(ctx, "/nonexistent/libnvidia-ml.so.1", 0, &n), KACE_ERR_UNSUPPORTED);
    assert_non_null(strstr(kace_errmsg(ctx), "no NVIDIA driver found"));
    assert_null(n);
}

/* Without MPS the MPS list is offered and empty: nobody is an MPS client. */
static void test_full_library_has_empty_mps_list(void **state)
{
    kace_nvml *n = NULL;
    assert_kace_ok(ctx, kace_nvml_open(ctx, fake("full"), 0, &n));
    assert_true(kace_nvml_has_mps_list(n));
    assert_non_null(strstr(kace_nvml_symbols(n), "nvmlDeviceGetMPSComputeRunningProcesses_v3"));
    kace_gpu_process procs[8];
    size_t count = 99;
    assert_kace_ok(ctx, kace_nvml_mps_processes(ctx, n, procs, 8, &count));
    assert_int_equal(count, 0);
    int pg = (int)getpgrp();
    kace_gpu_sample s;
    assert_kace_ok(ctx, kace_nvml_sample(ctx, n, &pg, 1, &s));
    assert_false(s.mps_client);
    assert_int_equal(kace_gpu_sample_drop_device_wide(&s), 0); /* all per-process: nothing to drop */
    kace_nvml_close(&n);
    /* The old library has no MPS list at all. */
    assert_kace_ok(ctx, kace_nvml_open(ctx, fake("old"), 0, &n));
    assert_false(kace_nvml_has_mps_list(n));
    assert_int_equal(kace_nvml_mps_processes(ctx, n, procs, 8, &count), KACE_ERR_UNSUPPORTED);
    kace_nvml_close(&n);
}

/* Under MPS, utilization samples belong to the server: the workload's SM%
 * and mem% are the device's (per_process false, dropped for a per-member
 * value), its memory comes from the MPS list. */
static void test_mps_client_utilization_is_not_its_own(void **state)
{
    kace_nvml *n = NULL;
    assert_kace_ok(ctx, kace_nvml_open(ctx, fake("mps"), 0, &n));
    assert_true(kace_nvml_has_mps_list(n));
    int pg = (int)getpgrp();
    kace_gpu_stats st;
    kace_gpu_stats_init(&st);
    for (int i = 0; i < 4; i++) {
        kace_gpu_sample s;
        assert_kace_ok(ctx, kace_nvml_sample(ctx, n, &pg, 1, &s));
        assert_true(s.mps_client);
        /* Not the server's per-process samples (rows[i][7]) passed off as ours. */
        assert_false(s.per_process[KACE_GPU_SM_PCT]);
        assert_false(s.per_process[KACE_GPU_MEM_PCT]);
        assert_true(fabs(s.v[KACE_GPU_SM_PCT] - rows[i][0]) < 1e-9);
        assert_true(s.per_process[KACE_GPU_MEM_USED_MIB]);
        assert_true(fabs(s.v[KACE_GPU_MEM_USED_MIB] - rows[i][9]) < 1e-6);
        assert_int_equal(kace_gpu_sample_drop_device_wide(&s), 2);
        assert_true(isnan(s.v[KACE_GPU_SM_PCT]) && isnan(s.v[KACE_GPU_MEM_PCT]));
        assert_true(fabs(s.v[KACE_GPU_MEM_USED_MIB] - rows[i][9]) < 1e-6); /* kept: it is its own */
        assert_true(fabs(s.v[KACE_GPU_POWER_W] - rows[i][3] / 1000) < 1e-9); /* device fields stay */
        kace_gpu_stats_add(&st, &s);
    }
    assert_int_equal(st.mps_client_samples, 4);
    assert_true(isnan(kace_gpu_stats_mean(&st, KACE_GPU_SM_PCT)));
    assert_true(fabs(st.peak_mem_mib - 18000) < 1e-6);

    /* The list itself: our pid with its memory, the foreign client, and no
     * server. */
    kace_gpu_process procs[80];
    size_t count = 0;
    assert_kace_ok(ctx, kace_nvml_mps_processes(ctx, n, procs, 80, &count));
    bool ours = false, foreign = false;
    for (size_t i = 0; i < count; i++) {
        ours |= procs[i].pid == (int)getpid() && fabs(procs[i].used_mib - rows[3][9]) < 1e-6;
        foreign |= procs[i].pid == 1;
        assert_int_not_equal(procs[i].pid, 2);
    }
    assert_true(ours && foreign);
    /* A workload that did not run under MPS is not in it. */
    setenv("KACE_FAKE_NVML_MPS_CLIENTS", "none", 1);
    kace_gpu_sample s;
    kace_status rc = kace_nvml_sample(ctx, n, &pg, 1, &s);
    unsetenv("KACE_FAKE_NVML_MPS_CLIENTS");
    assert_kace_ok(ctx, rc);
    assert_false(s.mps_client);
    assert_false(s.per_process[KACE_GPU_MEM_USED_MIB]);
    assert_int_equal(kace_gpu_sample_drop_device_wide(&s), 3);
    kace_nvml_close(&n);
}

/* kace serve's GPU source is this loader too: every GPU NVML counts, by
 * UUID where the library gives one, a GPU that cannot be opened left out. */
static void test_every_gpu_for_serve(void **state)
{
    kace_nvml *n = NULL;
    assert_kace_ok(ctx, kace_nvml_open(ctx, fake("full"), 0, &n));
    unsigned count = 0;
    assert_kace_ok(ctx, kace_nvml_device_count(ctx, n, &count));
    assert_int_equal(count, 2);
    assert_string_equal(kace_nvml_device_uuid(n), "GPU-fake-0");
    assert_int_equal(kace_nvml_select(ctx, n, 1), KACE_ERR_NOT_FOUND);
    assert_non_null(strstr(kace_errmsg(ctx), "no GPU 1"));
    assert_string_equal(kace_nvml_device_uuid(n), "GPU-fake-0"); /* the previous one stays */
    kace_nvml_close(&n);

    setenv(KACE_NVML_LIBRARY_ENV, fake("full"), 1);
    void *src = NULL;
    kace_serve_gpu_sample s[4];
    size_t got = 0;
    assert_kace_ok(ctx, kace_serve_gpu_nvml.open(ctx, &src));
    assert_kace_ok(ctx, kace_serve_gpu_nvml.sample(ctx, src, s, 4, &got));
    kace_serve_gpu_nvml.close(&src);
    assert_null(src);
    assert_int_equal(got, 1);
    assert_string_equal(s[0].id, "GPU-fake-0");
    assert_string_equal(s[0].name, "Fake GPU 80GB");
    bool scripted = false; /* the script's device SM%, whichever row is current */
    for (int i = 0; i < 4; i++)
        scripted = scripted || fabs(s[0].utilization - rows[i][0] / 100.0) < 1e-12;
    assert_true(scripted);
    assert_true(s[0].memory_utilization >= 0 && s[0].memory_utilization <= 1);

    /* The old library: no UUID, so the index names the GPU. */
    setenv(KACE_NVML_LIBRARY_ENV, fake("old"), 1);
    assert_kace_ok(ctx, kace_serve_gpu_nvml.open(ctx, &src));
    assert_kace_ok(ctx, kace_serve_gpu_nvml.sample(ctx, src, s, 4, &got));
    kace_serve_gpu_nvml.close(&src);
    assert_int_equal(got, 1);
    assert_string_equal(s[0].id, "0");
    /* No library: unsupported, with the reason. */
    setenv(KACE_NVML_LIBRARY_ENV, "/nonexistent/libnvidia-ml.so.1", 1);
    assert_int_equal(kace_serve_gpu_nvml.open(ctx, &src), KACE_ERR_UNSUPPORTED);
    assert_null(src);
    unsetenv(KACE_NVML_LIBRARY_ENV);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_library_scripted_values), cmocka_unit_test(test_old_library_falls_back),
        cmocka_unit_test(test_missing_symbol),               cmocka_unit_test(test_failing_calls),
        cmocka_unit_test(test_no_driver),
        cmocka_unit_test(test_full_library_has_empty_mps_list),
        cmocka_unit_test(test_mps_client_utilization_is_not_its_own),
        cmocka_unit_test(test_every_gpu_for_serve),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
