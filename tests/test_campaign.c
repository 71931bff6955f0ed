/* Campaign plans (lib/measure/campaign.c): expansion, order, duplicates, the n_occur
 * plan and every error's position. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pairs_triples_and_splits),
        cmocka_unit_test(test_repeat_order_duplicates_modes),
        cmocka_unit_test(test_occur_plan),
        cmocka_unit_test(test_errors_name_line_and_column),
        cmocka_unit_test(test_command_key_follows_command_and_code),
        cmocka_unit_test(test_retry_rule),
        cmocka_unit_test(test_attempts_in_the_store),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
