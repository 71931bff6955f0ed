/* Campaign attempts: which command and code each stored run was measured
 * with, so that a failed run is measured again once its workloads' commands
 * or code change, and only then (see include/kace/campaign.h).
 *
 * The table lives in the store beside the runs, made by the first attempt
 * noted (older stores have none until then):
 *   campaign_attempts(run_key, attempt, command_key, status, attempted_at)
 * one row per measurement of a run identity, failed ones kept when a retry
 * replaces their run. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "kace/campaign.h"

/* FNV-1a, 64 bits: a fingerprint, not a defence against a chosen collision. */
static uint64_t fnv(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

#define FNV_START 14695981039346656037ULL
/* Files larger than this are hashed by size and time of change, not read. */
#define KEY_READ_MAX ((off_t)64 << 20)

kace_status kace_command_key(kace_ctx *ctx, char *const *argv, char out[KACE_COMMAND_KEY_SIZE])
{
    uint64_t h = FNV_START;
    char buf[65536];
    for (size_t i = 0; argv && argv[i]; i++) {
        h = fnv(h, argv[i], strlen(argv[i]) + 1); /* the NUL separates the words */
        struct stat sb;
        if (stat(argv[i], &sb) != 0 || !S_ISREG(sb.st_mode))
            continue;
        if (sb.st_size > KEY_READ_MAX) {
            long long meta[2] = {(long long)sb.st_size, (long long)sb.st_mtime};
            h = fnv(h, meta, sizeof meta);
            continue;
        }
        FILE *f = fopen(argv[i], "rb");
        if (!f)
            continue; /* unreadable here: its name alone counts */
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, f)) > 0)
            h = fnv(h, buf, n);
        bool bad = ferror(f);
        fclose(f);
        if (bad)
            return kace_fail(ctx, KACE_ERR_IO, "%s: read error while fingerprinting the command", argv[i]);
    }
    snprintf(out, KACE_COMMAND_KEY_SIZE, "%016llx", (unsigned long long)h);
    return KACE_OK;
}

/* The contents of each word of argv that names a readable regular file
 * (as kace_command_key reads them), into h; not the words themselves. */
static kace_status hash_files(kace_ctx *ctx, char *const *argv, uint64_t *h)
{
    char buf[65536];
    for (size_t i = 0; argv && argv[i]; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0 || !S_ISREG(sb.st_mode))
            continue;
        if (sb.st_size > KEY_READ_MAX) {
            long long meta[2] = {(long long)sb.st_size, (long long)sb.st_mtime};
            *h = fnv(*h, meta, sizeof meta);
            continue;
        }
        FILE *f = fopen(argv[i], "rb");
        if (!f)
            continue;
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, f)) > 0)
            *h = fnv(*h, buf, n);
        bool bad = ferror(f);
        fclose(f);
        if (bad)
            return kace_fail(ctx, KACE_ERR_IO, "%s: read error while fingerprinting the command", argv[i]);
    }
    return KACE_OK;
}

kace_status kace_written_command_key(kace_ctx *ctx, const char *written, char *const *argv,
                                     char out[KACE_COMMAND_KEY_SIZE])
{
    uint64_t h = fnv(FNV_START, written ? written : "", written ? strlen(written) + 1 : 1);
    kace_status st = hash_files(ctx, argv, &h);
    if (st)
        return st;
    snprintf(out, KACE_COMMAND_KEY_SIZE, "%016llx", (unsigned long long)h);
    return KACE_OK;
}

/* ---- command keys remembered for one call ---- */

typedef struct key_entry {
    char *written; /* NULL: a command's key (kace_command_key) */
    char **argv;   /* a copy, NULL-terminated */
    char key[KACE_COMMAND_KEY_SIZE];
} key_entry;

struct kace_key_cache {
    key_entry *entries;
    size_t n, cap;
};

kace_key_cache *kace_key_cache_new(void)
{
    return calloc(1, sizeof(kace_key_cache));
}

static void key_entry_free(key_entry *e)
{
    for (size_t i = 0; e->argv && e->argv[i]; i++)
        free(e->argv[i]);
    free(e->argv);
    free(e->written);
}

void kace_key_cache_free(kace_key_cache **cache)
{
    if (!cache || !*cache)
        return;
    for (size_t i = 0; i < (*cache)->n; i++)
        key_entry_free(&(*cache)->entries[i]);
    free((*cache)->entries);
    free(*cache);
    *cache = NULL;
}

static bool key_entry_is(const key_entry *e, const char *written, char *const *argv)
{
    if ((e->written == NULL) != (written == NULL) || (written && strcmp(e->written, written) != 0))
        return false;
    size_t i = 0;
    for (; argv && argv[i] && e->argv[i]; i++)
        if (strcmp(argv[i], e->argv[i]) != 0)
            return false;
    return !(argv && argv[i]) && !e->argv[i];
}

/* Keeps (written, argv) -> key; out of memory only loses the saving. */
static void key_cache_keep(kace_key_cache *c, const char *written, char *const *argv, const char *key)
{
    size_t n = 0;
    while (argv && argv[n])
        n++;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        key_entry *grown = realloc(c->entries, cap * sizeof *grown);
        if (!grown)
            return;
        c->entries = grown;
        c->cap = cap;
    }
    key_entry e = {.written = written ? strdup(written) : NULL, .argv = calloc(n + 1, sizeof(char *))};
    bool ok = e.argv && (!written || e.written);
    for (size_t i = 0; ok && i < n; i++)
        ok = (e.argv[i] = strdup(argv[i])) != NULL;
    if (!ok) {
        key_entry_free(&e);
        return;
    }
    snprintf(e.key, sizeof e.key, "%s", key);
    c->entries[c->n++] = e;
}

kace_status kace_cached_command_key(kace_ctx *ctx, kace_key_cache *cache, const char *written, char *const *argv,
                                    char out[KACE_COMMAND_KEY_SIZE])
{
    for (size_t i = 0; cache && i < cache->n; i++)
        if (key_entry_is(&cache->entries[i], written, argv)) {
            memcpy(out, cache->entries[i].key, KACE_COMMAND_KEY_SIZE);
            return KACE_OK;
        }
    kace_status st = written ? kace_written_command_key(ctx, written, argv, out) : kace_command_key(ctx, argv, out);
    if (!st && cache)
        key_cache_keep(cache, written, argv, out);
    return st;
}

kace_status kace_members_command_key(kace_ctx *ctx, int k, const char *const *names, char *const *const *argvs,
                                     char out[KACE_COMMAND_KEY_SIZE])
{
    return kace_cached_members_key(ctx, NULL, k, names, argvs, out);
}

kace_status kace_cached_members_key(kace_ctx *ctx, kace_key_cache *cache, int k, const char *const *names,
                                    char *const *const *argvs, char out[KACE_COMMAND_KEY_SIZE])
{
    int order[KACE_MAX_K];
    if (k < 1 || k > KACE_MAX_K)
        return kace_fail(ctx, KACE_ERR_INVALID, "%d members (expected 1 to %d)", k, KACE_MAX_K);
    for (int i = 0; i < k; i++) { /* insertion sort by name: k is at most 8 */
        int j = i;
        order[j] = i;
        while (j > 0 && strcmp(names[order[j - 1]], names[order[j]]) > 0) {
            int t = order[j - 1];
            order[j - 1] = order[j];
            order[j] = t;
            j--;
        }
    }
    uint64_t h = FNV_START;
    for (int i = 0; i < k; i++) {
        char key[KACE_COMMAND_KEY_SIZE];
        kace_status st = kace_cached_command_key(ctx, cache, NULL, argvs[order[i]], key);
        if (st)
            return st;
        h = fnv(h, names[order[i]], strlen(names[order[i]]) + 1);
        h = fnv(h, key, strlen(key) + 1);
    }
    snprintf(out, KACE_COMMAND_KEY_SIZE, "%016llx", (unsigned long long)h);
    return KACE_OK;
}

bool kace_plan_should_measure(const kace_attempt_state *s)
{
    if (!s->stored)
        return true;
    if (!s->failed)
        return false;
    /* A failed run: again only with other commands or code than it failed with.
     * One stored before attempts were kept gets one more try (its key is then kept). */
    return !s->key_known || strcmp(s->failed_key, s->current_key) != 0;
}

void kace_plan_fingerprint(const char *text, size_t len, char out[KACE_COMMAND_KEY_SIZE])
{
    snprintf(out, KACE_COMMAND_KEY_SIZE, "%016llx", (unsigned long long)fnv(FNV_START, text, len));
}

/* ---- the profile step's retry rules (include/kace/campaign.h) ---- */

bool kace_profile_dropped(int failures)
{
    return failures >= KACE_PROFILE_MAX_FAILURES;
}

double kace_profile_start_s(kace_catalog_kind kind)
{
    switch (kind) {
    case KACE_CATALOG_CUDA: return KACE_PROFILE_START_CUDA_S;
    case KACE_CATALOG_TORCH:
    case KACE_CATALOG_LLM: return KACE_PROFILE_START_TORCH_S;
    default: return KACE_PROFILE_START_S;
    }
}

double kace_profile_need_s(double windows_s, double start_s, double longest_ok_s, double ran_out_s, double cap_s)
{
    double need = (windows_s > 0 ? windows_s : 0) + (start_s > 0 ? start_s : 0);
    if (longest_ok_s * KACE_PROFILE_LONGEST_MARGIN > need)
        need = longest_ok_s * KACE_PROFILE_LONGEST_MARGIN;
    if (ran_out_s * KACE_PROFILE_RAN_OUT_GROWTH > need)
        need = ran_out_s * KACE_PROFILE_RAN_OUT_GROWTH;
    if (cap_s > 0 && need > cap_s)
        need = cap_s;
    return need;
}
