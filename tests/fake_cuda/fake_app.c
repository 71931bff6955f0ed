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
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* A steady workload: one sample = one iteration, as kace_kernels.cu. */
static int workload(const char *mode, double seconds)
{
    fake_kernel ks[64];
    int n = 1;
    if (!strcmp(mode, "gemm")) {
        ks[0] = (fake_kernel){"_Z11sgemm_tiledliPKfS0_Pf", {64, 64, 1}, {32, 32, 1}, 40, 8192, 0, 4000000};
    } else if (!strcmp(mode, "stream")) {
        ks[0] = (fake_kernel){"_Z12stream_triadmPfPKfS1_f", {4096, 1, 1}, {256, 1, 1}, 16, 0, 0, 2000000};
    } else if (!strcmp(mode, "latency")) {
        n = 64;
        for (int i = 0; i < n; i++)
            ks[i] = (fake_kernel){"_Z14latency_kernelPi", {4, 1, 1}, {64, 1, 1}, 8, 0, 0, 15000};
    } else {
        fprintf(stderr, "kace-fake-cuda-app: unknown workload %s\n", mode);
        return 2;
    }
    double t0 = now_s();
    unsigned long long samples = 0;
    kace_progress_report(0);
    while (seconds <= 0 || now_s() - t0 < seconds) {
        for (int i = 0; i < n; i++)
            fake_launch(&ks[i], i % 2 ? FAKE_LAUNCH_EX : FAKE_LAUNCH);
        fake_synchronize();
        kace_progress_report(++samples);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s gemm|stream|latency [SECONDS] | scenario NAME [N]\n", argv[0]);
        return 2;
    }
    cuInit(0); /* loads $CUDA_INJECTION64_PATH, as the real driver does */
    if (!strcmp(argv[1], "scenario"))
        return argc > 2 ? scenario(argv[2], argc > 3 ? atoi(argv[3]) : 20) : 2;
    return workload(argv[1], argc > 2 ? atof(argv[2]) : 0);
}
