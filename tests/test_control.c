/* The control channel (docs/progress-protocol.md): kace's run / pause / stop
 * messages, answered at step boundaries by workloads/kace_progress.h and
 * kace_progress.py, and the runner's stop by message with SIGTERM as the
 * fallback.
 *
 * The workloads are this test program itself (argv[1] == "--worker") or
 * Python with kace_progress.py. Every check counts events (records,
 * answers, how a process ended); nothing waits for time: a step that lasts
 * "until kace's stop request has come" waits for that request itself. */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../workloads/kace_progress.h"
#include "kace/runner.h"
#include "testutil.h"

#define WORKLOADS_DIR KACE_TEST_DATA "/../../workloads"

static char self[4096];

/* The process groups a test started by hand: killed on every exit path
 * (a failed assert longjmps to the teardown). */
static pid_t groups[8];
static size_t n_groups;

static pid_t start_group(void)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* and with the test, should it die */
        if (getppid() != parent)
            _exit(127);
        return 0;
    }
    if (pid > 0) {
        setpgid(pid, pid);
        if (n_groups < sizeof groups / sizeof *groups)
            groups[n_groups++] = pid;
    }
    return pid;
}

static int kill_started(void **state)
{
    (void)state;
    for (size_t i = 0; i < n_groups; i++) {
        kill(-groups[i], SIGKILL);
        waitpid(groups[i], NULL, 0);
    }
    n_groups = 0;
    return 0;
}

/* ---- the workers ---------------------------------------------------------- */

/* A step that lasts until kace's stop request has come: the control
 * channel's message where there is one, else SIGTERM (at its default, it
 * ends the process here). */
static void step_until_stop_request(void)
{
    const char *ctl = getenv("KACE_CONTROL_FD");
    if (ctl) {
        struct pollfd p = {atoi(ctl), POLLIN, 0};
        while (poll(&p, 1, -1) < 0 && errno == EINTR)
            ;
        return;
    }
    /* SIGTERM blocked while the flag is read, so that it cannot slip in between. */
    sigset_t term, old;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigprocmask(SIG_BLOCK, &term, &old);
    sigdelset(&old, SIGTERM);
    while (!kace_progress_stopping)
        sigsuspend(&old);
    sigprocmask(SIG_SETMASK, &old, NULL);
}

/* A program's own SIGTERM handler that ends it at once (a framework's
 * "graceful" exit that does not wait for the step). */
static void exit_at_once(int sig)
{
    (void)sig;
    _exit(0);
}

static int worker(const char *mode)
{
    if (strcmp(mode, "own-handler-after-first-step") == 0) {
        /* The handshake's order broken the other way: the program puts its
         * own handler in once its first step has started, after the helper's
         * (a training loop that sets up signal handling when training starts). */
        kace_progress_report(0);
        signal(SIGTERM, exit_at_once);
        kace_progress_report(1); /* its window is complete: kace's stop request comes in the next step */
        step_until_stop_request();
        for (unsigned long long i = 2;; i++)
            kace_progress_report(i);
    }
    if (strcmp(mode, "library-after-first-report") == 0) {
        /* kace_progress.h puts its SIGTERM handler in at the first report; then a
         * library loaded later (a CUDA injection library at the first CUDA call,
         * say) puts its own SIGTERM disposition in, here the default. */
        kace_progress_report(0);
        signal(SIGTERM, SIG_DFL);
        for (unsigned long long i = 1; i <= 20; i++)
            kace_progress_report(i);
        step_until_stop_request();
        for (unsigned long long i = 21;; i++)
            kace_progress_report(i);
    }
    if (strcmp(mode, "raw") == 0) {
        /* Writes its records itself and knows nothing of the control channel. */
        int fd = atoi(getenv("KACE_PROGRESS_FD"));
        long long t0 = (long long)kace_monotonic_ns() - 20000; /* a record every 1 us, up to now */
        for (int i = 0; i <= 20; i++) {
            char line[64];
            int n = snprintf(line, sizeof line, "done %d %lld\n", i, t0 + i * 1000LL);
            if (write(fd, line, (size_t)n) != n)
                return 1;
        }
        step_until_stop_request();
        return 0;
    }
    if (strcmp(mode, "loop") == 0)
        for (unsigned long long i = 0;; i++)
            kace_progress_report(i);
    if (strcmp(mode, "env") == 0) {
        kace_progress_report(0);
        kace_progress_report(1);
        fprintf(stderr, "control=%s\n", getenv("KACE_CONTROL_FD") ? getenv("KACE_CONTROL_FD") : "(none)");
        step_until_stop_request();
        kace_progress_report(2);
        return 0;
    }
    fprintf(stderr, "unknown worker mode %s\n", mode);
    return 2;
}

/* ---- the runner ------------------------------------------------------------ */

/* Runs one worker until its (tiny) window is complete, then kace stops it. */
static void run_worker(const char *mode, bool control, kace_proc_result *res)
{
    char *argv[] = {self, "--worker", (char *)mode, NULL};
    kace_proc_spec spec = {.name = mode, .argv = argv};
    kace_run_options opt;
    kace_run_options_init(&opt);
    opt.warmup_s = 0;
    opt.window_s = 1e-6;
    opt.timeout_s = 120; /* only if something hangs */
    opt.control = control;
    kace_ctx *ctx = kace_ctx_new();
    assert_kace_ok(ctx, kace_run(ctx, &spec, 1, &opt, res));
    kace_ctx_free(&ctx);
}

static const char *ending(const kace_proc_result *r)
{
    static char buf[256];
    return kace_proc_ending(r, buf, sizeof buf);
}

/* Today's way, SIGTERM: its correctness depends on the order in which
 * handlers go in. The helper's handler went in at the first report, a
 * library put SIGTERM back after it, and kace's SIGTERM ends the worker
 * mid-step. */
static void test_sigterm_fails_with_a_handler_put_in_later(void **state)
{
    (void)state;
    kace_proc_result r;
    run_worker("library-after-first-report", false, &r);
    assert_int_equal(r.status, KACE_PROC_OK);
    assert_false(r.speaks_control);
    assert_false(r.got_stop_message);
    assert_true(r.leader_got_sigterm);
    assert_int_equal(r.term_signal, SIGTERM);
    assert_true(kace_proc_ended_mid_step(&r));
    assert_false(kace_proc_stopped_at_report(&r));
    assert_string_equal(ending(&r), "ended by SIGTERM before its next report");
}

/* The control channel: the same worker reads kace's stop at its next report
 * and exits there with status 0; no signal is sent. */
static void test_control_stops_at_the_next_report(void **state)
{
    (void)state;
    kace_proc_result r;
    run_worker("library-after-first-report", true, &r);
    assert_int_equal(r.status, KACE_PROC_OK);
    assert_true(r.speaks_control);
    assert_true(r.got_stop_message);
    assert_false(r.got_sigterm);
    assert_false(r.leader_got_sigterm);
    assert_false(r.got_sigkill);
    assert_int_equal(r.term_signal, 0);
    assert_int_equal(r.exit_code, 0);
    assert_true(r.reported_after_sigterm);
    assert_true(kace_proc_stopped_at_report(&r));
    assert_false(kace_proc_ended_mid_step(&r));
    assert_string_equal(ending(&r), "stopped at its next report after kace's stop message");
}

/* The same with the program's own handler put in after the first step
 * started: it replaces the helper's, and kace's SIGTERM ends the worker at
 * once, mid-step, with status 0. */
static void test_sigterm_fails_with_a_handler_of_its_own_put_in_later(void **state)
{
    (void)state;
    kace_proc_result r;
    run_worker("own-handler-after-first-step", false, &r);
    assert_int_equal(r.status, KACE_PROC_OK);
    assert_true(r.leader_got_sigterm);
    assert_int_equal(r.term_signal, 0);
    assert_int_equal(r.exit_code, 0);
    assert_false(r.reported_after_sigterm);
    assert_int_equal(r.n_records, 2);
    assert_true(kace_proc_ended_mid_step(&r));
    assert_false(kace_proc_stopped_at_report(&r));
    assert_string_equal(ending(&r), "exited with status 0 after SIGTERM, before its next report");
}

/* The control channel does not depend on that order: the message waits for
 * the next report, whatever handler is in. */
static void test_control_stops_at_the_next_report_whatever_handler_is_in(void **state)
{
    (void)state;
    kace_proc_result r;
    run_worker("own-handler-after-first-step", true, &r);
    assert_int_equal(r.status, KACE_PROC_OK);
    assert_true(r.speaks_control);
    assert_true(r.got_stop_message);
    assert_false(r.got_sigterm);
    assert_int_equal(r.term_signal, 0);
    assert_int_equal(r.exit_code, 0);
    assert_true(r.reported_after_sigterm);
    assert_int_equal(r.n_records, 3); /* the one it stopped after is the third */
    assert_true(kace_proc_stopped_at_report(&r));
    assert_false(kace_proc_ended_mid_step(&r));
    assert_string_equal(ending(&r), "stopped at its next report after kace's stop message");
}

/* A program that does not speak the protocol gets SIGTERM, as before. */
static void test_sigterm_stays_the_fallback(void **state)
{
    (void)state;
    kace_proc_result r;
    run_worker("raw", true, &r);
    assert_int_equal(r.status, KACE_PROC_OK);
    assert_false(r.speaks_control);
    assert_false(r.got_stop_message);
    assert_true(r.leader_got_sigterm);
    assert_int_equal(r.term_signal, SIGTERM);
    assert_true(r.n_records >= 2 && r.n_records <= 21); /* it may be ended while it writes */
}

/* KACE_CONTROL_FD is passed only with the option (and an inherited one never). */
static void test_control_fd_only_when_offered(void **state)
{
    (void)state;
    setenv("KACE_CONTROL_FD", "9", 1); /* kace's own environment: not passed on */
    kace_proc_result r;
    run_worker("env", false, &r);
    assert_non_null(strstr(r.stderr_tail, "control=(none)"));
    assert_false(r.speaks_control);
    run_worker("env", true, &r);
    assert_non_null(strstr(r.stderr_tail, "control=4"));
    assert_true(r.speaks_control);
    assert_true(kace_proc_stopped_at_report(&r));
    assert_int_equal(r.n_records, 3);
    unsetenv("KACE_CONTROL_FD");
}

/* ---- the helpers driven by hand ------------------------------------------- */

typedef struct session {
    pid_t pid;
    int ctl, prog;
    char ctl_buf[256], prog_buf[4096];
    size_t ctl_len, prog_len;
    size_t records;
    long long last_t;          /* the last record's stamp */
    long long paused_from;     /* stamps in (paused_from, paused_to) break the pause */
    long long paused_to;
    size_t during_pause;       /* records stamped while it was paused */
} session;

static void start(session *s, char *const argv[])
{
    int ctl[2], prog[2];
    memset(s, 0, sizeof *s);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl), 0);
    assert_int_equal(pipe2(prog, O_CLOEXEC), 0);
    pid_t pid = start_group();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* Above 4 first, so that neither dup2 overwrites the other's source. */
        int p = fcntl(prog[1], F_DUPFD, 10), c = fcntl(ctl[1], F_DUPFD, 10);
        int devnull = open("/dev/null", O_WRONLY); /* the wrapper's COMMAND prints its steps */
        if (p < 0 || c < 0 || devnull < 0 || dup2(p, 3) < 0 || dup2(c, 4) < 0 || dup2(devnull, 1) < 0)
            _exit(126);
        setenv("KACE_PROGRESS_FD", "3", 1);
        setenv("KACE_CONTROL_FD", "4", 1);
        setenv("PYTHONPATH", WORKLOADS_DIR, 1);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(ctl[1]);
    close(prog[1]);
    s->pid = pid;
    s->ctl = ctl[0];
    s->prog = prog[0];
}

static void take_records(session *s, const char *buf, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (buf[i] != '\n') {
            if (s->prog_len + 1 < sizeof s->prog_buf)
                s->prog_buf[s->prog_len++] = buf[i];
            continue;
        }
        s->prog_buf[s->prog_len] = '\0';
        s->prog_len = 0;
        unsigned long long samples;
        long long t;
        assert_int_equal(sscanf(s->prog_buf, "done %llu %lld", &samples, &t), 2);
        s->records++;
        s->last_t = t;
        if (s->paused_from && t > s->paused_from && (!s->paused_to || t < s->paused_to))
            s->during_pause++;
    }
}

/* The next answer on the control channel (reading the records meanwhile, so
 * that a full progress pipe never holds the worker up). */
static const char *answer(session *s)
{
    static char line[256];
    for (;;) {
        char *nl = memchr(s->ctl_buf, '\n', s->ctl_len);
        if (nl) {
            size_t n = (size_t)(nl - s->ctl_buf);
            memcpy(line, s->ctl_buf, n);
            line[n] = '\0';
            memmove(s->ctl_buf, nl + 1, s->ctl_len - n - 1);
            s->ctl_len -= n + 1;
            return line;
        }
        struct pollfd p[2] = {{s->ctl, POLLIN, 0}, {s->prog, POLLIN, 0}};
        int nfds = s->prog >= 0 ? 2 : 1;
        if (poll(p, (nfds_t)nfds, -1) < 0) {
            assert_int_equal(errno, EINTR);
            continue;
        }
        char buf[4096];
        if (nfds == 2 && (p[1].revents & (POLLIN | POLLHUP))) {
            ssize_t n = read(s->prog, buf, sizeof buf);
            if (n > 0)
                take_records(s, buf, (size_t)n);
            else {
                close(s->prog);
                s->prog = -1;
            }
        }
        if (p[0].revents & (POLLIN | POLLHUP)) {
            ssize_t n = read(s->ctl, s->ctl_buf + s->ctl_len, sizeof s->ctl_buf - s->ctl_len - 1);
            if (n <= 0)
                return NULL; /* the worker closed it: it has gone */
            s->ctl_len += (size_t)n;
        }
    }
}

static void say(session *s, const char *msg)
{
    assert_int_equal(write(s->ctl, msg, strlen(msg)), (ssize_t)strlen(msg));
}

/* hello; pause -> paused, and no record until run -> running; stop ->
 * stopping, one more record and status 0. */
static void drive(char *const argv[])
{
    session s;
    start(&s, argv);
    const char *a = answer(&s);
    assert_non_null(a);
    assert_string_equal(a, "hello 1");
    say(&s, "pause\n");
    a = answer(&s);
    assert_non_null(a);
    assert_string_equal(a, "paused");
    s.paused_from = kace_monotonic_ns();
    size_t at_pause = s.records;
    s.paused_to = kace_monotonic_ns();
    say(&s, "pause\n"); /* a pause while paused: it stays paused, and says so */
    a = answer(&s);
    assert_non_null(a);
    assert_string_equal(a, "paused");
    s.paused_to = kace_monotonic_ns();
    say(&s, "run\n");
    a = answer(&s);
    assert_non_null(a);
    assert_string_equal(a, "running");
    say(&s, "stop\n");
    a = answer(&s);
    assert_non_null(a);
    assert_string_equal(a, "stopping");
    assert_null(answer(&s)); /* and nothing more: it exits */
    while (s.prog >= 0) {
        char buf[4096];
        ssize_t n = read(s.prog, buf, sizeof buf);
        if (n > 0)
            take_records(&s, buf, (size_t)n);
        else if (n == 0 || errno != EINTR) {
            close(s.prog);
            s.prog = -1;
        }
    }
    int ws;
    assert_int_equal(waitpid(s.pid, &ws, 0), s.pid);
    assert_true(WIFEXITED(ws));
    assert_int_equal(WEXITSTATUS(ws), 0);
    kill(-s.pid, SIGKILL); /* anything it left */
    close(s.ctl);
    assert_true(at_pause >= 1);
    assert_int_equal(s.during_pause, 0);
    assert_true(s.records > at_pause); /* it went on after run, and reported before it stopped */
    assert_true(s.last_t > s.paused_to);
}

static void test_c_helper_pause_run_stop(void **state)
{
    (void)state;
    char *argv[] = {self, "--worker", "loop", NULL};
    drive(argv);
}

static void test_python_helper_pause_run_stop(void **state)
{
    (void)state;
    char *argv[] = {"python3", "-c",
                    "from kace_progress import report\n"
                    "i = 0\n"
                    "while True:\n"
                    "    report(i)\n"
                    "    i += 1\n",
                    NULL};
    drive(argv);
}

/* The state letter of the first child of pid (/proc/N/stat), or 0. */
static char child_state(pid_t pid)
{
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)pid, (int)pid);
    FILE *f = fopen(path, "r");
    int child = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%d", &child) != 1)
        child = 0;
    fclose(f);
    if (!child)
        return 0;
    snprintf(path, sizeof path, "/proc/%d/stat", child);
    if (!(f = fopen(path, "r")))
        return 0;
    char *got = fgets(line, sizeof line, f);
    fclose(f);
    char *close_paren = got ? strrchr(line, ')') : NULL;
    return close_paren && close_paren[1] == ' ' ? close_paren[2] : 0;
}

/* kace progress-from-output speaks the channel for a program that does not: it
 * pauses COMMAND (SIGSTOP) at its next counted line, lets it run on (SIGCONT), and
 * at stop ends it with SIGTERM at its next line, with no record after it. */
static void test_wrapper_pause_run_stop(void **state)
{
    (void)state;
    char *argv[] = {KACE_CLI, "progress-from-output", "--match", "^step", "--", "sh", "-c",
                    "while :; do echo step; done", NULL};
    session s;
    start(&s, argv);
    const char *a = answer(&s);
    assert_non_null(a);
    assert_string_equal(a, "hello 1");
    say(&s, "pause\n");
    a = answer(&s);
    assert_non_null(a);
    assert_string_equal(a, "paused");
    assert_int_equal(child_state(s.pid), 'T'); /* COMMAND stopped */
    say(&s, "run\n");
    a = answer(&s);
    assert_non_null(a);
    assert_string_equal(a, "running");
    assert_int_not_equal(child_state(s.pid), 'T');
    size_t at_run = s.records;
    say(&s, "stop\n");
    a = answer(&s);
    assert_non_null(a);
    assert_string_equal(a, "stopping");
    assert_null(answer(&s));
    while (s.prog >= 0) {
        char buf[4096];
        ssize_t n = read(s.prog, buf, sizeof buf);
        if (n > 0)
            take_records(&s, buf, (size_t)n);
        else if (n == 0 || errno != EINTR) {
            close(s.prog);
            s.prog = -1;
        }
    }
    int ws;
    assert_int_equal(waitpid(s.pid, &ws, 0), s.pid);
    assert_true(WIFSIGNALED(ws)); /* it ends as COMMAND did: by the SIGTERM it passed on */
    assert_int_equal(WTERMSIG(ws), SIGTERM);
    kill(-s.pid, SIGKILL);
    close(s.ctl);
    assert_true(s.records >= at_run);
}

/* Closing the channel (kace has gone) stops a paused worker too. */
static void test_closed_channel_stops_a_paused_worker(void **state)
{
    (void)state;
    char *argv[] = {self, "--worker", "loop", NULL};
    session s;
    start(&s, argv);
    const char *a = answer(&s);
    assert_non_null(a);
    assert_string_equal(a, "hello 1");
    say(&s, "pause\n");
    a = answer(&s);
    assert_non_null(a);
    assert_string_equal(a, "paused");
    shutdown(s.ctl, SHUT_WR);
    a = answer(&s);
    assert_non_null(a);
    assert_string_equal(a, "stopping");
    int ws;
    assert_int_equal(waitpid(s.pid, &ws, 0), s.pid);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    kill(-s.pid, SIGKILL); /* anything it left */
    close(s.ctl);
    if (s.prog >= 0)
        close(s.prog);
}

static void test_message_names(void **state)
{
    (void)state;
    assert_string_equal(kace_control_msg_name(KACE_CONTROL_RUN), "run");
    assert_string_equal(kace_control_msg_name(KACE_CONTROL_PAUSE), "pause");
    assert_string_equal(kace_control_msg_name(KACE_CONTROL_STOP), "stop");
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--worker") == 0)
        return worker(argv[2]);
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return 1;
    self[n] = '\0';
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_message_names),
        cmocka_unit_test(test_sigterm_fails_with_a_handler_put_in_later),
        cmocka_unit_test(test_control_stops_at_the_next_report),
        cmocka_unit_test(test_sigterm_fails_with_a_handler_of_its_own_put_in_later),
        cmocka_unit_test(test_control_stops_at_the_next_report_whatever_handler_is_in),
        cmocka_unit_test(test_sigterm_stays_the_fallback),
        cmocka_unit_test(test_control_fd_only_when_offered),
        cmocka_unit_test_teardown(test_c_helper_pause_run_stop, kill_started),
        cmocka_unit_test_teardown(test_python_helper_pause_run_stop, kill_started),
        cmocka_unit_test_teardown(test_closed_channel_stops_a_paused_worker, kill_started),
        cmocka_unit_test_teardown(test_wrapper_pause_run_stop, kill_started),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
