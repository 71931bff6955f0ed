/* libkace_cupti.so on the fake CUDA driver and CUPTI (fake_cuda.h): each
 * scenario runs kace-fake-cuda-app with the injection library, as the real
 * driver would, and checks the recording line by line.
 *
 *   kace-test-inject SCENARIO      (CTest runs one test per scenario)
 *
 * A failure prints "FAIL <scenario>: <assertion>" and exits 1. Plain C, no
 * test framework, so that it also builds under ThreadSanitizer alone. */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *scenario_name;
static int failures;

#define CHECK(cond, ...)                                                                                    \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "FAIL %s: ", scenario_name);                                                     \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fprintf(stderr, "  [%s, %s:%d]\n", #cond, __FILE__, __LINE__);                                   \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

typedef struct recording {
    int n_kernels, n_counters, n_errors, n_bad_kernels, n_comments;
    int ended_sigterm, ended_exit, header_ok;
    char names_with_counters[64][128];
    double counters[64][3];
    unsigned counter_grid[64], counter_block[64];
    int n_kernel_named_graph, n_kernel_long;
    char first_error[256];
} recording;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void read_recording(const char *path, recording *r)
{
    memset(r, 0, sizeof *r);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[4096];
    int lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (lineno == 1 && !strcmp(line, "kace-cupti 1\n"))
            r->header_ok = 1;
        if (!strncmp(line, "kernel ", 7)) {
            unsigned long long s, e;
            unsigned g[3], b[3], regs;
            int ss, ds;
            char name[1024];
            if (sscanf(line + 7, "%llu %llu %u %u %u %u %u %u %u %d %d %1023s", &s, &e, &g[0], &g[1], &g[2], &b[0],
                       &b[1], &b[2], &regs, &ss, &ds, name) != 12 || e < s || !g[0] || !b[0])
                r->n_bad_kernels++;
            r->n_kernels++;
            r->n_kernel_named_graph += strstr(name, "graph_node") != NULL;
            r->n_kernel_long += strstr(name, "long_one") != NULL;
        } else if (!strncmp(line, "counters ", 9)) {
            int i = r->n_counters++;
            if (i < 64) {
                unsigned g[3], b[3];
                char name[128] = "";
                char v[3][32];
                if (sscanf(line + 9, "%31s %31s %31s %u %u %u %u %u %u %127s", v[0], v[1], v[2], &g[0], &g[1], &g[2],
                           &b[0], &b[1], &b[2], name) == 10) {
                    for (int m = 0; m < 3; m++)
                        r->counters[i][m] = strtod(v[m], NULL);
                    r->counter_grid[i] = g[0];
                    r->counter_block[i] = b[0];
                    snprintf(r->names_with_counters[i], sizeof r->names_with_counters[i], "%s", name);
                }
            }
        } else if (!strncmp(line, "error ", 6)) {
            if (r->n_errors++ == 0)
                snprintf(r->first_error, sizeof r->first_error, "%.200s", line + 6);
        } else if (line[0] == '#') {
            r->n_comments++;
            r->ended_sigterm |= strstr(line, "# end: SIGTERM") == line;
            r->ended_exit |= strstr(line, "# end: exit") == line;
        }
    }
    fclose(f);
}

static int count_in_file(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

typedef struct run {
    pid_t pid;
    char recording[512], err[512], out[512];
} run;

static const char *build_dir, *inject_lib;

/* Starts the fake application on a scenario with the injection library. */
static void start(run *r, const char *tag, const char *const *extra_env, const char *scen, const char *n)
{
    snprintf(r->recording, sizeof r->recording, "%s/inject-%s.cupti", build_dir, tag);
    snprintf(r->err, sizeof r->err, "%s/inject-%s.err", build_dir, tag);
    snprintf(r->out, sizeof r->out, "%s/inject-%s.out", build_dir, tag);
    unlink(r->recording);
    unlink(r->out); /* a stale "ready" would end the next run before it starts */
    unlink(r->err);
    r->pid = fork();
    if (r->pid == 0) {
        char app[512];
        snprintf(app, sizeof app, "%s/kace-fake-cuda-app", build_dir);
        setenv("LD_LIBRARY_PATH", build_dir, 1); /* the fake libcuda.so.1 and libcupti.so.13 */
        setenv("CUDA_INJECTION64_PATH", inject_lib, 1);
        setenv("KACE_CUPTI_OUTPUT", r->recording, 1);
        unsetenv("KACE_CUPTI_COUNTERS");
        for (const char *const *e = extra_env; e && *e; e++)
            putenv((char *)*e);
        if (!freopen(r->err, "w", stderr) || !freopen(r->out, "w", stdout))
            _exit(126);
        execl(app, app, "scenario", scen, n, (char *)NULL);
        _exit(127);
    }
}

/* Waits up to timeout_s; kills it after that. Returns the wait status, or -1 on timeout. */
static int finish(run *r, double timeout_s)
{
    double end = now_s() + timeout_s;
    int status;
    for (;;) {
        pid_t w = waitpid(r->pid, &status, WNOHANG);
        if (w == r->pid)
            return status;
        if (now_s() > end) {
            kill(r->pid, SIGKILL);
            waitpid(r->pid, &status, 0);
            return -1;
        }
        usleep(10000);
    }
}

static void wait_ready(run *r, double timeout_s)
{
    double end = now_s() + timeout_s;
    while (now_s() < end && count_in_file(r->out, "ready") == 0)
        usleep(10000);
}

static void expect_clean_exit(run *r, int status)
{
    CHECK(status != -1, "the workload did not finish within the time limit (a deadlock in a launch callback?)\n");
    CHECK(status == -1 || (WIFEXITED(status) && WEXITSTATUS(status) == 0), "the workload exited with status 0x%x\n",
          status);
    CHECK(count_in_file(r->err, "violation") == 0, "the fake CUPTI saw misuse: see %s\n", r->err);
    CHECK(count_in_file(r->err, "ThreadSanitizer") == 0, "ThreadSanitizer reported: see %s\n", r->err);
}

/* Runs a scenario that ends by itself and reads its recording. */
static void run_to_end(run *r, recording *rec, const char *tag, const char *const *env, const char *scen,
                       const char *n, double timeout_s)
{
    start(r, tag, env, scen, n);
    expect_clean_exit(r, finish(r, timeout_s));
    read_recording(r->recording, rec);
}

/* The counters the fake CUPTI gives a kernel of this grid x and block x. */
static void check_counter_values(const recording *rec)
{
    for (int i = 0; i < rec->n_counters && i < 64; i++) {
        double sm = rec->counter_grid[i] % 97 + 0.5, dram = rec->counter_block[i] % 89 + 0.25;
        double mem = sm > dram ? sm : dram;
        if (strstr(rec->names_with_counters[i], "nan_counters") || strstr(rec->names_with_counters[i], "negative"))
            continue;
        CHECK(fabs(rec->counters[i][0] - sm) < 1e-3 && fabs(rec->counters[i][1] - dram) < 1e-3 &&
                  fabs(rec->counters[i][2] - mem) < 1e-3,
              "counters of %s are %g %g %g, expected %g %g %g\n", rec->names_with_counters[i], rec->counters[i][0],
              rec->counters[i][1], rec->counters[i][2], sm, dram, mem);
    }
}

static void test_counters_off(void)
{
    const char *env[] = {"KACE_CUPTI_COUNTERS=0", NULL};
    run r;
    recording rec;
    run_to_end(&r, &rec, "counters-off", env, "launches", "50", 30);
    CHECK(rec.header_ok, "the recording does not start with 'kace-cupti 1'\n");
    CHECK(rec.n_kernels == 50, "%d kernel records, expected 50\n", rec.n_kernels);
    CHECK(rec.n_counters == 0, "%d counter records with counters off, expected 0\n", rec.n_counters);
    CHECK(rec.n_bad_kernels == 0, "%d malformed kernel records\n", rec.n_bad_kernels);
    CHECK(rec.n_errors == 0, "error records: %s\n", rec.first_error);
    CHECK(rec.ended_exit, "no '# end: exit' (the exit-time flush did not run)\n");
}

static void counters_on(const char *tag, const char *scen)
{
    run r;
    recording rec;
    run_to_end(&r, &rec, tag, NULL, scen, "50", 30);
    CHECK(rec.n_kernels == 50, "%d kernel records, expected 50\n", rec.n_kernels);
    CHECK(rec.n_counters == 5, "%d counter records, expected one per signature (5)\n", rec.n_counters);
    CHECK(rec.n_errors == 0, "error records: %s\n", rec.first_error);
    CHECK(count_in_file(r.recording, "# counters: 5 kernel(s) profiled, ") == 1,
          "no '# counters: 5 kernel(s) profiled' line (the replay's cost)\n");
    check_counter_values(&rec);
}

static void test_counters_on(void)
{
    counters_on("counters-on", "launches");
}

static void test_launch_ex(void)
{
    counters_on("launch-ex", "launches-ex");
}

static void test_two_threads(void)
{
    run r;
    recording rec;
    run_to_end(&r, &rec, "two-threads", NULL, "threads", "200", 60);
    CHECK(rec.n_kernels == 400, "%d kernel records, expected 400\n", rec.n_kernels);
    /* 5 shared signatures + 7 grid sizes of each thread's own kernel */
    CHECK(rec.n_counters == 5 + 7 + 7, "%d counter records, expected 19 (one per signature)\n", rec.n_counters);
    CHECK(rec.n_errors == 0, "error records: %s\n", rec.first_error);
    check_counter_values(&rec);
}

static void test_sigterm(void)
{
    run r;
    start(&r, "sigterm", NULL, "wait", "100");
    wait_ready(&r, 20);
    usleep(50000);
    kill(r.pid, SIGTERM);
    int st = finish(&r, 10);
    CHECK(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM,
          "the workload was not ended by SIGTERM (status 0x%x): the library must deliver it again\n", st);
    recording rec;
    read_recording(r.recording, &rec);
    CHECK(rec.n_kernels == 100, "%d kernel records after SIGTERM, expected all 100\n", rec.n_kernels);
    CHECK(rec.ended_sigterm, "no '# end: SIGTERM' (no flush at SIGTERM)\n");
    CHECK(count_in_file(r.err, "violation") == 0, "the fake CUPTI saw misuse: see %s\n", r.err);
}

static void test_in_flight(void)
{
    run r;
    start(&r, "in-flight", NULL, "in-flight", "20");
    wait_ready(&r, 20);
    kill(r.pid, SIGTERM);
    int st = finish(&r, 10);
    CHECK(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "not ended by SIGTERM (status 0x%x)\n", st);
    recording rec;
    read_recording(r.recording, &rec);
    CHECK(rec.n_kernels == 20, "%d kernel records, expected the 20 finished ones\n", rec.n_kernels);
    CHECK(rec.n_kernel_long == 0, "the kernel still running at SIGTERM was written (it has no end time)\n");
    CHECK(rec.n_bad_kernels == 0, "%d kernel records with end < start or zero sizes\n", rec.n_bad_kernels);
    CHECK(count_in_file(r.recording, "without an end time") == 1, "the skipped in-flight kernel is not noted\n");
}

static void test_periodic(void)
{
    run r;
    start(&r, "periodic", NULL, "steady", "20");
    usleep(1500000);
    recording rec;
    read_recording(r.recording, &rec);
    CHECK(rec.n_kernels > 50, "%d kernel records in the recording after 1.5 s of a running workload, expected the "
                              "records of all but the last ~200 ms (periodic delivery)\n", rec.n_kernels);
    kill(r.pid, SIGTERM);
    finish(&r, 10);
}

static void test_bad_counters(void)
{
    run r;
    recording rec;
    run_to_end(&r, &rec, "bad-counters", NULL, "bad-counters", "30", 30);
    CHECK(rec.n_kernels == 30, "%d kernel records, expected 30\n", rec.n_kernels);
    CHECK(rec.n_counters == 3, "%d counter records, expected 3 (nan, negative and good written as measured)\n",
          rec.n_counters);
    CHECK(count_in_file(r.recording, "counters nan") + count_in_file(r.recording, "counters -nan") == 1,
          "the NaN counters are not written as nan\n");
    CHECK(count_in_file(r.recording, "counters -1.0000") == 1, "the negative counters are not written\n");
}

static void test_graph(void)
{
    run r;
    recording rec;
    run_to_end(&r, &rec, "graph", NULL, "graph", "20", 30);
    CHECK(rec.n_kernels == 23, "%d kernel records, expected 3 launched + 20 in the graph\n", rec.n_kernels);
    CHECK(rec.n_kernel_named_graph == 20, "%d of the graph's kernels recorded, expected 20\n",
          rec.n_kernel_named_graph);
    CHECK(rec.n_counters == 3, "%d counter records, expected 3 (graph kernels have no launch callback)\n",
          rec.n_counters);
}

static void test_contexts(void)
{
    run r;
    recording rec;
    run_to_end(&r, &rec, "contexts", NULL, "contexts", "20", 30);
    CHECK(rec.n_kernels == 40, "%d kernel records, expected 40\n", rec.n_kernels);
    int a = 0, b = 0;
    for (int i = 0; i < rec.n_counters && i < 64; i++) {
        a += strstr(rec.names_with_counters[i], "in_ctx_a") != NULL;
        b += strstr(rec.names_with_counters[i], "in_ctx_b") != NULL;
    }
    CHECK(a == 2 && b == 2, "counters for %d signatures of context a and %d of context b, expected 2 and 2\n", a, b);
    CHECK(count_in_file(r.recording, "# context 1:") == 1, "the second context's profiler was not set up\n");
    CHECK(rec.n_errors == 0, "error records: %s\n", rec.first_error);
}

/* More contexts than the library profiles (16): every kernel is still
 * recorded, the first 16 contexts get counters, one error says why the
 * others have none. */
static void test_many_contexts(void)
{
    run r;
    recording rec;
    run_to_end(&r, &rec, "many-contexts", NULL, "many-contexts", "20", 30);
    CHECK(rec.n_kernels == 40, "%d kernel records, expected 40\n", rec.n_kernels);
    CHECK(rec.n_counters == 16, "%d counter records, expected one per profiled context (16)\n", rec.n_counters);
    CHECK(rec.n_errors == 1 && count_in_file(r.recording, "more than 16 CUDA contexts") == 1,
          "expected one 'more than 16 CUDA contexts' error, got %d error(s): %s\n", rec.n_errors, rec.first_error);
}

static void test_max_profiled(void)
{
    const char *env[] = {"KACE_CUPTI_MAX_PROFILED=2", NULL};
    run r;
    recording rec;
    run_to_end(&r, &rec, "max-profiled", env, "launches", "50", 30);
    CHECK(rec.n_kernels == 50, "%d kernel records, expected 50\n", rec.n_kernels);
    CHECK(rec.n_counters == 2, "%d counter records with KACE_CUPTI_MAX_PROFILED=2\n", rec.n_counters);
    /* Once the budget is spent, the kernels after it run with no profiler enabled. */
    CHECK(count_in_file(r.recording, "# counters: the budget of 2 profiled launch(es) is spent: profiler disabled in 1 "
                                     "context(s)") == 1,
          "the spent budget is not noted with its one disabled profiler\n");
    CHECK(count_in_file(r.err, "fake-cupti: at exit 0 range profiler(s) enabled, 0 host object(s)") == 1,
          "a profiler or host object was left after the budget: see %s\n", r.err);
}

/* A Stop that fails leaves its range started: the context is given up,
 * its range stopped before its profiler is disabled (no later kernel runs
 * inside the open range), and nothing is left enabled at exit. */
static void test_stop_fails(void)
{
    const char *env[] = {"FAKE_CUPTI_STOP_FAILS=3", NULL};
    run r;
    recording rec;
    run_to_end(&r, &rec, "stop-fails", env, "launches", "50", 30);
    CHECK(rec.n_kernels == 50, "%d kernel records, expected 50\n", rec.n_kernels);
    CHECK(rec.n_counters == 2, "%d counter records, expected the 2 before the failed Stop\n", rec.n_counters);
    CHECK(count_in_file(r.recording, "error cuptiRangeProfilerStop(&sp) failed") == 1, "the failed Stop is not recorded\n");
    CHECK(count_in_file(r.recording, "cuptiRangeProfilerDisable failed") == 0, "Disable failed: see %s\n",
          r.recording);
    CHECK(count_in_file(r.err, "fake-cupti: at exit 0 range profiler(s) enabled, 0 host object(s)") == 1,
          "a profiler was left after the failed Stop: see %s\n", r.err);
}

/* A context destroyed mid-run: its profiler is disabled while it still
 * exists, and a new context at the same address gets a profiler of its own
 * (before, its slot was taken for the new one and the stale profiler used). */
static void test_ctx_destroy(void)
{
    run r;
    recording rec;
    run_to_end(&r, &rec, "ctx-destroy", NULL, "ctx-destroy", "10", 30);
    CHECK(count_in_file(r.err, "did not get the destroyed one's address") == 0, "the scenario is not the one meant\n");
    CHECK(rec.n_kernels == 20, "%d kernel records, expected 20\n", rec.n_kernels);
    int after = 0;
    for (int i = 0; i < rec.n_counters && i < 64; i++)
        after += strstr(rec.names_with_counters[i], "after_ctx") != NULL;
    CHECK(rec.n_counters == 10 && after == 5,
          "%d counter records (%d in the new context), expected 10 (5)\n", rec.n_counters, after);
    CHECK(rec.n_errors == 0, "error records: %s\n", rec.first_error);
    CHECK(count_in_file(r.recording, "# context 0 is destroyed: its profiler is disabled") == 1,
          "the destroyed context is not noted\n");
    CHECK(count_in_file(r.err, "fake-cupti: at exit 1 range profiler(s) enabled, 1 host object(s)") == 1,
          "expected the new context's profiler alone at exit: see %s\n", r.err);
    check_counter_values(&rec);
}

/* A context destroyed while another thread holds the profiler lock (its
 * Stop takes 2.5 s): the destroying thread waits 2 s, notes the context and
 * goes on; the next launch frees its slot without a CUPTI call on its dead
 * profiler, and the new context at its address gets a profiler of its own. */
static void test_lock_held(void)
{
    char flag[600], flag_env[640];
    snprintf(flag, sizeof flag, "%s/inject-lock-held.flag", build_dir);
    snprintf(flag_env, sizeof flag_env, "FAKE_CUPTI_STOP_SLEEP_FLAG=%s", flag);
    unlink(flag);
    const char *env[] = {"FAKE_CUPTI_STOP_SLEEP=6:2500", flag_env, NULL};
    run r;
    recording rec;
    run_to_end(&r, &rec, "lock-held", env, "lock-held", "10", 30);
    CHECK(count_in_file(r.err, "kace-fake-cuda-app:") == 0, "the scenario is not the one meant: see %s\n", r.err);
    CHECK(rec.n_kernels == 21, "%d kernel records, expected 21\n", rec.n_kernels);
    int after = 0;
    for (int i = 0; i < rec.n_counters && i < 64; i++)
        after += strstr(rec.names_with_counters[i], "after_ctx") != NULL;
    CHECK(rec.n_counters == 11 && after == 5, "%d counter records (%d in the new context), expected 11 (5)\n",
          rec.n_counters, after);
    CHECK(rec.n_errors == 0, "error records: %s\n", rec.first_error);
    CHECK(count_in_file(r.recording, "# context 0 was destroyed while the profiler lock was held") == 1,
          "the context destroyed under the lock is not noted: see %s\n", r.recording);
    CHECK(count_in_file(r.recording, "# context 0 is destroyed") == 0, "the destroying thread got the lock\n");
    /* The thread's and the new context's profilers are left at exit; the
     * destroyed one's host object is freed. */
    CHECK(count_in_file(r.err, "fake-cupti: at exit 2 range profiler(s) enabled, 2 host object(s)") == 1,
          "expected 2 profilers and 2 host objects at exit: see %s\n", r.err);
    check_counter_values(&rec);
}

/* A launch captured into a CUDA graph runs no kernel: it is not profiled,
 * and its signature gets counters at its first launch that runs. Before,
 * the empty range broke the context: no counters after it. */
static void test_capture(void)
{
    run r;
    recording rec;
    run_to_end(&r, &rec, "capture", NULL, "capture", "20", 30);
    CHECK(rec.n_kernels == 27, "%d kernel records, expected 3 + 2 in the graph + 2 + 20\n", rec.n_kernels);
    int captured = 0;
    for (int i = 0; i < rec.n_counters && i < 64; i++)
        captured += strstr(rec.names_with_counters[i], "captured") != NULL;
    CHECK(rec.n_counters == 7 && captured == 2,
          "%d counter records (%d of the captured kernels), expected 7 (2): 5 cycle signatures and the captured two "
          "at their launches outside the capture\n", rec.n_counters, captured);
    CHECK(rec.n_errors == 0, "error records: %s\n", rec.first_error);
    check_counter_values(&rec);
}

/* A failed launch leaves its range empty: noted, the context keeps its
 * counters (before, it was given up on). */
static void test_failed_launch(void)
{
    run r;
    recording rec;
    run_to_end(&r, &rec, "failed-launch", NULL, "failed-launch", "20", 30);
    CHECK(rec.n_kernels == 20, "%d kernel records, expected 20 (the failed launch ran nothing)\n", rec.n_kernels);
    CHECK(rec.n_counters == 5, "%d counter records, expected 5 after the failed launch\n", rec.n_counters);
    CHECK(rec.n_errors == 0, "error records: %s\n", rec.first_error);
    CHECK(count_in_file(r.recording, "# launch of _Z8too_widePf failed (CUresult 1)") == 1,
          "the failed launch is not noted\n");
    /* It was chosen for counters and ran nothing: the one launch without a record. */
    CHECK(count_in_file(r.recording, "# profiled launches: 6 by correlation ID, 1 of them with no kernel record; 0 ") == 1,
          "the profiled launch without a kernel record is not counted\n");
}

/* NCCL kernels are recorded, never replayed. */
static void test_nccl(void)
{
    run r;
    recording rec;
    run_to_end(&r, &rec, "nccl", NULL, "nccl", "20", 30);
    CHECK(rec.n_kernels == 21, "%d kernel records, expected 21\n", rec.n_kernels);
    CHECK(rec.n_counters == 5, "%d counter records, expected 5 (none for the NCCL kernel)\n", rec.n_counters);
    CHECK(count_in_file(r.recording, "# NCCL kernels are not profiled") == 1, "the NCCL kernel is not noted\n");
}

/* A 3000-byte kernel name (CUTLASS and cute names are that long) is written
 * whole in its counters record, so that kace joins it to its kernel records
 * (before, it was cut to 511 bytes). */
static void test_long_name(void)
{
    run r;
    recording rec;
    run_to_end(&r, &rec, "long-name", NULL, "long-name", "20", 30);
    char name[3001];
    memset(name, 'x', 3000);
    memcpy(name, "_Z4cute", 7);
    name[3000] = '\0';
    char counters_tail[3003];
    snprintf(counters_tail, sizeof counters_tail, " %s\n", name);
    CHECK(rec.n_counters == 6, "%d counter records, expected 6\n", rec.n_counters);
    CHECK(count_in_file(r.recording, counters_tail) == 2,
          "the 3000-byte name is not whole in both its kernel and counters records\n");
}

/* A child CUDA process with the same environment writes its own recording
 * (FILE.<pid>) and leaves the first process's alone. */
static void test_child(void)
{
    run r;
    char pattern[600];
    snprintf(pattern, sizeof pattern, "%s/inject-child.cupti.*", build_dir);
    glob_t g;
    if (glob(pattern, 0, NULL, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc; i++)
            unlink(g.gl_pathv[i]);
    globfree(&g);
    recording rec;
    run_to_end(&r, &rec, "child", NULL, "child", "20", 30);
    CHECK(rec.header_ok, "the first process's recording lost its header\n");
    CHECK(rec.n_kernels == 20, "%d kernel records in the first process's recording, expected its 20\n", rec.n_kernels);
    CHECK(count_in_file(r.recording, "another process's recording") == 0, "the first process thinks it is a child\n");
    int found = glob(pattern, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
    CHECK(found == 1, "%d recordings FILE.<pid> of the child, expected 1\n", found);
    if (found == 1) {
        recording child;
        read_recording(g.gl_pathv[0], &child);
        CHECK(child.header_ok && child.n_kernels == 10, "the child's recording: header %d, %d kernels, expected 10\n",
              child.header_ok, child.n_kernels);
        CHECK(count_in_file(g.gl_pathv[0], "another process's recording") == 1, "the child's recording has no note\n");
        unlink(g.gl_pathv[0]);
    }
    if (found >= 0)
        globfree(&g);
}

/* A CUPTI that wants the configuration before every Start: set again, noted once. */
static void test_config_per_range(void)
{
    const char *env[] = {"FAKE_CUPTI_CONFIG_PER_RANGE=1", NULL};
    run r;
    recording rec;
    run_to_end(&r, &rec, "config-per-range", env, "launches", "50", 30);
    CHECK(rec.n_counters == 5, "%d counter records, expected 5\n", rec.n_counters);
    CHECK(rec.n_errors == 0, "error records: %s\n", rec.first_error);
    CHECK(count_in_file(r.recording, "set again before each range") == 1, "the fallback is not noted once\n");
    check_counter_values(&rec);
}

/* Real CUPTI's way (CUDA 13.0 on an H200): a profiled launch gets no kernel
 * record. Every other launch is recorded, each signature keeps its counters,
 * and the library counts the profiled launches that had none. */
static void test_no_record_profiled(void)
{
    const char *env[] = {"FAKE_CUPTI_NO_RECORD_PROFILED=1", NULL};
    run r;
    recording rec;
    run_to_end(&r, &rec, "no-record-profiled", env, "launches", "50", 30);
    CHECK(rec.n_kernels == 45, "%d kernel records for 50 launches, 5 of them profiled: expected 45\n", rec.n_kernels);
    CHECK(rec.n_counters == 5, "%d counter records, expected 5\n", rec.n_counters);
    CHECK(rec.n_errors == 0, "error records: %s\n", rec.first_error);
    CHECK(count_in_file(r.recording, "# profiled launches: 5 by correlation ID, 5 of them with no kernel record; 0 ") == 1,
          "the profiled launches without a kernel record are not counted\n");
    check_counter_values(&rec);
}

#define REPLAY_PASSES 12 /* the fake's FAKE_REPLAY_PASSES (fake_cuda.h) */

/* Should CUPTI give each replay pass a kernel record (the fake's
 * FAKE_CUPTI_RECORD_PER_PASS), a profiled launch still counts once. */
static void test_record_per_pass(void)
{
    const char *env[] = {"FAKE_CUPTI_RECORD_PER_PASS=1", NULL};
    run r;
    recording rec;
    run_to_end(&r, &rec, "record-per-pass", env, "launches", "50", 30);
    CHECK(rec.n_kernels == 50, "%d kernel records for 50 launches, expected 50 (one per launch, not per replay "
                               "pass)\n", rec.n_kernels);
    CHECK(rec.n_counters == 5, "%d counter records, expected 5\n", rec.n_counters);
    CHECK(rec.n_errors == 0, "error records: %s\n", rec.first_error);
    int skipped = 0; /* each delivered buffer notes its own */
    FILE *f = fopen(r.recording, "r");
    char line[4096];
    while (f && fgets(line, sizeof line, f)) {
        int n;
        if (sscanf(line, "# %d kernel record(s) of replay passes skipped", &n) == 1)
            skipped += n;
    }
    if (f)
        fclose(f);
    CHECK(skipped == 5 * (REPLAY_PASSES - 1), "%d pass records noted as skipped, expected %d\n", skipped,
          5 * (REPLAY_PASSES - 1));
    CHECK(count_in_file(r.recording, "# profiled launches:") == 0,
          "a profiled launch's correlation ID matched no kernel record\n");
    check_counter_values(&rec);
}

/* A device where counters are unsupported: one error saying why, every
 * kernel recorded, and counters off for the rest of the run. */
static void test_unsupported(void)
{
    const char *env[] = {"FAKE_CUPTI_UNSUPPORTED=1", NULL};
    run r;
    recording rec;
    run_to_end(&r, &rec, "unsupported", env, "launches", "50", 30);
    CHECK(rec.n_kernels == 50, "%d kernel records, expected 50\n", rec.n_kernels);
    CHECK(rec.n_counters == 0, "%d counter records, expected 0\n", rec.n_counters);
    CHECK(rec.n_errors == 1 && strstr(rec.first_error, "vGPU profiling disabled"),
          "expected one error naming vGPU profiling, got %d: %s\n", rec.n_errors, rec.first_error);
    CHECK(count_in_file(r.recording, "# counters off: no CUDA context") == 1, "counters were not turned off\n");
}

/* An MPS client: noted, counters still tried. */
static void test_mps_client(void)
{
    const char *env[] = {"FAKE_CUDA_MPS=1", NULL};
    run r;
    recording rec;
    run_to_end(&r, &rec, "mps-client", env, "launches", "50", 30);
    CHECK(rec.n_counters == 5, "%d counter records, expected 5\n", rec.n_counters);
    CHECK(count_in_file(r.recording, "is an MPS client") == 1, "the MPS client is not noted\n");
}

/* kace profile's cap ($KACE_CUPTI_REPLAY): only the listed signatures are
 * replayed, once each, and the profiler is released after the last of them,
 * so launches stop taking the lock; the fake CUPTI logs each replay. A line
 * that is not a signature is an error record and skipped; an empty list
 * replays nothing. */
static void test_replay_list(void)
{
    static char list_env[600], log_env[600];
    char list[512], log[512];
    snprintf(list, sizeof list, "%s/inject-replay-list.txt", build_dir);
    snprintf(log, sizeof log, "%s/inject-replay-list.log", build_dir);
    /* 2 of the 5 signatures of "launches" (cycle_kernel: names[i], grid 100 + i, block 128 + 32 i). */
    FILE *f = fopen(list, "w");
    CHECK(f != NULL, "cannot write %s\n", list);
    if (!f)
        return;
    fprintf(f, "# the longest first\n101 1 1 160 1 1 _Z6triadPfS_S_f\n104 1 1 256 1 1 _Z7softmaxPf\nnot a signature\n");
    fclose(f);
    snprintf(list_env, sizeof list_env, "KACE_CUPTI_REPLAY=%s", list);
    snprintf(log_env, sizeof log_env, "FAKE_CUPTI_REPLAY_LOG=%s", log);
    const char *env[] = {list_env, log_env, NULL};
    run r;
    recording rec;
    unlink(log);
    run_to_end(&r, &rec, "replay-list", env, "launches", "50", 30);
    CHECK(rec.n_kernels == 50, "%d kernel records, expected 50 (every launch is timed)\n", rec.n_kernels);
    CHECK(rec.n_counters == 2, "%d counter records, expected the 2 listed signatures'\n", rec.n_counters);
    for (int i = 0; i < rec.n_counters && i < 64; i++)
        CHECK(!strcmp(rec.names_with_counters[i], "_Z6triadPfS_S_f") || !strcmp(rec.names_with_counters[i], "_Z7softmaxPf"),
              "%s was replayed, it is not in the list\n", rec.names_with_counters[i]);
    CHECK(count_in_file(log, "replay ") == 2, "the fake CUPTI replayed %d launches, expected 2\n",
          count_in_file(log, "replay "));
    CHECK(count_in_file(r.recording, "# replay list: 2 signature(s) from ") == 1, "the list is not noted\n");
    CHECK(count_in_file(r.recording, "the budget of 2 profiled launch(es) is spent") == 1,
          "the profiler was not released after the last listed signature\n");
    CHECK(rec.n_errors == 1 && strstr(rec.first_error, "inject-replay-list.txt:4: expected"),
          "expected one error naming line 4 of the list, got %d: %s\n", rec.n_errors, rec.first_error);
    check_counter_values(&rec);

    f = fopen(list, "w");
    if (f)
        fclose(f);
    unlink(log);
    run_to_end(&r, &rec, "replay-list-empty", env, "launches", "50", 30);
    CHECK(rec.n_kernels == 50, "empty list: %d kernel records, expected 50\n", rec.n_kernels);
    CHECK(rec.n_counters == 0 && count_in_file(log, "replay ") == 0,
          "empty list: %d counter records, %d replays, expected none\n", rec.n_counters, count_in_file(log, "replay "));
    CHECK(rec.n_errors == 0, "empty list: error records: %s\n", rec.first_error);
}

/* $KACE_CUPTI_TRACE_UNTIL (kace profile's clean run): once the file exists,
 * activity recording stops; the workload runs on, and no kernel record
 * comes after the note. Waits for records, never for time. */
static void test_trace_until(void)
{
    static char until_env[600];
    char until[512];
    snprintf(until, sizeof until, "%s/inject-trace-until.stop", build_dir);
    unlink(until);
    snprintf(until_env, sizeof until_env, "KACE_CUPTI_TRACE_UNTIL=%s", until);
    const char *env[] = {"KACE_CUPTI_COUNTERS=0", "KACE_CUPTI_FLUSH_MS=20", until_env, NULL};
    run r;
    start(&r, "trace-until", env, "steady", "4");
    recording rec;
    double give_up = now_s() + 30;
    do {
        usleep(20000);
        read_recording(r.recording, &rec);
    } while (rec.n_kernels < 50 && now_s() < give_up);
    CHECK(rec.n_kernels >= 50, "only %d kernel records while the workload runs\n", rec.n_kernels);
    FILE *f = fopen(until, "w");
    if (f)
        fclose(f);
    while (count_in_file(r.recording, "# activity recording stopped at ") == 0 && now_s() < give_up)
        usleep(20000);
    int running = waitpid(r.pid, NULL, WNOHANG) == 0;
    CHECK(running, "the workload ended before activity recording stopped: the test shows nothing\n");
    expect_clean_exit(&r, finish(&r, 30));
    read_recording(r.recording, &rec);
    CHECK(count_in_file(r.recording, "# activity recording stopped at ") == 1, "the stop is not noted once\n");
    /* Nothing but the end's notes after the stop. */
    FILE *in = fopen(r.recording, "r");
    char line[4096];
    int after = 0, kernels_after = 0;
    while (in && fgets(line, sizeof line, in)) {
        after |= strstr(line, "# activity recording stopped at ") == line;
        kernels_after += after && !strncmp(line, "kernel ", 7);
    }
    if (in)
        fclose(in);
    CHECK(kernels_after == 0, "%d kernel records after activity recording stopped\n", kernels_after);
    CHECK(rec.ended_exit && rec.n_errors == 0, "no clean end, or errors: %s\n", rec.first_error);
    unlink(until);
}

/* The CUDA start gate: the workload waits in cuInit until a byte comes
 * down the FIFO, and only then does the library set up (its recording). */
static void test_gate(void)
{
    static char gate_env[600];
    char gate[512];
    snprintf(gate, sizeof gate, "%s/inject-gate.fifo", build_dir);
    unlink(gate);
    CHECK(mkfifo(gate, 0600) == 0, "cannot make %s\n", gate);
    int fd = open(gate, O_RDWR | O_NONBLOCK | O_CLOEXEC); /* as kace holds it */
    CHECK(fd >= 0, "cannot open %s\n", gate);
    snprintf(gate_env, sizeof gate_env, "KACE_CUPTI_GATE=%s", gate);
    const char *env[] = {"KACE_CUPTI_COUNTERS=0", gate_env, NULL};
    run r;
    start(&r, "gate", env, "steady", "2");
    double give_up = now_s() + 30;
    while (count_in_file(r.err, "waits at the CUDA start gate") == 0 && now_s() < give_up)
        usleep(10000);
    CHECK(count_in_file(r.err, "waits at the CUDA start gate") == 1, "no word that it waits at the gate\n");
    struct stat sb;
    CHECK(stat(r.recording, &sb) != 0, "the library set up before its gate opened\n");
    CHECK(waitpid(r.pid, NULL, WNOHANG) == 0, "the workload did not wait at its gate\n");
    CHECK(write(fd, "1", 1) == 1, "cannot open the gate\n");
    expect_clean_exit(&r, finish(&r, 30));
    recording rec;
    read_recording(r.recording, &rec);
    CHECK(rec.n_kernels > 0 && rec.ended_exit, "no kernels recorded after the gate opened (%d)\n", rec.n_kernels);
    close(fd);
    unlink(gate);
}

/* A gate that cannot open ends the workload, saying why: kace's process
 * gone, or the time bound. */
static void test_gate_fails(void)
{
    static char gate_env[600], pid_env[64];
    char gate[512];
    snprintf(gate, sizeof gate, "%s/inject-gate-fails.fifo", build_dir);
    unlink(gate);
    CHECK(mkfifo(gate, 0600) == 0, "cannot make %s\n", gate);
    int fd = open(gate, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    snprintf(gate_env, sizeof gate_env, "KACE_CUPTI_GATE=%s", gate);
    pid_t gone = fork(); /* a process id that has ended: kace gone */
    if (gone == 0)
        _exit(0);
    waitpid(gone, NULL, 0);
    snprintf(pid_env, sizeof pid_env, "KACE_CUPTI_GATE_PID=%ld", (long)gone);
    const char *env[] = {gate_env, pid_env, NULL};
    run r;
    start(&r, "gate-gone", env, "steady", "2");
    int status = finish(&r, 30);
    CHECK(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 75, "kace gone: status 0x%x, not 75\n", status);
    CHECK(count_in_file(r.err, "did not open: kace is gone") == 1, "kace gone: not said (see %s)\n", r.err);
    const char *env2[] = {gate_env, "KACE_CUPTI_GATE_TIMEOUT_S=0", NULL};
    start(&r, "gate-timeout", env2, "steady", "2");
    status = finish(&r, 30);
    CHECK(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 75, "time bound: status 0x%x, not 75\n", status);
    CHECK(count_in_file(r.err, "did not open: not opened in time") == 1, "time bound: not said (see %s)\n", r.err);
    if (fd >= 0)
        close(fd);
    unlink(gate);
}

static const struct {
    const char *name;
    void (*fn)(void);
} tests[] = {
    {"trace-until", test_trace_until},
    {"gate", test_gate},                 {"gate-fails", test_gate_fails},
    {"replay-list", test_replay_list},
    {"capture", test_capture},           {"failed-launch", test_failed_launch}, {"nccl", test_nccl},
    {"long-name", test_long_name},       {"child", test_child},                 {"config-per-range", test_config_per_range},
    {"unsupported", test_unsupported},   {"mps-client", test_mps_client},       {"record-per-pass", test_record_per_pass},
    {"counters-off", test_counters_off}, {"counters-on", test_counters_on},   {"launch-ex", test_launch_ex},
    {"two-threads", test_two_threads},   {"sigterm", test_sigterm},           {"in-flight", test_in_flight},
    {"periodic", test_periodic},         {"bad-counters", test_bad_counters}, {"graph", test_graph},
    {"contexts", test_contexts},         {"max-profiled", test_max_profiled}, {"many-contexts", test_many_contexts},
    {"ctx-destroy", test_ctx_destroy},   {"stop-fails", test_stop_fails},     {"lock-held", test_lock_held},
    {"no-record-profiled", test_no_record_profiled},
};

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s SCENARIO FAKE_DIR LIBKACE_CUPTI\n", argv[0]);
        return 2;
    }
    build_dir = argv[2];
    inject_lib = argv[3];
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        if (strcmp(argv[1], tests[i].name) != 0)
            continue;
        scenario_name = tests[i].name;
        tests[i].fn();
        if (failures == 0)
            printf("ok %s\n", scenario_name);
        return failures ? 1 : 0;
    }
    fprintf(stderr, "unknown scenario %s\n", argv[1]);
    return 2;
}
