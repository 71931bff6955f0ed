/* The progress protocol parser and the steady-window throughput. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kace/progress.h"
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

/* Feeds text in pieces of `step` bytes, each piece received at its own time. */
static kace_status feed_pieces(kace_progress *p, const char *text, size_t step, int64_t t0)
{
    size_t len = strlen(text);
    for (size_t off = 0; off < len; off += step) {
        size_t n = len - off < step ? len - off : step;
        kace_status st = kace_progress_feed(ctx, p, text + off, n, t0 + (int64_t)off);
        if (st)
            return st;
    }
    return KACE_OK;
}

static void test_records_in_any_pieces(void **state)
{
    const char *text = "kace-progress 1\n# comment\n\ndone 0 1000\r\ndone 64 2000\n  done\t128   3000  \ndone 192\ndone 2";
    for (size_t step = 1; step <= strlen(text); step++) {
        kace_progress *p = NULL;
        assert_kace_ok(ctx, kace_progress_new(ctx, "w", &p));
        assert_kace_ok(ctx, feed_pieces(p, text, step, 5000));
        size_t n;
        const kace_progress_record *r = kace_progress_records(p, &n);
        assert_int_equal(n, 4);
        assert_true(r[1].samples == 64 && r[1].t_ns == 2000 && r[1].stamped);
        assert_true(r[2].samples == 128 && r[2].t_ns == 3000 && r[2].stamped);
        /* No time given: the time the line's last piece was received. */
        assert_true(r[3].samples == 192 && !r[3].stamped);
        assert_true(r[3].t_ns >= 5000 && r[3].t_ns < 5000 + (int64_t)strlen(text));
        assert_int_equal(kace_progress_pending(p), 6); /* "done 2" has no newline yet */
        kace_progress_free(&p);
        assert_null(p);
    }
}

static void expect_error(const char *text, kace_status want, const char *where, const char *what)
{
    kace_progress *p = NULL;
    assert_kace_ok(ctx, kace_progress_new(ctx, "wl", &p));
    kace_status st = kace_progress_feed(ctx, p, text, strlen(text), 1);
    if (st != want)
        fail_msg("'%s': status %d (%s), expected %d", text, st, kace_errmsg(ctx), want);
    if (!strstr(kace_errmsg(ctx), where) || !strstr(kace_errmsg(ctx), what))
        fail_msg("'%s': message '%s' lacks '%s' or '%s'", text, kace_errmsg(ctx), where, what);
    /* Sticky: the stream stays unusable. */
    assert_int_equal(kace_progress_feed(ctx, p, "done 1\n", 7, 2), want);
    kace_progress_free(&p);
}

static void test_errors_name_line_and_column(void **state)
{
    expect_error("done 1 5\nfinished 3\n", KACE_ERR_PARSE, "wl:2:1:", "unknown progress record");
    expect_error("done 1 5\ndone -3\n", KACE_ERR_PARSE, "wl:2:6:", "not a number");
    expect_error("done 1e3\n", KACE_ERR_PARSE, "wl:1:6:", "not a number");
    expect_error("done nan\n", KACE_ERR_PARSE, "wl:1:6:", "not a number");
    expect_error("done\n", KACE_ERR_PARSE, "wl:1:5:", "without a sample count");
    expect_error("done 1 2 3\n", KACE_ERR_PARSE, "wl:1:10:", "too many fields");
    expect_error("done 5 10\ndone 4 20\n", KACE_ERR_INVALID, "wl:2:6:", "decreases");
    expect_error("done 5 10\ndone 6 9\n", KACE_ERR_INVALID, "wl:2:8:", "backwards");
    expect_error("done 5 1x\n", KACE_ERR_PARSE, "wl:1:8:", "nanoseconds");
    expect_error("done 5 1234567890123456789\n", KACE_ERR_PARSE, "wl:1:8:", "nanoseconds");
    expect_error("done 2000000000000000\n", KACE_ERR_INVALID, "wl:1:6:", "1e15");
    expect_error("kace-progress 2\n", KACE_ERR_PARSE, "wl:1:15:", "version");
    expect_error("done 1\nkace-progress 1\n", KACE_ERR_PARSE, "wl:2:1:", "first record");
    char longline[700];
    memset(longline, 'x', sizeof longline - 1);
    longline[sizeof longline - 1] = '\0';
    expect_error(longline, KACE_ERR_PARSE, "wl:1:513:", "longer than 512");
}

static void test_nul_inside_line(void **state)
{
    /* expect_error uses strlen: feed a NUL explicitly. */
    kace_progress *p = NULL;
    assert_kace_ok(ctx, kace_progress_new(ctx, "wl", &p));
    const char text[] = "done 1\0 2\n";
    assert_int_equal(kace_progress_feed(ctx, p, text, sizeof text - 1, 1), KACE_ERR_PARSE);
    assert_non_null(strstr(kace_errmsg(ctx), "wl:1:7: NUL"));
    kace_progress_free(&p);
}

/* Records at a known rate with a slow warm-up. */
static size_t synth(kace_progress_record *r, size_t cap, double warm_rate, double rate, double warm_s, double total_s)
{
    size_t n = 0;
    double samples = 0;
    for (double t = 0; t <= total_s + 1e-9 && n < cap; t += 0.05) {
        r[n].t_ns = (int64_t)llround(1e9 + t * 1e9);
        r[n].samples = samples;
        samples += (t < warm_s ? warm_rate : rate) * 0.05;
        n++;
    }
    return n;
}

static void test_steady_window_discards_warmup(void **state)
{
    kace_progress_record r[1000];
    size_t n = synth(r, 1000, 100, 1000, 2.0, 20.0);
    kace_throughput tp;
    /* Whole run: the slow warm-up drags the mean down. */
    assert_kace_ok(ctx, kace_progress_throughput(ctx, r, n, 0, 15, 0, &tp));
    assert_true(tp.samples_per_s < 900);
    /* After the warm-up: exactly the steady rate, no spread. */
    assert_kace_ok(ctx, kace_progress_throughput(ctx, r, n, (int64_t)3e9, 10, 0, &tp));
    assert_true(fabs(tp.samples_per_s - 1000) < 1e-6);
    assert_true(fabs(tp.window_s - 10) < 1e-6);
    assert_int_equal(tp.n_pieces, 10);
    assert_true(tp.sd < 1e-6);
    assert_true(fabs(tp.samples - 10000) < 1e-6);
}

static void test_spread_reflects_unsteady_rate(void **state)
{
    kace_progress_record r[401];
    size_t n = 0;
    double samples = 0;
    for (int i = 0; i < 401; i++) {
        r[n].t_ns = (int64_t)i * 50000000LL;
        r[n].samples = samples;
        samples += ((i / 40) % 2 ? 150.0 : 50.0); /* alternating 1000 and 3000 samples/s, 2 s each */
        n++;
    }
    kace_throughput tp;
    assert_kace_ok(ctx, kace_progress_throughput(ctx, r, n, 0, 20, 0, &tp));
    assert_true(fabs(tp.samples_per_s - 2000) < 60);
    assert_true(tp.sd > 800 && tp.sd < 1300);
    assert_true(tp.cv > 0.4);
}

static void test_window_errors(void **state)
{
    kace_progress_record r[100];
    size_t n = synth(r, 100, 1000, 1000, 0, 3.0);
    kace_throughput tp;
    assert_int_equal(kace_progress_throughput(ctx, r, n, 0, 10, 0, &tp), KACE_ERR_INVALID);
    assert_non_null(strstr(kace_errmsg(ctx), "cover only"));
    assert_true(isnan(tp.samples_per_s));
    /* Short windows are accepted when asked for. */
    assert_kace_ok(ctx, kace_progress_throughput(ctx, r, n, 0, 10, 1, &tp));
    assert_true(fabs(tp.samples_per_s - 1000) < 1e-6);
    assert_int_equal(kace_progress_throughput(ctx, r, n, (int64_t)100e9, 1, 1, &tp), KACE_ERR_INVALID);
    assert_non_null(strstr(kace_errmsg(ctx), "after the warm-up"));
    assert_int_equal(kace_progress_throughput(ctx, r, 1, 0, 1, 1, &tp), KACE_ERR_INVALID);
    assert_non_null(strstr(kace_errmsg(ctx), "fewer than two"));
    assert_int_equal(kace_progress_throughput(ctx, r, n, 0, 0, 1, &tp), KACE_ERR_INVALID);
}

/* Feeds lines to a counter; returns the total after the last, fails on an error. */
static double feed_lines(kace_line_counter *c, const char *const *lines, size_t n, size_t *counted)
{
    double total = 0;
    *counted = 0;
    for (size_t i = 0; i < n; i++) {
        bool grew;
        assert_kace_ok(ctx, kace_line_counter_feed(ctx, c, "log", (long)i + 1, lines[i], strlen(lines[i]), &grew,
                                                   &total));
        *counted += grew;
    }
    return total;
}

static void test_line_counter_counts_matches(void **state)
{
    kace_line_counter *c = NULL;
    assert_kace_ok(ctx, kace_line_counter_new(ctx, "^step [0-9]+ loss", -1, 32, &c));
    const char *lines[] = {"loading", "step 1 loss 2.3", "eval", "step 2 loss 2.1", " step 3 loss 2.0",
                           "step 4 loss 1.9"};
    size_t counted;
    assert_true(feed_lines(c, lines, 6, &counted) == 3 * 32);
    assert_int_equal(counted, 3);
    kace_line_counter_free(&c);
    assert_null(c);
    /* Group 0: a pattern with groups, each match adding the samples. */
    assert_kace_ok(ctx, kace_line_counter_new(ctx, "^(step|iter) ", 0, 2, &c));
    const char *alternation[] = {"step 7", "iter 9", "eval"};
    assert_true(feed_lines(c, alternation, 3, &counted) == 4);
    kace_line_counter_free(&c);
}

static void test_line_counter_cumulative_group(void **state)
{
    /* tqdm's bar: group 1 is the step; a redraw of the same step adds nothing; a
     * new epoch's bar starts at 0 again and what came before is kept. */
    kace_line_counter *c = NULL;
    assert_kace_ok(ctx, kace_line_counter_new(ctx, "([0-9]+)/[0-9]+ \\[", -1, 16, &c));
    const char *epoch1[] = {"  0%|  | 0/5 [00:00<?, ?it/s]", " 20%|# | 1/5 [00:01<00:04]", " 20%|# | 1/5 [00:01<00:04]",
                            " 60%|###| 3/5 [00:02<00:01]", "100%|#####| 5/5 [00:03<00:00]"};
    size_t counted;
    assert_true(feed_lines(c, epoch1, 5, &counted) == 5 * 16);
    assert_int_equal(counted, 3);
    const char *epoch2[] = {"  0%|  | 0/5 [00:00<?, ?it/s]", " 40%|##| 2/5 [00:01<00:02]"};
    assert_true(feed_lines(c, epoch2, 2, &counted) == 7 * 16);
    assert_int_equal(counted, 1);
    kace_line_counter_free(&c);
    /* --group 2: the count after an alternation. */
    assert_kace_ok(ctx, kace_line_counter_new(ctx, "^(step|iter) ([0-9]+)", 2, 1, &c));
    const char *alternation[] = {"step 7", "iter 9", "step 9"};
    assert_true(feed_lines(c, alternation, 3, &counted) == 9);
    assert_int_equal(counted, 2);
    kace_line_counter_free(&c);
}

static void test_line_counter_errors(void **state)
{
    kace_line_counter *c = NULL;
    assert_int_equal(kace_line_counter_new(ctx, "(step", -1, 1, &c), KACE_ERR_INVALID);
    assert_non_null(strstr(kace_errmsg(ctx), "'(step'"));
    assert_null(c);
    assert_int_equal(kace_line_counter_new(ctx, "", -1, 1, &c), KACE_ERR_INVALID);
    assert_int_equal(kace_line_counter_new(ctx, "step", -1, 0, &c), KACE_ERR_INVALID);
    assert_int_equal(kace_line_counter_new(ctx, "step", -1, NAN, &c), KACE_ERR_INVALID);
    assert_int_equal(kace_line_counter_new(ctx, "(a)(b)", 3, 1, &c), KACE_ERR_INVALID);
    assert_non_null(strstr(kace_errmsg(ctx), "has 2 groups, so no group 3"));
    assert_int_equal(kace_line_counter_new(ctx, "step", 1, 1, &c), KACE_ERR_INVALID);
    assert_null(c);

    /* A group that is not a count names the line and the group's column; the
     * counter keeps its total and takes the next line. */
    assert_kace_ok(ctx, kace_line_counter_new(ctx, "step ([0-9a-z.]+)|(x)", -1, 2, &c));
    bool grew;
    double total;
    assert_kace_ok(ctx, kace_line_counter_feed(ctx, c, "run.log", 1, "step 10", 7, &grew, &total));
    assert_true(grew && total == 20);
    assert_int_equal(kace_line_counter_feed(ctx, c, "run.log", 2, "## step 1a", 10, &grew, &total), KACE_ERR_PARSE);
    assert_non_null(strstr(kace_errmsg(ctx), "run.log:2:9: group 1 matched '1a'"));
    assert_true(!grew && total == 20);
    assert_int_equal(kace_line_counter_feed(ctx, c, "run.log", 3, "step 1.2.3", 10, &grew, &total), KACE_ERR_PARSE);
    assert_int_equal(kace_line_counter_feed(ctx, c, "run.log", 4, "  x", 3, &grew, &total), KACE_ERR_PARSE);
    assert_non_null(strstr(kace_errmsg(ctx), "run.log:4:3: the line matched but group 1 took no part"));
    assert_kace_ok(ctx, kace_line_counter_feed(ctx, c, "run.log", 5, "step 12", 7, &grew, &total));
    assert_true(grew && total == 24);
    /* Past the protocol's limit: refused, the total unchanged. */
    assert_int_equal(kace_line_counter_feed(ctx, c, "run.log", 6, "step 1000000000000000", 21, &grew, &total),
                     KACE_ERR_PARSE);
    assert_non_null(strstr(kace_errmsg(ctx), "run.log:6:1: the total would pass"));
    assert_true(!grew && total == 24);
    kace_line_counter_free(&c);
}

/* What a stream reported: "T" for a total, "E<line>" for an error. */
typedef struct reports {
    char text[512];
} reports;

static void collect(void *arg, kace_ctx *c, kace_status st, double total)
{
    reports *r = arg;
    size_t used = strlen(r->text);
    if (st) {
        const char *msg = kace_errmsg(c);
        snprintf(r->text + used, sizeof r->text - used, "E%.*s ", (int)(strchr(msg, ' ') - msg), msg);
    } else {
        snprintf(r->text + used, sizeof r->text - used, "%g ", total);
    }
}

static void test_line_stream_any_pieces(void **state)
{
    /* \r, \n and \r\n end one line each, wherever the pieces are cut. */
    const char *text = "load\r0/4 [\r1/4 [\r\n2/4 [\n\nbad x/4 [\r\r\n4/4 [\r\n0/4 [\r1/4 [";
    for (size_t step = 1; step <= strlen(text); step++) {
        kace_line_counter *c = NULL;
        kace_line_stream *s = NULL;
        assert_kace_ok(ctx, kace_line_counter_new(ctx, "([0-9a-z]+)/4 \\[", -1, 10, &c));
        assert_kace_ok(ctx, kace_line_stream_new(ctx, "stderr", &s));
        reports r = {{0}};
        for (size_t off = 0; off < strlen(text); off += step) {
            size_t n = strlen(text) - off < step ? strlen(text) - off : step;
            kace_line_stream_take(ctx, s, c, text + off, n, collect, &r);
        }
        if (strcmp(r.text, "10 20 Estderr:6:5: 40 ") != 0)
            fail_msg("pieces of %zu: reports '%s'", step, r.text);
        assert_int_equal(kace_line_stream_lines(s), 9);
        assert_int_equal(kace_line_stream_pending(s), 5); /* "1/4 [" has no end yet */
        kace_line_stream_free(&s);
        assert_null(s);
        kace_line_counter_free(&c);
    }
}

static void test_line_stream_long_and_nul_lines(void **state)
{
    kace_line_counter *c = NULL;
    kace_line_stream *out = NULL, *err = NULL;
    assert_kace_ok(ctx, kace_line_counter_new(ctx, "^done$|tail", -1, 1, &c));
    assert_kace_ok(ctx, kace_line_stream_new(ctx, "stdout", &out));
    assert_kace_ok(ctx, kace_line_stream_new(ctx, "stderr", &err));
    static char big[KACE_LINE_COUNTER_MAX_LINE + 100];
    memset(big, 'a', sizeof big);
    memcpy(big + sizeof big - 5, "tail\n", 5); /* past the limit: not seen */
    reports r = {{0}};
    kace_line_stream_take(ctx, out, c, big, sizeof big, collect, &r);
    assert_string_equal(r.text, "");
    kace_line_stream_take(ctx, out, c, "done\0tail\n", 10, collect, &r); /* cut at the NUL */
    assert_string_equal(r.text, "1 ");
    /* Two streams, one counter: each numbers its own lines, the total is shared. */
    kace_line_stream_take(ctx, err, c, "done\n", 5, collect, &r);
    assert_string_equal(r.text, "1 2 ");
    assert_int_equal(kace_line_stream_lines(out), 2);
    assert_int_equal(kace_line_stream_lines(err), 1);
    kace_line_stream_free(&out);
    kace_line_stream_free(&err);
    kace_line_counter_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_records_in_any_pieces),
        cmocka_unit_test(test_errors_name_line_and_column),
        cmocka_unit_test(test_nul_inside_line),
        cmocka_unit_test(test_steady_window_discards_warmup),
        cmocka_unit_test(test_spread_reflects_unsteady_rate),
        cmocka_unit_test(test_window_errors),
        cmocka_unit_test(test_line_counter_counts_matches),
        cmocka_unit_test(test_line_counter_cumulative_group),
        cmocka_unit_test(test_line_counter_errors),
        cmocka_unit_test(test_line_stream_any_pieces),
        cmocka_unit_test(test_line_stream_long_and_nul_lines),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
