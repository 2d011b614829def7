/* lu: a LINPACK-style dense solve, the second program of Krintz & Wolski's quantum experiment
 * (Table 1: "LINPACK LU decomposition, without ATLAS optimization").
 *
 * Like LINPACK's dgefa/dgesl: a column-major N x N matrix from a fixed pseudo-random
 * generator, LU factorisation with partial pivoting by columns (find the pivot, swap, scale,
 * then a daxpy per remaining column), forward and back substitution for b = A * ones, and the
 * normalised residual. Plain C loops, no BLAS, deterministic.
 *
 *   lu [N] [--adapt] [--stats]      default N = 1500 (an 18 MB matrix)
 *
 * --stats prints the compute phase's times, context switches and policy on stderr (below).
 * --adapt calls osl_adapt("compute") before the factorisation (see fib.c). The factorisation
 * and solve are the oslens region "compute". Output (deterministic for a given binary):
 *   lu n=N residual=R logdet=D checksum=C
 * (R: normalised residual; D: log |det A| from the pivots; C: sum of the solution, ~N)
 */
#define _GNU_SOURCE
#include <math.h>
#include <oslens.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/resource.h>
#include <time.h>

#include "phase_stats.h"

#define A_(i, j) a[(size_t)(j) * lda + (i)]

static void matgen(double *a, int lda, int n, double *b) {
    uint64_t s = 1325; /* fixed seed: the same matrix every run */
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            A_(i, j) = (double)(s >> 11) / 9007199254740992.0 - 0.5; /* [-0.5, 0.5) */
        }
    for (int i = 0; i < n; i++) b[i] = 0.0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) b[i] += A_(i, j); /* b = A * ones: the solution is all ones */
}

static void daxpy(int n, double da, const double *dx, double *dy) {
    for (int i = 0; i < n; i++) dy[i] += da * dx[i];
}

/* LU with partial pivoting, in place; ipvt[k] = the pivot row of column k. Returns 0, or
 * k + 1 when column k has a zero pivot. */
static int dgefa(double *a, int lda, int n, int *ipvt) {
    int info = 0;
    for (int k = 0; k < n - 1; k++) {
        int l = k;
        double amax = fabs(A_(k, k));
        for (int i = k + 1; i < n; i++)
            if (fabs(A_(i, k)) > amax) { amax = fabs(A_(i, k)); l = i; }
        ipvt[k] = l;
        if (A_(l, k) == 0.0) { info = k + 1; continue; }
        if (l != k) { double t = A_(l, k); A_(l, k) = A_(k, k); A_(k, k) = t; }
        double t = -1.0 / A_(k, k);
        for (int i = k + 1; i < n; i++) A_(i, k) *= t;
        for (int j = k + 1; j < n; j++) {
            double tj = A_(l, j);
            if (l != k) { A_(l, j) = A_(k, j); A_(k, j) = tj; }
            daxpy(n - k - 1, tj, &A_(k + 1, k), &A_(k + 1, j));
        }
    }
    ipvt[n - 1] = n - 1;
    if (A_(n - 1, n - 1) == 0.0) info = n;
    return info;
}

/* Solve A x = b with the factors from dgefa; b is overwritten by x. */
static void dgesl(const double *a, int lda, int n, const int *ipvt, double *b) {
    for (int k = 0; k < n - 1; k++) { /* L y = P b */
        int l = ipvt[k];
        double t = b[l];
        if (l != k) { b[l] = b[k]; b[k] = t; }
        daxpy(n - k - 1, t, &A_(k + 1, k), &b[k + 1]);
    }
    for (int k = n - 1; k >= 0; k--) { /* U x = y */
        b[k] /= A_(k, k);
        daxpy(k, -b[k], &A_(0, k), &b[0]);
    }
}

int main(int argc, char **argv) {
    int n = 1500, adapt = 0, stats = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--adapt") == 0) adapt = 1;
        else if (strcmp(argv[i], "--stats") == 0) stats = 1;
        else if (argv[i][0] >= '0' && argv[i][0] <= '9') n = atoi(argv[i]);
        else { fprintf(stderr, "usage: lu [N] [--adapt] [--stats]\n"); return 2; }
    }
    if (n < 2 || n > 20000) { fprintf(stderr, "lu: N must be in 2..20000\n"); return 2; }
    int lda = n;
    double *a = malloc(sizeof(double) * (size_t)lda * n), *a0 = malloc(sizeof(double) * (size_t)lda * n);
    double *b = malloc(sizeof(double) * n), *x = malloc(sizeof(double) * n);
    int *ipvt = malloc(sizeof(int) * n);
    if (!a || !a0 || !b || !x || !ipvt) { fprintf(stderr, "lu: out of memory\n"); return 1; }
    matgen(a, lda, n, b);
    memcpy(a0, a, sizeof(double) * (size_t)lda * n);
    memcpy(x, b, sizeof(double) * n);

    if (adapt) {
        int err = osl_adapt("compute");
        if (err) fprintf(stderr, "lu: osl_adapt(\"compute\"): %s\n", strerror(err));
    }
    if (stats) stats_begin();
    osl_region_begin("compute");
    int info = dgefa(a, lda, n, ipvt);
    if (info == 0) dgesl(a, lda, n, ipvt, x);
    osl_region_end("compute");
    if (stats) stats_end();
    if (adapt) osl_adapt("default");
    if (info) { fprintf(stderr, "lu: singular matrix (column %d)\n", info); return 1; }

    /* normalised residual ||A x - b||_inf / (n ||A||_inf ||x||_inf eps), as LINPACK prints */
    double rmax = 0, anorm = 0, xnorm = 0, sum = 0;
    for (int i = 0; i < n; i++) {
        double r = -b[i], row = 0;
        for (int j = 0; j < n; j++) { r += a0[(size_t)j * lda + i] * x[j]; row += fabs(a0[(size_t)j * lda + i]); }
        if (fabs(r) > rmax) rmax = fabs(r);
        if (row > anorm) anorm = row;
        if (fabs(x[i]) > xnorm) xnorm = fabs(x[i]);
        sum += x[i];
    }
    double logdet = 0;
    for (int k = 0; k < n; k++) logdet += log(fabs(a[(size_t)k * lda + k]));
    double resid = rmax / (n * anorm * xnorm * 2.220446049250313e-16);
    printf("lu n=%d residual=%.3f logdet=%.9f checksum=%.9f\n", n, resid, logdet, sum);
    free(a); free(a0); free(b); free(x); free(ipvt);
    return resid < 100.0 ? 0 : 1;
}
