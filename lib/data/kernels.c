/* libkace_cupti.so recordings -> the six KACE kernel metrics (and Xu et
 * al.'s kernel-length metrics), with lib/data/ncu.c's definitions. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <stdarg.h>

#include "base/csv.h"
#include "batch.h"
#include "kace/kernels.h"
#include "base/weighted_mean.h"
#include "kace/workload_name.h"

/* Xu et al.'s short/long split, microseconds (as lib/data/ncu.c). */
#define LONG_KERNEL_US 200.0
#define MAX_NAME 65536 /* CUTLASS and cute kernels' mangled names run to several KiB */

typedef struct kernel_rec {
    int64_t start, end;
    uint32_t grid[3], block[3];
    uint32_t regs, static_smem, dynamic_smem;
    uint32_t name; /* index into names */
} kernel_rec;

typedef struct counter_rec {
    uint32_t grid[3], block[3];
    uint32_t name;
    double sum[3]; /* sm, dram, mem */
    uint32_t n;
} counter_rec;

struct kace_kernel_recording {
    kernel_rec *kernels;
    size_t n_kernels, cap_kernels;
    counter_rec *counters;
    size_t n_counters, cap_counters, n_counter_lines;
    char **names;
    size_t n_names, cap_names;
    uint32_t *name_slots; /* open addressing: name index + 1 */
    size_t n_slots;
    size_t dropped, n_errors, n_skipped;
    bool monotonic;
    char device[128];
    char first_error[256];
    char first_skipped[320];
};

static const char *const metric_names[KACE_KM_N] = {
    "Threads", "Compute (SM) Throughput", "DRAM Throughput", "Memory Throughput", "Registers",
    "Static Shared Memory", "avg_Thread", "Short_Kernel", "Long_Kernel", "ave_Kernel_Length",
    "long/short_Ratio",
};

const char *kace_kernel_metric_name(int km)
{
    return km >= 0 && km < KACE_KM_N ? metric_names[km] : "?";
}

void kace_kernels_free(kace_kernel_recording **pr)
{
    if (!pr || !*pr)
        return;
    kace_kernel_recording *r = *pr;
    for (size_t i = 0; i < r->n_names; i++)
        free(r->names[i]);
    free(r->names);
    free(r->name_slots);
    free(r->kernels);
    free(r->counters);
    free(r);
    *pr = NULL;
}

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static bool grow(void **items, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return true;
    size_t c = *cap ? *cap * 2 : 64;
    void *p = realloc(*items, c * size);
    if (!p)
        return false;
    *items = p;
    *cap = c;
    return true;
}

/* Interns a kernel name; UINT32_MAX when out of memory. */
static uint32_t intern(kace_kernel_recording *r, const char *s, size_t n)
{
    if (r->n_names * 2 >= r->n_slots) {
        size_t ns = r->n_slots ? r->n_slots * 2 : 256;
        uint32_t *slots = calloc(ns, sizeof *slots);
        if (!slots)
            return UINT32_MAX;
        for (size_t i = 0; i < r->n_names; i++) {
            size_t j = hash_bytes(r->names[i], strlen(r->names[i])) & (ns - 1);
            while (slots[j])
                j = (j + 1) & (ns - 1);
            slots[j] = (uint32_t)i + 1;
        }
        free(r->name_slots);
        r->name_slots = slots;
        r->n_slots = ns;
    }
    size_t j = hash_bytes(s, n) & (r->n_slots - 1);
    while (r->name_slots[j]) {
        const char *have = r->names[r->name_slots[j] - 1];
        if (strlen(have) == n && memcmp(have, s, n) == 0)
            return r->name_slots[j] - 1;
        j = (j + 1) & (r->n_slots - 1);
    }
    if (!grow((void **)&r->names, &r->cap_names, r->n_names, sizeof *r->names))
        return UINT32_MAX;
    char *copy = malloc(n + 1);
    if (!copy)
        return UINT32_MAX;
    memcpy(copy, s, n);
    copy[n] = '\0';
    r->names[r->n_names] = copy;
    r->name_slots[j] = (uint32_t)r->n_names + 1;
    return (uint32_t)r->n_names++;
}

/* ---- parsing --------------------------------------------------------------- */

typedef struct line_reader {
    const char *p, *end; /* the line, without '\n' */
    const char *line_start;
    const char *origin;
    int line;
} line_reader;

static kace_status lfail(kace_ctx *ctx, const line_reader *lr, kace_status st, const char *at, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static kace_status lfail(kace_ctx *ctx, const line_reader *lr, kace_status st, const char *at, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return kace_fail(ctx, st, "%s:%d:%d: %s", lr->origin, lr->line, (int)(at - lr->line_start) + 1, what);
}

static void skip_spaces(line_reader *lr)
{
    while (lr->p < lr->end && (*lr->p == ' ' || *lr->p == '\t'))
        lr->p++;
}

/* An unsigned integer field of at most max. */
static kace_status field_u64(kace_ctx *ctx, line_reader *lr, const char *what, uint64_t max, uint64_t *out)
{
    skip_spaces(lr);
    const char *at = lr->p;
    uint64_t v = 0;
    int digits = 0;
    while (lr->p < lr->end && *lr->p >= '0' && *lr->p <= '9') {
        if (++digits > 19)
            return lfail(ctx, lr, KACE_ERR_PARSE, at, "%s has too many digits (expected at most %llu)", what,
                         (unsigned long long)max);
        v = v * 10 + (uint64_t)(*lr->p++ - '0');
    }
    if (digits == 0 || (lr->p < lr->end && *lr->p != ' ' && *lr->p != '\t'))
        return lfail(ctx, lr, KACE_ERR_PARSE, at, "%s is not a whole number (expected digits)", what);
    if (v > max)
        return lfail(ctx, lr, KACE_ERR_INVALID, at, "%s is %llu (expected at most %llu)", what,
                     (unsigned long long)v, (unsigned long long)max);
    *out = v;
    return KACE_OK;
}

/* A measured percentage: digits with an optional fraction. The injection
 * library writes what CUPTI gave, so "nan", "-nan", "inf" and negative
 * numbers are well-formed but unusable: *usable is false for them and for
 * values above 1000 %. Anything else is a syntax error. */
static kace_status field_pct(kace_ctx *ctx, line_reader *lr, const char *what, double *out, bool *usable)
{
    skip_spaces(lr);
    const char *at = lr->p;
    const char *e = lr->p;
    while (e < lr->end && *e != ' ' && *e != '\t')
        e++;
    size_t n = (size_t)(e - at);
    char buf[48];
    if (n == 0 || n >= sizeof buf)
        return lfail(ctx, lr, KACE_ERR_PARSE, at, "%s is %s (expected a percentage such as 42.5)", what,
                     n ? "too long" : "missing");
    memcpy(buf, at, n);
    buf[n] = '\0';
    const char *digits = buf[0] == '-' ? buf + 1 : buf;
    bool special = !strcasecmp(digits, "nan") || !strcasecmp(digits, "inf");
    bool dot = false, number = *digits != '\0';
    for (const char *c = digits; *c && !special; c++) {
        if (*c == '.' && !dot)
            dot = true;
        else if (*c < '0' || *c > '9')
            number = false;
    }
    if (!special && (!number || !strcmp(digits, ".")))
        return lfail(ctx, lr, KACE_ERR_PARSE, at, "%s is not a number (expected a percentage such as 42.5)", what);
    double v = special ? NAN : strtod(buf, NULL);
    *usable = !special && v >= 0 && v <= 1000;
    *out = v;
    lr->p = e;
    return KACE_OK;
}

/* Notes a well-formed record whose measured values cannot be used: it is
 * left out, counted, and the first one is named for the caller's warning. */
static kace_status skip_record(kace_kernel_recording *r, const line_reader *lr, const char *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static kace_status skip_record(kace_kernel_recording *r, const line_reader *lr, const char *at, const char *fmt, ...)
{
    if (r->n_skipped++ == 0) {
        char what[200];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof what, fmt, ap);
        va_end(ap);
        snprintf(r->first_skipped, sizeof r->first_skipped, "%.80s:%d:%d: %s", lr->origin, lr->line,
                 (int)(at - lr->line_start) + 1, what);
    }
    return KACE_OK;
}

/* The rest of the line: a kernel name. */
static kace_status field_name(kace_ctx *ctx, line_reader *lr, const char **s, size_t *n)
{
    skip_spaces(lr);
    const char *at = lr->p;
    const char *e = lr->end;
    while (e > lr->p && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
        e--;
    if (e == lr->p)
        return lfail(ctx, lr, KACE_ERR_PARSE, at, "missing kernel name (expected it at the end of the line)");
    if ((size_t)(e - lr->p) > MAX_NAME)
        return lfail(ctx, lr, KACE_ERR_PARSE, at, "kernel name longer than %d bytes", MAX_NAME);
    if (memchr(lr->p, '\0', (size_t)(e - lr->p)))
        return lfail(ctx, lr, KACE_ERR_PARSE, at, "NUL byte in the kernel name");
    *s = lr->p;
    *n = (size_t)(e - lr->p);
    lr->p = lr->end;
    return KACE_OK;
}

/* Grid and block sizes; *zero_at points at the first 0 (CUPTI gives 0 for
 * some records: not usable, not a syntax error), else stays NULL. */
static kace_status read_dims(kace_ctx *ctx, line_reader *lr, uint32_t grid[3], uint32_t block[3], const char **zero_at,
                             const char **zero_what)
{
    static const char *const what[6] = {"grid x", "grid y", "grid z", "block x", "block y", "block z"};
    *zero_at = NULL;
    for (int i = 0; i < 6; i++) {
        uint64_t v;
        skip_spaces(lr);
        const char *at = lr->p;
        kace_status st = field_u64(ctx, lr, what[i], UINT32_MAX, &v);
        if (st)
            return st;
        if (v == 0 && !*zero_at) {
            *zero_at = at;
            *zero_what = what[i];
        }
        (i < 3 ? grid : block)[i % 3] = (uint32_t)v;
    }
    return KACE_OK;
}

static bool word_is(line_reader *lr, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(lr->end - lr->p) < n || memcmp(lr->p, w, n) != 0)
        return false;
    if (lr->p + n < lr->end && lr->p[n] != ' ' && lr->p[n] != '\t' && lr->p[n] != '\r')
        return false;
    lr->p += n;
    return true;
}

static counter_rec *find_counter(kace_kernel_recording *r, uint32_t name, const uint32_t g[3], const uint32_t b[3]);

static kace_status parse_line(kace_ctx *ctx, kace_kernel_recording *r, line_reader *lr)
{
    skip_spaces(lr);
    const char *at = lr->p;
    if (lr->p == lr->end || *lr->p == '#' || (lr->end - lr->p == 1 && *lr->p == '\r'))
        return KACE_OK;
    if (word_is(lr, "kace-cupti")) {
        uint64_t v;
        kace_status st = field_u64(ctx, lr, "version", 1000, &v);
        if (st)
            return st;
        if (v != 1)
            return lfail(ctx, lr, KACE_ERR_PARSE, at, "recording version %llu (expected 1)", (unsigned long long)v);
        return KACE_OK;
    }
    if (word_is(lr, "clock")) {
        skip_spaces(lr);
        r->monotonic = word_is(lr, "monotonic");
        return KACE_OK;
    }
    if (word_is(lr, "device")) {
        const char *s;
        size_t n;
        kace_status st = field_name(ctx, lr, &s, &n);
        if (st)
            return st;
        snprintf(r->device, sizeof r->device, "%.*s", (int)n, s);
        return KACE_OK;
    }
    if (word_is(lr, "dropped")) {
        uint64_t v;
        kace_status st = field_u64(ctx, lr, "dropped records", 1ULL << 48, &v);
        if (st)
            return st;
        r->dropped += v;
        return KACE_OK;
    }
    if (word_is(lr, "error")) {
        skip_spaces(lr);
        if (r->n_errors++ == 0)
            snprintf(r->first_error, sizeof r->first_error, "%.*s", (int)(lr->end - lr->p), lr->p);
        return KACE_OK;
    }
    if (word_is(lr, "kernel")) {
        kernel_rec k;
        uint64_t v[5];
        static const char *const what[2] = {"start time", "end time"};
        for (int i = 0; i < 2; i++) {
            kace_status st = field_u64(ctx, lr, what[i], INT64_MAX / 2, &v[i]);
            if (st)
                return st;
        }
        const char *end_at = lr->p;
        const char *zero_at, *zero_what;
        kace_status st = read_dims(ctx, lr, k.grid, k.block, &zero_at, &zero_what);
        if (st)
            return st;
        static const char *const what2[3] = {"registers per thread", "static shared memory",
                                             "dynamic shared memory"};
        for (int i = 0; i < 3; i++)
            if ((st = field_u64(ctx, lr, what2[i], i == 0 ? 65536 : UINT32_MAX, &v[2 + i])))
                return st;
        const char *s;
        size_t n;
        if ((st = field_name(ctx, lr, &s, &n)))
            return st;
        if (v[1] < v[0])
            return skip_record(r, lr, end_at, "kernel ends (%llu) before it starts (%llu); left out",
                               (unsigned long long)v[1], (unsigned long long)v[0]);
        if (zero_at)
            return skip_record(r, lr, zero_at, "kernel with %s 0; left out", zero_what);
        k.start = (int64_t)v[0];
        k.end = (int64_t)v[1];
        k.regs = (uint32_t)v[2];
        k.static_smem = (uint32_t)v[3];
        k.dynamic_smem = (uint32_t)v[4];
        if ((k.name = intern(r, s, n)) == UINT32_MAX ||
            !grow((void **)&r->kernels, &r->cap_kernels, r->n_kernels, sizeof *r->kernels))
            return kace_fail(ctx, KACE_ERR_NOMEM, "%s: out of memory reading kernel records", lr->origin);
        r->kernels[r->n_kernels++] = k;
        return KACE_OK;
    }
    if (word_is(lr, "counters")) {
        double pct[3];
        static const char *const what[3] = {"SM throughput", "DRAM throughput", "memory throughput"};
        kace_status st;
        const char *bad_at = NULL;
        int bad = -1;
        for (int i = 0; i < 3; i++) {
            bool usable = false;
            skip_spaces(lr);
            const char *vat = lr->p;
            if ((st = field_pct(ctx, lr, what[i], &pct[i], &usable)))
                return st;
            if (!usable && bad < 0) {
                bad = i;
                bad_at = vat;
            }
        }
        uint32_t g[3], b[3];
        const char *zero_at, *zero_what;
        if ((st = read_dims(ctx, lr, g, b, &zero_at, &zero_what)))
            return st;
        const char *s;
        size_t n;
        if ((st = field_name(ctx, lr, &s, &n)))
            return st;
        if (bad >= 0)
            return skip_record(r, lr, bad_at, "%s is %g (expected a percentage of peak, 0..1000); counters left out",
                               what[bad], pct[bad]);
        if (zero_at)
            return skip_record(r, lr, zero_at, "counters with %s 0; left out", zero_what);
        uint32_t name = intern(r, s, n);
        if (name == UINT32_MAX)
            return kace_fail(ctx, KACE_ERR_NOMEM, "%s: out of memory reading counter records", lr->origin);
        counter_rec *c = find_counter(r, name, g, b);
        if (!c) {
            if (!grow((void **)&r->counters, &r->cap_counters, r->n_counters, sizeof *r->counters))
                return kace_fail(ctx, KACE_ERR_NOMEM, "%s: out of memory reading counter records", lr->origin);
            c = &r->counters[r->n_counters++];
            memset(c, 0, sizeof *c);
            memcpy(c->grid, g, sizeof g);
            memcpy(c->block, b, sizeof b);
            c->name = name;
        }
        for (int i = 0; i < 3; i++)
            c->sum[i] += pct[i];
        c->n++;
        r->n_counter_lines++;
        return KACE_OK;
    }
    return lfail(ctx, lr, KACE_ERR_PARSE, at,
                 "unknown record (expected kace-cupti, clock, device, kernel, counters, dropped or error)");
}

/* Counter records are few (one per profiled signature): a linear search
 * while parsing, an index when reducing. */
static counter_rec *find_counter(kace_kernel_recording *r, uint32_t name, const uint32_t g[3], const uint32_t b[3])
{
    for (size_t i = 0; i < r->n_counters; i++) {
        counter_rec *c = &r->counters[i];
        if (c->name == name && memcmp(c->grid, g, sizeof c->grid) == 0 && memcmp(c->block, b, sizeof c->block) == 0)
            return c;
    }
    return NULL;
}

kace_status kace_kernels_parse(kace_ctx *ctx, const char *data, size_t len, const char *origin,
                               kace_kernel_recording **out)
{
    *out = NULL;
    if (!origin)
        origin = "<recording>";
    kace_kernel_recording *r = calloc(1, sizeof *r);
    if (!r)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory reading %s", origin);
    line_reader lr = {.origin = origin, .line = 1};
    size_t pos = 0;
    kace_status st = KACE_OK;
    while (pos < len) {
        const char *nl = memchr(data + pos, '\n', len - pos);
        if (!nl)
            break; /* an unfinished last line: ignored */
        lr.line_start = lr.p = data + pos;
        lr.end = nl;
        if ((st = parse_line(ctx, r, &lr)))
            break;
        pos = (size_t)(nl - data) + 1;
        lr.line++;
    }
    if (st) {
        kace_kernels_free(&r);
        return st;
    }
    *out = r;
    return KACE_OK;
}

kace_status kace_kernels_parse_file(kace_ctx *ctx, const char *path, kace_kernel_recording **out)
{
    *out = NULL;
    char *data = NULL;
    size_t len = 0;
    kace_status st = kace_read_file(ctx, path, &data, &len);
    if (st)
        return st;
    st = kace_kernels_parse(ctx, data, len, path, out);
    free(data);
    return st;
}

void kace_kernels_info(const kace_kernel_recording *r, kace_kernel_info *info)
{
    info->n_kernels = r->n_kernels;
    info->n_counters = r->n_counter_lines;
    info->n_dropped = r->dropped;
    info->n_errors = r->n_errors;
    info->monotonic_clock = r->monotonic;
    info->device = r->device;
    info->first_error = r->first_error;
    info->n_skipped = r->n_skipped;
    info->first_skipped = r->first_skipped;
}

/* ---- reduction ------------------------------------------------------------- */


kace_status kace_kernels_reduce(kace_ctx *ctx, const kace_kernel_recording *r, int64_t from_ns, int64_t to_ns,
                                kace_kernel_summary *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < KACE_KM_N; i++)
        out->value[i] = NAN;
    /* Counters by name: for each name, the first counter entry (few entries
     * per name: a linear scan over them). */
    size_t *first = malloc((r->n_names ? r->n_names : 1) * sizeof *first);
    size_t *next = malloc((r->n_counters ? r->n_counters : 1) * sizeof *next);
    if (!first || !next) {
        free(first);
        free(next);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory reducing kernel records");
    }
    for (size_t i = 0; i < r->n_names; i++)
        first[i] = SIZE_MAX;
    for (size_t i = r->n_counters; i-- > 0;) {
        next[i] = first[r->counters[i].name];
        first[r->counters[i].name] = i;
    }
    wsum w[KACE_KM_N];
    memset(w, 0, sizeof w);
    double total_us = 0, sum_short = 0, sum_long = 0, sum_threads = 0, counter_us = 0;
    size_t n = 0, n_short = 0, n_long = 0;
    for (size_t i = 0; i < r->n_kernels; i++) {
        const kernel_rec *k = &r->kernels[i];
        if (k->start < from_ns) {
            out->n_before++;
            continue;
        }
        if (to_ns > 0 && k->start >= to_ns)
            continue;
        double d = (double)(k->end - k->start) / 1e3; /* microseconds, as ncu prints */
        double blocks = (double)k->grid[0] * k->grid[1] * k->grid[2];
        double threads = blocks * ((double)k->block[0] * k->block[1] * k->block[2]);
        n++;
        total_us += d;
        if (d < LONG_KERNEL_US) {
            sum_short += d;
            n_short++;
        } else {
            sum_long += d;
            n_long++;
        }
        sum_threads += threads;
        wsum_add(&w[KACE_KM_THREADS], threads, d);
        wsum_add(&w[KACE_KM_REGISTERS], threads * k->regs, d);
        wsum_add(&w[KACE_KM_SMEM], blocks * k->static_smem, d);
        for (size_t c = first[k->name]; c != SIZE_MAX; c = next[c]) {
            const counter_rec *cr = &r->counters[c];
            if (memcmp(cr->grid, k->grid, sizeof k->grid) != 0 || memcmp(cr->block, k->block, sizeof k->block) != 0)
                continue;
            wsum_add(&w[KACE_KM_SM], cr->sum[0] / cr->n, d);
            wsum_add(&w[KACE_KM_DRAM], cr->sum[1] / cr->n, d);
            wsum_add(&w[KACE_KM_MEM], cr->sum[2] / cr->n, d);
            out->n_with_counters++;
            counter_us += d;
            break;
        }
    }
    free(first);
    free(next);
    out->n_kernels = n;
    out->kernel_time_s = total_us / 1e6;
    if (n == 0)
        return kace_fail(ctx, KACE_ERR_INVALID,
                         "no kernel in the recording%s (expected the workload to launch CUDA kernels)",
                         from_ns > 0 || to_ns > 0 ? " during the steady window" : "");
    if (!(total_us > 0))
        return kace_fail(ctx, KACE_ERR_INVALID, "the %zu kernels' durations sum to 0 (expected > 0)", n);
    for (int m = KACE_KM_THREADS; m <= KACE_KM_SMEM; m++) {
        out->have[m] = w[m].n > 0 && w[m].den > 0;
        if (out->have[m])
            out->value[m] = w[m].num / w[m].den;
    }
    out->counter_time_share = counter_us / total_us;
    out->have[KACE_KM_AVG_THREAD] = out->have[KACE_KM_SHORT] = out->have[KACE_KM_LONG] = true;
    out->have[KACE_KM_AVE_LENGTH] = out->have[KACE_KM_RATIO] = true;
    out->value[KACE_KM_AVG_THREAD] = sum_threads / (double)n;
    out->value[KACE_KM_SHORT] = n_short ? sum_short / (double)n_short : 0.0;
    out->value[KACE_KM_LONG] = n_long ? sum_long / (double)n_long : 0.0;
    out->value[KACE_KM_AVE_LENGTH] = total_us / (double)n;
    out->value[KACE_KM_RATIO] = n_short ? (double)n_long / (double)n_short : 0.0;
    return KACE_OK;
}

/* A kernel's signature and duration, sorted to group launches. */
typedef struct sig_key {
    uint32_t name, grid[3], block[3];
    int64_t ns;
} sig_key;

static int sig_key_order(const void *a, const void *b)
{
    const sig_key *x = a, *y = b;
    if (x->name != y->name)
        return x->name < y->name ? -1 : 1;
    int c = memcmp(x->grid, y->grid, sizeof x->grid);
    return c ? c : memcmp(x->block, y->block, sizeof x->block);
}

static int signature_time_order(const void *a, const void *b)
{
    const kace_kernel_signature *x = a, *y = b;
    if (x->time_s != y->time_s)
        return x->time_s > y->time_s ? -1 : 1;
    return strcmp(x->name, y->name); /* ties in a stable order */
}

kace_status kace_kernels_signatures(kace_ctx *ctx, const kace_kernel_recording *r, int64_t from_ns, int64_t to_ns,
                                    kace_kernel_signature **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    sig_key *keys = malloc((r->n_kernels ? r->n_kernels : 1) * sizeof *keys);
    if (!keys)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory grouping kernel signatures");
    size_t nk = 0;
    for (size_t i = 0; i < r->n_kernels; i++) {
        const kernel_rec *k = &r->kernels[i];
        if (k->start < from_ns || (to_ns > 0 && k->start >= to_ns))
            continue;
        sig_key *s = &keys[nk++];
        memset(s, 0, sizeof *s); /* memcmp'd: no stray bytes */
        s->name = k->name;
        memcpy(s->grid, k->grid, sizeof s->grid);
        memcpy(s->block, k->block, sizeof s->block);
        s->ns = k->end - k->start;
    }
    qsort(keys, nk, sizeof *keys, sig_key_order);
    size_t groups = 0;
    for (size_t i = 0; i < nk; i++)
        groups += i == 0 || sig_key_order(&keys[i - 1], &keys[i]) != 0;
    kace_kernel_signature *sig = calloc(groups ? groups : 1, sizeof *sig);
    if (!sig) {
        free(keys);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory grouping kernel signatures");
    }
    size_t g = 0;
    for (size_t i = 0; i < nk; i++) {
        if (i == 0 || sig_key_order(&keys[i - 1], &keys[i]) != 0) {
            kace_kernel_signature *s = &sig[g++];
            s->name = r->names[keys[i].name];
            memcpy(s->grid, keys[i].grid, sizeof s->grid);
            memcpy(s->block, keys[i].block, sizeof s->block);
        }
        sig[g - 1].launches++;
        sig[g - 1].time_s += (double)keys[i].ns / 1e9;
    }
    free(keys);
    qsort(sig, groups, sizeof *sig, signature_time_order);
    if (groups == 0) {
        free(sig);
        sig = NULL;
    }
    *out = sig;
    *n = groups;
    return KACE_OK;
}

/* ---- batches --------------------------------------------------------------- */

kace_status kace_profile_batch_new(kace_ctx *ctx, const char *origin, kace_import_batch **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    (*out)->kind = KACE_FILE_KERNEL_PROFILE;
    snprintf((*out)->origin, sizeof (*out)->origin, "%s", origin ? origin : "kace-profile");
    snprintf((*out)->set, sizeof (*out)->set, "%s", origin ? origin : "kace-profile");
    return KACE_OK;
}

kace_status kace_profile_batch_add(kace_ctx *ctx, kace_import_batch *b, const char *workload, const char *metric,
                                   double value)
{
    char why[300];
    if (!kace_workload_name_ok(workload ? workload : "", NULL, why, sizeof why))
        return kace_fail(ctx, KACE_ERR_INVALID, "workload name %s (a workload name is %s)", why,
                         KACE_WORKLOAD_NAME_RULE);
    if (isinf(value) || value < 0)
        return kace_fail(ctx, KACE_ERR_INVALID, "metric '%s' of %s is %g (expected a finite value >= 0)", metric,
                         workload, value);
    return kace_batch_add_value(ctx, b, workload, metric, value, false);
}

kace_status kace_profile_batch_add_kernels(kace_ctx *ctx, kace_import_batch *b, const char *workload,
                                           const kace_kernel_summary *s)
{
    for (int m = 0; m < KACE_KM_N; m++) {
        if (!s->have[m])
            continue;
        kace_status st = kace_profile_batch_add(ctx, b, workload, metric_names[m], s->value[m]);
        if (st)
            return st;
    }
    return KACE_OK;
}
