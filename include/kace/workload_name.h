/* Workload names: the one rule every way a name enters kace checks (kace
 * workload add, every importer, kace profile), so that a stored name is safe
 * as a file name, a CSV field, a JSON string, a member of a comma list or of
 * a label "a+b", and on a terminal (docs/cli.md, "Workload names").
 *
 * A name is 1 to KACE_WORKLOAD_NAME_MAX bytes of A-Z a-z 0-9 '.' '_' '-',
 * and does not start with '.' or '-' (never a hidden file, "..", or an
 * option). Every name of the reference data follows it
 * ("bert-base-cased_batch8-train", "cuda-gemm2048_batch1-inf"). */
#ifndef KACE_WORKLOAD_NAME_H
#define KACE_WORKLOAD_NAME_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KACE_WORKLOAD_NAME_MAX 127
/* The rule in words, for messages. */
#define KACE_WORKLOAD_NAME_RULE "1 to 127 of A-Z a-z 0-9 . _ -, not starting with . or -"

/* True when name follows the rule. Otherwise false, *bad_at (may be NULL)
 * is the 0-based offset of the byte that breaks it (0 for an empty name,
 * KACE_WORKLOAD_NAME_MAX for one too long), and why (may be NULL; why_size
 * bytes, always terminated) a phrase for a message, with the name quoted
 * and any byte outside printable ASCII written \xHH:
 * "'a,b': byte 2 ',' is not one of A-Z a-z 0-9 . _ -". */
bool kace_workload_name_ok(const char *name, size_t *bad_at, char *why, size_t why_size);

#ifdef __cplusplus
}
#endif

#endif
