/* Element-wise and row ops of the transformer layer (f32 activations). */
#pragma once

#include <stdint.h>

/* y = x / sqrt(mean(x²) + eps) * w   (w may be NULL: no weight) */
void kern_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps);
/* x = softmax(x) in place, max-subtracted */
void kern_softmax(float *x, int64_t n);
/* y = silu(g) * u   (SwiGLU) */
void kern_silu_mul(float *y, const float *g, const float *u, int64_t n);
/* y += x */
void kern_add(float *y, const float *x, int64_t n);
