/* Duration-weighted means, as Nsight Compute's per-run figures are reduced
 * (lib/data/ncu.c for ncu exports, lib/data/kernels.c for kace's own recordings). */
#ifndef KACE_WEIGHTED_MEAN_H
#define KACE_WEIGHTED_MEAN_H

#include <stddef.h>

typedef struct wsum {
    double num, den; /* sum of value x weight, sum of weights */
    size_t n;        /* values added */
} wsum;

static inline void wsum_add(wsum *w, double x, double d)
{
    w->num += x * d;
    w->den += d;
    w->n++;
}

#endif
