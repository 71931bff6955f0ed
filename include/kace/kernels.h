/* Kernel recordings of libkace_cupti.so and their reduction to the KACE
 * paper's six kernel metrics (plus the Xu et al. kernel-length metrics), with
 * the same definitions as the Nsight Compute importer (lib/data/ncu.c):
 * duration-weighted means over kernels, Threads = grid x block, Registers =
 * Threads x registers per thread, Static Shared Memory = blocks x static
 * shared memory per block, the throughputs weighted over the kernels that
 * have counter values.
 *
 * Recording format (text, one record per line; written by
 * gpu/cupti/inject.c, described in docs/profile.md):
 *   kace-cupti 1
 *   clock monotonic                  (times are CLOCK_MONOTONIC ns; else CUPTI's own clock)
 *   device <name ...>
 *   kernel <start_ns> <end_ns> <gx> <gy> <gz> <bx> <by> <bz> <regs/thread> <static smem B> <dynamic smem B> <name ...>
 *   counters <sm %> <dram %> <mem %> <gx> <gy> <gz> <bx> <by> <bz> <name ...>
 *   dropped <records CUPTI dropped>
 *   error <message ...>              (the injection library could not do something)
 * Records with unusable measured values (counters nan, -nan, inf, negative
 * or above 1000; a grid or block size 0; an end before the start) are left
 * out and counted (kace_kernel_info.n_skipped), not refused: one odd value
 * must not lose a whole recording. Syntax errors are refused.
 * A kernel's counters are those recorded for a launch with the same name,
 * grid and block (the library profiles the first launches of each such
 * signature; every launch gets an activity record).
 */
#ifndef KACE_KERNELS_H
#define KACE_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "kace/import.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KACE_CUPTI_OUTPUT_ENV "KACE_CUPTI_OUTPUT" /* where libkace_cupti.so writes */

typedef struct kace_kernel_recording kace_kernel_recording;

/* Parses a whole recording; errors name origin:line:column. A last line
 * without '\n' (the workload was killed while the library wrote) is
 * ignored. */
kace_status kace_kernels_parse(kace_ctx *ctx, const char *data, size_t len, const char *origin,
                               kace_kernel_recording **out);
kace_status kace_kernels_parse_file(kace_ctx *ctx, const char *path, kace_kernel_recording **out);
void kace_kernels_free(kace_kernel_recording **r);

typedef struct kace_kernel_info {
    size_t n_kernels, n_counters, n_dropped, n_errors;
    bool monotonic_clock;
    const char *device;    /* "" when not recorded */
    const char *first_error; /* "" when none */
    size_t n_skipped;        /* well-formed records with unusable values (nan or negative counters, a 0 size,
                                an end before the start), left out */
    const char *first_skipped; /* "origin:line:col: what" of the first, "" when none */
} kace_kernel_info;
void kace_kernels_info(const kace_kernel_recording *r, kace_kernel_info *info);

enum {
    KACE_KM_THREADS,
    KACE_KM_SM,
    KACE_KM_DRAM,
    KACE_KM_MEM,
    KACE_KM_REGISTERS,
    KACE_KM_SMEM,
    KACE_KM_AVG_THREAD,
    KACE_KM_SHORT,
    KACE_KM_LONG,
    KACE_KM_AVE_LENGTH,
    KACE_KM_RATIO,
    KACE_KM_N
};

typedef struct kace_kernel_summary {
    double value[KACE_KM_N];
    bool have[KACE_KM_N];
    size_t n_kernels;        /* kernels in the time range */
    size_t n_before;         /* kernels of the recording that started before it: a profiler that
                                counts launches (ncu --launch-skip) starts at the same kernel */
    size_t n_with_counters;  /* of which had counter values */
    double kernel_time_s;    /* sum of their durations */
    double counter_time_share; /* duration share of the kernels with counters */
} kace_kernel_summary;

/* The metric name a summary value is stored under ("Threads", ...). */
const char *kace_kernel_metric_name(int km);

/* Reduces the kernels that started in [from_ns, to_ns) (to_ns 0: no end).
 * Fails when no kernel is in the range or their durations sum to 0. */
kace_status kace_kernels_reduce(kace_ctx *ctx, const kace_kernel_recording *r, int64_t from_ns, int64_t to_ns,
                                kace_kernel_summary *out);

/* One kernel signature (name, grid, block) and its GPU time in a range. */
typedef struct kace_kernel_signature {
    const char *name; /* lives as long as the recording */
    uint32_t grid[3], block[3];
    size_t launches;
    double time_s; /* the sum of its launches' durations */
} kace_kernel_signature;

/* The signatures of the kernels that started in [from_ns, to_ns) (to_ns 0:
 * no end), the longest GPU time first (kace profile replays the first
 * ones). *out is malloc'd (free() it); NULL and *n = 0 when none. */
kace_status kace_kernels_signatures(kace_ctx *ctx, const kace_kernel_recording *r, int64_t from_ns, int64_t to_ns,
                                    kace_kernel_signature **out, size_t *n);

/* ---- building a profile batch (kace profile) ------------------------------ */

/* An empty batch for the values of one profiling run (kind: kernel profile;
 * set: origin). Free with kace_import_batch_free. */
kace_status kace_profile_batch_new(kace_ctx *ctx, const char *origin, kace_import_batch **out);
/* Adds one profile value (NaN: stored as missing). */
kace_status kace_profile_batch_add(kace_ctx *ctx, kace_import_batch *b, const char *workload, const char *metric,
                                   double value);
/* Adds a summary's values. */
kace_status kace_profile_batch_add_kernels(kace_ctx *ctx, kace_import_batch *b, const char *workload,
                                           const kace_kernel_summary *s);

#ifdef __cplusplus
}
#endif

#endif
