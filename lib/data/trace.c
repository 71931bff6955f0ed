/* Parsers of the Alibaba GPU trace's pod list and node list (see
 * include/kace/trace.h). Columns are looked up by header name so that any
 * order works; unknown columns are refused, since a renamed column would
 * otherwise be read as missing. */
#include "kace/trace.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/csv.h"

static const char *const qos_names[KACE_N_QOS] = {"LS", "BE", "Burstable", "Guaranteed"};

const char *kace_qos_name(kace_qos q)
{
    return (unsigned)q < KACE_N_QOS ? qos_names[q] : "?";
}

/* One expected column of a header: its name, whether it must be present and
 * (after the header is read) its field index or -1. */
typedef struct column_spec {
    const char *name;
    bool required;
    int index;
} column_spec;

static kace_status read_header(kace_ctx *ctx, kace_csv *csv, column_spec *cols, size_t n_cols, const char *what)
{
    bool has = false;
    kace_status st = kace_csv_next(ctx, csv, &has);
    if (st)
        return st;
    if (!has)
        return kace_fail(ctx, KACE_ERR_PARSE, "%s:1:1: empty file (expected a %s header line)", csv->origin, what);
    for (size_t c = 0; c < n_cols; c++)
        cols[c].index = -1;
    for (size_t i = 0; i < csv->n_fields; i++) {
        const char *f = csv->fields[i];
        /* A UTF-8 byte order mark may precede the first name. */
        if (i == 0 && strncmp(f, "\xEF\xBB\xBF", 3) == 0)
            f += 3;
        size_t c = 0;
        while (c < n_cols && strcmp(cols[c].name, f) != 0)
            c++;
        if (c == n_cols)
            return kace_csv_fail(ctx, csv, i, KACE_ERR_PARSE, "unknown column '%.60s' in a %s", f, what);
        if (cols[c].index >= 0)
            return kace_csv_fail(ctx, csv, i, KACE_ERR_PARSE, "column '%s' appears twice", f);
        cols[c].index = (int)i;
    }
    for (size_t c = 0; c < n_cols; c++)
        if (cols[c].required && cols[c].index < 0)
            return kace_csv_fail(ctx, csv, csv->n_fields, KACE_ERR_PARSE, "missing column '%s' (a %s needs it)",
                                 cols[c].name, what);
    return KACE_OK;
}

/* Every record must have the header's number of fields and end in a newline
 * (a last line without one is taken as a truncated file). */
static kace_status check_record(kace_ctx *ctx, const kace_csv *csv, size_t n_header)
{
    if (csv->n_fields != n_header)
        return kace_csv_fail(ctx, csv, csv->n_fields < n_header ? csv->n_fields : n_header, KACE_ERR_PARSE,
                             "row has %zu fields, the header has %zu", csv->n_fields, n_header);
    if (!csv->record_terminated)
        return kace_csv_fail(ctx, csv, csv->n_fields - 1, KACE_ERR_PARSE,
                             "last line has no newline (truncated file?)");
    return KACE_OK;
}

static bool grow(void **items, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return true;
    size_t new_cap = *cap ? *cap * 2 : 256;
    void *p = realloc(*items, new_cap * size);
    if (!p)
        return false;
    *items = p;
    *cap = new_cap;
    return true;
}

/* The next record, checked against the header's n_header fields, with room
 * for one more of n items of size bytes in *items; *has is false at the end. */
static kace_status next_record(kace_ctx *ctx, kace_csv *csv, size_t n_header, void **items, size_t *cap, size_t n,
                               size_t size, bool *has)
{
    kace_status st = kace_csv_next(ctx, csv, has);
    if (st || !*has || (st = check_record(ctx, csv, n_header)))
        return st;
    if (!grow(items, cap, n, size))
        return kace_fail(ctx, KACE_ERR_NOMEM, "%s:%d: out of memory", csv->origin, csv->record_line);
    return KACE_OK;
}

enum { P_NAME, P_NUM_GPU, P_GPU_MILLI, P_QOS, P_CREATION, P_DELETION, P_SCHEDULED, P_CPU, P_MEM, P_SPEC, P_PHASE };

static kace_status parse_job(kace_ctx *ctx, const kace_csv *csv, const column_spec *cols, kace_trace_job *job)
{
    kace_status st;
    long num_gpu = 0, milli = 0;
    double created = 0, deleted = 0, scheduled = NAN, ignored = 0;
    memset(job, 0, sizeof *job);
    job->line = csv->record_line;
    if ((st = kace_csv_name(ctx, csv, (size_t)cols[P_NAME].index, "name", job->name, sizeof job->name)) ||
        (st = kace_csv_int(ctx, csv, (size_t)cols[P_NUM_GPU].index, "num_gpu", 0, KACE_TRACE_MAX_GPUS_PER_JOB,
                           &num_gpu)) ||
        (st = kace_csv_int(ctx, csv, (size_t)cols[P_GPU_MILLI].index, "gpu_milli", 0, 1000, &milli)) ||
        (st = kace_csv_number(ctx, csv, (size_t)cols[P_CREATION].index, "creation_time", KACE_CSV_NONNEGATIVE,
                              &created)) ||
        (st = kace_csv_number(ctx, csv, (size_t)cols[P_DELETION].index, "deletion_time", KACE_CSV_NONNEGATIVE,
                              &deleted)))
        return st;
    if (cols[P_SCHEDULED].index >= 0 &&
        (st = kace_csv_number(ctx, csv, (size_t)cols[P_SCHEDULED].index, "scheduled_time",
                              KACE_CSV_NONNEGATIVE | KACE_CSV_EMPTY_IS_MISSING, &scheduled)))
        return st;
    /* Resource columns are not used by the replay but must still be numbers. */
    static const int numeric_extra[] = {P_CPU, P_MEM};
    static const char *const extra_names[] = {"cpu_milli", "memory_mib"};
    for (size_t i = 0; i < 2; i++)
        if (cols[numeric_extra[i]].index >= 0 &&
            (st = kace_csv_number(ctx, csv, (size_t)cols[numeric_extra[i]].index, extra_names[i],
                                  KACE_CSV_NONNEGATIVE, &ignored)))
            return st;

    size_t qi = (size_t)cols[P_QOS].index;
    int q = 0;
    while (q < KACE_N_QOS && strcmp(csv->fields[qi], qos_names[q]) != 0)
        q++;
    if (q == KACE_N_QOS)
        return kace_csv_fail(ctx, csv, qi, KACE_ERR_PARSE,
                             "column 'qos': '%.40s' is not a QoS class (expected LS, BE, Burstable or Guaranteed)",
                             csv->fields[qi]);
    if (num_gpu == 0 && milli != 0)
        return kace_csv_fail(ctx, csv, (size_t)cols[P_GPU_MILLI].index, KACE_ERR_INVALID,
                             "column 'gpu_milli': %ld for a pod with num_gpu 0 (expected 0)", milli);
    if (num_gpu >= 1 && milli == 0)
        return kace_csv_fail(ctx, csv, (size_t)cols[P_GPU_MILLI].index, KACE_ERR_INVALID,
                             "column 'gpu_milli': 0 for a GPU pod (expected 1..1000)");
    if (num_gpu > 1 && milli != 1000)
        return kace_csv_fail(ctx, csv, (size_t)cols[P_GPU_MILLI].index, KACE_ERR_INVALID,
                             "column 'gpu_milli': %ld for a %ld-GPU pod (multi-GPU pods take whole GPUs: 1000)",
                             milli, num_gpu);
    if (deleted < created)
        return kace_csv_fail(ctx, csv, (size_t)cols[P_DELETION].index, KACE_ERR_INVALID,
                             "column 'deletion_time': %.17g is before creation_time %.17g", deleted, created);
    double start = created;
    if (!isnan(scheduled)) {
        if (scheduled < created || scheduled > deleted)
            return kace_csv_fail(ctx, csv, (size_t)cols[P_SCHEDULED].index, KACE_ERR_INVALID,
                                 "column 'scheduled_time': %.17g is outside creation..deletion (%.17g..%.17g)",
                                 scheduled, created, deleted);
        start = scheduled;
    }
    job->num_gpu = (int)num_gpu;
    job->gpu_milli = (int)milli;
    job->qos = (kace_qos)q;
    job->arrival = created;
    job->work = fmax(1.0, deleted - start);
    return KACE_OK;
}

kace_status kace_trace_parse(kace_ctx *ctx, const char *data, size_t len, const char *origin, kace_trace **out)
{
    *out = NULL;
    column_spec cols[] = {{"name", true, -1},          {"num_gpu", true, -1},       {"gpu_milli", true, -1},
                          {"qos", true, -1},           {"creation_time", true, -1}, {"deletion_time", true, -1},
                          {"scheduled_time", false, -1}, {"cpu_milli", false, -1},  {"memory_mib", false, -1},
                          {"gpu_spec", false, -1},     {"pod_phase", false, -1}};
    kace_csv csv;
    kace_csv_init(&csv, data, len, origin);
    kace_trace *t = calloc(1, sizeof *t);
    size_t cap = 0;
    kace_status st = KACE_OK;
    if (!t) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "%s: out of memory", csv.origin);
        goto done;
    }
    if ((st = read_header(ctx, &csv, cols, sizeof cols / sizeof *cols, "pod list")))
        goto done;
    size_t n_header = csv.n_fields;
    for (;;) {
        bool has = false;
        if ((st = next_record(ctx, &csv, n_header, (void **)&t->jobs, &cap, t->n_jobs, sizeof *t->jobs, &has)))
            goto done;
        if (!has)
            break;
        if ((st = parse_job(ctx, &csv, cols, &t->jobs[t->n_jobs])))
            goto done;
        t->n_gpu_jobs += t->jobs[t->n_jobs].num_gpu > 0;
        t->n_jobs++;
    }
done:
    kace_csv_release(&csv);
    if (st)
        kace_trace_free(&t);
    *out = t;
    return st;
}

kace_status kace_trace_load(kace_ctx *ctx, const char *path, kace_trace **out)
{
    *out = NULL;
    char *data = NULL;
    size_t len = 0;
    kace_status st = kace_read_file(ctx, path, &data, &len);
    if (!st)
        st = kace_trace_parse(ctx, data, len, path, out);
    free(data);
    return st;
}

void kace_trace_free(kace_trace **t)
{
    if (!t || !*t)
        return;
    free((*t)->jobs);
    free(*t);
    *t = NULL;
}

kace_status kace_node_list_parse(kace_ctx *ctx, const char *data, size_t len, const char *origin,
                                 kace_node_list **out)
{
    *out = NULL;
    enum { N_SN, N_GPU, N_MODEL, N_CPU, N_MEM };
    column_spec cols[] = {
        {"sn", true, -1}, {"gpu", true, -1}, {"model", true, -1}, {"cpu_milli", false, -1}, {"memory_mib", false, -1}};
    kace_csv csv;
    kace_csv_init(&csv, data, len, origin);
    kace_node_list *nl = calloc(1, sizeof *nl);
    size_t cap = 0;
    kace_status st = KACE_OK;
    if (!nl) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "%s: out of memory", csv.origin);
        goto done;
    }
    if ((st = read_header(ctx, &csv, cols, sizeof cols / sizeof *cols, "node list")))
        goto done;
    size_t n_header = csv.n_fields;
    for (;;) {
        bool has = false;
        if ((st = next_record(ctx, &csv, n_header, (void **)&nl->nodes, &cap, nl->n_nodes, sizeof *nl->nodes,
                              &has)))
            goto done;
        if (!has)
            break;
        kace_trace_node *node = &nl->nodes[nl->n_nodes];
        memset(node, 0, sizeof *node);
        long gpus = 0;
        double ignored = 0;
        if ((st = kace_csv_name(ctx, &csv, (size_t)cols[N_SN].index, "sn", node->name, sizeof node->name)) ||
            (st = kace_csv_int(ctx, &csv, (size_t)cols[N_GPU].index, "gpu", 0, KACE_TRACE_MAX_GPUS_PER_JOB, &gpus)) ||
            (st = kace_csv_name(ctx, &csv, (size_t)cols[N_MODEL].index, "model", node->model, sizeof node->model)) ||
            (cols[N_CPU].index >= 0 && (st = kace_csv_number(ctx, &csv, (size_t)cols[N_CPU].index, "cpu_milli",
                                                              KACE_CSV_NONNEGATIVE, &ignored))) ||
            (cols[N_MEM].index >= 0 && (st = kace_csv_number(ctx, &csv, (size_t)cols[N_MEM].index, "memory_mib",
                                                              KACE_CSV_NONNEGATIVE, &ignored))))
            goto done;
        node->n_gpus = (int)gpus;
        nl->n_gpus += (size_t)gpus;
        nl->n_nodes++;
    }
    if (nl->n_gpus == 0)
        st = kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:1: the node list has no GPU (expected rows with gpu >= 1)",
                       csv.origin, csv.line);
done:
    kace_csv_release(&csv);
    if (st)
        kace_node_list_free(&nl);
    *out = nl;
    return st;
}

kace_status kace_node_list_load(kace_ctx *ctx, const char *path, kace_node_list **out)
{
    *out = NULL;
    char *data = NULL;
    size_t len = 0;
    kace_status st = kace_read_file(ctx, path, &data, &len);
    if (!st)
        st = kace_node_list_parse(ctx, data, len, path, out);
    free(data);
    return st;
}

void kace_node_list_free(kace_node_list **n)
{
    if (!n || !*n)
        return;
    free((*n)->nodes);
    free(*n);
    *n = NULL;
}
