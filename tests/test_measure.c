/* kace_measure end to end without a GPU: real stand-in workloads
 * (tests/helpers/worker.c: reporting, crashing, running out of memory,
 * hanging, exiting early, ignoring SIGTERM, leaving a grandchild) under the
 * stand-in MPS daemon (tests/helpers/mps_standin.c) and a real SQLite store.
 * After every run: no process of any workload is left, the daemon is still
 * the only MPS process, and the store holds the whole run or nothing. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "kace/measure.h"
#include "kace/gpu.h"
#include "kace/kernels.h"
#include "kace/nvml.h"
#include "kace/pool.h"
#include "testutil.h"

static kace_ctx *ctx;
static kace_store *store;
static kace_mps *mps;
static char db_path[4200];
static char run_dir[64];

static int setup(void **state)
{
    (void)state;
    ctx = kace_ctx_new();
    snprintf(db_path, sizeof db_path, "%s/measure.db", scratch_dir("test_measure"));
    snprintf(run_dir, sizeof run_dir, "/tmp/kace-test-measure-XXXXXX");
    if (!ctx || !mkdtemp(run_dir) || kace_store_open(ctx, db_path, &store) != KACE_OK)
        return -1;
    setenv("KACE_TEST_MPS_MODE", "normal", 1);
    kace_mps_options mo = {.control = KACE_TEST_MPS_CONTROL, .run_dir = run_dir, .quit_timeout_s = 1,
                           .kill_grace_s = 0.5};
    if (kace_mps_start(ctx, &mo, &mps) != KACE_OK)
        return -1;
    /* The stand-in workloads, by behaviour. */
    static const char *const commands[][5] = {
        {"fast", "report", "4000", NULL},
        {"slow", "report", "1000", NULL},
        {"crasher", "crash", "1000", "0.4", NULL},
        {"oomer", "oom", "1000", "0.4", NULL},
        {"hanger", "hang", "1000", "0.3", NULL},
        {"quitter", "report", "1000", "0.2", NULL},
        {"stubborn", "ignore-term", "1000", NULL},
        {"parent", "grandchild", "1000", NULL},
        {"pct", "env", KACE_MPS_PCT_ENV, NULL},
        {"pipe", "env", "CUDA_MPS_PIPE_DIRECTORY", NULL},
    };
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++) {
        char *argv[6] = {KACE_TEST_WORKER};
        for (int j = 1; j < 5 && commands[i][j]; j++)
            argv[j] = (char *)commands[i][j];
        if (kace_store_set_command(ctx, store, commands[i][0], argv) != KACE_OK)
            return -1;
    }
    char *missing[] = {"/nonexistent/kace-no-such-workload", NULL};
    return kace_store_set_command(ctx, store, "missing", missing) == KACE_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    int rc = kace_mps_stop(ctx, &mps, NULL) == KACE_OK ? 0 : -1;
    kace_store_close(&store);
    kace_ctx_free(&ctx);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", run_dir);
    return system(cmd) == 0 ? rc : -1;
}

static long long query_int(const char *sql)
{
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
        fail_msg("open %s", db_path);
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK)
        fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    long long v = sqlite3_step(q) == SQLITE_ROW ? sqlite3_column_int64(q, 0) : -1;
    sqlite3_finalize(q);
    sqlite3_close(db);
    return v;
}

static const char *query_text(const char *sql)
{
    static char out[512];
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
        fail_msg("open %s", db_path);
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK)
        fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    out[0] = '\0';
    if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_text(q, 0))
        snprintf(out, sizeof out, "%s", (const char *)sqlite3_column_text(q, 0));
    sqlite3_finalize(q);
    sqlite3_close(db);
    return out;
}

/* A run is whole: as many members as k, or no run at all. */
static void assert_no_half_runs(void)
{
    assert_int_equal(query_int("SELECT count(*) FROM runs r WHERE k != (SELECT count(*) FROM run_members m "
                               "WHERE m.run_id=r.id)"),
                     0);
    assert_int_equal(query_int("SELECT count(*) FROM run_members WHERE run_id NOT IN (SELECT id FROM runs)"), 0);
}

static void assert_nothing_left(const kace_measure_spec *spec, const kace_measure_result *r)
{
    for (int i = 0; i < spec->k; i++) {
        if (r->proc[i].pid <= 0)
            continue;
        errno = 0;
        if (kill(-r->proc[i].pid, 0) == 0 || errno != ESRCH)
            fail_msg("process group %d of %s still exists", r->proc[i].pid, spec->workload[i]);
    }
    assert_true(kace_mps_alive(mps));
    assert_no_half_runs();
}

static kace_measure_options quick(void)
{
    kace_measure_options o = {.mps = mps, .gpu = "stand-in GPU"};
    kace_run_options_init(&o.run);
    o.run.warmup_s = 0.3;
    o.run.window_s = 0.5;
    o.run.timeout_s = 5;
    o.run.term_grace_s = 0.3;
    return o;
}

static kace_measure_spec pair(const char *a, const char *b, int pa, int pb)
{
    kace_measure_spec s;
    memset(&s, 0, sizeof s);
    s.k = 2;
    snprintf(s.workload[0], KACE_NAME_MAX, "%s", a);
    snprintf(s.workload[1], KACE_NAME_MAX, "%s", b);
    s.mps_pct[0] = pa;
    s.mps_pct[1] = pb;
    return s;
}

static void expect(const kace_measure_result *r, int i, kace_proc_status want)
{
    if (r->proc[i].status != want)
        fail_msg("member %d: %s (%s), expected %s", i, kace_proc_status_name(r->proc[i].status), r->proc[i].detail,
                 kace_proc_status_name(want));
}

static void test_pair_ok_is_stored_whole(void **state)
{
    (void)state;
    kace_measure_spec s = pair("fast", "slow", 30, 70);
    kace_measure_options o = quick();
    kace_measure_result r;
    assert_kace_ok(ctx, kace_measure(ctx, store, &s, &o, &r));
    assert_nothing_left(&s, &r);
    expect(&r, 0, KACE_PROC_OK);
    expect(&r, 1, KACE_PROC_OK);
    assert_int_equal(r.status, KACE_RUN_OK);
    assert_true(r.stored);
    assert_string_equal(r.set, "pairs");
    /* The stand-ins report 4000 and 1000 samples/s. */
    assert_true(fabs(r.proc[0].throughput.samples_per_s / 4000 - 1) < 0.1);
    assert_true(fabs(r.proc[1].throughput.samples_per_s / 1000 - 1) < 0.1);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT status || '/' || mode || '/' || set_name FROM runs WHERE id=%lld", r.run_id);
    assert_string_equal(query_text(sql), "ok/mps/pairs");
    snprintf(sql, sizeof sql,
             "SELECT group_concat(w.name || '@' || m.mps_pct || ':' || m.status, ' ') FROM run_members m JOIN "
             "workloads w ON w.id=m.workload_id WHERE m.run_id=%lld ORDER BY m.slot",
             r.run_id);
    assert_string_equal(query_text(sql), "fast@30:ok slow@70:ok");
    /* to the nearest 100 (SQLite's round() takes no negative digits: round(x, -2) is round(x)) */
    snprintf(sql, sizeof sql,
             "SELECT CAST(round(throughput / 100.0) * 100 AS INTEGER) FROM run_members WHERE run_id=%lld AND slot=0",
             r.run_id);
    assert_int_equal(query_int(sql), 4000);
    snprintf(sql, sizeof sql, "SELECT s.gpu FROM runs r JOIN sources s ON s.id=r.source_id WHERE r.id=%lld", r.run_id);
    assert_string_equal(query_text(sql), "stand-in GPU");

    /* The same identity again is refused; the next repetition is not. */
    bool has = false;
    kace_measured_run id = {.set = "pairs", .mode = "mps", .k = 2};
    id.member[0] = (kace_measured_member){.workload = "slow", .mps_pct = 70};
    id.member[1] = (kace_measured_member){.workload = "fast", .mps_pct = 30};
    assert_kace_ok(ctx, kace_store_has_measured_run(ctx, store, &id, &has));
    assert_true(has); /* member order does not matter */
    assert_int_equal(kace_store_add_measured_run(ctx, store, &id, NULL), KACE_ERR_INVALID);
    id.repetition = 1;
    assert_kace_ok(ctx, kace_store_has_measured_run(ctx, store, &id, &has));
    assert_false(has);
    assert_no_half_runs();
}

static void test_clients_get_their_mps_environment(void **state)
{
    (void)state;
    kace_measure_spec s = pair("pct", "pipe", 40, 60);
    kace_measure_options o = quick();
    kace_measure_result r;
    assert_kace_ok(ctx, kace_measure(ctx, store, &s, &o, &r));
    assert_nothing_left(&s, &r);
    assert_non_null(strstr(r.proc[0].stderr_tail, KACE_MPS_PCT_ENV "=40"));
    char want[160];
    snprintf(want, sizeof want, "CUDA_MPS_PIPE_DIRECTORY=%s", kace_mps_pipe_dir(mps));
    assert_non_null(strstr(r.proc[1].stderr_tail, want));

    /* Time-slicing: no percentage, and a pipe folder no daemon can hold. */
    s = pair("pct", "pipe", 100, 100);
    s.timeslice = true;
    o.mps = NULL;
    assert_kace_ok(ctx, kace_measure(ctx, store, &s, &o, &r));
    assert_int_equal(r.status, KACE_RUN_OK);
    assert_string_equal(r.set, "timeslice-pairs");
    assert_non_null(strstr(r.proc[0].stderr_tail, KACE_MPS_PCT_ENV "=(unset)"));
    assert_non_null(strstr(r.proc[1].stderr_tail, KACE_NO_MPS_PIPE_ENV));
    /* Percentages need MPS. */
    s.mps_pct[0] = 50;
    assert_int_equal(kace_measure(ctx, store, &s, &o, &r), KACE_ERR_INVALID);
}

static void test_crash_is_recorded_and_partner_stopped(void **state)
{
    (void)state;
    kace_measure_spec s = pair("fast", "crasher", 100, 100);
    kace_measure_options o = quick();
    o.run.warmup_s = 1; /* the crash comes before the window */
    kace_measure_result r;
    assert_kace_ok(ctx, kace_measure(ctx, store, &s, &o, &r));
    assert_nothing_left(&s, &r);
    expect(&r, 0, KACE_PROC_STOPPED);
    expect(&r, 1, KACE_PROC_CRASHED);
    assert_int_equal(r.status, KACE_RUN_FAILED);
    assert_true(r.stored);
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT r.status || ':' || group_concat(m.status || '/' || coalesce(m.throughput, 'null'), ' ') FROM runs "
             "r JOIN run_members m ON m.run_id=r.id WHERE r.id=%lld ORDER BY m.slot",
             r.run_id);
    assert_string_equal(query_text(sql), "failed:stopped/null crashed/null");
}

static void test_oom_and_timeout_and_early_exit(void **state)
{
    (void)state;
    kace_measure_options o = quick();
    o.run.warmup_s = 1;
    kace_measure_result r;
    kace_measure_spec s = pair("slow", "oomer", 100, 100);
    assert_kace_ok(ctx, kace_measure(ctx, store, &s, &o, &r));
    assert_nothing_left(&s, &r);
    expect(&r, 1, KACE_PROC_OOM);
    assert_int_equal(r.status, KACE_RUN_OOM);

    s = pair("slow", "hanger", 100, 100);
    o.run.timeout_s = 1.5;
    assert_kace_ok(ctx, kace_measure(ctx, store, &s, &o, &r));
    assert_nothing_left(&s, &r);
    expect(&r, 1, KACE_PROC_TIMEOUT);
    assert_int_equal(r.status, KACE_RUN_TIMEOUT);
    /* The same timeout where it is the caller's deadline (a campaign call's
     * end): the run was cut short, not measured, and is not stored. */
    o.timeout_is_deadline = true;
    assert_kace_ok(ctx, kace_measure(ctx, store, &s, &o, &r));
    assert_nothing_left(&s, &r);
    assert_true(r.cancelled);
    assert_false(r.stored);
    o.timeout_is_deadline = false;

    s = pair("slow", "quitter", 100, 100);
    o.run.timeout_s = 5;
    assert_kace_ok(ctx, kace_measure(ctx, store, &s, &o, &r));
    assert_nothing_left(&s, &r);
    expect(&r, 1, KACE_PROC_EXITED_EARLY);
    assert_int_equal(r.status, KACE_RUN_FAILED);

    assert_int_equal(query_int("SELECT count(*) FROM runs WHERE status='oom'"), 1);
    assert_int_equal(query_int("SELECT count(*) FROM runs WHERE status='timeout'"), 1);
    assert_int_equal(query_int("SELECT count(*) FROM run_members WHERE status='exited-early'"), 1);
}

static void test_sigterm_ignored_and_grandchild_are_killed(void **state)
{
    (void)state;
    kace_measure_spec s = pair("stubborn", "parent", 100, 100);
    kace_measure_options o = quick();
    kace_measure_result r;
    assert_kace_ok(ctx, kace_measure(ctx, store, &s, &o, &r));
    assert_nothing_left(&s, &r);
    expect(&r, 0, KACE_PROC_OK);
    expect(&r, 1, KACE_PROC_OK);
    assert_true(r.proc[0].got_sigkill); /* it ignored SIGTERM */
    assert_true(r.proc[1].got_sigkill); /* its grandchild ignored SIGTERM */
}

static volatile sig_atomic_t cancel_flag;

static void cancel_after_a_while(void *user, const kace_run_view *v)
{
    int64_t *start = user;
    if (!*start)
        *start = v->now_ns;
    if (v->now_ns - *start > 400000000LL)
        cancel_flag = 1;
}

static void test_cancelled_run_records_nothing(void **state)
{
    (void)state;
    long long before = query_int("SELECT count(*) FROM runs");
    kace_measure_spec s = pair("fast", "stubborn", 100, 100);
    kace_measure_options o = quick();
    o.run.window_s = 10;
    int64_t start = 0;
    cancel_flag = 0;
    o.run.cancel = &cancel_flag;
    o.run.tick = cancel_after_a_while;
    o.run.tick_user = &start;
    o.run.tick_s = 0.05;
    kace_measure_result r;
    assert_kace_ok(ctx, kace_measure(ctx, store, &s, &o, &r));
    assert_nothing_left(&s, &r);
    assert_true(r.cancelled);
    assert_false(r.stored);
    expect(&r, 0, KACE_PROC_CANCELLED);
    assert_int_equal(query_int("SELECT count(*) FROM runs"), before);
}

static void test_setup_errors_record_nothing(void **state)
{
    (void)state;
    long long before = query_int("SELECT count(*) FROM runs");
    kace_measure_options o = quick();
    kace_measure_result r;
    kace_measure_spec s = pair("fast", "nobody", 100, 100);
    assert_int_equal(kace_measure(ctx, store, &s, &o, &r), KACE_ERR_NOT_FOUND);
    assert_non_null(strstr(kace_errmsg(ctx), "kace workload add nobody"));
    s = pair("fast", "missing", 100, 100);
    assert_int_equal(kace_measure(ctx, store, &s, &o, &r), KACE_ERR_NOT_FOUND);
    assert_non_null(strstr(kace_errmsg(ctx), "could not start"));
    assert_nothing_left(&s, &r);
    s = pair("fast", "slow", 0, 100);
    assert_int_equal(kace_measure(ctx, store, &s, &o, &r), KACE_ERR_INVALID);
    o.mps = NULL;
    s = pair("fast", "slow", 100, 100);
    assert_int_equal(kace_measure(ctx, store, &s, &o, &r), KACE_ERR_INVALID);
    assert_int_equal(query_int("SELECT count(*) FROM runs"), before);
}

static void test_daemon_dying_mid_run_records_nothing(void **state)
{
    (void)state;
    /* A second daemon of its own, which dies 0.3 s after it started. */
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/kace-test-measure-die-XXXXXX");
    assert_non_null(mkdtemp(dir));
    setenv("KACE_TEST_MPS_MODE", "die", 1);
    kace_mps_options mo = {.control = KACE_TEST_MPS_CONTROL, .run_dir = dir, .quit_timeout_s = 1,
                           .kill_grace_s = 0.5};
    kace_mps *dying = NULL;
    kace_status st = kace_mps_start(ctx, &mo, &dying);
    setenv("KACE_TEST_MPS_MODE", "normal", 1);
    assert_int_equal(st, KACE_OK);
    long long before = query_int("SELECT count(*) FROM runs");
    kace_measure_spec s = pair("fast", "slow", 100, 100);
    kace_measure_options o = quick();
    o.mps = dying;
    o.run.window_s = 0.6;
    kace_measure_result r;
    st = kace_measure(ctx, store, &s, &o, &r);
    assert_int_equal(st, KACE_ERR_IO);
    assert_non_null(strstr(kace_errmsg(ctx), "MPS daemon"));
    assert_int_equal(query_int("SELECT count(*) FROM runs"), before);
    assert_kace_ok(ctx, kace_mps_stop(ctx, &dying, NULL));
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* A daemon of its own in run folder dir, in the stand-in's mode. */
static kace_mps *second_daemon(char *dir, size_t size, const char *mode)
{
    snprintf(dir, size, "/tmp/kace-test-measure-2-XXXXXX");
    assert_non_null(mkdtemp(dir));
    setenv("KACE_TEST_MPS_MODE", mode, 1);
    kace_mps_options mo = {.control = KACE_TEST_MPS_CONTROL, .run_dir = dir, .quit_timeout_s = 1,
                           .kill_grace_s = 0.5};
    kace_mps *m = NULL;
    kace_status st = kace_mps_start(ctx, &mo, &m);
    setenv("KACE_TEST_MPS_MODE", "normal", 1);
    assert_kace_ok(ctx, st);
    return m;
}

static void remove_second_daemon(kace_mps **m, const char *dir)
{
    assert_kace_ok(ctx, kace_mps_stop(ctx, m, NULL));
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* The daemon is alive but no MPS server ever starts: the clients ran
 * without MPS. Not stored; the message says what was seen and why. */
static void test_daemon_without_server_records_nothing(void **state)
{
    (void)state;
    char dir[64];
    kace_mps *lonely = second_daemon(dir, sizeof dir, "no-server");
    long long before = query_int("SELECT count(*) FROM runs");
    kace_measure_spec s = pair("fast", "slow", 100, 100);
    kace_measure_options o = quick();
    o.mps = lonely;
    kace_measure_result r;
    assert_int_equal(kace_measure(ctx, store, &s, &o, &r), KACE_ERR_IO);
    const char *msg = kace_errmsg(ctx);
    if (!strstr(msg, "MPS did not serve this run") || !strstr(msg, "named no MPS server in ") ||
        !strstr(msg, "server.log: ") || !strstr(msg, "Server failed to start") || !strstr(msg, "nothing recorded"))
        fail_msg("message: %s", msg);
    assert_false(r.stored);
    assert_int_equal(r.mps_server_pid, 0);
    assert_int_equal(query_int("SELECT count(*) FROM runs"), before);
    assert_true(kace_mps_alive(lonely)); /* alive, and still not MPS */
    for (int i = 0; i < s.k; i++)
        if (r.proc[i].pid > 0)
            assert_int_equal(kill(-r.proc[i].pid, 0), -1);
    remove_second_daemon(&lonely, dir);

    /* The same run under a daemon whose server runs is stored, with the
     * server that served it. */
    assert_kace_ok(ctx, kace_measure(ctx, store, &s, &(kace_measure_options){quick().run, mps, NULL, NULL, false, false}, &r));
    assert_true(r.stored);
    assert_true(r.mps_server_pid > 0);
    assert_int_equal(query_int("SELECT count(*) FROM runs"), before + 1);
}

/* MPS served a run when every member was among its server's clients
 * (get_client_list: PIDs of kace's own namespace). NVML's MPS client list is
 * a second witness; it decides only where the control program cannot list
 * clients. */
static void test_mps_clients_verify_the_run(void **state)
{
    (void)state;
    char path[4200], pid[32];
    snprintf(path, sizeof path, "%s/libfake_nvml_mps.so", KACE_FAKE_NVML_DIR);
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    setenv("KACE_FAKE_NVML_PID", pid, 1);
    kace_gpu *nvml = NULL;
    setenv("KACE_NVML_LIBRARY", path, 1); /* the NVML backend loads the fake */
    assert_kace_ok(ctx, kace_gpu_open_backend(ctx, &kace_gpu_backend_nvml, 0, &nvml));
    long long before = query_int("SELECT count(*) FROM runs");
    kace_measure_spec s = pair("fast", "slow", 50, 50);
    kace_measure_options o = quick();
    o.gpu_access = nvml;
    kace_measure_result r;
    /* Clients of the server, and in NVML's list (the fake lists the caller's children). */
    assert_kace_ok(ctx, kace_measure(ctx, store, &s, &o, &r));
    assert_true(r.stored && r.clients_verified && r.nvml_verified);
    assert_int_equal(query_int("SELECT count(*) FROM runs"), before + 1);
    /* Clients of the server, not in NVML's list: NVML's PIDs are another PID
     * namespace's (a container); the run counts. */
    setenv("KACE_FAKE_NVML_MPS_CLIENTS", "none", 1);
    s.repetition = 1;
    assert_kace_ok(ctx, kace_measure(ctx, store, &s, &o, &r));
    assert_true(r.stored && r.clients_verified);
    assert_false(r.nvml_verified);
    assert_int_equal(query_int("SELECT count(*) FROM runs"), before + 2);
    unsetenv("KACE_FAKE_NVML_MPS_CLIENTS");

    /* A server that the workloads never connected to: refused, even though
     * NVML's list has them. */
    char dir[64];
    kace_mps *lonely = second_daemon(dir, sizeof dir, "no-clients");
    o.mps = lonely;
    s.repetition = 2;
    assert_int_equal(kace_measure(ctx, store, &s, &o, &r), KACE_ERR_IO);
    const char *msg = kace_errmsg(ctx);
    if (!strstr(msg, "MPS did not serve this run: fast, slow never appeared among the MPS server's clients "
                     "(get_client_list, ") ||
        !strstr(msg, "they ran without MPS?") || strstr(msg, "named no MPS server"))
        fail_msg("message: %s", msg);
    assert_false(r.stored || r.clients_verified);
    assert_int_equal(query_int("SELECT count(*) FROM runs"), before + 2);
    remove_second_daemon(&lonely, dir);

    /* A control program that cannot list clients: NVML's list decides. */
    kace_mps *old = second_daemon(dir, sizeof dir, "no-client-list");
    o.mps = old;
    assert_kace_ok(ctx, kace_measure(ctx, store, &s, &o, &r));
    assert_true(r.stored && r.nvml_verified);
    assert_false(r.clients_verified);
    setenv("KACE_FAKE_NVML_MPS_CLIENTS", "none", 1);
    s.repetition = 3;
    assert_int_equal(kace_measure(ctx, store, &s, &o, &r), KACE_ERR_IO);
    unsetenv("KACE_FAKE_NVML_MPS_CLIENTS");
    msg = kace_errmsg(ctx);
    if (!strstr(msg, "fast, slow never appeared in NVML's MPS client list") ||
        !strstr(msg, "the control program could not list clients: get_client_list ") ||
        !strstr(msg, "they ran without MPS?"))
        fail_msg("message: %s", msg);
    assert_false(r.stored);
    assert_int_equal(query_int("SELECT count(*) FROM runs"), before + 3);
    remove_second_daemon(&old, dir);

    /* A server listed that has gone by the time its clients are asked for ("Server N
     * not found"): passed over; the live one's clients verify the run, and it is the
     * server named, even where NVML's PIDs are another namespace's. */
    kace_mps *stale = second_daemon(dir, sizeof dir, "stale-server");
    o.mps = stale;
    setenv("KACE_FAKE_NVML_MPS_CLIENTS", "none", 1);
    s.repetition = 4;
    assert_kace_ok(ctx, kace_measure(ctx, store, &s, &o, &r));
    unsetenv("KACE_FAKE_NVML_MPS_CLIENTS");
    assert_true(r.stored && r.clients_verified);
    assert_true(r.mps_server_pid > 0 && r.mps_server_pid != 999998);
    assert_int_equal(query_int("SELECT count(*) FROM runs"), before + 4);
    remove_second_daemon(&stale, dir);
    kace_gpu_close(&nvml);
    unsetenv("KACE_NVML_LIBRARY");
}

/* The clients get no CUDA_VISIBLE_DEVICES (MPS renumbers the daemon's
 * devices from 0), and the daemon none of kace's CUDA_MPS_* variables
 * (an inherited thread percentage would cap every client). */
static void test_mps_client_and_daemon_environment(void **state)
{
    (void)state;
    char dir[64];
    setenv("CUDA_VISIBLE_DEVICES", "2", 1);
    setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "20", 1);
    kace_mps *m = second_daemon(dir, sizeof dir, "normal");
    unsetenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    char env_file[128];
    snprintf(env_file, sizeof env_file, "%s/worker.env", dir);
    char *argv[] = {"/bin/sh", "-c", "env > \"$0\"; exec \"$1\" report 4000", env_file, KACE_TEST_WORKER, NULL};
    assert_kace_ok(ctx, kace_store_set_command(ctx, store, "envdump", argv));
    kace_measure_spec s = pair("envdump", "fast", 60, 100);
    kace_measure_options o = quick();
    o.mps = m;
    kace_measure_result r;
    assert_kace_ok(ctx, kace_measure(ctx, store, &s, &o, &r));
    unsetenv("CUDA_VISIBLE_DEVICES");
    char cmd[512];
    snprintf(cmd, sizeof cmd, "grep -q '^CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=60$' '%s' && ! grep -q '^CUDA_VISIBLE_DEVICES=' '%s'",
             env_file, env_file);
    assert_int_equal(system(cmd), 0);
    /* The daemon: its /proc environment, found through its pipe folder. */
    snprintf(cmd, sizeof cmd,
             "for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ 2>/dev/null | grep -qx 'CUDA_MPS_PIPE_DIRECTORY=%s' "
             "|| continue; tr '\\0' '\\n' < $p/environ | grep -q '^CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=' && exit 1; "
             "done; exit 0",
             kace_mps_pipe_dir(m));
    assert_int_equal(system(cmd), 0);
    remove_second_daemon(&m, dir);
}

static void add_profile(const char *workload, const char *gpu, double throughput)
{
    kace_import_batch *b = NULL;
    assert_kace_ok(ctx, kace_profile_batch_new(ctx, "kace-profile", &b));
    assert_kace_ok(ctx, kace_profile_batch_add(ctx, b, workload, "exclusive_throughput", throughput));
    kace_source src = {gpu, "kace-profile", "2026-11-24"};
    char *argv[] = {KACE_TEST_WORKER, "report", "4000", NULL};
    assert_kace_ok(ctx, kace_store_add_profile(ctx, store, b, &src, workload, argv, NULL));
    kace_import_batch_free(&b);
}

/* A slowdown divides a colocated throughput by the profile's: a run on one
 * GPU model is refused for a workload profiled on another, before anything
 * starts; profiling it again here is the way out. */
static void test_profile_from_another_gpu_is_refused(void **state)
{
    (void)state;
    add_profile("here", "stand-in GPU", 4000);
    add_profile("there", "Other GPU", 4000);
    add_profile("nameless", NULL, 4000);
    long long before = query_int("SELECT count(*) FROM runs");
    kace_measure_options o = quick();
    kace_measure_result r;
    kace_measure_spec s = pair("here", "nameless", 100, 100);
    assert_kace_ok(ctx, kace_measure(ctx, store, &s, &o, &r)); /* a source without a GPU is not checked */
    assert_true(r.stored);
    s = pair("here", "there", 100, 100);
    assert_int_equal(kace_measure(ctx, store, &s, &o, &r), KACE_ERR_INVALID);
    const char *msg = kace_errmsg(ctx);
    if (!strstr(msg, "there was profiled on 'Other GPU' and this GPU is 'stand-in GPU'") ||
        !strstr(msg, "kace profile --name there") || !strstr(msg, "nothing measured"))
        fail_msg("message: %s", msg);
    assert_int_equal(r.proc[0].pid, 0); /* refused before any workload started */
    assert_int_equal(query_int("SELECT count(*) FROM runs"), before + 1);

    /* Without --gpu the NVML device's name is this GPU's. */
    char path[4200];
    snprintf(path, sizeof path, "%s/libfake_nvml_full.so", KACE_FAKE_NVML_DIR);
    setenv("KACE_NVML_LIBRARY", path, 1);
    kace_gpu *nvml = NULL;
    assert_kace_ok(ctx, kace_gpu_open_backend(ctx, &kace_gpu_backend_nvml, 0, &nvml));
    o.gpu = NULL;
    o.gpu_access = nvml;
    s = pair("here", "nameless", 100, 100);
    s.repetition = 1;
    assert_int_equal(kace_measure(ctx, store, &s, &o, &r), KACE_ERR_INVALID);
    assert_non_null(strstr(kace_errmsg(ctx), "here was profiled on 'stand-in GPU' and this GPU is 'Fake GPU 80GB'"));
    kace_gpu_close(&nvml);
    unsetenv("KACE_NVML_LIBRARY");

    /* Profiled again on this GPU (a new measurement, another value): measured. */
    o = quick();
    add_profile("there", "stand-in GPU", 3990);
    s = pair("here", "there", 100, 100);
    assert_kace_ok(ctx, kace_measure(ctx, store, &s, &o, &r));
    assert_true(r.stored);
    assert_int_equal(query_int("SELECT count(*) FROM runs"), before + 2);
    assert_nothing_left(&s, &r);
}

static void restart_daemon(void *user, const kace_run_view *v)
{
    int64_t *start = user;
    if (!*start)
        *start = v->now_ns;
    if (v->now_ns - *start > 200000000LL && !kace_mps_alive(mps)) {
        kace_ctx *c = kace_ctx_new();
        kace_mps_restart(c, mps);
        kace_ctx_free(&c);
    }
}

/* A time-sliced run needs kace's MPS instance down, before and during. */
static void test_timeslice_needs_the_daemon_quit(void **state)
{
    (void)state;
    long long before = query_int("SELECT count(*) FROM runs");
    kace_measure_spec s = pair("fast", "slow", 100, 100);
    s.timeslice = true;
    s.repetition = 7;
    kace_measure_options o = quick();
    kace_measure_result r;
    assert_int_equal(kace_measure(ctx, store, &s, &o, &r), KACE_ERR_INVALID);
    assert_non_null(strstr(kace_errmsg(ctx), "kace's MPS daemon still runs: quit it before a time-sliced run"));
    assert_int_equal(query_int("SELECT count(*) FROM runs"), before);

    assert_kace_ok(ctx, kace_mps_quit(ctx, mps, NULL));
    assert_kace_ok(ctx, kace_measure(ctx, store, &s, &o, &r));
    assert_true(r.stored);
    assert_false(kace_mps_alive(mps));
    assert_int_equal(query_int("SELECT count(*) FROM runs"), before + 1);

    /* The daemon comes back in the middle of the run: not stored. */
    int64_t start = 0;
    o.run.tick = restart_daemon;
    o.run.tick_user = &start;
    o.run.window_s = 0.8;
    s.repetition = 8;
    assert_int_equal(kace_measure(ctx, store, &s, &o, &r), KACE_ERR_IO);
    assert_non_null(strstr(kace_errmsg(ctx), "a process of kace's MPS instance was alive during the time-sliced run"));
    assert_int_equal(query_int("SELECT count(*) FROM runs"), before + 1);
    assert_kace_ok(ctx, kace_mps_restart(ctx, mps)); /* for the tests that follow */
    assert_true(kace_mps_alive(mps));
}

static void test_commands_round_trip(void **state)
{
    (void)state;
    char *argv[] = {"python3", "-c", "print(\"a b\")", "--flag=ü", NULL};
    assert_kace_ok(ctx, kace_store_set_command(ctx, store, "py", argv));
    char **back = NULL;
    assert_kace_ok(ctx, kace_store_get_command(ctx, store, "py", &back));
    for (int i = 0; argv[i]; i++)
        assert_string_equal(back[i], argv[i]);
    assert_null(back[4]);
    free(back);
    char *empty[] = {NULL};
    assert_int_equal(kace_store_set_command(ctx, store, "py", empty), KACE_ERR_INVALID);
}

/* A version-1 store (before kace measure) is migrated and keeps its runs. */
static void test_schema_1_is_migrated(void **state)
{
    (void)state;
    char path[sizeof db_path];
    snprintf(path, sizeof path, "%.4000s/v1.db", scratch_dir("test_measure_v1"));
    kace_store *s = NULL;
    assert_kace_ok(ctx, kace_store_open(ctx, path, &s));
    kace_store_close(&s);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    const char *downgrade =
        "ALTER TABLE runs DROP COLUMN mode; ALTER TABLE runs DROP COLUMN repetition;"
        "ALTER TABLE runs DROP COLUMN measured_at; ALTER TABLE runs DROP COLUMN window_s;"
        "ALTER TABLE run_members DROP COLUMN status; ALTER TABLE run_members DROP COLUMN throughput_cv;"
        "ALTER TABLE run_members DROP COLUMN detail; DROP TABLE workload_commands;"
        /* what later versions added */
        "DROP TABLE observation_members; DROP TABLE observations; ALTER TABLE profiles DROP COLUMN embedded;"
        "DROP TABLE profile_history; DROP TABLE run_history; DROP TABLE split_history;"
        "UPDATE meta SET value='1' WHERE key='schema_version';"
        "INSERT INTO workloads VALUES(1, 'a_batch2-train', 'a-train', 2);"
        "INSERT INTO sources VALUES(1, NULL, NULL, NULL, 'old.csv');"
        "INSERT INTO runs VALUES(1, 'pairs', 1, 'ok', 'pairs|a_batch2-train@100', 1);"
        "INSERT INTO run_members VALUES(1, 0, 1, 100, 12.5);";
    char *err = NULL;
    if (sqlite3_exec(db, downgrade, NULL, NULL, &err) != SQLITE_OK)
        fail_msg("downgrade: %s", err);
    sqlite3_close(db);
    assert_kace_ok(ctx, kace_store_open(ctx, path, &s));
    char *argv[] = {"true", NULL};
    assert_kace_ok(ctx, kace_store_set_command(ctx, s, "a_batch2-train", argv));
    kace_store_close(&s);
    snprintf(db_path, sizeof db_path, "%s", path); /* query_* read db_path */
    char version[16];
    snprintf(version, sizeof version, "%d", KACE_STORE_SCHEMA_VERSION); /* migrated to the newest */
    assert_string_equal(query_text("SELECT value FROM meta WHERE key='schema_version'"), version);
    assert_int_equal(query_int("SELECT count(*) FROM run_members WHERE throughput=12.5 AND status IS NULL"), 1);
    assert_int_equal(query_int("SELECT count(*) FROM workload_commands"), 1);
}

/* The caller's tick kills the run's second member once the steady window
 * has begun (its MPS client checks ran at the run's first tick). */
static void kill_second_when_steady(void *user, const kace_run_view *v)
{
    int *killed = user;
    if (v->steady && v->n == 2 && v->pgids[1] > 0 && !*killed) {
        kill(-v->pgids[1], SIGKILL);
        *killed = v->pgids[1];
    }
}

/* The warm pool: MPS runs measured from one start of each (workload, share),
 * verified and stored as kace_measure stores them; a member killed mid-run
 * fails its run and leaves the others warm; a run naming it measures nothing. */
static void test_pool_runs_are_stored_like_cold_ones(void **state)
{
    (void)state;
    char *victim[] = {KACE_TEST_WORKER, "report", "1000", NULL};
    assert_kace_ok(ctx, kace_store_set_command(ctx, store, "victim", victim));
    kace_measure_spec specs[4];
    specs[0] = pair("fast", "slow", 100, 100);
    specs[1] = pair("fast", "slow", 100, 100);
    specs[1].k = 1;                               /* fast alone at 100% */
    specs[2] = pair("slow", "victim", 100, 100);
    specs[3] = pair("fast", "slow", 100, 100);
    specs[3].timeslice = true;                    /* left out of the pool */
    for (int i = 0; i < 4; i++) {
        snprintf(specs[i].set, sizeof specs[i].set, "pool-test");
        specs[i].repetition = 7;
    }
    kace_measure_options o = quick();
    kace_measure_pool *mp = NULL;
    assert_kace_ok(ctx, kace_measure_pool_start(ctx, store, specs, 4, 0, &o, 30, &mp));
    for (int i = 0; i < 3; i++)
        assert_true(kace_measure_pool_has(mp, &specs[i]));
    assert_false(kace_measure_pool_has(mp, &specs[3])); /* time-sliced */
    const kace_pool *pool = kace_measure_pool_members(mp);
    assert_int_equal(kace_pool_size(pool), 3); /* fast@100, slow@100, victim@100 */
    int pids[3];
    for (size_t i = 0; i < 3; i++)
        pids[i] = kace_pool_member(pool, i)->pid;

    kace_measure_result r;
    assert_kace_ok(ctx, kace_measure_in_pool(ctx, store, mp, &specs[0], &o, &r));
    expect(&r, 0, KACE_PROC_OK);
    expect(&r, 1, KACE_PROC_OK);
    assert_true(r.stored);
    assert_true(r.clients_verified);
    assert_int_equal(r.proc[0].pid, pids[0]);
    assert_int_equal(r.proc[1].pid, pids[1]);
    assert_true(fabs(r.proc[0].throughput.samples_per_s / 4000 - 1) < 0.1);
    assert_true(fabs(r.proc[1].throughput.samples_per_s / 1000 - 1) < 0.1);

    assert_kace_ok(ctx, kace_measure_in_pool(ctx, store, mp, &specs[1], &o, &r));
    expect(&r, 0, KACE_PROC_OK);
    assert_int_equal(r.proc[0].pid, pids[0]);
    assert_string_equal(r.exclusive_metric, "exclusive_mps100");

    int killed = 0;
    kace_measure_options kill_opt = o;
    kill_opt.run.tick = kill_second_when_steady;
    kill_opt.run.tick_user = &killed;
    assert_kace_ok(ctx, kace_measure_in_pool(ctx, store, mp, &specs[2], &kill_opt, &r));
    assert_int_equal(killed, pids[2]);
    assert_true(r.stored);
    assert_int_equal(r.status, KACE_RUN_FAILED);
    expect(&r, 0, KACE_PROC_STOPPED);
    expect(&r, 1, KACE_PROC_CRASHED);
    assert_true(kace_pool_alive(pool, 1));
    assert_false(kace_pool_alive(pool, 2));

    long long runs = query_int("SELECT count(*) FROM runs WHERE set_name='pool-test'");
    assert_int_equal(runs, 3);
    assert_int_equal(kace_measure_in_pool(ctx, store, mp, &specs[2], &o, &r), KACE_ERR_IO);
    assert_non_null(strstr(kace_errmsg(ctx), "victim at 100% has ended in the pool"));
    assert_int_equal(kace_measure_in_pool(ctx, store, mp, &specs[3], &o, &r), KACE_ERR_INVALID);
    assert_int_equal(query_int("SELECT count(*) FROM runs WHERE set_name='pool-test'"), runs);
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(kace_pool_starts(pool, i), 1);

    kace_measure_pool_stop(&mp);
    assert_null(mp);
    /* A bound takes whole runs in order while their members fit. */
    assert_kace_ok(ctx, kace_measure_pool_start(ctx, store, specs, 4, 2, &o, 30, &mp));
    assert_int_equal(kace_pool_size(kace_measure_pool_members(mp)), 2);
    assert_true(kace_measure_pool_has(mp, &specs[0]));
    assert_true(kace_measure_pool_has(mp, &specs[1]));
    assert_false(kace_measure_pool_has(mp, &specs[2]));
    kace_measure_pool_stop(&mp);
    assert_int_equal(kace_measure_pool_start(ctx, store, &specs[0], 1, 1, &o, 30, &mp), KACE_ERR_INVALID);
    assert_null(mp);
    for (size_t i = 0; i < 3; i++) {
        errno = 0;
        assert_true(kill(-pids[i], 0) != 0 && errno == ESRCH);
    }
    assert_true(kace_mps_alive(mps));
    assert_no_half_runs();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pair_ok_is_stored_whole),
        cmocka_unit_test(test_clients_get_their_mps_environment),
        cmocka_unit_test(test_crash_is_recorded_and_partner_stopped),
        cmocka_unit_test(test_oom_and_timeout_and_early_exit),
        cmocka_unit_test(test_sigterm_ignored_and_grandchild_are_killed),
        cmocka_unit_test(test_cancelled_run_records_nothing),
        cmocka_unit_test(test_setup_errors_record_nothing),
        cmocka_unit_test(test_daemon_dying_mid_run_records_nothing),
        cmocka_unit_test(test_daemon_without_server_records_nothing),
        cmocka_unit_test(test_mps_clients_verify_the_run),
        cmocka_unit_test(test_mps_client_and_daemon_environment),
        cmocka_unit_test(test_timeslice_needs_the_daemon_quit),
        cmocka_unit_test(test_commands_round_trip),
        cmocka_unit_test(test_profile_from_another_gpu_is_refused),
        cmocka_unit_test(test_pool_runs_are_stored_like_cold_ones),
        cmocka_unit_test(test_schema_1_is_migrated), /* last: it moves db_path */
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
