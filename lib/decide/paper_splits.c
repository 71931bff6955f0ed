/* The KACE artifact's train/test splits, made for any colocation set
 * (include/kace/protocol.h, kace_splits_make).
 *
 * How the artifact made them, read off its published splits (all 45 of the
 * V100 pair set are reproduced row for row, tests/test_paper_splits.c):
 *  - the rows are shuffled by NumPy's legacy RandomState(seed).permutation:
 *    MT19937 seeded as init_genrand(seed), then Fisher-Yates from the last
 *    position down, each draw a 32-bit output masked to the smallest
 *    all-ones mask >= the bound and redrawn while above it;
 *  - one pass over the shuffled rows: a row whose members are all distinct
 *    is taken into training when any member has been taken fewer than
 *    n_occur times (each member's count then grows by one); every other row,
 *    self-pairs included, is a test row;
 *  - paper_fit: the published code re-split each training set 80/20 as
 *    scikit-learn's train_test_split(test_size=0.2, random_state=30) does:
 *    a permutation of the training rows (in the order they were taken) with
 *    seed 30; its first ceil(0.2 m) are held out, the rest are fitted.
 * Rows come out as the artifact wrote them: training rows in the order
 * they were taken, then test rows in shuffled order. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kace/protocol.h"

#define MT_N 624
#define MT_M 397

typedef struct mt19937 {
    uint32_t state[MT_N];
    int next;
} mt19937;

static void mt_seed(mt19937 *mt, uint32_t seed)
{
    mt->state[0] = seed;
    for (int i = 1; i < MT_N; i++) {
        uint32_t prev = mt->state[i - 1];
        mt->state[i] = 1812433253u * (prev ^ (prev >> 30)) + (uint32_t)i;
    }
    mt->next = MT_N;
}

static uint32_t mt_next(mt19937 *mt)
{
    if (mt->next >= MT_N) {
        for (int i = 0; i < MT_N; i++) {
            uint32_t y = (mt->state[i] & 0x80000000u) | (mt->state[(i + 1) % MT_N] & 0x7fffffffu);
            mt->state[i] = mt->state[(i + MT_M) % MT_N] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
        }
        mt->next = 0;
    }
    uint32_t y = mt->state[mt->next++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

/* A uniform draw in [0, max] by masked rejection (max < 2^32). */
static uint32_t mt_interval(mt19937 *mt, uint32_t max)
{
    if (max == 0)
        return 0;
    uint32_t mask = max;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    uint32_t v;
    while ((v = mt_next(mt) & mask) > max)
        ;
    return v;
}

void kace_numpy_permutation(size_t n, uint32_t seed, size_t *perm)
{
    mt19937 mt;
    mt_seed(&mt, seed);
    for (size_t i = 0; i < n; i++)
        perm[i] = i;
    for (size_t i = n; i-- > 1;) {
        size_t j = mt_interval(&mt, (uint32_t)i);
        size_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

static bool members_distinct(const kace_colocation *c)
{
    for (int a = 0; a < c->k; a++)
        for (int b = a + 1; b < c->k; b++)
            if (c->workload[a] == c->workload[b])
                return false;
    return true;
}

void kace_split_recipe_default(kace_split_recipe *r)
{
    static const int n_occur[] = {2, 3, 4, 5, 6, 7, 8, 9, 10};
    static const uint32_t seeds[] = {10, 20, 30, 40, 50};
    memset(r, 0, sizeof *r);
    r->n_occur = n_occur;
    r->n_n_occur = sizeof n_occur / sizeof *n_occur;
    r->seeds = seeds;
    r->n_seeds = sizeof seeds / sizeof *seeds;
    r->fit_seed = 30;
    r->fit_holdout = 0.2;
}

kace_status kace_splits_make(kace_ctx *ctx, const kace_dataset *ds, const kace_split_recipe *recipe,
                             kace_splits **out)
{
    *out = NULL;
    size_t n = recipe->rows ? recipe->n_rows : ds->n_colocations;
    if (n == 0)
        return kace_fail(ctx, KACE_ERR_INVALID, "no colocations to split");
    if (n > UINT32_MAX)
        return kace_fail(ctx, KACE_ERR_INVALID, "too many colocations to split (%zu)", n);
    if (!(recipe->fit_holdout >= 0 && recipe->fit_holdout < 1))
        return kace_fail(ctx, KACE_ERR_INVALID, "the internal hold-out fraction must be in [0, 1), not %g",
                         recipe->fit_holdout);
    for (size_t i = 0; i < recipe->n_n_occur; i++)
        if (recipe->n_occur[i] < 1)
            return kace_fail(ctx, KACE_ERR_INVALID, "n_occur must be >= 1, not %d", recipe->n_occur[i]);
    for (size_t i = 0; recipe->rows && i < n; i++)
        if (recipe->rows[i] < 0 || (size_t)recipe->rows[i] >= ds->n_colocations)
            return kace_fail(ctx, KACE_ERR_INVALID, "row %d is not a colocation of the set", recipe->rows[i]);

    size_t n_splits = recipe->n_n_occur * recipe->n_seeds;
    kace_splits *sp = calloc(1, sizeof *sp);
    size_t *order = malloc(n * sizeof *order), *fit_perm = malloc(n * sizeof *fit_perm);
    size_t *taken = malloc(n * sizeof *taken);
    int *count = calloc(ds->n_workloads ? ds->n_workloads : 1, sizeof *count);
    bool *is_train = malloc(n * sizeof *is_train), *fitted = malloc(n * sizeof *fitted);
    if (sp)
        sp->rows = malloc((n_splits ? n_splits : 1) * n * sizeof *sp->rows);
    if (!sp || !sp->rows || !order || !fit_perm || !taken || !count || !is_train || !fitted) {
        free(order), free(fit_perm), free(taken), free(count), free(is_train), free(fitted);
        kace_splits_free(&sp);
        return kace_fail(ctx, KACE_ERR_NOMEM, "out of memory");
    }
    for (size_t o = 0; o < recipe->n_n_occur; o++) {
        for (size_t s = 0; s < recipe->n_seeds; s++) {
            int n_occur = recipe->n_occur[o];
            kace_numpy_permutation(n, recipe->seeds[s], order);
            memset(count, 0, (ds->n_workloads ? ds->n_workloads : 1) * sizeof *count);
            size_t m = 0;
            for (size_t i = 0; i < n; i++) {
                const kace_colocation *c = &ds->colocations[recipe->rows ? recipe->rows[order[i]] : (int)order[i]];
                is_train[i] = false;
                if (!members_distinct(c))
                    continue;
                bool wanted = false;
                for (int a = 0; a < c->k; a++)
                    wanted |= count[c->workload[a]] < n_occur;
                if (!wanted)
                    continue;
                for (int a = 0; a < c->k; a++)
                    count[c->workload[a]]++;
                is_train[i] = true;
                taken[m++] = i;
            }
            /* The internal re-split: the first ceil(h m) of a permutation of
             * the taken rows are held out. */
            size_t held = (size_t)(recipe->fit_holdout * (double)m);
            if ((double)held < recipe->fit_holdout * (double)m)
                held++;
            kace_numpy_permutation(m, recipe->fit_seed, fit_perm);
            for (size_t i = 0; i < m; i++)
                fitted[i] = false;
            for (size_t i = held; i < m; i++)
                fitted[fit_perm[i]] = true;
            for (size_t i = 0; i < m; i++)
                sp->rows[sp->n++] = (kace_split_row){.n_occur = n_occur,
                                                      .seed = (int)recipe->seeds[s],
                                                      .train = true,
                                                      .paper_fit = fitted[i],
                                                      .colocation = recipe->rows ? recipe->rows[order[taken[i]]]
                                                                                 : (int)order[taken[i]]};
            for (size_t i = 0; i < n; i++)
                if (!is_train[i])
                    sp->rows[sp->n++] =
                        (kace_split_row){.n_occur = n_occur,
                                         .seed = (int)recipe->seeds[s],
                                         .colocation = recipe->rows ? recipe->rows[order[i]] : (int)order[i]};
        }
    }
    free(order), free(fit_perm), free(taken), free(count), free(is_train), free(fitted);
    *out = sp;
    return KACE_OK;
}
