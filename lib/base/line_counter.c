/* Progress from a command's own output lines (see kace/progress.h). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/progress.h"

struct kace_line_counter {
    char origin[256];
    regex_t re;
    bool counts_in_group; /* the pattern has a group: group 1 is a cumulative count */
    double per_match;
    double base;          /* counts of earlier runs of the count (before it went down) */
    double last_count;    /* the last count of group 1 */
    double total;
    long line_no;
    char line[KACE_LINE_COUNTER_MAX_LINE + 1];
};

kace_status kace_line_counter_new(kace_ctx *ctx, const char *origin, const char *pattern, double samples_per_match,
                                  kace_line_counter **out)
{
    *out = NULL;
    if (!pattern || !*pattern)
        return kace_fail(ctx, KACE_ERR_INVALID, "the pattern is empty: every line would count");
    if (!(samples_per_match > 0) || samples_per_match > KACE_PROGRESS_MAX_SAMPLES)
        return kace_fail(ctx, KACE_ERR_INVALID, "samples per match must be > 0 and at most %g", KACE_PROGRESS_MAX_SAMPLES);
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
    snprintf(c->origin, sizeof c->origin, "%s", origin ? origin : "output");
    c->counts_in_group = c->re.re_nsub >= 1;
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

/* A whole decimal number (digits, at most one '.'), or -1. */
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

kace_status kace_line_counter_feed(kace_ctx *ctx, kace_line_counter *c, const char *line, size_t len, bool *counted,
                                   double *total)
{
    *counted = false;
    *total = c->total;
    c->line_no++;
    /* regexec needs a NUL-terminated string: a copy, cut at the limit and at a NUL byte. */
    if (len > KACE_LINE_COUNTER_MAX_LINE)
        len = KACE_LINE_COUNTER_MAX_LINE;
    memcpy(c->line, line, len);
    c->line[len] = '\0';
    regmatch_t m[2];
    if (regexec(&c->re, c->line, 2, m, 0) != 0)
        return KACE_OK;
    double next;
    double base = c->base, last = c->last_count;
    if (c->counts_in_group) {
        if (m[1].rm_so < 0)
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:%ld:%d: the line matched but group 1 took no part in the match "
                             "(expected a count in it)", c->origin, c->line_no, (int)m[0].rm_so + 1);
        size_t n = (size_t)(m[1].rm_eo - m[1].rm_so);
        double count = parse_count(c->line + m[1].rm_so, n);
        if (count < 0)
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:%ld:%d: group 1 matched '%.40s', expected a count (digits)",
                             c->origin, c->line_no, (int)m[1].rm_so + 1, c->line + m[1].rm_so);
        if (count < last)
            base += last; /* the count started again: keep what came before */
        last = count;
        next = (base + count) * c->per_match;
    } else {
        next = c->total + c->per_match;
    }
    if (!(next <= KACE_PROGRESS_MAX_SAMPLES))
        return kace_fail(ctx, KACE_ERR_PARSE, "%s:%ld:%d: the total would pass %g samples", c->origin, c->line_no,
                         (int)m[0].rm_so + 1, KACE_PROGRESS_MAX_SAMPLES);
    c->base = base;
    c->last_count = last;
    *counted = next > c->total;
    c->total = next;
    *total = c->total;
    return KACE_OK;
}
