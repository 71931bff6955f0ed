/* A stand-in for nvidia-cuda-mps-control, for the MPS lifecycle tests on
 * machines without a GPU. It is a real daemon that behaves like the real one
 * where kace relies on it:
 *
 *   kace-test-mps-control -d     daemonize: the parent returns 0 once the
 *                                daemon is up; the daemon creates the named
 *                                pipe $CUDA_MPS_PIPE_DIRECTORY/control and
 *                                $CUDA_MPS_LOG_DIRECTORY/control.log, starts a
 *                                stand-in "server" child and reads commands
 *                                from the pipe until "quit"
 *   kace-test-mps-control        client: sends each stdin line to the daemon's
 *                                pipe; fails when no daemon reads it. A
 *                                "get_..." query waits for the daemon's answer
 *                                and prints it on the client's stdout, as the
 *                                real control program does: get_server_list
 *                                prints the server's PID (one per line)
 *
 * The answer travels through a file: the client appends " @PATH" to the
 * query, the daemon writes PATH.tmp and renames it to PATH.
 *
 * $KACE_TEST_MPS_MODE picks a misbehaviour (default "normal"):
 *   refuse        -d fails with status 1 and a message (daemon never starts)
 *   die           the daemon exits right after -d returned (stale pipe left)
 *   ignore-quit   the daemon logs "quit" but goes on; dies on SIGTERM
 *   stubborn      ignores "quit" and SIGTERM: only SIGKILL ends it
 *   no-server     the daemon runs but never starts a server (as when the
 *                 real server fails to start): get_server_list prints
 *                 nothing, and server.log says why
 *   bad-list      get_server_list answers "server 1234" (not a bare PID)
 *   stale-server  get_server_list names a server that has gone (999998, whose
 *                 get_client_list answers "Server 999998 not found", as the
 *                 real daemon does) before the live one
 *   no-clients    get_client_list answers nothing (the workloads did not
 *                 connect: they ran without MPS)
 *   no-client-list  get_client_list is unknown (the control program fails)
 *   cuda-start    as the real daemon: no server until the first client
 *                 connects at its CUDA start ("connect PID", which
 *                 tests/fake_cuda's program sends under KACE_FAKE_MPS_CONNECT=1),
 *                 get_client_list names the connected clients still alive, and
 *                 a client past $KACE_TEST_MPS_MAX_CLIENTS (default 48) is
 *                 refused
 *
 * get_client_list SERVER answers the processes that would be its clients:
 * those whose environment names this daemon's pipe folder, other than the
 * stand-in's own processes.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *mode(void)
{
    const char *m = getenv("KACE_TEST_MPS_MODE");
    return m && *m ? m : "normal";
}

static int path_in(char *out, size_t size, const char *env, const char *name)
{
    const char *dir = getenv(env);
    if (!dir || !*dir) {
        fprintf(stderr, "%s is not set\n", env);
        return -1;
    }
    snprintf(out, size, "%s/%s", dir, name);
    return 0;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits (at most 5 s) for the daemon's answer at path and prints it. */
static int print_answer(const char *path)
{
    for (int i = 0; i < 500; i++) {
        FILE *f = fopen(path, "r");
        if (f) {
            char buf[4096];
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
            unlink(path);
            buf[n] = '\0';
            if (buf[0] == '!') { /* an error: on stderr, with a failing status */
                fputs(buf + 1, stderr);
                return 1;
            }
            fwrite(buf, 1, n, stdout);
            return fflush(stdout) == 0 ? 0 : 1;
        }
        sleep_ms(10);
    }
    fprintf(stderr, "no answer from the MPS control daemon\n");
    return 1;
}

static int run_client(void)
{
    char pipe_path[4096];
    if (path_in(pipe_path, sizeof pipe_path, "CUDA_MPS_PIPE_DIRECTORY", "control") != 0)
        return 1;
    /* O_NONBLOCK: ENXIO at once when no daemon holds the pipe open. */
    int fd = open(pipe_path, O_WRONLY | O_NONBLOCK);
    if (fd < 0) {
        fprintf(stderr, "Cannot find MPS control daemon process\n");
        return 1;
    }
    char line[1024];
    int rc = 0;
    while (rc == 0 && fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = '\0';
        char msg[5300], answer[4200];
        answer[0] = '\0';
        if (strncmp(line, "get_", 4) == 0) {
            snprintf(answer, sizeof answer, "%.4000s.answer.%ld", pipe_path, (long)getpid());
            unlink(answer);
            snprintf(msg, sizeof msg, "%.1000s @%.4200s\n", line, answer);
        } else {
            snprintf(msg, sizeof msg, "%s\n", line);
        }
        size_t len = strlen(msg);
        if (write(fd, msg, len) != (ssize_t)len)
            rc = 1;
        else if (answer[0])
            rc = print_answer(answer);
    }
    close(fd);
    return rc;
}

/* Writes text to path atomically (the client waits for path to appear). */
static void answer(const char *path, const char *text)
{
    char tmp[2100];
    snprintf(tmp, sizeof tmp, "%.2048s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    fputs(text, f);
    fclose(f);
    rename(tmp, path);
}

/* Whether /proc/PID/environ holds want (a whole NAME=VALUE entry). */
static int environ_has(const char *pid, const char *want)
{
    char path[300], buf[65536];
    snprintf(path, sizeof path, "/proc/%s/environ", pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    for (char *p = buf; p < buf + n; p += strlen(p) + 1)
        if (strcmp(p, want) == 0)
            return 1;
    return 0;
}

/* The would-be clients: processes with this daemon's pipe folder in their
 * environment that are not the stand-in (its daemon, server or clients). */
static void client_list(char *text, size_t size)
{
    text[0] = '\0';
    const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
    char want[4200], self[4096], exe[4096], link[300];
    snprintf(want, sizeof want, "CUDA_MPS_PIPE_DIRECTORY=%s", dir ? dir : "");
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    self[len > 0 ? len : 0] = '\0';
    DIR *d = opendir("/proc");
    if (!d)
        return;
    struct dirent *e;
    size_t at = 0;
    while ((e = readdir(d)) && at + 16 < size) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9' || !environ_has(e->d_name, want))
            continue;
        snprintf(link, sizeof link, "/proc/%s/exe", e->d_name);
        len = readlink(link, exe, sizeof exe - 1);
        exe[len > 0 ? len : 0] = '\0';
        if (strcmp(exe, self) == 0)
            continue;
        at += (size_t)snprintf(text + at, size - at, "%s\n", e->d_name);
    }
    closedir(d);
}

/* cuda-start: the clients that connected, as the server counts them. */
#define MAX_CONNECTED 1024
static long connected[MAX_CONNECTED];
static int n_connected;

static void prune_connected(void)
{
    int kept = 0;
    for (int i = 0; i < n_connected; i++)
        if (kill((pid_t)connected[i], 0) == 0)
            connected[kept++] = connected[i];
    n_connected = kept;
}

static void connected_list(char *text, size_t size)
{
    size_t at = 0;
    text[0] = '\0';
    prune_connected();
    for (int i = 0; i < n_connected && at + 24 < size; i++)
        at += (size_t)snprintf(text + at, size - at, "%ld\n", connected[i]);
}

static void logf_line(FILE *log, const char *what)
{
    fprintf(log, "[%ld] %s\n", (long)getpid(), what);
    fflush(log);
}

static void run_daemon(int ready_fd)
{
    char pipe_path[4096], log_path[4096];
    if (path_in(pipe_path, sizeof pipe_path, "CUDA_MPS_PIPE_DIRECTORY", "control") != 0 ||
        path_in(log_path, sizeof log_path, "CUDA_MPS_LOG_DIRECTORY", "control.log") != 0)
        _exit(1);
    FILE *log = fopen(log_path, "a");
    if (!log)
        _exit(1);
    unlink(pipe_path);
    if (mkfifo(pipe_path, 0600) != 0) {
        logf_line(log, "cannot create the control pipe");
        _exit(1);
    }
    int fd = open(pipe_path, O_RDWR); /* RDWR: never sees end-of-file */
    if (fd < 0)
        _exit(1);
    int stubborn = strcmp(mode(), "stubborn") == 0;
    if (stubborn)
        signal(SIGTERM, SIG_IGN);
    pid_t server = 0;
    int lazy = strcmp(mode(), "cuda-start") == 0;
    const char *max_env = getenv("KACE_TEST_MPS_MAX_CLIENTS");
    int max_clients = max_env && atoi(max_env) > 0 ? atoi(max_env) : 48;
    if (lazy) {
        /* the server starts with its first client */
    } else if (strcmp(mode(), "no-server") == 0) {
        char server_log[4096];
        if (path_in(server_log, sizeof server_log, "CUDA_MPS_LOG_DIRECTORY", "server.log") == 0) {
            FILE *f = fopen(server_log, "a");
            if (f) {
                fprintf(f, "[stand-in] Server failed to start: no CUDA-capable device is detected\n");
                fclose(f);
            }
        }
    } else {
        server = fork();
        if (server == 0) {
            /* The stand-in MPS server: sleeps until killed. */
            for (;;)
                pause();
        }
    }
    logf_line(log, "daemon started");
    if (write(ready_fd, "1", 1) != 1)
        _exit(1);
    close(ready_fd);
    if (strcmp(mode(), "die") == 0) {
        sleep_ms(300);
        if (server > 0)
            kill(server, SIGKILL);
        logf_line(log, "dying without cleanup");
        _exit(7);
    }
    char line[2048];
    size_t len = 0;
    for (;;) {
        char c;
        ssize_t n = read(fd, &c, 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            _exit(1);
        if (c != '\n') {
            if (len + 1 < sizeof line)
                line[len++] = c;
            continue;
        }
        line[len] = '\0';
        len = 0;
        /* A query: "get_... @ANSWER_PATH". */
        char *at = strstr(line, " @");
        if (at) {
            *at = '\0';
            char text[4096] = "";
            if (lazy && strncmp(line, "connect ", 8) == 0) {
                prune_connected();
                if (server == 0 && (server = fork()) == 0)
                    for (;;)
                        pause();
                if (n_connected >= max_clients || n_connected >= MAX_CONNECTED)
                    snprintf(text, sizeof text, "!the MPS server refused client %.32s: it has %d clients, its limit\n",
                             line + 8, n_connected);
                else
                    snprintf(text, sizeof text, "ok\n"), connected[n_connected++] = atol(line + 8);
            } else if (lazy && strncmp(line, "get_client_list ", 16) == 0 && atol(line + 16) == (long)server &&
                       server > 0)
                connected_list(text, sizeof text);
            else if (strncmp(line, "get_client_list ", 16) == 0 && strcmp(mode(), "no-client-list") == 0)
                snprintf(text, sizeof text, "!unknown command\n");
            else if (strncmp(line, "get_client_list ", 16) == 0 && atol(line + 16) != (long)server)
                snprintf(text, sizeof text, "Server %.32s not found\n", line + 16); /* the real daemon's words */
            else if (strncmp(line, "get_client_list ", 16) == 0 && strcmp(mode(), "no-clients") != 0)
                client_list(text, sizeof text);
            else if (strcmp(line, "get_server_list") == 0 && strcmp(mode(), "bad-list") == 0)
                snprintf(text, sizeof text, "server %ld\n", (long)server);
            else if (strcmp(line, "get_server_list") == 0 && server > 0 && strcmp(mode(), "stale-server") == 0)
                snprintf(text, sizeof text, "999998\n%ld\n", (long)server); /* one gone before it is asked */
            else if (strcmp(line, "get_server_list") == 0 && server > 0)
                snprintf(text, sizeof text, "%ld\n", (long)server);
            logf_line(log, line);
            answer(at + 2, text);
            continue;
        }
        logf_line(log, line);
        if (strcmp(line, "quit") != 0)
            continue;
        if (strcmp(mode(), "ignore-quit") == 0 || stubborn)
            continue;
        if (server > 0) {
            kill(server, SIGTERM);
            waitpid(server, NULL, 0);
        }
        unlink(pipe_path);
        logf_line(log, "exiting");
        _exit(0);
    }
}

static int start_daemon(void)
{
    if (strcmp(mode(), "refuse") == 0) {
        fprintf(stderr, "An instance of this daemon is already running (stand-in refuses to start)\n");
        return 1;
    }
    int ready[2];
    if (pipe(ready) != 0)
        return 1;
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        close(ready[0]);
        setsid();
        if (fork() != 0)
            _exit(0); /* the session leader exits: the daemon is orphaned */
        int devnull = open("/dev/null", O_RDWR);
        dup2(devnull, STDIN_FILENO);
        dup2(devnull, STDOUT_FILENO);
        dup2(devnull, STDERR_FILENO);
        run_daemon(ready[1]);
        _exit(0);
    }
    close(ready[1]);
    waitpid(pid, NULL, 0);
    char c;
    ssize_t n = read(ready[0], &c, 1);
    close(ready[0]);
    if (n != 1) {
        fprintf(stderr, "the daemon did not start\n");
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "-d") == 0)
        return start_daemon();
    if (argc > 1) {
        fprintf(stderr, "usage: %s [-d]\n", argv[0]);
        return 2;
    }
    return run_client();
}
