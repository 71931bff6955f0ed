/* kace eval --protocol P: any evaluation protocol on any stored colocation
 * set (include/kace/protocol.h), printed, as CSV and as a figure. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "figures.h"
#include "kace/protocol.h"

static const kace_policy shown[] = {KACE_POL_SLOWDOWN, KACE_POL_KACE, KACE_POL_XU,  KACE_POL_BEST_RULE,
                                    KACE_POL_MEMCAP,   KACE_POL_MEM,  KACE_POL_SM, KACE_POL_RANDOM};
#define N_SHOWN (sizeof shown / sizeof *shown)

/* Workload indices of a comma-separated list of names: EXIT_OK, EXIT_USAGE
 * for a malformed list, EXIT_FAILURE_RUN for an unknown name. */
static int parse_targets(const kace_dataset *ds, const char *list, int **out, size_t *n)
{
    char **names = NULL;
    size_t n_names = 0;
    *out = NULL;
    *n = 0;
    if (!cli_list("eval", "targets", list, SIZE_MAX / 2, &names, &n_names))
        return EXIT_USAGE;
    *out = malloc(n_names * sizeof **out);
    if (!*out) {
        free(names);
        return EXIT_FAILURE_RUN;
    }
    for (size_t i = 0; i < n_names; i++) {
        int w = kace_dataset_find(ds, names[i]);
        if (w < 0) {
            fprintf(stderr, "kace eval: --targets: unknown workload '%s'\n", names[i]);
            free(names);
            return EXIT_FAILURE_RUN;
        }
        (*out)[(*n)++] = w;
    }
    free(names);
    return EXIT_OK;
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            char *g = realloc(buf, cap *= 2);
            if (!g) {
                free(buf);
                buf = NULL;
            }
            buf = g;
        }
    }
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static void print_row(FILE *f, bool csv, const char *section, const char *label, long n_train, long n_test,
                      long n_targets, const double *score, double mae)
{
    if (csv) {
        fprintf(f, "%s,%s,%ld,%ld,%ld", section, label, n_train, n_test, n_targets);
        for (size_t p = 0; p < N_SHOWN; p++)
            fprintf(f, ",%.6f", score[shown[p]]);
        fprintf(f, ",%.4f\n", mae);
        return;
    }
    fprintf(f, "%-40s %7ld %6ld %7ld", label, n_train, n_test, n_targets);
    for (size_t p = 0; p < N_SHOWN; p++)
        fprintf(f, " %9.3f", score[shown[p]]);
    fprintf(f, " %9.2f\n", mae);
}

static void print_csv_header(FILE *f)
{
    fprintf(f, "section,label,n_train,n_test,n_targets");
    for (size_t p = 0; p < N_SHOWN; p++)
        fprintf(f, ",%s", kace_policy_name(shown[p]));
    fprintf(f, ",kace_mae_pct\n");
}

/* Everything as one CSV: a row per fold, the mean and CI half-width over
 * folds, a row per target (n_test = its candidates summed over folds). */
static void write_csv(FILE *f, const kace_dataset *ds, const kace_folds *folds, const kace_protocol_result *r)
{
    print_csv_header(f);
    for (size_t i = 0; i < r->n_folds; i++)
        print_row(f, true, "fold", folds->items[i].label, (long)r->folds[i].n_train, (long)r->folds[i].n_test,
                  (long)r->folds[i].n_targets, r->folds[i].score, r->folds[i].slowdown_mae_pct);
    print_row(f, true, "mean", "mean over folds", -1, -1, (long)r->n_folds, r->mean, r->mae_mean);
    print_row(f, true, "ci95", "95% t-interval half-width", -1, -1, (long)r->n_folds, r->ci95, r->mae_ci95);
    for (size_t i = 0; i < r->n_targets; i++)
        print_row(f, true, "target", ds->workloads[r->targets[i].target].name, -1, r->targets[i].n_candidates, 1,
                  r->targets[i].score, NAN);
}

static void report(const kace_dataset *ds, const kace_folds *folds, const kace_protocol_result *r,
                   const char *title)
{
    printf("\n== %s ==\n", title);
    printf("%-40s %7s %6s %7s", "fold", "n_train", "n_test", "targets");
    for (size_t p = 0; p < N_SHOWN; p++)
        printf(" %9s", kace_policy_name(shown[p]));
    printf(" %9s\n", "kace_MAE%");
    size_t unscored = 0;
    for (size_t i = 0; i < r->n_folds; i++) {
        print_row(stdout, false, "fold", folds->items[i].label, (long)r->folds[i].n_train, (long)r->folds[i].n_test,
                  (long)r->folds[i].n_targets, r->folds[i].score, r->folds[i].slowdown_mae_pct);
        unscored += r->folds[i].n_train < KACE_EVAL_MIN_TRAIN;
    }
    if (unscored)
        printf("(%zu fold(s) not scored, left out of the means: fewer than %d training rows)\n", unscored,
               KACE_EVAL_MIN_TRAIN);
    printf("%-40s %7s %6s %7s", "mean over folds", "", "", "");
    for (size_t p = 0; p < N_SHOWN; p++)
        printf(" %9.3f", r->mean[shown[p]]);
    printf(" %9.2f\n%-40s %7s %6s %7s", r->mae_mean, "95% CI (+/-, t over fold means)", "", "", "");
    for (size_t p = 0; p < N_SHOWN; p++)
        printf(" %9.3f", r->ci95[shown[p]]);
    printf(" %9.2f\n", r->mae_ci95);
    printf("\nper target (mean over the folds that scored it; cands = candidates summed over them):\n");
    printf("%-40s %6s", "target", "cands");
    for (size_t p = 0; p < N_SHOWN; p++)
        printf(" %9s", kace_policy_name(shown[p]));
    printf("\n");
    for (size_t i = 0; i < r->n_targets; i++) {
        printf("%-40s %6d", ds->workloads[r->targets[i].target].name, r->targets[i].n_candidates);
        for (size_t p = 0; p < N_SHOWN; p++)
            printf(" %9.3f", r->targets[i].score[shown[p]]);
        printf("\n");
    }
}

static void figure(const char *out_dir, const char *csv_name, const char *title_in, bool with_xu)
{
    char script[4096], title[512];
    size_t n = 0;
    for (const char *c = title_in; *c && n + 1 < sizeof title; c++)
        if (*c != '\'' && *c != '"' && *c != '\\')
            title[n++] = *c; /* inside a gnuplot string */
    title[n] = '\0';
    /* Bars: kace, KACE (and Xu) and the best rule per fold, from the CSV's
     * fold rows (columns 6.. follow `shown`). */
    snprintf(script, sizeof script,
             "set terminal pngcairo size 1200,600 noenhanced font ',10'\n"
             "set datafile separator ','\n"
             "set key outside right top\nset grid ytics\n"
             "set output '%.*s.png'\n"
             "set title '%s: achieved / Oracle per fold'\n"
             "set style data histograms\nset style histogram clustered gap 1\nset style fill solid 0.8 border -1\n"
             "set yrange [0:1.05]\nset ylabel 'normalized throughput sum'\nset xtics rotate by -40\n"
             "plot for [c in '%s'] '< grep -E \"^(section|fold|mean),\" %s' using (column(int(c))):xtic(2) "
             "title columnhead(int(c))\n",
             (int)(strlen(csv_name) - 4), csv_name, title, with_xu ? "6 7 8 9" : "6 7 9", csv_name);
    figures_gnuplot(out_dir, script);
}

/* Adds from's workloads to into under prefix (profiles copied) and
 * renumbers from's colocations to them. */
static kace_status join_workloads(kace_ctx *ctx, kace_dataset *into, kace_dataset *from, const char *prefix)
{
    int *map = malloc((from->n_workloads ? from->n_workloads : 1) * sizeof *map);
    if (!map)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    kace_status st = KACE_OK;
    for (size_t w = 0; w < from->n_workloads && !st; w++) {
        char name[KACE_NAME_MAX];
        if ((size_t)snprintf(name, sizeof name, "%s%s", prefix, from->workloads[w].name) >= sizeof name)
            st = kace_fail(ctx, KACE_ERR_INVALID, "workload name too long with prefix %s: %s", prefix,
                           from->workloads[w].name);
        else if (!(st = kace_dataset_intern(ctx, into, name, &map[w])))
            memcpy(into->workloads[map[w]].metric, from->workloads[w].metric, sizeof from->workloads[w].metric);
    }
    for (size_t c = 0; c < from->n_colocations && !st; c++)
        for (int i = 0; i < from->colocations[c].k; i++)
            from->colocations[c].workload[i] = map[from->colocations[c].workload[i]];
    free(map);
    return st;
}

int cli_eval_protocol(kace_ctx *ctx, kace_store *store, const eval_request *req)
{
    kace_dataset *ds = NULL, *train_ds = NULL;
    kace_folds *folds = NULL;
    kace_protocol_result *res = NULL;
    int *targets = NULL, *cands = NULL, *train_pool = NULL, *test_pool = NULL;
    size_t n_targets = 0, n_cands = 0, n_eval_rows = 0;
    char *text = NULL;
    int rc = EXIT_FAILURE_RUN;
    kace_status st;
    if (req->out_dir && cli_mkdirs(req->out_dir) != 0) {
        fprintf(stderr, "kace: cannot create %s\n", req->out_dir);
        return EXIT_FAILURE_RUN;
    }
    if ((st = kace_store_load_dataset(ctx, store, req->pairs_set, false, &ds))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    if (ds->n_colocations == 0) {
        fprintf(stderr, "kace: the store has no runs in set '%s' (kace info lists the sets)\n", req->pairs_set);
        goto done;
    }
    n_eval_rows = ds->n_colocations;
    kace_protocol_spec spec;
    kace_protocol_spec_default(&spec);
    spec.protocol = (kace_protocol)req->protocol;
    spec.n_folds = req->folds;
    spec.seed = req->seed;
    if (req->train_set || req->train_db) {
        /* Training rows from another set: appended after the evaluated
         * set's rows. From this store, the workload indices are the same;
         * from another (--train-db: another GPU), its workloads join under
         * the prefix "train-db:", so no training row names a workload
         * evaluated here, and every fold fits on the other store's rows. */
        const char *set = req->train_set ? req->train_set : req->pairs_set;
        kace_store *other = NULL;
        if (req->train_db && (st = kace_store_open_flags(ctx, req->train_db, 0, &other))) {
            rc = cli_error(ctx, st);
            goto done;
        }
        st = kace_store_load_dataset(ctx, other ? other : store, set, false, &train_ds);
        kace_store_close(&other);
        if (st) {
            rc = cli_error(ctx, st);
            goto done;
        }
        if (train_ds->n_colocations == 0) {
            fprintf(stderr, "kace: %s has no runs in set '%s'\n", req->train_db ? req->train_db : "the store", set);
            goto done;
        }
        if (req->train_db && (st = join_workloads(ctx, ds, train_ds, "train-db:"))) {
            rc = cli_error(ctx, st);
            goto done;
        }
        for (size_t i = 0; i < train_ds->n_colocations && !st; i++)
            st = kace_dataset_add_colocation(ctx, ds, &train_ds->colocations[i]);
        train_pool = malloc(train_ds->n_colocations * sizeof *train_pool);
        test_pool = malloc(n_eval_rows * sizeof *test_pool);
        if (st || !train_pool || !test_pool) {
            rc = st ? cli_error(ctx, st) : EXIT_FAILURE_RUN;
            goto done;
        }
        for (size_t i = 0; i < train_ds->n_colocations; i++)
            train_pool[i] = (int)(n_eval_rows + i);
        for (size_t i = 0; i < n_eval_rows; i++)
            test_pool[i] = (int)i;
        spec.train_pool = train_pool;
        spec.n_train_pool = train_ds->n_colocations;
        spec.test_pool = test_pool;
        spec.n_test_pool = n_eval_rows;
    }
    if (req->targets && (rc = parse_targets(ds, req->targets, &targets, &n_targets)) != EXIT_OK)
        goto done;
    rc = EXIT_FAILURE_RUN;
    spec.targets = targets;
    spec.n_targets = n_targets;
    if (req->candidates) {
        size_t len = 0;
        if (!(text = read_all(req->candidates, &len))) {
            fprintf(stderr, "kace eval: cannot read %s\n", req->candidates);
            goto done;
        }
        if ((st = kace_candidates_parse(ctx, ds, test_pool, test_pool ? n_eval_rows : 0, text, len, req->candidates,
                                        &cands, &n_cands))) {
            rc = cli_error(ctx, st);
            goto done;
        }
        spec.candidates = cands;
        spec.n_candidates = n_cands;
    }
    if ((st = kace_protocol_folds(ctx, ds, &spec, &folds))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    if (folds->n == 0) {
        fprintf(stderr, "kace eval: %s leaves no target with %d or more candidates to score\n",
                kace_protocol_name(spec.protocol), spec.min_candidates);
        goto done;
    }
    kace_eval_options opt;
    kace_eval_options_default(&opt);
    const kace_dataset *one[1] = {ds};
    opt.metrics = cli_eval_metrics(req, one, 1, req->csv);
    opt.objective = (kace_objective)req->objective;
    opt.xu_features = req->with_xu ? cli_xu_features(one, 1, opt.metrics, req->csv) : NULL;
    opt.with_xu = opt.xu_features != NULL;
    opt.xu_search.n_iter = req->xu_iter;
    if (req->xu_tree_scale > 0)
        opt.xu_search.tree_scale = req->xu_tree_scale;
    opt.slowdown = req->slowdown;
    if (req->kace_kind)
        opt.kace_kind = (kace_model_kind)req->kace_kind;
    opt.with_slowdown = !req->without_slowdown;
    for (int mode = 0; mode < 2; mode++) {
        if ((mode == KACE_MODE_PAPER && !req->paper) || (mode == KACE_MODE_CLEAN && !req->clean))
            continue;
        const char *mode_name = mode == KACE_MODE_PAPER ? "paper" : "clean";
        opt.mode = (kace_eval_mode)mode;
        if ((st = kace_eval_folds(ctx, ds, folds, &opt, &res))) {
            rc = cli_error(ctx, st);
            goto done;
        }
        char title[512], csv_name[256];
        snprintf(title, sizeof title, "%s on set '%s', %s mode: %zu folds, %zu targets",
                 kace_protocol_name(spec.protocol), req->pairs_set, mode_name, res->n_folds, res->n_targets);
        if (req->train_set)
            snprintf(title + strlen(title), sizeof title - strlen(title), " (training from '%s' only)",
                     req->train_set);
        if (req->csv)
            write_csv(stdout, ds, folds, res);
        else
            report(ds, folds, res, title);
        snprintf(csv_name, sizeof csv_name, "protocol_%s_%s_%s.csv", kace_protocol_name(spec.protocol),
                 req->pairs_set, mode_name);
        if (req->out_dir) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", req->out_dir, csv_name);
            FILE *f = fopen(path, "w");
            if (!f) {
                fprintf(stderr, "kace: cannot write %s\n", path);
                goto done;
            }
            write_csv(f, ds, folds, res);
            fclose(f);
            if (req->figures)
                figure(req->out_dir, csv_name, title, opt.with_xu);
        }
        kace_protocol_result_free(&res);
    }
    if (req->out_dir && !req->csv)
        printf("\nCSV%s written to %s/\n", req->figures ? " and figure (PNG)" : "", req->out_dir);
    rc = EXIT_OK;
done:
    kace_protocol_result_free(&res);
    kace_folds_free(&folds);
    kace_dataset_free(&ds);
    kace_dataset_free(&train_ds);
    free(targets);
    free(cands);
    free(train_pool);
    free(test_pool);
    free(text);
    return rc;
}
