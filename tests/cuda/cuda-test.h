/* Helpers of the cuda tests: comparing logits of two runs. Header-only. */
#pragma once

#include <stdint.h>

/* Σ (b - a)² and Σ a² of n values, added to *num and *den (NMSE = num / den). */
static inline void nmse_add(const float *b, const float *a, int64_t n, double *num, double *den) {
    for (int64_t i = 0; i < n; i++) {
        *num += ((double)b[i] - a[i]) * ((double)b[i] - a[i]);
        *den += (double)a[i] * a[i];
    }
}

/* Σ (a - ref)² / Σ ref² of one row */
static inline double nmse(const float *a, const float *ref, int64_t n) {
    double num = 0, den = 1e-30;
    nmse_add(a, ref, n, &num, &den);
    return num / den;
}

/* index of the largest of n values, the first on ties */
static inline int32_t argmax(const float *x, int64_t n) {
    int32_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = (int32_t)i;
    return best;
}
