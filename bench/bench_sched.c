/* Speed of the online scheduler and the trace replay (make bench).
 *
 *   kace-bench-sched DATA_DIR        (DATA_DIR = ../shared/data)
 *
 * 1. The Alibaba trace: parse + replay under kace, and all eight policies.
 * 2. Synthetic clusters of 1k, 10k and 100k GPUs (8-GPU nodes) with 10 jobs
 *    per GPU (1,000,000 jobs at 100k), arrivals at the rate that keeps the
 *    cluster busy at exclusive speed: wall time and per-decision latency
 *    (p50, p99) of the indexed scheduler, and on the first 20,000 jobs the
 *    same policy finding its GPU by scanning every GPU (the naive peer),
 *    as a ratio measured in the same run. One thread throughout. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kace/sim.h"
#include "kace/store.h"

#define BENCH_PROG "kace-bench-sched"
#include "bench_sched_world.h"

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static double percentile(float *v, size_t n, double q)
{
    qsort(v, n, sizeof *v, cmp_float);
    return n ? v[(size_t)(q * (double)(n - 1))] : 0;
}

static int run_sim(kace_ctx *ctx, world *w, kace_sched_policy p, bool scan, const int *ng, size_t nn,
                   const kace_sim_job *jobs, size_t n_jobs, kace_sim_result **r, double *secs)
{
    kace_sim_config cfg = {.record_latency = true};
    kace_sched_config_default(&cfg.sched, p);
    cfg.sched.scan_all = scan;
    double t0 = bench_now();
    if (kace_sim_run(ctx, &cfg, w->profiles, w->truth, w->pool, w->n_pool, &w->rates, ng, nn, jobs, n_jobs, r))
        return die(ctx, "simulate");
    *secs = bench_now() - t0;
    return 0;
}

static int bench_trace(kace_ctx *ctx, world *w, const char *data)
{
    char pods[4096], nodes_path[4096];
    snprintf(pods, sizeof pods, "%s/alibaba-gpu-2023/openb_pod_list_default.csv", data);
    snprintf(nodes_path, sizeof nodes_path, "%s/alibaba-gpu-2023/openb_node_list_gpu_node.csv", data);
    printf("== the Alibaba trace (%s), median of 5 runs ==\n", pods);
    static const size_t sizes[] = {32, 0};
    for (size_t s = 0; s < 2; s++) {
        double parse_t[5], kace_t[5], all_t[5];
        size_t n_jobs = 0, cluster = 0;
        for (int rep = 0; rep < 5; rep++) {
            double t0 = bench_now();
            kace_trace *trace = NULL;
            kace_node_list *nodes = NULL;
            kace_sim_job *jobs = NULL;
            int *ng = NULL;
            size_t nn = 0, n_cpu = 0;
            if (kace_trace_load(ctx, pods, &trace) || kace_node_list_load(ctx, nodes_path, &nodes) ||
                kace_sim_jobs_from_trace(ctx, trace, w->profiles, w->pool, w->n_pool, &jobs, &n_jobs, &n_cpu) ||
                kace_sim_cluster(ctx, nodes, sizes[s], &ng, &nn))
                return die(ctx, "trace");
            parse_t[rep] = bench_now() - t0;
            cluster = 0;
            for (size_t i = 0; i < nn; i++)
                cluster += (size_t)ng[i];
            all_t[rep] = 0;
            for (int p = 0; p < KACE_SCHED_N_POLICIES; p++) {
                kace_sim_result *r = NULL;
                double secs = 0;
                if (run_sim(ctx, w, p, false, ng, nn, jobs, n_jobs, &r, &secs))
                    return 1;
                all_t[rep] += secs;
                if (p == KACE_SCHED_KACE)
                    kace_t[rep] = secs;
                kace_sim_result_free(&r);
            }
            free(jobs);
            free(ng);
            kace_trace_free(&trace);
            kace_node_list_free(&nodes);
        }
        float a[5], b[5], c[5];
        for (int i = 0; i < 5; i++) {
            a[i] = (float)parse_t[i];
            b[i] = (float)kace_t[i];
            c[i] = (float)all_t[i];
        }
        double pa = percentile(a, 5, 0.5), pk = percentile(b, 5, 0.5), pall = percentile(c, 5, 0.5);
        printf("%zu GPUs, %zu GPU jobs: parse %.1f ms + kace replay %.1f ms = %.3f s (goal < 1 s); all 8 policies "
               "%.1f ms\n",
               cluster, n_jobs, 1e3 * pa, 1e3 * pk, pa + pk, 1e3 * pall);
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *data = argc > 1 ? argv[1] : "../shared/data";
    kace_ctx *ctx = kace_ctx_new();
    world w;
    memset(&w, 0, sizeof w);
    if (load_world(ctx, data, &w) || bench_trace(ctx, &w, data))
        return 1;

    printf("\n== synthetic clusters, kace policy, one thread ==\n");
    printf("%8s %9s %9s %11s %9s %9s | %-22s %11s %11s %7s\n", "GPUs", "jobs", "wall_s", "decisions/s", "p50_us",
           "p99_us", "same jobs", "idx_mean_us", "scan_mean_us", "ratio");
    static const size_t sizes[] = {1000, 10000, 100000};
    for (size_t s = 0; s < 3; s++) {
        size_t n_gpus = sizes[s], n_jobs = 10 * n_gpus;
        kace_sim_job *jobs = synthetic_jobs(&w, n_gpus, n_jobs);
        size_t n_nodes = n_gpus / 8;
        int *ng = malloc(n_nodes * sizeof *ng);
        if (!jobs || !ng)
            return 1;
        for (size_t i = 0; i < n_nodes; i++)
            ng[i] = 8;
        kace_sim_result *r = NULL;
        double secs = 0;
        if (run_sim(ctx, &w, KACE_SCHED_KACE, false, ng, n_nodes, jobs, n_jobs, &r, &secs))
            return 1;
        double p50 = percentile(r->submit_seconds, n_jobs, 0.5), p99 = percentile(r->submit_seconds, n_jobs, 0.99);
        kace_sim_result_free(&r);

        /* The peer: the same policy scanning every GPU per decision. */
        size_t n_prefix = n_jobs < 20000 ? n_jobs : 20000;
        double mean[2];
        for (int scan = 0; scan < 2; scan++) {
            double t = 0;
            if (run_sim(ctx, &w, KACE_SCHED_KACE, scan, ng, n_nodes, jobs, n_prefix, &r, &t))
                return 1;
            double sum = 0;
            for (size_t i = 0; i < n_prefix; i++)
                sum += r->submit_seconds[i];
            mean[scan] = sum / (double)n_prefix;
            kace_sim_result_free(&r);
        }
        printf("%8zu %9zu %9.2f %11.0f %9.2f %9.2f | first %-16zu %11.2f %11.2f %6.0fx\n", n_gpus, n_jobs, secs,
               (double)n_jobs / secs, 1e6 * p50, 1e6 * p99, n_prefix, 1e6 * mean[0], 1e6 * mean[1],
               mean[1] / mean[0]);
        fflush(stdout);
        free(jobs);
        free(ng);
    }
    printf("(wall_s: the whole replay, events and rates included; p50/p99: one arrival's decision, submit call;\n"
           " ratio: mean decision time scanning every GPU / indexed, same jobs, same run)\n");
    free_world(&w);
    kace_ctx_free(&ctx);
    return 0;
}
