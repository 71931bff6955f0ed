/* Progress records (docs/progress-protocol.md) and steady-window throughput. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/progress.h"

struct kace_progress {
    char origin[256];
    kace_progress_record *records;
    size_t n, cap;
    char line[KACE_PROGRESS_MAX_LINE + 1]; /* the unfinished line */
    size_t line_len;
    int line_no;          /* number of the line being assembled (1-based) */
    kace_status error;    /* sticky after the first failure */
    char errmsg[512];
};

kace_status kace_progress_new(kace_ctx *ctx, const char *origin, kace_progress **out)
{
    *out = NULL;
    kace_progress *p = calloc(1, sizeof *p);
    if (!p)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory for a progress parser");
    snprintf(p->origin, sizeof p->origin, "%s", origin ? origin : "progress");
    p->line_no = 1;
    *out = p;
    return KACE_OK;
}

void kace_progress_free(kace_progress **p)
{
    if (!p || !*p)
        return;
    free((*p)->records);
    free(*p);
    *p = NULL;
}

const kace_progress_record *kace_progress_records(const kace_progress *p, size_t *n)
{
    *n = p->n;
    return p->records;
}

size_t kace_progress_pending(const kace_progress *p)
{
    return p->line_len;
}

/* Records the first error (stream-sticky) and puts it on ctx. */
static kace_status parse_fail(kace_ctx *ctx, kace_progress *p, kace_status st, int col, const char *what)
{
    snprintf(p->errmsg, sizeof p->errmsg, "%s:%d:%d: %s", p->origin, p->line_no, col, what);
    p->error = st;
    return kace_fail(ctx, st, "%s", p->errmsg);
}

static int is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* Splits the line into at most 4 fields; returns the count (5 = too many). */
static int split_fields(char *s, size_t len, char *field[4], int col[4])
{
    int n = 0;
    size_t i = 0;
    while (i < len) {
        while (i < len && is_blank(s[i]))
            i++;
        if (i >= len)
            break;
        if (n == 4)
            return 5;
        field[n] = s + i;
        col[n] = (int)i + 1;
        while (i < len && !is_blank(s[i]))
            i++;
        s[i < len ? i++ : len] = '\0';
        n++;
    }
    return n;
}

/* A count: digits with an optional fraction, no sign, no exponent. */
static int parse_samples(const char *s, double *out)
{
    size_t digits = 0, i = 0;
    while (s[i] >= '0' && s[i] <= '9')
        i++, digits++;
    if (s[i] == '.') {
        i++;
        while (s[i] >= '0' && s[i] <= '9')
            i++, digits++;
    }
    if (digits == 0 || s[i] != '\0' || i > 40)
        return -1;
    double v = strtod(s, NULL);
    if (!isfinite(v) || v > KACE_PROGRESS_MAX_SAMPLES)
        return -2;
    *out = v;
    return 0;
}

/* Nanoseconds: 1 to 18 digits (under 31 years of uptime: no overflow). */
static int parse_ns(const char *s, int64_t *out)
{
    int64_t v = 0;
    size_t i = 0;
    for (; s[i]; i++) {
        if (s[i] < '0' || s[i] > '9' || i >= 18)
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (i == 0)
        return -1;
    *out = v;
    return 0;
}

static kace_status parse_line(kace_ctx *ctx, kace_progress *p, int64_t received_ns)
{
    char *s = p->line;
    size_t len = p->line_len;
    if (len > 0 && s[len - 1] == '\r')
        len--;
    s[len] = '\0';
    if (memchr(s, '\0', len))
        return parse_fail(ctx, p, KACE_ERR_PARSE, (int)strlen(s) + 1, "NUL byte in a progress record");
    size_t lead = 0;
    while (lead < len && is_blank(s[lead]))
        lead++;
    if (lead == len || s[lead] == '#')
        return KACE_OK;
    char *f[4];
    int col[4];
    int nf = split_fields(s, len, f, col);
    if (strcmp(f[0], "kace-progress") == 0) {
        if (p->n > 0 || nf != 2)
            return parse_fail(ctx, p, KACE_ERR_PARSE, col[0],
                              "'kace-progress' must be the first record and carry one version number "
                              "(expected \"kace-progress 1\")");
        if (strcmp(f[1], "1") != 0)
            return parse_fail(ctx, p, KACE_ERR_PARSE, col[1],
                              "unsupported progress protocol version (expected 1)");
        return KACE_OK;
    }
    if (strcmp(f[0], "done") != 0)
        return parse_fail(ctx, p, KACE_ERR_PARSE, col[0],
                          "unknown progress record (expected \"done <samples> [<t_ns>]\" or \"kace-progress 1\")");
    if (nf < 2 || nf > 3)
        return parse_fail(ctx, p, KACE_ERR_PARSE, nf < 2 ? (int)len + 1 : col[nf > 3 ? 3 : 2],
                          nf < 2 ? "'done' without a sample count (expected \"done <samples> [<t_ns>]\")"
                                 : "too many fields (expected \"done <samples> [<t_ns>]\")");
    kace_progress_record r;
    int rc = parse_samples(f[1], &r.samples);
    if (rc == -1)
        return parse_fail(ctx, p, KACE_ERR_PARSE, col[1],
                          "sample count is not a number (expected digits, optionally with a fraction, e.g. 1024)");
    if (rc == -2)
        return parse_fail(ctx, p, KACE_ERR_INVALID, col[1], "sample count is larger than 1e15");
    r.t_ns = received_ns;
    r.stamped = nf == 3;
    if (nf == 3 && parse_ns(f[2], &r.t_ns) != 0)
        return parse_fail(ctx, p, KACE_ERR_PARSE, col[2],
                          "time is not a number of nanoseconds (expected 1 to 18 digits of CLOCK_MONOTONIC ns)");
    if (p->n > 0) {
        const kace_progress_record *last = &p->records[p->n - 1];
        if (r.samples < last->samples)
            return parse_fail(ctx, p, KACE_ERR_INVALID, col[1],
                              "sample count decreases (expected the cumulative count, never decreasing)");
        if (r.t_ns < last->t_ns)
            return parse_fail(ctx, p, KACE_ERR_INVALID, nf == 3 ? col[2] : col[0],
                              "time goes backwards (expected CLOCK_MONOTONIC nanoseconds, never decreasing)");
    }
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 256;
        kace_progress_record *grown = realloc(p->records, cap * sizeof *grown);
        if (!grown) {
            p->error = KACE_ERR_NOMEM;
            snprintf(p->errmsg, sizeof p->errmsg, "%s: out of memory for progress records", p->origin);
            return kace_fail(ctx, KACE_ERR_NOMEM, "%s", p->errmsg);
        }
        p->records = grown;
        p->cap = cap;
    }
    p->records[p->n++] = r;
    return KACE_OK;
}

kace_status kace_progress_feed(kace_ctx *ctx, kace_progress *p, const char *data, size_t len, int64_t received_ns)
{
    if (p->error)
        return kace_fail(ctx, p->error, "%s", p->errmsg);
    for (size_t i = 0; i < len; i++) {
        char c = data[i];
        if (c == '\n') {
            kace_status st = parse_line(ctx, p, received_ns);
            if (st)
                return st;
            p->line_len = 0;
            p->line_no++;
            continue;
        }
        if (p->line_len == KACE_PROGRESS_MAX_LINE)
            return parse_fail(ctx, p, KACE_ERR_PARSE, KACE_PROGRESS_MAX_LINE + 1,
                              "progress record longer than 512 bytes (expected \"done <samples> [<t_ns>]\")");
        p->line[p->line_len++] = c;
    }
    return KACE_OK;
}

/* ---- throughput ---------------------------------------------------------- */

#define MAX_PIECES 10

kace_status kace_progress_throughput(kace_ctx *ctx, const kace_progress_record *r, size_t n, int64_t window_start_ns,
                                     double window_s, int allow_short, kace_throughput *out)
{
    memset(out, 0, sizeof *out);
    out->samples_per_s = out->sd = out->cv = NAN;
    if (!(window_s > 0))
        return kace_fail(ctx, KACE_ERR_INVALID, "steady window of %g s (expected > 0)", window_s);
    size_t first = 0;
    while (first < n && r[first].t_ns < window_start_ns)
        first++;
    if (first >= n)
        return kace_fail(ctx, KACE_ERR_INVALID,
                         "no progress record after the warm-up (%zu record%s before it)", n, n == 1 ? "" : "s");
    int64_t end_goal = r[first].t_ns + (int64_t)(window_s * 1e9);
    size_t last = first;
    while (last + 1 < n && r[last].t_ns < end_goal)
        last++;
    if (r[last].t_ns < end_goal && !allow_short)
        return kace_fail(ctx, KACE_ERR_INVALID,
                         "progress records cover only %.3g s of the %.3g s steady window",
                         (double)(r[last].t_ns - r[first].t_ns) / 1e9, window_s);
    if (last == first || r[last].t_ns == r[first].t_ns)
        return kace_fail(ctx, KACE_ERR_INVALID,
                         "fewer than two progress records at different times in the steady window "
                         "(expected the workload to report at least twice after its warm-up)");
    double span = (double)(r[last].t_ns - r[first].t_ns) / 1e9;
    out->samples = r[last].samples - r[first].samples;
    out->samples_per_s = out->samples / span;
    out->window_s = span;
    out->start_ns = r[first].t_ns;
    out->end_ns = r[last].t_ns;

    /* Pieces of about equal length: cut at the first record past each
     * 1/MAX_PIECES of the window (fewer when records are sparse). */
    double rates[MAX_PIECES];
    int np = 0;
    size_t from = first;
    for (int k = 1; k <= MAX_PIECES && from < last; k++) {
        int64_t cut = r[first].t_ns + (int64_t)((double)(r[last].t_ns - r[first].t_ns) * k / MAX_PIECES);
        size_t to = from + 1;
        while (to < last && r[to].t_ns < cut)
            to++;
        if (k == MAX_PIECES)
            to = last;
        if (r[to].t_ns > r[from].t_ns) {
            rates[np++] = (r[to].samples - r[from].samples) / ((double)(r[to].t_ns - r[from].t_ns) / 1e9);
            from = to;
        }
    }
    out->n_pieces = np;
    if (np >= 2) {
        double mean = 0, ss = 0;
        for (int i = 0; i < np; i++)
            mean += rates[i];
        mean /= np;
        for (int i = 0; i < np; i++)
            ss += (rates[i] - mean) * (rates[i] - mean);
        out->sd = sqrt(ss / (np - 1));
        out->cv = out->samples_per_s > 0 ? out->sd / out->samples_per_s : NAN;
    }
    return KACE_OK;
}
