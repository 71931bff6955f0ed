/* The trace parser, the online scheduler and the trace replay: bad rows are
 * refused with their line, every job completes exactly once with its work
 * conserved, memory and group size limits hold, the Oracle's choices are at
 * least as good as any policy's on measured rates, and a policy never sees
 * the measured rates. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/sim.h"
#include "kace/store.h"
#include "testutil.h"

static kace_ctx *ctx;
static kace_dataset *pairs, *triples, *profiles;
static kace_model *model;
static kace_model_rates holder;
static kace_rate_source rates;
static kace_truth *truth;
static int pool[KACE_SCHED_MAX_WORKLOADS], n_pool;
static kace_sim_job *trace_jobs;
static size_t n_trace_jobs;
static int *node_gpus;
static size_t n_nodes;

static char trace_path[4096], nodes_path[4096];

static int setup(void **state)
{
    (void)state;
    ctx = kace_ctx_new();
    char db[4096];
    snprintf(db, sizeof db, "%s/kace.db", scratch_dir("sim"));
    kace_store *store = NULL;
    if (kace_store_open(ctx, db, &store))
        return -1;
    static const char *const files[] = {"profiles/system.csv", "colocations/pairs.csv", "colocations/triples.csv",
                                        "splits.csv"};
    if (import_reference(ctx, store, files, 4))
        return -1;
    kace_splits *splits = NULL;
    if (kace_store_load_dataset(ctx, store, "pairs", false, &pairs) ||
        kace_store_load_dataset(ctx, store, "triples", false, &triples) ||
        kace_store_load_splits(ctx, store, pairs, &splits))
        return -1;
    kace_store_close(&store);
    /* The model sees one published training split (n_occur 3, seed 10). */
    int rows[256];
    size_t n = 0;
    for (size_t i = 0; i < splits->n && n < 256; i++)
        if (splits->rows[i].train && splits->rows[i].n_occur == 3 && splits->rows[i].seed == 10)
            rows[n++] = splits->rows[i].colocation;
    kace_splits_free(&splits);
    kace_fit_spec spec = {.kind = KACE_MODEL_SLOWDOWN};
    kace_slowdown_params_default(&spec.slowdown);
    const kace_dataset *sets[2] = {pairs, triples};
    if (kace_model_fit_rows(ctx, pairs, rows, n, &spec, &model) || kace_truth_build(ctx, sets, 2, &truth) ||
        kace_dataset_profiles_only(ctx, pairs, &profiles) ||
        kace_rate_source_model(ctx, &holder, kace_model_predictor(model), profiles, &rates))
        return -1;
    for (size_t i = 0; i < pairs->n_workloads; i++)
        for (size_t c = 0; c < pairs->n_colocations; c++)
            if (kace_colocation_has(&pairs->colocations[c], (int)i)) {
                pool[n_pool++] = (int)i;
                break;
            }
    snprintf(trace_path, sizeof trace_path, "%s/alibaba-gpu-2023/openb_pod_list_default.csv", KACE_SHARED_DATA);
    snprintf(nodes_path, sizeof nodes_path, "%s/alibaba-gpu-2023/openb_node_list_gpu_node.csv", KACE_SHARED_DATA);
    kace_trace *trace = NULL;
    kace_node_list *nodes = NULL;
    size_t n_cpu = 0;
    if (kace_trace_load(ctx, trace_path, &trace) || kace_node_list_load(ctx, nodes_path, &nodes) ||
        kace_sim_jobs_from_trace(ctx, trace, profiles, pool, n_pool, &trace_jobs, &n_trace_jobs, &n_cpu) ||
        kace_sim_cluster(ctx, nodes, 32, &node_gpus, &n_nodes))
        return -1;
    /* Nothing is dropped: GPU jobs + CPU-only pods = rows of the file. */
    if (n_trace_jobs + n_cpu != trace->n_jobs || trace->n_jobs != 8152)
        return -1;
    kace_trace_free(&trace);
    kace_node_list_free(&nodes);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(trace_jobs);
    free(node_gpus);
    kace_truth_free(&truth);
    kace_model_free(&model);
    kace_dataset_free(&profiles);
    kace_dataset_free(&pairs);
    kace_dataset_free(&triples);
    kace_ctx_free(&ctx);
    return 0;
}

/* ---- trace parser ---- */

static const char *const header =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n";

static kace_status parse(const char *body, kace_trace **t)
{
    char text[4096];
    snprintf(text, sizeof text, "%s%s", header, body);
    return kace_trace_parse(ctx, text, strlen(text), "pods.csv", t);
}

static void expect_error(const char *body, const char *where, const char *what)
{
    kace_trace *t = NULL;
    kace_status st = parse(body, &t);
    assert_int_not_equal(st, KACE_OK);
    assert_null(t);
    const char *msg = kace_errmsg(ctx);
    if (strncmp(msg, where, strlen(where)) != 0 || !strstr(msg, what))
        fail_msg("expected '%s ... %s', got: %s", where, what, msg);
}

static void test_trace_parses_rows(void **state)
{
    (void)state;
    kace_trace *t = NULL;
    assert_kace_ok(ctx, parse("a,1000,100,1,460,,LS,Running,10,110,20\n"
                              "b,1000,100,0,0,,BE,Running,5,6,5\n"
                              "c,1000,100,8,1000,,Burstable,Pending,7,9,\n",
                              &t));
    assert_int_equal(t->n_jobs, 3);
    assert_int_equal(t->n_gpu_jobs, 2);
    assert_string_equal(t->jobs[0].name, "a");
    assert_int_equal(t->jobs[0].gpu_milli, 460);
    assert_int_equal(t->jobs[0].qos, KACE_QOS_LS);
    assert_true(t->jobs[0].arrival == 10 && t->jobs[0].work == 90);
    assert_true(t->jobs[1].work == 1); /* at least one second */
    assert_true(t->jobs[2].work == 2); /* never scheduled: from creation */
    assert_int_equal(t->jobs[2].line, 4);
    kace_trace_free(&t);
}

static void test_trace_rejects_bad_rows(void **state)
{
    (void)state;
    expect_error("a,1000,100,1,460,,LS,Running,-10,110,20\n", "pods.csv:2:30:", "negative");
    expect_error("a,1000,100,1,460,,LS,Running,10,110,20\nb,1000,100,1,x46,,LS,Running,10,110,20\n", "pods.csv:3:14:",
                 "not an integer");
    expect_error("a,1000,100,1,460,,LS,Running,10,1e,20\n", "pods.csv:2:33:", "not a number");
    expect_error("a,1000,100,1,460,,LS,Running,100,50,\n", "pods.csv:2:34:", "before creation_time");
    expect_error("a,1000,100,1,460,,XX,Running,10,110,20\n", "pods.csv:2:19:", "not a QoS class");
    expect_error("a,1000,100,1,460,,LS,Running,10,110\n", "pods.csv:2:", "fields, the header has 11");
    expect_error("a,1000,100,1,460,,LS,Running,10,110,20", "pods.csv:2:", "truncated");
    expect_error("a,1000,100,2,500,,LS,Running,10,110,20\n", "pods.csv:2:14:", "whole GPUs");

    kace_trace *t = NULL;
    const char *unknown = "name,num_gpu,gpu_milli,qos,creation_time,deletion_time,colour\nx,1,1000,BE,1,2,red\n";
    assert_int_not_equal(kace_trace_parse(ctx, unknown, strlen(unknown), "u.csv", &t), KACE_OK);
    assert_non_null(strstr(kace_errmsg(ctx), "u.csv:1:56: unknown column 'colour'"));
    const char *missing = "name,num_gpu,gpu_milli,qos,deletion_time\nx,1,1000,BE,2\n";
    assert_int_not_equal(kace_trace_parse(ctx, missing, strlen(missing), "m.csv", &t), KACE_OK);
    assert_non_null(strstr(kace_errmsg(ctx), "missing column 'creation_time'"));
    assert_null(t);
}

static void test_node_list_and_cluster_sample(void **state)
{
    (void)state;
    kace_node_list *nodes = NULL;
    assert_kace_ok(ctx, kace_node_list_load(ctx, nodes_path, &nodes));
    assert_int_equal(nodes->n_nodes, 1213);
    assert_int_equal(nodes->n_gpus, 6212);
    int *gpus = NULL;
    size_t n = 0, total = 0;
    assert_kace_ok(ctx, kace_sim_cluster(ctx, nodes, 1000, &gpus, &n));
    for (size_t i = 0; i < n; i++)
        total += (size_t)gpus[i];
    /* About the target, within one node of it. */
    assert_true(total >= 1000 && total <= 1000 + 8);
    free(gpus);
    kace_node_list_free(&nodes);
    const char *bad = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,two,P100\n";
    assert_int_not_equal(kace_node_list_parse(ctx, bad, strlen(bad), "nodes.csv", &nodes), KACE_OK);
    assert_non_null(strstr(kace_errmsg(ctx), "nodes.csv:2:17:"));
}

/* ---- replay ---- */

static kace_sim_result *simulate(kace_sched_policy p, int max_group, double gpu_mem, const kace_truth *t,
                                 const kace_sim_job *jobs, size_t n_jobs, const int *ng, size_t nn)
{
    kace_sim_config cfg = {.record_timeline = false};
    kace_sched_config_default(&cfg.sched, p);
    cfg.sched.max_group = max_group;
    cfg.sched.gpu_mem_gb = gpu_mem;
    kace_sim_result *r = NULL;
    assert_kace_ok(ctx, kace_sim_run(ctx, &cfg, profiles, t, pool, n_pool, &rates, ng, nn, jobs, n_jobs, &r));
    return r;
}

static void check_conservation(const kace_sim_result *r, const kace_sim_job *jobs, size_t n_jobs)
{
    assert_int_equal(r->n_completed, n_jobs);
    for (size_t i = 0; i < n_jobs; i++) {
        if (r->completions[i] != 1)
            fail_msg("job %zu completed %d times", i, r->completions[i]);
        assert_true(r->start[i] >= jobs[i].arrival);
        assert_true(r->finish[i] > r->start[i]);
    }
    if (fabs(r->work_done - r->work_total) > 1e-6 * r->work_total)
        fail_msg("work done %.9g != work given %.9g", r->work_done, r->work_total);
}

static void test_every_policy_conserves_jobs_and_work(void **state)
{
    (void)state;
    for (int p = 0; p < KACE_SCHED_N_POLICIES; p++) {
        kace_sim_result *r = simulate(p, 3, 32, truth, trace_jobs, n_trace_jobs, node_gpus, n_nodes);
        check_conservation(r, trace_jobs, n_trace_jobs);
        assert_true(r->max_group <= 3);
        assert_true(r->max_mem_gb <= 32 + 1e-9);
        if (p == KACE_SCHED_EXCLUSIVE) {
            /* Alone, every job runs at exclusive speed. */
            assert_int_equal(r->max_group, 1);
            assert_true(fabs(r->efficiency - 1) < 1e-9);
            for (size_t i = 0; i < n_trace_jobs; i++)
                assert_true(fabs(r->finish[i] - r->start[i] - trace_jobs[i].work) <= 1e-6 * trace_jobs[i].work);
        } else {
            assert_true(r->max_group > 1);
        }
        printf("%-9s mean JCT %.2f h, efficiency %.3f, shared %.1f%%, largest group %d, %.1f GB\n",
               kace_sched_policy_name(p), r->mean_jct / 3600, r->efficiency, 100 * r->shared_fraction, r->max_group,
               r->max_mem_gb);
        kace_sim_result_free(&r);
    }
}

static void test_memory_and_group_limits_hold(void **state)
{
    (void)state;
    static const kace_sched_policy sharing[] = {KACE_SCHED_PACKING, KACE_SCHED_RANDOM, KACE_SCHED_MEMCAP,
                                                KACE_SCHED_KACE, KACE_SCHED_ORACLE};
    for (size_t i = 0; i < sizeof sharing / sizeof *sharing; i++) {
        kace_sim_result *r = simulate(sharing[i], 2, 12, truth, trace_jobs, n_trace_jobs, node_gpus, n_nodes);
        check_conservation(r, trace_jobs, n_trace_jobs);
        assert_int_equal(r->max_group, 2);
        assert_true(r->max_mem_gb > 0 && r->max_mem_gb <= 12 + 1e-9);
        kace_sim_result_free(&r);
    }
}

static void test_oracle_gains_at_least_exclusive(void **state)
{
    (void)state;
    kace_sim_result *o = simulate(KACE_SCHED_ORACLE, 3, 32, truth, trace_jobs, n_trace_jobs, node_gpus, n_nodes);
    kace_sim_result *e = simulate(KACE_SCHED_EXCLUSIVE, 3, 32, truth, trace_jobs, n_trace_jobs, node_gpus, n_nodes);
    /* The Oracle shares on a measured gain, or (overloaded) where the GPU's
     * measured throughput stays at least that of one exclusive job, and keeps
     * LS jobs at their target on measured rates. */
    assert_true(o->efficiency >= e->efficiency);
    assert_true(o->gpu_hours <= e->gpu_hours);
    assert_int_equal(o->n_ls_met, o->n_ls);
    kace_sim_result_free(&o);
    kace_sim_result_free(&e);
}

static int test_start_gpu;
static void remember_start(void *user, int job_id, const int *gpus, int n)
{
    (void)user;
    (void)job_id;
    (void)n;
    test_start_gpu = gpus[0];
}

/* One decision on a full cluster: each GPU runs one different workload and
 * a new BE job must share. The GPU the Oracle picks gains at least as much
 * measured throughput as the GPU any idle-first policy (MEMCAP, SM%, MEM%,
 * kace) picks. */
static void test_oracle_choice_dominates(void **state)
{
    (void)state;
    int ones[KACE_SCHED_MAX_WORKLOADS];
    for (int i = 0; i < n_pool; i++)
        ones[i] = 1;
    int checked = 0;
    for (int target = 0; target < n_pool; target++) {
        double gain[KACE_SCHED_N_POLICIES];
        for (int p = KACE_SCHED_MEMCAP; p < KACE_SCHED_N_POLICIES; p++) {
            kace_sched_config cfg;
            kace_sched_config_default(&cfg, p);
            cfg.min_gain = -1; /* let every policy share here */
            kace_rate_source truth_rates;
            kace_truth_rate_source(truth, &truth_rates);
            kace_sched *s = NULL;
            assert_kace_ok(ctx, kace_sched_new(ctx, &cfg, profiles, pool, n_pool, kace_truth_runnable(truth),
                                               p == KACE_SCHED_ORACLE ? &truth_rates : &rates, ones, (size_t)n_pool,
                                               remember_start, NULL, &s));
            for (int i = 0; i < n_pool; i++) {
                kace_sched_job j = {i, pool[i], false, 1000, 1};
                assert_kace_ok(ctx, kace_sched_submit(ctx, s, &j));
            }
            test_start_gpu = -1;
            kace_sched_job j = {n_pool, pool[target], false, 1000, 1};
            assert_kace_ok(ctx, kace_sched_submit(ctx, s, &j));
            gain[p] = NAN;
            if (test_start_gpu >= 0) {
                int ids[3];
                assert_int_equal(kace_sched_gpu_jobs(s, test_start_gpu, ids), 2);
                int group[2] = {pool[target], pool[ids[0] == n_pool ? ids[1] : ids[0]]};
                double frac[2];
                assert_kace_ok(ctx, kace_truth_rates(ctx, truth, group, 2, frac));
                gain[p] = frac[0] + frac[1] - 1;
            }
            kace_sched_free(&s);
        }
        if (isnan(gain[KACE_SCHED_ORACLE]))
            continue;
        checked++;
        for (int p = KACE_SCHED_MEMCAP; p < KACE_SCHED_N_POLICIES; p++)
            if (!isnan(gain[p]) && gain[p] > gain[KACE_SCHED_ORACLE] + 1e-6)
                fail_msg("target %s: %s gains %.3f, the Oracle %.3f", profiles->workloads[pool[target]].name,
                         kace_sched_policy_name(p), gain[p], gain[KACE_SCHED_ORACLE]);
    }
    assert_true(checked >= n_pool / 2);
}

/* A copy of a measured set with every throughput scaled by a factor in
 * 0.3..1.7 that depends on the row and member: a different truth with the
 * same measured groups. */
static kace_dataset *distort(const kace_dataset *ds)
{
    kace_dataset *out = NULL;
    assert_kace_ok(ctx, kace_dataset_profiles_only(ctx, ds, &out));
    for (size_t r = 0; r < ds->n_colocations; r++) {
        kace_colocation c = ds->colocations[r];
        for (int i = 0; i < c.k; i++)
            c.throughput[i] *= 0.3 + 1.4 * (double)((r * 7 + (size_t)i * 13) % 11) / 10.0;
        assert_kace_ok(ctx, kace_dataset_add_colocation(ctx, out, &c));
    }
    return out;
}

static void test_policies_never_read_the_truth(void **state)
{
    (void)state;
    /* Structurally: a dataset with measurements is refused as profiles. */
    kace_sim_config cfg = {.record_timeline = false};
    kace_sched_config_default(&cfg.sched, KACE_SCHED_KACE);
    kace_sim_result *r = NULL;
    assert_int_equal(kace_sim_run(ctx, &cfg, pairs, truth, pool, n_pool, &rates, node_gpus, n_nodes, trace_jobs, 10, &r),
                     KACE_ERR_INVALID);
    assert_non_null(strstr(kace_errmsg(ctx), "profiles only"));

    /* Behaviourally: jobs that all arrive before any ends on a small
     * cluster. Every decision is taken before the rates matter to the
     * replay, so a policy that does not read the truth places every job on
     * the same GPU under a different truth; the Oracle, which does, does not. */
    kace_dataset *p2 = distort(pairs), *t2 = distort(triples);
    const kace_dataset *sets[2] = {p2, t2};
    kace_truth *other = NULL;
    assert_kace_ok(ctx, kace_truth_build(ctx, sets, 2, &other));
    assert_int_equal(kace_group_set_size(kace_truth_runnable(other)), kace_group_set_size(kace_truth_runnable(truth)));
    enum { N = 60 };
    kace_sim_job jobs[N];
    for (int i = 0; i < N; i++)
        jobs[i] = (kace_sim_job){.arrival = i, .work = 1e9, .workload = pool[(i * 5) % n_pool],
                                 .ls = false, .gpu_milli = 500, .num_gpu = 1};
    int small[2] = {8, 8};
    int differ[KACE_SCHED_N_POLICIES] = {0};
    for (int p = 0; p < KACE_SCHED_N_POLICIES; p++) {
        kace_sim_result *a = simulate(p, 3, 32, truth, jobs, N, small, 2);
        kace_sim_result *b = simulate(p, 3, 32, other, jobs, N, small, 2);
        for (int i = 0; i < N; i++) {
            bool started_a = a->start[i] == jobs[i].arrival, started_b = b->start[i] == jobs[i].arrival;
            differ[p] += started_a != started_b || (started_a && a->gpu[i] != b->gpu[i]);
        }
        kace_sim_result_free(&a);
        kace_sim_result_free(&b);
    }
    for (int p = 0; p < KACE_SCHED_N_POLICIES; p++)
        if (p != KACE_SCHED_ORACLE && differ[p])
            fail_msg("%s placed %d jobs differently under another truth", kace_sched_policy_name(p), differ[p]);
    assert_true(differ[KACE_SCHED_ORACLE] > 0);
    kace_truth_free(&other);
    kace_dataset_free(&p2);
    kace_dataset_free(&t2);
}

/* Whether BE jobs of pool workloads a and b may share a GPU at all, and the
 * measured throughput of that GPU (jobs' worth of exclusive speed). */
static bool pair_rate(int a, int b, double *rate)
{
    int group[2] = {pool[a], pool[b]};
    double frac[2];
    double mem = profiles->workloads[pool[a]].metric[KACE_M_MEMCAP] + profiles->workloads[pool[b]].metric[KACE_M_MEMCAP];
    if (mem > 32 || !kace_group_set_has(kace_truth_runnable(truth), group, 2) ||
        kace_truth_rates(ctx, truth, group, 2, frac) != KACE_OK)
        return false;
    *rate = frac[0] + frac[1];
    return true;
}

static kace_sched *oracle_sched(double overload_queue, bool reserve, int n_gpus)
{
    kace_sched_config cfg;
    kace_sched_config_default(&cfg, KACE_SCHED_ORACLE);
    cfg.max_group = 2;
    cfg.min_gain = 3; /* no pair gains this much: only the overload gate can let a job share */
    cfg.overload_queue = overload_queue;
    cfg.reserve = reserve;
    kace_rate_source truth_rates;
    kace_truth_rate_source(truth, &truth_rates);
    kace_sched *s = NULL;
    int gpus[1] = {n_gpus};
    assert_kace_ok(ctx, kace_sched_new(ctx, &cfg, profiles, pool, n_pool, kace_truth_runnable(truth), &truth_rates,
                                       gpus, 1, NULL, NULL, &s));
    return s;
}

/* With no GPU idle, a job below min_gain waits unless the scheduler is
 * overloaded; overloaded, it joins exactly when the GPU's throughput stays
 * >= overload_min_rate (1: sharing beats running one job alone). */
static void test_overload_gate_shares_when_throughput_holds(void **state)
{
    (void)state;
    int joined = 0, refused = 0;
    for (int a = 0; a < n_pool; a++)
        for (int b = 0; b < n_pool; b++) {
            double rate = 0;
            bool may = pair_rate(a, b, &rate);
            for (int mode = 0; mode < 2; mode++) {
                kace_sched *s = oracle_sched(mode ? 0 : -1, false, 1);
                kace_sched_job first = {0, pool[a], false, 1000, 1}, second = {1, pool[b], false, 1000, 1};
                assert_kace_ok(ctx, kace_sched_submit(ctx, s, &first));
                assert_kace_ok(ctx, kace_sched_submit(ctx, s, &second));
                bool shared = kace_sched_n_queued(s) == 0;
                if (mode == 0 && shared)
                    fail_msg("not overloaded, %s joined %s below min_gain", profiles->workloads[pool[b]].name,
                             profiles->workloads[pool[a]].name);
                if (mode == 1 && shared != (may && rate >= 1))
                    fail_msg("overloaded, %s next to %s (measured throughput %.3f, may share %d): shared %d",
                             profiles->workloads[pool[b]].name, profiles->workloads[pool[a]].name, rate, may, shared);
                if (mode == 1) {
                    joined += shared;
                    refused += !shared;
                }
                kace_sched_free(&s);
            }
        }
    /* Both outcomes occur, so the test tells the gate from "always" or "never". */
    assert_true(joined > 0 && refused > 0);
}

/* Overloaded with the oldest job unable to join anyone: with reserve on, it
 * holds the GPU (a younger job that could join waits) and starts there when
 * the GPU frees; with reserve off, the younger job takes the place. */
static void test_reservation_keeps_the_oldest_job_from_starving(void **state)
{
    (void)state;
    int found = 0;
    for (int b = 0; b < n_pool && !found; b++)
        for (int x = 0; x < n_pool && !found; x++)
            for (int y = 0; y < n_pool && !found; y++) {
                double r_bb = 0, r_bx = 0, r_by = 0;
                bool bb = pair_rate(b, b, &r_bb), bx = pair_rate(b, x, &r_bx), by = pair_rate(b, y, &r_by);
                /* b next to b (the first two jobs), x never next to b, y next to b. */
                if (!bb || r_bb < 1 || (bx && r_bx >= 1) || !by || r_by < 1)
                    continue;
                found = 1;
                for (int reserve = 0; reserve < 2; reserve++) {
                    kace_sched *s = oracle_sched(0, reserve, 1);
                    kace_sched_job j0 = {0, pool[b], false, 1000, 1}, j1 = {1, pool[b], false, 1000, 1};
                    kace_sched_job jx = {2, pool[x], false, 1000, 1}, jy = {3, pool[y], false, 1000, 1};
                    assert_kace_ok(ctx, kace_sched_submit(ctx, s, &j0));
                    assert_kace_ok(ctx, kace_sched_submit(ctx, s, &j1));
                    assert_kace_ok(ctx, kace_sched_submit(ctx, s, &jx));
                    assert_int_equal(kace_sched_n_queued(s), 1);
                    assert_kace_ok(ctx, kace_sched_finish(ctx, s, 0)); /* x still cannot join b */
                    assert_int_equal(kace_sched_n_queued(s), 1);
                    assert_kace_ok(ctx, kace_sched_submit(ctx, s, &jy));
                    int ids[3];
                    int n = kace_sched_gpu_jobs(s, 0, ids);
                    if (reserve) {
                        assert_int_equal(n, 1); /* y waits: the GPU is held for x */
                        assert_int_equal(kace_sched_n_queued(s), 2);
                        assert_kace_ok(ctx, kace_sched_finish(ctx, s, 1));
                        n = kace_sched_gpu_jobs(s, 0, ids);
                        assert_true(n >= 1 && (ids[0] == 2 || (n == 2 && ids[1] == 2))); /* x runs */
                    } else {
                        assert_int_equal(n, 2); /* y joined b; x still waits */
                        assert_int_equal(kace_sched_n_queued(s), 1);
                    }
                    kace_sched_free(&s);
                }
            }
    assert_true(found);
}

static void test_scheduler_refuses_impossible_jobs(void **state)
{
    (void)state;
    kace_sched_config cfg;
    kace_sched_config_default(&cfg, KACE_SCHED_KACE);
    kace_sched *s = NULL;
    int two[1] = {2};
    assert_kace_ok(ctx, kace_sched_new(ctx, &cfg, profiles, pool, n_pool, kace_truth_runnable(truth), &rates, two, 1,
                                       NULL, NULL, &s));
    kace_sched_job gang = {1, pool[0], false, 1000, 4};
    assert_int_equal(kace_sched_submit(ctx, s, &gang), KACE_ERR_INVALID);
    assert_non_null(strstr(kace_errmsg(ctx), "could never start"));
    kace_sched_job ok = {1, pool[0], false, 1000, 2};
    assert_kace_ok(ctx, kace_sched_submit(ctx, s, &ok));
    assert_int_equal(kace_sched_n_busy(s), 2);
    assert_int_equal(kace_sched_submit(ctx, s, &ok), KACE_ERR_INVALID); /* id in use */
    kace_sched_job unknown = {2, -5, false, 1000, 1};
    assert_int_equal(kace_sched_submit(ctx, s, &unknown), KACE_ERR_NOT_FOUND);
    kace_sched_job waits = {3, pool[1], false, 1000, 1};
    assert_kace_ok(ctx, kace_sched_submit(ctx, s, &waits));
    assert_int_equal(kace_sched_n_queued(s), 1); /* a gang never shares */
    assert_kace_ok(ctx, kace_sched_finish(ctx, s, 1));
    assert_int_equal(kace_sched_n_queued(s), 0);
    assert_int_equal(kace_sched_n_busy(s), 1);
    assert_int_equal(kace_sched_finish(ctx, s, 1), KACE_ERR_INVALID);
    kace_sched_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trace_parses_rows),
        cmocka_unit_test(test_trace_rejects_bad_rows),
        cmocka_unit_test(test_node_list_and_cluster_sample),
        cmocka_unit_test(test_every_policy_conserves_jobs_and_work),
        cmocka_unit_test(test_memory_and_group_limits_hold),
        cmocka_unit_test(test_oracle_gains_at_least_exclusive),
        cmocka_unit_test(test_oracle_choice_dominates),
        cmocka_unit_test(test_policies_never_read_the_truth),
        cmocka_unit_test(test_scheduler_refuses_impossible_jobs),
        cmocka_unit_test(test_overload_gate_shares_when_throughput_holds),
        cmocka_unit_test(test_reservation_keeps_the_oldest_job_from_starving),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
