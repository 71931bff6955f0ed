/* One allocation's schedule (include/kace/campaign.h): a table of steps,
 * each with the runs it measures, its time need and how it runs; one
 * deadline for the call. The library measures nothing itself: the caller's
 * callbacks start processes, MPS and the pool. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/campaign.h"

/* How far ahead the interleave looks for the next run: bounds its time on
 * large plans (n x this x k^2 comparisons). */
#define INTERLEAVE_LOOKAHEAD 64

/* Each spec's workloads as small numbers (ids[i * KACE_MAX_K + m]); the
 * count of distinct ones in *n_names. */
static int *workload_ids(const kace_measure_spec *specs, size_t n, size_t *n_names)
{
    int *ids = malloc(n * KACE_MAX_K * sizeof *ids);
    const char **names = malloc(n * KACE_MAX_K * sizeof *names);
    *n_names = 0;
    if (!ids || !names) {
        free(ids);
        free(names);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        for (int m = 0; m < specs[i].k && m < KACE_MAX_K; m++) {
            size_t id = 0;
            while (id < *n_names && strcmp(names[id], specs[i].workload[m]) != 0)
                id++;
            if (id == *n_names)
                names[(*n_names)++] = specs[i].workload[m];
            ids[i * KACE_MAX_K + m] = (int)id;
        }
    free(names);
    return ids;
}

static bool ids_share(const kace_measure_spec *specs, const int *ids, size_t a, size_t b)
{
    for (int i = 0; i < specs[a].k; i++)
        for (int j = 0; j < specs[b].k; j++)
            if (ids[a * KACE_MAX_K + i] == ids[b * KACE_MAX_K + j])
                return true;
    return false;
}

void kace_schedule_interleave(kace_measure_spec *specs, size_t n)
{
    if (n < 2)
        return;
    size_t n_names = 0;
    int *ids = workload_ids(specs, n, &n_names);
    long *last = ids ? malloc((n_names ? n_names : 1) * sizeof *last) : NULL;
    size_t *order = last ? malloc(n * sizeof *order) : NULL;
    kace_measure_spec *out = order ? malloc(n * sizeof *out) : NULL;
    if (!out)
        goto done; /* out of memory: the plan's order stands */
    for (size_t i = 0; i < n_names; i++)
        last[i] = -1;
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    /* Greedy: next, among the first runs left, the one that shares no
     * workload with the run before and whose workloads rested longest
     * (ran least recently); ties go to the plan's order. Preferring rested
     * workloads keeps runs free to follow later, where the earliest-first
     * choice runs out of them. */
    for (size_t at = 0; at < n; at++) {
        size_t best = at;
        bool best_shares = true;
        long best_last = 0;
        for (size_t j = at; j < n && j < at + INTERLEAVE_LOOKAHEAD; j++) {
            size_t c = order[j];
            bool shares = at > 0 && ids_share(specs, ids, order[at - 1], c);
            long recent = -1;
            for (int m = 0; m < specs[c].k; m++)
                if (last[ids[c * KACE_MAX_K + m]] > recent)
                    recent = last[ids[c * KACE_MAX_K + m]];
            if (j == at || (best_shares && !shares) || (best_shares == shares && recent < best_last)) {
                best = j;
                best_shares = shares;
                best_last = recent;
            }
        }
        size_t chosen = order[best];
        memmove(&order[at + 1], &order[at], (best - at) * sizeof *order);
        order[at] = chosen;
        for (int m = 0; m < specs[chosen].k; m++)
            last[ids[chosen * KACE_MAX_K + m]] = (long)at;
    }
    for (size_t i = 0; i < n; i++)
        out[i] = specs[order[i]];
    memcpy(specs, out, n * sizeof *specs);
done:
    free(out);
    free(order);
    free(last);
    free(ids);
}

/* Whether member m of spec is in specs[from..to) already, or earlier in spec. */
static bool member_seen(const kace_measure_spec *specs, size_t from, size_t to, const kace_measure_spec *spec, int m)
{
    for (int j = 0; j < m; j++)
        if (spec->mps_pct[j] == spec->mps_pct[m] && strcmp(spec->workload[j], spec->workload[m]) == 0)
            return true;
    for (size_t s = from; s < to; s++)
        for (int j = 0; j < specs[s].k; j++)
            if (specs[s].mps_pct[j] == spec->mps_pct[m] && strcmp(specs[s].workload[j], spec->workload[m]) == 0)
                return true;
    return false;
}

void kace_schedule_pool_order(kace_measure_spec *specs, size_t n, size_t max_members)
{
    if (max_members == 0)
        max_members = KACE_POOL_MAX_MEMBERS;
    size_t from = 0, members = 0;
    for (size_t s = 0; s <= n; s++) {
        size_t added = 0;
        if (s < n)
            for (int m = 0; m < specs[s].k; m++)
                added += !member_seen(specs, from, s, &specs[s], m);
        if (s == n || (s > from && members + added > max_members)) {
            kace_schedule_interleave(specs + from, s - from);
            from = s;
            members = 0;
            if (s < n)
                for (int m = 0; m < specs[s].k; m++)
                    members += !member_seen(specs, s, s, &specs[s], m);
        } else {
            members += added;
        }
    }
}

size_t kace_schedule_fit(double remaining_s, double allocation_s, double run_s, size_t n)
{
    if (n == 0 || !(remaining_s > 0) || !(run_s > 0))
        return 0;
    double need = run_s * (double)n;
    if (need <= remaining_s)
        return n;
    if (need <= allocation_s)
        return 0; /* a whole next call has room for it */
    double fits = floor(remaining_s / run_s);
    return fits < (double)n ? (size_t)fits : n;
}

/* ---- the steps ---- */

typedef struct step {
    const char *name;
    /* Its runs, in the order measured (stored ones included); out has room for plan->n. */
    size_t (*select)(const kace_plan *plan, const kace_schedule_config *c, kace_measure_spec *out);
    /* A run's seconds before any is stored. */
    double (*default_run_s)(const kace_schedule_config *c);
    kace_status (*run)(const kace_schedule_ops *ops, const kace_measure_spec *specs, size_t n, size_t i,
                       double timeout_s, bool *stored);
} step;

static size_t select_timeslice(const kace_plan *plan, const kace_schedule_config *c, kace_measure_spec *out)
{
    (void)c;
    size_t n = 0;
    for (size_t i = 0; i < plan->n; i++)
        if (plan->entries[i].spec.timeslice)
            out[n++] = plan->entries[i].spec;
    return n;
}

static size_t select_pool(const kace_plan *plan, const kace_schedule_config *c, kace_measure_spec *out)
{
    size_t n = 0;
    for (size_t i = 0; i < plan->n; i++)
        if (!plan->entries[i].spec.timeslice)
            out[n++] = plan->entries[i].spec;
    kace_schedule_pool_order(out, n, c->pool_members);
    return n;
}

static bool same_members(const kace_measure_spec *a, const kace_measure_spec *b)
{
    if (a->k != b->k)
        return false;
    for (int i = 0; i < a->k; i++)
        if (strcmp(a->workload[i], b->workload[i]) != 0 || a->mps_pct[i] != b->mps_pct[i])
            return false;
    return true;
}

/* The first MPS colocations that the plan measures more than once (their
 * spread across restarted processes then sits beside the pool's
 * repetitions of the same colocations), then, if they are too few, the
 * first others. Each is its repetition 0 again, in set "cold-SET". */
static size_t select_cold_repeats(const kace_plan *plan, const kace_schedule_config *c, kace_measure_spec *out)
{
    (void)c;
    size_t n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < plan->n && n < KACE_SCHEDULE_COLD_REPEATS; i++) {
            const kace_measure_spec *s = &plan->entries[i].spec;
            /* Pass 0: a repetition 1 is planned (the colocation is repeated); pass 1: any. */
            if (s->timeslice || s->repetition != (pass == 0 ? 1 : 0))
                continue;
            bool seen = false;
            for (size_t j = 0; j < n && !seen; j++)
                seen = same_members(&out[j], s);
            if (seen)
                continue;
            out[n] = *s;
            out[n].repetition = 0;
            snprintf(out[n].set, sizeof out[n].set, "cold-%.*s", KACE_SET_NAME_MAX - 6, s->set);
            n++;
        }
    return n;
}

static double allowance(double scale, double seconds)
{
    return scale > 0 ? scale * seconds : seconds;
}

static double cold_run_s(const kace_schedule_config *c)
{
    return c->warmup_s + c->window_s +
           (c->cold_start_s > 0 ? c->cold_start_s : allowance(c->allowance_scale, KACE_SCHEDULE_COLD_START_S));
}

static double warm_run_s(const kace_schedule_config *c)
{
    return c->warmup_s + c->window_s +
           (c->warm_start_s > 0 ? c->warm_start_s : allowance(c->allowance_scale, KACE_SCHEDULE_WARM_START_S));
}

/* A whole next call's seconds, for kace_schedule_fit: 0 when none is counted on. */
static double next_call_s(const kace_schedule_config *c)
{
    return c->next_call_s > 0 ? c->next_call_s : c->next_call_s < 0 ? 0 : c->allocation_s;
}

static kace_status run_cold(const kace_schedule_ops *ops, const kace_measure_spec *specs, size_t n, size_t i,
                            double timeout_s, bool *stored)
{
    (void)n;
    return ops->measure_cold(ops->arg, &specs[i], timeout_s, stored);
}

static kace_status run_warm(const kace_schedule_ops *ops, const kace_measure_spec *specs, size_t n, size_t i,
                            double timeout_s, bool *stored)
{
    return ops->measure_warm(ops->arg, specs, n, i, timeout_s, stored);
}

static const step steps[] = {
    {"timeslice", select_timeslice, cold_run_s, run_cold},
    {"pool", select_pool, warm_run_s, run_warm},
    {"cold-repeats", select_cold_repeats, cold_run_s, run_cold},
};

/* ---- one call ---- */

typedef struct call {
    const kace_schedule_config *config;
    const kace_schedule_ops *ops;
    const kace_plan *plan;
    kace_measure_spec *next; /* room for plan->n: the next step's runs (ops->coming) */
    double start_s;
    double charged_s; /* the projected time of the runs measured so far */
} call;

/* The call's time used: the clock's, but never less than what its runs were
 * projected to take, so that a step measured faster than projected does not
 * let the projection squeeze in more than it says fits (the same stored
 * times give the same schedule); the clock alone can only shorten it. */
static double remaining_s(const call *c)
{
    double used = c->ops->now_s(c->ops->arg) - c->start_s + (c->config->used_s > 0 ? c->config->used_s : 0);
    if (used < c->charged_s)
        used = c->charged_s;
    return c->config->allocation_s - used;
}

static kace_status step_run_s(const call *c, const step *s, double *run_s, bool *measured)
{
    size_t runs = 0;
    double seconds = 0;
    kace_status st = c->ops->stored_times(c->ops->arg, s->name, &runs, &seconds);
    *measured = runs > 0 && seconds > 0;
    *run_s = *measured ? seconds / (double)runs : s->default_run_s(c->config);
    return st;
}

/* Tells the caller what comes after run i of step s (ops->coming): the
 * rest of the step's runs that fit, else the runs not done of the next
 * step that will measure some (as run_step fits them, once this run's
 * projected run_s is spent). */
static kace_status tell_coming(const call *c, const step *s, const kace_measure_spec *specs, size_t i, size_t fit,
                               double run_s)
{
    const kace_schedule_ops *ops = c->ops;
    if (!ops->coming)
        return KACE_OK;
    if (i + 1 < fit) {
        ops->coming(ops->arg, s->name, specs + i + 1, fit - i - 1);
        return KACE_OK;
    }
    for (const step *t = s + 1; t < steps + sizeof steps / sizeof steps[0]; t++) {
        size_t n = t->select(c->plan, c->config, c->next), todo = 0;
        for (size_t j = 0; j < n; j++) {
            bool done = false;
            kace_status st = ops->is_done(ops->arg, &c->next[j], &done);
            if (st)
                return st;
            if (!done)
                c->next[todo++] = c->next[j];
        }
        double next_run_s;
        bool measured;
        kace_status st = step_run_s(c, t, &next_run_s, &measured);
        if (st)
            return st;
        size_t fits = kace_schedule_fit(remaining_s(c) - run_s, next_call_s(c->config), next_run_s, todo);
        if (fits > 0) {
            ops->coming(ops->arg, t->name, c->next, fits);
            break;
        }
    }
    return KACE_OK;
}

static kace_status run_step(kace_ctx *ctx, call *c, const kace_plan *plan, const step *s, kace_measure_spec *specs,
                            kace_schedule_report *r, bool *stopped)
{
    const kace_schedule_ops *ops = c->ops;
    memset(r, 0, sizeof *r);
    r->step = s->name;
    size_t n = s->select(plan, c->config, specs);
    r->planned = n;
    size_t todo = 0;
    for (size_t i = 0; i < n; i++) {
        bool done = false;
        kace_status st = ops->is_done(ops->arg, &specs[i], &done);
        if (st)
            return st;
        if (done)
            r->done_before++;
        else
            specs[todo++] = specs[i]; /* in order: todo <= i */
    }
    kace_status st = step_run_s(c, s, &r->run_s, &r->measured_run_s);
    if (st)
        return st;
    size_t fit = kace_schedule_fit(remaining_s(c), next_call_s(c->config), r->run_s, todo);
    double t0 = ops->now_s(ops->arg);
    for (size_t i = 0; i < fit; i++) {
        double left = remaining_s(c);
        if (ops->stop(ops->arg) || !(left > 0)) {
            *stopped = ops->stop(ops->arg);
            break;
        }
        bool stored = false;
        if ((st = tell_coming(c, s, specs, i, fit, r->run_s)) || (st = s->run(ops, specs, todo, i, left, &stored)))
            break;
        r->measured += stored;
        c->charged_s += r->run_s;
    }
    if (ops->stop(ops->arg))
        *stopped = true;
    r->seconds = ops->now_s(ops->arg) - t0;
    r->left = todo - r->measured;
    (void)ctx;
    return st;
}

kace_status kace_schedule_run(kace_ctx *ctx, const kace_plan *plan, const kace_schedule_config *config,
                              const kace_schedule_ops *ops, kace_schedule_outcome *out)
{
    memset(out, 0, sizeof *out);
    out->ending = KACE_ENDING_FAILED;
    if (!plan || !config || !ops || !(config->allocation_s > 0))
        return kace_fail(ctx, KACE_ERR_INVALID, "a schedule needs a plan and a positive allocation");
    kace_measure_spec *specs = calloc(plan->n ? plan->n : 1, sizeof *specs);
    kace_measure_spec *next = ops->coming && specs ? calloc(plan->n ? plan->n : 1, sizeof *next) : NULL;
    if (!specs || (ops->coming && !next)) {
        free(specs);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    call c = {.config = config, .ops = ops, .plan = plan, .next = next, .start_s = ops->now_s(ops->arg)};
    kace_status st = KACE_OK;
    bool stopped = false;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        kace_schedule_report r;
        if (stopped) {
            /* What a stopped call leaves: counted, not measured. */
            memset(&r, 0, sizeof r);
            r.step = steps[i].name;
            r.planned = steps[i].select(plan, config, specs);
            for (size_t j = 0; j < r.planned && !st; j++) {
                bool done = false;
                st = ops->is_done(ops->arg, &specs[j], &done);
                r.left += !done;
                r.done_before += done;
            }
            out->left += r.left;
            if (!st && ops->step_done && r.planned > 0)
                st = ops->step_done(ops->arg, &r);
            if (st)
                break;
            continue;
        }
        kace_status step_st = run_step(ctx, &c, plan, &steps[i], specs, &r, &stopped);
        out->measured += r.measured;
        out->left += r.left;
        if (ops->step_done && r.planned > 0 && (st = ops->step_done(ops->arg, &r)))
            break;
        if ((st = step_st))
            break;
    }
    free(specs);
    free(next);
    if (st)
        return st;
    out->ending = stopped ? KACE_ENDING_KILLED : out->left ? KACE_ENDING_DEADLINE : KACE_ENDING_FINISHED;
    return KACE_OK;
}

kace_status kace_schedule_left(kace_ctx *ctx, const kace_plan *plan, const kace_schedule_config *config,
                               const kace_schedule_ops *ops, size_t *left, size_t *cold)
{
    *left = 0;
    if (cold)
        *cold = 0;
    if (!plan || !config || !ops)
        return kace_fail(ctx, KACE_ERR_INVALID, "counting a schedule's runs needs a plan");
    kace_measure_spec *specs = calloc(plan->n ? plan->n : 1, sizeof *specs);
    if (!specs)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    kace_status st = KACE_OK;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0] && !st; i++) {
        size_t n = steps[i].select(plan, config, specs);
        for (size_t j = 0; j < n && !st; j++) {
            bool done = false;
            st = ops->is_done(ops->arg, &specs[j], &done);
            *left += !done;
            if (cold && steps[i].run == run_cold)
                *cold += !done;
        }
    }
    free(specs);
    return st;
}

double kace_fit_window(const kace_fit_work *w, double seconds, double min_s, double max_s, double *need_s)
{
    double scale = w->scale > 0 ? w->scale : 1;
    double profiles = (double)(w->profiles_torch + w->profiles_other);
    double runs = (double)(w->cold_runs + w->warm_runs);
    /* need(W) = fixed + W * windows: every run one window, every profile its share of them. */
    double windows = runs + profiles * (w->profile_windows > 0 ? w->profile_windows : 0);
    double fixed = runs * (w->run_warmup_s > 0 ? w->run_warmup_s : 0) +
                   profiles * (w->profile_fixed_s > 0 ? w->profile_fixed_s : 0) +
                   scale * ((double)w->cold_runs * KACE_FIT_COLD_RUN_S + (double)w->warm_runs * KACE_FIT_WARM_RUN_S +
                            (double)w->profiles_torch * KACE_FIT_PROFILE_TORCH_S +
                            (double)w->profiles_other * KACE_FIT_PROFILE_S);
    double planned = KACE_FIT_SHARE * seconds, window = max_s;
    if (windows > 0 && !(fixed + windows * max_s <= planned)) /* NaN seconds: no time */
        window = (planned - fixed) / windows;
    if (!(window >= min_s)) /* NaN too */
        window = min_s;
    if (window > max_s)
        window = max_s;
    if (need_s)
        *need_s = fixed + windows * window;
    return window;
}

/* ---- the whole allocation's call ---- */

static const char *const step_names[KACE_STEP_COUNT] = {"probe", "profile", "plan", "measure", "ncu", "export"};

const char *kace_campaign_step_name(kace_campaign_step which)
{
    return which < KACE_STEP_COUNT ? step_names[which] : "?";
}

bool kace_campaign_step_wanted(kace_campaign_step which, const kace_campaign_progress *p)
{
    switch (which) {
    case KACE_STEP_PROBE: return p->can_probe && !p->probed;
    case KACE_STEP_PROFILE: return p->to_profile > 0;
    case KACE_STEP_PLAN: return p->to_profile == 0 && p->unplanned > 0;
    case KACE_STEP_MEASURE: return p->have_plan && p->runs_left > 0;
    case KACE_STEP_NCU:
        return p->can_ncu && p->ncu_left > 0 && p->to_profile == 0 && p->have_plan && p->unplanned == 0 &&
               p->runs_left == 0;
    case KACE_STEP_EXPORT: return p->can_export;
    case KACE_STEP_COUNT: break;
    }
    return false;
}

/* A step's work to do, as the done checks count it. */
static size_t step_units(kace_campaign_step which, const kace_campaign_progress *p)
{
    switch (which) {
    case KACE_STEP_PROBE: return 1;
    case KACE_STEP_PROFILE: return p->to_profile;
    case KACE_STEP_PLAN: return p->unplanned > 0;
    case KACE_STEP_MEASURE: return p->runs_left;
    case KACE_STEP_NCU: return p->ncu_left;
    default: return 0;
    }
}

/* The work a call leaves: profiles, the plan's runs and ncu's tries. */
static size_t units_left(const kace_campaign_progress *p)
{
    return p->to_profile + (p->unplanned > 0 && p->to_profile == 0) + p->runs_left +
           (p->can_ncu ? p->ncu_left : 0);
}

kace_status kace_campaign_run(kace_ctx *ctx, const kace_campaign_config *config, const kace_campaign_ops *ops,
                              kace_campaign_outcome *out)
{
    memset(out, 0, sizeof *out);
    out->ending = KACE_ENDING_FAILED;
    if (!config || !ops || !(config->allocation_s > 0))
        return kace_fail(ctx, KACE_ERR_INVALID, "a campaign call needs a positive allocation");
    double start = ops->now_s(ops->arg);
    bool stopped = false;
    kace_campaign_progress p;
    kace_status st = KACE_OK;
    for (int i = 0; i < KACE_STEP_COUNT && !st; i++) {
        kace_campaign_step which = (kace_campaign_step)i;
        if ((st = ops->progress(ops->arg, &p)))
            break;
        if (ops->stop(ops->arg)) {
            stopped = true;
            break;
        }
        if (!kace_campaign_step_wanted(which, &p))
            continue;
        double used = ops->now_s(ops->arg) - start;
        double until = config->allocation_s - used;
        if (which != KACE_STEP_EXPORT && p.can_export)
            until -= allowance(config->allowance_scale, KACE_CAMPAIGN_EXPORT_RESERVE_S);
        double need = ops->need_s ? ops->need_s(ops->arg, which) : 0;
        kace_campaign_step_report r = {.step = which, .need_s = need, .until_s = until};
        if (until > 0 && until >= need) {
            r.ran = true;
            st = ops->run(ops->arg, which, until, used, &r);
            out->ran |= 1u << which;
        } else {
            r.left = step_units(which, &p);
        }
        r.seconds = ops->now_s(ops->arg) - start - used;
        if (ops->step_done) {
            kace_status note = ops->step_done(ops->arg, &r);
            if (!st)
                st = note;
        }
    }
    if (!st && (st = ops->progress(ops->arg, &p)) == KACE_OK)
        out->left = units_left(&p);
    if (st)
        return st;
    if (stopped || ops->stop(ops->arg))
        out->ending = KACE_ENDING_KILLED;
    else
        out->ending = out->left ? KACE_ENDING_DEADLINE : KACE_ENDING_FINISHED;
    return KACE_OK;
}
