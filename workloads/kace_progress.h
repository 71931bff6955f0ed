/* kace progress protocol, version 1 (docs/progress-protocol.md): header-only
 * helper for C and CUDA C workloads.
 *
 *   #include "kace_progress.h"
 *   ...
 *   kace_progress_report(samples_done_so_far);   // cumulative count
 *
 * Writes "done <samples> <CLOCK_MONOTONIC ns>\n" with one write(2) to the
 * descriptor named by $KACE_PROGRESS_FD; does nothing when the variable is
 * absent (the program was not started by kace) or invalid. Thread-safe: one
 * write per record, and pipe writes under 512 bytes are atomic. Write errors
 * are ignored; when kace has gone the write raises SIGPIPE, which ends the
 * workload as kace would have.
 *
 * Control channel: when kace also passes $KACE_CONTROL_FD (a socket), the
 * first report says "hello 1" on it, and every report reads kace's messages
 * before it stamps its record: "stop" ends the process with exit(0) after
 * the record, "pause" waits there (answering "paused") until "run"
 * ("running") or "stop" ("stopping"). Nothing is caught then: a message
 * waits in the socket until the next report, however late the program's
 * own set-up, and SIGTERM stays kace's fallback that ends the process.
 *
 * Stopping at a step boundary without the channel: the first report catches
 * SIGTERM (where the program left it at its default); kace's SIGTERM then
 * ends the process with exit(0) at the next report, after the step it is in
 * (report after synchronizing the step's GPU work). NVIDIA's MPS
 * documentation warns that a client ended with GPU work outstanding can
 * leave the MPS server and its other clients in an undefined state. The
 * flag is per translation unit: report from one. A process forked after
 * the first report gets SIGTERM back at its default (pthread_atfork; in
 * glibc's libc, no -pthread needed).
 */
#ifndef KACE_PROGRESS_CLIENT_H
#define KACE_PROGRESS_CLIENT_H

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

static volatile sig_atomic_t kace_progress_stopping;
static int kace_progress_control = -1; /* $KACE_CONTROL_FD, or -1 */

#ifdef __cplusplus
#define KACE_PROGRESS_THREAD_LOCAL thread_local
#else
#define KACE_PROGRESS_THREAD_LOCAL _Thread_local
#endif
/* The forking thread's signal mask before fork() (see kace_progress_before_fork). */
static KACE_PROGRESS_THREAD_LOCAL sigset_t kace_progress_fork_mask;

/* The next SIGTERM (kace sends a second one before SIGKILL) ends the
 * process at once: a workload that never reports again is not kept alive. */
static inline void kace_progress_on_term(int sig)
{
    (void)sig;
    kace_progress_stopping = 1;
    signal(SIGTERM, SIG_DFL); /* async-signal-safe */
}

/* A process forked after the handler is in (a helper that never reports)
 * gets SIGTERM back at its default: its parent's shutdown and kace's group
 * SIGTERM end it at once. SIGTERM is blocked across fork(), so one that
 * reaches the child before its handler is reset stays pending and ends it
 * then, instead of being caught by the inherited handler. */
static inline void kace_progress_before_fork(void)
{
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &term, &kace_progress_fork_mask);
}

static inline void kace_progress_parent_after_fork(void)
{
    pthread_sigmask(SIG_SETMASK, &kace_progress_fork_mask, NULL);
}

static inline void kace_progress_forked_child(void)
{
    struct sigaction old;
    kace_progress_stopping = 0;
    if (sigaction(SIGTERM, NULL, &old) == 0 && !(old.sa_flags & SA_SIGINFO) &&
        old.sa_handler == kace_progress_on_term)
        signal(SIGTERM, SIG_DFL);
    pthread_sigmask(SIG_SETMASK, &kace_progress_fork_mask, NULL);
}

/* A descriptor number from the environment variable name, or -1. */
static inline int kace_progress_env_fd(const char *name)
{
    const char *s = getenv(name);
    char *end = NULL;
    long v = s ? strtol(s, &end, 10) : -1;
    return (s && *s && end && *end == '\0' && v >= 0 && v < 1 << 20) ? (int)v : -1;
}

/* One answer on the control channel (errors ignored: kace may have gone). */
static inline void kace_progress_answer(const char *line)
{
    if (kace_progress_control >= 0) {
        ssize_t w = write(kace_progress_control, line, strlen(line));
        (void)w;
    }
}

/* kace's messages on the control channel: 'r' (run), 'p' (pause), 's' (stop;
 * also when kace closed the channel), or 0 for none yet. Reads what has come
 * (blocking: waits for the next message); a stop once read stays. */
static inline char kace_progress_read_control(int blocking)
{
    static char line[16];
    static size_t len;
    static char stop;
    char last = stop;
    while (kace_progress_control >= 0 && !stop) {
        struct pollfd pfd = {kace_progress_control, POLLIN, 0};
        int ready = poll(&pfd, 1, blocking && !last ? -1 : 0);
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready == 0)
            break; /* nothing more now */
        char c;
        ssize_t n = ready > 0 ? read(kace_progress_control, &c, 1) : -1;
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            stop = last = 's'; /* kace has gone or closed it: stop as asked */
            break;
        }
        if (c != '\n') {
            if (len + 1 < sizeof line)
                line[len++] = c;
            continue;
        }
        line[len] = '\0';
        len = 0;
        if (strcmp(line, "stop") == 0)
            stop = last = 's';
        else if (strcmp(line, "pause") == 0)
            last = 'p';
        else if (strcmp(line, "run") == 0)
            last = 'r';
        if (blocking && last)
            break;
    }
    return stop ? stop : last;
}

/* The descriptor from $KACE_PROGRESS_FD, or -1. Looked up once; when it is
 * there, the control channel says hello where there is one, and SIGTERM is
 * caught if it was at its default where there is none. */
static inline int kace_progress_fd(void)
{
    static int fd = -2;
    if (fd == -2) {
        fd = kace_progress_env_fd("KACE_PROGRESS_FD");
        if (fd >= 0)
            kace_progress_control = kace_progress_env_fd("KACE_CONTROL_FD");
        if (kace_progress_control >= 0)
            kace_progress_answer("hello 1\n");
        struct sigaction old;
        if (fd >= 0 && kace_progress_control < 0 && sigaction(SIGTERM, NULL, &old) == 0 && !(old.sa_flags & SA_SIGINFO) &&
            old.sa_handler == SIG_DFL) {
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = kace_progress_on_term;
            sigemptyset(&sa.sa_mask);
            sa.sa_flags = SA_RESTART;
            if (sigaction(SIGTERM, &sa, NULL) == 0)
                pthread_atfork(kace_progress_before_fork, kace_progress_parent_after_fork,
                               kace_progress_forked_child);
        }
    }
    return fd;
}

/* Reports the total number of samples done so far. */
static inline void kace_progress_report(unsigned long long samples_total)
{
    int fd = kace_progress_fd();
    if (fd < 0)
        return;
    /* Read before the record is stamped: the record this call exits after
     * is then stamped after kace's SIGTERM, which is how kace tells a stop
     * at a report from an exit mid-step. A SIGTERM that arrives later is
     * acted on at the next report. */
    int stopping = kace_progress_stopping;
    char msg = kace_progress_read_control(0);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    char line[96];
    int n = snprintf(line, sizeof line, "done %llu %lld\n", samples_total,
                     (long long)ts.tv_sec * 1000000000LL + (long long)ts.tv_nsec);
    if (n > 0 && (size_t)n < sizeof line) {
        ssize_t w = write(fd, line, (size_t)n);
        (void)w;
    }
    while (msg == 'p') { /* paused at this step boundary until run or stop */
        kace_progress_answer("paused\n");
        msg = kace_progress_read_control(1);
        if (msg == 'r')
            kace_progress_answer("running\n");
    }
    if (msg == 's') {
        kace_progress_answer("stopping\n");
        exit(0);
    }
    if (stopping)
        exit(0);
}

#ifdef __cplusplus
}
#endif

#endif
