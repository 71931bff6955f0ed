/* kace-fake-cuda-app: a "CUDA program" on the fake driver (fake_cuda.h).
 *
 *   kace-fake-cuda-app gemm|stream|latency [SECONDS]
 *       a workload like workloads/cuda/kace_kernels.cu: reports progress
 *       (workloads/kace_progress.h) until SECONDS (0: until stopped)
 *   kace-fake-cuda-app scenario NAME [N]
 *       the injection library's test scenarios (tests/fake_cuda/test_inject.c):
 *       launches N       N launches cycling over 5 signatures, cuLaunchKernel
 *       launches-ex N    the same through cuLaunchKernelEx
 *       threads N        2 threads, N launches each, shared and own signatures
 *       graph N          3 launches, then a CUDA graph of N kernels
 *       contexts N       two contexts, N launches each, alternating
 *       many-contexts N  N contexts, two launches each
 *       ctx-destroy N    N launches in a context that is then destroyed, then
 *                        N launches of 5 other signatures in a new context
 *                        (the fake gives it the old one's address)
 *       lock-held N      N launches in context A; a thread launches in its own
 *                        context, and while its Stop sleeps (FAKE_CUPTI_STOP_SLEEP,
 *                        file FAKE_CUPTI_STOP_SLEEP_FLAG made when it starts) A is
 *                        destroyed; a context at A's address is made and
 *                        destroyed at once; then N launches of 5 other
 *                        signatures in a new context at A's address
 *       bad-counters N   kernels whose counters come back NaN or negative
 *       wait N           N launches, prints "ready", waits for a signal
 *       in-flight N      N launches and a 3 s kernel, prints "ready", waits
 *       steady N         launches for N seconds at about 500 kernels/s
 *       capture N        3 launches; 2 new signatures captured into a graph,
 *                        the graph launched, then both launched; then N more
 *       failed-launch N  a launch that fails (2048 threads per block), then N
 *       nccl N           an NCCL kernel, then N launches
 *       long-name N      a kernel with a 3000-byte name, then N launches
 *       child N          runs "launches 10" as a child process with the same
 *                        environment, then N launches of its own
 *
 * The workloads can stand in for real ones in time and coupling (the device
 * dry run's warm pool), each part off unless its variable is set:
 *   KACE_FAKE_START_S=LO-HI   start-up before CUDA (PyTorch's imports: the
 *                             H200 took 17.5 s), uniform in [LO, HI] seconds
 *   KACE_FAKE_TIME_SCALE=F    every stand-in time (start-up, step, noise
 *                             period) divided by F, so a dry run is F times
 *                             shorter than the allocation it stands for
 *   KACE_FAKE_NOISE=A         step time x (1 + A sin(2 pi t / 3 s) + A/4 white),
 *                             BERT's +-7% over 3 s at A = 0.07
 *   KACE_FAKE_GPU_DIR=DIR     the shared GPU: each step marks this process
 *                             active in DIR (a file per process naming its
 *                             kind and MPS share) and is slowed by the others
 *                             active in the last 50 ms: under MPS by
 *                             each partner's kind and share, time-sliced by
 *                             their number; its own share slows it as its
 *                             kind is bound (gemm by compute, stream by
 *                             memory, latency hardly)
 *   KACE_FAKE_KERNELS=N       N kernel signatures per step (names and grids
 *                             of their own), launched in turn; their GPU
 *                             times fall off as 1/rank^1.5 (a few GEMMs,
 *                             then a long tail) and sum to the mode's step:
 *                             under kernel replay the first step slows in
 *                             proportion to the signatures replayed (with
 *                             the fake CUPTI's KACE_FAKE_REPLAY_S each)
 *   KACE_FAKE_STEP_S=S        a step's GPU time alone (S seconds stood for),
 *                             its kernels' times scaled to it (default: the
 *                             mode's own, a few ms): a recorded workload's
 *                             step, so that its progress records come as
 *                             often as the real one's
 *   KACE_FAKE_KERNEL_SHARES=FILE  instead, one signature per number in FILE
 *                             (one a line, '#' comments), its share of the
 *                             step's GPU time: a recorded workload's spread
 *                             (tests/data/kernels/), so that the replay cap
 *                             picks as many as it would on the real one
 *   KACE_FAKE_EVENTS=FILE     appends "PID started-up" (its start-up done),
 *                             "PID cuda" (cuInit returned: a CUDA start gate
 *                             opened), "PID mps" (an MPS client), "PID step" (each step reported) and
 *                             "PID exit" lines to FILE, each ending with
 *                             $KACE_FAKE_EVENT_TAG (or "-"), so that tests
 *                             order the processes' events
 *   KACE_FAKE_MPS_CONNECT=1   after cuInit, connect to the MPS control daemon
 *                             of CUDA_MPS_PIPE_DIRECTORY ("connect PID", which
 *                             the stand-in daemon, tests/helpers/mps_standin.c,
 *                             may refuse) and exit 1 when refused
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fake_cuda.h"
#include "kace_progress.h"

static fake_kernel K(const char *name, unsigned gx, unsigned bx, uint64_t ns)
{
    fake_kernel k = {name, {gx, 1, 1}, {bx, 1, 1}, 32, 1024, 0, ns};
    return k;
}

static const char *const names[5] = {"_Z5sgemmPfS_S_", "_Z6triadPfS_S_f", "_Z7latencyPi", "_Z6reducePf",
                                     "_Z7softmaxPf"};

/* The i-th launch of a cycle over 5 signatures. */
static fake_kernel cycle_kernel(int i)
{
    return K(names[i % 5], 100 + (unsigned)(i % 5), 128 + 32 * (unsigned)(i % 5), 20000);
}

static double now_s(void)
{
    return (double)fake_cuda_now_ns() / 1e9;
}

static void *thread_main(void *arg)
{
    int n = *(int *)arg;
    static const char *const own[2] = {"_Z8thread_aPf", "_Z8thread_bPf"};
    static int which;
    int me = __atomic_fetch_add(&which, 1, __ATOMIC_SEQ_CST) % 2;
    for (int i = 0; i < n; i++) {
        fake_kernel k = i % 2 ? cycle_kernel(i) : K(own[me], 64 + (unsigned)(i % 7), 256, 10000);
        fake_launch(&k, FAKE_LAUNCH);
    }
    fake_synchronize();
    return NULL;
}

/* lock-held's thread: one launch in a context of its own, whose Stop the
 * fake CUPTI makes slow (the injection library holds its lock meanwhile). */
static void *slow_stop_thread(void *arg)
{
    (void)arg;
    fake_ctx_create(0);
    fake_kernel k = K("_Z9slow_stopPf", 77, 64, 10000);
    fake_launch(&k, FAKE_LAUNCH);
    fake_synchronize();
    return NULL;
}

static int wait_for_file(const char *path, double seconds)
{
    for (double waited = 0; waited < seconds; waited += 0.01) {
        if (path && access(path, F_OK) == 0)
            return 0;
        nanosleep(&(struct timespec){0, 10000000L}, NULL);
    }
    return -1;
}

static void wait_for_signal(void)
{
    printf("ready\n");
    fflush(stdout);
    for (;;)
        pause();
}

static int scenario(const char *name, int n)
{
    if (!strcmp(name, "launches") || !strcmp(name, "launches-ex")) {
        int api = !strcmp(name, "launches") ? FAKE_LAUNCH : FAKE_LAUNCH_EX;
        for (int i = 0; i < n; i++) {
            fake_kernel k = cycle_kernel(i);
            fake_launch(&k, api);
        }
    } else if (!strcmp(name, "threads")) {
        pthread_t t[2];
        for (int i = 0; i < 2; i++)
            pthread_create(&t[i], NULL, thread_main, &n);
        for (int i = 0; i < 2; i++)
            pthread_join(t[i], NULL);
    } else if (!strcmp(name, "graph")) {
        for (int i = 0; i < 3; i++) {
            fake_kernel k = cycle_kernel(i);
            fake_launch(&k, FAKE_LAUNCH);
        }
        fake_kernel *g = calloc((size_t)n, sizeof *g);
        for (int i = 0; i < n; i++)
            g[i] = K("_Z10graph_nodePf", 8 + (unsigned)(i % 3), 64, 5000);
        fake_graph_launch(g, n);
        fake_synchronize();
        free(g);
        return 0;
    } else if (!strcmp(name, "contexts")) {
        CUcontext a = fake_ctx_create(0), b = fake_ctx_create(0);
        for (int i = 0; i < 2 * n; i++) {
            fake_ctx_set_current(i % 2 ? b : a);
            fake_kernel k = K(i % 2 ? "_Z9in_ctx_bPf" : "_Z9in_ctx_aPf", 10 + (unsigned)(i % 4), 64, 10000);
            fake_launch(&k, FAKE_LAUNCH);
        }
        fake_ctx_set_current(a);
        fake_synchronize();
        fake_ctx_set_current(b);
    } else if (!strcmp(name, "many-contexts")) {
        for (int i = 0; i < n; i++) {
            fake_ctx_create(0);
            for (int j = 0; j < 2; j++) {
                fake_kernel k = K("_Z9per_ctx_kPf", 30 + (unsigned)i, 64, 5000);
                fake_launch(&k, FAKE_LAUNCH);
            }
            fake_synchronize();
        }
    } else if (!strcmp(name, "ctx-destroy")) {
        CUcontext a = fake_ctx_create(0);
        for (int i = 0; i < n; i++) {
            fake_kernel k = cycle_kernel(i);
            fake_launch(&k, FAKE_LAUNCH);
        }
        fake_ctx_destroy(a);
        CUcontext b = fake_ctx_create(0);
        if (a != b)
            fprintf(stderr, "kace-fake-cuda-app: the new context did not get the destroyed one's address\n");
        for (int i = 0; i < n; i++) {
            fake_kernel k = K("_Z9after_ctxPf", 50 + (unsigned)(i % 5), 96, 10000);
            fake_launch(&k, FAKE_LAUNCH);
        }
    } else if (!strcmp(name, "lock-held")) {
        CUcontext a = fake_ctx_create(0);
        for (int i = 0; i < n; i++) {
            fake_kernel k = cycle_kernel(i);
            fake_launch(&k, FAKE_LAUNCH);
        }
        fake_synchronize();
        pthread_t t;
        pthread_create(&t, NULL, slow_stop_thread, NULL);
        if (wait_for_file(getenv("FAKE_CUPTI_STOP_SLEEP_FLAG"), 20) != 0)
            fprintf(stderr, "kace-fake-cuda-app: the slow Stop never started\n");
        fake_ctx_destroy(a);
        pthread_join(t, NULL);
        /* A context at A's address destroyed before any launch: A's slot is
         * not taken for it (its dead profiler is not disabled). */
        CUcontext gone = fake_ctx_create(0);
        fake_ctx_destroy(gone);
        CUcontext c = fake_ctx_create(0);
        if (a != gone || a != c)
            fprintf(stderr, "kace-fake-cuda-app: the new context did not get the destroyed one's address\n");
        for (int i = 0; i < n; i++) {
            fake_kernel k = K("_Z9after_ctxPf", 50 + (unsigned)(i % 5), 96, 10000);
            fake_launch(&k, FAKE_LAUNCH);
        }
    } else if (!strcmp(name, "bad-counters")) {
        for (int i = 0; i < n; i++) {
            static const char *const bad[3] = {"_Z12nan_countersPf", "_Z17negative_countersPf", "_Z4goodPf"};
            fake_kernel k = K(bad[i % 3], 20 + (unsigned)(i % 3), 64, 10000);
            fake_launch(&k, FAKE_LAUNCH);
        }
    } else if (!strcmp(name, "wait") || !strcmp(name, "in-flight")) {
        for (int i = 0; i < n; i++) {
            fake_kernel k = cycle_kernel(i);
            fake_launch(&k, FAKE_LAUNCH);
        }
        fake_synchronize();
        if (!strcmp(name, "in-flight")) {
            fake_kernel k = K("_Z9long_oneePf", 1, 32, 3000000000ull);
            fake_launch(&k, FAKE_LAUNCH_EX);
        }
        wait_for_signal();
    } else if (!strcmp(name, "capture")) {
        for (int i = 0; i < 3; i++) {
            fake_kernel k = cycle_kernel(i);
            fake_launch(&k, FAKE_LAUNCH);
        }
        CUstream s = fake_stream_create();
        fake_stream_begin_capture(s);
        fake_kernel captured[2] = {K("_Z8capturedPf", 40, 96, 10000), K("_Z9captured2Pf", 41, 160, 10000)};
        fake_launch_on(&captured[0], FAKE_LAUNCH, s);
        fake_launch_on(&captured[1], FAKE_LAUNCH_EX, s);
        const fake_kernel *graph = NULL;
        int n_graph = fake_stream_end_capture(s, &graph);
        fake_graph_launch(graph, n_graph);
        fake_stream_destroy(s);
        fake_launch(&captured[0], FAKE_LAUNCH);
        fake_launch(&captured[1], FAKE_LAUNCH_EX);
        for (int i = 0; i < n; i++) {
            fake_kernel k = cycle_kernel(i);
            fake_launch(&k, FAKE_LAUNCH);
        }
    } else if (!strcmp(name, "failed-launch") || !strcmp(name, "nccl") || !strcmp(name, "long-name")) {
        static char long_name[3001];
        memset(long_name, 'x', 3000);
        memcpy(long_name, "_Z4cute", 7);
        fake_kernel first = !strcmp(name, "failed-launch") ? K("_Z8too_widePf", 8, 2048, 10000)
                            : !strcmp(name, "nccl") ? K("_Z38ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgs", 8, 640, 10000)
                                                    : K(long_name, 8, 640, 10000);
        fake_launch(&first, FAKE_LAUNCH);
        for (int i = 0; i < n; i++) {
            fake_kernel k = cycle_kernel(i);
            fake_launch(&k, FAKE_LAUNCH);
        }
    } else if (!strcmp(name, "child")) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            execl("/proc/self/exe", "kace-fake-cuda-app", "scenario", "launches", "10", (char *)NULL);
            _exit(127);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "kace-fake-cuda-app: the child exited with status 0x%x\n", status);
            return 1;
        }
        for (int i = 0; i < n; i++) {
            fake_kernel k = cycle_kernel(i);
            fake_launch(&k, FAKE_LAUNCH);
        }
    } else if (!strcmp(name, "steady")) {
        double end = now_s() + n;
        for (int i = 0; now_s() < end; i++) {
            fake_kernel k = cycle_kernel(i);
            fake_launch(&k, FAKE_LAUNCH);
            fake_synchronize();
            usleep(2000);
        }
    } else {
        fprintf(stderr, "kace-fake-cuda-app: unknown scenario %s\n", name);
        return 2;
    }
    fake_synchronize();
    return 0;
}

/* ---- a stand-in for a real workload's time and coupling (see the top) ---- */

static double env_num(const char *name, double fallback)
{
    const char *v = getenv(name);
    return v && *v ? atof(v) : fallback;
}

static double time_scale(void)
{
    double f = env_num("KACE_FAKE_TIME_SCALE", 1);
    return f > 0 ? f : 1;
}

static double uniform01(void)
{
    return (double)rand() / ((double)RAND_MAX + 1);
}

static void note_event(const char *what)
{
    const char *path = getenv("KACE_FAKE_EVENTS");
    if (!path || !*path)
        return;
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    const char *tag = getenv("KACE_FAKE_EVENT_TAG");
    char line[256];
    int n = snprintf(line, sizeof line, "%ld %s %.160s\n", (long)getpid(), what, tag && *tag ? tag : "-");
    if (write(fd, line, (size_t)n) != n)
        fprintf(stderr, "kace-fake-cuda-app: cannot note an event in %s\n", path);
    close(fd);
}

static void note_exit(void)
{
    note_event("exit");
}

/* PyTorch's start before CUDA: imports, model build, data loading. */
static void start_up(void)
{
    const char *v = getenv("KACE_FAKE_START_S");
    double lo = 0, hi = 0;
    if (!v || sscanf(v, "%lf-%lf", &lo, &hi) < 1)
        return;
    if (hi < lo)
        hi = lo;
    double s = (lo + (hi - lo) * uniform01()) / time_scale();
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Whether this process is an MPS client: 1 once a daemon accepted it, 0 when
 * none was there (as CUDA runs without MPS then), -1 when it did not ask
 * (then: whether CUDA_MPS_PIPE_DIRECTORY is set). */
static int mps_client = -1;

/* The MPS client's connection at its CUDA start: "connect PID @ANSWER" on the
 * control daemon's pipe; an answer starting with '!' is a refusal. */
static int mps_connect(void)
{
    const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
    if (!dir || env_num("KACE_FAKE_MPS_CONNECT", 0) == 0)
        return 0;
    char pipe_path[4096], answer[4200], msg[8500], buf[512];
    snprintf(pipe_path, sizeof pipe_path, "%.4000s/control", dir);
    snprintf(answer, sizeof answer, "%.4000s.answer.%ld", pipe_path, (long)getpid());
    int fd = open(pipe_path, O_WRONLY | O_NONBLOCK);
    if (fd < 0) {
        mps_client = 0; /* e.g. a time-sliced run: kace quit its daemon */
        return 0;
    }
    unlink(answer);
    int len = snprintf(msg, sizeof msg, "connect %ld @%s\n", (long)getpid(), answer);
    ssize_t wrote = write(fd, msg, (size_t)len);
    close(fd);
    if (wrote != len) {
        mps_client = 0;
        return 0;
    }
    for (int i = 0; i < 1000; i++) { /* 10 s */
        FILE *f = fopen(answer, "r");
        if (f) {
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
            unlink(answer);
            buf[n] = '\0';
            if (buf[0] != '!') {
                mps_client = 1;
                return 0;
            }
            fprintf(stderr, "kace-fake-cuda-app: cuInit: %s", buf + 1);
            return -1;
        }
        nanosleep(&(struct timespec){0, 10000000L}, NULL);
    }
    fprintf(stderr, "kace-fake-cuda-app: no answer from the MPS control daemon\n");
    return -1;
}

/* How much a partner of kind b slows a workload of kind a under MPS, when the
 * partner has the whole GPU: compute shares compute, memory shares memory. */
static double interference(int a, int b)
{
    static const double c[3][3] = {/* gemm */ {0.85, 0.35, 0.15},
                                   /* stream */ {0.45, 0.95, 0.10},
                                   /* latency */ {0.30, 0.20, 0.40}};
    return c[a][b];
}

/* A workload's speed alone at an MPS share p (0..1]: compute-bound work
 * scales with the SMs it gets, memory-bound work saturates early. */
static double share_speed(int kind, double p)
{
    static const double saturates[3] = {0.9, 0.4, 0.1};
    return p >= saturates[kind] ? 1 : p / saturates[kind];
}

typedef struct gpu_share {
    const char *dir;
    char mine[4096];
    int kind, pct;
    bool mps;
    double factor;     /* the last step's slow-down */
    double checked_at; /* when the others were last read */
} gpu_share;

static void gpu_share_open(gpu_share *g, int kind)
{
    memset(g, 0, sizeof *g);
    g->dir = getenv("KACE_FAKE_GPU_DIR");
    g->kind = kind;
    g->pct = (int)env_num("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", 100);
    g->mps = mps_client >= 0 ? mps_client == 1 : getenv("CUDA_MPS_PIPE_DIRECTORY") != NULL;
    g->factor = 1;
    g->checked_at = -1;
    if (g->dir) {
        mkdir(g->dir, 0755);
        snprintf(g->mine, sizeof g->mine, "%.3000s/%ld.%d.%d.%d", g->dir, (long)getpid(), kind, g->pct,
                 g->mps);
    }
}

/* This step's slow-down: this process marked active, the others active in
 * the last 50 ms read (every 10 ms at most). Not scaled by F: a busy
 * machine's scheduling delays would make partners look idle. */
static double gpu_share_step(gpu_share *g)
{
    double alone = g->mps ? 1 / share_speed(g->kind, g->pct / 100.0) : 1;
    if (!g->dir)
        return alone;
    int fd = open(g->mine, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
        futimens(fd, NULL);
        close(fd);
    }
    double t = now_s();
    if (g->checked_at >= 0 && t - g->checked_at < 0.01)
        return g->factor;
    g->checked_at = t;
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    double wall_s = (double)wall.tv_sec + wall.tv_nsec / 1e9, extra = 0;
    int others = 0;
    DIR *d = opendir(g->dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        long pid;
        int kind, pct, mps;
        char path[8192];
        struct stat st;
        if (sscanf(e->d_name, "%ld.%d.%d.%d", &pid, &kind, &pct, &mps) != 4 || pid == (long)getpid() || kind < 0 ||
            kind > 2)
            continue;
        snprintf(path, sizeof path, "%s/%s", g->dir, e->d_name);
        if (stat(path, &st) != 0 ||
            wall_s - ((double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec / 1e9) > 0.05)
            continue;
        others++;
        extra += interference(g->kind, kind) * (pct > 0 ? pct : 100) / 100.0;
    }
    if (d)
        closedir(d);
    /* Under MPS the partners' kinds and shares count; time-sliced, the GPU
     * is each's in turn (plus a context switch's cost). */
    g->factor = g->mps ? alone * (1 + extra) : others ? (others + 1) * 1.05 : 1;
    return g->factor;
}

static void gpu_share_close(gpu_share *g)
{
    if (g->dir)
        unlink(g->mine);
}

static gpu_share the_share;

static void leave_share(void)
{
    gpu_share_close(&the_share);
}

#define MAX_STEP_KERNELS 1024

/* KACE_FAKE_KERNEL_SHARES: the file's numbers, at most max, into share;
 * returns how many (0: unset; exits on a file it cannot use). */
static int read_shares(double *share, int max)
{
    const char *path = getenv("KACE_FAKE_KERNEL_SHARES");
    if (!path || !*path)
        return 0;
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "kace-fake-cuda-app: KACE_FAKE_KERNEL_SHARES %s: %s\n", path, strerror(errno));
        exit(2);
    }
    char line[256];
    int n = 0, at = 0;
    while (fgets(line, sizeof line, f)) {
        at++;
        char *end;
        double v = strtod(line, &end);
        if (line[0] == '#' || line[0] == '\n')
            continue;
        if (end == line || !(v > 0) || n == max) {
            fprintf(stderr, "kace-fake-cuda-app: %s:%d: expected a share > 0 (at most %d lines)\n", path, at, max);
            exit(2);
        }
        share[n++] = v;
    }
    fclose(f);
    return n;
}

/* KACE_FAKE_KERNELS: the step's n launches become max(n, N) launches over N
 * signatures, launch j of signature j % N (grid + signature, a name each),
 * rank r's GPU time in proportion to 1 / (r + 1)^1.5, or to the r-th of
 * KACE_FAKE_KERNEL_SHARES (N then its count), the step's total kept.
 * Returns the step's launches. */
static int spread_signatures(fake_kernel *ks, int n, int signatures)
{
    static double share[MAX_STEP_KERNELS];
    int n_shares = read_shares(share, MAX_STEP_KERNELS);
    if (n_shares > 0)
        signatures = n_shares;
    if (signatures <= 1)
        return n;
    if (signatures > MAX_STEP_KERNELS)
        signatures = MAX_STEP_KERNELS;
    for (int j = 0; j < signatures && n_shares == 0; j++)
        share[j] = 1 / pow(j + 1, 1.5);
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        total += ks[i].duration_ns;
    fake_kernel proto = ks[0];
    int launches = n > signatures ? n : signatures;
    double weights = 0;
    for (int j = 0; j < launches; j++)
        weights += share[j % signatures];
    for (int j = 0; j < launches; j++) {
        int sig = j % signatures;
        char name[96];
        snprintf(name, sizeof name, "%s_sig%d", proto.name, sig);
        ks[j] = proto;
        ks[j].name = j < signatures ? strdup(name) : ks[sig].name; /* lives as long as the process */
        ks[j].grid[0] = proto.grid[0] + (unsigned)sig;
        ks[j].duration_ns = (uint64_t)((double)total * share[sig] / weights);
        if (!ks[j].duration_ns)
            ks[j].duration_ns = 1000;
    }
    return launches;
}

/* A steady workload: one sample = one iteration, as kace_kernels.cu. */
static int workload(const char *mode, double seconds)
{
    fake_kernel ks[MAX_STEP_KERNELS];
    int n = 1, kind = 0;
    if (!strcmp(mode, "gemm")) {
        ks[0] = (fake_kernel){"_Z11sgemm_tiledliPKfS0_Pf", {64, 64, 1}, {32, 32, 1}, 40, 8192, 0, 4000000};
    } else if (!strcmp(mode, "stream")) {
        ks[0] = (fake_kernel){"_Z12stream_triadmPfPKfS1_f", {4096, 1, 1}, {256, 1, 1}, 16, 0, 0, 2000000};
        kind = 1;
    } else if (!strcmp(mode, "latency")) {
        n = 64;
        for (int i = 0; i < n; i++)
            ks[i] = (fake_kernel){"_Z14latency_kernelPi", {4, 1, 1}, {64, 1, 1}, 8, 0, 0, 15000};
        kind = 2;
    } else {
        fprintf(stderr, "kace-fake-cuda-app: unknown workload %s\n", mode);
        return 2;
    }
    n = spread_signatures(ks, n, (int)env_num("KACE_FAKE_KERNELS", 0));
    uint64_t base[MAX_STEP_KERNELS];
    double step_ns = 0, want_ns = env_num("KACE_FAKE_STEP_S", 0) * 1e9;
    for (int i = 0; i < n; i++)
        step_ns += (double)ks[i].duration_ns;
    for (int i = 0; i < n; i++)
        base[i] = want_ns > 0 ? (uint64_t)((double)ks[i].duration_ns * want_ns / step_ns) : ks[i].duration_ns;
    double scale = time_scale(), noise = env_num("KACE_FAKE_NOISE", 0), phase = 6.2832 * uniform01();
    gpu_share_open(&the_share, kind);
    atexit(leave_share);
    double t0 = now_s();
    unsigned long long samples = 0;
    kace_progress_report(0);
    while (seconds <= 0 || now_s() - t0 < seconds) {
        double t = (now_s() - t0) * scale; /* the time stood for */
        double f = gpu_share_step(&the_share) / scale;
        if (noise > 0)
            f *= 1 + noise * sin(6.2832 * t / 3 + phase) + noise / 4 * (2 * uniform01() - 1);
        for (int i = 0; i < n; i++) {
            ks[i].duration_ns = (uint64_t)((double)base[i] * f);
            fake_launch(&ks[i], i % 2 ? FAKE_LAUNCH_EX : FAKE_LAUNCH);
        }
        fake_synchronize();
        kace_progress_report(++samples);
        note_event("step");
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s gemm|stream|latency [SECONDS] | scenario NAME [N]\n", argv[0]);
        return 2;
    }
    bool standin = strcmp(argv[1], "scenario") != 0;
    if (standin) {
        srand((unsigned)getpid());
        start_up();
        note_event("started-up");
        atexit(note_exit);
    }
    cuInit(0); /* loads $CUDA_INJECTION64_PATH, as the real driver does */
    if (standin)
        note_event("cuda");
    if (!standin)
        return argc > 2 ? scenario(argv[2], argc > 3 ? atoi(argv[3]) : 20) : 2;
    if (mps_connect() != 0)
        return 1;
    if (mps_client == 1)
        note_event("mps");
    return workload(argv[1], argc > 2 ? atof(argv[2]) : 0);
}
