/* kace demo: the main job end to end on measured data. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "kace/group.h"

static bool is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* Reference data: $KACE_DATA, else the project's neighbour ../shared. */
static const char *default_data(void)
{
    const char *env = getenv("KACE_DATA");
    if (env && *env)
        return env;
    static const char *const candidates[] = {"../shared/data/kace-v100", "../../shared/data/kace-v100"};
    for (size_t i = 0; i < sizeof candidates / sizeof *candidates; i++)
        if (is_dir(candidates[i]))
            return candidates[i];
    return candidates[0];
}

/* The n workloads in the most colocations of ds (ties by name), into
 * out; returns how many there are. */
static int most_measured(const kace_dataset *ds, int *out, int n)
{
    size_t *count = calloc(ds->n_workloads ? ds->n_workloads : 1, sizeof *count);
    if (!count)
        return 0;
    for (size_t c = 0; c < ds->n_colocations; c++)
        for (int i = 0; i < ds->colocations[c].k; i++)
            count[ds->colocations[c].workload[i]]++;
    int got = 0;
    for (; got < n; got++) {
        int best = -1;
        for (size_t w = 0; w < ds->n_workloads; w++) {
            bool taken = false;
            for (int j = 0; j < got; j++)
                taken |= out[j] == (int)w;
            if (taken || count[w] == 0)
                continue;
            if (best < 0 || count[w] > count[best] ||
                (count[w] == count[best] && strcmp(ds->workloads[w].name, ds->workloads[best].name) < 0))
                best = (int)w;
        }
        if (best < 0)
            break;
        out[got] = best;
    }
    free(count);
    return got;
}

int cmd_demo(int argc, char **argv)
{
    const char *data = NULL, *db = "kace-demo/kace.db", *out = "kace-demo", *gpu = NULL;
    double gpu_memory_gb = 0;
    bool with_xu = true;
    static const struct option longopts[] = {{"data", required_argument, 0, 'D'}, {"db", required_argument, 0, 'd'},
                                             {"out", required_argument, 0, 'o'},  {"no-xu", no_argument, 0, 'X'},
                                             {"gpu", required_argument, 0, 'g'},  {"gpu-memory", required_argument, 0, 'M'},
                                             {"help", no_argument, 0, 'h'},       {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "D:d:o:Xh", longopts, NULL)) != -1) {
        switch (c) {
        case 'D': data = optarg; break;
        case 'd': db = optarg; break;
        case 'o': out = optarg; break;
        case 'X': with_xu = false; break;
        case 'g': gpu = optarg; break;
        case 'M': if (!cli_number("demo", "gpu-memory", optarg, 1, 1e6, &gpu_memory_gb)) return EXIT_USAGE; break;
        case 'h':
            printf("usage: kace demo [--data DIR] [--db PATH] [--out DIR] [--no-xu] [--gpu NAME] [--gpu-memory GB]\n"
                   "Imports measured data (default $KACE_DATA or ../shared/data/kace-v100), trains KACE's model,\n"
                   "recommends partners, runs the paper's evaluation and writes CSV + PNG figures to DIR.\n"
                   "Any campaign's data works (kace's own H100 set: --data data/h100, see its README); --gpu names\n"
                   "the GPU it was measured on and --gpu-memory its memory, the bound of the groups (the reference\n"
                   "data's defaults: Tesla V100 32GB, 32 GB).\n");
            return EXIT_OK;
        default: return cli_usage("demo", "unknown option");
        }
    }
    bool reference = !data;
    if (!data)
        data = default_data();
    if (!gpu)
        gpu = reference ? "Tesla V100 32GB" : "unnamed GPU (kace demo --gpu)";
    if (gpu_memory_gb == 0 && reference)
        gpu_memory_gb = KACE_GPU_MEMORY_V100_GB;
    if (!is_dir(data)) {
        fprintf(stderr, "kace: no measurement folder at %s (give one with --data DIR or KACE_DATA)\n", data);
        return EXIT_FAILURE_RUN;
    }
    if (cli_mkdirs(out) != 0) {
        fprintf(stderr, "kace: cannot create %s\n", out);
        return EXIT_FAILURE_RUN;
    }
    kace_ctx *ctx = cli_ctx_new();
    cli_meter_attach(ctx, "demo", false); /* progress on a terminal only */
    kace_store *store = cli_create_store(ctx, db, true); /* the demo makes its own folder */
    kace_dataset *ds = NULL;
    kace_model *m = NULL;
    kace_partner *ranked = NULL;
    int rc = EXIT_FAILURE_RUN;
    kace_status st;
    if (!store)
        goto done;

    printf("== 1. import %s into %s ==\n", data, db);
    char *paths[1] = {(char *)data};
    kace_source src = {gpu, reference ? "reference" : "kace demo", NULL};
    if ((rc = cli_import_paths(ctx, store, paths, 1, &src, NULL, true)) != EXIT_OK)
        goto done;
    rc = EXIT_FAILURE_RUN;
    kace_store_counts counts;
    if ((st = kace_store_count(ctx, store, &counts))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    printf("store holds %zu workloads, %zu profile values, %zu runs, %zu split rows\n", counts.workloads,
           counts.profile_values, counts.runs, counts.splits);

    printf("\n== 2. train kace's slowdown model (and the paper's linear KACE) on every measured pair ==\n");
    if ((st = kace_store_load_dataset(ctx, store, "pairs", false, &ds))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    size_t n = ds->n_colocations;
    if (n < 2) { /* a campaign's first visits bring profiles before any pair */
        fprintf(stderr, "kace: %s holds %zu measured pair%s at 100/100 MPS; the model needs at least 2 (a device "
                        "campaign measures them after profiling: docs/gpu.md)\n", data, n, n == 1 ? "" : "s");
        goto done;
    }
    ranked = calloc(ds->n_workloads ? ds->n_workloads : 1, sizeof *ranked);
    if (!ranked)
        goto done;
    char model_path[4096];
    snprintf(model_path, sizeof model_path, "%s/kace-model.txt", out);
    kace_fit_spec paper = {.kind = KACE_MODEL_LINEAR, .features = &kace_features_kace};
    kace_fit_spec spec = {.kind = KACE_MODEL_SLOWDOWN};
    kace_slowdown_params_default(&spec.slowdown);
    if ((st = kace_model_fit_rows(ctx, ds, NULL, 0, &paper, &m)) ||
        (st = kace_store_save_model(ctx, store, "kace-paper", m))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    kace_model_free(&m);
    if ((st = kace_model_fit_rows(ctx, ds, NULL, 0, &spec, &m)) ||
        (st = kace_store_save_model(ctx, store, "slowdown", m)) ||
        (st = kace_store_promote_model(ctx, store, "slowdown")) || (st = kace_model_save(ctx, m, model_path))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    printf("fitted on %zu pairs; the slowdown model is stored as 'default' (and written to %s), the paper's\n"
           "linear model as 'kace-paper'\n", n, model_path);

    printf("\n== 3. recommend partners (predicted vs measured throughput sum, samples/s) ==\n");
    /* The reference data's three targets, else the data's three most
     * measured workloads (ties by name). */
    static const char *const reference_targets[] = {"bert-base-cased_batch8-train", "vit-base-patch16-224_batch16-inf",
                                                    "whisper-large-v2_batch8-inf"};
    int targets[3], n_targets = 0;
    for (size_t t = 0; t < 3; t++) {
        int w = kace_dataset_find(ds, reference_targets[t]);
        if (w >= 0)
            targets[n_targets++] = w;
    }
    if (n_targets == 0)
        n_targets = most_measured(ds, targets, 3);
    if (gpu_memory_gb == 0)
        printf("(GPU memory not given: groups are bounded by %.0f GB; kace demo --gpu-memory GB)\n",
               KACE_GPU_MEMORY_V100_GB);
    for (int t = 0; t < n_targets; t++) {
        int w = targets[t];
        size_t n_ranked = 0;
        if ((st = kace_rank_partners(ctx, ds, kace_model_predictor(m), KACE_NORM_TRAIN, w, NULL, 0, ranked, &n_ranked))) {
            rc = cli_error(ctx, st);
            goto done;
        }
        printf("%s:\n", ds->workloads[w].name);
        for (size_t i = 0; i < n_ranked && i < 3; i++) {
            if (ranked[i].measured == ranked[i].measured)
                printf("  %zu. %-36s predicted %8.2f  measured %8.2f  confidence %.2f\n", i + 1,
                       ds->workloads[ranked[i].workload].name, ranked[i].predicted, ranked[i].measured,
                       ranked[i].confidence);
            else
                printf("  %zu. %-36s predicted %8.2f  measured        -  confidence %.2f\n", i + 1,
                       ds->workloads[ranked[i].workload].name, ranked[i].predicted, ranked[i].confidence);
        }
        /* The same model, trained on pairs, also picks whole groups. */
        kace_group_query q = {.target = w, .k = 3, .gpu_memory_gb = gpu_memory_gb};
        kace_group_result best;
        if ((st = kace_group_best(ctx, ds, kace_model_predictor(m), &q, &best))) {
            rc = cli_error(ctx, st);
            goto done;
        }
        if (best.found)
            printf("  best group of 3 (branch and bound, %.1f of %.0f GB): %s + %s, predicted %.2f\n", best.memcap_gb,
                   gpu_memory_gb > 0 ? gpu_memory_gb : KACE_GPU_MEMORY_V100_GB,
                   ds->workloads[best.workload[1]].name, ds->workloads[best.workload[2]].name, best.predicted);
    }

    printf("\n== 4. evaluate every policy as the KACE paper did ==\n");
    eval_request req = {.out_dir = out, .pairs_set = "pairs", .triples_set = "triples", .paper = true, .clean = true,
                        .with_xu = with_xu, .xu_iter = 10, .figures = true};
    kace_slowdown_params_default(&req.slowdown);
    rc = cli_run_eval(ctx, store, &req);
done:
    free(ranked);
    kace_model_free(&m);
    kace_dataset_free(&ds);
    kace_store_close(&store);
    kace_ctx_free(&ctx);
    return rc;
}
