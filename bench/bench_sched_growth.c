/* Growth of the scheduler's time with the number of jobs:
 * one cluster of 100,000 GPUs (8-GPU nodes) and one synthetic stream of
 * 1,000,000 jobs (bench_sched.c's: offered load 1 at exclusive speed, mean
 * one hour, 40% LS, kace policy with the tuned defaults); the first 100,000
 * jobs and then all of them are replayed by kace_sim_run, R times each.
 *
 *   kace-bench-sched-growth DATA_DIR [R] [N_SMALL N_LARGE N_GPUS [calls|sim]]
 *
 * Per replay it prints the thread's CPU time of the whole replay, the wall
 * time of the scheduler's own calls (submit/finish, the simulator's
 * decide_seconds) and a hash of the placements (each job's GPU and start
 * time, in job order), so that builds can be checked to decide identically.
 * One thread. bench/bench_sched_growth.sh runs it against the old build. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>

#include "kace/sim.h"
#include "kace/store.h"

#define BENCH_PROG "kace-bench-sched-growth"
#include "bench_sched_world.h"

/* FNV-1a over each job's GPU and start time (bits), in job order. */
static uint64_t placement_hash(const kace_sim_result *r)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < r->n_jobs; i++) {
        uint64_t v[2];
        v[0] = (uint64_t)(uint32_t)r->gpu[i];
        memcpy(&v[1], &r->start[i], sizeof v[1]);
        const unsigned char *b = (const unsigned char *)v;
        for (size_t k = 0; k < sizeof v; k++)
            h = (h ^ b[k]) * 1099511628211ULL;
    }
    return h;
}

static double thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the scheduler alone: a recorded stream of calls replayed ----
 *
 * Pass 1 drives a scheduler with a small event loop in which every job
 * runs its work at exclusive speed (a finish at start + work), and records
 * the calls it made (submit job i / finish job i) in order. Pass 2 replays
 * exactly those calls on a fresh scheduler, timed as a whole (thread CPU
 * time; no clock read per call), with a start callback that only hashes the
 * placements. Decisions are deterministic, so the replay is valid for any
 * build that decides identically, and its hash shows that it does. */

typedef struct fin_event {
    double time;
    int id;
} fin_event;

typedef struct recorder {
    const kace_sim_job *jobs;
    double now;
    fin_event *heap;
    size_t n_heap;
} recorder;

static void rec_push(recorder *r, fin_event e)
{
    size_t i = r->n_heap++;
    while (i > 0 && (r->heap[(i - 1) / 2].time > e.time ||
                     (r->heap[(i - 1) / 2].time == e.time && r->heap[(i - 1) / 2].id > e.id))) {
        r->heap[i] = r->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    r->heap[i] = e;
}

static fin_event rec_pop(recorder *r)
{
    fin_event top = r->heap[0], last = r->heap[--r->n_heap];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= r->n_heap)
            break;
        if (c + 1 < r->n_heap &&
            (r->heap[c + 1].time < r->heap[c].time ||
             (r->heap[c + 1].time == r->heap[c].time && r->heap[c + 1].id < r->heap[c].id)))
            c++;
        if (r->heap[c].time > last.time || (r->heap[c].time == last.time && r->heap[c].id > last.id))
            break;
        r->heap[i] = r->heap[c];
        i = c;
    }
    if (r->n_heap)
        r->heap[i] = last;
    return top;
}

static void rec_on_start(void *user, int id, const int *gpus, int n)
{
    recorder *r = user;
    (void)gpus;
    (void)n;
    rec_push(r, (fin_event){r->now + r->jobs[id].work, id});
}

static kace_sched_policy policy = KACE_SCHED_KACE;

static kace_status new_sched(kace_ctx *ctx, world *w, const int *ng, size_t n_nodes, kace_sched_start_fn fn,
                             void *user, kace_sched **out)
{
    kace_sched_config cfg;
    kace_sched_config_default(&cfg, policy);
    return kace_sched_new(ctx, &cfg, w->profiles, w->pool, w->n_pool, kace_truth_runnable(w->truth), &w->rates, ng,
                          n_nodes, fn, user, out);
}

/* The calls for jobs[0..n): op = 2 * id (submit) or 2 * id + 1 (finish). */
static int record_calls(kace_ctx *ctx, world *w, const int *ng, size_t n_nodes, const kace_sim_job *jobs, size_t n,
                        int64_t *ops, size_t *n_ops, size_t *max_queued)
{
    recorder r = {.jobs = jobs, .heap = malloc(n * sizeof(fin_event))};
    kace_sched *s = NULL;
    if (!r.heap || new_sched(ctx, w, ng, n_nodes, rec_on_start, &r, &s))
        return die(ctx, "scheduler");
    size_t next = 0, k = 0;
    *max_queued = 0;
    while (next < n || r.n_heap) {
        if (next < n && (!r.n_heap || jobs[next].arrival <= r.heap[0].time)) {
            r.now = jobs[next].arrival;
            kace_sched_job sj = {(int)next, jobs[next].workload, jobs[next].ls, jobs[next].gpu_milli,
                                 jobs[next].num_gpu};
            ops[k++] = 2 * (int64_t)next;
            if (kace_sched_submit(ctx, s, &sj))
                return die(ctx, "submit");
            next++;
        } else {
            fin_event e = rec_pop(&r);
            r.now = e.time;
            ops[k++] = 2 * (int64_t)e.id + 1;
            if (kace_sched_finish(ctx, s, e.id))
                return die(ctx, "finish");
        }
        size_t q = kace_sched_n_queued(s);
        if (q > *max_queued)
            *max_queued = q;
    }
    kace_sched_free(&s);
    free(r.heap);
    *n_ops = k;
    return 0;
}

/* The identity check's stream: bench_sched.c's at offered load 1.5 (the
 * queue grows through the whole stream, so drains, overload sharing and
 * reservations all happen), every 20th job a gang of 2..8 GPUs, and
 * gpu_milli spread over 100..1000 for PACKING. */
static kace_sim_job *overloaded_jobs(const world *w, size_t n_gpus, size_t n_jobs)
{
    kace_sim_job *jobs = synthetic_jobs(w, n_gpus, n_jobs);
    if (!jobs)
        return NULL;
    for (size_t i = 0; i < n_jobs; i++) {
        jobs[i].arrival /= 1.5;
        jobs[i].gpu_milli = 100 + (int)(uniform01() * 900);
        if (i % 20 == 19)
            jobs[i].num_gpu = 2 + (int)(uniform01() * 7) % 7;
    }
    return jobs;
}

static void hash_on_start(void *user, int id, const int *gpus, int n)
{
    uint64_t *h = user;
    for (int i = 0; i < n; i++)
        *h = (*h ^ ((uint64_t)(uint32_t)id << 32 | (uint32_t)gpus[i])) * 1099511628211ULL;
}

/* Replays the calls; *cpu: the thread's CPU time of the calls alone. */
static int replay_calls(kace_ctx *ctx, world *w, const int *ng, size_t n_nodes, const kace_sim_job *jobs,
                        const int64_t *ops, size_t n_ops, double *cpu, uint64_t *hash)
{
    *hash = 1469598103934665603ULL;
    kace_sched *s = NULL;
    if (new_sched(ctx, w, ng, n_nodes, hash_on_start, hash, &s))
        return die(ctx, "scheduler");
    double c0 = thread_cpu();
    for (size_t i = 0; i < n_ops; i++) {
        int id = (int)(ops[i] >> 1);
        kace_status st;
        if (ops[i] & 1) {
            st = kace_sched_finish(ctx, s, id);
        } else {
            kace_sched_job sj = {id, jobs[id].workload, jobs[id].ls, jobs[id].gpu_milli, jobs[id].num_gpu};
            st = kace_sched_submit(ctx, s, &sj);
        }
        if (st)
            return die(ctx, "replay");
    }
    *cpu = thread_cpu() - c0;
    kace_sched_free(&s);
    return 0;
}

int main(int argc, char **argv)
{
    const char *data = argc > 1 ? argv[1] : "../shared/data";
    int reps = argc > 2 ? atoi(argv[2]) : 3;
    size_t n_small = argc > 3 ? strtoul(argv[3], NULL, 10) : 100000;
    size_t n_large = argc > 4 ? strtoul(argv[4], NULL, 10) : 1000000;
    size_t n_gpus = argc > 5 ? strtoul(argv[5], NULL, 10) : 100000;
    /* For a profiler: only the calls, or only the whole replays, of the growth streams. */
    const char *only = argc > 6 ? argv[6] : "";
    bool calls_only = strcmp(only, "calls") == 0, sim_only = strcmp(only, "sim") == 0;
    if (reps < 1 || n_small < 1 || n_large < n_small || n_gpus < 8) {
        fprintf(stderr, "usage: kace-bench-sched-growth DATA_DIR [R] [N_SMALL N_LARGE N_GPUS [calls|sim]]\n");
        return 2;
    }
    kace_ctx *ctx = kace_ctx_new();
    world w;
    memset(&w, 0, sizeof w);
    if (load_world(ctx, data, &w))
        return 1;
    kace_sim_job *jobs = synthetic_jobs(&w, n_gpus, n_large);
    size_t n_nodes = n_gpus / 8;
    int *ng = malloc(n_nodes * sizeof *ng);
    if (!jobs || !ng)
        return 1;
    for (size_t i = 0; i < n_nodes; i++)
        ng[i] = 8;
    /* Identity: the placements of an overloaded stream on 1,000 GPUs under
     * three policies (calls replayed and the whole replay). */
    if (!calls_only && !sim_only) {
        size_t n_check = 100000, check_gpus = 1000, check_nodes = check_gpus / 8;
        kace_sim_job *cj = overloaded_jobs(&w, check_gpus, n_check);
        int64_t *cops = malloc(2 * n_check * sizeof *cops);
        if (!cj || !cops)
            return 1;
        static const kace_sched_policy checked[] = {KACE_SCHED_KACE, KACE_SCHED_PACKING, KACE_SCHED_MEMCAP};
        for (size_t p = 0; p < sizeof checked / sizeof *checked; p++) {
            policy = checked[p];
            size_t n_cops = 0, max_q = 0;
            double cpu = 0;
            uint64_t h = 0;
            if (record_calls(ctx, &w, ng, check_nodes, cj, n_check, cops, &n_cops, &max_q) ||
                replay_calls(ctx, &w, ng, check_nodes, cj, cops, n_cops, &cpu, &h))
                return 1;
            kace_sim_config cfg = {.record_latency = false};
            kace_sched_config_default(&cfg.sched, policy);
            kace_sim_result *r = NULL;
            if (kace_sim_run(ctx, &cfg, w.profiles, w.truth, w.pool, w.n_pool, &w.rates, ng, check_nodes, cj, n_check,
                             &r))
                return die(ctx, "simulate");
            /* check POLICY GPUS JOBS calls_hash max_queued sim_hash */
            printf("check %s %zu %zu %016llx %zu %016llx\n", kace_sched_policy_name(policy), check_gpus, n_check,
                   (unsigned long long)h, max_q, (unsigned long long)placement_hash(r));
            kace_sim_result_free(&r);
        }
        policy = KACE_SCHED_KACE;
        free(cj);
        free(cops);
    }
    const size_t sizes[2] = {n_small, n_large};
    int64_t *ops[2] = {malloc(2 * n_small * sizeof(int64_t)), malloc(2 * n_large * sizeof(int64_t))};
    size_t n_ops[2], max_q[2];
    if (!ops[0] || !ops[1])
        return 1;
    for (int s = 0; s < 2 && !sim_only; s++)
        if (record_calls(ctx, &w, ng, n_nodes, jobs, sizes[s], ops[s], &n_ops[s], &max_q[s]))
            return 1;
    for (int rep = 0; rep < reps; rep++) {
        for (int s = 0; s < 2 && !sim_only; s++) {
            double cpu = 0;
            uint64_t h = 0;
            if (replay_calls(ctx, &w, ng, n_nodes, jobs, ops[s], n_ops[s], &cpu, &h))
                return 1;
            /* calls GPUS JOBS N_CALLS cpu_s hash max_queued */
            printf("calls %zu %zu %zu %.4f %016llx %zu\n", n_gpus, sizes[s], n_ops[s], cpu, (unsigned long long)h,
                   max_q[s]);
            fflush(stdout);
        }
        for (int s = 0; s < 2 && !calls_only; s++) {
            kace_sim_config cfg = {.record_latency = false};
            kace_sched_config_default(&cfg.sched, KACE_SCHED_KACE);
            kace_sim_result *r = NULL;
            double w0 = bench_now(), c0 = thread_cpu();
            if (kace_sim_run(ctx, &cfg, w.profiles, w.truth, w.pool, w.n_pool, &w.rates, ng, n_nodes, jobs, sizes[s],
                             &r))
                return die(ctx, "simulate");
            double cpu = thread_cpu() - c0, wall = bench_now() - w0;
            /* sim GPUS JOBS cpu_s wall_s sched_wall_s hash mean_jct_h shared */
            printf("sim %zu %zu %.4f %.4f %.4f %016llx %.6f %.6f\n", n_gpus, sizes[s], cpu, wall, r->decide_seconds,
                   (unsigned long long)placement_hash(r), r->mean_jct / 3600, r->shared_fraction);
            fflush(stdout);
            kace_sim_result_free(&r);
        }
    }
    free(ops[0]);
    free(ops[1]);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("rss_max_kb %ld\n", ru.ru_maxrss);
    free(jobs);
    free(ng);
    free_world(&w);
    kace_ctx_free(&ctx);
    return 0;
}
