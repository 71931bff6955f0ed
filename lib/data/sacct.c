/* Parsers of `sacct --parsable2` output and of the job-to-workload mapping
 * file (include/kace/sacct.h). Strict: every field is checked, and the first
 * defect fails the whole parse with origin:line:column. */
#include "kace/sacct.h"

#include <ctype.h>
#include <fnmatch.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/csv.h"
#include "kace/dataset.h"

enum {
    C_JOBID, C_JOBNAME, C_SUBMIT, C_START, C_END, C_ALLOCTRES, C_NODELIST, C_STATE, /* required */
    C_USER, C_ACCOUNT, C_PARTITION, C_ELAPSED, C_COMMENT, C_ADMINCOMMENT, C_WCKEY, C_REQTRES, C_NNODES,
    N_COLUMNS
};
#define N_REQUIRED 8
#define MAX_FIELDS 64

static const char *const column_names[N_COLUMNS] = {
    "JobID", "JobName", "Submit", "Start", "End", "AllocTRES", "NodeList", "State", "User", "Account",
    "Partition", "Elapsed", "Comment", "AdminComment", "WCKey", "ReqTRES", "NNodes"};

static const char *const state_names[] = {
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "COMPLETING", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
    "PENDING", "PREEMPTED", "RUNNING", "REQUEUED", "RESIZING", "REVOKED", "SPECIAL_EXIT", "STOPPED", "SUSPENDED",
    "TIMEOUT"};

/* One line split at '|': where each field starts and how long it is. */
typedef struct line_view {
    const char *origin;
    int line;
    const char *text; /* the line, without its newline */
    size_t n_fields;
    const char *field[MAX_FIELDS];
    size_t len[MAX_FIELDS];
} line_view;

static kace_status fail_at(kace_ctx *ctx, const line_view *lv, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A failure at character where of the line (column = its offset + 1). */
static kace_status fail_at(kace_ctx *ctx, const line_view *lv, const char *where, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:%d: %s", lv->origin, lv->line, (int)(where - lv->text) + 1, msg);
}

/* Splits [p, end) into fields; refuses control characters. */
static kace_status split_line(kace_ctx *ctx, line_view *lv, const char *p, const char *end)
{
    lv->text = p;
    lv->n_fields = 0;
    const char *start = p;
    for (const char *q = p;; q++) {
        if (q == end || *q == '|') {
            if (lv->n_fields == MAX_FIELDS)
                return fail_at(ctx, lv, start, "more than %d fields", MAX_FIELDS);
            lv->field[lv->n_fields] = start;
            lv->len[lv->n_fields++] = (size_t)(q - start);
            if (q == end)
                return KACE_OK;
            start = q + 1;
        } else if ((unsigned char)*q < 0x20 || *q == 0x7f) {
            return fail_at(ctx, lv, q, "control character 0x%02x (expected text, '|' between fields)",
                           (unsigned)(unsigned char)*q);
        }
    }
}

static bool field_is(const line_view *lv, size_t i, const char *s)
{
    return lv->len[i] == strlen(s) && memcmp(lv->field[i], s, lv->len[i]) == 0;
}

static kace_status copy_text(kace_ctx *ctx, const line_view *lv, size_t i, const char *column, char *out,
                             size_t size)
{
    if (lv->len[i] >= size)
        return fail_at(ctx, lv, lv->field[i], "%s is %zu characters long (at most %zu)", column, lv->len[i],
                       size - 1);
    memcpy(out, lv->field[i], lv->len[i]);
    out[lv->len[i]] = '\0';
    return KACE_OK;
}

/* Reads exactly n digits at p into *v. */
static bool digits(const char *p, int n, int *v)
{
    *v = 0;
    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)p[i]))
            return false;
        *v = *v * 10 + (p[i] - '0');
    }
    return true;
}

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian). */
static int64_t days_from_civil(int y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* A sacct time, YYYY-MM-DDTHH:MM:SS; with may_be_unknown, "Unknown" and
 * "None" give NaN. */
static kace_status parse_time(kace_ctx *ctx, const line_view *lv, size_t i, const char *column, bool may_be_unknown,
                              double *out)
{
    const char *f = lv->field[i];
    if (may_be_unknown && (field_is(lv, i, "Unknown") || field_is(lv, i, "None"))) {
        *out = NAN;
        return KACE_OK;
    }
    int y, mo, d, h, mi, s;
    static const int mdays[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool ok = lv->len[i] == 19 && digits(f, 4, &y) && f[4] == '-' && digits(f + 5, 2, &mo) && f[7] == '-' &&
              digits(f + 8, 2, &d) && f[10] == 'T' && digits(f + 11, 2, &h) && f[13] == ':' &&
              digits(f + 14, 2, &mi) && f[16] == ':' && digits(f + 17, 2, &s);
    ok = ok && y >= 1970 && mo >= 1 && mo <= 12 && d >= 1 && d <= mdays[mo - 1] && h <= 23 && mi <= 59 && s <= 59;
    ok = ok && !(mo == 2 && d == 29 && !(y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)));
    if (!ok)
        return fail_at(ctx, lv, f, "%s '%.*s' is not a time (expected YYYY-MM-DDTHH:MM:SS%s)", column,
                       (int)(lv->len[i] > 40 ? 40 : lv->len[i]), f, may_be_unknown ? ", Unknown or None" : "");
    *out = (double)days_from_civil(y, mo, d) * 86400.0 + h * 3600.0 + mi * 60.0 + s;
    return KACE_OK;
}

/* [D-]HH:MM:SS (sacct's Elapsed); only checked, the replay uses End - Start. */
static kace_status check_elapsed(kace_ctx *ctx, const line_view *lv, size_t i)
{
    const char *f = lv->field[i], *p = f, *end = f + lv->len[i];
    const char *dash = memchr(f, '-', lv->len[i]);
    int v;
    bool ok = true;
    if (dash) {
        ok = dash > f && dash - f <= 5;
        for (const char *q = f; ok && q < dash; q++)
            ok = isdigit((unsigned char)*q);
        p = dash + 1;
    }
    ok = ok && end - p == 8 && digits(p, 2, &v) && v <= 23 + (dash ? 0 : 76) && p[2] == ':' && digits(p + 3, 2, &v) &&
         v <= 59 && p[5] == ':' && digits(p + 6, 2, &v) && v <= 59;
    if (!ok)
        return fail_at(ctx, lv, f, "Elapsed '%.*s' is not a duration (expected [D-]HH:MM:SS)",
                       (int)(lv->len[i] > 40 ? 40 : lv->len[i]), f);
    return KACE_OK;
}

/* A TRES list: key=value,... (empty for a job that never started). Fills
 * the GPU count (gres/gpu, else the sum of typed gres/gpu:TYPE) and the
 * node count (node=, -1 when absent). */
static kace_status parse_tres(kace_ctx *ctx, const line_view *lv, size_t i, const char *column, int *gpus,
                              int *shares, int *nodes)
{
    const char *p = lv->field[i], *end = p + lv->len[i];
    long untyped = -1, typed = 0, share_count = 0;
    *nodes = -1;
    while (p < end) {
        const char *item = p, *eq = NULL;
        while (p < end && *p != ',') {
            if (*p == '=' && !eq)
                eq = p;
            p++;
        }
        if (!eq || eq == item)
            return fail_at(ctx, lv, item, "%s item '%.*s' is not key=value", column, (int)(p - item > 40 ? 40 : p - item),
                           item);
        for (const char *q = item; q < eq; q++)
            if (!(isalnum((unsigned char)*q) || strchr("/:_.-", *q)))
                return fail_at(ctx, lv, q, "%s key '%.*s' has a character '%c' (expected letters, digits, / : _ . -)",
                               column, (int)(eq - item > 40 ? 40 : eq - item), item, *q);
        /* value: digits [. digits] [K|M|G|T|P] */
        const char *v = eq + 1, *q = v;
        long count = 0;
        bool integer = true;
        while (q < p && isdigit((unsigned char)*q)) {
            count = count < 100000000 ? count * 10 + (*q - '0') : count;
            q++;
        }
        bool ok = q > v;
        if (ok && q < p && *q == '.') {
            integer = false;
            const char *frac = ++q;
            while (q < p && isdigit((unsigned char)*q))
                q++;
            ok = q > frac;
        }
        if (ok && q < p && strchr("KMGTP", *q) && *q) {
            integer = false;
            q++;
        }
        if (!ok || q != p)
            return fail_at(ctx, lv, v, "%s value '%.*s' of '%.*s' is not a count or a size (expected digits, "
                           "optionally .digits and K, M, G, T or P)", column, (int)(p - v > 40 ? 40 : p - v), v,
                           (int)(eq - item), item);
        size_t klen = (size_t)(eq - item);
        bool is_gpu = klen >= 8 && memcmp(item, "gres/gpu", 8) == 0 && (klen == 8 || item[8] == ':');
        bool is_node = klen == 4 && memcmp(item, "node", 4) == 0;
        bool is_share = (klen >= 8 && memcmp(item, "gres/mps", 8) == 0 && (klen == 8 || item[8] == ':')) ||
                        (klen >= 10 && memcmp(item, "gres/shard", 10) == 0 && (klen == 10 || item[10] == ':'));
        if (is_share) {
            if (!integer)
                return fail_at(ctx, lv, v, "%s: %.*s=%.*s is not a count", column, (int)klen, item,
                               (int)(p - v > 40 ? 40 : p - v), v);
            share_count = share_count + count < 100000000 ? share_count + count : 100000000;
        }
        if ((is_gpu || is_node) && (!integer || count > KACE_SACCT_MAX_GPUS * 64))
            return fail_at(ctx, lv, v, "%s: %.*s=%.*s is not a count (expected a whole number up to %d)", column,
                           (int)klen, item, (int)(p - v > 40 ? 40 : p - v), v, KACE_SACCT_MAX_GPUS * 64);
        if (is_gpu && klen == 8) {
            if (untyped >= 0)
                return fail_at(ctx, lv, item, "%s names gres/gpu twice", column);
            untyped = count;
        } else if (is_gpu) {
            typed += count;
        } else if (is_node) {
            if (*nodes >= 0)
                return fail_at(ctx, lv, item, "%s names node twice", column);
            *nodes = (int)count;
        }
        if (p < end) {
            p++; /* ',' */
            if (p == end)
                return fail_at(ctx, lv, p, "%s ends with ',' (expected another key=value)", column);
        }
    }
    long g = untyped >= 0 ? untyped : typed;
    if (g > KACE_SACCT_MAX_GPUS)
        return fail_at(ctx, lv, lv->field[i], "%s asks for %ld GPUs (at most %d per job)", column, g,
                       KACE_SACCT_MAX_GPUS);
    *gpus = (int)g;
    *shares = (int)share_count;
    return KACE_OK;
}

/* ---- host lists ---- */

typedef struct node_table {
    char (*names)[64];
    int *gpus;
    size_t n, cap;
    /* open addressing over indices + 1 */
    uint32_t *slots;
    size_t n_slots;
} node_table;

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* Index of name in t, added when new; -1 when out of memory or full. */
static int node_intern(node_table *t, const char *name)
{
    if (!t->slots) {
        t->n_slots = 2 * KACE_SACCT_MAX_NODES;
        t->slots = calloc(t->n_slots, sizeof *t->slots);
        if (!t->slots)
            return -1;
    }
    size_t j = (size_t)hash_name(name) & (t->n_slots - 1);
    while (t->slots[j]) {
        if (strcmp(t->names[t->slots[j] - 1], name) == 0)
            return (int)t->slots[j] - 1;
        j = (j + 1) & (t->n_slots - 1);
    }
    if (t->n == KACE_SACCT_MAX_NODES)
        return -2;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        char(*names)[64] = realloc(t->names, cap * sizeof *names);
        if (!names)
            return -1;
        t->names = names;
        int *g = realloc(t->gpus, cap * sizeof *g);
        if (!g)
            return -1;
        t->gpus = g;
        t->cap = cap;
    }
    snprintf(t->names[t->n], 64, "%s", name);
    t->gpus[t->n] = 0;
    t->slots[j] = (uint32_t)++t->n;
    return (int)t->n - 1;
}

static bool host_char(char c)
{
    return isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.';
}

/* One node of a host list: record it and the GPUs the job held there. */
static kace_status add_node(kace_ctx *ctx, const line_view *lv, const char *at, node_table *t, const char *name,
                            int *count, int *first, int *nodes_of)
{
    int idx = node_intern(t, name);
    if (idx == -1)
        return kace_fail(ctx, KACE_ERR_NOMEM, "%s: out of memory", lv->origin);
    if (idx == -2)
        return fail_at(ctx, lv, at, "more than %d distinct nodes in the file", KACE_SACCT_MAX_NODES);
    if (*first < 0)
        *first = idx;
    if (*count >= KACE_SACCT_MAX_NODES)
        return fail_at(ctx, lv, at, "NodeList names more than %d nodes", KACE_SACCT_MAX_NODES);
    nodes_of[(*count)++] = idx;
    return KACE_OK;
}

/* NodeList: "None assigned", or items prefix[ranges]suffix separated by ','
 * (ranges: a, a-b, ... with the width of zero-padded numbers kept). The
 * nodes go into t; *count and *first say how many and the first's index.
 * nodes_of[] (KACE_SACCT_MAX_NODES) receives every node's index. */
static kace_status parse_nodelist(kace_ctx *ctx, const line_view *lv, size_t i, node_table *t, int *count,
                                  int *first, int *nodes_of)
{
    const char *p = lv->field[i], *end = p + lv->len[i];
    *count = 0;
    *first = -1;
    if (field_is(lv, i, "None assigned"))
        return KACE_OK;
    if (p == end)
        return fail_at(ctx, lv, p, "NodeList is empty (expected host names or 'None assigned')");
    while (p < end) {
        const char *item = p, *open = NULL, *close = NULL;
        while (p < end && *p != ',') {
            if (*p == '[') {
                if (open)
                    return fail_at(ctx, lv, p, "NodeList: more than one [..] in '%.*s' is not supported",
                                   (int)(end - item > 40 ? 40 : end - item), item);
                open = p;
                while (p < end && *p != ']')
                    p++;
                if (p == end)
                    return fail_at(ctx, lv, open, "NodeList: '[' without ']'");
                close = p;
            } else if (!host_char(*p)) {
                return fail_at(ctx, lv, p, "NodeList: character '%c' in a host name (expected letters, digits, "
                               "- _ . and [ranges])", *p);
            }
            p++;
        }
        if (p == item)
            return fail_at(ctx, lv, item, "NodeList: empty host name");
        char name[64];
        if (!open) {
            if (p - item >= (long)sizeof name)
                return fail_at(ctx, lv, item, "NodeList: host name longer than %zu characters", sizeof name - 1);
            memcpy(name, item, (size_t)(p - item));
            name[p - item] = '\0';
            kace_status st = add_node(ctx, lv, item, t, name, count, first, nodes_of);
            if (st)
                return st;
        } else {
            size_t plen = (size_t)(open - item), slen = (size_t)(p - close - 1);
            if (plen + slen + 20 >= sizeof name)
                return fail_at(ctx, lv, item, "NodeList: host name longer than %zu characters", sizeof name - 1);
            const char *r = open + 1;
            if (r == close)
                return fail_at(ctx, lv, r, "NodeList: empty [] (expected numbers or ranges a-b)");
            while (r < close) {
                const char *a = r;
                long lo = 0, hi;
                while (r < close && isdigit((unsigned char)*r) && r - a < 9)
                    lo = lo * 10 + (*r++ - '0');
                int width = (int)(r - a);
                if (width == 0)
                    return fail_at(ctx, lv, r, "NodeList: expected a number in [..]");
                hi = lo;
                if (r < close && *r == '-') {
                    const char *b = ++r;
                    hi = 0;
                    while (r < close && isdigit((unsigned char)*r) && r - b < 9)
                        hi = hi * 10 + (*r++ - '0');
                    if (r == b || hi < lo)
                        return fail_at(ctx, lv, b, "NodeList: range end is not a number at least %ld", lo);
                }
                if (r < close && *r != ',')
                    return fail_at(ctx, lv, r, "NodeList: character '%c' in [..] (expected digits, '-' or ',')", *r);
                if (hi - lo >= KACE_SACCT_MAX_NODES)
                    return fail_at(ctx, lv, a, "NodeList names more than %d nodes", KACE_SACCT_MAX_NODES);
                for (long v = lo; v <= hi; v++) {
                    snprintf(name, sizeof name, "%.*s%0*ld%.*s", (int)plen, item, width, v, (int)slen, close + 1);
                    kace_status st = add_node(ctx, lv, a, t, name, count, first, nodes_of);
                    if (st)
                        return st;
                }
                if (r < close) {
                    r++;
                    if (r == close)
                        return fail_at(ctx, lv, r, "NodeList: [..] ends with ','");
                }
            }
        }
        if (p < end) {
            p++;
            if (p == end)
                return fail_at(ctx, lv, p, "NodeList ends with ','");
        }
    }
    return KACE_OK;
}

/* 123, 123_4, 123_[1-3%2], 123+0; a step (123.batch, 123.0) is refused. */
static kace_status check_job_id(kace_ctx *ctx, const line_view *lv, size_t i)
{
    const char *f = lv->field[i], *p = f, *end = f + lv->len[i];
    while (p < end && isdigit((unsigned char)*p))
        p++;
    if (p == f)
        return fail_at(ctx, lv, f, "JobID '%.*s' does not start with a number", (int)(lv->len[i] > 30 ? 30 : lv->len[i]),
                       f);
    const char *dot = memchr(f, '.', lv->len[i]);
    if (dot)
        return fail_at(ctx, lv, dot, "JobID '%.*s' is a job step: run sacct with -X (allocations only)",
                       (int)(lv->len[i] > 30 ? 30 : lv->len[i]), f);
    if (p < end && *p == '_') {
        p++;
        if (p < end && *p == '[') {
            while (p < end && *p != ']')
                if (!(isdigit((unsigned char)*p++) || strchr("[-,%", p[-1])))
                    return fail_at(ctx, lv, p - 1, "JobID: character '%c' in an array range", p[-1]);
            if (p == end)
                return fail_at(ctx, lv, p, "JobID: '[' without ']'");
            p++;
        } else {
            const char *d = p;
            while (p < end && isdigit((unsigned char)*p))
                p++;
            if (p == d)
                return fail_at(ctx, lv, p, "JobID: expected an array index after '_'");
        }
    } else if (p < end && *p == '+') {
        const char *d = ++p;
        while (p < end && isdigit((unsigned char)*p))
            p++;
        if (p == d)
            return fail_at(ctx, lv, p, "JobID: expected a component number after '+'");
    }
    if (p != end)
        return fail_at(ctx, lv, p, "JobID: unexpected '%c' (expected 123, 123_4 or 123+0)", *p);
    if (lv->len[i] >= sizeof ((kace_sacct_job *)0)->job_id)
        return fail_at(ctx, lv, f, "JobID is too long");
    return KACE_OK;
}

static kace_status parse_state(kace_ctx *ctx, const line_view *lv, size_t i, char *out, size_t size)
{
    const char *f = lv->field[i];
    size_t n = lv->len[i];
    /* "CANCELLED by 1000" (fields are not NUL-terminated: no strstr) */
    const char *by = NULL;
    for (size_t q = 0; !by && q + 4 <= n; q++)
        if (memcmp(f + q, " by ", 4) == 0)
            by = f + q;
    size_t base = by ? (size_t)(by - f) : n;
    if (by) {
        const char *u = by + 4;
        bool ok = u < f + n;
        for (const char *q = u; q < f + n; q++)
            ok = ok && isdigit((unsigned char)*q);
        if (!ok)
            return fail_at(ctx, lv, u, "State: expected a user id after 'by'");
    }
    for (size_t s = 0; s < sizeof state_names / sizeof *state_names; s++)
        if (strlen(state_names[s]) == base && memcmp(state_names[s], f, base) == 0) {
            snprintf(out, size, "%s", state_names[s]);
            return KACE_OK;
        }
    return fail_at(ctx, lv, f, "State '%.*s' is not a Slurm job state (expected COMPLETED, FAILED, CANCELLED, "
                   "TIMEOUT, RUNNING, PENDING, ...)", (int)(n > 40 ? 40 : n), f);
}

/* Line boundaries: the next line of data starting at *pos; false at the end.
 * *terminated says whether it ended with '\n'. */
static bool next_line(const char *data, size_t len, size_t *pos, const char **b, const char **e, bool *terminated)
{
    if (*pos >= len)
        return false;
    *b = data + *pos;
    const char *nl = memchr(*b, '\n', len - *pos);
    *e = nl ? nl : data + len;
    *terminated = nl != NULL;
    *pos = (size_t)(*e - data) + (nl ? 1 : 0);
    return true;
}

typedef struct id_line {
    const char *id;
    int line;
} id_line;

static int cmp_id(const void *a, const void *b)
{
    const id_line *x = a, *y = b;
    int c = strcmp(x->id, y->id);
    return c ? c : (x->line > y->line) - (x->line < y->line);
}

void kace_sacct_free(kace_sacct **s)
{
    if (!s || !*s)
        return;
    free((*s)->jobs);
    free((*s)->nodes);
    free((*s)->node_gpus);
    free(*s);
    *s = NULL;
}

kace_status kace_sacct_parse(kace_ctx *ctx, const char *data, size_t len, const char *origin, kace_sacct **out)
{
    *out = NULL;
    kace_status st = KACE_OK;
    node_table nt = {0};
    kace_sacct *s = calloc(1, sizeof *s);
    size_t cap = 0;
    int *nodes_of = malloc(KACE_SACCT_MAX_NODES * sizeof *nodes_of);
    id_line *ids = NULL;
    if (!s || !nodes_of) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "%s: out of memory", origin);
        goto fail;
    }
    line_view lv = {.origin = origin};
    size_t pos = 0;
    const char *b, *e;
    bool terminated;
    int col[N_COLUMNS];
    for (int c = 0; c < N_COLUMNS; c++)
        col[c] = -1;
    if (len >= 3 && memcmp(data, "\xEF\xBB\xBF", 3) == 0)
        pos = 3;
    lv.line = 1;
    if (!next_line(data, len, &pos, &b, &e, &terminated)) {
        st = kace_fail(ctx, KACE_ERR_PARSE, "%s:1:1: empty file (expected sacct --parsable2 output: a header line "
                       "JobID|JobName|...)", origin);
        goto fail;
    }
    if ((st = split_line(ctx, &lv, b, e)))
        goto fail;
    for (size_t i = 0; i < lv.n_fields; i++) {
        int c = 0;
        while (c < N_COLUMNS && !field_is(&lv, i, column_names[c]))
            c++;
        if (c == N_COLUMNS) {
            if (lv.len[i] == 0 && i + 1 == lv.n_fields && i > 0)
                st = fail_at(ctx, &lv, lv.field[i], "the header ends with '|': use --parsable2, not --parsable");
            else
                st = fail_at(ctx, &lv, lv.field[i], "unknown column '%.*s' (expected JobID, JobName, Submit, Start, "
                             "End, AllocTRES, NodeList, State and optionally User, Account, Partition, Elapsed, "
                             "Comment, AdminComment, WCKey, ReqTRES, NNodes)", (int)(lv.len[i] > 40 ? 40 : lv.len[i]),
                             lv.field[i]);
            goto fail;
        }
        if (col[c] >= 0) {
            st = fail_at(ctx, &lv, lv.field[i], "column '%s' appears twice", column_names[c]);
            goto fail;
        }
        col[c] = (int)i;
    }
    for (int c = 0; c < N_REQUIRED; c++)
        if (col[c] < 0) {
            st = fail_at(ctx, &lv, e, "missing column '%s' (kace simulate --sacct needs JobID, JobName, Submit, "
                         "Start, End, AllocTRES, NodeList, State)", column_names[c]);
            goto fail;
        }
    size_t n_header = lv.n_fields;
    if (!terminated) {
        st = fail_at(ctx, &lv, e, "the header has no newline (no jobs; truncated file?)");
        goto fail;
    }
    while (next_line(data, len, &pos, &b, &e, &terminated)) {
        lv.line++;
        if ((st = split_line(ctx, &lv, b, e)))
            goto fail;
        if (e == b) {
            st = fail_at(ctx, &lv, b, "empty line (expected a job)");
            goto fail;
        }
        if (lv.n_fields != n_header) {
            st = fail_at(ctx, &lv, lv.n_fields < n_header ? e : lv.field[n_header] - 1,
                         "row has %zu fields, the header has %zu (a '|' inside a field such as JobName or Comment?)", lv.n_fields,
                         n_header);
            goto fail;
        }
        if (!terminated) {
            st = fail_at(ctx, &lv, e, "last line has no newline (truncated file?)");
            goto fail;
        }
        if (s->n_jobs == cap) {
            size_t nc = cap ? cap * 2 : 64;
            kace_sacct_job *p = realloc(s->jobs, nc * sizeof *p);
            if (!p) {
                st = kace_fail(ctx, KACE_ERR_NOMEM, "%s: out of memory", origin);
                goto fail;
            }
            s->jobs = p;
            cap = nc;
        }
        kace_sacct_job *j = &s->jobs[s->n_jobs];
        memset(j, 0, sizeof *j);
        j->line = lv.line;
        if ((st = check_job_id(ctx, &lv, (size_t)col[C_JOBID])) ||
            (st = copy_text(ctx, &lv, (size_t)col[C_JOBID], "JobID", j->job_id, sizeof j->job_id)) ||
            (st = copy_text(ctx, &lv, (size_t)col[C_JOBNAME], "JobName", j->name, sizeof j->name)) ||
            (st = parse_state(ctx, &lv, (size_t)col[C_STATE], j->state, sizeof j->state)) ||
            (st = parse_time(ctx, &lv, (size_t)col[C_SUBMIT], "Submit", false, &j->submit)) ||
            (st = parse_time(ctx, &lv, (size_t)col[C_START], "Start", true, &j->start)) ||
            (st = parse_time(ctx, &lv, (size_t)col[C_END], "End", true, &j->end)))
            goto fail;
        static const int text_cols[] = {C_USER, C_ACCOUNT, C_PARTITION, C_COMMENT, C_ADMINCOMMENT, C_WCKEY};
        char *text_out[] = {j->user, j->account, j->partition, j->comment, j->admin_comment, j->wckey};
        for (size_t t = 0; t < sizeof text_cols / sizeof *text_cols; t++)
            if (col[text_cols[t]] >= 0 &&
                (st = copy_text(ctx, &lv, (size_t)col[text_cols[t]], column_names[text_cols[t]], text_out[t],
                                KACE_SACCT_TEXT_MAX)))
                goto fail;
        if (col[C_ELAPSED] >= 0 && (st = check_elapsed(ctx, &lv, (size_t)col[C_ELAPSED])))
            goto fail;
        int req_gpus, req_shares, req_nodes, tres_nodes;
        if (col[C_REQTRES] >= 0 &&
            (st = parse_tres(ctx, &lv, (size_t)col[C_REQTRES], "ReqTRES", &req_gpus, &req_shares, &req_nodes)))
            goto fail;
        if ((st = parse_tres(ctx, &lv, (size_t)col[C_ALLOCTRES], "AllocTRES", &j->gpus, &j->gpu_shares, &tres_nodes)))
            goto fail;
        if ((st = parse_nodelist(ctx, &lv, (size_t)col[C_NODELIST], &nt, &j->n_nodes, &j->first_node, nodes_of)))
            goto fail;
        if (col[C_NNODES] >= 0) {
            size_t f = (size_t)col[C_NNODES];
            long v = 0;
            bool ok = lv.len[f] > 0 && lv.len[f] <= 6;
            for (size_t q = 0; ok && q < lv.len[f]; q++) {
                ok = isdigit((unsigned char)lv.field[f][q]);
                v = v * 10 + (lv.field[f][q] - '0');
            }
            if (!ok) {
                st = fail_at(ctx, &lv, lv.field[f], "NNodes '%.*s' is not a node count", (int)(lv.len[f] > 20 ? 20 : lv.len[f]),
                             lv.field[f]);
                goto fail;
            }
            if (j->n_nodes > 0 && v != j->n_nodes) {
                st = fail_at(ctx, &lv, lv.field[f], "NNodes is %ld but NodeList names %d nodes", v, j->n_nodes);
                goto fail;
            }
        }
        if (tres_nodes >= 0 && j->n_nodes > 0 && tres_nodes != j->n_nodes) {
            st = fail_at(ctx, &lv, lv.field[col[C_ALLOCTRES]], "AllocTRES has node=%d but NodeList names %d nodes",
                         tres_nodes, j->n_nodes);
            goto fail;
        }
        j->ran = !isnan(j->start) && !isnan(j->end);
        if (!isnan(j->start) && j->start < j->submit) {
            st = fail_at(ctx, &lv, lv.field[col[C_START]], "Start is before Submit");
            goto fail;
        }
        if (j->ran && j->end < j->start) {
            st = fail_at(ctx, &lv, lv.field[col[C_END]], "End is before Start");
            goto fail;
        }
        if (j->ran && j->n_nodes == 0) {
            st = fail_at(ctx, &lv, lv.field[col[C_NODELIST]], "the job ran (Start and End are times) on no node");
            goto fail;
        }
        if (j->gpus > 0 && j->n_nodes > 0) {
            if (j->gpus % j->n_nodes != 0) {
                st = fail_at(ctx, &lv, lv.field[col[C_ALLOCTRES]], "%d GPUs do not split evenly over %d nodes", j->gpus,
                             j->n_nodes);
                goto fail;
            }
            int per = j->gpus / j->n_nodes;
            for (int q = 0; q < j->n_nodes && q < KACE_SACCT_MAX_NODES; q++)
                if (nt.gpus[nodes_of[q]] < per)
                    nt.gpus[nodes_of[q]] = per;
        } else if (j->gpu_shares > 0) {
            /* A share of one GPU on each of its nodes. */
            for (int q = 0; q < j->n_nodes && q < KACE_SACCT_MAX_NODES; q++)
                if (nt.gpus[nodes_of[q]] < 1)
                    nt.gpus[nodes_of[q]] = 1;
        }
        s->n_jobs++;
    }
    /* Each job once: duplicates come from sacct -D or concatenated files. */
    if (s->n_jobs > 1) {
        ids = malloc(s->n_jobs * sizeof *ids);
        if (!ids) {
            st = kace_fail(ctx, KACE_ERR_NOMEM, "%s: out of memory", origin);
            goto fail;
        }
        for (size_t i = 0; i < s->n_jobs; i++)
            ids[i] = (id_line){s->jobs[i].job_id, s->jobs[i].line};
        qsort(ids, s->n_jobs, sizeof *ids, cmp_id);
        for (size_t i = 1; i < s->n_jobs; i++)
            if (strcmp(ids[i].id, ids[i - 1].id) == 0) {
                st = kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:%d: job %s appears again (first on line %d; run sacct "
                               "without -D)", origin, ids[i].line, col[C_JOBID] + 1, ids[i].id, ids[i - 1].line);
                goto fail;
            }
    }
    s->nodes = nt.names;
    s->node_gpus = nt.gpus;
    s->n_nodes = nt.n;
    free(nt.slots);
    free(nodes_of);
    free(ids);
    *out = s;
    return KACE_OK;
fail:
    free(nt.names);
    free(nt.gpus);
    free(nt.slots);
    free(nodes_of);
    free(ids);
    kace_sacct_free(&s);
    return st;
}

kace_status kace_sacct_load(kace_ctx *ctx, const char *path, kace_sacct **out)
{
    *out = NULL;
    char *data = NULL;
    size_t len = 0;
    kace_status st = kace_read_file(ctx, path, &data, &len);
    if (!st)
        st = kace_sacct_parse(ctx, data, len, path, out);
    free(data);
    return st;
}

/* ---- the mapping file ---- */

#define MAP_MAX_RULES 10000

typedef enum map_field { F_NAME, F_USER, F_ACCOUNT, F_PARTITION, F_COMMENT, F_ADMINCOMMENT, F_WCKEY, N_MAP_FIELDS } map_field;
static const char *const map_field_names[N_MAP_FIELDS] = {"name",    "user",         "account", "partition",
                                                           "comment", "admincomment", "wckey"};

typedef struct map_rule {
    map_field field;
    char pattern[KACE_SACCT_TEXT_MAX];
    char workload[KACE_NAME_MAX];
    int line;
} map_rule;

struct kace_sacct_map {
    map_rule *rules;
    size_t n;
};

void kace_sacct_map_free(kace_sacct_map **m)
{
    if (!m || !*m)
        return;
    free((*m)->rules);
    free(*m);
    *m = NULL;
}

kace_status kace_sacct_map_parse(kace_ctx *ctx, const char *data, size_t len, const char *origin,
                                 kace_sacct_map **out)
{
    *out = NULL;
    kace_status st = KACE_OK;
    kace_sacct_map *m = calloc(1, sizeof *m);
    size_t cap = 0;
    if (!m)
        return kace_fail(ctx, KACE_ERR_NOMEM, "%s: out of memory", origin);
    line_view lv = {.origin = origin};
    size_t pos = 0;
    const char *b, *e;
    bool terminated;
    while (next_line(data, len, &pos, &b, &e, &terminated)) {
        lv.line++;
        lv.text = b;
        const char *tok[4];
        size_t tlen[4];
        int n = 0;
        const char *p = b;
        for (;;) {
            while (p < e && (*p == ' ' || *p == '\t'))
                p++;
            if (p == e || *p == '#')
                break;
            if (n == 3) {
                st = fail_at(ctx, &lv, p, "more than three words (expected FIELD PATTERN WORKLOAD)");
                goto fail;
            }
            tok[n] = p;
            while (p < e && *p != ' ' && *p != '\t') {
                if ((unsigned char)*p < 0x20 || *p == 0x7f) {
                    st = fail_at(ctx, &lv, p, "control character 0x%02x", (unsigned)(unsigned char)*p);
                    goto fail;
                }
                p++;
            }
            tlen[n] = (size_t)(p - tok[n]);
            n++;
        }
        if (p < e && *p == '#')
            for (const char *q = p; q < e; q++)
                if ((unsigned char)*q < 0x20 && *q != '\t') {
                    st = fail_at(ctx, &lv, q, "control character 0x%02x", (unsigned)(unsigned char)*q);
                    goto fail;
                }
        if (n == 0)
            continue;
        if (n != 3) {
            st = fail_at(ctx, &lv, p, "%d word%s (expected FIELD PATTERN WORKLOAD)", n, n == 1 ? "" : "s");
            goto fail;
        }
        map_rule r = {.line = lv.line};
        int f = 0;
        while (f < N_MAP_FIELDS && !(strlen(map_field_names[f]) == tlen[0] && memcmp(map_field_names[f], tok[0], tlen[0]) == 0))
            f++;
        if (f == N_MAP_FIELDS) {
            st = fail_at(ctx, &lv, tok[0], "unknown field '%.*s' (expected name, user, account, partition, comment, "
                         "admincomment or wckey)", (int)(tlen[0] > 30 ? 30 : tlen[0]), tok[0]);
            goto fail;
        }
        r.field = (map_field)f;
        if (tlen[1] >= sizeof r.pattern || tlen[2] >= sizeof r.workload) {
            st = fail_at(ctx, &lv, tlen[1] >= sizeof r.pattern ? tok[1] : tok[2], "word longer than %zu characters",
                         (tlen[1] >= sizeof r.pattern ? sizeof r.pattern : sizeof r.workload) - 1);
            goto fail;
        }
        memcpy(r.pattern, tok[1], tlen[1]);
        memcpy(r.workload, tok[2], tlen[2]);
        if (m->n == MAP_MAX_RULES) {
            st = fail_at(ctx, &lv, b, "more than %d rules", MAP_MAX_RULES);
            goto fail;
        }
        if (m->n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            map_rule *nr = realloc(m->rules, nc * sizeof *nr);
            if (!nr) {
                st = kace_fail(ctx, KACE_ERR_NOMEM, "%s: out of memory", origin);
                goto fail;
            }
            m->rules = nr;
            cap = nc;
        }
        m->rules[m->n++] = r;
    }
    *out = m;
    return KACE_OK;
fail:
    kace_sacct_map_free(&m);
    return st;
}

kace_status kace_sacct_map_load(kace_ctx *ctx, const char *path, kace_sacct_map **out)
{
    *out = NULL;
    char *data = NULL;
    size_t len = 0;
    kace_status st = kace_read_file(ctx, path, &data, &len);
    if (!st)
        st = kace_sacct_map_parse(ctx, data, len, path, out);
    free(data);
    return st;
}

size_t kace_sacct_map_n_rules(const kace_sacct_map *m)
{
    return m ? m->n : 0;
}

const char *kace_sacct_map_rule(const kace_sacct_map *m, size_t i, int *line)
{
    if (line)
        *line = m->rules[i].line;
    return m->rules[i].workload;
}

int kace_sacct_map_match(const kace_sacct_map *m, const kace_sacct_job *j)
{
    for (size_t i = 0; m && i < m->n; i++) {
        const char *v[N_MAP_FIELDS] = {j->name, j->user, j->account, j->partition, j->comment, j->admin_comment,
                                       j->wckey};
        if (fnmatch(m->rules[i].pattern, v[m->rules[i].field], 0) == 0)
            return (int)i;
    }
    return -1;
}
