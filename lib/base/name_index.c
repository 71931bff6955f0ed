/* Open-addressing hash indices (see name_index.h). */
#include <stdlib.h>
#include <string.h>

#include "name_index.h"

#define FIRST_CAP 16 /* slots; a power of two */

typedef struct name_slot {
    uint64_t hash;
    size_t at; /* offset of the name in names */
    int value; /* -1: empty */
} name_slot;

struct kace_name_index {
    name_slot *slots;
    size_t cap, count; /* cap a power of two, count <= cap / 2 */
    char *names;       /* every stored name, NUL-terminated, one after another */
    size_t names_len, names_cap;
};

typedef struct key_slot {
    uint64_t key;
    int value; /* -1: empty */
} key_slot;

struct kace_key_index {
    key_slot *slots;
    size_t cap, count;
};

/* splitmix64's finalizer: pairs of small indices differ in few bits, and
 * linear probing needs those differences spread over the low bits. */
static uint64_t mix_key(uint64_t k)
{
    k ^= k >> 30;
    k *= 0xbf58476d1ce4e5b9ull;
    k ^= k >> 27;
    k *= 0x94d049bb133111ebull;
    k ^= k >> 31;
    return k;
}

/* Eight bytes at a time (a byte at a time was ~5% of kace eval: its 16k
 * split rows name two workloads each), then the finalizer above: names
 * that share long prefixes still differ in the low bits. */
static uint64_t hash_name(const char *s)
{
    size_t n = strlen(s);
    uint64_t h = 14695981039346656037ull ^ n, w;
    for (; n >= 8; s += 8, n -= 8) {
        memcpy(&w, s, 8);
        h = (h ^ w) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    w = 0;
    memcpy(&w, s, n);
    return mix_key(h ^ w);
}

uint64_t kace_pair_key(int a, int b)
{
    uint32_t lo = (uint32_t)(a < b ? a : b), hi = (uint32_t)(a < b ? b : a);
    return (uint64_t)lo << 32 | hi;
}

/* ---- names ---------------------------------------------------------------- */

static name_slot *name_slots_new(size_t cap)
{
    name_slot *s = malloc(cap * sizeof *s);
    for (size_t i = 0; s && i < cap; i++)
        s[i].value = -1;
    return s;
}

kace_name_index *kace_name_index_new(void)
{
    kace_name_index *ix = calloc(1, sizeof *ix);
    if (!ix || !(ix->slots = name_slots_new(FIRST_CAP))) {
        free(ix);
        return NULL;
    }
    ix->cap = FIRST_CAP;
    return ix;
}

void kace_name_index_free(kace_name_index **ix)
{
    if (!ix || !*ix)
        return;
    free((*ix)->slots);
    free((*ix)->names);
    free(*ix);
    *ix = NULL;
}

/* The slot holding name, or the empty slot where it would go. */
static name_slot *name_probe(const kace_name_index *ix, const char *name, uint64_t h)
{
    size_t mask = ix->cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        name_slot *s = &ix->slots[i];
        if (s->value < 0 || (s->hash == h && strcmp(ix->names + s->at, name) == 0))
            return s;
    }
}

int kace_name_index_find(const kace_name_index *ix, const char *name)
{
    if (!ix)
        return -1;
    return name_probe(ix, name, hash_name(name))->value;
}

static bool name_grow(kace_name_index *ix)
{
    size_t cap = ix->cap * 2;
    name_slot *slots = name_slots_new(cap);
    if (!slots)
        return false;
    for (size_t i = 0; i < ix->cap; i++) {
        const name_slot *s = &ix->slots[i];
        if (s->value < 0)
            continue;
        size_t j = (size_t)s->hash & (cap - 1);
        while (slots[j].value >= 0)
            j = (j + 1) & (cap - 1);
        slots[j] = *s;
    }
    free(ix->slots);
    ix->slots = slots;
    ix->cap = cap;
    return true;
}

bool kace_name_index_add(kace_name_index *ix, const char *name, int value, int *stored)
{
    if (value < 0)
        return false;
    uint64_t h = hash_name(name);
    name_slot *s = name_probe(ix, name, h);
    if (s->value >= 0) {
        if (stored)
            *stored = s->value;
        return true;
    }
    size_t len = strlen(name) + 1;
    if (ix->names_len + len > ix->names_cap) {
        size_t cap = ix->names_cap ? ix->names_cap : 1024;
        while (cap < ix->names_len + len)
            cap *= 2;
        char *names = realloc(ix->names, cap);
        if (!names)
            return false;
        ix->names = names;
        ix->names_cap = cap;
    }
    if (2 * (ix->count + 1) > ix->cap) {
        if (!name_grow(ix))
            return false;
        s = name_probe(ix, name, h);
    }
    memcpy(ix->names + ix->names_len, name, len);
    *s = (name_slot){h, ix->names_len, value};
    ix->names_len += len;
    ix->count++;
    if (stored)
        *stored = value;
    return true;
}

size_t kace_name_index_count(const kace_name_index *ix)
{
    return ix ? ix->count : 0;
}

/* ---- 64-bit keys ---------------------------------------------------------- */

static key_slot *key_slots_new(size_t cap)
{
    key_slot *s = malloc(cap * sizeof *s);
    for (size_t i = 0; s && i < cap; i++)
        s[i].value = -1;
    return s;
}

kace_key_index *kace_key_index_new(void)
{
    kace_key_index *ix = calloc(1, sizeof *ix);
    if (!ix || !(ix->slots = key_slots_new(FIRST_CAP))) {
        free(ix);
        return NULL;
    }
    ix->cap = FIRST_CAP;
    return ix;
}

void kace_key_index_free(kace_key_index **ix)
{
    if (!ix || !*ix)
        return;
    free((*ix)->slots);
    free(*ix);
    *ix = NULL;
}

static key_slot *key_probe(const key_slot *slots, size_t cap, uint64_t key)
{
    size_t mask = cap - 1;
    for (size_t i = (size_t)mix_key(key) & mask;; i = (i + 1) & mask)
        if (slots[i].value < 0 || slots[i].key == key)
            return (key_slot *)&slots[i];
}

int kace_key_index_find(const kace_key_index *ix, uint64_t key)
{
    return ix ? key_probe(ix->slots, ix->cap, key)->value : -1;
}

bool kace_key_index_add(kace_key_index *ix, uint64_t key, int value, int *stored)
{
    if (value < 0)
        return false;
    key_slot *s = key_probe(ix->slots, ix->cap, key);
    if (s->value < 0 && 2 * (ix->count + 1) > ix->cap) {
        size_t cap = ix->cap * 2;
        key_slot *slots = key_slots_new(cap);
        if (!slots)
            return false;
        for (size_t i = 0; i < ix->cap; i++)
            if (ix->slots[i].value >= 0)
                *key_probe(slots, cap, ix->slots[i].key) = ix->slots[i];
        free(ix->slots);
        ix->slots = slots;
        ix->cap = cap;
        s = key_probe(ix->slots, ix->cap, key);
    }
    if (s->value < 0) {
        *s = (key_slot){key, value};
        ix->count++;
    }
    if (stored)
        *stored = s->value;
    return true;
}

size_t kace_key_index_count(const kace_key_index *ix)
{
    return ix ? ix->count : 0;
}
