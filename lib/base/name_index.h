/* Hash indices for the lookups on hot paths: a name to a small integer (a
 * workload name to its index in a dataset), and a 64-bit key to one (a pair
 * of workload indices to a colocation).
 *
 * Open addressing with linear probing; the capacity is a power of two kept
 * at most half full, so a lookup touches a few slots whatever the size. No
 * removal: every index on those paths only grows. Values are >= 0; -1 means
 * "absent". A name index keeps its own copy of each name, so the caller's
 * strings may move or go away.
 */
#ifndef KACE_LIB_NAME_INDEX_H
#define KACE_LIB_NAME_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kace_name_index kace_name_index;

/* NULL when out of memory. */
kace_name_index *kace_name_index_new(void);
/* Frees *ix (NULL allowed) and sets it to NULL. */
void kace_name_index_free(kace_name_index **ix);
/* The value stored for name, or -1 (also for ix NULL). */
int kace_name_index_find(const kace_name_index *ix, const char *name);
/* Stores name -> value (value >= 0) unless name is there already;
 * *stored (may be NULL) is then the value name has: the earlier one when it
 * was there. False when out of memory or value < 0 (the index is then
 * unchanged). */
bool kace_name_index_add(kace_name_index *ix, const char *name, int value, int *stored);
/* How many names are stored. */
size_t kace_name_index_count(const kace_name_index *ix);

typedef struct kace_key_index kace_key_index;

kace_key_index *kace_key_index_new(void);
void kace_key_index_free(kace_key_index **ix);
int kace_key_index_find(const kace_key_index *ix, uint64_t key);
/* As kace_name_index_add, for a 64-bit key. */
bool kace_key_index_add(kace_key_index *ix, uint64_t key, int value, int *stored);
size_t kace_key_index_count(const kace_key_index *ix);

/* The key of an unordered pair of indices (a, b) = (b, a), both >= 0. */
uint64_t kace_pair_key(int a, int b);

#endif
