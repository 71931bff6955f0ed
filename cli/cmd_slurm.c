/* kace slurm status | place: what kace's Slurm placer sees and would do. */
#include <getopt.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kace/place.h"

#ifdef KACE_HAVE_SLURM
#include "cluster.h"

typedef struct slurm_view {
    kace_place_config cfg;
    kace_store *store;
    kace_dataset *ds;
    kace_model *model;
    kace_slurm_cluster *cluster;
} slurm_view;

static void view_free(slurm_view *v)
{
    kace_slurm_cluster_free(&v->cluster);
    kace_model_free(&v->model);
    kace_dataset_free(&v->ds);
    kace_store_close(&v->store);
}

/* The placer's configuration: --config, else kace.conf beside $SLURM_CONF,
 * with --db / --model / --model-file over it. */
static int view_load(kace_ctx *ctx, slurm_view *v, const char *config, const char *db, const char *model,
                     const char *model_file)
{
    char path[1100];
    kace_status st;
    kace_place_config_default(&v->cfg);
    if (!config) {
        const char *conf = getenv("SLURM_CONF");
        char dir[1024];
        snprintf(dir, sizeof dir, "%s", conf && *conf ? conf : "/etc/slurm/slurm.conf");
        snprintf(path, sizeof path, "%s/kace.conf", dirname(dir));
        FILE *f = fopen(path, "r");
        if (f) {
            fclose(f);
            config = path;
        }
    }
    if (config && (st = kace_place_config_load(ctx, config, &v->cfg)))
        return cli_error(ctx, st);
    if (db)
        snprintf(v->cfg.store, sizeof v->cfg.store, "%s", db);
    else if (!v->cfg.store[0])
        snprintf(v->cfg.store, sizeof v->cfg.store, "%s", cli_default_db());
    if (model)
        snprintf(v->cfg.model, sizeof v->cfg.model, "%s", model);
    if (model_file)
        snprintf(v->cfg.model_file, sizeof v->cfg.model_file, "%s", model_file);
    if ((st = kace_store_open(ctx, v->cfg.store, &v->store)) ||
        (st = kace_store_load_around(ctx, v->store, NULL, 0, true, &v->ds)) || /* profiles, no runs */
        (st = v->cfg.model_file[0] ? kace_model_load(ctx, v->cfg.model_file, &v->model)
                                   : kace_store_load_model(ctx, v->store, v->cfg.model, &v->model)))
        return cli_error(ctx, st);
    if (!kace_predictor_can(kace_model_predictor(v->model), KACE_PRED_MEMBERS)) {
        fprintf(stderr, "kace: the placer needs a slowdown model (kace train --kind slowdown)\n");
        return EXIT_FAILURE_RUN;
    }
    if ((st = kace_slurm_cluster_load(ctx, v->ds, v->cfg.gres, &v->cluster)))
        return cli_error(ctx, st);
    kace_place_prepare(ctx, kace_model_predictor(v->model), v->ds, v->cluster->gpus, v->cluster->n_gpus);
    return EXIT_OK;
}

/* One GPU: its jobs, predicted and observed throughput. */
static void print_gpu(kace_ctx *ctx, const slurm_view *v, size_t g)
{
    const kace_place_gpu *gpu = &v->cluster->gpus[g];
    int group[KACE_MAX_K], k = 0;
    bool predictable = gpu->n_residents <= KACE_MAX_K;
    double observed = 0;
    int n_observed = 0, n_jobs = 0;
    for (size_t j = 0; j < v->cluster->n_jobs; j++) {
        const kace_slurm_job *job = &v->cluster->jobs[j];
        if (strcmp(job->node, gpu->node) != 0)
            continue;
        n_jobs++;
        int w = job->workload[0] ? kace_dataset_find(v->ds, job->workload) : -1;
        if (w < 0 || k >= KACE_MAX_K)
            predictable = false;
        else
            group[k++] = w;
        if (!isnan(job->observed)) {
            observed += job->observed;
            n_observed++;
        }
    }
    double sum = NAN, conf = NAN, member[KACE_MAX_K];
    if (predictable && k > 0 && kace_predict_group(ctx, kace_model_predictor(v->model), v->ds, group, k, &sum, &conf, member))
        predictable = false;
    char pred[32] = "-", obs[32] = "-", ratio[32] = "-", norm[32] = "-";
    if (predictable && k > 0) {
        snprintf(pred, sizeof pred, "%.2f", sum);
        snprintf(norm, sizeof norm, "%.3f", gpu->base_score);
    }
    if (n_jobs > 0 && n_observed == n_jobs) {
        snprintf(obs, sizeof obs, "%.2f", observed);
        if (predictable && sum > 0)
            snprintf(ratio, sizeof ratio, "%.3f", observed / sum);
    }
    printf("%-12s %-6s %5d %4d%% %12s %10s %12s %9s\n", gpu->node, gpu->usable ? "up" : "down", n_jobs,
           100 - gpu->share_free, pred, norm, obs, ratio);
    k = 0;
    for (size_t j = 0; j < v->cluster->n_jobs; j++) {
        const kace_slurm_job *job = &v->cluster->jobs[j];
        if (strcmp(job->node, gpu->node) != 0)
            continue;
        char mine[32] = "-", seen[32] = "-";
        int w = job->workload[0] ? kace_dataset_find(v->ds, job->workload) : -1;
        if (predictable && w >= 0)
            snprintf(mine, sizeof mine, "%.2f", member[k++]);
        if (!isnan(job->observed))
            snprintf(seen, sizeof seen, "%.2f", job->observed);
        printf("  job %-8u %-36s %3d%% %-8s predicted %10s observed %10s\n", job->id,
               job->workload[0] ? job->workload : "(not placed by kace)", job->share,
               job->running ? "running" : "pending", mine, seen);
    }
}

static int slurm_status(kace_ctx *ctx, slurm_view *v)
{
    printf("shared GPUs (%s): predicted and observed throughput sums in samples/s; norm = predicted sum of\n"
           "fractions of exclusive throughput; observed = what jobs reported with "
           "scontrol update job=ID comment=kace:throughput=X\n",
           v->cfg.gres);
    printf("%-12s %-6s %5s %5s %12s %10s %12s %9s\n", "node", "state", "jobs", "share", "predicted", "norm",
           "observed", "obs/pred");
    for (size_t g = 0; g < v->cluster->n_gpus; g++)
        print_gpu(ctx, v, g);
    return EXIT_OK;
}

static int slurm_place(kace_ctx *ctx, slurm_view *v, const char *workload)
{
    int w = kace_dataset_find(v->ds, workload);
    if (w < 0) {
        fprintf(stderr, "kace: unknown workload '%s' (not in %s; see kace info)\n", workload, v->cfg.store);
        return EXIT_FAILURE_RUN;
    }
    kace_placement p;
    kace_status st = kace_place_job(ctx, kace_model_predictor(v->model), v->ds, v->cluster->gpus, v->cluster->n_gpus, w,
                                    &v->cfg.options, &p);
    if (st)
        return cli_error(ctx, st);
    printf("node=%s share=%d gain=%.3f score=%.3f confidence=%.2f considered=%d\n", v->cluster->gpus[p.gpu].node,
           p.share, p.gain, p.score, p.confidence, p.n_considered);
    return EXIT_OK;
}
#endif

int cmd_slurm(int argc, char **argv)
{
    const char *config = NULL, *db = NULL, *model = NULL, *model_file = NULL, *workload = NULL;
    static const struct option longopts[] = {
        {"config", required_argument, 0, 'c'}, {"db", required_argument, 0, 'd'},
        {"model", required_argument, 0, 'm'},  {"model-file", required_argument, 0, 'M'},
        {"workload", required_argument, 0, 'w'}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "c:d:m:M:w:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'c': config = optarg; break;
        case 'd': db = optarg; break;
        case 'm': model = optarg; break;
        case 'M': model_file = optarg; break;
        case 'w': workload = optarg; break;
        case 'h':
            printf("usage: kace slurm status [--config kace.conf] [--db PATH] [--model NAME | --model-file F]\n"
                   "       kace slurm place --workload W [same options]\n"
                   "status: every shared GPU of the Slurm cluster ($SLURM_CONF), the jobs kace placed there,\n"
                   "        predicted vs observed throughput. place: where job_submit/kace would put W now.\n"
                   "The configuration defaults to kace.conf beside slurm.conf.\n");
            return EXIT_OK;
        default: return cli_usage("slurm", "unknown option");
        }
    }
    if (optind >= argc)
        return cli_usage("slurm", "expected status or place");
    const char *action = argv[optind];
    if (strcmp(action, "status") != 0 && strcmp(action, "place") != 0)
        return cli_usage("slurm", "unknown action '%s' (expected status or place)", action);
    if (strcmp(action, "place") == 0 && !workload)
        return cli_usage("slurm", "place needs --workload W");
#ifdef KACE_HAVE_SLURM
    kace_ctx *ctx = kace_ctx_new();
    if (!ctx)
        return EXIT_FAILURE_RUN;
    slurm_view v = {0};
    int rc = view_load(ctx, &v, config, db, model, model_file);
    if (rc == EXIT_OK)
        rc = strcmp(action, "status") == 0 ? slurm_status(ctx, &v) : slurm_place(ctx, &v, workload);
    view_free(&v);
    kace_ctx_free(&ctx);
    return rc;
#else
    (void)config, (void)db, (void)model, (void)model_file;
    fprintf(stderr, "kace: this kace was built without Slurm (install libslurm-dev and rebuild)\n");
    return EXIT_FAILURE_RUN;
#endif
}
