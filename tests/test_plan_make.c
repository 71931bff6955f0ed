/* The device campaign's plan maker (include/kace/plan_make.h): the goldens'
 * texts for the same names, byte for byte (the same names must give the same
 * plan on every call), plans that parse and measure every workload alone at
 * 100% MPS once, extensions that keep the old text (a plan stored by the
 * removed scripts/device/plan.py included) and pair each added workload
 * enough, and clear refusals.
 *
 * tests/data/plans/README.md says which golden is kace plan's own output
 * and which is an old stored plan to extend, and how each was made. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/campaign.h"
#include "kace/catalog.h"
#include "kace/plan_make.h"

#define SOURCE_ROOT KACE_TEST_DATA "/../.."
#define PLANS KACE_TEST_DATA "/plans/"

/* The plan for alpha beta gamma (all three in a split grid, so each alone at
 * every share), and what extending it with delta adds. */
static const char three_plan[] =
    "# written by kace plan from 3 workloads (catalog order)\n"
    "workloads alpha beta gamma\n"
    "pairs   # 3 workloads: every pair (3)\n"
    "run alpha beta gamma\n"
    "splits 10 30 50 70 90 on alpha beta\n"
    "splits 10 30 50 70 90 on beta gamma\n"
    "repeat 3   # run-to-run spread\n"
    "run alpha beta\n"
    "run beta gamma\n"
    "run gamma alpha\n"
    "run alpha gamma\n"
    "run beta alpha\n"
    "run gamma beta\n"
    "repeat 1\n"
    "mode timeslice   # the same pairs without MPS, to compare\n"
    "run alpha beta\n"
    "run beta gamma\n"
    "run gamma alpha\n"
    "mode mps   # each grid workload alone at a share: its exclusive-throughput curve\n"
    "run alpha @ 10\n"
    "run alpha @ 30\n"
    "run alpha @ 50\n"
    "run alpha @ 70\n"
    "run alpha @ 90\n"
    "run alpha @ 100\n"
    "run beta @ 10\n"
    "run beta @ 30\n"
    "run beta @ 50\n"
    "run beta @ 70\n"
    "run beta @ 90\n"
    "run beta @ 100\n"
    "run gamma @ 10\n"
    "run gamma @ 30\n"
    "run gamma @ 50\n"
    "run gamma @ 70\n"
    "run gamma @ 90\n"
    "run gamma @ 100\n";
/* What extending it with delta adds. */
static const char three_delta[] =
    "# extended by kace plan: 1 workload profiled after the plan was made, each in >= 3 pairs and alone "
    "at 100% MPS\n"
    "workloads delta\n"
    "repeat 1\n"
    "mode mps\n"
    "run delta alpha\n"
    "run delta beta\n"
    "run delta gamma\n"
    "run delta @ 100\n";

static char *make(kace_ctx *ctx, const char *const *names, size_t n)
{
    char *text = NULL;
    size_t len = 0;
    assert_kace_ok(ctx, kace_plan_make(ctx, names, n, &text, &len));
    assert_non_null(text);
    assert_int_equal(strlen(text), len);
    return text;
}

static char *extend(kace_ctx *ctx, const char *old, const char *const *names, size_t n)
{
    char *text = NULL;
    size_t len = 0;
    assert_kace_ok(ctx, kace_plan_extend(ctx, old, strlen(old), "old.plan", names, n, &text, &len));
    assert_non_null(text);
    assert_int_equal(strlen(text), len);
    return text;
}

static kace_plan *parse(kace_ctx *ctx, const char *text)
{
    kace_plan *plan = NULL;
    assert_kace_ok(ctx, kace_plan_parse(ctx, text, strlen(text), "made", &plan));
    return plan;
}

static void test_three_workloads_give_the_known_text(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    const char *names[] = {"alpha", "beta", "gamma", "delta"};
    char *plan = make(ctx, names, 3);
    assert_string_equal(plan, three_plan);
    char *more = extend(ctx, plan, names, 4);
    assert_memory_equal(more, three_plan, strlen(three_plan));
    assert_string_equal(more + strlen(three_plan), three_delta);
    /* Extended again with the same names: nothing to add, the same text. */
    char *same = extend(ctx, more, names, 4);
    assert_string_equal(same, more);
    free(plan);
    free(more);
    free(same);
    kace_ctx_free(&ctx);
}

/* The 12 workloads of workloads/catalog.txt, in its order. */
static kace_catalog catalog_names(kace_ctx *ctx, const char **names)
{
    kace_catalog cat = {0};
    assert_kace_ok(ctx, kace_catalog_load(ctx, &cat, SOURCE_ROOT "/workloads/catalog.txt", NULL, 0));
    assert_int_equal(cat.n, 12);
    for (size_t i = 0; i < cat.n; i++)
        names[i] = cat.entries[i].name;
    return cat;
}

/* Pairs at 100/100 MPS in plan, each once (repetition 0). */
static size_t full_share_pairs(const kace_plan *plan)
{
    size_t n = 0;
    for (size_t i = 0; i < plan->n; i++) {
        const kace_measure_spec *s = &plan->entries[i].spec;
        n += s->k == 2 && !s->timeslice && s->repetition == 0 && s->mps_pct[0] == 100 && s->mps_pct[1] == 100;
    }
    return n;
}

/* text with its `occur N seed S` line's seed made seed, parsed: its pairs at 100/100. */
static size_t pairs_with_seed(kace_ctx *ctx, const char *text, long seed)
{
    const char *at = strstr(text, "\noccur ");
    assert_non_null(at);
    at = strstr(at, " seed ");
    assert_non_null(at);
    at += strlen(" seed ");
    const char *end = at + strspn(at, "0123456789");
    size_t len = strlen(text) + 32;
    char *copy = malloc(len);
    assert_non_null(copy);
    snprintf(copy, len, "%.*s%ld%s", (int)(at - text), text, seed, end);
    kace_plan *plan = parse(ctx, copy);
    size_t n = full_share_pairs(plan);
    kace_plan_free(&plan);
    free(copy);
    return n;
}

/* The occur seed is the one of 1..64 whose plan measures the fewest pairs
 * at 100/100 MPS, the lowest of those tied; the same names, the same text. */
static void test_the_occur_seed_plans_the_fewest_pairs(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    const char *names[12];
    kace_catalog cat = catalog_names(ctx, names);
    char *text = make(ctx, names, 12), *again = make(ctx, names, 12);
    assert_string_equal(text, again);
    long chosen = 0;
    const char *occur = strstr(text, "\noccur 5 seed ");
    assert_non_null(occur);
    assert_int_equal(sscanf(occur, "\noccur 5 seed %ld", &chosen), 1);
    size_t best = pairs_with_seed(ctx, text, chosen);
    for (long seed = 1; seed <= 64; seed++) {
        size_t n = pairs_with_seed(ctx, text, seed);
        if (n < best || (n == best && seed < chosen))
            fail_msg("seed %ld plans %zu pairs at 100/100, seed %ld (chosen) %zu", seed, n, chosen, best);
    }
    /* Seed 1, plan.py's, planned 37; the comment states the count. */
    assert_true(best < pairs_with_seed(ctx, text, 1));
    assert_true(best >= 30);
    char said[64];
    snprintf(said, sizeof said, ": %zu pairs at 100/100, the fewest of seeds 1..64\n", best);
    assert_non_null(strstr(occur, said));
    free(text);
    free(again);
    kace_catalog_free(&cat);
    kace_ctx_free(&ctx);
}

static void test_the_catalog_plan_parses_and_holds_the_dataset(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    const char *names[12];
    kace_catalog cat = catalog_names(ctx, names);
    char *text = make(ctx, names, 12);
    kace_plan *plan = parse(ctx, text);
    assert_int_equal(plan->n_workloads, 12);
    size_t pairs = 0, triples = 0, solo = 0, sliced = 0, split = 0;
    int alone100[12] = {0};
    for (size_t i = 0; i < plan->n; i++) {
        const kace_measure_spec *s = &plan->entries[i].spec;
        if (s->repetition > 0)
            continue;
        if (s->timeslice)
            sliced++;
        else if (s->k == 3)
            triples++;
        else if (s->k == 1) {
            solo++;
            for (size_t w = 0; w < 12; w++)
                alone100[w] += s->mps_pct[0] == 100 && strcmp(s->workload[0], names[w]) == 0;
        }
        else if (s->mps_pct[0] != 100)
            split++;
        else
            pairs++;
    }
    /* >= 30 pairs: occur's, the spread's (seed 1 gave 37 in all). */
    assert_true(pairs >= 30 && pairs < 37);
    assert_int_equal(triples, 10);
    assert_int_equal(sliced, 3);
    assert_int_equal(split, 2 * 5);
    /* The 4 grid workloads at 6 shares, the 8 others alone at 100% only. */
    assert_int_equal(solo, 4 * 6 + 8);
    for (size_t w = 0; w < 12; w++)
        if (alone100[w] != 1)
            fail_msg("%s alone at 100%% MPS %d times, expected once", names[w], alone100[w]);
    kace_plan_free(&plan);
    free(text);
    kace_catalog_free(&cat);
    kace_ctx_free(&ctx);
}

/* Every pair "run A B" after the last `workloads` line of text: each added
 * name (names[first..n)) is in at least need of them, and no pair is there
 * twice; each is alone at 100% MPS ("run A @ 100") once. */
static void check_added_pairs(const char *text, const char *const *names, size_t first, size_t n, int need)
{
    const char *tail = text, *p;
    while ((p = strstr(tail, "\nworkloads ")))
        tail = p + 1;
    int count[64] = {0}, alone[64] = {0};
    char seen[64][64] = {{0}};
    for (p = strstr(tail, "\nrun "); p; p = strstr(p + 1, "\nrun ")) {
        char a[64], b[64], pct[64];
        assert_int_equal(sscanf(p + 5, "%63s %63s", a, b), 2);
        if (strcmp(b, "@") == 0) {
            assert_int_equal(sscanf(p + 5, "%63s @ %63s", a, pct), 2);
            assert_string_equal(pct, "100");
            for (size_t i = 0; i < n; i++)
                alone[i] += strcmp(names[i], a) == 0;
            continue;
        }
        size_t ia = n, ib = n;
        for (size_t i = 0; i < n; i++) {
            if (strcmp(names[i], a) == 0)
                ia = i;
            if (strcmp(names[i], b) == 0)
                ib = i;
        }
        assert_true(ia < n && ib < n && ia != ib);
        assert_false(seen[ia][ib]);
        seen[ia][ib] = seen[ib][ia] = 1;
        count[ia]++;
        count[ib]++;
    }
    for (size_t i = first; i < n; i++) {
        if (count[i] < need)
            fail_msg("%s in %d added pairs, expected >= %d", names[i], count[i], need);
        if (alone[i] != 1)
            fail_msg("%s added alone at 100%% MPS %d times, expected once", names[i], alone[i]);
    }
}

static void test_extensions_pair_each_added_workload(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    const char *names[16];
    kace_catalog cat = catalog_names(ctx, names);
    names[12] = "late-one_batch1-inf", names[13] = "late-two_batch1-inf", names[14] = "late-three_batch1-inf";
    names[15] = "late-four_batch1-inf";
    char *base = make(ctx, names, 12);
    char *one = extend(ctx, base, names, 13);
    assert_memory_equal(one, base, strlen(base));
    check_added_pairs(one, names, 12, 13, 5);
    char *three = extend(ctx, one, names, 16);
    assert_memory_equal(three, one, strlen(one));
    check_added_pairs(three, names, 13, 16, 5);
    kace_plan *plan = parse(ctx, three);
    assert_int_equal(plan->n_workloads, 16);
    kace_plan_free(&plan);
    free(base);
    free(one);
    free(three);
    kace_catalog_free(&cat);
    kace_ctx_free(&ctx);
}

/* ---- the goldens (tests/data/plans/) -------------------------------------- */

/* The 12 workloads of workloads/catalog.txt when the goldens were made, then
 * 5 added later: fixed here, so the goldens do not follow the catalog. */
static const char *const golden_names[] = {
    "cuda-gemm2048_batch1-inf", "cuda-stream1024_batch1-inf", "cuda-latency4x64_batch1-inf",
    "bert-base-cased_batch8-train", "bert-base-cased_batch16-inf", "albert-base-v2_batch8-train",
    "vit-base-patch16-224_batch32-inf", "whisper-small_batch8-train", "wav2vec2-base-960h_batch4-train",
    "wav2vec2-base-960h_batch8-inf", "llama-1b_batch8-inf", "qwen2-0.5b_batch1-inf",
    "late-a_batch1-inf", "late-b_batch2-train", "late-c_batch4-inf", "late-d_batch8-inf", "late-e_batch1-train",
};

/* The golden file tests/data/plans/name, NUL-terminated. */
static char *golden(const char *name)
{
    char path[4200];
    snprintf(path, sizeof path, PLANS "%s", name);
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("%s: cannot open", path);
    size_t cap = 1 << 16;
    char *text = malloc(cap);
    assert_non_null(text);
    size_t len = fread(text, 1, cap - 1, f);
    assert_true(len < cap - 1); /* the goldens are a few KiB */
    assert_int_equal(ferror(f), 0);
    fclose(f);
    text[len] = '\0';
    return text;
}

/* got is the golden file name, byte for byte. */
static void same_as_golden(const char *got, const char *name)
{
    char *want = golden(name);
    if (strcmp(got, want) != 0)
        fail_msg("not tests/data/plans/%s:\n%s\n---- C:\n%s", name, want, got);
    free(want);
}

static void test_the_same_text_as_the_goldens(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    const char *const *names = golden_names;

    /* New plans: the catalog's 12, 3 (every pair), 5 and 7 (every pair, more triples), 11. */
    static const size_t sizes[] = {12, 3, 5, 7, 11};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        char name[32];
        snprintf(name, sizeof name, "new-%zu.plan", sizes[s]);
        char *plan = make(ctx, names, sizes[s]);
        same_as_golden(plan, name);
        free(plan);
    }

    /* The catalog's plan extended by 1, then by 3 more (twice extended), then by
     * nothing: each extension reads the text C made before. */
    char *plan = make(ctx, names, 12);
    char *ext1 = extend(ctx, plan, names, 13);
    same_as_golden(ext1, "new-12-ext13.plan");
    char *ext2 = extend(ctx, ext1, names, 16);
    same_as_golden(ext2, "new-12-ext16.plan");
    char *ext3 = extend(ctx, ext2, names, 16);
    assert_string_equal(ext3, ext2);
    /* 2 workloads: refused (plan.py exited 1). */
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(kace_plan_make(ctx, names, 2, &text, &len), KACE_ERR_INVALID);
    assert_null(text);
    assert_non_null(strstr(kace_errmsg(ctx), "2 workloads: a campaign needs at least 3"));
    /* 3 workloads extended by 3 at once, then by 1 more. */
    const char *small[] = {names[0], names[3], names[10], names[12], names[13], names[14], names[15]};
    char *s3 = make(ctx, small, 3);
    same_as_golden(s3, "small-3.plan");
    char *s6 = extend(ctx, s3, small, 6);
    same_as_golden(s6, "small-3-ext6.plan");
    char *s7 = extend(ctx, s6, small, 7);
    same_as_golden(s7, "small-3-ext7.plan");
    free(plan);
    free(ext1);
    free(ext2);
    free(ext3);
    free(s3);
    free(s6);
    free(s7);
    kace_ctx_free(&ctx);
}

/* A plan stored by plan.py, its header naming the script, still extends: its
 * text is kept as it is, and what is added is what kace's own plan gets. */
static void test_a_plan_written_by_plan_py_extends(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    char *old = golden("plan-py-12.plan");
    assert_non_null(strstr(old, "# written by scripts/device/plan.py from 12 workloads"));
    char *ext = extend(ctx, old, golden_names, 13);
    assert_memory_equal(ext, old, strlen(old));
    /* The part added: what kace's own 12-workload plan gets when extended by 1. */
    char *mine = golden("new-12.plan"), *mine_ext = golden("new-12-ext13.plan");
    assert_memory_equal(mine_ext, mine, strlen(mine));
    assert_string_equal(ext + strlen(old), mine_ext + strlen(mine));
    assert_non_null(strstr(ext, "\n# extended by kace plan: 1 workload profiled"));
    /* The added workload alone at 100% once, the last line. */
    const char *solo = "\nrun late-a_batch1-inf @ 100\n";
    assert_non_null(strstr(ext, solo));
    assert_string_equal(strstr(ext, solo), solo);
    free(mine);
    free(mine_ext);
    free(ext);
    free(old);
    kace_ctx_free(&ctx);
}

/* ---- refusals -------------------------------------------------------------- */

static void expect_make_fails(kace_ctx *ctx, const char *const *names, size_t n, kace_status want, const char *msg)
{
    char *text = (char *)"untouched";
    size_t len = 7;
    assert_int_equal(kace_plan_make(ctx, names, n, &text, &len), want);
    assert_null(text);
    if (!strstr(kace_errmsg(ctx), msg))
        fail_msg("message '%s' lacks '%s'", kace_errmsg(ctx), msg);
}

static void expect_extend_fails(kace_ctx *ctx, const char *old, const char *const *names, size_t n,
                                kace_status want, const char *msg)
{
    char *text = (char *)"untouched";
    size_t len = 7;
    assert_int_equal(kace_plan_extend(ctx, old, strlen(old), "old.plan", names, n, &text, &len), want);
    assert_null(text);
    if (!strstr(kace_errmsg(ctx), msg))
        fail_msg("message '%s' lacks '%s'", kace_errmsg(ctx), msg);
}

static void test_refusals_say_why(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    const char *twice[] = {"a", "b", "a"};
    expect_make_fails(ctx, twice, 3, KACE_ERR_INVALID, "workload a is named twice");
    const char *bad[] = {"a", "b,c", "d"};
    expect_make_fails(ctx, bad, 3, KACE_ERR_INVALID, "plan: workload 2: 'b,c': byte 2 ','");
    const char *option[] = {"a", "b", "--db"};
    expect_make_fails(ctx, option, 3, KACE_ERR_INVALID, "starts with '-'");
    expect_make_fails(ctx, option, 0, KACE_ERR_INVALID, "0 workloads");
    /* More than a plan holds: refused at once, not after a search of every triple. */
    static char many_names[KACE_PLAN_MAX_WORKLOADS + 1][16];
    const char *many[KACE_PLAN_MAX_WORKLOADS + 1];
    for (size_t i = 0; i <= KACE_PLAN_MAX_WORKLOADS; i++) {
        snprintf(many_names[i], sizeof many_names[i], "w%zu", i);
        many[i] = many_names[i];
    }
    expect_make_fails(ctx, many, KACE_PLAN_MAX_WORKLOADS + 1, KACE_ERR_INVALID,
                      "257 workloads: a plan holds at most 256");

    const char *names[] = {"a", "b", "c", "d"};
    expect_extend_fails(ctx, "workloads a b c\npairs\nset mine\nrun a b\n", names, 4, KACE_ERR_PARSE,
                        "old.plan:3:1: 'set' changes where later runs are stored");
    expect_extend_fails(ctx, "workloads a b c\nbogus\n", names, 4, KACE_ERR_PARSE, "old.plan:2:1: unknown statement");
    expect_extend_fails(ctx, "", names, 4, KACE_ERR_PARSE, "old.plan:");
    expect_extend_fails(ctx, "workloads a b c\npairs\n", twice, 3, KACE_ERR_INVALID, "named twice");
    kace_ctx_free(&ctx);
}

/* plan.py read the old plan as a text file: its "\r\n" became "\n". */
static void test_extend_keeps_the_old_text_with_unix_line_ends(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    const char *names[] = {"a", "b", "c", "d"};
    char *ext = extend(ctx, "workloads a b c\r\npairs   # all\r\n\n\n", names, 4);
    const char *want = "workloads a b c\npairs   # all\n"
                       "# extended by kace plan: 1 workload profiled after the plan was made, each in "
                       ">= 3 pairs and alone at 100% MPS\nworkloads d\nrepeat 1\nmode mps\nrun d a\nrun d b\n"
                       "run d c\nrun d @ 100\n";
    assert_string_equal(ext, want);
    free(ext);
    /* Nothing to add: the old text, its line ends made "\n". */
    char *same = extend(ctx, "workloads a b c d\r\npairs\r\n", names, 4);
    assert_string_equal(same, "workloads a b c d\npairs\n");
    free(same);
    kace_ctx_free(&ctx);
}

/* An added workload the old plan already measures alone at 100% gets no
 * second such run. */
static void test_extend_adds_no_second_solo_run(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    const char *names[] = {"a", "b", "c", "d"};
    char *ext = extend(ctx, "workloads a b c\npairs\nrun d @ 100\n", names, 4);
    const char *first = strstr(ext, "run d @ 100\n");
    assert_non_null(first);
    assert_null(strstr(first + 1, "run d @ 100"));
    kace_plan *plan = parse(ctx, ext);
    size_t solo = 0;
    for (size_t i = 0; i < plan->n; i++)
        solo += plan->entries[i].spec.k == 1;
    assert_int_equal(solo, 1);
    kace_plan_free(&plan);
    free(ext);
    kace_ctx_free(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_three_workloads_give_the_known_text),
        cmocka_unit_test(test_the_catalog_plan_parses_and_holds_the_dataset),
        cmocka_unit_test(test_the_occur_seed_plans_the_fewest_pairs),
        cmocka_unit_test(test_extensions_pair_each_added_workload),
        cmocka_unit_test(test_the_same_text_as_the_goldens),
        cmocka_unit_test(test_a_plan_written_by_plan_py_extends),
        cmocka_unit_test(test_refusals_say_why),
        cmocka_unit_test(test_extend_keeps_the_old_text_with_unix_line_ends),
        cmocka_unit_test(test_extend_adds_no_second_solo_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
