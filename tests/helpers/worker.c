/* A stand-in workload for the runner tests: a real process that reports
 * progress through workloads/kace_progress.h and then misbehaves on demand.
 *
 *   kace-test-worker MODE [RATE] [SECONDS]
 *
 * RATE samples/s (default 1000) in batches every 10 ms, for SECONDS (default
 * 1000, i.e. until stopped). Modes:
 *   report        report steadily until stopped or SECONDS pass, exit 0
 *   crash         report for SECONDS, then abort() (SIGABRT)
 *   exit-code     report for SECONDS, then exit 3
 *   hang          report for SECONDS, then sleep without reporting
 *   silent        never report, sleep until killed
 *   ignore-term   ignore SIGTERM, report until SIGKILL
 *   grandchild    fork a child that ignores SIGTERM and sleeps forever, then report
 *   oom           report for SECONDS, print a CUDA out-of-memory error, exit 1
 *   garbage       report for SECONDS, then write a malformed record and go on
 *   env           print $NAME=value of argv[2] to stderr, then report
 *   steps         report every SECONDS (a step that long), until stopped
 *   helper        fork a helper with SIGTERM at its default (a DataLoader worker),
 *                 then report; at exit, print whether the helper was still alive
 *                 ("helper alive" or "helper gone") and end it
 *   leave-group   fork a child into a group of its own, print its pid, join
 *                 that group (leaving kace's), ignore SIGTERM, then report
 *   own-handler   a SIGTERM handler of its own that exits 0 at once (mid-step),
 *                 then report
 *   fork-late     report once (kace_progress.h catches SIGTERM), then fork a
 *                 child, SIGTERM it, and print "child ended by signal N" or
 *                 "child alive" (then kill it); then report
 *   cpus          print one line on stdout: "cpus C1,C2,... omp O mkl M openblas B
 *                 torch T" (its affinity, sched_getaffinity, and its thread-count
 *                 variables, "-" when unset), then report
 */
#define _GNU_SOURCE /* sched_getaffinity */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kace_progress.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Reports RATE samples/s for `seconds`, a record every 10 ms. Each record's
 * count is RATE x the time elapsed when it is stamped, not x the records sent:
 * on a loaded machine a record can be late by tens of ms, and a count that
 * assumed it on time made the measured rate wander by late/window (10% over a
 * 0.3 s window); so the tests check the runner's arithmetic exactly, not the
 * scheduler's punctuality. */
static void report_for(double rate, double seconds)
{
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    double t0 = now_s();
    kace_progress_report(0);
    for (;;) {
        next.tv_nsec += 10000000L;
        if (next.tv_nsec >= 1000000000L) {
            next.tv_nsec -= 1000000000L;
            next.tv_sec++;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
        double t = now_s() - t0; /* kace_progress_report stamps right after */
        if (t >= seconds)
            break;
        kace_progress_report((unsigned long long)(rate * t + 0.5));
    }
}

static pid_t helper_pid;

/* Whether SIGTERM is pending for pid (/proc/PID/status, SigPnd or ShdPnd;
 * the kernel adds SIGKILL for a fatal one): a SIGTERM sent to the leader's
 * whole group is there at once, before the helper has been scheduled to die
 * of it, however loaded the machine. */
static int sigterm_pending(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 1; /* gone */
    int pending = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long mask = 0;
        if ((sscanf(line, "SigPnd: %llx", &mask) == 1 || sscanf(line, "ShdPnd: %llx", &mask) == 1) &&
            (mask & (1ULL << (SIGTERM - 1) | 1ULL << (SIGKILL - 1))))
            pending = 1;
    }
    fclose(f);
    return pending;
}

/* Runs at exit(0) from kace_progress_report: the leader ends its helper, as
 * PyTorch's DataLoader ends its workers. */
static void end_helper(void)
{
    int st;
    printf("helper %s\n", waitpid(helper_pid, &st, WNOHANG) == 0 && !sigterm_pending(helper_pid) ? "alive" : "gone");
    fflush(stdout);
    kill(helper_pid, SIGTERM);
    waitpid(helper_pid, &st, 0);
}

static void exit_at_once(int sig)
{
    (void)sig;
    _exit(0);
}

static void sleep_forever(void)
{
    for (;;)
        pause();
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODE [RATE] [SECONDS]\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    double rate = argc > 2 ? strtod(argv[2], NULL) : 1000;
    double seconds = argc > 3 ? strtod(argv[3], NULL) : 1000;
    if (strcmp(mode, "report") == 0) {
        report_for(rate, seconds);
        return 0;
    }
    if (strcmp(mode, "crash") == 0) {
        report_for(rate, seconds);
        abort();
    }
    if (strcmp(mode, "exit-code") == 0) {
        report_for(rate, seconds);
        return 3;
    }
    if (strcmp(mode, "hang") == 0) {
        report_for(rate, seconds);
        sleep_forever();
    }
    if (strcmp(mode, "silent") == 0)
        sleep_forever();
    if (strcmp(mode, "ignore-term") == 0) {
        signal(SIGTERM, SIG_IGN);
        report_for(rate, seconds);
        sleep_forever();
    }
    if (strcmp(mode, "grandchild") == 0) {
        pid_t pid = fork();
        if (pid == 0) {
            signal(SIGTERM, SIG_IGN);
            printf("%d\n", (int)getpid());
            fflush(stdout);
            sleep_forever();
        }
        fprintf(stderr, "grandchild %d\n", (int)pid);
        report_for(rate, seconds);
        return 0;
    }
    if (strcmp(mode, "oom") == 0) {
        report_for(rate, seconds);
        fprintf(stderr, "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n");
        return 1;
    }
    if (strcmp(mode, "garbage") == 0) {
        report_for(rate, seconds);
        int fd = kace_progress_fd();
        if (fd >= 0 && write(fd, "done lots\n", 10) < 0)
            return 1;
        report_for(rate, 1000);
        return 0;
    }
    if (strcmp(mode, "env") == 0) {
        const char *v = getenv(argc > 2 ? argv[2] : "KACE_PROGRESS_FD");
        fprintf(stderr, "%s=%s\n", argc > 2 ? argv[2] : "KACE_PROGRESS_FD", v ? v : "(unset)");
        report_for(1000, 1000);
        return 0;
    }
    if (strcmp(mode, "cpus") == 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        if (sched_getaffinity(0, sizeof set, &set) != 0)
            return 1;
        printf("cpus ");
        const char *sep = "";
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &set)) {
                printf("%s%d", sep, c);
                sep = ",";
            }
        static const char *const vars[][2] = {{"omp", "OMP_NUM_THREADS"}, {"mkl", "MKL_NUM_THREADS"},
                                             {"openblas", "OPENBLAS_NUM_THREADS"}, {"torch", "KACE_TORCH_THREADS"}};
        for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
            const char *v = getenv(vars[i][1]);
            printf(" %s %s", vars[i][0], v && *v ? v : "-");
        }
        printf("\n");
        fflush(stdout);
        report_for(rate, seconds);
        return 0;
    }
    if (strcmp(mode, "steps") == 0) {
        unsigned long long done = 0;
        struct timespec end;
        clock_gettime(CLOCK_MONOTONIC, &end);
        kace_progress_report(0);
        for (;;) { /* a step is not cut short by a signal, as a GPU step is not */
            long long ns = end.tv_nsec + (long long)(seconds * 1e9);
            end.tv_sec += (time_t)(ns / 1000000000LL);
            end.tv_nsec = (long)(ns % 1000000000LL);
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &end, NULL) == EINTR)
                ;
            done += (unsigned long long)(rate * seconds + 0.5);
            kace_progress_report(done);
        }
    }
    if (strcmp(mode, "helper") == 0) {
        helper_pid = fork();
        if (helper_pid == 0)
            sleep_forever();
        atexit(end_helper);
        report_for(rate, seconds);
        return 0;
    }
    if (strcmp(mode, "leave-group") == 0) {
        pid_t child = fork();
        if (child == 0) {
            setpgid(0, 0);
            sleep_forever();
        }
        setpgid(child, child); /* whichever runs first */
        if (setpgid(0, child) != 0) {
            perror("setpgid");
            return 2;
        }
        printf("%d\n", (int)child);
        fflush(stdout);
        signal(SIGTERM, SIG_IGN);
        report_for(rate, seconds);
        sleep_forever();
    }
    if (strcmp(mode, "own-handler") == 0) {
        signal(SIGTERM, exit_at_once);
        report_for(rate, seconds);
        return 0;
    }
    if (strcmp(mode, "fork-late") == 0) {
        kace_progress_report(0);
        int ready[2];
        if (pipe(ready) != 0)
            return 2;
        pid_t child = fork();
        if (child == 0) { /* past the fork handlers: tell the parent */
            if (write(ready[1], "r", 1) != 1)
                _exit(2);
            sleep_forever();
        }
        char byte;
        if (read(ready[0], &byte, 1) != 1)
            return 2;
        kill(child, SIGTERM);
        int st = 0;
        pid_t got = 0;
        for (int i = 0; i < 300 && got == 0; i++) { /* up to 3 s on a loaded machine */
            got = waitpid(child, &st, WNOHANG);
            if (got == 0)
                nanosleep(&(struct timespec){0, 10000000}, NULL);
        }
        if (got == child && WIFSIGNALED(st)) {
            printf("child ended by signal %d\n", WTERMSIG(st));
        } else {
            printf("child alive\n");
            kill(child, SIGKILL);
            waitpid(child, &st, 0);
        }
        fflush(stdout);
        report_for(rate, seconds);
        return 0;
    }
    fprintf(stderr, "%s: unknown mode %s\n", argv[0], mode);
    return 2;
}
