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

/* One clone of a kernel per vector width, picked at load time by CPU features (ifunc).
 * clang before 16 names the ifunc "<name>.ifunc" and never defines <name>, so callers in
 * other files do not link: there the kernel is built once, for the baseline ISA (the
 * results are the same; only the speed differs). */
#if defined(__clang__) && __clang_major__ < 16
#define KERN_CLONES
#else
#define KERN_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

/* y = x / sqrt(mean(x²) + eps) * w   (w may be NULL: no weight); y may equal x */
void kern_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps);
/* y = (x - mean(x)) / sqrt(var(x) + eps) * w + b, the biased variance (LayerNorm; w, b may
 * be NULL: no weight, no bias); y may equal x */
void kern_layernorm(float *y, const float *x, const float *w, const float *b, int64_t n,
                    float eps);
/* x = softmax(x) in place, max-subtracted */
void kern_softmax(float *x, int64_t n);
/* y = silu(g) * u   (SwiGLU); y may equal g or u */
void kern_silu_mul(float *y, const float *g, const float *u, int64_t n);
/* y = x·sigmoid(alpha·x)·(v + 1), x = min(g, limit), v = clamp(u, -limit, limit): gpt-oss's
 * clamped SwiGLU (ggml's SWIGLU_OAI, alpha 1.702, limit 7); y may equal g or u */
void kern_swiglu_oai(float *y, const float *g, const float *u, int64_t n, float alpha, float limit);
/* y += x */
void kern_add(float *y, const float *x, int64_t n);
/* y = gelu(g) * u   (GeGLU, the tanh GELU 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))));
 * y may equal g or u */
void kern_gelu_mul(float *y, const float *g, const float *u, int64_t n);
/* y = gelu(x), the same tanh GELU; y may equal x */
void kern_gelu(float *y, const float *x, int64_t n);
/* x = cap · tanh(x / cap) in place (gemma's logit soft-capping) */
void kern_softcap(float *x, int64_t n, float cap);
/* x *= s */
void kern_scale(float *x, int64_t n, float s);

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

/* ---- Hadamard rotation of KV vectors (DESIGN.md 3.4) ---------------------------------- */

/* Replaces every contiguous block of n_rot values of x (n values, a multiple of n_rot;
 * n_rot a power of two) by H·block, H the normalized Sylvester Hadamard matrix
 * H[i][j] = (-1)^popcount(i & j) / sqrt(n_rot): symmetric and orthonormal, so a second
 * call undoes the first (H·H = I). Computed as a fast Walsh–Hadamard transform
 * (log2(n_rot) butterfly stages, then the 1/sqrt(n_rot) scale). kern_hadamard() is the
 * SIMD clone of kern_ref_hadamard() and gives the same bits. */
void kern_hadamard(float *x, int64_t n, int64_t n_rot);
void kern_ref_hadamard(float *x, int64_t n, int64_t n_rot);

/* ---- attention over a cache in its stored type --------------------------------------- */

/* Keys (and values) per tile: kern_attn_head() converts a tile of cached rows to f32 once
 * and uses it for every query of the call. */
#define KERN_ATTN_TILE 64

/* Floats of scratch kern_attn_head() needs for n_query query vectors. */
int64_t kern_attn_scratch_floats(int64_t n_query, int64_t head_dim_k, int64_t head_dim_v);

/* Attention of a run of tokens against one KV head of one sequence's cache, reading the
 * cached rows in their stored type tile by tile (online softmax, as flash attention):
 *   for token t < n_tok and query head g < n_group (the heads sharing this KV head):
 *     q  = q + t·q_stride + g·head_dim_k            (f32)
 *     out = out + t·out_stride + g·head_dim_v       (f32)
 *     out = Σ_{j < n_kv[t]} softmax_j(scale · q·K_j) · V_j
 *   K_j = head_dim_k values of type kt at (const char *)k + j·k_stride; V_j likewise.
 * Cache types: f32, f16, bf16 and the 32-value block types q8_0, q4_0, q4_1, q5_0, q5_1,
 * iq4_nl (any other type with a to_f32 goes through it); the tiles of these are decoded
 * inline, so each vector clone (AVX-512, AVX2, baseline) vectorizes the decoding with the
 * dot products. On SIMD dispatch levels (not "ref") heads whose sizes are multiples of 32
 * go through kernels/cpu/x86-attn.c instead: a block-type K meets the query quantized to
 * q8_0 there (integer dots; scores move by <= amax/254 per query value). Head sizes must
 * be multiples of the types' block sizes. scratch holds
 * kern_attn_scratch_floats(n_tok · n_group, head_dim_k, head_dim_v) floats. */
void kern_attn_head(float *out, int64_t out_stride, const float *q, int64_t q_stride,
                    int64_t n_tok, int64_t n_group, const int32_t *n_kv, const void *k,
                    enum kern_type kt, size_t k_stride, const void *v, enum kern_type vt,
                    size_t v_stride, int64_t head_dim_k, int64_t head_dim_v, float scale,
                    float *scratch);
/* kern_attn_head() where token t sees only keys kv_lo[t] <= j < n_kv[t] (a sliding
 * window); kv_lo == NULL is kern_attn_head(). sinks (NULL: none): gpt-oss's logit per
 * query head g < n_group that joins the softmax's denominator only (a key with a zero
 * value): out = Σ_j e^(s_j - m)·V_j / (Σ_j e^(s_j - m) + e^(sinks[g] - m)). */
void kern_attn_head_window(float *out, int64_t out_stride, const float *q, int64_t q_stride,
                           int64_t n_tok, int64_t n_group, const int32_t *kv_lo,
                           const int32_t *n_kv, const void *k, enum kern_type kt,
                           size_t k_stride, const void *v, enum kern_type vt, size_t v_stride,
                           int64_t head_dim_k, int64_t head_dim_v, float scale,
                           const float *sinks, float *scratch);
