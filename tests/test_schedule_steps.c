/* The whole allocation's call (include/kace/campaign.h): the profile
 * step's retry rules, the step selection rule, and the driver that runs the
 * wanted steps in order under one deadline, against a fake store. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "kace/campaign.h"
#include "kace/kernels.h"
#include "testutil.h"

static void test_profile_dropped_after_two_failures(void **state)
{
    (void)state;
    assert_false(kace_profile_dropped(0));
    assert_false(kace_profile_dropped(1));
    assert_true(kace_profile_dropped(2));
    assert_true(kace_profile_dropped(5));
}

static void test_profile_need(void **state)
{
    (void)state;
    const double s = KACE_PROFILE_START_S;
    /* Before any profile: its windows and its kind's start allowance. */
    assert_true(fabs(kace_profile_need_s(50, s, 0, 0, 0) - (50 + s)) < 1e-9);
    assert_true(fabs(kace_profile_start_s(KACE_CATALOG_CUDA) - KACE_PROFILE_START_CUDA_S) < 1e-9);
    assert_true(fabs(kace_profile_start_s(KACE_CATALOG_TORCH) - KACE_PROFILE_START_TORCH_S) < 1e-9);
    assert_true(fabs(kace_profile_start_s(KACE_CATALOG_LLM) - KACE_PROFILE_START_TORCH_S) < 1e-9);
    assert_true(fabs(kace_profile_start_s(KACE_CATALOG_CMD) - s) < 1e-9);
    assert_true(KACE_PROFILE_START_CUDA_S < KACE_PROFILE_START_TORCH_S);
    /* The longest profile of its kind so far, by a quarter, where that is longer. */
    assert_true(fabs(kace_profile_need_s(50, s, 200, 0, 0) - 250) < 1e-9);
    assert_true(fabs(kace_profile_need_s(50, s, 40, 0, 0) - (50 + s)) < 1e-9);
    /* A try that ran out of time after 120 s: the next gets 180 s. */
    assert_true(fabs(kace_profile_need_s(50, s, 0, 120, 0) - 180) < 1e-9);
    assert_true(fabs(kace_profile_need_s(50, s, 200, 120, 0) - 250) < 1e-9);
    /* Twice out of time: half as long again as the longer try. */
    assert_true(fabs(kace_profile_need_s(50, s, 0, 180, 0) - 270) < 1e-9);
    /* The cap bounds all of it (a need longer than a call would never run). */
    assert_true(fabs(kace_profile_need_s(50, s, 0, 400, 390) - 390) < 1e-9);
    assert_true(fabs(kace_profile_need_s(-1, s, 0, 0, 0) - s) < 1e-9);
    assert_true(fabs(kace_profile_need_s(10, -1, 0, 0, 0) - 10) < 1e-9);
}

/* The window sized to a time: unchanged where the work fits at it, else
 * the longest that fits, never below the least. */
static void test_fit_window(void **state)
{
    (void)state;
    /* 10 warm runs, 2 cold, 1 PyTorch profile, 1 CUDA C one: windows 12 + 2 x 1.5 = 15. */
    kace_fit_work w = {.profiles_torch = 1,
                       .profiles_other = 1,
                       .cold_runs = 2,
                       .warm_runs = 10,
                       .profile_windows = 1.5,
                       .profile_fixed_s = 3,
                       .run_warmup_s = 1};
    double fixed = 12 * 1 + 2 * 3 + 2 * KACE_FIT_COLD_RUN_S + 10 * KACE_FIT_WARM_RUN_S + KACE_FIT_PROFILE_TORCH_S +
                   KACE_FIT_PROFILE_S;
    double need = 0;
    /* Time enough at the longest window (the fit plans KACE_FIT_SHARE of it): it stays. */
    assert_true(KACE_FIT_SHARE > 0.5 && KACE_FIT_SHARE <= 1);
    assert_true(kace_fit_window(&w, fixed + 15 * 10, 1, 10, NULL) < 10);
    assert_true(fabs(kace_fit_window(&w, (fixed + 15 * 10) / KACE_FIT_SHARE, 1, 10, &need) - 10) < 1e-9);
    assert_true(fabs(need - (fixed + 150)) < 1e-9);
    assert_true(fabs(kace_fit_window(&w, 1e6, 1, 10, NULL) - 10) < 1e-9);
    /* Less: the window that uses it exactly. */
    assert_true(fabs(kace_fit_window(&w, (fixed + 15 * 4) / KACE_FIT_SHARE, 1, 10, &need) - 4) < 1e-9);
    assert_true(fabs(need - (fixed + 60)) < 1e-9);
    /* Too little for the least window, or none at all: the least. */
    assert_true(fabs(kace_fit_window(&w, fixed, 1, 10, &need) - 1) < 1e-9);
    assert_true(fabs(need - (fixed + 15)) < 1e-9);
    assert_true(fabs(kace_fit_window(&w, -5, 1, 10, NULL) - 1) < 1e-9);
    assert_true(fabs(kace_fit_window(&w, NAN, 1, 10, NULL) - 1) < 1e-9);
    /* Profiles given their own windows count them as fixed time. */
    kace_fit_work given = w;
    given.profile_windows = 0;
    assert_true(fabs(kace_fit_window(&given, (fixed + 12 * 4) / KACE_FIT_SHARE, 1, 10, NULL) - 4) < 1e-9);
    /* Stand-ins 20 times faster: the expected costs shrink, warm-ups are as given. */
    kace_fit_work fast = w;
    fast.scale = 0.05;
    double fast_fixed = 12 * 1 + 2 * 3 + (fixed - 18) * 0.05;
    assert_true(fabs(kace_fit_window(&fast, (fast_fixed + 15 * 2) / KACE_FIT_SHARE, 0.05, 10, NULL) - 2) < 1e-9);
    /* Nothing left: the longest window. */
    kace_fit_work none = {.run_warmup_s = 1};
    assert_true(fabs(kace_fit_window(&none, 0, 1, 10, &need) - 10) < 1e-9);
    assert_true(fabs(need) < 1e-9);
}

static void put_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* A catalog workload's key: its line as written and its files' contents,
 * the same wherever the files are; another with a fix to either. */
static void test_written_command_key(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    char a[1100], b[1100], k1[KACE_COMMAND_KEY_SIZE], k2[KACE_COMMAND_KEY_SIZE], k3[KACE_COMMAND_KEY_SIZE];
    const char *dir = scratch_dir("written_key");
    snprintf(a, sizeof a, "%s/here.py", dir);
    snprintf(b, sizeof b, "%s/there.py", dir);
    put_file(a, "print('model')\n");
    put_file(b, "print('model')\n");
    char *argv_a[] = {"python3", a, "--batch", "8", NULL}, *argv_b[] = {"python3", b, "--batch", "8", NULL};
    const char *line = "m_batch8-train torch @PY@ @W@/m.py --batch 8";
    assert_kace_ok(ctx, kace_written_command_key(ctx, line, argv_a, k1));
    assert_kace_ok(ctx, kace_written_command_key(ctx, line, argv_b, k2));
    assert_string_equal(k1, k2); /* unpacked elsewhere: the same workload */
    assert_int_equal(strlen(k1), 16);
    put_file(b, "print('fixed model')\n");
    assert_kace_ok(ctx, kace_written_command_key(ctx, line, argv_b, k3));
    assert_string_not_equal(k1, k3); /* its code changed */
    assert_kace_ok(ctx, kace_written_command_key(ctx, "m_batch8-train torch @PY@ @W@/m.py --batch 16", argv_a, k3));
    assert_string_not_equal(k1, k3); /* its line changed */
    kace_ctx_free(&ctx);
}

static void test_step_names(void **state)
{
    (void)state;
    static const char *const want[] = {"probe", "profile", "plan", "measure", "ncu", "export"};
    for (int i = 0; i < KACE_STEP_COUNT; i++)
        assert_string_equal(kace_campaign_step_name((kace_campaign_step)i), want[i]);
    assert_string_equal(kace_campaign_step_name(KACE_STEP_COUNT), "?");
}

/* The steps wanted for p, as "profile,plan,...". */
static void wanted(const kace_campaign_progress *p, char *out, size_t size)
{
    out[0] = '\0';
    for (int i = 0; i < KACE_STEP_COUNT; i++)
        if (kace_campaign_step_wanted((kace_campaign_step)i, p)) {
            size_t at = strlen(out);
            snprintf(out + at, size - at, "%s%s", at ? "," : "", kace_campaign_step_name((kace_campaign_step)i));
        }
}

static void test_step_selection(void **state)
{
    (void)state;
    char got[128];
    /* A fresh store, a catalog of 5: profiles first; no plan while any is left. */
    kace_campaign_progress p = {.to_profile = 5, .can_export = true, .can_ncu = true};
    wanted(&p, got, sizeof got);
    assert_string_equal(got, "profile,export");
    /* A probe where the caller has one, until the store holds its findings. */
    p.can_probe = true;
    wanted(&p, got, sizeof got);
    assert_string_equal(got, "probe,profile,export");
    p.probed = true;
    /* Every workload profiled or dropped: the plan, made from the 4 profiled. */
    p.to_profile = 0;
    p.profiled = 4;
    p.unplanned = 4;
    wanted(&p, got, sizeof got);
    assert_string_equal(got, "plan,export");
    /* A plan: its runs; ncu waits while any is left. */
    p.unplanned = 0;
    p.have_plan = true;
    p.runs_left = 30;
    p.ncu_left = 4;
    wanted(&p, got, sizeof got);
    assert_string_equal(got, "measure,export");
    p.runs_left = 0;
    wanted(&p, got, sizeof got);
    assert_string_equal(got, "ncu,export");
    /* Without ncu, or with ncu done: export only. */
    p.can_ncu = false;
    wanted(&p, got, sizeof got);
    assert_string_equal(got, "export");
    p.can_export = false;
    wanted(&p, got, sizeof got);
    assert_string_equal(got, "");
    /* A workload added to the catalog later: profiled first, while the stored
     * plan's runs go on; then the plan is extended with it. */
    p = (kace_campaign_progress){.to_profile = 1, .profiled = 4, .unplanned = 0, .have_plan = true, .runs_left = 3,
                                 .can_ncu = true, .ncu_left = 4};
    wanted(&p, got, sizeof got);
    assert_string_equal(got, "profile,measure");
    p.to_profile = 0;
    p.unplanned = 1;
    wanted(&p, got, sizeof got);
    assert_string_equal(got, "plan,measure");
    /* A plan given as a file (no catalog): its runs only. */
    p = (kace_campaign_progress){.have_plan = true, .runs_left = 7};
    wanted(&p, got, sizeof got);
    assert_string_equal(got, "measure");
}

/* A fake store and clock: each step's run consumes a set time and does what
 * the progress says; the log says which steps ran with how long. */
typedef struct fake {
    double now;
    kace_campaign_progress p;
    double step_s[KACE_STEP_COUNT];
    char log[512];
    int stop_in;      /* the step (1 + index) during which "a signal" comes (0: never) */
    bool stopped;
    int fail_in;      /* the step (1 + index) whose run fails (0: none) */
    double need[KACE_STEP_COUNT];
    int notes;
} fake;

static double fake_now(void *arg)
{
    return ((fake *)arg)->now;
}

static kace_status fake_progress(void *arg, kace_campaign_progress *p)
{
    *p = ((fake *)arg)->p;
    return KACE_OK;
}

static kace_status fake_run(void *arg, kace_campaign_step step, double until_s, double used_s,
                            kace_campaign_step_report *r)
{
    fake *f = arg;
    size_t at = strlen(f->log);
    snprintf(f->log + at, sizeof f->log - at, "%s(%.0f/%.0f) ", kace_campaign_step_name(step), until_s, used_s);
    if (f->fail_in == (int)step + 1)
        return KACE_ERR_IO;
    double t = f->step_s[step] < until_s ? f->step_s[step] : until_s;
    f->now += t;
    if (f->stop_in == (int)step + 1)
        f->stopped = true;
    switch (step) { /* what each step leaves, when its time sufficed */
    case KACE_STEP_PROBE: f->p.probed = true; break;
    case KACE_STEP_PROFILE:
        if (f->step_s[step] <= until_s) {
            r->done = f->p.to_profile;
            f->p.profiled += f->p.to_profile;
            f->p.unplanned += f->p.to_profile;
            f->p.to_profile = 0;
        }
        break;
    case KACE_STEP_PLAN:
        f->p.have_plan = true;
        f->p.runs_left += 6 * f->p.unplanned;
        f->p.unplanned = 0;
        break;
    case KACE_STEP_MEASURE:
        if (f->step_s[step] <= until_s)
            f->p.runs_left = 0;
        break;
    case KACE_STEP_NCU: f->p.ncu_left = 0; break;
    default: break;
    }
    return KACE_OK;
}

static double fake_need(void *arg, kace_campaign_step step)
{
    return ((fake *)arg)->need[step];
}

static bool fake_stop(void *arg)
{
    return ((fake *)arg)->stopped;
}

static kace_status fake_step_done(void *arg, const kace_campaign_step_report *r)
{
    fake *f = arg;
    if (!r->ran) { /* a step left to the next call: its need and the time the call had */
        size_t at = strlen(f->log);
        snprintf(f->log + at, sizeof f->log - at, "(%s needs %.0f, has %.0f, leaves %zu) ",
                 kace_campaign_step_name(r->step), r->need_s, r->until_s, r->left);
    }
    f->notes++;
    return KACE_OK;
}

static const kace_campaign_ops fake_ops = {
    .now_s = fake_now, .progress = fake_progress, .need_s = fake_need, .run = fake_run, .stop = fake_stop,
    .step_done = fake_step_done};

static kace_status call(kace_ctx *ctx, fake *f, double allocation_s, kace_campaign_outcome *out)
{
    kace_campaign_ops ops = fake_ops;
    ops.arg = f;
    kace_campaign_config config = {.allocation_s = allocation_s};
    f->log[0] = '\0';
    f->notes = 0;
    return kace_campaign_run(ctx, &config, &ops, out);
}

static void test_driver(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    fake *f = calloc(1, sizeof *f);
    kace_campaign_outcome out;
    /* One call does it all: probe, profiles, plan, runs, ncu, export, each
     * with what the call has left (export's reserve kept from the others). */
    f->p = (kace_campaign_progress){.can_probe = true, .to_profile = 3, .can_ncu = true, .ncu_left = 3,
                                    .can_export = true};
    f->step_s[KACE_STEP_PROBE] = 60;
    f->step_s[KACE_STEP_PROFILE] = 200;
    f->step_s[KACE_STEP_PLAN] = 1;
    f->step_s[KACE_STEP_MEASURE] = 300;
    f->step_s[KACE_STEP_NCU] = 100;
    f->step_s[KACE_STEP_EXPORT] = 2;
    assert_kace_ok(ctx, call(ctx, f, 1000, &out));
    assert_string_equal(f->log, "probe(990/0) profile(930/60) plan(730/260) measure(729/261) ncu(429/561) "
                                "export(339/661) ");
    assert_int_equal(f->notes, 6);
    assert_int_equal(out.left, 0);
    assert_string_equal(out.ending, KACE_ENDING_FINISHED);
    /* A call with everything done: export only, finished. */
    assert_kace_ok(ctx, call(ctx, f, 1000, &out));
    assert_string_equal(f->log, "export(1000/0) ");
    assert_string_equal(out.ending, KACE_ENDING_FINISHED);

    /* A short call: the profiles do not fit; nothing after them is wanted
     * (no plan while profiles are left); the deadline ends it, export still runs. */
    memset(f, 0, sizeof *f);
    f->p = (kace_campaign_progress){.to_profile = 3, .can_export = true};
    f->step_s[KACE_STEP_PROFILE] = 500;
    f->step_s[KACE_STEP_PLAN] = 1;
    f->step_s[KACE_STEP_MEASURE] = 300;
    assert_kace_ok(ctx, call(ctx, f, 300, &out));
    assert_string_equal(f->log, "profile(290/0) export(10/290) ");
    assert_int_equal(out.left, 3);
    assert_string_equal(out.ending, KACE_ENDING_DEADLINE);
    /* The next call resumes from what the store holds. */
    f->step_s[KACE_STEP_PROFILE] = 100;
    assert_kace_ok(ctx, call(ctx, f, 600, &out));
    assert_string_equal(f->log, "profile(590/0) plan(490/100) measure(489/101) export(199/401) ");
    assert_string_equal(out.ending, KACE_ENDING_FINISHED);

    /* A step whose time need the call does not hold is left whole to the
     * next call; the steps after it still run when wanted. */
    memset(f, 0, sizeof *f);
    f->p = (kace_campaign_progress){.can_probe = true, .have_plan = true, .runs_left = 2, .can_export = true};
    f->need[KACE_STEP_PROBE] = 120;
    f->step_s[KACE_STEP_MEASURE] = 50;
    assert_kace_ok(ctx, call(ctx, f, 100, &out));
    assert_string_equal(f->log, "(probe needs 120, has 90, leaves 1) measure(90/0) export(50/50) ");
    assert_int_equal(f->notes, 3); /* the probe's report too: nothing done */
    assert_false(out.ran & (1u << KACE_STEP_PROBE));
    assert_true(out.ran & (1u << KACE_STEP_MEASURE));

    /* A signal during the profiles: no step after it, killed. */
    memset(f, 0, sizeof *f);
    f->p = (kace_campaign_progress){.to_profile = 3, .can_export = true};
    f->step_s[KACE_STEP_PROFILE] = 10;
    f->stop_in = 1 + KACE_STEP_PROFILE;
    assert_kace_ok(ctx, call(ctx, f, 600, &out));
    assert_string_equal(f->log, "profile(590/0) ");
    assert_string_equal(out.ending, KACE_ENDING_KILLED);
    /* A failing step stops the call, its report still noted. */
    memset(f, 0, sizeof *f);
    f->p = (kace_campaign_progress){.to_profile = 3, .can_export = true};
    f->fail_in = 1 + KACE_STEP_PROFILE;
    assert_int_equal(call(ctx, f, 600, &out), KACE_ERR_IO);
    assert_string_equal(f->log, "profile(590/0) ");
    assert_int_equal(f->notes, 1);
    assert_string_equal(out.ending, KACE_ENDING_FAILED);
    /* No allocation: refused. */
    assert_int_equal(call(ctx, f, 0, &out), KACE_ERR_INVALID);
    free(f);
    kace_ctx_free(&ctx);
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

/* The tables of schema 6: a catalog and the plans made from it, each
 * profile try with its command key (what the retry rules read), ncu's tries. */
static void test_store_tables(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    char path[1100];
    snprintf(path, sizeof path, "%s/steps.db", scratch_dir("schedule_steps"));
    kace_store *s = NULL;
    assert_kace_ok(ctx, kace_store_open(ctx, path, &s));
    const char *catalog = "a cuda /bin/a\nb cuda /bin/b\n";
    char fp[KACE_COMMAND_KEY_SIZE];
    kace_plan_fingerprint(catalog, strlen(catalog), fp);
    int64_t cat = 0, again = 0, plan = 0, alloc = 0;
    int killed = 0;
    assert_kace_ok(ctx, kace_campaign_catalog_note(ctx, s, "catalog.txt", catalog, strlen(catalog), fp, &cat));
    assert_kace_ok(ctx, kace_campaign_catalog_note(ctx, s, "catalog.txt", catalog, strlen(catalog), fp, &again));
    assert_int_equal(cat, again);
    assert_kace_ok(ctx, kace_campaign_allocation_begin(ctx, s, cat, 600, &alloc, &killed));
    /* No plan made yet. */
    char *text = NULL;
    size_t len = 99;
    assert_kace_ok(ctx, kace_campaign_made_plan(ctx, s, &text, &len, &plan));
    assert_null(text);
    assert_int_equal(plan, 0);
    /* A plan given as a file is not one made from a catalog. */
    assert_kace_ok(ctx, kace_campaign_plan_note(ctx, s, "p.txt", "workloads x y\npairs\n", 20, "f1", &again));
    assert_kace_ok(ctx, kace_campaign_made_plan(ctx, s, &text, &len, &plan));
    assert_null(text);
    assert_kace_ok(ctx, kace_campaign_made_plan_note(ctx, s, cat, "workloads a b\npairs\n", 20, "f2", &plan));
    int64_t got = 0;
    assert_kace_ok(ctx, kace_campaign_made_plan(ctx, s, &text, &len, &got));
    assert_int_equal(got, plan);
    assert_int_equal(len, 20);
    assert_string_equal(text, "workloads a b\npairs\n");
    free(text);
    assert_int_equal(sql_int(path, "SELECT count(*) FROM campaign_plan_kinds WHERE kind='catalog'"), 1);
    assert_int_equal(sql_int(path, "SELECT made_from FROM campaign_plan_kinds k JOIN campaign_plans p ON "
                                   "p.id=k.plan_id WHERE p.fingerprint='f2'"),
                     cat);

    /* Profile tries: two failures under one key drop it; another key starts afresh. */
    kace_profile_tries t;
    assert_kace_ok(ctx, kace_campaign_profile_tries(ctx, s, "a", "k1", &t));
    assert_false(t.profiled);
    assert_int_equal(t.failures, 0);
    assert_kace_ok(ctx, kace_campaign_profile_note(ctx, s, alloc, "a", "k1", "timeout", 80, 80));
    assert_kace_ok(ctx, kace_campaign_profile_note(ctx, s, alloc, "a", "k1", "failed", 10, 120));
    assert_kace_ok(ctx, kace_campaign_profile_note(ctx, s, alloc, "b", "k2", "ok", 60, 90));
    assert_kace_ok(ctx, kace_campaign_profile_tries(ctx, s, "a", "k1", &t));
    assert_int_equal(t.failures, 2);
    assert_true(kace_profile_dropped(t.failures));
    assert_true(fabs(t.ran_out_s - 80) < 1e-9);
    assert_true(fabs(t.longest_ok_s - 60) < 1e-9);
    assert_true(t.own_ok_s == 0); /* a's own: none */
    assert_kace_ok(ctx, kace_campaign_profile_tries(ctx, s, "a", "k3", &t));
    assert_int_equal(t.failures, 0);
    assert_true(t.ran_out_s == 0);
    assert_int_not_equal(kace_campaign_profile_note(ctx, s, alloc, "a", "k1", "maybe", 1, 1), KACE_OK);
    /* Profiled: the store holds its exclusive throughput. */
    kace_import_batch *b = NULL;
    assert_kace_ok(ctx, kace_profile_batch_new(ctx, "kace-profile", &b));
    assert_kace_ok(ctx, kace_profile_batch_add(ctx, b, "b", "exclusive_throughput", 100));
    kace_source src = {"GPU", "kace-profile", "2026-11-29"};
    char *argv[] = {"/bin/b", NULL};
    kace_import_stats stats;
    assert_kace_ok(ctx, kace_store_add_profile(ctx, s, b, &src, "b", argv, &stats));
    kace_import_batch_free(&b);
    assert_kace_ok(ctx, kace_campaign_profile_tries(ctx, s, "b", "k2", &t));
    assert_true(t.profiled);

    /* ncu's tries. */
    int ok = -1, failures = -1;
    assert_kace_ok(ctx, kace_campaign_ncu_tries(ctx, s, "b", "k2", &ok, &failures));
    assert_int_equal(ok + failures, 0);
    assert_kace_ok(ctx, kace_campaign_ncu_note(ctx, s, alloc, "b", "k2", "timeout", 30, 30, "ncu: cut"));
    assert_kace_ok(ctx, kace_campaign_ncu_note(ctx, s, alloc, "b", "k2", "ok", 20, 30, "\"ID\",\"Kernel\"\n"));
    assert_kace_ok(ctx, kace_campaign_ncu_tries(ctx, s, "b", "k2", &ok, &failures));
    assert_int_equal(ok, 1);
    assert_int_equal(failures, 1);

    /* The probe: none, then the newest one's pool size and window. */
    bool found = true;
    size_t members = 99;
    double window = 0;
    assert_kace_ok(ctx, kace_campaign_probe_latest(ctx, s, &found, &members, &window));
    assert_false(found);
    kace_campaign_probe_row row = {.clients_accepted = -1, .window_s = NAN, .pool_members = 8, .evidence = "probe: a"};
    assert_kace_ok(ctx, kace_campaign_probe_note(ctx, s, alloc, &row));
    assert_kace_ok(ctx, kace_campaign_probe_latest(ctx, s, &found, &members, &window));
    assert_true(found);
    assert_int_equal(members, 8);
    assert_true(isnan(window));
    row = (kace_campaign_probe_row){.clients_accepted = 12, .client_refused = true, .window_s = 2.5,
                                    .window_basis = "measured", .pool_members = 12, .pool_bound = "clients",
                                    .evidence = "probe: b"};
    assert_kace_ok(ctx, kace_campaign_probe_note(ctx, s, alloc, &row));
    assert_kace_ok(ctx, kace_campaign_probe_latest(ctx, s, &found, &members, &window));
    assert_int_equal(members, 12);
    assert_true(fabs(window - 2.5) < 1e-12);
    assert_int_equal(sql_int(path, "SELECT count(*) FROM campaign_probes WHERE clients_accepted IS NULL"), 1);
    kace_store_close(&s);
    kace_ctx_free(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_profile_dropped_after_two_failures),
        cmocka_unit_test(test_profile_need),
        cmocka_unit_test(test_fit_window),
        cmocka_unit_test(test_written_command_key),
        cmocka_unit_test(test_step_names),
        cmocka_unit_test(test_step_selection),
        cmocka_unit_test(test_driver),
        cmocka_unit_test(test_store_tables),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
