/* kace progress-from-output --match ERE [--samples N] [--group G] -- COMMAND...
 *
 * Lets kace profile and measure a command that does not speak the progress
 * protocol (docs/progress-protocol.md), unchanged: it runs COMMAND with its
 * stdout and stderr on pipes, passes every byte on, and writes a record to
 * $KACE_PROGRESS_FD for each output line that the pattern counts
 * (kace_line_counter, kace_line_stream).
 *
 * COMMAND cannot be stopped at a step boundary from outside, so the first
 * SIGTERM goes on to COMMAND at once and ends the reporting: kace reads every
 * ending after its SIGTERM as mid-step (under MPS the next run gets a fresh
 * daemon), and this process ends as COMMAND did. Without $KACE_PROGRESS_FD
 * (not run by kace) COMMAND simply runs. --check FILE reads a saved log
 * instead and prints what would be recorded, to try a pattern before a run. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "kace/progress.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kace progress-from-output --match ERE [--samples N] [--group G] -- COMMAND [ARG...]\n"
            "       kace progress-from-output --match ERE [--samples N] [--group G] --check LOGFILE\n"
            "Runs COMMAND, which does not report progress to kace itself, and reports it from COMMAND's\n"
            "output: each stdout or stderr line (ended by \\n, \\r or \\r\\n; its first 4096 bytes, up to a\n"
            "NUL byte) that matches ERE, a POSIX extended regular expression, counts. Without a group each\n"
            "match adds N samples (default 1); with one, group 1 (or G) is a cumulative count (a step\n"
            "number) and the total is that count times N; a count that goes down (a new epoch's progress\n"
            "bar) starts again, keeping what came before. Output is passed on unchanged.\n"
            "Run by kace ($KACE_PROGRESS_FD set), Python is run unbuffered (PYTHONUNBUFFERED=1); a C\n"
            "program that prints through stdio needs `stdbuf -oL` in front of it. The first SIGTERM goes\n"
            "on to COMMAND at once and ends the reporting (kace reads the ending as mid-step); this\n"
            "process ends as COMMAND did. Not run by kace, COMMAND runs with nothing counted.\n"
            "Examples:\n"
            "  kace profile --name mymodel_batch16-train -- kace progress-from-output \\\n"
            "      --match '([0-9]+)/[0-9]+ \\[' --samples 16 -- python3 train.py   # tqdm's bar, 16 a step\n"
            "  kace progress-from-output --match '^(step|iter) ([0-9]+)' --group 2 --samples 16 --check train.log\n"
            "Options:\n"
            "  --match ERE      the lines that count (required)\n"
            "  --samples N      samples per match or per unit of the count (default 1, > 0)\n"
            "  --group G        the group holding the count (default 1 where ERE has a group); 0: none,\n"
            "                   each match adds N (POSIX ERE has no non-capturing groups)\n"
            "  --check LOGFILE  read LOGFILE ('-': stdin) and print the records and a summary\n"
            "Exit status: COMMAND's (128 + its signal's number if one ended it), 2 usage;\n"
            "--check: 0, or 1 when a line was an error or no line counted.\n");
}

typedef struct counting {
    int progress_fd; /* -1: not reporting (--check, kace went away, or SIGTERM came) */
    FILE *records;   /* --check: the records are printed here */
    long errors;
    long counted;
    double total;
} counting;

static volatile sig_atomic_t term_signals;

static void on_term(int sig)
{
    (void)sig;
    term_signals++;
}

static int64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static bool term_pending(void)
{
    sigset_t pending;
    return sigpending(&pending) == 0 && sigismember(&pending, SIGTERM);
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* a closed reader: the bytes are dropped, COMMAND goes on */
        p += w;
        n -= (size_t)w;
    }
}

/* A line that counted or failed (kace_line_report_fn). The first 5 errors are printed. */
static void on_line(void *arg, kace_ctx *ctx, kace_status st, double total)
{
    counting *c = arg;
    if (st) {
        if (++c->errors <= 5)
            fprintf(stderr, "kace progress-from-output: %s%s\n", kace_errmsg(ctx),
                    c->errors == 5 ? " (later errors are counted, not printed)" : "");
        return;
    }
    c->counted++;
    c->total = total;
    if (c->records) {
        fprintf(c->records, "done %.17g\n", total);
        return;
    }
    if (c->progress_fd < 0)
        return;
    /* Stamped first, then the signal looked at: a record is written only when
     * kace's SIGTERM came after its time (SIGTERM is blocked here, so it waits
     * as pending), as the progress protocol's stop rule asks. */
    int64_t now = monotonic_ns();
    if (term_pending()) {
        c->progress_fd = -1;
        return;
    }
    char rec[96];
    int n = snprintf(rec, sizeof rec, "done %.17g %lld\n", total, (long long)now);
    ssize_t w;
    do
        w = write(c->progress_fd, rec, (size_t)n);
    while (w < 0 && errno == EINTR);
    if (w != n)
        c->progress_fd = -1; /* kace closed its end: nothing more to report */
}

static int check_log(kace_ctx *ctx, kace_line_counter *counter, counting *c, const char *path)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "kace: %s: %s\n", path, strerror(errno));
        return EXIT_FAILURE_RUN;
    }
    kace_line_stream *s = NULL;
    if (kace_line_stream_new(ctx, path, &s)) {
        if (f != stdin)
            fclose(f);
        return cli_error(ctx, KACE_ERR_NOMEM);
    }
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        kace_line_stream_take(ctx, s, counter, buf, n, on_line, c);
    bool read_error = ferror(f);
    if (f != stdin)
        fclose(f);
    long lines = kace_line_stream_lines(s);
    bool unended = kace_line_stream_pending(s) > 0;
    kace_line_stream_free(&s);
    if (read_error) {
        fprintf(stderr, "kace: %s: read error\n", path);
        return EXIT_FAILURE_RUN;
    }
    printf("# %ld lines, %ld counted, %ld errors; %.17g samples in all%s\n", lines, c->counted, c->errors, c->total,
           unended ? " (a last line without an end is not counted)" : "");
    if (c->counted == 0 && c->errors == 0)
        fprintf(stderr, "kace progress-from-output: no line of %s matched the pattern\n", path);
    return c->errors > 0 || c->counted == 0 ? EXIT_FAILURE_RUN : EXIT_OK;
}

/* Ends this process the way COMMAND ended. */
static int end_like(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core); /* COMMAND's core dump is the one that matters */
        signal(sig, SIG_DFL);
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, sig);
        sigprocmask(SIG_UNBLOCK, &set, NULL);
        raise(sig);
        return 128 + sig;
    }
    return EXIT_FAILURE_RUN;
}

/* In the child, before exec: COMMAND dies with this process (kace's SIGKILL
 * reaches a COMMAND that left the process group through it). */
static void exec_command(char **argv, int out, int err, pid_t parent, const sigset_t *mask)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, mask, NULL);
    if (dup2(out, 1) < 0 || dup2(err, 2) < 0)
        _exit(127);
    unsetenv(KACE_PROGRESS_FD_ENV);
    setenv("PYTHONUNBUFFERED", "1", 0);
    execvp(argv[0], argv);
    dprintf(2, "kace progress-from-output: %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

static int run_counting(kace_ctx *ctx, kace_line_counter *counter, counting *c, char **argv)
{
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0) {
        fprintf(stderr, "kace: pipe: %s\n", strerror(errno));
        return EXIT_FAILURE_RUN;
    }
    if (pipe2(err, O_CLOEXEC) != 0) {
        fprintf(stderr, "kace: pipe: %s\n", strerror(errno));
        close(out[0]);
        close(out[1]);
        return EXIT_FAILURE_RUN;
    }
    kace_line_stream *s[2] = {NULL, NULL};
    if (kace_line_stream_new(ctx, "stdout", &s[0]) || kace_line_stream_new(ctx, "stderr", &s[1])) {
        kace_line_stream_free(&s[0]);
        return cli_error(ctx, KACE_ERR_NOMEM);
    }
    fcntl(c->progress_fd, F_SETFD, FD_CLOEXEC); /* COMMAND does not inherit kace's pipe */
    signal(SIGPIPE, SIG_IGN);
    /* SIGTERM stays blocked but inside ppoll(): a signal is then seen at once,
     * never between a check and a wait, and one that reaches the child before
     * its handler is reset stays pending and ends it. */
    struct sigaction sa = {.sa_handler = on_term};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigset_t term, waiting;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigprocmask(SIG_BLOCK, &term, &waiting);
    sigset_t child_mask = waiting;
    sigdelset(&waiting, SIGTERM);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "kace: fork: %s\n", strerror(errno));
        return EXIT_FAILURE_RUN;
    }
    if (pid == 0)
        exec_command(argv, out[1], err[1], parent, &child_mask);
    close(out[1]);
    close(err[1]);
    int from[2] = {out[0], err[0]};
    int to[2] = {1, 2};
    int open_streams = 2;
    int status = 0;
    bool reaped = false, passed_on = false;
    int64_t reaped_ns = 0;
    for (;;) {
        if (!reaped && waitpid(pid, &status, WNOHANG) == pid) {
            reaped = true; /* what it wrote is still read; helpers it left may hold the pipes */
            reaped_ns = monotonic_ns();
        }
        if (term_signals > 0 && !passed_on) {
            /* The first SIGTERM only: later ones are kace's to the group, which reach COMMAND themselves. */
            c->progress_fd = -1;
            if (!reaped)
                kill(pid, SIGTERM);
            passed_on = true;
        }
        if (reaped && (open_streams == 0 || monotonic_ns() - reaped_ns > 5000000000LL))
            break; /* all read, or helpers that keep writing to COMMAND's output */
        struct pollfd pfd[2];
        for (int i = 0; i < 2; i++)
            pfd[i] = (struct pollfd){.fd = from[i], .events = POLLIN};
        struct timespec tick = {0, 100000000L};
        int ready = ppoll(pfd, 2, &tick, &waiting);
        if (ready < 0 && errno != EINTR)
            break;
        if (ready == 0 && reaped)
            break; /* COMMAND has gone and nothing more came: helpers hold the pipes, idle */
        for (int i = 0; i < 2 && ready > 0; i++) {
            if (from[i] < 0 || !(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char buf[16384];
            ssize_t n = read(from[i], buf, sizeof buf);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                close(from[i]);
                from[i] = -1;
                open_streams--;
                continue;
            }
            write_all(to[i], buf, (size_t)n);
            kace_line_stream_take(ctx, s[i], counter, buf, (size_t)n, on_line, c);
        }
    }
    for (int i = 0; i < 2; i++) {
        if (from[i] >= 0)
            close(from[i]);
        kace_line_stream_free(&s[i]);
    }
    return end_like(status);
}

int cmd_progress_output(int argc, char **argv)
{
    const char *pattern = NULL, *check = NULL;
    double samples = 1, group = -1;
    static const struct option longopts[] = {{"match", required_argument, 0, 'm'},
                                             {"samples", required_argument, 0, 's'},
                                             {"group", required_argument, 0, 'g'},
                                             {"check", required_argument, 0, 'c'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "+m:s:g:c:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'm': pattern = optarg; break;
        case 's':
            if (!cli_number("progress-from-output", "samples", optarg, 1e-9, KACE_PROGRESS_MAX_SAMPLES, &samples))
                return EXIT_USAGE;
            break;
        case 'g':
            if (!cli_number("progress-from-output", "group", optarg, 0, 9, &group))
                return EXIT_USAGE;
            if (group != (int)group)
                return cli_usage("progress-from-output", "--group %s: expected a whole number", optarg);
            break;
        case 'c': check = optarg; break;
        case 'h': usage(stdout); return EXIT_OK;
        default: return cli_usage("progress-from-output", "unknown option");
        }
    }
    if (!pattern)
        return cli_usage("progress-from-output", "--match ERE is required");
    if (check ? optind != argc : optind >= argc)
        return cli_usage("progress-from-output", check ? "--check takes no command" : "give the command after --");
    const char *fd_text = getenv(KACE_PROGRESS_FD_ENV);
    double fd = -1;
    if (!check && fd_text && !cli_parse_number(fd_text, 0, 1000000, true, &fd))
        return cli_usage("progress-from-output", "%s='%.40s' is not a file descriptor's number", KACE_PROGRESS_FD_ENV,
                         fd_text);
    kace_ctx *ctx = cli_ctx_new();
    kace_line_counter *counter = NULL;
    kace_status st = kace_line_counter_new(ctx, pattern, (int)group, samples, &counter);
    if (st) {
        fprintf(stderr, "kace progress-from-output: --match: %s\n", kace_errmsg(ctx));
        kace_ctx_free(&ctx);
        return EXIT_USAGE;
    }
    counting c = {.progress_fd = -1};
    int rc;
    if (check) {
        c.records = stdout;
        rc = check_log(ctx, counter, &c, check);
    } else if (!fd_text) {
        /* Not run by kace: nothing to report to. */
        kace_line_counter_free(&counter);
        kace_ctx_free(&ctx);
        execvp(argv[optind], argv + optind);
        fprintf(stderr, "kace progress-from-output: %s: %s\n", argv[optind], strerror(errno));
        return 127;
    } else {
        c.progress_fd = (int)fd;
        rc = run_counting(ctx, counter, &c, argv + optind);
    }
    kace_line_counter_free(&counter);
    kace_ctx_free(&ctx);
    return rc;
}
