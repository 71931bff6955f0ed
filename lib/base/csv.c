#include "csv.h"
#include "kace/meter.h"
#include "kace/workload_name.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kace_csv_init(kace_csv *csv, const char *data, size_t len, const char *origin)
{
    memset(csv, 0, sizeof *csv);
    csv->data = data;
    csv->len = len;
    csv->origin = origin ? origin : "<input>";
    csv->line = 1;
}

void kace_csv_release(kace_csv *csv)
{
    free(csv->fields);
    free(csv->field_line);
    free(csv->field_col);
    free(csv->buf);
    csv->fields = NULL;
    csv->field_line = csv->field_col = NULL;
    csv->buf = NULL;
}

static bool buf_push(kace_csv *csv, char c)
{
    if (csv->buf_len + 1 >= csv->buf_cap) {
        size_t cap = csv->buf_cap ? csv->buf_cap * 2 : 256;
        char *b = realloc(csv->buf, cap);
        if (!b)
            return false;
        csv->buf = b;
        csv->buf_cap = cap;
    }
    csv->buf[csv->buf_len++] = c;
    return true;
}

/* Field starts are kept as offsets while the buffer may still move. */
static bool field_start(kace_csv *csv, int line, int col)
{
    if (csv->n_fields == csv->cap_fields) {
        size_t cap = csv->cap_fields ? csv->cap_fields * 2 : 16;
        char **f = realloc(csv->fields, cap * sizeof *f);
        if (!f)
            return false;
        csv->fields = f;
        int *l = realloc(csv->field_line, cap * sizeof *l);
        if (!l)
            return false;
        csv->field_line = l;
        int *c = realloc(csv->field_col, cap * sizeof *c);
        if (!c)
            return false;
        csv->field_col = c;
        csv->cap_fields = cap;
    }
    csv->fields[csv->n_fields] = (char *)(uintptr_t)csv->buf_len;
    csv->field_line[csv->n_fields] = line;
    csv->field_col[csv->n_fields] = col;
    csv->n_fields++;
    return true;
}

kace_status kace_csv_next(kace_ctx *ctx, kace_csv *csv, bool *has_record)
{
    *has_record = false;
    /* Skip blank lines (and a UTF-8 byte-order mark at the very start). */
    if (csv->pos == 0 && csv->len >= 3 && memcmp(csv->data, "\xEF\xBB\xBF", 3) == 0)
        csv->pos = 3;
    /* Line ends: "\n", "\r\n" or a lone "\r" (old Mac files) each count once. */
    while (csv->pos < csv->len && (csv->data[csv->pos] == '\n' || csv->data[csv->pos] == '\r')) {
        bool crlf = csv->data[csv->pos] == '\r' && csv->pos + 1 < csv->len && csv->data[csv->pos + 1] == '\n';
        if (!crlf)
            csv->line++;
        csv->pos++;
    }
    /* Progress (kace/meter.h): the bytes read, every 256 KiB and at the end. */
    if (csv->pos - csv->metered >= 262144 || csv->pos >= csv->len) {
        kace_meter_add(ctx, (double)(csv->pos - csv->metered));
        csv->metered = csv->pos;
    }
    if (csv->pos >= csv->len)
        return KACE_OK;

    csv->n_fields = 0;
    csv->buf_len = 0;
    csv->record_line = csv->line;
    size_t line_start = csv->pos;
    int col = 1;
    bool done = false;
    while (!done) {
        if (!field_start(csv, csv->line, col))
            return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory reading %s", csv->origin);
        if (csv->pos < csv->len && csv->data[csv->pos] == '"') {
            int qline = csv->line, qcol = col;
            csv->pos++;
            for (;;) {
                if (csv->pos >= csv->len)
                    return kace_fail(ctx, KACE_ERR_PARSE,
                                     "%s:%d:%d: unterminated quoted field (expected a closing '\"')",
                                     csv->origin, qline, qcol);
                char c = csv->data[csv->pos++];
                if (c == '"') {
                    if (csv->pos < csv->len && csv->data[csv->pos] == '"') {
                        csv->pos++;
                    } else {
                        break;
                    }
                } else if (c == '\n') {
                    csv->line++;
                    line_start = csv->pos;
                }
                if (!buf_push(csv, c))
                    return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory reading %s", csv->origin);
            }
            if (csv->pos < csv->len && csv->data[csv->pos] != ',' && csv->data[csv->pos] != '\n' &&
                csv->data[csv->pos] != '\r')
                return kace_fail(ctx, KACE_ERR_PARSE,
                                 "%s:%d:%d: unexpected character after a closing quote (expected ',' or end of line)",
                                 csv->origin, csv->line, (int)(csv->pos - line_start) + 1);
        } else {
            while (csv->pos < csv->len) {
                char c = csv->data[csv->pos];
                if (c == ',' || c == '\n' || c == '\r')
                    break;
                if (c == '"')
                    return kace_fail(ctx, KACE_ERR_PARSE,
                                     "%s:%d:%d: quote inside an unquoted field (expected the whole field quoted)",
                                     csv->origin, csv->line, (int)(csv->pos - line_start) + 1);
                if (c == '\0')
                    return kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:%d: NUL byte (expected text)", csv->origin,
                                     csv->line, (int)(csv->pos - line_start) + 1);
                if (!buf_push(csv, c))
                    return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory reading %s", csv->origin);
                csv->pos++;
            }
        }
        if (!buf_push(csv, '\0'))
            return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory reading %s", csv->origin);
        if (csv->pos < csv->len && csv->data[csv->pos] == ',') {
            csv->pos++;
            col = (int)(csv->pos - line_start) + 1;
        } else {
            csv->record_terminated = false;
            if (csv->pos < csv->len && csv->data[csv->pos] == '\r') {
                csv->pos++;
                if (csv->pos >= csv->len || csv->data[csv->pos] != '\n') { /* a lone CR ends the line */
                    csv->line++;
                    csv->record_terminated = true;
                }
            }
            if (csv->pos < csv->len && csv->data[csv->pos] == '\n') {
                csv->pos++;
                csv->line++;
                csv->record_terminated = true;
            }
            done = true;
        }
    }
    for (size_t i = 0; i < csv->n_fields; i++)
        csv->fields[i] = csv->buf + (uintptr_t)csv->fields[i];
    *has_record = true;
    return KACE_OK;
}

kace_status kace_csv_fail(kace_ctx *ctx, const kace_csv *csv, size_t i, kace_status status, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line = i < csv->n_fields ? csv->field_line[i] : csv->record_line;
    int col = i < csv->n_fields ? csv->field_col[i] : 1;
    return kace_fail(ctx, status, "%s:%d:%d: %s", csv->origin, line, col, msg);
}

kace_status kace_csv_number(kace_ctx *ctx, const kace_csv *csv, size_t i, const char *column_name,
                            unsigned flags, double *out)
{
    if (i >= csv->n_fields)
        return kace_csv_fail(ctx, csv, csv->n_fields, KACE_ERR_PARSE,
                             "row has %zu fields, column '%s' is missing (expected a number)", csv->n_fields,
                             column_name);
    const char *s = csv->fields[i];
    while (*s == ' ')
        s++;
    if (*s == '\0') {
        if (flags & KACE_CSV_EMPTY_IS_MISSING) {
            *out = NAN;
            return KACE_OK;
        }
        return kace_csv_fail(ctx, csv, i, KACE_ERR_PARSE, "column '%s' is empty (expected a number)", column_name);
    }
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    while (end && *end == ' ')
        end++;
    if (end == s || *end != '\0')
        return kace_csv_fail(ctx, csv, i, KACE_ERR_PARSE, "column '%s': '%.40s' is not a number", column_name,
                             csv->fields[i]);
    if (!isfinite(v) || errno == ERANGE)
        return kace_csv_fail(ctx, csv, i, KACE_ERR_INVALID, "column '%s': '%.40s' is not a finite number",
                             column_name, csv->fields[i]);
    if ((flags & KACE_CSV_NONNEGATIVE) && v < 0)
        return kace_csv_fail(ctx, csv, i, KACE_ERR_INVALID, "column '%s': %g is negative (expected >= 0)",
                             column_name, v);
    *out = v;
    return KACE_OK;
}

kace_status kace_csv_int(kace_ctx *ctx, const kace_csv *csv, size_t i, const char *column_name, long lo, long hi,
                         long *out)
{
    if (i >= csv->n_fields)
        return kace_csv_fail(ctx, csv, csv->n_fields, KACE_ERR_PARSE,
                             "row has %zu fields, column '%s' is missing (expected an integer)", csv->n_fields,
                             column_name);
    const char *s = csv->fields[i];
    errno = 0;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno == ERANGE)
        return kace_csv_fail(ctx, csv, i, KACE_ERR_PARSE, "column '%s': '%.40s' is not an integer", column_name, s);
    if (v < lo || v > hi)
        return kace_csv_fail(ctx, csv, i, KACE_ERR_INVALID, "column '%s': %ld is out of range (expected %ld..%ld)",
                             column_name, v, lo, hi);
    *out = v;
    return KACE_OK;
}

kace_status kace_csv_name(kace_ctx *ctx, const kace_csv *csv, size_t i, const char *column_name, char *out,
                          size_t out_size)
{
    if (i >= csv->n_fields)
        return kace_csv_fail(ctx, csv, csv->n_fields, KACE_ERR_PARSE,
                             "row has %zu fields, column '%s' is missing (expected a name)", csv->n_fields,
                             column_name);
    const char *s = csv->fields[i];
    size_t n = strlen(s);
    if (n == 0)
        return kace_csv_fail(ctx, csv, i, KACE_ERR_PARSE, "column '%s' is empty (expected a name)", column_name);
    if (n >= out_size)
        return kace_csv_fail(ctx, csv, i, KACE_ERR_PARSE, "column '%s': name is %zu bytes long (at most %zu)",
                             column_name, n, out_size - 1);
    for (size_t j = 0; j < n; j++)
        if ((unsigned char)s[j] < 0x20)
            return kace_csv_fail(ctx, csv, i, KACE_ERR_PARSE,
                                 "column '%s': control character in name (expected printable text)", column_name);
    memcpy(out, s, n + 1);
    return KACE_OK;
}

kace_status kace_csv_workload_name(kace_ctx *ctx, const kace_csv *csv, size_t i, const char *column_name, char *out,
                                   size_t out_size)
{
    kace_status st = kace_csv_name(ctx, csv, i, column_name, out, out_size);
    if (st)
        return st;
    /* The field's column, and the byte within the name: a quoted field's
     * bytes are not where its copy's are. */
    char why[300];
    if (kace_workload_name_ok(out, NULL, why, sizeof why))
        return KACE_OK;
    return kace_csv_fail(ctx, csv, i, KACE_ERR_PARSE, "column '%s': %s (a workload name is %s)", column_name, why,
                         KACE_WORKLOAD_NAME_RULE);
}

kace_status kace_read_file(kace_ctx *ctx, const char *path, char **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return kace_fail(ctx, KACE_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    kace_status st = KACE_OK;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    for (;;) {
        if (n + 1 >= cap) {
            if (cap >= ((size_t)1 << 30)) {
                st = kace_fail(ctx, KACE_ERR_IO, "%s: file is larger than 1 GiB", path);
                goto done;
            }
            char *b = realloc(buf, cap * 2);
            if (!b) {
                st = kace_fail(ctx, KACE_ERR_NOMEM, "%s: out of memory", path);
                goto done;
            }
            buf = b;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        st = kace_fail(ctx, KACE_ERR_IO, "%s: read error: %s", path, strerror(errno));
        goto done;
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    buf = NULL;
done:
    free(buf);
    fclose(f);
    return st;
}
