/* libFuzzer harness for workload catalogs (lib/measure/catalog.c) and, the
 * same bytes read as an old plan, for plan extensions (lib/measure/plan_make.c).
 *
 * Checks, beyond the sanitizers:
 *  - a catalog that parses has entries with names that follow the workload
 *    name rule, none twice, a known kind, 1.. words ending in NULL, the
 *    first not empty, lines that grow and a text without a line end;
 *  - each entry's words, written again single-quoted, read back the same;
 *  - a failure leaves the catalog as it was (empty) and a message
 *    "catalog:<line>:<col>: ..."; with KACE_CATALOG_LEAVE_OUT nothing fails
 *    for a bad line, the entries are the strict ones when those parse, and
 *    every line left out has such a message;
 *  - an extended plan parses, starts with the old text (line ends "\n",
 *    last ones dropped) and names the old plan on failure. */
#include "fuzz_common.h"
#include "kace/campaign.h"
#include "kace/catalog.h"
#include "kace/plan_make.h"
#include "kace/workload_name.h"

static const char origin[] = "catalog";

static void check_message(const char *msg)
{
    size_t n = strlen(origin);
    FUZZ_CHECK(strncmp(msg, origin, n) == 0 && msg[n] == ':', "message without '%s:': %s", origin, msg);
    const char *p = fuzz_skip_number(msg + n + 1);
    p = p ? fuzz_skip_number(p) : NULL;
    FUZZ_CHECK(p && *p == ' ' && p[1] != '\0', "message without '%s:line:col: ': %s", origin, msg);
}

static void check_entries(const kace_catalog *cat)
{
    int last_line = 0;
    for (size_t i = 0; i < cat->n; i++) {
        const kace_catalog_entry *e = &cat->entries[i];
        FUZZ_CHECK(kace_workload_name_ok(e->name, NULL, NULL, 0), "entry %zu: bad name", i);
        for (size_t j = 0; j < i; j++)
            FUZZ_CHECK(strcmp(cat->entries[j].name, e->name) != 0, "name %s twice", e->name);
        FUZZ_CHECK(e->kind >= KACE_CATALOG_CUDA && e->kind <= KACE_CATALOG_CMD, "entry %zu: kind %d", i,
                   (int)e->kind);
        FUZZ_CHECK(e->argc >= 1 && e->argv && e->argv[e->argc] == NULL, "entry %zu: %d words", i, e->argc);
        FUZZ_CHECK(e->argv[0][0] != '\0', "entry %zu: empty program", i);
        FUZZ_CHECK(e->line > last_line, "entry %zu: line %d after %d", i, e->line, last_line);
        last_line = e->line;
        FUZZ_CHECK(e->text && !strchr(e->text, '\n'), "entry %zu: text", i);
        FUZZ_CHECK(e->origin && strcmp(e->origin, origin) == 0, "entry %zu: origin", i);
    }
}

/* "name kind 'w1' 'w2' ...\n" parses to the same words. */
static void check_round_trip(kace_ctx *ctx, const kace_catalog_entry *e)
{
    size_t cap = strlen(e->name) + 16;
    for (int w = 0; w < e->argc; w++)
        cap += 5 * strlen(e->argv[w]) + 3;
    char *line = malloc(cap), *p = line;
    FUZZ_CHECK(line != NULL, "out of memory");
    p += sprintf(p, "%s %s", e->name, kace_catalog_kind_name(e->kind));
    for (int w = 0; w < e->argc; w++) {
        *p++ = ' ';
        *p++ = '\'';
        for (const char *c = e->argv[w]; *c; c++) {
            if (*c == '\'') {
                memcpy(p, "'\"'\"'", 5); /* close, a quoted quote, open again */
                p += 5;
            } else {
                *p++ = *c;
            }
        }
        *p++ = '\'';
    }
    *p++ = '\n';
    kace_catalog again = {0};
    kace_status st = kace_catalog_parse(ctx, &again, line, (size_t)(p - line), origin, NULL, 0);
    FUZZ_CHECK(st == KACE_OK && again.n == 1, "entry %s written again does not parse: %s", e->name,
               kace_errmsg(ctx));
    FUZZ_CHECK(again.entries[0].argc == e->argc, "entry %s: %d words, then %d", e->name, e->argc,
               again.entries[0].argc);
    for (int w = 0; w < e->argc; w++)
        FUZZ_CHECK(strcmp(again.entries[0].argv[w], e->argv[w]) == 0, "entry %s: word %d changed", e->name, w);
    kace_catalog_free(&again);
    free(line);
}

static void check_catalog(kace_ctx *ctx, const char *copy, size_t size)
{
    kace_catalog strict = {0}, lenient = {0};
    kace_status st = kace_catalog_parse(ctx, &strict, copy, size, origin, NULL, 0);
    if (st == KACE_OK) {
        check_entries(&strict);
        FUZZ_CHECK(strict.n_left_out == 0, "strict mode left lines out");
        for (size_t i = 0; i < strict.n && i < 8; i++)
            check_round_trip(ctx, &strict.entries[i]);
    } else {
        FUZZ_CHECK(strict.n == 0 && strict.entries == NULL && strict.n_left_out == 0, "failure changed the catalog");
        if (st == KACE_ERR_PARSE)
            check_message(kace_errmsg(ctx));
        else
            fuzz_check_failure(ctx, st, origin);
    }
    kace_status st2 = kace_catalog_parse(ctx, &lenient, copy, size, origin, NULL, KACE_CATALOG_LEAVE_OUT);
    FUZZ_CHECK(st2 != KACE_ERR_PARSE, "a bad line failed under KACE_CATALOG_LEAVE_OUT: %s", kace_errmsg(ctx));
    if (st2 == KACE_OK) {
        check_entries(&lenient);
        for (size_t i = 0; i < lenient.n_left_out; i++)
            check_message(lenient.left_out[i]);
        FUZZ_CHECK(st != KACE_ERR_PARSE || lenient.n_left_out > 0, "strict failed, nothing left out");
        if (st == KACE_OK) {
            FUZZ_CHECK(lenient.n == strict.n && lenient.n_left_out == 0, "strict and lenient differ");
            for (size_t i = 0; i < strict.n; i++)
                FUZZ_CHECK(strcmp(lenient.entries[i].name, strict.entries[i].name) == 0, "entry %zu differs", i);
        }
    }
    kace_catalog_free(&strict);
    kace_catalog_free(&lenient);
}

static void check_extend(kace_ctx *ctx, const char *copy, size_t size)
{
    static const char *const names[] = {"a", "b", "c", "d", "e"};
    char *text = (char *)copy; /* must be overwritten */
    size_t len = 1;
    kace_status st = kace_plan_extend(ctx, copy, size, "plan", names, 5, &text, &len);
    if (st != KACE_OK) {
        FUZZ_CHECK(text == NULL && len == 0, "failure left a text");
        fuzz_check_failure(ctx, st, "plan");
        return;
    }
    FUZZ_CHECK(text != NULL && strlen(text) == len, "text of %zu bytes", len);
    kace_plan *plan = NULL;
    FUZZ_CHECK(kace_plan_parse(ctx, text, len, "plan", &plan) == KACE_OK, "extended plan does not parse: %s",
               kace_errmsg(ctx));
    kace_plan_free(&plan);
    /* The old text, its line ends "\n", comes first. */
    size_t j = 0;
    for (size_t i = 0; i < size; i++) {
        if (copy[i] == '\r' && i + 1 < size && copy[i + 1] == '\n')
            continue;
        char want = copy[i] == '\r' ? '\n' : copy[i];
        if (j == len || text[j] != want) {
            /* Only the last line ends may differ (dropped, then one "\n"). */
            for (size_t k = i; k < size; k++)
                FUZZ_CHECK(copy[k] == '\n' || copy[k] == '\r', "old text changed at byte %zu", i);
            break;
        }
        j++;
    }
    free(text);
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
    check_catalog(ctx, copy, size);
    check_extend(ctx, copy, size);
    free(copy);
    kace_ctx_free(&ctx);
    return 0;
}
