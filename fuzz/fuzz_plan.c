/* libFuzzer harness for campaign plans (lib/measure/campaign.c) and MPS percentage
 * lists (kace_mps_pct_parse, used by --mps-pct and the plans' '@' lists).
 *
 * Checks, beyond the sanitizers:
 *  - a parsed plan has 1..KACE_PLAN_MAX_ENTRIES entries; each has 1..8
 *    members with usable names, percentages 1..100 (all 100 under
 *    time-slicing), a set name, a line >= 1, and a repetition below
 *    max_repeat; repetitions never go down along the plan;
 *  - no two entries have the same identity (kace_plan_entry_key);
 *  - a failure leaves *out NULL and a message "plan:<line>:<col>: ...";
 *  - a percentage list that parses holds 1..8 values in 1..100, and the
 *    same list with k set to that count parses to the same values. */
#include "fuzz_common.h"
#include "kace/campaign.h"
#include "kace/mps.h"

static const char origin[] = "plan";

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void check_plan(const kace_plan *p)
{
    FUZZ_CHECK(p->n >= 1 && p->n <= KACE_PLAN_MAX_ENTRIES, "%zu entries", p->n);
    char **keys = calloc(p->n, sizeof *keys);
    FUZZ_CHECK(keys != NULL, "out of memory");
    int last_rep = 0;
    for (size_t i = 0; i < p->n; i++) {
        const kace_plan_entry *e = &p->entries[i];
        const kace_measure_spec *s = &e->spec;
        FUZZ_CHECK(s->k >= 1 && s->k <= KACE_MAX_K, "entry %zu: k %d", i, s->k);
        FUZZ_CHECK(e->line >= 1, "entry %zu: line %d", i, e->line);
        FUZZ_CHECK(s->repetition >= last_rep && s->repetition < p->max_repeat, "entry %zu: repetition %d", i,
                   s->repetition);
        last_rep = s->repetition;
        FUZZ_CHECK(fuzz_is_name(s->set, sizeof s->set), "entry %zu: bad set", i);
        for (int m = 0; m < s->k; m++) {
            FUZZ_CHECK(fuzz_is_name(s->workload[m], KACE_NAME_MAX), "entry %zu: bad name", i);
            FUZZ_CHECK(!strpbrk(s->workload[m], " \t@,#"), "entry %zu: name '%s'", i, s->workload[m]);
            FUZZ_CHECK(s->mps_pct[m] >= 1 && s->mps_pct[m] <= 100, "entry %zu: pct %d", i, s->mps_pct[m]);
            FUZZ_CHECK(!s->timeslice || s->mps_pct[m] == 100, "entry %zu: pct %d under time-slicing", i,
                       s->mps_pct[m]);
        }
        keys[i] = malloc(KACE_MAX_K * (KACE_NAME_MAX + 8) + 320);
        FUZZ_CHECK(keys[i] != NULL, "out of memory");
        kace_plan_entry_key(e, keys[i], KACE_MAX_K * (KACE_NAME_MAX + 8) + 320);
    }
    qsort(keys, p->n, sizeof *keys, cmp_str);
    for (size_t i = 1; i < p->n; i++)
        FUZZ_CHECK(strcmp(keys[i], keys[i - 1]) != 0, "duplicate entry %s", keys[i]);
    for (size_t i = 0; i < p->n; i++)
        free(keys[i]);
    free(keys);
}

static void check_pct_list(kace_ctx *ctx, const char *text)
{
    int pct[KACE_MAX_K], n = -1;
    kace_status st = kace_mps_pct_parse(ctx, text, "--mps-pct", 0, KACE_MAX_K, pct, &n);
    if (st != KACE_OK) {
        fuzz_check_failure(ctx, st, "--mps-pct");
        return;
    }
    FUZZ_CHECK(n >= 1 && n <= KACE_MAX_K, "%d percentages", n);
    for (int i = 0; i < n; i++)
        FUZZ_CHECK(pct[i] >= 1 && pct[i] <= 100, "percentage %d", pct[i]);
    int again[KACE_MAX_K], n2 = -1;
    FUZZ_CHECK(kace_mps_pct_parse(ctx, text, "--mps-pct", n, KACE_MAX_K, again, &n2) == KACE_OK && n2 == n,
               "the list does not parse again with k=%d", n);
    FUZZ_CHECK(memcmp(pct, again, (size_t)n * sizeof *pct) == 0, "different values the second time");
    if (n > 1)
        FUZZ_CHECK(kace_mps_pct_parse(ctx, text, "--mps-pct", n - 1, KACE_MAX_K, again, NULL) == KACE_ERR_PARSE,
                   "a list of %d accepted for %d workloads", n, n - 1);
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
    kace_plan *plan = (kace_plan *)copy; /* must be overwritten */
    kace_status st = kace_plan_parse(ctx, copy, size, origin, &plan);
    if (st == KACE_OK) {
        FUZZ_CHECK(plan != NULL, "success without a plan");
        check_plan(plan);
        kace_plan_free(&plan);
    } else {
        FUZZ_CHECK(plan == NULL, "failure left a plan");
        fuzz_check_failure(ctx, st, origin);
    }
    /* The same bytes as a percentage list, up to the first NUL. */
    char *text = malloc(size + 1);
    if (text) {
        memcpy(text, data, size);
        text[size] = '\0';
        check_pct_list(ctx, text);
        free(text);
    }
    free(copy);
    kace_ctx_free(&ctx);
    return 0;
}
