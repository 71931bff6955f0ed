/* The process runner with stand-in workloads that are real processes
 * (tests/helpers/worker.c, tests/helpers/report.sh): statuses, measured
 * throughput, and that no process of any workload is left behind. */
#define _GNU_SOURCE /* sched_getaffinity */
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kace/runner.h"
#include "testutil.h"

static kace_ctx *ctx;

static int setup(void **state)
{
    ctx = kace_ctx_new();
    return ctx ? 0 : -1;
}

static int teardown(void **state)
{
    kace_ctx_free(&ctx);
    return 0;
}

static void assert_group_gone(const kace_proc_result *r)
{
    assert_true(r->pid > 0);
    errno = 0;
    if (kill(-r->pid, 0) == 0 || errno != ESRCH)
        fail_msg("process group %d still exists after the run", r->pid);
}

static kace_run_options quick_options(void)
{
    kace_run_options o;
    kace_run_options_init(&o);
    o.warmup_s = 0.3;
    o.window_s = 1.0;
    o.timeout_s = 8;
    o.term_grace_s = 0.5;
    return o;
}

static kace_proc_result run_one(char **argv, kace_run_options o)
{
    kace_proc_spec spec = {.name = argv[1], .argv = argv};
    kace_proc_result r;
    assert_kace_ok(ctx, kace_run(ctx, &spec, 1, &o, &r));
    assert_group_gone(&r);
    return r;
}

static void expect_status(const kace_proc_result *r, kace_proc_status want)
{
    if (r->status != want)
        fail_msg("status %s (%s), expected %s", kace_proc_status_name(r->status), r->detail,
                 kace_proc_status_name(want));
}

/* How r's process ended, as kace_proc_ending says it. */
static void expect_ending(const kace_proc_result *r, const char *want)
{
    char got[128];
    kace_proc_ending(r, got, sizeof got);
    if (strcmp(got, want) != 0)
        fail_msg("ending '%s', expected '%s'", got, want);
}

static void test_steady_throughput(void **state)
{
    char *argv[] = {KACE_TEST_WORKER, "report", "2000", NULL};
    kace_proc_result r = run_one(argv, quick_options());
    expect_status(&r, KACE_PROC_OK);
    assert_true(r.got_sigterm);
    assert_false(r.got_sigkill);
    /* workloads/kace_progress.h stopped it at its next report: status 0, no signal. */
    assert_int_equal(r.exit_code, 0);
    assert_int_equal(r.term_signal, 0);
    assert_true(r.n_records > 50);
    expect_ending(&r, "stopped at its next report after SIGTERM");
    assert_true(r.reported_after_sigterm);
    assert_true(kace_proc_stopped_at_report(&r));
    assert_false(kace_proc_ended_mid_step(&r));
    if (fabs(r.throughput.samples_per_s - 2000) > 0.03 * 2000)
        fail_msg("%g samples/s, expected 2000", r.throughput.samples_per_s);
    /* It ends at the first record past 1 s; a loaded machine can hold the
     * worker back there for as long as it likes, so only a window in another
     * unit (or twice as long) fails. */
    if (!(r.throughput.window_s >= 1.0 && r.throughput.window_s < 2.0))
        fail_msg("steady window of %g s, expected 1 s", r.throughput.window_s);
    assert_true(r.throughput.n_pieces >= 5);
    if (!(r.throughput.cv < 0.1))
        fail_msg("pieces' rates vary by cv %g, expected < 0.1", r.throughput.cv);
    /* The window starts after the warm-up. */
    assert_true(r.throughput.start_ns - r.first_record_ns >= (int64_t)(0.3e9));
}

static void test_three_at_once_with_env(void **state)
{
    char *a[] = {KACE_TEST_WORKER, "report", "500", NULL};
    char *b[] = {KACE_TEST_WORKER, "report", "1000", NULL};
    char *c[] = {KACE_TEST_WORKER, "env", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", NULL};
    const char *env_a[] = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30", NULL};
    const char *env_c[] = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=70", NULL};
    kace_proc_spec spec[3] = {{.name = "a", .argv = a, .extra_env = env_a},
                              {.name = "b", .argv = b},
                              {.name = "c", .argv = c, .extra_env = env_c}};
    kace_proc_result r[3];
    kace_run_options o = quick_options();
    assert_kace_ok(ctx, kace_run(ctx, spec, 3, &o, r));
    const double want[3] = {500, 1000, 1000};
    for (int i = 0; i < 3; i++) {
        expect_status(&r[i], KACE_PROC_OK);
        assert_group_gone(&r[i]);
        if (fabs(r[i].throughput.samples_per_s - want[i]) > 0.03 * want[i])
            fail_msg("workload %d: %g samples/s, expected %g", i, r[i].throughput.samples_per_s, want[i]);
    }
    /* One common steady window: it starts when the LAST workload's warm-up
     * ends, for all three (a window of its own would start a workload's
     * window before the others' first record + warm-up)... */
    int64_t last_first = 0;
    for (int i = 0; i < 3; i++)
        if (r[i].first_record_ns > last_first)
            last_first = r[i].first_record_ns;
    for (int i = 0; i < 3; i++)
        if (r[i].throughput.start_ns < last_first + (int64_t)(o.warmup_s * 1e9))
            fail_msg("workload %d's window starts %.3f s before the common warm-up ends", i,
                     (double)(last_first + (int64_t)(o.warmup_s * 1e9) - r[i].throughput.start_ns) / 1e9);
    /* ...at each one's first record after it: a record period (10 ms) apart,
     * or as much more as a loaded machine delays a record; half the window
     * apart would be windows of their own. */
    const int64_t apart_ns = (int64_t)(o.window_s / 2 * 1e9);
    assert_true(llabs(r[0].throughput.start_ns - r[1].throughput.start_ns) < apart_ns);
    assert_true(llabs(r[0].throughput.start_ns - r[2].throughput.start_ns) < apart_ns);
    assert_non_null(strstr(r[2].stderr_tail, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=70"));
}

/* "NAME" without '=' removes an inherited variable (kace profile's clean run
 * must not inherit CUDA_INJECTION64_PATH); "NAME=" keeps it, empty. */
static void test_env_entry_removes_inherited(void **state)
{
    setenv("CUDA_INJECTION64_PATH", "/inherited/libkace_cupti.so", 1);
    char *a[] = {KACE_TEST_WORKER, "env", "CUDA_INJECTION64_PATH", NULL};
    const char *remove[] = {"CUDA_INJECTION64_PATH", NULL};
    const char *empty[] = {"CUDA_INJECTION64_PATH=", NULL};
    kace_proc_spec spec[3] = {{.name = "removed", .argv = a, .extra_env = remove},
                              {.name = "inherited", .argv = a},
                              {.name = "empty", .argv = a, .extra_env = empty}};
    kace_proc_result r[3];
    kace_run_options o = quick_options();
    kace_status st = kace_run(ctx, spec, 3, &o, r);
    unsetenv("CUDA_INJECTION64_PATH");
    assert_kace_ok(ctx, st);
    for (int i = 0; i < 3; i++)
        expect_status(&r[i], KACE_PROC_OK);
    assert_non_null(strstr(r[0].stderr_tail, "CUDA_INJECTION64_PATH=(unset)"));
    assert_non_null(strstr(r[1].stderr_tail, "CUDA_INJECTION64_PATH=/inherited/libkace_cupti.so"));
    assert_non_null(strstr(r[2].stderr_tail, "CUDA_INJECTION64_PATH=\n"));
}

static void test_crash_stops_the_others(void **state)
{
    char *a[] = {KACE_TEST_WORKER, "crash", "1000", "0.2", NULL};
    char *b[] = {KACE_TEST_WORKER, "report", "1000", NULL};
    kace_proc_spec spec[2] = {{.name = "crasher", .argv = a}, {.name = "healthy", .argv = b}};
    kace_proc_result r[2];
    kace_run_options o = quick_options();
    assert_kace_ok(ctx, kace_run(ctx, spec, 2, &o, r));
    expect_status(&r[0], KACE_PROC_CRASHED);
    assert_int_equal(r[0].term_signal, SIGABRT);
    assert_non_null(strstr(r[0].detail, "signal"));
    expect_ending(&r[0], "killed by signal 6 on its own");
    expect_status(&r[1], KACE_PROC_STOPPED);
    assert_true(r[1].runtime_s < o.timeout_s); /* stopped, not timed out */
    assert_group_gone(&r[0]);
    assert_group_gone(&r[1]);
}

static void test_exit_code(void **state)
{
    char *argv[] = {KACE_TEST_WORKER, "exit-code", "1000", "0.2", NULL};
    kace_proc_result r = run_one(argv, quick_options());
    expect_status(&r, KACE_PROC_CRASHED);
    assert_int_equal(r.exit_code, 3);
    assert_non_null(strstr(r.detail, "status 3"));
    expect_ending(&r, "exited on its own with status 3");
}

static void test_exited_early(void **state)
{
    char *argv[] = {KACE_TEST_WORKER, "report", "1000", "0.8", NULL};
    kace_proc_result r = run_one(argv, quick_options());
    expect_status(&r, KACE_PROC_EXITED_EARLY);
    assert_int_equal(r.exit_code, 0);
    expect_ending(&r, "exited on its own with status 0");
    /* What it reported after the warm-up still gives a (short) measurement. */
    if (fabs(r.throughput.samples_per_s - 1000) > 50)
        fail_msg("%g samples/s, expected 1000", r.throughput.samples_per_s);
    assert_true(r.throughput.window_s < 0.6);
}

static void test_hang_times_out(void **state)
{
    char *argv[] = {KACE_TEST_WORKER, "hang", "1000", "0.5", NULL};
    kace_run_options o = quick_options();
    o.timeout_s = 2.0;
    kace_proc_result r = run_one(argv, o);
    expect_status(&r, KACE_PROC_TIMEOUT);
    assert_true(r.got_sigterm);
    assert_true(r.runtime_s >= o.timeout_s);
    /* Its first SIGTERM was caught (kace_progress.h waits for a report that never
     * comes); the second, before SIGKILL, ended it: within the grace, however
     * long the loaded machine took. */
    assert_int_equal(r.term_signal, SIGTERM);
    expect_ending(&r, "ended by SIGTERM before its next report");
    assert_false(r.got_sigkill);
    assert_true(kace_proc_ended_mid_step(&r));
}

/* A workload with a SIGTERM handler of its own that exits 0 at once ends
 * mid-step: it did not report after the signal, so its ending says so and
 * kace_proc_ended_mid_step (which gets a campaign a fresh MPS daemon) holds.
 * Before, it read "stopped at its next report after SIGTERM". */
static void test_own_handler_ends_mid_step(void **state)
{
    char *argv[] = {KACE_TEST_WORKER, "own-handler", "1000", NULL};
    kace_proc_result r = run_one(argv, quick_options());
    expect_status(&r, KACE_PROC_OK);
    assert_true(r.leader_got_sigterm);
    assert_int_equal(r.exit_code, 0);
    assert_int_equal(r.term_signal, 0);
    assert_false(r.reported_after_sigterm);
    expect_ending(&r, "exited with status 0 after SIGTERM, before its next report");
    assert_false(kace_proc_stopped_at_report(&r));
    assert_true(kace_proc_ended_mid_step(&r));
}


static void test_never_reports(void **state)
{
    char *argv[] = {KACE_TEST_WORKER, "silent", NULL};
    kace_run_options o = quick_options();
    o.timeout_s = 1.0;
    kace_proc_result r = run_one(argv, o);
    expect_status(&r, KACE_PROC_TIMEOUT);
    assert_int_equal(r.n_records, 0);
    assert_non_null(strstr(r.detail, "no progress record"));
    assert_true(isnan(r.throughput.samples_per_s));
}

static void test_ignores_sigterm(void **state)
{
    char *argv[] = {KACE_TEST_WORKER, "ignore-term", "1000", NULL};
    kace_proc_result r = run_one(argv, quick_options());
    expect_status(&r, KACE_PROC_OK);
    assert_true(r.got_sigterm);
    assert_true(r.got_sigkill);
    assert_int_equal(r.term_signal, SIGKILL);
    /* The grace is at least the configured 0.5 s; it grows to three of the
     * longest gaps between records, which a loaded machine widens (0.667 s
     * seen), so the ending gives the grace it had, whatever it was. */
    kace_run_options o = quick_options();
    if (!(r.term_grace_s >= o.term_grace_s && r.term_grace_s <= o.term_grace_max_s))
        fail_msg("grace of %g s, expected %g to %g s", r.term_grace_s, o.term_grace_s, o.term_grace_max_s);
    char want[128];
    snprintf(want, sizeof want, "killed by SIGKILL after a grace of %.3g s", r.term_grace_s);
    expect_ending(&r, want);
    double grace = 0;
    char tail[8] = "";
    char got[128];
    kace_proc_ending(&r, got, sizeof got);
    if (sscanf(got, "killed by SIGKILL after a grace of %lf %7s", &grace, tail) != 2 || strcmp(tail, "s") != 0 ||
        !(grace >= o.term_grace_s))
        fail_msg("ending '%s', expected 'killed by SIGKILL after a grace of N s', N >= %g", got, o.term_grace_s);
}

/* A step longer than the grace period: the grace grows to three of its
 * steps, and the workload ends at its next report (with 0.5 s, the group's
 * SIGTERM at 0.33 s ended it mid-step). */
static void test_long_steps_reach_their_report(void **state)
{
    char *argv[] = {KACE_TEST_WORKER, "steps", "100", "0.6", NULL};
    kace_run_options o = quick_options();
    kace_proc_result r = run_one(argv, o);
    expect_status(&r, KACE_PROC_OK);
    /* a record stamped late shortens the next gap a little */
    if (!(r.term_grace_s >= 3 * 0.6 * 0.9 && r.term_grace_s < 3 * 0.6 + 1))
        fail_msg("grace of %g s, expected 3 steps of 0.6 s", r.term_grace_s);
    assert_true(r.got_sigterm);
    assert_false(r.got_sigkill);
    assert_int_equal(r.term_signal, 0);
    assert_int_equal(r.exit_code, 0);
    if (fabs(r.throughput.samples_per_s - 100) > 0.05 * 100)
        fail_msg("%g samples/s, expected 100", r.throughput.samples_per_s);

    /* The grace stops growing at term_grace_max_s. */
    o.term_grace_max_s = 0.7;
    r = run_one(argv, o);
    expect_status(&r, KACE_PROC_OK);
    assert_true(r.term_grace_s == 0.7);
    /* ... and never goes below term_grace_s. */
    o.term_grace_max_s = 0.2;
    r = run_one(argv, o);
    assert_true(r.term_grace_s == 0.5);
}

/* Runs argv[] (its mode names it) with its stdout to a scratch file; leaves
 * the file's first line in line. */
static kace_proc_result run_with_stdout(char **argv, kace_run_options o, char *line, size_t size)
{
    char out[4096];
    snprintf(out, sizeof out, "%s/%s.out", scratch_dir("test_runner"), argv[1]);
    kace_proc_spec spec = {.name = argv[1], .argv = argv, .stdout_path = out};
    kace_proc_result r;
    assert_kace_ok(ctx, kace_run(ctx, &spec, 1, &o, &r));
    FILE *f = fopen(out, "r");
    assert_non_null(f);
    line[0] = '\0';
    assert_non_null(fgets(line, (int)size, f));
    fclose(f);
    return r;
}

/* A "cpus" worker's line: its CPUs (a bit per CPU below 64, the count in
 * *n) and its thread-count variables (-1: unset). */
typedef struct cpus_line {
    unsigned long long mask;
    int n, omp, mkl, openblas, torch;
} cpus_line;

static int thread_var(const char *line, const char *key)
{
    const char *at = strstr(line, key);
    assert_non_null(at);
    at += strlen(key);
    return *at == '-' ? -1 : atoi(at);
}

static cpus_line parse_cpus_line(const char *line)
{
    cpus_line c = {0};
    assert_true(strncmp(line, "cpus ", 5) == 0);
    for (const char *p = line + 5; *p >= '0' && *p <= '9';) {
        char *end;
        long cpu = strtol(p, &end, 10);
        if (cpu < 64)
            c.mask |= 1ULL << cpu;
        c.n++;
        p = *end == ',' ? end + 1 : end;
    }
    c.omp = thread_var(line, " omp ");
    c.mkl = thread_var(line, " mkl ");
    c.openblas = thread_var(line, " openblas ");
    c.torch = thread_var(line, " torch ");
    return c;
}

/* kace_cpu_share on known inputs: disjoint runs as even as they can be, and
 * one CPU each, shared, when there are fewer CPUs than shares. */
static void test_cpu_share(void **state)
{
    (void)state;
    int cpus[8] = {0, 1, 2, 3, 8, 9, 10, 11}, out[8];
    assert_int_equal(kace_cpu_share(cpus, 8, 3, 0, out, 8), 2);
    assert_int_equal(out[0], 0);
    assert_int_equal(out[1], 1);
    assert_int_equal(kace_cpu_share(cpus, 8, 3, 1, out, 8), 3);
    assert_int_equal(out[0], 2);
    assert_int_equal(out[2], 8);
    assert_int_equal(kace_cpu_share(cpus, 8, 3, 2, out, 8), 3);
    assert_int_equal(out[0], 9);
    assert_int_equal(out[2], 11);
    assert_int_equal(kace_cpu_share(cpus, 8, 3, 5, out, 8), 3); /* i mod shares */
    assert_int_equal(out[0], 9);
    assert_int_equal(kace_cpu_share(cpus, 8, 1, 0, out, 8), 8);
    assert_int_equal(kace_cpu_share(cpus, 2, 5, 3, out, 8), 1); /* fewer CPUs than shares */
    assert_int_equal(out[0], 1);
    assert_int_equal(kace_cpu_share(cpus, 8, 0, 0, out, 8), 0);
    assert_int_equal(kace_cpu_share(cpus, 0, 2, 0, out, 8), 0);
    assert_int_equal(kace_cpu_share(cpus, 8, 2, 0, out, 3), 3); /* bounded by max */
    int avail[1024];
    size_t n = kace_cpus_available(avail, 1024);
    assert_true(n >= 1);
    for (size_t i = 1; i < n; i++)
        assert_true(avail[i] > avail[i - 1]);
}

/* With cpu_shares, each process of a run is pinned to a share of its own
 * and its thread counts are bounded to it; a spec's own CPUs and a thread
 * count the caller sets win. Each worker reports what it got. */
static void test_cpu_shares_pin_each_process(void **state)
{
    (void)state;
    int avail[1024];
    size_t n_avail = kace_cpus_available(avail, 1024);
    unsigned long long all = 0;
    for (size_t i = 0; i < n_avail; i++)
        if (avail[i] < 64)
            all |= 1ULL << avail[i];
    char *argv[] = {KACE_TEST_WORKER, "cpus", "1000", NULL};
    char out[3][4096];
    const char *omp7[] = {"OMP_NUM_THREADS=7", NULL};
    int own_cpu[1] = {avail[n_avail - 1]};
    kace_proc_spec spec[3] = {{.name = "a", .argv = argv}, {.name = "b", .argv = argv, .extra_env = omp7},
                              {.name = "own", .argv = argv, .cpus = own_cpu, .n_cpus = 1}};
    for (int i = 0; i < 3; i++) {
        snprintf(out[i], sizeof out[i], "%s/cpus-%d.out", scratch_dir("test_runner"), i);
        spec[i].stdout_path = out[i];
    }
    kace_run_options o = quick_options();
    o.cpu_shares = 2;
    kace_proc_result r[3];
    assert_kace_ok(ctx, kace_run(ctx, spec, 3, &o, r));
    cpus_line c[3];
    for (int i = 0; i < 3; i++) {
        expect_status(&r[i], KACE_PROC_OK);
        FILE *f = fopen(out[i], "r");
        assert_non_null(f);
        char line[4096];
        assert_non_null(fgets(line, sizeof line, f));
        fclose(f);
        c[i] = parse_cpus_line(line);
        assert_int_equal(c[i].n, (int)r[i].n_cpus);
        assert_true(c[i].n >= 1);
        assert_int_equal(c[i].mask & ~all, 0); /* within kace's own CPUs */
        assert_int_equal(c[i].mkl, c[i].n);
        assert_int_equal(c[i].openblas, c[i].n);
        assert_int_equal(c[i].torch, c[i].n);
    }
    assert_int_equal(c[0].omp, c[0].n);
    assert_int_equal(c[1].omp, 7); /* the caller's word */
    if (n_avail >= 2) {            /* two shares of at least one CPU each: apart */
        assert_int_equal(c[0].mask & c[1].mask, 0);
        assert_int_equal(c[0].n + c[1].n, (int)n_avail);
    }
    assert_int_equal(c[2].n, 1); /* its own CPU, not share 2 mod 2 */
    if (own_cpu[0] < 64)
        assert_int_equal(c[2].mask, 1ULL << own_cpu[0]);

    /* Without shares nothing is pinned or set. */
    o.cpu_shares = 0;
    const char *inherited = getenv("OMP_NUM_THREADS");
    assert_kace_ok(ctx, kace_run(ctx, spec, 1, &o, r));
    assert_int_equal(r[0].n_cpus, 0);
    FILE *f = fopen(out[0], "r");
    assert_non_null(f);
    char line[4096];
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    c[0] = parse_cpus_line(line);
    assert_int_equal(c[0].mask, all);
    assert_int_equal(c[0].omp, inherited && *inherited ? atoi(inherited) : -1);
}

/* A process group held ahead (here: a process and its child, pausing) and
 * killed by the teardown on every exit path. */
static int held_pgid;

static int kill_held(void **state)
{
    (void)state;
    if (held_pgid > 0) {
        kill(-held_pgid, SIGKILL);
        while (waitpid(-held_pgid, NULL, 0) > 0 || errno == EINTR)
            ;
        held_pgid = 0;
    }
    return 0;
}

static bool on_exactly(int pid, const cpu_set_t *want)
{
    cpu_set_t set;
    return sched_getaffinity(pid, sizeof set, &set) == 0 && CPU_EQUAL(&set, want);
}

/* kace_run moves the processes held ahead (kace_run_options.held), every
 * process of their group, off the CPUs of its workloads at its start; with
 * no CPU left over they stay where they are. */
static void test_held_groups_leave_the_run_cpus(void **state)
{
    (void)state;
    int avail[1024];
    size_t n_avail = kace_cpus_available(avail, 1024);
    if (n_avail < 2)
        skip(); /* one CPU: nothing to move them to */
    int share[1024];
    size_t n_share = kace_cpu_share(avail, n_avail, 2, 0, share, 1024);
    cpu_set_t all, rest;
    CPU_ZERO(&all);
    for (size_t c = 0; c < n_avail; c++)
        CPU_SET(avail[c], &all);
    rest = all;
    for (size_t c = 0; c < n_share; c++)
        CPU_CLR(share[c], &rest);
    int up[2];
    assert_int_equal(pipe(up), 0);
    pid_t leader = fork();
    assert_true(leader >= 0);
    if (leader == 0) {
        setpgid(0, 0);
        if (fork() == 0) {
            pid_t me = getpid();
            ssize_t w = write(up[1], &me, sizeof me);
            (void)w;
        }
        for (;;)
            pause();
    }
    setpgid(leader, leader);
    held_pgid = leader;
    close(up[1]);
    pid_t child = 0;
    assert_int_equal(read(up[0], &child, sizeof child), (ssize_t)sizeof child); /* both are up */
    close(up[0]);
    assert_true(on_exactly(leader, &all));
    assert_true(on_exactly(child, &all));

    char *argv[] = {KACE_TEST_WORKER, "cpus", "1000", NULL};
    kace_proc_spec spec[2] = {{.name = "a", .argv = argv}, {.name = "b", .argv = argv}};
    kace_held held = {.pgids = {leader}, .n = 1};
    kace_run_options o = quick_options();
    o.cpu_shares = 2;
    o.held = &held;
    kace_proc_result r[2];
    assert_kace_ok(ctx, kace_run(ctx, spec, 1, &o, r)); /* on share 0: the held ones on the rest */
    expect_status(&r[0], KACE_PROC_OK);
    assert_true(on_exactly(leader, &rest));
    assert_true(on_exactly(child, &rest));

    o.cpu_shares = 0; /* every CPU the run's: none left, so they stay */
    assert_kace_ok(ctx, kace_run(ctx, spec, 1, &o, r));
    assert_true(on_exactly(leader, &rest));
    assert_true(on_exactly(child, &rest));

    assert_int_equal(kace_pin_group(leader, NULL, 0), 2); /* back on kace's CPUs, both */
    assert_true(on_exactly(leader, &all));
    assert_true(on_exactly(child, &all));
}

/* kace_progress.h's SIGTERM handler is not inherited by a process forked
 * after it was installed (a helper that never reports): SIGTERM ends it. */
static void test_forked_child_gets_default_sigterm(void **state)
{
    char *argv[] = {KACE_TEST_WORKER, "fork-late", "1000", NULL};
    char line[64];
    kace_proc_result r = run_with_stdout(argv, quick_options(), line, sizeof line);
    expect_status(&r, KACE_PROC_OK);
    assert_string_equal(line, "child ended by signal 15\n");
    /* The parent's mask is back after the fork: kace's SIGTERM stops it at its report. */
    assert_true(kace_proc_stopped_at_report(&r));
}

/* The first SIGTERM goes to the leader alone: a helper process of the
 * workload (a DataLoader worker) is still alive when the leader stops at its
 * report, and the leader ends it. */
static void test_helper_outlives_the_first_sigterm(void **state)
{
    char *argv[] = {KACE_TEST_WORKER, "helper", "1000", NULL};
    kace_run_options o = quick_options();
    o.term_grace_s = 30; /* the group's SIGTERM (at 2/3 of it) comes long after the leader looked */
    char line[64];
    kace_proc_result r = run_with_stdout(argv, o, line, sizeof line);
    expect_status(&r, KACE_PROC_OK);
    assert_group_gone(&r);
    assert_int_equal(r.exit_code, 0);
    assert_false(r.got_sigkill);
    assert_string_equal(line, "helper alive\n");
}

/* A leader that left its process group (setpgid into a child's group) and
 * ignores SIGTERM: kace signals it by its pid too, and the run ends. Before,
 * its empty group got every signal and the run never ended. */
static void test_leader_left_its_group(void **state)
{
    char *argv[] = {KACE_TEST_WORKER, "leave-group", "1000", NULL};
    char line[64];
    kace_proc_result r = run_with_stdout(argv, quick_options(), line, sizeof line);
    /* The group it joined is not kace's to end: ended here first, so that a
     * failed assert below does not leave it behind. */
    int child = 0;
    if (sscanf(line, "%d", &child) == 1 && child > 0)
        kill(child, SIGKILL);
    expect_status(&r, KACE_PROC_OK);
    assert_true(r.got_sigkill);
    assert_int_equal(r.term_signal, SIGKILL);
    assert_true(child > 0);
}

static void test_grandchild_is_killed(void **state)
{
    char *argv[] = {KACE_TEST_WORKER, "grandchild", "1000", NULL};
    char line[64];
    kace_proc_result r = run_with_stdout(argv, quick_options(), line, sizeof line);
    expect_status(&r, KACE_PROC_OK);
    assert_group_gone(&r);
    int gc = 0;
    assert_int_equal(sscanf(line, "%d", &gc), 1);
    assert_true(gc > 0 && gc != r.pid);
    errno = 0;
    assert_int_equal(kill(gc, 0), -1);
    assert_int_equal(errno, ESRCH);
    assert_true(r.got_sigkill); /* the grandchild ignored SIGTERM */
    expect_ending(&r, "stopped at its next report after SIGTERM; the rest of its group was killed by SIGKILL");
}

/* A leader that exited on its own, leaving a process that ignores SIGTERM:
 * the group's SIGTERM and SIGKILL were not the leader's, and its ending
 * says so (before, it read "stopped at its next report after SIGTERM"). */
static void test_leader_exited_before_kace(void **state)
{
    char *argv[] = {KACE_TEST_WORKER, "grandchild", "1000", "0.6", NULL};
    kace_proc_result r = run_one(argv, quick_options());
    expect_status(&r, KACE_PROC_EXITED_EARLY);
    assert_true(r.got_sigterm && r.got_sigkill && !r.leader_got_sigterm);
    expect_ending(&r, "exited on its own with status 0; the rest of its group was killed by SIGKILL");
}

static void test_oom(void **state)
{
    char *argv[] = {KACE_TEST_WORKER, "oom", "1000", "0.2", NULL};
    kace_proc_result r = run_one(argv, quick_options());
    expect_status(&r, KACE_PROC_OOM);
    assert_non_null(strstr(r.stderr_tail, "CUDA out of memory"));
}

static void test_bad_progress(void **state)
{
    char *argv[] = {KACE_TEST_WORKER, "garbage", "1000", "0.2", NULL};
    kace_proc_result r = run_one(argv, quick_options());
    expect_status(&r, KACE_PROC_BAD_PROGRESS);
    assert_non_null(strstr(r.detail, "garbage:"));
    assert_non_null(strstr(r.detail, "not a number"));
}

static void test_spawn_failure(void **state)
{
    char *argv[] = {"/nonexistent/kace-no-such-workload", "x", NULL};
    kace_proc_result r = run_one(argv, quick_options());
    expect_status(&r, KACE_PROC_SPAWN_FAILED);
    assert_non_null(strstr(r.detail, "No such file"));
}

static void test_shell_workload(void **state)
{
    char *argv[] = {"/bin/sh", KACE_TEST_DATA "/../helpers/report.sh", NULL};
    kace_run_options o = quick_options();
    o.window_s = 1.5;
    kace_proc_result r = run_one(argv, o);
    expect_status(&r, KACE_PROC_OK);
    /* 10 samples per 0.1 s sleep plus the shell's own time per loop: at most 100/s,
     * plus stamping jitter: kace stamps these records when it reads them, so a
     * reader held back by a loaded machine at the window's first record (and not
     * at its last) shortens the window by that delay (up to 0.15 s of 1.5 s
     * allowed). The lower bound only catches a wrong unit or lost records: on a
     * loaded 2-core CI machine the shell's loop has taken over 0.125 s (fewer than
     * 80/s seen in CI), so it is loose on purpose. */
    if (!(r.throughput.samples_per_s > 40 && r.throughput.samples_per_s <= 111))
        fail_msg("%g samples/s, expected 40 to 100", r.throughput.samples_per_s);
}

static void test_python_helper(void **state)
{
    char *argv[] = {"python3", KACE_TEST_DATA "/../helpers/py_worker.py", NULL};
    kace_run_options o = quick_options();
    o.warmup_s = 0.5; /* the interpreter's first steps */
    kace_proc_result r = run_one(argv, o);
    expect_status(&r, KACE_PROC_OK);
    /* 4 samples per 10 ms on an absolute schedule: 400 samples/s. */
    if (fabs(r.throughput.samples_per_s - 400) > 0.05 * 400)
        fail_msg("%g samples/s, expected 400", r.throughput.samples_per_s);
}

/* kace_progress.py bounds torch's thread pool to the CPUs kace pinned the
 * workload to (KACE_TORCH_THREADS) at its first report, when torch is
 * imported: a stand-in torch module records the call. */
static void test_python_torch_threads_bounded(void **state)
{
    (void)state;
    char *argv[] = {"python3", "-c",
                    "import sys, time, types\n"
                    "sys.path.insert(0, '" KACE_TEST_DATA "/../../workloads')\n"
                    "torch = types.ModuleType('torch')\n"
                    "torch.set_num_threads = lambda n: print('torch threads', n, flush=True)\n"
                    "sys.modules['torch'] = torch\n"
                    "from kace_progress import report\n"
                    "i = 0\n"
                    "while True:\n"
                    "    report(i)\n"
                    "    i += 10\n"
                    "    time.sleep(0.01)\n",
                    NULL};
    int avail[1024];
    assert_true(kace_cpus_available(avail, 1024) >= 1);
    char out[4096];
    snprintf(out, sizeof out, "%s/torch-threads.out", scratch_dir("test_runner"));
    kace_proc_spec spec = {.name = "torch-threads", .argv = argv, .stdout_path = out, .cpus = avail, .n_cpus = 1};
    kace_run_options o = quick_options();
    o.warmup_s = 0.5; /* the interpreter's first steps */
    kace_proc_result r;
    assert_kace_ok(ctx, kace_run(ctx, &spec, 1, &o, &r));
    expect_status(&r, KACE_PROC_OK);
    FILE *f = fopen(out, "r");
    assert_non_null(f);
    char line[256] = "";
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    assert_string_equal(line, "torch threads 1\n");
}

/* First steps slowed by kernel replay (three of 0.5 s, then 100 samples/s,
 * counted by the time elapsed, as worker.c does, so that the rate does not
 * depend on how fast a loaded machine turns the shell's loop): with
 * steady_samples_per_s the warm-up starts after them, so the window measures the
 * steady rate; without, the window starts among them. Never that fast: the run
 * times out and says so. */
static kace_proc_result run_slow_first_step(double steady, double timeout_s)
{
    char *argv[] = {"/bin/sh", "-c",
                    "n=0; echo 'done 0' >&\"$KACE_PROGRESS_FD\"; for i in 1 2 3; do sleep 0.5; n=$((n + 1)); "
                    "echo \"done $n\" >&\"$KACE_PROGRESS_FD\"; done; t0=$(date +%s%N); while :; do sleep 0.01; "
                    "echo \"done $((3 + ($(date +%s%N) - t0) / 10000000))\" >&\"$KACE_PROGRESS_FD\"; done",
                    NULL};
    kace_proc_spec spec = {.name = "slow-first-step", .argv = argv, .steady_samples_per_s = steady};
    kace_run_options o = quick_options();
    o.warmup_s = 0.2;
    o.timeout_s = timeout_s;
    kace_proc_result r;
    assert_kace_ok(ctx, kace_run(ctx, &spec, 1, &o, &r));
    assert_group_gone(&r);
    return r;
}

static void test_steady_start(void **state)
{
    (void)state;
    kace_proc_result r = run_slow_first_step(20, 8);
    expect_status(&r, KACE_PROC_OK);
    double after_first = (double)(r.throughput.start_ns - r.first_record_ns) / 1e9;
    if (after_first < 1.5 + 0.2 - 0.05)
        fail_msg("the window started %.3f s after the first record, inside the slow first step", after_first);
    /* 100 samples/s, stamped by kace as it reads them (a late read moves a
     * stamp): far from the slow steps' 2/s, and not unbounded. */
    if (!(r.throughput.samples_per_s > 50 && r.throughput.samples_per_s < 150))
        fail_msg("%g samples/s, expected the steady rate (100)", r.throughput.samples_per_s);
    /* Without it the window starts among the slow steps. */
    r = run_slow_first_step(0, 8);
    expect_status(&r, KACE_PROC_OK);
    if ((double)(r.throughput.start_ns - r.first_record_ns) / 1e9 > 1.2 || r.throughput.samples_per_s > 20)
        fail_msg("without a steady rate the window started after %.3f s (%g samples/s)",
                 (double)(r.throughput.start_ns - r.first_record_ns) / 1e9, r.throughput.samples_per_s);
    /* A rate it never reaches. */
    r = run_slow_first_step(1e6, 3);
    expect_status(&r, KACE_PROC_TIMEOUT);
    if (!strstr(r.detail, "none ending an interval of at least 1e+06 samples/s"))
        fail_msg("detail '%s'", r.detail);
}

typedef struct tick_state {
    volatile sig_atomic_t cancel;
    int cancel_after; /* steady ticks (0: 3) */
    int ticks, steady_ticks;
    int pgid;
} tick_state;

static void on_tick(void *user, const kace_run_view *v)
{
    tick_state *t = user;
    t->ticks++;
    t->pgid = v->pgids[0];
    if (v->steady && ++t->steady_ticks == (t->cancel_after ? t->cancel_after : 3))
        t->cancel = 1; /* what the CLI's SIGINT handler does */
}

/* Options whose tick (every 50 ms) cancels the run as on_tick decides. */
static kace_run_options cancel_options(tick_state *t, double window_s)
{
    kace_run_options o = quick_options();
    o.window_s = window_s;
    o.tick_s = 0.05;
    o.tick = on_tick;
    o.tick_user = t;
    o.cancel = &t->cancel;
    return o;
}

static void test_cancel_from_tick(void **state)
{
    char *argv[] = {KACE_TEST_WORKER, "report", "1000", NULL};
    tick_state t = {0};
    kace_run_options o = cancel_options(&t, 5);
    kace_proc_result r = run_one(argv, o);
    expect_status(&r, KACE_PROC_CANCELLED);
    assert_true(t.ticks >= 5);
    assert_int_equal(t.pgid, r.pid);
    assert_true(r.runtime_s < o.warmup_s + o.window_s); /* before its window could end */
}

/* A cancelled run gives even a workload with long steps the plain grace:
 * kace's own caller (timeout -k 10 in the device scripts) will not wait. */
static void test_cancel_keeps_the_plain_grace(void **state)
{
    char *argv[] = {KACE_TEST_WORKER, "steps", "100", "0.6", NULL};
    tick_state t = {.cancel_after = 60}; /* 3 s: records 0.6 s apart to grow the grace from */
    kace_run_options o = cancel_options(&t, 20);
    kace_proc_result r = run_one(argv, o);
    expect_status(&r, KACE_PROC_CANCELLED);
    assert_true(r.got_sigterm);
    assert_true(r.term_grace_s == o.term_grace_s);
}

static void test_bad_arguments(void **state)
{
    kace_run_options o = quick_options();
    kace_proc_result r;
    char *argv[] = {NULL};
    kace_proc_spec spec = {.argv = argv};
    assert_int_equal(kace_run(ctx, &spec, 1, &o, &r), KACE_ERR_INVALID);
    assert_int_equal(kace_run(ctx, &spec, 0, &o, &r), KACE_ERR_INVALID);
    o.warmup_s = -1;
    char *ok[] = {"true", NULL};
    spec.argv = ok;
    assert_int_equal(kace_run(ctx, &spec, 1, &o, &r), KACE_ERR_INVALID);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_steady_throughput),  cmocka_unit_test(test_three_at_once_with_env),
        cmocka_unit_test(test_env_entry_removes_inherited),
        cmocka_unit_test(test_crash_stops_the_others), cmocka_unit_test(test_exit_code),
        cmocka_unit_test(test_exited_early),       cmocka_unit_test(test_hang_times_out),
        cmocka_unit_test(test_never_reports),      cmocka_unit_test(test_ignores_sigterm),
        cmocka_unit_test(test_own_handler_ends_mid_step),
        cmocka_unit_test(test_long_steps_reach_their_report),
        cmocka_unit_test(test_helper_outlives_the_first_sigterm),
        cmocka_unit_test(test_leader_left_its_group),
        cmocka_unit_test(test_leader_exited_before_kace),
        cmocka_unit_test(test_cancel_keeps_the_plain_grace),
        cmocka_unit_test(test_grandchild_is_killed), cmocka_unit_test(test_oom),
        cmocka_unit_test(test_forked_child_gets_default_sigterm),
        cmocka_unit_test(test_bad_progress),       cmocka_unit_test(test_spawn_failure),
        cmocka_unit_test(test_shell_workload),     cmocka_unit_test(test_python_helper),
        cmocka_unit_test(test_steady_start),
        cmocka_unit_test(test_cpu_share),          cmocka_unit_test(test_cpu_shares_pin_each_process),
        cmocka_unit_test_teardown(test_held_groups_leave_the_run_cpus, kill_held),
        cmocka_unit_test(test_python_torch_threads_bounded),
        cmocka_unit_test(test_cancel_from_tick),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
