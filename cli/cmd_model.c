/* kace train / predict / model */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* Says what a promoted model cannot do: serve's /v1/place and extender and
 * the Slurm plugins need each member's predicted throughput. */
static void note_capabilities(const kace_model *m, const char *name)
{
    const kace_predictor *p = kace_model_predictor(m);
    if (!kace_predictor_can(p, KACE_PRED_MEMBERS))
        fprintf(stderr,
                "note: '%s' (a %s model) predicts only a group's sum, not each workload's throughput: kace serve's "
                "/v1/place and Kubernetes extender and the Slurm plugins cannot use it (kace train --kind slowdown)\n",
                name, kace_predictor_name(p));
}

/* Saves m under name and, when asked or when the store has no default yet,
 * promotes it, in one transaction; *promoted says which. */
static kace_status save_named(kace_ctx *ctx, kace_store *store, const char *name, const kace_model *m, bool promote,
                              bool *promoted, bool *first)
{
    kace_model_info *models = NULL;
    size_t n = 0;
    kace_status st = kace_store_list_models(ctx, store, &models, &n);
    if (st)
        return st;
    *first = true;
    for (size_t i = 0; i < n; i++)
        *first &= strcmp(models[i].name, KACE_MODEL_DEFAULT) != 0;
    free(models);
    /* No default yet: the first model becomes it (nothing is replaced). */
    *promoted = promote || *first;
    if ((st = kace_store_begin(ctx, store)))
        return st;
    if ((st = kace_store_save_model(ctx, store, name, m)) ||
        (*promoted && (st = kace_store_promote_model(ctx, store, name))) || (st = kace_store_commit(ctx, store))) {
        kace_store_rollback(store);
        return st;
    }
    return KACE_OK;
}

int cmd_train(int argc, char **argv)
{
    const char *db = cli_default_db(), *set = "pairs", *features = NULL, *kind = "slowdown", *name = NULL,
               *out = NULL;
    int metrics = -1; /* --metrics: a kace_metric_set, -1: the richest the set's workloads have */
    int xu_iter = 10;
    bool from_observations = false; /* the closed loop: cli_train_from_observations */
    double holdout = 0.25;
    bool promote = false;
    static const struct option longopts[] = {
        {"from-observations", no_argument, 0, 1}, {"holdout", required_argument, 0, 2},
        {"db", required_argument, 0, 'd'},       {"set", required_argument, 0, 's'},
        {"features", required_argument, 0, 'f'}, {"kind", required_argument, 0, 'k'},
        {"name", required_argument, 0, 'n'},     {"out", required_argument, 0, 'o'},
        {"search-iter", required_argument, 0, 'i'}, {"promote", no_argument, 0, 'P'},
        {"metrics", required_argument, 0, 3},   {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "d:s:f:k:n:o:i:Ph", longopts, NULL)) != -1) {
        switch (c) {
        case 'd': db = optarg; break;
        case 's': set = optarg; break;
        case 'f': features = optarg; break;
        case 'k': kind = optarg; break;
        case 'n': name = optarg; break;
        case 'o': out = optarg; break;
        case 'P': promote = true; break;
        case 'i': if (!cli_int("train", "search-iter", optarg, 1, 10000, &xu_iter)) return EXIT_USAGE; break;
        case 1: from_observations = true; break;
        case 2: if (!cli_number("train", "holdout", optarg, 0.01, 0.9, &holdout)) return EXIT_USAGE; break;
        case 3:
            if (strcmp(optarg, "auto") != 0 && (metrics = kace_metric_set_from_name(optarg)) < 0)
                return cli_usage("train", "--metrics must be full, no-counters, system or auto, not '%s'", optarg);
            break;
        case 'h':
            printf("usage: kace train [--db PATH] [--set pairs] [--kind slowdown|linear|forest|pressure|stacked]\n"
                   "                  [--features kace|xu|xu-nvml]\n"
                   "                  [--name NAME] [--promote] [--out FILE] [--search-iter N]\n"
                   "                  [--metrics full|no-counters|system|auto]\n"
                   "Fits a model on every successful 100%% MPS run of the set and stores it under NAME (default:\n"
                   "the kind, e.g. 'forest'), and in FILE, a versioned text model. It does not change the default\n"
                   "model (the one kace serve, the Slurm plugins and kace predict use) unless --promote is given\n"
                   "or the store has none yet; kace model promote NAME promotes later, kace info lists the models.\n"
                   "slowdown (default) = kace's model: each workload's\n"
                   "throughput as a fraction of its exclusive one, from contention features, summed (ridge +\n"
                   "boosted trees; whether the trees are monotone in the partners' usage is chosen by 3-fold CV);\n"
                   "linear = the paper's KACE (z-scored least squares on summed features);\n"
                   "forest = random forest with randomized search and 5-fold CV (the Xu et al. procedure).\n"
                   "--from-observations: fits a candidate of --kind on the set's runs plus the stored\n"
                   "observations except the most recent --holdout fraction (default 0.25), stores it as NAME\n"
                   "(default: KIND-candidate) and promotes it to the default only if its error on that held-out\n"
                   "slice is at most the default model's (both are printed; docs/eval.md).\n"
                   "--metrics: what the model reads of each workload: full (kernel counters, launch records and\n"
                   "system metrics), no-counters (launch records and system metrics) or system (NVML/DCGM and the\n"
                   "exclusive throughput); auto (default): the richest every workload of the set has. The model\n"
                   "records it (docs/model.md).\n");
            return EXIT_OK;
        default: return cli_usage("train", "unknown option");
        }
    }
    int kind_id = kace_model_kind_from_name(kind); /* the one kind table */
    if (kind_id < 0)
        return cli_usage("train", "--kind must be slowdown, linear, forest, pressure or stacked, not '%s'", kind);
    char candidate[80]; /* --from-observations: the candidate's name unless --name */
    snprintf(candidate, sizeof candidate, "%s-candidate", kace_model_kind_name((kace_model_kind)kind_id));
    if (!name) /* never the default implicitly: the kind's name */
        name = from_observations ? candidate : kace_model_kind_name((kace_model_kind)kind_id);
    bool forest = kind_id == KACE_MODEL_FOREST; /* the Xu et al. baseline: its features by default */
    const kace_feature_set *fs = kace_feature_set_find(features ? features : (forest ? "xu" : "kace"));
    if (!fs)
        return cli_usage("train", "--features must be kace, xu or xu-nvml, not '%s'", features);
    if (xu_iter < 1 || xu_iter > 10000)
        return cli_usage("train", "--search-iter must be 1..10000");

    kace_ctx *ctx = cli_ctx_new();
    kace_store *store = NULL;
    kace_dataset *ds = NULL;
    kace_model *m = NULL;
    char *out_new = NULL; /* --out's new content until the store holds the model */
    bool new_written = false;
    int rc = EXIT_FAILURE_RUN;
    kace_status st;
    if (kace_model_name_check(ctx, name)) {
        rc = cli_usage("train", "--name: %s", kace_errmsg(ctx));
        goto done;
    }
    if (!(store = cli_open_store(ctx, db)))
        goto done;
    if (from_observations) {
        kace_fit_spec ospec = {.kind = (kace_model_kind)kind_id, .features = fs, .search = {xu_iter, 5, 1, 1, 1.0}};
        kace_slowdown_params_default(&ospec.slowdown);
        /* the candidate is stored as NAME and replaces the default only when it does at least as well */
        rc = cli_train_from_observations(ctx, store, set, &ospec, KACE_MODEL_DEFAULT, name, holdout);
        goto done;
    }
    if ((st = kace_store_load_dataset(ctx, store, set, false, &ds))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    if (ds->n_colocations < 2) {
        fprintf(stderr, "kace: set '%s' has %zu usable runs in %s (import measurements first)\n", set,
                ds->n_colocations, db);
        goto done;
    }
    size_t n = ds->n_colocations;
    kace_fit_spec spec = {.kind = (kace_model_kind)kind_id,
                          .features = fs,
                          .search = {xu_iter, 5, 1, 1, 1.0}};
    kace_slowdown_params_default(&spec.slowdown);
    kace_fit_spec_restrict(&spec, metrics >= 0 ? (kace_metric_set)metrics : kace_metric_set_choose(ds, NULL, 0, &spec));
    fs = spec.features;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    st = kace_model_fit_rows(ctx, ds, NULL, 0, &spec, &m);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (st) {
        rc = cli_error(ctx, st);
        goto done;
    }
    /* The file is written beside its place first and renamed over the old one
     * only once the store holds the model: a failure on either side leaves both
     * as they were. */
    if (out) {
        size_t n_tmp = strlen(out) + 16;
        if (!(out_new = malloc(n_tmp))) {
            rc = cli_error(ctx, kace_fail(ctx, KACE_ERR_NOMEM, "out of memory"));
            goto done;
        }
        snprintf(out_new, n_tmp, "%s.new", out);
        if ((st = kace_model_save(ctx, m, out_new))) {
            rc = cli_error(ctx, st);
            goto done;
        }
        new_written = true;
    }
    bool promoted = false, first = false;
    if ((st = save_named(ctx, store, name, m, promote, &promoted, &first))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    if (out) {
        if (rename(out_new, out) != 0) {
            fprintf(stderr, "kace: %s: %s (the model is stored as '%s'; the file is left as %s)\n", out,
                    strerror(errno), name, out_new);
            new_written = false;
            goto done;
        }
        new_written = false;
    }
    printf("trained %s model '%s' on %zu runs of set '%s' (%s features) in %.3f ms\n", kind, name, n, set,
           kace_predictor_can(kace_model_predictor(m), KACE_PRED_MEMBERS) ? "per-workload contention" : fs->name,
           ((double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6));
    if (kace_model_metrics(m) != KACE_METRICS_FULL)
        printf("  reads the %s metrics of each workload (%s)\n", kace_metric_set_name(kace_model_metrics(m)),
               kace_model_metrics(m) == KACE_METRICS_SYSTEM ? "NVML/DCGM and exclusive throughput"
                                                            : "launch records and system metrics, no counters");
    int nc = 0;
    const double *coef = kace_model_coefficients(m, &nc);
    if (coef) {
        printf("  %-28s %10s\n", "coefficient (z-units)", "value");
        printf("  %-28s %10.4f\n", "intercept", coef[0]);
        for (int j = 1; j < nc; j++)
            printf("  %-28s %10.4f\n", kace_metric_name(fs->metric[j - 1]), coef[j]);
    }
    if (out)
        printf("  written to %s\n", out);
    if (promoted) {
        printf("  promoted to '%s'%s: kace serve, the Slurm plugins and kace predict use it\n", KACE_MODEL_DEFAULT,
               first && !promote ? " (the store had no default model)" : "");
        note_capabilities(m, name);
    } else {
        printf("  the default model is unchanged; kace model promote %s makes this one the default\n", name);
    }
    rc = EXIT_OK;
done:
    if (new_written)
        unlink(out_new);
    free(out_new);
    kace_model_free(&m);
    kace_dataset_free(&ds);
    kace_store_close(&store);
    kace_ctx_free(&ctx);
    return rc;
}

/* Says (on stderr, so the table stays the only thing on stdout) why a
 * workload lowers the confidence: a profile metric outside the range of the
 * model's training workloads, so the model extrapolates. */
static void note_outside_training(const kace_predictor *p, const kace_dataset *ds, int w)
{
    kace_coverage c;
    kace_predictor_coverage(p, ds, &w, 1, &c);
    if (c.member >= 0)
        fprintf(stderr,
                "note: %s has %s %.4g, outside the training workloads' %.4g..%.4g: its confidence is scaled by %.2f\n",
                ds->workloads[w].name, kace_metric_name(c.metric), c.value, c.lo, c.hi, c.coverage);
}

int cmd_predict(int argc, char **argv)
{
    const char *db = cli_default_db(), *target = NULL, *among = NULL, *model_name = "default", *model_file = NULL,
               *norm_name = "train";
    int top = 0, group_k = 0;
    double gpu_mem = 0, ls_target = 0.8;
    bool enumerate = false;
    const char *split_with = NULL, *policy = "max-sum", *split_train_db = NULL;
    int objective = KACE_OBJ_RAW, metrics = -1;
    static const struct option longopts[] = {
        {"group", required_argument, 0, 'g'}, {"gpu-mem", required_argument, 0, 'G'},
        {"enumerate", no_argument, 0, 'E'},   {"split-with", required_argument, 0, 's'},
        {"policy", required_argument, 0, 'p'}, {"ls-target", required_argument, 0, 'L'},
        {"db", required_argument, 0, 'd'},    {"target", required_argument, 0, 't'},
        {"among", required_argument, 0, 'a'}, {"model", required_argument, 0, 'm'},
        {"model-file", required_argument, 0, 'M'}, {"top", required_argument, 0, 'n'},
        {"norm", required_argument, 0, 'z'},  {"split-train-db", required_argument, 0, 'T'},
        {"objective", required_argument, 0, 1}, {"metrics", required_argument, 0, 2},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "d:t:a:m:M:n:z:g:G:Es:p:L:T:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'd': db = optarg; break;
        case 't': target = optarg; break;
        case 'a': among = optarg; break;
        case 'm': model_name = optarg; break;
        case 'M': model_file = optarg; break;
        case 'n': if (!cli_int("predict", "top", optarg, 0, 1000000, &top)) return EXIT_USAGE; break;
        case 'z': norm_name = optarg; break;
        case 'g': if (!cli_int("predict", "group", optarg, 2, 4, &group_k)) return EXIT_USAGE; break;
        case 'G': if (!cli_number("predict", "gpu-mem", optarg, 0.001, 1e6, &gpu_mem)) return EXIT_USAGE; break;
        case 'E': enumerate = true; break;
        case 's': split_with = optarg; break;
        case 'p': policy = optarg; break;
        case 'L': if (!cli_number("predict", "ls-target", optarg, 0, 1, &ls_target)) return EXIT_USAGE; break;
        case 'T': split_train_db = optarg; break;
        case 1:
            if ((objective = kace_objective_from_name(optarg)) < 0)
                return cli_usage("predict", "--objective must be raw, normalized or fair, not '%s'", optarg);
            break;
        case 2:
            if (strcmp(optarg, "auto") != 0 && (metrics = kace_metric_set_from_name(optarg)) < 0)
                return cli_usage("predict", "--metrics must be full, no-counters, system or auto, not '%s'", optarg);
            break;
        case 'h':
            printf("usage: kace predict --target W [--among A,B,...] [--db PATH] [--model NAME | --model-file F]\n"
                   "                    [--top N] [--norm train|candidates] [--objective raw|normalized|fair]\n"
                   "                    [--metrics full|no-counters|system]\n"
                   "       kace predict --target W --group K [--among ...] [--gpu-mem GB] [--enumerate]\n"
                   "       kace predict --target W --split-with B[,C..] [--policy max-sum|max-min|latency]\n"
                   "                    [--ls-target FRACTION] [--split-train-db OTHER]\n"
                   "--group K: the best group of K (2..4) with W from the pool (branch and bound; groups over the\n"
                   "GPU's memory, 32 GB unless --gpu-mem, are never proposed). --split-with: predicted throughput\n"
                   "of W and its partners at every MPS thread split and the recommended one (latency: W must keep\n"
                   "FRACTION, default 0.8, of its exclusive throughput); --split-train-db fits the split model on\n"
                   "OTHER's grids (another GPU's: the model reads each store's own profiles and curves).\n"
                   "Ranks colocation partners of W by predicted throughput sum (samples/s), with the measured\n"
                   "sum where that pair was measured at 100%%/100%% MPS.\n"
                   "--objective: what partners and groups are ranked by: raw = the throughput sum (default),\n"
                   "normalized = the sum of each member's throughput over its exclusive one, fair = the smallest\n"
                   "such share (both need a model that predicts each member: kace's slowdown model).\n"
                   "--metrics: fail unless the model reads that metric set (the model records it; kace train\n"
                   "--metrics trains one).\n");
            return EXIT_OK;
        default: return cli_usage("predict", "unknown option");
        }
    }
    if (!target)
        return cli_usage("predict", "--target W is required");
    kace_norm norm;
    if (strcmp(norm_name, "train") == 0)
        norm = KACE_NORM_TRAIN;
    else if (strcmp(norm_name, "candidates") == 0)
        norm = KACE_NORM_CANDIDATES;
    else
        return cli_usage("predict", "--norm must be train or candidates");

    kace_ctx *ctx = cli_ctx_new();
    kace_store *store = cli_read_store(ctx, db);
    kace_dataset *ds = NULL;
    kace_model *m = NULL;
    int *among_idx = NULL;
    size_t n_among = 0;
    kace_partner *ranked = NULL;
    char **list = NULL;
    size_t n_list = 0;
    const char **names = NULL; /* the target, then --among's workloads */
    size_t n_names = 0;
    int rc = EXIT_FAILURE_RUN;
    kace_status st;
    if (!store)
        goto done;
    if (among) {
        if (!cli_list("predict", "among", among, SIZE_MAX / 2, &list, &n_list)) {
            rc = EXIT_USAGE;
            goto done;
        }
        names = malloc((n_list + 1) * sizeof *names);
        among_idx = malloc((n_list + 1) * sizeof *among_idx);
        if (!names || !among_idx)
            goto done;
        names[n_names++] = target;
        for (size_t i = 0; i < n_list; i++)
            names[n_names++] = list[i];
    }
    /* Only what the question needs: the target and its candidates (every workload without --among) and
     * their runs, so that predict takes as long on a store of 100k workloads and 1M runs as on 52. The
     * split advisor fits its own model on the store's split grids and takes the whole dataset. */
    if ((st = split_with ? kace_store_load_dataset(ctx, store, NULL, false, &ds)
                         : kace_store_load_around(ctx, store, among ? names : &target, among ? n_names : 1,
                                                  !among, &ds)) ||
        (!split_with &&
         (st = model_file ? kace_model_load(ctx, model_file, &m) : kace_store_load_model(ctx, store, model_name, &m)))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    int t = kace_dataset_find(ds, target);
    if (t < 0) {
        fprintf(stderr, "kace: unknown workload '%s' (not in %s; see kace info)\n", target, db);
        goto done;
    }
    if (m && metrics >= 0 && kace_model_metrics(m) != (kace_metric_set)metrics) {
        fprintf(stderr, "kace: model '%s' reads the %s metrics, not the %s ones (kace train --metrics %s --name NAME "
                        "trains one; --model NAME uses it)\n",
                model_file ? model_file : model_name, kace_metric_set_name(kace_model_metrics(m)),
                kace_metric_set_name((kace_metric_set)metrics), kace_metric_set_name((kace_metric_set)metrics));
        goto done;
    }
    if (split_with) {
        int group[KACE_MAX_K] = {t};
        int k = 1;
        char **split_list = NULL;
        size_t n_split = 0;
        if (!cli_list("predict", "split-with", split_with, KACE_MAX_K - 1, &split_list, &n_split)) {
            rc = EXIT_USAGE;
            goto done;
        }
        for (size_t i = 0; i < n_split; i++) {
            int w = kace_dataset_find(ds, split_list[i]);
            if (w < 0) {
                fprintf(stderr, "kace: unknown workload '%s' in --split-with\n", split_list[i]);
                free(split_list);
                goto done;
            }
            group[k++] = w;
        }
        free(split_list);
        rc = k < 2 ? cli_usage("predict", "--split-with needs at least one partner")
                   : cli_predict_split(ctx, store, ds, group, k, policy, ls_target, split_train_db);
        goto done;
    }
    for (size_t i = 1; i < n_names; i++) {
        int w = kace_dataset_find(ds, names[i]);
        if (w < 0) {
            fprintf(stderr, "kace: unknown workload '%s' in --among\n", names[i]);
            goto done;
        }
        among_idx[n_among++] = w;
    }
    if (group_k) {
        rc = cli_predict_group(ctx, ds, m, t, group_k, among ? among_idx : NULL, n_among, gpu_mem, enumerate,
                               (kace_objective)objective);
        goto done;
    }
    ranked = calloc(among ? (n_among ? n_among : 1) : (ds->n_workloads ? ds->n_workloads : 1), sizeof *ranked);
    if (!ranked)
        goto done;
    size_t n_ranked = 0;
    if ((st = kace_rank_partners_by(ctx, ds, kace_model_predictor(m), norm, (kace_objective)objective, t,
                                    among ? among_idx : NULL, n_among, ranked, &n_ranked))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    /* A second line of defence behind the import's ranges: never print inf or nan as an answer. */
    for (size_t i = 0; i < n_ranked && (top <= 0 || (int)i < top); i++)
        if (!isfinite(ranked[i].predicted) || !isfinite(ranked[i].confidence) || isinf(ranked[i].exclusive_sum) ||
            isinf(ranked[i].measured)) {
            fprintf(stderr, "kace: the prediction for %s with %s is not a finite number (check both workloads' "
                            "profiles: kace info)\n",
                    target, ds->workloads[ranked[i].workload].name);
            goto done;
        }
    if (objective == KACE_OBJ_RAW)
        printf("partners of %s, best first (throughput sums in samples/s)\n", target);
    else
        printf("partners of %s, best first (%s objective: %s)\n", target, kace_objective_name((kace_objective)objective),
               objective == KACE_OBJ_NORMALIZED ? "the sum of each member's share of its exclusive throughput"
                                                : "the smaller member's share of its exclusive throughput");
    printf("%4s  %-36s %10s %10s %10s %10s\n", "rank", "partner", "predicted", "measured", "exclusive", "confidence");
    int digits = objective == KACE_OBJ_RAW ? 2 : 4; /* shares of the exclusive throughputs are near 1 */
    for (size_t i = 0; i < n_ranked && (top <= 0 || (int)i < top); i++) {
        char measured[32] = "-";
        if (!isnan(ranked[i].measured))
            snprintf(measured, sizeof measured, "%.*f", digits, ranked[i].measured);
        char exclusive[32] = "-";
        if (!isnan(ranked[i].exclusive_sum))
            snprintf(exclusive, sizeof exclusive, "%.2f", ranked[i].exclusive_sum);
        printf("%4zu  %-36s %10.*f %10s %10s %10.2f\n", i + 1, ds->workloads[ranked[i].workload].name, digits,
               ranked[i].predicted, measured, exclusive, ranked[i].confidence);
    }
    if (kace_predictor_can(kace_model_predictor(m), KACE_PRED_COVERAGE)) {
        note_outside_training(kace_model_predictor(m), ds, t);
        for (size_t i = 0; i < n_ranked && (top <= 0 || (int)i < top); i++)
            note_outside_training(kace_model_predictor(m), ds, ranked[i].workload);
    }
    rc = EXIT_OK;
done:
    free(list);
    free(names);
    free(among_idx);
    free(ranked);
    kace_model_free(&m);
    kace_dataset_free(&ds);
    kace_store_close(&store);
    kace_ctx_free(&ctx);
    return rc;
}

int cli_print_models(kace_ctx *ctx, kace_store *store, const char *indent)
{
    kace_model_info *models = NULL;
    size_t n = 0;
    kace_status st = kace_store_list_models(ctx, store, &models, &n);
    if (st)
        return cli_error(ctx, st);
    /* The default is a copy of a named model: name that one rather than list the copy. */
    const kace_model_info *def = n && strcmp(models[0].name, KACE_MODEL_DEFAULT) == 0 ? &models[0] : NULL;
    const char *twin = NULL;
    for (size_t i = def ? 1 : 0; i < n; i++)
        if (models[i].is_default && !twin)
            twin = models[i].name;
    if (!def)
        printf("%sdefault model: none (kace train makes the store's first model the default)\n", indent);
    else if (twin)
        printf("%sdefault model: %s (%s, promoted %s)\n", indent, twin, def->kind, def->created);
    else
        printf("%sdefault model: a %s model saved %s under no other name\n", indent, def->kind, def->created);
    for (size_t i = def ? 1 : 0; i < n; i++)
        printf("%smodel %-24s %-9s created %s%s\n", indent, models[i].name, models[i].kind, models[i].created,
               models[i].is_default ? "  [default]" : "");
    free(models);
    return EXIT_OK;
}

/* kace model list | kace model promote NAME */
int cmd_model(int argc, char **argv)
{
    const char *db = cli_default_db();
    static const struct option longopts[] = {{"db", required_argument, 0, 'd'}, {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "d:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'd': db = optarg; break;
        case 'h':
            printf("usage: kace model [--db PATH] list\n"
                   "       kace model [--db PATH] promote NAME\n"
                   "list: the stored models (name, kind, when trained) and which one is the default.\n"
                   "promote: makes model NAME the default, the model kace serve (which reloads it), the Slurm\n"
                   "plugins and kace predict use. kace train never changes the default unless given --promote\n"
                   "(or the store has none yet).\n");
            return EXIT_OK;
        default: return cli_usage("model", "unknown option");
        }
    }
    const char *action = optind < argc ? argv[optind] : "list";
    bool list = strcmp(action, "list") == 0, promote = strcmp(action, "promote") == 0;
    if (!list && !promote)
        return cli_usage("model", "expected list or promote NAME, not '%s'", action);
    if (promote ? argc - optind != 2 : argc - optind > 1)
        return cli_usage("model", promote ? "promote takes one model name" : "list takes no arguments");
    kace_ctx *ctx = kace_ctx_new();
    kace_store *store = promote ? cli_open_store(ctx, db) : cli_read_store(ctx, db);
    kace_model *m = NULL;
    int rc = EXIT_FAILURE_RUN;
    kace_status st;
    if (!store)
        goto done;
    if (list) {
        rc = cli_print_models(ctx, store, "");
        goto done;
    }
    const char *name = argv[optind + 1];
    /* Loading it first checks that the stored body is a model that loads. */
    if ((st = kace_store_load_model(ctx, store, name, &m)) || (st = kace_store_promote_model(ctx, store, name))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    printf("promoted '%s' (a %s model) to '%s': kace serve, the Slurm plugins and kace predict use it\n", name,
           kace_predictor_name(kace_model_predictor(m)), KACE_MODEL_DEFAULT);
    note_capabilities(m, name);
    rc = EXIT_OK;
done:
    kace_model_free(&m);
    kace_store_close(&store);
    kace_ctx_free(&ctx);
    return rc;
}
