/* Reduction of libkace_cupti.so recordings to the six KACE kernel metrics:
 * on a hand-written recording (tests/data/cupti/small.txt), and on a
 * generated one checked against the Nsight Compute importer fed the same
 * kernels as an `ncu --csv` export (same definitions). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/kernels.h"
#include "testutil.h"

static kace_ctx *ctx;

static int setup(void **state)
{
    ctx = kace_ctx_new();
    return ctx ? 0 : -1;
}

static int teardown(void **state)
{
    kace_ctx_free(&ctx);
    return 0;
}

static void assert_close(double got, double want, const char *what)
{
    if (!(fabs(got - want) <= 1e-9 * fmax(1.0, fabs(want))))
        fail_msg("%s: %.17g, expected %.17g", what, got, want);
}

static void test_hand_written_recording(void **state)
{
    kace_kernel_recording *r = NULL;
    assert_kace_ok(ctx, kace_kernels_parse_file(ctx, KACE_TEST_DATA "/cupti/small.txt", &r));
    kace_kernel_info info;
    kace_kernels_info(r, &info);
    assert_int_equal(info.n_kernels, 7); /* the unfinished last line is ignored */
    assert_int_equal(info.n_counters, 2);
    assert_true(info.monotonic_clock);
    assert_non_null(strstr(info.device, "Synthetic H100"));

    /* Steady window from t = 2 ms: gemm x3 (100 us each), stream x2 (30 us), small gemm (10 us). */
    kace_kernel_summary s;
    assert_kace_ok(ctx, kace_kernels_reduce(ctx, r, 2000000, 0, &s));
    assert_int_equal(s.n_kernels, 6);
    assert_int_equal(s.n_with_counters, 5);
    assert_int_equal(s.n_before, 1); /* the warm-up kernel: ncu --launch-skip 1 starts where the window does */
    double D = 3 * 100 + 2 * 30 + 10;
    double gemm_t = 80 * 256, stream_t = 1024 * 128, small_t = 40 * 256;
    assert_close(s.value[KACE_KM_THREADS], (3 * 100 * gemm_t + 2 * 30 * stream_t + 10 * small_t) / D, "Threads");
    assert_close(s.value[KACE_KM_REGISTERS],
                 (3 * 100 * gemm_t * 32 + 2 * 30 * stream_t * 16 + 10 * small_t * 32) / D, "Registers");
    /* Static shared memory: blocks x static bytes (the dynamic 4096 B do not count, as in ncu). */
    assert_close(s.value[KACE_KM_SMEM], (3 * 100 * 80 * 1024.0 + 10 * 40 * 1024.0) / D, "Static Shared Memory");
    /* Throughputs: over the kernels with counters (the small gemm has none). */
    double Dc = 3 * 100 + 2 * 30;
    assert_close(s.value[KACE_KM_SM], (300 * 82.5 + 60 * 10) / Dc, "SM");
    assert_close(s.value[KACE_KM_DRAM], (300 * 20 + 60 * 88) / Dc, "DRAM");
    assert_close(s.value[KACE_KM_MEM], (300 * 41.25 + 60 * 90) / Dc, "Memory");
    assert_close(s.counter_time_share, Dc / D, "counter share");
    assert_close(s.value[KACE_KM_AVE_LENGTH], D / 6, "ave_Kernel_Length");
    assert_close(s.value[KACE_KM_SHORT], D / 6, "Short_Kernel"); /* all under 200 us */
    assert_close(s.value[KACE_KM_LONG], 0, "Long_Kernel");
    assert_close(s.value[KACE_KM_RATIO], 0, "long/short_Ratio");
    assert_close(s.value[KACE_KM_AVG_THREAD], (3 * gemm_t + 2 * stream_t + small_t) / 6, "avg_Thread");

    /* The whole recording includes the warm-up kernel (500 us: a long kernel). */
    assert_kace_ok(ctx, kace_kernels_reduce(ctx, r, 0, 0, &s));
    assert_int_equal(s.n_kernels, 7);
    assert_int_equal(s.n_before, 0);
    assert_close(s.value[KACE_KM_LONG], 500, "Long_Kernel with warm-up");
    assert_close(s.value[KACE_KM_RATIO], 1.0 / 6, "ratio with warm-up");
    /* A window with no kernel is an error. */
    assert_int_equal(kace_kernels_reduce(ctx, r, 5000000, 0, &s), KACE_ERR_INVALID);
    assert_non_null(strstr(kace_errmsg(ctx), "steady window"));
    kace_kernels_free(&r);
    assert_null(r);
}

/* ---- the same kernels as a recording and as an ncu export ----------------- */

static unsigned long long lcg = 12345;
static unsigned rnd(unsigned n)
{
    lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
    return (unsigned)((lcg >> 33) % n);
}

typedef struct sig {
    const char *name;
    unsigned grid[3], block[3], regs, smem;
    double sm, dram, mem;
} sig;

static void test_same_reduction_as_ncu(void **state)
{
    const sig sigs[] = {
        {"ampere_sgemm_128x64_nn", {96, 2, 1}, {128, 1, 1}, 122, 16384, 91.25, 35.5, 62.75},
        {"vectorized_elementwise_kernel", {2048, 1, 1}, {512, 1, 1}, 24, 0, 18.5, 86.25, 88.0},
        {"softmax_warp_forward", {512, 1, 1}, {128, 1, 1}, 40, 2048, 35.0, 40.5, 52.25},
        {"layer_norm_kernel", {1024, 1, 1}, {256, 1, 1}, 38, 1024, 44.75, 71.0, 74.5},
        {"reduce_kernel<512, 1>", {160, 1, 1}, {32, 16, 1}, 32, 4096, 12.25, 9.5, 20.0},
    };
    const int n_sigs = sizeof sigs / sizeof sigs[0];
    size_t cap = 1 << 20;
    char *rec = malloc(cap), *csv = malloc(cap * 4);
    assert_non_null(rec);
    assert_non_null(csv);
    size_t rl = 0, cl = 0;
    rl += (size_t)snprintf(rec + rl, cap - rl, "kace-cupti 1\nclock monotonic\n");
    cl += (size_t)snprintf(csv + cl, cap * 4 - cl,
                           "\"ID\",\"Kernel Name\",\"Section Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n");
    for (int i = 0; i < n_sigs; i++) {
        const sig *g = &sigs[i];
        rl += (size_t)snprintf(rec + rl, cap - rl, "counters %g %g %g %u %u %u %u %u %u %s\n", g->sm, g->dram, g->mem,
                               g->grid[0], g->grid[1], g->grid[2], g->block[0], g->block[1], g->block[2], g->name);
    }
    long long t = 1000000;
    for (int id = 0; id < 400; id++) {
        const sig *g = &sigs[rnd(n_sigs)];
        long long d = 2000 + rnd(400000); /* 2 us .. 402 us: short and long kernels */
        rl += (size_t)snprintf(rec + rl, cap - rl, "kernel %lld %lld %u %u %u %u %u %u %u %u 0 %s\n", t, t + d,
                               g->grid[0], g->grid[1], g->grid[2], g->block[0], g->block[1], g->block[2], g->regs,
                               g->smem, g->name);
        t += d + rnd(5000);
        unsigned blocks = g->grid[0] * g->grid[1] * g->grid[2], bs = g->block[0] * g->block[1] * g->block[2];
        const struct {
            const char *section, *metric, *unit;
            double v;
        } rows[] = {
            {"GPU Speed Of Light Throughput", "Duration", "nsecond", (double)d},
            {"GPU Speed Of Light Throughput", "Compute (SM) Throughput", "%", g->sm},
            {"GPU Speed Of Light Throughput", "DRAM Throughput", "%", g->dram},
            {"GPU Speed Of Light Throughput", "Memory Throughput", "%", g->mem},
            {"Memory Workload Analysis", "Memory Throughput", "byte/second", 1.5e12},
            {"Launch Statistics", "Threads", "thread", (double)blocks * bs},
            {"Launch Statistics", "Grid Size", "", (double)blocks},
            {"Launch Statistics", "Block Size", "", (double)bs},
            {"Launch Statistics", "Registers Per Thread", "register/thread", g->regs},
            {"Launch Statistics", "Static Shared Memory Per Block", "byte/block", g->smem},
        };
        for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++)
            cl += (size_t)snprintf(csv + cl, cap * 4 - cl, "\"%d\",\"%s\",\"%s\",\"%s\",\"%s\",\"%.17g\"\n", id,
                                   g->name, rows[k].section, rows[k].metric, rows[k].unit, rows[k].v);
    }
    kace_kernel_recording *r = NULL;
    assert_kace_ok(ctx, kace_kernels_parse(ctx, rec, rl, "generated", &r));
    kace_kernel_summary s;
    assert_kace_ok(ctx, kace_kernels_reduce(ctx, r, 0, 0, &s));
    assert_int_equal(s.n_kernels, 400);
    assert_int_equal(s.n_with_counters, 400);

    kace_import_batch *b = NULL;
    assert_kace_ok(ctx, kace_profile_batch_new(ctx, "ncu-peer", &b));
    assert_kace_ok(ctx, kace_ncu_parse_buffer(ctx, csv, cl, "generated.csv", "w", b));
    int matched = 0;
    for (int m = 0; m < KACE_KM_N; m++)
        for (size_t i = 0; i < b->n_values; i++)
            if (strcmp(b->values[i].metric, kace_kernel_metric_name(m)) == 0) {
                matched++;
                assert_true(s.have[m]);
                assert_close(s.value[m], b->values[i].value, kace_kernel_metric_name(m));
            }
    assert_int_equal(matched, KACE_KM_N);
    /* The summary goes into a batch under the same names. */
    kace_import_batch *mine = NULL;
    assert_kace_ok(ctx, kace_profile_batch_new(ctx, "kace-profile", &mine));
    assert_kace_ok(ctx, kace_profile_batch_add_kernels(ctx, mine, "w", &s));
    assert_int_equal(mine->n_values, KACE_KM_N);
    kace_import_batch_free(&mine);
    kace_import_batch_free(&b);
    kace_kernels_free(&r);
    free(rec);
    free(csv);
}

static void expect_error(const char *text, kace_status want, const char *where, const char *what)
{
    kace_kernel_recording *r = NULL;
    kace_status st = kace_kernels_parse(ctx, text, strlen(text), "rec", &r);
    if (st != want || r != NULL)
        fail_msg("'%s': status %d (%s), expected %d", text, st, kace_errmsg(ctx), want);
    if (!strstr(kace_errmsg(ctx), where) || !strstr(kace_errmsg(ctx), what))
        fail_msg("'%s': message '%s' lacks '%s' or '%s'", text, kace_errmsg(ctx), where, what);
}

static void test_errors(void **state)
{
    expect_error("kace-cupti 2\n", KACE_ERR_PARSE, "rec:1:1:", "version 2");
    expect_error("kace-cupti 1\nkernal 1 2\n", KACE_ERR_PARSE, "rec:2:1:", "unknown record");
    expect_error("kernel 1 2 1 1 1 1 1 1 8 0 0\n", KACE_ERR_PARSE, "rec:1:", "missing kernel name");
    expect_error("kernel 1 2 1 1 1 1 1 1 99999 0 0 k\n", KACE_ERR_INVALID, "rec:1:24:", "registers per thread");
    expect_error("kernel 1 2x 1 1 1 1 1 1 8 0 0 k\n", KACE_ERR_PARSE, "rec:1:10:", "end time is not a whole number");
    expect_error("counters 50 -3x 2 1 1 1 1 1 1 k\n", KACE_ERR_PARSE, "rec:1:13:", "DRAM throughput is not a number");
    expect_error("counters 50 nanx 2 1 1 1 1 1 1 k\n", KACE_ERR_PARSE, "rec:1:13:", "DRAM throughput is not a number");
    expect_error("counters 50 3 2 1 1 1 1 1 1\n", KACE_ERR_PARSE, "rec:1:", "missing kernel name");
    expect_error("kernel 10 5 1 1 1 1 1 1 8 0 0\n", KACE_ERR_PARSE, "rec:1:", "missing kernel name");
    expect_error("dropped x\n", KACE_ERR_PARSE, "rec:1:9:", "dropped records");
    /* An empty recording parses, but has nothing to reduce. */
    kace_kernel_recording *r = NULL;
    const char *errors = "kace-cupti 1\nerror CUPTI_ERROR_INSUFFICIENT_PRIVILEGES\n";
    assert_kace_ok(ctx, kace_kernels_parse(ctx, errors, strlen(errors), "rec", &r));
    kace_kernel_info info;
    kace_kernels_info(r, &info);
    assert_int_equal(info.n_errors, 1);
    assert_string_equal(info.first_error, "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES");
    kace_kernel_summary s;
    assert_int_equal(kace_kernels_reduce(ctx, r, 0, 0, &s), KACE_ERR_INVALID);
    assert_non_null(strstr(kace_errmsg(ctx), "no kernel"));
    kace_kernels_free(&r);
}

/* What CUPTI can really hand over: counters nan, -nan, negative or above
 * 1000 %, a size 0, an end before the start. Each such record is left out
 * and counted, the first named; the rest of the recording still counts. */
static void test_unusable_values_are_left_out(void **state)
{
    const char *text = "kace-cupti 1\nclock monotonic\n"
                       "kernel 100 300 4 1 1 128 1 1 32 0 0 good\n"
                       "kernel 300 400 2 1 1 64 1 1 32 0 0 bad_counters\n"
                       "kernel 400 500 0 1 1 64 1 1 32 0 0 zero_grid\n"
                       "kernel 600 550 2 1 1 64 1 1 32 0 0 backwards\n"
                       "counters 40.0000 20.0000 40.0000 4 1 1 128 1 1 good\n"
                       "counters nan 10.0 10.0 2 1 1 64 1 1 bad_counters\n"
                       "counters 10.0 -nan 10.0 2 1 1 64 1 1 bad_counters\n"
                       "counters 10.0 10.0 -1.0000 2 1 1 64 1 1 bad_counters\n"
                       "counters 10.0 10.0 inf 2 1 1 64 1 1 bad_counters\n"
                       "counters 10.0 10.0 1500 2 1 1 64 1 1 bad_counters\n"
                       "counters 10.0 10.0 10.0 2 1 1 0 1 1 bad_counters\n";
    kace_kernel_recording *r = NULL;
    assert_kace_ok(ctx, kace_kernels_parse(ctx, text, strlen(text), "rec", &r));
    kace_kernel_info info;
    kace_kernels_info(r, &info);
    assert_int_equal(info.n_kernels, 2);
    assert_int_equal(info.n_counters, 1);
    assert_int_equal(info.n_skipped, 8);
    assert_non_null(strstr(info.first_skipped, "rec:5:16: kernel with grid x 0"));
    kace_kernel_summary s;
    assert_kace_ok(ctx, kace_kernels_reduce(ctx, r, 0, 0, &s));
    assert_int_equal(s.n_kernels, 2);
    assert_int_equal(s.n_with_counters, 1); /* bad_counters has none: its nan/negative values never count */
    assert_true(fabs(s.value[KACE_KM_SM] - 40.0) < 1e-9);
    assert_true(fabs(s.counter_time_share - 200.0 / 300.0) < 1e-9);
    kace_kernels_free(&r);
}

/* Names as long as CUTLASS and cute kernels' (several KiB) parse and join
 * their counters; only a name beyond 64 KiB is refused. */
static void test_long_kernel_names(void **state)
{
    (void)state;
    size_t n = 6000, cap = 3 * n + 256;
    char *name = malloc(n + 1), *text = malloc(cap);
    memset(name, 'a', n);
    memcpy(name, "_ZN7cutlass", 11);
    name[n] = '\0';
    snprintf(text, cap,
             "kace-cupti 1\nclock monotonic\nkernel 100 300 4 1 1 128 1 1 32 0 0 %s\n"
             "counters 40.0 20.0 40.0 4 1 1 128 1 1 %s\n",
             name, name);
    kace_kernel_recording *r = NULL;
    assert_kace_ok(ctx, kace_kernels_parse(ctx, text, strlen(text), "rec", &r));
    kace_kernel_summary s;
    assert_kace_ok(ctx, kace_kernels_reduce(ctx, r, 0, 0, &s));
    assert_int_equal(s.n_with_counters, 1);
    kace_kernels_free(&r);
    free(name);
    free(text);
    n = 70000;
    name = malloc(n + 1);
    text = malloc(n + 64);
    memset(name, 'b', n);
    name[n] = '\0';
    snprintf(text, n + 64, "kernel 1 2 1 1 1 1 1 1 8 0 0 %s\n", name);
    expect_error(text, KACE_ERR_PARSE, "rec:1:", "kernel name longer than 65536 bytes");
    free(name);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_written_recording),
        cmocka_unit_test(test_same_reduction_as_ncu),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_unusable_values_are_left_out),
        cmocka_unit_test(test_long_kernel_names),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
