/* Least squares for the small, tall, well-conditioned systems of the paper's
 * linear model (11 unknowns, 20-300 rows), without LAPACK.
 *
 * Loading LAPACKE for them (its BLAS, OpenBLAS, libgfortran: ~16k relocations)
 * cost more than all the fits of `kace eval --mode paper` together. For a
 * full-rank system the least-squares solution is unique, and Householder QR
 * computes it as stably as LAPACK's SVD (both are backward stable, so they
 * differ by rounding, scaled by the condition number). The solver refuses
 * what it is not meant for (fewer rows than unknowns, a rank-deficient or
 * badly conditioned matrix), and the caller then uses LAPACKE_dgelsd, whose
 * minimum-norm solution is the answer there.
 */
#ifndef KACE_LIB_LSTSQ_H
#define KACE_LIB_LSTSQ_H

#include <stdbool.h>
#include <stddef.h>

/* Largest condition number (1-norm, of the triangular factor R) accepted: at
 * most p times the 2-norm one. Below it the QR solution agrees with
 * LAPACKE_dgelsd's far beyond the digits kace prints (tests/test_lstsq.c). */
#define KACE_LSTSQ_MAX_COND 1e4
/* Most unknowns the solver takes (its triangular factor lives on the stack). */
#define KACE_LSTSQ_MAX_P 32

/* Minimises ||A x - b|| for the column-major n x p matrix A (leading dimension
 * n) by Householder QR, writing the p unknowns to x. A and b are not changed.
 * False, with x unspecified, when n < p, p > KACE_LSTSQ_MAX_P, a value is not
 * finite, the memory runs out, or the condition number of R exceeds
 * KACE_LSTSQ_MAX_COND (rank-deficient included): the caller solves it
 * otherwise. */
bool kace_lstsq_qr(const double *A, size_t n, int p, const double *b, double *x);

#endif
