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
