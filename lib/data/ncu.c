/* Nsight Compute raw export -> the kernel metrics of one workload.
 *
 * Input: what `ncu --csv --page details [--print-details all]` (or
 * `ncu -i report.ncu-rep --csv --print-details all`) prints: one row per
 * (kernel launch, metric). Rows are grouped by "ID" (one kernel launch) and
 * reduced over all kernels.
 *
 * What the KACE artifact computes (github nba556677go/KACE-artifact, read for
 * this file; no code taken from it):
 *  - profiling/kernel_metrics/output_KACE/total_ncu_train.sh (and
 *    total_ncu_inf.sh) profile with `ncu --set full`, then export with
 *    `ncu -i <rep> --csv --print-details all` (default --print-units auto, so
 *    Duration is printed in nsecond/usecond/msecond as ncu sees fit).
 *  - profiling/kernel_metrics/output_KACE/process_ncu.py keeps, per kernel, the
 *    rows whose "Body Item Label" is empty and whose "Metric Name" is one of
 *    Duration, Block Size, Grid Size, Threads, Compute (SM) Throughput, DRAM
 *    Throughput, Memory Throughput (only from section "GPU Speed Of Light
 *    Throughput": the Memory Workload Analysis section has a "Memory
 *    Throughput" in byte/second), Registers Per Thread, Static Shared Memory
 *    Per Block; values with every ',' removed. Per kernel
 *      Registers            = Threads * floor(Registers Per Thread)
 *      Static Shared Memory = Grid Size (metric, blocks) * Static Shared Memory Per Block
 *    and for each of Threads, Compute (SM) Throughput, DRAM Throughput, Memory
 *    Throughput, Registers, Static Shared Memory the duration-weighted mean
 *      sum_k m_k * Duration_k / sum_k Duration_k
 *    over all kernels (the raw printed Duration value is the weight: its unit
 *    is not looked at; it raises an error when a kernel lacks a metric).
 *  - profiling/kernel_metrics/output_hotcloud/hotcloud_ncu.py (run by
 *    hotcloud_parse_ncu_kernels.sh with `-l 200`) adds, for Xu et al.:
 *      avg_Thread         = unweighted mean of Threads over kernels
 *      Short_Kernel       = mean Duration of kernels with Duration < 200 (0 if none)
 *      Long_Kernel        = mean Duration of kernels with Duration >= 200 (0 if none)
 *      ave_Kernel_Length  = sum Duration / number of kernels
 *      long/short_Ratio   = n_long / n_short (0 when there is no short kernel)
 *    (it also weights "PCIe read/write bandwidth", metrics of a custom section
 *    that a standard export does not have; they are not computed here).
 *
 * Differences, on purpose:
 *  - Duration is normalized to microseconds (nsecond/usecond/msecond/second and
 *    the newer ns/us/ms/s). The artifact used the printed number whatever its
 *    unit; microseconds is the unit ncu prints for typical kernels, so the
 *    200 threshold means 200 us. The weighted means do not depend on the unit.
 *  - Static Shared Memory Per Block is normalized to bytes (byte, Kbyte = 1000
 *    bytes as ncu prints, Mbyte, Gbyte, KB/MB/GB, KiB/MiB/GiB; "/block").
 *  - A metric is averaged over the kernels that reported it (weights: their
 *    durations); a metric no kernel reported is not added at all. Only a
 *    missing Duration is an error.
 *  - Threads falls back to Grid Size x Block Size (metrics, else the
 *    "(x, y, z)" launch columns) when the Threads metric is absent; Grid Size
 *    likewise falls back to the "Grid Size" column.
 *  - Older metric labels ("SM [%]", "Compute (SM) [%]", "Memory [%]" of the
 *    2019-2021 "GPU Speed Of Light" section) and raw metric names
 *    (--print-metric-name name, or --metrics exports: gpu__time_duration.sum,
 *    launch__thread_count, ...) are accepted as aliases.
 *
 * Format variants handled: the classic 15-column header ("ID","Process ID",
 * "Process Name","Host Name","Kernel Name","Context","Stream","Block Size",
 * "Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",
 * "Metric Value"), the 2020 header with "Kernel Time" and no launch columns,
 * NVTX columns, "Body Item Label" (--print-details all), the rule columns
 * ("Rule Name",...,"Estimated Speedup"), rows shorter than the header (newer
 * versions end metric rows with one empty field), rule rows with an empty
 * metric name, ==PROF==/==WARNING== lines anywhere, program output before the
 * header, a "GPU ID" device table inside the data, repeated headers,
 * thousands separators ("1,024"), a UTF-8 BOM and CRLF line ends.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/csv.h"
#include "batch.h"
#include "base/weighted_mean.h"
#include "kace/workload_name.h"

/* ---- metrics read from the export --------------------------------------- */

enum {
    NCU_DURATION,
    NCU_THREADS,
    NCU_SM,
    NCU_DRAM,
    NCU_MEM,
    NCU_REGS_PER_THREAD,
    NCU_SMEM_PER_BLOCK,
    NCU_GRID,
    NCU_BLOCK,
    NCU_N_INPUTS
};

typedef enum { UNIT_TIME, UNIT_PERCENT, UNIT_BYTES, UNIT_COUNT } unit_kind;

static const struct {
    const char *name;
    int metric;
} ncu_aliases[] = {
    {"Duration", NCU_DURATION},
    {"gpu__time_duration.sum", NCU_DURATION},
    {"Threads", NCU_THREADS},
    {"launch__thread_count", NCU_THREADS},
    {"Compute (SM) Throughput", NCU_SM},
    {"Compute (SM) [%]", NCU_SM},
    {"SM [%]", NCU_SM},
    {"sm__throughput.avg.pct_of_peak_sustained_elapsed", NCU_SM},
    {"DRAM Throughput", NCU_DRAM},
    {"dram__throughput.avg.pct_of_peak_sustained_elapsed", NCU_DRAM},
    {"Memory Throughput", NCU_MEM},
    {"Memory [%]", NCU_MEM},
    {"gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", NCU_MEM},
    {"Registers Per Thread", NCU_REGS_PER_THREAD},
    {"launch__registers_per_thread", NCU_REGS_PER_THREAD},
    {"Static Shared Memory Per Block", NCU_SMEM_PER_BLOCK},
    {"launch__shared_mem_per_block_static", NCU_SMEM_PER_BLOCK},
    {"Grid Size", NCU_GRID},
    {"launch__grid_size", NCU_GRID},
    {"Block Size", NCU_BLOCK},
    {"launch__block_size", NCU_BLOCK},
};

static const unit_kind ncu_unit_kind[NCU_N_INPUTS] = {
    [NCU_DURATION] = UNIT_TIME,        [NCU_THREADS] = UNIT_COUNT,
    [NCU_SM] = UNIT_PERCENT,           [NCU_DRAM] = UNIT_PERCENT,
    [NCU_MEM] = UNIT_PERCENT,          [NCU_REGS_PER_THREAD] = UNIT_COUNT,
    [NCU_SMEM_PER_BLOCK] = UNIT_BYTES, [NCU_GRID] = UNIT_COUNT,
    [NCU_BLOCK] = UNIT_COUNT,
};

static int lookup_metric(const char *name)
{
    for (size_t i = 0; i < sizeof ncu_aliases / sizeof ncu_aliases[0]; i++)
        if (strcmp(name, ncu_aliases[i].name) == 0)
            return ncu_aliases[i].metric;
    return -1;
}

/* The outputs, in the order they are appended. */
enum {
    OUT_THREADS,
    OUT_SM,
    OUT_DRAM,
    OUT_MEM,
    OUT_REGISTERS,
    OUT_SMEM,
    OUT_AVG_THREAD,
    OUT_SHORT,
    OUT_LONG,
    OUT_AVE_LENGTH,
    OUT_RATIO,
    OUT_N
};

static const char *const out_names[OUT_N] = {
    "Threads", "Compute (SM) Throughput", "DRAM Throughput", "Memory Throughput", "Registers",
    "Static Shared Memory", "avg_Thread", "Short_Kernel", "Long_Kernel", "ave_Kernel_Length",
    "long/short_Ratio",
};

/* Xu et al.'s short/long split, in microseconds (hotcloud_ncu.py -l 200). */
#define NCU_LONG_KERNEL_US 200.0

/* ---- units ---------------------------------------------------------------- */

static bool unit_is(const char *u, size_t n, const char *name)
{
    return strlen(name) == n && memcmp(u, name, n) == 0;
}

/* Scale that converts a value printed in `unit` to the base unit of `kind`
 * (microseconds, percent, bytes, counts). False when the unit is unknown. */
static bool unit_scale(unit_kind kind, const char *unit, double *scale)
{
    while (*unit == ' ')
        unit++;
    size_t n = strlen(unit);
    while (n > 0 && unit[n - 1] == ' ')
        n--;
    switch (kind) {
    case UNIT_TIME: {
        static const struct {
            const char *name;
            double us;
        } t[] = {{"nsecond", 1e-3}, {"ns", 1e-3}, {"usecond", 1.0}, {"us", 1.0},     {"msecond", 1e3},
                 {"ms", 1e3},       {"second", 1e6}, {"s", 1e6},    {"psecond", 1e-6}, {"ps", 1e-6}};
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
            if (unit_is(unit, n, t[i].name)) {
                *scale = t[i].us;
                return true;
            }
        return false;
    }
    case UNIT_PERCENT:
        *scale = 1.0;
        return n == 0 || unit_is(unit, n, "%");
    case UNIT_BYTES: {
        if (n >= 6 && memcmp(unit + n - 6, "/block", 6) == 0)
            n -= 6;
        static const struct {
            const char *name;
            double bytes;
        } b[] = {{"", 1.0},           {"byte", 1.0},      {"B", 1.0},         {"Kbyte", 1e3},
                 {"KB", 1e3},         {"kB", 1e3},        {"Mbyte", 1e6},     {"MB", 1e6},
                 {"Gbyte", 1e9},      {"GB", 1e9},        {"KiB", 1024.0},    {"MiB", 1048576.0},
                 {"GiB", 1073741824.0}, {"Kibyte", 1024.0}, {"Mibyte", 1048576.0}};
        for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
            if (unit_is(unit, n, b[i].name)) {
                *scale = b[i].bytes;
                return true;
            }
        return false;
    }
    case UNIT_COUNT: {
        /* thread, block, register/thread, ... possibly with an SI prefix
         * (auto units print large counts as e.g. "Kthread"). */
        double s = 1.0;
        const char *u = unit;
        size_t m = n;
        if (m > 1 && (u[0] == 'K' || u[0] == 'M' || u[0] == 'G') && islower((unsigned char)u[1])) {
            s = u[0] == 'K' ? 1e3 : u[0] == 'M' ? 1e6 : 1e9;
            u++;
            m--;
        }
        static const char *const c[] = {"",      "thread",        "block",   "register/thread",
                                        "register", "thread/block", "block/grid"};
        for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
            if (unit_is(u, m, c[i]) && (s == 1.0 || m > 0)) {
                *scale = s;
                return true;
            }
        return false;
    }
    }
    return false;
}

static const char *unit_expectation(unit_kind kind)
{
    switch (kind) {
    case UNIT_TIME: return "nsecond, usecond, msecond, second, ns, us, ms or s";
    case UNIT_PERCENT: return "%";
    case UNIT_BYTES: return "byte, Kbyte, Mbyte, Gbyte, KB, MB, GB, KiB or MiB, optionally per block";
    case UNIT_COUNT: return "a count such as thread, block or register/thread";
    }
    return "";
}

/* ---- numbers -------------------------------------------------------------- */

enum { NUM_OK, NUM_NOT_A_NUMBER, NUM_NAN, NUM_INF, NUM_TOO_LONG };

static bool ieq(const char *a, size_t n, const char *b)
{
    if (strlen(b) != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (tolower((unsigned char)a[i]) != b[i])
            return false;
    return true;
}

/* Parses a metric value as ncu prints it: an optional sign, digits with
 * optional thousands separators ("1,024,000"), an optional fraction and
 * exponent, surrounding spaces. */
static int scan_number(const char *s, double *out)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    if (n == 0)
        return NUM_NOT_A_NUMBER;
    {
        size_t k = (s[0] == '+' || s[0] == '-') ? 1 : 0;
        if (ieq(s + k, n - k, "nan"))
            return NUM_NAN;
        if (ieq(s + k, n - k, "inf") || ieq(s + k, n - k, "infinity"))
            return NUM_INF;
    }
    char buf[128];
    size_t b = 0, i = 0;
    if (n >= sizeof buf)
        return NUM_TOO_LONG;
    if (s[i] == '+' || s[i] == '-')
        buf[b++] = s[i++];
    /* Integer part, with optional groups of three digits after commas. */
    size_t digits = 0, group = 0;
    bool grouped = false;
    while (i < n && (isdigit((unsigned char)s[i]) || s[i] == ',')) {
        if (s[i] == ',') {
            if (group == 0 || (grouped && group != 3) || (!grouped && group > 3))
                return NUM_NOT_A_NUMBER;
            grouped = true;
            group = 0;
            i++;
            continue;
        }
        buf[b++] = s[i++];
        digits++;
        group++;
    }
    if (grouped && group != 3)
        return NUM_NOT_A_NUMBER;
    if (i < n && s[i] == '.') {
        buf[b++] = s[i++];
        while (i < n && isdigit((unsigned char)s[i])) {
            buf[b++] = s[i++];
            digits++;
        }
    }
    if (digits == 0)
        return NUM_NOT_A_NUMBER;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        buf[b++] = s[i++];
        if (i < n && (s[i] == '+' || s[i] == '-'))
            buf[b++] = s[i++];
        size_t ed = 0;
        while (i < n && isdigit((unsigned char)s[i])) {
            buf[b++] = s[i++];
            ed++;
        }
        if (ed == 0)
            return NUM_NOT_A_NUMBER;
    }
    if (i != n)
        return NUM_NOT_A_NUMBER;
    buf[b] = '\0';
    errno = 0;
    double v = strtod(buf, NULL);
    if (!isfinite(v))
        return NUM_INF;
    *out = v;
    return NUM_OK;
}

/* Product of the dimensions of a launch column "(256, 1, 1)"; NaN when the
 * text has another form. */
static double dims_product(const char *s)
{
    while (*s == ' ')
        s++;
    if (*s != '(')
        return NAN;
    s++;
    double p = 1.0;
    int ndims = 0;
    for (;;) {
        while (*s == ' ')
            s++;
        if (!isdigit((unsigned char)*s))
            return NAN;
        double d = 0.0;
        int nd = 0;
        while (isdigit((unsigned char)*s)) {
            if (++nd > 12)
                return NAN;
            d = d * 10.0 + (*s - '0');
            s++;
        }
        p *= d;
        ndims++;
        while (*s == ' ')
            s++;
        if (*s == ',') {
            s++;
            continue;
        }
        if (*s == ')')
            break;
        return NAN;
    }
    s++;
    while (*s == ' ')
        s++;
    return (*s == '\0' && ndims >= 1 && ndims <= 3) ? p : NAN;
}

/* ---- kernels ------------------------------------------------------------- */

typedef struct ncu_kernel {
    char *id;
    char name[64];     /* start of the kernel name, for messages */
    int line, col;     /* where its first row's ID is */
    unsigned has;      /* bit i: input metric i seen */
    double v[NCU_N_INPUTS];
    double col_block, col_grid; /* from the launch columns; NaN if absent */
} ncu_kernel;

typedef struct ncu_state {
    ncu_kernel *k;
    size_t n, cap;
    size_t *slots; /* hash of ID -> index + 1 */
    size_t n_slots;
} ncu_state;

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

static void state_free(ncu_state *st)
{
    for (size_t i = 0; i < st->n; i++)
        free(st->k[i].id);
    free(st->k);
    free(st->slots);
    memset(st, 0, sizeof *st);
}

static bool rehash(ncu_state *st, size_t n_slots)
{
    size_t *slots = calloc(n_slots, sizeof *slots);
    if (!slots)
        return false;
    for (size_t i = 0; i < st->n; i++) {
        size_t h = (size_t)hash_str(st->k[i].id) & (n_slots - 1);
        while (slots[h])
            h = (h + 1) & (n_slots - 1);
        slots[h] = i + 1;
    }
    free(st->slots);
    st->slots = slots;
    st->n_slots = n_slots;
    return true;
}

/* Finds the kernel with this ID or adds it. NULL when out of memory. */
static ncu_kernel *kernel_get(ncu_state *st, const char *id, bool *added)
{
    *added = false;
    if (st->n > 0 && strcmp(st->k[st->n - 1].id, id) == 0)
        return &st->k[st->n - 1];
    if (st->n_slots) {
        size_t h = (size_t)hash_str(id) & (st->n_slots - 1);
        while (st->slots[h]) {
            ncu_kernel *k = &st->k[st->slots[h] - 1];
            if (strcmp(k->id, id) == 0)
                return k;
            h = (h + 1) & (st->n_slots - 1);
        }
    }
    if (st->n == st->cap) {
        size_t cap = st->cap ? st->cap * 2 : 64;
        ncu_kernel *k = realloc(st->k, cap * sizeof *k);
        if (!k)
            return NULL;
        st->k = k;
        st->cap = cap;
    }
    if ((st->n + 1) * 2 > st->n_slots && !rehash(st, st->n_slots ? st->n_slots * 2 : 128))
        return NULL;
    ncu_kernel *k = &st->k[st->n];
    memset(k, 0, sizeof *k);
    size_t len = strlen(id);
    k->id = malloc(len + 1);
    if (!k->id)
        return NULL;
    memcpy(k->id, id, len + 1);
    k->col_block = k->col_grid = NAN;
    size_t h = (size_t)hash_str(id) & (st->n_slots - 1);
    while (st->slots[h])
        h = (h + 1) & (st->n_slots - 1);
    st->slots[h] = st->n + 1;
    st->n++;
    *added = true;
    return k;
}

/* ---- reading -------------------------------------------------------------- */

typedef struct ncu_columns {
    size_t id, name, unit, value;           /* required */
    size_t section, body, kernel, block, grid; /* SIZE_MAX when absent */
    size_t need;                            /* fields a data row must have */
} ncu_columns;

static size_t header_find(const kace_csv *h, const char *name)
{
    for (size_t i = 0; i < h->n_fields; i++) {
        const char *f = h->fields[i];
        while (*f == ' ')
            f++;
        size_t n = strlen(f);
        while (n > 0 && f[n - 1] == ' ')
            n--;
        if (strlen(name) == n && memcmp(f, name, n) == 0)
            return i;
    }
    return SIZE_MAX;
}

static const char *field_or_empty(const kace_csv *csv, size_t i)
{
    return i < csv->n_fields ? csv->fields[i] : "";
}

/* Moves the reader past blank lines and lines of profiler chatter
 * ("==PROF== ...", "==WARNING== ...") that start at the current position. */
static void skip_chatter(kace_csv *csv)
{
    if (csv->pos == 0 && csv->len >= 3 && memcmp(csv->data, "\xEF\xBB\xBF", 3) == 0)
        csv->pos = 3;
    for (;;) {
        while (csv->pos < csv->len && (csv->data[csv->pos] == '\n' || csv->data[csv->pos] == '\r')) {
            if (csv->data[csv->pos] == '\n')
                csv->line++;
            csv->pos++;
        }
        if (csv->len - csv->pos >= 2 && csv->data[csv->pos] == '=' && csv->data[csv->pos + 1] == '=') {
            const char *nl = memchr(csv->data + csv->pos, '\n', csv->len - csv->pos);
            if (!nl) {
                csv->pos = csv->len;
                return;
            }
            csv->pos = (size_t)(nl - csv->data) + 1;
            csv->line++;
            continue;
        }
        return;
    }
}

static bool span_contains(const char *p, size_t n, const char *needle)
{
    size_t m = strlen(needle);
    for (size_t i = 0; i + m <= n; i++)
        if (memcmp(p + i, needle, m) == 0)
            return true;
    return false;
}

/* Positions the reader at the header line: the first line (after chatter and
 * any program output) that names a "Metric Name" column. */
static kace_status find_header(kace_ctx *ctx, kace_csv *csv, const char *origin)
{
    bool any_text = false;
    for (;;) {
        skip_chatter(csv);
        if (csv->pos >= csv->len)
            break;
        const char *p = csv->data + csv->pos;
        const char *nl = memchr(p, '\n', csv->len - csv->pos);
        size_t n = nl ? (size_t)(nl - p) : csv->len - csv->pos;
        bool blank = true;
        for (size_t i = 0; i < n && blank; i++)
            blank = isspace((unsigned char)p[i]) != 0;
        if (!blank)
            any_text = true;
        if (span_contains(p, n, "Metric Name"))
            return KACE_OK;
        csv->pos += n + (nl ? 1 : 0);
        if (nl)
            csv->line++;
    }
    if (!any_text)
        return kace_fail(ctx, KACE_ERR_PARSE,
                         "%s:1:1: empty Nsight Compute export (expected the output of ncu --csv --page details)",
                         origin);
    return kace_fail(ctx, KACE_ERR_PARSE,
                     "%s:1:1: no Nsight Compute CSV header found (expected a line with the columns \"ID\", "
                     "\"Metric Name\", \"Metric Unit\", \"Metric Value\" as printed by ncu --csv --page details)",
                     origin);
}

static kace_status read_header(kace_ctx *ctx, kace_csv *csv, ncu_columns *c)
{
    c->id = header_find(csv, "ID");
    c->name = header_find(csv, "Metric Name");
    c->unit = header_find(csv, "Metric Unit");
    c->value = header_find(csv, "Metric Value");
    c->section = header_find(csv, "Section Name");
    c->body = header_find(csv, "Body Item Label");
    c->kernel = header_find(csv, "Kernel Name");
    c->block = header_find(csv, "Block Size");
    c->grid = header_find(csv, "Grid Size");
    char missing[160] = "";
    const struct {
        size_t idx;
        const char *name;
    } req[] = {{c->id, "ID"}, {c->name, "Metric Name"}, {c->unit, "Metric Unit"}, {c->value, "Metric Value"}};
    int n_missing = 0;
    c->need = 0;
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) {
        if (req[i].idx == SIZE_MAX) {
            size_t used = strlen(missing);
            snprintf(missing + used, sizeof missing - used, "%s\"%s\"", n_missing ? ", " : "", req[i].name);
            n_missing++;
        } else if (req[i].idx + 1 > c->need) {
            c->need = req[i].idx + 1;
        }
    }
    if (n_missing)
        return kace_csv_fail(ctx, csv, 0, KACE_ERR_PARSE,
                             "Nsight Compute header lacks the column%s %s (expected \"ID\", \"Metric Name\", "
                             "\"Metric Unit\" and \"Metric Value\", as printed by ncu --csv --page details)",
                             n_missing > 1 ? "s" : "", missing);
    return KACE_OK;
}

static bool starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* One data row. */
static kace_status read_row(kace_ctx *ctx, kace_csv *csv, const ncu_columns *c, ncu_state *st)
{
    const char *metric_name = csv->fields[c->name];
    if (metric_name[0] == '\0')
        return KACE_OK; /* a rule result row */
    if (c->body != SIZE_MAX && field_or_empty(csv, c->body)[0] != '\0')
        return KACE_OK; /* a detail of a table or chart (--print-details all) */

    const char *id = csv->fields[c->id];
    if (id[0] == '\0')
        return kace_csv_fail(ctx, csv, c->id, KACE_ERR_PARSE, "column 'ID' is empty (expected the kernel launch id)");
    bool added = false;
    ncu_kernel *k = kernel_get(st, id, &added);
    if (!k)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory reading %s", csv->origin);
    if (added) {
        k->line = csv->field_line[c->id];
        k->col = csv->field_col[c->id];
        if (c->kernel != SIZE_MAX)
            snprintf(k->name, sizeof k->name, "%s", field_or_empty(csv, c->kernel));
        if (c->block != SIZE_MAX)
            k->col_block = dims_product(field_or_empty(csv, c->block));
        if (c->grid != SIZE_MAX)
            k->col_grid = dims_product(field_or_empty(csv, c->grid));
    }

    int m = lookup_metric(metric_name);
    if (m < 0)
        return KACE_OK;
    /* The Memory Workload Analysis section has its own "Memory Throughput"
     * (byte/second): only the Speed Of Light one is the % of peak. */
    if (m == NCU_MEM && c->section != SIZE_MAX && strcmp(metric_name, "Memory Throughput") == 0 &&
        !starts_with(field_or_empty(csv, c->section), "GPU Speed Of Light"))
        return KACE_OK;

    double scale = 1.0;
    const char *unit = csv->fields[c->unit];
    if (!unit_scale(ncu_unit_kind[m], unit, &scale))
        return kace_csv_fail(ctx, csv, c->unit, KACE_ERR_PARSE, "metric '%s' has unit '%.40s' (expected %s)",
                             metric_name, unit, unit_expectation(ncu_unit_kind[m]));
    double v = 0.0;
    const char *text = csv->fields[c->value];
    switch (scan_number(text, &v)) {
    case NUM_OK: break;
    case NUM_NAN:
        return kace_csv_fail(ctx, csv, c->value, KACE_ERR_INVALID,
                             "metric '%s' of kernel ID %.40s is NaN (expected a finite number >= 0)", metric_name, id);
    case NUM_INF:
        return kace_csv_fail(ctx, csv, c->value, KACE_ERR_INVALID,
                             "metric '%s' of kernel ID %.40s: '%.40s' is not finite (expected a finite number >= 0)",
                             metric_name, id, text);
    case NUM_TOO_LONG:
    case NUM_NOT_A_NUMBER:
    default:
        if (text[0] == '\0')
            return kace_csv_fail(ctx, csv, c->value, KACE_ERR_PARSE,
                                 "metric '%s' of kernel ID %.40s is empty (expected a number)", metric_name, id);
        return kace_csv_fail(ctx, csv, c->value, KACE_ERR_PARSE,
                             "metric '%s' of kernel ID %.40s: '%.40s' is not a number (expected e.g. 12.5 or 1,024)",
                             metric_name, id, text);
    }
    if (v < 0)
        return kace_csv_fail(ctx, csv, c->value, KACE_ERR_INVALID,
                             "metric '%s' of kernel ID %.40s is %g (expected a value >= 0)", metric_name, id, v);
    v *= scale;
    if (!isfinite(v))
        return kace_csv_fail(ctx, csv, c->value, KACE_ERR_INVALID,
                             "metric '%s' of kernel ID %.40s is too large (expected a finite number)", metric_name, id);
    k->v[m] = v; /* a repeated metric: the last one counts, as in the artifact */
    k->has |= 1u << m;
    return KACE_OK;
}

/* ---- reduction ------------------------------------------------------------- */


static kace_status reduce(kace_ctx *ctx, const char *origin, const ncu_state *st, double out[OUT_N], bool have[OUT_N])
{
    wsum w[OUT_N];
    memset(w, 0, sizeof w);
    double total = 0.0, sum_short = 0.0, sum_long = 0.0, sum_threads = 0.0;
    size_t n_short = 0, n_long = 0, n_threads = 0;
    for (size_t i = 0; i < st->n; i++) {
        const ncu_kernel *k = &st->k[i];
        if (!(k->has & (1u << NCU_DURATION)))
            return kace_fail(ctx, KACE_ERR_PARSE,
                             "%s:%d:%d: kernel ID %s%s%s%s has no Duration (expected a 'Duration' metric row, section "
                             "'GPU Speed Of Light Throughput', for every kernel launch)",
                             origin, k->line, k->col, k->id, k->name[0] ? " ('" : "", k->name,
                             k->name[0] ? "')" : "");
        double d = k->v[NCU_DURATION];
        total += d;
        if (d < NCU_LONG_KERNEL_US) {
            sum_short += d;
            n_short++;
        } else {
            sum_long += d;
            n_long++;
        }
#define HAS(m) ((k->has & (1u << (m))) != 0)
        double threads = NAN, grid = NAN;
        if (HAS(NCU_THREADS))
            threads = k->v[NCU_THREADS];
        else if (HAS(NCU_GRID) && HAS(NCU_BLOCK))
            threads = k->v[NCU_GRID] * k->v[NCU_BLOCK];
        else if (isfinite(k->col_grid) && isfinite(k->col_block))
            threads = k->col_grid * k->col_block;
        if (HAS(NCU_GRID))
            grid = k->v[NCU_GRID];
        else if (isfinite(k->col_grid))
            grid = k->col_grid;
        if (!isnan(threads)) {
            wsum_add(&w[OUT_THREADS], threads, d);
            sum_threads += threads;
            n_threads++;
            if (HAS(NCU_REGS_PER_THREAD))
                wsum_add(&w[OUT_REGISTERS], threads * floor(k->v[NCU_REGS_PER_THREAD]), d);
        }
        if (HAS(NCU_SM))
            wsum_add(&w[OUT_SM], k->v[NCU_SM], d);
        if (HAS(NCU_DRAM))
            wsum_add(&w[OUT_DRAM], k->v[NCU_DRAM], d);
        if (HAS(NCU_MEM))
            wsum_add(&w[OUT_MEM], k->v[NCU_MEM], d);
        if (!isnan(grid) && HAS(NCU_SMEM_PER_BLOCK))
            wsum_add(&w[OUT_SMEM], grid * k->v[NCU_SMEM_PER_BLOCK], d);
#undef HAS
    }
    if (!(total > 0.0))
        return kace_fail(ctx, KACE_ERR_INVALID,
                         "%s:%d:%d: the kernels' Durations sum to %g (expected > 0 to weight the metrics by duration)",
                         origin, st->k[0].line, st->k[0].col, total);
    for (int o = OUT_THREADS; o <= OUT_SMEM; o++) {
        have[o] = w[o].n > 0;
        if (!have[o])
            continue;
        if (!(w[o].den > 0.0))
            return kace_fail(ctx, KACE_ERR_INVALID,
                             "%s: the kernels that report '%s' have a total Duration of 0 (expected > 0 to weight "
                             "it by duration)",
                             origin, out_names[o]);
        out[o] = w[o].num / w[o].den;
    }
    have[OUT_AVG_THREAD] = n_threads > 0;
    if (n_threads)
        out[OUT_AVG_THREAD] = sum_threads / (double)n_threads;
    /* As hotcloud_ncu.py: 0 when a class of kernels is empty. */
    have[OUT_SHORT] = have[OUT_LONG] = have[OUT_AVE_LENGTH] = have[OUT_RATIO] = true;
    out[OUT_SHORT] = n_short ? sum_short / (double)n_short : 0.0;
    out[OUT_LONG] = n_long ? sum_long / (double)n_long : 0.0;
    out[OUT_AVE_LENGTH] = total / (double)st->n;
    out[OUT_RATIO] = n_short ? (double)n_long / (double)n_short : 0.0;
    for (int o = 0; o < OUT_N; o++)
        if (have[o] && !isfinite(out[o]))
            return kace_fail(ctx, KACE_ERR_INVALID,
                             "%s: '%s' overflows (expected metric values small enough to sum in double precision)",
                             origin, out_names[o]);
    return KACE_OK;
}

/* ---- entry point ---------------------------------------------------------- */

kace_status kace_ncu_parse_buffer(kace_ctx *ctx, const char *data, size_t len, const char *origin,
                                  const char *workload, kace_import_batch *batch)
{
    if (!origin)
        origin = "<input>";
    if (!batch || (!data && len > 0))
        return kace_fail(ctx, KACE_ERR_INVALID, "%s: no batch or no data given to the ncu parser", origin);
    if (!workload || workload[0] == '\0')
        return kace_fail(ctx, KACE_ERR_INVALID, "%s: no workload name for the Nsight Compute export (expected one)",
                         origin);
    char why[300];
    if (!kace_workload_name_ok(workload, NULL, why, sizeof why))
        return kace_fail(ctx, KACE_ERR_INVALID, "%s: workload name %s (a workload name is %s)", origin, why,
                         KACE_WORKLOAD_NAME_RULE);
    if (!data)
        data = "";

    kace_csv csv;
    kace_csv_init(&csv, data, len, origin);
    ncu_state st;
    memset(&st, 0, sizeof st);
    kace_status s = find_header(ctx, &csv, origin);
    if (s)
        goto done;
    bool has = false;
    if ((s = kace_csv_next(ctx, &csv, &has)))
        goto done;
    if (!has) { /* cannot happen: find_header stopped at a non-blank line */
        s = kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:1: missing header (expected the ncu CSV header)", origin,
                      csv.line);
        goto done;
    }
    ncu_columns c;
    if ((s = read_header(ctx, &csv, &c)))
        goto done;
    int header_line = csv.record_line;

    bool foreign = false; /* inside a "GPU ID" device table */
    for (;;) {
        skip_chatter(&csv);
        if ((s = kace_csv_next(ctx, &csv, &has)))
            goto done;
        if (!has)
            break;
        if (csv.n_fields > 0 && strcmp(csv.fields[0], "GPU ID") == 0) {
            foreign = true;
            continue;
        }
        if (csv.n_fields < c.need) {
            if (foreign)
                continue;
            s = kace_csv_fail(ctx, &csv, csv.n_fields, KACE_ERR_PARSE,
                              "row has %zu fields (expected at least %zu, up to the header's columns \"ID\", "
                              "\"Metric Name\", \"Metric Unit\", \"Metric Value\")",
                              csv.n_fields, c.need);
            goto done;
        }
        foreign = false;
        if (strcmp(csv.fields[c.id], "ID") == 0 && strcmp(csv.fields[c.name], "Metric Name") == 0)
            continue; /* the header again (one per process in some versions) */
        if ((s = read_row(ctx, &csv, &c, &st)))
            goto done;
    }
    if (st.n == 0) {
        s = kace_fail(ctx, KACE_ERR_PARSE,
                      "%s:%d:1: no kernels in the Nsight Compute export (expected rows of at least one kernel launch "
                      "after the header)",
                      origin, header_line);
        goto done;
    }

    double out[OUT_N];
    bool have[OUT_N];
    memset(have, 0, sizeof have);
    if ((s = reduce(ctx, origin, &st, out, have)))
        goto done;
    size_t before = batch->n_values;
    for (int o = 0; o < OUT_N; o++) {
        if (!have[o])
            continue;
        if ((s = kace_batch_add_value(ctx, batch, workload, out_names[o], out[o], false))) {
            batch->n_values = before; /* all or nothing */
            goto done;
        }
    }
done:
    state_free(&st);
    kace_csv_release(&csv);
    return s;
}
