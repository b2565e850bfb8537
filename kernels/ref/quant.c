/* Reference conversions f32 <-> every block type, with ggml's block layouts and
 * quantization rules (the facts: scale choice, rounding, nibble order), so that rows we
 * write are what llama.cpp writes and rows it wrote decode here unchanged. Plain C, the
 * executable spec for the SIMD variants in kernels/cpu/. */
#include "kernels/ref/quant.h"

#include <math.h>
#include <string.h>

/* ---- f32, f16, bf16 ---------------------------------------------------------------- */

void kern_ref_f32_to_f32(float *dst, const void *src, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}
void kern_ref_f32_from_f32(void *dst, const float *src, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}
void kern_ref_f16_to_f32(float *dst, const void *src, int64_t n) {
    const kern_f16 *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = kern_fp16_to_fp32(h[i]);
}
void kern_ref_f16_from_f32(void *dst, const float *src, int64_t n) {
    kern_f16 *h = dst;
    for (int64_t i = 0; i < n; i++) h[i] = kern_fp32_to_fp16(src[i]);
}
void kern_ref_bf16_to_f32(float *dst, const void *src, int64_t n) {
    const kern_bf16 *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = kern_bf16_to_fp32(h[i]);
}
void kern_ref_bf16_from_f32(void *dst, const float *src, int64_t n) {
    kern_bf16 *h = dst;
    for (int64_t i = 0; i < n; i++) h[i] = kern_fp32_to_bf16(src[i]);
}

/* ---- block helpers ------------------------------------------------------------------ */

/* Largest |x| of a block, and the signed value that has it (first one on ties). */
static float block_absmax(const float *x, int n, float *ret_signed_max) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        float a = fabsf(x[j]);
        if (a > amax) {
            amax = a;
            max = x[j];
        }
    }
    if (ret_signed_max) *ret_signed_max = max;
    return amax;
}

static void block_minmax(const float *x, int n, float *ret_min, float *ret_max) {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < n; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *ret_min = lo;
    *ret_max = hi;
}

/* 5th bits of the 32 values of a q5 block: qh bit j (byte j/8, bit j%8) = value j. */
static void qh_store(uint8_t qh[4], uint32_t bits) {
    for (int k = 0; k < 4; k++) qh[k] = (uint8_t)(bits >> (8 * k));
}
static uint32_t qh_load(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

/* ---- q8_0, q8_1: x = d * q, d = amax / 127, q = round(x / d) ----------------------- */

void kern_ref_q8_0_from_f32(void *dst, const float *src, int64_t n) {
    struct block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / QK8_0; i++, src += QK8_0) {
        float amax = block_absmax(src, QK8_0, NULL);
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = kern_fp32_to_fp16(d);
        for (int j = 0; j < QK8_0; j++) b[i].qs[j] = (int8_t)roundf(src[j] * id);
    }
}
void kern_ref_q8_0_to_f32(float *dst, const void *src, int64_t n) {
    const struct block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK8_0; i++, dst += QK8_0) {
        float d = kern_fp16_to_fp32(b[i].d);
        for (int j = 0; j < QK8_0; j++) dst[j] = d * (float)b[i].qs[j];
    }
}

/* q8_1 also stores s = d * Σq, which q4_1/q5_1 dot products need for the offset m. */
void kern_ref_q8_1_from_f32(void *dst, const float *src, int64_t n) {
    struct block_q8_1 *b = dst;
    for (int64_t i = 0; i < n / QK8_1; i++, src += QK8_1) {
        float amax = block_absmax(src, QK8_1, NULL);
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < QK8_1; j++) {
            b[i].qs[j] = (int8_t)roundf(src[j] * id);
            sum += b[i].qs[j];
        }
        b[i].d = kern_fp32_to_fp16(d);
        b[i].s = kern_fp32_to_fp16((float)sum * d);
    }
}
void kern_ref_q8_1_to_f32(float *dst, const void *src, int64_t n) {
    const struct block_q8_1 *b = src;
    for (int64_t i = 0; i < n / QK8_1; i++, dst += QK8_1) {
        float d = kern_fp16_to_fp32(b[i].d);
        for (int j = 0; j < QK8_1; j++) dst[j] = d * (float)b[i].qs[j];
    }
}

/* ---- q4_0: x = d * (q - 8), d = max / -8 (max = signed value of largest |x|) ------- */

void kern_ref_q4_0_from_f32(void *dst, const float *src, int64_t n) {
    struct block_q4_0 *b = dst;
    for (int64_t i = 0; i < n / QK4_0; i++, src += QK4_0) {
        float max;
        block_absmax(src, QK4_0, &max);
        float d = max / -8.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = kern_fp32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            int lo = (int8_t)(src[j] * id + 8.5f), hi = (int8_t)(src[j + QK4_0 / 2] * id + 8.5f);
            lo = lo < 15 ? lo : 15;
            hi = hi < 15 ? hi : 15;
            b[i].qs[j] = (uint8_t)(lo | hi << 4);
        }
    }
}
void kern_ref_q4_0_to_f32(float *dst, const void *src, int64_t n) {
    const struct block_q4_0 *b = src;
    for (int64_t i = 0; i < n / QK4_0; i++, dst += QK4_0) {
        float d = kern_fp16_to_fp32(b[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            dst[j] = d * (float)((b[i].qs[j] & 0x0f) - 8);
            dst[j + QK4_0 / 2] = d * (float)((b[i].qs[j] >> 4) - 8);
        }
    }
}

/* ---- q4_1: x = d * q + m, d = (max - min) / 15, m = min ---------------------------- */

void kern_ref_q4_1_from_f32(void *dst, const float *src, int64_t n) {
    struct block_q4_1 *b = dst;
    for (int64_t i = 0; i < n / QK4_1; i++, src += QK4_1) {
        float lo, hi;
        block_minmax(src, QK4_1, &lo, &hi);
        float d = (hi - lo) / 15.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = kern_fp32_to_fp16(d);
        b[i].m = kern_fp32_to_fp16(lo);
        for (int j = 0; j < QK4_1 / 2; j++) {
            int q0 = (int8_t)((src[j] - lo) * id + 0.5f);
            int q1 = (int8_t)((src[j + QK4_1 / 2] - lo) * id + 0.5f);
            q0 = q0 < 15 ? q0 : 15;
            q1 = q1 < 15 ? q1 : 15;
            b[i].qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}
void kern_ref_q4_1_to_f32(float *dst, const void *src, int64_t n) {
    const struct block_q4_1 *b = src;
    for (int64_t i = 0; i < n / QK4_1; i++, dst += QK4_1) {
        float d = kern_fp16_to_fp32(b[i].d), m = kern_fp16_to_fp32(b[i].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            dst[j] = d * (float)(b[i].qs[j] & 0x0f) + m;
            dst[j + QK4_1 / 2] = d * (float)(b[i].qs[j] >> 4) + m;
        }
    }
}

/* ---- q5_0: x = d * (q - 16), d = max / -16, q in 0..31 ----------------------------- */

void kern_ref_q5_0_from_f32(void *dst, const float *src, int64_t n) {
    struct block_q5_0 *b = dst;
    for (int64_t i = 0; i < n / QK5_0; i++, src += QK5_0) {
        float max;
        block_absmax(src, QK5_0, &max);
        float d = max / -16.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        b[i].d = kern_fp32_to_fp16(d);
        for (int j = 0; j < QK5_0 / 2; j++) {
            int q0 = (int8_t)(src[j] * id + 16.5f), q1 = (int8_t)(src[j + QK5_0 / 2] * id + 16.5f);
            q0 = q0 < 31 ? q0 : 31;
            q1 = q1 < 31 ? q1 : 31;
            b[i].qs[j] = (uint8_t)((q0 & 0x0f) | (q1 & 0x0f) << 4);
            qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + QK5_0 / 2);
        }
        qh_store(b[i].qh, qh);
    }
}
void kern_ref_q5_0_to_f32(float *dst, const void *src, int64_t n) {
    const struct block_q5_0 *b = src;
    for (int64_t i = 0; i < n / QK5_0; i++, dst += QK5_0) {
        float d = kern_fp16_to_fp32(b[i].d);
        uint32_t qh = qh_load(b[i].qh);
        for (int j = 0; j < QK5_0 / 2; j++) {
            int q0 = (b[i].qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4;
            int q1 = (b[i].qs[j] >> 4) | (int)((qh >> (j + QK5_0 / 2)) & 1) << 4;
            dst[j] = d * (float)(q0 - 16);
            dst[j + QK5_0 / 2] = d * (float)(q1 - 16);
        }
    }
}

/* ---- q5_1: x = d * q + m, d = (max - min) / 31, m = min ---------------------------- */

void kern_ref_q5_1_from_f32(void *dst, const float *src, int64_t n) {
    struct block_q5_1 *b = dst;
    for (int64_t i = 0; i < n / QK5_1; i++, src += QK5_1) {
        float lo, hi;
        block_minmax(src, QK5_1, &lo, &hi);
        float d = (hi - lo) / 31.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        b[i].d = kern_fp32_to_fp16(d);
        b[i].m = kern_fp32_to_fp16(lo);
        for (int j = 0; j < QK5_1 / 2; j++) {
            int q0 = (int8_t)((src[j] - lo) * id + 0.5f);
            int q1 = (int8_t)((src[j + QK5_1 / 2] - lo) * id + 0.5f);
            q0 = q0 < 31 ? q0 : 31;
            q1 = q1 < 31 ? q1 : 31;
            b[i].qs[j] = (uint8_t)((q0 & 0x0f) | (q1 & 0x0f) << 4);
            qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + QK5_1 / 2);
        }
        qh_store(b[i].qh, qh);
    }
}
void kern_ref_q5_1_to_f32(float *dst, const void *src, int64_t n) {
    const struct block_q5_1 *b = src;
    for (int64_t i = 0; i < n / QK5_1; i++, dst += QK5_1) {
        float d = kern_fp16_to_fp32(b[i].d), m = kern_fp16_to_fp32(b[i].m);
        uint32_t qh = qh_load(b[i].qh);
        for (int j = 0; j < QK5_1 / 2; j++) {
            int q0 = (b[i].qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4;
            int q1 = (b[i].qs[j] >> 4) | (int)((qh >> (j + QK5_1 / 2)) & 1) << 4;
            dst[j] = d * (float)q0 + m;
            dst[j + QK5_1 / 2] = d * (float)q1 + m;
        }
    }
}

/* ---- mxfp4: x = kern_e8m0_half(e) * kern_mxfp4_values[q] ---------------------------- */

/* ggml's rule: e = floor(log2(amax)) - 2 + 127, so that the largest code (12, E2M1's 6)
 * times the scale is 1.5·2^floor(log2 amax): amax itself or a little below it (clipped);
 * then each value takes the code whose value is nearest (the first on a tie: +0 before
 * -0, the smaller index between two codes). An all-zero block has e = 0. Blocks whose
 * exponent falls outside the byte (|x| < 2^-125, where ggml's float-to-byte cast is
 * undefined, or infinite) take the nearest end, 0 or 255. */
static uint8_t mxfp4_exponent(float amax) {
    if (!(amax > 0.0f)) return 0;
    const float e = floorf(log2f(amax)) - 2.0f + 127.0f;
    return e <= 0.0f ? 0 : e >= 255.0f ? 255 : (uint8_t)e;
}

static int mxfp4_nearest(float x, float d) {
    int best = 0;
    float best_err = fabsf((float)kern_mxfp4_values[0] * d - x);
    for (int i = 1; i < 16; i++) {
        float err = fabsf((float)kern_mxfp4_values[i] * d - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

void kern_ref_mxfp4_from_f32(void *dst, const float *src, int64_t n) {
    struct block_mxfp4 *b = dst;
    for (int64_t i = 0; i < n / QK_MXFP4; i++, src += QK_MXFP4) {
        float amax = 0.0f;
        for (int j = 0; j < QK_MXFP4; j++)
            if (amax < fabsf(src[j])) amax = fabsf(src[j]);
        b[i].e = mxfp4_exponent(amax);
        const float d = kern_e8m0_half(b[i].e);
        for (int j = 0; j < QK_MXFP4 / 2; j++)
            b[i].qs[j] = (uint8_t)(mxfp4_nearest(src[j], d) | mxfp4_nearest(src[j + QK_MXFP4 / 2], d) << 4);
    }
}

void kern_ref_mxfp4_to_f32(float *dst, const void *src, int64_t n) {
    const struct block_mxfp4 *b = src;
    for (int64_t i = 0; i < n / QK_MXFP4; i++, dst += QK_MXFP4) {
        const float d = kern_e8m0_half(b[i].e);
        for (int j = 0; j < QK_MXFP4 / 2; j++) {
            dst[j] = (float)kern_mxfp4_values[b[i].qs[j] & 0x0f] * d;
            dst[j + QK_MXFP4 / 2] = (float)kern_mxfp4_values[b[i].qs[j] >> 4] * d;
        }
    }
}

/* ---- iq4_nl: x = d * kern_iq4nl_values[q] ------------------------------------------ */

/* Index of the code value nearest to x (the lower one on a tie). */
static int iq4nl_nearest(float x) {
    const int8_t *v = kern_iq4nl_values;
    if (x <= v[0]) return 0;
    if (x >= v[15]) return 15;
    int lo = 0, hi = 15; /* v[lo] < x < v[hi] */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (x < v[mid]) hi = mid;
        else lo = mid;
    }
    return x - v[lo] < v[hi] - x ? lo : hi;
}

/* Least-squares fit of the scale for the codes chosen at inverse scale id, weighted by
 * x² (big values matter most). Returns Σwqx and writes Σwq². */
static float iq4nl_fit(const float *x, const float *w, float id, float *ret_sumq2) {
    float sumqx = 0.0f, sumq2 = 0.0f;
    for (int j = 0; j < QK4_NL; j++) {
        float q = kern_iq4nl_values[iq4nl_nearest(id * x[j])];
        sumqx += w[j] * q * x[j];
        sumq2 += w[j] * q * q;
    }
    *ret_sumq2 = sumq2;
    return sumqx;
}

/* ggml's rule: start from d = -max / values[0] (= max / 127), refit by weighted least
 * squares, then try the inverse scales (k + values[0]) / max for k in -7..7 and keep the
 * fit with the lowest weighted error; the codes are then chosen at the kept scale.
 * Returns the scale of the 32 values at x (0 for an all-zero block). */
static float iq4nl_scale(const float *x) {
    enum { NTRY = 7 };
    float w[QK4_NL];
    float max;
    float amax = block_absmax(x, QK4_NL, &max);
    if (amax < 1e-15f) return 0.0f;
    for (int j = 0; j < QK4_NL; j++) w[j] = x[j] * x[j];

    float sumq2;
    float d = -max / (float)kern_iq4nl_values[0];
    float sumqx = iq4nl_fit(x, w, 1.0f / d, &sumq2);
    d = sumqx / sumq2;
    float best = d * sumqx;
    for (int k = -NTRY; k <= NTRY; k++) {
        float id = (float)(k + kern_iq4nl_values[0]) / max;
        sumqx = iq4nl_fit(x, w, id, &sumq2);
        if (sumq2 > 0.0f && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

/* The 16 code bytes of 32 values at inverse scale id (low nibble j, high j + 16). */
static void iq4nl_codes(uint8_t *qs, const float *x, float id) {
    for (int j = 0; j < QK4_NL / 2; j++) {
        int q0 = iq4nl_nearest(id * x[j]), q1 = iq4nl_nearest(id * x[j + QK4_NL / 2]);
        qs[j] = (uint8_t)(q0 | q1 << 4);
    }
}

void kern_ref_iq4_nl_from_f32(void *dst, const float *src, int64_t n) {
    struct block_iq4_nl *b = dst;
    for (int64_t i = 0; i < n / QK4_NL; i++, src += QK4_NL) {
        float d = iq4nl_scale(src);
        memset(b[i].qs, 0, sizeof(b[i].qs));
        b[i].d = kern_fp32_to_fp16(d);
        if (d == 0.0f) continue;
        iq4nl_codes(b[i].qs, src, 1.0f / d);
    }
}
void kern_ref_iq4_nl_to_f32(float *dst, const void *src, int64_t n) {
    const struct block_iq4_nl *b = src;
    for (int64_t i = 0; i < n / QK4_NL; i++, dst += QK4_NL) {
        float d = kern_fp16_to_fp32(b[i].d);
        for (int j = 0; j < QK4_NL / 2; j++) {
            dst[j] = d * (float)kern_iq4nl_values[b[i].qs[j] & 0x0f];
            dst[j + QK4_NL / 2] = d * (float)kern_iq4nl_values[b[i].qs[j] >> 4];
        }
    }
}

/* ---- k-quants (decode only): super-blocks of 256 values ---------------------------- */

/* 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes of q4_K / q5_K:
 * bytes 0..3 hold scales 0..3 (low 6 bits), bytes 4..7 mins 0..3, bytes 8..11 the low
 * 4 bits of scales/mins 4..7 whose top 2 bits sit in the top bits of bytes 0..7. */
static void k4_scale_min(int j, const uint8_t *s, int *ret_sc, int *ret_m) {
    if (j < 4) {
        *ret_sc = s[j] & 63;
        *ret_m = s[j + 4] & 63;
    } else {
        *ret_sc = (s[j + 4] & 0x0f) | (s[j - 4] >> 6) << 4;
        *ret_m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

/* x = d * sc * q - dmin * m, q 4 bits; each 32-byte group of qs holds sub-block 2k in its
 * low nibbles and sub-block 2k+1 in its high nibbles. */
void kern_ref_q4_K_to_f32(float *dst, const void *src, int64_t n) {
    const struct block_q4_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        float d = kern_fp16_to_fp32(b[i].d), dmin = kern_fp16_to_fp32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        for (int g = 0; g < QK_K / 64; g++, q += 32) {
            int sc0, m0, sc1, m1;
            k4_scale_min(2 * g, b[i].scales, &sc0, &m0);
            k4_scale_min(2 * g + 1, b[i].scales, &sc1, &m1);
            for (int l = 0; l < 32; l++) *dst++ = d * (float)sc0 * (float)(q[l] & 0x0f) - dmin * (float)m0;
            for (int l = 0; l < 32; l++) *dst++ = d * (float)sc1 * (float)(q[l] >> 4) - dmin * (float)m1;
        }
    }
}

/* As q4_K with a 5th bit: bit 2g of qh[l] for the low nibble group, bit 2g+1 for the high. */
void kern_ref_q5_K_to_f32(float *dst, const void *src, int64_t n) {
    const struct block_q5_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        float d = kern_fp16_to_fp32(b[i].d), dmin = kern_fp16_to_fp32(b[i].dmin);
        const uint8_t *q = b[i].qs, *qh = b[i].qh;
        for (int g = 0; g < QK_K / 64; g++, q += 32) {
            int sc0, m0, sc1, m1;
            k4_scale_min(2 * g, b[i].scales, &sc0, &m0);
            k4_scale_min(2 * g + 1, b[i].scales, &sc1, &m1);
            for (int l = 0; l < 32; l++) {
                int v = (q[l] & 0x0f) | ((qh[l] >> (2 * g)) & 1) << 4;
                *dst++ = d * (float)sc0 * (float)v - dmin * (float)m0;
            }
            for (int l = 0; l < 32; l++) {
                int v = (q[l] >> 4) | ((qh[l] >> (2 * g + 1)) & 1) << 4;
                *dst++ = d * (float)sc1 * (float)v - dmin * (float)m1;
            }
        }
    }
}

/* x = d * scales[k] * (q - 32), q 6 bits: 4 low bits in ql, 2 high bits in qh; each half
 * (128 values) uses 64 bytes of ql, 32 of qh and 8 scales (one per 16 values). */
void kern_ref_q6_K_to_f32(float *dst, const void *src, int64_t n) {
    const struct block_q6_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        float d = kern_fp16_to_fp32(b[i].d);
        const uint8_t *ql = b[i].ql, *qh = b[i].qh;
        const int8_t *sc = b[i].scales;
        for (int h = 0; h < QK_K / 128; h++, dst += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q0 = ((ql[l] & 0x0f) | ((qh[l] >> 0) & 3) << 4) - 32;
                int q1 = ((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4) - 32;
                int q2 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                int q3 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                dst[l] = d * (float)sc[is] * (float)q0;
                dst[l + 32] = d * (float)sc[is + 2] * (float)q1;
                dst[l + 64] = d * (float)sc[is + 4] * (float)q2;
                dst[l + 96] = d * (float)sc[is + 6] * (float)q3;
            }
        }
    }
}

void kern_ref_q8_K_to_f32(float *dst, const void *src, int64_t n) {
    const struct block_q8_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K)
        for (int j = 0; j < QK_K; j++) dst[j] = b[i].d * (float)b[i].qs[j];
}

/* ---- k-quant quantizers --------------------------------------------------------------
 * Simple rules, not ggml's iterative scale search: the rows are valid k-quant rows that
 * any reader (llama.cpp included) decodes to the same values, within the bounds that
 * tests/kernels/test-types.c names, but not byte-identical to what llama.cpp writes. */

static float clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

/* v >= 0 as fp16, rounded up so that a grid built on it still covers v's range (matters
 * where v falls among fp16's coarse subnormals). */
static kern_f16 fp16_round_up(float v) {
    kern_f16 h = kern_fp32_to_fp16(v);
    return kern_fp16_to_fp32(h) < v && h < 0x7bff ? (kern_f16)(h + 1) : h;
}

/* q4_K (levels 15) and q5_K (31): per sub-block of 32 an offset m_j ≥ 0 (x = d·sc_j·q -
 * dmin·m_j) that reaches the sub-block's minimum (rounded up, so it stays below it) and a
 * scale that reaches its maximum (rounded up likewise); 6-bit sc_j, m_j. */
static void k45_from_f32(uint8_t *sb, const float *x, int levels) {
    float off[8], need[8], omax = 0.0f, nmax = 0.0f;
    for (int j = 0; j < 8; j++) {
        float lo, hi;
        block_minmax(x + 32 * j, 32, &lo, &hi);
        off[j] = lo < 0.0f ? -lo : 0.0f;
        need[j] = hi > 0.0f ? hi : 0.0f;
        if (off[j] > omax) omax = off[j];
    }
    kern_f16 dmin_h = fp16_round_up(omax / 63.0f);
    float dmin = kern_fp16_to_fp32(dmin_h);
    int m[8], sc[8];
    for (int j = 0; j < 8; j++) {
        m[j] = dmin > 0.0f ? (int)clampf(ceilf(off[j] / dmin), 0.0f, 63.0f) : 0;
        need[j] += dmin * (float)m[j];
        if (need[j] > nmax) nmax = need[j];
    }
    kern_f16 d_h = fp16_round_up(nmax / (float)(levels * 63));
    float d = kern_fp16_to_fp32(d_h);
    for (int j = 0; j < 8; j++)
        sc[j] = d > 0.0f ? (int)clampf(ceilf(need[j] / ((float)levels * d)), 0.0f, 63.0f) : 0;

    memcpy(sb, &d_h, 2);
    memcpy(sb + 2, &dmin_h, 2);
    uint8_t *s = sb + 4;
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        s[j + 4] = (uint8_t)(m[j] | (m[j + 4] >> 4) << 6);
        s[j + 8] = (uint8_t)((sc[j + 4] & 0x0f) | (m[j + 4] & 0x0f) << 4);
    }
    uint8_t *qh = levels == 31 ? sb + 16 : NULL, *qs = sb + (levels == 31 ? 48 : 16);
    if (qh) memset(qh, 0, 32);
    for (int j = 0; j < 8; j++) {
        float step = d * (float)sc[j], base = dmin * (float)m[j];
        float is = step > 0.0f ? 1.0f / step : 0.0f;
        for (int l = 0; l < 32; l++) {
            int q = (int)clampf(roundf((x[32 * j + l] + base) * is), 0.0f, (float)levels);
            uint8_t *b = &qs[32 * (j / 2) + l];
            if (j % 2 == 0) *b = (uint8_t)(q & 0x0f);
            else *b |= (uint8_t)((q & 0x0f) << 4);
            if (qh) qh[l] |= (uint8_t)((q >> 4) << j);
        }
    }
}

void kern_ref_q4_K_from_f32(void *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++)
        k45_from_f32((uint8_t *)dst + i * sizeof(struct block_q4_K), src + i * QK_K, 15);
}
void kern_ref_q5_K_from_f32(void *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++)
        k45_from_f32((uint8_t *)dst + i * sizeof(struct block_q5_K), src + i * QK_K, 31);
}

/* q6_K: per group of 16 a signed 8-bit scale, x = d·sc_g·(q - 32): the value of largest
 * magnitude maps to q - 32 = -32 (as q4_0 does with -8). */
void kern_ref_q6_K_from_f32(void *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        uint8_t *sb = (uint8_t *)dst + i * sizeof(struct block_q6_K);
        float scale[16], smax = 0.0f;
        for (int g = 0; g < 16; g++) {
            float max;
            block_absmax(src + 16 * g, 16, &max);
            scale[g] = max / -32.0f;
            if (fabsf(scale[g]) > smax) smax = fabsf(scale[g]);
        }
        kern_f16 d_h = fp16_round_up(smax / 127.0f);
        float d = kern_fp16_to_fp32(d_h);
        int8_t *sc = (int8_t *)(sb + 192);
        uint8_t *ql = sb, *qh = sb + 128;
        memset(sb, 0, 192);
        for (int g = 0; g < 16; g++) sc[g] = (int8_t)(d > 0.0f ? clampf(roundf(scale[g] / d), -127.0f, 127.0f) : 0.0f);
        memcpy(sb + 208, &d_h, 2);
        for (int v = 0; v < QK_K; v++) {
            float step = d * (float)sc[v / 16];
            int q = step != 0.0f ? (int)clampf(roundf(src[v] / step) + 32.0f, 0.0f, 63.0f) : 32;
            int h = v / 128, k = (v % 128) / 32, l = v % 32;
            uint8_t *b = &ql[64 * h + 32 * (k % 2) + l];
            *b |= (uint8_t)((q & 0x0f) << (4 * (k / 2)));
            qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * k));
        }
    }
}

/* ---- q2_K, q3_K, iq4_xs ---------------------------------------------------------------
 * q2_K and q3_K place value v of a super-block at bits 2k of qs[32h + l] (h = v/128, k =
 * (v%128)/32, l = v%32): each 32-byte quarter of qs holds 128 values as four bit planes. */

static int k2_code(const uint8_t *qs, int v) {
    return (qs[32 * (v / 128) + v % 32] >> (2 * ((v % 128) / 32))) & 3;
}
static void k2_code_set(uint8_t *qs, int v, int q) {
    qs[32 * (v / 128) + v % 32] |= (uint8_t)(q << (2 * ((v % 128) / 32)));
}

void kern_ref_q2_K_to_f32(float *dst, const void *src, int64_t n) {
    const struct block_q2_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        float d = kern_fp16_to_fp32(b[i].d), dmin = kern_fp16_to_fp32(b[i].dmin);
        for (int v = 0; v < QK_K; v++) {
            int sc = b[i].scales[v / 16];
            dst[v] = d * (float)(sc & 0x0f) * (float)k2_code(b[i].qs, v) - dmin * (float)(sc >> 4);
        }
    }
}

/* As q4_K's rule on groups of 16 with 4-bit sc_g, m_g and 4 levels: an offset m_g that
 * reaches the group's minimum and a scale that reaches its maximum, both rounded up. */
void kern_ref_q2_K_from_f32(void *dst, const float *src, int64_t n) {
    struct block_q2_K *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        float off[16], need[16], omax = 0.0f, nmax = 0.0f;
        for (int g = 0; g < 16; g++) {
            float lo, hi;
            block_minmax(src + 16 * g, 16, &lo, &hi);
            off[g] = lo < 0.0f ? -lo : 0.0f;
            need[g] = hi > 0.0f ? hi : 0.0f;
            if (off[g] > omax) omax = off[g];
        }
        b[i].dmin = fp16_round_up(omax / 15.0f);
        float dmin = kern_fp16_to_fp32(b[i].dmin);
        int m[16], sc[16];
        for (int g = 0; g < 16; g++) {
            m[g] = dmin > 0.0f ? (int)clampf(ceilf(off[g] / dmin), 0.0f, 15.0f) : 0;
            need[g] += dmin * (float)m[g];
            if (need[g] > nmax) nmax = need[g];
        }
        b[i].d = fp16_round_up(nmax / 45.0f);
        float d = kern_fp16_to_fp32(b[i].d);
        for (int g = 0; g < 16; g++) {
            sc[g] = d > 0.0f ? (int)clampf(ceilf(need[g] / (3.0f * d)), 0.0f, 15.0f) : 0;
            b[i].scales[g] = (uint8_t)(sc[g] | m[g] << 4);
        }
        memset(b[i].qs, 0, sizeof(b[i].qs));
        for (int v = 0; v < QK_K; v++) {
            float step = d * (float)sc[v / 16], base = dmin * (float)m[v / 16];
            int q = step > 0.0f ? (int)clampf(roundf((src[v] + base) / step), 0.0f, 3.0f) : 0;
            k2_code_set(b[i].qs, v, q);
        }
    }
}

int kern_ref_q3_K_scale(const uint8_t *s, int g) {
    int lo = g < 8 ? s[g] & 0x0f : s[g - 8] >> 4;
    return (lo | ((s[8 + g % 4] >> (2 * (g / 4))) & 3) << 4) - 32;
}

/* q - 4·!hbit: codes -4..3 */
static int k3_code(const struct block_q3_K *b, int v) {
    int hbit = (b->hmask[v % 32] >> (v / 32)) & 1;
    return k2_code(b->qs, v) - (hbit ? 0 : 4);
}

void kern_ref_q3_K_to_f32(float *dst, const void *src, int64_t n) {
    const struct block_q3_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        float d = kern_fp16_to_fp32(b[i].d);
        for (int v = 0; v < QK_K; v++)
            dst[v] = d * (float)kern_ref_q3_K_scale(b[i].scales, v / 16) * (float)k3_code(&b[i], v);
    }
}

/* As q6_K's rule with codes -4..3: per group of 16 the value of largest magnitude maps to
 * -4, the group scales share d = max|scale| / 31 (rounded up) as 6-bit signed steps. */
void kern_ref_q3_K_from_f32(void *dst, const float *src, int64_t n) {
    struct block_q3_K *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        float scale[16], smax = 0.0f;
        for (int g = 0; g < 16; g++) {
            float max;
            block_absmax(src + 16 * g, 16, &max);
            scale[g] = max / -4.0f;
            if (fabsf(scale[g]) > smax) smax = fabsf(scale[g]);
        }
        memset(&b[i], 0, sizeof(b[i]));
        b[i].d = fp16_round_up(smax / 31.0f);
        float d = kern_fp16_to_fp32(b[i].d);
        int sc[16];
        for (int g = 0; g < 16; g++) {
            sc[g] = d > 0.0f ? (int)clampf(roundf(scale[g] / d), -32.0f, 31.0f) : 0;
            int u = sc[g] + 32;
            b[i].scales[g % 8] |= (uint8_t)((u & 0x0f) << (4 * (g / 8)));
            b[i].scales[8 + g % 4] |= (uint8_t)((u >> 4) << (2 * (g / 4)));
        }
        for (int v = 0; v < QK_K; v++) {
            float step = d * (float)sc[v / 16];
            int q = step != 0.0f ? (int)clampf(roundf(src[v] / step), -4.0f, 3.0f) : 0;
            k2_code_set(b[i].qs, v, (q + 4) & 3);
            if (q >= 0) b[i].hmask[v % 32] |= (uint8_t)(1u << (v / 32));
        }
    }
}

int kern_ref_iq4_xs_scale(const struct block_iq4_xs *b, int j) {
    return (((b->scales_l[j / 2] >> (4 * (j % 2))) & 0x0f) | ((b->scales_h >> (2 * j)) & 3) << 4) - 32;
}

void kern_ref_iq4_xs_to_f32(float *dst, const void *src, int64_t n) {
    const struct block_iq4_xs *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        float d = kern_fp16_to_fp32(b[i].d);
        for (int j = 0; j < QK_K / 32; j++, dst += 32) {
            float dl = d * (float)kern_ref_iq4_xs_scale(&b[i], j);
            const uint8_t *qs = b[i].qs + 16 * j;
            for (int l = 0; l < 16; l++) {
                dst[l] = dl * (float)kern_iq4nl_values[qs[l] & 0x0f];
                dst[l + 16] = dl * (float)kern_iq4nl_values[qs[l] >> 4];
            }
        }
    }
}

/* Each sub-block's iq4_nl scale, then the super-block's d puts the one of largest
 * magnitude at ls - 32 = -32, the others round to the nearest step; the codes are chosen
 * at the stored scale. */
void kern_ref_iq4_xs_from_f32(void *dst, const float *src, int64_t n) {
    struct block_iq4_xs *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        float dj[8], dmax = 0.0f;
        for (int j = 0; j < 8; j++) {
            dj[j] = iq4nl_scale(src + 32 * j);
            if (fabsf(dj[j]) > fabsf(dmax)) dmax = dj[j];
        }
        memset(&b[i], 0, sizeof(b[i]));
        b[i].d = kern_fp32_to_fp16(dmax / -32.0f);
        float d = kern_fp16_to_fp32(b[i].d);
        for (int j = 0; j < 8; j++) {
            int ls = d != 0.0f ? (int)clampf(roundf(dj[j] / d), -32.0f, 31.0f) : 0;
            b[i].scales_l[j / 2] |= (uint8_t)(((ls + 32) & 0x0f) << (4 * (j % 2)));
            b[i].scales_h |= (uint16_t)(((ls + 32) >> 4) << (2 * j));
            float dl = d * (float)ls;
            iq4nl_codes(b[i].qs + 16 * j, src + 32 * j, dl != 0.0f ? 1.0f / dl : 0.0f);
        }
    }
}
