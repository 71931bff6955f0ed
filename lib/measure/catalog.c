/* Workload catalogs (see include/kace/catalog.h).
 *
 * The device scripts read a catalog line with bash's `read -r name kind rest`
 * and split rest with xargs; this parser reads the same lines to the same
 * words. Where xargs is lenient with a broken line (a quote that never
 * closes when nothing precedes it in its word, a backslash at the line's
 * end) this parser refuses the line instead, and a last empty word ('')
 * stays a word, as in a shell. */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/text_buf.h"
#include "kace/catalog.h"

#define MAX_FILE_BYTES ((size_t)64 << 20)

static const char *const kind_names[] = {"cuda", "torch", "llm", "cmd"};

const char *kace_catalog_kind_name(kace_catalog_kind kind)
{
    return (unsigned)kind < sizeof kind_names / sizeof *kind_names ? kind_names[kind] : "?";
}

/* One line being read: its bytes and where errors point. */
typedef struct line_ctx {
    const char *origin;
    int line;
    const char *p; /* the line, without its line end */
    size_t len;
    char *message; /* set by line_fail */
} line_ctx;

/* Records "origin:line:col: what" for the line (col from 1) and returns
 * KACE_ERR_PARSE (l->message stays NULL when out of memory). */
static kace_status line_fail(line_ctx *l, size_t col, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static kace_status line_fail(line_ctx *l, size_t col, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    text_buf t = {0};
    tb_printf(&t, "%s:%d:%zu: %s", l->origin, l->line, col, what);
    free(l->message);
    l->message = t.oom ? NULL : t.p;
    if (t.oom)
        free(t.p);
    return KACE_ERR_PARSE;
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* Where xargs starts a word it skips these (isspace); inside a word only
 * blanks end it. */
static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* s with every "@W@", then "@PY@", then "@KACE@" replaced (NULL values: kept). */
static char *substitute(const char *s, const kace_catalog_values *values)
{
    static const char *const marks[] = {"@W@", "@PY@", "@KACE@"};
    const char *with[] = {values ? values->workloads : NULL, values ? values->python : NULL,
                          values ? values->kace : NULL};
    char *cur = strdup(s);
    for (size_t m = 0; cur && m < 3; m++) {
        if (!with[m] || !strstr(cur, marks[m]))
            continue;
        text_buf t = {0};
        size_t mlen = strlen(marks[m]);
        const char *at = cur, *hit;
        while ((hit = strstr(at, marks[m]))) {
            tb_append(&t, at, (size_t)(hit - at));
            tb_printf(&t, "%s", with[m]);
            at = hit + mlen;
        }
        tb_printf(&t, "%s", at);
        free(cur);
        cur = t.oom ? NULL : t.p;
        if (t.oom)
            free(t.p);
    }
    return cur;
}

static void free_words(char **words, int n)
{
    for (int i = 0; i < n; i++)
        free(words[i]);
    free(words);
}

/* Appends word[0..n) to *words; false when out of memory. */
static bool push_word(char ***words, int *n, const char *word, size_t len)
{
    char **w = realloc(*words, (size_t)(*n + 2) * sizeof *w);
    if (!w)
        return false;
    *words = w;
    w[*n] = malloc(len + 1);
    if (!w[*n])
        return false;
    memcpy(w[*n], word, len);
    w[*n][len] = '\0';
    w[++*n] = NULL;
    return true;
}

/* The words of the command at l->p[from..end), as xargs splits them.
 * Returns KACE_OK, KACE_ERR_PARSE (l->message set) or KACE_ERR_NOMEM. */
static kace_status split_words(line_ctx *l, size_t from, size_t end, char ***out, int *n_out)
{
    enum { SPACE, NORM, QUOTE, BACKSLASH } state = SPACE;
    char quote = 0;
    size_t quote_col = 0, backslash_col = 0;
    char *buf = malloc(end - from + 1);
    char **words = NULL;
    int n = 0;
    size_t len = 0;
    if (!buf)
        return KACE_ERR_NOMEM;
    kace_status st = KACE_OK;
    for (size_t i = from; i < end && st == KACE_OK; i++) {
        char c = l->p[i];
        switch (state) {
        case SPACE:
            if (is_space(c))
                continue;
            state = NORM;
            /* fall through */
        case NORM:
            if (is_blank(c)) {
                if (!push_word(&words, &n, buf, len))
                    st = KACE_ERR_NOMEM;
                len = 0;
                state = SPACE;
            } else if (c == '\\') {
                state = BACKSLASH;
                backslash_col = i + 1;
            } else if (c == '\'' || c == '"') {
                state = QUOTE;
                quote = c;
                quote_col = i + 1;
            } else {
                buf[len++] = c;
            }
            break;
        case QUOTE:
            if (c == quote)
                state = NORM;
            else
                buf[len++] = c;
            break;
        case BACKSLASH:
            buf[len++] = c;
            state = NORM;
            break;
        }
    }
    if (st == KACE_OK && state == QUOTE)
        st = line_fail(l, quote_col, "the quote %c here does not close: expected a %c before the line's end", quote,
                       quote);
    else if (st == KACE_OK && state == BACKSLASH)
        st = line_fail(l, backslash_col, "a backslash ends the line: expected a byte after it to quote");
    else if (st == KACE_OK && state == NORM && !push_word(&words, &n, buf, len))
        st = KACE_ERR_NOMEM;
    free(buf);
    if (st == KACE_OK && n == 0)
        st = line_fail(l, from + 1, "expected a COMMAND after the KIND, got no word");
    if (st != KACE_OK) {
        free_words(words, n);
        return st;
    }
    *out = words;
    *n_out = n;
    return KACE_OK;
}

static void entry_free(kace_catalog_entry *e)
{
    free_words(e->argv, e->argc);
    free(e->text);
    free(e->origin);
    memset(e, 0, sizeof *e);
}

/* The names in cat and in the first n of fresh (lines of this call). */
static bool name_taken(const kace_catalog *cat, const kace_catalog_entry *fresh, size_t n, const char *name)
{
    if (kace_catalog_find(cat, name))
        return true;
    for (size_t i = 0; i < n; i++)
        if (strcmp(fresh[i].name, name) == 0)
            return true;
    return false;
}

/* Reads one line into *e. KACE_OK with e->argc 0: nothing on the line.
 * KACE_ERR_PARSE: a bad line, l->message says why. */
static kace_status read_line(line_ctx *l, const kace_catalog *cat, const kace_catalog_entry *fresh, size_t n_fresh,
                             const kace_catalog_values *values, kace_catalog_entry *e)
{
    memset(e, 0, sizeof *e);
    const char *nul = memchr(l->p, '\0', l->len);
    if (nul)
        return line_fail(l, (size_t)(nul - l->p) + 1, "a NUL byte: expected text");
    size_t i = 0;
    while (i < l->len && is_blank(l->p[i]))
        i++;
    size_t j = i;
    while (j < l->len && is_space(l->p[j]))
        j++;
    if (j == l->len || l->p[i] == '#')
        return KACE_OK; /* blank, or a comment */
    /* NAME and KIND end at a blank, as bash's read splits them. */
    size_t name_at = i;
    while (i < l->len && !is_blank(l->p[i]))
        i++;
    size_t name_len = i - name_at;
    char name[KACE_WORKLOAD_NAME_MAX + 2];
    size_t keep = name_len < sizeof name - 1 ? name_len : sizeof name - 1;
    memcpy(name, l->p + name_at, keep);
    name[keep] = '\0';
    size_t bad_at = 0;
    char why[256];
    if (!kace_workload_name_ok(name, &bad_at, why, sizeof why))
        return line_fail(l, name_at + bad_at + 1, "expected a workload name (%s): %s", KACE_WORKLOAD_NAME_RULE, why);
    if (name_taken(cat, fresh, n_fresh, name))
        return line_fail(l, name_at + 1, "workload %s: an earlier line has that name", name);
    while (i < l->len && is_blank(l->p[i]))
        i++;
    size_t kind_at = i;
    while (i < l->len && !is_blank(l->p[i]))
        i++;
    size_t kind_len = i - kind_at;
    int kind = -1;
    for (int k = 0; k < (int)(sizeof kind_names / sizeof *kind_names); k++)
        if (kind_len == strlen(kind_names[k]) && memcmp(l->p + kind_at, kind_names[k], kind_len) == 0)
            kind = k;
    if (kind_len == 0)
        return line_fail(l, kind_at + 1, "workload %s: expected a KIND (cuda, torch, llm or cmd) after the name",
                         name);
    if (kind < 0)
        return line_fail(l, kind_at + 1, "workload %s: expected a KIND cuda, torch, llm or cmd, got '%.*s'", name,
                         (int)(kind_len < 40 ? kind_len : 40), l->p + kind_at);
    while (i < l->len && is_blank(l->p[i]))
        i++;
    size_t end = l->len;
    while (end > i && (is_blank(l->p[end - 1]) || l->p[end - 1] == '\n'))
        end--;
    if (i == end)
        return line_fail(l, i + 1, "workload %s: expected a COMMAND after the KIND", name);
    char **words = NULL;
    int n = 0;
    kace_status st = split_words(l, i, end, &words, &n);
    if (st != KACE_OK)
        return st;
    if (words[0][0] == '\0') {
        free_words(words, n);
        return line_fail(l, i + 1, "workload %s: expected a COMMAND, got an empty program name", name);
    }
    for (int w = 0; w < n; w++) {
        char *s = substitute(words[w], values);
        if (!s) {
            free_words(words, n);
            return KACE_ERR_NOMEM;
        }
        free(words[w]);
        words[w] = s;
    }
    memcpy(e->name, name, keep + 1);
    e->kind = (kace_catalog_kind)kind;
    e->argc = n;
    e->argv = words;
    e->line = l->line;
    e->text = malloc(l->len + 1);
    e->origin = strdup(l->origin);
    if (!e->text || !e->origin) {
        entry_free(e);
        return KACE_ERR_NOMEM;
    }
    memcpy(e->text, l->p, l->len);
    e->text[l->len] = '\0';
    return KACE_OK;
}

static bool push_left_out(char ***list, size_t *n, char *message)
{
    char **p = realloc(*list, (*n + 1) * sizeof *p);
    if (!p)
        return false;
    *list = p;
    p[(*n)++] = message;
    return true;
}

kace_status kace_catalog_parse(kace_ctx *ctx, kace_catalog *cat, const char *text, size_t len, const char *origin,
                               const kace_catalog_values *values, unsigned flags)
{
    if (!origin)
        origin = "catalog";
    kace_catalog_entry *fresh = NULL;
    size_t n_fresh = 0, cap = 0;
    char **left = NULL;
    size_t n_left = 0;
    kace_status st = KACE_OK;
    line_ctx l = {.origin = origin};
    size_t at = 0;
    while (at < len && st == KACE_OK) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t line_len = nl ? (size_t)(nl - (text + at)) : len - at;
        l.line++;
        l.p = text + at;
        l.len = line_len;
        at += line_len + (nl ? 1 : 0);
        if (l.len > 0 && l.p[l.len - 1] == '\r')
            l.len--; /* one CR, as the scripts strip it */
        if (n_fresh == cap) {
            size_t c = cap ? cap * 2 : 16;
            kace_catalog_entry *p = realloc(fresh, c * sizeof *p);
            if (!p) {
                st = KACE_ERR_NOMEM;
                break;
            }
            fresh = p;
            cap = c;
        }
        kace_catalog_entry *e = &fresh[n_fresh];
        st = read_line(&l, cat, fresh, n_fresh, values, e);
        if (st == KACE_OK && e->argc > 0)
            n_fresh++;
        else if (st == KACE_ERR_PARSE && !l.message)
            st = KACE_ERR_NOMEM;
        else if (st == KACE_ERR_PARSE && (flags & KACE_CATALOG_LEAVE_OUT)) {
            st = push_left_out(&left, &n_left, l.message) ? KACE_OK : KACE_ERR_NOMEM;
            if (st == KACE_OK)
                l.message = NULL;
        }
    }
    if (st == KACE_OK) {
        kace_catalog_entry *all = realloc(cat->entries, (cat->n + n_fresh + 1) * sizeof *all);
        char **msgs = realloc(cat->left_out, (cat->n_left_out + n_left + 1) * sizeof *msgs);
        if (all)
            cat->entries = all;
        if (msgs)
            cat->left_out = msgs;
        if (!all || !msgs) {
            st = KACE_ERR_NOMEM;
        } else {
            if (n_fresh)
                memcpy(all + cat->n, fresh, n_fresh * sizeof *fresh);
            cat->n += n_fresh;
            if (n_left)
                memcpy(msgs + cat->n_left_out, left, n_left * sizeof *left);
            cat->n_left_out += n_left;
            n_fresh = n_left = 0;
        }
    }
    if (st == KACE_ERR_PARSE)
        kace_fail(ctx, st, "%s", l.message);
    else if (st == KACE_ERR_NOMEM)
        kace_fail(ctx, st, "%s: out of memory", origin);
    free(l.message);
    for (size_t i = 0; i < n_fresh; i++)
        entry_free(&fresh[i]);
    free(fresh);
    for (size_t i = 0; i < n_left; i++)
        free(left[i]);
    free(left);
    return st;
}

kace_status kace_catalog_load(kace_ctx *ctx, kace_catalog *cat, const char *path, const kace_catalog_values *values,
                              unsigned flags)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return kace_fail(ctx, KACE_ERR_IO, "%s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    kace_status st = KACE_OK;
    for (;;) {
        if (len == cap) {
            if (cap >= MAX_FILE_BYTES) {
                st = kace_fail(ctx, KACE_ERR_INVALID, "%s: a catalog larger than 64 MiB", path);
                break;
            }
            size_t c = cap ? cap * 2 : 4096;
            char *b = realloc(buf, c);
            if (!b) {
                st = kace_fail(ctx, KACE_ERR_NOMEM, "%s: out of memory", path);
                break;
            }
            buf = b;
            cap = c;
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
        st = kace_catalog_parse(ctx, cat, buf, len, path, values, flags);
    free(buf);
    return st;
}

void kace_catalog_free(kace_catalog *cat)
{
    if (!cat)
        return;
    for (size_t i = 0; i < cat->n; i++)
        entry_free(&cat->entries[i]);
    free(cat->entries);
    for (size_t i = 0; i < cat->n_left_out; i++)
        free(cat->left_out[i]);
    free(cat->left_out);
    memset(cat, 0, sizeof *cat);
}

const kace_catalog_entry *kace_catalog_find(const kace_catalog *cat, const char *name)
{
    for (size_t i = 0; i < cat->n; i++)
        if (strcmp(cat->entries[i].name, name) == 0)
            return &cat->entries[i];
    return NULL;
}
