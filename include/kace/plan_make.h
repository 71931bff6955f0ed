/* The device campaign's plan, made from the names of the workloads it has
 * profiled (in catalog order), in the plan format of include/kace/campaign.h.
 * The same names give the same text, byte for byte, so every call of an
 * allocation continues the same plan; plans stored before (by this code or
 * the former scripts/device/plan.py) stay the same plan and extend.
 *
 * A new plan (at least 3 workloads):
 *  - pairs: `occur N seed S` (every workload in >= N pairs, N = max(5,
 *    ceil(60/n)), so >= 30 pairs; S the seed of 1..64 whose plan measures the
 *    fewest pairs at 100/100, ties to the lowest) or, with too few workloads
 *    for that, every pair;
 *  - 10 triples at 100/100/100, spread evenly over the workloads;
 *  - 2 MPS split grids (10 30 50 70 90) on the first two workloads and the last two;
 *  - 6 pairs measured 3 times (run-to-run spread), 3 of them time-sliced as well;
 *  - last, each workload alone under MPS at 100% (its exclusive throughput, the
 *    paper's Exclusive100), the split grids' workloads at 10 30 50 70 90% too.
 *
 * An extension: workloads profiled after the plan was made join it. The old
 * plan's text stays as it is, so every run it planned keeps its place; the
 * names it does not hold are added, each in >= N pairs (N: the plan's
 * `occur N`, else 5; at most every other name) and alone at 100% MPS
 * (unless the old plan has that run). Partners are the names with
 * the fewest pairs added so far, by this extension or an earlier one, ties
 * in the order given. With nothing to add the old text is the result. */
#ifndef KACE_PLAN_MAKE_H
#define KACE_PLAN_MAKE_H

#include <stddef.h>

#include "kace/kace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A new plan for names[0..n) (workload names, none twice, n >= 3), as a
 * NUL-terminated text in *text (free() it) of *len bytes. The text parses
 * (kace_plan_parse); KACE_ERR_INVALID otherwise, or for bad names. */
kace_status kace_plan_make(kace_ctx *ctx, const char *const *names, size_t n, char **text, size_t *len);

/* old[0..old_len), a plan read from origin, extended with those of
 * names[0..n) (every name of the campaign, the old plan's included, in
 * catalog order) that it does not hold. KACE_ERR_PARSE (origin:line:col)
 * when old does not parse, has no `workloads` statement, or has a `set`
 * statement (appended runs would be stored in that set); the result is a
 * NUL-terminated text in *text (free() it) of *len bytes. */
kace_status kace_plan_extend(kace_ctx *ctx, const char *old, size_t old_len, const char *origin,
                             const char *const *names, size_t n, char **text, size_t *len);

#ifdef __cplusplus
}
#endif

#endif
