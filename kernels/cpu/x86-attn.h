/* AVX2 attention over a KV cache and the SwiGLU activation (kernels/cpu/x86-attn.c),
 * called by kern_attn_head() and kern_silu_mul() in kernels/ops.c before their generic
 * paths. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/types.h"

#include <math.h>

/* The term sink g adds to a softmax's denominator whose running max is m (scores
 * e^(s_j - m)): e^(sinks[g] - m); 0 without sinks. */
static inline float kern_attn_sink(const float *sinks, int64_t g, float m) {
    return sinks ? expf(sinks[g] - m) : 0.0f;
}

/* kern_attn_head_window()'s contract (kv_lo may be NULL). Runs when the dispatch level
 * is not "ref", K and V are each one of the 32-value block types (q8_0, q4_0, q4_1, q5_0,
 * q5_1, iq4_nl) or f32/f16/bf16, both head sizes are multiples of 32 and n_group fits the
 * scratch; returns false (nothing written) otherwise.
 *
 * With a block-type K, scores are integer dots of each query quantized to q8_0 (per 32
 * values d = amax/127, codes rounded to nearest even) with the cached blocks, so they
 * differ from the generic path's f32 dots by the queries' rounding (<= amax_b/254 per
 * value); a float K meets the f32 query. V rows are decoded to f32 with the generic
 * path's values. */
bool kern_attn_q_head(float *out, int64_t out_stride, const float *q, int64_t q_stride,
                      int64_t n_tok, int64_t n_group, const int32_t *kv_lo, const int32_t *n_kv,
                      const void *k, enum kern_type kt, size_t k_stride, const void *v,
                      enum kern_type vt, size_t v_stride, int64_t head_dim_k, int64_t head_dim_v,
                      float scale, const float *sinks, float *scratch);

/* kern_silu_mul()'s contract with a vector e^x (kernels/cpu/x86-attn.c: within a few ulp
 * of expf) for the first values, 8 at a time; returns how many it wrote (0 at the "ref"
 * level or off x86-64): the caller does the rest. */
int64_t kern_silu_mul_x86(float *y, const float *g, const float *u, int64_t n);
/* The same for kern_swiglu_oai(). */
int64_t kern_swiglu_oai_x86(float *y, const float *g, const float *u, int64_t n, float alpha,
                            float limit);
