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
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "kace/progress.h"
#include "kace/runner.h" /* KACE_CONTROL_FD_ENV */

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
            "Exit status: COMMAND's, or the signal that ended COMMAND ends this process too; 127 COMMAND\n"
            "could not be run, 1 kace could not run it, 2 usage; --check: 0, or 1 when a line was an error\n"
            "or no line counted.\n");
}

typedef struct counting {
    int progress_fd; /* -1: not reporting (--check, kace went away, or SIGTERM came) */
    /* The control channel ($KACE_CONTROL_FD; -1: none): kace's run / pause / stop,
     * answered at COMMAND's next counted line, its step boundary. */
    int control_fd;
    pid_t command;
    char control_line[32];
    size_t control_len;
    char want;   /* at the next counted line: 'p' pause, 's' stop, 0 nothing */
    bool paused; /* COMMAND is stopped (SIGSTOP) until run or stop */
    bool ended;  /* COMMAND ended while it was being paused: its status is end_status */
    int end_status;
    FILE *records;   /* --check: the records are printed here */
    long errors;
    long counted;
    double total;
} counting;

static volatile sig_atomic_t term_signals;
static int progress_fd_of(const char *text);

static void on_term(int sig)
{
    (void)sig;
    term_signals++;
}

/* SIGINT, SIGHUP, SIGQUIT: COMMAND's to act on (Ctrl-C reaches it through the
 * process group); this process only waits for COMMAND to finish its cleanup.
 * COMMAND gets the actions this process was given (exec_command). */
static void on_group_signal(int sig)
{
    (void)sig;
}

static int64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* One answer to kace on the control channel (errors ignored: kace may have gone). */
static void control_answer(counting *c, const char *line)
{
    if (c->control_fd < 0)
        return;
    ssize_t w;
    do
        w = write(c->control_fd, line, strlen(line));
    while (w < 0 && errno == EINTR);
}

/* Stop now: COMMAND gets SIGTERM (and SIGCONT, should it be paused); no record after it. */
static void control_stop(counting *c)
{
    control_answer(c, "stopping\n");
    c->progress_fd = -1;
    c->want = 0;
    if (c->command > 0) {
        kill(c->command, SIGTERM);
        if (c->paused)
            kill(c->command, SIGCONT);
    }
    c->paused = false;
}

/* Reads kace's messages. A pause or stop waits for COMMAND's next counted line;
 * run and stop act at once on a paused COMMAND. A closed channel is a stop. */
static void control_read(counting *c)
{
    while (c->control_fd >= 0) {
        char buf[64];
        ssize_t n = read(c->control_fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            close(c->control_fd);
            c->control_fd = -1;
            if (c->paused)
                control_stop(c);
            else
                c->want = 's';
            return;
        }
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] != '\n') {
                if (c->control_len + 1 < sizeof c->control_line)
                    c->control_line[c->control_len++] = buf[i];
                continue;
            }
            c->control_line[c->control_len] = '\0';
            c->control_len = 0;
            if (strcmp(c->control_line, "stop") == 0) {
                if (c->paused)
                    control_stop(c);
                else
                    c->want = 's';
            } else if (strcmp(c->control_line, "pause") == 0) {
                if (c->paused)
                    control_answer(c, "paused\n");
                else if (c->want != 's')
                    c->want = 'p';
            } else if (strcmp(c->control_line, "run") == 0) {
                if (c->paused) {
                    kill(c->command, SIGCONT);
                    c->paused = false;
                    control_answer(c, "running\n");
                } else if (c->want == 'p') {
                    c->want = 0;
                }
            }
        }
    }
}

static bool term_pending(void)
{
    sigset_t pending;
    return sigpending(&pending) == 0 && sigismember(&pending, SIGTERM);
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
    /* What kace asked before this line: a stop ends COMMAND here, with no record after
     * it, since COMMAND cannot stop at a step boundary by itself (kace then reads its
     * ending as mid-step, as after a SIGTERM). */
    control_read(c);
    if (c->want == 's') {
        control_stop(c);
        return;
    }
    /* Stamped first, then the signal looked at: a record is written only when
     * kace's SIGTERM came after its time (SIGTERM is blocked here, so it waits
     * as pending), as the progress protocol's stop rule asks. */
    int64_t now = monotonic_ns();
    if (term_signals > 0 || term_pending()) {
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
    /* At this step boundary COMMAND pauses (SIGSTOP) until run (SIGCONT) or stop;
     * "paused" is said once it has stopped (waitpid sees it). */
    if (c->want == 'p' && c->command > 0 && kill(c->command, SIGSTOP) == 0) {
        c->want = 0;
        int ws;
        pid_t got;
        do
            got = waitpid(c->command, &ws, WUNTRACED);
        while (got < 0 && errno == EINTR);
        if (got == c->command && WIFSTOPPED(ws)) {
            c->paused = true;
            control_answer(c, "paused\n");
        } else if (got == c->command) {
            c->ended = true; /* it ended first: the run loop takes its status from here */
            c->end_status = ws;
        }
    }
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

/* The signal actions this process was given, and changes for itself. */
static const int kept_signals[] = {SIGTERM, SIGPIPE, SIGCHLD, SIGINT, SIGHUP, SIGQUIT};
#define N_KEPT (sizeof kept_signals / sizeof *kept_signals)

/* In the child, before exec: COMMAND dies with this process (kace's SIGKILL
 * reaches a COMMAND that left the process group through it), and gets the
 * signal actions and mask this process was given. */
static void exec_command(char **argv, int out, int err, pid_t parent, const sigset_t *mask,
                         const struct sigaction given[N_KEPT])
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    for (size_t i = 0; i < N_KEPT; i++)
        sigaction(kept_signals[i], &given[i], NULL);
    sigprocmask(SIG_SETMASK, mask, NULL);
    if (dup2(out, 1) < 0 || dup2(err, 2) < 0)
        _exit(127);
    unsetenv(KACE_PROGRESS_FD_ENV);
    unsetenv(KACE_CONTROL_FD_ENV); /* the channel is this process's: it does not speak it */
    setenv("PYTHONUNBUFFERED", "1", 0);
    execvp(argv[0], argv);
    dprintf(2, "kace progress-from-output: %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* A pipe end moved to 3 or above: with stdin, stdout or stderr closed, pipe2()
 * hands out 0-2, and a pipe end on 1 would be read and written at once. */
static int above_stdio(int fd)
{
    if (fd < 0 || fd > 2)
        return fd;
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    close(fd);
    return moved;
}

/* One of COMMAND's output streams on its way through. */
typedef struct passage {
    int from;               /* COMMAND's end of the pipe; -1 once closed */
    int to;                 /* where the bytes go on: 1 or 2 */
    char buf[16384];        /* read, counted, not yet passed on */
    size_t off, len;
    size_t owed;            /* bytes in the pipe when COMMAND ended: read whatever the wait */
    kace_line_stream *lines;
} passage;

static void close_passage(passage *p)
{
    if (p->from >= 0)
        close(p->from);
    p->from = -1;
}

/* Runs COMMAND and passes its output on. The only place this process waits is
 * ppoll(), with SIGTERM let in there: a SIGTERM goes on to COMMAND at once
 * even while a reader of our output is slow (the bytes then wait here, and
 * COMMAND's pipe fills, as it would without us), and each line is counted
 * and stamped when it is read from COMMAND, not when it could be passed on. */
static int run_counting(kace_ctx *ctx, kace_line_counter *counter, counting *c, char **argv)
{
    passage *ps = calloc(2, sizeof *ps);
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    if (!ps || kace_line_stream_new(ctx, "stdout", &ps[0].lines) || kace_line_stream_new(ctx, "stderr", &ps[1].lines)) {
        if (ps)
            kace_line_stream_free(&ps[0].lines);
        free(ps);
        fprintf(stderr, "kace progress-from-output: out of memory\n");
        return EXIT_FAILURE_RUN;
    }
    int rc = EXIT_FAILURE_RUN;
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
        fprintf(stderr, "kace: pipe: %s\n", strerror(errno));
        goto done;
    }
    for (int i = 0; i < 2; i++) {
        out[i] = above_stdio(out[i]);
        err[i] = above_stdio(err[i]);
        if (out[i] < 0 || err[i] < 0) {
            fprintf(stderr, "kace: fcntl: %s\n", strerror(errno));
            goto done;
        }
    }
    fcntl(c->progress_fd, F_SETFD, FD_CLOEXEC); /* COMMAND does not inherit kace's pipe */
    if (c->control_fd >= 0) { /* nor the control channel, which this process answers */
        fcntl(c->control_fd, F_SETFD, FD_CLOEXEC);
        fcntl(c->control_fd, F_SETFL, O_NONBLOCK);
        control_answer(c, "hello 1\n");
    }
    /* Kept to give COMMAND as they came. Here: SIGPIPE ignored (a reader that
     * went away is a write error, passed on below); SIGCHLD at its default, or
     * waitpid() would never see COMMAND end; SIGTERM counted; the group's
     * signals waited out (on_group_signal), unless they came ignored. */
    struct sigaction given[N_KEPT];
    for (size_t i = 0; i < N_KEPT; i++) {
        struct sigaction mine = {.sa_handler = SIG_DFL};
        sigemptyset(&mine.sa_mask);
        switch (kept_signals[i]) {
        case SIGTERM: mine.sa_handler = on_term; break;
        case SIGPIPE: mine.sa_handler = SIG_IGN; break;
        case SIGCHLD: break;
        default: mine.sa_handler = on_group_signal; break;
        }
        sigaction(kept_signals[i], NULL, &given[i]);
        if (mine.sa_handler == on_group_signal && given[i].sa_handler == SIG_IGN)
            continue;
        sigaction(kept_signals[i], &mine, NULL);
    }
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
        goto done;
    }
    if (pid == 0)
        exec_command(argv, out[1], err[1], parent, &child_mask, given);
    c->command = pid;
    close(out[1]);
    close(err[1]);
    out[1] = err[1] = -1;
    ps[0].from = out[0], ps[0].to = 1;
    ps[1].from = err[0], ps[1].to = 2;
    out[0] = err[0] = -1;

    int status = 0;
    bool reaped = false, status_known = true, passed_on = false;
    int64_t reaped_ns = 0;
    for (;;) {
        if (!reaped) {
            pid_t w = c->ended ? pid : waitpid(pid, &status, WNOHANG);
            if (c->ended)
                status = c->end_status;
            if (w == pid || (w < 0 && errno == ECHILD)) {
                reaped = true;
                status_known = w == pid;
                reaped_ns = monotonic_ns();
                for (int i = 0; i < 2; i++) { /* what COMMAND wrote is read, however slow our reader */
                    int n = 0;
                    if (ps[i].from >= 0 && ioctl(ps[i].from, FIONREAD, &n) == 0 && n > 0)
                        ps[i].owed = (size_t)n;
                }
            }
        }
        if (term_signals > 0 && !passed_on) {
            /* The first SIGTERM only: later ones are kace's to the group, which reach COMMAND themselves. */
            c->progress_fd = -1;
            if (!reaped) {
                kill(pid, SIGTERM);
                if (c->paused)
                    kill(pid, SIGCONT);
            }
            passed_on = true;
        }
        bool busy = false, open = false;
        struct pollfd pfd[3];
        for (int i = 0; i < 2; i++) {
            busy |= ps[i].len > 0 || ps[i].owed > 0;
            open |= ps[i].from >= 0;
            if (ps[i].len > 0)
                pfd[i] = (struct pollfd){.fd = ps[i].to, .events = POLLOUT};
            else
                pfd[i] = (struct pollfd){.fd = ps[i].from, .events = POLLIN}; /* -1: left out */
        }
        if (reaped && !busy && (!open || monotonic_ns() - reaped_ns > 5000000000LL))
            break; /* all passed on, or helpers of COMMAND's that keep writing to its output */
        pfd[2] = (struct pollfd){.fd = reaped ? -1 : c->control_fd, .events = POLLIN};
        struct timespec tick = {0, 100000000L};
        int ready = ppoll(pfd, 3, &tick, &waiting);
        if (ready > 0 && pfd[2].revents) {
            control_read(c); /* run or stop for a paused COMMAND; the rest waits for a line */
            ready--;
        }
        if (ready < 0 && errno != EINTR) {
            fprintf(stderr, "kace progress-from-output: ppoll: %s\n", strerror(errno));
            break;
        }
        if (ready == 0 && reaped && (!busy || term_signals > 0))
            break; /* COMMAND has gone and nothing more came (helpers hold the pipes, idle), or
                      a SIGTERM came while our reader takes nothing */
        for (int i = 0; i < 2 && ready > 0; i++) {
            passage *p = &ps[i];
            if (!pfd[i].revents)
                continue;
            if (p->len > 0) {
                /* Writable: a pipe takes PIPE_BUF bytes without blocking. */
                size_t n = p->len - p->off < 4096 ? p->len - p->off : 4096;
                /* SIGTERM let in: a terminal or socket may take fewer bytes than
                 * POLLOUT promised, and the write then waits. */
                sigprocmask(SIG_SETMASK, &waiting, NULL);
                ssize_t w = write(p->to, p->buf + p->off, n);
                sigprocmask(SIG_BLOCK, &term, NULL);
                if (w < 0 && (errno == EINTR || errno == EAGAIN))
                    continue;
                if (w <= 0) {
                    /* Our reader went away: COMMAND's next write to this stream fails as it would. */
                    p->off = p->len = p->owed = 0;
                    close_passage(p);
                    continue;
                }
                p->off += (size_t)w;
                if (p->off == p->len)
                    p->off = p->len = 0;
                continue;
            }
            ssize_t n = read(p->from, p->buf, sizeof p->buf);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                p->owed = 0;
                close_passage(p);
                continue;
            }
            kace_line_stream_take(ctx, p->lines, counter, p->buf, (size_t)n, on_line, c);
            p->owed = p->owed > (size_t)n ? p->owed - (size_t)n : 0;
            p->off = 0;
            p->len = (size_t)n;
        }
    }
    sigprocmask(SIG_SETMASK, &waiting, NULL);
    while (!reaped) { /* the loop broke on an error: COMMAND still ends before we do */
        if (c->ended) {
            status = c->end_status;
            reaped = status_known = true;
            break;
        }
        if (c->paused) { /* no one is left to say run */
            kill(pid, SIGCONT);
            c->paused = false;
        }
        if (term_signals > 0 && !passed_on) {
            kill(pid, SIGTERM);
            passed_on = true;
        }
        pid_t w = waitpid(pid, &status, 0); /* a SIGTERM interrupts it (no SA_RESTART) */
        if (w == pid || (w < 0 && errno != EINTR)) {
            reaped = true;
            status_known = w == pid;
        }
    }
    if (!status_known)
        fprintf(stderr, "kace progress-from-output: COMMAND's exit status was lost (SIGCHLD ignored?)\n");
    rc = status_known ? end_like(status) : EXIT_FAILURE_RUN;
done:
    for (int i = 0; i < 2; i++) {
        close_passage(&ps[i]);
        kace_line_stream_free(&ps[i].lines);
        if (out[i] >= 0)
            close(out[i]);
        if (err[i] >= 0)
            close(err[i]);
    }
    free(ps);
    return rc;
}

/* $KACE_PROGRESS_FD: digits, 3 or more (0-2 are COMMAND's stdin, stdout and stderr). */
static int progress_fd_of(const char *text)
{
    size_t n = strlen(text);
    if (n == 0 || n > 7 || strspn(text, "0123456789") != n)
        return -1;
    int fd = atoi(text);
    return fd >= 3 ? fd : -1;
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
    int fd = fd_text ? progress_fd_of(fd_text) : -1;
    if (!check && fd_text && fd < 0)
        return cli_usage("progress-from-output", "%s='%.40s' is not a file descriptor's number (3 or more)",
                         KACE_PROGRESS_FD_ENV, fd_text);
    kace_ctx *ctx = cli_ctx_new();
    kace_line_counter *counter = NULL;
    kace_status st = kace_line_counter_new(ctx, pattern, (int)group, samples, &counter);
    if (st) {
        fprintf(stderr, "kace progress-from-output: --match: %s\n", kace_errmsg(ctx));
        kace_ctx_free(&ctx);
        return EXIT_USAGE;
    }
    counting c = {.progress_fd = -1, .control_fd = -1};
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
        c.progress_fd = fd;
        const char *control = getenv(KACE_CONTROL_FD_ENV);
        c.control_fd = control ? progress_fd_of(control) : -1;
        rc = run_counting(ctx, counter, &c, argv + optind);
    }
    kace_line_counter_free(&counter);
    kace_ctx_free(&ctx);
    return rc;
}
