/* Attention over the KV cache in its stored type (kernels/cuda/cuda.h), flash-decoding
 * style: one block per (query head, token); its 4 warps take interleaved tiles of 32
 * keys, keep an online softmax each, and are merged at the end.
 *
 * Scores: lane j of a warp owns key j of the tile and decodes its K row 32 values at a
 * time (deq32_any) against q in shared memory (all lanes read the same q: a broadcast).
 * Values: each lane owns head_dim_v / 32 output dims and reads value i of every V row of
 * the tile (deq1_kv), weighted by the tile's probabilities from shared memory. The cache
 * types are runtime arguments (uniform branches) rather than 81 template pairs. */
#include "kernels/cuda/common.cuh"

#include <math.h>

#define ATTN_WARPS 4
#define ATTN_MAX_HD 512

__global__ void __launch_bounds__(ATTN_WARPS * 32) attn_kernel(struct kern_cuda_attn_args a) {
    __shared__ float q_s[ATTN_MAX_HD];
    __shared__ float p_s[ATTN_WARPS][32];
    __shared__ float m_s[ATTN_WARPS], l_s[ATTN_WARPS];
    __shared__ float acc_s[ATTN_WARPS][ATTN_MAX_HD];
    const int64_t h = blockIdx.x, t = blockIdx.y;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t group = a.n_head / a.n_head_kv, h_kv = h / group;
    const float *q = a.q + (t * a.n_head + h) * a.hd_k;
    for (int64_t i = threadIdx.x; i < a.hd_k; i += blockDim.x) q_s[i] = q[i];
    __syncthreads();

    const int64_t n_kv = a.n_kv[t], row0 = a.kv_row0[t];
    const uint8_t *k0 = (const uint8_t *)a.k + type_row_bytes(a.kt, h_kv * a.hd_k);
    const uint8_t *v0 = (const uint8_t *)a.v + type_row_bytes(a.vt, h_kv * a.hd_v);
    const int n_dv = (int)(a.hd_v / 32); /* output dims per lane: lane + 32·i */
    float acc[ATTN_MAX_HD / 32];
#pragma unroll
    for (int i = 0; i < ATTN_MAX_HD / 32; i++) acc[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;

    for (int64_t j0 = (int64_t)warp * 32; j0 < n_kv; j0 += ATTN_WARPS * 32) {
        const int64_t j = j0 + lane;
        float s = -INFINITY;
        if (j < n_kv) {
            const uint8_t *krow = k0 + (size_t)(row0 + j) * a.k_stride;
            float dot = 0.0f;
            for (int64_t u = 0; u < a.hd_k / 32; u++) {
                float v[32];
                deq32_any(a.kt, krow, u, v);
#pragma unroll
                for (int i = 0; i < 32; i++) dot += v[i] * q_s[u * 32 + i];
            }
            s = dot * a.scale;
        }
        float mt = s;
        for (int o = 16; o > 0; o /= 2) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o));
        const float m_new = fmaxf(m, mt); /* finite: lane 0's key exists */
        const float p = j < n_kv ? expf(s - m_new) : 0.0f;
        const float corr = expf(m - m_new); /* 0 on the first tile */
        float ps = p;
        for (int o = 16; o > 0; o /= 2) ps += __shfl_xor_sync(0xffffffffu, ps, o);
        l = l * corr + ps;
        m = m_new;
        p_s[warp][lane] = p;
        __syncwarp();
        const int n_j = (int)min((int64_t)32, n_kv - j0);
#pragma unroll
        for (int i = 0; i < ATTN_MAX_HD / 32; i++)
            if (i < n_dv) acc[i] *= corr;
        for (int jj = 0; jj < n_j; jj++) {
            const float pj = p_s[warp][jj];
            const uint8_t *vrow = v0 + (size_t)(row0 + j0 + jj) * a.v_stride;
#pragma unroll
            for (int i = 0; i < ATTN_MAX_HD / 32; i++)
                if (i < n_dv) acc[i] += pj * deq1_kv(a.vt, vrow, lane + 32 * i);
        }
        __syncwarp();
    }

    /* merge the warps' partial softmaxes */
    if (lane == 0) {
        m_s[warp] = m;
        l_s[warp] = l;
    }
#pragma unroll
    for (int i = 0; i < ATTN_MAX_HD / 32; i++)
        if (i < n_dv) acc_s[warp][lane + 32 * i] = acc[i];
    __syncthreads();
    float mm = -INFINITY;
    for (int w = 0; w < ATTN_WARPS; w++) mm = fmaxf(mm, m_s[w]);
    float ll = 0.0f, f[ATTN_WARPS];
    for (int w = 0; w < ATTN_WARPS; w++) {
        f[w] = l_s[w] > 0.0f ? expf(m_s[w] - mm) : 0.0f;
        ll += l_s[w] * f[w];
    }
    if (a.sinks && ll > 0.0f) ll += expf(a.sinks[h] - mm); /* (mm finite: a key was seen) */
    float *out = a.out + (t * a.n_head + h) * a.hd_v;
    for (int64_t i = threadIdx.x; i < a.hd_v; i += blockDim.x) {
        float o = 0.0f;
        for (int w = 0; w < ATTN_WARPS; w++) o += acc_s[w][i] * f[w];
        out[i] = ll > 0.0f ? o / ll : 0.0f;
    }
}

extern "C" int kern_cuda_attn(struct kern_cuda_ctx *ctx, const struct kern_cuda_attn_args *a) {
    if (!type_is_kv(a->kt) || !type_is_kv(a->vt)) return -EOPNOTSUPP;
    if (a->hd_k <= 0 || a->hd_k % 32 || a->hd_k > ATTN_MAX_HD || a->hd_v <= 0 || a->hd_v % 32 ||
        a->hd_v > ATTN_MAX_HD)
        return -EOPNOTSUPP;
    if (a->n_tok <= 0 || a->n_head <= 0 || a->n_head_kv <= 0 || a->n_head % a->n_head_kv) return -EINVAL;
    int r = cuda_use(ctx);
    if (r < 0) return r;
    attn_kernel<<<dim3((unsigned)a->n_head, (unsigned)a->n_tok), ATTN_WARPS * 32, 0, ctx->stream>>>(*a);
    return cuda_launched();
}
