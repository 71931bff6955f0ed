/* kace export: a store's dataset written back as the CSV files kace import
 * reads (docs/data.md, "Exporting"), so that a dataset measured into one
 * store can be read, versioned and imported into another. */
#ifndef KACE_STORE_EXPORT_H
#define KACE_STORE_EXPORT_H

#include <stddef.h>

#include "kace/store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kace_export_options {
    const char *const *sets; /* only the runs of these sets (n_sets of them); */
    size_t n_sets;           /* 0: every set, and the published splits too */
} kace_export_options;

typedef struct kace_export_stats {
    size_t files;          /* CSV files written (README.md not counted) */
    size_t folders;        /* one per source (GPU, tool, date) */
    size_t workloads;      /* with a profile value or a run in the files */
    size_t profile_values; /* stored values, known-missing ones included */
    size_t runs, failed_runs;
    size_t runs_left_out;  /* failed runs with no throughput at all, and failed
                              solo runs: the import format cannot say them */
    size_t splits;
} kace_export_stats;

/* Writes the store's dataset into the existing folder dir: per source a
 * folder with its profiles (profiles*.csv) and its runs (k<K>/<set>.csv, a
 * colocation file, or a raw-campaign file where the set holds failed runs
 * or the same members at mirrored shares; runs.csv, kace measure's record of
 * its measured runs, failed ones included, which kace import reads past),
 * splits.csv, and README.md saying how to import them. Each file is written durably (temporary file, fsync,
 * rename). Numbers are written with the fewest digits (15 to 17) that read
 * back as the stored double: an import of the folder gives back
 * exactly the stored values. A run's mode and repetition, which a file
 * cannot say, go into its file's (and so its set's) name: "-timeslice" and
 * "-rep<N>". KACE_ERR_INVALID when a set's name cannot be a file name or two
 * sets would share one. stats may be NULL. */
kace_status kace_store_export(kace_ctx *ctx, kace_store *store, const char *dir, const kace_export_options *opt,
                              kace_export_stats *stats);

typedef struct kace_dataset_stats {
    size_t files;            /* CSV and TSV files written (README.md not counted) */
    size_t workloads;        /* with an exclusive throughput (profiles/system.csv) */
    size_t kernel_profiles;  /* with kernel metrics (profiles/kernel.csv) */
    size_t exclusive_curves; /* alone under MPS at other shares */
    size_t runs, failed_runs;
    size_t colocations; /* rows of the colocations/ files: one per colocation, its ok repetitions' mean */
    size_t repeated;    /* colocations measured ok >= 3 times */
    size_t ncu_workloads; /* compared with Nsight Compute (ncu/compare.csv) */
} kace_dataset_stats;

/* Writes a device campaign's dataset into the existing folder dir, in the
 * layout kept in the repository (data/h200): profiles/ (kernel.csv,
 * system.csv, exclusive-by-mps.csv), colocations/ (pairs, triples,
 * mps-splits, timeslice-pairs...: each colocation's mean over its ok
 * repetitions), campaign/ (runs.csv: every measured run and member, failed
 * ones included; spread.csv: the run-to-run spread; visits.tsv: calls),
 * ncu/compare.csv (kace's six kernel metrics against each workload's latest
 * ncu export the campaign stored, once one is) and a README.md generated
 * from them: GPU, driver, CUDA and torch of each call, dates, the noise
 * floor, how the members' processes ended, the ncu comparison, the goals met.
 * calls: the calls' lines (UTC start, "GPU, driver, memory", CUDA, torch,
 * bundle; tab-separated), NULL when not recorded. The same store and calls
 * always give the same bytes. Each file is written durably. stats may be NULL. */
kace_status kace_store_export_dataset(kace_ctx *ctx, kace_store *store, const char *dir, const char *calls,
                                      kace_dataset_stats *stats);

#ifdef __cplusplus
}
#endif

#endif
