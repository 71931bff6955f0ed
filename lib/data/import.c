/* Importers of the reference measurement files (see include/kace/import.h). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/csv.h"
#include "batch.h"
#include "kace/import.h"

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
    case KACE_FILE_EXCLUSIVE_BY_MPS: return 1;
    case KACE_FILE_COLOCATIONS: return 2;
    case KACE_FILE_RAW_CAMPAIGN: return 3;
    case KACE_FILE_SPLITS: return 4;
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

/* ---- profile files: one workload per row ------------------------------- */

static kace_status parse_profile_rows(kace_ctx *ctx, kace_csv *csv, const kace_csv *hdr, int name_col,
                                      const char *metric_prefix, kace_import_batch *b)
{
    kace_status st;
    bool has = false;
    size_t width = hdr->n_fields;
    for (size_t i = 0; i < width; i++) {
        char metric[KACE_METRIC_NAME_MAX];
        if ((int)i != name_col && (st = kace_csv_name(ctx, hdr, i, "header", metric, sizeof metric)))
            return st;
    }
    while ((st = kace_csv_next(ctx, csv, &has)) == KACE_OK && has) {
        if ((st = check_width(ctx, csv, width)))
            return st;
        char workload[KACE_NAME_MAX];
        if ((st = kace_csv_name(ctx, csv, (size_t)name_col, hdr->fields[name_col], workload, sizeof workload)))
            return st;
        for (size_t i = 0; i < width; i++) {
            if ((int)i == name_col)
                continue;
            double v;
            if ((st = kace_csv_number(ctx, csv, i, hdr->fields[i], KACE_CSV_EMPTY_IS_MISSING | KACE_CSV_NONNEGATIVE,
                                      &v)))
                return st;
            char metric[KACE_METRIC_NAME_MAX];
            snprintf(metric, sizeof metric, "%s%s", metric_prefix, canonical_metric(hdr->fields[i]));
            if ((st = kace_batch_add_value(ctx, b, workload, metric, v, false)))
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

static kace_status parse_colocations(kace_ctx *ctx, kace_csv *csv, const kace_csv *hdr, kace_import_batch *b)
{
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
    bool has = false;
    while ((st = kace_csv_next(ctx, csv, &has)) == KACE_OK && has) {
        if ((st = check_width(ctx, csv, width)))
            return st;
        kace_import_run run;
        memset(&run, 0, sizeof run);
        run.k = k;
        run.line = csv->record_line;
        run.status = KACE_RUN_OK;
        for (int i = 0; i < k; i++) {
            if ((st = kace_csv_name(ctx, csv, (size_t)name_col[i], hdr->fields[name_col[i]], run.workload[i],
                                    KACE_NAME_MAX)))
                return st;
            if ((st = kace_csv_number(ctx, csv, (size_t)thr_col[i], hdr->fields[thr_col[i]], KACE_CSV_NONNEGATIVE,
                                      &run.throughput[i])))
                return st;
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
            if ((st = kace_csv_number(ctx, csv, c, hdr->fields[c], KACE_CSV_EMPTY_IS_MISSING | KACE_CSV_NONNEGATIVE,
                                      &v)))
                return st;
            if ((st = kace_batch_add_value(ctx, b, run.workload[m - 1], canonical_metric(rest), v, true)))
                return st;
        }
        if ((st = kace_batch_add_run(ctx, b, &run)))
            return st;
    }
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

static kace_status parse_raw_campaign(kace_ctx *ctx, kace_csv *csv, const kace_csv *hdr, kace_import_batch *b)
{
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
    while ((st = kace_csv_next(ctx, csv, &has)) == KACE_OK && has) {
        if ((st = check_width(ctx, csv, width)))
            goto done;
        kace_import_run run;
        memset(&run, 0, sizeof run);
        run.k = k;
        run.line = csv->record_line;
        for (int i = 0; i < k; i++) {
            char col[32];
            snprintf(col, sizeof col, "workload%d", i + 1);
            if ((st = kace_csv_name(ctx, csv, (size_t)i, col, run.workload[i], KACE_NAME_MAX)))
                goto done;
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
        if ((st = kace_csv_name(ctx, csv, 0, "workload", workload, sizeof workload)))
            return st;
        for (size_t c = 1; c < csv->n_fields; c++) {
            double v;
            if ((st = kace_csv_number(ctx, csv, c, hdr->fields[c], KACE_CSV_EMPTY_IS_MISSING | KACE_CSV_NONNEGATIVE,
                                      &v)))
                return st;
            char metric[KACE_METRIC_NAME_MAX];
            snprintf(metric, sizeof metric, "exclusive_mps%s", hdr->fields[c]);
            if ((st = kace_batch_add_value(ctx, b, workload, metric, v, false)))
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
        if ((st = kace_csv_name(ctx, csv, (size_t)at[3], "workload1", s.workload1, KACE_NAME_MAX)) ||
            (st = kace_csv_name(ctx, csv, (size_t)at[4], "workload2", s.workload2, KACE_NAME_MAX)))
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

static kace_file_kind detect(const kace_csv *h)
{
    if (header_find(h, "Metric Name") >= 0 && header_find(h, "Metric Value") >= 0)
        return KACE_FILE_NCU;
    if (header_find(h, "n_occur") >= 0 && header_find(h, "paper_fit") >= 0)
        return KACE_FILE_SPLITS;
    if (header_find(h, "Type") >= 0 && header_find(h, "Exclusive100") >= 0)
        return KACE_FILE_SYSTEM_PROFILE;
    if (header_find(h, "Type") >= 0 && header_find(h, "Threads") >= 0)
        return KACE_FILE_KERNEL_PROFILE;
    if (h->n_fields >= 2 && strcmp(h->fields[0], "workload") == 0 && strcmp(h->fields[1], "10") == 0)
        return KACE_FILE_EXCLUSIVE_BY_MPS;
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

kace_status kace_import_parse_buffer(kace_ctx *ctx, const char *data, size_t len, const char *origin,
                                     const kace_import_options *opt, kace_import_batch **out)
{
    *out = NULL;
    kace_import_batch *b = calloc(1, sizeof *b);
    if (!b)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    snprintf(b->origin, sizeof b->origin, "%s", origin ? origin : "<input>");
    set_name_from_origin(b->origin, b->set, sizeof b->set);

    kace_csv hdr, csv;
    kace_csv_init(&hdr, data, len, b->origin);
    kace_csv_init(&csv, data, len, b->origin);
    kace_status st;
    bool has = false;
    size_t skip = skip_ncu_preamble(data, len);
    if (skip) {
        hdr.pos = skip;
        for (size_t i = 0; i < skip; i++)
            hdr.line += data[i] == '\n';
    }
    if ((st = kace_csv_next(ctx, &hdr, &has)))
        goto fail;
    if (!has) {
        st = kace_fail(ctx, KACE_ERR_PARSE, "%s:1:1: empty file (expected a CSV header line)", b->origin);
        goto fail;
    }
    b->kind = detect(&hdr);
    if (b->kind == KACE_FILE_UNKNOWN) {
        st = kace_csv_fail(ctx, &hdr, 0, KACE_ERR_PARSE,
                           "unrecognized header starting '%.60s' (expected a kernel or system profile, exclusive_by_mps_pct, "
                           "a colocation file with workload1..K and w1throughput.., a raw campaign, splits, or an ncu "
                           "--csv export)",
                           hdr.fields[0]);
        goto fail;
    }
    /* The data reader continues right after the header. */
    csv.pos = hdr.pos;
    csv.line = hdr.line;
    switch (b->kind) {
    case KACE_FILE_KERNEL_PROFILE:
        st = parse_profile_rows(ctx, &csv, &hdr, header_find(&hdr, "Type"), "", b);
        break;
    case KACE_FILE_SYSTEM_PROFILE:
        st = parse_profile_rows(ctx, &csv, &hdr, header_find(&hdr, "Type"), "", b);
        break;
    case KACE_FILE_EXCLUSIVE_BY_MPS:
        st = parse_exclusive_by_mps(ctx, &csv, &hdr, b);
        break;
    case KACE_FILE_COLOCATIONS:
        st = parse_colocations(ctx, &csv, &hdr, b);
        break;
    case KACE_FILE_RAW_CAMPAIGN:
        st = parse_raw_campaign(ctx, &csv, &hdr, b);
        break;
    case KACE_FILE_SPLITS:
        st = parse_splits(ctx, &csv, &hdr, b);
        break;
    case KACE_FILE_NCU: {
        char workload[KACE_NAME_MAX];
        if (opt && opt->workload)
            snprintf(workload, sizeof workload, "%.*s", KACE_NAME_MAX - 1, opt->workload);
        else
            snprintf(workload, sizeof workload, "%.*s", KACE_NAME_MAX - 1, b->set);
        st = kace_ncu_parse_buffer(ctx, data, len, b->origin, workload, b);
        break;
    }
    case KACE_FILE_UNKNOWN:
        break;
    }
    if (st)
        goto fail;
    if (b->n_values == 0 && b->n_runs == 0 && b->n_splits == 0) {
        st = kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:1: no data rows after the header (expected at least one row)",
                       b->origin, hdr.line);
        goto fail;
    }
    kace_csv_release(&hdr);
    kace_csv_release(&csv);
    *out = b;
    return KACE_OK;
fail:
    kace_csv_release(&hdr);
    kace_csv_release(&csv);
    kace_import_batch_free(&b);
    return st;
}

kace_status kace_import_parse_file(kace_ctx *ctx, const char *path, const kace_import_options *opt,
                                   kace_import_batch **out)
{
    *out = NULL;
    char *data = NULL;
    size_t len = 0;
    kace_status st = kace_read_file(ctx, path, &data, &len);
    if (st)
        return st;
    st = kace_import_parse_buffer(ctx, data, len, path, opt, out);
    free(data);
    return st;
}
