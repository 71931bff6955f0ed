/* Beyond pairs: `kace predict --group K` (best k-way group), `kace predict
 * --split-with` (MPS thread split advice) and the `kace eval --groups
 * --splits` sections that measure both against the reference campaigns. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "figures.h"
#include "kace/group.h"
#include "kace/split.h"

static double seconds_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) * 1e-9;
}

int cli_predict_group(kace_ctx *ctx, const kace_dataset *ds, const kace_model *m, int target, int k, const int *among,
                      size_t n_among, double gpu_memory_gb, bool enumerate, kace_objective objective)
{
    kace_group_query q = {.target = target, .k = k, .pool = among, .n_pool = n_among, .gpu_memory_gb = gpu_memory_gb,
                          .objective = objective};
    kace_group_result r;
    struct timespec t0;
    const kace_predictor *p = kace_model_predictor(m);
    /* Branch and bound bounds the sum of a model that gives bounds; the
     * rest is scored group by group (kace_group_best does the same). */
    enumerate |= !kace_predictor_can(p, KACE_PRED_BOUNDS) || (objective != KACE_OBJ_RAW && k > 2);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    kace_status st = enumerate ? kace_group_enumerate(ctx, ds, p, &q, &r) : kace_group_best(ctx, ds, p, &q, &r);
    double sec = seconds_since(&t0);
    if (st)
        return cli_error(ctx, st);
    if (!r.found) {
        printf("no group of %d with %s fits in %.1f GB\n", k, ds->workloads[target].name,
               gpu_memory_gb > 0 ? gpu_memory_gb : KACE_GPU_MEMORY_V100_GB);
        return EXIT_OK;
    }
    printf("best group of %d with %s (%s, %.3f ms, %llu groups scored)\n", k, ds->workloads[target].name,
           enumerate ? "enumeration" : "branch and bound", sec * 1e3, (unsigned long long)r.groups_scored);
    printf("%-36s %10s %10s %8s\n", "member", "predicted", "exclusive", "memcap");
    for (int i = 0; i < k; i++) {
        const double *mt = ds->workloads[r.workload[i]].metric;
        printf("%-36s %10.2f %10.2f %8.1f\n", ds->workloads[r.workload[i]].name, r.member[i], mt[KACE_M_EXCLUSIVE],
               mt[KACE_M_MEMCAP]);
    }
    if (objective == KACE_OBJ_RAW) {
        printf("%-36s %10.2f %10s %8.1f (GPU %.1f GB)\n", "sum", r.predicted, "", r.memcap_gb,
               gpu_memory_gb > 0 ? gpu_memory_gb : KACE_GPU_MEMORY_V100_GB);
    } else {
        double sum = 0;
        for (int i = 0; i < k; i++)
            sum += r.member[i];
        printf("%-36s %10.2f %10s %8.1f (GPU %.1f GB)\n", "sum", sum, "", r.memcap_gb,
               gpu_memory_gb > 0 ? gpu_memory_gb : KACE_GPU_MEMORY_V100_GB);
        printf("%-36s %10.4f (%s)\n", kace_objective_name(objective), r.predicted,
               objective == KACE_OBJ_NORMALIZED ? "sum of each member's share of its exclusive throughput"
                                                : "the smallest member's share of its exclusive throughput");
    }
    return EXIT_OK;
}

/* Number of ways to give members i..k-1 multiples of 10 (>= 10) summing to left. */
static size_t split_count(int members, int left)
{
    if (members == 1)
        return left >= 10 ? 1 : 0;
    size_t n = 0;
    for (int p = 10; p <= left - 10 * (members - 1); p += 10)
        n += split_count(members - 1, left - p);
    return n;
}

static void split_fill(int k, int i, int left, int *p, int *out, size_t *n)
{
    if (i == k - 1) {
        p[i] = left;
        memcpy(out + (*n)++ * (size_t)k, p, (size_t)k * sizeof *p);
        return;
    }
    for (int v = 10; v <= left - 10 * (k - 1 - i); v += 10) {
        p[i] = v;
        split_fill(k, i + 1, left - v, p, out, n);
    }
}

int cli_predict_split(kace_ctx *ctx, kace_store *store, const kace_dataset *ds, const int *group, int k,
                      const char *policy, double ls_target, const char *train_db)
{
    kace_store *other = NULL;
    size_t n_grids = 0;
    kace_split_model *m = NULL;
    int *pcts = NULL;
    double *pred = NULL;
    int rc = EXIT_FAILURE_RUN;
    kace_status st;
    kace_split_goal goal = {.policy = KACE_SPLIT_MAX_SUM, .ls_member = 0, .ls_target = ls_target};
    if (strcmp(policy, "max-sum") == 0)
        goal.policy = KACE_SPLIT_MAX_SUM;
    else if (strcmp(policy, "max-min") == 0)
        goal.policy = KACE_SPLIT_MAX_MIN;
    else if (strcmp(policy, "latency") == 0)
        goal.policy = KACE_SPLIT_LATENCY;
    else
        return cli_usage("predict", "--policy must be max-sum, max-min or latency");
    /* --split-train-db: fitted on another store's grids (another GPU's). */
    if ((train_db && (st = kace_store_open_flags(ctx, train_db, 0, &other))) ||
        (st = kace_split_fit_store(ctx, other ? other : store, other ? NULL : ds, &m, &n_grids))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    /* Candidates: every split in 10% steps giving each member >= 10% and
     * summing to 100, then everyone at 100%. */
    size_t n = 0, cap = 1 + split_count(k, 100);
    pcts = malloc(cap * (size_t)k * sizeof *pcts);
    pred = malloc(cap * (size_t)k * sizeof *pred);
    if (!pcts || !pred)
        goto done;
    int p[KACE_MAX_K];
    split_fill(k, 0, 100, p, pcts, &n);
    for (int i = 0; i < k; i++)
        pcts[n * (size_t)k + (size_t)i] = 100;
    n++;
    size_t choice = 0;
    if ((st = kace_split_advise(ctx, m, ds, group, k, &goal, pcts, n, &choice, pred))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    printf("MPS thread splits for");
    for (int i = 0; i < k; i++)
        printf(" %s", ds->workloads[group[i]].name);
    printf("\n(split model fitted on %zu measured grids%s%s; throughput in samples/s and %% of exclusive)\n", n_grids,
           train_db ? " of " : "", train_db ? train_db : "");
    for (size_t c = 0; c < n; c++) {
        printf("%s", c == choice ? " * " : "   ");
        for (int i = 0; i < k; i++)
            printf("%s%3d", i ? "/" : "", pcts[c * (size_t)k + (size_t)i]);
        for (int i = 0; i < k; i++) {
            double v = pred[c * (size_t)k + (size_t)i];
            printf("  %9.2f (%3.0f%%)", v, 100 * v / ds->workloads[group[i]].metric[KACE_M_EXCLUSIVE]);
        }
        printf("\n");
    }
    printf("recommended (%s", kace_split_policy_name(goal.policy));
    if (goal.policy == KACE_SPLIT_LATENCY)
        printf(", %s >= %.0f%% of exclusive, asked of the model with margin x%.2f", ds->workloads[group[0]].name,
               100 * ls_target, kace_split_model_overshoot(m));
    printf("): ");
    for (int i = 0; i < k; i++)
        printf("%s%d", i ? "/" : "", pcts[choice * (size_t)k + (size_t)i]);
    printf("\n");
    rc = EXIT_OK;
done:
    kace_store_close(&other);
    free(pcts);
    free(pred);
    kace_split_model_free(&m);
    return rc;
}

/* ---- kace eval --groups ---------------------------------------------- */

typedef struct measured_groups {
    const kace_dataset *ds;
    const int *rows; /* colocations containing the target */
    size_t n;
    int hit;         /* row index of the last group accepted */
} measured_groups;

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Row of the measured colocation with exactly these members, or -1. */
static int find_measured(const measured_groups *mg, const int *group, int k)
{
    int want[KACE_MAX_K], have[KACE_MAX_K];
    memcpy(want, group, (size_t)k * sizeof *want);
    qsort(want, (size_t)k, sizeof *want, cmp_int);
    for (size_t i = 0; i < mg->n; i++) {
        const kace_colocation *c = &mg->ds->colocations[mg->rows[i]];
        if (c->k != k)
            continue;
        memcpy(have, c->workload, (size_t)k * sizeof *have);
        qsort(have, (size_t)k, sizeof *have, cmp_int);
        if (memcmp(want, have, (size_t)k * sizeof *want) == 0)
            return mg->rows[i];
    }
    return -1;
}

static bool only_measured(void *user, const int *group, int k)
{
    measured_groups *mg = user;
    return find_measured(mg, group, k) >= 0;
}

static const kace_policy group_rules[] = {KACE_POL_MEMCAP, KACE_POL_SM, KACE_POL_MEM};

/* Per target: fit on the colocations without it, choose among its measured
 * groups by branch and bound (restricted to measured groups), score
 * measured sum / Oracle; rules and Random on the same candidates. */
static int eval_groups_k(kace_ctx *ctx, const kace_dataset *ds, int k, const eval_request *req, double *mean_out)
{
    int *fit_rows = malloc((ds->n_colocations + 1) * sizeof *fit_rows);
    int *cand = malloc((ds->n_colocations + 1) * sizeof *cand);
    int *pool = malloc((ds->n_workloads * (size_t)(k - 1) + 1) * sizeof *pool);
    double sum[6] = {0};
    int n_targets = 0, rc = -1;
    FILE *f = NULL;
    if (!fit_rows || !cand || !pool)
        goto done;
    if (req->out_dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/groups_k%d.csv", req->out_dir, k);
        f = fopen(path, "w");
        if (f)
            fprintf(f, "target,candidates,kace_bb,MEMCAP,SM%%,MEM%%,Random\n");
    }
    printf("\n== Best group of %d around each target (measured %d-way colocations; fit without the target) ==\n", k,
           k);
    printf("%-36s %5s %9s %9s %9s %9s %9s\n", "target", "cands", "kace-B&B", "MEMCAP", "SM%", "MEM%", "Random");
    for (size_t t = 0; t < ds->n_workloads; t++) {
        size_t n_fit = 0, n_cand = 0;
        for (size_t r = 0; r < ds->n_colocations; r++) {
            if (ds->colocations[r].k != k)
                continue;
            if (kace_colocation_has(&ds->colocations[r], (int)t))
                cand[n_cand++] = (int)r;
            else
                fit_rows[n_fit++] = (int)r;
        }
        if (n_cand < 2)
            continue;
        kace_model *m = NULL;
        kace_status st = kace_model_fit_slowdown(ctx, ds, fit_rows, n_fit, &req->slowdown, &m);
        if (st) {
            cli_error(ctx, st);
            goto done;
        }
        /* The pool: every workload met in the candidates, k-1 times (a
         * group may hold two jobs of one kind, the target's included). */
        size_t n_pool = 0;
        for (size_t w = 0; w < ds->n_workloads; w++) {
            bool seen = false;
            for (size_t c = 0; c < n_cand && !seen; c++)
                seen = kace_colocation_has(&ds->colocations[cand[c]], (int)w);
            for (int rep = 0; seen && rep < k - 1; rep++)
                pool[n_pool++] = (int)w;
        }
        measured_groups mg = {.ds = ds, .rows = cand, .n = n_cand};
        kace_group_query q = {.target = (int)t, .k = k, .pool = pool, .n_pool = n_pool, .gpu_memory_gb = 1e9,
                              .filter = only_measured, .filter_user = &mg};
        kace_group_result best;
        st = kace_group_best(ctx, ds, kace_model_predictor(m), &q, &best);
        kace_model_free(&m);
        if (st) {
            cli_error(ctx, st);
            goto done;
        }
        double oracle = 0, mean = 0, score[6];
        for (size_t c = 0; c < n_cand; c++) {
            double v = kace_colocation_sum(&ds->colocations[cand[c]]);
            oracle = fmax(oracle, v);
            mean += v / (double)n_cand;
        }
        int row = best.found ? find_measured(&mg, best.workload, k) : -1;
        score[0] = row >= 0 ? kace_colocation_sum(&ds->colocations[row]) / oracle : NAN;
        for (int p = 0; p < 3; p++) {
            size_t pick = 0;
            if ((st = kace_policy_pick_rule(ctx, group_rules[p], ds, cand, n_cand, &pick))) {
                cli_error(ctx, st);
                goto done;
            }
            score[1 + p] = kace_colocation_sum(&ds->colocations[cand[pick]]) / oracle;
        }
        score[4] = mean / oracle;
        printf("%-36s %5zu %9.3f %9.3f %9.3f %9.3f %9.3f\n", ds->workloads[t].name, n_cand, score[0], score[1],
               score[2], score[3], score[4]);
        if (f)
            fprintf(f, "%s,%zu,%.6f,%.6f,%.6f,%.6f,%.6f\n", ds->workloads[t].name, n_cand, score[0], score[1],
                    score[2], score[3], score[4]);
        for (int p = 0; p < 5; p++)
            sum[p] += score[p];
        n_targets++;
    }
    printf("%-36s %5s", "mean", "");
    for (int p = 0; p < 5; p++) {
        mean_out[p] = n_targets ? sum[p] / n_targets : NAN;
        printf(" %9.3f", mean_out[p]);
    }
    printf("\n");
    rc = 0;
done:
    if (f)
        fclose(f);
    free(fit_rows);
    free(cand);
    free(pool);
    return rc;
}

static int eval_splits(kace_ctx *ctx, kace_store *store, const kace_dataset *ds, const eval_request *req)
{
    kace_split_grid *grids = NULL;
    size_t n_grids = 0;
    kace_split_eval *e = NULL;
    int rc = -1;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    kace_store *other = NULL;
    kace_dataset *train_ds = NULL;
    kace_split_grid *train_grids = NULL;
    size_t n_train_grids = 0;
    kace_status st = kace_split_grids_load(ctx, store, ds, &grids, &n_grids);
    /* --train-db: the model is fitted on another store's grids (another GPU). */
    if (!st && req->train_db &&
        !(st = kace_store_open_flags(ctx, req->train_db, 0, &other)) &&
        !(st = kace_store_load_dataset(ctx, other, NULL, false, &train_ds)) &&
        !(st = kace_split_grids_load(ctx, other, train_ds, &train_grids, &n_train_grids)) && n_train_grids == 0)
        st = kace_fail(ctx, KACE_ERR_INVALID, "%s has no MPS split grids (partitions_* or mps-splits sets) to fit on",
                       req->train_db);
    if (!st)
        st = req->train_db ? kace_split_evaluate_across(ctx, train_ds, train_grids, n_train_grids, ds, grids, n_grids, &e)
                           : kace_split_evaluate(ctx, ds, grids, n_grids, &e);
    kace_store_close(&other);
    kace_dataset_free(&train_ds);
    free(train_grids);
    if (st) {
        cli_error(ctx, st);
        goto done;
    }
    if (req->train_db)
        printf("\n== MPS thread split advisor fitted on %s's %zu grids, advising this store's, leaving out each "
               "advised pair by name (%zu cases, %zu pairs, %.2f s) ==\n",
               req->train_db, n_train_grids, e->n, e->n_pairs, seconds_since(&t0));
    else
        printf("\n== MPS thread split advisor, leave-one-pair-out on the partitions_* campaigns (%zu cases, %zu "
               "pairs, %.2f s) ==\n",
               e->n, e->n_pairs, seconds_since(&t0));
    printf("ridge penalty chosen by %d-fold pair-grouped cross-validation inside each fit's training pairs:",
           KACE_SPLIT_CV_FOLDS);
    for (int a = 0; a < KACE_SPLIT_N_ALPHAS; a++)
        printf(" alpha %g in %zu fits%s", kace_split_alphas[a], e->alpha_fits[a],
               a + 1 < KACE_SPLIT_N_ALPHAS ? "," : "\n");
    printf("chosen split's measured value / best measured split (Oracle), mean over cases; target >= 0.95\n");
    printf("%-10s %9s %9s %9s\n", "policy", "advisor", "50/50", "100/100");
    printf("%-10s %9.3f %9.3f %9.3f\n", "max-sum", e->advisor[0], e->fixed50[0], e->fixed100[0]);
    printf("%-10s %9.3f %9.3f %9.3f\n", "max-min", e->advisor[1], e->fixed50[1], e->fixed100[1]);
    printf("latency-sensitive member (the campaign's LS column) >= target x its exclusive throughput; met rate over "
           "the cases where a measured split meets it (target >= 0.95), best effort's throughput / Oracle:\n");
    printf("%-10s %6s %9s %9s %9s %9s\n", "LS target", "cases", "advisor", "50/50", "100/100", "BE/Oracle");
    for (int t = 0; t < KACE_SPLIT_N_LS_TARGETS; t++)
        printf("%9.0f%% %6zu %9.3f %9.3f %9.3f %9.3f\n", 100 * kace_split_ls_targets[t], e->ls_cases[t],
               e->ls_met_rate[t], e->ls_met50_rate[t], e->ls_met100_rate[t], e->ls_be[t]);
    if (req->out_dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/splits_advisor.csv", req->out_dir);
        FILE *f = fopen(path, "w");
        if (f) {
            fprintf(f, "policy,advisor,fixed50,fixed100\nmax-sum,%.6f,%.6f,%.6f\nmax-min,%.6f,%.6f,%.6f\n",
                    e->advisor[0], e->fixed50[0], e->fixed100[0], e->advisor[1], e->fixed50[1], e->fixed100[1]);
            fclose(f);
        }
        snprintf(path, sizeof path, "%s/splits_latency.csv", req->out_dir);
        f = fopen(path, "w");
        if (f) {
            fprintf(f, "target_pct,cases,advisor,fixed50,fixed100,be_oracle\n");
            for (int t = 0; t < KACE_SPLIT_N_LS_TARGETS; t++)
                fprintf(f, "%.0f,%zu,%.6f,%.6f,%.6f,%.6f\n", 100 * kace_split_ls_targets[t], e->ls_cases[t],
                        e->ls_met_rate[t], e->ls_met50_rate[t], e->ls_met100_rate[t], e->ls_be[t]);
            fclose(f);
        }
        snprintf(path, sizeof path, "%s/splits_cases.csv", req->out_dir);
        f = fopen(path, "w");
        if (f) {
            fprintf(f, "ls,be,campaign,n_train,measured_splits,maxsum_advisor,maxsum_50,maxsum_100,maxmin_advisor,"
                       "maxmin_50,maxmin_100,maxsum_chosen_ls_pct,maxmin_chosen_ls_pct,alpha\n");
            for (size_t i = 0; i < e->n; i++) {
                const kace_split_case *c = &e->cases[i];
                const kace_split_grid *g = &grids[c->grid];
                fprintf(f, "%s,%s,%d,%zu,%d,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%d,%d,%g\n", ds->workloads[g->workload[0]].name,
                        ds->workloads[g->workload[1]].name, g->campaign, c->n_train, c->n_measured, c->advisor[0],
                        c->fixed50[0], c->fixed100[0], c->advisor[1], c->fixed50[1], c->fixed100[1],
                        kace_split_grid_pct(c->chosen[0], 0), kace_split_grid_pct(c->chosen[1], 0), c->alpha);
            }
            fclose(f);
        }
    }
    rc = 0;
done:
    kace_split_eval_free(&e);
    free(grids);
    return rc;
}

int cli_eval_beyond(kace_ctx *ctx, kace_store *store, const eval_request *req)
{
    kace_dataset *pairs = NULL, *triples = NULL, *all = NULL;
    int rc = EXIT_FAILURE_RUN;
    kace_status st;
    double g2[6], g3[6];
    bool have2 = false, have3 = false;
    if (req->out_dir && cli_mkdirs(req->out_dir) != 0) {
        fprintf(stderr, "kace: cannot create %s\n", req->out_dir);
        return EXIT_FAILURE_RUN;
    }
    if ((st = kace_store_load_dataset(ctx, store, req->pairs_set, false, &pairs)) ||
        (st = kace_store_load_dataset(ctx, store, req->triples_set, false, &triples))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    if (req->groups) {
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (pairs->n_colocations && eval_groups_k(ctx, pairs, 2, req, g2) != 0)
            goto done;
        have2 = pairs->n_colocations > 0;
        if (triples->n_colocations && eval_groups_k(ctx, triples, 3, req, g3) != 0)
            goto done;
        have3 = triples->n_colocations > 0;
        printf("(kace-B&B: the slowdown model's best group by branch and bound among the measured groups; %.2f s)\n",
               seconds_since(&t0));
        if (req->out_dir) {
            char path[4096];
            snprintf(path, sizeof path, "%s/groups_summary.csv", req->out_dir);
            FILE *f = fopen(path, "w");
            if (f) {
                fprintf(f, "k,kace_bb,MEMCAP,SM%%,MEM%%,Random\n");
                if (have2)
                    fprintf(f, "2,%.6f,%.6f,%.6f,%.6f,%.6f\n", g2[0], g2[1], g2[2], g2[3], g2[4]);
                if (have3)
                    fprintf(f, "3,%.6f,%.6f,%.6f,%.6f,%.6f\n", g3[0], g3[1], g3[2], g3[3], g3[4]);
                fclose(f);
            }
        }
    }
    if (req->splits) {
        if ((st = kace_store_load_dataset(ctx, store, NULL, false, &all))) {
            rc = cli_error(ctx, st);
            goto done;
        }
        if (eval_splits(ctx, store, all, req) != 0)
            goto done;
    }
    if (req->figures && req->out_dir)
        figures_beyond(req->out_dir, req->groups, req->splits);
    rc = EXIT_OK;
done:
    kace_dataset_free(&pairs);
    kace_dataset_free(&triples);
    kace_dataset_free(&all);
    return rc;
}
