/* Numeric types, their block layouts (ggml's, byte for byte) and the traits table. */
#pragma once

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ggml's type ids; gaps are ids ggml removed or that warmd does not know. */
enum kern_type {
    KERN_TYPE_F32 = 0,
    KERN_TYPE_F16 = 1,
    KERN_TYPE_Q4_0 = 2,
    KERN_TYPE_Q4_1 = 3,
    KERN_TYPE_Q5_0 = 6,
    KERN_TYPE_Q5_1 = 7,
    KERN_TYPE_Q8_0 = 8,
    KERN_TYPE_Q8_1 = 9,
    KERN_TYPE_Q2_K = 10,
    KERN_TYPE_Q3_K = 11,
    KERN_TYPE_Q4_K = 12,
    KERN_TYPE_Q5_K = 13,
    KERN_TYPE_Q6_K = 14,
    KERN_TYPE_Q8_K = 15,
    KERN_TYPE_IQ2_XXS = 16, /* size only (no kernels): the reader sizes, the loader refuses */
    KERN_TYPE_IQ2_XS = 17,
    KERN_TYPE_IQ3_XXS = 18,
    KERN_TYPE_IQ1_S = 19,
    KERN_TYPE_IQ4_NL = 20,
    KERN_TYPE_IQ3_S = 21,
    KERN_TYPE_IQ2_S = 22,
    KERN_TYPE_IQ4_XS = 23,
    KERN_TYPE_I8 = 24,
    KERN_TYPE_I16 = 25,
    KERN_TYPE_I32 = 26,
    KERN_TYPE_I64 = 27,
    KERN_TYPE_F64 = 28,
    KERN_TYPE_IQ1_M = 29,
    KERN_TYPE_BF16 = 30,
    /* 31..38: ggml's removed repacked types and the ternary tq1_0/tq2_0, unknown here */
    KERN_TYPE_MXFP4 = 39, /* OCP microscaling FP4 (gpt-oss experts) */
    KERN_TYPE_COUNT = 40
};

/* Weight layouts. KERN_LAYOUT_ROWS is the file's: n_out rows of kern_row_size(wt, n_in)
 * bytes. KERN_LAYOUT_ROWS8 interleaves each group of 8 rows block by block, so that one
 * SIMD register holds the same block of 8 rows and its lanes are rows: no horizontal sums
 * in decode and no repacking per call in prefill (the engine repacks at load). Same bytes
 * as the rows. For each group of rows, for each block j, the 8 rows' fields, row r's 4
 * bytes at 4r within every 32 (2 bytes at 2r for fp16 fields):
 *   f32: value k of the 8 rows, row r's at 4r of 32 bytes
 *   f16, bf16: value k of the 8 rows, row r's at 2r of 16 bytes
 *   q4_0, iq4_nl: d[8] | qs in 4 chunks, chunk k = bytes 4k..4k+3 of each row's qs
 *   q4_1: d[8] | m[8] | qs in 4 chunks;  q5_0: d[8] | qh in 1 chunk | qs in 4 chunks;
 *   q5_1: d[8] | m[8] | qh in 1 chunk | qs in 4 chunks
 *   q8_0: d[8] | qs in 8 chunks, likewise
 *   q4_K: d[8] | dmin[8] | scales in 3 chunks (chunk w = bytes 4w..4w+3) | qs in 4 × 8
 *         chunks, chunk (q, k) = bytes 32q + 4k..+3 (sub-blocks 2q, 2q+1 of values 4k..)
 *   q5_K: q4_K's with qh in 8 chunks (chunk k = bytes 4k..4k+3) before the qs
 *   q6_K: d[8] | scales in 8 chunks of 16 bytes (chunk j: row r's scales 2j, 2j+1 at 2r)
 *         | ql in 32 chunks (chunk c = bytes 4c..4c+3) | qh in 16 chunks, likewise
 *   q3_K: d[8] | scales in 3 chunks | hmask in 8 chunks | qs in 16 chunks
 *   q2_K: d[8] | dmin[8] | scales in 8 chunks of 16 bytes, as q6_K's | qs in 16 chunks
 *   iq4_xs: d[8] | scales_h[8] | scales_l in 1 chunk | qs in 32 chunks (chunk c = bytes
 *         4c..4c+3: sub-block c / 4, its values 4(c % 4).. low, 16 + 4(c % 4).. high)
 *   mxfp4: e[8] (1 byte each, row r's at r) | qs in 4 chunks as q4_0's: 136 bytes */
enum kern_layout { KERN_LAYOUT_ROWS = 0, KERN_LAYOUT_ROWS8 = 1 };

typedef uint16_t kern_f16;   /* IEEE 754 binary16 bits */
typedef uint16_t kern_bf16;  /* bfloat16 bits */

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK4_NL 32
#define QK_MXFP4 32
#define QK_K 256

/* d = scale; x = d * q */
struct block_q8_0 { kern_f16 d; int8_t qs[QK8_0]; };
/* x = d * (q - 8); nibble j of byte i: low = value i, high = value i + 16 */
struct block_q4_0 { kern_f16 d; uint8_t qs[QK4_0 / 2]; };
/* x = d * q + m */
struct block_q4_1 { kern_f16 d, m; uint8_t qs[QK4_1 / 2]; };
/* x = d * (q - 16), 5th bits in qh (bit i = value i) */
struct block_q5_0 { kern_f16 d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; };
/* x = d * q + m */
struct block_q5_1 { kern_f16 d, m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; };
/* activations for q*_1 dot products: s = d * sum(qs) */
struct block_q8_1 { kern_f16 d, s; int8_t qs[QK8_1]; };
/* x = d * kvalues_iq4nl[q] */
struct block_iq4_nl { kern_f16 d; uint8_t qs[QK4_NL / 2]; };
struct block_q4_K { kern_f16 d, dmin; uint8_t scales[12]; uint8_t qs[QK_K / 2]; };
struct block_q5_K { kern_f16 d, dmin; uint8_t scales[12]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; };
struct block_q6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; kern_f16 d; };
struct block_q8_K { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; };
/* x = d·(sc_g & 15)·q - dmin·(sc_g >> 4), q 2 bits, one scale byte per group g of 16;
 * value v: bits 2k of qs[32h + l] (h = v/128, k = (v%128)/32, l = v%32) */
struct block_q2_K { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; kern_f16 d, dmin; };
/* x = d·(sc_g - 32)·(q - 4·!hbit), q 2 bits placed as in q2_K, hbit = bit 4h+k of
 * hmask[l]; 16 6-bit scales: low 4 bits in the nibbles of bytes 0..7 (g < 8 low, else
 * high nibble of byte g-8), top 2 bits at bits 2·(g/4) of byte 8 + g%4 */
struct block_q3_K { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; kern_f16 d; };
/* x = d·(ls_j - 32)·kern_iq4nl_values[q] per sub-block j of 32 (nibbles as iq4_nl);
 * ls_j 6 bits: low 4 in nibble j%2 of scales_l[j/2], top 2 at bits 2j of scales_h */
struct block_iq4_xs { kern_f16 d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; };
/* MXFP4 (OCP MX v1.0): x = 2^(e-127) · E2M1(q), stored as x = kern_e8m0_half(e) ·
 * kern_mxfp4_values[q] (the E2M1 values doubled, so integers; the scale halved, as ggml);
 * nibbles as q4_0's: low nibble of byte j = value j, high = value j + 16. */
struct block_mxfp4 { uint8_t e; uint8_t qs[QK_MXFP4 / 2]; };

static_assert(sizeof(struct block_q8_0) == 34, "block_q8_0 size");
static_assert(sizeof(struct block_q4_0) == 18, "block_q4_0 size");
static_assert(sizeof(struct block_q4_1) == 20, "block_q4_1 size");
static_assert(sizeof(struct block_q5_0) == 22, "block_q5_0 size");
static_assert(sizeof(struct block_q5_1) == 24, "block_q5_1 size");
static_assert(sizeof(struct block_q8_1) == 36, "block_q8_1 size");
static_assert(sizeof(struct block_iq4_nl) == 18, "block_iq4_nl size");
static_assert(sizeof(struct block_q4_K) == 144, "block_q4_K size");
static_assert(sizeof(struct block_q5_K) == 176, "block_q5_K size");
static_assert(sizeof(struct block_q6_K) == 210, "block_q6_K size");
static_assert(sizeof(struct block_q8_K) == 292, "block_q8_K size");
static_assert(sizeof(struct block_q2_K) == 84, "block_q2_K size");
static_assert(sizeof(struct block_q3_K) == 110, "block_q3_K size");
static_assert(sizeof(struct block_iq4_xs) == 136, "block_iq4_xs size");
static_assert(sizeof(struct block_mxfp4) == 17, "block_mxfp4 size");

typedef void (*kern_to_f32_fn)(float *dst, const void *src, int64_t n);
typedef void (*kern_from_f32_fn)(void *dst, const float *src, int64_t n);
/* Σ w[i]·x[i] over n values: w a row of the weight type, x a row of its vec_dot_type. */
typedef float (*kern_vec_dot_fn)(const void *w, const void *x, int64_t n);

struct kern_type_traits {
    const char *name;           /* "q8_0", as llama.cpp spells it */
    int64_t blck_size;          /* values per block */
    size_t type_size;           /* bytes per block */
    bool is_quantized;
    kern_to_f32_fn to_f32;      /* reference; n a multiple of blck_size; NULL if unsupported */
    kern_from_f32_fn from_f32;  /* reference quantizer (ggml's rules; k-quants: a simpler
                                 * rule, see kernels/ref/quant.c); NULL if unsupported */
    /* Matmul: activations are converted to vec_dot_type (q8_0, q8_1 or f32), then
     * vec_dot (reference) runs row by row; vec_dot NULL = no matmul for this type. */
    enum kern_type vec_dot_type;
    kern_vec_dot_fn vec_dot;
};

/* The traits row of t, or NULL when t is not a type warmd knows (any id, even hostile). */
const struct kern_type_traits *kern_type_traits(int t);
/* Type by name ("f16", "Q8_0", case-insensitive); < 0 when unknown. */
int kern_type_from_name(const char *name);
/* Name of t, "?" when unknown. */
const char *kern_type_name(int t);
/* Bytes of a row of n values of type t; 0 when n is not a multiple of the block size. */
size_t kern_row_size(enum kern_type t, int64_t n);

kern_f16 kern_fp32_to_fp16(float f);
float kern_fp16_to_fp32(kern_f16 h);
kern_bf16 kern_fp32_to_bf16(float f);  /* round to nearest even, NaN kept quiet */
float kern_bf16_to_fp32(kern_bf16 h);

/* The 16 IQ4_NL code values. */
extern const int8_t kern_iq4nl_values[16];
/* The 16 MXFP4 code values: E2M1 (sign, 2 exponent bits, 1 mantissa bit) times 2. */
extern const int8_t kern_mxfp4_values[16];
/* 2^(e-128): an E8M0 scale byte halved (matching the doubled code values); exact for
 * every e (e = 0, 1 are the subnormals 2^-128, 2^-127; 255 is 2^127, no NaN). */
float kern_e8m0_half(uint8_t e);
