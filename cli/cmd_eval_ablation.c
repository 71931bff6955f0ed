/* kace eval --ablation: what each metric set achieves under every
 * protocol. Profiling kernels with counters (Nsight Compute's replay) is
 * the costly part of profiling a workload; launch records and NVML cost
 * little and can be taken on a running job. The table says what a model
 * gives up with each. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kace/protocol.h"

/* The columns: kace's model, the paper's, the best rule and Random. */
static const kace_policy shown[] = {KACE_POL_SLOWDOWN, KACE_POL_KACE, KACE_POL_BEST_RULE, KACE_POL_RANDOM};
#define N_SHOWN (sizeof shown / sizeof *shown)

/* One protocol of the ablation: a spec over one dataset. */
typedef struct study {
    const char *label;
    const kace_dataset *ds;
    kace_protocol_spec spec;
} study;

static void print_header(FILE *f, bool csv)
{
    if (csv) {
        fprintf(f, "protocol,metrics,folds,targets");
        for (size_t p = 0; p < N_SHOWN; p++)
            fprintf(f, ",%s", kace_policy_name(shown[p]));
        fprintf(f, ",kace_mae_pct\n");
        return;
    }
    fprintf(f, "%-30s %-12s %5s %7s", "protocol", "metrics", "folds", "targets");
    for (size_t p = 0; p < N_SHOWN; p++)
        fprintf(f, " %9s", kace_policy_name(shown[p]));
    fprintf(f, " %9s\n", "kace_MAE%");
}

static void print_row(FILE *f, bool csv, const char *label, kace_metric_set set, const kace_protocol_result *r)
{
    if (csv)
        fprintf(f, "%s,%s,%zu,%zu", label, kace_metric_set_name(set), r->n_folds, r->n_targets);
    else
        fprintf(f, "%-30s %-12s %5zu %7zu", label, kace_metric_set_name(set), r->n_folds, r->n_targets);
    for (size_t p = 0; p < N_SHOWN; p++)
        fprintf(f, csv ? ",%.6f" : " %9.3f", r->mean[shown[p]]);
    fprintf(f, csv ? ",%.4f\n" : " %9.2f\n", r->mae_mean);
}

/* The triples dataset with the pairs' colocations appended (same store:
 * the same workload indices), and the pools of a pairs-only model choosing
 * among triples. */
static kace_status pairs_then_triples(kace_ctx *ctx, kace_dataset *both, const kace_dataset *pairs, int **train,
                                      int **test, size_t *n_train, size_t *n_test)
{
    *n_test = both->n_colocations;
    *n_train = pairs->n_colocations;
    *train = malloc((*n_train ? *n_train : 1) * sizeof **train);
    *test = malloc((*n_test ? *n_test : 1) * sizeof **test);
    if (!*train || !*test)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < *n_test; i++)
        (*test)[i] = (int)i;
    kace_status st = KACE_OK;
    for (size_t i = 0; i < *n_train && !st; i++) {
        (*train)[i] = (int)(*n_test + i);
        st = kace_dataset_add_colocation(ctx, both, &pairs->colocations[i]);
    }
    return st;
}

int cli_eval_ablation(kace_ctx *ctx, kace_store *store, const eval_request *req)
{
    kace_dataset *pairs = NULL, *triples = NULL, *mixed = NULL;
    kace_splits *splits = NULL;
    kace_folds *folds = NULL;
    kace_protocol_result *res = NULL;
    int *train_pool = NULL, *test_pool = NULL;
    size_t n_train_pool = 0, n_test_pool = 0;
    FILE *out = NULL;
    int rc = EXIT_FAILURE_RUN;
    kace_status st;
    const char *sets[2] = {req->pairs_set, req->triples_set};
    kace_dataset *loaded[2];
    if ((st = kace_store_load_datasets(ctx, store, sets, 2, false, loaded))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    pairs = loaded[0];
    triples = loaded[1];
    if (pairs->n_colocations == 0) {
        fprintf(stderr, "kace: the store has no runs in set '%s' (kace info lists the sets)\n", req->pairs_set);
        goto done;
    }
    if (triples->n_colocations && (st = kace_store_load_dataset(ctx, store, req->triples_set, false, &mixed))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    study studies[7];
    size_t n_studies = 0;
    const char *splits_origin = NULL;
    if ((st = cli_load_splits(ctx, store, pairs, req->made_splits, &splits, &splits_origin))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    static const kace_protocol on_pairs[] = {KACE_PROTO_PAPER, KACE_PROTO_LEAVE_FAMILY_OUT,
                                             KACE_PROTO_LEAVE_WORKLOAD_OUT, KACE_PROTO_LEAVE_BATCH_OUT,
                                             KACE_PROTO_KFOLD};
    static const char *const pair_labels[] = {"paper n_occur=3", "leave-family-out", "leave-workload-out",
                                              "leave-batch-size-out", "kfold"};
    for (size_t i = 0; i < sizeof on_pairs / sizeof *on_pairs; i++) {
        study *s = &studies[n_studies];
        if (on_pairs[i] == KACE_PROTO_PAPER && !splits->n)
            continue;
        s->label = pair_labels[i];
        s->ds = pairs;
        kace_protocol_spec_default(&s->spec);
        s->spec.protocol = on_pairs[i];
        s->spec.n_folds = req->folds;
        s->spec.seed = req->seed;
        s->spec.splits = splits;
        s->spec.n_occur = 3;
        n_studies++;
    }
    if (mixed) {
        study *s = &studies[n_studies++];
        s->label = "triples leave-family-out";
        s->ds = triples;
        kace_protocol_spec_default(&s->spec);
        s->spec.protocol = KACE_PROTO_LEAVE_FAMILY_OUT;
        if ((st = pairs_then_triples(ctx, mixed, pairs, &train_pool, &test_pool, &n_train_pool, &n_test_pool))) {
            rc = cli_error(ctx, st);
            goto done;
        }
        s = &studies[n_studies++];
        s->label = "pairs->triples family-out";
        s->ds = mixed;
        kace_protocol_spec_default(&s->spec);
        s->spec.protocol = KACE_PROTO_LEAVE_FAMILY_OUT;
        s->spec.train_pool = train_pool;
        s->spec.n_train_pool = n_train_pool;
        s->spec.test_pool = test_pool;
        s->spec.n_test_pool = n_test_pool;
    }
    /* The sets every workload has: the richest first; a richer one than
     * the store holds is named and left out. */
    eval_request auto_req = *req;
    auto_req.metrics = -1;
    const kace_dataset *both[2] = {pairs, triples};
    kace_metric_set richest = cli_eval_metrics(&auto_req, both, 2, true);
    if (req->out_dir && cli_mkdirs(req->out_dir) != 0) {
        fprintf(stderr, "kace: cannot create %s\n", req->out_dir);
        goto done;
    }
    if (req->out_dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/ablation.csv", req->out_dir);
        if (!(out = fopen(path, "w"))) {
            fprintf(stderr, "kace: cannot write %s\n", path);
            goto done;
        }
        print_header(out, true);
    }
    kace_eval_mode mode = req->clean ? KACE_MODE_CLEAN : KACE_MODE_PAPER;
    if (!req->csv) {
        printf("== metric sets under every protocol: set '%s'%s%s%s, %s mode, objective %s ==\n", req->pairs_set,
               mixed ? " and '" : "", mixed ? req->triples_set : "", mixed ? "'" : "",
               mode == KACE_MODE_CLEAN ? "clean" : "paper", kace_objective_name((kace_objective)req->objective));
        if (richest != KACE_METRICS_FULL)
            printf("(not every workload has %s: the richer sets are left out)\n",
                   richest == KACE_METRICS_SYSTEM ? "kernel launch records" : "kernel counters");
    }
    print_header(stdout, req->csv);
    for (size_t i = 0; i < n_studies; i++) {
        if ((st = kace_protocol_folds(ctx, studies[i].ds, &studies[i].spec, &folds))) {
            rc = cli_error(ctx, st);
            goto done;
        }
        for (int set = richest; set < KACE_N_METRIC_SETS; set++) {
            kace_eval_options opt;
            kace_eval_options_default(&opt);
            opt.with_xu = false; /* the forest's search costs most and is not the question here */
            opt.xu_features = NULL;
            opt.slowdown = req->slowdown;
            opt.with_slowdown = !req->without_slowdown;
            opt.mode = mode;
            opt.metrics = (kace_metric_set)set;
            opt.objective = (kace_objective)req->objective;
            if (folds->n == 0)
                break;
            if ((st = kace_eval_folds(ctx, studies[i].ds, folds, &opt, &res))) {
                char msg[1024];
                snprintf(msg, sizeof msg, "%s", kace_errmsg(ctx));
                rc = cli_error(ctx, kace_fail(ctx, st, "%s, %s metrics: %s", studies[i].label,
                                              kace_metric_set_name((kace_metric_set)set), msg));
                goto done;
            }
            print_row(stdout, req->csv, studies[i].label, (kace_metric_set)set, res);
            if (out)
                print_row(out, true, studies[i].label, (kace_metric_set)set, res);
            fflush(stdout);
            kace_protocol_result_free(&res);
        }
        kace_folds_free(&folds);
    }
    if (out && fclose(out) != 0) {
        out = NULL;
        fprintf(stderr, "kace: cannot write %s/ablation.csv\n", req->out_dir);
        goto done;
    }
    out = NULL;
    if (req->out_dir && !req->csv)
        printf("\nCSV written to %s/ablation.csv\n", req->out_dir);
    rc = EXIT_OK;
done:
    if (out)
        fclose(out);
    kace_protocol_result_free(&res);
    kace_folds_free(&folds);
    kace_splits_free(&splits);
    kace_dataset_free(&pairs);
    kace_dataset_free(&triples);
    kace_dataset_free(&mixed);
    free(train_pool);
    free(test_pool);
    return rc;
}
