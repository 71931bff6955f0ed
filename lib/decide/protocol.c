/* Evaluation protocols: folds over any colocation set (see
 * include/kace/protocol.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/protocol.h"

static const char *const names[KACE_N_PROTOCOLS] = {"paper", "leave-family-out", "leave-workload-out",
                                                     "leave-batch-size-out", "kfold"};

const char *kace_protocol_name(kace_protocol p)
{
    return p >= 0 && p < KACE_N_PROTOCOLS ? names[p] : "?";
}

int kace_protocol_from_name(const char *name)
{
    for (int p = 0; p < KACE_N_PROTOCOLS; p++)
        if (strcmp(name, names[p]) == 0)
            return p;
    return -1;
}

void kace_protocol_spec_default(kace_protocol_spec *s)
{
    memset(s, 0, sizeof *s);
    s->protocol = KACE_PROTO_LEAVE_FAMILY_OUT;
    s->n_folds = 5;
    s->min_candidates = 2;
}

void kace_folds_free(kace_folds **f)
{
    if (!f || !*f)
        return;
    for (size_t i = 0; i < (*f)->n; i++) {
        kace_fold *x = &(*f)->items[i];
        free(x->train);
        free(x->test);
        free(x->targets);
        free(x->held_out);
    }
    free((*f)->items);
    free(*f);
    *f = NULL;
}

/* ---- 95% t-interval ------------------------------------------------------ */

/* Student t quantile t(0.975, df) for df = 1..30, then a few steps. */
static double t975(size_t df)
{
    static const double t[30] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                 2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                                 2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
    if (df >= 1 && df <= 30)
        return t[df - 1];
    return df <= 40 ? 2.021 : df <= 60 ? 2.000 : df <= 120 ? 1.980 : 1.960; /* conservative between steps */
}

void kace_mean_ci95(const double *v, size_t n, double *mean, double *half_width)
{
    double s = 0;
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i])) {
            s += v[i];
            m++;
        }
    *mean = m ? s / (double)m : NAN;
    *half_width = NAN;
    if (m < 2)
        return;
    double ss = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i]))
            ss += (v[i] - *mean) * (v[i] - *mean);
    *half_width = t975(m - 1) * sqrt(ss / (double)(m - 1)) / sqrt((double)m);
}

/* ---- folds ---------------------------------------------------------------- */

typedef struct named {
    const char *name;
    int index;
} named;

static int by_name(const void *a, const void *b)
{
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

/* Appends v to a growing int array. */
static bool push(int **a, size_t *n, size_t *cap, int v)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        int *g = realloc(*a, c * sizeof *g);
        if (!g)
            return false;
        *a = g;
        *cap = c;
    }
    (*a)[(*n)++] = v;
    return true;
}

typedef struct fold_builder {
    const kace_dataset *ds;
    const kace_protocol_spec *spec;
    bool *train_pool, *test_pool; /* per colocation */
    bool *wanted;                 /* per workload: may be a target */
    int *order;                   /* workloads by name */
    kace_folds *folds;
    size_t cap;
} fold_builder;

/* Adds a fold from per-row test flags and per-workload held-out flags:
 * targets = wanted workloads (held out, or any for kfold) with enough
 * test rows; test = test rows holding a target; train = pool rows that
 * are neither test rows nor hold a held-out workload. */
static kace_status add_fold(kace_ctx *ctx, fold_builder *b, const char *label, const bool *is_test,
                            const bool *held, bool targets_held_only, const bool *train_rows)
{
    const kace_dataset *ds = b->ds;
    kace_fold f;
    memset(&f, 0, sizeof f);
    snprintf(f.label, sizeof f.label, "%s", label);
    size_t cap_t = 0, cap_h = 0, cap_test = 0, cap_train = 0;
    int *count = calloc(ds->n_workloads ? ds->n_workloads : 1, sizeof *count);
    bool *is_target = calloc(ds->n_workloads ? ds->n_workloads : 1, sizeof *is_target);
    kace_status st = KACE_OK;
    if (!count || !is_target)
        goto nomem;
    for (size_t r = 0; r < ds->n_colocations; r++)
        if (is_test[r])
            for (int j = 0; j < ds->colocations[r].k; j++)
                count[ds->colocations[r].workload[j]]++;
    for (size_t i = 0; i < ds->n_workloads; i++) {
        int w = b->order[i];
        if (held && held[w] && !push(&f.held_out, &f.n_held_out, &cap_h, w))
            goto nomem;
        if (b->wanted[w] && (!targets_held_only || held[w]) && count[w] >= b->spec->min_candidates) {
            is_target[w] = true;
            if (!push(&f.targets, &f.n_targets, &cap_t, w))
                goto nomem;
        }
    }
    if (f.n_targets == 0)
        goto done; /* nothing to score: no fold */
    for (size_t r = 0; r < ds->n_colocations; r++) {
        const kace_colocation *c = &ds->colocations[r];
        bool has_target = false, has_held = false;
        for (int j = 0; j < c->k; j++) {
            has_target |= is_target[c->workload[j]];
            has_held |= held && held[c->workload[j]];
        }
        if (is_test[r] && has_target && !push(&f.test, &f.n_test, &cap_test, (int)r))
            goto nomem;
        bool trains = train_rows ? train_rows[r] : (b->train_pool[r] && !is_test[r] && !has_held);
        if (trains && !push(&f.train, &f.n_train, &cap_train, (int)r))
            goto nomem;
    }
    if (b->folds->n == b->cap) {
        size_t c = b->cap ? b->cap * 2 : 16;
        kace_fold *g = realloc(b->folds->items, c * sizeof *g);
        if (!g)
            goto nomem;
        b->folds->items = g;
        b->cap = c;
    }
    b->folds->items[b->folds->n++] = f;
    memset(&f, 0, sizeof f);
    goto done;
nomem:
    st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
done:
    free(f.train);
    free(f.test);
    free(f.targets);
    free(f.held_out);
    free(count);
    free(is_target);
    return st;
}

/* Workloads that share a held-out group with w: same family, same name or
 * same batch size. */
static bool same_group(const kace_dataset *ds, kace_protocol p, int a, int b)
{
    const kace_workload *x = &ds->workloads[a], *y = &ds->workloads[b];
    switch (p) {
    case KACE_PROTO_LEAVE_FAMILY_OUT: return strcmp(x->family, y->family) == 0;
    case KACE_PROTO_LEAVE_BATCH_OUT: return x->batch == y->batch;
    default: return a == b;
    }
}

static int by_batch(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static kace_status leave_out_folds(kace_ctx *ctx, fold_builder *b)
{
    const kace_dataset *ds = b->ds;
    kace_protocol p = b->spec->protocol;
    size_t nw = ds->n_workloads ? ds->n_workloads : 1;
    bool *in_rows = calloc(nw, sizeof *in_rows), *held = calloc(nw, sizeof *held), *done = calloc(nw, sizeof *done);
    bool *is_test = calloc(ds->n_colocations ? ds->n_colocations : 1, sizeof *is_test);
    int *leaders = malloc(nw * sizeof *leaders);
    kace_status st = KACE_OK;
    if (!in_rows || !held || !done || !is_test || !leaders) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t r = 0; r < ds->n_colocations; r++)
        for (int j = 0; j < ds->colocations[r].k; j++)
            in_rows[ds->colocations[r].workload[j]] = true;
    /* One group per distinct key among the workloads that occur in rows,
     * led by its first workload by name; groups ordered by key. */
    size_t n_groups = 0;
    for (size_t i = 0; i < ds->n_workloads; i++) {
        int w = b->order[i];
        if (!in_rows[w] || done[w])
            continue;
        for (size_t v = 0; v < ds->n_workloads; v++)
            if (same_group(ds, p, w, (int)v))
                done[v] = true;
        leaders[n_groups++] = w;
    }
    if (p == KACE_PROTO_LEAVE_BATCH_OUT) {
        /* Batch sizes ascending: sort the leaders' batch sizes, then map back. */
        int *batches = malloc((n_groups ? n_groups : 1) * sizeof *batches);
        if (!batches) {
            st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
            goto done;
        }
        for (size_t g = 0; g < n_groups; g++)
            batches[g] = ds->workloads[leaders[g]].batch;
        qsort(batches, n_groups, sizeof *batches, by_batch);
        for (size_t g = 0; g < n_groups; g++)
            for (size_t h = g; h < n_groups; h++)
                if (ds->workloads[leaders[h]].batch == batches[g]) {
                    int t = leaders[g];
                    leaders[g] = leaders[h];
                    leaders[h] = t;
                    break;
                }
        free(batches);
    } else if (p == KACE_PROTO_LEAVE_FAMILY_OUT) {
        named *ns = malloc((n_groups ? n_groups : 1) * sizeof *ns);
        if (!ns) {
            st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
            goto done;
        }
        for (size_t g = 0; g < n_groups; g++)
            ns[g] = (named){ds->workloads[leaders[g]].family, leaders[g]};
        qsort(ns, n_groups, sizeof *ns, by_name);
        for (size_t g = 0; g < n_groups; g++)
            leaders[g] = ns[g].index;
        free(ns);
    }
    for (size_t g = 0; g < n_groups && !st; g++) {
        int w = leaders[g];
        for (size_t v = 0; v < ds->n_workloads; v++)
            held[v] = same_group(ds, p, w, (int)v);
        for (size_t r = 0; r < ds->n_colocations; r++) {
            is_test[r] = false;
            if (!b->test_pool[r])
                continue;
            for (int j = 0; j < ds->colocations[r].k; j++)
                is_test[r] |= held[ds->colocations[r].workload[j]];
        }
        char label[KACE_NAME_MAX + 32];
        if (p == KACE_PROTO_LEAVE_FAMILY_OUT)
            snprintf(label, sizeof label, "family %s", ds->workloads[w].family);
        else if (p == KACE_PROTO_LEAVE_BATCH_OUT)
            snprintf(label, sizeof label, "batch %d", ds->workloads[w].batch);
        else
            snprintf(label, sizeof label, "workload %s", ds->workloads[w].name);
        st = add_fold(ctx, b, label, is_test, held, true, NULL);
    }
done:
    free(in_rows);
    free(held);
    free(done);
    free(is_test);
    free(leaders);
    return st;
}

/* splitmix64: a small, well-mixed generator for the k-fold shuffle. */
static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static kace_status kfold_folds(kace_ctx *ctx, fold_builder *b)
{
    const kace_dataset *ds = b->ds;
    const kace_protocol_spec *spec = b->spec;
    size_t n = 0, nc = ds->n_colocations ? ds->n_colocations : 1;
    int *rows = malloc(nc * sizeof *rows);
    bool *is_test = calloc(nc, sizeof *is_test);
    kace_status st = KACE_OK;
    if (!rows || !is_test) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t r = 0; r < ds->n_colocations; r++)
        if (b->test_pool[r])
            rows[n++] = (int)r;
    if (spec->n_folds < 2 || (size_t)spec->n_folds > n) {
        st = kace_fail(ctx, KACE_ERR_INVALID, "kfold: %d folds of %zu candidate colocations (need 2 <= K <= %zu)",
                       spec->n_folds, n, n);
        goto done;
    }
    uint64_t state = spec->seed;
    for (size_t i = n; i > 1; i--) { /* Fisher-Yates */
        size_t j = (size_t)(splitmix(&state) % i);
        int t = rows[i - 1];
        rows[i - 1] = rows[j];
        rows[j] = t;
    }
    for (int f = 0; f < spec->n_folds && !st; f++) {
        memset(is_test, 0, nc * sizeof *is_test);
        for (size_t i = (size_t)f; i < n; i += (size_t)spec->n_folds)
            is_test[rows[i]] = true;
        char label[64];
        snprintf(label, sizeof label, "fold %d/%d", f + 1, spec->n_folds);
        st = add_fold(ctx, b, label, is_test, NULL, false, NULL);
    }
done:
    free(rows);
    free(is_test);
    return st;
}

static kace_status paper_folds(kace_ctx *ctx, fold_builder *b)
{
    const kace_dataset *ds = b->ds;
    const kace_splits *sp = b->spec->splits;
    if (!sp)
        return kace_fail(ctx, KACE_ERR_INVALID, "the paper protocol needs the published splits");
    size_t nc = ds->n_colocations ? ds->n_colocations : 1;
    bool *is_test = calloc(nc, sizeof *is_test), *train = calloc(nc, sizeof *train);
    kace_status st = KACE_OK;
    if (!is_test || !train) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < sp->n && !st;) {
        size_t to = i;
        while (to < sp->n && sp->rows[to].n_occur == sp->rows[i].n_occur && sp->rows[to].seed == sp->rows[i].seed)
            to++;
        if (b->spec->n_occur == 0 || sp->rows[i].n_occur == b->spec->n_occur) {
            memset(is_test, 0, nc * sizeof *is_test);
            memset(train, 0, nc * sizeof *train);
            for (size_t r = i; r < to; r++) {
                int c = sp->rows[r].colocation;
                if (c < 0 || (size_t)c >= ds->n_colocations) {
                    st = kace_fail(ctx, KACE_ERR_INVALID, "split row %zu names colocation %d, out of range", r, c);
                    goto done;
                }
                if (sp->rows[r].train)
                    train[c] = b->train_pool[c];
                else
                    is_test[c] = b->test_pool[c];
            }
            char label[64];
            snprintf(label, sizeof label, "n_occur %d seed %d", sp->rows[i].n_occur, sp->rows[i].seed);
            st = add_fold(ctx, b, label, is_test, NULL, false, train);
        }
        i = to;
    }
done:
    free(is_test);
    free(train);
    return st;
}

static kace_status mark_rows(kace_ctx *ctx, const kace_dataset *ds, const int *rows, size_t n, const char *what,
                             bool *flags)
{
    if (!rows) {
        for (size_t r = 0; r < ds->n_colocations; r++)
            flags[r] = true;
        return KACE_OK;
    }
    for (size_t i = 0; i < n; i++) {
        if (rows[i] < 0 || (size_t)rows[i] >= ds->n_colocations)
            return kace_fail(ctx, KACE_ERR_INVALID, "%s: colocation index %d is out of range (0..%zu)", what, rows[i],
                             ds->n_colocations);
        flags[rows[i]] = true;
    }
    return KACE_OK;
}

kace_status kace_protocol_folds(kace_ctx *ctx, const kace_dataset *ds, const kace_protocol_spec *spec,
                                kace_folds **out)
{
    *out = NULL;
    if (spec->protocol < 0 || spec->protocol >= KACE_N_PROTOCOLS)
        return kace_fail(ctx, KACE_ERR_INVALID, "unknown protocol %d", (int)spec->protocol);
    if (spec->min_candidates < 1)
        return kace_fail(ctx, KACE_ERR_INVALID, "min_candidates must be >= 1");
    size_t nc = ds->n_colocations ? ds->n_colocations : 1, nw = ds->n_workloads ? ds->n_workloads : 1;
    fold_builder b = {.ds = ds, .spec = spec};
    bool *cand = calloc(nc, sizeof *cand);
    named *ns = malloc(nw * sizeof *ns);
    b.train_pool = calloc(nc, sizeof *b.train_pool);
    b.test_pool = calloc(nc, sizeof *b.test_pool);
    b.wanted = calloc(nw, sizeof *b.wanted);
    b.order = malloc(nw * sizeof *b.order);
    b.folds = calloc(1, sizeof *b.folds);
    kace_status st = KACE_OK;
    if (!cand || !ns || !b.train_pool || !b.test_pool || !b.wanted || !b.order || !b.folds) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    if ((st = mark_rows(ctx, ds, spec->train_pool, spec->n_train_pool, "training pool", b.train_pool)) ||
        (st = mark_rows(ctx, ds, spec->test_pool, spec->n_test_pool, "candidate pool", b.test_pool)) ||
        (st = mark_rows(ctx, ds, spec->candidates, spec->n_candidates, "candidates", cand)))
        goto done;
    for (size_t r = 0; r < ds->n_colocations; r++)
        b.test_pool[r] &= cand[r];
    for (size_t w = 0; w < ds->n_workloads; w++)
        b.wanted[w] = spec->targets == NULL;
    for (size_t i = 0; spec->targets && i < spec->n_targets; i++) {
        if (spec->targets[i] < 0 || (size_t)spec->targets[i] >= ds->n_workloads) {
            st = kace_fail(ctx, KACE_ERR_INVALID, "target index %d is out of range (0..%zu)", spec->targets[i],
                           ds->n_workloads);
            goto done;
        }
        b.wanted[spec->targets[i]] = true;
    }
    for (size_t w = 0; w < ds->n_workloads; w++)
        ns[w] = (named){ds->workloads[w].name, (int)w};
    qsort(ns, ds->n_workloads, sizeof *ns, by_name);
    for (size_t w = 0; w < ds->n_workloads; w++)
        b.order[w] = ns[w].index;
    switch (spec->protocol) {
    case KACE_PROTO_PAPER: st = paper_folds(ctx, &b); break;
    case KACE_PROTO_KFOLD: st = kfold_folds(ctx, &b); break;
    default: st = leave_out_folds(ctx, &b); break;
    }
    if (!st) {
        *out = b.folds;
        b.folds = NULL;
    }
done:
    kace_folds_free(&b.folds);
    free(cand);
    free(ns);
    free(b.train_pool);
    free(b.test_pool);
    free(b.wanted);
    free(b.order);
    return st;
}

/* ---- candidate lists ----------------------------------------------------- */

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* True when colocation c has exactly the members w[0..k) (as a multiset). */
static bool same_members(const kace_colocation *c, const int *w, int k)
{
    if (c->k != k)
        return false;
    int a[KACE_MAX_K], b[KACE_MAX_K];
    memcpy(a, c->workload, (size_t)k * sizeof *a);
    memcpy(b, w, (size_t)k * sizeof *b);
    qsort(a, (size_t)k, sizeof *a, cmp_int);
    qsort(b, (size_t)k, sizeof *b, cmp_int);
    return memcmp(a, b, (size_t)k * sizeof *a) == 0;
}

kace_status kace_candidates_parse(kace_ctx *ctx, const kace_dataset *ds, const int *pool, size_t n_pool,
                                  const char *text, size_t len, const char *origin, int **rows, size_t *n_rows)
{
    *rows = NULL;
    *n_rows = 0;
    size_t nc = ds->n_colocations ? ds->n_colocations : 1;
    bool *in_pool = calloc(nc, sizeof *in_pool), *taken = calloc(nc, sizeof *taken);
    int *out = NULL;
    size_t n_out = 0, cap = 0, line = 0;
    kace_status st = KACE_OK;
    if (!in_pool || !taken) {
        st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
        goto done;
    }
    if ((st = mark_rows(ctx, ds, pool, n_pool, "candidate pool", in_pool)))
        goto done;
    for (size_t at = 0; at < len;) {
        size_t end = at;
        while (end < len && text[end] != '\n')
            end++;
        line++;
        size_t stop = end > at && text[end - 1] == '\r' ? end - 1 : end;
        size_t first = at;
        while (first < stop && (text[first] == ' ' || text[first] == '\t'))
            first++;
        if (first == stop || text[first] == '#') {
            at = end + 1;
            continue;
        }
        int members[KACE_MAX_K], k = 0;
        for (size_t f = at; f <= stop;) {
            size_t e = f;
            while (e < stop && text[e] != ',')
                e++;
            size_t a = f, z = e;
            while (a < z && (text[a] == ' ' || text[a] == '\t'))
                a++;
            while (z > a && (text[z - 1] == ' ' || text[z - 1] == '\t'))
                z--;
            size_t col = a - at + 1;
            if (z == a) {
                st = kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:%zu: expected a workload name", origin, line, col);
                goto done;
            }
            if (k == KACE_MAX_K) {
                st = kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:%zu: more than %d workloads in one colocation", origin,
                               line, col, KACE_MAX_K);
                goto done;
            }
            char name[KACE_NAME_MAX];
            if (z - a >= sizeof name || memchr(text + a, '\0', z - a)) {
                st = kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:%zu: not a workload name", origin, line, col);
                goto done;
            }
            memcpy(name, text + a, z - a);
            name[z - a] = '\0';
            int w = kace_dataset_find(ds, name);
            if (w < 0) {
                st = kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:%zu: unknown workload '%s'", origin, line, col, name);
                goto done;
            }
            members[k++] = w;
            f = e + 1;
        }
        if (k < 2) {
            st = kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:1: a candidate names at least 2 workloads, comma-separated",
                           origin, line);
            goto done;
        }
        size_t matched = 0;
        for (size_t r = 0; r < ds->n_colocations; r++) {
            if (!in_pool[r] || !same_members(&ds->colocations[r], members, k))
                continue;
            if (taken[r]) {
                st = kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:1: this candidate is listed twice", origin, line);
                goto done;
            }
            taken[r] = true;
            matched++;
        }
        if (matched == 0) {
            st = kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:1: no measured colocation of the set has exactly these %d "
                                                "workloads",
                           origin, line, k);
            goto done;
        }
        at = end + 1;
    }
    for (size_t r = 0; r < ds->n_colocations; r++)
        if (taken[r] && !push(&out, &n_out, &cap, (int)r)) {
            st = kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
            goto done;
        }
    if (n_out == 0) {
        st = kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:1: no candidate listed", origin, line ? line : 1);
        goto done;
    }
    *rows = out;
    *n_rows = n_out;
    out = NULL;
done:
    free(out);
    free(in_pool);
    free(taken);
    return st;
}
