/* kace progress-from-output --match ERE [--samples N] -- COMMAND...
 *
 * Lets kace profile and measure a command that does not speak the progress
 * protocol (docs/progress-protocol.md), unchanged: it runs COMMAND with its
 * stdout and stderr on pipes, passes every byte on, and writes a record to
 * $KACE_PROGRESS_FD for each output line that the pattern counts
 * (kace_line_counter). A line ends at \n or \r, so a progress bar that
 * redraws itself (tqdm) counts at each redraw.
 *
 * SIGTERM is passed on to COMMAND at once, and this process ends as COMMAND
 * did: COMMAND cannot be stopped at a step boundary from outside, so kace
 * reads a signal's ending as what it is (mid-step, and under MPS the next run
 * gets a fresh daemon). Without $KACE_PROGRESS_FD (not run by kace) COMMAND
 * simply runs. --check FILE reads a saved log instead and prints what would
 * be recorded, to try a pattern before a run. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "kace/progress.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kace progress-from-output --match ERE [--samples N] -- COMMAND [ARG...]\n"
            "       kace progress-from-output --match ERE [--samples N] --check LOGFILE\n"
            "Runs COMMAND, which does not report progress to kace itself, and reports it from COMMAND's\n"
            "output: each stdout or stderr line (ended by \\n or \\r) that matches ERE, a POSIX extended\n"
            "regular expression, counts. Without a group each match adds N samples (default 1); with\n"
            "one, group 1 is a cumulative count (a step number) and the total is that count times N;\n"
            "a count that goes down (a new epoch's progress bar) starts again, keeping what came before.\n"
            "Output is passed on unchanged. Python is run unbuffered (PYTHONUNBUFFERED=1); a C\n"
            "program that prints through stdio needs `stdbuf -oL` in front of it.\n"
            "SIGTERM goes on to COMMAND at once and kace-progress-from-output ends as COMMAND did.\n"
            "Without $KACE_PROGRESS_FD (not run by kace), COMMAND runs with nothing counted.\n"
            "Examples:\n"
            "  kace profile --name mymodel_batch16-train -- kace progress-from-output \\\n"
            "      --match '([0-9]+)/[0-9]+ \\[' --samples 16 -- python3 train.py   # tqdm's bar, 16 a step\n"
            "  kace progress-from-output --match '^step [0-9]+' --samples 16 --check train.log\n"
            "Options:\n"
            "  --match ERE      the lines that count (required)\n"
            "  --samples N      samples per match or per unit of group 1 (default 1, > 0)\n"
            "  --check LOGFILE  read LOGFILE ('-': stdin) and print the records and a summary\n"
            "Exit status: COMMAND's (128 + its signal's number if one ended it), 2 usage;\n"
            "--check: 0, or 1 when a line was an error or no line counted.\n");
}

/* One output stream of COMMAND: its pipe, where it goes on to, and the line being assembled. */
typedef struct stream {
    int from, to;
    const char *name;
    char line[KACE_LINE_COUNTER_MAX_LINE];
    size_t len;
    bool after_cr; /* the last byte ended a line with \r: a \n right after it ends no other line */
    long lines;
} stream;

typedef struct counting {
    kace_ctx *ctx;
    kace_line_counter *counter;
    int progress_fd; /* -1: nothing to report to (kace went away, or --check) */
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

/* A finished line: counted, and reported or printed. The first 5 errors are printed. */
static void count_line(counting *c, const char *line, size_t len, FILE *records)
{
    bool counted;
    double total;
    kace_status st = kace_line_counter_feed(c->ctx, c->counter, line, len, &counted, &total);
    if (st) {
        if (++c->errors <= 5)
            fprintf(stderr, "kace progress-from-output: %s%s\n", kace_errmsg(c->ctx),
                    c->errors == 5 ? " (later errors are counted, not printed)" : "");
        return;
    }
    if (!counted)
        return;
    c->counted++;
    c->total = total;
    if (records) {
        fprintf(records, "done %.17g\n", total);
    } else if (c->progress_fd >= 0) {
        char rec[96];
        int n = snprintf(rec, sizeof rec, "done %.17g %lld\n", total, (long long)monotonic_ns());
        ssize_t w;
        do
            w = write(c->progress_fd, rec, (size_t)n);
        while (w < 0 && errno == EINTR);
        if (w != n)
            c->progress_fd = -1; /* kace closed its end: nothing more to report */
    }
}

/* Splits bytes into lines ended by \n, \r or \r\n (a line longer than the
 * buffer is matched on its start). */
static void take(counting *c, stream *s, const char *p, size_t n, FILE *records)
{
    for (size_t i = 0; i < n; i++) {
        bool cr_lf = p[i] == '\n' && s->after_cr;
        s->after_cr = p[i] == '\r';
        if (cr_lf)
            continue;
        if (p[i] == '\n' || p[i] == '\r') {
            s->lines++;
            count_line(c, s->line, s->len, records);
            s->len = 0;
        } else if (s->len < sizeof s->line) {
            s->line[s->len++] = p[i];
        }
    }
}

static int check_log(counting *c, const char *path)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "kace: %s: %s\n", path, strerror(errno));
        return EXIT_FAILURE_RUN;
    }
    stream s = {.name = path};
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        take(c, &s, buf, n, stdout);
    bool read_error = ferror(f);
    if (f != stdin)
        fclose(f);
    if (read_error) {
        fprintf(stderr, "kace: %s: read error\n", path);
        return EXIT_FAILURE_RUN;
    }
    printf("# %ld lines, %ld counted, %ld errors; %.17g samples in all%s\n", s.lines, c->counted, c->errors, c->total,
           s.len > 0 ? " (a last line without an end is not counted)" : "");
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

static int run_counting(counting *c, char **argv)
{
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
        fprintf(stderr, "kace: pipe: %s\n", strerror(errno));
        return EXIT_FAILURE_RUN;
    }
    fcntl(c->progress_fd, F_SETFD, FD_CLOEXEC); /* COMMAND does not inherit kace's pipe */
    struct sigaction sa = {.sa_handler = on_term};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* SIGTERM is held across fork(): one that reaches the child before its
     * handler is reset stays pending and ends it, and the parent's comes
     * after fork() returns, to be passed on. */
    sigset_t term, old_mask;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigprocmask(SIG_BLOCK, &term, &old_mask);
    pid_t pid = fork();
    if (pid < 0) {
        sigprocmask(SIG_SETMASK, &old_mask, NULL);
        fprintf(stderr, "kace: fork: %s\n", strerror(errno));
        return EXIT_FAILURE_RUN;
    }
    if (pid == 0) {
        signal(SIGTERM, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        sigprocmask(SIG_SETMASK, &old_mask, NULL);
        if (dup2(out[1], 1) < 0 || dup2(err[1], 2) < 0)
            _exit(127);
        unsetenv(KACE_PROGRESS_FD_ENV);
        setenv("PYTHONUNBUFFERED", "1", 0);
        execvp(argv[0], argv);
        dprintf(2, "kace progress-from-output: %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    sigprocmask(SIG_SETMASK, &old_mask, NULL);
    close(out[1]);
    close(err[1]);
    stream s[2] = {{.from = out[0], .to = 1, .name = "stdout"}, {.from = err[0], .to = 2, .name = "stderr"}};
    int open_streams = 2;
    sig_atomic_t passed_on = 0;
    int status = 0;
    bool reaped = false;
    int64_t give_up_ns = 0;
    while (open_streams > 0) {
        if (!reaped && waitpid(pid, &status, WNOHANG) == pid) {
            reaped = true; /* what it wrote is still read; helpers it left may hold the pipes */
            give_up_ns = monotonic_ns() + 1000000000LL;
        }
        if (reaped && monotonic_ns() > give_up_ns)
            break;
        while (!reaped && passed_on < term_signals) { /* each SIGTERM goes on to COMMAND */
            kill(pid, SIGTERM);
            passed_on++;
        }
        struct pollfd pfd[2];
        for (int i = 0; i < 2; i++)
            pfd[i] = (struct pollfd){.fd = s[i].from, .events = POLLIN};
        if (poll(pfd, 2, reaped ? 100 : 200) < 0 && errno != EINTR)
            break;
        for (int i = 0; i < 2; i++) {
            if (s[i].from < 0 || !(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char buf[16384];
            ssize_t n = read(s[i].from, buf, sizeof buf);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                close(s[i].from);
                s[i].from = -1;
                open_streams--;
                continue;
            }
            write_all(s[i].to, buf, (size_t)n);
            take(c, &s[i], buf, (size_t)n, NULL);
        }
    }
    for (int i = 0; i < 2; i++)
        if (s[i].from >= 0)
            close(s[i].from);
    while (!reaped && waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            fprintf(stderr, "kace: waitpid: %s\n", strerror(errno));
            return EXIT_FAILURE_RUN;
        }
        if (term_signals > passed_on) { /* COMMAND closed its output but runs on */
            kill(pid, SIGTERM);
            passed_on = term_signals;
        }
    }
    return end_like(status);
}

int cmd_progress_output(int argc, char **argv)
{
    const char *pattern = NULL, *check = NULL;
    double samples = 1;
    static const struct option longopts[] = {{"match", required_argument, 0, 'm'},
                                             {"samples", required_argument, 0, 's'},
                                             {"check", required_argument, 0, 'c'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "+m:s:c:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'm': pattern = optarg; break;
        case 's':
            if (!cli_number("progress-from-output", "samples", optarg, 1e-9, KACE_PROGRESS_MAX_SAMPLES, &samples))
                return EXIT_USAGE;
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
    kace_ctx *ctx = cli_ctx_new();
    if (!ctx)
        return EXIT_FAILURE_RUN;
    counting c = {.ctx = ctx, .progress_fd = -1};
    kace_status st = kace_line_counter_new(ctx, check ? check : "output", pattern, samples, &c.counter);
    if (st) {
        fprintf(stderr, "kace progress-from-output: --match: %s\n", kace_errmsg(ctx));
        kace_ctx_free(&ctx);
        return EXIT_USAGE;
    }
    int rc;
    const char *fd_text = getenv(KACE_PROGRESS_FD_ENV);
    double fd = -1;
    if (check) {
        rc = check_log(&c, check);
    } else if (!fd_text || !cli_parse_number(fd_text, 0, 1000000, true, &fd)) {
        /* Not run by kace: nothing to report to. */
        kace_line_counter_free(&c.counter);
        kace_ctx_free(&ctx);
        execvp(argv[optind], argv + optind);
        fprintf(stderr, "kace progress-from-output: %s: %s\n", argv[optind], strerror(errno));
        return 127;
    } else {
        c.progress_fd = (int)fd;
        rc = run_counting(&c, argv + optind);
    }
    kace_line_counter_free(&c.counter);
    kace_ctx_free(&ctx);
    return rc;
}
