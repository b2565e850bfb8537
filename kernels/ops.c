/* Row ops, RoPE and the attention helpers (reference-quality C, see kernels/ops.h). */
#include "kernels/ops.h"

#include "base/base.h"
#include "kernels/cpu/x86-attn.h"

#include <math.h>
#include <string.h>

void kern_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    double ss = 0; /* double: long rows of large activations stay exact enough */
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / (double)n + eps));
    if (w)
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale * w[i];
    else
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale;
}

void kern_layernorm(float *y, const float *x, const float *w, const float *b, int64_t n,
                    float eps) {
    double sum = 0, ss = 0; /* double, as kern_rmsnorm */
    for (int64_t i = 0; i < n; i++) sum += x[i];
    const float mean = (float)(sum / (double)n);
    for (int64_t i = 0; i < n; i++) {
        const float c = x[i] - mean;
        ss += (double)(c * c);
    }
    const float scale = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    for (int64_t i = 0; i < n; i++) {
        float v = (x[i] - mean) * scale;
        if (w) v *= w[i];
        if (b) v += b[i];
        y[i] = v;
    }
}

void kern_softmax(float *x, int64_t n) {
    if (n <= 0) return;
    float max = x[0];
    for (int64_t i = 1; i < n; i++) max = x[i] > max ? x[i] : max;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

void kern_silu_mul(float *y, const float *g, const float *u, int64_t n) {
    for (int64_t i = kern_silu_mul_x86(y, g, u, n); i < n; i++) {
        float v = g[i];
        y[i] = v / (1.0f + expf(-v)) * u[i];
    }
}

void kern_swiglu_oai(float *y, const float *g, const float *u, int64_t n, float alpha, float limit) {
    for (int64_t i = kern_swiglu_oai_x86(y, g, u, n, alpha, limit); i < n; i++) {
        const float x = fminf(g[i], limit), v = fmaxf(fminf(u[i], limit), -limit);
        y[i] = x / (1.0f + expf(-alpha * x)) * (v + 1.0f);
    }
}

void kern_add(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

/* ---- RoPE ---------------------------------------------------------------------------- */

/* The dim (as a pair index times two) at which a rotation of period 2π·n_rot positions
 * makes n_rot full turns over n_ctx_orig positions (YaRN's correction dims). */
static float yarn_corr_dim(int64_t n_dims, int64_t n_ctx_orig, float n_rot, float base) {
    return (float)n_dims * logf((float)n_ctx_orig / (n_rot * 2.0f * (float)M_PI)) /
           (2.0f * logf(base));
}

/* 1 below low, 0 above high, linear in between (over the pair index i0/2). */
static float yarn_ramp(float low, float high, int64_t i0) {
    float y = ((float)i0 / 2.0f - low) / MAX(0.001f, high - low);
    return 1.0f - MIN(1.0f, MAX(0.0f, y));
}

void kern_rope_cache(float *cs, int32_t pos, const struct kern_rope_params *p) {
    float lo = 0, hi = 0, mscale = p->attn_factor;
    if (p->ext_factor != 0) {
        lo = floorf(yarn_corr_dim(p->n_dims, p->n_ctx_orig, p->beta_fast, p->freq_base));
        hi = ceilf(yarn_corr_dim(p->n_dims, p->n_ctx_orig, p->beta_slow, p->freq_base));
        lo = MAX(0.0f, lo);
        hi = MIN((float)(p->n_dims - 1), hi);
        mscale *= 1.0f + 0.1f * logf(1.0f / p->freq_scale);
    }
    for (int64_t i0 = 0; i0 < p->n_dims; i0 += 2) {
        /* theta = pos · base^(-i0/n_dims), in double so long contexts keep their angle */
        double theta = (double)pos * pow((double)p->freq_base, -(double)i0 / (double)p->n_dims);
        if (p->freq_factors) theta /= p->freq_factors[i0 / 2];
        float extrap = (float)theta;
        float angle = p->freq_scale * extrap;
        if (p->ext_factor != 0) {
            float mix = yarn_ramp(lo, hi, i0) * p->ext_factor;
            angle = angle * (1.0f - mix) + extrap * mix;
        }
        cs[i0] = cosf(angle) * mscale;
        cs[i0 + 1] = sinf(angle) * mscale;
    }
}

void kern_rope_apply(float *x, const float *cs, int64_t n_head, int64_t head_dim,
                     const struct kern_rope_params *p) {
    int64_t half = p->n_dims / 2;
    for (int64_t h = 0; h < n_head; h++) {
        float *xh = x + h * head_dim;
        for (int64_t i = 0; i < half; i++) {
            float c = cs[2 * i], s = cs[2 * i + 1];
            /* the pair i: adjacent values, or one from each half (NeoX) */
            int64_t a = p->neox ? i : 2 * i, b = p->neox ? i + half : 2 * i + 1;
            float x0 = xh[a], x1 = xh[b];
            xh[a] = x0 * c - x1 * s;
            xh[b] = x0 * s + x1 * c;
        }
    }
}

/* ---- attention ----------------------------------------------------------------------- */

/* f16 -> f32 without a table or a branch (vectorizes): the 15 magnitude bits shifted into
 * place are the float with exponent bias 15 instead of 127, so multiplying by 2^112
 * rebias it (subnormal halves come out right too); exponent 31 (inf, NaN) maps to 255. */
static inline float f16_to_f32(uint16_t h) {
    uint32_t mag = (uint32_t)(h & 0x7fff) << 13, bits;
    float f;
    memcpy(&f, &mag, 4);
    f *= 0x1p112f;
    memcpy(&bits, &f, 4);
    bits |= (h & 0x7c00) == 0x7c00 ? 0x7f800000u : 0;
    bits |= (uint32_t)(h & 0x8000) << 16;
    memcpy(&f, &bits, 4);
    return f;
}

static inline float bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* q8_0 and q4_0 blocks decoded inline (the traits' to_f32 is a call the vector clones
 * cannot see into): x = d·q, and x = d·(nibble - 8) with the low nibbles of a block's 16
 * bytes holding values 0..15 and the high nibbles values 16..31. */
static inline void q8_0_to_f32(float *d, const struct block_q8_0 *b, int64_t n) {
    for (int64_t i = 0; i < n / QK8_0; i++) {
        float s = f16_to_f32(b[i].d);
        for (int j = 0; j < QK8_0; j++) d[i * QK8_0 + j] = s * (float)b[i].qs[j];
    }
}

static inline void q4_0_to_f32(float *d, const struct block_q4_0 *b, int64_t n) {
    for (int64_t i = 0; i < n / QK4_0; i++) {
        float s = f16_to_f32(b[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            d[i * QK4_0 + j] = s * (float)((b[i].qs[j] & 0x0f) - 8);
            d[i * QK4_0 + j + QK4_0 / 2] = s * (float)((b[i].qs[j] >> 4) - 8);
        }
    }
}

/* The other block types: q4_1 x = d·q + m; q5_0 x = d·(q - 16) and q5_1 x = d·q + m with
 * q's 5th bit j in the little-endian u32 qh; iq4_nl x = d·table[nibble]. */
static inline void q4_1_to_f32(float *d, const struct block_q4_1 *b, int64_t n) {
    for (int64_t i = 0; i < n / QK4_1; i++) {
        float s = f16_to_f32(b[i].d), m = f16_to_f32(b[i].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            d[i * QK4_1 + j] = s * (float)(b[i].qs[j] & 0x0f) + m;
            d[i * QK4_1 + j + QK4_1 / 2] = s * (float)(b[i].qs[j] >> 4) + m;
        }
    }
}

static inline uint32_t qh_u32(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

/* q5_0 (has_m false: offset -16) and q5_1 (offset m) share the code layout */
static inline void q5_to_f32(float *d, const uint8_t *qs, const uint8_t qh[4], float s, float m,
                             bool has_m) {
    uint32_t h = qh_u32(qh);
    float off = has_m ? m : -16.0f * s;
    for (int j = 0; j < 16; j++) {
        int q0 = (qs[j] & 0x0f) | (int)((h >> j) & 1) << 4;
        int q1 = (qs[j] >> 4) | (int)((h >> (j + 16)) & 1) << 4;
        d[j] = s * (float)q0 + off;
        d[j + 16] = s * (float)q1 + off;
    }
}

static inline void iq4_nl_to_f32(float *d, const struct block_iq4_nl *b, int64_t n) {
    for (int64_t i = 0; i < n / QK4_NL; i++) {
        float s = f16_to_f32(b[i].d);
        for (int j = 0; j < QK4_NL / 2; j++) {
            d[i * QK4_NL + j] = s * (float)kern_iq4nl_values[b[i].qs[j] & 0x0f];
            d[i * QK4_NL + j + QK4_NL / 2] = s * (float)kern_iq4nl_values[b[i].qs[j] >> 4];
        }
    }
}

/* dst = n rows of head_dim values of type t, rows src_stride bytes apart, as f32.
 * Inlined into each clone of kern_attn_head() so the loops get its vector width. */
static inline __attribute__((always_inline)) void rows_to_f32(float *dst, const char *src, size_t src_stride, enum kern_type t,
                        int64_t n, int64_t head_dim) {
    for (int64_t j = 0; j < n; j++) {
        const void *row = src + (size_t)j * src_stride;
        float *d = dst + j * head_dim;
        if (t == KERN_TYPE_F32) {
            memcpy(d, row, (size_t)head_dim * sizeof *d);
        } else if (t == KERN_TYPE_F16) {
            const uint16_t *h = row;
            for (int64_t i = 0; i < head_dim; i++) d[i] = f16_to_f32(h[i]);
        } else if (t == KERN_TYPE_BF16) {
            const uint16_t *h = row;
            for (int64_t i = 0; i < head_dim; i++) d[i] = bf16_to_f32(h[i]);
        } else if (t == KERN_TYPE_Q8_0) {
            q8_0_to_f32(d, row, head_dim);
        } else if (t == KERN_TYPE_Q4_0) {
            q4_0_to_f32(d, row, head_dim);
        } else if (t == KERN_TYPE_Q4_1) {
            q4_1_to_f32(d, row, head_dim);
        } else if (t == KERN_TYPE_Q5_0) {
            const struct block_q5_0 *b = row;
            for (int64_t i = 0; i < head_dim / QK5_0; i++)
                q5_to_f32(d + i * QK5_0, b[i].qs, b[i].qh, f16_to_f32(b[i].d), 0, false);
        } else if (t == KERN_TYPE_Q5_1) {
            const struct block_q5_1 *b = row;
            for (int64_t i = 0; i < head_dim / QK5_1; i++)
                q5_to_f32(d + i * QK5_1, b[i].qs, b[i].qh, f16_to_f32(b[i].d), f16_to_f32(b[i].m), true);
        } else if (t == KERN_TYPE_IQ4_NL) {
            iq4_nl_to_f32(d, row, head_dim);
        } else {
            kern_type_traits(t)->to_f32(d, row, head_dim);
        }
    }
}

/* 16 floats as one value (GCC vector extension): each clone keeps it in its widest
 * registers; element-wise IEEE arithmetic, so the same bits in every clone */
typedef float attn_v16 __attribute__((vector_size(64)));

/* a·K_j of 16 keys at once, key j in lane j: kT = the keys transposed, value i of key j at
 * kT[i·KERN_ATTN_TILE + j]. Each key's dot has 16 partial sums (l = i mod 16) added up in
 * order l = 0..15: a fixed order, so the results do not depend on the CPU's vector width
 * (the same additions as the former one-key-at-a-time loop, so the same bits); the
 * lanes being keys, the final sum is 15 vector adds for 16 keys, not 15 scalar adds per
 * key. */
static inline __attribute__((always_inline)) void dot16_keys(float out[16], const float *a,
                                                             const float *kT, int64_t n) {
    attn_v16 acc[16], kv, s = {0};
#pragma GCC unroll 16
    for (int l = 0; l < 16; l++) acc[l] = s;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
#pragma GCC unroll 16
        for (int l = 0; l < 16; l++) {
            memcpy(&kv, kT + (i + l) * KERN_ATTN_TILE, sizeof(kv));
            acc[l] += a[i + l] * kv;
        }
    for (int l = 0; i < n; i++, l++) {
        memcpy(&kv, kT + i * KERN_ATTN_TILE, sizeof(kv));
        acc[l] += a[i] * kv;
    }
#pragma GCC unroll 16
    for (int l = 0; l < 16; l++) s += acc[l];
    memcpy(out, &s, sizeof(s));
}

typedef int32_t attn_i16 __attribute__((vector_size(64)));

/* s[j] = e^(s[j] - m) for j < n, m >= every s[j], 16 at a time: Cody–Waite reduction
 * x = k·ln2 + r (|r| <= ln2/2) and the degree-7 Cephes polynomial for e^r (about 1 ulp),
 * then 2^k into the exponent. x below -87 (e^x < 2^-125, nothing next to the max's 1) is
 * clamped there. Element-wise IEEE operations only: the same bits in every clone, where
 * the libm expf() per key was a call and a scalar chain. */
static inline __attribute__((always_inline)) void attn_exp_sub(float *s, int64_t n, float m) {
    for (int64_t j = 0; j < n; j += 16) {
        attn_v16 x = {0};
        int64_t c = MIN((int64_t)16, n - j);
        memcpy(&x, s + j, (size_t)c * sizeof(float));
        x = x - m;
        /* clamp (the lanes past c too: finite); C has no vector ?: so blend the bits */
        attn_i16 lt = x < -87.0f, xi, lo;
        attn_v16 lof = (attn_v16){0} - 87.0f;
        memcpy(&xi, &x, sizeof(xi));
        memcpy(&lo, &lof, sizeof(lo));
        xi = (xi & ~lt) | (lo & lt);
        memcpy(&x, &xi, sizeof(x));
        attn_i16 k = __builtin_convertvector(x * 1.44269504088896341f - 0.5f, attn_i16);
        attn_v16 kf = __builtin_convertvector(k, attn_v16);
        attn_v16 r = x - kf * 0.693359375f - kf * -2.12194440e-4f;
        attn_v16 p = 1.9875691500e-4f * r + 1.3981999507e-3f;
        p = p * r + 8.3334519073e-3f;
        p = p * r + 4.1665795894e-2f;
        p = p * r + 1.6666665459e-1f;
        p = p * r + 5.0000001201e-1f;
        p = p * r * r + r + 1.0f;
        attn_i16 e = (k + 127) << 23;
        attn_v16 two_k;
        memcpy(&two_k, &e, sizeof(two_k));
        p = p * two_k;
        memcpy(s + j, &p, (size_t)c * sizeof(float));
    }
}

int64_t kern_attn_scratch_floats(int64_t n_query, int64_t head_dim_k, int64_t head_dim_v) {
    /* K tile, V tile, scores of a tile, then per query: max, sum, accumulator; then the K
     * tile transposed */
    return KERN_ATTN_TILE * (2 * head_dim_k + head_dim_v + 1) + n_query * (2 + head_dim_v);
}

/* The body of kern_attn_head() and kern_attn_head_window() (kv_lo NULL: every key from
 * 0), inlined into each clone of both. */
static inline __attribute__((always_inline)) void
attn_head(float *out, int64_t out_stride, const float *q, int64_t q_stride, int64_t n_tok,
          int64_t n_group, const int32_t *kv_lo, const int32_t *n_kv, const void *k,
          enum kern_type kt, size_t k_stride, const void *v, enum kern_type vt, size_t v_stride,
          int64_t head_dim_k, int64_t head_dim_v, float scale, const float *sinks,
          float *scratch) {
    /* SIMD levels: int8 dots against quantized K blocks, f32 tiles (kernels/cpu/x86-attn.c) */
    if (kern_attn_q_head(out, out_stride, q, q_stride, n_tok, n_group, kv_lo, n_kv, k, kt,
                         k_stride, v, vt, v_stride, head_dim_k, head_dim_v, scale, sinks, scratch))
        return;
    const int64_t n_query = n_tok * n_group;
    float *kt_f32 = scratch;                                 /* (TILE, head_dim_k) */
    float *vt_f32 = kt_f32 + KERN_ATTN_TILE * head_dim_k;    /* (TILE, head_dim_v) */
    float *s = vt_f32 + KERN_ATTN_TILE * head_dim_v;         /* (TILE) */
    float *m = s + KERN_ATTN_TILE;                           /* (n_query) running max */
    float *l = m + n_query;                                  /* (n_query) running sum */
    float *acc = l + n_query;                                /* (n_query, head_dim_v) */
    float *kT = acc + n_query * head_dim_v;                  /* (head_dim_k, TILE) */
    int64_t max_kv = 0, min_lo = kv_lo ? INT64_MAX : 0;
    for (int64_t t = 0; t < n_tok; t++) max_kv = MAX(max_kv, (int64_t)n_kv[t]);
    for (int64_t t = 0; kv_lo && t < n_tok; t++) min_lo = MIN(min_lo, (int64_t)kv_lo[t]);
    for (int64_t i = 0; i < n_query; i++) m[i] = -INFINITY, l[i] = 0;
    memset(acc, 0, (size_t)(n_query * head_dim_v) * sizeof *acc);

    for (int64_t j0 = min_lo; j0 < max_kv; j0 += KERN_ATTN_TILE) {
        int64_t jn = MIN((int64_t)KERN_ATTN_TILE, max_kv - j0);
        rows_to_f32(kt_f32, (const char *)k + (size_t)j0 * k_stride, k_stride, kt, jn, head_dim_k);
        rows_to_f32(vt_f32, (const char *)v + (size_t)j0 * v_stride, v_stride, vt, jn, head_dim_v);
        /* keys transposed for dot16_keys(), zero past jn up to a multiple of 16 keys */
        int64_t jn16 = (jn + 15) / 16 * 16;
        for (int64_t d = 0; d < head_dim_k; d++)
            for (int64_t j = 0; j < jn16; j++)
                kT[d * KERN_ATTN_TILE + j] = j < jn ? kt_f32[j * head_dim_k + d] : 0.0f;
        for (int64_t t = 0; t < n_tok; t++) {
            int64_t nk = MIN(jn, (int64_t)n_kv[t] - j0); /* this token's keys in the tile */
            /* its first key in the tile (a window starts later); dots from a multiple of 16 */
            int64_t ja = kv_lo ? MIN(nk, MAX((int64_t)0, (int64_t)kv_lo[t] - j0)) : 0;
            for (int64_t g = 0; nk > ja && g < n_group; g++) {
                const int64_t i = t * n_group + g;
                const float *qi = q + t * q_stride + g * head_dim_k;
                float *ai = acc + i * head_dim_v;
                float tile_max = -INFINITY;
                for (int64_t j = ja / 16 * 16; j < nk; j += 16) {
                    float d16[16];
                    dot16_keys(d16, qi, kT + j, head_dim_k);
                    for (int64_t e = MAX((int64_t)0, ja - j); e < 16 && j + e < nk; e++) {
                        s[j + e] = scale * d16[e];
                        tile_max = MAX(tile_max, s[j + e]);
                    }
                }
                /* online softmax: rescale what was summed under the old max */
                float m_new = MAX(m[i], tile_max), c = expf(m[i] - m_new), sum = 0;
                attn_exp_sub(s + ja, nk - ja, m_new); /* now the weights p_j */
                for (int64_t j = ja; j < nk; j++) sum += s[j];
                /* ai = ai·c + Σ_j p_j·V_j, 16 columns at a time over all the tile's keys: the
                 * 16 partial sums stay in a register (added key by key into ai they went
                 * through memory, a store-to-load chain per key); each column's additions
                 * keep their order, so the results are the same bits */
                int64_t d0 = 0;
                for (; d0 + 16 <= head_dim_v; d0 += 16) {
                    attn_v16 a16, vj;
                    memcpy(&a16, ai + d0, sizeof(a16));
                    a16 *= c;
                    for (int64_t j = ja; j < nk; j++) {
                        memcpy(&vj, vt_f32 + j * head_dim_v + d0, sizeof(vj));
                        a16 += s[j] * vj;
                    }
                    memcpy(ai + d0, &a16, sizeof(a16));
                }
                for (int64_t d = d0; d < head_dim_v; d++) {
                    float a = ai[d] * c;
                    for (int64_t j = ja; j < nk; j++) a += s[j] * vt_f32[j * head_dim_v + d];
                    ai[d] = a;
                }
                l[i] = l[i] * c + sum;
                m[i] = m_new;
            }
        }
    }
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t g = 0; g < n_group; g++) {
            const int64_t i = t * n_group + g;
            float inv = l[i] > 0 ? 1.0f / (l[i] + kern_attn_sink(sinks, g, m[i])) : 0;
            float *o = out + t * out_stride + g * head_dim_v;
            for (int64_t d = 0; d < head_dim_v; d++) o[d] = acc[i * head_dim_v + d] * inv;
        }
}

/* one clone per vector width, picked at load time by CPU features (ifunc) */
KERN_CLONES
void kern_attn_head(float *out, int64_t out_stride, const float *q, int64_t q_stride,
                    int64_t n_tok, int64_t n_group, const int32_t *n_kv, const void *k,
                    enum kern_type kt, size_t k_stride, const void *v, enum kern_type vt,
                    size_t v_stride, int64_t head_dim_k, int64_t head_dim_v, float scale,
                    float *scratch) {
    attn_head(out, out_stride, q, q_stride, n_tok, n_group, NULL, n_kv, k, kt, k_stride, v, vt,
              v_stride, head_dim_k, head_dim_v, scale, NULL, scratch);
}

KERN_CLONES
void kern_attn_head_window(float *out, int64_t out_stride, const float *q, int64_t q_stride,
                           int64_t n_tok, int64_t n_group, const int32_t *kv_lo,
                           const int32_t *n_kv, const void *k, enum kern_type kt,
                           size_t k_stride, const void *v, enum kern_type vt, size_t v_stride,
                           int64_t head_dim_k, int64_t head_dim_v, float scale,
                           const float *sinks, float *scratch) {
    attn_head(out, out_stride, q, q_stride, n_tok, n_group, kv_lo, n_kv, k, kt, k_stride, v, vt,
              v_stride, head_dim_k, head_dim_v, scale, sinks, scratch);
}

/* ---- gemma ops ----------------------------------------------------------------------- */

/* GELU, tanh form: 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))) */
static inline float gelu_tanh(float x) {
    const float c = 0.7978845608028654f; /* sqrt(2/π) */
    return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}

void kern_gelu_mul(float *y, const float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = gelu_tanh(g[i]) * u[i];
}

void kern_gelu(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = gelu_tanh(x[i]);
}

void kern_softcap(float *x, int64_t n, float cap) {
    const float inv = 1.0f / cap;
    for (int64_t i = 0; i < n; i++) x[i] = cap * tanhf(x[i] * inv);
}

void kern_scale(float *x, int64_t n, float s) {
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}
