/* Workload catalogs (include/kace/catalog.h): workloads/catalog.txt read to
 * its entries, the same entries and words as the device scripts' reader
 * (scripts/device/lib.sh, bash's read and xargs) while it exists, errors
 * that name line and column, and a failed call that keeps what was read. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/text_buf.h"
#include "kace/catalog.h"

#define SOURCE_ROOT KACE_TEST_DATA "/../.."
#define LIB_SH SOURCE_ROOT "/scripts/device/lib.sh"

static const kace_catalog_values values = {"/bundle/workloads", "/venv/bin/python3", "/bundle/bin/kace"};

static void test_reads_the_catalog(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_catalog cat = {0};
    assert_kace_ok(ctx, kace_catalog_load(ctx, &cat, SOURCE_ROOT "/workloads/catalog.txt", &values, 0));
    assert_int_equal(cat.n, 12);
    assert_int_equal(cat.n_left_out, 0);
    const kace_catalog_entry *e = &cat.entries[0];
    assert_string_equal(e->name, "cuda-gemm2048_batch1-inf");
    assert_int_equal(e->kind, KACE_CATALOG_CUDA);
    assert_int_equal(e->argc, 3);
    assert_string_equal(e->argv[0], "/bundle/workloads/build/kace_kernels");
    assert_string_equal(e->argv[2], "2048");
    assert_null(e->argv[3]);
    assert_string_equal(e->text, "cuda-gemm2048_batch1-inf cuda @W@/build/kace_kernels gemm 2048");
    assert_true(e->line > 1);
    assert_non_null(strstr(e->origin, "catalog.txt"));
    e = kace_catalog_find(&cat, "qwen2-0.5b_batch1-inf");
    assert_non_null(e);
    assert_ptr_equal(e, &cat.entries[11]);
    assert_int_equal(e->kind, KACE_CATALOG_LLM);
    assert_string_equal(e->argv[0], "/venv/bin/python3");
    assert_string_equal(e->argv[1], "/bundle/workloads/torch/qwen2.py");
    assert_string_equal(kace_catalog_kind_name(e->kind), "llm");
    assert_int_equal(kace_catalog_find(&cat, "bert-base-cased_batch8-train")->kind, KACE_CATALOG_TORCH);
    assert_null(kace_catalog_find(&cat, "nobody"));
    kace_catalog_free(&cat);
    assert_int_equal(cat.n, 0);
    assert_null(cat.entries);
    kace_ctx_free(&ctx);
}

/* Lines the device scripts and this parser must read alike: quoting, blanks,
 * placeholders, a line end of "\r\n", a last line without one, and bad lines
 * (a name twice, a quote that does not close) left out. */
static const char corpus[] =
    "# a comment\n"
    "\n"
    "   \t\n"
    "a1 cmd x 'y z' \"q r\" s\\ t\n"
    "  a2 cmd @PY@ -c 'print(1)' @W@/x @KACE@ progress-from-output --match '([0-9]+)/[0-9]+ \\[' -- @PY@ /d/t.py\n"
    "a3\tcmd\tx '' y\t \n"
    "a4 torch a\"b\"c 'it'\"'\"'s' \"a\\\\b\" '\\n' '#' x#y\n"
    "a1 cmd duplicate\n"
    "b1 cmd 'x\n"
    "a5 llm \\'x \\\"y z\\\\w \"@W@\" @W@@PY@@KACE@ @W\n"
    "a6 cuda @W@/build/kace_kernels gemm 2048\n"
    "a7 cmd crlf \"x y\"\r\n"
    "b2 cmd \"broken\n"
    "b1 cmd now-b1-is-new\n"
    "a8 cmd a\fb \f c\r\r\n"
    "a9 cmd last-line-without-newline";

/* "name kind\n" and "  <word>\n" per word, for each entry. */
static char *dump(const kace_catalog *cat)
{
    text_buf t = {0};
    for (size_t i = 0; i < cat->n; i++) {
        tb_printf(&t, "%s %s\n", cat->entries[i].name, kace_catalog_kind_name(cat->entries[i].kind));
        for (int w = 0; w < cat->entries[i].argc; w++)
            tb_printf(&t, "  <%s>\n", cat->entries[i].argv[w]);
    }
    tb_printf(&t, "%s", "");
    assert_false(t.oom);
    return t.p;
}

static char *read_all(FILE *f)
{
    text_buf t = {0};
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        tb_append(&t, buf, n);
    tb_printf(&t, "%s", "");
    assert_false(t.oom);
    return t.p;
}

static void test_same_entries_as_the_device_scripts(void **state)
{
    (void)state;
    if (access(LIB_SH, R_OK) != 0 || system("grep -q '^catalog_load()' '" LIB_SH "'") != 0)
        skip(); /* the scripts no longer read catalogs themselves */
    const char *dir = scratch_dir("test_catalog");
    char *path = write_file(dir, "catalog.txt", corpus);
    char *errors = write_file(dir, "errors.txt", "");
    char cmd[16384];
    /* lib.sh's WDIR is the bundle's workloads folder: this tree's. */
    snprintf(cmd, sizeof cmd,
             "KACE_PYTHON='%s' KACE_BIN='%s' bash -c 'source \"$1\" && catalog_load \"$2\" 2>\"$3\" && "
             "echo \"$WDIR\" && for i in \"${!CATALOG_NAMES[@]}\"; do "
             "printf \"%%s %%s\\n\" \"${CATALOG_NAMES[$i]}\" \"${CATALOG_KINDS[$i]}\"; catalog_cmd $i; "
             "printf \"  <%%s>\\n\" \"${CMD[@]}\"; done' sh '%s' '%s' '%s'",
             values.python, values.kace, LIB_SH, path, errors);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char *shell = read_all(p);
    assert_int_equal(pclose(p), 0);
    char *nl = strchr(shell, '\n');
    assert_non_null(nl);
    *nl = '\0';
    kace_catalog_values here = values;
    here.workloads = shell; /* WDIR */

    kace_ctx *ctx = kace_ctx_new();
    kace_catalog cat = {0};
    assert_kace_ok(ctx, kace_catalog_parse(ctx, &cat, corpus, strlen(corpus), "catalog.txt", &here,
                                           KACE_CATALOG_LEAVE_OUT));
    char *mine = dump(&cat);
    if (strcmp(mine, nl + 1) != 0)
        fail_msg("lib.sh read:\n%s\n---- kace_catalog_parse:\n%s", nl + 1, mine);
    /* The same lines left out: 8 (a1 twice), 9 and 13 (quotes). */
    assert_int_equal(cat.n_left_out, 3);
    assert_non_null(strstr(cat.left_out[0], "catalog.txt:8:1: workload a1: an earlier line has that name"));
    assert_non_null(strstr(cat.left_out[1], "catalog.txt:9:8: the quote ' here does not close"));
    assert_non_null(strstr(cat.left_out[2], "catalog.txt:13:8: the quote \" here does not close"));
    FILE *f = fopen(errors, "r");
    assert_non_null(f);
    char *said = read_all(f);
    fclose(f);
    assert_non_null(strstr(said, ":8: a1 left out"));
    assert_non_null(strstr(said, ":9: b1 left out"));
    assert_non_null(strstr(said, ":13: b2 left out"));
    free(said);
    free(mine);
    free(shell);
    free(path);
    free(errors);
    kace_catalog_free(&cat);
    kace_ctx_free(&ctx);
}

static void test_errors_name_line_and_column(void **state)
{
    (void)state;
    static const struct {
        const char *text, *message;
    } bad[] = {
        {"a cmd 'x\n", "cat:1:7: the quote ' here does not close: expected a ' before the line's end"},
        {"a cmd x \"\n", "cat:1:9: the quote \" here does not close"},
        {"a\n", "cat:1:2: workload a: expected a KIND (cuda, torch, llm or cmd) after the name"},
        {"# ok\na cmd   \n", "cat:2:9: workload a: expected a COMMAND after the KIND"},
        {"a gpu x\n", "cat:1:3: workload a: expected a KIND cuda, torch, llm or cmd, got 'gpu'"},
        {"a,b cmd x\n", "cat:1:2: expected a workload name (1 to 127 of"},
        {"  -a cmd x\n", "cat:1:3: expected a workload name"},
        {"a cmd x\nb cmd y\na cmd z\n", "cat:3:1: workload a: an earlier line has that name"},
        {"a cmd x\\\n", "cat:1:8: a backslash ends the line: expected a byte after it to quote"},
        {"a cmd '' x\n", "cat:1:7: workload a: expected a COMMAND, got an empty program name"},
        {"a cmd \f\n", "cat:1:7: expected a COMMAND after the KIND, got no word"},
        {"a cmd x\0y\n", "cat:1:8: a NUL byte: expected text"},
    };
    kace_ctx *ctx = kace_ctx_new();
    kace_catalog cat = {0};
    assert_kace_ok(ctx, kace_catalog_parse(ctx, &cat, "kept cmd true\n", 14, "first", NULL, 0));
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        size_t len = strlen(bad[i].text);
        if (strstr(bad[i].message, "NUL"))
            len = 10;
        kace_status st = kace_catalog_parse(ctx, &cat, bad[i].text, len, "cat", NULL, 0);
        if (st != KACE_ERR_PARSE || !strstr(kace_errmsg(ctx), bad[i].message))
            fail_msg("case %zu: status %d, message '%s', expected '%s'", i, (int)st, kace_errmsg(ctx),
                     bad[i].message);
        /* What was read before stays as it was. */
        assert_int_equal(cat.n, 1);
        assert_string_equal(cat.entries[0].name, "kept");
        assert_int_equal(cat.n_left_out, 0);
    }
    /* A name one byte too long: the column of the byte past the limit. */
    char line[300];
    memset(line, 'n', 128);
    snprintf(line + 128, sizeof line - 128, " cmd x\n");
    assert_int_equal(kace_catalog_parse(ctx, &cat, line, strlen(line), "cat", NULL, 0), KACE_ERR_PARSE);
    assert_non_null(strstr(kace_errmsg(ctx), "cat:1:128: expected a workload name"));
    /* A name the first catalog has cannot come again in a second one. */
    assert_int_equal(kace_catalog_parse(ctx, &cat, "kept cmd false\n", 15, "second", NULL, 0), KACE_ERR_PARSE);
    assert_non_null(strstr(kace_errmsg(ctx), "second:1:1: workload kept: an earlier line has that name"));
    assert_int_equal(kace_catalog_load(ctx, &cat, "/nonexistent/catalog.txt", NULL, 0), KACE_ERR_IO);
    assert_non_null(strstr(kace_errmsg(ctx), "/nonexistent/catalog.txt: "));
    assert_int_equal(cat.n, 1);
    kace_catalog_free(&cat);
    kace_ctx_free(&ctx);
}

static void test_leave_out_keeps_the_good_lines(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_catalog cat = {0};
    const char *text = "good1 cmd a\nbad gpu b\ngood2 torch 'c d'\ngood1 cmd again\nonly-a-name\ngood3 llm e\n";
    assert_kace_ok(ctx, kace_catalog_parse(ctx, &cat, text, strlen(text), "cat", NULL, KACE_CATALOG_LEAVE_OUT));
    assert_int_equal(cat.n, 3);
    assert_string_equal(cat.entries[1].name, "good2");
    assert_string_equal(cat.entries[1].argv[0], "c d");
    assert_int_equal(cat.entries[2].line, 6);
    assert_int_equal(cat.n_left_out, 3);
    assert_non_null(strstr(cat.left_out[0], "cat:2:5: workload bad: expected a KIND"));
    assert_non_null(strstr(cat.left_out[1], "cat:4:1: workload good1: an earlier line"));
    assert_non_null(strstr(cat.left_out[2], "cat:5:12: workload only-a-name: expected a KIND"));
    /* A second catalog appends, its own bad lines after the first's. */
    assert_kace_ok(ctx, kace_catalog_parse(ctx, &cat, "good4 cmd f\ngood2 cmd g\n", 24, "later", NULL,
                                           KACE_CATALOG_LEAVE_OUT));
    assert_int_equal(cat.n, 4);
    assert_int_equal(cat.n_left_out, 4);
    assert_non_null(strstr(cat.left_out[3], "later:2:1: workload good2"));
    kace_catalog_free(&cat);
    kace_ctx_free(&ctx);
}

static void test_placeholders(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_catalog cat = {0};
    const char *text = "w cmd @W@/x @PY@ @KACE@ '@W@@W@' @w@ @W\n";
    /* No values: every placeholder as written. */
    assert_kace_ok(ctx, kace_catalog_parse(ctx, &cat, text, strlen(text), "cat", NULL, 0));
    assert_string_equal(cat.entries[0].argv[0], "@W@/x");
    assert_string_equal(cat.entries[0].argv[3], "@W@@W@");
    kace_catalog_free(&cat);
    /* Some values; replaced in the order @W@, @PY@, @KACE@, as the scripts do. */
    kace_catalog_values v = {"/w@PY@", "/py", NULL};
    assert_kace_ok(ctx, kace_catalog_parse(ctx, &cat, text, strlen(text), "cat", &v, 0));
    const kace_catalog_entry *e = &cat.entries[0];
    assert_int_equal(e->argc, 6);
    assert_string_equal(e->argv[0], "/w/py/x");
    assert_string_equal(e->argv[1], "/py");
    assert_string_equal(e->argv[2], "@KACE@");
    assert_string_equal(e->argv[3], "/w/py/w/py");
    assert_string_equal(e->argv[4], "@w@");
    assert_string_equal(e->argv[5], "@W");
    assert_string_equal(e->text, "w cmd @W@/x @PY@ @KACE@ '@W@@W@' @w@ @W");
    kace_catalog_free(&cat);
    kace_ctx_free(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reads_the_catalog),
        cmocka_unit_test(test_same_entries_as_the_device_scripts),
        cmocka_unit_test(test_errors_name_line_and_column),
        cmocka_unit_test(test_leave_out_keeps_the_good_lines),
        cmocka_unit_test(test_placeholders),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
