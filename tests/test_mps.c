/* The MPS daemon lifecycle (lib/gpu/mps.c) against a stand-in control daemon
 * (tests/helpers/mps_standin.c): a real daemon process with a real server
 * child, that can refuse to start, die, ignore `quit` or ignore SIGTERM.
 * Every case ends by checking that no process of the instance is left. */
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kace/mps.h"
#include "testutil.h"

static char run_dir[64];

static int setup(void **state)
{
    (void)state;
    /* Under /tmp: the real daemon's socket paths must stay short. */
    snprintf(run_dir, sizeof run_dir, "/tmp/kace-test-mps-XXXXXX");
    if (!mkdtemp(run_dir))
        return -1;
    setenv("KACE_TEST_MPS_MODE", "normal", 1);
    return 0;
}

static int signal_instance(int sig);

static int teardown(void **state)
{
    (void)state;
    /* A case that failed half-way may have left its daemon: end it by id. */
    signal_instance(SIGKILL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", run_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Processes whose environment names the pipe folder of run_dir: their count,
 * each sent sig first unless it is 0. */
static int signal_instance(int sig)
{
    char want[128];
    snprintf(want, sizeof want, "CUDA_MPS_PIPE_DIRECTORY=%s/pipe", run_dir);
    DIR *d = opendir("/proc");
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!isdigit((unsigned char)e->d_name[0]) || atoi(e->d_name) == getpid())
            continue;
        char path[300], stat_path[300], buf[16384], st[256] = "";
        snprintf(path, sizeof path, "/proc/%s/environ", e->d_name);
        snprintf(stat_path, sizeof stat_path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(stat_path, "r");
        if (f) {
            size_t got = fread(st, 1, sizeof st - 1, f);
            st[got] = '\0';
            fclose(f);
        }
        const char *paren = strrchr(st, ')');
        if (paren && paren[1] && (paren[2] == 'Z' || paren[2] == 'X'))
            continue;
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            continue;
        ssize_t len = read(fd, buf, sizeof buf - 1);
        close(fd);
        for (ssize_t at = 0; len > 0 && at < len; at += (ssize_t)strlen(buf + at) + 1) {
            buf[len] = '\0';
            if (strcmp(buf + at, want) == 0) {
                if (sig)
                    kill(atoi(e->d_name), sig);
                n++;
                break;
            }
        }
    }
    closedir(d);
    return n;
}

static int count_instance(void)
{
    return signal_instance(0);
}

/* The instance's process count once it is want, or what it is after 5 s:
 * the stand-in daemon starts its server in its own time. */
static int count_instance_until(int want)
{
    int n = count_instance();
    for (int i = 0; i < 500 && n != want; i++) {
        usleep(10000);
        n = count_instance();
    }
    return n;
}

static kace_mps_options options(void)
{
    /* quit_timeout_s bounds the control client that sends "quit" too: 0.5 s was
     * too short for an ASan client on a loaded 2-core machine (quit_accepted
     * false, seen). Only the daemons that ignore quit or SIGTERM wait it out. */
    kace_mps_options o = {.control = KACE_TEST_MPS_CONTROL, .run_dir = run_dir, .start_timeout_s = 5,
                          .quit_timeout_s = 3, .kill_grace_s = 2};
    return o;
}

static bool file_contains(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strstr(buf, needle) != NULL;
}

static void test_normal_start_and_quit(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_mps_options o = options();
    kace_mps *m = NULL;
    assert_kace_ok(ctx, kace_mps_start(ctx, &o, &m));
    assert_true(kace_mps_alive(m));
    assert_int_equal(count_instance(), 2); /* daemon + stand-in server */

    const char *const *env = kace_mps_client_env(m);
    char want[128];
    snprintf(want, sizeof want, "CUDA_MPS_PIPE_DIRECTORY=%s/pipe", run_dir);
    assert_string_equal(env[0], want);
    snprintf(want, sizeof want, "CUDA_MPS_LOG_DIRECTORY=%s/log", run_dir);
    assert_string_equal(env[1], want);
    assert_null(env[2]);

    kace_mps_stop_report r;
    assert_kace_ok(ctx, kace_mps_stop(ctx, &m, &r));
    assert_null(m);
    assert_true(r.was_running);
    assert_true(r.quit_accepted);
    assert_false(r.sent_sigterm);
    assert_int_equal(r.n_processes, 2);
    assert_int_equal(count_instance(), 0);
    char log_path[128];
    snprintf(log_path, sizeof log_path, "%s/log/control.log", run_dir);
    assert_true(file_contains(log_path, "] quit"));
    /* Stopping nothing is fine. */
    assert_kace_ok(ctx, kace_mps_stop(ctx, &m, NULL));
    kace_ctx_free(&ctx);
}

static void test_daemon_refuses_to_start(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    setenv("KACE_TEST_MPS_MODE", "refuse", 1);
    kace_mps_options o = options();
    kace_mps *m = NULL;
    assert_int_equal(kace_mps_start(ctx, &o, &m), KACE_ERR_IO);
    assert_null(m);
    assert_non_null(strstr(kace_errmsg(ctx), "status 1"));
    assert_non_null(strstr(kace_errmsg(ctx), "already running"));
    assert_int_equal(count_instance(), 0);
    /* The lock was released: a well-behaved daemon starts in the same folder. */
    setenv("KACE_TEST_MPS_MODE", "normal", 1);
    assert_kace_ok(ctx, kace_mps_start(ctx, &o, &m));
    assert_kace_ok(ctx, kace_mps_stop(ctx, &m, NULL));
    assert_int_equal(count_instance(), 0);
    kace_ctx_free(&ctx);
}

static void test_daemon_dies(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    setenv("KACE_TEST_MPS_MODE", "die", 1);
    kace_mps_options o = options();
    kace_mps *m = NULL;
    kace_status st = kace_mps_start(ctx, &o, &m);
    if (st == KACE_OK) {
        /* Started, then died on its own: alive() must notice. It is polled
         * until then; the deadline only ends a wait that would not. */
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        bool alive = kace_mps_alive(m);
        for (t = t0; alive && t.tv_sec - t0.tv_sec < 30; clock_gettime(CLOCK_MONOTONIC, &t)) {
            usleep(10000);
            alive = kace_mps_alive(m);
        }
        /* Stopped before any check: a daemon that did not die does not outlive the case. */
        kace_mps_stop_report r;
        kace_status stopped = kace_mps_stop(ctx, &m, &r);
        assert_false(alive);
        assert_kace_ok(ctx, stopped);
        assert_false(r.was_running);
    } else {
        assert_int_equal(st, KACE_ERR_IO); /* died before start looked */
        assert_non_null(strstr(kace_errmsg(ctx), "no daemon is running"));
    }
    assert_int_equal(count_instance(), 0);
    kace_ctx_free(&ctx);
}

static void test_daemon_ignores_quit(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    setenv("KACE_TEST_MPS_MODE", "ignore-quit", 1);
    kace_mps_options o = options();
    kace_mps *m = NULL;
    assert_kace_ok(ctx, kace_mps_start(ctx, &o, &m));
    kace_mps_stop_report r;
    assert_kace_ok(ctx, kace_mps_stop(ctx, &m, &r));
    assert_true(r.quit_accepted);
    assert_true(r.sent_sigterm);
    assert_false(r.sent_sigkill);
    assert_int_equal(count_instance(), 0);
    kace_ctx_free(&ctx);
}

static void test_daemon_ignores_sigterm(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    setenv("KACE_TEST_MPS_MODE", "stubborn", 1);
    kace_mps_options o = options();
    kace_mps *m = NULL;
    assert_kace_ok(ctx, kace_mps_start(ctx, &o, &m));
    kace_mps_stop_report r;
    assert_kace_ok(ctx, kace_mps_stop(ctx, &m, &r));
    assert_true(r.sent_sigterm);
    assert_true(r.sent_sigkill);
    assert_int_equal(count_instance(), 0);
    kace_ctx_free(&ctx);
}

static void test_run_folder_is_locked(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_mps_options o = options();
    kace_mps *a = NULL, *b = NULL;
    assert_kace_ok(ctx, kace_mps_start(ctx, &o, &a));
    assert_int_equal(kace_mps_start(ctx, &o, &b), KACE_ERR_IO);
    assert_null(b);
    assert_non_null(strstr(kace_errmsg(ctx), "in use by another kace"));
    assert_int_equal(count_instance(), 2); /* the first one was not disturbed */
    assert_kace_ok(ctx, kace_mps_stop(ctx, &a, NULL));
    assert_int_equal(count_instance(), 0);
    kace_ctx_free(&ctx);
}

static void capture_log(void *user, kace_log_level level, const char *message)
{
    if (level == KACE_LOG_WARN)
        snprintf((char *)user, 512, "%s", message);
}

static void test_stale_daemon_is_shut_down(void **state)
{
    (void)state;
    /* A daemon whose kace was SIGKILLed: started here by hand. */
    char pipe_env[128], log_env[128], pipe_dir[96], log_dir[96];
    snprintf(pipe_dir, sizeof pipe_dir, "%s/pipe", run_dir);
    snprintf(log_dir, sizeof log_dir, "%s/log", run_dir);
    assert_int_equal(mkdir(pipe_dir, 0700), 0);
    assert_int_equal(mkdir(log_dir, 0700), 0);
    snprintf(pipe_env, sizeof pipe_env, "CUDA_MPS_PIPE_DIRECTORY=%s", pipe_dir);
    snprintf(log_env, sizeof log_env, "CUDA_MPS_LOG_DIRECTORY=%s", log_dir);
    pid_t pid = fork();
    if (pid == 0) {
        putenv(pipe_env);
        putenv(log_env);
        execl(KACE_TEST_MPS_CONTROL, KACE_TEST_MPS_CONTROL, "-d", (char *)NULL);
        _exit(127);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(count_instance(), 2);

    kace_ctx *ctx = kace_ctx_new();
    char warning[512] = "";
    kace_ctx_set_log(ctx, capture_log, warning);
    kace_mps_options o = options();
    kace_mps *m = NULL;
    assert_kace_ok(ctx, kace_mps_start(ctx, &o, &m));
    assert_non_null(strstr(warning, "left by an earlier kace"));
    assert_int_equal(count_instance(), 2); /* only the new daemon and its server */
    assert_kace_ok(ctx, kace_mps_stop(ctx, &m, NULL));
    assert_int_equal(count_instance(), 0);
    kace_ctx_free(&ctx);
}

static void test_missing_control_program(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_mps_options o = options();
    o.control = "/nonexistent/nvidia-cuda-mps-control";
    kace_mps *m = NULL;
    assert_int_equal(kace_mps_start(ctx, &o, &m), KACE_ERR_UNSUPPORTED);
    assert_non_null(strstr(kace_errmsg(ctx), "/nonexistent/nvidia-cuda-mps-control"));
    o.control = "kace-no-such-program-in-path";
    assert_int_equal(kace_mps_start(ctx, &o, &m), KACE_ERR_UNSUPPORTED);
    assert_null(m);
    kace_ctx_free(&ctx);
}

/* get_server_list: the stand-in server's PID while the daemon runs. */
static void test_server_list(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_mps_options o = options();
    kace_mps *m = NULL;
    assert_kace_ok(ctx, kace_mps_start(ctx, &o, &m));
    int pids[4] = {0};
    size_t n = 99;
    assert_kace_ok(ctx, kace_mps_server_pids(ctx, m, pids, 4, &n));
    assert_int_equal(n, 1);
    assert_true(pids[0] > 1 && pids[0] != getpid());
    assert_int_equal(kill(pids[0], 0), 0);
    char log_path[128];
    snprintf(log_path, sizeof log_path, "%s/log/control.log", run_dir);
    assert_true(file_contains(log_path, "] get_server_list"));
    /* A PID that is no server: the real daemon answers "Server N not found" (an H200's). */
    int clients[4];
    assert_int_equal(kace_mps_client_pids(ctx, m, 999999, clients, 4, &n), KACE_ERR_NOT_FOUND);
    assert_non_null(strstr(kace_errmsg(ctx), "get_client_list 999999: the MPS control daemon says 'Server 999999 "
                                             "not found': that server has gone"));
    assert_kace_ok(ctx, kace_mps_stop(ctx, &m, NULL));
    /* Its server went with the daemon. */
    assert_int_equal(kill(pids[0], 0), -1);
    kace_ctx_free(&ctx);
}

/* A daemon that is alive but whose server never starts: no PID, and the
 * server's log says why. */
static void test_daemon_without_server(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    setenv("KACE_TEST_MPS_MODE", "no-server", 1);
    kace_mps_options o = options();
    kace_mps *m = NULL;
    assert_kace_ok(ctx, kace_mps_start(ctx, &o, &m));
    assert_true(kace_mps_alive(m));
    assert_int_equal(count_instance(), 1);
    int pids[4];
    size_t n = 99;
    assert_kace_ok(ctx, kace_mps_server_pids(ctx, m, pids, 4, &n));
    assert_int_equal(n, 0);
    char tail[512];
    kace_mps_server_log_tail(m, tail, sizeof tail);
    assert_non_null(strstr(tail, "server.log: "));
    assert_non_null(strstr(tail, "Server failed to start"));
    assert_kace_ok(ctx, kace_mps_stop(ctx, &m, NULL));
    assert_int_equal(count_instance(), 0);

    /* An answer that is not a list of PIDs is an error, not "no server". */
    setenv("KACE_TEST_MPS_MODE", "bad-list", 1);
    assert_kace_ok(ctx, kace_mps_start(ctx, &o, &m));
    assert_int_equal(kace_mps_server_pids(ctx, m, pids, 4, &n), KACE_ERR_PARSE);
    assert_non_null(strstr(kace_errmsg(ctx), "get_server_list:1:1: expected an MPS server PID, got 'server "));
    assert_kace_ok(ctx, kace_mps_stop(ctx, &m, NULL));
    assert_int_equal(count_instance(), 0);
    kace_ctx_free(&ctx);
}

/* quit keeps the folder locked; restart brings daemon and server back. */
static void test_quit_and_restart(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_mps_options o = options();
    kace_mps *m = NULL, *other = NULL;
    assert_kace_ok(ctx, kace_mps_start(ctx, &o, &m));
    kace_mps_stop_report r;
    assert_kace_ok(ctx, kace_mps_quit(ctx, m, &r));
    assert_true(r.quit_accepted);
    assert_false(kace_mps_alive(m));
    assert_int_equal(count_instance(), 0);
    assert_int_equal(kace_mps_start(ctx, &o, &other), KACE_ERR_IO);
    assert_non_null(strstr(kace_errmsg(ctx), "in use by another kace"));
    int pids[4];
    size_t n = 0;
    assert_int_equal(kace_mps_server_pids(ctx, m, pids, 4, &n), KACE_ERR_IO);
    assert_non_null(strstr(kace_errmsg(ctx), "Cannot find MPS control daemon"));
    assert_kace_ok(ctx, kace_mps_restart(ctx, m));
    assert_int_equal(count_instance(), 2);
    assert_kace_ok(ctx, kace_mps_restart(ctx, m)); /* already running: nothing to do */
    assert_int_equal(count_instance(), 2);
    assert_kace_ok(ctx, kace_mps_server_pids(ctx, m, pids, 4, &n));
    assert_int_equal(n, 1);
    assert_kace_ok(ctx, kace_mps_stop(ctx, &m, NULL));
    assert_int_equal(count_instance(), 0);

    /* A time-sliced session: the folder without a daemon, and no control
     * program needed until one is started. */
    o.control = "/nonexistent/nvidia-cuda-mps-control";
    assert_kace_ok(ctx, kace_mps_open(ctx, &o, &m));
    assert_false(kace_mps_alive(m));
    assert_int_equal(kace_mps_restart(ctx, m), KACE_ERR_UNSUPPORTED);
    assert_non_null(strstr(kace_errmsg(ctx), "/nonexistent/nvidia-cuda-mps-control"));
    assert_kace_ok(ctx, kace_mps_stop(ctx, &m, NULL));
    kace_ctx_free(&ctx);
}

/* A process in a group of its own with the client environment of m, that
 * waits (sleep) until killed: started once its shell has the environment
 * (it says "ready" on the pipe first). */
static pid_t start_client_like(kace_mps *m)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setpgid(0, 0);
        dup2(fds[1], 1);
        close(fds[0]);
        for (const char *const *e = kace_mps_client_env(m); *e; e++)
            putenv((char *)*e);
        execl("/bin/sh", "sh", "-c", "echo ready; exec sleep 1000", (char *)NULL);
        _exit(127);
    }
    setpgid(pid, pid);
    close(fds[1]);
    char buf[8];
    assert_true(read(fds[0], buf, sizeof buf) > 0);
    close(fds[0]);
    return pid;
}

/* Whether child pid ends: reaped now, or within 5 s. kace counts a process
 * gone once its environment can no longer be read, which an exiting
 * process loses before it is a zombie that waitpid reaps. */
static bool ends(pid_t pid)
{
    for (int i = 0; i < 500; i++) {
        if (waitpid(pid, NULL, WNOHANG) != 0) /* reaped, or already reaped (-1) */
            return true;
        usleep(10000);
    }
    return false;
}

/* A process group kace holds at its CUDA start (kace_mps_hold) is not of the
 * instance: quitting the daemon leaves it waiting, while a leftover client
 * (the pipe folder in its environment, not held) is still ended. Unheld,
 * it counts again. */
static void test_held_group_outlives_quit(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    kace_mps_options o = options();
    kace_mps *m = NULL;
    assert_kace_ok(ctx, kace_mps_start(ctx, &o, &m));
    pid_t leftover = start_client_like(m), held = start_client_like(m);
    assert_true(kace_mps_hold(m, held));
    assert_true(kace_mps_hold(m, held)); /* twice: held once */
    assert_false(kace_mps_hold(m, 0));
    assert_int_equal(count_instance_until(4), 4); /* daemon, server, leftover, held */

    kace_mps_stop_report r;
    assert_kace_ok(ctx, kace_mps_quit(ctx, m, &r));
    assert_int_equal(r.n_processes, 3); /* the held one is not counted */
    assert_true(r.sent_sigterm);        /* the leftover client ignored quit */
    assert_true(ends(leftover));                                /* ended by the quit */
    assert_int_equal(waitpid(held, NULL, WNOHANG), 0);         /* still waiting */
    assert_false(kace_mps_alive(m));
    assert_int_equal(count_instance(), 1);

    /* A restart does not wait for it either; unheld, it is a client again. */
    assert_kace_ok(ctx, kace_mps_restart(ctx, m));
    assert_int_equal(count_instance_until(3), 3); /* daemon, server, held */
    kace_mps_unhold(m, held);
    assert_kace_ok(ctx, kace_mps_quit(ctx, m, &r));
    assert_int_equal(r.n_processes, 3);
    assert_true(ends(held));
    assert_int_equal(count_instance(), 0);
    assert_kace_ok(ctx, kace_mps_stop(ctx, &m, NULL));
    kace_ctx_free(&ctx);
}

static void test_pct_lists(void **state)
{
    (void)state;
    kace_ctx *ctx = kace_ctx_new();
    int pct[8], n = 0;
    assert_kace_ok(ctx, kace_mps_pct_parse(ctx, "50,50", "--mps-pct", 2, 8, pct, &n));
    assert_int_equal(n, 2);
    assert_int_equal(pct[0], 50);
    assert_int_equal(pct[1], 50);
    assert_kace_ok(ctx, kace_mps_pct_parse(ctx, " 10 , 20,70", "--mps-pct", 0, 8, pct, &n));
    assert_int_equal(n, 3);
    assert_int_equal(pct[2], 70);
    struct {
        const char *text, *message;
        int k;
    } bad[] = {
        {"", "--mps-pct:1:1: expected an MPS percentage", 2},
        {"50,", "--mps-pct:1:4: expected an MPS percentage", 2},
        {"0,100", "--mps-pct:1:1: MPS percentage out of range", 2},
        {"50,101", "--mps-pct:1:4: MPS percentage out of range", 2},
        {"99999999999999999999", "--mps-pct:1:1: MPS percentage out of range", 1},
        {"50;50", "--mps-pct:1:3: expected ','", 2},
        {"50,50", "--mps-pct:1:1: 2 MPS percentage(s) for 3 workloads", 3},
        {"-5,50", "--mps-pct:1:1: expected an MPS percentage", 2},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(kace_mps_pct_parse(ctx, bad[i].text, "--mps-pct", bad[i].k, 8, pct, &n), KACE_ERR_PARSE);
        if (!strstr(kace_errmsg(ctx), bad[i].message))
            fail_msg("'%s': got '%s', want '%s'", bad[i].text, kace_errmsg(ctx), bad[i].message);
    }
    assert_int_equal(kace_mps_pct_parse(ctx, "1,1,1", "x", 0, 2, pct, &n), KACE_ERR_PARSE);
    kace_ctx_free(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_normal_start_and_quit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_daemon_refuses_to_start, setup, teardown),
        cmocka_unit_test_setup_teardown(test_daemon_dies, setup, teardown),
        cmocka_unit_test_setup_teardown(test_daemon_ignores_quit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_daemon_ignores_sigterm, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_folder_is_locked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_daemon_is_shut_down, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_control_program, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_daemon_without_server, setup, teardown),
        cmocka_unit_test_setup_teardown(test_quit_and_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_held_group_outlives_quit, setup, teardown),
        cmocka_unit_test(test_pct_lists),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
