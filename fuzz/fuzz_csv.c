/* libFuzzer harness for the internal CSV reader (lib/base/csv.c): kace_csv_next
 * over the whole input, then kace_csv_number / kace_csv_int / kace_csv_name on
 * every field of every record (and one index past the last field).
 *
 * Checks, beyond the sanitizers:
 *  - each record has >= 1 field; fields are NUL-terminated inside the
 *    reader's buffer; field lines/columns are >= 1 and never go backwards;
 *  - after a complete read, the reader counted every '\n' of the input;
 *  - re-encoding the records with every field quoted and reading that again
 *    gives the same fields (the reader is a faithful RFC 4180 parser);
 *  - number: success gives a finite value (>= 0 with KACE_CSV_NONNEGATIVE,
 *    NaN only for an empty field with KACE_CSV_EMPTY_IS_MISSING) that agrees
 *    with strtod; int: success gives a value in [lo, hi]; name: success
 *    copies the field exactly and it is a usable name;
 *  - every failure leaves a message "<origin>:<line>:<col>: ..." naming the
 *    field's own line and column. */
#include <errno.h>
#include <limits.h>
#include <math.h>

#include "base/csv.h"
#include "fuzz_common.h"

static const char origin[] = "fuzz/input.csv";

static void check_field_error(const kace_ctx *ctx, kace_status st, const kace_csv *csv, size_t i)
{
    fuzz_check_failure(ctx, st, origin);
    if (st == KACE_ERR_NOMEM)
        return;
    char want[64];
    int line = i < csv->n_fields ? csv->field_line[i] : csv->record_line;
    int col = i < csv->n_fields ? csv->field_col[i] : 1;
    snprintf(want, sizeof want, "%s:%d:%d: ", origin, line, col);
    FUZZ_CHECK(strncmp(kace_errmsg(ctx), want, strlen(want)) == 0, "expected '%s', got: %s", want,
               kace_errmsg(ctx));
}

static void check_field(kace_ctx *ctx, const kace_csv *csv, size_t i)
{
    const char *f = i < csv->n_fields ? csv->fields[i] : NULL;
    static const unsigned flag_sets[] = {0, KACE_CSV_EMPTY_IS_MISSING, KACE_CSV_NONNEGATIVE,
                                         KACE_CSV_EMPTY_IS_MISSING | KACE_CSV_NONNEGATIVE};
    bool blank = false;
    if (f) {
        const char *s = f;
        while (*s == ' ')
            s++;
        blank = *s == '\0';
    }
    for (size_t k = 0; k < sizeof flag_sets / sizeof *flag_sets; k++) {
        unsigned flags = flag_sets[k];
        double v = 12345.0;
        kace_status st = kace_csv_number(ctx, csv, i, "col", flags, &v);
        if (st != KACE_OK) {
            check_field_error(ctx, st, csv, i);
            FUZZ_CHECK(v == 12345.0, "failed kace_csv_number wrote its output");
            FUZZ_CHECK(!(blank && (flags & KACE_CSV_EMPTY_IS_MISSING)), "blank field not read as missing");
            continue;
        }
        FUZZ_CHECK(f != NULL, "number read from a field that does not exist");
        if (isnan(v)) {
            FUZZ_CHECK(blank && (flags & KACE_CSV_EMPTY_IS_MISSING), "NaN from '%s'", f);
            continue;
        }
        FUZZ_CHECK(!blank, "number from a blank field");
        FUZZ_CHECK(isfinite(v), "non-finite %g from '%s'", v, f);
        FUZZ_CHECK(!(flags & KACE_CSV_NONNEGATIVE) || v >= 0, "negative %g with KACE_CSV_NONNEGATIVE", v);
        double ref = strtod(f, NULL);
        FUZZ_CHECK(ref == v, "'%s' read as %.17g, strtod says %.17g", f, v, ref);
    }

    static const long ranges[][2] = {{0, 1}, {1, 100}, {-1000000000L, 1000000000L}, {LONG_MIN, LONG_MAX}};
    for (size_t k = 0; k < sizeof ranges / sizeof *ranges; k++) {
        long v = 777;
        kace_status st = kace_csv_int(ctx, csv, i, "col", ranges[k][0], ranges[k][1], &v);
        if (st != KACE_OK) {
            check_field_error(ctx, st, csv, i);
            FUZZ_CHECK(v == 777, "failed kace_csv_int wrote its output");
            continue;
        }
        FUZZ_CHECK(f != NULL, "integer read from a field that does not exist");
        FUZZ_CHECK(v >= ranges[k][0] && v <= ranges[k][1], "%ld out of [%ld, %ld]", v, ranges[k][0], ranges[k][1]);
        FUZZ_CHECK(strtol(f, NULL, 10) == v, "'%s' read as %ld", f, v);
    }

    static const size_t sizes[] = {1, 2, 8, 128};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        char out[128 + 8];
        memset(out, 'X', sizeof out);
        kace_status st = kace_csv_name(ctx, csv, i, "col", out, sizes[k]);
        if (st != KACE_OK) {
            check_field_error(ctx, st, csv, i);
            FUZZ_CHECK(f == NULL || !fuzz_is_name(f, sizes[k]), "usable name '%s' refused", f);
            continue;
        }
        FUZZ_CHECK(f != NULL, "name read from a field that does not exist");
        FUZZ_CHECK(fuzz_is_name(out, sizes[k]), "unusable name accepted");
        FUZZ_CHECK(strcmp(out, f) == 0, "name '%s' copied as '%s'", f, out);
        for (size_t j = sizes[k]; j < sizeof out; j++)
            FUZZ_CHECK(out[j] == 'X', "kace_csv_name wrote past out_size %zu", sizes[k]);
    }
}

typedef struct record_list {
    char *text; /* re-encoded records, every field quoted */
    size_t len, cap;
    size_t n_records;
    char **fields; /* copies, in order, with a NULL after each record */
    size_t n, capf;
} record_list;

static void rl_put(record_list *rl, const char *s, size_t n)
{
    if (rl->len + n + 1 > rl->cap) {
        size_t cap = (rl->cap + n + 1) * 2;
        char *p = realloc(rl->text, cap);
        if (!p)
            abort();
        rl->text = p;
        rl->cap = cap;
    }
    memcpy(rl->text + rl->len, s, n);
    rl->len += n;
}

static void rl_field(record_list *rl, char *copy)
{
    if (rl->n == rl->capf) {
        rl->capf = rl->capf ? rl->capf * 2 : 64;
        char **p = realloc(rl->fields, rl->capf * sizeof *p);
        if (!p)
            abort();
        rl->fields = p;
    }
    rl->fields[rl->n++] = copy;
}

static void rl_add(record_list *rl, const kace_csv *csv)
{
    for (size_t i = 0; i < csv->n_fields; i++) {
        const char *f = csv->fields[i];
        if (i)
            rl_put(rl, ",", 1);
        rl_put(rl, "\"", 1);
        for (const char *p = f; *p; p++)
            rl_put(rl, *p == '"' ? "\"\"" : p, *p == '"' ? 2 : 1);
        rl_put(rl, "\"", 1);
        char *copy = strdup(f);
        if (!copy)
            abort();
        rl_field(rl, copy);
    }
    rl_put(rl, "\n", 1);
    rl_field(rl, NULL);
    rl->n_records++;
}

static void rl_free(record_list *rl)
{
    for (size_t i = 0; i < rl->n; i++)
        free(rl->fields[i]);
    free(rl->fields);
    free(rl->text);
}

/* Reads data to the end; records go to rl when it is given. */
static kace_status read_all(kace_ctx *ctx, const char *data, size_t len, record_list *rl, bool check_fields,
                            kace_csv *csv)
{
    kace_csv_init(csv, data, len, origin);
    kace_status st;
    bool has = false;
    int last_line = 0;
    while ((st = kace_csv_next(ctx, csv, &has)) == KACE_OK && has) {
        FUZZ_CHECK(csv->n_fields >= 1, "record without fields");
        FUZZ_CHECK(csv->record_line >= 1 && csv->record_line >= last_line, "record line %d after %d",
                   csv->record_line, last_line);
        last_line = csv->record_line;
        FUZZ_CHECK(csv->line >= csv->record_line, "reader line %d before record line %d", csv->line,
                   csv->record_line);
        for (size_t i = 0; i < csv->n_fields; i++) {
            const char *f = csv->fields[i];
            FUZZ_CHECK(f >= csv->buf && f < csv->buf + csv->buf_len, "field %zu outside the buffer", i);
            FUZZ_CHECK(memchr(f, '\0', (size_t)(csv->buf + csv->buf_len - f)) != NULL, "field %zu unterminated",
                       i);
            FUZZ_CHECK(csv->field_col[i] >= 1, "column %d", csv->field_col[i]);
            FUZZ_CHECK(csv->field_line[i] >= csv->record_line && csv->field_line[i] <= csv->line,
                       "field line %d outside record lines %d..%d", csv->field_line[i], csv->record_line, csv->line);
            if (i) {
                FUZZ_CHECK(csv->field_line[i] >= csv->field_line[i - 1], "field lines go backwards");
                FUZZ_CHECK(csv->field_line[i] > csv->field_line[i - 1] ||
                               csv->field_col[i] > csv->field_col[i - 1],
                           "field %zu at %d:%d not after field %zu at %d:%d", i, csv->field_line[i],
                           csv->field_col[i], i - 1, csv->field_line[i - 1], csv->field_col[i - 1]);
            }
        }
        if (check_fields) {
            for (size_t i = 0; i <= csv->n_fields; i++)
                check_field(ctx, csv, i);
        }
        if (rl)
            rl_add(rl, csv);
    }
    return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kace_ctx *ctx = kace_ctx_new();
    char *copy = fuzz_copy(data, size);
    if (!ctx || !copy) {
        kace_ctx_free(&ctx);
        free(copy);
        return 0;
    }
    record_list rl;
    memset(&rl, 0, sizeof rl);
    kace_csv csv;
    kace_status st = read_all(ctx, copy, size, &rl, true, &csv);
    if (st != KACE_OK) {
        fuzz_check_failure(ctx, st, origin);
    } else {
        /* "\n" and "\r\n" end a line; a lone "\r" does too outside quotes. */
        int newlines = 0, lone_cr = 0;
        for (size_t i = 0; i < size; i++) {
            newlines += copy[i] == '\n';
            lone_cr += copy[i] == '\r' && (i + 1 == size || copy[i + 1] != '\n');
        }
        FUZZ_CHECK(csv.line >= 1 + newlines && csv.line <= 1 + newlines + lone_cr,
                   "reader ended on line %d, the input has %d newlines and %d lone CRs", csv.line, newlines, lone_cr);
        /* Quote everything and read it back: the same records and fields. */
        kace_csv again;
        size_t at = 0, rec = 0;
        kace_csv_init(&again, rl.text ? rl.text : "", rl.len, origin);
        bool has = false;
        while ((st = kace_csv_next(ctx, &again, &has)) == KACE_OK && has) {
            rec++;
            for (size_t i = 0; i < again.n_fields; i++, at++) {
                FUZZ_CHECK(at < rl.n && rl.fields[at], "re-read record %zu has more fields", rec);
                FUZZ_CHECK(strcmp(rl.fields[at], again.fields[i]) == 0, "field '%s' re-read as '%s'", rl.fields[at],
                           again.fields[i]);
            }
            FUZZ_CHECK(at < rl.n && rl.fields[at] == NULL, "re-read record %zu has fewer fields", rec);
            at++;
        }
        FUZZ_CHECK(st == KACE_OK, "quoted re-encoding does not parse: %s", kace_errmsg(ctx));
        FUZZ_CHECK(rec == rl.n_records, "%zu records re-read as %zu", rl.n_records, rec);
        kace_csv_release(&again);
    }
    kace_csv_release(&csv);
    rl_free(&rl);
    free(copy);
    kace_ctx_free(&ctx);
    return 0;
}
