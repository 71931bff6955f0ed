/* PNG figures drawn by gnuplot from the CSV files kace eval writes. */
#ifndef KACE_CLI_FIGURES_H
#define KACE_CLI_FIGURES_H

#include <stdbool.h>

#include "kace/eval.h"

/* Training-size study: fig2 (MSE, R2, fit time), fig3 (score vs n_occur),
 * fig4 (policies at n_occur=3), fig5 (per target). Returns 0 on success,
 * -1 when gnuplot is missing or failed (a warning is printed). */
int figures_splits(const char *out_dir, const char *mode, const kace_split_results *r, bool with_xu);
/* Unseen-family and 3-way per-target bar charts. */
int figures_targets(const char *out_dir, const char *mode, bool with_xu);
/* kace eval --groups --splits: fig_groups (best group vs rules, k = 2, 3)
 * and fig_splits (advisor vs fixed splits per policy). */
int figures_beyond(const char *out_dir, bool groups, bool splits);

#endif

/* Runs a gnuplot script in out_dir (0 on success; -1 with a warning when
 * gnuplot is missing or fails). */
int figures_gnuplot(const char *out_dir, const char *script);
