/* The probe's arithmetic and parsing (lib/measure/probe.c), for its tests. */
#ifndef KACE_PROBE_INTERNAL_H
#define KACE_PROBE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "kace/progress.h"

/* The coefficient of variation (standard deviation / mean) of the
 * throughput over windows of window_s starting at each record of r (n, time
 * ascending): a window from record i ends at the first record at least
 * window_s later. NaN when the records span less than 2 x window_s (the
 * windows' starts then cover less than one window) or fewer than 3 windows
 * fit. */
double kace_probe_window_cv(const kace_progress_record *r, size_t n, double window_s);

/* The median time between consecutive records, in seconds (NaN: n < 2). */
double kace_probe_median_gap_s(const kace_progress_record *r, size_t n);

/* "KEY:   N kB" in /proc/meminfo or /proc/PID/status text: N in *kib.
 * False when the key is missing or its value is not such a number. */
bool kace_probe_kib_field(const char *text, const char *key, unsigned long long *kib);

#endif
