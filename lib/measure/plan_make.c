/* The device campaign's plan, made and extended (see include/kace/plan_make.h).
 *
 * Ported from scripts/device/plan.py (removed since), which planned no
 * workload alone at 100% MPS but the split grids' four; this code plans
 * every workload so. A plan stored by the script (or by this code before)
 * is extended as the script did: its text kept byte for byte, runs only
 * appended. tests/data/plans/ holds this code's texts and the script's
 * stored plan; tests/test_plan_make.c and tests/cli_plan.sh compare. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/text_buf.h"
#include "kace/campaign.h"
#include "kace/plan_make.h"
#include "kace/workload_name.h"

#define GRID "10 30 50 70 90"
/* Seeds tried for the pairs of `occur N seed S` (fewest_pairs_seed). */
#define OCCUR_SEEDS 64

/* Names usable in a plan: each follows the workload name rule, none twice,
 * no more than a plan holds (which also bounds the triples' search). */
static kace_status check_names(kace_ctx *ctx, const char *const *names, size_t n)
{
    if (n > KACE_PLAN_MAX_WORKLOADS)
        return kace_fail(ctx, KACE_ERR_INVALID, "plan: %zu workloads: a plan holds at most %d", n,
                         KACE_PLAN_MAX_WORKLOADS);
    for (size_t i = 0; i < n; i++) {
        char why[256];
        if (!names[i] || !kace_workload_name_ok(names[i], NULL, why, sizeof why))
            return kace_fail(ctx, KACE_ERR_INVALID, "plan: workload %zu: %s (%s)", i + 1,
                             names[i] ? why : "no name", KACE_WORKLOAD_NAME_RULE);
        for (size_t j = 0; j < i; j++)
            if (strcmp(names[i], names[j]) == 0)
                return kace_fail(ctx, KACE_ERR_INVALID, "plan: workload %s is named twice", names[i]);
    }
    return KACE_OK;
}

/* Hands t's text out once it parses as a plan (what this file writes must). */
static kace_status finish(kace_ctx *ctx, text_buf *t, char **text, size_t *len)
{
    if (t->oom || !t->p) {
        free(t->p);
        return kace_fail(ctx, KACE_ERR_NOMEM, "plan: out of memory");
    }
    kace_plan *plan = NULL;
    kace_status st = kace_plan_parse(ctx, t->p, t->len, "plan", &plan);
    kace_plan_free(&plan);
    if (st != KACE_OK) {
        char why[900];
        snprintf(why, sizeof why, "%s", kace_errmsg(ctx));
        free(t->p);
        return kace_fail(ctx, KACE_ERR_INVALID, "plan: the plan made does not parse: %s", why);
    }
    *text = t->p;
    *len = t->len;
    return KACE_OK;
}

static size_t index_of(const char *const *names, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return i;
    return n;
}

/* Pairs at 100/100 MPS that plan measures (repetition 0: each once). */
static size_t full_share_pairs(const kace_plan *plan)
{
    size_t n = 0;
    for (size_t i = 0; i < plan->n; i++) {
        const kace_measure_spec *s = &plan->entries[i].spec;
        n += s->k == 2 && !s->timeslice && s->repetition == 0 && s->mps_pct[0] == 100 && s->mps_pct[1] == 100;
    }
    return n;
}

/* The seed S of 1..OCCUR_SEEDS for the plan head + "occur N seed S" + tail
 * that measures the fewest pairs at 100/100 MPS (ties: the lowest seed),
 * counted by the plan parser itself: the occur pairs, less those the rest
 * of the plan measures anyway, vary with the shuffle's seed, and each costs
 * a run. The expansion depends only on the text: the same names, the same seed. */
static kace_status fewest_pairs_seed(kace_ctx *ctx, const text_buf *head, const text_buf *tail, size_t occur,
                                     long *seed, size_t *n_pairs)
{
    kace_status st = KACE_OK;
    *n_pairs = SIZE_MAX;
    for (long s = 1; s <= OCCUR_SEEDS && st == KACE_OK; s++) {
        text_buf t = {0};
        tb_append(&t, head->p, head->len);
        tb_printf(&t, "occur %zu seed %ld\n", occur, s);
        tb_append(&t, tail->p, tail->len);
        kace_plan *plan = NULL;
        if (t.oom || !t.p)
            st = kace_fail(ctx, KACE_ERR_NOMEM, "plan: out of memory");
        else
            st = kace_plan_parse(ctx, t.p, t.len, "plan", &plan);
        if (st == KACE_OK && full_share_pairs(plan) < *n_pairs) {
            *n_pairs = full_share_pairs(plan);
            *seed = s;
        }
        kace_plan_free(&plan);
        free(t.p);
    }
    return st;
}

/* The least used triple not chosen yet, ties to the first in lexicographic order. */
static void best_triple(size_t n, const int *use, const size_t (*chosen)[3], size_t n_chosen, size_t out[3])
{
    long best = LONG_MAX;
    for (size_t a = 0; a < n; a++)
        for (size_t b = a + 1; b < n; b++)
            for (size_t c = b + 1; c < n; c++) {
                long sum = (long)use[a] + use[b] + use[c];
                if (sum >= best)
                    continue;
                bool taken = false;
                for (size_t k = 0; k < n_chosen && !taken; k++)
                    taken = chosen[k][0] == a && chosen[k][1] == b && chosen[k][2] == c;
                if (taken)
                    continue;
                best = sum;
                out[0] = a, out[1] = b, out[2] = c;
            }
}

kace_status kace_plan_make(kace_ctx *ctx, const char *const *names, size_t n, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    if (n < 3)
        return kace_fail(ctx, KACE_ERR_INVALID, "plan: %zu workloads: a campaign needs at least 3", n);
    kace_status st = check_names(ctx, names, n);
    if (st != KACE_OK)
        return st;
    /* The text but the pairs line: head, then tail. */
    text_buf head = {0}, tail = {0}, t = {0};
    tb_printf(&head, "# written by kace plan from %zu workloads (catalog order)\n", n);
    tb_printf(&head, "workloads");
    for (size_t i = 0; i < n; i++)
        tb_printf(&head, " %s", names[i]);
    tb_printf(&head, "\n");
    /* Triples: the least used workloads first, ties in catalog order, no triple twice. */
    int *use = calloc(n, sizeof *use);
    if (!use) {
        free(head.p);
        return kace_fail(ctx, KACE_ERR_NOMEM, "plan: out of memory");
    }
    size_t chosen[10][3];
    size_t all = n * (n - 1) * (n - 2) / 6, n_chosen = all < 10 ? all : 10;
    for (size_t k = 0; k < n_chosen; k++) {
        best_triple(n, use, (const size_t(*)[3])chosen, k, chosen[k]);
        for (int m = 0; m < 3; m++)
            use[chosen[k][m]]++;
    }
    free(use);
    for (size_t k = 0; k < n_chosen; k++)
        tb_printf(&tail, "run %s %s %s\n", names[chosen[k][0]], names[chosen[k][1]], names[chosen[k][2]]);
    /* Split grids on two disjoint pairs: the first two workloads, and the last two. */
    tb_printf(&tail, "splits " GRID " on %s %s\n", names[0], names[1]);
    tb_printf(&tail, "splits " GRID " on %s %s\n", names[n - 2], names[n - 1]);
    /* Spread: 6 pairs, 3 repetitions each (repetition 0 may coincide with an occur pair). */
    const char *rep[6][2];
    for (size_t i = 0; i < 6; i++) {
        size_t a = i % n, b = (i + 1 + i / n) % n;
        if (a == b)
            b = (b + 1) % n;
        rep[i][0] = names[a];
        rep[i][1] = names[b];
    }
    tb_printf(&tail, "repeat 3   # run-to-run spread\n");
    for (size_t i = 0; i < 6; i++)
        tb_printf(&tail, "run %s %s\n", rep[i][0], rep[i][1]);
    tb_printf(&tail, "repeat 1\n");
    tb_printf(&tail, "mode timeslice   # the same pairs without MPS, to compare\n");
    for (size_t i = 0; i < 3; i++)
        tb_printf(&tail, "run %s %s\n", rep[i][0], rep[i][1]);
    tb_printf(&tail, "mode mps   # each grid workload alone at a share: its exclusive-throughput curve\n");
    /* The grids' workloads: the first two, then the last two unless among them. */
    const char *grid[4] = {names[0], names[1]};
    size_t n_grid = 2;
    for (size_t i = n - 2; i < n; i++)
        if (i > 1)
            grid[n_grid++] = names[i];
    static const int shares[] = {10, 30, 50, 70, 90, 100};
    for (size_t g = 0; g < n_grid; g++)
        for (size_t s = 0; s < sizeof shares / sizeof *shares; s++)
            tb_printf(&tail, "run %s @ %d\n", grid[g], shares[s]);
    /* Every other workload alone at 100%: the exclusive throughput the
     * paper's Exclusive100 is, measured in the pool like its colocations. */
    if (n > n_grid)
        tb_printf(&tail, "# every other workload alone at 100%%: its exclusive throughput\n");
    for (size_t i = 0; i < n; i++)
        if (index_of(grid, n_grid, names[i]) == n_grid)
            tb_printf(&tail, "run %s @ 100\n", names[i]);
    size_t occur = (60 + n - 1) / n;
    if (occur < 5)
        occur = 5;
    if (head.oom || tail.oom)
        st = kace_fail(ctx, KACE_ERR_NOMEM, "plan: out of memory");
    tb_append(&t, head.p, head.len);
    if (st == KACE_OK && occur <= n - 1 && n * (n - 1) / 2 >= 30) {
        long seed = 1;
        size_t n_pairs = 0;
        st = fewest_pairs_seed(ctx, &head, &tail, occur, &seed, &n_pairs);
        tb_printf(&t, "occur %zu seed %ld   # every workload in >= %zu pairs: %zu pairs at 100/100, the fewest "
                      "of seeds 1..%d\n",
                  occur, seed, occur, n_pairs, OCCUR_SEEDS);
    } else {
        tb_printf(&t, "pairs   # %zu workloads: every pair (%zu)\n", n, n * (n - 1) / 2);
    }
    tb_append(&t, tail.p, tail.len);
    free(head.p);
    free(tail.p);
    if (st != KACE_OK) {
        free(t.p);
        return st;
    }
    return finish(ctx, &t, text, len);
}

/* ---- extending a plan ---------------------------------------------------- */

/* Where plan.py (Python's str.splitlines) ended a line: a line end after
 * "\r\n" is one; returns the line end's length at s[i], 0 when none. */
static size_t line_end_at(const char *s, size_t len, size_t i)
{
    unsigned char c = (unsigned char)s[i];
    if (c == '\r')
        return i + 1 < len && s[i + 1] == '\n' ? 2 : 1;
    if (c == '\n' || c == '\v' || c == '\f' || c == 0x1c || c == 0x1d || c == 0x1e)
        return 1;
    /* U+0085, U+2028, U+2029 in UTF-8 */
    if (c == 0xc2 && i + 1 < len && (unsigned char)s[i + 1] == 0x85)
        return 2;
    if (c == 0xe2 && i + 2 < len && (unsigned char)s[i + 1] == 0x80 &&
        ((unsigned char)s[i + 2] == 0xa8 || (unsigned char)s[i + 2] == 0xa9))
        return 3;
    return 0;
}

/* Python's str.split() whitespace, in ASCII. */
static bool py_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

/* Up to max words of line[0..len) before any '#', each copied NUL-terminated
 * into words[] (one allocation each); the count, or -1 when out of memory. */
static int split_words(const char *line, size_t len, char **words, int max)
{
    const char *hash = memchr(line, '#', len);
    if (hash)
        len = (size_t)(hash - line);
    int n = 0;
    size_t i = 0;
    while (i < len && n < max) {
        while (i < len && py_space(line[i]))
            i++;
        if (i == len)
            break;
        size_t start = i;
        while (i < len && !py_space(line[i]))
            i++;
        words[n] = malloc(i - start + 1);
        if (!words[n])
            return -1;
        memcpy(words[n], line + start, i - start);
        words[n][i - start] = '\0';
        n++;
    }
    return n;
}

static bool all_digits(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

/* What an old plan says that an extension needs. */
typedef struct old_plan {
    bool *planned;   /* per name: in a `workloads` statement */
    bool any_planned;
    long occur;
    int *count;      /* per name: in how many pairs of an earlier extension */
    bool *alone100;  /* per name: a `run NAME @ 100` (alone at 100% MPS) */
} old_plan;

/* Reads the statements of old[0..len) as plan.py did. */
static kace_status read_old(kace_ctx *ctx, const char *old, size_t len, const char *origin,
                            const char *const *names, size_t n, old_plan *o)
{
    int sections = 0, line = 0;
    size_t at = 0;
    while (at < len) {
        size_t end = at, eol = 0;
        while (end < len && !(eol = line_end_at(old, len, end)))
            end++;
        line++;
        /* As many words as the plan parser takes on a line. */
        char *words[KACE_PLAN_MAX_WORKLOADS + 8];
        int nw = split_words(old + at, end - at, words, (int)(sizeof words / sizeof *words));
        at = end + eol;
        if (nw < 0)
            return kace_fail(ctx, KACE_ERR_NOMEM, "plan: out of memory");
        kace_status st = KACE_OK;
        if (nw == 0) {
            /* nothing */
        } else if (strcmp(words[0], "workloads") == 0) {
            for (int w = 1; w < nw; w++) {
                size_t i = index_of(names, n, words[w]);
                if (i < n)
                    o->planned[i] = true;
            }
            o->any_planned = true; /* the parser refuses "workloads" without names */
            sections++;
        } else if (strcmp(words[0], "occur") == 0 && nw >= 2 && all_digits(words[1])) {
            o->occur = strlen(words[1]) > 9 ? LONG_MAX : strtol(words[1], NULL, 10);
        } else if (strcmp(words[0], "run") == 0 && nw == 4 && strcmp(words[2], "@") == 0 &&
                   strcmp(words[3], "100") == 0) {
            size_t i = index_of(names, n, words[1]);
            if (i < n)
                o->alone100[i] = true;
        } else if (strcmp(words[0], "run") == 0 && nw == 3 && strcmp(words[1], "@") != 0 &&
                   strcmp(words[2], "@") != 0 && sections > 1) {
            for (int w = 1; w < 3; w++) {
                size_t i = index_of(names, n, words[w]);
                if (i < n)
                    o->count[i]++;
            }
        } else if (strcmp(words[0], "set") == 0) {
            st = kace_fail(ctx, KACE_ERR_PARSE,
                           "%s:%d:1: 'set' changes where later runs are stored: extend this plan by hand", origin,
                           line);
        }
        for (int w = 0; w < nw; w++)
            free(words[w]);
        if (st != KACE_OK)
            return st;
    }
    if (!o->any_planned)
        return kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:1: no 'workloads' statement: not a plan to extend", origin,
                         line > 0 ? line : 1);
    return KACE_OK;
}

/* old with its line ends as Python reads a text file: "\r\n" and "\r" become "\n". */
static char *universal_newlines(const char *old, size_t len, size_t *out_len)
{
    char *s = malloc(len + 1);
    if (!s)
        return NULL;
    size_t j = 0;
    for (size_t i = 0; i < len; i++) {
        if (old[i] == '\r') {
            s[j++] = '\n';
            if (i + 1 < len && old[i + 1] == '\n')
                i++;
        } else {
            s[j++] = old[i];
        }
    }
    s[j] = '\0';
    *out_len = j;
    return s;
}

kace_status kace_plan_extend(kace_ctx *ctx, const char *old_in, size_t old_in_len, const char *origin,
                             const char *const *names, size_t n, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    if (!origin)
        origin = "plan";
    kace_status st = check_names(ctx, names, n);
    if (st != KACE_OK)
        return st;
    /* The old plan must be one: its text stays in the new one. */
    kace_plan *parsed = NULL;
    st = kace_plan_parse(ctx, old_in, old_in_len, origin, &parsed);
    kace_plan_free(&parsed);
    if (st != KACE_OK)
        return st;
    size_t old_len = 0;
    char *old = universal_newlines(old_in, old_in_len, &old_len);
    old_plan o = {.planned = calloc(n ? n : 1, sizeof *o.planned),
                  .occur = 5,
                  .count = calloc(n ? n : 1, sizeof *o.count),
                  .alone100 = calloc(n ? n : 1, sizeof *o.alone100)};
    bool *paired = calloc(n ? n * n : 1, sizeof *paired);
    text_buf t = {0};
    if (!old || !o.planned || !o.count || !o.alone100 || !paired) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "plan: out of memory");
        goto done;
    }
    if ((st = read_old(ctx, old, old_len, origin, names, n, &o)))
        goto done;
    size_t n_added = 0;
    for (size_t i = 0; i < n; i++)
        n_added += !o.planned[i];
    if (n_added == 0) {
        *text = old;
        *len = old_len;
        old = NULL;
        goto done;
    }
    long need = n - 1 < (size_t)o.occur ? (long)(n - 1) : o.occur;
    size_t keep = old_len;
    while (keep > 0 && old[keep - 1] == '\n')
        keep--;
    tb_append(&t, old, keep);
    tb_printf(&t, "\n# extended by kace plan: %zu workload%s profiled after the plan was made, each in "
                  ">= %ld pairs and alone at 100%% MPS\nworkloads",
              n_added, n_added == 1 ? "" : "s", need);
    for (size_t i = 0; i < n; i++)
        if (!o.planned[i])
            tb_printf(&t, " %s", names[i]);
    tb_printf(&t, "\nrepeat 1\nmode mps");
    /* Each added workload pairs with the names paired least so far, ties in
     * the order given, never with the same one twice. */
    for (size_t w = 0; w < n; w++) {
        if (o.planned[w])
            continue;
        while (o.count[w] < need) {
            size_t best = n;
            for (size_t x = 0; x < n; x++)
                if (x != w && !paired[w * n + x] && (best == n || o.count[x] < o.count[best]))
                    best = x;
            if (best == n)
                break; /* cannot happen: need <= n - 1 distinct partners */
            paired[w * n + best] = paired[best * n + w] = true;
            o.count[w]++;
            o.count[best]++;
            tb_printf(&t, "\nrun %s %s", names[w], names[best]);
        }
    }
    /* Each added workload alone at 100%: its exclusive throughput. */
    for (size_t w = 0; w < n; w++)
        if (!o.planned[w] && !o.alone100[w])
            tb_printf(&t, "\nrun %s @ 100", names[w]);
    tb_printf(&t, "\n");
    st = finish(ctx, &t, text, len);
done:
    free(old);
    free(o.planned);
    free(o.count);
    free(o.alone100);
    free(paired);
    return st;
}
