/* Nsight Compute export -> kernel metrics (lib/data/ncu.c).
 *
 * The fixtures under tests/data/ncu are hand-made exports in three layouts;
 * the expected values below are the duration-weighted means written out by
 * hand (durations in microseconds). */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/csv.h"
#include "data/batch.h"
#include "kace/import.h"

#define TOL 1e-9

static kace_import_batch *batch_new(void)
{
    kace_import_batch *b = calloc(1, sizeof *b);
    assert_non_null(b);
    return b;
}

static void batch_free(kace_import_batch *b)
{
    if (b) {
        free(b->values);
        free(b->runs);
        free(b->splits);
        free(b);
    }
}

static const kace_profile_value *find_value(const kace_import_batch *b, const char *metric)
{
    for (size_t i = 0; i < b->n_values; i++)
        if (strcmp(b->values[i].metric, metric) == 0)
            return &b->values[i];
    return NULL;
}

static void check_metric(const kace_import_batch *b, const char *workload, const char *metric, double want)
{
    const kace_profile_value *v = find_value(b, metric);
    if (!v)
        fail_msg("metric '%s' was not added", metric);
    assert_string_equal(v->workload, workload);
    assert_false(v->embedded);
    double tol = TOL * fmax(1.0, fabs(want));
    if (!(fabs(v->value - want) <= tol))
        fail_msg("%s: got %.17g, want %.17g", metric, v->value, want);
}

static kace_status parse_fixture(kace_ctx *ctx, const char *name, const char *workload, kace_import_batch *b)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/ncu/%s", KACE_TEST_DATA, name);
    char *data = NULL;
    size_t len = 0;
    assert_kace_ok(ctx, kace_read_file(ctx, path, &data, &len));
    kace_status st = kace_ncu_parse_buffer(ctx, data, len, name, workload, b);
    free(data);
    return st;
}

static kace_status parse_text(kace_ctx *ctx, const char *text, kace_import_batch *b)
{
    return kace_ncu_parse_buffer(ctx, text, strlen(text), "t.csv", "w_batch2-train", b);
}

/* ---- fixtures -------------------------------------------------------------- */

/* Classic layout: ==PROF== lines, 15 columns, usecond/nsecond/msecond,
 * Kbyte/block, thousands separators, a Memory Throughput in Gbyte/second in
 * the Memory Workload Analysis section that must be ignored. Kernels:
 *   ID  dur(us)  threads  SM  DRAM  Mem  regs/thr  grid  smem/block(bytes)
 *   0   10       1024     50  20    30   32        4     1020 (1.02 Kbyte)
 *   1   250      65536    80  60    70   64        256   0
 *   2   0.5      128      10  5     8    16        1     512
 *   3   1500     2048     40  90    95   255       8     48000 (48 Kbyte) */
static void test_classic(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_import_batch *b = batch_new();
    assert_kace_ok(ctx, parse_fixture(ctx, "classic.csv", "bert-base-cased_batch8-train", b));
    const char *w = "bert-base-cased_batch8-train";
    const double T = 10 + 250 + 0.5 + 1500;
    check_metric(b, w, "Threads", (1024.0 * 10 + 65536.0 * 250 + 128.0 * 0.5 + 2048.0 * 1500) / T);
    check_metric(b, w, "Compute (SM) Throughput", (50.0 * 10 + 80.0 * 250 + 10.0 * 0.5 + 40.0 * 1500) / T);
    check_metric(b, w, "DRAM Throughput", (20.0 * 10 + 60.0 * 250 + 5.0 * 0.5 + 90.0 * 1500) / T);
    check_metric(b, w, "Memory Throughput", (30.0 * 10 + 70.0 * 250 + 8.0 * 0.5 + 95.0 * 1500) / T);
    check_metric(b, w, "Registers",
                 (1024.0 * 32 * 10 + 65536.0 * 64 * 250 + 128.0 * 16 * 0.5 + 2048.0 * 255 * 1500) / T);
    check_metric(b, w, "Static Shared Memory", (4.0 * 1020 * 10 + 256.0 * 0 * 250 + 1.0 * 512 * 0.5 + 8.0 * 48000 * 1500) / T);
    check_metric(b, w, "avg_Thread", (1024.0 + 65536 + 128 + 2048) / 4);
    check_metric(b, w, "Short_Kernel", (10 + 0.5) / 2);
    check_metric(b, w, "Long_Kernel", (250.0 + 1500) / 2);
    check_metric(b, w, "ave_Kernel_Length", T / 4);
    check_metric(b, w, "long/short_Ratio", 2.0 / 2);
    assert_int_equal(b->n_values, 11);
    batch_free(b);
    kace_ctx_free(&ctx);
}

/* Newer layout: program output and ==PROF== lines before the header, CRLF,
 * "Body Item Label" (a detail row with a bogus Duration to ignore), rule
 * columns and rule rows, metric rows ending with an empty field, ns/us/ms,
 * KB/block, a "GPU ID" device table in the middle, and kernel 5's rows split
 * around kernel 9's.
 *   ID  dur(us)        threads  SM  DRAM  Mem   regs/thr  grid  smem/block
 *   5   100            128      60  10    12.5  200       1     2000 (2 KB)
 *   9   300 (300,000ns) 1024    20  75    80    40        2     0
 *   12  50 (0.05 ms)   192      2   1     3     16        3     100 */
static void test_newer(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_import_batch *b = batch_new();
    assert_kace_ok(ctx, parse_fixture(ctx, "newer.csv", "vit_h_14_batch2-train", b));
    const char *w = "vit_h_14_batch2-train";
    const double T = 100 + 300 + 50;
    check_metric(b, w, "Threads", (128.0 * 100 + 1024.0 * 300 + 192.0 * 50) / T);
    check_metric(b, w, "Compute (SM) Throughput", (60.0 * 100 + 20.0 * 300 + 2.0 * 50) / T);
    check_metric(b, w, "DRAM Throughput", (10.0 * 100 + 75.0 * 300 + 1.0 * 50) / T);
    check_metric(b, w, "Memory Throughput", (12.5 * 100 + 80.0 * 300 + 3.0 * 50) / T);
    check_metric(b, w, "Registers", (128.0 * 200 * 100 + 1024.0 * 40 * 300 + 192.0 * 16 * 50) / T);
    check_metric(b, w, "Static Shared Memory", (1.0 * 2000 * 100 + 2.0 * 0 * 300 + 3.0 * 100 * 50) / T);
    check_metric(b, w, "avg_Thread", (128.0 + 1024 + 192) / 3);
    check_metric(b, w, "Short_Kernel", (100.0 + 50) / 2);
    check_metric(b, w, "Long_Kernel", 300.0);
    check_metric(b, w, "ave_Kernel_Length", T / 3);
    check_metric(b, w, "long/short_Ratio", 1.0 / 2);
    assert_int_equal(b->n_values, 11);
    batch_free(b);
    kace_ctx_free(&ctx);
}

/* 2020 layout: "Kernel Time", no launch columns, section "GPU Speed Of Light"
 * with "SM [%]" and "Memory [%]", and no DRAM Throughput at all: that metric
 * must be missing, not 0.
 *   ID  dur(us)           threads  SM     Mem    regs/thr  grid  smem/block
 *   0   8.992 (8992 ns)   97152    22.48  46.47  60        506   0
 *   1   12.32             97152    5.22   66.24  22        506   1536 */
static void test_v2020_missing_metric(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_import_batch *b = batch_new();
    assert_kace_ok(ctx, parse_fixture(ctx, "v2020.csv", "cfd", b));
    const double T = 8.992 + 12.32;
    check_metric(b, "cfd", "Threads", 97152.0);
    check_metric(b, "cfd", "Compute (SM) Throughput", (22.48 * 8.992 + 5.22 * 12.32) / T);
    check_metric(b, "cfd", "Memory Throughput", (46.47 * 8.992 + 66.24 * 12.32) / T);
    check_metric(b, "cfd", "Registers", (97152.0 * 60 * 8.992 + 97152.0 * 22 * 12.32) / T);
    check_metric(b, "cfd", "Static Shared Memory", (506.0 * 0 * 8.992 + 506.0 * 1536 * 12.32) / T);
    assert_null(find_value(b, "DRAM Throughput"));
    check_metric(b, "cfd", "avg_Thread", 97152.0);
    check_metric(b, "cfd", "Short_Kernel", T / 2);
    check_metric(b, "cfd", "Long_Kernel", 0.0); /* no long kernel: 0, as the artifact */
    check_metric(b, "cfd", "ave_Kernel_Length", T / 2);
    check_metric(b, "cfd", "long/short_Ratio", 0.0);
    assert_int_equal(b->n_values, 10);
    batch_free(b);
    kace_ctx_free(&ctx);
}

/* ---- inline exports ---------------------------------------------------------- */

#define HDR                                                                                                   \
    "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\",\"Block Size\"," \
    "\"Grid Size\",\"Device\",\"CC\",\"Section Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n"
#define ROW(id, sec, metric, unit, value)                                                                      \
    "\"" id "\",\"1\",\"p\",\"h\",\"k" id "\",\"1\",\"7\",\"(32, 2, 1)\",\"(10, 1, 1)\",\"0\",\"7.0\",\"" sec \
    "\",\"" metric "\",\"" unit "\",\"" value "\"\n"
#define SOL "GPU Speed Of Light Throughput"

/* Threads from the launch columns when the Threads metric is absent; BOM,
 * repeated header, a blank line. */
static void test_threads_from_launch_columns(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_import_batch *b = batch_new();
    const char *text = "\xEF\xBB\xBF" HDR ROW("0", SOL, "Duration", "usecond", "3") "\n" HDR
        ROW("1", SOL, "Duration", "usecond", "1") ROW("1", "Launch Statistics", "Threads", "thread", "100")
            ROW("0", "Launch Statistics", "Static Shared Memory Per Block", "byte/block", "8");
    assert_kace_ok(ctx, parse_text(ctx, text, b));
    /* kernel 0: 64 x 10 = 640 threads from "(32, 2, 1)" x "(10, 1, 1)"; kernel 1: 100. */
    check_metric(b, "w_batch2-train", "Threads", (640.0 * 3 + 100.0 * 1) / 4);
    check_metric(b, "w_batch2-train", "Static Shared Memory", 10.0 * 8);
    check_metric(b, "w_batch2-train", "avg_Thread", (640.0 + 100) / 2);
    assert_null(find_value(b, "Registers"));
    assert_null(find_value(b, "Compute (SM) Throughput"));
    batch_free(b);
    kace_ctx_free(&ctx);
}

/* Raw metric names (--print-metric-name name / --metrics exports). */
static void test_raw_metric_names(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_import_batch *b = batch_new();
    const char *text = "\"ID\",\"Kernel Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n"
                       "\"0\",\"k\",\"gpu__time_duration.sum\",\"nsecond\",\"2,000\"\n"
                       "\"0\",\"k\",\"launch__thread_count\",\"thread\",\"256\"\n"
                       "\"0\",\"k\",\"launch__registers_per_thread\",\"register/thread\",\"30\"\n"
                       "\"0\",\"k\",\"dram__throughput.avg.pct_of_peak_sustained_elapsed\",\"%\",\"12.5\"\n";
    assert_kace_ok(ctx, parse_text(ctx, text, b));
    check_metric(b, "w_batch2-train", "Threads", 256.0);
    check_metric(b, "w_batch2-train", "Registers", 256.0 * 30);
    check_metric(b, "w_batch2-train", "DRAM Throughput", 12.5);
    check_metric(b, "w_batch2-train", "ave_Kernel_Length", 2.0);
    batch_free(b);
    kace_ctx_free(&ctx);
}

/* ---- errors -------------------------------------------------------------------- */

static void expect_error(const char *text, kace_status want, const char *where, const char *also)
{
    kace_ctx *ctx = kace_ctx_new();
    kace_import_batch *b = batch_new();
    /* A value already in the batch must survive a failed parse untouched. */
    kace_profile_value keep = {.value = 7.0};
    snprintf(keep.workload, sizeof keep.workload, "other");
    snprintf(keep.metric, sizeof keep.metric, "sm%%");
    b->values = malloc(sizeof keep);
    assert_non_null(b->values);
    b->values[0] = keep;
    b->n_values = b->cap_values = 1;
    kace_status st = parse_text(ctx, text, b);
    const char *msg = kace_errmsg(ctx);
    if (st != want)
        fail_msg("status %d (%s), want %d; message: %s", (int)st, kace_strerror(st), (int)want, msg);
    if (!strstr(msg, where))
        fail_msg("message lacks '%s': %s", where, msg);
    if (also && !strstr(msg, also))
        fail_msg("message lacks '%s': %s", also, msg);
    assert_int_equal(b->n_values, 1);
    assert_string_equal(b->values[0].metric, "sm%");
    batch_free(b);
    kace_ctx_free(&ctx);
}

static void test_error_missing_columns(void **state)
{
    (void)state;
    expect_error("\"ID\",\"Kernel Name\",\"Metric Name\",\"Metric Value\"\n\"0\",\"k\",\"Duration\",\"1\"\n",
                 KACE_ERR_PARSE, "t.csv:1:1:", "\"Metric Unit\"");
    expect_error("==PROF== hello\n\"Kernel Name\",\"Metric Name\",\"Metric Value\"\n", KACE_ERR_PARSE, "t.csv:2:1:",
                 "\"ID\", \"Metric Unit\"");
}

static void test_error_non_numeric(void **state)
{
    (void)state;
    expect_error(HDR ROW("0", SOL, "Duration", "usecond", "10") ROW("0", SOL, "DRAM Throughput", "%", "n/a"),
                 KACE_ERR_PARSE, "t.csv:3:", "not a number");
    /* "1,02" is not a thousands-grouped number */
    expect_error(HDR ROW("0", SOL, "Duration", "usecond", "1,02"), KACE_ERR_PARSE, "t.csv:2:", "not a number");
    expect_error(HDR ROW("0", SOL, "Duration", "usecond", "10") ROW("0", SOL, "Memory Throughput", "%", ""),
                 KACE_ERR_PARSE, "t.csv:3:", "empty");
}

static void test_error_negative(void **state)
{
    (void)state;
    expect_error(HDR ROW("0", SOL, "Duration", "usecond", "10")
                     ROW("0", SOL, "Compute (SM) Throughput", "%", "-5"),
                 KACE_ERR_INVALID, "t.csv:3:", ">= 0");
    expect_error(HDR ROW("0", SOL, "Duration", "usecond", "-1"), KACE_ERR_INVALID, "t.csv:2:", ">= 0");
}

static void test_error_nan_inf(void **state)
{
    (void)state;
    expect_error(HDR ROW("0", SOL, "Duration", "usecond", "10") ROW("0", SOL, "DRAM Throughput", "%", "nan"),
                 KACE_ERR_INVALID, "t.csv:3:", "NaN");
    expect_error(HDR ROW("0", SOL, "Duration", "usecond", "1e999"), KACE_ERR_INVALID, "t.csv:2:", "finite");
    expect_error(HDR ROW("0", SOL, "Duration", "usecond", "10") ROW("0", SOL, "DRAM Throughput", "%", "-inf"),
                 KACE_ERR_INVALID, "t.csv:3:", "finite");
}

static void test_error_no_duration(void **state)
{
    (void)state;
    expect_error(HDR ROW("0", SOL, "Duration", "usecond", "10") ROW("1", SOL, "DRAM Throughput", "%", "5")
                     ROW("1", SOL, "Compute (SM) Throughput", "%", "5"),
                 KACE_ERR_PARSE, "t.csv:3:1:", "kernel ID 1 ('k1') has no Duration");
}

static void test_error_empty_and_no_kernels(void **state)
{
    (void)state;
    expect_error("", KACE_ERR_PARSE, "t.csv:1:1:", "empty");
    expect_error("\n\r\n  \n", KACE_ERR_PARSE, "t.csv:1:1:", "empty");
    expect_error("==PROF== Connected to process 1\n" HDR "==PROF== Disconnected from process 1\n", KACE_ERR_PARSE,
                 "t.csv:2:1:", "no kernels");
    expect_error("==PROF== Connected to process 1\nhello \"world\"\n", KACE_ERR_PARSE, "t.csv:1:1:",
                 "no Nsight Compute CSV header");
}

static void test_error_units_and_shape(void **state)
{
    (void)state;
    expect_error(HDR ROW("0", SOL, "Duration", "furlong", "10"), KACE_ERR_PARSE, "t.csv:2:", "unit 'furlong'");
    expect_error(HDR ROW("0", SOL, "Duration", "usecond", "10")
                     ROW("0", "Launch Statistics", "Static Shared Memory Per Block", "Tbyte/block", "1"),
                 KACE_ERR_PARSE, "t.csv:3:", "Tbyte/block");
    expect_error(HDR "\"0\",\"1\"\n", KACE_ERR_PARSE, "t.csv:2:", "2 fields");
    expect_error(HDR ROW("0", SOL, "Duration", "usecond", "10") "\"0\",\"1\n", KACE_ERR_PARSE, "t.csv:3:",
                 "unterminated");
    expect_error(HDR ROW("", SOL, "Duration", "usecond", "10"), KACE_ERR_PARSE, "t.csv:2:1:", "'ID' is empty");
}

static void test_error_zero_duration(void **state)
{
    (void)state;
    expect_error(HDR ROW("0", SOL, "Duration", "usecond", "0") ROW("1", SOL, "Duration", "nsecond", "0"),
                 KACE_ERR_INVALID, "t.csv:2:1:", "sum to 0");
}

static void test_error_bad_arguments(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_import_batch *b = batch_new();
    const char *text = HDR ROW("0", SOL, "Duration", "usecond", "10");
    assert_int_equal(kace_ncu_parse_buffer(ctx, text, strlen(text), "t.csv", "", b), KACE_ERR_INVALID);
    assert_int_equal(kace_ncu_parse_buffer(ctx, text, strlen(text), "t.csv", NULL, b), KACE_ERR_INVALID);
    assert_int_equal(b->n_values, 0);
    batch_free(b);
    kace_ctx_free(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classic),
        cmocka_unit_test(test_newer),
        cmocka_unit_test(test_v2020_missing_metric),
        cmocka_unit_test(test_threads_from_launch_columns),
        cmocka_unit_test(test_raw_metric_names),
        cmocka_unit_test(test_error_missing_columns),
        cmocka_unit_test(test_error_non_numeric),
        cmocka_unit_test(test_error_negative),
        cmocka_unit_test(test_error_nan_inf),
        cmocka_unit_test(test_error_no_duration),
        cmocka_unit_test(test_error_empty_and_no_kernels),
        cmocka_unit_test(test_error_units_and_shape),
        cmocka_unit_test(test_error_zero_duration),
        cmocka_unit_test(test_error_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
