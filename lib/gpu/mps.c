/* A private MPS control daemon (see include/kace/mps.h). */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kace/mps.h"

extern char **environ;

#define MPS_PATH_MAX 1024
#define MPS_MAX_PIDS 64
#define MPS_MAX_HELD 64

struct kace_mps {
    char run_dir[MPS_PATH_MAX], pipe_dir[MPS_PATH_MAX], log_dir[MPS_PATH_MAX];
    char control[MPS_PATH_MAX];      /* "" when not found (start reports control_error) */
    char control_error[MPS_PATH_MAX + 200];
    char pipe_env[MPS_PATH_MAX + 32], log_env[MPS_PATH_MAX + 32];
    const char *client_env[3];
    char **envp; /* environ with our two variables, for the control program */
    int lock_fd;
    double start_timeout_s, quit_timeout_s, kill_grace_s;
    /* Process groups kace holds at their CUDA start (kace_mps_hold): they
     * carry our pipe folder in their environment but are no client yet. */
    pid_t held[MPS_MAX_HELD];
    int n_held;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* ---- the processes of this instance ------------------------------------ */

/* Whether /proc/<pid>/environ holds exactly `want` (a "NAME=value" entry). */
static bool environ_has(const char *pid, const char *want)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%s/environ", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    /* Entries are NUL-separated; read it whole (bounded) and compare each. */
    char buf[65536];
    size_t len = 0;
    ssize_t n;
    while (len < sizeof buf - 1 && (n = read(fd, buf + len, sizeof buf - 1 - len)) > 0)
        len += (size_t)n;
    close(fd);
    buf[len] = '\0';
    size_t want_len = strlen(want);
    for (size_t at = 0; at < len;) {
        size_t entry = strlen(buf + at);
        if (entry == want_len && memcmp(buf + at, want, want_len) == 0)
            return true;
        at += entry + 1;
    }
    return false;
}

static bool is_zombie(const char *pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return true; /* gone */
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* "pid (comm) S ...": the state follows the last ')'. */
    const char *close_paren = strrchr(buf, ')');
    return !close_paren || close_paren[1] == '\0' || close_paren[2] == 'Z' || close_paren[2] == 'X';
}

static bool is_held(const kace_mps *m, pid_t pid)
{
    if (m->n_held == 0)
        return false;
    pid_t group = getpgid(pid);
    for (int i = 0; i < m->n_held; i++)
        if (m->held[i] == pid || (group > 0 && m->held[i] == group))
            return true;
    return false;
}

/* Live processes whose environment names our pipe folder: the daemon, the
 * MPS server it started and any client still running. Zombies are reaped
 * when they are ours (kace may be their subreaper) and never counted.
 * Processes of a held group have not reached their CUDA start (kace holds
 * them at the injection library's gate): not of the instance yet. */
static int instance_pids(const kace_mps *m, pid_t *pids, int max)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    int n = 0;
    pid_t self = getpid();
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        pid_t pid = (pid_t)strtol(e->d_name, NULL, 10);
        if (pid == self || !environ_has(e->d_name, m->pipe_env) || is_held(m, pid))
            continue;
        if (is_zombie(e->d_name)) {
            waitpid(pid, NULL, WNOHANG);
            continue;
        }
        if (n < max)
            pids[n] = pid;
        n++;
    }
    closedir(d);
    return n < max ? n : max;
}

/* Waits up to timeout_s for the instance to have no process left. */
static bool wait_gone(const kace_mps *m, double timeout_s)
{
    pid_t pids[MPS_MAX_PIDS];
    double end = now_s() + timeout_s;
    for (;;) {
        if (instance_pids(m, pids, MPS_MAX_PIDS) == 0)
            return true;
        if (now_s() >= end)
            return false;
        sleep_s(0.02);
    }
}

static void signal_instance(const kace_mps *m, int sig)
{
    pid_t pids[MPS_MAX_PIDS];
    int n = instance_pids(m, pids, MPS_MAX_PIDS);
    for (int i = 0; i < n; i++)
        kill(pids[i], sig);
}

/* ---- running the control program ----------------------------------------- */

static void read_tail(const char *path, char *out, size_t size)
{
    out[0] = '\0';
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    if (fseek(f, 0, SEEK_END) == 0) {
        long len = ftell(f);
        long from = len > (long)size - 1 ? len - (long)size + 1 : 0;
        fseek(f, from, SEEK_SET);
    }
    size_t n = fread(out, 1, size - 1, f);
    fclose(f);
    out[n] = '\0';
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' '))
        out[--n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (out[i] == '\n')
            out[i] = ' ';
}

/* Writes text to a pipe whose reader may already have exited (a control
 * program that found no daemon): EPIPE, not SIGPIPE, which would kill the
 * caller. SIGPIPE is blocked in this thread only and a pending one consumed,
 * so the process's own disposition is left alone. A short text fits the pipe
 * buffer, so a reader that never reads does not block us. */
static void write_no_sigpipe(int fd, const char *text)
{
    sigset_t pipe_only, old;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    bool was_pending = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
    ssize_t w = write(fd, text, strlen(text));
    if (w < 0 && errno == EPIPE && !was_pending) {
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_only, NULL, &zero) < 0 && errno == EINTR)
            ;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* Runs the control program (with "-d" or as a client fed stdin_text) in its
 * own process group, its output to run_dir/control-client.log
 * (control-start.log for -d). Returns 0 and its exit status, or -1 when it
 * could not run or overran timeout_s (then its group is killed). */
static int run_control(kace_mps *m, const char *arg, const char *stdin_text, double timeout_s, int *exit_status,
                       char *output, size_t output_size)
{
    /* The daemon (-d) may keep its stdout: it gets a file of its own, so that
     * nothing it writes later lands in a query's answer (control-client.log,
     * truncated for each query). */
    char out_path[MPS_PATH_MAX + 32];
    snprintf(out_path, sizeof out_path, "%s/%s", m->run_dir,
             arg && strcmp(arg, "-d") == 0 ? "control-start.log" : "control-client.log");
    output[0] = '\0';
    int in_pipe[2];
    if (pipe(in_pipe) != 0)
        return -1;
    fcntl(in_pipe[0], F_SETFD, FD_CLOEXEC);
    fcntl(in_pipe[1], F_SETFD, FD_CLOEXEC);
    int out_fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out_fd < 0) {
        close(in_pipe[0]);
        close(in_pipe[1]);
        return -1;
    }
    char *argv[3] = {m->control, (char *)arg, NULL};
    pid_t pid = fork();
    if (pid == 0) {
        /* Own group: a Ctrl-C meant for kace does not reach it. */
        setpgid(0, 0);
        dup2(in_pipe[0], STDIN_FILENO);
        dup2(out_fd, STDOUT_FILENO);
        dup2(out_fd, STDERR_FILENO);
        execve(m->control, argv, m->envp);
        _exit(127);
    }
    close(in_pipe[0]);
    close(out_fd);
    if (pid < 0) {
        close(in_pipe[1]);
        return -1;
    }
    setpgid(pid, pid);
    if (stdin_text)
        write_no_sigpipe(in_pipe[1], stdin_text);
    close(in_pipe[1]);
    int status = 0;
    double end = now_s() + timeout_s;
    int rc = -1;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) {
            rc = 0;
            break;
        }
        if (r < 0 && errno != EINTR)
            break;
        if (now_s() >= end) {
            kill(-pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
            snprintf(output, output_size, "%.300s %s did not return within %.0f s", m->control, arg ? arg : "(client)",
                     timeout_s);
            return -1;
        }
        sleep_s(0.01);
    }
    if (rc == 0) {
        *exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        read_tail(out_path, output, output_size);
    }
    return rc;
}

/* Quits the instance and escalates; true when no process of it is left. */
static bool shut_down(kace_mps *m, kace_mps_stop_report *r)
{
    pid_t pids[MPS_MAX_PIDS];
    r->n_processes = instance_pids(m, pids, MPS_MAX_PIDS);
    r->was_running = r->n_processes > 0;
    if (!r->was_running)
        return true;
    int status = -1;
    char output[512];
    if (m->control[0] &&
        run_control(m, NULL, "quit\n", m->quit_timeout_s, &status, output, sizeof output) == 0 && status == 0)
        r->quit_accepted = true;
    if (wait_gone(m, r->quit_accepted ? m->quit_timeout_s : 0.2))
        return true;
    r->sent_sigterm = true;
    signal_instance(m, SIGTERM);
    if (wait_gone(m, m->kill_grace_s))
        return true;
    r->sent_sigkill = true;
    signal_instance(m, SIGKILL);
    return wait_gone(m, m->kill_grace_s);
}

/* ---- start and stop ----------------------------------------------------- */

/* An absolute path for the control program: as given when it holds a '/',
 * else the first executable of that name in PATH. */
static bool resolve_program(const char *name, char *out, size_t size)
{
    if (strchr(name, '/')) {
        snprintf(out, size, "%s", name);
        return access(out, X_OK) == 0;
    }
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        size_t len = strcspn(path, ":");
        snprintf(out, size, "%.*s/%s", (int)len, len ? path : ".", name);
        if (access(out, X_OK) == 0)
            return true;
        path += len + (path[len] == ':');
    }
    return false;
}

static int make_dir(const char *path)
{
    return mkdir(path, 0700) == 0 || errno == EEXIST ? 0 : -1;
}

/* environ without any CUDA_MPS_* variable, plus our pipe and log folders.
 * An inherited CUDA_MPS_ACTIVE_THREAD_PERCENTAGE would become the daemon's
 * default and silently cap every client (a client can only lower it), and
 * CUDA_MPS_PROTOCOL_VERSION would switch the control commands' syntax. */
static char **build_envp(kace_mps *m)
{
    size_t n = 0;
    while (environ && environ[n])
        n++;
    char **envp = calloc(n + 3, sizeof *envp);
    if (!envp)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "CUDA_MPS_", 9) != 0)
            envp[k++] = environ[i];
    envp[k++] = m->pipe_env;
    envp[k++] = m->log_env;
    envp[k] = NULL;
    return envp;
}

static void mps_free(kace_mps *m)
{
    if (!m)
        return;
    if (m->lock_fd >= 0)
        close(m->lock_fd); /* releases the flock */
    free(m->envp);
    free(m);
}

kace_status kace_mps_open(kace_ctx *ctx, const kace_mps_options *opt, kace_mps **out)
{
    *out = NULL;
    kace_mps_options defaults = {0};
    if (!opt)
        opt = &defaults;
    kace_mps *m = calloc(1, sizeof *m);
    if (!m)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    m->lock_fd = -1;
    m->start_timeout_s = opt->start_timeout_s > 0 ? opt->start_timeout_s : 10;
    m->quit_timeout_s = opt->quit_timeout_s > 0 ? opt->quit_timeout_s : 10;
    m->kill_grace_s = opt->kill_grace_s > 0 ? opt->kill_grace_s : 3;
    kace_status st = KACE_OK;

    const char *control = opt->control;
    if (!control || !*control)
        control = getenv(KACE_MPS_CONTROL_ENV);
    if (!control || !*control)
        control = KACE_MPS_DEFAULT_CONTROL;
    /* Missing is an error only for starting a daemon: a time-sliced
     * session needs no control program (a stale daemon gets signals). */
    if (!resolve_program(control, m->control, sizeof m->control)) {
        m->control[0] = '\0';
        snprintf(m->control_error, sizeof m->control_error,
                 "%.900s: MPS control program not found or not executable (it comes with the NVIDIA driver; set "
                 "$%s, or measure without MPS)",
                 control, KACE_MPS_CONTROL_ENV);
    }
    if (opt->run_dir && *opt->run_dir) {
        snprintf(m->run_dir, sizeof m->run_dir, "%s", opt->run_dir);
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(m->run_dir, sizeof m->run_dir, "%s/kace-mps-%ld", tmp && *tmp ? tmp : "/tmp", (long)getuid());
    }
    /* The pipe folder holds UNIX sockets, whose paths must stay short. */
    if (strlen(m->run_dir) > 80) {
        st = kace_fail(ctx, KACE_ERR_INVALID, "%s: MPS run folder path is too long (at most 80 characters: MPS "
                       "puts UNIX sockets in it)", m->run_dir);
        goto fail;
    }
    snprintf(m->pipe_dir, sizeof m->pipe_dir, "%.900s/pipe", m->run_dir);
    snprintf(m->log_dir, sizeof m->log_dir, "%.900s/log", m->run_dir);
    snprintf(m->pipe_env, sizeof m->pipe_env, "CUDA_MPS_PIPE_DIRECTORY=%s", m->pipe_dir);
    snprintf(m->log_env, sizeof m->log_env, "CUDA_MPS_LOG_DIRECTORY=%s", m->log_dir);
    m->client_env[0] = m->pipe_env;
    m->client_env[1] = m->log_env;
    m->client_env[2] = NULL;
    if (make_dir(m->run_dir) || make_dir(m->pipe_dir) || make_dir(m->log_dir)) {
        st = kace_fail(ctx, KACE_ERR_IO, "%s: cannot create the MPS run folder: %s", m->run_dir, strerror(errno));
        goto fail;
    }
    if (!(m->envp = build_envp(m))) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto fail;
    }

    char lock_path[MPS_PATH_MAX + 16];
    snprintf(lock_path, sizeof lock_path, "%s/lock", m->run_dir);
    m->lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (m->lock_fd < 0) {
        st = kace_fail(ctx, KACE_ERR_IO, "%s: %s", lock_path, strerror(errno));
        goto fail;
    }
    if (flock(m->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        char holder[32] = "";
        ssize_t n = pread(m->lock_fd, holder, sizeof holder - 1, 0);
        holder[n > 0 ? n : 0] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        st = kace_fail(ctx, KACE_ERR_IO, "%s: MPS run folder in use by another kace (pid %s); wait for it or give "
                       "another run folder", m->run_dir, *holder ? holder : "?");
        goto fail;
    }
    char me[32];
    int len = snprintf(me, sizeof me, "%ld\n", (long)getpid());
    if (ftruncate(m->lock_fd, 0) != 0 || pwrite(m->lock_fd, me, (size_t)len, 0) != len)
        kace_log(ctx, KACE_LOG_WARN, "%s: could not write the lock holder's pid", lock_path);

    /* A daemon of a kace that was killed (SIGKILL) before it could quit it. */
    pid_t pids[MPS_MAX_PIDS];
    int stale = instance_pids(m, pids, MPS_MAX_PIDS);
    if (stale > 0) {
        kace_log(ctx, KACE_LOG_WARN, "%s: %d MPS process(es) left by an earlier kace (pid %ld...); shutting them down",
                 m->pipe_dir, stale, (long)pids[0]);
        kace_mps_stop_report r = {0};
        if (!shut_down(m, &r)) {
            st = kace_fail(ctx, KACE_ERR_IO, "%s: an earlier MPS daemon (pid %ld) survives SIGKILL", m->pipe_dir,
                           (long)pids[0]);
            goto fail;
        }
    }
    *out = m;
    return KACE_OK;
fail:
    mps_free(m);
    return st;
}

/* Runs `control -d` and waits to see the daemon; on failure whatever part
 * of it came up goes down again. */
static kace_status start_daemon(kace_ctx *ctx, kace_mps *m)
{
    if (!m->control[0])
        return kace_fail(ctx, KACE_ERR_UNSUPPORTED, "%s", m->control_error);
    /* The daemon appends to its logs: an earlier session's lines go to
     * *.old, so that what a message quotes belongs to this daemon. */
    const char *const logs[] = {"control.log", "server.log"};
    for (int i = 0; i < 2; i++) {
        char from[MPS_PATH_MAX + 32], to[MPS_PATH_MAX + 40];
        snprintf(from, sizeof from, "%s/%s", m->log_dir, logs[i]);
        snprintf(to, sizeof to, "%s.old", from);
        rename(from, to);
    }
    kace_status st = KACE_OK;
    pid_t pids[MPS_MAX_PIDS];
    int status = -1;
    char output[512], log_tail[512], log_path[MPS_PATH_MAX + 16];
    snprintf(log_path, sizeof log_path, "%s/control.log", m->log_dir);
    if (run_control(m, "-d", NULL, m->start_timeout_s, &status, output, sizeof output) != 0 || status != 0) {
        read_tail(log_path, log_tail, sizeof log_tail);
        if (status > 0)
            st = kace_fail(ctx, KACE_ERR_IO, "%s -d failed with status %d: %s%s%s", m->control, status,
                           *output ? output : "(no output)", *log_tail ? "; its log: " : "", log_tail);
        else
            st = kace_fail(ctx, KACE_ERR_IO, "%s -d: %s", m->control, *output ? output : "could not be run");
        goto fail_running;
    }
    /* -d returns once it has forked: wait to see the daemon itself. */
    double end = now_s() + m->start_timeout_s;
    while (instance_pids(m, pids, MPS_MAX_PIDS) == 0) {
        if (now_s() >= end) {
            read_tail(log_path, log_tail, sizeof log_tail);
            st = kace_fail(ctx, KACE_ERR_IO, "%s -d returned but no daemon is running%s%s", m->control,
                           *log_tail ? "; its log: " : "", log_tail);
            goto fail_running;
        }
        sleep_s(0.01);
    }
    return KACE_OK;
fail_running: {
    kace_mps_stop_report r = {0};
    shut_down(m, &r);
}
    return st;
}

kace_status kace_mps_start(kace_ctx *ctx, const kace_mps_options *opt, kace_mps **out)
{
    kace_mps *m = NULL;
    kace_status st = kace_mps_open(ctx, opt, &m);
    if (st)
        return st;
    if ((st = start_daemon(ctx, m))) {
        mps_free(m);
        return st;
    }
    *out = m;
    return KACE_OK;
}

kace_status kace_mps_restart(kace_ctx *ctx, kace_mps *m)
{
    if (kace_mps_alive(m))
        return KACE_OK;
    return start_daemon(ctx, m);
}

kace_status kace_mps_quit(kace_ctx *ctx, kace_mps *m, kace_mps_stop_report *report)
{
    kace_mps_stop_report r = {0};
    kace_status st = KACE_OK;
    if (!shut_down(m, &r)) {
        pid_t pids[MPS_MAX_PIDS];
        int n = instance_pids(m, pids, MPS_MAX_PIDS);
        st = kace_fail(ctx, KACE_ERR_IO, "%s: %d MPS process(es) (pid %ld...) survive SIGKILL", m->pipe_dir, n,
                       n > 0 ? (long)pids[0] : 0L);
    }
    if (report)
        *report = r;
    return st;
}

const char *const *kace_mps_client_env(const kace_mps *m)
{
    return m->client_env;
}

const char *kace_mps_pipe_dir(const kace_mps *m)
{
    return m->pipe_dir;
}

const char *kace_mps_log_dir(const kace_mps *m)
{
    return m->log_dir;
}

bool kace_mps_hold(kace_mps *m, int pgid)
{
    if (!m || pgid <= 0)
        return false;
    for (int i = 0; i < m->n_held; i++)
        if (m->held[i] == pgid)
            return true;
    if (m->n_held == MPS_MAX_HELD)
        return false;
    m->held[m->n_held++] = pgid;
    return true;
}

void kace_mps_unhold(kace_mps *m, int pgid)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_held; i++)
        if (m->held[i] == pgid) {
            m->held[i] = m->held[--m->n_held];
            return;
        }
}

bool kace_mps_alive(const kace_mps *m)
{
    pid_t pids[MPS_MAX_PIDS];
    if (!m)
        return false;
    return instance_pids(m, pids, MPS_MAX_PIDS) > 0;
}

kace_status kace_mps_stop(kace_ctx *ctx, kace_mps **mp, kace_mps_stop_report *report)
{
    if (report)
        *report = (kace_mps_stop_report){0};
    if (!mp || !*mp)
        return KACE_OK;
    kace_mps *m = *mp;
    *mp = NULL;
    kace_status st = kace_mps_quit(ctx, m, report);
    mps_free(m);
    return st;
}

/* ---- what the daemon says ------------------------------------------------ */

/* Reads at most size-1 bytes from the end of path (whole lines: a cut first
 * line is dropped). Returns the length, 0 when the file is missing or empty. */
static size_t read_end(const char *path, char *out, size_t size)
{
    out[0] = '\0';
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    bool cut = false;
    if (fseek(f, 0, SEEK_END) == 0) {
        long len = ftell(f);
        cut = len > (long)size - 1;
        fseek(f, cut ? len - (long)size + 1 : 0, SEEK_SET);
    }
    size_t n = fread(out, 1, size - 1, f);
    fclose(f);
    out[n] = '\0';
    if (cut) {
        char *nl = strchr(out, '\n');
        size_t skip = nl ? (size_t)(nl + 1 - out) : 0;
        memmove(out, out + skip, n - skip + 1);
        n -= skip;
    }
    return n;
}

/* Whether line is the control daemon's "Server PID not found" for query
 * "get_client_list PID\n" (the same PID, digits only). */
static bool server_not_found(const char *query, const char *line)
{
    const char *ask = "get_client_list ", *pre = "Server ", *post = " not found";
    if (strncmp(query, ask, strlen(ask)) != 0 || strncmp(line, pre, strlen(pre)) != 0)
        return false;
    const char *pid = query + strlen(ask), *got = line + strlen(pre);
    size_t n = strspn(pid, "0123456789");
    return n > 0 && pid[n] == '\n' && strncmp(got, pid, n) == 0 && strcmp(got + n, post) == 0;
}

/* Sends query (get_server_list, get_client_list PID) and reads its answer:
 * one PID per line, nothing else, or "Server PID not found" (KACE_ERR_NOT_FOUND). */
static kace_status ask_pids(kace_ctx *ctx, kace_mps *m, const char *query, const char *kind, int *pids, size_t max,
                           size_t *n_out)
{
    *n_out = 0;
    if (!m->control[0])
        return kace_fail(ctx, KACE_ERR_UNSUPPORTED, "%s", m->control_error);
    char what[64];
    snprintf(what, sizeof what, "%.*s", (int)strcspn(query, "\n"), query);
    int status = -1;
    char tail[512];
    /* Asked while workloads run: a control program that hangs must not stall the run long. */
    double timeout = m->start_timeout_s < 3 ? m->start_timeout_s : 3;
    if (run_control(m, NULL, query, timeout, &status, tail, sizeof tail) != 0)
        return kace_fail(ctx, KACE_ERR_IO, "%s: %s", what, *tail ? tail : "the control program could not run");
    if (status != 0)
        return kace_fail(ctx, KACE_ERR_IO, "%s: %s exited with status %d: %s", what, m->control, status,
                         *tail ? tail : "(no output)");
    char path[MPS_PATH_MAX + 32], text[8192];
    snprintf(path, sizeof path, "%s/control-client.log", m->run_dir);
    read_end(path, text, sizeof text);
    int line = 0;
    for (char *p = text; *p;) {
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = '\0';
        line++;
        char *a = p, *b = p + strlen(p);
        while (*a == ' ' || *a == '\t')
            a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t' || b[-1] == '\r'))
            *--b = '\0';
        if (*a) {
            long v = 0;
            const char *d = a;
            while (*d >= '0' && *d <= '9' && v <= INT_MAX)
                v = v * 10 + (*d++ - '0');
            /* The real control daemon's answer for a PID that is no server (seen on an
             * H200): the server went between get_server_list and this query. */
            if (*d && server_not_found(query, a))
                return kace_fail(ctx, KACE_ERR_NOT_FOUND, "%s: the MPS control daemon says '%s': that server has gone",
                                 what, a);
            if (*d || v < 1 || v > INT_MAX)
                return kace_fail(ctx, KACE_ERR_PARSE,
                                 "%s:%d:%d: expected an MPS %s PID, got '%.60s' (control program %s)", what, line,
                                 (int)(a - p) + 1, kind, a, m->control);
            if (*n_out < max)
                pids[*n_out] = (int)v;
            (*n_out)++;
        }
        if (!nl)
            break;
        p = nl + 1;
    }
    if (*n_out > max)
        *n_out = max;
    return KACE_OK;
}

kace_status kace_mps_server_pids(kace_ctx *ctx, kace_mps *m, int *pids, size_t max, size_t *n_out)
{
    return ask_pids(ctx, m, "get_server_list\n", "server", pids, max, n_out);
}

kace_status kace_mps_client_pids(kace_ctx *ctx, kace_mps *m, int server_pid, int *pids, size_t max, size_t *n_out)
{
    char query[64];
    snprintf(query, sizeof query, "get_client_list %d\n", server_pid);
    return ask_pids(ctx, m, query, "client", pids, max, n_out);
}

void kace_mps_server_log_tail(const kace_mps *m, char *out, size_t size)
{
    if (size == 0)
        return;
    out[0] = '\0';
    char path[MPS_PATH_MAX + 32], text[4096];
    const char *names[] = {"server.log", "control.log"};
    size_t n = 0;
    const char *name = NULL;
    for (int i = 0; i < 2 && n == 0; i++) {
        snprintf(path, sizeof path, "%s/%s", m->log_dir, names[i]);
        n = read_end(path, text, sizeof text);
        name = names[i];
    }
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == ' ' || text[n - 1] == '\r'))
        text[--n] = '\0';
    if (n == 0)
        return;
    /* Its last four lines, joined with " | " for a one-line message. */
    const char *from = text + n;
    for (int lines = 0; from > text; from--)
        if (from[-1] == '\n' && ++lines == 4)
            break;
    size_t at = (size_t)snprintf(out, size, "%s: ", name);
    for (const char *q = from; *q && at + 1 < size; q++) {
        if (*q == '\r')
            continue;
        if (*q == '\n') {
            at += (size_t)snprintf(out + at, size - at, " | ");
            continue;
        }
        out[at++] = *q;
        out[at] = '\0';
    }
    if (at >= size)
        out[size - 1] = '\0';
}

/* ---- MPS percentage lists ------------------------------------------------- */

kace_status kace_mps_pct_parse_at(kace_ctx *ctx, const char *text, const char *origin, int line, int col0, int k,
                                  int max, int *pct, int *n_out)
{
    int n = 0;
    const char *p = text;
    if (n_out)
        *n_out = 0;
    for (;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        int col = col0 + (int)(p - text);
        if (!isdigit((unsigned char)*p))
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:%d: expected an MPS percentage 1..100, got '%.20s'", origin,
                             line, col, *p ? p : "end of list");
        long v = 0;
        while (isdigit((unsigned char)*p)) {
            if (v <= 1000)
                v = v * 10 + (*p - '0');
            p++;
        }
        if (v < 1 || v > 100)
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:%d: MPS percentage out of range 1..100", origin, line, col);
        if (n >= max)
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:%d: more than %d MPS percentages", origin, line, col, max);
        pct[n++] = (int)v;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '\0')
            break;
        if (*p != ',')
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:%d: expected ',' between MPS percentages, got '%c'", origin,
                             line, col0 + (int)(p - text), *p);
        p++;
    }
    if (k > 0 && n != k)
        return kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:%d: %d MPS percentage(s) for %d workloads", origin, line, col0, n,
                         k);
    if (n_out)
        *n_out = n;
    return KACE_OK;
}

kace_status kace_mps_pct_parse(kace_ctx *ctx, const char *text, const char *origin, int k, int max, int *pct,
                               int *n_out)
{
    return kace_mps_pct_parse_at(ctx, text, origin, 1, 1, k, max, pct, n_out);
}
