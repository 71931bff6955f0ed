/* kace simulate: replay a production GPU trace under every placement policy.
 * kace schedule: the online scheduler over a line protocol on stdin. */
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"
#include "figures.h"
#include "kace/sim.h"
#include "sched_world.h"

void sim_world_free(sim_world *w)
{
    kace_sched_world_free(&w->world); /* before the model it predicts with */
    kace_dataset_free(&w->pairs);
    kace_dataset_free(&w->triples);
    kace_splits_free(&w->splits);
    kace_model_free(&w->model);
}

static bool is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* Reference data folder: $KACE_DATA's parent layout, else ../shared/data. */
static const char *default_data_root(void)
{
    static const char *const candidates[] = {"../shared/data", "../../shared/data"};
    for (size_t i = 0; i < sizeof candidates / sizeof *candidates; i++)
        if (is_dir(candidates[i]))
            return candidates[i];
    return candidates[0];
}

int sim_world_load(kace_ctx *ctx, const char *db, const char *import_dir, int n_occur, int seed, sim_world *w)
{
    memset(w, 0, sizeof *w);
    kace_store *store = import_dir ? cli_open_store(ctx, db) : cli_read_store(ctx, db);
    if (!store)
        return EXIT_FAILURE_RUN;
    int rc = EXIT_FAILURE_RUN;
    kace_status st;
    if (import_dir) {
        char *paths[1] = {(char *)import_dir};
        kace_source src = {"Tesla V100 32GB", "reference", NULL};
        if ((rc = cli_import_paths(ctx, store, paths, 1, &src, NULL, true)) != EXIT_OK)
            goto done;
        rc = EXIT_FAILURE_RUN;
    }
    if ((st = kace_store_load_dataset(ctx, store, "pairs", false, &w->pairs)) ||
        (st = kace_store_load_dataset(ctx, store, "triples", false, &w->triples))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    if (w->pairs->n_colocations == 0) {
        fprintf(stderr, "kace: the store %s has no measured pairs: run 'kace import ../shared/data/kace-v100' or give "
                        "--import DIR\n", db);
        goto done;
    }
    const char *origin;
    if ((st = cli_load_splits(ctx, store, w->pairs, false, &w->splits, &origin))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    if (strcmp(origin, "published"))
        fprintf(stderr, "kace: no published splits for set '%s': using splits %s\n", "pairs", origin);
    /* The model learns from one published training split only. */
    int *rows = malloc((w->splits->n ? w->splits->n : 1) * sizeof *rows);
    if (!rows)
        goto done;
    size_t n = 0;
    for (size_t i = 0; i < w->splits->n; i++) {
        const kace_split_row *r = &w->splits->rows[i];
        if (r->train && r->n_occur == n_occur && r->seed == seed)
            rows[n++] = r->colocation;
    }
    if (n == 0) {
        free(rows);
        fprintf(stderr, "kace: no published training split n_occur=%d seed=%d in the store\n", n_occur, seed);
        goto done;
    }
    kace_fit_spec spec = {.kind = KACE_MODEL_SLOWDOWN};
    kace_slowdown_params_default(&spec.slowdown);
    st = kace_model_fit_rows(ctx, w->pairs, rows, n, &spec, &w->model);
    free(rows);
    w->n_train = n;
    if (st || (st = kace_sched_world_from_sets(ctx, w->pairs, w->triples, kace_model_predictor(w->model), &w->world))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    w->profiles = kace_sched_world_profiles_edit(w->world);
    w->truth = kace_sched_world_truth(w->world);
    w->rates = *kace_sched_world_rates(w->world);
    w->pool = kace_sched_world_pool(w->world, &w->n_pool);
    rc = EXIT_OK;
done:
    kace_store_close(&store);
    if (rc != EXIT_OK)
        sim_world_free(w);
    return rc;
}

static double seconds_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The scheduler's options as given: a KACE configuration (policy set per
 * run) and the training split of kace's model. */
typedef struct sched_options {
    kace_sched_config sched;
    int n_occur, seed;
} sched_options;

static void sched_options_default(sched_options *o)
{
    kace_sched_config_default(&o->sched, KACE_SCHED_KACE);
    o->n_occur = SIM_WORLD_N_OCCUR;
    o->seed = SIM_WORLD_SEED;
}

/* The configuration of one policy under the options given. */
static kace_sched_config config_for(const sched_options *o, kace_sched_policy policy)
{
    kace_sched_config c = o->sched;
    c.policy = policy;
    return c;
}

enum { O_GPUS = 256, O_NODES, O_POLICIES, O_MAX_GROUP, O_GPU_MEM, O_LS, O_CONF, O_GAIN, O_NOCCUR, O_SEED, O_IMPORT,
       O_NOFIG, O_CLUSTER, O_OVER_QUEUE, O_OVER_RATE, O_TUNE, O_TUNE_TRACES, O_TUNE_GPUS, O_RESERVE, O_SACCT,
       O_SACCT_MAP, O_SHARDS, O_QUIET, O_OBJECTIVE };

/* The threshold options both commands share; 0 when opt is not one of them,
 * -1 after a usage message. */
static int threshold_option(const char *cmd, int opt, const char *arg, sched_options *so)
{
    switch (opt) {
    case O_OVER_QUEUE:
        return cli_number(cmd, "overload-queue", arg, -1, 1e6, &so->sched.overload_queue) ? 1 : -1;
    case O_OVER_RATE:
        return cli_number(cmd, "overload-min-rate", arg, 0, 3, &so->sched.overload_min_rate) ? 1 : -1;
    case O_OBJECTIVE: {
        int o = kace_objective_from_name(arg);
        if (o < 0) {
            cli_usage(cmd, "--objective must be raw, normalized or fair, not '%s'", arg);
            return -1;
        }
        so->sched.objective = (kace_objective)o;
        return 1;
    }
    case O_RESERVE:
        if (strcmp(arg, "on") != 0 && strcmp(arg, "off") != 0) {
            cli_usage(cmd, "--reserve: '%s' is not on or off", arg);
            return -1;
        }
        so->sched.reserve = strcmp(arg, "on") == 0;
        return 1;
    default:
        return 0;
    }
}

static const char *const simulate_help =
    "usage: kace simulate [--trace FILE] [--nodes FILE] [--gpus N] [--policies LIST] [--out DIR] [--db PATH]\n"
    "                     [--import DIR] [--max-group K] [--gpu-mem GB] [--ls-target F] [--min-confidence C]\n"
    "                     [--min-gain G] [--overload-queue Q] [--overload-min-rate R] [--reserve on|off]\n"
    "                     [--train-n-occur N] [--train-seed S] [--no-figures] [--quiet] [--tune [--tune-traces F1,F2,..] [--tune-gpus G1,G2,..]]\n"
    "Replays a pod list of the Alibaba GPU trace (default ../shared/data/alibaba-gpu-2023/openb_pod_list_default.csv)\n"
    "on a cluster sampled from its node list (--gpus N, default 32; 0 = all 6,212 GPUs) under each policy\n"
    "(default: exclusive,packing,random,MEMCAP,SM%,MEM%,kace,Oracle). Colocated jobs progress at the rates\n"
    "measured in the store's 'pairs' and 'triples' sets; kace predicts them with a slowdown model fitted on one\n"
    "published training split (default n_occur 3, seed 10). Writes CSV and PNG figures to DIR (default kace-sim).\n"
    "--tune first picks kace's --min-gain, --min-confidence, --overload-queue, --reserve on held-out pod lists (default\n"
    "openb_pod_list_gpushare{20,60,80}.csv beside --trace) over cluster sizes (default 16,24,32,48,64): the grid\n"
    "point with the lowest geometric mean of kace's mean JCT over every list x size (first wins ties); it writes\n"
    "DIR/tune.csv and then reports on --trace with the chosen values (refused if --trace is a tuning list).\n"
    "--objective raw|normalized|fair: how kace and the Oracle rank the GPUs a job may join (default normalized,\n"
    "the change in summed shares; raw: in samples/s; fair: the smallest share left). The gates stay in shares.\n"
    "\n"
    "       kace simulate --sacct FILE [--sacct-map FILE] [--cluster NxG] [--shards S] [--out DIR] [--db PATH] ...\n"
    "What-if on a site's own history: replays the GPU jobs of `sacct -a -X --parsable2` output (fields: docs/slurm.md)\n"
    "under exclusive GPUs, Slurm's gres/shard (S equal shards per GPU, default 2, first fit) and kace, and reports\n"
    "GPU-hours, mean and p95 slowdown and queueing (DIR/sacct.csv, sacct_cdf.csv, fig_sacct.png). A job's workload:\n"
    "the first --sacct-map rule that matches (FIELD GLOB WORKLOAD), else kace's tag in AdminComment, else its JobName;\n"
    "jobs without a stored workload run exclusive and are counted. The cluster: the nodes of the file, each with the\n"
    "most GPUs one job held there, unless --cluster NxG.\n";

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int write_outputs(const char *out, const kace_sim_job *jobs, size_t n_jobs, kace_sim_result *const *res,
                         const int *policies, int n_policies, bool figures)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/jct_cdf.csv", out);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "kace: cannot write %s\n", path);
        return -1;
    }
    /* One column per policy: JCT in hours at 200 quantiles. */
    double *sorted = malloc((n_jobs ? n_jobs : 1) * sizeof *sorted);
    double *q = malloc((size_t)n_policies * 201 * sizeof *q);
    if (!sorted || !q) {
        free(sorted);
        free(q);
        fclose(f);
        return -1;
    }
    for (int p = 0; p < n_policies; p++) {
        for (size_t i = 0; i < n_jobs; i++)
            sorted[i] = (res[p]->finish[i] - jobs[i].arrival) / 3600.0;
        qsort(sorted, n_jobs, sizeof *sorted, cmp_double);
        for (int k = 0; k <= 200; k++)
            q[p * 201 + k] = n_jobs ? sorted[(size_t)((double)(n_jobs - 1) * k / 200.0)] : 0;
    }
    fprintf(f, "fraction");
    for (int p = 0; p < n_policies; p++)
        fprintf(f, ",%s", kace_sched_policy_name(policies[p]));
    fprintf(f, "\n");
    for (int k = 0; k <= 200; k++) {
        fprintf(f, "%.3f", k / 200.0);
        for (int p = 0; p < n_policies; p++)
            fprintf(f, ",%.6f", q[p * 201 + k]);
        fprintf(f, "\n");
    }
    fclose(f);
    free(sorted);
    free(q);

    /* Utilization over time: busy GPUs and delivered speed, one file per
     * policy, at most ~2000 points each. */
    for (int p = 0; p < n_policies; p++) {
        snprintf(path, sizeof path, "%s/timeline_%d.csv", out, p);
        f = fopen(path, "w");
        if (!f) {
            fprintf(stderr, "kace: cannot write %s\n", path);
            return -1;
        }
        fprintf(f, "day,busy_gpus,delivered,queued\n");
        const kace_sim_result *r = res[p];
        size_t stride = r->n_samples / 2000 + 1;
        double t0 = r->n_samples ? r->samples[0].time : 0;
        for (size_t i = 0; i < r->n_samples; i += stride)
            fprintf(f, "%.5f,%d,%.4f,%d\n", (r->samples[i].time - t0) / 86400.0, r->samples[i].busy_gpus,
                    r->samples[i].rate_sum, r->samples[i].queued);
        fclose(f);
    }
    if (!figures)
        return 0;
    char script[16384];
    int len = snprintf(script, sizeof script,
                       "set terminal pngcairo size 1000,600 noenhanced font ',11'\n"
                       "set datafile separator ','\n"
                       "set key right bottom\n"
                       "set grid\n"
                       "set output 'fig_jct_cdf.png'\n"
                       "set title 'Job completion time, CDF'\n"
                       "set logscale x\n"
                       "set xlabel 'JCT (hours)'\n"
                       "set ylabel 'fraction of jobs'\n"
                       "plot for [c=2:%d] 'jct_cdf.csv' using (column(c) > 0 ? column(c) : 1e-4):1 with lines lw 2 "
                       "title columnheader(c)\n"
                       "unset logscale x\n"
                       "set key right top\n"
                       "set output 'fig_utilization.png'\n"
                       "set multiplot layout 2,1 title 'Cluster over time'\n"
                       "set xlabel ''\n"
                       "set ylabel 'busy GPUs'\n"
                       "plot ",
                       n_policies + 1);
    for (int p = 0; p < n_policies && len < (int)sizeof script - 512; p++)
        len += snprintf(script + len, sizeof script - (size_t)len, "%s'timeline_%d.csv' using 1:2 with steps title '%s'",
                        p ? ", " : "", p, kace_sched_policy_name(policies[p]));
    len += snprintf(script + len, sizeof script - (size_t)len,
                    "\nset xlabel 'day of the trace'\nset ylabel 'queued jobs'\nplot ");
    for (int p = 0; p < n_policies && len < (int)sizeof script - 512; p++)
        len += snprintf(script + len, sizeof script - (size_t)len, "%s'timeline_%d.csv' using 1:4 with steps title '%s'",
                        p ? ", " : "", p, kace_sched_policy_name(policies[p]));
    snprintf(script + len, sizeof script - (size_t)len, "\nunset multiplot\n");
    return figures_gnuplot(out, script);
}

static int parse_policies(const char *list, int *policies, int *n)
{
    char **items = NULL;
    size_t n_items = 0;
    *n = 0;
    if (!cli_list("simulate", "policies", list, KACE_SCHED_N_POLICIES, &items, &n_items))
        return EXIT_USAGE;
    int rc = EXIT_OK;
    for (size_t i = 0; i < n_items && rc == EXIT_OK; i++) {
        int p = kace_sched_policy_from_name(items[i]);
        if (p < 0)
            rc = cli_usage("simulate", "unknown policy '%s' (exclusive, packing, random, MEMCAP, SM%%, MEM%%, kace, "
                                       "Oracle)", items[i]);
        else
            policies[(*n)++] = p;
    }
    free(items);
    return rc;
}

/* ---- kace simulate --tune ---- */

/* One held-out cell of the tuning protocol: a pod list on a cluster size. */
typedef struct tune_cell {
    char name[160];
    kace_sim_job *jobs;
    size_t n_jobs;
    int *node_gpus;
    size_t n_nodes;
} tune_cell;

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* The tuning protocol (README "Cluster scale"): a fixed grid of kace's
 * thresholds, scored on pod lists that are never reported, over several
 * cluster sizes; the best grid point replaces so's thresholds. */
static int tune_thresholds(kace_ctx *ctx, const sim_world *w, const kace_node_list *nodes, const char *traces,
                           const char *gpus_list, const char *report_trace, const char *out, sched_options *so)
{
    enum { MAX_LISTS = 8, MAX_SIZES = 8, MAX_CELLS = MAX_LISTS * MAX_SIZES };
    char default_traces[4096];
    if (!traces) {
        /* The resampled lists beside the reported one, minus those reported. */
        int dir = (int)(base_name(report_trace) - report_trace);
        snprintf(default_traces, sizeof default_traces,
                 "%.*sopenb_pod_list_gpushare20.csv,%.*sopenb_pod_list_gpushare60.csv,%.*sopenb_pod_list_gpushare80.csv",
                 dir, report_trace, dir, report_trace, dir, report_trace);
        traces = default_traces;
    }
    char **lists = NULL, **sizes = NULL;
    size_t n_list_items = 0, n_size_items = 0;
    if (!cli_list("simulate", "tune-traces", traces, MAX_LISTS, &lists, &n_list_items))
        return EXIT_USAGE;
    if (!cli_list("simulate", "tune-gpus", gpus_list, MAX_SIZES, &sizes, &n_size_items)) {
        free(lists);
        return EXIT_USAGE;
    }
    int n_lists = (int)n_list_items, n_sizes = (int)n_size_items;
    tune_cell cells[MAX_CELLS];
    int n_cells = 0, rc = EXIT_FAILURE_RUN;
    kace_status st = KACE_OK;
    memset(cells, 0, sizeof cells);
    for (int i = 0; i < n_lists; i++)
        if (strcmp(base_name(lists[i]), base_name(report_trace)) == 0) {
            rc = cli_usage("simulate", "--tune: %s is the reported list; tune on other lists", lists[i]);
            goto done;
        }
    for (int l = 0; l < n_lists; l++) {
        kace_trace *trace = NULL;
        if ((st = kace_trace_load(ctx, lists[l], &trace))) {
            rc = cli_error(ctx, st);
            goto done;
        }
        for (int g = 0; g < n_sizes; g++) {
            double size = 0;
            if (!cli_number("simulate", "tune-gpus", sizes[g], 1, 1e7, &size)) {
                kace_trace_free(&trace);
                rc = EXIT_USAGE;
                goto done;
            }
            tune_cell *cell = &cells[n_cells++];
            snprintf(cell->name, sizeof cell->name, "%s@%.0f", base_name(lists[l]), size);
            size_t n_cpu = 0;
            if ((st = kace_sim_jobs_from_trace(ctx, trace, w->profiles, w->pool, w->n_pool, &cell->jobs,
                                               &cell->n_jobs, &n_cpu)) ||
                (st = kace_sim_cluster_for(ctx, nodes, (size_t)size, cell->jobs, cell->n_jobs, &cell->node_gpus,
                                           &cell->n_nodes))) {
                kace_trace_free(&trace);
                rc = cli_error(ctx, st);
                goto done;
            }
        }
        kace_trace_free(&trace);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/tune.csv", out);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "kace: cannot write %s\n", path);
        goto done;
    }
    fprintf(f, "min_gain,min_confidence,overload_queue,reserve,geomean_jct_h");
    for (int i = 0; i < n_cells; i++)
        fprintf(f, ",%s", cells[i].name);
    fprintf(f, "\n");
    printf("tuning kace on %d held-out cells (", n_cells);
    for (int l = 0; l < n_lists; l++)
        printf("%s%s", l ? ", " : "", base_name(lists[l]));
    printf(" x %s GPUs)\n", gpus_list);
    /* The grid and its scoring are the library's (kace_sim_tune). */
    kace_tune_cell in[MAX_CELLS];
    for (int i = 0; i < n_cells; i++)
        in[i] = (kace_tune_cell){cells[i].jobs, cells[i].n_jobs, cells[i].node_gpus, cells[i].n_nodes};
    kace_tune_point points[KACE_TUNE_N_POINTS];
    static double jct[KACE_TUNE_N_POINTS * MAX_CELLS];
    size_t best = 0;
    if ((st = kace_sim_tune(ctx, &so->sched, w->profiles, w->truth, w->pool, w->n_pool, &w->rates, in,
                            (size_t)n_cells, points, jct, &best))) {
        fclose(f);
        rc = cli_error(ctx, st);
        goto done;
    }
    for (int p = 0; p < KACE_TUNE_N_POINTS; p++) {
        const kace_tune_point *t = &points[p];
        fprintf(f, "%g,%g,%g,%s,%.6f", t->min_gain, t->min_confidence, t->overload_queue, t->reserve ? "on" : "off",
                t->geomean_jct_h);
        for (int i = 0; i < n_cells; i++)
            fprintf(f, ",%.6f", jct[p * n_cells + i]);
        fprintf(f, "\n");
    }
    fclose(f);
    const kace_tune_point *c = &points[best];
    printf("chosen: --min-gain %g --min-confidence %g --overload-queue %g --reserve %s (geometric mean of kace's mean"
           " JCT %.3f h; all %d grid points in %s)\n",
           c->min_gain, c->min_confidence, c->overload_queue, c->reserve ? "on" : "off", c->geomean_jct_h,
           KACE_TUNE_N_POINTS, path);
    for (int i = 0; i < n_cells; i++)
        printf("  %-36s kace mean JCT %9.2f h\n", cells[i].name, jct[best * (size_t)n_cells + (size_t)i]);
    so->sched.min_gain = c->min_gain;
    so->sched.min_confidence = c->min_confidence;
    so->sched.overload_queue = c->overload_queue;
    so->sched.reserve = c->reserve;
    rc = EXIT_OK;
done:
    free(lists);
    free(sizes);
    for (int i = 0; i < n_cells; i++) {
        free(cells[i].jobs);
        free(cells[i].node_gpus);
    }
    return rc;
}

/* ---- kace simulate --sacct: a site's own history ---- */

typedef struct sacct_options {
    const char *path, *map;
    int cluster_nodes, cluster_gpus; /* 0: from the file */
    int shards;                      /* gres/shard count per GPU of the shard scenario */
} sacct_options;

enum { SACCT_EXCLUSIVE, SACCT_SHARD, SACCT_KACE, N_SACCT_SCENARIOS };
static const char *const sacct_scenario_names[N_SACCT_SCENARIOS] = {"exclusive", "shard", "kace"};

/* Quantiles of per-job slowdown and queueing (hours), 201 points per
 * scenario, and the figure drawn from them. */
static int write_sacct_outputs(const char *out, const kace_sim_job *jobs, size_t n_jobs,
                               kace_sim_result *const *res, bool figures)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/sacct_cdf.csv", out);
    FILE *f = fopen(path, "w");
    double *v = malloc((n_jobs ? n_jobs : 1) * sizeof *v);
    double *q = malloc(2 * N_SACCT_SCENARIOS * 201 * sizeof *q);
    if (!f || !v || !q) {
        fprintf(stderr, "kace: cannot write %s\n", path);
        if (f)
            fclose(f);
        free(v);
        free(q);
        return -1;
    }
    for (int p = 0; p < N_SACCT_SCENARIOS; p++)
        for (int what = 0; what < 2; what++) {
            for (size_t i = 0; i < n_jobs; i++)
                v[i] = what == 0 ? (res[p]->finish[i] - res[p]->start[i]) / jobs[i].work
                                 : (res[p]->start[i] - jobs[i].arrival) / 3600.0;
            qsort(v, n_jobs, sizeof *v, cmp_double);
            for (int k = 0; k <= 200; k++)
                q[(p * 2 + what) * 201 + k] = n_jobs ? v[(size_t)((double)(n_jobs - 1) * k / 200.0)] : 0;
        }
    fprintf(f, "fraction");
    for (int what = 0; what < 2; what++)
        for (int p = 0; p < N_SACCT_SCENARIOS; p++)
            fprintf(f, ",%s_%s", what == 0 ? "slowdown" : "queue_h", sacct_scenario_names[p]);
    fprintf(f, "\n");
    for (int k = 0; k <= 200; k++) {
        fprintf(f, "%.3f", k / 200.0);
        for (int what = 0; what < 2; what++)
            for (int p = 0; p < N_SACCT_SCENARIOS; p++)
                fprintf(f, ",%.6f", q[(p * 2 + what) * 201 + k]);
        fprintf(f, "\n");
    }
    fclose(f);
    free(v);
    free(q);
    if (!figures)
        return 0;
    static const char script[] =
        "set terminal pngcairo size 1200,500 noenhanced font ',11'\n"
        "set datafile separator ','\n"
        "set output 'fig_sacct.png'\n"
        "set grid\n"
        "set key right bottom\n"
        "set multiplot layout 1,3 title 'The site history replayed: exclusive GPUs, Slurm shards, kace'\n"
        "set title 'Job slowdown, CDF'\n"
        "set xlabel 'run time / run time alone'\n"
        "set ylabel 'fraction of jobs'\n"
        "plot for [c=2:4] 'sacct_cdf.csv' using (column(c)):1 with lines lw 2 title columnheader(c)\n"
        "set title 'Queueing, CDF'\n"
        "set xlabel 'wait (hours)'\n"
        "plot for [c=5:7] 'sacct_cdf.csv' using (column(c)):1 with lines lw 2 title columnheader(c)\n"
        "set title 'GPU-hours'\n"
        "set xlabel ''\n"
        "set ylabel 'GPU-hours'\n"
        "set style fill solid 0.6\n"
        "set boxwidth 0.6\n"
        "set yrange [0:*]\n"
        "unset key\n"
        "plot 'sacct.csv' using 0:2:xtic(1) every ::1 with boxes\n"
        "unset multiplot\n";
    return figures_gnuplot(out, script);
}

static int simulate_sacct(const char *db, const char *import_dir, const char *out, bool figures,
                          const sched_options *so, const sacct_options *sa)
{
    kace_ctx *ctx = kace_ctx_new();
    if (!ctx)
        return EXIT_FAILURE_RUN;
    sim_world w;
    int rc = sim_world_load(ctx, db, import_dir, so->n_occur, so->seed, &w);
    if (rc != EXIT_OK) {
        kace_ctx_free(&ctx);
        return rc;
    }
    rc = EXIT_FAILURE_RUN;
    kace_sacct *sacct = NULL;
    kace_sacct_map *map = NULL;
    kace_sim_job *jobs = NULL, *shard_jobs = NULL;
    size_t *rows = NULL, n_jobs = 0, n_measured = 0, n_predicted = 0;
    kace_truth *truth = NULL;
    int *node_gpus = NULL;
    size_t n_nodes = 0;
    kace_sim_result *res[N_SACCT_SCENARIOS] = {0};
    int pool[KACE_SCHED_MAX_WORKLOADS], n_pool = 0, n_shareable = 0;
    kace_sacct_counts cnt;
    kace_status st;
    if ((st = kace_sacct_load(ctx, sa->path, &sacct)) || (sa->map && (st = kace_sacct_map_load(ctx, sa->map, &map))) ||
        (st = kace_sim_jobs_from_sacct(ctx, sacct, map, w.profiles, w.pool, w.n_pool, so->sched.gpu_mem_gb, &jobs, &rows,
                                       &n_jobs, pool,
                                       &n_pool, &n_shareable, &cnt))) {
        if (st == KACE_ERR_NOT_FOUND && sa->map)
            fprintf(stderr, "kace: %s: ", sa->map);
        rc = cli_error(ctx, st);
        goto done;
    }
    printf("sacct %s: %zu jobs; %zu ran on GPUs (%zu replayed jobs, %zu multi-node jobs split into one gang per node, "
           "%zu multi-GPU gangs);\n  not replayed: %zu never started or still running, %zu without a GPU\n",
           sa->path, cnt.rows, cnt.rows - cnt.not_run - cnt.cpu_only, cnt.replayed, cnt.multi_node, cnt.gangs,
           cnt.not_run, cnt.cpu_only);
    if (cnt.shared_before)
        printf("  %zu jobs held a GPU share (gres/mps or gres/shard): replayed as one GPU each, their run time under "
               "sharing taken as their work alone\n", cnt.shared_before);
    printf("workloads: %zu by --sacct-map rule, %zu by kace's tag in AdminComment, %zu by JobName; %zu without a "
           "stored workload (%zu by a '-' rule) run exclusive under every scenario%s%s%s\n",
           cnt.by_rule, cnt.by_tag, cnt.by_name, cnt.no_workload, cnt.exclusive_rule,
           cnt.example_unmapped[0] ? " (e.g. job name '" : "", cnt.example_unmapped,
           cnt.example_unmapped[0] ? "')" : "");
    if (n_jobs == 0) {
        fprintf(stderr, "kace: %s: no job ran on a GPU: nothing to replay\n", sa->path);
        goto done;
    }
    /* The cluster: --cluster, else the file's GPU nodes. */
    if (sa->cluster_nodes) {
        n_nodes = (size_t)sa->cluster_nodes;
        node_gpus = malloc(n_nodes * sizeof *node_gpus);
        if (!node_gpus)
            goto done;
        for (size_t i = 0; i < n_nodes; i++)
            node_gpus[i] = sa->cluster_gpus;
        printf("cluster: %zu nodes x %d GPUs (--cluster)\n", n_nodes, sa->cluster_gpus);
    } else {
        node_gpus = malloc((sacct->n_nodes ? sacct->n_nodes : 1) * sizeof *node_gpus);
        if (!node_gpus)
            goto done;
        size_t total = 0;
        for (size_t i = 0; i < sacct->n_nodes; i++)
            if (sacct->node_gpus[i] > 0) {
                int g = sacct->node_gpus[i] > KACE_SCHED_MAX_NODE_GPUS ? KACE_SCHED_MAX_NODE_GPUS : sacct->node_gpus[i];
                node_gpus[n_nodes++] = g;
                total += (size_t)g;
            }
        printf("cluster: %zu GPUs on %zu nodes: the file's nodes, each with the most GPUs one job held there "
               "(--cluster NxG to say otherwise)\n", total, n_nodes);
    }
    const kace_dataset *sets[2] = {w.pairs, w.triples};
    if ((st = kace_truth_complete(ctx, sets, 2, &w.rates, pool, n_shareable, so->sched.max_group, &truth, &n_measured,
                                  &n_predicted))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    printf("rates of colocated jobs: %zu groups of the jobs' %d workloads measured in the store, %zu predicted by "
           "kace's model (fitted on %zu pairs)\n",
           n_measured, n_shareable, n_predicted, w.n_train);
    /* Shard: each single-GPU job takes one of S equal shards (gres/shard),
     * a multiple of the scheduler's 1% steps so that S of them fit. */
    shard_jobs = malloc(n_jobs * sizeof *shard_jobs);
    if (!shard_jobs)
        goto done;
    int shard_milli = 1000 / sa->shards / 10 * 10;
    for (size_t i = 0; i < n_jobs; i++) {
        shard_jobs[i] = jobs[i];
        if (jobs[i].num_gpu == 1)
            shard_jobs[i].gpu_milli = shard_milli;
    }
    if (cli_mkdirs(out) != 0) {
        fprintf(stderr, "kace: cannot create %s\n", out);
        goto done;
    }
    char csv_path[4096];
    snprintf(csv_path, sizeof csv_path, "%s/sacct.csv", out);
    FILE *sf = fopen(csv_path, "w");
    if (!sf) {
        fprintf(stderr, "kace: cannot write %s\n", csv_path);
        goto done;
    }
    fprintf(sf, "scenario,gpu_hours,mean_slowdown,p95_slowdown,mean_queue_h,p95_queue_h,mean_jct_h,p95_jct_h,"
                "shared_fraction,max_group\n");
    printf("\n%-9s %10s %9s %9s %9s %9s %9s %9s %7s\n", "scenario", "GPU_hours", "meanSlow", "p95Slow", "queue_h",
           "p95que_h", "meanJCT_h", "p95JCT_h", "shared");
    static const kace_sched_policy policy_of[N_SACCT_SCENARIOS] = {KACE_SCHED_EXCLUSIVE, KACE_SCHED_PACKING,
                                                                   KACE_SCHED_KACE};
    for (int p = 0; p < N_SACCT_SCENARIOS; p++) {
        kace_sim_config cfg = {.record_timeline = false};
        cfg.sched = config_for(so, policy_of[p]);
        if (p == SACCT_SHARD)
            cfg.sched.max_group = sa->shards;
        if ((st = kace_sim_run(ctx, &cfg, w.profiles, truth, pool, n_pool, &w.rates, node_gpus, n_nodes,
                               p == SACCT_SHARD ? shard_jobs : jobs, n_jobs, &res[p]))) {
            fclose(sf);
            rc = cli_error(ctx, st);
            goto done;
        }
        const kace_sim_result *r = res[p];
        printf("%-9s %10.4g %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %6.1f%%\n", sacct_scenario_names[p], r->gpu_hours,
               r->mean_slowdown, r->p95_slowdown, r->mean_queue / 3600, r->p95_queue / 3600, r->mean_jct / 3600,
               r->p95_jct / 3600, 100 * r->shared_fraction);
        fprintf(sf, "%s,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%d\n", sacct_scenario_names[p], r->gpu_hours,
                r->mean_slowdown, r->p95_slowdown, r->mean_queue / 3600, r->p95_queue / 3600, r->mean_jct / 3600,
                r->p95_jct / 3600, r->shared_fraction, r->max_group);
    }
    fclose(sf);
    printf("(slowdown: a job's run time over its run time alone, End - Start in the file; queueing: start - submit)\n");
    if (write_sacct_outputs(out, jobs, n_jobs, res, figures) == 0)
        printf("wrote %s/sacct.csv, sacct_cdf.csv%s\n", out, figures ? ", fig_sacct.png" : "");
    rc = EXIT_OK;
done:
    for (int p = 0; p < N_SACCT_SCENARIOS; p++)
        kace_sim_result_free(&res[p]);
    kace_truth_free(&truth);
    free(node_gpus);
    free(jobs);
    free(shard_jobs);
    free(rows);
    kace_sacct_map_free(&map);
    kace_sacct_free(&sacct);
    sim_world_free(&w);
    kace_ctx_free(&ctx);
    return rc;
}

int cmd_simulate(int argc, char **argv)
{
    const char *db = cli_default_db(), *trace_path = NULL, *nodes_path = NULL, *out = "kace-sim", *import_dir = NULL;
    const char *policy_list = "exclusive,packing,random,MEMCAP,SM%,MEM%,kace,Oracle";
    double gpus = 32;
    bool figures = true;
    sched_options so;
    sched_options_default(&so);
    static const struct option longopts[] = {
        {"db", required_argument, 0, 'd'},           {"trace", required_argument, 0, 't'},
        {"nodes", required_argument, 0, O_NODES},    {"gpus", required_argument, 0, O_GPUS},
        {"policies", required_argument, 0, O_POLICIES}, {"out", required_argument, 0, 'o'},
        {"max-group", required_argument, 0, O_MAX_GROUP}, {"gpu-mem", required_argument, 0, O_GPU_MEM},
        {"ls-target", required_argument, 0, O_LS},   {"min-confidence", required_argument, 0, O_CONF},
        {"min-gain", required_argument, 0, O_GAIN},  {"train-n-occur", required_argument, 0, O_NOCCUR},
        {"train-seed", required_argument, 0, O_SEED}, {"import", required_argument, 0, O_IMPORT},
        {"no-figures", no_argument, 0, O_NOFIG},     {"help", no_argument, 0, 'h'},
        {"quiet", no_argument, 0, O_QUIET},
        {"overload-queue", required_argument, 0, O_OVER_QUEUE},
        {"overload-min-rate", required_argument, 0, O_OVER_RATE}, {"reserve", required_argument, 0, O_RESERVE},
        {"objective", required_argument, 0, O_OBJECTIVE},
        {"tune", no_argument, 0, O_TUNE},            {"tune-traces", required_argument, 0, O_TUNE_TRACES},
        {"tune-gpus", required_argument, 0, O_TUNE_GPUS},
        {"sacct", required_argument, 0, O_SACCT},    {"sacct-map", required_argument, 0, O_SACCT_MAP},
        {"cluster", required_argument, 0, O_CLUSTER}, {"shards", required_argument, 0, O_SHARDS},
        {0, 0, 0, 0}};
    int c;
    double v = 0;
    bool tune = false, policies_given = false, quiet = false;
    const char *sacct_path = NULL, *sacct_map = NULL;
    int sacct_nodes = 0, sacct_gpus = 0, shards = 2;
    const char *tune_traces = NULL, *tune_gpus = "16,24,32,48,64";
    optind = 1;
    while ((c = getopt_long(argc, argv, "d:t:o:h", longopts, NULL)) != -1) {
        int t = threshold_option("simulate", c, optarg, &so);
        if (t < 0)
            return EXIT_USAGE;
        if (t > 0)
            continue;
        switch (c) {
        case O_TUNE: tune = true; break;
        case O_TUNE_TRACES: tune_traces = optarg; break;
        case O_TUNE_GPUS:
            if (!cli_whole_list("simulate", "tune-gpus", optarg, 1, 10000000))
                return EXIT_USAGE;
            tune_gpus = optarg;
            break;
        case 'd': db = optarg; break;
        case 't': trace_path = optarg; break;
        case 'o': out = optarg; break;
        case O_NODES: nodes_path = optarg; break;
        case O_POLICIES: policy_list = optarg; policies_given = true; break;
        case O_IMPORT: import_dir = optarg; break;
        case O_NOFIG: figures = false; break;
        case O_SACCT: sacct_path = optarg; break;
        case O_SACCT_MAP: sacct_map = optarg; break;
        case O_CLUSTER:
        {
            long a, b;
            if (!cli_dims("simulate", "cluster", optarg, 1000000, KACE_SCHED_MAX_NODE_GPUS, &a, &b))
                return EXIT_USAGE;
            sacct_nodes = (int)a;
            sacct_gpus = (int)b;
            break;
        }
        case O_SHARDS:
            if (!cli_int("simulate", "shards", optarg, 1, KACE_SCHED_MAX_GROUP, &shards))
                return EXIT_USAGE;
            break;
        case O_QUIET: quiet = true; break;
        case O_GPUS:
            if (!cli_number("simulate", "gpus", optarg, 0, 1e7, &gpus))
                return EXIT_USAGE;
            if (gpus != floor(gpus)) /* 1.5 GPUs would be cut to 1 */
                return cli_usage("simulate", "--gpus: '%s' is not a whole number", optarg);
            break;
        case O_MAX_GROUP:
            if (!cli_number("simulate", "max-group", optarg, 1, KACE_SCHED_MAX_GROUP, &v))
                return EXIT_USAGE;
            so.sched.max_group = (int)v;
            break;
        case O_GPU_MEM:
            if (!cli_number("simulate", "gpu-mem", optarg, 0.001, 1e6, &so.sched.gpu_mem_gb))
                return EXIT_USAGE;
            break;
        case O_LS:
            if (!cli_number("simulate", "ls-target", optarg, 0, 1, &so.sched.ls_target))
                return EXIT_USAGE;
            break;
        case O_CONF:
            if (!cli_number("simulate", "min-confidence", optarg, 0, 1, &so.sched.min_confidence))
                return EXIT_USAGE;
            break;
        case O_GAIN:
            if (!cli_number("simulate", "min-gain", optarg, -1, 3, &so.sched.min_gain))
                return EXIT_USAGE;
            break;
        case O_NOCCUR:
            if (!cli_number("simulate", "train-n-occur", optarg, 1, 100, &v))
                return EXIT_USAGE;
            so.n_occur = (int)v;
            break;
        case O_SEED:
            if (!cli_number("simulate", "train-seed", optarg, 0, 1e9, &v))
                return EXIT_USAGE;
            so.seed = (int)v;
            break;
        case 'h': printf("%s", simulate_help); return EXIT_OK;
        default: return cli_usage("simulate", "unknown option");
        }
    }
    if (optind < argc)
        return cli_usage("simulate", "unexpected argument '%s'", argv[optind]);
    if (sacct_path) {
        if (trace_path || nodes_path || tune || policies_given)
            return cli_usage("simulate", "--sacct replays a site's history under exclusive, shard and kace: it takes "
                                         "no --trace, --nodes, --tune or --policies");
        sacct_options sa = {sacct_path, sacct_map, sacct_nodes, sacct_gpus, shards};
        return simulate_sacct(db, import_dir, out, figures, &so, &sa);
    }
    if (sacct_map || sacct_nodes || shards != 2)
        return cli_usage("simulate", "--sacct-map, --cluster and --shards go with --sacct");
    int policies[KACE_SCHED_N_POLICIES], n_policies = 0;
    int rc = parse_policies(policy_list, policies, &n_policies);
    if (rc != EXIT_OK)
        return rc;
    char trace_buf[4096], nodes_buf[4096];
    if (!trace_path) {
        snprintf(trace_buf, sizeof trace_buf, "%s/alibaba-gpu-2023/openb_pod_list_default.csv", default_data_root());
        trace_path = trace_buf;
    }
    if (!nodes_path) {
        /* The node list beside the pod list. */
        snprintf(nodes_buf, sizeof nodes_buf, "%s", trace_path);
        char *slash = strrchr(nodes_buf, '/');
        size_t at = slash ? (size_t)(slash - nodes_buf + 1) : 0;
        snprintf(nodes_buf + at, sizeof nodes_buf - at, "openb_node_list_gpu_node.csv");
        nodes_path = nodes_buf;
    }

    kace_ctx *ctx = cli_ctx_new();
    cli_meter_attach(ctx, "simulate", quiet);
    sim_world w;
    kace_trace *trace = NULL;
    kace_node_list *nodes = NULL;
    kace_sim_job *jobs = NULL;
    int *node_gpus = NULL;
    kace_sim_result *res[KACE_SCHED_N_POLICIES] = {0};
    size_t n_jobs = 0, n_cpu = 0, n_nodes = 0;
    kace_status st;
    rc = EXIT_FAILURE_RUN;
    if (!ctx)
        return rc;
    if ((rc = sim_world_load(ctx, db, import_dir, so.n_occur, so.seed, &w)) != EXIT_OK) {
        kace_ctx_free(&ctx);
        return rc;
    }
    rc = EXIT_FAILURE_RUN;
    double t_parse = seconds_now();
    if ((st = kace_trace_load(ctx, trace_path, &trace)) || (st = kace_node_list_load(ctx, nodes_path, &nodes)) ||
        (st = kace_sim_jobs_from_trace(ctx, trace, w.profiles, w.pool, w.n_pool, &jobs, &n_jobs, &n_cpu)) ||
        (st = kace_sim_cluster_for(ctx, nodes, (size_t)gpus, jobs, n_jobs, &node_gpus, &n_nodes))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    t_parse = seconds_now() - t_parse;
    if (tune) {
        if (cli_mkdirs(out) != 0) {
            fprintf(stderr, "kace: cannot create %s\n", out);
            goto done;
        }
        if ((rc = tune_thresholds(ctx, &w, nodes, tune_traces, tune_gpus, trace_path, out, &so)) != EXIT_OK)
            goto done;
        rc = EXIT_FAILURE_RUN;
        printf("\n");
    }
    size_t cluster_gpus = 0, n_multi = 0, n_ls = 0;
    for (size_t i = 0; i < n_nodes; i++)
        cluster_gpus += (size_t)node_gpus[i];
    for (size_t i = 0; i < n_jobs; i++) {
        n_multi += jobs[i].num_gpu > 1;
        n_ls += jobs[i].ls;
    }
    printf("trace %s: %zu pods = %zu GPU jobs replayed (%zu single-GPU, %zu multi-GPU; %zu LS) + %zu CPU-only pods\n"
           "  (no GPU: not replayed); parsed in %.3f s\n",
           trace_path, trace->n_jobs, n_jobs, n_jobs - n_multi, n_multi, n_ls, n_cpu, t_parse);
    printf("cluster: %zu GPUs on %zu nodes sampled from %s (%zu GPUs), each a V100 32GB (%.0f GB, groups <= %d)\n",
           cluster_gpus, n_nodes, nodes_path, nodes->n_gpus, so.sched.gpu_mem_gb, so.sched.max_group);
    printf("kace: --min-gain %g --min-confidence %g --overload-queue %g --reserve %s --overload-min-rate %g "
           "--ls-target %g\n",
           so.sched.min_gain, so.sched.min_confidence, so.sched.overload_queue, so.sched.reserve ? "on" : "off", so.sched.overload_min_rate,
           so.sched.ls_target);
    printf("workloads: %d (LS jobs -> inference, others -> training, by FNV-1a hash of the pod name); truth: %zu "
           "measured groups may share;\nkace's model: slowdown model fitted on %zu training pairs (n_occur %d, seed %d)\n",
           w.n_pool, kace_group_set_size(kace_truth_runnable(w.truth)), w.n_train, so.n_occur, so.seed);
    if (cli_mkdirs(out) != 0) {
        fprintf(stderr, "kace: cannot create %s\n", out);
        goto done;
    }

    printf("\n%-9s %9s %9s %9s %9s %9s %10s %8s %7s %7s %7s %8s\n", "policy", "meanJCT_h", "p95JCT_h", "queue_h",
           "p95que_h", "makespn_d", "GPU_hours", "jobs/h", "effic", "shared", "LS_met", "sim_ms");
    char summary_path[4096];
    snprintf(summary_path, sizeof summary_path, "%s/policies.csv", out);
    FILE *sf = fopen(summary_path, "w");
    if (sf)
        fprintf(sf, "policy,mean_jct_h,p95_jct_h,mean_queue_h,p95_queue_h,makespan_d,gpu_hours,jobs_per_hour,"
                    "efficiency,shared_fraction,ls_met_fraction,sim_seconds\n");
    for (int p = 0; p < n_policies; p++) {
        kace_sim_config cfg = {.record_timeline = true};
        cfg.sched = config_for(&so, policies[p]);
        double t0 = seconds_now();
        if ((st = kace_sim_run(ctx, &cfg, w.profiles, w.truth, w.pool, w.n_pool, &w.rates, node_gpus, n_nodes, jobs,
                               n_jobs, &res[p]))) {
            rc = cli_error(ctx, st);
            if (sf)
                fclose(sf);
            goto done;
        }
        double secs = seconds_now() - t0;
        const kace_sim_result *r = res[p];
        double ls_met = r->n_ls ? (double)r->n_ls_met / (double)r->n_ls : 1;
        printf("%-9s %9.2f %9.2f %9.3f %9.3f %9.2f %10.0f %8.2f %7.3f %6.1f%% %6.1f%% %8.1f\n",
               kace_sched_policy_name(policies[p]), r->mean_jct / 3600, r->p95_jct / 3600, r->mean_queue / 3600,
               r->p95_queue / 3600, r->makespan / 86400, r->gpu_hours, r->jobs_per_hour, r->efficiency,
               100 * r->shared_fraction, 100 * ls_met, 1e3 * secs);
        if (sf)
            fprintf(sf, "%s,%.6f,%.6f,%.6f,%.6f,%.6f,%.3f,%.6f,%.6f,%.6f,%.6f,%.6f\n",
                    kace_sched_policy_name(policies[p]), r->mean_jct / 3600, r->p95_jct / 3600, r->mean_queue / 3600,
                    r->p95_queue / 3600, r->makespan / 86400, r->gpu_hours, r->jobs_per_hour, r->efficiency,
                    r->shared_fraction, ls_met, secs);
    }
    if (sf)
        fclose(sf);
    /* kace against the others, by mean JCT. */
    int ik = -1, io = -1, ie = -1, ip = -1;
    for (int p = 0; p < n_policies; p++) {
        if (policies[p] == KACE_SCHED_KACE) ik = p;
        if (policies[p] == KACE_SCHED_ORACLE) io = p;
        if (policies[p] == KACE_SCHED_EXCLUSIVE) ie = p;
        if (policies[p] == KACE_SCHED_PACKING) ip = p;
    }
    if (ik >= 0) {
        int best = -1;
        for (int p = 0; p < n_policies; p++)
            if (policies[p] != KACE_SCHED_ORACLE && (best < 0 || res[p]->mean_jct < res[best]->mean_jct))
                best = p;
        printf("\nkace mean JCT %.2f h:", res[ik]->mean_jct / 3600);
        if (ie >= 0)
            printf(" %.1f%% lower than exclusive,", 100 * (1 - res[ik]->mean_jct / res[ie]->mean_jct));
        if (ip >= 0)
            printf(" %.1f%% lower than the trace's packing,", 100 * (1 - res[ik]->mean_jct / res[ip]->mean_jct));
        if (io >= 0)
            printf(" %.1f%% above Oracle;", 100 * (res[ik]->mean_jct / res[io]->mean_jct - 1));
        printf(" best non-Oracle policy: %s\n", kace_sched_policy_name(policies[best]));
    }
    if (write_outputs(out, jobs, n_jobs, res, policies, n_policies, figures) == 0)
        printf("wrote %s/policies.csv, jct_cdf.csv, timeline_*.csv%s\n", out,
               figures ? ", fig_jct_cdf.png, fig_utilization.png" : "");
    rc = EXIT_OK;
done:
    for (int p = 0; p < KACE_SCHED_N_POLICIES; p++)
        kace_sim_result_free(&res[p]);
    free(node_gpus);
    free(jobs);
    kace_node_list_free(&nodes);
    kace_trace_free(&trace);
    sim_world_free(&w);
    kace_ctx_free(&ctx);
    return rc;
}

/* ---- kace schedule ---- */

typedef struct schedule_io {
    FILE *out;
} schedule_io;

static void print_start(void *user, int job_id, const int *gpus, int n)
{
    schedule_io *io = user;
    fprintf(io->out, "start %d gpu", job_id);
    for (int i = 0; i < n; i++)
        fprintf(io->out, "%c%d", i ? ',' : ' ', gpus[i]);
    fprintf(io->out, "\n");
}

static const char *const schedule_help =
    "usage: kace schedule [--db PATH] [--cluster NxG | --nodes FILE --gpus N] [--policy P] [--max-group K]\n"
    "                     [--gpu-mem GB] [--ls-target F] [--min-confidence C] [--min-gain G]\n"
    "                     [--overload-queue Q] [--overload-min-rate R] [--reserve on|off]\n"
    "                     [--objective raw|normalized|fair]\n"
    "The online scheduler. Reads commands from stdin, one per line, and answers on stdout:\n"
    "  submit ID WORKLOAD [LS|BE] [GPU_MILLI] [NUM_GPU]   ->  'start ID gpu G[,G...]' or 'queued ID'\n"
    "  finish ID                                          ->  'start ...' for queued jobs that now run, then 'ok'\n"
    "  state                                              ->  'busy B queued Q gpus N'\n"
    "ID is an integer >= 0. Errors print 'error: ...' and the scheduler goes on.\n";

int cmd_schedule(int argc, char **argv)
{
    const char *db = cli_default_db(), *nodes_path = NULL, *policy_name = "kace";
    int cluster_nodes = 4, cluster_gpus = 8;
    double gpus = 0, v = 0;
    sched_options so;
    sched_options_default(&so);
    static const struct option longopts[] = {
        {"db", required_argument, 0, 'd'},           {"cluster", required_argument, 0, O_CLUSTER},
        {"nodes", required_argument, 0, O_NODES},    {"gpus", required_argument, 0, O_GPUS},
        {"policy", required_argument, 0, O_POLICIES}, {"max-group", required_argument, 0, O_MAX_GROUP},
        {"gpu-mem", required_argument, 0, O_GPU_MEM}, {"ls-target", required_argument, 0, O_LS},
        {"min-confidence", required_argument, 0, O_CONF}, {"min-gain", required_argument, 0, O_GAIN},
        {"help", no_argument, 0, 'h'},               {"overload-queue", required_argument, 0, O_OVER_QUEUE},
        {"overload-min-rate", required_argument, 0, O_OVER_RATE}, {"reserve", required_argument, 0, O_RESERVE},
        {"objective", required_argument, 0, O_OBJECTIVE},
        {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "d:h", longopts, NULL)) != -1) {
        int t = threshold_option("schedule", c, optarg, &so);
        if (t < 0)
            return EXIT_USAGE;
        if (t > 0)
            continue;
        switch (c) {
        case 'd': db = optarg; break;
        case O_NODES: nodes_path = optarg; break;
        case O_POLICIES: policy_name = optarg; break;
        case O_CLUSTER:
        {
            long a, b;
            if (!cli_dims("schedule", "cluster", optarg, 1000000, KACE_SCHED_MAX_NODE_GPUS, &a, &b))
                return EXIT_USAGE;
            cluster_nodes = (int)a;
            cluster_gpus = (int)b;
            break;
        }
        case O_GPUS:
            if (!cli_number("schedule", "gpus", optarg, 0, 1e7, &gpus))
                return EXIT_USAGE;
            if (gpus != floor(gpus)) /* 1.5 GPUs would be cut to 1 */
                return cli_usage("schedule", "--gpus: '%s' is not a whole number", optarg);
            break;
        case O_MAX_GROUP:
            if (!cli_number("schedule", "max-group", optarg, 1, KACE_SCHED_MAX_GROUP, &v))
                return EXIT_USAGE;
            so.sched.max_group = (int)v;
            break;
        case O_GPU_MEM:
            if (!cli_number("schedule", "gpu-mem", optarg, 0.001, 1e6, &so.sched.gpu_mem_gb))
                return EXIT_USAGE;
            break;
        case O_LS:
            if (!cli_number("schedule", "ls-target", optarg, 0, 1, &so.sched.ls_target))
                return EXIT_USAGE;
            break;
        case O_CONF:
            if (!cli_number("schedule", "min-confidence", optarg, 0, 1, &so.sched.min_confidence))
                return EXIT_USAGE;
            break;
        case O_GAIN:
            if (!cli_number("schedule", "min-gain", optarg, -1, 3, &so.sched.min_gain))
                return EXIT_USAGE;
            break;
        case 'h': printf("%s", schedule_help); return EXIT_OK;
        default: return cli_usage("schedule", "unknown option");
        }
    }
    int policy = kace_sched_policy_from_name(policy_name);
    if (policy < 0 || policy == KACE_SCHED_ORACLE)
        return cli_usage("schedule", "--policy: '%s' is not an online policy (exclusive, packing, random, MEMCAP, "
                                     "SM%%, MEM%%, kace)", policy_name);
    kace_ctx *ctx = cli_ctx_new();
    sim_world w;
    kace_node_list *nodes = NULL;
    kace_sched *s = NULL;
    int *node_gpus = NULL;
    size_t n_nodes = 0;
    int rc = sim_world_load(ctx, db, NULL, so.n_occur, so.seed, &w);
    if (rc != EXIT_OK) {
        kace_ctx_free(&ctx);
        return rc;
    }
    rc = EXIT_FAILURE_RUN;
    kace_status st;
    if (nodes_path) {
        if ((st = kace_node_list_load(ctx, nodes_path, &nodes)) ||
            (st = kace_sim_cluster(ctx, nodes, (size_t)gpus, &node_gpus, &n_nodes))) {
            rc = cli_error(ctx, st);
            goto done;
        }
    } else {
        n_nodes = (size_t)cluster_nodes;
        node_gpus = malloc(n_nodes * sizeof *node_gpus);
        if (!node_gpus)
            goto done;
        for (size_t i = 0; i < n_nodes; i++)
            node_gpus[i] = cluster_gpus;
    }
    kace_sched_config cfg = config_for(&so, policy);
    schedule_io io = {stdout};
    if ((st = kace_sched_new(ctx, &cfg, w.profiles, w.pool, w.n_pool, kace_truth_runnable(w.truth), &w.rates,
                             node_gpus, n_nodes, print_start, &io, &s))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    char line[1024];
    int lineno = 0;
    while (fgets(line, sizeof line, stdin)) {
        lineno++;
        char cmd[32] = "", arg1[256] = "", workload[256] = "", qos[16] = "BE", milli_s[32] = "", ngpu_s[32] = "";
        int n = sscanf(line, "%31s %255s %255s %15s %31s %31s", cmd, arg1, workload, qos, milli_s, ngpu_s);
        if (n <= 0 || cmd[0] == '#')
            continue;
        /* The one number parser here too: "3x" is not 3. */
        double idv = -1, milli = 1000, ngpu = 1;
        if (n < 2 || !cli_parse_number(arg1, 0, (1L << 30) - 1, true, &idv))
            idv = -1;
        bool numbers_ok = (n < 5 || cli_parse_number(milli_s, 0, INT_MAX, true, &milli)) &&
                          (n < 6 || cli_parse_number(ngpu_s, 0, INT_MAX, true, &ngpu));
        int id = (int)idv;
        if (strcmp(cmd, "submit") == 0 && n >= 3 && id >= 0) {
            int wi = kace_dataset_find(w.profiles, workload);
            if (!numbers_ok) {
                printf("error: line %d: GPU_MILLI and NUM_GPU must be whole numbers, not '%s %s'\n", lineno, milli_s,
                       ngpu_s);
            } else if (wi < 0) {
                printf("error: line %d: unknown workload '%s'\n", lineno, workload);
            } else if (strcmp(qos, "LS") != 0 && strcmp(qos, "BE") != 0) {
                printf("error: line %d: QoS '%s' (expected LS or BE)\n", lineno, qos);
            } else {
                kace_sched_job job = {id, wi, strcmp(qos, "LS") == 0, (int)milli, (int)ngpu};
                size_t queued = kace_sched_n_queued(s);
                if ((st = kace_sched_submit(ctx, s, &job)))
                    printf("error: line %d: %s\n", lineno, kace_errmsg(ctx));
                else if (kace_sched_n_queued(s) > queued)
                    printf("queued %d\n", id);
            }
        } else if (strcmp(cmd, "finish") == 0 && n == 2 && id >= 0) {
            if ((st = kace_sched_finish(ctx, s, id)))
                printf("error: line %d: %s\n", lineno, kace_errmsg(ctx));
            else
                printf("ok\n");
        } else if (strcmp(cmd, "state") == 0) {
            printf("busy %zu queued %zu gpus %zu\n", kace_sched_n_busy(s), kace_sched_n_queued(s),
                   kace_sched_n_gpus(s));
        } else {
            printf("error: line %d: expected 'submit ID WORKLOAD [LS|BE] [MILLI] [NUM_GPU]', 'finish ID' or 'state'\n",
                   lineno);
        }
        fflush(stdout);
    }
    rc = EXIT_OK;
done:
    kace_sched_free(&s);
    free(node_gpus);
    kace_node_list_free(&nodes);
    sim_world_free(&w);
    kace_ctx_free(&ctx);
    return rc;
}
