/* The closed learning loop in the CLI: kace train --from-observations and
 * the drift line of kace info (include/kace/learn.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kace/learn.h"

/* Every row of ds (the stored colocations of one set). */
static int *all_rows(size_t n)
{
    int *rows = malloc((n ? n : 1) * sizeof *rows);
    for (size_t i = 0; rows && i < n; i++)
        rows[i] = (int)i;
    return rows;
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
           "the %zu most recent held out\n",
           r.n_stored, set, r.n_obs_train, r.n_observed, obs->n, r.n_holdout);
    printf("held-out error of the predicted sum (mean |predicted - observed| / observed):\n");
    if (current)
        printf("  current   '%s' %8.2f%%\n", current_name, r.current_err);
    else
        printf("  current   (no model '%s' stored)\n", current_name);
    printf("  candidate '%s' %8.2f%%\n", candidate_name, r.candidate_err);
    if ((st = kace_store_save_model(ctx, store, candidate_name, candidate))) {
        rc = cli_error(ctx, st);
        goto done;
    }
    if (r.better) {
        /* Promotion: the candidate becomes the model serve and predict use. */
        if ((st = kace_store_save_model(ctx, store, current_name, candidate))) {
            rc = cli_error(ctx, st);
            goto done;
        }
        printf("promoted: '%s' now holds the candidate (it does at least as well on the held-out slice)\n",
               current_name);
    } else {
        printf("not promoted: the current model does better on the held-out slice; the candidate is kept as '%s'\n",
               candidate_name);
    }
    rc = EXIT_OK;
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
