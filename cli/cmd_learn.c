/* The closed learning loop in the CLI: kace train --from-observations and
 * the drift line of kace info (include/kace/learn.h). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "figures.h"
#include "kace/learn.h"

/* Every row of ds (the stored colocations of one set). */
static int *all_rows(size_t n)
{
    int *rows = malloc((n ? n : 1) * sizeof *rows);
    for (size_t i = 0; rows && i < n; i++)
        rows[i] = (int)i;
    return rows;
}

static int cmp_int(const void *a, const void *b)
{
    return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

/* Promotion is judged on measurements no single sender controls (a sender
 * of 120 consistent made-up reports used to win on its own held-out slice):
 * the candidate must not do worse than the current model on the stored
 * measured colocations of the groups the observations speak of (10 % and
 * half a point of slack), unless the observations come from 3 senders or
 * more (the store's origin: serve-<address>, slurm, ...), none with more
 * than half of them. Says which in why. */
static kace_status measurements_agree(kace_ctx *ctx, const kace_dataset *ds, size_t n_base, const kace_observed_list *obs,
                                      const kace_model *current, const kace_model *candidate, bool *ok, char *why,
                                      size_t why_size)
{
    *ok = false;
    size_t n_senders = 0, top = 0;
    for (size_t i = 0; i < obs->n; i++) {
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = strcmp(obs->items[j].origin, obs->items[i].origin) == 0;
        if (seen)
            continue;
        size_t count = 0;
        for (size_t j = i; j < obs->n; j++)
            count += strcmp(obs->items[j].origin, obs->items[i].origin) == 0;
        n_senders++;
        top = count > top ? count : top;
    }
    bool many = n_senders >= 3 && 2 * top <= obs->n;
    /* stored measured rows whose group an observation names */
    int *rows = malloc((n_base ? n_base : 1) * sizeof *rows);
    if (!rows)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    size_t n_rows = 0;
    for (size_t r = 0; r < n_base; r++) {
        const kace_colocation *c = &ds->colocations[r];
        int have[KACE_MAX_K];
        memcpy(have, c->workload, (size_t)c->k * sizeof *have);
        qsort(have, (size_t)c->k, sizeof *have, cmp_int);
        bool related = false;
        for (size_t i = 0; i < obs->n && !related; i++) {
            const kace_observed_colocation *o = &obs->items[i];
            int want[KACE_MAX_K];
            if (o->n_members != (size_t)c->k)
                continue;
            for (size_t m = 0; m < o->n_members; m++)
                want[m] = kace_dataset_find(ds, o->members[m].workload);
            qsort(want, o->n_members, sizeof *want, cmp_int);
            related = memcmp(want, have, o->n_members * sizeof *want) == 0;
        }
        if (related)
            rows[n_rows++] = (int)r;
    }
    double cur = NAN, cand = NAN;
    kace_status st = KACE_OK;
    if (n_rows && current && !(st = kace_learn_error(ctx, current, ds, rows, n_rows, &cur)))
        st = kace_learn_error(ctx, candidate, ds, rows, n_rows, &cand);
    free(rows);
    if (st)
        return st;
    bool agree = n_rows > 0 && cand <= 1.10 * cur + 0.5;
    *ok = !current || agree || many;
    if (n_rows)
        snprintf(why, why_size, "on the %zu stored measured colocations of the observed groups: current %.2f%%, "
                 "candidate %.2f%%; %zu sender(s), the largest with %zu of %zu observations", n_rows, cur, cand,
                 n_senders, top, obs->n);
    else
        snprintf(why, why_size, "no stored measurement of the observed groups; %zu sender(s), the largest with %zu of "
                 "%zu observations", n_senders, top, obs->n);
    return KACE_OK;
}

int cli_train_from_observations(kace_ctx *ctx, kace_store *store, const char *set, const kace_fit_spec *spec,
                                const char *current_name, const char *candidate_name, double holdout)
{
    kace_dataset *ds = NULL;
    kace_observed_list *obs = NULL;
    kace_model *current = NULL, *candidate = NULL;
    int *base = NULL;
    int rc = EXIT_FAILURE_RUN;
    kace_status st;
    if ((st = kace_store_load_dataset(ctx, store, set, false, &ds)) ||
        (st = kace_store_list_observations(ctx, store, -INFINITY, &obs))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    st = kace_store_load_model(ctx, store, current_name, &current);
    if (st && st != KACE_ERR_NOT_FOUND) {
        rc = cli_error(ctx, st);
        goto done;
    }
    size_t n_base = ds->n_colocations;
    if (!(base = all_rows(n_base))) {
        fprintf(stderr, "kace: out of memory\n");
        goto done;
    }
    kace_retrain_options o;
    kace_retrain_options_default(&o);
    o.holdout = holdout;
    kace_retrain_report r;
    if ((st = kace_retrain(ctx, ds, base, n_base, obs, current, spec, &o, &candidate, &r))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    printf("candidate fitted on %zu stored colocations of set '%s' + %zu of %zu usable observations (%zu stored);\n"
           "the %zu most recent held out",
           r.n_stored, set, r.n_obs_train - r.n_outliers, r.n_observed, obs->n, r.n_holdout);
    if (r.n_outliers)
        printf("; %zu left out as outliers (more than 4 robust deviations from the others)", r.n_outliers);
    printf("\n");
    printf("held-out error of the predicted sum (mean |predicted - observed| / observed):\n");
    if (current)
        printf("  current   '%s' %8.2f%%\n", current_name, r.current_err);
    else
        printf("  current   (no model '%s' stored)\n", current_name);
    printf("  candidate '%s' %8.2f%%\n", candidate_name, r.candidate_err);
    bool trusted = true;
    char why[400] = "";
    if (r.better && (st = measurements_agree(ctx, ds, n_base, obs, current, candidate, &trusted, why, sizeof why))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    if (why[0])
        printf("measurements: %s\n", why);
    if (r.better && !trusted) {
        r.better = false;
        printf("not promoted: better on the held-out observations, but those disagree with the stored measurements and "
               "come from fewer than 3 senders or mostly from one; the candidate is kept as '%s'\n", candidate_name);
    }
    /* The candidate is stored either way; promotion makes it the model
     * serve, the Slurm plugins and predict use, in the same transaction. */
    if ((st = kace_store_begin(ctx, store)))
        goto store_failed;
    if ((st = kace_store_save_model(ctx, store, candidate_name, candidate)) ||
        (r.better && (st = kace_store_promote_model(ctx, store, candidate_name))) ||
        (st = kace_store_commit(ctx, store))) {
        kace_store_rollback(store);
        goto store_failed;
    }
    if (r.better)
        printf("promoted: '%s' is now the candidate '%s' (it does at least as well on the held-out slice)\n",
               current_name, candidate_name);
    else if (trusted)
        printf("not promoted: the current model does better on the held-out slice; the candidate is kept as '%s'\n",
               candidate_name);
    rc = EXIT_OK;
    goto done;
store_failed:
    rc = cli_error(ctx, st);
done:
    kace_model_free(&current);
    kace_model_free(&candidate);
    kace_observed_list_free(&obs);
    kace_dataset_free(&ds);
    free(base);
    return rc;
}

/* The drift of model `name` over the last `window` usable observations,
 * for kace info. Prints nothing when the store has no such model. */
int cli_print_drift(kace_ctx *ctx, kace_store *store, const char *set, const char *name, size_t window)
{
    kace_dataset *ds = NULL;
    kace_observed_list *obs = NULL;
    kace_model *m = NULL;
    int *base = NULL;
    int rc = EXIT_FAILURE_RUN;
    kace_status st = kace_store_load_model(ctx, store, name, &m);
    if (st == KACE_ERR_NOT_FOUND)
        return EXIT_OK;
    if (st || (st = kace_store_load_dataset(ctx, store, set, false, &ds)) ||
        (st = kace_store_list_observations(ctx, store, -INFINITY, &obs))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    printf("  observations %zu\n", obs->n);
    if (!(base = all_rows(ds->n_colocations))) {
        fprintf(stderr, "kace: out of memory\n");
        goto done;
    }
    kace_drift d;
    if ((st = kace_learn_drift(ctx, ds, base, ds->n_colocations, obs, m, window, &d))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    if (d.n_recent)
        printf("  drift of model '%s' %.2f: error %.2f%% on the last %zu observations vs %.2f%% cross-validated\n",
               name, d.ratio, d.recent_err, d.n_recent, d.cv_err);
    else
        printf("  drift of model '%s': no usable observation yet (cross-validated error %.2f%%)\n", name, d.cv_err);
    rc = EXIT_OK;
done:
    kace_model_free(&m);
    kace_observed_list_free(&obs);
    kace_dataset_free(&ds);
    free(base);
    return rc;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int cli_learning_curve(kace_ctx *ctx, kace_store *store, const char *set, const char *out_dir, bool figures,
                       int every, uint64_t seed)
{
    kace_dataset *ds = NULL;
    kace_splits *splits = NULL;
    const char *origin;
    kace_curve_point *pts = NULL;
    size_t n_pts = 0;
    int *initial = NULL, *stream = NULL;
    int rc = EXIT_FAILURE_RUN;
    kace_status st;
    if ((st = kace_store_load_dataset(ctx, store, set, false, &ds)) ||
        (st = cli_load_splits(ctx, store, ds, false, &splits, &origin))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    if (strcmp(origin, "published"))
        fprintf(stderr, "kace: no published splits for set '%s': using splits %s\n", set, origin);
    /* Start: the training rows of the first split at n_occur 2 (published,
     * else made the artifact's way). */
    size_t from = splits->n;
    for (size_t i = 0; i < splits->n && from == splits->n; i++)
        if (splits->rows[i].n_occur == 2)
            from = i;
    if (from == splits->n) {
        fprintf(stderr, "kace: the learning curve starts from a published n_occur=2 split; set '%s' has none\n", set);
        goto done;
    }
    int split_seed = splits->rows[from].seed;
    char *is_initial = calloc(ds->n_colocations ? ds->n_colocations : 1, 1);
    initial = malloc((ds->n_colocations ? ds->n_colocations : 1) * sizeof *initial);
    stream = malloc((ds->n_colocations ? ds->n_colocations : 1) * sizeof *stream);
    if (!is_initial || !initial || !stream) {
        free(is_initial);
        fprintf(stderr, "kace: out of memory\n");
        goto done;
    }
    size_t n_initial = 0, n_stream = 0;
    for (size_t i = from; i < splits->n && splits->rows[i].n_occur == 2 && splits->rows[i].seed == split_seed; i++)
        if (splits->rows[i].train && !is_initial[splits->rows[i].colocation]) {
            is_initial[splits->rows[i].colocation] = 1;
            initial[n_initial++] = splits->rows[i].colocation;
        }
    for (size_t r = 0; r < ds->n_colocations; r++)
        if (!is_initial[r])
            stream[n_stream++] = (int)r;
    free(is_initial);
    /* The rest of the measurements arrive in a random order (seed). */
    uint64_t state = seed;
    for (size_t i = n_stream; i > 1; i--) {
        size_t j = (size_t)(splitmix(&state) % i);
        int t = stream[i - 1];
        stream[i - 1] = stream[j];
        stream[j] = t;
    }
    kace_fit_spec spec = {.kind = KACE_MODEL_SLOWDOWN};
    kace_slowdown_params_default(&spec.slowdown);
    kace_retrain_options o;
    kace_retrain_options_default(&o);
    if ((st = kace_learn_curve(ctx, ds, initial, n_initial, stream, n_stream, (size_t)every, &spec, &o, &pts,
                               &n_pts))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    printf("== Learning curve: kace's model from the n_occur=2 split (seed %d, %zu colocations), the other %zu of "
           "set '%s' replayed as observations (order seed %llu), retrained every %d ==\n",
           split_seed, n_initial, n_stream, set, (unsigned long long)seed, every);
    printf("decision quality = mean over workloads of the chosen partner's measured sum / the best (all measured)\n");
    printf("%8s %10s %12s %10s %10s %9s\n", "observed", "learning", "never-learns", "cand_err%", "curr_err%",
           "promoted");
    FILE *csv = NULL;
    if (out_dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/learning_curve.csv", out_dir);
        if (cli_mkdirs(out_dir) != 0 || !(csv = fopen(path, "w")))
            fprintf(stderr, "kace: cannot write %s\n", path);
        else
            fprintf(csv, "observed,learning,never_learns,candidate_err_pct,current_err_pct,promoted\n");
    }
    for (size_t i = 0; i < n_pts; i++) {
        const kace_curve_point *p = &pts[i];
        printf("%8zu %10.4f %12.4f %10.2f %10.2f %9s\n", p->n_seen, p->learner, p->never, p->candidate_err,
               p->current_err, isnan(p->candidate_err) ? "-" : p->promoted ? "yes" : "no");
        if (csv)
            fprintf(csv, "%zu,%.6f,%.6f,%.4f,%.4f,%d\n", p->n_seen, p->learner, p->never, p->candidate_err,
                    p->current_err, p->promoted);
    }
    if (csv) {
        fclose(csv);
        if (figures)
            figures_gnuplot(out_dir, "set terminal pngcairo size 900,550 noenhanced font ',11'\n"
                                     "set datafile separator ','\nset key bottom right\nset grid\n"
                                     "set output 'learning_curve.png'\n"
                                     "set title 'Decision quality against observations seen'\n"
                                     "set xlabel 'observations replayed'\nset ylabel 'achieved / Oracle'\n"
                                     "plot 'learning_curve.csv' using 1:2 with linespoints lw 2 title 'learning "
                                     "(retrain + promote)', '' using 1:3 with lines lw 2 dt 2 title 'never learns'\n");
        printf("CSV%s written to %s/\n", figures ? " and figure" : "", out_dir);
    }
    rc = EXIT_OK;
done:
    free(pts);
    free(initial);
    free(stream);
    kace_splits_free(&splits);
    kace_dataset_free(&ds);
    return rc;
}
