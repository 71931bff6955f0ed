/* libFuzzer harness: progress from a command's output lines
 * (lib/base/line_counter.c, kace progress-from-output).
 *
 * The input's first byte picks one of a few patterns (the fuzzer explores the
 * output, not the regex engine) and the size of the pieces; the rest is
 * output, fed to a kace_line_stream whole and, on a second counter, in those
 * pieces, as the wrapper reads it from a pipe. Invariants: both feeds report
 * the same; a reported total is finite, within the protocol's bounds and
 * above the last one; a failure is KACE_ERR_PARSE with
 * "stdout:<line>:<col>: " and the counter takes the next line; the lines
 * and the unended bytes add up to the input. */
#include <math.h>

#include "fuzz_common.h"
#include "kace/progress.h"

static const struct {
    const char *pattern;
    int group;
} patterns[] = {
    {"^step [0-9]+", -1},            /* no group: each match adds the samples */
    {"([0-9]+)/[0-9]+ \\[", -1},     /* tqdm's bar: a cumulative count */
    {"(x)?it ([0-9]+)", -1},         /* a group that may take no part */
    {"iter ([0-9.a-f]+)", -1},       /* a group that may hold a non-count */
    {"^(.*)$", -1},                  /* every line: group 1 is the whole line */
    {"^(step|iter) ([0-9]+)", 2},    /* the count in group 2 */
};

typedef struct seen {
    double totals[4096];
    int failed[4096]; /* 1 where that report was a failure */
    size_t n;
    double last;
} seen;

static void on_line(void *arg, kace_ctx *ctx, kace_status st, double total)
{
    seen *s = arg;
    if (st) {
        FUZZ_CHECK(st == KACE_ERR_PARSE, "status %d: %s", (int)st, kace_errmsg(ctx));
        fuzz_check_failure(ctx, st, "stdout");
    } else {
        FUZZ_CHECK(isfinite(total) && total > s->last && total <= KACE_PROGRESS_MAX_SAMPLES, "total %g after %g",
                   total, s->last);
        s->last = total;
    }
    if (s->n < sizeof s->totals / sizeof *s->totals) {
        s->totals[s->n] = st ? -1 : total;
        s->failed[s->n] = st != KACE_OK;
    }
    s->n++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t npat = sizeof patterns / sizeof *patterns;
    size_t pick = data[0] % npat;
    size_t step = (size_t)(data[0] / npat) % 7 + 1;
    double per_match = (data[0] / npat) % 2 ? 0.5 : 16;
    char *text = fuzz_copy(data + 1, size - 1);
    size_t len = size - 1;
    kace_ctx *ctx = kace_ctx_new();
    kace_line_counter *c1 = NULL, *c2 = NULL;
    kace_line_stream *whole = NULL, *pieces = NULL;
    seen *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    if (!text || !ctx || !a || !b || kace_line_stream_new(ctx, "stdout", &whole) ||
        kace_line_stream_new(ctx, "stdout", &pieces))
        goto done;
    kace_status st = kace_line_counter_new(ctx, patterns[pick].pattern, patterns[pick].group, per_match, &c1);
    FUZZ_CHECK(st == KACE_OK, "pattern '%s': %s", patterns[pick].pattern, kace_errmsg(ctx));
    st = kace_line_counter_new(ctx, patterns[pick].pattern, patterns[pick].group, per_match, &c2);
    FUZZ_CHECK(st == KACE_OK, "pattern '%s': %s", patterns[pick].pattern, kace_errmsg(ctx));
    kace_line_stream_take(ctx, whole, c1, text, len, on_line, a);
    for (size_t off = 0; off < len; off += step)
        kace_line_stream_take(ctx, pieces, c2, text + off, len - off < step ? len - off : step, on_line, b);
    FUZZ_CHECK(a->n == b->n, "whole %zu reports, pieces %zu", a->n, b->n);
    for (size_t i = 0; i < a->n && i < sizeof a->totals / sizeof *a->totals; i++)
        FUZZ_CHECK(a->totals[i] == b->totals[i] && a->failed[i] == b->failed[i], "report %zu differs: %g / %g", i,
                   a->totals[i], b->totals[i]);
    FUZZ_CHECK(kace_line_stream_lines(whole) == kace_line_stream_lines(pieces) &&
                   kace_line_stream_pending(whole) == kace_line_stream_pending(pieces),
               "lines %ld / %ld", kace_line_stream_lines(whole), kace_line_stream_lines(pieces));
    /* Every byte is a line's, an end's, or the unended line's. */
    size_t ends = 0;
    for (size_t i = 0; i < len; i++)
        ends += text[i] == '\n' || text[i] == '\r';
    FUZZ_CHECK((size_t)kace_line_stream_lines(whole) <= ends && kace_line_stream_pending(whole) <= len,
               "%ld lines from %zu ends", kace_line_stream_lines(whole), ends);
done:
    kace_line_stream_free(&whole);
    kace_line_stream_free(&pieces);
    kace_line_counter_free(&c1);
    kace_line_counter_free(&c2);
    kace_ctx_free(&ctx);
    free(a);
    free(b);
    free(text);
    return 0;
}
