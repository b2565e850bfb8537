/* Private to kernels/cuda: the context struct, error mapping, and the device-side
 * decoders of every block type (the facts of kernels/types.h, ggml's layouts). */
#pragma once

#include <cuda_runtime.h>
#include <errno.h>
#include <stdint.h>

#include "kernels/cuda/cuda.h"

struct kern_cuda_ctx {
    int dev;
    cudaStream_t stream;
    cudaEvent_t t0, t1;
    size_t reserved; /* bytes held by this context's buffers */
};

/* A CUDA status as one of the API's error codes (see cuda.h). */
static inline int cuda_err(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return 0;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorInitializationError: return -ENODEV;
    case cudaErrorMemoryAllocation: return -ENOMEM;
    case cudaErrorInvalidValue: return -EINVAL;
    default: return -EIO;
    }
}

/* Launch status of the kernel just enqueued. */
static inline int cuda_launched(void) {
    return cuda_err(cudaGetLastError());
}

static inline unsigned cuda_blocks(int64_t n, int threads) {
    return (unsigned)((n + threads - 1) / threads);
}

/* Makes ctx's device current for this thread. */
static inline int cuda_use(struct kern_cuda_ctx *ctx) {
    return cuda_err(cudaSetDevice(ctx->dev));
}

/* ---- scalars ----------------------------------------------------------------------- */

/* f16 bits -> f32, exact for every value (normals, subnormals, inf, NaN). */
__device__ __forceinline__ float d_f16(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) return __uint_as_float(sign | 0x7f800000u | man << 13);
    /* magnitude bits moved to the f32 position, rebiased by 2^112 (covers subnormals) */
    float f = __uint_as_float((uint32_t)(h & 0x7fff) << 13) * 0x1p112f;
    return __uint_as_float(__float_as_uint(f) | sign);
}
__device__ __forceinline__ float d_bf16(uint16_t h) {
    return __uint_as_float((uint32_t)h << 16);
}
/* f32 -> f16 bits, round to nearest even (as kern_fp32_to_fp16). */
__device__ __forceinline__ uint16_t d_to_f16(float f) {
    unsigned short r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
}
/* f32 -> bf16 bits, round to nearest even, NaN kept quiet (as kern_fp32_to_bf16). */
__device__ __forceinline__ uint16_t d_to_bf16(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffff) > 0x7f800000u) return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

__device__ __forceinline__ uint16_t ld16(const uint8_t *p) {
    return (uint16_t)(p[0] | p[1] << 8);
}
__device__ __forceinline__ uint32_t ld32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

__constant__ static const int8_t d_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                1,    13,   25,  38,  53,  69,  89,  113};
/* kern_mxfp4_values: E2M1 doubled */
__constant__ static const int8_t d_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* kern_e8m0_half: 2^(e-128), the subnormals 2^-128 and 2^-127 for e = 0, 1 */
__device__ __forceinline__ float d_e8m0_half(uint8_t e) {
    return __uint_as_float(e >= 2 ? (uint32_t)(e - 1) << 23 : 0x00200000u << e);
}

/* ---- type facts (host and device) ---------------------------------------------------- */

/* The decoders work in units of 32 values: a block of the 32-value types, 8 of them in a
 * k-quant super-block. */
static_assert(QK8_0 == 32 && QK4_0 == 32 && QK4_1 == 32 && QK5_0 == 32 && QK5_1 == 32 &&
                  QK4_NL == 32 && QK_MXFP4 == 32, "a block is 32 values");
static_assert(QK_K == 8 * 32, "a k-quant super-block is 8 units of 32 values");

/* 32 activations as kern_matmul() sees them for a quantized weight type: the q8_0
 * quantizer of kernels/ref/quant.c, decoded (x' = fp16(d)·q, d = amax/127). dst may be
 * src: each value is read before it is written. */
__device__ __forceinline__ void act_q8_block(float *dst, const float *x) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f, dq = d_f16(d_to_f16(d));
    for (int j = 0; j < 32; j++) dst[j] = dq * (float)(int)roundf(__fmul_rn(x[j], id));
}

/* Bytes per block and values per block of the types the CUDA tier knows (the block
 * structs of kernels/types.h); 0 otherwise. */
__host__ __device__ static constexpr int type_block_bytes(int t) {
    switch (t) {
    case KERN_TYPE_F32: return sizeof(float);
    case KERN_TYPE_F16: case KERN_TYPE_BF16: return sizeof(kern_f16); /* = sizeof(kern_bf16) */
    case KERN_TYPE_Q8_0: return sizeof(struct block_q8_0);
    case KERN_TYPE_Q4_0: return sizeof(struct block_q4_0);
    case KERN_TYPE_Q4_1: return sizeof(struct block_q4_1);
    case KERN_TYPE_Q5_0: return sizeof(struct block_q5_0);
    case KERN_TYPE_Q5_1: return sizeof(struct block_q5_1);
    case KERN_TYPE_IQ4_NL: return sizeof(struct block_iq4_nl);
    case KERN_TYPE_Q4_K: return sizeof(struct block_q4_K);
    case KERN_TYPE_Q5_K: return sizeof(struct block_q5_K);
    case KERN_TYPE_Q6_K: return sizeof(struct block_q6_K);
    case KERN_TYPE_Q2_K: return sizeof(struct block_q2_K);
    case KERN_TYPE_Q3_K: return sizeof(struct block_q3_K);
    case KERN_TYPE_IQ4_XS: return sizeof(struct block_iq4_xs);
    case KERN_TYPE_MXFP4: return sizeof(struct block_mxfp4);
    default: return 0;
    }
}
__host__ __device__ static constexpr int type_block_values(int t) {
    switch (t) {
    case KERN_TYPE_F32: case KERN_TYPE_F16: case KERN_TYPE_BF16: return 1;
    case KERN_TYPE_Q4_K: case KERN_TYPE_Q5_K: case KERN_TYPE_Q6_K: return QK_K;
    case KERN_TYPE_Q2_K: case KERN_TYPE_Q3_K: case KERN_TYPE_IQ4_XS: return QK_K;
    default: return type_block_bytes(t) ? 32 : 0;
    }
}
/* Bytes of the first n values of a row of type t (n a multiple of the block size). */
__host__ __device__ static inline size_t type_row_bytes(int t, int64_t n) {
    return (size_t)(n / type_block_values(t)) * (size_t)type_block_bytes(t);
}
/* The nine KV cache types (DESIGN.md 3.3). */
static inline bool type_is_kv(int t) {
    return t == KERN_TYPE_F32 || t == KERN_TYPE_F16 || t == KERN_TYPE_BF16 || t == KERN_TYPE_Q8_0 ||
           t == KERN_TYPE_Q4_0 || t == KERN_TYPE_Q4_1 || t == KERN_TYPE_Q5_0 ||
           t == KERN_TYPE_Q5_1 || t == KERN_TYPE_IQ4_NL;
}

/* ---- decoders ----------------------------------------------------------------------- */

/* The 6-bit scale and min of sub-block j of a q4_K/q5_K super-block (12 packed bytes). */
__device__ __forceinline__ void k4_scale_min(int j, const uint8_t *s, float *sc, float *m) {
    if (j < 4) {
        *sc = (float)(s[j] & 63);
        *m = (float)(s[j + 4] & 63);
    } else {
        *sc = (float)((s[j + 4] & 0x0f) | (s[j - 4] >> 6) << 4);
        *m = (float)((s[j + 4] >> 4) | (s[j] >> 6) << 4);
    }
}

/* v[0..31] = values 32u .. 32u+31 of a row of type T (32-value unit u). Every type's
 * row is a whole number of units; for k-quants a unit is one sub-block (q4_K/q5_K: the
 * 32 values sharing a scale; q6_K: two 16-value scale groups). */
template <int T> __device__ __forceinline__ void deq32(const uint8_t *row, int64_t u, float *v);

template <> __device__ __forceinline__ void deq32<KERN_TYPE_F32>(const uint8_t *row, int64_t u, float *v) {
    const float4 *p = (const float4 *)(row + u * (32 * type_block_bytes(KERN_TYPE_F32)));
#pragma unroll
    for (int i = 0; i < 8; i++) {
        float4 f = p[i];
        v[4 * i] = f.x; v[4 * i + 1] = f.y; v[4 * i + 2] = f.z; v[4 * i + 3] = f.w;
    }
}
template <> __device__ __forceinline__ void deq32<KERN_TYPE_F16>(const uint8_t *row, int64_t u, float *v) {
    const uint4 *p = (const uint4 *)(row + u * (32 * type_block_bytes(KERN_TYPE_F16)));
#pragma unroll
    for (int i = 0; i < 4; i++) {
        uint4 w = p[i];
        uint32_t a[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            v[8 * i + 2 * k] = d_f16((uint16_t)a[k]);
            v[8 * i + 2 * k + 1] = d_f16((uint16_t)(a[k] >> 16));
        }
    }
}
template <> __device__ __forceinline__ void deq32<KERN_TYPE_BF16>(const uint8_t *row, int64_t u, float *v) {
    const uint4 *p = (const uint4 *)(row + u * (32 * type_block_bytes(KERN_TYPE_BF16)));
#pragma unroll
    for (int i = 0; i < 4; i++) {
        uint4 w = p[i];
        uint32_t a[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            v[8 * i + 2 * k] = d_bf16((uint16_t)a[k]);
            v[8 * i + 2 * k + 1] = d_bf16((uint16_t)(a[k] >> 16));
        }
    }
}
/* The 32-value block types are read with 2- or 4-byte loads (their sizes keep every block
 * 2-byte aligned, q4_1 and q5_1 4-byte aligned); little-endian: byte 2k is the low half. */
template <> __device__ __forceinline__ void deq32<KERN_TYPE_Q8_0>(const uint8_t *row, int64_t u, float *v) {
    const uint16_t *p = (const uint16_t *)(row + u * type_block_bytes(KERN_TYPE_Q8_0));
    const float d = d_f16(p[0]);
#pragma unroll
    for (int k = 0; k < 16; k++) {
        const uint16_t w = p[1 + k];
        v[2 * k] = d * (float)(int8_t)(w & 0xff);
        v[2 * k + 1] = d * (float)(int8_t)(w >> 8);
    }
}
/* qs byte j (j < 16) of a block: values j (low nibble) and j + 16 (high nibble) */
template <> __device__ __forceinline__ void deq32<KERN_TYPE_Q4_0>(const uint8_t *row, int64_t u, float *v) {
    const uint16_t *p = (const uint16_t *)(row + u * type_block_bytes(KERN_TYPE_Q4_0));
    const float d = d_f16(p[0]);
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const uint16_t w = p[1 + k];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int q = (w >> (8 * h)) & 0xff, j = 2 * k + h;
            v[j] = d * (float)((q & 0x0f) - 8);
            v[j + 16] = d * (float)((q >> 4) - 8);
        }
    }
}
template <> __device__ __forceinline__ void deq32<KERN_TYPE_Q4_1>(const uint8_t *row, int64_t u, float *v) {
    const uint32_t *p = (const uint32_t *)(row + u * type_block_bytes(KERN_TYPE_Q4_1));
    const float d = d_f16((uint16_t)p[0]), m = d_f16((uint16_t)(p[0] >> 16));
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const uint32_t w = p[1 + k];
#pragma unroll
        for (int h = 0; h < 4; h++) {
            const int q = (w >> (8 * h)) & 0xff, j = 4 * k + h;
            v[j] = d * (float)(q & 0x0f) + m;
            v[j + 16] = d * (float)(q >> 4) + m;
        }
    }
}
template <> __device__ __forceinline__ void deq32<KERN_TYPE_Q5_0>(const uint8_t *row, int64_t u, float *v) {
    const uint16_t *p = (const uint16_t *)(row + u * type_block_bytes(KERN_TYPE_Q5_0));
    const float d = d_f16(p[0]);
    const uint32_t qh = (uint32_t)p[1] | (uint32_t)p[2] << 16;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const uint16_t w = p[3 + k];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int q = (w >> (8 * h)) & 0xff, j = 2 * k + h;
            const int q0 = (q & 0x0f) | (int)((qh >> j) & 1) << 4;
            const int q1 = (q >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            v[j] = d * (float)(q0 - 16);
            v[j + 16] = d * (float)(q1 - 16);
        }
    }
}
template <> __device__ __forceinline__ void deq32<KERN_TYPE_Q5_1>(const uint8_t *row, int64_t u, float *v) {
    const uint32_t *p = (const uint32_t *)(row + u * type_block_bytes(KERN_TYPE_Q5_1));
    const float d = d_f16((uint16_t)p[0]), m = d_f16((uint16_t)(p[0] >> 16));
    const uint32_t qh = p[1];
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const uint32_t w = p[2 + k];
#pragma unroll
        for (int h = 0; h < 4; h++) {
            const int q = (w >> (8 * h)) & 0xff, j = 4 * k + h;
            const int q0 = (q & 0x0f) | (int)((qh >> j) & 1) << 4;
            const int q1 = (q >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            v[j] = d * (float)q0 + m;
            v[j + 16] = d * (float)q1 + m;
        }
    }
}
template <> __device__ __forceinline__ void deq32<KERN_TYPE_IQ4_NL>(const uint8_t *row, int64_t u, float *v) {
    const uint16_t *p = (const uint16_t *)(row + u * type_block_bytes(KERN_TYPE_IQ4_NL));
    const float d = d_f16(p[0]);
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const uint16_t w = p[1 + k];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int q = (w >> (8 * h)) & 0xff, j = 2 * k + h;
            v[j] = d * (float)d_iq4nl[q & 0x0f];
            v[j + 16] = d * (float)d_iq4nl[q >> 4];
        }
    }
}
/* mxfp4: 17-byte blocks, so byte loads (a block may start at any address); q4_0's nibble
 * order, x = 2^(e-128)·d_mxfp4[q] (as the reference: the code's value times the scale) */
template <> __device__ __forceinline__ void deq32<KERN_TYPE_MXFP4>(const uint8_t *row, int64_t u, float *v) {
    const uint8_t *b = row + u * type_block_bytes(KERN_TYPE_MXFP4);
    const float d = d_e8m0_half(b[0]);
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const int q = b[1 + j];
        v[j] = (float)d_mxfp4[q & 0x0f] * d;
        v[j + 16] = (float)d_mxfp4[q >> 4] * d;
    }
}
/* q4_K: x = d·sc·q - dmin·m; sub-block j: 32-byte group j/2 of qs, low nibbles for even j */
template <> __device__ __forceinline__ void deq32<KERN_TYPE_Q4_K>(const uint8_t *row, int64_t u, float *v) {
    const uint8_t *b = row + (u / 8) * type_block_bytes(KERN_TYPE_Q4_K);
    int j = (int)(u % 8);
    float d = d_f16(ld16(b)), dmin = d_f16(ld16(b + 2)), sc, m;
    k4_scale_min(j, b + 4, &sc, &m);
    const float ds = d * sc, dm = dmin * m;
    const uint8_t *q = b + 16 + (j / 2) * 32;
    const int shift = (j & 1) * 4;
#pragma unroll
    for (int l = 0; l < 32; l++) v[l] = ds * (float)((q[l] >> shift) & 0x0f) - dm;
}
/* q5_K: as q4_K with the 5th bit j of qh[l] */
template <> __device__ __forceinline__ void deq32<KERN_TYPE_Q5_K>(const uint8_t *row, int64_t u, float *v) {
    const uint8_t *b = row + (u / 8) * type_block_bytes(KERN_TYPE_Q5_K);
    int j = (int)(u % 8);
    float d = d_f16(ld16(b)), dmin = d_f16(ld16(b + 2)), sc, m;
    k4_scale_min(j, b + 4, &sc, &m);
    const float ds = d * sc, dm = dmin * m;
    const uint8_t *qh = b + 16, *q = b + 48 + (j / 2) * 32;
    const int shift = (j & 1) * 4;
#pragma unroll
    for (int l = 0; l < 32; l++) {
        int x = ((q[l] >> shift) & 0x0f) | ((qh[l] >> j) & 1) << 4;
        v[l] = ds * (float)x - dm;
    }
}
/* q6_K: unit j of a super-block is quarter j%4 of half j/4; 16 values per scale */
template <> __device__ __forceinline__ void deq32<KERN_TYPE_Q6_K>(const uint8_t *row, int64_t u, float *v) {
    const uint8_t *b = row + (u / 8) * type_block_bytes(KERN_TYPE_Q6_K);
    int j = (int)(u % 8), h = j / 4, k = j % 4;
    const uint8_t *ql = b + h * 64 + (k & 1) * 32, *qh = b + 128 + h * 32;
    const int8_t *sc = (const int8_t *)(b + 192) + h * 8 + 2 * k;
    float d = d_f16(ld16(b + 208));
    const int lshift = (k / 2) * 4, hshift = 2 * k;
    const float d0 = d * (float)sc[0], d1 = d * (float)sc[1];
#pragma unroll
    for (int l = 0; l < 32; l++) {
        int q = (((ql[l] >> lshift) & 0x0f) | ((qh[l] >> hshift) & 3) << 4) - 32;
        v[l] = (l < 16 ? d0 : d1) * (float)q;
    }
}

/* q2_K: unit j = 2-bit plane j%4 of the 32-byte quarter j/4 of qs; x = d·(sc&15)·q -
 * dmin·(sc>>4), one scale byte per 16 values */
template <> __device__ __forceinline__ void deq32<KERN_TYPE_Q2_K>(const uint8_t *row, int64_t u, float *v) {
    const uint8_t *b = row + (u / 8) * type_block_bytes(KERN_TYPE_Q2_K);
    int j = (int)(u % 8);
    const uint8_t *q = b + 16 + (j / 4) * 32;
    const int shift = 2 * (j % 4);
    float d = d_f16(ld16(b + 80)), dmin = d_f16(ld16(b + 82));
    const int s0 = b[2 * j], s1 = b[2 * j + 1];
    const float d0 = d * (float)(s0 & 15), m0 = dmin * (float)(s0 >> 4);
    const float d1 = d * (float)(s1 & 15), m1 = dmin * (float)(s1 >> 4);
#pragma unroll
    for (int l = 0; l < 32; l++) {
        int x = (q[l] >> shift) & 3;
        v[l] = l < 16 ? d0 * (float)x - m0 : d1 * (float)x - m1;
    }
}
/* q3_K: q2_K's planes at byte 32, the high bit j of hmask[l] (clear: code - 4), 6-bit
 * scales minus 32 (low nibbles in bytes 96..103, top bits in 104..107) */
__device__ __forceinline__ int q3k_scale(const uint8_t *s, int g) {
    int lo = g < 8 ? s[g] & 0x0f : s[g - 8] >> 4;
    return (lo | ((s[8 + g % 4] >> (2 * (g / 4))) & 3) << 4) - 32;
}
template <> __device__ __forceinline__ void deq32<KERN_TYPE_Q3_K>(const uint8_t *row, int64_t u, float *v) {
    const uint8_t *b = row + (u / 8) * type_block_bytes(KERN_TYPE_Q3_K);
    int j = (int)(u % 8);
    const uint8_t *q = b + 32 + (j / 4) * 32;
    const int shift = 2 * (j % 4);
    float d = d_f16(ld16(b + 108));
    const float d0 = d * (float)q3k_scale(b + 96, 2 * j), d1 = d * (float)q3k_scale(b + 96, 2 * j + 1);
#pragma unroll
    for (int l = 0; l < 32; l++) {
        int x = ((q[l] >> shift) & 3) - (((b[l] >> j) & 1) ? 0 : 4);
        v[l] = (l < 16 ? d0 : d1) * (float)x;
    }
}
/* iq4_xs: unit j = iq4_nl nibbles at byte 8 + 16j with scale d·(ls_j - 32) */
template <> __device__ __forceinline__ void deq32<KERN_TYPE_IQ4_XS>(const uint8_t *row, int64_t u, float *v) {
    const uint8_t *b = row + (u / 8) * type_block_bytes(KERN_TYPE_IQ4_XS);
    int j = (int)(u % 8);
    const int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 0x0f) | ((ld16(b + 2) >> (2 * j)) & 3) << 4;
    const float dl = d_f16(ld16(b)) * (float)(ls - 32);
    const uint8_t *q = b + 8 + 16 * j;
#pragma unroll
    for (int l = 0; l < 16; l++) {
        v[l] = dl * (float)d_iq4nl[q[l] & 0x0f];
        v[l + 16] = dl * (float)d_iq4nl[q[l] >> 4];
    }
}

/* Calls F.template operator()<T>() with the compile-time type T of runtime type t;
 * returns -EOPNOTSUPP for a type without a decoder. The one place types are dispatched. */
template <typename F> static inline int type_dispatch(int t, F &&f) {
    switch (t) {
    case KERN_TYPE_F32: return f.template operator()<KERN_TYPE_F32>();
    case KERN_TYPE_F16: return f.template operator()<KERN_TYPE_F16>();
    case KERN_TYPE_BF16: return f.template operator()<KERN_TYPE_BF16>();
    case KERN_TYPE_Q8_0: return f.template operator()<KERN_TYPE_Q8_0>();
    case KERN_TYPE_Q4_0: return f.template operator()<KERN_TYPE_Q4_0>();
    case KERN_TYPE_Q4_1: return f.template operator()<KERN_TYPE_Q4_1>();
    case KERN_TYPE_Q5_0: return f.template operator()<KERN_TYPE_Q5_0>();
    case KERN_TYPE_Q5_1: return f.template operator()<KERN_TYPE_Q5_1>();
    case KERN_TYPE_IQ4_NL: return f.template operator()<KERN_TYPE_IQ4_NL>();
    case KERN_TYPE_Q4_K: return f.template operator()<KERN_TYPE_Q4_K>();
    case KERN_TYPE_Q5_K: return f.template operator()<KERN_TYPE_Q5_K>();
    case KERN_TYPE_Q6_K: return f.template operator()<KERN_TYPE_Q6_K>();
    case KERN_TYPE_Q2_K: return f.template operator()<KERN_TYPE_Q2_K>();
    case KERN_TYPE_Q3_K: return f.template operator()<KERN_TYPE_Q3_K>();
    case KERN_TYPE_IQ4_XS: return f.template operator()<KERN_TYPE_IQ4_XS>();
    case KERN_TYPE_MXFP4: return f.template operator()<KERN_TYPE_MXFP4>();
    default: return -EOPNOTSUPP;
    }
}

/* Runtime-typed decoder for kernels that handle several types in one instantiation
 * (attention reads two cache types; 81 instantiations would cost compile time). The
 * branch is uniform across a warp. */
__device__ __forceinline__ void deq32_any(int t, const uint8_t *row, int64_t u, float *v) {
    switch (t) {
    case KERN_TYPE_F32: deq32<KERN_TYPE_F32>(row, u, v); break;
    case KERN_TYPE_F16: deq32<KERN_TYPE_F16>(row, u, v); break;
    case KERN_TYPE_BF16: deq32<KERN_TYPE_BF16>(row, u, v); break;
    case KERN_TYPE_Q8_0: deq32<KERN_TYPE_Q8_0>(row, u, v); break;
    case KERN_TYPE_Q4_0: deq32<KERN_TYPE_Q4_0>(row, u, v); break;
    case KERN_TYPE_Q4_1: deq32<KERN_TYPE_Q4_1>(row, u, v); break;
    case KERN_TYPE_Q5_0: deq32<KERN_TYPE_Q5_0>(row, u, v); break;
    case KERN_TYPE_Q5_1: deq32<KERN_TYPE_Q5_1>(row, u, v); break;
    default: deq32<KERN_TYPE_IQ4_NL>(row, u, v); break;
    }
}

/* Value i of a row of one of the nine KV types. */
__device__ __forceinline__ float deq1_kv(int t, const uint8_t *row, int64_t i) {
    const int64_t u = i / 32;
    const int j = (int)(i % 32), jj = j & 15, hi = j >> 4;
    switch (t) {
    case KERN_TYPE_F32: return ((const float *)row)[i];
    case KERN_TYPE_F16: return d_f16(((const uint16_t *)row)[i]);
    case KERN_TYPE_BF16: return d_bf16(((const uint16_t *)row)[i]);
    case KERN_TYPE_Q8_0: {
        const uint8_t *b = row + u * type_block_bytes(KERN_TYPE_Q8_0);
        return d_f16(ld16(b)) * (float)(int8_t)b[2 + j];
    }
    case KERN_TYPE_Q4_0: {
        const uint8_t *b = row + u * type_block_bytes(KERN_TYPE_Q4_0);
        return d_f16(ld16(b)) * (float)(((b[2 + jj] >> (4 * hi)) & 0x0f) - 8);
    }
    case KERN_TYPE_Q4_1: {
        const uint8_t *b = row + u * type_block_bytes(KERN_TYPE_Q4_1);
        return d_f16(ld16(b)) * (float)((b[4 + jj] >> (4 * hi)) & 0x0f) + d_f16(ld16(b + 2));
    }
    case KERN_TYPE_Q5_0: {
        const uint8_t *b = row + u * type_block_bytes(KERN_TYPE_Q5_0);
        int q = ((b[6 + jj] >> (4 * hi)) & 0x0f) | (int)((ld32(b + 2) >> j) & 1) << 4;
        return d_f16(ld16(b)) * (float)(q - 16);
    }
    case KERN_TYPE_Q5_1: {
        const uint8_t *b = row + u * type_block_bytes(KERN_TYPE_Q5_1);
        int q = ((b[8 + jj] >> (4 * hi)) & 0x0f) | (int)((ld32(b + 4) >> j) & 1) << 4;
        return d_f16(ld16(b)) * (float)q + d_f16(ld16(b + 2));
    }
    default: {
        const uint8_t *b = row + u * type_block_bytes(KERN_TYPE_IQ4_NL);
        return d_f16(ld16(b)) * (float)d_iq4nl[(b[2 + jj] >> (4 * hi)) & 0x0f];
    }
    }
}
