/* Campaign plans (lib/measure/campaign.c): expansion, order, duplicates, the n_occur
 * plan and every error's position. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "kace/campaign.h"
#include "testutil.h"

static kace_plan *parse(kace_ctx *ctx, const char *text)
{
    kace_plan *p = NULL;
    assert_kace_ok(ctx, kace_plan_parse(ctx, text, strlen(text), "plan", &p));
    return p;
}

static bool has_pair(const kace_plan *p, const char *a, const char *b, int pa, int pb)
{
    for (size_t i = 0; i < p->n; i++) {
        const kace_measure_spec *s = &p->entries[i].spec;
        if (s->k != 2)
            continue;
        if ((strcmp(s->workload[0], a) == 0 && strcmp(s->workload[1], b) == 0 && s->mps_pct[0] == pa &&
             s->mps_pct[1] == pb) ||
            (strcmp(s->workload[0], b) == 0 && strcmp(s->workload[1], a) == 0 && s->mps_pct[0] == pb &&
             s->mps_pct[1] == pa))
            return true;
    }
    return false;
}

static void test_pairs_triples_and_splits(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_plan *p = parse(ctx, "# four workloads\n"
                              "workloads a b\n"
                              "workloads c d a   # 'a' again is ignored\n"
                              "pairs\n"
                              "triples\n");
    assert_int_equal(p->n_workloads, 4);
    assert_int_equal(p->n, 6 + 4);
    for (size_t i = 0; i < 6; i++) {
        assert_int_equal(p->entries[i].spec.k, 2);
        assert_string_equal(p->entries[i].spec.set, "pairs");
        assert_int_equal(p->entries[i].line, 4);
    }
    for (size_t i = 6; i < 10; i++) {
        assert_int_equal(p->entries[i].spec.k, 3);
        assert_string_equal(p->entries[i].spec.set, "triples");
        assert_int_equal(p->entries[i].spec.mps_pct[2], 100);
    }
    assert_true(has_pair(p, "c", "d", 100, 100));
    kace_plan_free(&p);
    assert_null(p);

    p = parse(ctx, "workloads a b c\npairs\nsplits 10 50\nsplits 30 on a x\n");
    assert_int_equal(p->n, 3 + 3 * 2 + 1);
    assert_true(has_pair(p, "a", "b", 10, 90));
    assert_true(has_pair(p, "b", "c", 50, 50));
    assert_true(has_pair(p, "a", "x", 30, 70));
    assert_false(has_pair(p, "a", "x", 100, 100));
    kace_plan_free(&p);
    kace_ctx_free(&ctx);
}

static void test_repeat_order_duplicates_modes(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_plan *p = parse(ctx, "workloads a b c\r\n"
                              "repeat 3\n"
                              "pairs\n"
                              "repeat 1\n"
                              "run b a            # the same as pairs' a b: listed once\n"
                              "run a b @ 30, 70   # a split is another colocation\n"
                              "mode timeslice\n"
                              "run a b\n"
                              "set mine\n"
                              "run a b c @100,100,100\n");
    /* 3 pairs x 3 + split + timeslice + triple */
    assert_int_equal(p->n, 9 + 3);
    assert_int_equal(p->max_repeat, 3);
    /* Repetition-major: every repetition 0 first. */
    int last = 0;
    size_t rep0 = 0;
    for (size_t i = 0; i < p->n; i++) {
        assert_true(p->entries[i].spec.repetition >= last);
        last = p->entries[i].spec.repetition;
        rep0 += last == 0;
    }
    assert_int_equal(rep0, 3 + 3);
    const kace_measure_spec *ts = &p->entries[4].spec;
    assert_true(ts->timeslice);
    assert_string_equal(ts->set, "timeslice-pairs");
    assert_string_equal(p->entries[5].spec.set, "mine");
    assert_true(p->entries[5].spec.timeslice);
    assert_int_equal(p->entries[3].spec.mps_pct[0], 30);
    assert_int_equal(p->entries[3].line, 6);
    char k1[2048], k2[2048];
    kace_plan_entry_key(&p->entries[0], k1, sizeof k1);
    kace_plan_entry_key(&p->entries[6], k2, sizeof k2);
    assert_string_equal(k1, "measured|pairs|mps|a@100|b@100|#0");
    assert_string_equal(k2, "measured|pairs|mps|a@100|b@100|#1");
    /* The run identity kace campaign looks up in the store. */
    kace_measured_run r = kace_plan_entry_run(&p->entries[3]);
    assert_string_equal(r.set, p->entries[3].spec.set);
    assert_string_equal(r.mode, "mps");
    assert_int_equal(r.k, p->entries[3].spec.k);
    assert_int_equal(r.member[0].mps_pct, 30);
    assert_string_equal(r.member[0].workload, p->entries[3].spec.workload[0]);
    kace_plan_free(&p);
    kace_ctx_free(&ctx);
}

static void test_occur_plan(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    const char *text = "workloads w0 w1 w2 w3 w4 w5 w6 w7 w8 w9\noccur 3 seed 7\n";
    kace_plan *p = parse(ctx, text), *again = parse(ctx, text);
    int count[10] = {0};
    assert_true(p->n < 45); /* fewer than all pairs */
    assert_true(p->n >= 15); /* 10 workloads x 3 / 2 */
    for (size_t i = 0; i < p->n; i++)
        for (int m = 0; m < 2; m++)
            count[p->entries[i].spec.workload[m][1] - '0']++;
    for (int w = 0; w < 10; w++)
        assert_true(count[w] >= 3);
    /* The same seed gives the same plan; another seed another one. */
    assert_int_equal(again->n, p->n);
    for (size_t i = 0; i < p->n; i++)
        assert_memory_equal(&again->entries[i].spec, &p->entries[i].spec, sizeof p->entries[i].spec);
    kace_plan *other = parse(ctx, "workloads w0 w1 w2 w3 w4 w5 w6 w7 w8 w9\noccur 3 seed 8\n");
    bool differs = other->n != p->n;
    for (size_t i = 0; !differs && i < p->n; i++)
        differs = memcmp(&other->entries[i].spec, &p->entries[i].spec, sizeof p->entries[i].spec) != 0;
    assert_true(differs);
    kace_plan_free(&p);
    kace_plan_free(&again);
    kace_plan_free(&other);
    kace_ctx_free(&ctx);
}

static void test_errors_name_line_and_column(void **state)
{
    (void)state;
    static const struct {
        const char *text, *message;
    } bad[] = {
        {"", "plan:1:1: the plan has no colocation"},
        {"workloads a b\n", "plan:1:1: the plan has no colocation"},
        {"pairs\n", "plan:1:1: 'pairs' needs at least 2 workloads"},
        {"workloads a b\ntriples\n", "plan:2:1: 'triples' needs at least 3 workloads"},
        {"workloads a b\n  pairs now\n", "plan:2:9: 'pairs' takes no arguments"},
        {"frobnicate\n", "plan:1:1: unknown statement 'frobnicate'"},
        {"workloads a@b\n", "plan:1:11: expected a name"},
        {"repeat 0\n", "plan:1:8: expected a repetition count (1..100), got '0'"},
        {"repeat 3x\n", "plan:1:8: expected a repetition count"},
        {"mode fast\n", "plan:1:6: expected 'mode mps' or 'mode timeslice'"},
        {"workloads a b c\noccur 3\n", "plan:2:7: expected pairs per workload (1..2), got '3'"},
        {"workloads a b\noccur 1 seeds 2\n", "plan:2:1: expected 'occur N [seed S]'"},
        {"workloads a b\npairs\nsplits\n", "plan:3:1: 'splits' needs at least one percentage"},
        {"workloads a b\npairs\nsplits 100\n", "plan:3:8: expected an MPS split percentage (1..99)"},
        {"splits 50\n", "plan:1:1: 'splits': no pair planned before it"},
        {"splits 50 on a\n", "plan:1:11: expected 'on A B'"},
        {"mode timeslice\nsplits 50 on a b\n", "plan:2:1: 'splits' needs MPS"},
        {"run\n", "plan:1:1: 'run' needs at least one workload"},
        {"run a b @ 50\n", "plan:1:10: 1 MPS percentage(s) for 2 workloads"},
        {"run a b @ 50,x\n", "plan:1:14: expected an MPS percentage"},
        {"run a b @50,0\n", "plan:1:13: MPS percentage out of range"},
        {"mode timeslice\nrun a b @ 50,50\n", "plan:2:9: MPS percentages need MPS"},
        {"run a b c d e f g h i\n", "plan:1:21: more than 8 workloads"},
        {"set a,b\n", "plan:1:5: expected a name"},
        {"run a\x01 b\n", "plan:1:5: expected a name"},
        /* A repeat, mode or set changes the statements after it: on the last lines it
         * would change nothing, and the runs it was meant for would be measured once. */
        {"workloads a b\npairs\nrepeat 3\n", "plan:3:1: 'repeat 3' applies to the statements after it and none "
                                             "follows"},
        {"workloads a b\npairs\n  repeat 3  # more\n\n# end\n", "plan:3:3: 'repeat 3' applies to"},
        {"workloads a b\nrun a b\nrepeat 2\nworkloads c\n", "plan:3:1: 'repeat 2' applies to"},
        {"run a b\nmode timeslice\n", "plan:2:1: 'mode timeslice' applies to"},
        {"run a b\nset mine\n", "plan:2:1: 'set mine' applies to"},
    };
    kace_ctx *ctx = kace_ctx_new();
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        kace_plan *p = (kace_plan *)ctx; /* must come back NULL */
        kace_status st = kace_plan_parse(ctx, bad[i].text, strlen(bad[i].text), "plan", &p);
        if (st != KACE_ERR_PARSE || p != NULL)
            fail_msg("'%s': status %d", bad[i].text, (int)st);
        if (strncmp(kace_errmsg(ctx), bad[i].message, strlen(bad[i].message)) != 0)
            fail_msg("'%s': got '%s', want '%s...'", bad[i].text, kace_errmsg(ctx), bad[i].message);
    }
    /* A NUL byte and an overlong line. */
    kace_plan *p = NULL;
    assert_int_equal(kace_plan_parse(ctx, "run a\0b\n", 8, "plan", &p), KACE_ERR_PARSE);
    assert_non_null(strstr(kace_errmsg(ctx), "plan:1:6: unexpected NUL"));
    char *long_line = malloc(KACE_PLAN_MAX_LINE + 10);
    memset(long_line, 'a', KACE_PLAN_MAX_LINE + 9);
    long_line[KACE_PLAN_MAX_LINE + 9] = '\0';
    assert_int_equal(kace_plan_parse(ctx, long_line, strlen(long_line), "plan", &p), KACE_ERR_PARSE);
    free(long_line);
    /* Too many measurements: 256 workloads' triples. */
    char big[256 * 8 + 64] = "workloads";
    for (int i = 0; i < 256; i++)
        snprintf(big + strlen(big), sizeof big - strlen(big), " w%d", i);
    strcat(big, "\ntriples\n");
    assert_int_equal(kace_plan_parse(ctx, big, strlen(big), "plan", &p), KACE_ERR_PARSE);
    assert_non_null(strstr(kace_errmsg(ctx), "plan:2:1: the plan grows past 50000"));
    assert_int_equal(kace_plan_parse_file(ctx, "/nonexistent/plan.txt", &p), KACE_ERR_IO);
    assert_non_null(strstr(kace_errmsg(ctx), "/nonexistent/plan.txt"));
    kace_ctx_free(&ctx);
}

/* ---- retrying a failed run once its commands or code change ------------- */

static void test_command_key_follows_command_and_code(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    const char *dir = scratch_dir("campaign_key");
    char script[1024];
    char *written = write_file(dir, "train.sh", "echo step\n"); /* malloc'd */
    snprintf(script, sizeof script, "%s", written);
    free(written);
    char *a[] = {"sh", script, NULL}, *b[] = {"sh", script, "--fixed", NULL}, *none[] = {"sh", "/nonexistent/x", NULL};
    char k1[KACE_COMMAND_KEY_SIZE], k2[KACE_COMMAND_KEY_SIZE], k3[KACE_COMMAND_KEY_SIZE], k4[KACE_COMMAND_KEY_SIZE];
    assert_kace_ok(ctx, kace_command_key(ctx, a, k1));
    assert_int_equal(strlen(k1), 16);
    assert_kace_ok(ctx, kace_command_key(ctx, a, k2));
    assert_string_equal(k1, k2); /* the same command and code: the same key */
    assert_kace_ok(ctx, kace_command_key(ctx, b, k2));
    assert_string_not_equal(k1, k2); /* another command line */
    free(write_file(dir, "train.sh", "echo fixed step\n"));
    assert_kace_ok(ctx, kace_command_key(ctx, a, k3));
    assert_string_not_equal(k1, k3); /* the same command line, its script fixed */
    assert_kace_ok(ctx, kace_command_key(ctx, none, k4)); /* a word that names no file counts as a word */
    /* A colocation's key: its members in name order, whichever order they come in. */
    const char *names_ab[] = {"a", "b"}, *names_ba[] = {"b", "a"};
    char *const *argv_ab[] = {a, b}, *const *argv_ba[] = {b, a};
    assert_kace_ok(ctx, kace_members_command_key(ctx, 2, names_ab, argv_ab, k1));
    assert_kace_ok(ctx, kace_members_command_key(ctx, 2, names_ba, argv_ba, k2));
    assert_string_equal(k1, k2);
    char *const *argv_swapped[] = {b, a}; /* a runs b's command: another colocation's commands */
    assert_kace_ok(ctx, kace_members_command_key(ctx, 2, names_ab, argv_swapped, k3));
    assert_string_not_equal(k1, k3);
    kace_ctx_free(&ctx);
}

/* A call's key cache reads a command's files once: a script changed during
 * the call keeps its first key there, a fresh cache (the next call) reads it
 * again; other commands, lines as written and colocations get their own. */
static void test_key_cache_reads_files_once_a_call(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    const char *dir = scratch_dir("campaign_key_cache");
    char script[1024];
    char *written = write_file(dir, "serve.sh", "echo step\n");
    snprintf(script, sizeof script, "%s", written);
    free(written);
    char *a[] = {"sh", script, NULL}, *b[] = {"sh", script, "--other", NULL};
    char first[KACE_COMMAND_KEY_SIZE], k[KACE_COMMAND_KEY_SIZE], fresh[KACE_COMMAND_KEY_SIZE];
    kace_key_cache *cache = kace_key_cache_new();
    assert_non_null(cache);
    assert_kace_ok(ctx, kace_cached_command_key(ctx, cache, NULL, a, first));
    assert_kace_ok(ctx, kace_command_key(ctx, a, k));
    assert_string_equal(first, k); /* the same key as without a cache */
    assert_kace_ok(ctx, kace_cached_command_key(ctx, cache, "serve @W@/serve.sh", a, k));
    char want[KACE_COMMAND_KEY_SIZE];
    assert_kace_ok(ctx, kace_written_command_key(ctx, "serve @W@/serve.sh", a, want));
    assert_string_equal(k, want); /* a line as written has its own entry */
    free(write_file(dir, "serve.sh", "echo changed step\n"));
    assert_kace_ok(ctx, kace_cached_command_key(ctx, cache, NULL, a, k));
    assert_string_equal(k, first); /* not read again in this call */
    assert_kace_ok(ctx, kace_cached_command_key(ctx, cache, NULL, b, k));
    assert_string_not_equal(k, first); /* another command */
    assert_kace_ok(ctx, kace_cached_command_key(ctx, NULL, NULL, a, fresh));
    assert_string_not_equal(fresh, first); /* without a cache: read now */
    kace_key_cache *next = kace_key_cache_new();
    assert_kace_ok(ctx, kace_cached_command_key(ctx, next, NULL, a, k));
    assert_string_equal(k, fresh); /* the next call reads the change */
    /* A colocation's key from the cache is the one computed afresh, its members in name order. */
    const char *names_ab[] = {"a", "b"}, *names_ba[] = {"b", "a"};
    char *const *argv_ab[] = {a, b}, *const *argv_ba[] = {b, a};
    assert_kace_ok(ctx, kace_cached_members_key(ctx, next, 2, names_ba, argv_ba, k));
    assert_kace_ok(ctx, kace_members_command_key(ctx, 2, names_ab, argv_ab, want));
    assert_string_equal(k, want);
    kace_key_cache_free(&cache);
    kace_key_cache_free(&next);
    assert_null(cache);
    kace_key_cache_free(&cache); /* twice: nothing */
    kace_ctx_free(&ctx);
}

static void test_retry_rule(void **state)
{
    (void)state;
    struct {
        kace_attempt_state s;
        bool measure;
    } cases[] = {
        {{.stored = false}, true},                                                                   /* never measured */
        {{.stored = true, .failed = false, .key_known = true, .failed_key = "x", .current_key = "y"}, false}, /* ok */
        {{.stored = true, .failed = true, .key_known = true, .failed_key = "x", .current_key = "x"}, false},
        {{.stored = true, .failed = true, .key_known = true, .failed_key = "x", .current_key = "y"}, true},
        {{.stored = true, .failed = true, .key_known = false, .current_key = "y"}, true}, /* from before attempts */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        if (kace_plan_should_measure(&cases[i].s) != cases[i].measure)
            fail_msg("case %zu: expected %s", i, cases[i].measure ? "measure" : "done");
}

static void test_attempts_in_the_store(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    char path[1100];
    snprintf(path, sizeof path, "%s/attempts.db", scratch_dir("campaign_attempts"));
    kace_store *s = NULL;
    assert_kace_ok(ctx, kace_store_open(ctx, path, &s));
    kace_measured_run r;
    memset(&r, 0, sizeof r);
    r.set = "pairs";
    r.mode = "mps";
    r.k = 2;
    r.member[0] = (kace_measured_member){.workload = "a", .mps_pct = 100, .throughput = NAN, .cv = NAN,
                                         .status = "crashed"};
    r.member[1] = (kace_measured_member){.workload = "b", .mps_pct = 100, .throughput = NAN, .cv = NAN,
                                         .status = "stopped"};
    r.status = KACE_RUN_FAILED;
    char key[2048];
    kace_measured_run_key(&r, key, sizeof key);
    kace_attempt_state st;
    /* Nothing stored, no attempts table yet. */
    assert_kace_ok(ctx, kace_attempt_state_load(ctx, s, key, "1111111111111111", &st));
    assert_false(st.stored);
    assert_true(kace_plan_should_measure(&st));
    /* A failed run from before attempts were noted: one more try. */
    assert_kace_ok(ctx, kace_store_add_measured_run(ctx, s, &r, NULL));
    assert_kace_ok(ctx, kace_attempt_state_load(ctx, s, key, "1111111111111111", &st));
    assert_true(st.stored && st.failed && !st.key_known);
    assert_true(kace_plan_should_measure(&st));
    /* Noted with its key: not again with the same commands, again with others. */
    assert_kace_ok(ctx, kace_attempt_note(ctx, s, key, "1111111111111111", KACE_RUN_FAILED));
    assert_kace_ok(ctx, kace_attempt_state_load(ctx, s, key, "1111111111111111", &st));
    assert_true(st.key_known);
    assert_false(kace_plan_should_measure(&st));
    assert_kace_ok(ctx, kace_attempt_state_load(ctx, s, key, "2222222222222222", &st));
    assert_true(kace_plan_should_measure(&st));
    /* The retry replaces the failed run; both attempts stay noted, the last one counts. */
    bool retired = false, has = true;
    assert_kace_ok(ctx, kace_store_begin(ctx, s));
    assert_kace_ok(ctx, kace_attempt_retire_failed(ctx, s, key, &retired));
    assert_true(retired);
    r.status = KACE_RUN_OK;
    r.member[0] = (kace_measured_member){.workload = "a", .mps_pct = 100, .throughput = 10, .cv = 0.01, .status = "ok"};
    r.member[1] = (kace_measured_member){.workload = "b", .mps_pct = 100, .throughput = 20, .cv = 0.01, .status = "ok"};
    assert_kace_ok(ctx, kace_store_add_measured_run(ctx, s, &r, NULL));
    assert_kace_ok(ctx, kace_attempt_note(ctx, s, key, "2222222222222222", KACE_RUN_OK));
    assert_kace_ok(ctx, kace_store_commit(ctx, s));
    assert_kace_ok(ctx, kace_attempt_state_load(ctx, s, key, "3333333333333333", &st));
    assert_true(st.stored && !st.failed);
    assert_false(kace_plan_should_measure(&st)); /* an ok run is never measured again */
    assert_kace_ok(ctx, kace_store_has_measured_run(ctx, s, &r, &has));
    assert_true(has);
    /* An ok run is not retired. */
    assert_kace_ok(ctx, kace_attempt_retire_failed(ctx, s, key, &retired));
    assert_false(retired);
    kace_store_close(&s);
    kace_ctx_free(&ctx);
}

/* ---- one allocation's schedule: the interleave, the time-fit rule and a
 * call's steps, with a fake clock and fake measurements (no processes) ---- */

static void spec_pair(kace_measure_spec *s, const char *a, const char *b)
{
    memset(s, 0, sizeof *s);
    s->k = 2;
    snprintf(s->workload[0], KACE_NAME_MAX, "%s", a);
    snprintf(s->workload[1], KACE_NAME_MAX, "%s", b);
    s->mps_pct[0] = s->mps_pct[1] = 100;
}

static bool pair_shares(const kace_measure_spec *x, const kace_measure_spec *y)
{
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            if (strcmp(x->workload[i], y->workload[j]) == 0)
                return true;
    return false;
}

static size_t adjacent_shared(const kace_measure_spec *s, size_t n)
{
    size_t shared = 0;
    for (size_t i = 1; i < n; i++)
        shared += pair_shares(&s[i - 1], &s[i]);
    return shared;
}

static size_t all_pairs(kace_measure_spec *s, int w)
{
    static const char *names[] = {"a", "b", "c", "d", "e", "f", "g", "h"};
    size_t n = 0;
    for (int i = 0; i < w; i++)
        for (int j = i + 1; j < w; j++)
            spec_pair(&s[n++], names[i], names[j]);
    return n;
}

static void test_interleave(void **state)
{
    (void)state;
    kace_measure_spec s[28], again[28];
    /* Every pair of 6 workloads in plan order (ab ac ad ... ef): runs of one
     * workload can be kept apart, and are; the plan's order had 11 adjacent. */
    size_t n = all_pairs(s, 6);
    assert_int_equal(adjacent_shared(s, n), 11);
    memcpy(again, s, n * sizeof *s);
    kace_schedule_interleave(s, n);
    assert_int_equal(adjacent_shared(s, n), 0);
    /* Deterministic, and the same runs (a permutation). */
    kace_measure_spec third[28];
    memcpy(third, again, n * sizeof *s);
    kace_schedule_interleave(third, n);
    assert_memory_equal(s, third, n * sizeof *s);
    for (size_t i = 0; i < n; i++) {
        int found = 0;
        for (size_t j = 0; j < n; j++)
            found += memcmp(&s[j], &again[i], sizeof s[j]) == 0;
        assert_int_equal(found, 1);
    }
    /* 8 workloads too. */
    n = all_pairs(s, 8);
    kace_schedule_interleave(s, n);
    assert_int_equal(adjacent_shared(s, n), 0);
    /* 4 workloads: only the 3 disjoint couples (ab cd, ac bd, ad bc) can be
     * adjacent, so 2 shared adjacencies are the fewest; the earliest-first
     * rule leaves exactly those. */
    n = all_pairs(s, 4);
    kace_schedule_interleave(s, n);
    assert_int_equal(adjacent_shared(s, n), 2);
    /* Three workloads: every pair shares one; the order is kept. */
    n = all_pairs(s, 3);
    kace_schedule_interleave(s, n);
    assert_string_equal(s[1].workload[1], "c");
    assert_string_equal(s[2].workload[0], "b");
    /* A split share is the same workload: kept apart from its 100% run. */
    spec_pair(&s[0], "a", "b");
    spec_pair(&s[1], "a", "b");
    s[1].mps_pct[0] = 30;
    s[1].mps_pct[1] = 70;
    spec_pair(&s[2], "c", "d");
    kace_schedule_interleave(s, 3);
    assert_string_equal(s[1].workload[0], "c");
    assert_int_equal(s[2].mps_pct[0], 30);
    kace_schedule_interleave(s, 0); /* nothing to do */
}

/* Pool starts when runs are measured in this order, the pool filled as
 * kace_measure_pool_start fills it: whole runs, in order, while their
 * members (workload, share) fit. */
static int pool_starts(const kace_measure_spec *s, size_t n, size_t max)
{
    char pool[32][KACE_NAME_MAX + 8];
    size_t in = 0;
    int starts = 0;
    for (size_t i = 0; i < n; i++) {
        bool all = true;
        for (int m = 0; m < s[i].k; m++) {
            char key[KACE_NAME_MAX + 8];
            snprintf(key, sizeof key, "%s@%d", s[i].workload[m], s[i].mps_pct[m]);
            bool found = false;
            for (size_t j = 0; j < in && !found; j++)
                found = strcmp(pool[j], key) == 0;
            all &= found;
        }
        if (all)
            continue;
        starts++;
        in = 0;
        for (size_t j = i; j < n; j++) {
            char keys[KACE_MAX_K][KACE_NAME_MAX + 8];
            size_t add = 0;
            for (int m = 0; m < s[j].k; m++) {
                snprintf(keys[add], sizeof keys[add], "%s@%d", s[j].workload[m], s[j].mps_pct[m]);
                bool found = false;
                for (size_t q = 0; q < in && !found; q++)
                    found = strcmp(pool[q], keys[add]) == 0;
                for (size_t q = 0; q < add && !found; q++)
                    found = strcmp(keys[q], keys[add]) == 0;
                add += !found;
            }
            if (in + add > max)
                break;
            for (size_t q = 0; q < add; q++)
                memcpy(pool[in++], keys[q], sizeof pool[0]);
        }
    }
    return starts;
}

static void test_pool_order(void **state)
{
    (void)state;
    kace_measure_spec plan[28], s[28];
    /* 15 pairs of 6 workloads, a pool of 4: cut into batches in plan order,
     * the pool starts once a batch; interleaved as one batch, the runs
     * scatter the members and the pool restarts more often. */
    size_t n = all_pairs(plan, 6);
    int in_plan_order = pool_starts(plan, n, 4);
    memcpy(s, plan, sizeof plan);
    kace_schedule_interleave(s, n);
    int interleaved_whole = pool_starts(s, n, 4);
    memcpy(s, plan, sizeof plan);
    kace_schedule_pool_order(s, n, 4);
    assert_int_equal(pool_starts(s, n, 4), in_plan_order);
    assert_true(interleaved_whole > in_plan_order);
    /* A pool that holds them all: one batch, interleaved as a whole. */
    memcpy(s, plan, sizeof plan);
    kace_schedule_pool_order(s, n, 16);
    assert_int_equal(pool_starts(s, n, 16), 1);
    assert_int_equal(adjacent_shared(s, n), 0);
    /* A split share is a member of its own: a@30 and b@70 beside a@100, b@100. */
    spec_pair(&s[0], "a", "b");
    spec_pair(&s[1], "a", "b");
    s[1].mps_pct[0] = 30;
    s[1].mps_pct[1] = 70;
    spec_pair(&s[2], "c", "d");
    kace_schedule_pool_order(s, 3, 4); /* (ab, ab@30,70) | (cd): the pool's bound comes first */
    assert_int_equal(s[0].mps_pct[0], 100);
    assert_int_equal(s[1].mps_pct[0], 30);
    assert_string_equal(s[2].workload[0], "c");
    assert_int_equal(pool_starts(s, 3, 4), 2);
}

static void test_time_fit_rule(void **state)
{
    (void)state;
    static const struct {
        double remaining, allocation, run_s;
        size_t n, want;
    } cases[] = {
        {100, 100, 10, 10, 10}, /* all fit exactly */
        {99, 100, 10, 10, 0},   /* does not fit now, fits a whole call: left whole */
        {35, 100, 10, 3, 3},
        {35, 100, 10, 20, 3},   /* longer than any call: as many as fit */
        {5, 100, 10, 20, 0},    /* not even one */
        {0, 100, 10, 1, 0},     /* the deadline has come */
        {-5, 100, 10, 1, 0},
        {100, 100, 10, 0, 0},   /* nothing to do */
        {100, 100, 0, 3, 0},    /* no projection: nothing is measured blind */
        {100, 100, NAN, 3, 0},
        {99, 0, 10, 10, 9},     /* no next call counted on: as many as fit */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t got = kace_schedule_fit(cases[i].remaining, cases[i].allocation, cases[i].run_s, cases[i].n);
        if (got != cases[i].want)
            fail_msg("case %zu: %zu runs, expected %zu", i, got, cases[i].want);
    }
}

/* The fake measurer: a clock each run advances, the runs measured (by key),
 * each step's run times as the store sums them, and a log of events. */
typedef struct fake {
    double now, cold_s, warm_s;
    char done[64][256];
    size_t n_done;
    char steps[8][32];
    size_t step_runs[8];
    double step_seconds[8];
    size_t n_steps;
    char log[4096];
    int stop_after; /* runs, then "a signal" (0: never) */
    int cancel_at;  /* this run (1, 2, ...) is cancelled by "a signal": not stored (0: none) */
    int runs;
} fake;

static void fake_key(const kace_measure_spec *s, char *out, size_t size)
{
    kace_plan_entry e = {.spec = *s};
    kace_plan_entry_key(&e, out, size);
}

static double fake_now(void *arg)
{
    return ((fake *)arg)->now;
}

static size_t fake_step(fake *f, const char *step)
{
    for (size_t i = 0; i < f->n_steps; i++)
        if (strcmp(f->steps[i], step) == 0)
            return i;
    snprintf(f->steps[f->n_steps], sizeof f->steps[0], "%s", step);
    return f->n_steps++;
}

static kace_status fake_times(void *arg, const char *step, size_t *runs, double *seconds)
{
    fake *f = arg;
    size_t i = fake_step(f, step);
    *runs = f->step_runs[i];
    *seconds = f->step_seconds[i];
    return KACE_OK;
}

static kace_status fake_is_done(void *arg, const kace_measure_spec *spec, bool *done)
{
    fake *f = arg;
    char key[256];
    fake_key(spec, key, sizeof key);
    *done = false;
    for (size_t i = 0; i < f->n_done && !*done; i++)
        *done = strcmp(f->done[i], key) == 0;
    return KACE_OK;
}

static kace_status fake_measure(fake *f, const kace_measure_spec *spec, double timeout_s, bool warm, bool *stored)
{
    if (f->cancel_at > 0 && f->runs + 1 == f->cancel_at) {
        *stored = false;
        f->stop_after = ++f->runs;
        return KACE_OK;
    }
    *stored = true;
    double took = warm ? f->warm_s : f->cold_s;
    assert_true(timeout_s > 0); /* the deadline reaches the runner */
    f->now += took;
    fake_key(spec, f->done[f->n_done++], sizeof f->done[0]);
    size_t at = strlen(f->log);
    snprintf(f->log + at, sizeof f->log - at, "%c:%s%s%s%s ", warm ? 'W' : 'C', spec->timeslice ? "ts-" : "",
             spec->workload[0], spec->workload[1], strncmp(spec->set, "cold-", 5) == 0 ? "-cold" : "");
    f->runs++;
    return KACE_OK;
}

static kace_status fake_cold(void *arg, const kace_measure_spec *spec, double timeout_s, bool *stored)
{
    return fake_measure(arg, spec, timeout_s, false, stored);
}

static kace_status fake_warm(void *arg, const kace_measure_spec *specs, size_t n, size_t i, double timeout_s,
                             bool *stored)
{
    assert_true(i < n);
    return fake_measure(arg, &specs[i], timeout_s, true, stored);
}

static bool fake_stop(void *arg)
{
    fake *f = arg;
    return f->stop_after > 0 && f->runs >= f->stop_after;
}

static kace_status fake_step_done(void *arg, const kace_schedule_report *r)
{
    fake *f = arg;
    size_t i = fake_step(f, r->step);
    f->step_runs[i] += r->measured;
    f->step_seconds[i] += r->seconds;
    size_t at = strlen(f->log);
    snprintf(f->log + at, sizeof f->log - at, "| ");
    return KACE_OK;
}

static const kace_schedule_ops fake_ops = {.now_s = fake_now,
                                           .stored_times = fake_times,
                                           .is_done = fake_is_done,
                                           .measure_cold = fake_cold,
                                           .measure_warm = fake_warm,
                                           .stop = fake_stop,
                                           .step_done = fake_step_done};

static void call(kace_ctx *ctx, const kace_plan *p, fake *f, double allocation_s, kace_schedule_outcome *out)
{
    kace_schedule_ops ops = fake_ops;
    ops.arg = f;
    kace_schedule_config config = {.allocation_s = allocation_s, .warmup_s = 0, .window_s = 0};
    f->log[0] = '\0';
    assert_kace_ok(ctx, kace_schedule_run(ctx, p, &config, &ops, out));
}

static void test_schedule_calls(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    /* 1 time-sliced run, 6 pairs in the pool, 3 of them again cold. Before
     * any run time is stored: a cold run 20 s, a warm one 2 s. */
    kace_plan *p = parse(ctx, "workloads a b c d\nmode timeslice\nrun a b\nmode mps\npairs\n");
    fake *f = calloc(1, sizeof *f);
    f->cold_s = 20;
    f->warm_s = 2;
    kace_schedule_outcome out;
    /* Call 1, 30 s: the time-sliced run (20 s); the pool's 12 s do not fit
     * the 10 s left but fit a call: left whole; the cold repeats (60 s, more
     * than a call) as many as fit: none. */
    call(ctx, p, f, 30, &out);
    assert_string_equal(f->log, "C:ts-ab | | | ");
    assert_int_equal(out.measured, 1);
    assert_int_equal(out.left, 9);
    assert_string_equal(out.ending, KACE_ENDING_DEADLINE);
    /* Call 2: the pool, interleaved; then 18 s left: no cold repeat fits. */
    call(ctx, p, f, 30, &out);
    assert_string_equal(f->log, "| W:ab W:cd W:ac W:bd W:ad W:bc | | ");
    assert_int_equal(out.left, 3);
    /* Calls 3..5: one cold repeat each (20 s of 30), then the plan is done. */
    call(ctx, p, f, 30, &out);
    assert_string_equal(f->log, "| | C:ab-cold | ");
    call(ctx, p, f, 30, &out);
    call(ctx, p, f, 30, &out);
    assert_string_equal(f->log, "| | C:ad-cold | ");
    assert_int_equal(out.left, 0);
    assert_string_equal(out.ending, KACE_ENDING_FINISHED);
    call(ctx, p, f, 30, &out); /* nothing left: nothing measured */
    assert_string_equal(f->log, "| | | ");
    assert_int_equal(out.measured, 0);
    assert_string_equal(out.ending, KACE_ENDING_FINISHED);

    /* A visit's last call (no next call counted on): the pool's 12 s do not
     * fit the 10 s left, so 5 of its runs are measured now. */
    memset(f, 0, sizeof *f);
    f->cold_s = 20;
    f->warm_s = 2;
    kace_schedule_ops last_ops = fake_ops;
    last_ops.arg = f;
    kace_schedule_config last = {.allocation_s = 30, .next_call_s = KACE_SCHEDULE_NO_NEXT_CALL};
    assert_kace_ok(ctx, kace_schedule_run(ctx, p, &last, &last_ops, &out));
    assert_string_equal(f->log, "C:ts-ab | W:ab W:cd W:ac W:bd W:ad | | ");
    /* Runs projected at a fit's expected costs instead of the start
     * allowances (4 s a cold run, 0.5 s a pool run): all of them fit. */
    memset(f, 0, sizeof *f);
    f->cold_s = 4;
    f->warm_s = 0.5;
    kace_schedule_config expected = {.allocation_s = 30, .cold_start_s = 4, .warm_start_s = 0.5};
    assert_kace_ok(ctx, kace_schedule_run(ctx, p, &expected, &last_ops, &out));
    assert_string_equal(f->log, "C:ts-ab | W:ab W:cd W:ac W:bd W:ad W:bc | C:ab-cold C:ac-cold C:ad-cold | ");
    /* A next call of 10 s: the pool's 12 s would not fit it either, so as many as fit now. */
    memset(f, 0, sizeof *f);
    f->cold_s = 20;
    f->warm_s = 2;
    kace_schedule_config short_next = {.allocation_s = 30, .next_call_s = 10};
    assert_kace_ok(ctx, kace_schedule_run(ctx, p, &short_next, &last_ops, &out));
    assert_string_equal(f->log, "C:ts-ab | W:ab W:cd W:ac W:bd W:ad | | ");

    /* Runs faster than projected change nothing: the call is charged the
     * projected time (the same stored times give the same schedule). */
    memset(f, 0, sizeof *f);
    f->cold_s = 1;
    f->warm_s = 0.1;
    call(ctx, p, f, 30, &out);
    assert_string_equal(f->log, "C:ts-ab | | | ");
    /* Measured times project the next call: a pool run now takes 0.1 s?
     * Not yet measured: the plan's 2 s still; after call 2 it is. */
    call(ctx, p, f, 30, &out);
    assert_int_equal(out.measured, 6);

    /* A stop (a signal) ends the call between runs: killed, the rest left. */
    memset(f, 0, sizeof *f);
    f->cold_s = 1;
    f->warm_s = 1;
    f->stop_after = 3;
    call(ctx, p, f, 1000, &out);
    assert_int_equal(out.measured, 3);
    assert_int_equal(out.left, 7);
    assert_string_equal(out.ending, KACE_ENDING_KILLED);
    /* A signal during the second run: it is not stored nor counted. */
    memset(f, 0, sizeof *f);
    f->cold_s = 1;
    f->warm_s = 1;
    f->cancel_at = 2;
    call(ctx, p, f, 1000, &out);
    assert_string_equal(f->log, "C:ts-ab | | | "); /* each step still reports what it left */
    assert_int_equal(out.measured, 1);
    assert_int_equal(out.left, 9);
    assert_string_equal(out.ending, KACE_ENDING_KILLED);
    /* The measure step's done check counts what a call would measure: the
     * plan's runs and its cold repeats not stored yet. */
    size_t left = 99;
    kace_schedule_ops count_ops = fake_ops;
    count_ops.arg = f;
    kace_schedule_config count_config = {.allocation_s = 1000};
    size_t cold = 99;
    assert_kace_ok(ctx, kace_schedule_left(ctx, p, &count_config, &count_ops, &left, &cold));
    assert_int_equal(left, 9); /* 1 run measured before the signal: 10 - 1 */
    assert_int_equal(cold, 3); /* the time-sliced one measured, 3 cold repeats left */
    memset(f, 0, sizeof *f);
    assert_kace_ok(ctx, kace_schedule_left(ctx, p, &count_config, &count_ops, &left, &cold));
    assert_int_equal(left, 10);
    assert_int_equal(cold, 4); /* 1 time-sliced and 3 cold repeats; the 6 pairs are the pool's */
    /* A bad allocation is refused. */
    kace_schedule_ops ops = fake_ops;
    ops.arg = f;
    kace_schedule_config none = {.allocation_s = 0};
    assert_int_equal(kace_schedule_run(ctx, p, &none, &ops, &out), KACE_ERR_INVALID);
    free(f);
    kace_plan_free(&p);
    kace_ctx_free(&ctx);
}

/* The cold repeats are the colocations the plan repeats, then the first
 * others: a repeated colocation's spread across restarted processes. */
static void test_cold_repeats_are_repeated_colocations(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_plan *p = parse(ctx, "workloads a b c d\nmode mps\npairs\nset spread\nrepeat 3\nrun b d\nrun c d\n");
    fake *f = calloc(1, sizeof *f);
    f->cold_s = 1;
    f->warm_s = 1;
    kace_schedule_outcome out;
    call(ctx, p, f, 1000, &out);
    const char *cold = strstr(f->log, "| C:");
    assert_non_null(cold);
    assert_string_equal(cold, "| C:bd-cold C:cd-cold C:ab-cold | ");
    assert_string_equal(out.ending, KACE_ENDING_FINISHED);
    free(f);
    kace_plan_free(&p);
    kace_ctx_free(&ctx);
}

/* allowance_scale shortens the start allowances (stand-ins that run faster):
 * a cold run projected at 20 s does not fit 5 s; at 1/20 of that it does. */
static void test_allowance_scale(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_plan *p = parse(ctx, "workloads a b\nmode timeslice\nrun a b\n");
    fake *f = calloc(1, sizeof *f);
    f->cold_s = 1;
    kace_schedule_ops ops = fake_ops;
    ops.arg = f;
    kace_schedule_outcome out;
    kace_schedule_config config = {.allocation_s = 5};
    assert_kace_ok(ctx, kace_schedule_run(ctx, p, &config, &ops, &out));
    assert_int_equal(out.measured, 0);
    config.allowance_scale = 1.0 / 20;
    assert_kace_ok(ctx, kace_schedule_run(ctx, p, &config, &ops, &out));
    assert_int_equal(out.measured, 1);
    assert_string_equal(out.ending, KACE_ENDING_FINISHED);
    free(f);
    kace_plan_free(&p);
    kace_ctx_free(&ctx);
}

static void sql_exec(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK)
        fail_msg("%s: %s", sql, err);
    sqlite3_close(db);
}

static long long sql_int(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
    long long v = sqlite3_step(q) == SQLITE_ROW ? sqlite3_column_int64(q, 0) : -1;
    sqlite3_finalize(q);
    sqlite3_close(db);
    return v;
}

/* The campaign's tables: a store of schema 4 gains them (its data kept);
 * plans once per fingerprint; an allocation left open is closed as killed. */
static void test_campaign_tables(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    char path[1100];
    snprintf(path, sizeof path, "%s/campaign.db", scratch_dir("campaign_tables"));
    kace_store *s = NULL;
    assert_kace_ok(ctx, kace_store_open(ctx, path, &s));
    assert_kace_ok(ctx, kace_attempt_note(ctx, s, "some-run", "1111111111111111", KACE_RUN_OK));
    kace_store_close(&s);
    sql_exec(path, "DROP TABLE campaign_steps; DROP TABLE campaign_allocations; DROP TABLE campaign_plans;"
                   "UPDATE meta SET value='4' WHERE key='schema_version';");
    assert_kace_ok(ctx, kace_store_open(ctx, path, &s));
    assert_int_equal(sql_int(path, "SELECT value FROM meta WHERE key='schema_version'"), KACE_STORE_SCHEMA_VERSION);
    assert_int_equal(sql_int(path, "SELECT count(*) FROM campaign_attempts"), 1);
    assert_int_equal(sql_int(path, "SELECT count(*) FROM campaign_allocations"), 0);

    const char *text = "workloads a b\npairs\n";
    char fp[KACE_COMMAND_KEY_SIZE], fp2[KACE_COMMAND_KEY_SIZE];
    kace_plan_fingerprint(text, strlen(text), fp);
    kace_plan_fingerprint("workloads a c\npairs\n", strlen(text), fp2);
    assert_int_equal(strlen(fp), 16);
    assert_string_not_equal(fp, fp2);
    int64_t plan = 0, again = 0, alloc = 0, alloc2 = 0;
    int killed = -1;
    assert_kace_ok(ctx, kace_campaign_plan_note(ctx, s, "plan.txt", text, strlen(text), fp, &plan));
    assert_kace_ok(ctx, kace_campaign_plan_note(ctx, s, "plan.txt", text, strlen(text), fp, &again));
    assert_true(plan > 0);
    assert_int_equal(plan, again);
    assert_int_equal(sql_int(path, "SELECT count(*) FROM campaign_plans"), 1);
    /* A call killed -9: its row stays open until the next call closes it. */
    assert_kace_ok(ctx, kace_campaign_allocation_begin(ctx, s, plan, 600, &alloc, &killed));
    assert_int_equal(killed, 0);
    assert_kace_ok(ctx, kace_campaign_step_note(ctx, s, alloc, "pool", 4, 2, 40.0));
    assert_int_equal(sql_int(path, "SELECT count(*) FROM campaign_allocations WHERE ending IS NULL"), 1);
    assert_int_equal(sql_int(path, "SELECT round((julianday(deadline_at) - julianday(started_at)) * 86400) "
                                   "FROM campaign_allocations"),
                     600);
    assert_kace_ok(ctx, kace_campaign_allocation_begin(ctx, s, plan, 60, &alloc2, &killed));
    assert_int_equal(killed, 1);
    assert_int_equal(sql_int(path, "SELECT count(*) FROM campaign_allocations WHERE ending='killed' AND "
                                   "ended_at IS NULL"),
                     1);
    assert_kace_ok(ctx, kace_campaign_step_note(ctx, s, alloc2, "pool", 2, 0, 30.0));
    assert_kace_ok(ctx, kace_campaign_step_note(ctx, s, alloc2, "timeslice", 0, 1, 0.0));
    assert_kace_ok(ctx, kace_campaign_allocation_end(ctx, s, alloc2, KACE_ENDING_FINISHED));
    assert_int_equal(sql_int(path, "SELECT count(*) FROM campaign_allocations WHERE ending='finished' AND "
                                   "ended_at IS NOT NULL"),
                     1);
    size_t runs = 0;
    double seconds = 0;
    assert_kace_ok(ctx, kace_campaign_step_times(ctx, s, "pool", &runs, &seconds));
    assert_int_equal(runs, 6);
    assert_true(fabs(seconds - 70.0) < 1e-9);
    assert_kace_ok(ctx, kace_campaign_step_times(ctx, s, "timeslice", &runs, &seconds));
    assert_int_equal(runs, 0);
    /* An ending outside the four is refused by the table. */
    assert_int_not_equal(kace_campaign_allocation_end(ctx, s, alloc2, "maybe"), KACE_OK);
    kace_store_close(&s);
    kace_ctx_free(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pairs_triples_and_splits),
        cmocka_unit_test(test_repeat_order_duplicates_modes),
        cmocka_unit_test(test_occur_plan),
        cmocka_unit_test(test_errors_name_line_and_column),
        cmocka_unit_test(test_command_key_follows_command_and_code),
        cmocka_unit_test(test_key_cache_reads_files_once_a_call),
        cmocka_unit_test(test_retry_rule),
        cmocka_unit_test(test_attempts_in_the_store),
        cmocka_unit_test(test_interleave),
        cmocka_unit_test(test_pool_order),
        cmocka_unit_test(test_time_fit_rule),
        cmocka_unit_test(test_schedule_calls),
        cmocka_unit_test(test_cold_repeats_are_repeated_colocations),
        cmocka_unit_test(test_allowance_scale),
        cmocka_unit_test(test_campaign_tables),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
