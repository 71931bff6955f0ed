/* Progress from a command's own output lines (see kace/progress.h). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/progress.h"

/* regexec's match slots: the whole match and groups up to the count group. */
#define MAX_COUNT_GROUP 9

struct kace_line_counter {
    regex_t re;
    int count_group;      /* 0: each match adds per_match; else the group holding a cumulative count */
    double per_match;
    double base;          /* counts of earlier runs of the count (before it went down) */
    double last_count;    /* the last count of the group */
    double total;
    char line[KACE_LINE_COUNTER_MAX_LINE + 1];
};

struct kace_line_stream {
    char *origin;
    long lines;
    size_t pending;       /* bytes of the unended line, all of them */
    bool after_cr;        /* the last byte was \r: a \n right after it ends no other line */
    size_t len;           /* bytes kept of the unended line (its first KACE_LINE_COUNTER_MAX_LINE) */
    char line[KACE_LINE_COUNTER_MAX_LINE];
};

kace_status kace_line_counter_new(kace_ctx *ctx, const char *pattern, int count_group, double samples_per_match,
                                  kace_line_counter **out)
{
    *out = NULL;
    if (!pattern || !*pattern)
        return kace_fail(ctx, KACE_ERR_INVALID, "the pattern is empty: every line would count");
    if (!(samples_per_match > 0) || samples_per_match > KACE_PROGRESS_MAX_SAMPLES)
        return kace_fail(ctx, KACE_ERR_INVALID, "samples per match must be > 0 and at most %g", KACE_PROGRESS_MAX_SAMPLES);
    if (count_group < -1 || count_group > MAX_COUNT_GROUP)
        return kace_fail(ctx, KACE_ERR_INVALID, "count group %d: expected 0 (none) to %d", count_group,
                         MAX_COUNT_GROUP);
    kace_line_counter *c = calloc(1, sizeof *c);
    if (!c)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory for a line counter");
    int rc = regcomp(&c->re, pattern, REG_EXTENDED);
    if (rc != 0) {
        char why[256];
        regerror(rc, &c->re, why, sizeof why);
        free(c);
        return kace_fail(ctx, KACE_ERR_INVALID, "pattern '%.200s': %s (a POSIX extended regular expression)", pattern,
                         why);
    }
    if (count_group == -1)
        count_group = c->re.re_nsub >= 1 ? 1 : 0;
    if ((size_t)count_group > c->re.re_nsub) {
        size_t groups = c->re.re_nsub;
        regfree(&c->re);
        free(c);
        return kace_fail(ctx, KACE_ERR_INVALID, "pattern '%.200s' has %zu group%s, so no group %d to count in",
                         pattern, groups, groups == 1 ? "" : "s", count_group);
    }
    c->count_group = count_group;
    c->per_match = samples_per_match;
    *out = c;
    return KACE_OK;
}

void kace_line_counter_free(kace_line_counter **c)
{
    if (!c || !*c)
        return;
    regfree(&(*c)->re);
    free(*c);
    *c = NULL;
}

/* A whole or decimal number (digits, at most one '.'), or -1. */
static double parse_count(const char *s, size_t len)
{
    if (len == 0 || len > 40)
        return -1;
    int dots = 0, digits = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '.')
            dots++;
        else if (isdigit((unsigned char)s[i]))
            digits++;
        else
            return -1;
    }
    if (dots > 1 || digits == 0)
        return -1;
    char buf[48];
    memcpy(buf, s, len);
    buf[len] = '\0';
    errno = 0;
    double v = strtod(buf, NULL);
    return errno == 0 && isfinite(v) ? v : -1;
}

kace_status kace_line_counter_feed(kace_ctx *ctx, kace_line_counter *c, const char *origin, long line_no,
                                   const char *line, size_t len, bool *counted, double *total)
{
    *counted = false;
    *total = c->total;
    /* regexec needs a NUL-terminated string: a copy, cut at the limit (and, by
     * regexec, at a NUL byte). */
    if (len > KACE_LINE_COUNTER_MAX_LINE)
        len = KACE_LINE_COUNTER_MAX_LINE;
    memcpy(c->line, line, len);
    c->line[len] = '\0';
    regmatch_t m[MAX_COUNT_GROUP + 1];
    if (regexec(&c->re, c->line, (size_t)c->count_group + 1, m, 0) != 0)
        return KACE_OK;
    double next;
    double base = c->base, last = c->last_count;
    int g = c->count_group;
    if (g > 0) {
        if (m[g].rm_so < 0)
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:%ld:%d: the line matched but group %d took no part in the "
                             "match (expected a count in it)", origin, line_no, (int)m[0].rm_so + 1, g);
        size_t n = (size_t)(m[g].rm_eo - m[g].rm_so);
        double count = parse_count(c->line + m[g].rm_so, n);
        if (count < 0)
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:%ld:%d: group %d matched '%.*s', expected a count (digits)",
                             origin, line_no, (int)m[g].rm_so + 1, g, n > 40 ? 40 : (int)n, c->line + m[g].rm_so);
        if (count < last)
            base += last; /* the count started again: keep what came before */
        last = count;
        next = (base + count) * c->per_match;
    } else {
        next = c->total + c->per_match;
    }
    if (!(next <= KACE_PROGRESS_MAX_SAMPLES))
        return kace_fail(ctx, KACE_ERR_PARSE, "%s:%ld:%d: the total would pass %g samples", origin, line_no,
                         (int)m[0].rm_so + 1, KACE_PROGRESS_MAX_SAMPLES);
    c->base = base;
    c->last_count = last;
    *counted = next > c->total;
    c->total = next;
    *total = c->total;
    return KACE_OK;
}

kace_status kace_line_stream_new(kace_ctx *ctx, const char *origin, kace_line_stream **out)
{
    *out = NULL;
    kace_line_stream *s = calloc(1, sizeof *s);
    char *name = strdup(origin && *origin ? origin : "output");
    if (!s || !name) {
        free(s);
        free(name);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory for an output stream");
    }
    s->origin = name;
    *out = s;
    return KACE_OK;
}

void kace_line_stream_free(kace_line_stream **s)
{
    if (!s || !*s)
        return;
    free((*s)->origin);
    free(*s);
    *s = NULL;
}

void kace_line_stream_take(kace_ctx *ctx, kace_line_stream *s, kace_line_counter *counter, const char *data,
                           size_t len, kace_line_report_fn report, void *arg)
{
    for (size_t i = 0; i < len; i++) {
        char b = data[i];
        bool cr_lf = b == '\n' && s->after_cr;
        s->after_cr = b == '\r';
        if (cr_lf)
            continue;
        if (b != '\n' && b != '\r') {
            if (s->len < sizeof s->line)
                s->line[s->len++] = b;
            s->pending++;
            continue;
        }
        s->lines++;
        bool counted;
        double total;
        kace_status st = kace_line_counter_feed(ctx, counter, s->origin, s->lines, s->line, s->len, &counted, &total);
        s->len = 0;
        s->pending = 0;
        if (st || counted)
            report(arg, ctx, st, total);
    }
}

long kace_line_stream_lines(const kace_line_stream *s)
{
    return s->lines;
}

size_t kace_line_stream_pending(const kace_line_stream *s)
{
    return s->pending;
}
