/* Row ops, RoPE and the attention helpers (reference-quality C, see kernels/ops.h). */
#include "kernels/ops.h"

#include "base/base.h"

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
    for (int64_t i = 0; i < n; i++) {
        float v = g[i];
        y[i] = v / (1.0f + expf(-v)) * u[i];
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

/* Values converted per call of row_chunk_to_f32 (a multiple of every block size). */
#define ATTN_CHUNK 256

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

/* dst = n values (n <= ATTN_CHUNK) of type t starting at value d0 of row src. Returns a
 * pointer to the values: into src itself for f32, else dst. */
static const float *row_chunk_to_f32(float *dst, const void *src, enum kern_type t, int64_t d0,
                                     int64_t n) {
    if (t == KERN_TYPE_F32) return (const float *)src + d0;
    if (t == KERN_TYPE_F16) {
        const uint16_t *h = (const uint16_t *)src + d0;
        for (int64_t i = 0; i < n; i++) dst[i] = f16_to_f32(h[i]);
    } else if (t == KERN_TYPE_BF16) {
        const uint16_t *h = (const uint16_t *)src + d0;
        for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_f32(h[i]);
    } else {
        kern_type_traits(t)->to_f32(dst, (const char *)src + kern_row_size(t, d0), n);
    }
    return dst;
}

void kern_attn_scores(float *s, int64_t s_stride, const float *q, int64_t n_q, const void *k,
                      enum kern_type kt, size_t k_stride, int64_t head_dim, int64_t n_kv,
                      float scale) {
    float buf[ATTN_CHUNK];
    for (int64_t j = 0; j < n_kv; j++) {
        const char *kj = (const char *)k + (size_t)j * k_stride;
        for (int64_t h = 0; h < n_q; h++) s[h * s_stride + j] = 0;
        for (int64_t d0 = 0; d0 < head_dim; d0 += ATTN_CHUNK) {
            int64_t n = MIN(ATTN_CHUNK, head_dim - d0);
            const float *kv = row_chunk_to_f32(buf, kj, kt, d0, n);
            for (int64_t h = 0; h < n_q; h++) {
                const float *qh = q + h * head_dim + d0;
                float dot = 0;
                for (int64_t d = 0; d < n; d++) dot += qh[d] * kv[d];
                s[h * s_stride + j] += dot;
            }
        }
        for (int64_t h = 0; h < n_q; h++) s[h * s_stride + j] *= scale;
    }
}

void kern_attn_values(float *y, const float *p, int64_t p_stride, int64_t n_q, const void *v,
                      enum kern_type vt, size_t v_stride, int64_t head_dim, int64_t n_kv) {
    float buf[ATTN_CHUNK];
    memset(y, 0, (size_t)(n_q * head_dim) * sizeof *y);
    for (int64_t j = 0; j < n_kv; j++) {
        const char *vj = (const char *)v + (size_t)j * v_stride;
        for (int64_t d0 = 0; d0 < head_dim; d0 += ATTN_CHUNK) {
            int64_t n = MIN(ATTN_CHUNK, head_dim - d0);
            const float *vv = row_chunk_to_f32(buf, vj, vt, d0, n);
            for (int64_t h = 0; h < n_q; h++) {
                float ph = p[h * p_stride + j], *yh = y + h * head_dim + d0;
                for (int64_t d = 0; d < n; d++) yh[d] += ph * vv[d];
            }
        }
    }
}
