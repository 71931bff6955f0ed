/* Process runner: K workloads at once, each in its own process group, with
 * progress pipes, a steady window, a timeout and clean termination. See
 * include/kace/runner.h for the contract. */
#define _GNU_SOURCE /* pipe2, sched_setaffinity */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sys/socket.h>

#include "kace/runner.h"

extern char **environ;

/* The progress descriptor number inside every workload, and the control
 * channel's (kace_run_options.control). */
#define CHILD_PROGRESS_FD 3
#define CHILD_CONTROL_FD 4

const char *kace_control_msg_name(kace_control_msg m)
{
    switch (m) {
    case KACE_CONTROL_RUN: return "run";
    case KACE_CONTROL_PAUSE: return "pause";
    case KACE_CONTROL_STOP: return "stop";
    }
    return "unknown";
}

int64_t kace_monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

const char *kace_proc_status_name(kace_proc_status s)
{
    switch (s) {
    case KACE_PROC_OK: return "ok";
    case KACE_PROC_CRASHED: return "crashed";
    case KACE_PROC_OOM: return "oom";
    case KACE_PROC_TIMEOUT: return "timeout";
    case KACE_PROC_EXITED_EARLY: return "exited-early";
    case KACE_PROC_BAD_PROGRESS: return "bad-progress";
    case KACE_PROC_STOPPED: return "stopped";
    case KACE_PROC_CANCELLED: return "cancelled";
    case KACE_PROC_SPAWN_FAILED: return "spawn-failed";
    }
    return "unknown";
}

const char *kace_proc_ending(const kace_proc_result *r, char *buf, size_t n)
{
    bool termed = r->leader_got_sigterm;
    int sig = r->term_signal;
    if (r->got_stop_message && !sig && r->exit_code == 0 && r->reported_after_sigterm)
        snprintf(buf, n, "stopped at its next report after kace's stop message");
    else if (r->got_stop_message && !sig && r->exit_code == 0 && r->paused_at_stop)
        snprintf(buf, n, "stopped where it was paused, at a step boundary, after kace's stop message");
    else if (r->got_stop_message && !sig && !termed)
        snprintf(buf, n, "exited with status %d after kace's stop message, %s its next report", r->exit_code,
                 r->reported_after_sigterm ? "after" : "before");
    else if (r->status == KACE_PROC_SPAWN_FAILED)
        snprintf(buf, n, "never started");
    else if (sig == SIGKILL && r->got_sigkill)
        snprintf(buf, n, "killed by SIGKILL after a grace of %.3g s", r->term_grace_s);
    else if (sig == SIGTERM && termed)
        snprintf(buf, n, "ended by SIGTERM before its next report");
    else if (sig)
        snprintf(buf, n, "killed by signal %d %s", sig,
                 termed ? "after SIGTERM" : r->got_stop_message ? "after kace's stop message" : "on its own");
    else if (kace_proc_stopped_at_report(r))
        snprintf(buf, n, "stopped at its next report after SIGTERM");
    else if (termed) /* a SIGTERM handler of its own, say */
        snprintf(buf, n, "exited with status %d after SIGTERM, %s its next report", r->exit_code,
                 r->reported_after_sigterm ? "after" : "before");
    else
        snprintf(buf, n, "exited on its own with status %d", r->exit_code);
    size_t len = strlen(buf);
    if (r->got_sigkill && sig != SIGKILL && len < n)
        snprintf(buf + len, n - len, "; the rest of its group was killed by SIGKILL");
    return buf;
}

bool kace_proc_stopped_at_report(const kace_proc_result *r)
{
    return r->status != KACE_PROC_SPAWN_FAILED && (r->leader_got_sigterm || r->got_stop_message) &&
           r->term_signal == 0 && r->exit_code == 0 &&
           (r->reported_after_sigterm || (r->got_stop_message && r->paused_at_stop && !r->leader_got_sigterm));
}

bool kace_proc_ended_mid_step(const kace_proc_result *r)
{
    return r->status != KACE_PROC_SPAWN_FAILED &&
           (r->term_signal != 0 || r->got_sigkill ||
            ((r->leader_got_sigterm || r->got_stop_message) && !r->reported_after_sigterm &&
             !(r->got_stop_message && r->paused_at_stop && !r->leader_got_sigterm)));
}

void kace_run_options_init(kace_run_options *opt)
{
    memset(opt, 0, sizeof *opt);
    opt->warmup_s = 10;
    opt->window_s = 30;
    opt->timeout_s = 0; /* warmup + window + 120 */
    opt->term_grace_s = 3;
    opt->term_grace_max_s = 30;
    opt->stderr_fd = -1;
    opt->tick_s = 0.1;
}

/* Settings left at 0 get their defaults. */
static void fill_defaults(kace_run_options *opt)
{
    if (!(opt->window_s > 0))
        opt->window_s = 30;
    if (!(opt->timeout_s > 0))
        opt->timeout_s = opt->warmup_s + opt->window_s + 120;
    if (!(opt->term_grace_s > 0))
        opt->term_grace_s = 3;
    if (!(opt->term_grace_max_s > 0))
        opt->term_grace_max_s = 30;
    if (!(opt->tick_s > 0))
        opt->tick_s = 0.1;
}

typedef enum { P_RUNNING, P_TERMINATING, P_DONE } proc_phase;

typedef struct proc {
    const kace_proc_spec *spec;
    kace_proc_result *res;
    const char *label;
    char **envp;
    pid_t pid;
    int progress_fd, stderr_fd; /* read ends, -1 when closed */
    int control_fd;             /* kace's end of the control channel, -1 when none or closed */
    char control_line[64];      /* a partial answer on it */
    size_t control_len;
    kace_control_answers answers; /* what it has answered so far */
    bool sigstopped;            /* paused by SIGSTOP (a workload that does not speak the channel) */
    cpu_set_t cpus;             /* the CPUs it is pinned to, when n_cpus > 0 */
    size_t n_cpus;
    kace_progress *progress;
    proc_phase phase;
    bool decided;         /* res->status is final */
    bool leader_reaped;
    bool term_group;      /* the group got SIGTERM (the leader had gone) */
    bool term_again;      /* the group got its SIGTERM at 2/3 of the grace period */
    double grace_s;       /* from the first SIGTERM to SIGKILL */
    bool complete;        /* reported through its window */
    int64_t start_ns, term_ns, end_ns;
    int64_t leader_term_ns; /* just before the leader's first SIGTERM (0: none) */
    size_t records_at_term; /* progress records read by then */
    kace_ctx *scratch;      /* progress errors (kace_run's) */
    size_t tail_len;
    /* warmup_base's scan for a steady rate (records are only ever appended):
     * where it stopped, and the start once found. */
    size_t steady_i, steady_j;
    int64_t steady_base;
    bool steady_found;
} proc;

/* ---- environment --------------------------------------------------------- */

static bool env_name_eq(const char *entry, const char *other)
{
    const char *eq = strchr(other, '=');
    size_t n = eq ? (size_t)(eq - other) : strlen(other);
    return strncmp(entry, other, n) == 0 && entry[n] == '=';
}

static void free_env(char **envp)
{
    if (!envp)
        return;
    for (char **e = envp; *e; e++)
        free(*e);
    free(envp);
}

static const char *const thread_env_names[] = {KACE_THREAD_ENV_NAMES, NULL};
#define N_THREAD_ENV (sizeof thread_env_names / sizeof *thread_env_names - 1)

/* The caller's environment with extra entries added or replacing (an entry
 * without '=' removes that variable), plus KACE_PROGRESS_FD, and
 * KACE_CONTROL_FD with control (an inherited one is never passed on). A
 * pinned process (threads > 0) gets each thread-count variable set to its
 * CPUs, unless extra names it: the caller's word wins. */
static char **build_env(const char *const *extra, bool control, size_t threads)
{
    size_t n_env = 0, n_extra = 0;
    while (environ && environ[n_env])
        n_env++;
    while (extra && extra[n_extra])
        n_extra++;
    char **envp = calloc(n_env + n_extra + N_THREAD_ENV + 3, sizeof *envp);
    if (!envp)
        return NULL;
    bool thread_set[N_THREAD_ENV] = {false};
    for (size_t t = 0; t < N_THREAD_ENV; t++)
        for (size_t j = 0; j < n_extra && threads > 0; j++)
            if (strncmp(extra[j], thread_env_names[t], strlen(thread_env_names[t])) == 0 &&
                (extra[j][strlen(thread_env_names[t])] == '=' || extra[j][strlen(thread_env_names[t])] == '\0'))
                thread_set[t] = true; /* set or removed by the caller */
    size_t k = 0;
    for (size_t i = 0; i < n_env; i++) {
        bool replaced = env_name_eq(environ[i], KACE_PROGRESS_FD_ENV "=") ||
                        env_name_eq(environ[i], KACE_CONTROL_FD_ENV "=");
        for (size_t j = 0; j < n_extra && !replaced; j++)
            replaced = env_name_eq(environ[i], extra[j]);
        for (size_t t = 0; t < N_THREAD_ENV && threads > 0 && !replaced; t++)
            replaced = env_name_eq(environ[i], thread_env_names[t]);
        if (replaced)
            continue;
        if (!(envp[k++] = strdup(environ[i])))
            goto fail;
    }
    for (size_t j = 0; j < n_extra; j++) {
        if (!strchr(extra[j], '='))
            continue; /* "NAME" alone: removed above, not added */
        if (!(envp[k++] = strdup(extra[j])))
            goto fail;
    }
    for (size_t t = 0; t < N_THREAD_ENV && threads > 0; t++) {
        char entry[64];
        if (thread_set[t])
            continue;
        snprintf(entry, sizeof entry, "%s=%zu", thread_env_names[t], threads);
        if (!(envp[k++] = strdup(entry)))
            goto fail;
    }
    char fdvar[64];
    snprintf(fdvar, sizeof fdvar, "%s=%d", KACE_PROGRESS_FD_ENV, CHILD_PROGRESS_FD);
    if (!(envp[k++] = strdup(fdvar)))
        goto fail;
    if (control) {
        snprintf(fdvar, sizeof fdvar, "%s=%d", KACE_CONTROL_FD_ENV, CHILD_CONTROL_FD);
        if (!(envp[k++] = strdup(fdvar)))
            goto fail;
    }
    return envp;
fail:
    free_env(envp);
    return NULL;
}

/* ---- spawning -------------------------------------------------------------- */

/* In the child, between fork and exec: only async-signal-safe calls. */
static void child_exec(const proc *p, int progress_w, int control_w, int stderr_w, int err_w, int parent_pid)
{
    setpgid(0, 0);
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* the leader dies with kace (SIGKILL to kace) */
    if (getppid() != parent_pid)
        _exit(127);
#else
    (void)parent_pid;
#endif
    if (p->n_cpus > 0 && sched_setaffinity(0, sizeof p->cpus, &p->cpus) != 0) {
        int e = -(errno ? errno : EINVAL); /* negative: the pinning failed, not the exec */
        ssize_t w = write(err_w, &e, sizeof e);
        (void)w;
        _exit(127);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    int in = open("/dev/null", O_RDONLY);
    int out = p->spec->stdout_path ? open(p->spec->stdout_path, O_WRONLY | O_CREAT | O_TRUNC, 0644)
                                   : open("/dev/null", O_WRONLY);
    int e = 0;
    if (in < 0 || out < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(stderr_w, 2) < 0)
        e = errno ? errno : EIO;
    if (!e) {
        if (progress_w == CHILD_PROGRESS_FD)
            e = fcntl(progress_w, F_SETFD, 0) < 0 ? errno : 0;
        else
            e = dup2(progress_w, CHILD_PROGRESS_FD) < 0 ? errno : 0;
    }
    /* control_w is above CHILD_CONTROL_FD (spawn), so the dup2s above left it alone. */
    if (!e && control_w >= 0)
        e = dup2(control_w, CHILD_CONTROL_FD) < 0 ? errno : 0;
    if (!e) {
        environ = p->envp;
        execvp(p->spec->argv[0], p->spec->argv);
        e = errno;
    }
    ssize_t w = write(err_w, &e, sizeof e);
    (void)w;
    _exit(127);
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* ---- CPU shares ------------------------------------------------------------ */

size_t kace_cpus_available(int *cpus, size_t max)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return 0;
    size_t n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < max; c++)
        if (CPU_ISSET(c, &set))
            cpus[n++] = c;
    return n;
}

size_t kace_cpu_share(const int *cpus, size_t n, size_t shares, size_t i, int *out, size_t max)
{
    if (n == 0 || shares == 0)
        return 0;
    i %= shares;
    if (n < shares) { /* fewer CPUs than shares: one CPU each, shared round robin */
        if (max < 1)
            return 0;
        out[0] = cpus[i % n];
        return 1;
    }
    size_t from = i * n / shares, to = (i + 1) * n / shares, k = 0;
    for (size_t c = from; c < to && k < max; c++)
        out[k++] = cpus[c];
    return k;
}

/* The CPUs p runs on: its spec's own, else share `index` of cpu_shares
 * (index SIZE_MAX, or no shares: not pinned). */
static void plan_cpus(proc *p, unsigned cpu_shares, size_t index)
{
    CPU_ZERO(&p->cpus);
    p->n_cpus = 0;
    const kace_proc_spec *s = p->spec;
    if (s->cpus && s->n_cpus > 0) {
        for (size_t c = 0; c < s->n_cpus; c++)
            if (s->cpus[c] >= 0 && s->cpus[c] < CPU_SETSIZE && !CPU_ISSET(s->cpus[c], &p->cpus)) {
                CPU_SET(s->cpus[c], &p->cpus);
                p->n_cpus++;
            }
    } else if (cpu_shares > 0 && index != SIZE_MAX) {
        int avail[CPU_SETSIZE], share[CPU_SETSIZE];
        size_t n = kace_cpus_available(avail, CPU_SETSIZE);
        size_t k = kace_cpu_share(avail, n, cpu_shares, index, share, CPU_SETSIZE);
        for (size_t c = 0; c < k; c++)
            CPU_SET(share[c], &p->cpus);
        p->n_cpus = k;
    }
    p->res->n_cpus = (unsigned)p->n_cpus;
}

/* The process group of process pid (/proc/PID/stat's fifth field), -1 when
 * it cannot be read. */
static int group_of(const char *pid)
{
    char path[300], buf[512];
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *close = strrchr(buf, ')'); /* the command may hold spaces and parentheses */
    char state;
    int ppid, pgrp;
    if (!close || sscanf(close + 1, " %c %d %d", &state, &ppid, &pgrp) != 3)
        return -1;
    return pgrp;
}

/* One pass over /proc pinning the threads of the n groups pgids: the
 * threads pinned, or a negative errno. */
static int pin_groups_pass(const int *pgids, size_t n, const cpu_set_t *set)
{
    DIR *procs = opendir("/proc");
    if (!procs)
        return -(errno ? errno : EIO);
    int pinned = 0, err = 0;
    for (struct dirent *e; (e = readdir(procs));) { /* on past a failure: the others still move */
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        int pgrp = group_of(e->d_name);
        bool held = false;
        for (size_t g = 0; g < n && !held; g++)
            held = pgids[g] == pgrp;
        if (!held)
            continue;
        char path[300];
        snprintf(path, sizeof path, "/proc/%s/task", e->d_name);
        DIR *tasks = opendir(path);
        for (struct dirent *t; tasks && (t = readdir(tasks));) {
            if (t->d_name[0] < '1' || t->d_name[0] > '9')
                continue;
            if (sched_setaffinity((pid_t)atoi(t->d_name), sizeof *set, set) == 0)
                pinned++;
            else if (errno != ESRCH) /* ESRCH: the thread has ended */
                err = -errno;
        }
        if (tasks)
            closedir(tasks);
    }
    closedir(procs);
    return err ? err : pinned;
}

/* kace_pin_group for n groups at once (one /proc scan a pass). */
static int pin_groups(const int *pgids, size_t n_groups, const int *cpus, size_t n)
{
    int avail[CPU_SETSIZE];
    if (n == 0) {
        n = kace_cpus_available(avail, CPU_SETSIZE);
        cpus = avail;
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    for (size_t c = 0; c < n; c++)
        if (cpus[c] >= 0 && cpus[c] < CPU_SETSIZE)
            CPU_SET(cpus[c], &set);
    if (CPU_COUNT(&set) == 0)
        return -EINVAL;
    int last = -1, got = 0;
    for (int pass = 0; pass < 8 && got != last; pass++) {
        last = got;
        if ((got = pin_groups_pass(pgids, n_groups, &set)) < 0)
            return got;
    }
    return got;
}

int kace_pin_group(int pgid, const int *cpus, size_t n)
{
    return pgid > 0 ? pin_groups(&pgid, 1, cpus, n) : -EINVAL;
}

size_t kace_held_move_off(const kace_held *h, const int *run_cpus, size_t n)
{
    if (!h || h->n == 0)
        return 0;
    int avail[CPU_SETSIZE], rest[CPU_SETSIZE];
    size_t n_avail = kace_cpus_available(avail, CPU_SETSIZE), n_rest = 0;
    for (size_t a = 0; a < n_avail; a++) {
        bool used = false;
        for (size_t c = 0; c < n && !used; c++)
            used = run_cpus[c] == avail[a];
        if (!used)
            rest[n_rest++] = avail[a];
    }
    if (n_rest == 0)
        return 0;
    return pin_groups(h->pgids, h->n, rest, n_rest) > 0 ? h->n : 0;
}

/* Starts one workload. Failures to start are a status of the process, not an
 * error of the run (except when the runner itself lacks resources). */
static kace_status spawn(kace_ctx *ctx, proc *p, bool control)
{
    int prog[2] = {-1, -1}, errp[2] = {-1, -1}, errx[2] = {-1, -1}, ctl[2] = {-1, -1};
    kace_status st = KACE_OK;
    if (pipe2(prog, O_CLOEXEC) != 0 || pipe2(errp, O_CLOEXEC) != 0 || pipe2(errx, O_CLOEXEC) != 0) {
        st = kace_fail(ctx, KACE_ERR_IO, "cannot create pipes for workload %s: %s", p->label, strerror(errno));
        goto done;
    }
    if (control) {
        /* A socket, so that the workload can answer on it; its end is moved above
         * the descriptors the child sets up, so that none of them overwrites it. */
        int pair[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
            st = kace_fail(ctx, KACE_ERR_IO, "cannot create the control channel of %s: %s", p->label,
                           strerror(errno));
            goto done;
        }
        ctl[0] = pair[0];
        ctl[1] = fcntl(pair[1], F_DUPFD_CLOEXEC, CHILD_CONTROL_FD + 1);
        close(pair[1]);
        if (ctl[1] < 0) {
            st = kace_fail(ctx, KACE_ERR_IO, "cannot create the control channel of %s: %s", p->label,
                           strerror(errno));
            goto done;
        }
    }
    p->envp = build_env(p->spec->extra_env, control, p->n_cpus);
    if (!p->envp) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory building the environment of %s", p->label);
        goto done;
    }
    int parent = (int)getpid();
    p->start_ns = kace_monotonic_ns();
    p->res->start_ns = p->start_ns;
    pid_t pid = fork();
    if (pid < 0) {
        st = kace_fail(ctx, KACE_ERR_IO, "cannot start workload %s: fork: %s", p->label, strerror(errno));
        goto done;
    }
    if (pid == 0)
        child_exec(p, prog[1], ctl[1], errp[1], errx[1], parent);
    setpgid(pid, pid); /* also in the child: whichever runs first */
    p->pid = pid;
    p->res->pid = (int)pid;
    close_fd(&prog[1]);
    close_fd(&errp[1]);
    close_fd(&errx[1]);
    close_fd(&ctl[1]);
    int child_errno = 0;
    ssize_t got;
    do
        got = read(errx[0], &child_errno, sizeof child_errno);
    while (got < 0 && errno == EINTR);
    if (got == (ssize_t)sizeof child_errno) {
        p->res->status = KACE_PROC_SPAWN_FAILED;
        p->decided = true;
        if (child_errno < 0)
            snprintf(p->res->detail, sizeof p->res->detail, "cannot pin '%s' to its %zu CPUs: %s",
                     p->spec->argv[0], p->n_cpus, strerror(-child_errno));
        else
            snprintf(p->res->detail, sizeof p->res->detail, "cannot run '%s': %s", p->spec->argv[0],
                     strerror(child_errno));
    }
    fcntl(prog[0], F_SETFL, O_NONBLOCK);
    fcntl(errp[0], F_SETFL, O_NONBLOCK);
    if (ctl[0] >= 0)
        fcntl(ctl[0], F_SETFL, O_NONBLOCK);
    p->progress_fd = prog[0];
    p->stderr_fd = errp[0];
    p->control_fd = ctl[0];
    prog[0] = errp[0] = ctl[0] = -1;
done:
    for (int i = 0; i < 2; i++) {
        close_fd(&prog[i]);
        close_fd(&errp[i]);
        close_fd(&errx[i]);
        close_fd(&ctl[i]);
    }
    return st;
}

/* ---- reading --------------------------------------------------------------- */

static void keep_tail(proc *p, const char *buf, size_t n)
{
    char *tail = p->res->stderr_tail;
    size_t cap = sizeof p->res->stderr_tail - 1;
    if (n >= cap) {
        memcpy(tail, buf + n - cap, cap);
        p->tail_len = cap;
    } else {
        if (p->tail_len + n > cap) {
            size_t drop = p->tail_len + n - cap;
            memmove(tail, tail + drop, p->tail_len - drop);
            p->tail_len -= drop;
        }
        memcpy(tail + p->tail_len, buf, n);
        p->tail_len += n;
    }
    tail[p->tail_len] = '\0';
}

static void decide(proc *p, kace_proc_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void decide(proc *p, kace_proc_status s, const char *fmt, ...)
{
    if (p->decided)
        return;
    p->decided = true;
    p->res->status = s;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->res->detail, sizeof p->res->detail, fmt, ap);
    va_end(ap);
}

/* Reads what is available on the progress pipe. */
static void read_progress(kace_ctx *ctx, proc *p)
{
    char buf[4096];
    for (;;) {
        ssize_t n = read(p->progress_fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
                close_fd(&p->progress_fd);
            return;
        }
        if (p->res->status == KACE_PROC_BAD_PROGRESS && p->decided)
            continue; /* already unusable: drain */
        if (kace_progress_feed(ctx, p->progress, buf, (size_t)n, kace_monotonic_ns()) != KACE_OK)
            decide(p, KACE_PROC_BAD_PROGRESS, "%s", ctx ? kace_errmsg(ctx) : "bad progress record");
    }
}

static void read_stderr(proc *p, int copy_fd)
{
    char buf[4096];
    for (;;) {
        ssize_t n = read(p->stderr_fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
                close_fd(&p->stderr_fd);
            return;
        }
        keep_tail(p, buf, (size_t)n);
        for (ssize_t off = 0; copy_fd >= 0 && off < n;) {
            ssize_t w = write(copy_fd, buf + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                break;
            off += w;
        }
    }
}

/* Reads the workload's answers on the control channel: "hello 1" says that
 * it reads kace's messages at its step boundaries; "paused", "running" and
 * "stopping" are counted for a long-lived workload's caller (kace_live). */
static void read_control(proc *p)
{
    char buf[256];
    for (;;) {
        ssize_t n = read(p->control_fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
                close_fd(&p->control_fd);
            return;
        }
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] != '\n') {
                if (p->control_len + 1 < sizeof p->control_line)
                    p->control_line[p->control_len++] = buf[i];
                continue;
            }
            p->control_line[p->control_len] = '\0';
            if (strcmp(p->control_line, "hello 1") == 0)
                p->res->speaks_control = true;
            else if (strcmp(p->control_line, "paused") == 0)
                p->answers.paused++;
            else if (strcmp(p->control_line, "running") == 0)
                p->answers.running++;
            else if (strcmp(p->control_line, "stopping") == 0)
                p->answers.stopping++;
            p->control_len = 0;
        }
    }
}

/* Sends a message; false when the workload can no longer read it. */
static bool send_control(proc *p, kace_control_msg m)
{
    char line[16];
    int n = snprintf(line, sizeof line, "%s\n", kace_control_msg_name(m));
    if (p->control_fd < 0)
        return false;
    ssize_t w;
    do
        w = send(p->control_fd, line, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (w < 0 && errno == EINTR);
    return w == n;
}

/* ---- ending -------------------------------------------------------------- */

static bool stderr_says_oom(const char *tail)
{
    static const char *const marks[] = {"out of memory", "OUT_OF_MEMORY", "OutOfMemoryError",
                                        "cudaErrorMemoryAllocation", "Out of memory"};
    for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++)
        if (strstr(tail, marks[i]))
            return true;
    return false;
}

/* The leader exited on its own (or after kace's signal): record how. */
static void leader_exited(proc *p, int wstatus, int64_t now)
{
    p->leader_reaped = true;
    kace_proc_result *r = p->res;
    r->exit_code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
    r->term_signal = WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0;
    if (p->decided)
        return;
    if (p->complete) {
        decide(p, KACE_PROC_OK, "reported through its steady window, then exited");
        return;
    }
    double t = (double)(now - p->start_ns) / 1e9;
    if (WIFEXITED(wstatus) && r->exit_code == 0) {
        decide(p, KACE_PROC_EXITED_EARLY, "exited with status 0 after %.1f s, before its steady window was complete",
               t);
    } else if (stderr_says_oom(r->stderr_tail)) {
        decide(p, KACE_PROC_OOM, "ran out of memory (its stderr says so) and %s %d after %.1f s",
               WIFEXITED(wstatus) ? "exited with status" : "was killed by signal",
               WIFEXITED(wstatus) ? r->exit_code : r->term_signal, t);
    } else if (WIFEXITED(wstatus)) {
        decide(p, KACE_PROC_CRASHED, "exited with status %d after %.1f s", r->exit_code, t);
    } else {
        decide(p, KACE_PROC_CRASHED, "killed by signal %d (%s) after %.1f s%s", r->term_signal,
               strsignal(r->term_signal), t,
               r->term_signal == SIGKILL ? " that kace did not send (the kernel's OOM killer?)" : "");
    }
}

static bool group_exists(pid_t pgid)
{
    return kill(-pgid, 0) == 0 || errno != ESRCH;
}

/* The longest time between two of p's progress records after the second
 * (the first gap holds lazy initialisation, autotuning): how long it may
 * take to reach its next report. 0 with fewer than three records. */
static double longest_report_gap_s(const proc *p)
{
    size_t nr;
    const kace_progress_record *r = kace_progress_records(p->progress, &nr);
    int64_t gap = 0;
    for (size_t i = 2; i < nr; i++)
        if (r[i].t_ns - r[i - 1].t_ns > gap)
            gap = r[i].t_ns - r[i - 1].t_ns;
    return (double)gap / 1e9;
}

/* A workload whose step is longer than the default grace would be killed
 * mid-step, with GPU work outstanding (what NVIDIA's MPS documentation
 * warns of): its grace grows to three of its steps, within the cap. */
static double grace_for(const proc *p, const kace_run_options *opt)
{
    double grace = 3 * longest_report_gap_s(p);
    if (grace > opt->term_grace_max_s)
        grace = opt->term_grace_max_s;
    return grace > opt->term_grace_s ? grace : opt->term_grace_s;
}

/* Whether anything of p is left: its group, or its leader (not yet reaped;
 * it may have left its group with setpgid). */
static bool workload_exists(const proc *p)
{
    return group_exists(p->pid) || (!p->leader_reaped && (kill(p->pid, 0) == 0 || errno != ESRCH));
}

/* Called just before the leader's SIGTERM. A record read after what the
 * pipe holds now, and stamped after now when it carries its own time, was
 * written after the signal (the step-boundary stop). */
static void note_leader_stop(proc *p)
{
    if (!p->leader_term_ns) {
        if (p->progress_fd >= 0)
            read_progress(p->scratch, p);
        kace_progress_records(p->progress, &p->records_at_term);
        p->leader_term_ns = kace_monotonic_ns();
    }
}

static void note_leader_sigterm(proc *p)
{
    note_leader_stop(p);
    p->res->leader_got_sigterm = true;
}

/* sig to p's group and to its leader while it is not reaped. */
static void signal_workload(proc *p, int sig)
{
    kill(-p->pid, sig);
    if (!p->leader_reaped) {
        if (sig == SIGTERM)
            note_leader_sigterm(p);
        kill(p->pid, sig);
    }
    p->term_group = true;
}

/* SIGTERM to the leader alone: a workload that stops at its next report
 * ends its own helpers (DataLoader workers, which SIGTERM would kill with
 * the leader still inside a step). A group whose leader has gone gets it.
 * hurry (kace cancelled or failed): the plain grace period, also for a
 * workload already ending (kace's own caller will not wait 30 s). */
static void terminate(proc *p, const kace_run_options *opt, int64_t now, bool hurry)
{
    if (p->phase == P_TERMINATING && hurry && p->grace_s > opt->term_grace_s) {
        p->grace_s = opt->term_grace_s;
        if (p->res->got_sigterm || p->res->got_stop_message)
            p->res->term_grace_s = p->grace_s;
    }
    if (p->phase != P_RUNNING)
        return;
    p->phase = P_TERMINATING;
    p->term_ns = now;
    p->grace_s = hurry ? opt->term_grace_s : grace_for(p, opt);
    int ws;
    if (p->pid > 0 && !p->leader_reaped && waitpid(p->pid, &ws, WNOHANG) == p->pid)
        leader_exited(p, ws, now); /* it exited on its own since the last reap: not kace's SIGTERM */
    /* Whether it said hello: the answer came before its records, so reading the
     * channel now sees it for any workload whose records ended its window. */
    if (p->control_fd >= 0)
        read_control(p);
    if (p->pid > 0 && workload_exists(p)) {
        if (!p->leader_reaped && p->res->speaks_control) {
            note_leader_stop(p);
            if (send_control(p, KACE_CONTROL_STOP)) {
                p->res->got_stop_message = true;
                p->res->term_grace_s = p->grace_s;
                return; /* SIGTERM only as the fallback, at 2/3 of the grace period (reap) */
            }
        }
        if (p->leader_reaped) {
            kill(-p->pid, SIGTERM);
            p->term_group = true;
        } else {
            note_leader_sigterm(p);
            kill(p->pid, SIGTERM);
        }
        p->res->got_sigterm = true;
        p->res->term_grace_s = p->grace_s;
    }
}

/* Reaps whatever of p's group has exited; marks p done once the group is gone. */
static void reap(proc *p, const kace_run_options *opt, int64_t now)
{
    if (p->phase == P_DONE)
        return;
    if (p->pid <= 0) { /* never started (the runner failed before) */
        decide(p, KACE_PROC_SPAWN_FAILED, "not started: the runner failed before");
        p->phase = P_DONE;
        p->end_ns = p->start_ns = now;
        return;
    }
    int ws;
    pid_t w;
    while ((w = waitpid(-p->pid, &ws, WNOHANG)) > 0)
        if (w == p->pid)
            leader_exited(p, ws, now);
    if (!p->leader_reaped) { /* the leader may have left its group (setpgid) */
        w = waitpid(p->pid, &ws, WNOHANG);
        if (w == p->pid)
            leader_exited(p, ws, now);
    }
    if (p->leader_reaped && p->phase == P_RUNNING)
        terminate(p, opt, now, false); /* whatever it left behind goes too */
    double since = p->phase == P_TERMINATING ? (double)(now - p->term_ns) / 1e9 : 0;
    /* What the leader left behind (a shell wrapper's workload, helpers it did
     * not end) gets its SIGTERM once the leader has gone. */
    if (p->phase == P_TERMINATING && p->leader_reaped && !p->term_group && group_exists(p->pid)) {
        kill(-p->pid, SIGTERM);
        p->term_group = true;
    }
    /* A workload stopping at its next report (workloads/kace_progress.*) has
     * caught the first SIGTERM; the group's, at 2/3 of the grace period, ends
     * one that does not reach it (a hang, a step longer than that). */
    if (p->phase == P_TERMINATING && !p->term_again && since >= p->grace_s * 2 / 3 && workload_exists(p)) {
        signal_workload(p, SIGTERM);
        p->term_again = true;
    }
    if (p->phase == P_TERMINATING && since >= p->grace_s && workload_exists(p)) {
        signal_workload(p, SIGKILL);
        p->res->got_sigkill = true;
    }
    if (p->leader_reaped && !group_exists(p->pid)) {
        p->phase = P_DONE;
        p->end_ns = now;
    }
}

/* ---- the run -------------------------------------------------------------- */

static bool proc_failed(const proc *p)
{
    return p->decided && p->res->status != KACE_PROC_OK;
}

/* The shortest span a steady rate is judged over: records read in a burst
 * (a workload whose output is buffered) are not a fast interval. */
#define STEADY_SPAN_NS 100000000LL

/* Where a workload's warm-up starts (*base; false while there is no such
 * record): its first record, or with steady_samples_per_s the first record
 * that ends an interval at least that fast (over the records of at least
 * STEADY_SPAN_NS before it; one step, where steps are longer). The scan goes on
 * from where the last call stopped: it runs on every pass of the run's loop. */
static bool warmup_base(proc *p, const kace_progress_record *r, size_t nr, int64_t *base)
{
    double fast = p->spec->steady_samples_per_s;
    if (nr == 0)
        return false;
    if (!(fast > 0)) {
        *base = r[0].t_ns;
        return true;
    }
    if (!p->steady_found) {
        size_t i = p->steady_i ? p->steady_i : 1, j = p->steady_j; /* j: the last record STEADY_SPAN_NS before r[i] */
        for (; i < nr && !p->steady_found; i++) {
            if (r[i].t_ns - r[0].t_ns < STEADY_SPAN_NS)
                continue;
            while (j + 1 < i && r[i].t_ns - r[j + 1].t_ns >= STEADY_SPAN_NS)
                j++;
            double dt = (double)(r[i].t_ns - r[j].t_ns) / 1e9;
            if (dt > 0 && (r[i].samples - r[j].samples) / dt >= fast) {
                p->steady_found = true;
                p->steady_base = r[i].t_ns;
            }
        }
        p->steady_i = i;
        p->steady_j = j;
    }
    *base = p->steady_base;
    return p->steady_found;
}

/* Start of the common steady window: when the last live workload has passed
 * its warm-up; 0 while one has not reported yet (or not fast enough). After
 * the run (final), it is taken over every workload that reported, failed ones
 * included, so that a failed workload's partial window is still measured. */
static int64_t window_start(proc *ps, size_t n, double warmup_s, bool final)
{
    int64_t start = 0;
    for (size_t i = 0; i < n; i++) {
        if (!final && proc_failed(&ps[i]))
            continue;
        size_t nr;
        const kace_progress_record *r = kace_progress_records(ps[i].progress, &nr);
        int64_t base = 0;
        if (!warmup_base(&ps[i], r, nr, &base)) {
            if (final)
                continue;
            return 0;
        }
        int64_t end = base + (int64_t)(warmup_s * 1e9);
        if (end > start)
            start = end;
    }
    return start;
}

/* The result's record counts and run time, once p's group is gone. */
static void count_records(proc *p)
{
    size_t nr;
    const kace_progress_record *r = kace_progress_records(p->progress, &nr);
    p->res->n_records = nr;
    p->res->first_record_ns = nr ? r[0].t_ns : 0;
    p->res->reported_after_sigterm = p->leader_term_ns && nr > p->records_at_term &&
                                     (!r[nr - 1].stamped || r[nr - 1].t_ns >= p->leader_term_ns);
    p->res->runtime_s = (double)(p->end_ns - p->start_ns) / 1e9;
}

kace_status kace_run(kace_ctx *ctx, const kace_proc_spec *spec, size_t n, const kace_run_options *opt_in,
                     kace_proc_result *results)
{
    if (n < 1 || n > KACE_RUN_MAX_PROCS)
        return kace_fail(ctx, KACE_ERR_INVALID, "%zu workloads to run (expected 1 to %d)", n, KACE_RUN_MAX_PROCS);
    for (size_t i = 0; i < n; i++)
        if (!spec[i].argv || !spec[i].argv[0] || !spec[i].argv[0][0])
            return kace_fail(ctx, KACE_ERR_INVALID, "workload %zu has no command", i + 1);
    kace_run_options opt = *opt_in;
    if (opt.warmup_s < 0 || !isfinite(opt.warmup_s) || !(opt.window_s >= 0) || !(opt.timeout_s >= 0))
        return kace_fail(ctx, KACE_ERR_INVALID, "warm-up %g s, window %g s, timeout %g s (expected finite, >= 0)",
                         opt.warmup_s, opt.window_s, opt.timeout_s);
    fill_defaults(&opt);

#ifdef __linux__
    prctl(PR_SET_CHILD_SUBREAPER, 1); /* reap what workloads leave behind */
#endif
    proc ps[KACE_RUN_MAX_PROCS];
    memset(ps, 0, sizeof ps);
    kace_status st = KACE_OK;
    for (size_t i = 0; i < n; i++) {
        memset(&results[i], 0, sizeof results[i]);
        results[i].exit_code = -1;
        results[i].throughput.samples_per_s = NAN;
        ps[i].spec = &spec[i];
        ps[i].res = &results[i];
        ps[i].label = spec[i].name ? spec[i].name : spec[i].argv[0];
        ps[i].progress_fd = ps[i].stderr_fd = ps[i].control_fd = -1;
        if ((st = kace_progress_new(ctx, ps[i].label, &ps[i].progress)))
            goto cleanup;
    }
    /* Processes held ahead leave the CPUs this run's workloads use (all of
     * kace's when one of them is not pinned: then none is left for them). */
    int run_cpus[CPU_SETSIZE];
    size_t n_run_cpus = 0;
    bool all_cpus = false;
    for (size_t i = 0; i < n; i++) {
        plan_cpus(&ps[i], opt.cpu_shares, i);
        all_cpus |= ps[i].n_cpus == 0;
        for (int c = 0; c < CPU_SETSIZE && n_run_cpus < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &ps[i].cpus))
                run_cpus[n_run_cpus++] = c;
    }
    if (!all_cpus)
        kace_held_move_off(opt.held, run_cpus, n_run_cpus);
    /* A runner error after some workloads started still ends them all. */
    for (size_t i = 0; i < n; i++)
        if ((st = spawn(ctx, &ps[i], opt.control)))
            break;

    int64_t t0 = kace_monotonic_ns();
    int64_t deadline = t0 + (int64_t)(opt.timeout_s * 1e9);
    int64_t next_tick = t0;
    kace_ctx *scratch = kace_ctx_new(); /* progress errors: copied into details */
    if (!scratch && !st)
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory starting the run");
    for (size_t i = 0; i < n; i++)
        ps[i].scratch = scratch;
    bool stopping = st != KACE_OK;
    for (;;) {
        int64_t now = kace_monotonic_ns();
        /* Ends the ones that must end. */
        if (stopping || (opt.cancel && *opt.cancel))
            for (size_t i = 0; i < n; i++) {
                if (!stopping)
                    decide(&ps[i], KACE_PROC_CANCELLED, "cancelled (kace was interrupted)");
                else
                    decide(&ps[i], KACE_PROC_STOPPED, "stopped: the run could not go on");
                terminate(&ps[i], &opt, now, true);
            }
        bool all_done = true;
        for (size_t i = 0; i < n; i++) {
            reap(&ps[i], &opt, now);
            if (ps[i].phase != P_DONE)
                all_done = false;
        }
        if (all_done)
            break;

        /* Completion of each live workload's window. */
        int64_t wstart = window_start(ps, n, opt.warmup_s, false);
        bool all_complete = true, any_failed = false;
        for (size_t i = 0; i < n; i++) {
            proc *p = &ps[i];
            if (proc_failed(p)) {
                any_failed = true;
                if (p->phase == P_RUNNING)
                    terminate(p, &opt, now, false);
                continue;
            }
            if (!p->complete && wstart > 0) {
                size_t nr;
                const kace_progress_record *r = kace_progress_records(p->progress, &nr);
                kace_throughput tp;
                if (nr >= 2 && kace_progress_throughput(scratch, r, nr, wstart, opt.window_s, 0, &tp) == KACE_OK)
                    p->complete = true;
            }
            if (!p->complete)
                all_complete = false;
        }
        if (any_failed && !opt.keep_going)
            for (size_t i = 0; i < n; i++) {
                if (!ps[i].complete)
                    decide(&ps[i], KACE_PROC_STOPPED, "stopped because another workload of the run failed");
                terminate(&ps[i], &opt, now, false);
            }
        if (all_complete)
            for (size_t i = 0; i < n; i++) {
                if (!proc_failed(&ps[i]))
                    decide(&ps[i], KACE_PROC_OK, "reported through its steady window; stopped by kace");
                terminate(&ps[i], &opt, now, false);
            }
        if (now >= deadline)
            for (size_t i = 0; i < n; i++) {
                size_t nr;
                kace_progress_records(ps[i].progress, &nr);
                if (ps[i].complete)
                    decide(&ps[i], KACE_PROC_OK, "reported through its steady window; stopped at the timeout");
                else if (nr == 0)
                    decide(&ps[i], KACE_PROC_TIMEOUT, "no progress record within the %g s timeout (hung, or it does "
                           "not report progress: see docs/progress-protocol.md)", opt.timeout_s);
                else if (wstart == 0 && !warmup_base(&ps[i], kace_progress_records(ps[i].progress, &nr), nr, &(int64_t){0}))
                    decide(&ps[i], KACE_PROC_TIMEOUT, "timeout after %g s: %zu progress record%s, none ending an "
                           "interval of at least %g samples/s, where its steady window would start",
                           opt.timeout_s, nr, nr == 1 ? "" : "s", ps[i].spec->steady_samples_per_s);
                else if (wstart == 0)
                    decide(&ps[i], KACE_PROC_TIMEOUT, "timeout after %g s: the steady window never started (a "
                           "workload of the run sent no progress record, or none at its steady rate)", opt.timeout_s);
                else
                    decide(&ps[i], KACE_PROC_TIMEOUT, "timeout after %g s: %zu progress record%s, the steady window "
                           "was not complete (hung or too slow?)", opt.timeout_s, nr, nr == 1 ? "" : "s");
                terminate(&ps[i], &opt, now, false);
            }

        if (opt.tick && now >= next_tick) {
            int pg[KACE_RUN_MAX_PROCS];
            for (size_t i = 0; i < n; i++)
                pg[i] = ps[i].phase == P_DONE ? 0 : (int)ps[i].pid;
            kace_run_view v = {.n = n, .pgids = pg, .now_ns = now, .window_start_ns = wstart,
                               .steady = wstart > 0 && now >= wstart};
            opt.tick(opt.tick_user, &v);
            next_tick = now + (int64_t)(opt.tick_s * 1e9);
        }

        /* Waits for output, at most 20 ms (children are checked by polling). */
        struct pollfd fds[3 * KACE_RUN_MAX_PROCS];
        int nf = 0;
        for (size_t i = 0; i < n; i++) {
            if (ps[i].progress_fd >= 0)
                fds[nf++] = (struct pollfd){.fd = ps[i].progress_fd, .events = POLLIN};
            if (ps[i].stderr_fd >= 0)
                fds[nf++] = (struct pollfd){.fd = ps[i].stderr_fd, .events = POLLIN};
            if (ps[i].control_fd >= 0)
                fds[nf++] = (struct pollfd){.fd = ps[i].control_fd, .events = POLLIN};
        }
        if (nf > 0)
            poll(fds, (nfds_t)nf, 20);
        else
            nanosleep(&(struct timespec){0, 20000000}, NULL);
        for (size_t i = 0; i < n; i++) {
            if (ps[i].control_fd >= 0)
                read_control(&ps[i]);
            if (ps[i].progress_fd >= 0)
                read_progress(scratch, &ps[i]);
            if (ps[i].stderr_fd >= 0)
                read_stderr(&ps[i], opt.stderr_fd);
        }
    }

    /* Results. */
    int64_t wstart = window_start(ps, n, opt.warmup_s, true);
    for (size_t i = 0; i < n; i++) {
        proc *p = &ps[i];
        if (p->progress_fd >= 0)
            read_progress(scratch, p);
        if (p->stderr_fd >= 0)
            read_stderr(p, opt.stderr_fd);
        size_t nr;
        const kace_progress_record *r = kace_progress_records(p->progress, &nr);
        count_records(p);
        if (wstart > 0 && nr >= 2 && p->res->status != KACE_PROC_BAD_PROGRESS)
            kace_progress_throughput(scratch, r, nr, wstart, opt.window_s, 1, &p->res->throughput);
    }
    kace_ctx_free(&scratch);
cleanup:
    for (size_t i = 0; i < n; i++) {
        close_fd(&ps[i].progress_fd);
        close_fd(&ps[i].stderr_fd);
        close_fd(&ps[i].control_fd);
        kace_progress_free(&ps[i].progress);
        free_env(ps[i].envp);
    }
    return st;
}

/* ---- long-lived workloads ------------------------------------------------ */

struct kace_live {
    proc p;
    kace_proc_result res;
    kace_run_options opt;
    bool last_was_pause;     /* the last message sent was pause ... */
    size_t paused_before;    /* ... and it had answered "paused" this often before it */
};

kace_status kace_live_start(kace_ctx *ctx, const kace_proc_spec *spec, const kace_run_options *opt,
                            kace_live **out)
{
    *out = NULL;
    if (!spec->argv || !spec->argv[0] || !spec->argv[0][0])
        return kace_fail(ctx, KACE_ERR_INVALID, "a long-lived workload without a command");
    kace_live *l = calloc(1, sizeof *l);
    if (!l)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory starting a workload");
    l->opt = *opt;
    fill_defaults(&l->opt);
    l->res.exit_code = -1;
    l->res.throughput.samples_per_s = NAN;
    proc *p = &l->p;
    p->spec = spec;
    p->res = &l->res;
    p->label = spec->name ? spec->name : spec->argv[0];
    p->progress_fd = p->stderr_fd = p->control_fd = -1;
    kace_status st = kace_progress_new(ctx, p->label, &p->progress);
    if (!st && !(p->scratch = kace_ctx_new()))
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory starting workload %s", p->label);
#ifdef __linux__
    prctl(PR_SET_CHILD_SUBREAPER, 1); /* reap what workloads leave behind */
#endif
    plan_cpus(p, 0, SIZE_MAX); /* its spec's CPUs only: a pool gives each member its share */
    if (!st)
        st = spawn(ctx, p, true);
    if (st) {
        kace_live_free(&l);
        return st;
    }
    *out = l;
    return KACE_OK;
}

static void live_read(kace_live *l)
{
    proc *p = &l->p;
    if (p->control_fd >= 0)
        read_control(p);
    if (p->progress_fd >= 0)
        read_progress(p->scratch, p);
    if (p->stderr_fd >= 0)
        read_stderr(p, l->opt.stderr_fd);
}

void kace_live_wait(kace_live *const *live, size_t n, int64_t deadline_ns)
{
    struct pollfd fds[3 * KACE_LIVE_WAIT_MAX];
    nfds_t nf = 0;
    for (size_t i = 0; i < n && nf + 3 <= sizeof fds / sizeof *fds; i++) {
        const proc *p = &live[i]->p;
        if (p->phase == P_DONE)
            continue;
        if (p->progress_fd >= 0)
            fds[nf++] = (struct pollfd){.fd = p->progress_fd, .events = POLLIN};
        if (p->stderr_fd >= 0)
            fds[nf++] = (struct pollfd){.fd = p->stderr_fd, .events = POLLIN};
        if (p->control_fd >= 0)
            fds[nf++] = (struct pollfd){.fd = p->control_fd, .events = POLLIN};
    }
    /* At most 20 ms: exits are seen by polling waitpid, as in kace_run. */
    int64_t left_ms = (deadline_ns - kace_monotonic_ns()) / 1000000;
    int wait_ms = left_ms < 0 ? 0 : left_ms > 20 ? 20 : (int)left_ms;
    if (nf > 0)
        poll(fds, nf, wait_ms);
    else if (wait_ms > 0)
        nanosleep(&(struct timespec){0, (long)wait_ms * 1000000L}, NULL);
    int64_t now = kace_monotonic_ns();
    for (size_t i = 0; i < n; i++) {
        if (live[i]->p.phase == P_DONE)
            continue;
        live_read(live[i]);
        reap(&live[i]->p, &live[i]->opt, now);
    }
}

bool kace_live_send(kace_live *l, kace_control_msg m)
{
    proc *p = &l->p;
    if (p->phase != P_RUNNING || p->leader_reaped || p->pid <= 0)
        return false;
    if (m == KACE_CONTROL_STOP) {
        kace_live_stop(&l, 1, kace_monotonic_ns() + (int64_t)(l->opt.term_grace_max_s * 1e9));
        return true;
    }
    live_read(l);
    size_t nr;
    kace_progress_records(p->progress, &nr);
    if (!l->res.speaks_control && nr > 0) {
        /* It reported without saying hello: it does not read the channel. */
        if (kill(-p->pid, m == KACE_CONTROL_PAUSE ? SIGSTOP : SIGCONT) != 0)
            return false;
        p->sigstopped = m == KACE_CONTROL_PAUSE;
        return true;
    }
    /* A speaker, or one that has not reached its first report: the message
     * waits in the socket until it does. */
    l->last_was_pause = m == KACE_CONTROL_PAUSE;
    l->paused_before = p->answers.paused;
    return send_control(p, m);
}

void kace_live_stop(kace_live *const *live, size_t n, int64_t deadline_ns)
{
    int64_t now = kace_monotonic_ns();
    for (size_t i = 0; i < n; i++) {
        kace_live *l = live[i];
        proc *p = &l->p;
        if (p->phase != P_RUNNING)
            continue;
        live_read(l);
        reap(p, &l->opt, now);
        if (p->phase != P_RUNNING)
            continue; /* it had ended on its own */
        l->res.paused_at_stop = l->res.speaks_control && l->last_was_pause && p->answers.paused > l->paused_before;
        decide(p, KACE_PROC_OK, "stopped by kace");
        terminate(p, &l->opt, now, now >= deadline_ns);
        if (p->sigstopped) { /* a stopped group takes its SIGTERM once continued */
            kill(-p->pid, SIGCONT);
            p->sigstopped = false;
        }
    }
    bool hurried = false;
    for (;;) {
        bool all_done = true;
        for (size_t i = 0; i < n; i++)
            if (live[i]->p.phase != P_DONE)
                all_done = false;
        if (all_done)
            break;
        kace_live_wait(live, n, kace_monotonic_ns() + 20000000LL);
        now = kace_monotonic_ns();
        if (!hurried && now >= deadline_ns) {
            hurried = true;
            for (size_t i = 0; i < n; i++)
                terminate(&live[i]->p, &live[i]->opt, now, true);
        }
    }
    for (size_t i = 0; i < n; i++) {
        live_read(live[i]);
        count_records(&live[i]->p);
    }
}

const kace_progress_record *kace_live_records(const kace_live *l, size_t *n)
{
    return kace_progress_records(l->p.progress, n);
}

kace_control_answers kace_live_answers(const kace_live *l)
{
    return l->p.answers;
}

bool kace_live_ended(const kace_live *l)
{
    return l->p.leader_reaped || l->p.pid <= 0 || l->p.phase == P_DONE;
}

const kace_proc_result *kace_live_result(const kace_live *l)
{
    return &l->res;
}

void kace_live_gate_opened(kace_live *l)
{
    l->res.gate_open_ns = kace_monotonic_ns();
}

void kace_live_free(kace_live **lp)
{
    kace_live *l = *lp;
    if (!l)
        return;
    proc *p = &l->p;
    if (p->pid > 0 && p->phase != P_DONE) {
        kill(-p->pid, SIGKILL);
        if (!p->leader_reaped)
            kill(p->pid, SIGKILL);
        while (waitpid(-p->pid, NULL, 0) > 0 || (errno == EINTR))
            ;
        if (!p->leader_reaped)
            waitpid(p->pid, NULL, 0);
    }
    close_fd(&p->progress_fd);
    close_fd(&p->stderr_fd);
    close_fd(&p->control_fd);
    kace_progress_free(&p->progress);
    free_env(p->envp);
    kace_ctx_free(&p->scratch);
    free(l);
    *lp = NULL;
}
