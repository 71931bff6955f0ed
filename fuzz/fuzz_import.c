/* libFuzzer harness for the measurement-file importer (lib/data/import.c and,
 * through it, lib/data/ncu.c and lib/base/csv.c): kace_import_parse_buffer.
 *
 * Every input is parsed twice: with origin "fuzz/input.csv" and no options,
 * then with one of several other origins / ncu workload options (chosen by a
 * hash of the input, so a given input always gets the same pair). Checks,
 * beyond the sanitizers:
 *  - failure: *out is NULL and the message starts "<origin>:" (with
 *    ":<line>:<col>: " for KACE_ERR_PARSE);
 *  - success: a known kind, at least one value/run/split, origin and set as
 *    documented (set = file basename without extension), only the record
 *    types the kind produces, names usable, numbers finite and >= 0 (NaN only
 *    where a cell may be missing), MPS % in 1..100, split fields in range,
 *    ncu values under the requested workload;
 *  - success, what nothing may resolve silently: every value of a non-ncu
 *    file names a metric kace stores and lies in its physical range
 *    (kace_metric_check), with the line:col of its cell; throughputs are
 *    > 0; no workload row, colocation (unordered in colocation files) or
 *    split appears twice;
 *  - the origin and options change nothing but the names: both parses agree
 *    on the status and on every record (except an ncu export whose workload
 *    would be empty, which must be refused);
 *  - read as kace import reads a file (lib/data/import_reader.h: from a
 *    file, here a memfd, in batches of two records), the input gives the
 *    same records in the same order whenever the whole parse accepts it
 *    (the batches may accept more: a repeat across batches is the store's
 *    to find). */
#define _GNU_SOURCE
#include <math.h>
#include <sys/mman.h>
#include <unistd.h>

#include "data/import_reader.h"
#include "fuzz_common.h"
#include "kace/import.h"
#include "kace/workload_name.h"

typedef struct config {
    const char *origin;   /* NULL: the library's "<input>" */
    bool with_opt;
    const char *workload; /* opt->workload when with_opt */
} config;

static char long_origin[700], long_workload[300];

static const config configs[] = {
    {"fuzz/input.csv", false, NULL},
    {"data/kace-v100/profiles/system.csv", true, NULL},
    {"colocations/pairs-xu.csv", true, "bert-base-cased_batch8-train"},
    {"noext", false, NULL},
    {"dir.d/.hidden", false, NULL},
    {"a/b.c/triples.v2.csv", false, NULL},
    {long_origin, false, NULL},
    {NULL, false, NULL},
    {"dir/", false, NULL},          /* empty set name: an ncu export has no workload */
    {"x.csv", true, long_workload}, /* truncated to KACE_NAME_MAX - 1 */
    {"y.csv", true, ""},            /* empty workload: refused for ncu */
    {"kernel/albert-base-v2_batch16-train.csv", false, NULL},
};
#define N_CONFIGS (sizeof configs / sizeof *configs)

static void expected_names(const config *c, char origin[512], char set[128], char workload[KACE_NAME_MAX])
{
    snprintf(origin, 512, "%s", c->origin ? c->origin : "<input>");
    const char *base = strrchr(origin, '/');
    base = base ? base + 1 : origin;
    snprintf(set, 128, "%.127s", base);
    char *dot = strrchr(set, '.');
    if (dot && dot != set)
        *dot = '\0';
    snprintf(workload, KACE_NAME_MAX, "%.*s", KACE_NAME_MAX - 1, c->with_opt && c->workload ? c->workload : set);
}

static const char *const ncu_metrics[] = {
    "Threads",          "Compute (SM) Throughput", "DRAM Throughput", "Memory Throughput",
    "Registers",        "Static Shared Memory",    "avg_Thread",      "Short_Kernel",
    "Long_Kernel",      "ave_Kernel_Length",       "long/short_Ratio",
};

static bool number_ok(double v, bool may_be_missing)
{
    return isnan(v) ? may_be_missing : (isfinite(v) && v >= 0);
}

/* Members of a run in identity order: as given (raw campaigns) or sorted. */
static void run_members(const kace_import_run *r, bool unordered, char out[KACE_MAX_K][KACE_NAME_MAX + 8])
{
    for (int m = 0; m < r->k; m++)
        snprintf(out[m], KACE_NAME_MAX + 8, "%s@%d", r->workload[m], r->mps_pct[m]);
    for (int i = 1; unordered && i < r->k; i++)
        for (int j = i; j > 0 && strcmp(out[j - 1], out[j]) > 0; j--) {
            char t[KACE_NAME_MAX + 8];
            memcpy(t, out[j], sizeof t);
            memcpy(out[j], out[j - 1], sizeof t);
            memcpy(out[j - 1], t, sizeof t);
        }
}

static bool same_members(const kace_import_run *a, const kace_import_run *b, bool unordered)
{
    if (a->k != b->k)
        return false;
    static char x[KACE_MAX_K][KACE_NAME_MAX + 8], y[KACE_MAX_K][KACE_NAME_MAX + 8];
    run_members(a, unordered, x);
    run_members(b, unordered, y);
    for (int m = 0; m < a->k; m++)
        if (strcmp(x[m], y[m]) != 0)
            return false;
    return true;
}

/* Nothing silently resolved: ranges, known metrics, no repeats (quadratic,
 * so only on batches of fuzzer size). */
static void check_strict(const kace_import_batch *b)
{
    char why[256];
    for (size_t i = 0; b->kind != KACE_FILE_NCU && i < b->n_values; i++) {
        const kace_profile_value *v = &b->values[i];
        FUZZ_CHECK(kace_metric_check(v->metric, v->value, why, sizeof why) == NULL, "value %zu: %s", i, why);
        /* nvidia-smi/DCGM values reduce many samples: no one cell */
        FUZZ_CHECK((v->line >= 2 && v->col >= 1) || b->kind == KACE_FILE_NVML_SAMPLES, "value %zu: at %d:%d", i,
                   v->line, v->col);
        for (size_t j = 0; !v->embedded && j < i && b->n_values <= 4000; j++)
            FUZZ_CHECK(b->values[j].embedded || strcmp(b->values[j].workload, v->workload) != 0 ||
                           strcmp(b->values[j].metric, v->metric) != 0,
                       "value %zu: %s/%s twice", i, v->workload, v->metric);
    }
    for (size_t i = 0; i < b->n_runs; i++) {
        const kace_import_run *r = &b->runs[i];
        for (int m = 0; m < r->k; m++)
            FUZZ_CHECK(isnan(r->throughput[m]) || (r->throughput[m] > 0 && r->throughput[m] <= kace_throughput_max()),
                       "run %zu: throughput %g", i, r->throughput[m]);
        for (size_t j = 0; j < i && b->n_runs <= 4000; j++)
            FUZZ_CHECK(!same_members(&b->runs[j], r, b->kind == KACE_FILE_COLOCATIONS), "run %zu repeats run %zu", i,
                       j);
    }
    for (size_t i = 0; i < b->n_splits && b->n_splits <= 4000; i++)
        for (size_t j = 0; j < i; j++) {
            const kace_import_split *x = &b->splits[i], *y = &b->splits[j];
            bool same = x->n_occur == y->n_occur && x->seed == y->seed &&
                        ((strcmp(x->workload1, y->workload1) == 0 && strcmp(x->workload2, y->workload2) == 0) ||
                         (strcmp(x->workload1, y->workload2) == 0 && strcmp(x->workload2, y->workload1) == 0));
            FUZZ_CHECK(!same, "split %zu repeats split %zu", i, j);
        }
}

static void check_batch(const kace_import_batch *b, const config *c)
{
    char origin[512], set[128], workload[KACE_NAME_MAX];
    expected_names(c, origin, set, workload);
    FUZZ_CHECK(b->kind > KACE_FILE_UNKNOWN && (b->kind <= KACE_FILE_NCU || b->kind == KACE_FILE_NVML_SAMPLES), "kind %d",
               (int)b->kind);
    FUZZ_CHECK(strcmp(b->origin, origin) == 0, "origin '%s', expected '%s'", b->origin, origin);
    FUZZ_CHECK(strcmp(b->set, set) == 0, "set '%s', expected '%s'", b->set, set);
    FUZZ_CHECK(b->n_values + b->n_runs + b->n_splits > 0, "success without data");
    FUZZ_CHECK(b->n_values <= b->cap_values && b->n_runs <= b->cap_runs && b->n_splits <= b->cap_splits,
               "count above capacity");
    bool values = b->kind == KACE_FILE_KERNEL_PROFILE || b->kind == KACE_FILE_SYSTEM_PROFILE ||
                  b->kind == KACE_FILE_EXCLUSIVE_BY_MPS || b->kind == KACE_FILE_COLOCATIONS ||
                  b->kind == KACE_FILE_NCU || b->kind == KACE_FILE_NVML_SAMPLES;
    bool runs = b->kind == KACE_FILE_COLOCATIONS || b->kind == KACE_FILE_RAW_CAMPAIGN;
    FUZZ_CHECK(values || b->n_values == 0, "%s file gave values", kace_file_kind_name(b->kind));
    FUZZ_CHECK(runs || b->n_runs == 0, "%s file gave runs", kace_file_kind_name(b->kind));
    FUZZ_CHECK(b->kind == KACE_FILE_SPLITS || b->n_splits == 0, "%s file gave splits", kace_file_kind_name(b->kind));
    FUZZ_CHECK(b->kind != KACE_FILE_NCU || b->n_values >= 4, "ncu export gave only %zu values", b->n_values);

    for (size_t i = 0; i < b->n_values; i++) {
        const kace_profile_value *v = &b->values[i];
        FUZZ_CHECK(fuzz_is_name(v->workload, sizeof v->workload), "value %zu: workload name", i);
        FUZZ_CHECK(memchr(v->metric, '\0', sizeof v->metric) && v->metric[0], "value %zu: metric name", i);
        FUZZ_CHECK(v->embedded == (b->kind == KACE_FILE_COLOCATIONS), "value %zu: embedded %d in a %s file", i,
                   (int)v->embedded, kace_file_kind_name(b->kind));
        FUZZ_CHECK(number_ok(v->value, b->kind != KACE_FILE_NCU), "value %zu (%s/%s) = %g", i, v->workload,
                   v->metric, v->value);
        if (b->kind == KACE_FILE_EXCLUSIVE_BY_MPS)
            FUZZ_CHECK(strncmp(v->metric, "exclusive_mps", 13) == 0, "metric '%s'", v->metric);
        if (b->kind == KACE_FILE_NCU) {
            FUZZ_CHECK(strcmp(v->workload, workload) == 0, "ncu workload '%s', expected '%s'", v->workload,
                       workload);
            bool known = false;
            for (size_t j = 0; j < sizeof ncu_metrics / sizeof *ncu_metrics; j++)
                known = known || strcmp(v->metric, ncu_metrics[j]) == 0;
            FUZZ_CHECK(known, "ncu metric '%s'", v->metric);
            for (size_t j = 0; j < i; j++)
                FUZZ_CHECK(strcmp(b->values[j].metric, v->metric) != 0, "ncu metric '%s' twice", v->metric);
        }
    }
    for (size_t i = 0; i < b->n_runs; i++) {
        const kace_import_run *r = &b->runs[i];
        FUZZ_CHECK(r->k >= (b->kind == KACE_FILE_RAW_CAMPAIGN ? 2 : 1) && r->k <= KACE_MAX_K, "run %zu: k = %d", i,
                   r->k);
        FUZZ_CHECK(r->line >= 2, "run %zu: line %d", i, r->line);
        int measured = 0;
        for (int j = 0; j < r->k; j++) {
            FUZZ_CHECK(fuzz_is_name(r->workload[j], KACE_NAME_MAX), "run %zu: workload %d name", i, j);
            FUZZ_CHECK(r->mps_pct[j] >= 1 && r->mps_pct[j] <= 100, "run %zu: mps %d%%", i, r->mps_pct[j]);
            FUZZ_CHECK(number_ok(r->throughput[j], b->kind == KACE_FILE_RAW_CAMPAIGN), "run %zu: throughput %g", i,
                       r->throughput[j]);
            measured += !isnan(r->throughput[j]);
        }
        FUZZ_CHECK(measured > 0, "run %zu: nothing measured", i);
        FUZZ_CHECK(r->status == (measured == r->k ? KACE_RUN_OK : KACE_RUN_FAILED), "run %zu: status %d", i,
                   (int)r->status);
    }
    check_strict(b);
    for (size_t i = 0; i < b->n_splits; i++) {
        const kace_import_split *s = &b->splits[i];
        FUZZ_CHECK(s->n_occur >= 1 && s->n_occur <= 1000, "split %zu: n_occur %d", i, s->n_occur);
        FUZZ_CHECK(s->seed >= 0 && s->seed <= 1000000000, "split %zu: seed %d", i, s->seed);
        FUZZ_CHECK(fuzz_is_name(s->workload1, KACE_NAME_MAX) && fuzz_is_name(s->workload2, KACE_NAME_MAX),
                   "split %zu: workload names", i);
        FUZZ_CHECK(s->line >= 2, "split %zu: line %d", i, s->line);
    }
}

static bool same_double(double a, double b)
{
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}

/* The two parses may differ only in origin, set and (ncu, nvidia-smi) workload. */
static void check_same(const kace_import_batch *a, const kace_import_batch *b)
{
    FUZZ_CHECK(a->kind == b->kind, "kind %d vs %d", (int)a->kind, (int)b->kind);
    FUZZ_CHECK(a->n_values == b->n_values && a->n_runs == b->n_runs && a->n_splits == b->n_splits,
               "counts %zu/%zu/%zu vs %zu/%zu/%zu", a->n_values, a->n_runs, a->n_splits, b->n_values, b->n_runs,
               b->n_splits);
    for (size_t i = 0; i < a->n_values; i++) {
        const kace_profile_value *x = &a->values[i], *y = &b->values[i];
        FUZZ_CHECK(a->kind == KACE_FILE_NCU || a->kind == KACE_FILE_NVML_SAMPLES || strcmp(x->workload, y->workload) == 0,
                   "value %zu: workload", i);
        FUZZ_CHECK(strcmp(x->metric, y->metric) == 0 && x->embedded == y->embedded && same_double(x->value, y->value),
                   "value %zu differs", i);
    }
    for (size_t i = 0; i < a->n_runs; i++)
        FUZZ_CHECK(memcmp(&a->runs[i], &b->runs[i], sizeof a->runs[i]) == 0, "run %zu differs", i);
    for (size_t i = 0; i < a->n_splits; i++)
        FUZZ_CHECK(memcmp(&a->splits[i], &b->splits[i], sizeof a->splits[i]) == 0, "split %zu differs", i);
}

static kace_status parse(const char *data, size_t size, const config *c, kace_import_batch **out)
{
    kace_ctx *ctx = kace_ctx_new();
    if (!ctx)
        abort();
    kace_import_options opt = {.workload = c->workload};
    *out = (kace_import_batch *)(uintptr_t)1; /* must be reset even on failure */
    kace_status st = kace_import_parse_buffer(ctx, data, size, c->origin, c->with_opt ? &opt : NULL, out);
    if (st != KACE_OK) {
        char origin[512], set[128], workload[KACE_NAME_MAX];
        expected_names(c, origin, set, workload);
        FUZZ_CHECK(*out == NULL, "failure left a batch");
        fuzz_check_failure(ctx, st, origin);
    } else {
        FUZZ_CHECK(*out != NULL, "success without a batch");
        check_batch(*out, c);
    }
    kace_ctx_free(&ctx);
    return st;
}

static void check_batches(const char *data, size_t size, kace_status whole_st, const kace_import_batch *whole)
{
    int fd = memfd_create("fuzz-import", MFD_CLOEXEC);
    if (fd < 0)
        return;
    for (size_t at = 0; at < size;) {
        ssize_t n = write(fd, data + at, size - at);
        if (n <= 0) {
            close(fd);
            return;
        }
        at += (size_t)n;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    kace_ctx *ctx = kace_ctx_new();
    if (!ctx)
        abort();
    kace_import_options opt = {.workload = "input"}; /* what configs[0]'s origin names */
    kace_import_reader *r = NULL;
    kace_import_batch *b = NULL;
    size_t nv = 0, nr = 0, ns = 0;
    kace_status st = kace_import_reader_open(ctx, path, &opt, &r);
    while (!st && !(st = kace_import_reader_next(ctx, r, 2, &b)) && b) {
        if (whole_st == KACE_OK) {
            FUZZ_CHECK(b->kind == whole->kind, "batch kind %d, whole %d", (int)b->kind, (int)whole->kind);
            FUZZ_CHECK(nv + b->n_values <= whole->n_values && nr + b->n_runs <= whole->n_runs &&
                           ns + b->n_splits <= whole->n_splits,
                       "the batches hold more records than the whole file");
            for (size_t i = 0; i < b->n_values; i++) {
                const kace_profile_value *x = &b->values[i], *y = &whole->values[nv + i];
                FUZZ_CHECK(strcmp(x->workload, y->workload) == 0 && strcmp(x->metric, y->metric) == 0 &&
                               x->embedded == y->embedded && same_double(x->value, y->value) && x->line == y->line &&
                               x->col == y->col,
                           "batched value %zu differs", nv + i);
            }
            for (size_t i = 0; i < b->n_runs; i++)
                FUZZ_CHECK(memcmp(&b->runs[i], &whole->runs[nr + i], sizeof b->runs[i]) == 0, "batched run %zu differs",
                           nr + i);
            for (size_t i = 0; i < b->n_splits; i++)
                FUZZ_CHECK(memcmp(&b->splits[i], &whole->splits[ns + i], sizeof b->splits[i]) == 0,
                           "batched split %zu differs", ns + i);
        }
        nv += b->n_values;
        nr += b->n_runs;
        ns += b->n_splits;
        kace_import_batch_free(&b);
    }
    if (whole_st == KACE_OK) {
        FUZZ_CHECK(st == KACE_OK, "the whole input parses, its batches fail: %s", kace_errmsg(ctx));
        FUZZ_CHECK(nv == whole->n_values && nr == whole->n_runs && ns == whole->n_splits,
                   "batches hold %zu/%zu/%zu records, the whole input %zu/%zu/%zu", nv, nr, ns, whole->n_values,
                   whole->n_runs, whole->n_splits);
    }
    kace_import_reader_close(&r);
    kace_ctx_free(&ctx);
    close(fd);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    memcpy(long_origin, "very/long/", 10);
    memset(long_origin + 10, 'o', sizeof long_origin - 10 - 5);
    memcpy(long_origin + sizeof long_origin - 5, ".csv", 5);
    memset(long_workload, 'w', sizeof long_workload - 1);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *copy = fuzz_copy(data, size);
    if (!copy)
        return 0;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 16777619u;
    const config *second = &configs[1 + h % (N_CONFIGS - 1)];

    kace_import_batch *a = NULL, *b = NULL;
    kace_status sa = parse(copy, size, &configs[0], &a);
    kace_status sb = parse(copy, size, second, &b);
    if (sa != KACE_OK) {
        FUZZ_CHECK(sb != KACE_OK, "parses with origin '%s' but not with 'fuzz/input.csv'",
                   second->origin ? second->origin : "(null)");
    } else {
        char origin[512], set[128], workload[KACE_NAME_MAX];
        expected_names(second, origin, set, workload);
        if ((a->kind == KACE_FILE_NCU || a->kind == KACE_FILE_NVML_SAMPLES) &&
            !kace_workload_name_ok(workload, NULL, NULL, 0)) {
            /* the file's name is no workload name: refused, unless nvidia-smi samples name theirs in a column */
            FUZZ_CHECK(sb == KACE_ERR_INVALID || (sb == KACE_OK && a->kind == KACE_FILE_NVML_SAMPLES),
                       "%s accepted with the workload name '%s'", kace_file_kind_name(a->kind), workload);
            if (sb == KACE_OK)
                check_same(a, b);
        } else {
            FUZZ_CHECK(sb == KACE_OK, "parses with 'fuzz/input.csv' but not with origin '%s'",
                       second->origin ? second->origin : "(null)");
            check_same(a, b);
        }
    }
    check_batches(copy, size, sa, a);
    kace_import_batch_free(&a);
    kace_import_batch_free(&b);
    free(copy);
    return 0;
}
