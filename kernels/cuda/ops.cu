/* Row ops, RoPE, the Walsh–Hadamard transform, argmax and the KV write on the device
 * (kernels/cuda/cuda.h). Each is the device twin of a kernels/ops.h or kernels/ref/
 * function; where bytes must equal the reference (the quantizers, the transform) the
 * float operations are spelled with explicitly rounded intrinsics (__fmul_rn, __fadd_rn)
 * so nvcc cannot contract them into FMAs that the C reference does not do. */
#include "kernels/cuda/common.cuh"

#include <math.h>

/* ---- element-wise ------------------------------------------------------------------ */

__global__ void silu_mul_kernel(float *y, const float *g, const float *u, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = g[i];
        y[i] = v / (1.0f + expf(-v)) * u[i];
    }
}

/* gelu(x) = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) */
__global__ void gelu_mul_kernel(float *y, const float *g, const float *u, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = g[i];
        y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v))) * u[i];
    }
}

__global__ void scale_kernel(float *x, int64_t n, float v) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= v;
}

__global__ void add_kernel(float *y, const float *x, int64_t n, int64_t n_total, int64_t n_rows_x) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_total) y[i] += x[(i / n % n_rows_x) * n + i % n];
}

extern "C" int kern_cuda_silu_mul(struct kern_cuda_ctx *ctx, float *y, const float *g, const float *u, int64_t n) {
    int r = cuda_use(ctx);
    if (r < 0 || n <= 0) return r < 0 ? r : -EINVAL;
    silu_mul_kernel<<<cuda_blocks(n, 256), 256, 0, ctx->stream>>>(y, g, u, n);
    return cuda_launched();
}

extern "C" int kern_cuda_gelu_mul(struct kern_cuda_ctx *ctx, float *y, const float *g, const float *u, int64_t n) {
    int r = cuda_use(ctx);
    if (r < 0 || n <= 0) return r < 0 ? r : -EINVAL;
    gelu_mul_kernel<<<cuda_blocks(n, 256), 256, 0, ctx->stream>>>(y, g, u, n);
    return cuda_launched();
}

extern "C" int kern_cuda_scale(struct kern_cuda_ctx *ctx, float *x, int64_t n, float v) {
    int r = cuda_use(ctx);
    if (r < 0 || n <= 0) return r < 0 ? r : -EINVAL;
    scale_kernel<<<cuda_blocks(n, 256), 256, 0, ctx->stream>>>(x, n, v);
    return cuda_launched();
}

extern "C" int kern_cuda_add(struct kern_cuda_ctx *ctx, float *y, const float *x, int64_t n, int64_t n_rows,
                             int64_t n_rows_x) {
    int r = cuda_use(ctx);
    if (r < 0 || n <= 0 || n_rows <= 0 || n_rows_x <= 0) return r < 0 ? r : -EINVAL;
    add_kernel<<<cuda_blocks(n * n_rows, 256), 256, 0, ctx->stream>>>(y, x, n, n * n_rows, n_rows_x);
    return cuda_launched();
}

/* ---- RMSNorm: one block per row ----------------------------------------------------- */

__device__ float block_sum(float v, float *red) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, n_warps = blockDim.x / 32;
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < n_warps ? red[lane] : 0.0f;
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__global__ void rmsnorm_kernel(float *y, const float *x, const float *w, int64_t n, float eps) {
    __shared__ float red[32];
    const float *xr = x + blockIdx.x * n;
    float *yr = y + blockIdx.x * n;
    float ss = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss, red);
    const float scale = rsqrtf(ss / (float)n + eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * scale * (w ? w[i] : 1.0f);
}

extern "C" int kern_cuda_rmsnorm(struct kern_cuda_ctx *ctx, float *y, const float *x, const float *w, int64_t n,
                                 int64_t n_rows, float eps) {
    int r = cuda_use(ctx);
    if (r < 0 || n <= 0 || n_rows <= 0) return r < 0 ? r : -EINVAL;
    rmsnorm_kernel<<<(unsigned)n_rows, 256, 0, ctx->stream>>>(y, x, w, n, eps);
    return cuda_launched();
}

/* ---- RoPE ------------------------------------------------------------------------------ */

struct rope_dev {
    int64_t n_dims;
    int neox;
    float freq_base, freq_scale, ext_factor, mscale, lo, hi;
    const float *freq_factors;
};

/* One thread per (token, pair): the angle of kern_rope_cache(), then every head. */
__global__ void rope_kernel(float *x, const int32_t *pos, int64_t n_tok, int64_t n_head, int64_t head_dim,
                            struct rope_dev p) {
    const int64_t half = p.n_dims / 2;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_tok * half) return;
    const int64_t t = i / half, pair = i % half, i0 = 2 * pair;
    double theta = (double)pos[t] * pow((double)p.freq_base, -(double)i0 / (double)p.n_dims);
    if (p.freq_factors) theta /= p.freq_factors[pair];
    float extrap = (float)theta;
    float angle = p.freq_scale * extrap;
    if (p.ext_factor != 0) {
        float y = ((float)i0 / 2.0f - p.lo) / fmaxf(0.001f, p.hi - p.lo);
        float mix = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * p.ext_factor;
        angle = __fadd_rn(__fmul_rn(angle, 1.0f - mix), __fmul_rn(extrap, mix)); /* as the CPU: no FMA */
    }
    const float c = cosf(angle) * p.mscale, s = sinf(angle) * p.mscale;
    const int64_t a = p.neox ? pair : 2 * pair, b = p.neox ? pair + half : 2 * pair + 1;
    float *row = x + t * n_head * head_dim;
    for (int64_t h = 0; h < n_head; h++) {
        float *xh = row + h * head_dim;
        float x0 = xh[a], x1 = xh[b];
        xh[a] = x0 * c - x1 * s;
        xh[b] = x0 * s + x1 * c;
    }
}

/* YaRN's correction dim, as kernels/ops.c computes it (host side, once per call). */
static float yarn_corr_dim(int64_t n_dims, int64_t n_ctx_orig, float n_rot, float base) {
    return (float)n_dims * logf((float)n_ctx_orig / (n_rot * 2.0f * (float)M_PI)) / (2.0f * logf(base));
}

extern "C" int kern_cuda_rope(struct kern_cuda_ctx *ctx, float *x, const int32_t *pos, int64_t n_tok,
                              int64_t n_head, int64_t head_dim, const struct kern_rope_params *p) {
    if (p->n_dims <= 0 || p->n_dims % 2 || p->n_dims > head_dim || n_tok <= 0 || n_head <= 0) return -EINVAL;
    int r = cuda_use(ctx);
    if (r < 0) return r;
    struct rope_dev d = {p->n_dims, p->neox, p->freq_base, p->freq_scale, p->ext_factor, p->attn_factor, 0, 0,
                         p->freq_factors};
    if (p->ext_factor != 0) {
        d.lo = fmaxf(0.0f, floorf(yarn_corr_dim(p->n_dims, p->n_ctx_orig, p->beta_fast, p->freq_base)));
        d.hi = fminf((float)(p->n_dims - 1), ceilf(yarn_corr_dim(p->n_dims, p->n_ctx_orig, p->beta_slow, p->freq_base)));
        d.mscale *= 1.0f + 0.1f * logf(1.0f / p->freq_scale);
    }
    rope_kernel<<<cuda_blocks(n_tok * (p->n_dims / 2), 128), 128, 0, ctx->stream>>>(x, pos, n_tok, n_head, head_dim, d);
    return cuda_launched();
}

/* ---- Walsh–Hadamard ----------------------------------------------------------------- */

/* In shared memory: every n_rot block of the n values of y, the butterflies of
 * kern_ref_hadamard() in its order (stage h = 1, 2, 4, ...), then the 1/√n_rot scale;
 * the same float operations, so the same bits. All threads of the block take part. */
__device__ void hadamard_smem(float *y, int64_t n, int64_t n_rot) {
    const int64_t half = n_rot / 2;
    for (int64_t h = 1; h < n_rot; h *= 2) {
        __syncthreads();
        for (int64_t p = threadIdx.x; p < n / 2; p += blockDim.x) {
            int64_t blk = p / half, q = p % half;
            int64_t j = blk * n_rot + (q / h) * 2 * h + q % h;
            float u = y[j], v = y[j + h];
            y[j] = __fadd_rn(u, v);
            y[j + h] = __fsub_rn(u, v);
        }
    }
    __syncthreads();
    const float scale = 1.0f / sqrtf((float)n_rot);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) y[i] = __fmul_rn(y[i], scale);
    __syncthreads();
}

__global__ void hadamard_kernel(float *x, int64_t n_rot) {
    extern __shared__ float sh[];
    float *blk = x + (int64_t)blockIdx.x * n_rot;
    for (int64_t i = threadIdx.x; i < n_rot; i += blockDim.x) sh[i] = blk[i];
    hadamard_smem(sh, n_rot, n_rot);
    for (int64_t i = threadIdx.x; i < n_rot; i += blockDim.x) blk[i] = sh[i];
}

static bool pow2(int64_t n) {
    return n >= 2 && (n & (n - 1)) == 0;
}

extern "C" int kern_cuda_hadamard(struct kern_cuda_ctx *ctx, float *x, int64_t n, int64_t n_rot) {
    if (!pow2(n_rot) || n_rot > 1024 || n <= 0 || n % n_rot) return -EINVAL;
    int r = cuda_use(ctx);
    if (r < 0) return r;
    hadamard_kernel<<<(unsigned)(n / n_rot), (unsigned)(n_rot / 2 < 32 ? 32 : n_rot / 2),
                      (size_t)n_rot * sizeof(float), ctx->stream>>>(x, n_rot);
    return cuda_launched();
}

/* ---- argmax ------------------------------------------------------------------------ */

__global__ void argmax_kernel(int32_t *idx, const float *x, int64_t n) {
    __shared__ float bv[32];
    __shared__ int32_t bi[32];
    const float *row = x + blockIdx.x * n;
    float best = -INFINITY;
    int32_t at = -1;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        if (row[i] > best || at < 0) {
            best = row[i];
            at = (int32_t)i;
        }
    /* larger value wins, the lower index on ties (the CPU sampler's "first") */
    for (int o = 16; o > 0; o /= 2) {
        float v = __shfl_xor_sync(0xffffffffu, best, o);
        int32_t j = __shfl_xor_sync(0xffffffffu, at, o);
        if (j >= 0 && (at < 0 || v > best || (v == best && j < at))) {
            best = v;
            at = j;
        }
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
        bv[warp] = best;
        bi[warp] = at;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)blockDim.x / 32; w++)
            if (bi[w] >= 0 && (at < 0 || bv[w] > best || (bv[w] == best && bi[w] < at))) {
                best = bv[w];
                at = bi[w];
            }
        idx[blockIdx.x] = at;
    }
}

extern "C" int kern_cuda_argmax(struct kern_cuda_ctx *ctx, int32_t *idx, const float *x, int64_t n,
                                int64_t n_rows) {
    int r = cuda_use(ctx);
    if (r < 0 || n <= 0 || n_rows <= 0) return r < 0 ? r : -EINVAL;
    argmax_kernel<<<(unsigned)n_rows, 256, 0, ctx->stream>>>(idx, x, n);
    return cuda_launched();
}

/* ---- the KV write: rotate, then quantize (bytes equal kernels/ref/quant.c) ---------- */

/* block absmax, with the signed value that has it (first one on ties) */
__device__ float q_absmax(const float *x, float *signed_max) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++) {
        float a = fabsf(x[j]);
        if (a > amax) {
            amax = a;
            max = x[j];
        }
    }
    *signed_max = max;
    return amax;
}

__device__ void q_minmax(const float *x, float *lo, float *hi) {
    float l = x[0], h = x[0];
    for (int j = 1; j < 32; j++) {
        l = x[j] < l ? x[j] : l;
        h = x[j] > h ? x[j] : h;
    }
    *lo = l;
    *hi = h;
}

__device__ void st16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
__device__ void st32(uint8_t *p, uint32_t v) {
    for (int k = 0; k < 4; k++) p[k] = (uint8_t)(v >> (8 * k));
}

/* (int8_t)(v) of the reference for v >= 0 (truncation) */
__device__ __forceinline__ int trunc_i(float v) {
    return (int)v;
}

template <int T> __device__ void quant32(uint8_t *b, const float *x);

template <> __device__ void quant32<KERN_TYPE_Q8_0>(uint8_t *b, const float *x) {
    float max, amax = q_absmax(x, &max);
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    st16(b, d_to_f16(d));
    for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)(int8_t)roundf(__fmul_rn(x[j], id));
}
template <> __device__ void quant32<KERN_TYPE_Q4_0>(uint8_t *b, const float *x) {
    float max;
    q_absmax(x, &max);
    float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    st16(b, d_to_f16(d));
    for (int j = 0; j < 16; j++) {
        int lo = min(15, trunc_i(__fadd_rn(__fmul_rn(x[j], id), 8.5f)));
        int hi = min(15, trunc_i(__fadd_rn(__fmul_rn(x[j + 16], id), 8.5f)));
        b[2 + j] = (uint8_t)(lo | hi << 4);
    }
}
template <> __device__ void quant32<KERN_TYPE_Q4_1>(uint8_t *b, const float *x) {
    float lo, hi;
    q_minmax(x, &lo, &hi);
    float d = (hi - lo) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    st16(b, d_to_f16(d));
    st16(b + 2, d_to_f16(lo));
    for (int j = 0; j < 16; j++) {
        int q0 = min(15, trunc_i(__fadd_rn(__fmul_rn(__fsub_rn(x[j], lo), id), 0.5f)));
        int q1 = min(15, trunc_i(__fadd_rn(__fmul_rn(__fsub_rn(x[j + 16], lo), id), 0.5f)));
        b[4 + j] = (uint8_t)(q0 | q1 << 4);
    }
}
template <> __device__ void quant32<KERN_TYPE_Q5_0>(uint8_t *b, const float *x) {
    float max;
    q_absmax(x, &max);
    float d = max / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    uint32_t qh = 0;
    st16(b, d_to_f16(d));
    for (int j = 0; j < 16; j++) {
        int q0 = min(31, trunc_i(__fadd_rn(__fmul_rn(x[j], id), 16.5f)));
        int q1 = min(31, trunc_i(__fadd_rn(__fmul_rn(x[j + 16], id), 16.5f)));
        b[6 + j] = (uint8_t)((q0 & 0x0f) | (q1 & 0x0f) << 4);
        qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
    }
    st32(b + 2, qh);
}
template <> __device__ void quant32<KERN_TYPE_Q5_1>(uint8_t *b, const float *x) {
    float lo, hi;
    q_minmax(x, &lo, &hi);
    float d = (hi - lo) / 31.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    uint32_t qh = 0;
    st16(b, d_to_f16(d));
    st16(b + 2, d_to_f16(lo));
    for (int j = 0; j < 16; j++) {
        int q0 = min(31, trunc_i(__fadd_rn(__fmul_rn(__fsub_rn(x[j], lo), id), 0.5f)));
        int q1 = min(31, trunc_i(__fadd_rn(__fmul_rn(__fsub_rn(x[j + 16], lo), id), 0.5f)));
        b[8 + j] = (uint8_t)((q0 & 0x0f) | (q1 & 0x0f) << 4);
        qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
    }
    st32(b + 4, qh);
}

/* iq4_nl: the code nearest to x (the lower one on a tie), as kernels/ref/quant.c */
__device__ int iq4nl_nearest(float x) {
    if (x <= d_iq4nl[0]) return 0;
    if (x >= d_iq4nl[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (x < d_iq4nl[mid]) hi = mid;
        else lo = mid;
    }
    return __fsub_rn(x, (float)d_iq4nl[lo]) < __fsub_rn((float)d_iq4nl[hi], x) ? lo : hi;
}

__device__ float iq4nl_fit(const float *x, const float *w, float id, float *sumq2_out) {
    float sumqx = 0.0f, sumq2 = 0.0f;
    for (int j = 0; j < 32; j++) {
        float q = d_iq4nl[iq4nl_nearest(__fmul_rn(id, x[j]))];
        sumqx = __fadd_rn(sumqx, __fmul_rn(__fmul_rn(w[j], q), x[j]));
        sumq2 = __fadd_rn(sumq2, __fmul_rn(__fmul_rn(w[j], q), q));
    }
    *sumq2_out = sumq2;
    return sumqx;
}

template <> __device__ void quant32<KERN_TYPE_IQ4_NL>(uint8_t *b, const float *x) {
    float w[32], max, sumq2;
    float amax = q_absmax(x, &max);
    for (int j = 0; j < 16; j++) b[2 + j] = 0;
    st16(b, d_to_f16(0.0f));
    if (amax < 1e-15f) return;
    for (int j = 0; j < 32; j++) w[j] = __fmul_rn(x[j], x[j]);
    float d = -max / (float)d_iq4nl[0];
    float sumqx = iq4nl_fit(x, w, 1.0f / d, &sumq2);
    d = sumqx / sumq2;
    float best = __fmul_rn(d, sumqx);
    for (int k = -7; k <= 7; k++) {
        float id = (float)(k + d_iq4nl[0]) / max;
        sumqx = iq4nl_fit(x, w, id, &sumq2);
        if (sumq2 > 0.0f && __fmul_rn(sumqx, sumqx) > __fmul_rn(best, sumq2)) {
            d = sumqx / sumq2;
            best = __fmul_rn(d, sumqx);
        }
    }
    st16(b, d_to_f16(d));
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 16; j++) {
        int q0 = iq4nl_nearest(__fmul_rn(id, x[j])), q1 = iq4nl_nearest(__fmul_rn(id, x[j + 16]));
        b[2 + j] = (uint8_t)(q0 | q1 << 4);
    }
}

/* One block per token: the row into shared memory, rotated there, then written in the
 * cache's type (one thread per value for float types, per 32-value block otherwise). */
template <int T>
__global__ void kv_store_kernel(uint8_t *dst, size_t dst_stride, const int32_t *cell, const float *src, int64_t n,
                                int64_t n_rot) {
    extern __shared__ float row[];
    const float *s = src + blockIdx.x * n;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) row[i] = s[i];
    __syncthreads();
    if (n_rot) hadamard_smem(row, n, n_rot);
    uint8_t *d = dst + (size_t)cell[blockIdx.x] * dst_stride;
    if constexpr (T == KERN_TYPE_F32) {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ((float *)d)[i] = row[i];
    } else if constexpr (T == KERN_TYPE_F16) {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ((uint16_t *)d)[i] = d_to_f16(row[i]);
    } else if constexpr (T == KERN_TYPE_BF16) {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ((uint16_t *)d)[i] = d_to_bf16(row[i]);
    } else {
        for (int64_t u = threadIdx.x; u < n / 32; u += blockDim.x) quant32<T>(d + u * type_block_bytes(T), row + u * 32);
    }
}

extern "C" int kern_cuda_kv_store(struct kern_cuda_ctx *ctx, void *dst, size_t dst_stride, const int32_t *cell,
                                  const float *src, int64_t n_tok, enum kern_type t, int64_t n, int64_t n_rot) {
    if (!type_is_kv(t)) return -EOPNOTSUPP;
    if (n <= 0 || n % 32 || n_tok <= 0) return -EINVAL;
    if (n_rot && (!pow2(n_rot) || n_rot > 1024 || n % n_rot)) return -EINVAL;
    if ((size_t)n * sizeof(float) > 48 * 1024) return -EOPNOTSUPP; /* the row lives in shared memory */
    int r = cuda_use(ctx);
    if (r < 0) return r;
    cudaStream_t s = ctx->stream;
    return type_dispatch(t, [&]<int T>() {
        if constexpr (T == KERN_TYPE_Q4_K || T == KERN_TYPE_Q5_K || T == KERN_TYPE_Q6_K ||
                      T == KERN_TYPE_Q2_K || T == KERN_TYPE_Q3_K || T == KERN_TYPE_IQ4_XS ||
                      T == KERN_TYPE_MXFP4) { /* weight types, not KV types (type_is_kv) */
            return -EOPNOTSUPP;
        } else {
            kv_store_kernel<T><<<(unsigned)n_tok, 256, (size_t)n * sizeof(float), s>>>((uint8_t *)dst, dst_stride,
                                                                                      cell, src, n, n_rot);
            return cuda_launched();
        }
    });
}
