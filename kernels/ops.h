/* Element-wise and row ops of the transformer layer (f32 activations), RoPE, and the
 * attention helpers that read the KV cache in its stored type.
 *
 * Reference-quality C: the compiler vectorizes the f32 loops; no allocation; thread-safe
 * (callers split work across threads themselves). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/types.h"

/* y = x / sqrt(mean(x²) + eps) * w   (w may be NULL: no weight); y may equal x */
void kern_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps);
/* x = softmax(x) in place, max-subtracted */
void kern_softmax(float *x, int64_t n);
/* y = silu(g) * u   (SwiGLU); y may equal g or u */
void kern_silu_mul(float *y, const float *g, const float *u, int64_t n);
/* y += x */
void kern_add(float *y, const float *x, int64_t n);

/* ---- RoPE ---------------------------------------------------------------------------- */

/* How a position becomes rotation angles: theta_i = pos · base^(-2i/n_dims) for the pair
 * i < n_dims/2, then scaled (llama.cpp / ggml semantics):
 *   freq_factors: theta_i /= freq_factors[i] (Llama 3 scaling; NULL = none)
 *   freq_scale:   interpolated angle theta_i · freq_scale (linear scaling: 1/factor)
 *   ext_factor:   YaRN mix of the interpolated and extrapolated angle per pair, with the
 *                 ramp between the dims given by beta_fast and beta_slow over n_ctx_orig;
 *                 0 = no YaRN. With YaRN the magnitude is scaled by
 *                 attn_factor · (1 + 0.1·ln(1/freq_scale)), without it by attn_factor. */
struct kern_rope_params {
    int64_t n_dims; /* rotated values per head (even, <= head_dim); the rest pass through */
    bool neox;      /* pairs (x[i], x[i+n_dims/2]) instead of (x[2i], x[2i+1]) */
    float freq_base;
    float freq_scale;
    float ext_factor;
    float attn_factor;
    float beta_fast, beta_slow;
    int64_t n_ctx_orig;
    const float *freq_factors; /* n_dims/2 values or NULL */
};

/* cs = (cos θ_i, sin θ_i) pairs for i < n_dims/2 at position pos (n_dims floats). */
void kern_rope_cache(float *cs, int32_t pos, const struct kern_rope_params *p);
/* Rotates n_head heads of head_dim values (head stride head_dim) in place by cs. */
void kern_rope_apply(float *x, const float *cs, int64_t n_head, int64_t head_dim,
                     const struct kern_rope_params *p);

/* ---- attention over a cache in its stored type --------------------------------------- */

/* The query heads that share one KV head (GQA) are handled together, so each cached row
 * is read and converted once for all of them.
 * Scores: s[h·s_stride + j] = scale · Σ_d q_h[d]·K_j[d] for h < n_q, j < n_kv, where q_h =
 * q + h·head_dim and K_j is head_dim values of type kt at (const char *)k + j·k_stride.
 * head_dim must be a multiple of kt's block size. */
void kern_attn_scores(float *s, int64_t s_stride, const float *q, int64_t n_q, const void *k,
                      enum kern_type kt, size_t k_stride, int64_t head_dim, int64_t n_kv,
                      float scale);
/* Weighted sums: y_h[d] = Σ_j p[h·p_stride + j]·V_j[d] for h < n_q, d < head_dim, with
 * y_h = y + h·head_dim and V_j at (const char *)v + j·v_stride, type vt. */
void kern_attn_values(float *y, const float *p, int64_t p_stride, int64_t n_q, const void *v,
                      enum kern_type vt, size_t v_stride, int64_t head_dim, int64_t n_kv);
