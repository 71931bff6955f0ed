/* Campaign plans (see include/kace/campaign.h). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/campaign.h"

#define MAX_TOKENS (KACE_PLAN_MAX_WORKLOADS + 8)

typedef struct token {
    const char *text; /* NUL-terminated inside the parser's line copy */
    int col;
} token;

/* What the statements so far asked for, before repetitions are expanded. */
typedef struct item {
    kace_measure_spec spec; /* repetition unused */
    int repeat;
    int line;
} item;

typedef struct parser {
    kace_ctx *ctx;
    const char *origin;
    int line;
    char names[KACE_PLAN_MAX_WORKLOADS][KACE_NAME_MAX];
    int n_names;
    int repeat;
    bool timeslice;
    char set[KACE_SET_NAME_MAX]; /* "" = default by k and mode */
    item *items;
    size_t n_items, cap_items;
    size_t n_planned; /* items x repetitions, bounded by KACE_PLAN_MAX_ENTRIES */
    /* The last repeat/mode/set that no planning statement has followed yet: one
     * on the plan's last lines would change nothing, so it is an error. */
    int unused_line, unused_col;
    char unused[64];
} parser;

static kace_status fail_at(parser *p, int col, const char *fmt, const char *what)
{
    char msg[512];
    snprintf(msg, sizeof msg, fmt, what);
    return kace_fail(p->ctx, KACE_ERR_PARSE, "%s:%d:%d: %s", p->origin, p->line, col, msg);
}

/* A workload or set name: printable, no space, '#', '@' or ','. */
static kace_status check_name(parser *p, const token *t, size_t max)
{
    size_t n = strlen(t->text);
    if (n >= max)
        return fail_at(p, t->col, "name '%.40s...' is too long", t->text);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)t->text[i];
        if (c <= 0x20 || c == 0x7f || c == '@' || c == ',' || c == '#')
            return fail_at(p, t->col, "expected a name (no spaces, '@', ',' or '#'), got '%.60s'", t->text);
    }
    return KACE_OK;
}

static kace_status parse_int(parser *p, const token *t, long lo, long hi, const char *what, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(t->text, &end, 10);
    if (end == t->text || *end != '\0' || errno == ERANGE || v < lo || v > hi) {
        char msg[160];
        snprintf(msg, sizeof msg, "expected %s (%ld..%ld), got '%%.40s'", what, lo, hi);
        return fail_at(p, t->col, msg, t->text);
    }
    *out = v;
    return KACE_OK;
}

static kace_status add_item(parser *p, const kace_measure_spec *spec, int col)
{
    if (p->n_planned + (size_t)p->repeat > KACE_PLAN_MAX_ENTRIES)
        return fail_at(p, col, "the plan grows past %s measurements", "50000");
    if (p->n_items == p->cap_items) {
        size_t cap = p->cap_items ? p->cap_items * 2 : 64;
        item *it = realloc(p->items, cap * sizeof *it);
        if (!it)
            return kace_fail(p->ctx, KACE_ERR_NOMEM, "%s: out of memory", p->origin);
        p->items = it;
        p->cap_items = cap;
    }
    item *it = &p->items[p->n_items++];
    it->spec = *spec;
    it->spec.timeslice = p->timeslice;
    if (p->set[0])
        snprintf(it->spec.set, sizeof it->spec.set, "%s", p->set);
    else
        kace_measure_default_set(&it->spec, it->spec.set, sizeof it->spec.set);
    it->repeat = p->repeat;
    it->line = p->line;
    p->n_planned += (size_t)p->repeat;
    return KACE_OK;
}

static kace_status add_group(parser *p, const int *idx, int k, int col)
{
    kace_measure_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.k = k;
    for (int i = 0; i < k; i++) {
        snprintf(spec.workload[i], sizeof spec.workload[i], "%s", p->names[idx[i]]);
        spec.mps_pct[i] = 100;
    }
    return add_item(p, &spec, col);
}

static kace_status need_workloads(parser *p, int at_least, const token *t)
{
    if (p->n_names < at_least) {
        char msg[160];
        snprintf(msg, sizeof msg, "'%%s' needs at least %d workloads (a 'workloads' line before it); %d so far",
                 at_least, p->n_names);
        return fail_at(p, t->col, msg, t->text);
    }
    return KACE_OK;
}

/* splitmix64: a small, seedable generator, the same on every platform. */
static uint64_t next_random(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The n_occur plan: shuffle every pair, keep those that still help one of
 * their workloads reach n pairs. Every workload ends in >= n pairs since
 * each of its n_names - 1 pairs is considered while it may need one. */
static kace_status plan_occur(parser *p, int n, uint64_t seed, int col)
{
    int w = p->n_names;
    size_t n_pairs = (size_t)w * (size_t)(w - 1) / 2;
    int (*pairs)[2] = malloc(n_pairs * sizeof *pairs);
    if (!pairs)
        return kace_fail(p->ctx, KACE_ERR_NOMEM, "%s: out of memory", p->origin);
    size_t at = 0;
    for (int a = 0; a < w; a++)
        for (int b = a + 1; b < w; b++) {
            pairs[at][0] = a;
            pairs[at][1] = b;
            at++;
        }
    uint64_t state = seed;
    for (size_t i = n_pairs; i > 1; i--) {
        size_t j = (size_t)(next_random(&state) % i);
        int t0 = pairs[i - 1][0], t1 = pairs[i - 1][1];
        pairs[i - 1][0] = pairs[j][0];
        pairs[i - 1][1] = pairs[j][1];
        pairs[j][0] = t0;
        pairs[j][1] = t1;
    }
    int count[KACE_PLAN_MAX_WORKLOADS] = {0};
    kace_status st = KACE_OK;
    for (size_t i = 0; i < n_pairs && st == KACE_OK; i++) {
        int a = pairs[i][0], b = pairs[i][1];
        if (count[a] >= n && count[b] >= n)
            continue;
        count[a]++;
        count[b]++;
        /* Keep the set's order inside a pair, so the plan reads naturally. */
        st = add_group(p, pairs[i], 2, col);
    }
    free(pairs);
    return st;
}

static kace_status statement_splits(parser *p, token *t, int nt)
{
    if (p->timeslice)
        return fail_at(p, t[0].col, "'%s' needs MPS (the current mode is timeslice)", t[0].text);
    int pcts[99], n_pct = 0, on = -1;
    for (int i = 1; i < nt; i++) {
        if (strcmp(t[i].text, "on") == 0) {
            on = i;
            break;
        }
        long v;
        kace_status st = parse_int(p, &t[i], 1, 99, "an MPS split percentage", &v);
        if (st)
            return st;
        if (n_pct == 99)
            return fail_at(p, t[i].col, "more than 99 splits%s", "");
        pcts[n_pct++] = (int)v;
    }
    if (n_pct == 0)
        return fail_at(p, t[0].col, "'%s' needs at least one percentage (e.g. splits 10 30 50 70 90)", t[0].text);
    const char *only_a = NULL, *only_b = NULL;
    if (on >= 0) {
        if (nt != on + 3)
            return fail_at(p, t[on].col, "expected '%s A B' (two workloads)", "on");
        for (int i = on + 1; i < nt; i++) {
            kace_status st = check_name(p, &t[i], KACE_NAME_MAX);
            if (st)
                return st;
        }
        only_a = t[on + 1].text;
        only_b = t[on + 2].text;
    }
    /* The pairs to split: those planned so far at 100% under MPS, or A B. */
    size_t n_items = only_a ? 1 : p->n_items, found = 0;
    for (size_t i = 0; i < n_items; i++) {
        /* A copy: add_item may move p->items. */
        kace_measure_spec pair;
        if (only_a) {
            memset(&pair, 0, sizeof pair);
            pair.k = 2;
            snprintf(pair.workload[0], KACE_NAME_MAX, "%s", only_a);
            snprintf(pair.workload[1], KACE_NAME_MAX, "%s", only_b);
        } else {
            pair = p->items[i].spec;
            if (pair.k != 2 || pair.timeslice || pair.mps_pct[0] != 100 || pair.mps_pct[1] != 100)
                continue;
        }
        found++;
        for (int s = 0; s < n_pct; s++) {
            kace_measure_spec spec = pair;
            spec.mps_pct[0] = pcts[s];
            spec.mps_pct[1] = 100 - pcts[s];
            spec.set[0] = '\0';
            kace_status st = add_item(p, &spec, t[0].col);
            if (st)
                return st;
        }
    }
    if (found == 0)
        return fail_at(p, t[0].col, "'%s': no pair planned before it to split (or give 'on A B')", t[0].text);
    return KACE_OK;
}

static kace_status statement_run(parser *p, token *t, int nt, const char *line_text)
{
    kace_measure_spec spec;
    memset(&spec, 0, sizeof spec);
    int at = -1;
    for (int i = 1; i < nt; i++) {
        if (t[i].text[0] == '@') {
            at = i;
            break;
        }
        if (spec.k == KACE_MAX_K)
            return fail_at(p, t[i].col, "more than %s workloads in one colocation", "8");
        kace_status st = check_name(p, &t[i], KACE_NAME_MAX);
        if (st)
            return st;
        snprintf(spec.workload[spec.k], KACE_NAME_MAX, "%s", t[i].text);
        spec.mps_pct[spec.k] = 100;
        spec.k++;
    }
    if (spec.k == 0)
        return fail_at(p, t[0].col, "'%s' needs at least one workload", t[0].text);
    if (at >= 0) {
        /* The list is the rest of the line after '@' (spaces allowed). */
        int col = t[at].col + 1;
        char list[KACE_PLAN_MAX_LINE + 1];
        snprintf(list, sizeof list, "%s", line_text + col - 1);
        list[strcspn(list, "#\r")] = '\0';
        kace_status st = kace_mps_pct_parse_at(p->ctx, list, p->origin, p->line, col, spec.k, KACE_MAX_K,
                                               spec.mps_pct, NULL);
        if (st)
            return st;
        if (p->timeslice)
            for (int i = 0; i < spec.k; i++)
                if (spec.mps_pct[i] != 100)
                    return fail_at(p, t[at].col, "MPS percentages need MPS (the current mode is %s)", "timeslice");
    }
    return add_item(p, &spec, t[0].col);
}

/* A repeat, mode or set statement: it applies to the statements after it. */
static void note_modifier(parser *p, const token *t)
{
    p->unused_line = p->line;
    p->unused_col = t[0].col;
    snprintf(p->unused, sizeof p->unused, "%.20s %.40s", t[0].text, t[1].text);
}

static kace_status statement(parser *p, token *t, int nt, const char *line_text)
{
    const char *w = t[0].text;
    kace_status st;
    long v;
    bool modifier = strcmp(w, "repeat") == 0 || strcmp(w, "mode") == 0 || strcmp(w, "set") == 0;
    if (!modifier && strcmp(w, "workloads") != 0)
        p->unused_line = 0; /* a planning statement (or an error) */
    if (strcmp(w, "workloads") == 0) {
        if (nt < 2)
            return fail_at(p, t[0].col, "'%s' needs at least one name", w);
        for (int i = 1; i < nt; i++) {
            if ((st = check_name(p, &t[i], KACE_NAME_MAX)))
                return st;
            bool known = false;
            for (int j = 0; j < p->n_names && !known; j++)
                known = strcmp(p->names[j], t[i].text) == 0;
            if (known)
                continue;
            if (p->n_names == KACE_PLAN_MAX_WORKLOADS)
                return fail_at(p, t[i].col, "more than %s workloads", "256");
            snprintf(p->names[p->n_names++], KACE_NAME_MAX, "%s", t[i].text);
        }
        return KACE_OK;
    }
    if (strcmp(w, "repeat") == 0) {
        if (nt != 2)
            return fail_at(p, t[0].col, "expected '%s N'", w);
        if ((st = parse_int(p, &t[1], 1, 100, "a repetition count", &v)))
            return st;
        p->repeat = (int)v;
        note_modifier(p, t);
        return KACE_OK;
    }
    if (strcmp(w, "mode") == 0) {
        if (nt != 2 || (strcmp(t[1].text, "mps") != 0 && strcmp(t[1].text, "timeslice") != 0))
            return fail_at(p, nt > 1 ? t[1].col : t[0].col, "expected 'mode mps' or 'mode timeslice'%s", "");
        p->timeslice = strcmp(t[1].text, "timeslice") == 0;
        note_modifier(p, t);
        return KACE_OK;
    }
    if (strcmp(w, "set") == 0) {
        if (nt != 2)
            return fail_at(p, t[0].col, "expected '%s NAME'", w);
        if ((st = check_name(p, &t[1], KACE_SET_NAME_MAX)))
            return st;
        snprintf(p->set, sizeof p->set, "%s", t[1].text);
        note_modifier(p, t);
        return KACE_OK;
    }
    if (strcmp(w, "pairs") == 0 || strcmp(w, "triples") == 0) {
        int k = w[0] == 'p' ? 2 : 3;
        if (nt != 1)
            return fail_at(p, t[1].col, "'%s' takes no arguments (it uses the 'workloads' set)", w);
        if ((st = need_workloads(p, k, &t[0])))
            return st;
        int n = p->n_names, idx[3];
        for (idx[0] = 0; idx[0] < n; idx[0]++)
            for (idx[1] = idx[0] + 1; idx[1] < n; idx[1]++) {
                if (k == 2) {
                    if ((st = add_group(p, idx, 2, t[0].col)))
                        return st;
                    continue;
                }
                for (idx[2] = idx[1] + 1; idx[2] < n; idx[2]++)
                    if ((st = add_group(p, idx, 3, t[0].col)))
                        return st;
            }
        return KACE_OK;
    }
    if (strcmp(w, "occur") == 0) {
        if (nt != 2 && !(nt == 4 && strcmp(t[2].text, "seed") == 0))
            return fail_at(p, t[0].col, "expected '%s N [seed S]'", w);
        if ((st = need_workloads(p, 2, &t[0])))
            return st;
        long n_occur, seed = 1;
        if ((st = parse_int(p, &t[1], 1, p->n_names - 1, "pairs per workload", &n_occur)) ||
            (nt == 4 && (st = parse_int(p, &t[3], 0, 2147483647L, "a seed", &seed))))
            return st;
        return plan_occur(p, (int)n_occur, (uint64_t)seed, t[0].col);
    }
    if (strcmp(w, "splits") == 0)
        return statement_splits(p, t, nt);
    if (strcmp(w, "run") == 0)
        return statement_run(p, t, nt, line_text);
    return fail_at(p, t[0].col,
                   "unknown statement '%.40s' (expected workloads, repeat, mode, set, pairs, triples, occur, splits "
                   "or run)",
                   w);
}

/* Splits a line into tokens (in place); '#' ends it. '@' starts a token of
 * its own (so "run a b @50,50" and "run a b @ 50,50" read the same). */
static kace_status tokenize(parser *p, char *s, token *t, int *nt)
{
    *nt = 0;
    char *c = s;
    for (;;) {
        while (*c == ' ' || *c == '\t' || *c == '\r')
            *c++ = '\0';
        if (*c == '\0' || *c == '#')
            break;
        if (*nt == MAX_TOKENS)
            return fail_at(p, (int)(c - s) + 1, "more than %s words on one line", "264");
        t[*nt].text = c;
        t[*nt].col = (int)(c - s) + 1;
        (*nt)++;
        if (*c == '@') /* the rest of the line is the percentage list */
            break;
        while (*c && *c != ' ' && *c != '\t' && *c != '\r' && *c != '#')
            c++;
        if (*c == '#')
            *c = '\0';
    }
    for (int i = 0; i < *nt; i++)
        if ((unsigned char)t[i].text[0] < 0x20)
            return fail_at(p, t[i].col, "unexpected control character%s", "");
    return KACE_OK;
}

typedef struct keyed {
    char *key;
    size_t index;
} keyed;

static int cmp_keyed(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->index < y->index ? -1 : x->index > y->index);
}

kace_measured_run kace_plan_entry_run(const kace_plan_entry *e)
{
    kace_measured_run r;
    memset(&r, 0, sizeof r);
    r.set = e->spec.set;
    r.mode = e->spec.timeslice ? "timeslice" : "mps";
    r.repetition = e->spec.repetition;
    r.k = e->spec.k;
    for (int i = 0; i < r.k && i < KACE_MAX_K; i++) {
        r.member[i].workload = e->spec.workload[i];
        r.member[i].mps_pct = e->spec.mps_pct[i];
    }
    return r;
}

void kace_plan_entry_key(const kace_plan_entry *e, char *out, size_t size)
{
    kace_measured_run r = kace_plan_entry_run(e);
    kace_measured_run_key(&r, out, size);
}

/* Repetition-major order, duplicates dropped (the first one stays). */
static kace_status expand(parser *p, kace_plan *plan)
{
    int max_repeat = 0;
    for (size_t i = 0; i < p->n_items; i++)
        if (p->items[i].repeat > max_repeat)
            max_repeat = p->items[i].repeat;
    plan->max_repeat = max_repeat;
    size_t total = p->n_planned;
    if (total == 0)
        return KACE_OK;
    plan->entries = calloc(total, sizeof *plan->entries);
    keyed *keys = calloc(total, sizeof *keys);
    kace_status st = KACE_OK;
    if (!plan->entries || !keys) {
        st = kace_fail(p->ctx, KACE_ERR_NOMEM, "%s: out of memory", p->origin);
        goto done;
    }
    size_t n = 0;
    for (int r = 0; r < max_repeat; r++)
        for (size_t i = 0; i < p->n_items; i++) {
            if (p->items[i].repeat <= r)
                continue;
            kace_plan_entry *e = &plan->entries[n];
            e->spec = p->items[i].spec;
            e->spec.repetition = r;
            e->line = p->items[i].line;
            n++;
        }
    size_t key_size = KACE_MAX_K * (KACE_NAME_MAX + 8) + 320;
    for (size_t i = 0; i < n; i++) {
        keys[i].index = i;
        if (!(keys[i].key = malloc(key_size))) {
            st = kace_fail(p->ctx, KACE_ERR_NOMEM, "%s: out of memory", p->origin);
            goto done;
        }
        kace_plan_entry_key(&plan->entries[i], keys[i].key, key_size);
    }
    qsort(keys, n, sizeof *keys, cmp_keyed);
    bool *drop = calloc(n, sizeof *drop);
    if (!drop) {
        st = kace_fail(p->ctx, KACE_ERR_NOMEM, "%s: out of memory", p->origin);
        goto done;
    }
    for (size_t i = 1; i < n; i++)
        if (strcmp(keys[i].key, keys[i - 1].key) == 0)
            drop[keys[i].index] = true; /* sorted by index within equal keys: the later one */
    size_t kept = 0;
    for (size_t i = 0; i < n; i++)
        if (!drop[i])
            plan->entries[kept++] = plan->entries[i];
    plan->n = kept;
    free(drop);
done:
    if (keys)
        for (size_t i = 0; i < total; i++)
            free(keys[i].key);
    free(keys);
    return st;
}

kace_status kace_plan_parse(kace_ctx *ctx, const char *text, size_t len, const char *origin, kace_plan **out)
{
    *out = NULL;
    parser *p = calloc(1, sizeof *p);
    kace_plan *plan = calloc(1, sizeof *plan);
    char *line = malloc(KACE_PLAN_MAX_LINE + 1);
    kace_status st = KACE_OK;
    if (!p || !plan || !line) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "%s: out of memory", origin);
        goto done;
    }
    p->ctx = ctx;
    p->origin = origin;
    p->repeat = 1;
    size_t at = 0;
    while (at < len) {
        p->line++;
        const char *nl = memchr(text + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
        if (n > KACE_PLAN_MAX_LINE) {
            st = fail_at(p, 1, "line longer than %s characters", "4096");
            goto done;
        }
        if (memchr(text + at, '\0', n)) {
            st = fail_at(p, (int)((const char *)memchr(text + at, '\0', n) - (text + at)) + 1,
                         "unexpected NUL byte%s", "");
            goto done;
        }
        memcpy(line, text + at, n);
        line[n] = '\0';
        at += n + (nl != NULL);
        char copy[KACE_PLAN_MAX_LINE + 1];
        memcpy(copy, line, n + 1); /* tokenize writes NULs into line */
        token t[MAX_TOKENS];
        int nt;
        if ((st = tokenize(p, line, t, &nt)))
            goto done;
        if (nt > 0 && (st = statement(p, t, nt, copy)))
            goto done;
    }
    if (p->unused_line) {
        p->line = p->unused_line;
        st = fail_at(p, p->unused_col,
                     "'%s' applies to the statements after it and none follows (put it before the "
                     "pairs, triples, occur, splits or run it is for)",
                     p->unused);
        goto done;
    }
    plan->n_workloads = p->n_names;
    if ((st = expand(p, plan)))
        goto done;
    if (plan->n == 0) {
        st = kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:1: the plan has no colocation to measure (add pairs, triples, "
                       "occur, splits or run)", origin, p->line > 0 ? p->line : 1);
        goto done;
    }
    *out = plan;
    plan = NULL;
done:
    if (p)
        free(p->items);
    free(p);
    free(line);
    kace_plan_free(&plan);
    return st;
}

kace_status kace_plan_parse_file(kace_ctx *ctx, const char *path, kace_plan **out)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return kace_fail(ctx, KACE_ERR_IO, "%s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    kace_status st = KACE_OK;
    for (;;) {
        if (len == cap) {
            if (cap >= (size_t)64 << 20) {
                st = kace_fail(ctx, KACE_ERR_INVALID, "%s: a plan larger than 64 MiB", path);
                break;
            }
            cap = cap ? cap * 2 : 4096;
            char *b = realloc(buf, cap);
            if (!b) {
                st = kace_fail(ctx, KACE_ERR_NOMEM, "%s: out of memory", path);
                break;
            }
            buf = b;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) {
            if (ferror(f))
                st = kace_fail(ctx, KACE_ERR_IO, "%s: read error", path);
            break;
        }
    }
    fclose(f);
    if (st == KACE_OK)
        st = kace_plan_parse(ctx, buf ? buf : "", len, path, out);
    free(buf);
    return st;
}

void kace_plan_free(kace_plan **plan)
{
    if (!plan || !*plan)
        return;
    free((*plan)->entries);
    free(*plan);
    *plan = NULL;
}
