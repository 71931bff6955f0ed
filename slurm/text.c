/* Reports, pick words and constraints (see text.h). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text.h"

bool kace_slurm_report_format(char *buf, size_t size, const kace_slurm_report *r)
{
    int n = snprintf(buf, size, "# kace slurm report\njob = %u\nthroughput = %.17g\ntime = %.6f\n", r->job,
                     r->throughput, r->time);
    if (n < 0 || (size_t)n >= size)
        return false;
    if (r->workload[0]) {
        int m = snprintf(buf + n, size - (size_t)n, "workload = %s\n", r->workload);
        if (m < 0 || (size_t)m >= size - (size_t)n)
            return false;
        n += m;
    }
    if (r->node[0]) {
        int m = snprintf(buf + n, size - (size_t)n, "node = %s\n", r->node);
        if (m < 0 || (size_t)m >= size - (size_t)n)
            return false;
    }
    return true;
}

/* A name: 1..KACE_NAME_MAX-1 printable characters without spaces. */
static bool copy_name(char *out, const char *v, size_t n)
{
    if (n == 0 || n >= KACE_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isgraph((unsigned char)v[i]))
            return false;
    memcpy(out, v, n);
    out[n] = '\0';
    return true;
}

kace_status kace_slurm_report_parse(kace_ctx *ctx, const char *text, size_t len, const char *origin,
                                    kace_slurm_report *out)
{
    memset(out, 0, sizeof *out);
    enum { JOB = 1, THROUGHPUT = 2, TIME = 4, WORKLOAD = 8, NODE = 16 };
    static const char *const keys[] = {"job", "throughput", "time", "workload", "node"};
    unsigned seen = 0;
    size_t line_no = 0;
    for (size_t pos = 0; pos < len;) {
        const char *line = text + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - line) : len - pos;
        pos += n + 1;
        line_no++;
        if (memchr(line, '\0', n))
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:%zu: a NUL byte (expected text)", origin, line_no,
                             (size_t)((const char *)memchr(line, '\0', n) - line) + 1);
        size_t a = 0;
        while (a < n && (line[a] == ' ' || line[a] == '\t' || line[a] == '\r'))
            a++;
        if (a == n || line[a] == '#')
            continue;
        size_t k = a;
        while (k < n && (isalnum((unsigned char)line[k]) || line[k] == '_'))
            k++;
        size_t e = k;
        while (e < n && (line[e] == ' ' || line[e] == '\t'))
            e++;
        if (k == a || e >= n || line[e] != '=')
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:%zu: expected \"key = value\"", origin, line_no, a + 1);
        int key = -1;
        for (int i = 0; i < 5; i++)
            if (strlen(keys[i]) == k - a && strncmp(line + a, keys[i], k - a) == 0)
                key = i;
        if (key < 0)
            return kace_fail(ctx, KACE_ERR_PARSE,
                             "%s:%zu:%zu: unknown key '%.*s' (expected job, throughput, time, workload or node)",
                             origin, line_no, a + 1, (int)(k - a), line + a);
        if (seen & (1u << key))
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:%zu: %s given twice", origin, line_no, a + 1, keys[key]);
        seen |= 1u << key;
        size_t v = e + 1;
        while (v < n && (line[v] == ' ' || line[v] == '\t'))
            v++;
        size_t end = n;
        while (end > v && (line[end - 1] == ' ' || line[end - 1] == '\t' || line[end - 1] == '\r'))
            end--;
        char value[64];
        const char *val = line + v;
        size_t vlen = end - v;
        if (key == 3 || key == 4) {
            if (!copy_name(key == 3 ? out->workload : out->node, val, vlen))
                return kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:%zu: expected a %s name of 1 to %d characters "
                                 "without spaces", origin, line_no, v + 1, keys[key], KACE_NAME_MAX - 1);
            continue;
        }
        if (vlen == 0 || vlen >= sizeof value)
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:%zu: expected a number for %s", origin, line_no, v + 1,
                             keys[key]);
        memcpy(value, val, vlen);
        value[vlen] = '\0';
        char *stop;
        errno = 0;
        if (key == 0) {
            if (!isdigit((unsigned char)value[0]))
                return kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:%zu: expected a job id (a positive integer)", origin,
                                 line_no, v + 1);
            unsigned long long id = strtoull(value, &stop, 10);
            if (errno || *stop || id == 0 || id > UINT32_MAX)
                return kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:%zu: expected a job id (a positive integer)", origin,
                                 line_no, v + 1);
            out->job = (uint32_t)id;
        } else {
            double x = strtod(value, &stop);
            bool ok = !errno && !*stop && isfinite(x) && (key == 1 ? x > 0 : x >= 0 && x < 1e12);
            if (!ok)
                return kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:%zu: expected %s", origin, line_no, v + 1,
                                 key == 1 ? "a throughput in samples/s (a finite number > 0)"
                                          : "a time in unix seconds (a number from 0 to 1e12)");
            if (key == 1)
                out->throughput = x;
            else
                out->time = x;
        }
    }
    for (int i = 0; i < 3; i++)
        if (!(seen & (1u << i)))
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:1: no %s (a report needs job, throughput and time)", origin,
                             line_no + 1, keys[i]);
    return KACE_OK;
}

bool kace_slurm_in_list(const char *list, const char *item, size_t len)
{
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == len && strncmp(p, item, len) == 0)
            return true;
        p = end ? end + 1 : NULL;
    }
    return false;
}

static const char pick_prefix[] = "kace:node=";

bool kace_slurm_pick_format(char *buf, size_t size, const char *node, const char *pick)
{
    int n = snprintf(buf, size, "%s%s,pick=%s", pick_prefix, node, pick);
    return n > 0 && (size_t)n < size;
}

bool kace_slurm_pick_parse(const char *text, char node[KACE_NAME_MAX], char pick[KACE_SLURM_PICK_MAX])
{
    const char *p = text ? strstr(text, pick_prefix) : NULL;
    if (!p)
        return false;
    p += sizeof pick_prefix - 1;
    const char *comma = strchr(p, ',');
    if (!comma || comma == p || (size_t)(comma - p) >= KACE_NAME_MAX || strncmp(comma, ",pick=", 6) != 0)
        return false;
    const char *t = comma + 6;
    size_t len = strcspn(t, " ;\n");
    if (len == 0 || len >= KACE_SLURM_PICK_MAX)
        return false;
    for (const char *q = p; q < comma; q++)
        if (isspace((unsigned char)*q))
            return false;
    memcpy(node, p, (size_t)(comma - p));
    node[comma - p] = '\0';
    memcpy(pick, t, len);
    pick[len] = '\0';
    return true;
}

static const char gpu_prefix[] = "kace:gpu=";

bool kace_slurm_gpu_format(char *buf, size_t size, int gpu)
{
    int n = snprintf(buf, size, "%s%d", gpu_prefix, gpu);
    return gpu >= 0 && n > 0 && (size_t)n < size;
}

int kace_slurm_gpu_parse(const char *text)
{
    const char *p = text ? strstr(text, gpu_prefix) : NULL;
    if (!p)
        return -1;
    p += sizeof gpu_prefix - 1;
    int gpu = 0, digits = 0;
    for (; isdigit((unsigned char)*p) && digits < 4; p++, digits++)
        gpu = gpu * 10 + (*p - '0');
    if (digits == 0 || digits == 4 || (*p && !isspace((unsigned char)*p) && *p != ';'))
        return -1;
    return gpu;
}

/* Parses "0-1,3" up to ')' (or the end) into a mask; 0 when malformed. */
static uint64_t index_list(const char *p)
{
    uint64_t mask = 0;
    while (*p && *p != ')') {
        char *end;
        errno = 0;
        long a = strtol(p, &end, 10), b = a;
        if (end == p || errno || a < 0)
            return 0;
        p = end;
        if (*p == '-') {
            b = strtol(p + 1, &end, 10);
            if (end == p + 1 || errno || b < a)
                return 0;
            p = end;
        }
        for (long i = a; i <= b && i < 64; i++)
            mask |= (uint64_t)1 << i;
        if (*p == ',')
            p++;
        else if (*p && *p != ')')
            return 0;
    }
    return mask;
}

uint64_t kace_slurm_gres_indices(const char *detail, const char *name)
{
    size_t name_len = strlen(name);
    uint64_t mask = 0;
    for (const char *p = detail; p && *p;) {
        /* One item: up to a ',' outside parentheses. */
        const char *q = p;
        int depth = 0;
        for (; *q && (depth > 0 || *q != ','); q++)
            depth += *q == '(' ? 1 : *q == ')' ? -1 : 0;
        if ((size_t)(q - p) > name_len && strncmp(p, name, name_len) == 0 &&
            (p[name_len] == ':' || p[name_len] == '(')) {
            const char *idx = strstr(p, "(IDX:");
            if (idx && idx < q)
                mask |= index_list(idx + 5);
        }
        p = *q ? q + 1 : q;
    }
    return mask;
}

int kace_slurm_constraint_matches(const char *expr, const char *features)
{
    if (!expr || !*expr)
        return 1;
    char op = 0;
    for (const char *p = expr; *p; p++) {
        char c = *p == ',' ? '&' : *p;
        if (c == '&' || c == '|') {
            if (op && op != c)
                return -1; /* mixed: Slurm's precedence is not kace's to guess */
            op = c;
        } else if (!isalnum((unsigned char)c) && c != '_' && c != '-' && c != '.') {
            return -1;
        }
    }
    bool any = false, all = true;
    for (const char *p = expr;;) {
        size_t n = strcspn(p, "&|,");
        if (n == 0)
            return -1; /* empty name: "a&&b", "|a" */
        bool has = kace_slurm_in_list(features, p, n);
        any = any || has;
        all = all && has;
        if (!p[n])
            break;
        p += n + 1;
    }
    return (op == '|' ? any : all) ? 1 : 0;
}

