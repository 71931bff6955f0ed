/* Householder QR least squares for small tall systems (base/lstsq.h). */
#include "base/lstsq.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ||R||_1 * ||R^-1||_1 of the p x p upper triangular R (column-major, leading
 * dimension ld), or INFINITY when a diagonal entry is zero. */
static double triangular_cond1(const double *R, size_t ld, int p)
{
    double norm = 0, inv_norm = 0;
    double y[KACE_LSTSQ_MAX_P];
    for (int j = 0; j < p; j++) {
        double col = 0;
        for (int i = 0; i <= j; i++)
            col += fabs(R[(size_t)j * ld + (size_t)i]);
        norm = fmax(norm, col);
        /* Column j of R^-1: R y = e_j, y below j is zero. */
        for (int i = j; i >= 0; i--) {
            double s = i == j ? 1.0 : 0.0;
            for (int k = i + 1; k <= j; k++)
                s -= R[(size_t)k * ld + (size_t)i] * y[k];
            if (R[(size_t)i * ld + (size_t)i] == 0)
                return INFINITY;
            y[i] = s / R[(size_t)i * ld + (size_t)i];
        }
        double inv_col = 0;
        for (int i = 0; i <= j; i++)
            inv_col += fabs(y[i]);
        inv_norm = fmax(inv_norm, inv_col);
    }
    return norm * inv_norm;
}

bool kace_lstsq_qr(const double *A, size_t n, int p, const double *b, double *x)
{
    if (p < 1 || p > KACE_LSTSQ_MAX_P || n < (size_t)p)
        return false;
    double *Q = malloc((n * (size_t)p + n) * sizeof *Q); /* A, then b, overwritten by the factorisation */
    if (!Q)
        return false;
    double *c = Q + n * (size_t)p;
    memcpy(Q, A, n * (size_t)p * sizeof *Q);
    memcpy(c, b, n * sizeof *c);
    bool ok = true;
    for (int k = 0; k < p && ok; k++) {
        double *v = Q + (size_t)k * n; /* column k; rows k.. become the reflector u */
        double ss = 0;
        for (size_t i = (size_t)k; i < n; i++)
            ss += v[i] * v[i];
        double norm = sqrt(ss);
        if (!isfinite(norm) || norm == 0) {
            ok = false; /* a value not finite, or a column already in the span of the earlier ones */
            break;
        }
        /* H = I - u u' / h with u = x - alpha e1, alpha of the sign opposite to x[0]
         * (no cancellation), and h = u'u / 2 = -alpha * u[0]. */
        double alpha = v[k] > 0 ? -norm : norm;
        v[k] -= alpha;
        double h = -alpha * v[k];
        for (int j = k + 1; j <= p; j++) {
            double *w = j < p ? Q + (size_t)j * n : c;
            double s = 0;
            for (size_t i = (size_t)k; i < n; i++)
                s += v[i] * w[i];
            s /= h;
            for (size_t i = (size_t)k; i < n; i++)
                w[i] -= s * v[i];
        }
        v[k] = alpha; /* R's diagonal; R's column k above it is rows 0..k-1 of column k */
    }
    if (ok)
        ok = triangular_cond1(Q, n, p) <= KACE_LSTSQ_MAX_COND;
    if (ok) {
        /* R x = (Q'b)[0..p) */
        for (int i = p - 1; i >= 0; i--) {
            double s = c[i];
            for (int k = i + 1; k < p; k++)
                s -= Q[(size_t)k * n + (size_t)i] * x[k];
            x[i] = s / Q[(size_t)i * n + (size_t)i];
            ok = ok && isfinite(x[i]);
        }
    }
    free(Q);
    return ok;
}
