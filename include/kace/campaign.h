/* Campaign plans: which colocations `kace campaign` measures, in which order.
 *
 * A plan is a text file, one statement per line ('#' starts a comment):
 *
 *   workloads NAME...            add workloads to the plan's set
 *   repeat N                     following statements: N measurements each (1..100; default 1)
 *   mode mps|timeslice           following statements: under MPS (default) or time-slicing
 *   set NAME                     following statements: store into this colocation set
 *                                (default: pairs / triples / k<N>, "timeslice-" before it)
 *   pairs                        every pair of the set, 100% MPS each
 *   triples                      every triple of the set
 *   occur N [seed S]             the n_occur training plan of the KACE protocol: pairs
 *                                drawn (seeded) until every workload is in >= N of them
 *   splits P... [on A B]         every pair planned so far (or A B only) again at each
 *                                MPS split P/(100-P), P in 1..99
 *   run A B [C...] [@ P1,P2,...] one colocation (percentages default to 100)
 *
 * A repeat, mode or set that no pairs, triples, occur, splits or run follows
 * is an error: it would change nothing.
 *
 * The expanded plan lists each colocation once per repetition: first every
 * colocation's repetition 0, then every repetition 1, ... so that an
 * interrupted campaign has covered the most colocations, and repetitions of
 * one colocation are measured apart in time (their spread then includes
 * drift, as it should). Duplicates (A B = B A, same percentages, mode, set
 * and repetition) are listed once.
 */
#ifndef KACE_CAMPAIGN_H
#define KACE_CAMPAIGN_H

#include "kace/measure.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KACE_PLAN_MAX_WORKLOADS 256
#define KACE_PLAN_MAX_ENTRIES 50000
#define KACE_PLAN_MAX_LINE 4096

typedef struct kace_plan_entry {
    kace_measure_spec spec; /* spec.set is always filled in */
    int line;               /* the plan line that asked for it */
} kace_plan_entry;

typedef struct kace_plan {
    kace_plan_entry *entries;
    size_t n;
    int n_workloads;        /* in the `workloads` set */
    int max_repeat;
} kace_plan;

/* Parses and expands a plan. Errors name origin:line:column and what was
 * expected; *out is NULL then. */
kace_status kace_plan_parse(kace_ctx *ctx, const char *text, size_t len, const char *origin, kace_plan **out);
kace_status kace_plan_parse_file(kace_ctx *ctx, const char *path, kace_plan **out);
void kace_plan_free(kace_plan **plan);

/* The stored run's identity of an entry: set, mode, repetition, members and
 * their MPS percentages (no throughputs). Its strings point into e. */
kace_measured_run kace_plan_entry_run(const kace_plan_entry *e);
/* The identity under which entry's run is stored (see kace_measured_run_key). */
void kace_plan_entry_key(const kace_plan_entry *e, char *out, size_t size);

/* ---- attempts: retrying a failed run once its commands or code change ---- */

/* A fingerprint of a command and its code: argv's words and the contents of
 * each word that names a readable regular file (a script, a binary; over 64
 * MiB: its size and time of change), as 16 hex digits. A fixed command line
 * or a fixed script gives another key. */
kace_status kace_command_key(kace_ctx *ctx, char *const *argv, char out[KACE_COMMAND_KEY_SIZE]);

/* The key of a colocation's commands: its k members' names with their
 * command keys (argvs[i] is names[i]'s command), in name order. */
kace_status kace_members_command_key(kace_ctx *ctx, int k, const char *const *names, char *const *const *argvs,
                                     char out[KACE_COMMAND_KEY_SIZE]);

/* The retry rule: measure a planned run unless it is stored, and it either
 * succeeded or failed with the very commands and code it has now. A failed
 * run stored before attempts were noted (its key unknown) gets one more try. */
bool kace_plan_should_measure(const kace_attempt_state *s);

/* The attempts themselves are kept by the store (kace_attempt_state_load,
 * kace_attempt_note, kace_attempt_retire_failed in kace/store.h). */

#ifdef __cplusplus
}
#endif

#endif
