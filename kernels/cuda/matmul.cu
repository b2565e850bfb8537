/* Matrix products on the device: the dequantizing matrix-vector kernel for decode and
 * the tensor-core GEMM for prefill (kernels/cuda/cuda.h).
 *
 * Why no cuBLAS: prefill dequantizes W to f16 once per call and multiplies on the tensor
 * cores with WMMA (f16 × f16, f32 accumulation), which is what cuBLAS on dequantized f16
 * tiles would do, without a 100+ MiB library that must be present at run time (the
 * runtime is linked statically so that binaries start on machines without CUDA). */
#include "kernels/cuda/common.cuh"

#include <cuda_fp16.h>
#include <mma.h>

/* ---- activations as the CPU sees them ------------------------------------------------
 * kern_matmul() quantizes activations to q8_0 / q8_1 (the weight type's vec_dot_type) for
 * every quantized weight type and sums d_w·d_x·Σ q_w·q_x. The device does the same
 * rounding and keeps the result as f32 (x' = fp16(d)·q, the value the q8 block holds), so
 * Σ w·x' equals the CPU's sum up to float summation order. (q8_1's extra s = fp16(d·Σq),
 * used by q4_1/q5_1/k-quant offsets on the CPU, is rounded to f16 there; that difference
 * is below 2^-11 of the offset term.) Float weight types keep f32 activations. */

static bool act_is_q8(int wt) {
    return wt != KERN_TYPE_F32 && wt != KERN_TYPE_F16 && wt != KERN_TYPE_BF16;
}

/* one thread per 32-value block (act_q8_block) */
__global__ void act_q8_kernel(float *__restrict__ dst, const float *__restrict__ src, int64_t n_blocks) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_blocks) act_q8_block(dst + i * 32, src + i * 32);
}

/* ---- decode: y[t][r] = Σ_u deq32(W_r, u) · x_t[32u..32u+31] ------------------------- */

#define MV_WARPS 4 /* rows per block: one warp per weight row */

/* One warp per weight row; lane l takes the 32-value units l, l+32, ...; n_tok <= 8
 * tokens share every decoded unit. x is read through the L1 (every warp of the block
 * reads the same x). */
template <int T>
__global__ void __launch_bounds__(MV_WARPS * 32) matvec_kernel(float *__restrict__ y, const uint8_t *__restrict__ w,
                                                               size_t row_bytes, const float *__restrict__ x,
                                                               int64_t n_in, int64_t n_out, int n_tok) {
    const int lane = threadIdx.x % 32;
    const int64_t r = (int64_t)blockIdx.x * MV_WARPS + threadIdx.x / 32;
    if (r >= n_out) return;
    const uint8_t *row = w + (size_t)r * row_bytes;
    float acc[KERN_CUDA_MATVEC_MAX_TOK] = {0};
    const int64_t n_units = n_in / 32;
    for (int64_t u = lane; u < n_units; u += 32) {
        float v[32];
        deq32<T>(row, u, v);
#pragma unroll
        for (int t = 0; t < KERN_CUDA_MATVEC_MAX_TOK; t++) {
            if (t >= n_tok) break;
            const float4 *xv = (const float4 *)(x + (int64_t)t * n_in + u * 32);
            float s = 0;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                float4 f = __ldg(xv + i);
                s += v[4 * i] * f.x + v[4 * i + 1] * f.y + v[4 * i + 2] * f.z + v[4 * i + 3] * f.w;
            }
            acc[t] += s;
        }
    }
#pragma unroll
    for (int t = 0; t < KERN_CUDA_MATVEC_MAX_TOK; t++) {
        if (t >= n_tok) break;
        float s = acc[t];
        for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) y[(int64_t)t * n_out + r] = s;
    }
}

/* One token (the decode step): each warp takes MV1_ROWS rows and keeps the x unit it loads
 * in registers for all of them, so x is read from L1 once per MV1_ROWS weight rows (for
 * 4-bit weights x would otherwise be ~7× the bytes of W). */
#define MV1_WARPS 2
#define MV1_ROWS 4

template <int T>
__global__ void __launch_bounds__(MV1_WARPS * 32) matvec1_kernel(float *__restrict__ y, const uint8_t *__restrict__ w,
                                                                 size_t row_bytes, const float *__restrict__ x,
                                                                 int64_t n_in, int64_t n_out) {
    const int lane = threadIdx.x % 32;
    const int64_t r0 = ((int64_t)blockIdx.x * MV1_WARPS + threadIdx.x / 32) * MV1_ROWS;
    if (r0 >= n_out) return;
    float acc[MV1_ROWS] = {0};
    const int64_t n_units = n_in / 32;
    for (int64_t u = lane; u < n_units; u += 32) {
        float xv[32];
        const float4 *xp = (const float4 *)(x + u * 32);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            float4 f = __ldg(xp + i);
            xv[4 * i] = f.x; xv[4 * i + 1] = f.y; xv[4 * i + 2] = f.z; xv[4 * i + 3] = f.w;
        }
#pragma unroll
        for (int rr = 0; rr < MV1_ROWS; rr++) {
            if (r0 + rr >= n_out) break;
            float v[32];
            deq32<T>(w + (size_t)(r0 + rr) * row_bytes, u, v);
            float s = 0;
#pragma unroll
            for (int i = 0; i < 32; i++) s += v[i] * xv[i];
            acc[rr] += s;
        }
    }
#pragma unroll
    for (int rr = 0; rr < MV1_ROWS; rr++) {
        float s = acc[rr];
        for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0 && r0 + rr < n_out) y[r0 + rr] = s;
    }
}

/* ---- prefill: dequantize to f16, then WMMA ------------------------------------------ */

#define MM_TILE 64 /* output tile per block: 64 tokens × 64 weight rows, 4 warps of 32×32 */

static int64_t round_up(int64_t n, int64_t m) {
    return (n + m - 1) / m * m;
}

/* dst (n_rows, n) f16 = rows of type T (row_bytes apart); one thread per 32-value unit */
template <int T>
__global__ void to_f16_kernel(__half *__restrict__ dst, const uint8_t *__restrict__ src, size_t row_bytes,
                              int64_t n, int64_t n_rows) {
    const int64_t n_units = n / 32;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_units * n_rows) return;
    const int64_t r = i / n_units, u = i % n_units;
    float v[32];
    deq32<T>(src + (size_t)r * row_bytes, u, v);
    __half2 *d = (__half2 *)(dst + r * n + u * 32);
#pragma unroll
    for (int j = 0; j < 16; j++) d[j] = __floats2half2_rn(v[2 * j], v[2 * j + 1]);
}

/* C (M, N) f32 = A (M, K) f16 row-major · B, B given as N rows of K (col-major K × N).
 * A has round_up(M, 64) rows and B round_up(N, 64) rows allocated (the padding rows
 * feed only outputs that are not stored); K is a multiple of 16. */
__global__ void __launch_bounds__(128) gemm_f16_kernel(float *__restrict__ c, const __half *__restrict__ a,
                                                      const __half *__restrict__ b, int64_t m, int64_t n,
                                                      int64_t k) {
    using namespace nvcuda;
    __shared__ __align__(32) float stage[4][32 * 32]; /* wmma stores need 256-bit alignment */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t m0 = (int64_t)blockIdx.y * MM_TILE + (warp / 2) * 32;
    const int64_t n0 = (int64_t)blockIdx.x * MM_TILE + (warp % 2) * 32;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);
    for (int64_t k0 = 0; k0 < k; k0 += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa[2];
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb[2];
#pragma unroll
        for (int i = 0; i < 2; i++) wmma::load_matrix_sync(fa[i], a + (m0 + 16 * i) * k + k0, (unsigned)k);
#pragma unroll
        for (int j = 0; j < 2; j++) wmma::load_matrix_sync(fb[j], b + (n0 + 16 * j) * k + k0, (unsigned)k);
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(stage[warp] + 16 * i * 32 + 16 * j, acc[i][j], 32, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 32 * 32; e += 32) {
        int64_t row = m0 + e / 32, col = n0 + e % 32;
        if (row < m && col < n) c[row * n + col] = stage[warp][e];
    }
}

__global__ void f32_to_f16_kernel(__half *__restrict__ dst, const float *__restrict__ src, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = __float2half_rn(src[i]);
}

extern "C" size_t kern_cuda_matmul_scratch_bytes(int64_t n_in, int64_t n_out, int64_t n_tok) {
    size_t act = (size_t)n_tok * (size_t)n_in * sizeof(float); /* x' (q8-rounded x) */
    if (n_tok <= KERN_CUDA_MATVEC_MAX_TOK) return act;
    return act + (size_t)(round_up(n_out, MM_TILE) + round_up(n_tok, MM_TILE)) * (size_t)n_in * sizeof(__half);
}

extern "C" int kern_cuda_matmul(struct kern_cuda_ctx *ctx, float *y, const void *w, enum kern_type wt,
                                const float *x, int64_t n_in, int64_t n_out, int64_t n_tok, void *scratch) {
    if (n_in <= 0 || n_in % 32 || n_in % type_block_values(wt) || n_out <= 0 || n_tok <= 0) return -EINVAL;
    if (!scratch || !type_block_bytes(wt)) return !scratch ? -EINVAL : -EOPNOTSUPP;
    int r = cuda_use(ctx);
    if (r < 0) return r;
    const size_t row_bytes = type_row_bytes(wt, n_in);
    cudaStream_t s = ctx->stream;
    if (act_is_q8(wt)) {
        float *xq = (float *)scratch;
        act_q8_kernel<<<cuda_blocks(n_tok * n_in / 32, 128), 128, 0, s>>>(xq, x, n_tok * n_in / 32);
        x = xq;
    }
    scratch = (char *)scratch + (size_t)n_tok * (size_t)n_in * sizeof(float);
    if (n_tok == 1)
        return type_dispatch(wt, [&]<int T>() {
            matvec1_kernel<T><<<cuda_blocks(n_out, MV1_WARPS * MV1_ROWS), MV1_WARPS * 32, 0, s>>>(
                y, (const uint8_t *)w, row_bytes, x, n_in, n_out);
            return cuda_launched();
        });
    if (n_tok <= KERN_CUDA_MATVEC_MAX_TOK)
        return type_dispatch(wt, [&]<int T>() {
            matvec_kernel<T><<<cuda_blocks(n_out, MV_WARPS), MV_WARPS * 32, 0, s>>>(
                y, (const uint8_t *)w, row_bytes, x, n_in, n_out, (int)n_tok);
            return cuda_launched();
        });
    __half *w16 = (__half *)scratch, *x16 = w16 + round_up(n_out, MM_TILE) * n_in;
    const int64_t n_units = n_out * (n_in / 32);
    r = type_dispatch(wt, [&]<int T>() {
        to_f16_kernel<T><<<cuda_blocks(n_units, 256), 256, 0, s>>>(w16, (const uint8_t *)w, row_bytes, n_in, n_out);
        return cuda_launched();
    });
    if (r < 0) return r;
    f32_to_f16_kernel<<<cuda_blocks(n_tok * n_in, 256), 256, 0, s>>>(x16, x, n_tok * n_in);
    dim3 grid((unsigned)(round_up(n_out, MM_TILE) / MM_TILE), (unsigned)(round_up(n_tok, MM_TILE) / MM_TILE));
    gemm_f16_kernel<<<grid, 128, 0, s>>>(y, x16, w16, n_tok, n_out, n_in);
    return cuda_launched();
}

/* ---- embeddings ------------------------------------------------------------------------ */

template <int T>
__global__ void get_rows_kernel(float *__restrict__ x, const uint8_t *__restrict__ emb, size_t row_bytes,
                                const int32_t *__restrict__ tokens, int64_t n_tok, int64_t n) {
    const int64_t n_units = n / 32;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_units * n_tok) return;
    const int64_t t = i / n_units, u = i % n_units;
    float v[32];
    deq32<T>(emb + (size_t)tokens[t] * row_bytes, u, v);
#pragma unroll
    for (int j = 0; j < 32; j++) x[t * n + u * 32 + j] = v[j];
}

extern "C" int kern_cuda_get_rows(struct kern_cuda_ctx *ctx, float *x, const void *emb, enum kern_type t,
                                  size_t row_bytes, const int32_t *tokens, int64_t n_tok, int64_t n) {
    if (n <= 0 || n % 32 || n % type_block_values(t) || n_tok <= 0) return -EINVAL;
    int r = cuda_use(ctx);
    if (r < 0) return r;
    cudaStream_t s = ctx->stream;
    return type_dispatch(t, [&]<int T>() {
        get_rows_kernel<T><<<cuda_blocks(n_tok * (n / 32), 128), 128, 0, s>>>(x, (const uint8_t *)emb, row_bytes,
                                                                            tokens, n_tok, n);
        return cuda_launched();
    });
}
