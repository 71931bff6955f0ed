/* Importers of the reference file kinds (lib/data/import.c, lib/base/csv.c), on small
 * in-memory CSVs whose every value is written out here, plus the error cases:
 * each must fail with the right status and a message naming
 * origin:line:column. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/import.h"

/* ---- helpers ---------------------------------------------------------------- */

static kace_import_batch *parse_ok(kace_ctx *ctx, const char *text, const char *origin, kace_file_kind kind)
{
    kace_import_batch *b = NULL;
    assert_kace_ok(ctx, kace_import_parse_buffer(ctx, text, strlen(text), origin, NULL, &b));
    assert_non_null(b);
    if (b->kind != kind)
        fail_msg("%s: parsed as '%s', expected '%s'", origin, kace_file_kind_name(b->kind), kace_file_kind_name(kind));
    return b;
}

/* Parses text, expecting status and a message that contains "origin:line:col: "
 * (and each of the optional words). */
static void parse_bad(const char *text, size_t len, const char *origin, kace_status status, int line, int col,
                      const char *word)
{
    kace_ctx *ctx = kace_ctx_new();
    assert_non_null(ctx);
    kace_import_batch *b = (kace_import_batch *)(uintptr_t)1; /* must be reset to NULL */
    kace_status st = kace_import_parse_buffer(ctx, text, len, origin, NULL, &b);
    if (st != status)
        fail_msg("%s: status %s, expected %s (message: %s)", origin, kace_strerror(st), kace_strerror(status),
                 kace_errmsg(ctx));
    assert_null(b);
    char where[600];
    snprintf(where, sizeof where, "%s:%d:%d: ", origin, line, col);
    const char *msg = kace_errmsg(ctx);
    if (strncmp(msg, where, strlen(where)) != 0)
        fail_msg("message does not start with '%s': %s", where, msg);
    if (word && !strstr(msg, word))
        fail_msg("message does not mention '%s': %s", word, msg);
    kace_ctx_free(&ctx);
}

#define BAD(text, origin, status, line, col, word) parse_bad(text, strlen(text), origin, status, line, col, word)

static const kace_profile_value *find_value(const kace_import_batch *b, const char *workload, const char *metric)
{
    const kace_profile_value *found = NULL;
    for (size_t i = 0; i < b->n_values; i++)
        if (strcmp(b->values[i].workload, workload) == 0 && strcmp(b->values[i].metric, metric) == 0) {
            if (found)
                fail_msg("value %s/%s appears twice", workload, metric);
            found = &b->values[i];
        }
    if (!found)
        fail_msg("no value %s/%s in the batch of %zu values", workload, metric, b->n_values);
    return found;
}

static void assert_value(const kace_import_batch *b, const char *workload, const char *metric, double want,
                         bool embedded)
{
    const kace_profile_value *v = find_value(b, workload, metric);
    if (isnan(want)) {
        if (!isnan(v->value))
            fail_msg("%s/%s: %.17g, expected missing (NaN)", workload, metric, v->value);
    } else if (v->value != want) {
        fail_msg("%s/%s: %.17g, expected %.17g", workload, metric, v->value, want);
    }
    assert_int_equal(v->embedded, embedded);
}

/* ---- file kinds ---------------------------------------------------------- */

#define KERNEL_HDR "Threads,Compute (SM) Throughput,DRAM Throughput,Memory Throughput,Registers,Static Shared Memory,Type\n"

static void test_kernel_profile(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_import_batch *b = parse_ok(ctx,
                                    KERNEL_HDR "4277649.5,50.25,52.125,82.5,92390692,25482.75,albert-base-v2_batch16-train\n",
                                    "profiles/kernel/albert-base-v2_batch16-train.csv", KACE_FILE_KERNEL_PROFILE);
    assert_int_equal(b->n_values, 6);
    assert_int_equal(b->n_runs, 0);
    assert_int_equal(b->n_splits, 0);
    const char *w = "albert-base-v2_batch16-train";
    assert_value(b, w, "Threads", 4277649.5, false);
    assert_value(b, w, "Compute (SM) Throughput", 50.25, false);
    assert_value(b, w, "DRAM Throughput", 52.125, false);
    assert_value(b, w, "Memory Throughput", 82.5, false);
    assert_value(b, w, "Registers", 92390692, false);
    assert_value(b, w, "Static Shared Memory", 25482.75, false);
    assert_string_equal(b->set, "albert-base-v2_batch16-train");
    assert_string_equal(b->origin, "profiles/kernel/albert-base-v2_batch16-train.csv");
    kace_import_batch_free(&b);
    assert_null(b);

    /* Column order does not matter, a UTF-8 BOM and CRLF line ends are fine. */
    b = parse_ok(ctx, "\xEF\xBB\xBFType,Threads,Registers\r\nw_batch2-inf,1e3,7\r\n", "k.csv", KACE_FILE_KERNEL_PROFILE);
    assert_int_equal(b->n_values, 2);
    assert_value(b, "w_batch2-inf", "Threads", 1000, false);
    assert_value(b, "w_batch2-inf", "Registers", 7, false);
    kace_import_batch_free(&b);
    kace_ctx_free(&ctx);
}

static void test_system_profile(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_import_batch *b = parse_ok(ctx,
                                    "Type,Exclusive100,sm%,mem%,memcap,Exclusive50\n"
                                    "whisper-large-v2_batch16-inf,24.5,50.0,22.375,15.4,19.25\n"
                                    "bert-base-cased_batch2-inf,33.0625,40.5,11,3.5,\n",
                                    "profiles/system.csv", KACE_FILE_SYSTEM_PROFILE);
    assert_int_equal(b->n_values, 10);
    assert_string_equal(b->set, "system");
    /* Exclusive100 is stored under the canonical name. */
    assert_value(b, "whisper-large-v2_batch16-inf", "exclusive_throughput", 24.5, false);
    assert_value(b, "whisper-large-v2_batch16-inf", "sm%", 50.0, false);
    assert_value(b, "whisper-large-v2_batch16-inf", "mem%", 22.375, false);
    assert_value(b, "whisper-large-v2_batch16-inf", "memcap", 15.4, false);
    assert_value(b, "whisper-large-v2_batch16-inf", "Exclusive50", 19.25, false);
    assert_value(b, "bert-base-cased_batch2-inf", "exclusive_throughput", 33.0625, false);
    assert_value(b, "bert-base-cased_batch2-inf", "mem%", 11, false);
    /* An empty cell is a missing value (NaN), never 0. */
    assert_value(b, "bert-base-cased_batch2-inf", "Exclusive50", NAN, false);
    kace_import_batch_free(&b);

    /* system-xu.csv: AvgCPU/AvgMem are renamed too. */
    b = parse_ok(ctx, "Type,Exclusive100,sm%,mem%,memcap,AvgCPU,AvgMem\nw_batch8-train,1,2,3,4,5.5,6.25\n",
                 "system-xu.csv", KACE_FILE_SYSTEM_PROFILE);
    assert_value(b, "w_batch8-train", "CPU%", 5.5, false);
    assert_value(b, "w_batch8-train", "MainMem%", 6.25, false);
    kace_import_batch_free(&b);
    kace_ctx_free(&ctx);
}

static void test_exclusive_by_mps(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_import_batch *b = parse_ok(ctx,
                                    "workload,10,20,30,40,50,60,70,80,90,100\n"
                                    "vit_h_14_batch8-train,1.5,2.5,3.5,4.5,5.5,6.5,7.5,8.5,9.5,10.5\n"
                                    /* trailing cells left out: not measured */
                                    "mobilenet_batch16-train,345.5,329.25,,403\n",
                                    "exclusive_by_mps_pct.csv", KACE_FILE_EXCLUSIVE_BY_MPS);
    assert_int_equal(b->n_values, 10 + 4);
    assert_value(b, "vit_h_14_batch8-train", "exclusive_mps10", 1.5, false);
    assert_value(b, "vit_h_14_batch8-train", "exclusive_mps50", 5.5, false);
    assert_value(b, "vit_h_14_batch8-train", "exclusive_mps100", 10.5, false);
    assert_value(b, "mobilenet_batch16-train", "exclusive_mps10", 345.5, false);
    assert_value(b, "mobilenet_batch16-train", "exclusive_mps20", 329.25, false);
    assert_value(b, "mobilenet_batch16-train", "exclusive_mps30", NAN, false);
    assert_value(b, "mobilenet_batch16-train", "exclusive_mps40", 403, false);
    for (size_t i = 0; i < b->n_values; i++)
        if (strcmp(b->values[i].workload, "mobilenet_batch16-train") == 0)
            assert_true(strcmp(b->values[i].metric, "exclusive_mps50") != 0);
    kace_import_batch_free(&b);
    /* kace's device campaign writes the shares it measured, not every tenth. */
    b = parse_ok(ctx, "workload,030,50,100\r\nbert_batch8-train,12.5,,40\r\n", "exclusive-by-mps.csv",
                 KACE_FILE_EXCLUSIVE_BY_MPS);
    assert_int_equal(b->n_values, 3);
    assert_value(b, "bert_batch8-train", "exclusive_mps30", 12.5, false);
    assert_value(b, "bert_batch8-train", "exclusive_mps50", NAN, false);
    assert_value(b, "bert_batch8-train", "exclusive_mps100", 40, false);
    kace_import_batch_free(&b);
    /* "workload,5" is no share column: not this layout. */
    kace_import_batch *none = NULL;
    assert_int_equal(kace_import_parse_buffer(ctx, "workload,5\nx,1\n", 16, "w.csv", NULL, &none), KACE_ERR_PARSE);
    assert_non_null(strstr(kace_errmsg(ctx), "unrecognized header"));
    kace_ctx_free(&ctx);
}

static void test_colocations_pairs(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_import_batch *b =
        parse_ok(ctx,
                 "w1_Threads,w2_Threads,workload1,workload2,idx1,idx2,w1throughput,w2throughput,"
                 "w1exclusive_throughput,w2exclusive_throughput,w1sm%,w2sm%\n"
                 "100,200,a_batch2-inf,b_batch8-train,1,18,60.5,16.25,70,20,40.5,\n"
                 "300,300,c_batch2-inf,c_batch2-inf,3,3,10,11,12,12,50,50\n",
                 "colocations/pairs.csv", KACE_FILE_COLOCATIONS);
    assert_string_equal(b->set, "pairs");
    assert_int_equal(b->n_runs, 2);
    const kace_import_run *r = &b->runs[0];
    assert_int_equal(r->k, 2);
    assert_string_equal(r->workload[0], "a_batch2-inf");
    assert_string_equal(r->workload[1], "b_batch8-train");
    assert_true(r->throughput[0] == 60.5);
    assert_true(r->throughput[1] == 16.25);
    assert_int_equal(r->mps_pct[0], 100);
    assert_int_equal(r->mps_pct[1], 100);
    assert_int_equal(r->status, KACE_RUN_OK);
    assert_int_equal(r->line, 2);
    r = &b->runs[1];
    assert_string_equal(r->workload[0], "c_batch2-inf");
    assert_string_equal(r->workload[1], "c_batch2-inf");
    assert_int_equal(r->line, 3);
    /* The members' own metrics copied into the file are embedded values;
     * idx1/idx2 are not metrics. */
    assert_value(b, "a_batch2-inf", "Threads", 100, true);
    assert_value(b, "b_batch8-train", "Threads", 200, true);
    assert_value(b, "a_batch2-inf", "exclusive_throughput", 70, true);
    assert_value(b, "b_batch8-train", "exclusive_throughput", 20, true);
    assert_value(b, "a_batch2-inf", "sm%", 40.5, true);
    assert_value(b, "b_batch8-train", "sm%", NAN, true);
    for (size_t i = 0; i < b->n_values; i++) {
        assert_true(strstr(b->values[i].metric, "idx") == NULL);
        assert_true(strstr(b->values[i].metric, "throughput") == NULL ||
                    strcmp(b->values[i].metric, "exclusive_throughput") == 0);
    }
    /* a: 3 metrics, b: 3, c (self-pair): 3 metrics twice. */
    assert_int_equal(b->n_values, 12);
    kace_import_batch_free(&b);
    kace_ctx_free(&ctx);
}

static void test_colocations_triples(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_import_batch *b = parse_ok(ctx,
                                    "workload1,workload2,workload3,w1throughput,w2throughput,w3throughput,"
                                    "w1mps_pct,w2mps_pct,w3mps_pct,w3_memcap\n"
                                    "a_batch2-inf,b_batch2-inf,c_batch8-train,1.5,2.5,3.5,10,20,70,4.25\n",
                                    "triples.csv", KACE_FILE_COLOCATIONS);
    assert_int_equal(b->n_runs, 1);
    const kace_import_run *r = &b->runs[0];
    assert_int_equal(r->k, 3);
    assert_string_equal(r->workload[2], "c_batch8-train");
    assert_true(r->throughput[0] == 1.5 && r->throughput[1] == 2.5 && r->throughput[2] == 3.5);
    assert_int_equal(r->mps_pct[0], 10);
    assert_int_equal(r->mps_pct[1], 20);
    assert_int_equal(r->mps_pct[2], 70);
    assert_int_equal(b->n_values, 1);
    assert_value(b, "c_batch8-train", "memcap", 4.25, true);
    kace_import_batch_free(&b);
    kace_ctx_free(&ctx);
}

static void test_raw_campaign(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_import_batch *b = parse_ok(ctx,
                                    "workload1,workload2,\"(LS100, BE100)\",\"(LS10, BE90)\",\"(LS30, BE70)\"\n"
                                    "a_batch2-inf,b_batch8-inf,\"(10.5, 20.25)\",\"(None, 3.0)\",\"(None, None)\"\n"
                                    "a_batch2-inf,c_batch8-inf,\"(1, 2)\",\"( 4 ,5 )\",\"(6.5, 7.5)\"\n",
                                    "raw/MPS_0624.csv", KACE_FILE_RAW_CAMPAIGN);
    assert_string_equal(b->set, "MPS_0624");
    /* (None, None) was never run: no record. */
    assert_int_equal(b->n_runs, 5);
    const kace_import_run *r = &b->runs[0];
    assert_int_equal(r->k, 2);
    assert_string_equal(r->workload[0], "a_batch2-inf");
    assert_string_equal(r->workload[1], "b_batch8-inf");
    assert_int_equal(r->mps_pct[0], 100);
    assert_int_equal(r->mps_pct[1], 100);
    assert_true(r->throughput[0] == 10.5 && r->throughput[1] == 20.25);
    assert_int_equal(r->status, KACE_RUN_OK);
    assert_int_equal(r->line, 2);
    r = &b->runs[1]; /* one member failed */
    assert_int_equal(r->mps_pct[0], 10);
    assert_int_equal(r->mps_pct[1], 90);
    assert_true(isnan(r->throughput[0]));
    assert_true(r->throughput[1] == 3.0);
    assert_int_equal(r->status, KACE_RUN_FAILED);
    r = &b->runs[3];
    assert_string_equal(r->workload[1], "c_batch8-inf");
    assert_int_equal(r->mps_pct[0], 10);
    assert_true(r->throughput[0] == 4 && r->throughput[1] == 5);
    assert_int_equal(r->status, KACE_RUN_OK);
    assert_int_equal(r->line, 3);
    r = &b->runs[4];
    assert_int_equal(r->mps_pct[0], 30);
    assert_int_equal(r->mps_pct[1], 70);
    assert_int_equal(b->n_values, 0);
    kace_import_batch_free(&b);

    /* Three workloads, "(w1_x, w2_y, w3_z)" headers. */
    b = parse_ok(ctx,
                 "workload1,workload2,workload3,\"(w1_100, w2_100, w3_100)\",\"(w1_10, w2_20, w3_70)\"\n"
                 "a_batch2-inf,b_batch2-inf,c_batch2-inf,\"(1, 2, 3)\",\"(4, None, 6)\"\n",
                 "raw/triples_0730.csv", KACE_FILE_RAW_CAMPAIGN);
    assert_int_equal(b->n_runs, 2);
    assert_int_equal(b->runs[0].k, 3);
    assert_true(b->runs[0].throughput[2] == 3);
    assert_int_equal(b->runs[1].mps_pct[2], 70);
    assert_int_equal(b->runs[1].status, KACE_RUN_FAILED);
    assert_true(isnan(b->runs[1].throughput[1]));
    kace_import_batch_free(&b);
    kace_ctx_free(&ctx);
}

static void test_splits(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    /* As in the reference file: CRLF, test rows with an empty paper_fit. */
    kace_import_batch *b = parse_ok(ctx,
                                    "n_occur,seed,set,workload1,workload2,paper_fit\r\n"
                                    "2,10,train,a_batch2-inf,b_batch8-train,0\r\n"
                                    "2,10,train,c_batch2-inf,b_batch8-train,1\r\n"
                                    "10,50,test,a_batch2-inf,a_batch2-inf,\r\n",
                                    "splits.csv", KACE_FILE_SPLITS);
    assert_int_equal(b->n_splits, 3);
    assert_int_equal(b->n_runs, 0);
    assert_int_equal(b->n_values, 0);
    const kace_import_split *s = &b->splits[0];
    assert_int_equal(s->n_occur, 2);
    assert_int_equal(s->seed, 10);
    assert_true(s->train);
    assert_false(s->paper_fit);
    assert_string_equal(s->workload1, "a_batch2-inf");
    assert_string_equal(s->workload2, "b_batch8-train");
    assert_int_equal(s->line, 2);
    assert_true(b->splits[1].paper_fit);
    s = &b->splits[2];
    assert_int_equal(s->n_occur, 10);
    assert_int_equal(s->seed, 50);
    assert_false(s->train);
    assert_false(s->paper_fit);
    assert_int_equal(s->line, 4);
    kace_import_batch_free(&b);
    kace_ctx_free(&ctx);
}

/* The real reference files parse, with the documented sizes. */
static void test_reference_files(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_import_batch *b = NULL;
    assert_kace_ok(ctx, kace_import_parse_file(ctx, ref_path("colocations/pairs.csv"), NULL, &b));
    assert_int_equal(b->kind, KACE_FILE_COLOCATIONS);
    assert_int_equal(b->n_runs, 181);
    assert_string_equal(b->set, "pairs");
    for (size_t i = 0; i < b->n_runs; i++) {
        assert_int_equal(b->runs[i].k, 2);
        assert_true(b->runs[i].throughput[0] >= 0 && b->runs[i].throughput[1] >= 0);
        assert_int_equal(b->runs[i].line, (int)i + 2);
    }
    kace_import_batch_free(&b);
    assert_kace_ok(ctx, kace_import_parse_file(ctx, ref_path("colocations/triples.csv"), NULL, &b));
    assert_int_equal(b->n_runs, 400);
    assert_int_equal(b->runs[399].k, 3);
    kace_import_batch_free(&b);
    assert_kace_ok(ctx, kace_import_parse_file(ctx, ref_path("splits.csv"), NULL, &b));
    assert_int_equal(b->kind, KACE_FILE_SPLITS);
    assert_int_equal(b->n_splits, 8145);
    kace_import_batch_free(&b);
    assert_kace_ok(ctx, kace_import_parse_file(ctx, ref_path("profiles/system.csv"), NULL, &b));
    assert_int_equal(b->kind, KACE_FILE_SYSTEM_PROFILE);
    kace_import_batch_free(&b);
    assert_kace_ok(ctx, kace_import_parse_file(ctx, ref_path("profiles/exclusive_by_mps_pct.csv"), NULL, &b));
    assert_int_equal(b->kind, KACE_FILE_EXCLUSIVE_BY_MPS);
    kace_import_batch_free(&b);
    assert_kace_ok(ctx, kace_import_parse_file(ctx, ref_path("colocations/raw/triples_0730.csv"), NULL, &b));
    assert_int_equal(b->kind, KACE_FILE_RAW_CAMPAIGN);
    assert_true(b->n_runs > 0);
    kace_import_batch_free(&b);

    /* A file that does not exist: an I/O error naming it. */
    b = (kace_import_batch *)(uintptr_t)1;
    assert_int_equal(kace_import_parse_file(ctx, "/nonexistent/kace/x.csv", NULL, &b), KACE_ERR_IO);
    assert_null(b);
    assert_non_null(strstr(kace_errmsg(ctx), "/nonexistent/kace/x.csv"));
    kace_ctx_free(&ctx);
}

/* ---- errors -------------------------------------------------------------- */

static void test_error_empty_and_header_only(void **state)
{
    (void)state;
    BAD("", "empty.csv", KACE_ERR_PARSE, 1, 1, "empty");
    BAD("\n\r\n\n", "blank.csv", KACE_ERR_PARSE, 1, 1, "empty");
    BAD(KERNEL_HDR, "hdr.csv", KACE_ERR_PARSE, 2, 1, "no data rows");
    BAD("workload1,workload2,w1throughput,w2throughput\n\n\n", "hdr2.csv", KACE_ERR_PARSE, 2, 1, "no data rows");
    BAD("alpha,beta\n1,2\n", "dir/unknown.csv", KACE_ERR_PARSE, 1, 1, "alpha");
}

static void test_error_numbers(void **state)
{
    (void)state;
    /* NaN, inf, negative, garbage, empty where a number is required. */
    BAD(KERNEL_HDR "1,2,nan,4,5,6,w_batch2-inf\n", "k.csv", KACE_ERR_INVALID, 2, 5, "DRAM Throughput");
    BAD(KERNEL_HDR "1,2,3,4,5,6,w_batch2-inf\n1,2,3,NaN,5,6,v_batch2-inf\n", "k.csv", KACE_ERR_INVALID, 3, 7,
        "Memory Throughput");
    BAD(KERNEL_HDR "inf,2,3,4,5,6,w_batch2-inf\n", "k.csv", KACE_ERR_INVALID, 2, 1, "Threads");
    BAD(KERNEL_HDR "1e999,2,3,4,5,6,w_batch2-inf\n", "k.csv", KACE_ERR_INVALID, 2, 1, "Threads");
    BAD(KERNEL_HDR "1,2,3,4,-5,6,w_batch2-inf\n", "k.csv", KACE_ERR_INVALID, 2, 9, "negative");
    BAD(KERNEL_HDR "1,2,3,4,5,6x,w_batch2-inf\n", "k.csv", KACE_ERR_PARSE, 2, 11, "not a number");
    BAD("Type,Exclusive100,sm%\nw_batch2-inf,12.5,-0.5\n", "system.csv", KACE_ERR_INVALID, 2, 19, "sm%");
    /* A colocated throughput may not be empty (unlike a profile metric). */
    BAD("workload1,workload2,w1throughput,w2throughput\na_batch2-inf,b_batch2-inf,1.5,\n", "p.csv", KACE_ERR_PARSE, 2,
        31, "w2throughput");
    BAD("workload1,workload2,w1throughput,w2throughput\na_batch2-inf,b_batch2-inf,-1.5,2\n", "p.csv", KACE_ERR_INVALID,
        2, 27, "w1throughput");
    BAD("workload1,workload2,w1throughput,w2throughput,w1mps_pct\na_batch2-inf,b_batch2-inf,1,2,0\n", "p.csv",
        KACE_ERR_INVALID, 2, 31, "w1mps_pct");
    BAD("workload,10,20\nw_batch2-inf,1.5,nan\n", "ex.csv", KACE_ERR_INVALID, 2, 18, "20");
}

static void test_error_shape(void **state)
{
    (void)state;
    /* Missing columns: named, at the header. */
    BAD("workload1,workload2,w1throughput,w1_Threads\na,b,1,2\n", "p.csv", KACE_ERR_PARSE, 1, 1, "w2throughput");
    BAD("n_occur,seed,set,workload1,paper_fit\n2,10,train,a,1\n", "s.csv", KACE_ERR_PARSE, 1, 1, "workload2");
    /* Truncated row (cut mid-row, no final newline): the last field read. */
    BAD("workload1,workload2,w1throughput,w2throughput\na_batch2-inf,b_batch2-inf,1.5,2\na_batch2-inf,c_batch2-", "p.csv",
        KACE_ERR_PARSE, 3, 14, "truncated");
    /* A field too many: the first extra column. */
    BAD(KERNEL_HDR "1,2,3,4,5,6,w_batch2-inf,7\n", "k.csv", KACE_ERR_PARSE, 2, 26, "fields");
    BAD("workload,10,20\nw_batch2-inf,1,2,3\n", "ex.csv", KACE_ERR_PARSE, 2, 18, "fields");
    /* exclusive_by_mps: a row cut off at the end of the file is an error even
     * though short rows are allowed. */
    BAD("workload,10,20\nw_batch2-inf,1", "ex.csv", KACE_ERR_PARSE, 2, 14, "fields");
    BAD("workload,10,25\nw_batch2-inf,1,2\n", "ex.csv", KACE_ERR_PARSE, 1, 13, "25");
    /* Names: empty, too long, control characters. */
    BAD(KERNEL_HDR "1,2,3,4,5,6,\n", "k.csv", KACE_ERR_PARSE, 2, 13, "empty");
    char longname[KACE_NAME_MAX + 64];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    char text[1024];
    snprintf(text, sizeof text, KERNEL_HDR "1,2,3,4,5,6,%s\n", longname);
    BAD(text, "k.csv", KACE_ERR_PARSE, 2, 13, "long");
    BAD(KERNEL_HDR "1,2,3,4,5,6,w\tx\n", "k.csv", KACE_ERR_PARSE, 2, 13, "control");
    /* A NUL byte inside the data. */
    static const char nul[] = "Type,Threads\nw_batch2-inf,1\0002\n";
    parse_bad(nul, sizeof nul - 1, "nul.csv", KACE_ERR_PARSE, 2, 15, "NUL");
}

static void test_error_quoting(void **state)
{
    (void)state;
    BAD("Type,Threads\n\"w_batch2-inf\"x,1\n", "q.csv", KACE_ERR_PARSE, 2, 15, "closing quote");
    BAD("Type,Threads\nw_ba\"tch2-inf,1\n", "q.csv", KACE_ERR_PARSE, 2, 5, "quote");
    BAD("Type,Threads\nw_batch2-inf,\"1\n", "q.csv", KACE_ERR_PARSE, 2, 14, "unterminated");
    /* A quoted field spanning lines: lines and columns count on from the
     * newline inside it. */
    BAD("Threads,Type\n1,\"w\nx\"y\n", "q.csv", KACE_ERR_PARSE, 3, 3, "closing quote");
    BAD("Threads,Type\n1,\"w\nx\"\n", "q.csv", KACE_ERR_PARSE, 2, 3, "control");
    /* Escaped quotes are read, and a workload name holding them is refused
     * by the name rule (include/kace/workload_name.h) at the field. */
    BAD("Type,Threads\n\"w \"\"q\"\" x\",1.5\n", "q.csv", KACE_ERR_PARSE, 2, 1, "'w \"q\" x': byte 2");
    kace_ctx *ctx = kace_ctx_new();
    kace_import_batch *b = parse_ok(ctx, "Type,Threads\n\"w_batch2-inf\",\"1.5\"\n", "q.csv", KACE_FILE_KERNEL_PROFILE);
    assert_value(b, "w_batch2-inf", "Threads", 1.5, false);
    kace_import_batch_free(&b);
    kace_ctx_free(&ctx);
}

static void test_error_raw_and_splits(void **state)
{
    (void)state;
#define RAW_HDR "workload1,workload2,\"(LS100, BE100)\",\"(LS10, BE90)\"\n"
    BAD(RAW_HDR "a,b,\"(1, 2)\",oops\n", "raw.csv", KACE_ERR_PARSE, 2, 14, "oops");
    BAD(RAW_HDR "a,b,\"(1, 2)\",\"(1, 2, 3)\"\n", "raw.csv", KACE_ERR_PARSE, 2, 14, "tuple");
    BAD(RAW_HDR "a,b,\"(1)\",\"(1, 2)\"\n", "raw.csv", KACE_ERR_PARSE, 2, 5, "tuple");
    BAD(RAW_HDR "a,b,\"(1, -2)\",\"(1, 2)\"\n", "raw.csv", KACE_ERR_PARSE, 2, 5, "tuple");
    BAD(RAW_HDR "a,b,\"(1, nan)\",\"(1, 2)\"\n", "raw.csv", KACE_ERR_PARSE, 2, 5, "tuple");
    BAD(RAW_HDR "a,b,\"(1, 2) x\",\"(1, 2)\"\n", "raw.csv", KACE_ERR_PARSE, 2, 5, "tuple");
    BAD("workload1,workload2,\"(LS100, BE100)\",\"(LS0, BE90)\"\na,b,\"(1, 2)\",\"(1, 2)\"\n", "raw.csv",
        KACE_ERR_PARSE, 1, 38, "MPS split");
    BAD(RAW_HDR "a,b,\"(1, 2)\"\n", "raw.csv", KACE_ERR_PARSE, 2, 5, "fields");

#define SPLITS_HDR "n_occur,seed,set,workload1,workload2,paper_fit\n"
    BAD(SPLITS_HDR "2,10,training,a,b,1\n", "s.csv", KACE_ERR_PARSE, 2, 6, "train or test");
    BAD(SPLITS_HDR "2,10,train,a,b,1\n0,10,train,a,b,1\n", "s.csv", KACE_ERR_INVALID, 3, 1, "n_occur");
    BAD(SPLITS_HDR "2,x,train,a,b,1\n", "s.csv", KACE_ERR_PARSE, 2, 3, "seed");
    BAD(SPLITS_HDR "2,10,train,a,b,\n", "s.csv", KACE_ERR_PARSE, 2, 16, "paper_fit");
    BAD(SPLITS_HDR "2,10,train,a,b,2\n", "s.csv", KACE_ERR_INVALID, 2, 16, "paper_fit");
    BAD(SPLITS_HDR "2,10,train,,b,1\n", "s.csv", KACE_ERR_PARSE, 2, 12, "workload1");
}

/* Every prefix of a valid file either parses or fails with a message naming
 * the origin; nothing crashes (run under the sanitizers too). */
/* Nothing resolved silently: unknown or repeated columns, repeated rows and
 * values outside their metric's physical range name file:line:col. */
static void test_error_strict(void **state)
{
    (void)state;
    const char *sys = "Type,Exclusive100,sm%,mem%,memcap\n";
    const char *pairs = "workload1,workload2,w1throughput,w2throughput\n";
    char buf[512];
    BAD("Type,Exclusive100,smpct,mem%,memcap\na_batch2-inf,10,50,20,4\n", "s.csv", KACE_ERR_PARSE, 1, 19, "'sm%'");
    BAD("Type,Exclusive100,bogus\na_batch2-inf,10,50\n", "s.csv", KACE_ERR_PARSE, 1, 19, "unknown column 'bogus'");
    BAD("Type,Exclusive100,sm%,sm%\na_batch2-inf,10,50,60\n", "s.csv", KACE_ERR_PARSE, 1, 23, "twice");
    BAD("workload1,workload2,w1throughput,w2throughput,w1_smpct\na_batch2-inf,b_batch2-inf,1,2,3\n", "p.csv",
        KACE_ERR_PARSE, 1, 47, "w1_smpct");
    BAD("workload1,workload2,w1throughput,w2throughput,w3_Threads\na_batch2-inf,b_batch2-inf,1,2,3\n", "p.csv",
        KACE_ERR_PARSE, 1, 47, "member 3");
    BAD("workload1,workload2,w1throughput,w2throughput,comment\na_batch2-inf,b_batch2-inf,1,2,x\n", "p.csv",
        KACE_ERR_PARSE, 1, 47, "comment");
    BAD("n_occur,seed,set,workload1,workload2,paper_fit,note\n2,10,train,a,b,1,x\n", "sp.csv", KACE_ERR_PARSE, 1, 48,
        "note");
    /* Repeated rows name both lines. */
    snprintf(buf, sizeof buf, "%sa_batch2-inf,10,50,20,4\nb_batch2-inf,1,2,3,4\na_batch2-inf,10,60,20,4\n", sys);
    BAD(buf, "s.csv", KACE_ERR_PARSE, 4, 14, "first at line 2");
    snprintf(buf, sizeof buf, "%sa_batch2-inf,b_batch2-inf,1,2\nc_batch2-inf,b_batch2-inf,1,2\nb_batch2-inf,a_batch2-inf,3,4\n",
             pairs);
    BAD(buf, "p.csv", KACE_ERR_PARSE, 4, 27, "first at line 2");
    BAD("workload,10,20\nw_batch2-inf,1.5,2\nv_batch2-inf,1,2\nw_batch2-inf,1.5,2\n", "ex.csv", KACE_ERR_PARSE, 4, 14,
        "first at line 2");
    BAD("workload1,workload2,\"(LS10, BE90)\"\na_batch2-inf,b_batch2-inf,\"(1, 2)\"\na_batch2-inf,b_batch2-inf,\"(3, 4)\"\n",
        "raw.csv", KACE_ERR_PARSE, 3, 27, "first at line 2");
    BAD("n_occur,seed,set,workload1,workload2,paper_fit\n2,10,train,a,b,1\n2,10,test,b,a,\n", "sp.csv", KACE_ERR_PARSE, 3,
        1, "first at line 2");
    /* Physical ranges. */
    snprintf(buf, sizeof buf, "%sa_batch2-inf,10,200,20,4\n", sys);
    BAD(buf, "s.csv", KACE_ERR_INVALID, 2, 17, "0..100");
    snprintf(buf, sizeof buf, "%sa_batch2-inf,1e308,20,20,4\n", sys);
    BAD(buf, "s.csv", KACE_ERR_INVALID, 2, 14, "Exclusive100");
    snprintf(buf, sizeof buf, "%sa_batch2-inf,0,20,20,4\n", sys);
    BAD(buf, "s.csv", KACE_ERR_INVALID, 2, 14, "more than 0");
    snprintf(buf, sizeof buf, "%sa_batch2-inf,10,20,20,5000\n", sys);
    BAD(buf, "s.csv", KACE_ERR_INVALID, 2, 23, "memcap");
    BAD(KERNEL_HDR "1,101,3,4,5,6,w_batch2-inf\n", "k.csv", KACE_ERR_INVALID, 2, 3, "Compute (SM) Throughput");
    BAD(KERNEL_HDR "1e300,2,3,4,5,6,w_batch2-inf\n", "k.csv", KACE_ERR_INVALID, 2, 1, "Threads");
    snprintf(buf, sizeof buf, "%sa_batch2-inf,b_batch2-inf,0,2\n", pairs);
    BAD(buf, "p.csv", KACE_ERR_INVALID, 2, 27, "w1throughput");
    BAD("workload1,workload2,w1throughput,w2throughput,w2mem%\na_batch2-inf,b_batch2-inf,1,2,101\n", "p.csv",
        KACE_ERR_INVALID, 2, 31, "w2mem%");
    BAD("workload1,workload2,\"(LS10, BE90)\"\na_batch2-inf,b_batch2-inf,\"(0, 2)\"\n", "raw.csv", KACE_ERR_INVALID, 2,
        27, "out of range");
    /* Allowed: idx columns, a missing (empty) metric, CPU% above 100 (summed over cores). */
    kace_ctx *ctx = kace_ctx_new();
    kace_import_batch *b = parse_ok(ctx, "workload1,idx1,workload2,idx2,w1throughput,w2throughput,w1CPU%\n"
                                         "a_batch2-inf,0,b_batch2-inf,1,1,2,724\n",
                                    "p.csv", KACE_FILE_COLOCATIONS);
    assert_int_equal(b->n_runs, 1);
    assert_int_equal(b->values[0].line, 2);
    assert_int_equal(b->values[0].col, 35);
    kace_import_batch_free(&b);
    kace_ctx_free(&ctx);
}

static void test_every_prefix(void **state)
{
    (void)state;
    static const char text[] = "workload1,workload2,\"(LS100, BE100)\",\"(LS10, BE90)\"\n"
                               "a_batch2-inf,b_batch8-inf,\"(10.5, 20.25)\",\"(None, 3.0)\"\n"
                               "a_batch2-inf,c_batch8-inf,\"(1, 2)\",\"(4, 5)\"\n";
    kace_ctx *ctx = kace_ctx_new();
    size_t n_ok = 0;
    for (size_t len = 0; len <= sizeof text - 1; len++) {
        char *copy = malloc(len + 1); /* exact size: ASan sees reads past the end */
        assert_non_null(copy);
        memcpy(copy, text, len);
        kace_import_batch *b = NULL;
        kace_status st = kace_import_parse_buffer(ctx, copy, len, "prefix.csv", NULL, &b);
        if (st == KACE_OK) {
            assert_non_null(b);
            n_ok++;
            kace_import_batch_free(&b);
        } else {
            assert_null(b);
            if (strncmp(kace_errmsg(ctx), "prefix.csv:", 11) != 0)
                fail_msg("prefix %zu: message does not name the file: %s", len, kace_errmsg(ctx));
        }
        free(copy);
    }
    assert_true(n_ok > 0);
    kace_ctx_free(&ctx);
}

/* A device campaign's runs.csv and spread.csv are recognised and store
 * nothing (their means are in the colocation files); a header that only
 * starts like one is still refused. */
/* ncu's CSV may follow the program's own output and "==PROF==" lines when
 * both go to one stream; a first line that is not CSV (quotes mid-field)
 * does not hide the export's header further down. */
static void test_ncu_preamble_with_quotes(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    const char *text = "{\"step\": 1, \"loss\": 2.3}\n" /* the program's own output first */
                       "==PROF== Profiling \"gemm\" - 0: 0%....50%....100% - 8 passes\n"
                       "\"ID\",\"Kernel Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n"
                       "\"0\",\"gemm\",\"gpu__time_duration.sum\",\"nsecond\",\"2,000\"\n"
                       "\"0\",\"gemm\",\"launch__thread_count\",\"thread\",\"256\"\n";
    kace_import_batch *b = parse_ok(ctx, text, "gemm_batch1-inf.csv", KACE_FILE_NCU);
    assert_true(b->n_values > 0);
    kace_import_batch_free(&b);
    /* A first line that is not CSV and no ncu header after it: still refused where it breaks. */
    BAD("==PROF== Profiling \"gemm\" - 0\nno,header\n", "x.csv", KACE_ERR_PARSE, 1, 20, "quote");
    kace_ctx_free(&ctx);
}

static void test_campaign_records(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    assert_non_null(ctx);
    kace_import_batch *b = parse_ok(ctx,
                                    "run,set,mode,repetition,run_status,measured_at,window_s,slot,workload,mps_pct,"
                                    "throughput,throughput_cv,status,detail\n"
                                    "1,pairs,mps,0,ok,2026-11-24T17:54:38Z,1.0,0,a_batch2-inf,100,244.5,0.003,ok,\n",
                                    "runs.csv", KACE_FILE_CAMPAIGN_RECORD);
    assert_int_equal(b->n_values + b->n_runs + b->n_splits, 0);
    kace_import_batch_free(&b);
    b = parse_ok(ctx, "colocation,workload,repetitions,mean,sd,cv\n", "spread.csv", KACE_FILE_CAMPAIGN_RECORD);
    kace_import_batch_free(&b);
    /* The comparison with Nsight Compute (dataset ncu/): reports, never stored. */
    b = parse_ok(ctx,
                 "workload,kind,metric,kace,ncu,rel_diff,within_10pct,ncu_kernels\n"
                 "gemm_batch1-inf,cuda,Threads,1024,1024,0,yes,200\n",
                 "compare.csv", KACE_FILE_CAMPAIGN_RECORD);
    assert_int_equal(b->n_values + b->n_runs + b->n_splits, 0);
    kace_import_batch_free(&b);
    b = parse_ok(ctx,
                 "workload,kind,kace_profile_s,kace_kernels,kace_kernels_with_counters,ncu_s,ncu_launch_skip,"
                 "ncu_kernels,kace_over_ncu\ngemm_batch1-inf,cuda,61.2,5000,5000,20.5,100000,200,2.99\n",
                 "cost.csv", KACE_FILE_CAMPAIGN_RECORD);
    assert_int_equal(b->n_values + b->n_runs + b->n_splits, 0);
    kace_import_batch_free(&b);
    kace_ctx_free(&ctx);
    const char *half = "run,set,mode\n1,pairs,mps\n";
    parse_bad(half, strlen(half), "runs.csv", KACE_ERR_PARSE, 1, 1, "unrecognized header");
    const char *no_ncu = "workload,metric,kace\nw,Threads,1\n"; /* a comparison needs ncu's column */
    parse_bad(no_ncu, strlen(no_ncu), "compare.csv", KACE_ERR_PARSE, 1, 1, "unrecognized header");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel_profile),
        cmocka_unit_test(test_system_profile),
        cmocka_unit_test(test_exclusive_by_mps),
        cmocka_unit_test(test_colocations_pairs),
        cmocka_unit_test(test_colocations_triples),
        cmocka_unit_test(test_raw_campaign),
        cmocka_unit_test(test_splits),
        cmocka_unit_test(test_reference_files),
        cmocka_unit_test(test_error_empty_and_header_only),
        cmocka_unit_test(test_error_numbers),
        cmocka_unit_test(test_error_shape),
        cmocka_unit_test(test_error_quoting),
        cmocka_unit_test(test_error_raw_and_splits),
        cmocka_unit_test(test_error_strict),
        cmocka_unit_test(test_every_prefix),
        cmocka_unit_test(test_campaign_records),
        cmocka_unit_test(test_ncu_preamble_with_quotes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
