/* Importers of the reference measurement files (see include/kace/import.h). */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/csv.h"
#include "batch.h"
#include "data/import_reader.h"
#include "kace/import.h"
#include "nvml_csv.h"

const char *kace_file_kind_name(kace_file_kind kind)
{
    switch (kind) {
    case KACE_FILE_KERNEL_PROFILE: return "kernel profile";
    case KACE_FILE_SYSTEM_PROFILE: return "system profile";
    case KACE_FILE_EXCLUSIVE_BY_MPS: return "exclusive throughput by MPS %";
    case KACE_FILE_COLOCATIONS: return "colocations";
    case KACE_FILE_RAW_CAMPAIGN: return "raw MPS campaign";
    case KACE_FILE_SPLITS: return "splits";
    case KACE_FILE_NCU: return "Nsight Compute export";
    case KACE_FILE_NVML_SAMPLES: return "nvidia-smi/DCGM samples";
    case KACE_FILE_CAMPAIGN_RECORD: return "campaign record (not stored)";
    case KACE_FILE_UNKNOWN: break;
    }
    return "unknown";
}

int kace_file_kind_rank(kace_file_kind kind)
{
    switch (kind) {
    case KACE_FILE_KERNEL_PROFILE:
    case KACE_FILE_NCU: return 0;
    case KACE_FILE_SYSTEM_PROFILE:
    case KACE_FILE_EXCLUSIVE_BY_MPS:
    case KACE_FILE_NVML_SAMPLES: return 1;
    case KACE_FILE_COLOCATIONS: return 2;
    case KACE_FILE_RAW_CAMPAIGN: return 3;
    case KACE_FILE_SPLITS: return 4;
    case KACE_FILE_CAMPAIGN_RECORD:
    case KACE_FILE_UNKNOWN: break;
    }
    return 5;
}

/* ---- helpers ---------------------------------------------------------- */

static int header_find(const kace_csv *h, const char *name)
{
    for (size_t i = 0; i < h->n_fields; i++)
        if (strcmp(h->fields[i], name) == 0)
            return (int)i;
    return -1;
}

/* The reference files name some metrics differently from the store. */
static const char *canonical_metric(const char *column)
{
    static const struct { const char *from, *to; } aliases[] = {
        {"Exclusive100", "exclusive_throughput"},
        {"exclusive_throughput", "exclusive_throughput"},
        {"AvgCPU", "CPU%"},
        {"AvgMem", "MainMem%"},
    };
    for (size_t i = 0; i < sizeof aliases / sizeof *aliases; i++)
        if (strcmp(column, aliases[i].from) == 0)
            return aliases[i].to;
    return column;
}

/* Every data row must have as many fields as the header. */
static kace_status check_width(kace_ctx *ctx, const kace_csv *csv, size_t expected)
{
    /* A cut inside the last field leaves a row that looks whole: every
     * reference file ends with a newline, so a last row without one is taken
     * as truncated. */
    if (!csv->record_terminated && csv->pos >= csv->len)
        return kace_csv_fail(ctx, csv, csv->n_fields ? csv->n_fields - 1 : 0, KACE_ERR_PARSE,
                             "the file ends inside this row, without a final newline (truncated?); row has %zu fields, "
                             "the header %zu",
                             csv->n_fields, expected);
    if (csv->n_fields == expected)
        return KACE_OK;
    if (csv->n_fields < expected)
        return kace_csv_fail(ctx, csv, csv->n_fields ? csv->n_fields - 1 : 0, KACE_ERR_PARSE,
                             "row has %zu fields but the header has %zu (truncated row?)", csv->n_fields, expected);
    return kace_csv_fail(ctx, csv, expected, KACE_ERR_PARSE, "row has %zu fields but the header has %zu",
                         csv->n_fields, expected);
}

/* A header names each column once: otherwise which one wins is a guess. */
static kace_status check_header_unique(kace_ctx *ctx, const kace_csv *h)
{
    for (size_t i = 1; i < h->n_fields; i++)
        for (size_t j = 0; j < i; j++)
            if (strcmp(h->fields[i], h->fields[j]) == 0)
                return kace_csv_fail(ctx, h, i, KACE_ERR_PARSE, "column '%.60s' appears twice (also column %d)",
                                     h->fields[i], h->field_col[j]);
    return KACE_OK;
}

/* "sm%" -> "smpct", "Memory Throughput" -> "memorythroughput": the shape a
 * typo usually keeps, to suggest the metric that was meant. */
static void loose_name(const char *in, char *out, size_t size)
{
    size_t n = 0;
    for (; *in && n + 4 < size; in++) {
        if (*in == '%') {
            memcpy(out + n, "pct", 3);
            n += 3;
        } else if (isalnum((unsigned char)*in)) {
            out[n++] = (char)tolower((unsigned char)*in);
        }
    }
    out[n] = '\0';
}

static const char *suggest_metric(const char *column)
{
    static const char *const known[] = {"Threads", "Compute (SM) Throughput", "DRAM Throughput", "Memory Throughput",
                                        "Registers", "Static Shared Memory", "exclusive_throughput", "Exclusive100",
                                        "Exclusive50", "sm%", "mem%", "memcap", "CPU%", "MainMem%", "AvgCPU", "AvgMem",
                                        "PCIe read bandwidth", "PCIe write bandwidth", "Short_Kernel", "avg_Thread",
                                        "Long_Kernel", "ave_Kernel_Length", "long/short_Ratio"};
    char want[KACE_METRIC_NAME_MAX], have[KACE_METRIC_NAME_MAX];
    loose_name(column, want, sizeof want);
    for (size_t i = 0; i < sizeof known / sizeof *known; i++) {
        loose_name(known[i], have, sizeof have);
        if (strcmp(want, have) == 0)
            return known[i];
    }
    return NULL;
}

/* A metric column must name a metric kace stores: a misspelled one would
 * otherwise become a new metric that nothing reads. */
static kace_status check_metric_column(kace_ctx *ctx, const kace_csv *h, size_t i, const char *metric)
{
    if (kace_metric_is_stored(canonical_metric(metric)))
        return KACE_OK;
    const char *near = suggest_metric(metric);
    if (near)
        return kace_csv_fail(ctx, h, i, KACE_ERR_PARSE, "unknown column '%.60s' (did you mean '%s'?)", h->fields[i],
                             near);
    return kace_csv_fail(ctx, h, i, KACE_ERR_PARSE,
                         "unknown column '%.60s' (not a metric kace stores; the list is in docs/data.md)", h->fields[i]);
}

/* Reads a metric cell: a number (empty = missing) within the metric's range. */
static kace_status metric_cell(kace_ctx *ctx, const kace_csv *csv, size_t i, const char *column, const char *metric,
                               double *v)
{
    kace_status st = kace_csv_number(ctx, csv, i, column, KACE_CSV_EMPTY_IS_MISSING | KACE_CSV_NONNEGATIVE, v);
    if (st)
        return st;
    char why[200];
    if (kace_metric_check(metric, *v, why, sizeof why))
        return kace_csv_fail(ctx, csv, i, KACE_ERR_INVALID, "column '%.60s': %s", column, why);
    return KACE_OK;
}

/* A colocation's throughput: finite, > 0 (a failed run has no row). */
static kace_status throughput_cell(kace_ctx *ctx, const kace_csv *csv, size_t i, const char *column, double *v)
{
    kace_status st = kace_csv_number(ctx, csv, i, column, KACE_CSV_NONNEGATIVE, v);
    if (st)
        return st;
    if (*v <= 0 || *v > kace_throughput_max())
        return kace_csv_fail(ctx, csv, i, KACE_ERR_INVALID,
                             "column '%.60s': throughput %g is out of range (samples/s: more than 0..%g)", column, *v,
                             kace_throughput_max());
    return KACE_OK;
}

static kace_status add_value_at(kace_ctx *ctx, kace_import_batch *b, const kace_csv *csv, size_t i,
                                const char *workload, const char *metric, double v, bool embedded)
{
    kace_status st = kace_batch_add_value(ctx, b, workload, metric, v, embedded);
    if (!st) {
        b->values[b->n_values - 1].line = csv->field_line[i];
        b->values[b->n_values - 1].col = csv->field_col[i];
    }
    return st;
}

/* ---- one thing per file: repeated rows are errors ------------------------ */

static int cmp_value_ptr(const void *a, const void *b)
{
    const kace_profile_value *x = *(const kace_profile_value *const *)a, *y = *(const kace_profile_value *const *)b;
    int c = strcmp(x->workload, y->workload);
    if (!c)
        c = strcmp(x->metric, y->metric);
    return c ? c : (x->line > y->line) - (x->line < y->line);
}

/* A workload's row appears once in a profile file (embedded values of
 * colocation files repeat by design and are left out). */
static kace_status check_value_rows(kace_ctx *ctx, const kace_import_batch *b)
{
    size_t n = 0;
    const kace_profile_value **v = malloc((b->n_values ? b->n_values : 1) * sizeof *v);
    if (!v)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < b->n_values; i++)
        if (!b->values[i].embedded)
            v[n++] = &b->values[i];
    qsort(v, n, sizeof *v, cmp_value_ptr);
    const kace_profile_value *first = NULL, *again = NULL;
    for (size_t i = 1; i < n; i++)
        if (strcmp(v[i]->workload, v[i - 1]->workload) == 0 && strcmp(v[i]->metric, v[i - 1]->metric) == 0 &&
            (!again || v[i]->line < again->line)) {
            first = v[i - 1];
            again = v[i];
        }
    free(v);
    if (again)
        return kace_fail(ctx, KACE_ERR_PARSE,
                         "%s:%d:%d: workload '%s' has a second row here (first at line %d; one row per workload)",
                         b->origin, again->line, again->col, again->workload, first->line);
    return KACE_OK;
}

typedef struct run_ref {
    const kace_import_run *r;
    unsigned char order[KACE_MAX_K]; /* member order used for identity */
} run_ref;

static int member_order_cmp(const kace_import_run *r, int a, int b)
{
    int c = strcmp(r->workload[a], r->workload[b]);
    return c ? c : r->mps_pct[a] - r->mps_pct[b];
}

static int cmp_run_ref(const void *a, const void *b)
{
    const run_ref *x = a, *y = b;
    if (x->r->k != y->r->k)
        return x->r->k - y->r->k;
    for (int m = 0; m < x->r->k; m++) {
        int c = strcmp(x->r->workload[x->order[m]], y->r->workload[y->order[m]]);
        if (!c)
            c = x->r->mps_pct[x->order[m]] - y->r->mps_pct[y->order[m]];
        if (c)
            return c;
    }
    return (x->r->line > y->r->line) - (x->r->line < y->r->line);
}

/* A colocation appears once per file. In a colocation file members are
 * unordered (A+B is B+A); in a raw campaign the row's order is the split's
 * (LS, BE) roles, so only the same ordered row is a repeat. */
static kace_status check_run_rows(kace_ctx *ctx, const kace_import_batch *b, bool unordered)
{
    if (b->n_runs < 2)
        return KACE_OK;
    run_ref *v = malloc(b->n_runs * sizeof *v);
    if (!v)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < b->n_runs; i++) {
        const kace_import_run *r = &b->runs[i];
        v[i].r = r;
        for (int m = 0; m < r->k; m++) {
            int j = m;
            v[i].order[j] = (unsigned char)m;
            while (unordered && j > 0 && member_order_cmp(r, v[i].order[j - 1], v[i].order[j]) > 0) {
                unsigned char t = v[i].order[j - 1];
                v[i].order[j - 1] = v[i].order[j];
                v[i].order[j] = t;
                j--;
            }
        }
    }
    qsort(v, b->n_runs, sizeof *v, cmp_run_ref);
    const kace_import_run *first = NULL, *again = NULL;
    for (size_t i = 1; i < b->n_runs; i++) {
        const run_ref *x = &v[i - 1], *y = &v[i];
        bool same = x->r->k == y->r->k;
        for (int m = 0; same && m < x->r->k; m++)
            same = strcmp(x->r->workload[x->order[m]], y->r->workload[y->order[m]]) == 0 &&
                   x->r->mps_pct[x->order[m]] == y->r->mps_pct[y->order[m]];
        if (same && y->r->line != x->r->line && (!again || y->r->line < again->line)) {
            first = x->r;
            again = y->r;
        }
    }
    free(v);
    if (again) {
        char members[KACE_MAX_K * (KACE_NAME_MAX + 8)];
        size_t at = 0;
        for (int m = 0; m < again->k && at < sizeof members; m++)
            at += (size_t)snprintf(members + at, sizeof members - at, "%s%s@%d", m ? " + " : "", again->workload[m],
                                   again->mps_pct[m]);
        return kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:%d: colocation %s is measured again here (first at line %d)",
                         b->origin, again->line, again->col[0], members, first->line);
    }
    return KACE_OK;
}

static int split_cmp_names(const kace_import_split *s, const char **lo, const char **hi)
{
    bool swap = strcmp(s->workload1, s->workload2) > 0;
    *lo = swap ? s->workload2 : s->workload1;
    *hi = swap ? s->workload1 : s->workload2;
    return 0;
}

static int cmp_split_ptr(const void *a, const void *b)
{
    const kace_import_split *x = *(const kace_import_split *const *)a, *y = *(const kace_import_split *const *)b;
    if (x->n_occur != y->n_occur)
        return x->n_occur - y->n_occur;
    if (x->seed != y->seed)
        return x->seed < y->seed ? -1 : 1;
    const char *xl, *xh, *yl, *yh;
    split_cmp_names(x, &xl, &xh);
    split_cmp_names(y, &yl, &yh);
    int c = strcmp(xl, yl);
    if (!c)
        c = strcmp(xh, yh);
    return c ? c : (x->line > y->line) - (x->line < y->line);
}

/* A pair is listed once per (n_occur, seed). */
static kace_status check_split_rows(kace_ctx *ctx, const kace_import_batch *b)
{
    if (b->n_splits < 2)
        return KACE_OK;
    const kace_import_split **v = malloc(b->n_splits * sizeof *v);
    if (!v)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < b->n_splits; i++)
        v[i] = &b->splits[i];
    qsort(v, b->n_splits, sizeof *v, cmp_split_ptr);
    const kace_import_split *first = NULL, *again = NULL;
    for (size_t i = 1; i < b->n_splits; i++) {
        const char *al, *ah, *bl, *bh;
        split_cmp_names(v[i - 1], &al, &ah);
        split_cmp_names(v[i], &bl, &bh);
        if (v[i]->n_occur == v[i - 1]->n_occur && v[i]->seed == v[i - 1]->seed && strcmp(al, bl) == 0 &&
            strcmp(ah, bh) == 0 && (!again || v[i]->line < again->line)) {
            first = v[i - 1];
            again = v[i];
        }
    }
    free(v);
    if (again)
        return kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:1: pair (%s, %s) of n_occur %d seed %d is listed again here "
                         "(first at line %d)",
                         b->origin, again->line, again->workload1, again->workload2, again->n_occur, again->seed,
                         first->line);
    return KACE_OK;
}

/* ---- profile files: one workload per row ------------------------------- */

static kace_status parse_profile_rows(kace_ctx *ctx, kace_csv *csv, const kace_csv *hdr, int name_col,
                                      const char *metric_prefix, kace_import_batch *b)
{
    kace_status st;
    bool has = false;
    size_t width = hdr->n_fields;
    for (size_t i = 0; i < width; i++) {
        char metric[KACE_METRIC_NAME_MAX];
        if ((int)i != name_col && ((st = kace_csv_name(ctx, hdr, i, "header", metric, sizeof metric)) ||
                                   (st = check_metric_column(ctx, hdr, i, hdr->fields[i]))))
            return st;
    }
    while ((st = kace_csv_next(ctx, csv, &has)) == KACE_OK && has) {
        if ((st = check_width(ctx, csv, width)))
            return st;
        char workload[KACE_NAME_MAX];
        if ((st = kace_csv_workload_name(ctx, csv, (size_t)name_col, hdr->fields[name_col], workload, sizeof workload)))
            return st;
        for (size_t i = 0; i < width; i++) {
            if ((int)i == name_col)
                continue;
            double v;
            char metric[KACE_METRIC_NAME_MAX];
            snprintf(metric, sizeof metric, "%s%s", metric_prefix, canonical_metric(hdr->fields[i]));
            if ((st = metric_cell(ctx, csv, i, hdr->fields[i], metric, &v)) ||
                (st = add_value_at(ctx, b, csv, i, workload, metric, v, false)))
                return st;
        }
    }
    return st;
}

/* ---- colocation files of the w1_..wk_ scheme -------------------------- */

/* Splits "w<i><rest>" into i and rest ("w2_Threads" -> 2, "Threads";
 * "w1sm%" -> 1, "sm%"). Returns 0 when the column is not of that form. */
static int member_column(const char *col, const char **rest)
{
    if (col[0] != 'w' || !isdigit((unsigned char)col[1]))
        return 0;
    char *end = NULL;
    long i = strtol(col + 1, &end, 10);
    if (i < 1 || i > KACE_MAX_K)
        return 0;
    if (*end == '_')
        end++;
    *rest = end;
    return (int)i;
}

static int count_members(const kace_csv *h)
{
    int k = 0;
    for (int i = 1; i <= KACE_MAX_K; i++) {
        char name[32];
        snprintf(name, sizeof name, "workload%d", i);
        if (header_find(h, name) < 0)
            break;
        k = i;
    }
    return k;
}

/* Reads up to max_rows rows (the header is checked each time, which is
 * cheap); *more: rows may follow. */
static kace_status parse_colocations(kace_ctx *ctx, kace_csv *csv, const kace_csv *hdr, kace_import_batch *b,
                                     size_t max_rows, bool *more)
{
    *more = false;
    int k = count_members(hdr);
    int name_col[KACE_MAX_K], thr_col[KACE_MAX_K], pct_col[KACE_MAX_K];
    for (int i = 0; i < k; i++) {
        char name[48];
        snprintf(name, sizeof name, "workload%d", i + 1);
        name_col[i] = header_find(hdr, name);
        snprintf(name, sizeof name, "w%dthroughput", i + 1);
        thr_col[i] = header_find(hdr, name);
        if (thr_col[i] < 0)
            return kace_csv_fail(ctx, hdr, 0, KACE_ERR_PARSE, "missing column '%s' (a colocation file of %d workloads "
                                 "needs workload1..workload%d and w1throughput..w%dthroughput)", name, k, k, k);
        snprintf(name, sizeof name, "w%dmps_pct", i + 1);
        pct_col[i] = header_find(hdr, name);
    }
    size_t width = hdr->n_fields;
    kace_status st;
    /* Every column is a member's name, id, throughput, MPS % or metric. */
    for (size_t c = 0; c < width; c++) {
        const char *col = hdr->fields[c], *rest = NULL;
        char *end = NULL;
        long i = 0;
        if (strncmp(col, "workload", 8) == 0 || strncmp(col, "idx", 3) == 0) {
            const char *digits = col + (col[0] == 'w' ? 8 : 3);
            i = strtol(digits, &end, 10);
            if (end != digits && !*end && i >= 1 && i <= k)
                continue;
            return kace_csv_fail(ctx, hdr, c, KACE_ERR_PARSE, "unknown column '%.60s' (this file has workload1..%d)",
                                 col, k);
        }
        int m = member_column(col, &rest);
        if (m >= 1 && m <= k && *rest) {
            if ((int)c == thr_col[m - 1] || (int)c == pct_col[m - 1])
                continue;
            if ((st = check_metric_column(ctx, hdr, c, rest)))
                return st;
            continue;
        }
        if (m > k)
            return kace_csv_fail(ctx, hdr, c, KACE_ERR_PARSE,
                                 "column '%.60s' is about member %d, but this file has workload1..%d", col, m, k);
        return kace_csv_fail(ctx, hdr, c, KACE_ERR_PARSE,
                             "unknown column '%.60s' (expected workload<i>, idx<i>, w<i>throughput, w<i>mps_pct or "
                             "w<i>_<metric>)",
                             col);
    }
    bool has = false;
    size_t rows = 0;
    while (rows < max_rows && (st = kace_csv_next(ctx, csv, &has)) == KACE_OK && has) {
        rows++;
        if ((st = check_width(ctx, csv, width)))
            return st;
        kace_import_run run;
        memset(&run, 0, sizeof run);
        run.k = k;
        run.line = csv->record_line;
        run.status = KACE_RUN_OK;
        for (int i = 0; i < k; i++) {
            if ((st = kace_csv_workload_name(ctx, csv, (size_t)name_col[i], hdr->fields[name_col[i]], run.workload[i],
                                             KACE_NAME_MAX)))
                return st;
            run.name_col[i] = csv->field_col[name_col[i]];
            if ((st = throughput_cell(ctx, csv, (size_t)thr_col[i], hdr->fields[thr_col[i]], &run.throughput[i])))
                return st;
            run.col[i] = csv->field_col[thr_col[i]];
            run.mps_pct[i] = 100;
            if (pct_col[i] >= 0) {
                long p;
                if ((st = kace_csv_int(ctx, csv, (size_t)pct_col[i], hdr->fields[pct_col[i]], 1, 100, &p)))
                    return st;
                run.mps_pct[i] = (int)p;
            }
        }
        /* The other w<i> columns are the members' own profile metrics. */
        for (size_t c = 0; c < width; c++) {
            const char *rest = NULL;
            int m = member_column(hdr->fields[c], &rest);
            if (m < 1 || m > k || (int)c == thr_col[m - 1] || (int)c == pct_col[m - 1] || !*rest)
                continue;
            double v;
            if ((st = metric_cell(ctx, csv, c, hdr->fields[c], canonical_metric(rest), &v)) ||
                (st = add_value_at(ctx, b, csv, c, run.workload[m - 1], canonical_metric(rest), v, true)))
                return st;
        }
        if ((st = kace_batch_add_run(ctx, b, &run)))
            return st;
    }
    *more = !st && rows == max_rows;
    return st;
}

/* ---- raw campaign files: one column per MPS split ---------------------- */

/* Parses "(a, b[, c])" into up to max numbers or None (NaN). Returns the
 * count, or -1 when malformed. */
static int parse_tuple(const char *s, double *out, int max, bool allow_none)
{
    while (*s == ' ')
        s++;
    if (*s++ != '(')
        return -1;
    int n = 0;
    for (;;) {
        while (*s == ' ')
            s++;
        if (n == max)
            return -1;
        if (allow_none && strncmp(s, "None", 4) == 0) {
            out[n++] = NAN;
            s += 4;
        } else {
            char *end = NULL;
            double v = strtod(s, &end);
            if (end == s || !isfinite(v) || v < 0)
                return -1;
            out[n++] = v;
            s = end;
        }
        while (*s == ' ')
            s++;
        if (*s == ',') {
            s++;
            continue;
        }
        if (*s == ')' && s[1] == '\0')
            return n;
        return -1;
    }
}

/* Header cells: "(LS10, BE90)" or "(w1_10, w2_10, w3_80)". */
static int parse_split_header(const char *s, int *pct, int k)
{
    int n = 0;
    const char *p = s;
    while (*p == ' ')
        p++;
    if (*p++ != '(')
        return -1;
    while (n < k) {
        while (*p == ' ')
            p++;
        if (strncmp(p, "LS", 2) == 0 || strncmp(p, "BE", 2) == 0) {
            p += 2;
        } else if (p[0] == 'w' && isdigit((unsigned char)p[1])) {
            p++;
            while (isdigit((unsigned char)*p))
                p++;
            if (*p++ != '_')
                return -1;
        } else {
            return -1;
        }
        char *end = NULL;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 100)
            return -1;
        pct[n++] = (int)v;
        p = end;
        while (*p == ' ')
            p++;
        if (*p == ',')
            p++;
    }
    return (*p == ')' && p[1] == '\0') ? n : -1;
}

/* Reads up to max_rows rows, as parse_colocations. */
static kace_status parse_raw_campaign(kace_ctx *ctx, kace_csv *csv, const kace_csv *hdr, kace_import_batch *b,
                                      size_t max_rows, bool *more)
{
    *more = false;
    int k = count_members(hdr);
    size_t width = hdr->n_fields;
    int (*pcts)[KACE_MAX_K] = calloc(width, sizeof *pcts);
    if (!pcts)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    kace_status st = KACE_OK;
    for (size_t c = (size_t)k; c < width; c++)
        if (parse_split_header(hdr->fields[c], pcts[c], k) != k) {
            st = kace_csv_fail(ctx, hdr, c, KACE_ERR_PARSE,
                               "column header '%.60s' is not an MPS split of %d workloads (expected e.g. \"(LS10, "
                               "BE90)\" or \"(w1_10, w2_20, w3_70)\")",
                               hdr->fields[c], k);
            goto done;
        }
    bool has = false;
    size_t rows = 0;
    while (rows < max_rows && (st = kace_csv_next(ctx, csv, &has)) == KACE_OK && has) {
        rows++;
        if ((st = check_width(ctx, csv, width)))
            goto done;
        kace_import_run run;
        memset(&run, 0, sizeof run);
        run.k = k;
        run.line = csv->record_line;
        for (int i = 0; i < k; i++) {
            char col[32];
            snprintf(col, sizeof col, "workload%d", i + 1);
            if ((st = kace_csv_workload_name(ctx, csv, (size_t)i, col, run.workload[i], KACE_NAME_MAX)))
                goto done;
            run.name_col[i] = csv->field_col[i];
        }
        for (size_t c = (size_t)k; c < width; c++) {
            double v[KACE_MAX_K];
            if (parse_tuple(csv->fields[c], v, k, true) != k) {
                st = kace_csv_fail(ctx, csv, c, KACE_ERR_PARSE,
                                   "cell '%.60s' is not a tuple of %d throughputs (expected \"(x, y)\" with numbers >= 0 "
                                   "or None)",
                                   csv->fields[c], k);
                goto done;
            }
            int measured = 0;
            for (int i = 0; i < k; i++) {
                run.col[i] = csv->field_col[c];
                if (!isnan(v[i]) && (v[i] <= 0 || v[i] > kace_throughput_max())) {
                    st = kace_csv_fail(ctx, csv, c, KACE_ERR_INVALID,
                                       "cell '%.60s': throughput %g of workload%d is out of range (samples/s: more than "
                                       "0..%g; None for a run that failed)",
                                       csv->fields[c], v[i], i + 1, kace_throughput_max());
                    goto done;
                }
                run.throughput[i] = v[i];
                run.mps_pct[i] = pcts[c][i];
                measured += !isnan(v[i]);
            }
            if (measured == 0)
                continue; /* never run (or lost): nothing to record */
            run.status = measured == k ? KACE_RUN_OK : KACE_RUN_FAILED;
            if ((st = kace_batch_add_run(ctx, b, &run)))
                goto done;
        }
    }
    *more = !st && rows == max_rows;
done:
    free(pcts);
    return st;
}

/* ---- exclusive throughput by MPS percentage ---------------------------- */

static kace_status parse_exclusive_by_mps(kace_ctx *ctx, kace_csv *csv, const kace_csv *hdr, kace_import_batch *b)
{
    size_t width = hdr->n_fields;
    for (size_t c = 1; c < width; c++) {
        char *end = NULL;
        long p = strtol(hdr->fields[c], &end, 10);
        if (end == hdr->fields[c] || *end || p < 10 || p > 100 || p % 10)
            return kace_csv_fail(ctx, hdr, c, KACE_ERR_PARSE,
                                 "column header '%.40s' is not an MPS percentage (expected 10, 20, ..., 100)",
                                 hdr->fields[c]);
    }
    kace_status st;
    bool has = false;
    while ((st = kace_csv_next(ctx, csv, &has)) == KACE_OK && has) {
        /* The reference file leaves trailing cells out where nothing was
         * measured (pandas reads them as missing); a row cut off at the end
         * of the file is still an error. */
        if (csv->n_fields > width || csv->n_fields < 2 || !csv->record_terminated)
            if ((st = check_width(ctx, csv, width)))
                return st;
        char workload[KACE_NAME_MAX];
        if ((st = kace_csv_workload_name(ctx, csv, 0, "workload", workload, sizeof workload)))
            return st;
        for (size_t c = 1; c < csv->n_fields; c++) {
            double v;
            char metric[KACE_METRIC_NAME_MAX];
            /* From the number, so that a header "050" is exclusive_mps50. */
            snprintf(metric, sizeof metric, "exclusive_mps%ld", strtol(hdr->fields[c], NULL, 10));
            if ((st = metric_cell(ctx, csv, c, hdr->fields[c], metric, &v)) ||
                (st = add_value_at(ctx, b, csv, c, workload, metric, v, false)))
                return st;
        }
    }
    return st;
}

/* ---- published splits --------------------------------------------------- */

static kace_status parse_splits(kace_ctx *ctx, kace_csv *csv, const kace_csv *hdr, kace_import_batch *b)
{
    static const char *const cols[] = {"n_occur", "seed", "set", "workload1", "workload2", "paper_fit"};
    int at[6];
    for (int i = 0; i < 6; i++)
        if ((at[i] = header_find(hdr, cols[i])) < 0)
            return kace_csv_fail(ctx, hdr, 0, KACE_ERR_PARSE, "missing column '%s' (a splits file needs "
                                 "n_occur,seed,set,workload1,workload2,paper_fit)", cols[i]);
    if (hdr->n_fields > 6)
        for (size_t c = 0; c < hdr->n_fields; c++) {
            bool known = false;
            for (int i = 0; i < 6; i++)
                known |= at[i] == (int)c;
            if (!known)
                return kace_csv_fail(ctx, hdr, c, KACE_ERR_PARSE,
                                     "unknown column '%.60s' (a splits file has n_occur,seed,set,workload1,workload2,"
                                     "paper_fit)",
                                     hdr->fields[c]);
        }
    kace_status st;
    bool has = false;
    while ((st = kace_csv_next(ctx, csv, &has)) == KACE_OK && has) {
        if ((st = check_width(ctx, csv, hdr->n_fields)))
            return st;
        kace_import_split s;
        memset(&s, 0, sizeof s);
        s.line = csv->record_line;
        long v;
        if ((st = kace_csv_int(ctx, csv, (size_t)at[0], "n_occur", 1, 1000, &v)))
            return st;
        s.n_occur = (int)v;
        if ((st = kace_csv_int(ctx, csv, (size_t)at[1], "seed", 0, 1000000000, &v)))
            return st;
        s.seed = (int)v;
        const char *set = csv->fields[at[2]];
        if (strcmp(set, "train") == 0)
            s.train = true;
        else if (strcmp(set, "test") != 0)
            return kace_csv_fail(ctx, csv, (size_t)at[2], KACE_ERR_PARSE,
                                 "column 'set': '%.40s' (expected train or test)", set);
        if ((st = kace_csv_workload_name(ctx, csv, (size_t)at[3], "workload1", s.workload1, KACE_NAME_MAX)) ||
            (st = kace_csv_workload_name(ctx, csv, (size_t)at[4], "workload2", s.workload2, KACE_NAME_MAX)))
            return st;
        /* Test rows leave paper_fit empty. */
        v = 0;
        if ((s.train || csv->fields[at[5]][0]) && (st = kace_csv_int(ctx, csv, (size_t)at[5], "paper_fit", 0, 1, &v)))
            return st;
        s.paper_fit = v == 1;
        if ((st = kace_batch_add_split(ctx, b, &s)))
            return st;
    }
    return st;
}

/* ---- dispatch ----------------------------------------------------------- */

/* "10", "20", ..., "100": a column of an exclusive-by-MPS file. */
static bool is_mps_share(const char *f)
{
    char *end = NULL;
    long p = strtol(f, &end, 10);
    return end != f && *end == '\0' && isdigit((unsigned char)f[0]) && p >= 10 && p <= 100 && p % 10 == 0;
}

static kace_file_kind detect(const kace_csv *h)
{
    if (header_find(h, "Metric Name") >= 0 && header_find(h, "Metric Value") >= 0)
        return KACE_FILE_NCU;
    if (header_find(h, "n_occur") >= 0 && header_find(h, "paper_fit") >= 0)
        return KACE_FILE_SPLITS;
    if (header_find(h, "Type") >= 0 && header_find(h, "Exclusive100") >= 0)
        return KACE_FILE_SYSTEM_PROFILE;
    if (kace_nvml_csv_detect(h))
        return KACE_FILE_NVML_SAMPLES;
    if (header_find(h, "Type") >= 0 && header_find(h, "Threads") >= 0)
        return KACE_FILE_KERNEL_PROFILE;
    if (h->n_fields >= 2 && strcmp(h->fields[0], "workload") == 0 && is_mps_share(h->fields[1]))
        return KACE_FILE_EXCLUSIVE_BY_MPS; /* 10, 20, ..., 100, or the shares measured (kace's device campaign) */
    if (h->n_fields >= 5 && strcmp(h->fields[0], "run") == 0 && header_find(h, "run_status") >= 0 &&
        header_find(h, "repetition") >= 0)
        return KACE_FILE_CAMPAIGN_RECORD;
    if (h->n_fields >= 6 && strcmp(h->fields[0], "colocation") == 0 && header_find(h, "repetitions") >= 0 &&
        header_find(h, "cv") >= 0)
        return KACE_FILE_CAMPAIGN_RECORD;
    /* The device campaign's comparison with Nsight Compute (kace export --dataset: ncu/). */
    if (h->n_fields >= 5 && strcmp(h->fields[0], "workload") == 0 && header_find(h, "metric") >= 0 &&
        header_find(h, "ncu") >= 0 && header_find(h, "rel_diff") >= 0)
        return KACE_FILE_CAMPAIGN_RECORD;
    if (h->n_fields >= 3 && strcmp(h->fields[0], "workload") == 0 && header_find(h, "kace_profile_s") >= 0 &&
        header_find(h, "ncu_s") >= 0)
        return KACE_FILE_CAMPAIGN_RECORD;
    int k = count_members(h);
    if (k >= 1 && header_find(h, "w1throughput") >= 0)
        return KACE_FILE_COLOCATIONS;
    if (k >= 2 && h->n_fields > (size_t)k && h->fields[k][0] == '(')
        return KACE_FILE_RAW_CAMPAIGN;
    return KACE_FILE_UNKNOWN;
}

static void set_name_from_origin(const char *origin, char *set, size_t size)
{
    const char *base = strrchr(origin, '/');
    base = base ? base + 1 : origin;
    snprintf(set, size, "%.*s", (int)size - 1, base);
    char *dot = strrchr(set, '.');
    if (dot && dot != set)
        *dot = '\0';
}

/* ncu may print "==PROF==" lines and the program's own output before its
 * CSV: when a line holding the "Metric Name" column comes later in the
 * file, the header starts there. */
static size_t skip_ncu_preamble(const char *data, size_t len)
{
    size_t pos = 0;
    while (pos < len) {
        const char *nl = memchr(data + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - data) : len;
        for (size_t i = pos; i + 13 <= end; i++)
            if (memcmp(data + i, "\"Metric Name\"", 13) == 0)
                return pos;
        if (!nl)
            break;
        pos = end + 1;
    }
    return 0;
}

/* ---- reading a file in batches ------------------------------------------- */

struct kace_import_reader {
    const char *data; /* the file's bytes: mapped, or the caller's buffer */
    size_t len;
    bool mapped;
    size_t dropped;   /* bytes of the map before this were handed back (madvise) */
    kace_csv hdr, csv;
    kace_import_batch head; /* kind, origin and set of every batch */
    char file_workload[KACE_NAME_MAX]; /* a file of one workload (ncu export, nvidia-smi samples): whose */
    bool started, done;
    size_t n_rows;    /* values, runs and splits read so far */
};

/* Whether a kind's rows come in batches: the kinds whose files grow with
 * the measurements (colocations, raw campaigns). The others are one row per
 * workload or pair and come whole, with every check of a whole file. */
static bool in_batches(kace_file_kind kind)
{
    return kind == KACE_FILE_COLOCATIONS || kind == KACE_FILE_RAW_CAMPAIGN;
}

static void batch_head(kace_import_batch *b, const kace_import_reader *r)
{
    b->kind = r->head.kind;
    memcpy(b->origin, r->head.origin, sizeof b->origin);
    memcpy(b->set, r->head.set, sizeof b->set);
}

/* Reads the header and what kind of file it is. */
static kace_status reader_start(kace_ctx *ctx, kace_import_reader *r, const char *origin,
                                const kace_import_options *opt)
{
    snprintf(r->head.origin, sizeof r->head.origin, "%s", origin ? origin : "<input>");
    set_name_from_origin(r->head.origin, r->head.set, sizeof r->head.set);
    if (opt && opt->workload)
        snprintf(r->file_workload, sizeof r->file_workload, "%.*s", KACE_NAME_MAX - 1, opt->workload);
    else
        snprintf(r->file_workload, sizeof r->file_workload, "%.*s", KACE_NAME_MAX - 1, r->head.set);
    kace_csv_init(&r->hdr, r->data, r->len, r->head.origin);
    kace_csv_init(&r->csv, r->data, r->len, r->head.origin);
    r->started = true;
    kace_status st;
    bool has = false;
    /* A first line that is not even CSV (ncu's '==PROF== Profiling "k" - 0:'
     * lines quote mid-field) may still be the preamble of an ncu export. */
    kace_status first = kace_csv_next(ctx, &r->hdr, &has);
    size_t skip = first ? skip_ncu_preamble(r->data, r->len) : 0;
    if (first && !skip)
        return first;
    if (!first && !has)
        return kace_fail(ctx, KACE_ERR_PARSE, "%s:1:1: empty file (expected a CSV header line)", r->head.origin);
    r->head.kind = first ? KACE_FILE_UNKNOWN : detect(&r->hdr);
    /* Only a file whose first line is no header is searched for an ncu
     * header further down (the search reads the whole file). */
    if (!first && r->head.kind == KACE_FILE_UNKNOWN)
        skip = skip_ncu_preamble(r->data, r->len);
    if (skip) {
        kace_csv_release(&r->hdr);
        kace_csv_init(&r->hdr, r->data, r->len, r->head.origin);
        r->hdr.pos = skip;
        for (size_t i = 0; i < skip; i++)
            r->hdr.line += r->data[i] == '\n';
        if ((st = kace_csv_next(ctx, &r->hdr, &has)))
            return st;
        r->head.kind = detect(&r->hdr);
    }
    if (r->head.kind == KACE_FILE_UNKNOWN)
        return kace_csv_fail(ctx, &r->hdr, 0, KACE_ERR_PARSE,
                             "unrecognized header starting '%.60s' (expected a kernel or system profile, "
                             "exclusive_by_mps_pct, a colocation file with workload1..K and w1throughput.., a raw "
                             "campaign, splits, a campaign's runs.csv, spread.csv or ncu comparison, or an ncu --csv "
                             "export)",
                             r->hdr.fields[0]);
    if (r->head.kind != KACE_FILE_NCU && (st = check_header_unique(ctx, &r->hdr)))
        return st;
    /* The data reader continues right after the header. */
    r->csv.pos = r->hdr.pos;
    r->csv.line = r->hdr.line;
    return KACE_OK;
}

/* Parses the next rows into b: up to max_rows records of a kind read in
 * batches, the whole file otherwise. Repeated rows are checked within b. */
static kace_status reader_rows(kace_ctx *ctx, kace_import_reader *r, size_t max_rows, kace_import_batch *b)
{
    kace_status st = KACE_OK;
    bool more = false;
    switch (r->head.kind) {
    case KACE_FILE_KERNEL_PROFILE:
    case KACE_FILE_SYSTEM_PROFILE:
        st = parse_profile_rows(ctx, &r->csv, &r->hdr, header_find(&r->hdr, "Type"), "", b);
        break;
    case KACE_FILE_EXCLUSIVE_BY_MPS:
        st = parse_exclusive_by_mps(ctx, &r->csv, &r->hdr, b);
        break;
    case KACE_FILE_COLOCATIONS:
        st = parse_colocations(ctx, &r->csv, &r->hdr, b, max_rows, &more);
        break;
    case KACE_FILE_RAW_CAMPAIGN:
        st = parse_raw_campaign(ctx, &r->csv, &r->hdr, b, max_rows, &more);
        break;
    case KACE_FILE_SPLITS:
        st = parse_splits(ctx, &r->csv, &r->hdr, b);
        break;
    case KACE_FILE_NCU:
        st = kace_ncu_parse_buffer(ctx, r->data, r->len, r->head.origin, r->file_workload, b);
        break;
    case KACE_FILE_NVML_SAMPLES:
        st = kace_nvml_csv_parse_buffer(ctx, r->data, r->len, r->head.origin, r->file_workload, b);
        break;
    case KACE_FILE_CAMPAIGN_RECORD: /* the rows' means are in the colocation files */
    case KACE_FILE_UNKNOWN:
        break;
    }
    r->done = !more;
    if (!st && b->kind != KACE_FILE_NCU)
        st = check_value_rows(ctx, b);
    if (!st)
        st = check_run_rows(ctx, b, b->kind == KACE_FILE_COLOCATIONS);
    if (!st)
        st = check_split_rows(ctx, b);
    if (st)
        return st;
    r->n_rows += b->n_values + b->n_runs + b->n_splits;
    if (r->done && r->n_rows == 0 && b->kind != KACE_FILE_CAMPAIGN_RECORD)
        return kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:1: no data rows after the header (expected at least one row)",
                         b->origin, r->hdr.line);
    /* The bytes read so far are not read again: hand their pages back, so
     * that a large file does not stay in memory as it is read. */
    if (r->mapped && !r->done) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        size_t upto = r->csv.pos / page * page;
        if (upto > r->dropped) {
            madvise((char *)r->data + r->dropped, upto - r->dropped, MADV_DONTNEED);
            r->dropped = upto;
        }
    }
    return KACE_OK;
}

kace_status kace_import_reader_open(kace_ctx *ctx, const char *path, const kace_import_options *opt,
                                    kace_import_reader **out)
{
    *out = NULL;
    kace_import_reader *r = calloc(1, sizeof *r);
    if (!r)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    kace_status st = KACE_OK;
    /* O_NONBLOCK: opening a FIFO nobody writes to would wait for a writer. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat sb;
    if (fd < 0) {
        st = kace_fail(ctx, KACE_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    if (fstat(fd, &sb) != 0) {
        st = kace_fail(ctx, KACE_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = kace_fail(ctx, KACE_ERR_IO, "%s: not a regular file (%s): kace imports files it can read to their end",
                       path,
                       S_ISFIFO(sb.st_mode)   ? "a FIFO"
                       : S_ISDIR(sb.st_mode)  ? "a folder"
                       : S_ISCHR(sb.st_mode)  ? "a character device"
                       : S_ISBLK(sb.st_mode)  ? "a block device"
                       : S_ISSOCK(sb.st_mode) ? "a socket"
                                              : "not a plain file");
        goto fail;
    }
    r->len = (size_t)sb.st_size;
    r->data = "";
    if (r->len) {
        void *map = mmap(NULL, r->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            st = kace_fail(ctx, KACE_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
            goto fail;
        }
        madvise(map, r->len, MADV_SEQUENTIAL);
        r->data = map;
        r->mapped = true;
    }
    close(fd);
    fd = -1;
    if ((st = reader_start(ctx, r, path, opt)))
        goto fail;
    *out = r;
    return KACE_OK;
fail:
    if (fd >= 0)
        close(fd);
    kace_import_reader_close(&r);
    return st;
}

kace_file_kind kace_import_reader_kind(const kace_import_reader *r)
{
    return r->head.kind;
}

bool kace_import_reader_in_batches(const kace_import_reader *r)
{
    return in_batches(r->head.kind);
}

kace_status kace_import_reader_next(kace_ctx *ctx, kace_import_reader *r, size_t max_rows, kace_import_batch **out)
{
    *out = NULL;
    if (r->done)
        return KACE_OK;
    kace_import_batch *b = calloc(1, sizeof *b);
    if (!b)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    batch_head(b, r);
    kace_status st = reader_rows(ctx, r, max_rows ? max_rows : 1, b);
    if (st) {
        r->done = true;
        kace_import_batch_free(&b);
        return st;
    }
    *out = b;
    return KACE_OK;
}

void kace_import_reader_close(kace_import_reader **reader)
{
    if (!reader || !*reader)
        return;
    kace_import_reader *r = *reader;
    if (r->started) {
        kace_csv_release(&r->hdr);
        kace_csv_release(&r->csv);
    }
    if (r->mapped)
        munmap((void *)r->data, r->len);
    free(r);
    *reader = NULL;
}

kace_status kace_import_parse_buffer(kace_ctx *ctx, const char *data, size_t len, const char *origin,
                                     const kace_import_options *opt, kace_import_batch **out)
{
    *out = NULL;
    kace_import_reader r;
    memset(&r, 0, sizeof r);
    r.data = data;
    r.len = len;
    kace_import_batch *b = calloc(1, sizeof *b);
    if (!b)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    kace_status st = reader_start(ctx, &r, origin, opt);
    /* The whole file in one batch, so every repeat is found within it. */
    batch_head(b, &r);
    if (!st)
        st = reader_rows(ctx, &r, SIZE_MAX, b);
    kace_csv_release(&r.hdr);
    kace_csv_release(&r.csv);
    if (st) {
        kace_import_batch_free(&b);
        return st;
    }
    *out = b;
    return KACE_OK;
}

kace_status kace_import_parse_file(kace_ctx *ctx, const char *path, const kace_import_options *opt,
                                   kace_import_batch **out)
{
    *out = NULL;
    kace_import_reader *r = NULL;
    kace_status st = kace_import_reader_open(ctx, path, opt, &r);
    if (!st)
        st = kace_import_reader_next(ctx, r, SIZE_MAX, out);
    kace_import_reader_close(&r);
    return st;
}
