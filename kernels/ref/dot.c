/* Reference dot products of one weight row with one activation row (kern_vec_dot_fn).
 * Quantized weights meet activations quantized to q8_0 (or q8_1 where the weight has an
 * offset m, which needs Σx per block): per block the integer dot Σ q_w·q_x is exact, then
 * scaled by d_w·d_x in f32. Float weights meet f32 activations, accumulated in double. */
#include "kernels/ref/quant.h"

/* Integer dot of 32 weight codes (already unpacked to signed values) with 32 int8. */
static int dot32(const int8_t *w, const int8_t *x) {
    int s = 0;
    for (int j = 0; j < 32; j++) s += w[j] * x[j];
    return s;
}

/* Unpacks 16 bytes of nibbles: low nibble of byte j = value j, high = value j + 16;
 * the optional 5th bits come from qh (bit j = value j); offset is subtracted. */
static void unpack_nibbles(int8_t *dst, const uint8_t *qs, const uint8_t *qh, int offset) {
    uint32_t h = qh ? (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 |
                          (uint32_t)qh[3] << 24
                    : 0;
    for (int j = 0; j < 16; j++) {
        dst[j] = (int8_t)(((qs[j] & 0x0f) | (int)((h >> j) & 1) << 4) - offset);
        dst[j + 16] = (int8_t)(((qs[j] >> 4) | (int)((h >> (j + 16)) & 1) << 4) - offset);
    }
}

float kern_ref_dot_f32_f32(const void *w, const void *x, int64_t n) {
    const float *a = w, *b = x;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * (double)b[i];
    return (float)s;
}

float kern_ref_dot_f16_f32(const void *w, const void *x, int64_t n) {
    const kern_f16 *a = w;
    const float *b = x;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)kern_fp16_to_fp32(a[i]) * (double)b[i];
    return (float)s;
}

float kern_ref_dot_bf16_f32(const void *w, const void *x, int64_t n) {
    const kern_bf16 *a = w;
    const float *b = x;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)kern_bf16_to_fp32(a[i]) * (double)b[i];
    return (float)s;
}

float kern_ref_dot_q8_0_q8_0(const void *w, const void *x, int64_t n) {
    const struct block_q8_0 *a = w, *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; i++)
        s += (float)dot32(a[i].qs, b[i].qs) * kern_fp16_to_fp32(a[i].d) * kern_fp16_to_fp32(b[i].d);
    return s;
}

float kern_ref_dot_q4_0_q8_0(const void *w, const void *x, int64_t n) {
    const struct block_q4_0 *a = w;
    const struct block_q8_0 *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        int8_t q[32];
        unpack_nibbles(q, a[i].qs, NULL, 8);
        s += (float)dot32(q, b[i].qs) * kern_fp16_to_fp32(a[i].d) * kern_fp16_to_fp32(b[i].d);
    }
    return s;
}

float kern_ref_dot_q5_0_q8_0(const void *w, const void *x, int64_t n) {
    const struct block_q5_0 *a = w;
    const struct block_q8_0 *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK5_0; i++) {
        int8_t q[32];
        unpack_nibbles(q, a[i].qs, a[i].qh, 16);
        s += (float)dot32(q, b[i].qs) * kern_fp16_to_fp32(a[i].d) * kern_fp16_to_fp32(b[i].d);
    }
    return s;
}

/* Σ (d_w q_w + m)(d_x q_x) = d_w d_x Σ q_w q_x + m · (d_x Σ q_x) = ... + m · s_x */
float kern_ref_dot_q4_1_q8_1(const void *w, const void *x, int64_t n) {
    const struct block_q4_1 *a = w;
    const struct block_q8_1 *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK4_1; i++) {
        int8_t q[32];
        unpack_nibbles(q, a[i].qs, NULL, 0);
        s += (float)dot32(q, b[i].qs) * kern_fp16_to_fp32(a[i].d) * kern_fp16_to_fp32(b[i].d) +
             kern_fp16_to_fp32(a[i].m) * kern_fp16_to_fp32(b[i].s);
    }
    return s;
}

float kern_ref_dot_q5_1_q8_1(const void *w, const void *x, int64_t n) {
    const struct block_q5_1 *a = w;
    const struct block_q8_1 *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK5_1; i++) {
        int8_t q[32];
        unpack_nibbles(q, a[i].qs, a[i].qh, 0);
        s += (float)dot32(q, b[i].qs) * kern_fp16_to_fp32(a[i].d) * kern_fp16_to_fp32(b[i].d) +
             kern_fp16_to_fp32(a[i].m) * kern_fp16_to_fp32(b[i].s);
    }
    return s;
}

float kern_ref_dot_iq4_nl_q8_0(const void *w, const void *x, int64_t n) {
    const struct block_iq4_nl *a = w;
    const struct block_q8_0 *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK4_NL; i++) {
        int sum = 0;
        for (int j = 0; j < QK4_NL / 2; j++)
            sum += kern_iq4nl_values[a[i].qs[j] & 0x0f] * b[i].qs[j] +
                   kern_iq4nl_values[a[i].qs[j] >> 4] * b[i].qs[j + QK4_NL / 2];
        s += (float)sum * kern_fp16_to_fp32(a[i].d) * kern_fp16_to_fp32(b[i].d);
    }
    return s;
}

/* ---- k-quants: super-blocks of 256 as 8 sub-blocks of 32 ---------------------------- */

/* Dots with q8_1 / q8_0 activations (one activation block per 32 values), so that the
 * SIMD tiles treat each sub-block like a q4_1 / q5_0 block: q4_K/q5_K sub-block j has
 * x = d·sc_j·q - dmin·m_j, so Σ x·a = d·sc_j·d_a·Σ q·q_a - dmin·m_j·s_a; q6_K sub-block j
 * has two scales, one per 16 values: x = d·sc·(q - 32). */

/* 6-bit scale and min of sub-block j (see kern_ref_q4_K_to_f32). */
static void k4_scale_min(int j, const uint8_t *s, int *ret_sc, int *ret_m) {
    if (j < 4) {
        *ret_sc = s[j] & 63;
        *ret_m = s[j + 4] & 63;
    } else {
        *ret_sc = (s[j + 4] & 0x0f) | (s[j - 4] >> 6) << 4;
        *ret_m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

float kern_ref_dot_q4_K_q8_1(const void *w, const void *x, int64_t n) {
    const struct block_q4_K *a = w;
    const struct block_q8_1 *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        float d = kern_fp16_to_fp32(a[i].d), dmin = kern_fp16_to_fp32(a[i].dmin);
        for (int j = 0; j < 8; j++, b++) {
            int sc, m, sum = 0;
            k4_scale_min(j, a[i].scales, &sc, &m);
            const uint8_t *q = a[i].qs + 32 * (j / 2);
            for (int l = 0; l < 32; l++) sum += ((q[l] >> (4 * (j % 2))) & 0x0f) * b->qs[l];
            s += d * (float)sc * kern_fp16_to_fp32(b->d) * (float)sum -
                 dmin * (float)m * kern_fp16_to_fp32(b->s);
        }
    }
    return s;
}

float kern_ref_dot_q5_K_q8_1(const void *w, const void *x, int64_t n) {
    const struct block_q5_K *a = w;
    const struct block_q8_1 *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        float d = kern_fp16_to_fp32(a[i].d), dmin = kern_fp16_to_fp32(a[i].dmin);
        for (int j = 0; j < 8; j++, b++) {
            int sc, m, sum = 0;
            k4_scale_min(j, a[i].scales, &sc, &m);
            const uint8_t *q = a[i].qs + 32 * (j / 2);
            for (int l = 0; l < 32; l++) {
                int v = ((q[l] >> (4 * (j % 2))) & 0x0f) | ((a[i].qh[l] >> j) & 1) << 4;
                sum += v * b->qs[l];
            }
            s += d * (float)sc * kern_fp16_to_fp32(b->d) * (float)sum -
                 dmin * (float)m * kern_fp16_to_fp32(b->s);
        }
    }
    return s;
}

float kern_ref_dot_q6_K_q8_0(const void *w, const void *x, int64_t n) {
    const struct block_q6_K *a = w;
    const struct block_q8_0 *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        float d = kern_fp16_to_fp32(a[i].d);
        for (int j = 0; j < 8; j++, b++) {
            int h = j / 4, k = j % 4; /* half of the super-block, group inside the half */
            const uint8_t *ql = a[i].ql + 64 * h + 32 * (k % 2), *qh = a[i].qh + 32 * h;
            int sum[2] = {0, 0};
            for (int l = 0; l < 32; l++) {
                int v = ((ql[l] >> (4 * (k / 2))) & 0x0f) | ((qh[l] >> (2 * k)) & 3) << 4;
                sum[l / 16] += (v - 32) * b->qs[l];
            }
            const int8_t *sc = a[i].scales + 8 * h + 2 * k;
            s += d * kern_fp16_to_fp32(b->d) * ((float)sc[0] * (float)sum[0] + (float)sc[1] * (float)sum[1]);
        }
    }
    return s;
}

/* q2_K / q3_K / iq4_xs against q8_0 blocks, one per sub-block of 32. q2_K's offset has a
 * min per 16 values, so its term needs Σ a_x over each half (exact in int): d_x·(d·sc·Σ q·a
 * - dmin·m·Σ a). */
float kern_ref_dot_q2_K_q8_0(const void *w, const void *x, int64_t n) {
    const struct block_q2_K *a = w;
    const struct block_q8_0 *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        float d = kern_fp16_to_fp32(a[i].d), dmin = kern_fp16_to_fp32(a[i].dmin);
        for (int j = 0; j < 8; j++, b++) {
            const uint8_t *q = a[i].qs + 32 * (j / 4);
            int shift = 2 * (j % 4);
            float sub = 0.0f;
            for (int half = 0; half < 2; half++) {
                int sqa = 0, sa = 0, sc = a[i].scales[2 * j + half];
                for (int l = 16 * half; l < 16 * half + 16; l++) {
                    sqa += ((q[l] >> shift) & 3) * b->qs[l];
                    sa += b->qs[l];
                }
                sub += d * (float)(sc & 0x0f) * (float)sqa - dmin * (float)(sc >> 4) * (float)sa;
            }
            s += kern_fp16_to_fp32(b->d) * sub;
        }
    }
    return s;
}

float kern_ref_dot_q3_K_q8_0(const void *w, const void *x, int64_t n) {
    const struct block_q3_K *a = w;
    const struct block_q8_0 *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        float d = kern_fp16_to_fp32(a[i].d);
        for (int j = 0; j < 8; j++, b++) {
            const uint8_t *q = a[i].qs + 32 * (j / 4);
            int shift = 2 * (j % 4), sum[2] = {0, 0};
            for (int l = 0; l < 32; l++) {
                int v = ((q[l] >> shift) & 3) - (((a[i].hmask[l] >> j) & 1) ? 0 : 4);
                sum[l / 16] += v * b->qs[l];
            }
            s += d * kern_fp16_to_fp32(b->d) *
                 ((float)kern_ref_q3_K_scale(a[i].scales, 2 * j) * (float)sum[0] +
                  (float)kern_ref_q3_K_scale(a[i].scales, 2 * j + 1) * (float)sum[1]);
        }
    }
    return s;
}

float kern_ref_dot_iq4_xs_q8_0(const void *w, const void *x, int64_t n) {
    const struct block_iq4_xs *a = w;
    const struct block_q8_0 *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        float d = kern_fp16_to_fp32(a[i].d);
        for (int j = 0; j < 8; j++, b++) {
            const uint8_t *qs = a[i].qs + 16 * j;
            int sum = 0;
            for (int l = 0; l < 16; l++)
                sum += kern_iq4nl_values[qs[l] & 0x0f] * b->qs[l] +
                       kern_iq4nl_values[qs[l] >> 4] * b->qs[l + 16];
            s += d * (float)kern_ref_iq4_xs_scale(&a[i], j) * kern_fp16_to_fp32(b->d) * (float)sum;
        }
    }
    return s;
}

/* ggml's order: the two scales' product first, then times the block's integer dot. */
float kern_ref_dot_mxfp4_q8_0(const void *w, const void *x, int64_t n) {
    const struct block_mxfp4 *a = w;
    const struct block_q8_0 *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_MXFP4; i++) {
        int sum = 0;
        for (int j = 0; j < QK_MXFP4 / 2; j++)
            sum += kern_mxfp4_values[a[i].qs[j] & 0x0f] * b[i].qs[j] +
                   kern_mxfp4_values[a[i].qs[j] >> 4] * b[i].qs[j + QK_MXFP4 / 2];
        s += kern_fp16_to_fp32(b[i].d) * kern_e8m0_half(a[i].e) * (float)sum;
    }
    return s;
}
