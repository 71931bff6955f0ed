/* sacct output and the site-history replay (kace simulate --sacct): fields
 * parse to the right values, bad fields fail at their line and column, the
 * mapping's first match wins, a job without a workload never shares a GPU
 * under any scenario, and colocated rates are the measured ones where
 * measured and the model's elsewhere. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/sacct.h"
#include "kace/sim.h"
#include "kace/store.h"
#include "testutil.h"

static kace_ctx *ctx;
static kace_dataset *pairs, *triples, *profiles;
static kace_model *model;
static kace_model_rates holder;
static kace_rate_source rates;
static int known[KACE_SCHED_MAX_WORKLOADS], n_known;

static int setup(void **state)
{
    (void)state;
    ctx = kace_ctx_new();
    char db[4096];
    snprintf(db, sizeof db, "%s/kace.db", scratch_dir("sacct"));
    kace_store *store = NULL;
    if (kace_store_open(ctx, db, &store))
        return -1;
    static const char *const files[] = {"profiles/system.csv", "colocations/pairs.csv", "colocations/triples.csv",
                                        "splits.csv"};
    kace_splits *splits = NULL;
    if (import_reference(ctx, store, files, 4) || kace_store_load_dataset(ctx, store, "pairs", false, &pairs) ||
        kace_store_load_dataset(ctx, store, "triples", false, &triples) ||
        kace_store_load_splits(ctx, store, pairs, &splits))
        return -1;
    kace_store_close(&store);
    int rows[256];
    size_t n = 0;
    for (size_t i = 0; i < splits->n && n < 256; i++)
        if (splits->rows[i].train && splits->rows[i].n_occur == 3 && splits->rows[i].seed == 10)
            rows[n++] = splits->rows[i].colocation;
    kace_splits_free(&splits);
    kace_fit_spec spec = {.kind = KACE_MODEL_SLOWDOWN};
    kace_slowdown_params_default(&spec.slowdown);
    if (kace_model_fit_rows(ctx, pairs, rows, n, &spec, &model) ||
        kace_dataset_profiles_only(ctx, pairs, &profiles) ||
        kace_rate_source_model(ctx, &holder, kace_model_predictor(model), profiles, &rates))
        return -1;
    for (size_t i = 0; i < pairs->n_workloads; i++)
        for (size_t c = 0; c < pairs->n_colocations; c++)
            if (kace_colocation_has(&pairs->colocations[c], (int)i)) {
                known[n_known++] = (int)i;
                break;
            }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kace_model_free(&model);
    kace_dataset_free(&profiles);
    kace_dataset_free(&pairs);
    kace_dataset_free(&triples);
    kace_ctx_free(&ctx);
    return 0;
}

static const char header[] = "JobID|JobName|User|Submit|Start|End|Elapsed|AllocTRES|NodeList|State|AdminComment\n";

static kace_status parse(const char *body, kace_sacct **out)
{
    static char text[1 << 16];
    snprintf(text, sizeof text, "%s%s", header, body);
    return kace_sacct_parse(ctx, text, strlen(text), "site.sacct", out);
}

static void test_fields(void **state)
{
    (void)state;
    kace_sacct *s = NULL;
    assert_kace_ok(ctx, parse("7_3|a b|u1|2026-02-28T23:00:00|2026-03-01T00:00:00|2026-03-01T01:00:30|01:00:30|"
                              "billing=3,gres/gpu:a100=3,gres/gpu=3,mem=1.5G,node=3|g[08-10]|CANCELLED by 1000|\n"
                              "8+1|b|u2|2026-03-01T00:00:00|Unknown|Unknown|00:00:00||None assigned|PENDING|\n"
                              "9|c|u3|2026-03-01T00:00:00|2026-03-01T00:00:00|2026-03-01T00:10:00|00:10:00|"
                              "gres/mps=50,node=1|g09|COMPLETED|x\n",
                              &s));
    assert_int_equal(s->n_jobs, 3);
    const kace_sacct_job *j = &s->jobs[0];
    assert_string_equal(j->job_id, "7_3");
    assert_string_equal(j->name, "a b");
    assert_string_equal(j->state, "CANCELLED");
    assert_true(j->ran);
    assert_true(fabs(j->start - j->submit - 3600) < 1e-9); /* across the month's end */
    assert_true(fabs(j->end - j->start - 3630) < 1e-9);
    assert_int_equal(j->gpus, 3);
    assert_int_equal(j->n_nodes, 3);
    assert_int_equal(j->line, 2);
    assert_false(s->jobs[1].ran);
    assert_int_equal(s->jobs[1].n_nodes, 0);
    assert_int_equal(s->jobs[2].gpus, 0);
    assert_int_equal(s->jobs[2].gpu_shares, 50);
    assert_int_equal(s->n_nodes, 3);
    assert_string_equal(s->nodes[0], "g08");
    assert_string_equal(s->nodes[2], "g10");
    for (size_t i = 0; i < s->n_nodes; i++)
        assert_int_equal(s->node_gpus[i], 1);
    kace_sacct_free(&s);
}

static void expect_error(const char *body, const char *where, const char *what)
{
    kace_sacct *s = NULL;
    assert_int_equal(parse(body, &s), KACE_ERR_PARSE);
    assert_null(s);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "site.sacct:%s: ", where);
    if (strncmp(kace_errmsg(ctx), prefix, strlen(prefix)) != 0 || !strstr(kace_errmsg(ctx), what))
        fail_msg("expected '%s...%s', got '%s'", prefix, what, kace_errmsg(ctx));
}

static void test_bad_fields(void **state)
{
    (void)state;
    const char *ok = "2026-01-01T00:00:00|2026-01-01T00:00:00|2026-01-01T01:00:00|01:00:00";
    char body[512];
    snprintf(body, sizeof body, "1|a|u|%s|gres/gpu=1|n[1-2]x[3]|COMPLETED|\n", ok);
    expect_error(body, "2:94", "more than one [..]");
    snprintf(body, sizeof body, "1|a|u|2026-01-01T00:00:00|2026-01-01T00:00:00|2026-01-01T01:00:00|1:00:00|gres/gpu=1|n1|"
                                "COMPLETED|\n");
    expect_error(body, "2:67", "Elapsed '1:00:00'");
    snprintf(body, sizeof body, "1|a|u|%s|gres/gpu=3,node=2|n[1-2]|COMPLETED|\n", ok);
    expect_error(body, "2:76", "3 GPUs do not split evenly over 2 nodes");
    snprintf(body, sizeof body, "1|a|u|%s|gres/gpu=1,node=2|n1|COMPLETED|\n", ok);
    expect_error(body, "2:76", "node=2 but NodeList names 1 nodes");
    snprintf(body, sizeof body, "1|a|u|2026-02-29T00:00:00|2026-03-01T00:00:00|2026-03-01T01:00:00|01:00:00|"
                                "gres/gpu=1|n1|COMPLETED|\n");
    expect_error(body, "2:7", "Submit '2026-02-29T00:00:00' is not a time");
    snprintf(body, sizeof body, "1|a|u|%s|gres/gpu=1|None assigned|COMPLETED|\n", ok);
    expect_error(body, "2:87", "ran (Start and End are times) on no node");
}

static void test_map_first_match(void **state)
{
    (void)state;
    kace_sacct_map *m = NULL;
    static const char map[] = "# comment\n"
                              "user   alice      -\n"
                              "name   bert*      bert-base-cased_batch8-train   # trailing comment\n"
                              "name   *          vit_h_14_batch2-train\n";
    assert_kace_ok(ctx, kace_sacct_map_parse(ctx, map, strlen(map), "site.map", &m));
    assert_int_equal(kace_sacct_map_n_rules(m), 3);
    kace_sacct_job j;
    memset(&j, 0, sizeof j);
    snprintf(j.name, sizeof j.name, "bert-large");
    snprintf(j.user, sizeof j.user, "alice");
    assert_int_equal(kace_sacct_map_match(m, &j), 0); /* the user rule comes first */
    snprintf(j.user, sizeof j.user, "bob");
    assert_int_equal(kace_sacct_map_match(m, &j), 1);
    snprintf(j.name, sizeof j.name, "other");
    assert_int_equal(kace_sacct_map_match(m, &j), 2);
    int line = 0;
    assert_string_equal(kace_sacct_map_rule(m, 1, &line), "bert-base-cased_batch8-train");
    assert_int_equal(line, 3);
    assert_int_equal(kace_sacct_map_match(NULL, &j), -1);
    kace_sacct_map_free(&m);
    static const char bad[] = "name a b c\n";
    assert_int_equal(kace_sacct_map_parse(ctx, bad, strlen(bad), "site.map", &m), KACE_ERR_PARSE);
    assert_non_null(strstr(kace_errmsg(ctx), "site.map:1:"));
}

/* 40 overlapping one-GPU jobs on two GPUs, every third without a stored
 * workload; under shard and kace the others share, those never do. */
static void test_no_workload_never_shares(void **state)
{
    (void)state;
    static const char *const names[] = {"bert-base-cased_batch8-train", "vit_h_14_batch2-train", "site-job",
                                        "whisper-large-v2_batch2-inf", "bert-base-cased_batch2-train", "misc"};
    char body[1 << 15];
    size_t len = 0;
    for (int i = 0; i < 40; i++)
        len += (size_t)snprintf(body + len, sizeof body - len,
                                "%d|%s|u|2026-01-01T00:%02d:00|2026-01-01T00:%02d:00|2026-01-01T0%d:%02d:00|00:00:00|"
                                "gres/gpu=1,node=1|n%d|COMPLETED|\n",
                                100 + i, names[i % 6], i, i, 1 + i % 3, i, 1 + i % 2);
    kace_sacct *s = NULL;
    assert_kace_ok(ctx, parse(body, &s));
    kace_dataset *prof = NULL;
    assert_kace_ok(ctx, kace_dataset_profiles_only(ctx, pairs, &prof));
    kace_model_rates h;
    kace_rate_source r;
    assert_kace_ok(ctx, kace_rate_source_model(ctx, &h, kace_model_predictor(model), prof, &r));
    kace_sim_job *jobs = NULL;
    size_t *row = NULL, n_jobs = 0, n_measured = 0, n_predicted = 0;
    int pool[KACE_SCHED_MAX_WORKLOADS], n_pool = 0, n_share = 0;
    kace_sacct_counts cnt;
    assert_kace_ok(ctx, kace_sim_jobs_from_sacct(ctx, s, NULL, prof, known, n_known, 32, &jobs, &row, &n_jobs, pool,
                                                 &n_pool, &n_share, &cnt));
    assert_int_equal(n_jobs, 40);
    assert_int_equal(cnt.no_workload, 13); /* site-job and misc: i % 6 in {2, 5} */
    assert_int_equal(cnt.by_name, 27);
    int stand_in = kace_dataset_find(prof, KACE_SIM_NO_WORKLOAD);
    assert_true(stand_in >= 0);
    assert_int_equal(n_pool, n_share + 1);
    assert_int_equal(pool[n_pool - 1], stand_in);
    const kace_dataset *sets[2] = {pairs, triples};
    kace_truth *t = NULL;
    assert_kace_ok(ctx, kace_truth_complete(ctx, sets, 2, &r, pool, n_share, 3, &t, &n_measured, &n_predicted));
    int node_gpus[2] = {1, 1};
    static const kace_sched_policy policies[] = {KACE_SCHED_PACKING, KACE_SCHED_KACE};
    for (size_t p = 0; p < 2; p++) {
        kace_sim_config cfg = {.record_timeline = false};
        kace_sched_config_default(&cfg.sched, policies[p]);
        for (size_t i = 0; i < n_jobs; i++)
            jobs[i].gpu_milli = policies[p] == KACE_SCHED_PACKING ? 330 : 1000;
        kace_sim_result *res = NULL;
        assert_kace_ok(ctx, kace_sim_run(ctx, &cfg, prof, t, pool, n_pool, &r, node_gpus, 2, jobs, n_jobs, &res));
        assert_int_equal(res->n_completed, n_jobs);
        assert_true(res->shared_fraction > 0); /* the others did share */
        for (size_t i = 0; i < n_jobs; i++) {
            if (jobs[i].workload != stand_in)
                continue;
            for (size_t k = 0; k < n_jobs; k++)
                if (k != i && res->gpu[k] == res->gpu[i] && res->start[k] < res->finish[i] - 1e-9 &&
                    res->finish[k] > res->start[i] + 1e-9)
                    fail_msg("policy %s: job %zu (no workload) shared GPU %d with job %zu",
                             kace_sched_policy_name(policies[p]), i, res->gpu[i], k);
            assert_true(fabs(res->finish[i] - res->start[i] - jobs[i].work) < 1e-6); /* ran at full speed */
        }
        kace_sim_result_free(&res);
    }
    kace_truth_free(&t);
    free(jobs);
    free(row);
    kace_dataset_free(&prof);
    kace_sacct_free(&s);
}

/* kace_truth_complete: measured fractions where the group was measured,
 * the rate source's elsewhere, and every group of the pool present. */
static void test_truth_measured_else_predicted(void **state)
{
    (void)state;
    const kace_dataset *sets[2] = {pairs, triples};
    kace_truth *measured = NULL, *complete = NULL;
    size_t n_measured = 0, n_predicted = 0;
    assert_kace_ok(ctx, kace_truth_build(ctx, sets, 2, &measured));
    int pool[6];
    for (int i = 0; i < 6; i++)
        pool[i] = known[i];
    assert_kace_ok(ctx, kace_truth_complete(ctx, sets, 2, &rates, pool, 6, 2, &complete, &n_measured, &n_predicted));
    assert_int_equal(n_measured + n_predicted, 21); /* pairs of 6 with repeats */
    assert_true(n_measured > 0 && n_predicted > 0);
    size_t seen_measured = 0, seen_predicted = 0;
    for (int a = 0; a < 6; a++)
        for (int b = a; b < 6; b++) {
            int g[2] = {pool[a], pool[b]};
            double want[2], got[2], conf;
            assert_kace_ok(ctx, kace_truth_rates(ctx, complete, g, 2, got));
            if (kace_truth_rates(ctx, measured, g, 2, want) == KACE_OK) {
                seen_measured++;
            } else {
                assert_kace_ok(ctx, rates.rates(rates.self, ctx, g, 2, want, &conf));
                seen_predicted++;
            }
            assert_true(fabs(got[0] - want[0]) < 1e-12 && fabs(got[1] - want[1]) < 1e-12);
        }
    assert_int_equal(seen_measured, n_measured);
    assert_int_equal(seen_predicted, n_predicted);
    kace_truth_free(&measured);
    kace_truth_free(&complete);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fields),
        cmocka_unit_test(test_bad_fields),
        cmocka_unit_test(test_map_first_match),
        cmocka_unit_test(test_no_workload_never_shares),
        cmocka_unit_test(test_truth_measured_else_predicted),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
