/* The warm pool (include/kace/pool.h): members started once and measured
 * run after run through their control channel.
 *
 * The stand-in workloads are this test program itself (argv[1] ==
 * "--worker"). A coupled worker speaks the control channel and reports
 * samples at STANDIN_RATE per second divided by the number of members
 * running at that moment (a file per running member in STANDIN_DIR), each
 * step's samples computed from the step's own length: its throughput over a
 * window is exactly rate / members, however long the machine makes its
 * steps, so pairs and triples differ from solos by known factors. Every
 * check counts events (records, answers, starts, endings); no test waits
 * for time. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../workloads/kace_progress.h"
#include "kace/pool.h"
#include "testutil.h"

#define WORKLOADS_DIR KACE_TEST_DATA "/../../workloads"

static char self[4096];

/* ---- the stand-in workers --------------------------------------------------- */

/* A scratch folder of this test process's own: the running members are
 * counted by the files in it. */
static char current_dir[4096]; /* removed by the teardown */

static const char *own_dir(const char *name)
{
    char unique[256];
    snprintf(unique, sizeof unique, "%s.%d", name, (int)getpid());
    snprintf(current_dir, sizeof current_dir, "%s", scratch_dir(unique));
    return current_dir;
}

static int count_running(const char *dir)
{
    DIR *d = opendir(dir);
    int k = 0;
    if (!d)
        return 1;
    for (struct dirent *e; (e = readdir(d));)
        if (strncmp(e->d_name, "running.", 8) == 0)
            k++;
    closedir(d);
    return k > 0 ? k : 1;
}

static void mark_running(const char *dir, bool on)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/running.%d", dir, (int)getpid());
    if (on)
        close(open(path, O_WRONLY | O_CREAT, 0644));
    else
        unlink(path);
}

static void say(int fd, const char *line)
{
    ssize_t w = write(fd, line, strlen(line));
    (void)w;
}

/* The next message ('r', 'p', 's'; 's' also when kace closed the channel),
 * or 0 when none has come and block is false. */
static char next_message(int fd, bool block)
{
    static char line[32];
    static size_t len;
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        int ready = poll(&p, 1, block ? -1 : 0);
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready == 0)
            return 0;
        char c;
        ssize_t n = read(fd, &c, 1);
        if (n <= 0)
            return 's';
        if (c != '\n') {
            if (len + 1 < sizeof line)
                line[len++] = c;
            continue;
        }
        line[len] = '\0';
        len = 0;
        if (strcmp(line, "run") == 0)
            return 'r';
        if (strcmp(line, "pause") == 0)
            return 'p';
        if (strcmp(line, "stop") == 0)
            return 's';
    }
}

static long long now_ns(void)
{
    return (long long)kace_monotonic_ns();
}

static void step(void)
{
    nanosleep(&(struct timespec){0, 2000000}, NULL); /* the stand-in's work */
}

/* Speaks the protocol by hand, so that it knows when it runs. */
static int coupled_worker(void)
{
    const char *dir = getenv("STANDIN_DIR");
    double rate = atof(getenv("STANDIN_RATE"));
    int die_at_run = getenv("STANDIN_DIE_AT_RUN") ? atoi(getenv("STANDIN_DIE_AT_RUN")) : 0;
    int prog = atoi(getenv("KACE_PROGRESS_FD")), ctl = atoi(getenv("KACE_CONTROL_FD"));
    char path[4096];
    snprintf(path, sizeof path, "%s/starts", dir);
    int starts = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    char line[128];
    snprintf(line, sizeof line, "%d\n", (int)getpid());
    say(starts, line);
    close(starts);
    say(ctl, "hello 1\n");
    mark_running(dir, true);
    double samples = 0;
    long long last = now_ns();
    int runs = 0;
    for (;;) {
        step();
        char msg = next_message(ctl, false); /* read before the record is stamped */
        long long t = now_ns();
        samples += (double)(t - last) / 1e9 * rate / count_running(dir);
        last = t;
        snprintf(line, sizeof line, "done %.6f %lld\n", samples, t);
        say(prog, line);
        if (die_at_run && runs == die_at_run) {
            mark_running(dir, false); /* a stand-in's courtesy: the others' count stays right */
            return 3;
        }
        while (msg == 'p') {
            mark_running(dir, false);
            say(ctl, "paused\n");
            msg = next_message(ctl, true);
            if (msg == 'r') {
                mark_running(dir, true);
                say(ctl, "running\n");
                runs++;
                last = now_ns();
                msg = 0;
            }
        }
        if (msg == 's') {
            mark_running(dir, false);
            say(ctl, "stopping\n");
            return 0;
        }
    }
}

/* Knows nothing of the control channel; SIGTERM at its default ends it. */
static int raw_worker(void)
{
    int prog = atoi(getenv("KACE_PROGRESS_FD"));
    for (long long i = 0;; i++) {
        char line[64];
        int n = snprintf(line, sizeof line, "done %lld %lld\n", i, now_ns());
        if (write(prog, line, (size_t)n) != n)
            return 1;
        step();
    }
}

/* Reports through workloads/kace_progress.h, which answers the channel. */
static int helper_worker(void)
{
    for (unsigned long long i = 0; kace_progress_fd() >= 0; i++) {
        kace_progress_report(i);
        step();
    }
    return 1; /* not run by kace */
}

/* Writes its CPUs (sched_getaffinity, a bit each below 64) and
 * OMP_NUM_THREADS on stdout ("cpus MASK COUNT OMP"), then reports through
 * kace_progress.h, paused at its first report in a pool. */
static int cpus_worker(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return 1;
    unsigned long long mask = 0;
    for (int c = 0; c < 64; c++)
        if (CPU_ISSET(c, &set))
            mask |= 1ULL << c;
    const char *omp = getenv("OMP_NUM_THREADS");
    printf("cpus %llu %d %s\n", mask, CPU_COUNT(&set), omp ? omp : "-");
    fflush(stdout);
    return helper_worker();
}

/* The low 64 CPUs of a mask (the test machines have fewer). */
static unsigned long long low_mask(const cpu_set_t *set)
{
    unsigned long long mask = 0;
    for (int c = 0; c < 64; c++)
        if (CPU_ISSET(c, set))
            mask |= 1ULL << c;
    return mask;
}

static void *blocked_thread(void *arg)
{
    (void)arg;
    for (;;)
        pause();
    return NULL;
}

/* Waits at a CUDA start gate as the injection library does (a byte on the
 * FIFO $KACE_CUPTI_GATE), with a second thread, having said on
 * $STANDIN_READY_FD that both are there; once through, writes the CPUs of
 * both threads on stdout ("after MAIN THREAD") and runs as a coupled worker. */
static int gated_worker(void)
{
    pthread_t other;
    if (pthread_create(&other, NULL, blocked_thread, NULL) != 0)
        return 1;
    int ready = atoi(getenv("STANDIN_READY_FD"));
    say(ready, "r");
    close(ready);
    int gate = open(getenv("KACE_CUPTI_GATE"), O_RDONLY | O_CLOEXEC);
    char c;
    if (gate < 0 || read(gate, &c, 1) != 1)
        return 1;
    close(gate);
    cpu_set_t mine, its;
    if (sched_getaffinity(0, sizeof mine, &mine) != 0 || pthread_getaffinity_np(other, sizeof its, &its) != 0)
        return 1;
    printf("after %llu %llu\n", low_mask(&mine), low_mask(&its));
    fflush(stdout);
    return coupled_worker();
}

/* ---- the tests ------------------------------------------------------------- */

static kace_pool *pool, *held_pool; /* freed (their members killed) on every exit path */

static int free_pool(void **state)
{
    (void)state;
    kace_pool_free(&held_pool);
    kace_pool_free(&pool);
    if (current_dir[0]) {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", current_dir);
        if (system(cmd) != 0)
            return -1;
        current_dir[0] = '\0';
    }
    return 0;
}

typedef struct member {
    char *argv[4];
    char env[3][4200];
    const char *envp[4];
} member;

static void coupled(member *m, kace_proc_spec *spec, const char *name, const char *dir, double rate, int die_at_run)
{
    m->argv[0] = self;
    m->argv[1] = "--worker";
    m->argv[2] = "coupled";
    m->argv[3] = NULL;
    snprintf(m->env[0], sizeof m->env[0], "STANDIN_DIR=%s", dir);
    snprintf(m->env[1], sizeof m->env[1], "STANDIN_RATE=%g", rate);
    snprintf(m->env[2], sizeof m->env[2], "STANDIN_DIE_AT_RUN=%d", die_at_run);
    for (int i = 0; i < 3; i++)
        m->envp[i] = m->env[i];
    m->envp[3] = NULL;
    *spec = (kace_proc_spec){.name = name, .argv = m->argv, .extra_env = m->envp};
}

static void options(kace_run_options *opt)
{
    kace_run_options_init(opt);
    opt->warmup_s = 0.02;
    opt->window_s = 0.1;
    opt->timeout_s = 120; /* only if something hangs */
}

static size_t count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    size_t n = 0;
    if (!f)
        return 0;
    for (int c; (c = fgetc(f)) != EOF;)
        n += c == '\n';
    fclose(f);
    return n;
}

static void start_pool(kace_proc_spec *specs, size_t n, const kace_run_options *opt, int *pids)
{
    kace_ctx *ctx = kace_ctx_new();
    kace_pool_result started[8];
    assert_kace_ok(ctx, kace_pool_start(ctx, specs, n, opt, 0, &pool, started));
    kace_ctx_free(&ctx);
    for (size_t i = 0; i < n; i++) {
        if (started[i].status != KACE_PROC_OK)
            fail_msg("member %zu: %s", i, started[i].detail);
        assert_true(started[i].pid > 0);
        assert_true(started[i].n_records >= 1); /* paused at a report */
        pids[i] = started[i].pid;
    }
}

static void run(const size_t *members, size_t k, kace_pool_result *res)
{
    kace_ctx *ctx = kace_ctx_new();
    assert_kace_ok(ctx, kace_pool_run(ctx, pool, members, k, 0, res));
    kace_ctx_free(&ctx);
}

/* Each measured member's throughput is its rate over the members running. */
static void assert_measured(const size_t *members, size_t k, const kace_pool_result *res, const double *rates,
                            const int *pids)
{
    for (size_t j = 0; j < k; j++) {
        if (res[j].status != KACE_PROC_OK)
            fail_msg("member %zu of a run of %zu: %s", members[j], k, res[j].detail);
        assert_int_equal(res[j].pid, pids[members[j]]);
        double want = rates[members[j]] / (double)k;
        if (!(fabs(res[j].throughput.samples_per_s - want) <= 0.01 * want))
            fail_msg("member %zu of a run of %zu: %g samples/s, expected %g", members[j], k,
                     res[j].throughput.samples_per_s, want);
        assert_true(res[j].n_records >= 2);
    }
}

/* Solos, the 3 pairs and the triple from one start of each member. */
static void test_solos_pairs_and_triple_from_one_start(void **state)
{
    (void)state;
    const char *dir = own_dir("test_pool_solos");
    member m[3];
    kace_proc_spec specs[3];
    const double rates[3] = {1000, 2000, 3000};
    coupled(&m[0], &specs[0], "a", dir, rates[0], 0);
    coupled(&m[1], &specs[1], "b", dir, rates[1], 0);
    coupled(&m[2], &specs[2], "c", dir, rates[2], 0);
    kace_run_options opt;
    options(&opt);
    int pids[3];
    start_pool(specs, 3, &opt, pids);

    static const size_t solos[3][1] = {{0}, {1}, {2}};
    static const size_t pairs[3][2] = {{0, 1}, {0, 2}, {1, 2}};
    static const size_t triple[3] = {2, 0, 1};
    kace_pool_result res[3];
    for (int i = 0; i < 3; i++) {
        run(solos[i], 1, res);
        assert_measured(solos[i], 1, res, rates, pids);
    }
    for (int i = 0; i < 3; i++) {
        run(pairs[i], 2, res);
        assert_measured(pairs[i], 2, res, rates, pids);
    }
    run(triple, 3, res);
    assert_measured(triple, 3, res, rates, pids);
    run(solos[0], 1, res); /* and alone again, as fast as before */
    assert_measured(solos[0], 1, res, rates, pids);

    char starts[4200];
    snprintf(starts, sizeof starts, "%s/starts", dir);
    assert_int_equal(count_lines(starts), 3); /* each process started once */
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(kace_pool_starts(pool, i), 1);
        assert_true(kace_pool_alive(pool, i));
        assert_int_equal(kace_pool_member(pool, i)->pid, pids[i]);
        assert_true(kace_pool_member(pool, i)->speaks_control);
    }

    kace_pool_stop(pool, 0);
    for (size_t i = 0; i < 3; i++) {
        const kace_proc_result *r = kace_pool_member(pool, i);
        char ending[256];
        assert_false(kace_pool_alive(pool, i));
        assert_true(r->got_stop_message);
        assert_true(r->paused_at_stop);
        assert_false(r->got_sigterm);
        assert_int_equal(r->exit_code, 0);
        assert_true(kace_proc_stopped_at_report(r));
        assert_false(kace_proc_ended_mid_step(r));
        assert_string_equal(kace_proc_ending(r, ending, sizeof ending),
                            "stopped where it was paused, at a step boundary, after kace's stop message");
    }
    kace_pool_free(&pool);
}

/* A member that dies mid-run fails that run; the others stay paused and warm. */
static void test_a_member_dying_mid_run(void **state)
{
    (void)state;
    const char *dir = own_dir("test_pool_dying");
    member m[3];
    kace_proc_spec specs[3];
    const double rates[3] = {1000, 2000, 3000};
    coupled(&m[0], &specs[0], "a", dir, rates[0], 0);
    coupled(&m[1], &specs[1], "b", dir, rates[1], 0);
    coupled(&m[2], &specs[2], "dies", dir, rates[2], 2); /* after its first step of its second run */
    kace_run_options opt;
    options(&opt);
    int pids[3];
    start_pool(specs, 3, &opt, pids);
    kace_pool_result res[3];

    const size_t solo[1] = {2};
    run(solo, 1, res);
    assert_measured(solo, 1, res, rates, pids);

    const size_t with_dying[2] = {0, 2};
    run(with_dying, 2, res);
    assert_int_equal(res[1].status, KACE_PROC_CRASHED);
    assert_non_null(strstr(res[1].detail, "exited with status 3"));
    assert_int_equal(res[1].n_records, 1);
    assert_int_equal(res[0].status, KACE_PROC_STOPPED);
    assert_non_null(strstr(res[0].detail, "dies of the run failed"));
    assert_true(isnan(res[0].throughput.samples_per_s));
    assert_false(kace_pool_alive(pool, 2));
    assert_true(kace_pool_alive(pool, 0));

    const size_t survivors[2] = {1, 0};
    run(survivors, 2, res); /* the same processes, measured as a pair */
    assert_measured(survivors, 2, res, rates, pids);

    const size_t again[2] = {1, 2};
    run(again, 2, res); /* fails at once: nothing is started again */
    assert_int_equal(res[1].status, KACE_PROC_CRASHED);
    assert_int_equal(res[0].status, KACE_PROC_STOPPED);
    assert_non_null(strstr(res[0].detail, "not run: dies has ended"));

    char starts[4200];
    snprintf(starts, sizeof starts, "%s/starts", dir);
    assert_int_equal(count_lines(starts), 3);
    kace_pool_stop(pool, 0);
    assert_true(kace_proc_stopped_at_report(kace_pool_member(pool, 0)));
    assert_true(kace_proc_stopped_at_report(kace_pool_member(pool, 1)));
    assert_int_equal(kace_pool_member(pool, 2)->exit_code, 3);
    kace_pool_free(&pool);
}

/* A program that does not speak the channel is paused with SIGSTOP, measured
 * when continued, and stopped by the SIGTERM fallback. */
static void test_a_member_without_the_protocol(void **state)
{
    (void)state;
    const char *dir = own_dir("test_pool_raw");
    member m[1];
    kace_proc_spec specs[2];
    coupled(&m[0], &specs[0], "speaks", dir, 1000, 0);
    char *raw_argv[] = {self, "--worker", "raw", NULL};
    specs[1] = (kace_proc_spec){.name = "raw", .argv = raw_argv};
    kace_run_options opt;
    options(&opt);
    int pids[2];
    start_pool(specs, 2, &opt, pids);
    assert_false(kace_pool_member(pool, 1)->speaks_control);

    kace_pool_result res[2];
    const size_t raw_solo[1] = {1};
    run(raw_solo, 1, res);
    if (res[0].status != KACE_PROC_OK)
        fail_msg("%s", res[0].detail);
    assert_true(res[0].throughput.samples_per_s > 0);
    const size_t both[2] = {0, 1};
    run(both, 2, res);
    assert_int_equal(res[0].status, KACE_PROC_OK);
    assert_int_equal(res[1].status, KACE_PROC_OK);
    assert_int_equal(res[1].pid, pids[1]);

    kace_pool_stop(pool, 0);
    const kace_proc_result *raw = kace_pool_member(pool, 1);
    assert_false(raw->got_stop_message);
    assert_true(raw->leader_got_sigterm);
    assert_int_equal(raw->term_signal, SIGTERM);
    assert_false(kace_proc_stopped_at_report(raw));
    const kace_proc_result *speaks = kace_pool_member(pool, 0);
    assert_true(speaks->got_stop_message);
    assert_false(speaks->got_sigterm);
    assert_true(kace_proc_stopped_at_report(speaks));
    kace_pool_free(&pool);
}

/* What the tick callback saw: the run's members, in the run's order. */
typedef struct ticks {
    size_t n, wrong;
    const int *want;
    size_t k;
} ticks;

static void count_tick(void *user, const kace_run_view *v)
{
    ticks *t = user;
    t->n++;
    if (v->n != t->k)
        t->wrong++;
    for (size_t j = 0; j < v->n && j < t->k; j++)
        if (v->pgids[j] != t->want[j])
            t->wrong++;
}

/* The C and the Python helper in one pool: paused at their first report,
 * run, paused, and stopped where they are paused; the caller's tick sees
 * each run's members. */
static void test_the_helpers_in_a_pool(void **state)
{
    (void)state;
    char *c_argv[] = {self, "--worker", "helper", NULL};
    char *py_argv[] = {"python3", "-c",
                       "import time\n"
                       "from kace_progress import report\n"
                       "i = 0\n"
                       "while True:\n"
                       "    report(i)\n"
                       "    i += 1\n"
                       "    time.sleep(0.002)\n",
                       NULL};
    const char *py_env[] = {"PYTHONPATH=" WORKLOADS_DIR, NULL};
    kace_proc_spec specs[2] = {{.name = "c", .argv = c_argv}, {.name = "python", .argv = py_argv, .extra_env = py_env}};
    kace_run_options opt;
    options(&opt);
    ticks t = {0};
    opt.tick = count_tick;
    opt.tick_user = &t;
    int pids[2];
    start_pool(specs, 2, &opt, pids);
    for (size_t i = 0; i < 2; i++)
        assert_true(kace_pool_member(pool, i)->speaks_control);

    kace_pool_result res[2];
    const size_t order[2] = {1, 0};
    const int want[2] = {pids[1], pids[0]};
    t.want = want;
    t.k = 2;
    run(order, 2, res);
    for (size_t j = 0; j < 2; j++) {
        if (res[j].status != KACE_PROC_OK)
            fail_msg("%s", res[j].detail);
        assert_true(res[j].throughput.samples_per_s > 0);
    }
    assert_true(t.n >= 1);
    assert_int_equal(t.wrong, 0);
    const size_t python[1] = {1};
    t.want = &pids[1];
    t.k = 1;
    size_t before = t.n;
    run(python, 1, res);
    assert_int_equal(res[0].status, KACE_PROC_OK);
    assert_true(t.n > before);
    assert_int_equal(t.wrong, 0);

    kace_pool_stop(pool, 0);
    for (size_t i = 0; i < 2; i++) {
        const kace_proc_result *r = kace_pool_member(pool, i);
        assert_true(r->paused_at_stop);
        assert_false(r->got_sigterm);
        assert_true(kace_proc_stopped_at_report(r));
    }
    kace_pool_free(&pool);
}

/* A member that cannot start, and one that never reports within the start's
 * deadline: each is reported and ended; the pool still runs the others. */
static void test_members_that_do_not_start(void **state)
{
    (void)state;
    const char *dir = own_dir("test_pool_nostart");
    member m[1];
    kace_proc_spec specs[3];
    coupled(&m[0], &specs[0], "a", dir, 1000, 0);
    char *missing_argv[] = {"/nonexistent/kace-no-such-workload", NULL};
    char *silent_argv[] = {self, "--worker", "silent", NULL};
    specs[1] = (kace_proc_spec){.name = "missing", .argv = missing_argv};
    specs[2] = (kace_proc_spec){.name = "silent", .argv = silent_argv};
    kace_run_options opt;
    options(&opt);
    opt.term_grace_s = 0.5;
    kace_ctx *ctx = kace_ctx_new();
    kace_pool_result started[3];
    assert_kace_ok(ctx, kace_pool_start(ctx, specs, 3, &opt, 2, &pool, started));
    kace_ctx_free(&ctx);
    assert_int_equal(started[0].status, KACE_PROC_OK);
    assert_int_equal(started[1].status, KACE_PROC_SPAWN_FAILED);
    assert_non_null(strstr(started[1].detail, "cannot run '/nonexistent/kace-no-such-workload'"));
    assert_int_equal(started[2].status, KACE_PROC_TIMEOUT);
    assert_non_null(strstr(started[2].detail, "no progress record within the 2 s start timeout"));
    assert_false(kace_pool_alive(pool, 1));
    assert_false(kace_pool_alive(pool, 2));
    errno = 0;
    assert_true(kill(-kace_pool_member(pool, 2)->pid, 0) != 0 && errno == ESRCH); /* ended, group and all */

    const size_t a[1] = {0}, with_missing[2] = {0, 1};
    const double rates[1] = {1000};
    int pids[1] = {started[0].pid};
    kace_pool_result res[2];
    run(a, 1, res);
    assert_measured(a, 1, res, rates, pids);
    run(with_missing, 2, res);
    assert_int_equal(res[0].status, KACE_PROC_STOPPED);
    assert_int_equal(res[1].status, KACE_PROC_SPAWN_FAILED);
    kace_pool_free(&pool);
}

/* Bad arguments are errors that say what was expected. */
static void test_bad_runs(void **state)
{
    (void)state;
    const char *dir = own_dir("test_pool_bad");
    member m[1];
    kace_proc_spec specs[1];
    coupled(&m[0], &specs[0], "a", dir, 1000, 0);
    kace_run_options opt;
    options(&opt);
    int pids[1];
    start_pool(specs, 1, &opt, pids);
    kace_ctx *ctx = kace_ctx_new();
    kace_pool_result res[2];
    const size_t twice[2] = {0, 0}, outside[1] = {1};
    assert_int_equal(kace_pool_run(ctx, pool, twice, 2, 0, res), KACE_ERR_INVALID);
    assert_non_null(strstr(kace_errmsg(ctx), "named twice"));
    assert_int_equal(kace_pool_run(ctx, pool, outside, 1, 0, res), KACE_ERR_INVALID);
    assert_non_null(strstr(kace_errmsg(ctx), "pool member 2 of a pool of 1"));
    kace_ctx_free(&ctx);
    kace_pool_free(&pool); /* kills the paused member */
}

/* With cpu_shares, each member runs on a CPU share of its own, its thread
 * counts bounded to it: the members say what they got at their start. */
static void test_members_pinned_to_their_shares(void **state)
{
    (void)state;
    const char *dir = own_dir("pinned");
    char *argv[] = {self, "--worker", "cpus", NULL};
    char out[2][4200];
    kace_proc_spec specs[2];
    for (int i = 0; i < 2; i++) {
        snprintf(out[i], sizeof out[i], "%s/member-%d.out", dir, i);
        specs[i] = (kace_proc_spec){.name = i ? "b" : "a", .argv = argv, .stdout_path = out[i]};
    }
    kace_run_options opt;
    options(&opt);
    opt.cpu_shares = 2;
    int pids[2];
    start_pool(specs, 2, &opt, pids); /* each paused at its first report: its line is out */
    unsigned long long mask[2];
    int count[2], omp[2];
    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(out[i], "r");
        assert_non_null(f);
        char word[8];
        assert_int_equal(fscanf(f, "%7s %llu %d %d", word, &mask[i], &count[i], &omp[i]), 4);
        fclose(f);
        assert_int_equal(count[i], (int)kace_pool_member(pool, i)->n_cpus);
        assert_int_equal(omp[i], count[i]);
    }
    int avail[1024];
    if (kace_cpus_available(avail, 1024) >= 2)
        assert_int_equal(mask[0] & mask[1], 0);
    kace_pool_stop(pool, 0);
}

/* Started in two halves: members started ahead (the first n_ahead, under a
 * gate this worker never reaches: it makes no CUDA call) before the pool
 * opens, the others at kace_pool_open; each started once, and no run before
 * the pool is open. */
static void test_members_started_ahead(void **state)
{
    (void)state;
    const char *dir = own_dir("test_pool_ahead");
    member m[3];
    kace_proc_spec specs[3];
    const double rates[3] = {1000, 2000, 3000};
    coupled(&m[0], &specs[0], "a", dir, rates[0], 0);
    coupled(&m[1], &specs[1], "b", dir, rates[1], 0);
    coupled(&m[2], &specs[2], "c", dir, rates[2], 0);
    kace_run_options opt;
    options(&opt);
    kace_ctx *ctx = kace_ctx_new();
    kace_pool_result res[3];
    const size_t all[3] = {0, 1, 2};

    /* No injection library: nothing starts ahead, and an unopened pool ends cleanly. */
    assert_kace_ok(ctx, kace_pool_start_ahead(ctx, specs, 3, &opt, NULL, 3, &pool));
    assert_int_equal(kace_pool_started_ahead(pool), 0);
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(kace_pool_starts(pool, i), 0);
    assert_int_equal(kace_pool_run(ctx, pool, all, 3, 0, res), KACE_ERR_INVALID);
    assert_non_null(strstr(kace_errmsg(ctx), "before the pool was opened"));
    kace_pool_stop(pool, 0);
    kace_pool_free(&pool);

    assert_kace_ok(ctx, kace_pool_start_ahead(ctx, specs, 3, &opt, "/nonexistent/libkace_cupti.so", 2, &pool));
    assert_int_equal(kace_pool_started_ahead(pool), 2);
    assert_int_equal(kace_pool_starts(pool, 0), 1);
    assert_int_equal(kace_pool_starts(pool, 1), 1);
    assert_int_equal(kace_pool_starts(pool, 2), 0);
    assert_false(kace_pool_alive(pool, 0)); /* not open yet */
    assert_int_equal(kace_pool_run(ctx, pool, all, 3, 0, res), KACE_ERR_INVALID);
    kace_pool_result started[3];
    assert_kace_ok(ctx, kace_pool_open(ctx, pool, 0, started));
    assert_int_equal(kace_pool_open(ctx, pool, 0, started), KACE_ERR_INVALID); /* once */
    int pids[3];
    for (size_t i = 0; i < 3; i++) {
        if (started[i].status != KACE_PROC_OK)
            fail_msg("member %zu: %s", i, started[i].detail);
        assert_int_equal(kace_pool_starts(pool, i), 1);
        pids[i] = started[i].pid;
    }
    assert_kace_ok(ctx, kace_pool_run(ctx, pool, all, 3, 0, res));
    assert_measured(all, 3, res, rates, pids);
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(kace_pool_starts(pool, i), 1);
    kace_ctx_free(&ctx);
    kace_pool_stop(pool, 0);
}

/* A cold run in two halves (kace_pool_start_cold): its members started
 * before the run (under a gate this worker never reaches) and never paused,
 * measured together from their first records, then stopped; run once. */
static void test_a_cold_run_started_ahead(void **state)
{
    (void)state;
    const char *dir = own_dir("test_pool_cold");
    member m[2];
    kace_proc_spec specs[2];
    const double rates[2] = {1000, 3000};
    coupled(&m[0], &specs[0], "a", dir, rates[0], 0);
    coupled(&m[1], &specs[1], "b", dir, rates[1], 0);
    kace_run_options opt;
    options(&opt);
    kace_ctx *ctx = kace_ctx_new();
    assert_kace_ok(ctx, kace_pool_start_cold(ctx, specs, 2, &opt, "/nonexistent/libkace_cupti.so", &pool));
    assert_int_equal(kace_pool_started_ahead(pool), 2);
    kace_pool_result res[2];
    assert_int_equal(kace_pool_open(ctx, pool, 0, res), KACE_ERR_INVALID); /* it opens with its run */
    assert_non_null(strstr(kace_errmsg(ctx), "kace_pool_run_cold"));
    assert_kace_ok(ctx, kace_pool_run_cold(ctx, pool, &opt, res));
    const size_t both[2] = {0, 1};
    int pids[2];
    for (size_t i = 0; i < 2; i++) {
        pids[i] = kace_pool_member(pool, i)->pid;
        assert_int_equal(kace_pool_starts(pool, i), 1);
        assert_false(kace_pool_alive(pool, i)); /* stopped with the run, at a step boundary */
        assert_int_equal(kill(pids[i], 0), -1);
        assert_false(kace_proc_ended_mid_step(kace_pool_member(pool, i)));
    }
    assert_measured(both, 2, res, rates, pids);
    char starts[4200];
    snprintf(starts, sizeof starts, "%s/starts", dir);
    assert_int_equal(count_lines(starts), 2);
    assert_int_equal(kace_pool_run_cold(ctx, pool, &opt, res), KACE_ERR_INVALID); /* once */
    kace_ctx_free(&ctx);
}

/* How many of process pid's threads are not on exactly the CPUs want
 * (sched_getaffinity of each, /proc/PID/task); -1 when it has none. */
static int threads_off(int pid, const cpu_set_t *want, int *threads)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *d = opendir(path);
    int off = 0;
    *threads = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        cpu_set_t set;
        if (e->d_name[0] == '.' || sched_getaffinity(atoi(e->d_name), sizeof set, &set) != 0)
            continue;
        (*threads)++;
        off += !CPU_EQUAL(&set, want);
    }
    if (d)
        closedir(d);
    return *threads > 0 ? off : -1;
}

/* What the tick saw of the held process while the measured run ran. */
static struct {
    int pid, ticks, threads, off, measured_off;
    cpu_set_t away, share;
    int measured_pid;
} held_seen;

static void held_tick(void *user, const kace_run_view *view)
{
    (void)user;
    (void)view;
    int threads;
    held_seen.ticks++;
    held_seen.off += threads_off(held_seen.pid, &held_seen.away, &threads);
    if (threads > held_seen.threads)
        held_seen.threads = threads;
    held_seen.measured_off += threads_off(held_seen.measured_pid, &held_seen.share, &threads);
}

/* A process started ahead (a cold run's member, held at its gate) is moved
 * off the CPUs of the run that measures meanwhile, all its threads, and
 * back on its own share when its gate opens. Both are on share 0 of 2: a
 * solo run on share 0 leaves the held one share 1. */
static void test_held_members_off_the_measured_cpus(void **state)
{
    (void)state;
    int avail[1024];
    size_t n_avail = kace_cpus_available(avail, 1024);
    if (n_avail < 2)
        skip(); /* one CPU: nothing left to move them to */
    int share[1024];
    size_t n_share = kace_cpu_share(avail, n_avail, 2, 0, share, 1024);
    cpu_set_t mine, rest;
    CPU_ZERO(&mine);
    CPU_ZERO(&rest);
    for (size_t c = 0; c < n_avail; c++)
        CPU_SET(avail[c], &rest);
    for (size_t c = 0; c < n_share; c++) {
        CPU_SET(share[c], &mine);
        CPU_CLR(share[c], &rest);
    }
    const char *dir = own_dir("test_pool_held");
    kace_held held = {.n = 0};
    kace_run_options opt;
    options(&opt);
    opt.cpu_shares = 2;
    opt.held = &held;
    opt.tick = held_tick;
    opt.tick_s = 0.01;
    member a, b;
    kace_proc_spec sa, sb;
    coupled(&a, &sa, "a", dir, 1000, 0);
    int pids[1];
    start_pool(&sa, 1, &opt, pids); /* the measured member: share 0 */

    int ready[2];
    assert_int_equal(pipe(ready), 0);
    coupled(&b, &sb, "b", dir, 2000, 0);
    b.argv[2] = "gated";
    snprintf(b.env[2], sizeof b.env[2], "STANDIN_READY_FD=%d", ready[1]);
    char out[4200];
    snprintf(out, sizeof out, "%s/held.out", dir);
    sb.stdout_path = out;
    kace_ctx *ctx = kace_ctx_new();
    assert_kace_ok(ctx, kace_pool_start_cold(ctx, &sb, 1, &opt, "/nonexistent/libkace_cupti.so", &held_pool));
    close(ready[1]);
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1); /* at its gate, both threads */
    close(ready[0]);
    int held_pid = kace_pool_member(held_pool, 0)->pid;
    assert_int_equal(held.n, 1);
    assert_int_equal(held.pgids[0], held_pid);
    int threads;
    assert_int_equal(threads_off(held_pid, &mine, &threads), 0); /* started on its share */
    assert_int_equal(threads, 2);

    held_seen.pid = held_pid;
    held_seen.measured_pid = pids[0];
    held_seen.away = rest;
    held_seen.share = mine;
    kace_pool_result res[1];
    const size_t solo[1] = {0};
    run(solo, 1, res);
    if (res[0].status != KACE_PROC_OK)
        fail_msg("the solo run: %s", res[0].detail);
    assert_true(held_seen.ticks >= 1);
    assert_int_equal(held_seen.threads, 2);
    assert_int_equal(held_seen.off, 0);          /* every tick: both threads off share 0 */
    assert_int_equal(held_seen.measured_off, 0); /* the measured member stayed on it */
    assert_int_equal(threads_off(held_pid, &rest, &threads), 0);

    /* Its turn: the gate opens and it runs on its own share. */
    held_seen.pid = 0;
    opt.tick = NULL;
    assert_kace_ok(ctx, kace_pool_run_cold(ctx, held_pool, &opt, res));
    if (res[0].status != KACE_PROC_OK)
        fail_msg("the cold run: %s", res[0].detail);
    assert_int_equal(held.n, 0);
    assert_true(kace_pool_member(held_pool, 0)->gate_open_ns >= kace_pool_member(held_pool, 0)->start_ns);
    FILE *f = fopen(out, "r");
    assert_non_null(f);
    unsigned long long after_main, after_thread;
    assert_int_equal(fscanf(f, "after %llu %llu", &after_main, &after_thread), 2);
    fclose(f);
    assert_int_equal(after_main, low_mask(&mine));
    assert_int_equal(after_thread, low_mask(&mine));
    kace_ctx_free(&ctx);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--worker") == 0)
        return strcmp(argv[2], "raw") == 0      ? raw_worker()
               : strcmp(argv[2], "silent") == 0 ? (pause(), 0)
               : strcmp(argv[2], "helper") == 0 ? helper_worker()
               : strcmp(argv[2], "cpus") == 0   ? cpus_worker()
               : strcmp(argv[2], "gated") == 0  ? gated_worker() : coupled_worker();
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return 1;
    self[n] = '\0';
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_solos_pairs_and_triple_from_one_start, free_pool),
        cmocka_unit_test_teardown(test_a_member_dying_mid_run, free_pool),
        cmocka_unit_test_teardown(test_a_member_without_the_protocol, free_pool),
        cmocka_unit_test_teardown(test_the_helpers_in_a_pool, free_pool),
        cmocka_unit_test_teardown(test_members_that_do_not_start, free_pool),
        cmocka_unit_test_teardown(test_bad_runs, free_pool),
        cmocka_unit_test_teardown(test_members_pinned_to_their_shares, free_pool),
        cmocka_unit_test_teardown(test_members_started_ahead, free_pool),
        cmocka_unit_test_teardown(test_a_cold_run_started_ahead, free_pool),
        cmocka_unit_test_teardown(test_held_members_off_the_measured_cpus, free_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
