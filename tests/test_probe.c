/* The first minute's probe (kace_pool_probe, include/kace/pool.h): its pure
 * rules on known inputs, and the probe against stand-ins.
 *
 * The stand-ins are this test program itself: "--client" connects to the
 * stand-in MPS daemon (tests/helpers/mps_standin.c, mode cuda-start, whose
 * server refuses clients past KACE_TEST_MPS_MAX_CLIENTS) as
 * tests/fake_cuda's program does at its CUDA start, exits 1 when refused,
 * then reports through workloads/kace_progress.h; "--workload" holds 64 MiB,
 * takes a slow first step, then reports a rate with a known periodic noise. Checks count clients and
 * records; none waits for time. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../workloads/kace_progress.h"
#include "kace/pool.h"
#include "measure/probe_internal.h"
#include "testutil.h"

static char self[4096];

/* ---- the stand-ins -------------------------------------------------------------- */

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The stand-in daemon's client protocol: "connect PID @ANSWER", an answer
 * starting with '!' is a refusal. 0 accepted, 1 refused or no answer. */
static int mps_connect(void)
{
    const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
    if (!dir)
        return 1;
    char pipe_path[4096], answer[4200], msg[8500], buf[512];
    snprintf(pipe_path, sizeof pipe_path, "%.4000s/control", dir);
    snprintf(answer, sizeof answer, "%.4000s.answer.%ld", pipe_path, (long)getpid());
    int fd = open(pipe_path, O_WRONLY | O_NONBLOCK);
    if (fd < 0)
        return 1;
    int len = snprintf(msg, sizeof msg, "connect %ld @%s\n", (long)getpid(), answer);
    ssize_t wrote = write(fd, msg, (size_t)len);
    close(fd);
    if (wrote != len)
        return 1;
    for (;;) { /* the daemon always answers; kace's start timeout bounds the wait */
        FILE *f = fopen(answer, "r");
        if (f) {
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
            unlink(answer);
            buf[n] = '\0';
            if (buf[0] != '!')
                return 0;
            fprintf(stderr, "probe client: cuInit: %s", buf + 1);
            return 1;
        }
        sleep_ms(5);
    }
}

static int client(void)
{
    if (mps_connect() != 0)
        return 1;
    for (unsigned long long done = 0;; done++) {
        kace_progress_report(done);
        sleep_ms(5);
    }
}

/* Samples at RATE (1 + NOISE sin(2 pi t / PERIOD)) per second, counted from
 * the time itself: a record every 5 ms, whatever the machine does. */
#define RATE 1000.0
#define NOISE 0.2
#define PERIOD 0.4
#define HELD_MIB 64
#define FIRST_STEP_MS 500

static int workload(void)
{
    if (mps_connect() != 0)
        return 1;
    size_t held = (size_t)HELD_MIB << 20;
    char *mem = malloc(held);
    if (!mem)
        return 1;
    memset(mem, 1, held); /* resident, not only reserved */
    kace_progress_report(0);
    sleep_ms(FIRST_STEP_MS); /* a slow first step (compilation, autotuning): never in the curve */
    kace_progress_report(1);
    double t0 = now_s(), w = 2 * M_PI / PERIOD;
    for (;;) {
        sleep_ms(5);
        double t = now_s() - t0;
        double s = 1 + RATE * (t + NOISE / w * (1 - cos(w * t)));
        kace_progress_report((unsigned long long)s);
        mem[(size_t)t % held] ^= 1;
    }
}

/* ---- the pure rules -------------------------------------------------------------- */

static void test_pool_size(void **state)
{
    (void)state;
    const char *bound;
    /* 48 clients, 100 GiB available, 4 GiB a member at 80%: memory, 20. */
    assert_int_equal(kace_probe_pool_size(48, 100ULL << 20, 4ULL << 20, 0.8, 0, &bound), 20);
    assert_string_equal(bound, "memory");
    assert_int_equal(kace_probe_pool_size(3, 100ULL << 20, 1ULL << 20, 0.8, 0, &bound), 3);
    assert_string_equal(bound, "clients");
    assert_int_equal(kace_probe_pool_size(SIZE_MAX, 0, 0, 0.8, 16, &bound), 16); /* nothing probed */
    assert_string_equal(bound, "caller");
    assert_int_equal(kace_probe_pool_size(SIZE_MAX, 0, 0, 0.8, 0, &bound), KACE_POOL_MAX_MEMBERS);
    assert_int_equal(kace_probe_pool_size(SIZE_MAX, 100, 1000, 0.8, 0, &bound), 0); /* not one fits */
    assert_string_equal(bound, "memory");
    assert_int_equal(kace_probe_pool_size(0, 100ULL << 20, 1, 0.8, 0, &bound), 0); /* the server took none */
    assert_string_equal(bound, "clients");
    assert_int_equal(kace_probe_pool_size(40, 100ULL << 20, 0, 0.8, 0, NULL), KACE_POOL_MAX_MEMBERS);
}

static void test_window_rule(void **state)
{
    (void)state;
    double len[4] = {0.5, 1, 2, 4}, err;
    const char *basis;
    double falling[4] = {0.1, 0.05, 0.015, 0.01};
    assert_true(kace_probe_window_rule(len, falling, 4, 0.02, 0.1, 30, &err, &basis) == 2);
    assert_string_equal(basis, "measured");
    assert_true(err == 0.015);
    /* A dip of periodic noise at 1 s does not count: 2 s is above the target. */
    double dip[4] = {0.1, 0.01, 0.03, 0.015};
    assert_true(kace_probe_window_rule(len, dip, 4, 0.02, 0.1, 30, &err, &basis) == 4);
    assert_string_equal(basis, "measured");
    /* Unmeasured lengths are skipped. */
    double gaps[4] = {0.1, NAN, 0.015, NAN};
    assert_true(kace_probe_window_rule(len, gaps, 4, 0.02, 0.1, 30, &err, &basis) == 2);
    /* Above the target everywhere: 1 s x (0.08 / 0.02)^2 = 16 s. */
    double high[2] = {0.1, 0.08};
    assert_true(fabs(kace_probe_window_rule(len, high, 2, 0.02, 0.1, 30, &err, &basis) - 16) < 1e-9);
    assert_string_equal(basis, "extrapolated");
    assert_true(err == 0.02);
    /* ... bounded at 10 s, where the error is 0.08 x sqrt(1 / 10). */
    assert_true(kace_probe_window_rule(len, high, 2, 0.02, 0.1, 10, &err, &basis) == 10);
    assert_string_equal(basis, "max");
    assert_true(fabs(err - 0.08 * sqrt(0.1)) < 1e-9);
    /* Quiet at once: the lower bound. */
    double quiet[4] = {0.001, 0.001, 0.001, 0.001};
    assert_true(kace_probe_window_rule(len, quiet, 4, 0.02, 1.5, 30, &err, &basis) == 1.5);
    assert_string_equal(basis, "min");
    double none[2] = {NAN, NAN};
    assert_true(isnan(kace_probe_window_rule(len, none, 2, 0.02, 1, 30, &err, &basis)));
    assert_string_equal(basis, "unmeasured");
    assert_true(isnan(kace_probe_window_rule(len, none, 0, 0.02, 1, 30, NULL, NULL)));
}

/* Records every 10 ms of a rate r(t) = 100 (1 + a sin(2 pi t / p)). */
static size_t synthetic(kace_progress_record *r, size_t n, double a, double p)
{
    double w = 2 * M_PI / p;
    for (size_t i = 0; i < n; i++) {
        double t = 0.01 * (double)i;
        r[i].t_ns = (int64_t)llround(t * 1e9) + 1000000000LL;
        r[i].samples = 100 * (t + a / w * (1 - cos(w * t)));
        r[i].stamped = true;
    }
    return n;
}

static void test_window_cv(void **state)
{
    (void)state;
    static kace_progress_record r[1001]; /* 10 s */
    size_t n = synthetic(r, 1001, 0, 1);
    assert_true(kace_probe_window_cv(r, n, 0.5) < 1e-9); /* a constant rate */
    n = synthetic(r, 1001, 0.1, 2);
    double at_period = kace_probe_window_cv(r, n, 2), short_w = kace_probe_window_cv(r, n, 0.1);
    /* A window of a sine's period holds its mean; a short one sees a / sqrt(2). */
    assert_true(at_period < 0.002);
    assert_true(fabs(short_w - 0.1 / sqrt(2)) < 0.01);
    assert_true(kace_probe_window_cv(r, n, 1) > at_period);
    /* Too little data for the length: the span must hold two windows. */
    assert_true(isnan(kace_probe_window_cv(r, n, 5.5)));
    assert_false(isnan(kace_probe_window_cv(r, n, 4.9)));
    assert_true(isnan(kace_probe_window_cv(r, 1, 0.1)));
    assert_true(fabs(kace_probe_median_gap_s(r, n) - 0.01) < 1e-6);
    assert_true(isnan(kace_probe_median_gap_s(r, 1)));
}

static void test_kib_fields(void **state)
{
    (void)state;
    const char *meminfo = "MemTotal:       131072000 kB\nMemFree:         1000 kB\nMemAvailable:   98765432 kB\n";
    unsigned long long kib = 0;
    assert_true(kace_probe_kib_field(meminfo, "MemAvailable", &kib));
    assert_true(kib == 98765432ULL);
    assert_true(kace_probe_kib_field(meminfo, "MemTotal", &kib));
    assert_true(kib == 131072000ULL);
    assert_false(kace_probe_kib_field(meminfo, "Mem", &kib)); /* a prefix is not the key */
    assert_false(kace_probe_kib_field(meminfo, "SwapTotal", &kib));
    assert_true(kace_probe_kib_field("Name:\tpython3\nVmRSS:\t  2048 kB\nThreads: 9\n", "VmRSS", &kib));
    assert_true(kib == 2048);
    assert_false(kace_probe_kib_field("VmRSS:\tabc kB\n", "VmRSS", &kib));
    assert_false(kace_probe_kib_field("VmRSS:\t12 MB\n", "VmRSS", &kib));
    assert_false(kace_probe_kib_field("", "VmRSS", &kib));
}

/* ---- the probe against the stand-ins ------------------------------------------- */

static char run_dir[64];
static kace_mps *mps;
static kace_ctx *ctx;

static int setup(void **state)
{
    (void)state;
    snprintf(run_dir, sizeof run_dir, "/tmp/kace-test-probe-XXXXXX"); /* short: socket paths */
    if (!mkdtemp(run_dir) || !(ctx = kace_ctx_new()))
        return -1;
    setenv("KACE_TEST_MPS_MODE", "cuda-start", 1);
    setenv("KACE_TEST_MPS_MAX_CLIENTS", "3", 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kace_mps_stop(ctx, &mps, NULL);
    kace_ctx_free(&ctx);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", run_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void start_daemon(void)
{
    kace_mps_options o = {.control = KACE_TEST_MPS_CONTROL, .run_dir = run_dir, .start_timeout_s = 10,
                          .quit_timeout_s = 5, .kill_grace_s = 2};
    assert_kace_ok(ctx, kace_mps_start(ctx, &o, &mps));
}

static kace_probe_options probe_options(const kace_proc_spec *client, const kace_proc_spec *work)
{
    kace_probe_options o = {.mps = mps, .client = client, .workload = work, .client_batch = 2, .client_cap = 8,
                            .skip_s = 0.2, .curve_s = 1.6, .window_min_s = 0.05, .window_max_s = 5,
                            .timeout_s = 120};
    kace_run_options_init(&o.run);
    o.run.term_grace_s = 2;
    o.run.term_grace_max_s = 5;
    return o;
}

/* The server takes 3 clients: batches of 2 find 2, then 1 and a refusal. */
static void test_probe_finds_the_client_limit_memory_and_window(void **state)
{
    (void)state;
    start_daemon();
    char *client_argv[] = {self, "--client", NULL}, *work_argv[] = {self, "--workload", NULL};
    kace_proc_spec client_spec = {.name = "probe-client", .argv = client_argv};
    kace_proc_spec work_spec = {.name = "noisy", .argv = work_argv};
    kace_probe_options o = probe_options(&client_spec, &work_spec);
    kace_probe_result r;
    assert_kace_ok(ctx, kace_pool_probe(ctx, &o, &r));
    assert_true(r.clients_probed);
    assert_int_equal(r.clients_accepted, 3);
    assert_true(r.client_refused);
    assert_non_null(strstr(r.refusal, "refused client"));
    assert_int_equal(r.clients_listed, 3); /* listed while the three ran */
    assert_int_equal(r.pool_members, 3);
    assert_string_equal(r.pool_bound, "clients");
    /* The workload was a client too, after the probe's had gone: it was not refused. */
    assert_true(r.curve_ok);
    assert_string_equal(r.detail, "");
    assert_true(r.mem_available_kib > 0);
    assert_true(r.member_rss_kib >= (unsigned long long)HELD_MIB * 1024);
    assert_true(r.member_rss_kib < r.mem_available_kib);
    assert_true(r.curve_records > 10);
    assert_true(r.curve_span_s > 1.0 && r.curve_span_s < 10); /* 1.6 s, and its last step */
    assert_true(r.step_s > 0);
    assert_true(r.cpus >= 1);
    /* The noise: windows of the period average the sine out (0.05 s x 2^3 = 0.4 s);
     * the first step's 0.5 s without samples, in the curve, would spoil both. */
    assert_true(r.n_windows >= 5);
    assert_true(fabs(r.window_len_s[0] - 0.05) < 1e-9);
    assert_true(fabs(r.window_len_s[6] - PERIOD) < 1e-9);
    assert_true(r.window_cv[0] > 0.05);
    assert_true(r.window_cv[6] < r.window_cv[0] / 2);
    assert_true(r.window_s >= 0.05 && r.window_s <= 5);
    assert_true(isfinite(r.window_error));
    /* Every probe process has gone: the server lists no client. */
    int servers[4], clients[16];
    size_t ns = 0, nc = 1;
    assert_kace_ok(ctx, kace_mps_server_pids(ctx, mps, servers, 4, &ns));
    assert_int_equal(ns, 1);
    assert_kace_ok(ctx, kace_mps_client_pids(ctx, mps, servers[0], clients, 16, &nc));
    assert_int_equal(nc, 0);
}

/* A cap below the limit: all accepted, no refusal, the cap bounds the
 * pool; a client that cannot start at all counts as the limit 0. */
static void test_probe_cap_and_a_broken_client(void **state)
{
    (void)state;
    start_daemon();
    char *client_argv[] = {self, "--client", NULL};
    kace_proc_spec client_spec = {.name = "probe-client", .argv = client_argv};
    kace_probe_options o = probe_options(&client_spec, NULL);
    o.client_cap = 2;
    o.client_batch = 4;
    kace_probe_result r;
    assert_kace_ok(ctx, kace_pool_probe(ctx, &o, &r));
    assert_int_equal(r.clients_accepted, 2);
    assert_false(r.client_refused);
    assert_int_equal(r.pool_members, 2);
    assert_string_equal(r.pool_bound, "clients");
    assert_true(isnan(r.window_s)); /* no workload: the caller keeps its window */
    assert_string_equal(r.window_basis, "unmeasured");
    o.client_cap = 0; /* the caller's bound on the pool is the cap */
    o.max_members = 2;
    assert_kace_ok(ctx, kace_pool_probe(ctx, &o, &r));
    assert_int_equal(r.clients_accepted, 2);
    assert_false(r.client_refused);
    assert_int_equal(r.pool_members, 2);
    /* The margin stays below a limit met (3 accepted, the 4th refused), and
     * only then: a cap reached is not the server's limit. */
    o.client_margin = 1;
    assert_kace_ok(ctx, kace_pool_probe(ctx, &o, &r));
    assert_int_equal(r.clients_accepted, 2);
    assert_int_equal(r.pool_members, 2);
    o.client_cap = 8;
    o.max_members = 0;
    assert_kace_ok(ctx, kace_pool_probe(ctx, &o, &r));
    assert_int_equal(r.clients_accepted, 3);
    assert_true(r.client_refused);
    assert_int_equal(r.pool_members, 2);
    assert_string_equal(r.pool_bound, "clients");
    o.client_margin = 5; /* more than the limit: not one member */
    assert_kace_ok(ctx, kace_pool_probe(ctx, &o, &r));
    assert_int_equal(r.pool_members, 0);

    char *broken_argv[] = {"/nonexistent/kace-probe-client", NULL};
    kace_proc_spec broken = {.name = "broken", .argv = broken_argv};
    o = probe_options(&broken, NULL);
    assert_kace_ok(ctx, kace_pool_probe(ctx, &o, &r));
    assert_int_equal(r.clients_accepted, 0);
    assert_true(r.client_refused);
    assert_non_null(strstr(r.refusal, "cannot run"));
    assert_int_equal(r.pool_members, 0);

    /* A server that queues clients and never serves them: each batch has
     * client_start_s; none accepted, none refused. */
    char *silent_argv[] = {self, "--silent-client", NULL};
    kace_proc_spec silent = {.name = "silent", .argv = silent_argv};
    o = probe_options(&silent, NULL);
    o.client_start_s = 0.5;
    assert_kace_ok(ctx, kace_pool_probe(ctx, &o, &r));
    assert_int_equal(r.clients_accepted, 0);
    assert_false(r.client_refused);
    assert_non_null(strstr(r.detail, "did not start in time"));
    assert_int_equal(r.pool_members, 0);

    o.mps = NULL;
    assert_int_equal(kace_pool_probe(ctx, &o, &r), KACE_ERR_INVALID);
    o.mps = mps; /* quit: clients would run without MPS */
    assert_kace_ok(ctx, kace_mps_quit(ctx, mps, NULL));
    assert_int_equal(kace_pool_probe(ctx, &o, &r), KACE_ERR_INVALID);
    assert_non_null(strstr(kace_errmsg(ctx), "start it first"));
    o = probe_options(&client_spec, NULL);
    o.window_min_s = 10;
    o.window_max_s = 1;
    assert_int_equal(kace_pool_probe(ctx, &o, &r), KACE_ERR_INVALID);
}

/* From a catalog: its CUDA C workload is the client, its PyTorch one the
 * curve's (not the first line, a command of another kind); the evidence in
 * one line. */
static void test_probe_from_a_catalog(void **state)
{
    (void)state;
    start_daemon();
    char text[3 * 4200];
    snprintf(text, sizeof text,
             "other_batch1-inf cmd /nonexistent/never-run\n"
             "cuda-client_batch1-inf cuda '%s' --client\n"
             "noisy_batch8-train torch '%s' --workload\n", self, self);
    kace_catalog cat = {0};
    assert_kace_ok(ctx, kace_catalog_parse(ctx, &cat, text, strlen(text), "probe.txt", NULL, 0));
    kace_probe_options o = probe_options(NULL, NULL);
    kace_probe_result r;
    kace_status st = kace_pool_probe_catalog(ctx, &cat, &o, &r);
    kace_catalog_free(&cat);
    assert_kace_ok(ctx, st);
    assert_int_equal(r.clients_accepted, 3);
    assert_true(r.client_refused);
    assert_true(r.curve_ok);
    assert_true(r.member_rss_kib >= (unsigned long long)HELD_MIB * 1024);
    char line[1024];
    kace_probe_describe(&r, line, sizeof line);
    assert_non_null(strstr(line, "probe: MPS clients 3 accepted, 3 listed (the next refused: the limit)"));
    assert_non_null(strstr(line, "pool 3 members (bound by clients)"));
    assert_non_null(strstr(line, "window "));
    assert_null(strstr(line, "window none"));
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--client") == 0)
        return client();
    if (argc == 2 && strcmp(argv[1], "--workload") == 0)
        return workload();
    if (argc == 2 && strcmp(argv[1], "--silent-client") == 0) {
        for (;;) /* a CUDA start that never returns: no report */
            pause();
    }
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return 1;
    self[n] = '\0';
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_size),
        cmocka_unit_test(test_window_rule),
        cmocka_unit_test(test_window_cv),
        cmocka_unit_test(test_kib_fields),
        cmocka_unit_test_setup_teardown(test_probe_finds_the_client_limit_memory_and_window, setup, teardown),
        cmocka_unit_test_setup_teardown(test_probe_cap_and_a_broken_client, setup, teardown),
        cmocka_unit_test_setup_teardown(test_probe_from_a_catalog, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
