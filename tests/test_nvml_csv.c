/* nvidia-smi and DCGM samples imported as system profiles: recognised by
 * header, reduced (means, peak memory in GiB), and bad input refused with
 * file:line:col. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kace/import.h"
#include "testutil.h"

static kace_import_batch *parse(kace_ctx *ctx, const char *text, const char *origin)
{
    kace_import_batch *b = NULL;
    assert_kace_ok(ctx, kace_import_parse_buffer(ctx, text, strlen(text), origin, NULL, &b));
    assert_int_equal(b->kind, KACE_FILE_NVML_SAMPLES);
    return b;
}

/* The value of workload's metric in b; fails when absent. */
static double value_of(const kace_import_batch *b, const char *workload, const char *metric)
{
    for (size_t i = 0; i < b->n_values; i++)
        if (strcmp(b->values[i].workload, workload) == 0 && strcmp(b->values[i].metric, metric) == 0)
            return b->values[i].value;
    fail_msg("no %s of %s", metric, workload);
    return NAN;
}

static bool has_value(const kace_import_batch *b, const char *metric)
{
    for (size_t i = 0; i < b->n_values; i++)
        if (strcmp(b->values[i].metric, metric) == 0)
            return true;
    return false;
}

static void test_nvidia_smi(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    /* --format=csv: units in the header and the cells; [N/A] is no sample. */
    kace_import_batch *b = parse(ctx,
                                 "timestamp, index, name, utilization.gpu [%], utilization.memory [%], "
                                 "memory.used [MiB], power.draw [W]\n"
                                 "2024/05/01 12:00:00.000, 0, Tesla V100, 40 %, 20 %, 1000 MiB, 120.5 W\n"
                                 "2024/05/01 12:00:00.500, 0, Tesla V100, 60 %, [N/A], 2048 MiB, 130.0 W\n",
                                 "runs/bert_batch8-inf.csv");
    assert_string_equal(kace_file_kind_name(b->kind), "nvidia-smi/DCGM samples");
    assert_int_equal(b->n_values, 3);
    assert_true(fabs(value_of(b, "bert_batch8-inf", "sm%") - 50) < 1e-12);
    assert_true(fabs(value_of(b, "bert_batch8-inf", "mem%") - 20) < 1e-12);
    assert_true(fabs(value_of(b, "bert_batch8-inf", "memcap") - 2) < 1e-12); /* peak, MiB / 1024 */
    kace_import_batch_free(&b);

    /* --format=csv,nounits with a workload column: two workloads in one file. */
    b = parse(ctx,
              "workload,index,utilization.gpu [%],utilization.memory [%],memory.used [MiB]\n"
              "a_batch2-inf,0,10,5,512\n"
              "b_batch2-inf,1,90,45,8192\n"
              "a_batch2-inf,0,30,7,1024\n",
              "samples.csv");
    assert_int_equal(b->n_values, 6);
    assert_true(fabs(value_of(b, "a_batch2-inf", "sm%") - 20) < 1e-12);
    assert_true(fabs(value_of(b, "a_batch2-inf", "mem%") - 6) < 1e-12);
    assert_true(fabs(value_of(b, "a_batch2-inf", "memcap") - 1) < 1e-12);
    assert_true(fabs(value_of(b, "b_batch2-inf", "memcap") - 8) < 1e-12);
    kace_import_batch_free(&b);
    kace_ctx_free(&ctx);
}

static void test_dcgm(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_import_batch *b = parse(ctx,
                                 "timestamp,gpu,DCGM_FI_DEV_GPU_UTIL,DCGM_FI_DEV_MEM_COPY_UTIL,DCGM_FI_DEV_FB_USED,"
                                 "DCGM_FI_PROF_PCIE_RX_BYTES,DCGM_FI_PROF_PCIE_TX_BYTES\n"
                                 "1714564800,0,70,30,4096,2000000,1000000\n"
                                 "1714564801,0,80,40,6144,4000000,3000000\n",
                                 "vit_batch16-train.csv");
    assert_int_equal(b->n_values, 5);
    assert_true(fabs(value_of(b, "vit_batch16-train", "sm%") - 75) < 1e-12);
    assert_true(fabs(value_of(b, "vit_batch16-train", "mem%") - 35) < 1e-12);
    assert_true(fabs(value_of(b, "vit_batch16-train", "memcap") - 6) < 1e-12);
    assert_true(fabs(value_of(b, "vit_batch16-train", "pcie_rx_MBps") - 3) < 1e-12);
    assert_true(fabs(value_of(b, "vit_batch16-train", "pcie_tx_MBps") - 2) < 1e-12);
    kace_import_batch_free(&b);
    /* A metric the GPU never filled is not added. */
    b = parse(ctx, "DCGM_FI_DEV_GPU_UTIL,DCGM_FI_DEV_FB_USED\n55,\n65,\n", "x_batch1-inf.csv");
    assert_int_equal(b->n_values, 1);
    assert_false(has_value(b, "memcap"));
    kace_import_batch_free(&b);
    kace_ctx_free(&ctx);
}

/* text must fail; the message holds want. */
static void refused(kace_ctx *ctx, const char *text, const char *want)
{
    kace_import_batch *b = NULL;
    kace_status st = kace_import_parse_buffer(ctx, text, strlen(text), "smi.csv", NULL, &b);
    if (st == KACE_OK)
        fail_msg("accepted: %s", text);
    assert_null(b);
    if (!strstr(kace_errmsg(ctx), want))
        fail_msg("message '%s' lacks '%s'", kace_errmsg(ctx), want);
}

static void test_bad_input(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    static const char head[] = "timestamp, index, utilization.gpu [%], utilization.memory [%], memory.used [MiB]\n";
    char text[512];
    snprintf(text, sizeof text, "%s1, 0, 40 %%, 20 %%, 1000 MiB\n2, 1, 40 %%, 20 %%, 1000 MiB\n", head);
    refused(ctx, text, "smi.csv:3:");
    refused(ctx, text, "two GPUs");
    snprintf(text, sizeof text, "%s1, 0, 4x0 %%, 20 %%, 1000 MiB\n", head);
    refused(ctx, text, "smi.csv:2:");
    snprintf(text, sizeof text, "%s1, 0, -4 %%, 20 %%, 1000 MiB\n", head);
    refused(ctx, text, "number >= 0");
    snprintf(text, sizeof text, "%s1, 0, 140 %%, 20 %%, 1000 MiB\n", head);
    refused(ctx, text, "sm%");
    snprintf(text, sizeof text, "%s1, 0, 40 %%, 20 %%\n", head);
    refused(ctx, text, "expected 5 fields");
    refused(ctx, head, "no samples");
    refused(ctx, "workload,utilization.gpu [%]\n../etc,40\n", "smi.csv:2:1");
    /* No workload column: the file's name must be a workload's. */
    static const char samples[] = "utilization.gpu [%]\n40\n";
    kace_import_batch *b = NULL;
    assert_int_equal(kace_import_parse_buffer(ctx, samples, strlen(samples), "runs/my job.csv", NULL, &b),
                     KACE_ERR_INVALID);
    assert_non_null(strstr(kace_errmsg(ctx), "--workload"));
    kace_import_options opt = {.workload = "my-job_batch1-inf"};
    assert_kace_ok(ctx, kace_import_parse_buffer(ctx, samples, strlen(samples), "runs/my job.csv", &opt, &b));
    assert_string_equal(b->values[0].workload, "my-job_batch1-inf");
    kace_import_batch_free(&b);
    kace_ctx_free(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nvidia_smi),
        cmocka_unit_test(test_dcgm),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
