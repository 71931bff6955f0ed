/* The measured sums of every all-100% group of a dataset, in an
 * open-addressing hash table built in one pass over the colocations.
 *
 * An entry names its group by the first colocation that has it (the
 * dataset outlives the index), so it costs 24 bytes whatever KACE_MAX_K;
 * the table holds 4-byte entry numbers, at most half full. The sums are
 * accumulated in the dataset's order, as a scan of the colocations would,
 * so that the index gives the scan's values to the last bit.
 *
 * The raw sums are kept; the other objectives (a member's share of its
 * exclusive throughput) are computed on demand from the group's runs,
 * listed group by group in the dataset's order (4 bytes a run, 4 a group):
 * a group has a few runs, and a request asks for a few groups. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "measured_index.h"

typedef struct entry {
    uint32_t first_row; /* the first colocation of this group: its key */
    uint32_t hash;
    double mean;        /* while building: the sum of the successful runs */
    double first_pair;  /* pairs: the first run's sum, whatever its status */
} entry;

struct kace_measured_index {
    const kace_dataset *ds;
    entry *entries;
    size_t n;
    uint32_t *slots; /* entry number + 1; 0 = empty */
    size_t mask;     /* slots - 1, slots a power of two */
    /* The all-100% runs of entry i, in the dataset's order, are
     * rows[start[i] .. start[i + 1]). */
    uint32_t *start, *rows;
    size_t n_rows;
};

static void sort_group(int *g, int k)
{
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0 && g[j - 1] > g[j]; j--) {
            int t = g[j];
            g[j] = g[j - 1];
            g[j - 1] = t;
        }
}

static uint32_t hash_group(const int *sorted, int k)
{
    uint64_t h = 0x9e3779b97f4a7c15u ^ (uint64_t)k;
    for (int i = 0; i < k; i++) {
        h ^= (uint32_t)sorted[i];
        h *= 0xff51afd7ed558ccdu;
        h ^= h >> 32;
    }
    return (uint32_t)(h ^ h >> 29);
}

static bool all_at_100(const kace_colocation *c)
{
    for (int i = 0; i < c->k; i++)
        if (c->mps_pct[i] != 100)
            return false;
    return true;
}

static bool same_group(const kace_colocation *c, const int *sorted, int k)
{
    if (c->k != k)
        return false;
    int g[KACE_MAX_K];
    for (int i = 0; i < k; i++)
        g[i] = c->workload[i];
    sort_group(g, k);
    for (int i = 0; i < k; i++)
        if (g[i] != sorted[i])
            return false;
    return true;
}

/* The slot that holds the group, or the empty one where it would go. */
static size_t find_slot(const kace_measured_index *ix, const int *sorted, int k, uint32_t h)
{
    size_t s = h & ix->mask;
    while (ix->slots[s]) {
        const entry *e = &ix->entries[ix->slots[s] - 1];
        if (e->hash == h && same_group(&ix->ds->colocations[e->first_row], sorted, k))
            return s;
        s = (s + 1) & ix->mask;
    }
    return s;
}

static size_t table_size(size_t n)
{
    size_t size = 16;
    while (size < 2 * n)
        size *= 2;
    return size;
}

kace_status kace_measured_index_build(kace_ctx *ctx, const kace_dataset *ds, kace_measured_index **out)
{
    *out = NULL;
    size_t candidates = 0;
    for (size_t r = 0; r < ds->n_colocations; r++)
        candidates += all_at_100(&ds->colocations[r]);
    if (ds->n_colocations > UINT32_MAX - 1)
        return kace_fail(ctx, KACE_ERR_INVALID, "too many colocations to index (%zu)", ds->n_colocations);
    kace_measured_index *ix = calloc(1, sizeof *ix);
    uint32_t *runs = calloc(candidates ? candidates : 1, sizeof *runs); /* successful runs per entry */
    uint32_t *owner = malloc((candidates ? candidates : 1) * sizeof *owner); /* per indexed run: its entry */
    if (ix) {
        ix->ds = ds;
        ix->mask = table_size(candidates) - 1;
        ix->slots = calloc(ix->mask + 1, sizeof *ix->slots);
        ix->entries = malloc((candidates ? candidates : 1) * sizeof *ix->entries);
        ix->start = calloc(candidates + 1, sizeof *ix->start);
        ix->rows = malloc((candidates ? candidates : 1) * sizeof *ix->rows);
        ix->n_rows = candidates;
    }
    if (!ix || !runs || !owner || !ix->slots || !ix->entries || !ix->start || !ix->rows) {
        free(runs);
        free(owner);
        kace_measured_index_free(&ix);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory indexing %zu colocations", ds->n_colocations);
    }
    size_t m = 0; /* indexed runs so far */
    for (size_t r = 0; r < ds->n_colocations; r++) {
        const kace_colocation *c = &ds->colocations[r];
        if (!all_at_100(c))
            continue;
        int g[KACE_MAX_K];
        for (int i = 0; i < c->k; i++)
            g[i] = c->workload[i];
        sort_group(g, c->k);
        uint32_t h = hash_group(g, c->k);
        size_t s = find_slot(ix, g, c->k, h);
        if (!ix->slots[s]) {
            ix->entries[ix->n] = (entry){(uint32_t)r, h, 0, NAN};
            ix->slots[s] = (uint32_t)++ix->n;
        }
        owner[m++] = ix->slots[s] - 1;
        ix->start[ix->slots[s]]++; /* counted at start[entry + 1]: summed below into where each begins */
        entry *e = &ix->entries[ix->slots[s] - 1];
        if (c->status == KACE_RUN_OK) {
            e->mean += kace_colocation_sum(c);
            runs[ix->slots[s] - 1]++;
        }
        if (c->k == 2 && isnan(e->first_pair))
            e->first_pair = kace_colocation_sum(c);
    }
    for (size_t i = 0; i < ix->n; i++)
        ix->entries[i].mean = runs[i] ? ix->entries[i].mean / runs[i] : NAN;
    /* each group's runs in the dataset's order: runs[] now counts where the
     * next run of each entry goes */
    for (size_t i = 0; i < ix->n; i++) {
        ix->start[i + 1] += ix->start[i];
        runs[i] = ix->start[i];
    }
    m = 0;
    for (size_t r = 0; r < ds->n_colocations; r++)
        if (all_at_100(&ds->colocations[r]))
            ix->rows[runs[owner[m++]]++] = (uint32_t)r;
    free(runs);
    free(owner);
    uint32_t *start = realloc(ix->start, (ix->n + 1) * sizeof *start);
    if (start)
        ix->start = start;
    /* Repeated runs of a group leave the table emptier than it need be:
     * size it for the groups and give back the entries not used. */
    size_t size = table_size(ix->n);
    if (size <= ix->mask) {
        uint32_t *slots = calloc(size, sizeof *slots);
        if (slots) {
            free(ix->slots);
            ix->slots = slots;
            ix->mask = size - 1;
            for (size_t i = 0; i < ix->n; i++) {
                size_t s = ix->entries[i].hash & ix->mask;
                while (ix->slots[s])
                    s = (s + 1) & ix->mask;
                ix->slots[s] = (uint32_t)(i + 1);
            }
        }
    }
    entry *fit = realloc(ix->entries, (ix->n ? ix->n : 1) * sizeof *fit);
    if (fit)
        ix->entries = fit;
    *out = ix;
    return KACE_OK;
}

void kace_measured_index_free(kace_measured_index **ix)
{
    if (ix && *ix) {
        free((*ix)->entries);
        free((*ix)->slots);
        free((*ix)->start);
        free((*ix)->rows);
        free(*ix);
        *ix = NULL;
    }
}

static const entry *lookup(const kace_measured_index *ix, const int *group, int k)
{
    if (k < 1 || k > KACE_MAX_K)
        return NULL;
    int g[KACE_MAX_K];
    for (int i = 0; i < k; i++)
        g[i] = group[i];
    sort_group(g, k);
    size_t s = find_slot(ix, g, k, hash_group(g, k));
    return ix->slots[s] ? &ix->entries[ix->slots[s] - 1] : NULL;
}

double kace_measured_index_group(const kace_measured_index *ix, const int *group, int k)
{
    const entry *e = lookup(ix, group, k);
    return e ? e->mean : NAN;
}

double kace_measured_index_pair(const kace_measured_index *ix, int a, int b)
{
    const int pair[2] = {a, b};
    const entry *e = lookup(ix, pair, 2);
    return e ? e->first_pair : NAN;
}

double kace_measured_index_group_by(const kace_measured_index *ix, kace_objective o, const int *group, int k)
{
    const entry *e = lookup(ix, group, k);
    if (!e || o == KACE_OBJ_RAW)
        return e ? e->mean : NAN;
    size_t i = (size_t)(e - ix->entries);
    double sum = 0;
    uint32_t runs = 0;
    for (uint32_t r = ix->start[i]; r < ix->start[i + 1]; r++) {
        const kace_colocation *c = &ix->ds->colocations[ix->rows[r]];
        if (c->status == KACE_RUN_OK) {
            sum += kace_objective_measured(o, ix->ds, c);
            runs++;
        }
    }
    return runs ? sum / runs : NAN;
}

double kace_measured_index_pair_by(const kace_measured_index *ix, kace_objective o, int a, int b)
{
    const int pair[2] = {a, b};
    const entry *e = lookup(ix, pair, 2);
    if (!e || o == KACE_OBJ_RAW)
        return e ? e->first_pair : NAN;
    /* as kace_rank_partners_by: the first run whose value is a number */
    size_t i = (size_t)(e - ix->entries);
    for (uint32_t r = ix->start[i]; r < ix->start[i + 1]; r++) {
        double v = kace_objective_measured(o, ix->ds, &ix->ds->colocations[ix->rows[r]]);
        if (!isnan(v))
            return v;
    }
    return NAN;
}

size_t kace_measured_index_groups(const kace_measured_index *ix)
{
    return ix->n;
}

size_t kace_measured_index_bytes(const kace_measured_index *ix)
{
    return sizeof *ix + ix->n * sizeof *ix->entries + (ix->mask + 1) * sizeof *ix->slots +
           (ix->n + 1) * sizeof *ix->start + ix->n_rows * sizeof *ix->rows;
}
