/* kace export: the store's profiles, runs and splits written back as the
 * CSV files kace import reads (docs/data.md, "Exporting"). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kace/kace.h"
#include "base/text_buf.h"
#include "kace/store_export.h"
#include "store/store_internal.h"

/* ---- small helpers ------------------------------------------------------ */

/* A CSV field, quoted when it holds a comma, a quote or a line break; NULL
 * is an empty cell. */
void csv_field(text_buf *t, const char *s)
{
    if (!s)
        return;
    if (!strpbrk(s, ",\"\r\n")) {
        tb_append(t, s, strlen(s));
        return;
    }
    tb_append(t, "\"", 1);
    for (const char *p = s; *p; p++)
        tb_append(t, *p == '"' ? "\"\"" : p, *p == '"' ? 2 : 1);
    tb_append(t, "\"", 1);
}

/* The shortest of %.15g, %.16g and %.17g that reads back as the very double
 * (%.17g always does); NaN (a missing value) is an empty cell. */
void csv_number(text_buf *t, double v)
{
    if (isnan(v))
        return;
    char buf[40];
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    tb_append(t, buf, strlen(buf));
}

static char *dup_text(const unsigned char *s)
{
    return s ? strdup((const char *)s) : NULL;
}

static kace_status make_folder(kace_ctx *ctx, const char *path)
{
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return kace_fail(ctx, KACE_ERR_IO, "%s: cannot create the folder: %s", path, strerror(errno));
    return KACE_OK;
}

/* The paths written so far: two sets must not share one file. */
typedef struct written {
    char **paths;
    size_t n, cap;
} written;

static kace_status write_file(kace_ctx *ctx, written *w, const char *path, text_buf *t)
{
    if (t->oom)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->paths[i], path) == 0)
            return kace_fail(ctx, KACE_ERR_INVALID,
                             "%s: two groups of runs would share this file (a set named like another set's "
                             "repetition or time-sliced runs); export them with --set one at a time",
                             path);
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 32;
        char **p = realloc(w->paths, cap * sizeof *p);
        if (!p)
            return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        w->paths = p;
        w->cap = cap;
    }
    if (!(w->paths[w->n] = strdup(path)))
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    w->n++;
    return kace_write_file_durable(ctx, path, t->p ? t->p : "", t->len);
}

/* ---- sources: one folder each ------------------------------------------ */

typedef struct source_group {
    char *gpu, *tool, *date; /* NULL: not recorded */
    char folder[200];
    bool used; /* a file was written into its folder */
} source_group;

/* A folder name from the source's words: letters, digits, '.' and '-' kept,
 * anything else '-'; "data" for a source that records nothing. */
static void folder_name(const source_group *g, char *out, size_t size)
{
    if (!g->gpu && !g->tool && !g->date) {
        snprintf(out, size, "data");
        return;
    }
    snprintf(out, size, "%s_%s_%s", g->tool ? g->tool : "any-tool", g->gpu ? g->gpu : "any-gpu",
             g->date ? g->date : "any-date");
    for (char *p = out; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '.' ||
              *p == '-' || *p == '_'))
            *p = '-';
    if (out[0] == '.')
        out[0] = '-';
}

static void bind_source(sqlite3_stmt *q, const source_group *g)
{
    store_bind_text_or_null(q, 1, g->gpu);
    store_bind_text_or_null(q, 2, g->tool);
    store_bind_text_or_null(q, 3, g->date);
}

/* ---- profiles ----------------------------------------------------------- */

typedef struct profile_row {
    char *workload, *metric;
    double value; /* NaN: stored as known missing (NULL) */
} profile_row;

typedef struct workload_values {
    size_t first, n;   /* rows[first .. first+n) */
    int signature;     /* index of its set of metrics */
} workload_values;

static bool same_metrics(const profile_row *rows, const workload_values *a, const workload_values *b)
{
    if (a->n != b->n)
        return false;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(rows[a->first + i].metric, rows[b->first + i].metric) != 0)
            return false;
    return true;
}

static bool is_curve_metric(const char *m, int *pct)
{
    char *end = NULL;
    if (strncmp(m, "exclusive_mps", 13) != 0)
        return false;
    long p = strtol(m + 13, &end, 10);
    *pct = (int)p;
    return end != m + 13 && !*end && p >= 10 && p <= 100 && p % 10 == 0;
}

/* One file for the workloads whose stored metrics are exactly sig's, every
 * cell filled (an empty one is a known-missing value, as stored):
 * the system layout (Type, Exclusive100, ...) when the exclusive throughput
 * is among them, else the kernel layout (Type, Threads, ...), else the
 * exclusive-by-MPS layout for curves alone; otherwise the system layout
 * with an empty Exclusive100 (re-imported as known missing). */
static void profile_file(text_buf *t, const profile_row *rows, const workload_values *wl, size_t n_wl, int sig)
{
    const workload_values *first = NULL;
    for (size_t i = 0; i < n_wl && !first; i++)
        if (wl[i].signature == sig)
            first = &wl[i];
    bool has_excl = false, has_threads = false, curves = true;
    for (size_t i = 0; i < first->n; i++) {
        const char *m = rows[first->first + i].metric;
        int pct;
        has_excl |= strcmp(m, "exclusive_throughput") == 0;
        has_threads |= strcmp(m, "Threads") == 0;
        curves &= is_curve_metric(m, &pct);
    }
    enum { SYSTEM, KERNEL, CURVES } layout = has_excl ? SYSTEM : has_threads ? KERNEL : curves ? CURVES : SYSTEM;
    /* The column order: the layout's lead columns, then the rest in the
     * stored (name) order; curves by share. */
    size_t n = first->n;
    size_t *order = malloc((n ? n : 1) * sizeof *order);
    if (!order) {
        t->oom = true;
        return;
    }
    size_t at = 0;
    const char *lead = layout == SYSTEM ? "exclusive_throughput" : layout == KERNEL ? "Threads" : NULL;
    for (size_t i = 0; i < n; i++)
        if (lead && strcmp(rows[first->first + i].metric, lead) == 0)
            order[at++] = i;
    for (size_t i = 0; i < n; i++)
        if (!lead || strcmp(rows[first->first + i].metric, lead) != 0)
            order[at++] = i;
    if (layout == CURVES) /* insertion sort by share: 10 before 100 */
        for (size_t i = 1; i < n; i++)
            for (size_t j = i; j > 0; j--) {
                int a, b;
                is_curve_metric(rows[first->first + order[j - 1]].metric, &a);
                is_curve_metric(rows[first->first + order[j]].metric, &b);
                if (a <= b)
                    break;
                size_t x = order[j];
                order[j] = order[j - 1];
                order[j - 1] = x;
            }
    tb_append(t, layout == CURVES ? "workload" : "Type", layout == CURVES ? 8 : 4);
    if (layout == SYSTEM && !has_excl)
        tb_append(t, ",Exclusive100", 13);
    for (size_t i = 0; i < n; i++) {
        const char *m = rows[first->first + order[i]].metric;
        int pct;
        tb_append(t, ",", 1);
        if (layout == CURVES && is_curve_metric(m, &pct))
            tb_printf(t, "%d", pct);
        else
            csv_field(t, strcmp(m, "exclusive_throughput") == 0 ? "Exclusive100" : m);
    }
    tb_append(t, "\n", 1);
    for (size_t w = 0; w < n_wl; w++) {
        if (wl[w].signature != sig)
            continue;
        csv_field(t, rows[wl[w].first].workload);
        if (layout == SYSTEM && !has_excl)
            tb_append(t, ",", 1);
        for (size_t i = 0; i < n; i++) {
            tb_append(t, ",", 1);
            csv_number(t, rows[wl[w].first + order[i]].value);
        }
        tb_append(t, "\n", 1);
    }
    free(order);
}

static kace_status export_profiles(kace_ctx *ctx, kace_store *s, const source_group *g, const char *folder,
                                   written *out, kace_export_stats *stats)
{
    sqlite3_stmt *q = NULL;
    kace_status st = store_prepare(ctx, s,
                                   "SELECT w.name, p.metric, p.value FROM profiles p JOIN workloads w ON w.id=p.workload_id "
                                   "JOIN sources src ON src.id=p.source_id WHERE src.gpu IS ?1 AND src.tool IS ?2 AND "
                                   "src.date IS ?3 ORDER BY w.name, p.metric",
                                   &q);
    if (st)
        return st;
    bind_source(q, g);
    profile_row *rows = NULL;
    size_t n = 0, cap = 0;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (n == cap) {
            cap = cap ? 2 * cap : 256;
            profile_row *p = realloc(rows, cap * sizeof *p);
            if (!p) {
                st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
                goto done;
            }
            rows = p;
        }
        profile_row *r = &rows[n++];
        r->workload = dup_text(sqlite3_column_text(q, 0));
        r->metric = dup_text(sqlite3_column_text(q, 1));
        r->value = sqlite3_column_type(q, 2) == SQLITE_NULL ? NAN : sqlite3_column_double(q, 2);
        if (!r->workload || !r->metric) {
            st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
            goto done;
        }
    }
    if (rc != SQLITE_DONE) {
        st = store_fail(ctx, s, "read profiles");
        goto done;
    }
    stats->profile_values += n;
    /* Workloads in name order, each with its metrics' signature. */
    workload_values *wl = calloc(n ? n : 1, sizeof *wl);
    if (!wl) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    size_t n_wl = 0;
    for (size_t i = 0; i < n; i++) {
        if (n_wl == 0 || strcmp(rows[wl[n_wl - 1].first].workload, rows[i].workload) != 0)
            wl[n_wl++] = (workload_values){.first = i, .n = 0, .signature = -1};
        wl[n_wl - 1].n++;
    }
    int n_sig = 0;
    for (size_t i = 0; i < n_wl; i++) {
        for (size_t j = 0; j < i && wl[i].signature < 0; j++)
            if (same_metrics(rows, &wl[i], &wl[j]))
                wl[i].signature = wl[j].signature;
        if (wl[i].signature < 0)
            wl[i].signature = n_sig++;
    }
    for (int sig = 0; sig < n_sig && !st; sig++) {
        char path[4400];
        if (sig == 0)
            snprintf(path, sizeof path, "%s/profiles.csv", folder);
        else
            snprintf(path, sizeof path, "%s/profiles-%d.csv", folder, sig + 1);
        text_buf t = {0};
        profile_file(&t, rows, wl, n_wl, sig);
        st = write_file(ctx, out, path, &t);
        free(t.p);
        stats->files += !st;
    }
    free(wl);
done:
    sqlite3_finalize(q);
    for (size_t i = 0; i < n; i++) {
        free(rows[i].workload);
        free(rows[i].metric);
    }
    free(rows);
    return st;
}

/* ---- runs --------------------------------------------------------------- */

typedef struct export_run {
    char *set;
    int k, repetition;
    bool ok, timeslice;
    char *workload[KACE_MAX_K];
    int mps_pct[KACE_MAX_K];
    double throughput[KACE_MAX_K]; /* NaN: not measured */
} export_run;

static void run_free(export_run *r)
{
    free(r->set);
    for (int i = 0; i < KACE_MAX_K; i++)
        free(r->workload[i]);
}

static bool set_wanted(const kace_export_options *opt, const char *set)
{
    if (!opt || opt->n_sets == 0)
        return true;
    for (size_t i = 0; i < opt->n_sets; i++)
        if (strcmp(opt->sets[i], set) == 0)
            return true;
    return false;
}

static bool same_file(const export_run *a, const export_run *b)
{
    return strcmp(a->set, b->set) == 0 && a->k == b->k && a->timeslice == b->timeslice && a->repetition == b->repetition;
}

/* The run's members as "name@pct|..." in name order: A+B and B+A alike. */
static char *unordered_key(const export_run *r)
{
    int order[KACE_MAX_K];
    for (int i = 0; i < r->k; i++) {
        int j = i;
        order[j] = i;
        while (j > 0) {
            int c = strcmp(r->workload[order[j - 1]], r->workload[order[j]]);
            if (c < 0 || (c == 0 && r->mps_pct[order[j - 1]] <= r->mps_pct[order[j]]))
                break;
            int x = order[j];
            order[j] = order[j - 1];
            order[j - 1] = x;
            j--;
        }
    }
    text_buf t = {0};
    for (int i = 0; i < r->k; i++)
        tb_printf(&t, "%s@%d|", r->workload[order[i]], r->mps_pct[order[i]]);
    if (t.oom) {
        free(t.p);
        return NULL;
    }
    return t.p;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Whether two ok runs of runs[0..n) are one colocation in a colocation
 * file's eyes (the same members at the same shares in another order: a raw
 * campaign's A+B at 10/90 and B+A at 90/10); *oom on failure. */
static bool has_unordered_repeat(const export_run *runs, size_t n, bool *oom)
{
    char **keys = calloc(n ? n : 1, sizeof *keys);
    size_t n_keys = 0;
    bool repeat = false;
    *oom = !keys;
    for (size_t i = 0; keys && !*oom && i < n; i++)
        if (runs[i].ok)
            *oom |= !(keys[n_keys++] = unordered_key(&runs[i]));
    if (!*oom) {
        qsort(keys, n_keys, sizeof *keys, cmp_str);
        for (size_t i = 1; i < n_keys && !repeat; i++)
            repeat = strcmp(keys[i - 1], keys[i]) == 0;
    }
    for (size_t i = 0; keys && i < n_keys; i++)
        free(keys[i]);
    free(keys);
    return repeat;
}

static bool has_throughput(const export_run *r)
{
    for (int i = 0; i < r->k; i++)
        if (!isnan(r->throughput[i]))
            return true;
    return false;
}

/* A colocation file: workload<i>, w<i>throughput, w<i>mps_pct. */
static void colocation_file(text_buf *t, const export_run *runs, size_t n)
{
    int k = runs[0].k;
    for (int i = 1; i <= k; i++)
        tb_printf(t, "%sworkload%d", i > 1 ? "," : "", i);
    for (int i = 1; i <= k; i++)
        tb_printf(t, ",w%dthroughput", i);
    for (int i = 1; i <= k; i++)
        tb_printf(t, ",w%dmps_pct", i);
    tb_append(t, "\n", 1);
    for (size_t r = 0; r < n; r++) {
        if (!runs[r].ok)
            continue;
        for (int i = 0; i < k; i++) {
            if (i)
                tb_append(t, ",", 1);
            csv_field(t, runs[r].workload[i]);
        }
        for (int i = 0; i < k; i++) {
            tb_append(t, ",", 1);
            csv_number(t, runs[r].throughput[i]);
        }
        for (int i = 0; i < k; i++)
            tb_printf(t, ",%d", runs[r].mps_pct[i]);
        tb_append(t, "\n", 1);
    }
}

static int cmp_split(const void *a, const void *b, void *k)
{
    const int *x = a, *y = b;
    for (int i = 0; i < *(int *)k; i++)
        if (x[i] != y[i])
            return x[i] < y[i] ? -1 : 1;
    return 0;
}

/* A raw-campaign file: one column per split "(w1_P1, w2_P2)", in share
 * order; each run a row with its throughputs (None where not measured) in
 * its split's cell, "(None, None)" (never run) in the others. */
static void raw_file(text_buf *t, const export_run *runs, size_t n, const bool *keep)
{
    int k = runs[0].k;
    int (*split)[KACE_MAX_K] = calloc(n ? n : 1, sizeof *split);
    if (!split) {
        t->oom = true;
        return;
    }
    size_t n_split = 0;
    for (size_t r = 0; r < n; r++) {
        if (!keep[r])
            continue;
        bool seen = false;
        for (size_t j = 0; j < n_split && !seen; j++)
            seen = cmp_split(split[j], runs[r].mps_pct, &k) == 0;
        if (!seen)
            memcpy(split[n_split++], runs[r].mps_pct, sizeof split[0]);
    }
    for (size_t i = 1; i < n_split; i++) /* insertion sort: few splits */
        for (size_t j = i; j > 0 && cmp_split(split[j - 1], split[j], &k) > 0; j--) {
            int x[KACE_MAX_K];
            memcpy(x, split[j], sizeof x);
            memcpy(split[j], split[j - 1], sizeof x);
            memcpy(split[j - 1], x, sizeof x);
        }
    for (int i = 1; i <= k; i++)
        tb_printf(t, "%sworkload%d", i > 1 ? "," : "", i);
    for (size_t j = 0; j < n_split; j++) {
        tb_append(t, ",\"(", 3);
        for (int i = 0; i < k; i++)
            tb_printf(t, "%sw%d_%d", i ? ", " : "", i + 1, split[j][i]);
        tb_append(t, ")\"", 2);
    }
    tb_append(t, "\n", 1);
    for (size_t r = 0; r < n; r++) {
        if (!keep[r])
            continue;
        for (int i = 0; i < k; i++) {
            if (i)
                tb_append(t, ",", 1);
            csv_field(t, runs[r].workload[i]);
        }
        for (size_t j = 0; j < n_split; j++) {
            bool mine = cmp_split(split[j], runs[r].mps_pct, &k) == 0;
            tb_append(t, ",\"(", 3);
            for (int i = 0; i < k; i++) {
                if (i)
                    tb_append(t, ", ", 2);
                if (mine && !isnan(runs[r].throughput[i]))
                    csv_number(t, runs[r].throughput[i]);
                else
                    tb_append(t, "None", 4);
            }
            tb_append(t, ")\"", 2);
        }
        tb_append(t, "\n", 1);
    }
    free(split);
}

/* A set's name as a file name: kace import names the set after the file. */
static kace_status check_set_name(kace_ctx *ctx, const char *set)
{
    if (!*set || set[0] == '.' || strchr(set, '/') || strlen(set) > 100)
        return kace_fail(ctx, KACE_ERR_INVALID,
                         "set '%.100s' cannot be exported: kace import names a set after its file, and this name "
                         "is not a file name (empty, starting with '.', holding '/' or over 100 bytes)",
                         set);
    return KACE_OK;
}

/* One file of runs: a colocation file when every run is ok and no two are
 * one colocation in another order, else a raw campaign (k >= 2). */
static kace_status export_run_file(kace_ctx *ctx, const export_run *runs, size_t n, const char *folder, written *out,
                                   kace_export_stats *stats)
{
    const export_run *r0 = &runs[0];
    kace_status st = check_set_name(ctx, r0->set);
    if (st)
        return st;
    /* Failed runs without any throughput are left out: they need no raw file. */
    bool sayable_failure = false, oom = false;
    for (size_t i = 0; i < n; i++)
        sayable_failure |= !runs[i].ok && has_throughput(&runs[i]);
    bool raw = r0->k >= 2 && (sayable_failure || has_unordered_repeat(runs, n, &oom));
    if (oom)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    char dir[4400], path[4600], name[160];
    snprintf(dir, sizeof dir, "%s/k%d", folder, r0->k);
    if ((st = make_folder(ctx, dir)))
        return st;
    /* What a file cannot say goes into its name (and so the set's). */
    snprintf(name, sizeof name, "%s%s", r0->set, r0->timeslice && !strstr(r0->set, "timeslice") ? "-timeslice" : "");
    if (r0->repetition > 0)
        snprintf(name + strlen(name), sizeof name - strlen(name), "-rep%d", r0->repetition);
    snprintf(path, sizeof path, "%s/%s.csv", dir, name);
    bool *keep = calloc(n, sizeof *keep);
    if (!keep)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        keep[i] = raw ? has_throughput(&runs[i]) : runs[i].ok;
        kept += keep[i];
        stats->runs += keep[i];
        stats->failed_runs += keep[i] && !runs[i].ok;
        stats->runs_left_out += !keep[i];
    }
    text_buf t = {0};
    if (kept) {
        if (raw)
            raw_file(&t, runs, n, keep);
        else
            colocation_file(&t, runs, n);
        st = write_file(ctx, out, path, &t);
        stats->files += !st;
    }
    free(t.p);
    free(keep);
    return st;
}

static kace_status export_runs(kace_ctx *ctx, kace_store *s, const source_group *g, const char *folder,
                               const kace_export_options *opt, written *out, kace_export_stats *stats)
{
    sqlite3_stmt *q = NULL;
    kace_status st = store_prepare(
        ctx, s,
        "SELECT r.id, r.set_name, r.k, r.status, coalesce(r.mode='timeslice', 0), r.repetition, m.slot, w.name, "
        "m.mps_pct, m.throughput FROM runs r JOIN sources src ON src.id=r.source_id JOIN run_members m ON "
        "m.run_id=r.id JOIN workloads w ON w.id=m.workload_id WHERE src.gpu IS ?1 AND src.tool IS ?2 AND "
        "src.date IS ?3 ORDER BY r.set_name, r.k, coalesce(r.mode='timeslice', 0), r.repetition, r.id, m.slot",
        &q);
    if (st)
        return st;
    bind_source(q, g);
    export_run *runs = NULL;
    size_t n = 0, cap = 0;
    sqlite3_int64 current = -1;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        const char *set = (const char *)sqlite3_column_text(q, 1);
        if (!set_wanted(opt, set ? set : ""))
            continue;
        sqlite3_int64 id = sqlite3_column_int64(q, 0);
        if (id != current) {
            if (n == cap) {
                cap = cap ? 2 * cap : 256;
                export_run *p = realloc(runs, cap * sizeof *p);
                if (!p) {
                    st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
                    goto done;
                }
                runs = p;
            }
            export_run *r = &runs[n++];
            memset(r, 0, sizeof *r);
            r->set = strdup(set ? set : "");
            r->k = sqlite3_column_int(q, 2);
            const char *status = (const char *)sqlite3_column_text(q, 3);
            r->ok = status && strcmp(status, "ok") == 0;
            r->timeslice = sqlite3_column_int(q, 4) != 0;
            r->repetition = sqlite3_column_int(q, 5);
            for (int i = 0; i < KACE_MAX_K; i++)
                r->throughput[i] = NAN;
            current = id;
            if (!r->set) {
                st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
                goto done;
            }
            if (r->k < 1 || r->k > KACE_MAX_K) {
                st = kace_fail(ctx, KACE_ERR_STORE, "%s: run %lld has k=%d", s->path, (long long)id, r->k);
                goto done;
            }
        }
        export_run *r = &runs[n - 1];
        int slot = sqlite3_column_int(q, 6);
        if (slot < 0 || slot >= r->k || r->workload[slot]) {
            st = kace_fail(ctx, KACE_ERR_STORE, "%s: run %lld has a bad member slot %d", s->path, (long long)id, slot);
            goto done;
        }
        if (!(r->workload[slot] = dup_text(sqlite3_column_text(q, 7)))) {
            st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
            goto done;
        }
        r->mps_pct[slot] = sqlite3_column_int(q, 8);
        r->throughput[slot] = sqlite3_column_type(q, 9) == SQLITE_NULL ? NAN : sqlite3_column_double(q, 9);
    }
    if (rc != SQLITE_DONE) {
        st = store_fail(ctx, s, "read runs");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        bool whole = true;
        for (int m = 0; m < runs[i].k; m++)
            whole &= runs[i].workload[m] != NULL;
        if (!whole) {
            st = kace_fail(ctx, KACE_ERR_STORE, "%s: a run of set '%s' lacks members", s->path, runs[i].set);
            goto done;
        }
        /* An "ok" run without a throughput is not one the files can say as ok. */
        for (int m = 0; m < runs[i].k; m++)
            runs[i].ok &= !isnan(runs[i].throughput[m]);
    }
    for (size_t i = 0; i < n && !st;) {
        size_t j = i + 1;
        while (j < n && same_file(&runs[i], &runs[j]))
            j++;
        st = export_run_file(ctx, runs + i, j - i, folder, out, stats);
        i = j;
    }
done:
    sqlite3_finalize(q);
    for (size_t i = 0; i < n; i++)
        run_free(&runs[i]);
    free(runs);
    return st;
}

/* The measured runs' own record (kace measure, kace campaign): each run and
 * member with its mode, repetition, time, window, spread, status word and
 * how its process ended, failed runs included: runs.csv, in the columns of
 * the device campaign's record, which kace import recognises and reads past
 * (the k<K> files hold what it imports). Not written without measured runs. */
static kace_status export_record(kace_ctx *ctx, kace_store *s, const source_group *g, const char *folder,
                                 const kace_export_options *opt, written *out, kace_export_stats *stats)
{
    sqlite3_stmt *q = NULL;
    kace_status st = store_prepare(
        ctx, s,
        "SELECT r.id, r.set_name, r.mode, r.repetition, r.status, r.measured_at, r.window_s, m.slot, w.name, "
        "m.mps_pct, m.throughput, m.throughput_cv, m.status, m.detail FROM runs r JOIN sources src ON "
        "src.id=r.source_id JOIN run_members m ON m.run_id=r.id JOIN workloads w ON w.id=m.workload_id WHERE "
        "src.gpu IS ?1 AND src.tool IS ?2 AND src.date IS ?3 AND r.mode IS NOT NULL ORDER BY r.id, m.slot",
        &q);
    if (st)
        return st;
    bind_source(q, g);
    text_buf t = {0};
    tb_printf(&t, "run,set,mode,repetition,run_status,measured_at,window_s,slot,workload,mps_pct,throughput,"
                  "throughput_cv,status,detail\n");
    size_t rows = 0;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        const char *set = (const char *)sqlite3_column_text(q, 1);
        if (!set_wanted(opt, set ? set : ""))
            continue;
        for (int c = 0; c < 14; c++) {
            if (c)
                tb_append(&t, ",", 1);
            if (sqlite3_column_type(q, c) == SQLITE_FLOAT)
                csv_number(&t, sqlite3_column_double(q, c));
            else if (sqlite3_column_type(q, c) != SQLITE_NULL)
                csv_field(&t, (const char *)sqlite3_column_text(q, c));
        }
        tb_append(&t, "\n", 1);
        rows++;
    }
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE)
        st = store_fail(ctx, s, "read measured runs");
    else if (rows > 0) {
        char path[4400];
        snprintf(path, sizeof path, "%s/runs.csv", folder);
        st = write_file(ctx, out, path, &t);
        stats->files += !st;
    }
    free(t.p);
    return st;
}

/* ---- splits ------------------------------------------------------------- */

static kace_status export_splits(kace_ctx *ctx, kace_store *s, const char *dir, written *out, kace_export_stats *stats)
{
    sqlite3_stmt *q = NULL;
    kace_status st = store_prepare(ctx, s,
                                   "SELECT n_occur, seed, is_train, workload1, workload2, paper_fit FROM splits "
                                   "ORDER BY n_occur, seed, workload1, workload2",
                                   &q);
    if (st)
        return st;
    text_buf t = {0};
    tb_printf(&t, "n_occur,seed,set,workload1,workload2,paper_fit\n");
    size_t n = 0;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        tb_printf(&t, "%d,%d,%s,", sqlite3_column_int(q, 0), sqlite3_column_int(q, 1),
                  sqlite3_column_int(q, 2) ? "train" : "test");
        csv_field(&t, (const char *)sqlite3_column_text(q, 3));
        tb_append(&t, ",", 1);
        csv_field(&t, (const char *)sqlite3_column_text(q, 4));
        tb_printf(&t, ",%d\n", sqlite3_column_int(q, 5));
        n++;
    }
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE)
        st = store_fail(ctx, s, "read splits");
    else if (n > 0) {
        char path[4200];
        snprintf(path, sizeof path, "%s/splits.csv", dir);
        st = write_file(ctx, out, path, &t);
        stats->files += !st;
        stats->splits = n;
    }
    free(t.p);
    return st;
}

/* ---- the whole export --------------------------------------------------- */

/* A shell word in single quotes ('\'' for a quote inside). */
static void shell_word(text_buf *t, const char *s)
{
    tb_append(t, "'", 1);
    for (const char *p = s; *p; p++)
        tb_append(t, *p == '\'' ? "'\\''" : p, *p == '\'' ? 4 : 1);
    tb_append(t, "'", 1);
}

static void readme(text_buf *t, const source_group *g, size_t n_groups, const kace_export_stats *stats,
                   const kace_export_options *opt)
{
    tb_printf(t, "# A kace dataset\n\nWritten by `kace export`");
    if (opt && opt->n_sets) {
        tb_printf(t, " (the runs of the set%s", opt->n_sets > 1 ? "s" : "");
        for (size_t i = 0; i < opt->n_sets; i++)
            tb_printf(t, "%s `%s`", i ? "," : "", opt->sets[i]);
        tb_printf(t, ")");
    }
    tb_printf(t, ": %zu workloads, %zu profile values, %zu runs (%zu failed), %zu split rows.\n\n", stats->workloads,
              stats->profile_values, stats->runs, stats->failed_runs, stats->splits);
    tb_printf(t, "One folder per source (the GPU, tool and date the values were stored with):\n\n");
    for (size_t i = 0; i < n_groups; i++)
        if (g[i].used)
            tb_printf(t, "- `%s/`: GPU %s, tool %s, date %s\n", g[i].folder, g[i].gpu ? g[i].gpu : "not recorded",
                  g[i].tool ? g[i].tool : "not recorded", g[i].date ? g[i].date : "not recorded");
    tb_printf(t, "\nImport it all (sources then name only the files):\n\n    kace import --create-workloads DIR\n\n"
                 "or folder by folder, keeping each folder's source, and the splits last:\n\n");
    for (size_t i = 0; i < n_groups; i++) {
        if (!g[i].used)
            continue;
        tb_printf(t, "    kace import --create-workloads");
        const char *opt_name[] = {" --gpu ", " --tool ", " --date "};
        const char *value[] = {g[i].gpu, g[i].tool, g[i].date};
        for (int v = 0; v < 3; v++)
            if (value[v]) {
                tb_append(t, opt_name[v], strlen(opt_name[v]));
                shell_word(t, value[v]);
            }
        tb_printf(t, " DIR/%s\n", g[i].folder);
    }
    if (stats->splits)
        tb_printf(t, "    kace import DIR/splits.csv\n");
    tb_printf(t, "\n`profiles*.csv`: each workload's stored metrics (an empty cell: known missing). "
                 "`k<K>/<set>.csv`: the runs of K workloads of a set, as a colocation file, or as a raw campaign "
                 "where the set holds failed runs (a failed member's throughput is None). A time-sliced run's "
                 "set gets `-timeslice` and a repetition's `-rep<N>`, since a file cannot say either. "
                 "A folder's `runs.csv`, where it has one, is kace measure's record of its runs, failed ones "
                 "included: mode, repetition, time, window, each member's spread, status word and how its "
                 "process ended; kace import reads past it. Not imported from these files: that record, failed "
                 "runs without any throughput (%zu here: the import format cannot say them)",
              stats->runs_left_out);
    tb_printf(t, ", workload commands, observations and models.\n");
}

static kace_status load_groups(kace_ctx *ctx, kace_store *s, source_group **out, size_t *n)
{
    sqlite3_stmt *q = NULL;
    kace_status st = store_prepare(ctx, s,
                                   "SELECT DISTINCT gpu, tool, date FROM sources WHERE id IN (SELECT source_id FROM "
                                   "profiles UNION SELECT source_id FROM runs) ORDER BY gpu, tool, date",
                                   &q);
    if (st)
        return st;
    source_group *g = NULL;
    size_t cap = 0;
    *n = 0;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? 2 * cap : 8;
            source_group *p = realloc(g, cap * sizeof *p);
            if (!p) {
                st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
                break;
            }
            g = p;
        }
        source_group *x = &g[(*n)++];
        x->gpu = dup_text(sqlite3_column_text(q, 0));
        x->tool = dup_text(sqlite3_column_text(q, 1));
        x->date = dup_text(sqlite3_column_text(q, 2));
        x->used = false;
        folder_name(x, x->folder, sizeof x->folder);
        /* Two sources that differ only in characters a folder name
         * cannot hold: number the later one. */
        for (size_t i = 0; i + 1 < *n; i++)
            if (strcmp(g[i].folder, x->folder) == 0) {
                size_t len = strlen(x->folder);
                snprintf(x->folder + len, sizeof x->folder - len, "-%zu", *n);
                break;
            }
    }
    if (!st && rc != SQLITE_DONE)
        st = store_fail(ctx, s, "read sources");
    sqlite3_finalize(q);
    *out = g;
    return st;
}

/* Workloads with a profile value, or a member of a run in the files (one with
 * a throughput: export_run_file leaves out the others). */
static kace_status count_workloads(kace_ctx *ctx, kace_store *s, const kace_export_options *opt, size_t *n)
{
    sqlite3_stmt *q = NULL;
    kace_status st = store_prepare(ctx, s,
                                   "SELECT w.name, NULL FROM workloads w WHERE EXISTS(SELECT 1 FROM profiles p WHERE "
                                   "p.workload_id=w.id) UNION SELECT w.name, r.set_name FROM workloads w JOIN "
                                   "run_members m ON m.workload_id=w.id JOIN runs r ON r.id=m.run_id WHERE "
                                   "(r.k>1 OR r.status='ok') AND EXISTS(SELECT 1 FROM run_members t WHERE "
                                   "t.run_id=r.id AND t.throughput IS NOT NULL) ORDER BY 1",
                                   &q);
    if (st)
        return st;
    *n = 0;
    char last[KACE_NAME_MAX] = "";
    bool any = false;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(q, 0);
        const char *set = (const char *)sqlite3_column_text(q, 1);
        if (!name || (set && !set_wanted(opt, set)) || (any && strcmp(last, name) == 0))
            continue;
        snprintf(last, sizeof last, "%s", name);
        any = true;
        (*n)++;
    }
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? KACE_OK : store_fail(ctx, s, "count workloads");
}

kace_status kace_store_export(kace_ctx *ctx, kace_store *s, const char *dir, const kace_export_options *opt,
                              kace_export_stats *stats_out)
{
    kace_export_stats stats;
    memset(&stats, 0, sizeof stats);
    source_group *g = NULL;
    size_t n_groups = 0;
    written out = {0};
    text_buf t = {0};
    if (strlen(dir) > 3800)
        return kace_fail(ctx, KACE_ERR_INVALID, "%.100s...: path too long", dir);
    kace_status st = load_groups(ctx, s, &g, &n_groups);
    for (size_t i = 0; i < n_groups && !st; i++) {
        char folder[4096];
        snprintf(folder, sizeof folder, "%s/%s", dir, g[i].folder);
        size_t files = stats.files;
        if (!(st = make_folder(ctx, folder)) && !(st = export_profiles(ctx, s, &g[i], folder, &out, &stats)))
            if (!(st = export_runs(ctx, s, &g[i], folder, opt, &out, &stats)))
                st = export_record(ctx, s, &g[i], folder, opt, &out, &stats);
        g[i].used = stats.files > files;
        if (!g[i].used)
            rmdir(folder); /* only when empty: --force may have found files there */
        stats.folders += g[i].used;
    }
    if (!st && (!opt || opt->n_sets == 0))
        st = export_splits(ctx, s, dir, &out, &stats);
    if (!st)
        st = count_workloads(ctx, s, opt, &stats.workloads);
    if (!st) {
        char path[4200];
        snprintf(path, sizeof path, "%s/README.md", dir);
        readme(&t, g, n_groups, &stats, opt);
        /* Not a CSV file: kace import reads past it. Not in the written list
         * either: it is not data. */
        st = t.oom ? kace_fail(ctx, KACE_ERR_NOMEM, "out of memory") : kace_write_file_durable(ctx, path, t.p, t.len);
    }
    free(t.p);
    for (size_t i = 0; i < n_groups; i++) {
        free(g[i].gpu);
        free(g[i].tool);
        free(g[i].date);
    }
    free(g);
    for (size_t i = 0; i < out.n; i++)
        free(out.paths[i]);
    free(out.paths);
    if (stats_out)
        *stats_out = stats;
    return st;
}
