/* Placing jobs on shared GPUs (see include/kace/place.h). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/model.h"
#include "kace/place.h"
#include "kace/policy.h"

void kace_place_options_default(kace_place_options *opt)
{
    opt->knee = 0.9;
    opt->default_share = 50;
    opt->min_share = 10;
    opt->min_confidence = 0;
    /* kace's placer has always summed shares: raw samples/s would place
     * every job next to the slowest residents. */
    opt->objective = KACE_OBJ_NORMALIZED;
}

int kace_place_share(const kace_dataset *ds, int w, const kace_place_options *opt)
{
    const double *metric = ds->workloads[w].metric;
    double full = metric[KACE_M_EXCLUSIVE_MPS100];
    if (!(full > 0))
        full = metric[KACE_M_EXCLUSIVE];
    if (!(full > 0))
        return opt->default_share;
    /* The curve is measured, so it is noisy: take the first percentage that
     * reaches the knee rather than assuming it is monotone. Where only some
     * points were measured, the first measured one: a share between
     * measured points would be a guess. 100% alone (a plain kace measure
     * of the workload alone) says nothing of the knee. */
    int measured = 0;
    for (int p = 1; p <= 9; p++)
        measured += metric[KACE_M_EXCLUSIVE_MPS10 + p - 1] > 0;
    if (!measured)
        return opt->default_share;
    for (int p = 1; p <= 10; p++) {
        double v = metric[KACE_M_EXCLUSIVE_MPS10 + p - 1];
        if (v > 0 && v >= opt->knee * full)
            return 10 * p;
    }
    return 100;
}

kace_status kace_place_fractions(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds, const int *group,
                                 int k, double *fraction, double *confidence)
{
    if (confidence)
        *confidence = 1;
    if (k == 0)
        return KACE_OK;
    if (k == 1 && ds->workloads[group[0]].metric[KACE_M_EXCLUSIVE] > 0) {
        /* Alone, a job keeps its exclusive throughput by definition; the
         * model is fitted on groups and would only add its error. */
        fraction[0] = 1;
        return KACE_OK;
    }
    double sum, member[KACE_MAX_K];
    kace_status st = kace_predict_group(ctx, p, ds, group, k, &sum, confidence, member);
    if (st)
        return st;
    for (int i = 0; i < k; i++) {
        double excl = ds->workloads[group[i]].metric[KACE_M_EXCLUSIVE];
        fraction[i] = excl > 0 ? member[i] / excl : 0;
    }
    return KACE_OK;
}

static double sum_of(const double *v, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += v[i];
    return s;
}

void kace_gain_of(const double *before, int n_before, const double *after, int n_after, kace_gain *out)
{
    out->before = sum_of(before, n_before);
    out->after = sum_of(after, n_after);
    out->gain = out->after - out->before;
}

kace_status kace_place_gain(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds, const int *resident,
                            int n_resident, int job, const double *known_before, kace_gain *out)
{
    *out = (kace_gain){NAN, NAN, NAN, NAN, NAN};
    if (n_resident < 0 || n_resident + 1 > KACE_MAX_K)
        return kace_fail(ctx, KACE_ERR_INVALID, "a GPU holds at most %d workloads", KACE_MAX_K);
    if (!(ds->workloads[job].metric[KACE_M_EXCLUSIVE] > 0))
        return kace_fail(ctx, KACE_ERR_INVALID, "workload '%s' has no positive exclusive throughput",
                         ds->workloads[job].name);
    int group[KACE_MAX_K];
    double before[KACE_MAX_K], after[KACE_MAX_K], confidence;
    kace_status st;
    if (!known_before && (st = kace_place_fractions(ctx, p, ds, resident, n_resident, before, NULL)))
        return st;
    if (n_resident > 0) /* resident may be NULL for an idle GPU */
        memcpy(group, resident, (size_t)n_resident * sizeof *group);
    group[n_resident] = job;
    if ((st = kace_place_fractions(ctx, p, ds, group, n_resident + 1, after, &confidence)))
        return st;
    kace_gain_of(before, known_before ? 0 : n_resident, after, n_resident + 1, out);
    if (known_before) {
        out->before = *known_before;
        out->gain = out->after - out->before;
    }
    out->job_fraction = after[n_resident];
    out->confidence = confidence;
    return KACE_OK;
}

double kace_place_value(kace_objective o, const kace_dataset *ds, const int *group, int k, const double *fraction)
{
    if (o == KACE_OBJ_FAIR) {
        double least = 1; /* nobody on an idle GPU has lost anything */
        for (int i = 0; i < k; i++)
            least = fmin(least, fraction[i]);
        return least;
    }
    double v = 0;
    for (int i = 0; i < k; i++) {
        double excl = ds->workloads[group[i]].metric[KACE_M_EXCLUSIVE];
        v += o == KACE_OBJ_RAW ? (excl > 0 ? fraction[i] * excl : 0) : fraction[i];
    }
    return v;
}

kace_status kace_place_gain_by(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds, const int *resident,
                               int n_resident, int job, kace_objective o, kace_gain *out)
{
    *out = (kace_gain){NAN, NAN, NAN, NAN, NAN};
    if ((int)o < 0 || o >= KACE_N_OBJECTIVES)
        return kace_fail(ctx, KACE_ERR_INVALID, "placement: unknown objective %d", (int)o);
    if (n_resident < 0 || n_resident + 1 > KACE_MAX_K)
        return kace_fail(ctx, KACE_ERR_INVALID, "a GPU holds at most %d workloads", KACE_MAX_K);
    if (!(ds->workloads[job].metric[KACE_M_EXCLUSIVE] > 0))
        return kace_fail(ctx, KACE_ERR_INVALID, "workload '%s' has no positive exclusive throughput",
                         ds->workloads[job].name);
    int group[KACE_MAX_K];
    double before[KACE_MAX_K], after[KACE_MAX_K], confidence;
    if (n_resident > 0) /* resident may be NULL for an idle GPU */
        memcpy(group, resident, (size_t)n_resident * sizeof *group);
    group[n_resident] = job;
    kace_status st;
    if ((st = kace_place_fractions(ctx, p, ds, group, n_resident, before, NULL)) ||
        (st = kace_place_fractions(ctx, p, ds, group, n_resident + 1, after, &confidence)))
        return st;
    out->before = kace_place_value(o, ds, group, n_resident, before);
    out->after = kace_place_value(o, ds, group, n_resident + 1, after);
    /* Max-min fairness ranks GPUs by the smallest share they would leave:
     * what the residents had before does not make a lower one better. */
    out->gain = o == KACE_OBJ_FAIR ? out->after - 1 : out->after - out->before;
    out->job_fraction = after[n_resident];
    out->confidence = confidence;
    return KACE_OK;
}

kace_status kace_place_group_score(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds, const int *group,
                                   int k, double *score, double *confidence)
{
    double fraction[KACE_MAX_K];
    *score = 0;
    kace_status st = kace_place_fractions(ctx, p, ds, group, k, fraction, confidence);
    if (!st)
        *score = sum_of(fraction, k);
    return st;
}

static bool residents_known(const kace_place_gpu *g)
{
    for (int i = 0; i < g->n_residents; i++)
        if (g->resident[i] < 0)
            return false;
    return true;
}

static void prepare_one(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds, kace_place_gpu *g)
{
    double score;
    g->base_score = NAN;
    g->row = NULL;
    if (g->n_residents < 0 || g->n_residents > KACE_MAX_K || !residents_known(g))
        return;
    if (kace_place_group_score(ctx, p, ds, g->resident, g->n_residents, &score, NULL) == KACE_OK)
        g->base_score = score;
}

void kace_place_prepare(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds, kace_place_gpu *gpus,
                        size_t n_gpus)
{
    for (size_t i = 0; i < n_gpus; i++)
        prepare_one(ctx, p, ds, &gpus[i]);
}

/* One workload's gain on a row's residents, as kace_place_gain gave it. */
typedef struct place_cell {
    double gain, after, confidence;
    bool ok;
} place_cell;

struct kace_place_row {
    const kace_place_cache *cache;
    int n;
    int resident[KACE_MAX_K];
    double base_score;
    bool keep;         /* sweep's mark */
    place_cell cell[]; /* per workload of the dataset */
};

struct kace_place_cache {
    const kace_predictor *p;
    const kace_dataset *ds;
    kace_place_row **slot; /* open addressing on the residents; NULL = empty */
    size_t cap, n_rows, predictions;
};

kace_status kace_place_cache_new(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds,
                                 kace_place_cache **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory for the placement cache");
    (*out)->p = p;
    (*out)->ds = ds;
    return KACE_OK;
}

void kace_place_cache_free(kace_place_cache **cache)
{
    if (!cache || !*cache)
        return;
    for (size_t i = 0; i < (*cache)->cap; i++)
        free((*cache)->slot[i]);
    free((*cache)->slot);
    free(*cache);
    *cache = NULL;
}

size_t kace_place_cache_rows(const kace_place_cache *cache)
{
    return cache->n_rows;
}

size_t kace_place_cache_predictions(const kace_place_cache *cache)
{
    return cache->predictions;
}

static size_t residents_hash(const int *resident, int n)
{
    uint64_t h = 1469598103934665603u ^ (uint64_t)n; /* FNV-1a over the workload indices */
    for (int i = 0; i < n; i++) {
        h ^= (uint64_t)(uint32_t)resident[i];
        h *= 1099511628211u;
    }
    return (size_t)(h ^ (h >> 29));
}

/* The slot of the row for these residents, or the empty slot it would take. */
static size_t row_slot(const kace_place_cache *c, const int *resident, int n)
{
    size_t i = residents_hash(resident, n) & (c->cap - 1);
    while (c->slot[i] && (c->slot[i]->n != n || memcmp(c->slot[i]->resident, resident, (size_t)n * sizeof *resident)))
        i = (i + 1) & (c->cap - 1);
    return i;
}

static bool cache_grow(kace_place_cache *c)
{
    size_t cap = c->cap ? 2 * c->cap : 64;
    kace_place_row **old = c->slot;
    size_t old_cap = c->cap;
    c->slot = calloc(cap, sizeof *c->slot);
    if (!c->slot) {
        c->slot = old;
        return false;
    }
    c->cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i])
            c->slot[row_slot(c, old[i]->resident, old[i]->n)] = old[i];
    free(old);
    return true;
}

/* Every workload's gain on g's residents (g prepared, base_score known). */
static kace_place_row *make_row(kace_ctx *ctx, kace_place_cache *c, const kace_place_gpu *g)
{
    size_t n_w = c->ds->n_workloads;
    kace_place_row *row = malloc(sizeof *row + n_w * sizeof row->cell[0]);
    if (!row)
        return NULL;
    row->cache = c;
    row->n = g->n_residents;
    memset(row->resident, 0, sizeof row->resident);
    memcpy(row->resident, g->resident, (size_t)g->n_residents * sizeof *g->resident);
    row->base_score = g->base_score;
    row->keep = false;
    for (size_t w = 0; w < n_w; w++) {
        place_cell *cell = &row->cell[w];
        kace_gain gain;
        *cell = (place_cell){NAN, NAN, NAN, false};
        /* Workloads kace_place_job refuses before scoring GPUs need none. */
        if (!(c->ds->workloads[w].metric[KACE_M_EXCLUSIVE] > 0))
            continue;
        c->predictions++;
        if (kace_place_gain(ctx, c->p, c->ds, g->resident, g->n_residents, (int)w, &g->base_score, &gain))
            continue;
        *cell = (place_cell){gain.gain, gain.after, gain.confidence, true};
    }
    return row;
}

kace_status kace_place_cache_prepare(kace_ctx *ctx, kace_place_cache *c, kace_place_gpu *gpus, size_t n_gpus)
{
    bool out_of_memory = false;
    for (size_t i = 0; i < n_gpus; i++) {
        kace_place_gpu *g = &gpus[i];
        g->row = NULL;
        g->base_score = NAN;
        /* A full GPU takes no job: no row (kace_place_job skips it first). */
        bool cacheable = g->n_residents >= 0 && g->n_residents < KACE_MAX_K && residents_known(g);
        if (cacheable && c->cap) {
            kace_place_row *row = c->slot[row_slot(c, g->resident, g->n_residents)];
            if (row) {
                g->base_score = row->base_score; /* the same residents' same prediction */
                g->row = row;
                continue;
            }
        }
        prepare_one(ctx, c->p, c->ds, g);
        if (!cacheable || isnan(g->base_score) || out_of_memory)
            continue;
        if (2 * (c->n_rows + 1) > c->cap && !cache_grow(c)) {
            out_of_memory = true;
            continue;
        }
        kace_place_row *row = make_row(ctx, c, g);
        if (!row) {
            out_of_memory = true;
            continue;
        }
        c->slot[row_slot(c, g->resident, g->n_residents)] = row;
        c->n_rows++;
        g->row = row;
    }
    if (out_of_memory)
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory for the placement cache (%zu rows)", c->n_rows);
    return KACE_OK;
}

void kace_place_cache_sweep(kace_place_cache *c, const kace_place_gpu *gpus, size_t n_gpus)
{
    for (size_t i = 0; i < n_gpus; i++)
        if (gpus[i].row && gpus[i].row->cache == c)
            ((kace_place_row *)gpus[i].row)->keep = true; /* only the sweep's mark changes */
    kace_place_row **kept = calloc(c->cap ? c->cap : 1, sizeof *kept);
    if (!kept) { /* keep everything rather than lose track */
        for (size_t i = 0; i < c->cap; i++)
            if (c->slot[i])
                c->slot[i]->keep = false;
        return;
    }
    kace_place_row **old = c->slot;
    c->slot = kept;
    c->n_rows = 0;
    for (size_t i = 0; i < c->cap; i++) {
        kace_place_row *row = old[i];
        if (!row)
            continue;
        if (!row->keep) {
            free(row);
            continue;
        }
        row->keep = false;
        c->slot[row_slot(c, row->resident, row->n)] = row;
        c->n_rows++;
    }
    free(old);
}

/* g's row, when it still describes g's residents for this predictor. */
static const kace_place_row *row_for(const kace_place_gpu *g, const kace_predictor *p, const kace_dataset *ds)
{
    const kace_place_row *row = g->row;
    if (!row || row->cache->p != p || row->cache->ds != ds || row->n != g->n_residents ||
        memcmp(row->resident, g->resident, (size_t)row->n * sizeof *row->resident) != 0 ||
        memcmp(&row->base_score, &g->base_score, sizeof row->base_score) != 0)
        return NULL;
    return row;
}

kace_status kace_place_job(kace_ctx *ctx, const kace_predictor *p, const kace_dataset *ds, const kace_place_gpu *gpus,
                           size_t n_gpus, int w, const kace_place_options *opt, kace_placement *out)
{
    memset(out, 0, sizeof *out);
    out->gpu = -1;
    if (w < 0 || (size_t)w >= ds->n_workloads)
        return kace_fail(ctx, KACE_ERR_NOT_FOUND, "workload %d is not in the dataset", w);
    if (!(ds->workloads[w].metric[KACE_M_EXCLUSIVE] > 0))
        return kace_fail(ctx, KACE_ERR_NOT_FOUND, "workload %s has no exclusive throughput in the store",
                         ds->workloads[w].name);
    double alone;
    if (kace_predict_group(ctx, p, ds, &w, 1, &alone, NULL, NULL))
        return kace_fail(ctx, KACE_ERR_NOT_FOUND, "workload %s cannot be predicted: %s", ds->workloads[w].name,
                         kace_errmsg(ctx));
    int want = kace_place_share(ds, w, opt);
    int skipped_full = 0, skipped_unknown = 0;
    for (size_t i = 0; i < n_gpus; i++) {
        const kace_place_gpu *g = &gpus[i];
        if (!g->usable)
            continue;
        int share = want < g->share_free ? want : g->share_free;
        if (share < opt->min_share || g->n_residents >= KACE_MAX_K) {
            skipped_full++;
            continue;
        }
        if (isnan(g->base_score)) {
            skipped_unknown++;
            continue;
        }
        kace_gain gain;
        /* The cache and base_score hold summed shares: another objective
         * predicts the GPU's residents and the job afresh. */
        const kace_place_row *row = opt->objective == KACE_OBJ_NORMALIZED ? row_for(g, p, ds) : NULL;
        if (opt->objective != KACE_OBJ_NORMALIZED) {
            if (kace_place_gain_by(ctx, p, ds, g->resident, g->n_residents, w, opt->objective, &gain)) {
                skipped_unknown++;
                continue;
            }
        } else if (row) {
            const place_cell *cell = &row->cell[w];
            if (!cell->ok) {
                skipped_unknown++;
                continue;
            }
            gain.gain = cell->gain;
            gain.after = cell->after;
            gain.confidence = cell->confidence;
        } else if (kace_place_gain(ctx, p, ds, g->resident, g->n_residents, w, &g->base_score, &gain)) {
            skipped_unknown++;
            continue;
        }
        if (g->n_residents > 0 && gain.confidence < opt->min_confidence)
            continue;
        out->n_considered++;
        if (out->gpu < 0 || gain.gain > out->gain) {
            out->gpu = (int)i;
            out->share = share;
            out->gain = gain.gain;
            out->score = gain.after;
            out->confidence = gain.confidence;
        }
    }
    if (out->gpu < 0)
        return kace_fail(ctx, KACE_ERR_NOT_FOUND,
                         "no GPU for %s: %zu GPUs, %d without %d%% free, %d with residents kace cannot predict",
                         ds->workloads[w].name, n_gpus, skipped_full, opt->min_share, skipped_unknown);
    return KACE_OK;
}

static const char tag_prefix[] = "kace:workload=";

bool kace_place_tag_format(char *buf, size_t size, const char *workload, int share)
{
    int n = snprintf(buf, size, "%s%s,share=%d", tag_prefix, workload, share);
    return n > 0 && (size_t)n < size;
}

bool kace_place_tag_parse(const char *text, char workload[KACE_NAME_MAX], int *share)
{
    const char *p = text ? strstr(text, tag_prefix) : NULL;
    if (!p)
        return false;
    p += sizeof tag_prefix - 1;
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : 0;
    if (!comma || len == 0 || len >= KACE_NAME_MAX || strncmp(comma, ",share=", 7) != 0)
        return false;
    for (size_t i = 0; i < len; i++)
        if (isspace((unsigned char)p[i]))
            return false;
    const char *num = comma + 7;
    if (!isdigit((unsigned char)*num))
        return false;
    char *end;
    errno = 0;
    long v = strtol(num, &end, 10);
    if (errno || v < 0 || v > 100 || (*end && *end != ' ' && *end != ';' && *end != '\n'))
        return false;
    memcpy(workload, p, len);
    workload[len] = '\0';
    *share = (int)v;
    return true;
}

long kace_place_gres_count(const char *gres, const char *name)
{
    size_t name_len = strlen(name);
    long total = 0;
    for (const char *p = gres; p && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        /* An item is name[:type]:count[(...)], or just name (count 1). */
        if (len >= name_len && strncmp(p, name, name_len) == 0 && (len == name_len || p[name_len] == ':' ||
                                                                    p[name_len] == '(')) {
            const char *item_end = p + len;
            const char *paren = memchr(p, '(', len);
            if (paren)
                item_end = paren;
            const char *colon = NULL;
            for (const char *q = p; q < item_end; q++)
                if (*q == ':')
                    colon = q;
            if (!colon) {
                total += 1;
            } else {
                char digits[24];
                size_t n = (size_t)(item_end - colon - 1);
                if (n > 0 && n < sizeof digits) {
                    memcpy(digits, colon + 1, n);
                    digits[n] = '\0';
                    char *e;
                    errno = 0;
                    long v = strtol(digits, &e, 10);
                    if (!errno && *e == '\0' && v >= 0 && v < (1L << 40))
                        total += v;
                }
            }
        }
        p = end ? end + 1 : NULL;
    }
    return total;
}

void kace_place_config_default(kace_place_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->model, sizeof cfg->model, "%s", KACE_MODEL_DEFAULT); /* the promoted model */
    snprintf(cfg->gres, sizeof cfg->gres, "mps");
    cfg->refresh_seconds = 30;
    cfg->load_all_max = 20000;
    kace_place_options_default(&cfg->options);
}

static kace_status parse_number(kace_ctx *ctx, const char *origin, int line, int col, const char *key,
                                const char *value, double lo, double hi, bool integer, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(value, &end);
    if (errno || end == value || *end || !isfinite(v) || v < lo || v > hi || (integer && v != floor(v)))
        return kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:%d: %s must be %s in [%g, %g], not '%s'", origin, line, col, key,
                         integer ? "an integer" : "a number", lo, hi, value);
    *out = v;
    return KACE_OK;
}

static kace_status set_string(kace_ctx *ctx, const char *origin, int line, int col, const char *key,
                              const char *value, char *dst, size_t size)
{
    if (strlen(value) >= size)
        return kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:%d: %s is longer than %zu characters", origin, line, col, key,
                         size - 1);
    memcpy(dst, value, strlen(value) + 1);
    return KACE_OK;
}

static kace_status config_line(kace_ctx *ctx, const char *origin, int line, char *text, kace_place_config *cfg)
{
    char *key = text;
    while (*key == ' ' || *key == '\t')
        key++;
    if (*key == '\0' || *key == '#')
        return KACE_OK;
    char *eq = strchr(key, '=');
    if (!eq)
        return kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:%d: expected 'key = value'", origin, line,
                         (int)(key - text) + 1);
    char *kend = eq;
    while (kend > key && (kend[-1] == ' ' || kend[-1] == '\t'))
        kend--;
    *kend = '\0';
    char *value = eq + 1;
    while (*value == ' ' || *value == '\t')
        value++;
    /* '#' after a blank starts a comment, as in slurm.conf ("gres = mps  # why");
     * one inside a word (a path such as /srv/a#b) does not */
    for (char *c = value; *c; c++)
        if (*c == '#' && (c == value || c[-1] == ' ' || c[-1] == '\t')) {
            *c = '\0';
            break;
        }
    char *vend = value + strlen(value);
    while (vend > value && (vend[-1] == ' ' || vend[-1] == '\t' || vend[-1] == '\r'))
        vend--;
    *vend = '\0';
    int col = (int)(value - text) + 1;
    double v;
    kace_status st = KACE_OK;
    if (strcmp(key, "store") == 0) {
        st = set_string(ctx, origin, line, col, key, value, cfg->store, sizeof cfg->store);
    } else if (strcmp(key, "model_file") == 0) {
        st = set_string(ctx, origin, line, col, key, value, cfg->model_file, sizeof cfg->model_file);
    } else if (strcmp(key, "model") == 0) {
        st = set_string(ctx, origin, line, col, key, value, cfg->model, sizeof cfg->model);
    } else if (strcmp(key, "gres") == 0) {
        if (strcmp(value, "mps") != 0 && strcmp(value, "shard") != 0)
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:%d: gres must be mps or shard, not '%s'", origin, line, col,
                             value);
        st = set_string(ctx, origin, line, col, key, value, cfg->gres, sizeof cfg->gres);
    } else if (strcmp(key, "refresh_seconds") == 0) {
        if (!(st = parse_number(ctx, origin, line, col, key, value, 1, 86400, true, &v)))
            cfg->refresh_seconds = (int)v;
    } else if (strcmp(key, "load_all_max") == 0) {
        if (!(st = parse_number(ctx, origin, line, col, key, value, 0, 1e9, true, &v)))
            cfg->load_all_max = (int)v;
    } else if (strcmp(key, "knee") == 0) {
        if (!(st = parse_number(ctx, origin, line, col, key, value, 0.01, 1, false, &v)))
            cfg->options.knee = v;
    } else if (strcmp(key, "default_share") == 0) {
        if (!(st = parse_number(ctx, origin, line, col, key, value, 10, 100, true, &v)))
            cfg->options.default_share = (int)v;
    } else if (strcmp(key, "min_share") == 0) {
        if (!(st = parse_number(ctx, origin, line, col, key, value, 1, 100, true, &v)))
            cfg->options.min_share = (int)v;
    } else if (strcmp(key, "min_confidence") == 0) {
        if (!(st = parse_number(ctx, origin, line, col, key, value, 0, 1, false, &v)))
            cfg->options.min_confidence = v;
    } else if (strcmp(key, "objective") == 0) {
        int o = kace_objective_from_name(value);
        if (o < 0)
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:%d: objective must be raw, normalized or fair, not '%s'",
                             origin, line, col, value);
        cfg->options.objective = (kace_objective)o;
    } else {
        return kace_fail(ctx, KACE_ERR_PARSE,
                         "%s:%d:%d: unknown key '%s' (expected store, model_file, model, gres, refresh_seconds, "
                         "load_all_max, knee, default_share, min_share, min_confidence or objective)",
                         origin, line, (int)(key - text) + 1, key);
    }
    return st;
}

kace_status kace_place_config_parse(kace_ctx *ctx, const char *text, size_t len, const char *origin,
                                    kace_place_config *cfg)
{
    char buf[4096];
    int line = 1;
    for (size_t pos = 0; pos < len; line++) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - (text + pos)) : len - pos;
        if (n >= sizeof buf)
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:1: line longer than %zu characters", origin, line,
                             sizeof buf - 1);
        if (memchr(text + pos, '\0', n))
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:%d:1: NUL byte in a text file", origin, line);
        memcpy(buf, text + pos, n);
        buf[n] = '\0';
        kace_status st = config_line(ctx, origin, line, buf, cfg);
        if (st)
            return st;
        pos += n + 1;
    }
    if (cfg->store[0] == '\0')
        return kace_fail(ctx, KACE_ERR_PARSE, "%s: 'store = PATH' is required (the workloads' profiles)", origin);
    return KACE_OK;
}

kace_status kace_place_config_load(kace_ctx *ctx, const char *path, kace_place_config *cfg)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return kace_fail(ctx, KACE_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    enum { MAX_CONFIG = 65536 };
    char *text = malloc(MAX_CONFIG);
    if (!text) {
        fclose(f);
        return kace_fail(ctx, KACE_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t n = fread(text, 1, MAX_CONFIG, f);
    bool failed = ferror(f);
    fclose(f);
    kace_status st;
    if (failed)
        st = kace_fail(ctx, KACE_ERR_IO, "%s: read error", path);
    else if (n == MAX_CONFIG)
        st = kace_fail(ctx, KACE_ERR_PARSE, "%s: longer than %d bytes", path, MAX_CONFIG - 1);
    else
        st = kace_place_config_parse(ctx, text, n, path, cfg);
    free(text);
    return st;
}
