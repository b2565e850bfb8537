/* The traits table (one row per type, indexed by ggml's type id), name lookup, row sizes
 * and the scalar half-precision conversions. */
#include "kernels/types.h"

#include "base/base.h"
#include "kernels/ref/quant.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

const int8_t kern_iq4nl_values[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};
const int8_t kern_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

#define CONV(t) .to_f32 = kern_ref_##t##_to_f32, .from_f32 = kern_ref_##t##_from_f32

/* Gaps (name == NULL) are ids ggml removed or warmd does not know. Size-only rows
 * (integers, f64, q8_K's from_f32) exist so that GGUF readers can size their tensors. */
static const struct kern_type_traits type_table[KERN_TYPE_COUNT] = {
    [KERN_TYPE_F32] = {.name = "f32", .blck_size = 1, .type_size = sizeof(float), CONV(f32),
                       .vec_dot_type = KERN_TYPE_F32, .vec_dot = kern_ref_dot_f32_f32},
    [KERN_TYPE_F16] = {.name = "f16", .blck_size = 1, .type_size = sizeof(kern_f16), CONV(f16),
                       .vec_dot_type = KERN_TYPE_F32, .vec_dot = kern_ref_dot_f16_f32},
    [KERN_TYPE_BF16] = {.name = "bf16", .blck_size = 1, .type_size = sizeof(kern_bf16),
                        CONV(bf16), .vec_dot_type = KERN_TYPE_F32,
                        .vec_dot = kern_ref_dot_bf16_f32},
    [KERN_TYPE_Q4_0] = {.name = "q4_0", .blck_size = QK4_0, .type_size = sizeof(struct block_q4_0),
                        .is_quantized = true, CONV(q4_0), .vec_dot_type = KERN_TYPE_Q8_0,
                        .vec_dot = kern_ref_dot_q4_0_q8_0},
    [KERN_TYPE_Q4_1] = {.name = "q4_1", .blck_size = QK4_1, .type_size = sizeof(struct block_q4_1),
                        .is_quantized = true, CONV(q4_1), .vec_dot_type = KERN_TYPE_Q8_1,
                        .vec_dot = kern_ref_dot_q4_1_q8_1},
    [KERN_TYPE_Q5_0] = {.name = "q5_0", .blck_size = QK5_0, .type_size = sizeof(struct block_q5_0),
                        .is_quantized = true, CONV(q5_0), .vec_dot_type = KERN_TYPE_Q8_0,
                        .vec_dot = kern_ref_dot_q5_0_q8_0},
    [KERN_TYPE_Q5_1] = {.name = "q5_1", .blck_size = QK5_1, .type_size = sizeof(struct block_q5_1),
                        .is_quantized = true, CONV(q5_1), .vec_dot_type = KERN_TYPE_Q8_1,
                        .vec_dot = kern_ref_dot_q5_1_q8_1},
    [KERN_TYPE_Q8_0] = {.name = "q8_0", .blck_size = QK8_0, .type_size = sizeof(struct block_q8_0),
                        .is_quantized = true, CONV(q8_0), .vec_dot_type = KERN_TYPE_Q8_0,
                        .vec_dot = kern_ref_dot_q8_0_q8_0},
    [KERN_TYPE_Q8_1] = {.name = "q8_1", .blck_size = QK8_1, .type_size = sizeof(struct block_q8_1),
                        .is_quantized = true, CONV(q8_1), .vec_dot_type = KERN_TYPE_Q8_1},
    [KERN_TYPE_IQ4_NL] = {.name = "iq4_nl", .blck_size = QK4_NL,
                          .type_size = sizeof(struct block_iq4_nl), .is_quantized = true,
                          CONV(iq4_nl), .vec_dot_type = KERN_TYPE_Q8_0,
                          .vec_dot = kern_ref_dot_iq4_nl_q8_0},
    [KERN_TYPE_Q4_K] = {.name = "q4_K", .blck_size = QK_K, .type_size = sizeof(struct block_q4_K),
                        .is_quantized = true, .to_f32 = kern_ref_q4_K_to_f32,
                        .from_f32 = kern_ref_q4_K_from_f32,
                        .vec_dot_type = KERN_TYPE_Q8_1, .vec_dot = kern_ref_dot_q4_K_q8_1},
    [KERN_TYPE_Q5_K] = {.name = "q5_K", .blck_size = QK_K, .type_size = sizeof(struct block_q5_K),
                        .is_quantized = true, .to_f32 = kern_ref_q5_K_to_f32,
                        .from_f32 = kern_ref_q5_K_from_f32,
                        .vec_dot_type = KERN_TYPE_Q8_1, .vec_dot = kern_ref_dot_q5_K_q8_1},
    [KERN_TYPE_Q6_K] = {.name = "q6_K", .blck_size = QK_K, .type_size = sizeof(struct block_q6_K),
                        .is_quantized = true, .to_f32 = kern_ref_q6_K_to_f32,
                        .from_f32 = kern_ref_q6_K_from_f32,
                        .vec_dot_type = KERN_TYPE_Q8_0, .vec_dot = kern_ref_dot_q6_K_q8_0},
    [KERN_TYPE_Q2_K] = {.name = "q2_K", .blck_size = QK_K, .type_size = sizeof(struct block_q2_K),
                        .is_quantized = true, CONV(q2_K), .vec_dot_type = KERN_TYPE_Q8_0,
                        .vec_dot = kern_ref_dot_q2_K_q8_0},
    [KERN_TYPE_Q3_K] = {.name = "q3_K", .blck_size = QK_K, .type_size = sizeof(struct block_q3_K),
                        .is_quantized = true, CONV(q3_K), .vec_dot_type = KERN_TYPE_Q8_0,
                        .vec_dot = kern_ref_dot_q3_K_q8_0},
    [KERN_TYPE_IQ4_XS] = {.name = "iq4_xs", .blck_size = QK_K,
                          .type_size = sizeof(struct block_iq4_xs), .is_quantized = true,
                          CONV(iq4_xs), .vec_dot_type = KERN_TYPE_Q8_0,
                          .vec_dot = kern_ref_dot_iq4_xs_q8_0},
    [KERN_TYPE_MXFP4] = {.name = "mxfp4", .blck_size = QK_MXFP4,
                         .type_size = sizeof(struct block_mxfp4), .is_quantized = true,
                         CONV(mxfp4), .vec_dot_type = KERN_TYPE_Q8_0,
                         .vec_dot = kern_ref_dot_mxfp4_q8_0},
    [KERN_TYPE_Q8_K] = {.name = "q8_K", .blck_size = QK_K, .type_size = sizeof(struct block_q8_K),
                        .is_quantized = true, .to_f32 = kern_ref_q8_K_to_f32},
    [KERN_TYPE_I8] = {.name = "i8", .blck_size = 1, .type_size = sizeof(int8_t)},
    [KERN_TYPE_I16] = {.name = "i16", .blck_size = 1, .type_size = sizeof(int16_t)},
    [KERN_TYPE_I32] = {.name = "i32", .blck_size = 1, .type_size = sizeof(int32_t)},
    [KERN_TYPE_I64] = {.name = "i64", .blck_size = 1, .type_size = sizeof(int64_t)},
    [KERN_TYPE_F64] = {.name = "f64", .blck_size = 1, .type_size = sizeof(double)},
    /* Size-only rows of the i-quants warmd has no kernels for (ggml's block sizes): a GGUF
     * reader can list such files, the model loader names the type it refuses. */
    [KERN_TYPE_IQ2_XXS] = {.name = "iq2_xxs", .blck_size = QK_K, .type_size = 66, .is_quantized = true},
    [KERN_TYPE_IQ2_XS] = {.name = "iq2_xs", .blck_size = QK_K, .type_size = 74, .is_quantized = true},
    [KERN_TYPE_IQ3_XXS] = {.name = "iq3_xxs", .blck_size = QK_K, .type_size = 98, .is_quantized = true},
    [KERN_TYPE_IQ1_S] = {.name = "iq1_s", .blck_size = QK_K, .type_size = 50, .is_quantized = true},
    [KERN_TYPE_IQ3_S] = {.name = "iq3_s", .blck_size = QK_K, .type_size = 110, .is_quantized = true},
    [KERN_TYPE_IQ2_S] = {.name = "iq2_s", .blck_size = QK_K, .type_size = 82, .is_quantized = true},
    [KERN_TYPE_IQ1_M] = {.name = "iq1_m", .blck_size = QK_K, .type_size = 56, .is_quantized = true},
};

const struct kern_type_traits *kern_type_traits(int t) {
    if (t < 0 || t >= KERN_TYPE_COUNT || !type_table[t].name) return NULL;
    return &type_table[t];
}

int kern_type_from_name(const char *name) {
    if (!name) return -EINVAL;
    for (int t = 0; t < KERN_TYPE_COUNT; t++)
        if (type_table[t].name && strcasecmp(type_table[t].name, name) == 0) return t;
    return ERR_NOT_FOUND;
}

const char *kern_type_name(int t) {
    const struct kern_type_traits *tr = kern_type_traits(t);
    return tr ? tr->name : "?";
}

size_t kern_row_size(enum kern_type t, int64_t n) {
    const struct kern_type_traits *tr = kern_type_traits((int)t);
    size_t r;
    if (!tr || n < 0 || n % tr->blck_size != 0) return 0;
    if (!size_mul((size_t)(n / tr->blck_size), tr->type_size, &r)) return 0;
    return r;
}

/* ---- half precision ------------------------------------------------------------------ */

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}
static float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* Shifts m right by s (1..31) rounding to nearest, ties to even. */
static uint32_t shift_rne(uint32_t m, int s) {
    uint32_t r = m >> s, rem = m & ((1u << s) - 1), half = 1u << (s - 1);
    return r + (rem > half || (rem == half && (r & 1)));
}

/* IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. */
kern_f16 kern_fp32_to_fp16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: keep it quiet and keep the top payload bits */
        return (kern_f16)(sign | 0x7e00 | ((ax >> 13) & 0x3ff));
    if (ax >= 0x477ff000u) /* >= 65520 rounds past the largest half (65504): inf */
        return (kern_f16)(sign | 0x7c00);
    int e = (int)(ax >> 23);
    if (e >= 113) /* normal half: rebias 127 -> 15; a carry out of the mantissa is right */
        return (kern_f16)(sign | shift_rne(ax - (112u << 23), 13));
    /* subnormal half (units of 2^-24) or zero: value = m * 2^(e-150) */
    int s = 126 - e;
    if (s > 24) return sign;
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    return (kern_f16)(sign | shift_rne(m, s));
}

float kern_fp16_to_fp32(kern_f16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0) { /* zero or subnormal: exact in f32 */
        float v = (float)m * 0x1p-24f;
        return sign ? -v : v;
    }
    if (e == 31) return f32_from_bits(sign | 0x7f800000u | m << 13);
    return f32_from_bits(sign | (e + 112) << 23 | m << 13);
}

kern_bf16 kern_fp32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (kern_bf16)((x >> 16) | 0x40); /* quiet NaN */
    return (kern_bf16)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

float kern_bf16_to_fp32(kern_bf16 h) {
    return f32_from_bits((uint32_t)h << 16);
}

/* e >= 2: the normal float of exponent field e - 1; e = 0, 1: the subnormals 2^-128 and
 * 2^-127 (mantissa bit 21, 22). */
float kern_e8m0_half(uint8_t e) {
    return f32_from_bits(e >= 2 ? (uint32_t)(e - 1) << 23 : 0x00200000u << e);
}
