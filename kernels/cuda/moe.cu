/* Mixture of experts on the device (kernels/cuda/cuda.h): the router's top-k, the
 * grouping of a step's (token, slot) pairs by expert, the experts' products over their
 * groups, the weighted sum; the shared expert's gate (add_gated) and the activations.
 *
 * Everything the router decides stays in device memory: the products' grids are sized
 * for the most experts a step can touch (min(pairs, n_expert)) and the blocks of an
 * expert that is not active return at once, so a decode step has no host round trip and
 * records as a graph. */
#include "kernels/cuda/common.cuh"

#include <math.h>

/* llama.cpp's clamp of the weights' sum before the division: the smallest normal f16 */
#define MOE_SUM_MIN 6.103515625e-5f
#define ROUTE_WARPS 4 /* tokens a block: one warp each */
#define MV_WARPS 4    /* rows a block: one warp each */
#define MV_TOK 8      /* tokens of a group that share each decoded unit */

/* ---- the router -------------------------------------------------------------------- */

/* (value, index) a is better than b: larger, ties to the lower index; an index < 0 is
 * nothing */
__device__ __forceinline__ bool better(float av, int ai, float bv, int bi) {
    if (ai < 0) return false;
    if (bi < 0) return true;
    return av > bv || (av == bv && ai < bi);
}

/* One warp per token: the values to rank (the probabilities or the logits) in shared
 * memory, n_used rounds of a warp-wide arg max over the experts not yet taken, then lane 0
 * weighs the chosen ones as moe_route_token() does. */
__global__ void __launch_bounds__(ROUTE_WARPS * 32)
    moe_route_kernel(int32_t *__restrict__ sel, float *__restrict__ wt, const float *__restrict__ logits,
                     int64_t n_tok, struct kern_cuda_moe_route_params p) {
    __shared__ float val[ROUTE_WARPS][KERN_CUDA_MOE_MAX_EXPERTS];
    __shared__ unsigned char taken[ROUTE_WARPS][KERN_CUDA_MOE_MAX_EXPERTS];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t t = (int64_t)blockIdx.x * ROUTE_WARPS + warp;
    if (t >= n_tok) return; /* (a whole warp: t is the warp's) */
    const int n = (int)p.n_expert, k = (int)p.n_used;
    const float *x = logits + t * p.n_expert;
    float *v = val[warp];
    float mx = -INFINITY;
    for (int i = lane; i < n; i += 32) {
        v[i] = x[i];
        taken[warp][i] = 0;
        mx = fmaxf(mx, x[i]);
    }
    for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (p.gating == KERN_CUDA_MOE_SOFTMAX) {
        float sum = 0.0f;
        for (int i = lane; i < n; i += 32) sum += v[i] = expf(v[i] - mx);
        for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        for (int i = lane; i < n; i += 32) v[i] /= sum;
    }
    __syncwarp();
    int ids[KERN_CUDA_MOE_MAX_USED];
    for (int j = 0; j < k; j++) {
        float bv = 0.0f;
        int bi = -1;
        for (int i = lane; i < n; i += 32)
            if (!taken[warp][i] && better(v[i], i, bv, bi)) bv = v[i], bi = i;
        for (int o = 16; o > 0; o /= 2) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
        }
        ids[j] = bi; /* (the same in every lane: the order is total) */
        if (lane == 0) taken[warp][bi] = 1;
        __syncwarp();
    }
    if (lane != 0) return;
    float w[KERN_CUDA_MOE_MAX_USED];
    if (p.gating == KERN_CUDA_MOE_SOFTMAX) {
        for (int j = 0; j < k; j++) w[j] = v[ids[j]];
    } else { /* the softmax of the chosen logits (ids[0] is the largest) */
        float sum = 0.0f;
        for (int j = 0; j < k; j++) sum += w[j] = expf(v[ids[j]] - v[ids[0]]);
        for (int j = 0; j < k; j++) w[j] /= sum;
    }
    if (p.norm_w) {
        float sum = 0.0f;
        for (int j = 0; j < k; j++) sum += w[j];
        sum = fmaxf(sum, MOE_SUM_MIN);
        for (int j = 0; j < k; j++) w[j] /= sum;
    }
    const bool scaled = p.w_scale != 0.0f && p.w_scale != 1.0f;
    for (int j = 0; j < k; j++) {
        sel[t * k + j] = ids[j];
        wt[t * k + j] = scaled ? w[j] * p.w_scale : w[j];
    }
}

extern "C" int kern_cuda_moe_route(struct kern_cuda_ctx *ctx, int32_t *sel, float *wt, const float *logits,
                                   int64_t n_tok, const struct kern_cuda_moe_route_params *p) {
    if (n_tok <= 0 || p->n_expert <= 0 || p->n_expert > KERN_CUDA_MOE_MAX_EXPERTS || p->n_used <= 0 ||
        p->n_used > p->n_expert || p->n_used > KERN_CUDA_MOE_MAX_USED)
        return -EINVAL;
    int r = cuda_use(ctx);
    if (r < 0) return r;
    moe_route_kernel<<<cuda_blocks(n_tok, ROUTE_WARPS), ROUTE_WARPS * 32, 0, ctx->stream>>>(sel, wt, logits,
                                                                                          n_tok, *p);
    return cuda_launched();
}

/* ---- grouping ------------------------------------------------------------------------
 * The group table (ints): [0] the active experts' count A; then, E = n_expert entries
 * each, the active experts (ascending), where each one's pairs start in the list and how
 * many; then the list of the n_pairs pair indices (t · n_used + slot), grouped by expert in
 * batch order. */

#define GRP_EXPERT(g, E) ((g) + 1)
#define GRP_START(g, E) ((g) + 1 + (E))
#define GRP_COUNT(g, E) ((g) + 1 + 2 * (E))
#define GRP_LIST(g, E) ((g) + 1 + 3 * (E))

/* One block: the counts by atomics (their order does not matter), then one thread walks
 * the experts and the pairs in order (a stable counting sort; a prefill's few thousand
 * pairs) */
__global__ void __launch_bounds__(256) moe_group_kernel(int32_t *__restrict__ grp, const int32_t *__restrict__ sel,
                                                       int64_t n_pairs, int n_expert) {
    __shared__ int count[KERN_CUDA_MOE_MAX_EXPERTS];
    for (int e = threadIdx.x; e < n_expert; e += blockDim.x) count[e] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n_pairs; i += blockDim.x) {
        const int e = sel[i];
        if (e >= 0 && e < n_expert) atomicAdd(&count[e], 1);
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    int n_active = 0, start = 0;
    for (int e = 0; e < n_expert; e++) {
        const int c = count[e];
        if (c == 0) continue;
        GRP_EXPERT(grp, n_expert)[n_active] = e;
        GRP_START(grp, n_expert)[n_active] = start;
        GRP_COUNT(grp, n_expert)[n_active] = c;
        count[e] = start; /* from here on: where its next pair goes */
        start += c;
        n_active++;
    }
    grp[0] = n_active;
    int32_t *list = GRP_LIST(grp, n_expert);
    for (int64_t i = 0; i < n_pairs; i++) {
        const int e = sel[i];
        if (e >= 0 && e < n_expert) list[count[e]++] = (int32_t)i;
    }
}

/* ---- the experts' products ------------------------------------------------------------ */

/* For the active expert blockIdx.y and its row r (one a warp): y[pair · n_out + r] =
 * W_e[r] · x[pair / x_div] (+ bias[e · b_stride + r]) for each pair of its group, 8 pairs
 * sharing each decoded unit of the row. x rows are n_in floats (16-byte aligned). */
template <int T>
__global__ void __launch_bounds__(MV_WARPS * 32)
    moe_mv_kernel(float *__restrict__ y, const uint8_t *__restrict__ w, size_t expert_bytes, size_t row_bytes,
                  const float *__restrict__ bias, int64_t b_stride, const float *__restrict__ x, int64_t x_div,
                  const int32_t *__restrict__ grp, int n_expert, int64_t n_in, int64_t n_out) {
    const int a = blockIdx.y, lane = threadIdx.x % 32;
    if (a >= grp[0]) return; /* not an active expert */
    const int64_t r = (int64_t)blockIdx.x * MV_WARPS + threadIdx.x / 32;
    if (r >= n_out) return; /* (a whole warp) */
    const int e = GRP_EXPERT(grp, n_expert)[a], m = GRP_COUNT(grp, n_expert)[a];
    const int32_t *list = GRP_LIST(grp, n_expert) + GRP_START(grp, n_expert)[a];
    const uint8_t *row = w + (size_t)e * expert_bytes + (size_t)r * row_bytes;
    const float b = bias ? bias[(int64_t)e * b_stride + r] : 0.0f;
    const int64_t n_units = n_in / 32;
    for (int c0 = 0; c0 < m; c0 += MV_TOK) {
        const int cnt = min(MV_TOK, m - c0);
        const float *xr[MV_TOK];
#pragma unroll
        for (int i = 0; i < MV_TOK; i++) xr[i] = x + (int64_t)(list[c0 + min(i, cnt - 1)] / x_div) * n_in;
        float acc[MV_TOK] = {0};
        for (int64_t u = lane; u < n_units; u += 32) {
            float v[32];
            deq32<T>(row, u, v);
#pragma unroll
            for (int i = 0; i < MV_TOK; i++) {
                if (i >= cnt) break;
                const float4 *xv = (const float4 *)(xr[i] + u * 32);
                float s = 0.0f;
#pragma unroll
                for (int q = 0; q < 8; q++) {
                    const float4 f = __ldg(xv + q);
                    s += v[4 * q] * f.x + v[4 * q + 1] * f.y + v[4 * q + 2] * f.z + v[4 * q + 3] * f.w;
                }
                acc[i] += s;
            }
        }
#pragma unroll
        for (int i = 0; i < MV_TOK; i++) {
            if (i >= cnt) break;
            float s = acc[i];
            for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
            if (lane == 0) y[(int64_t)list[c0 + i] * n_out + r] = s + b;
        }
    }
}

static int moe_mv(cudaStream_t s, float *y, const void *w, enum kern_type t, size_t expert_bytes,
                  const float *bias, int64_t b_stride, const float *x, int64_t x_div, const int32_t *grp,
                  int n_expert, unsigned n_groups, int64_t n_in, int64_t n_out) {
    const size_t row_bytes = type_row_bytes(t, n_in);
    const dim3 grid(cuda_blocks(n_out, MV_WARPS), n_groups);
    return type_dispatch(t, [&]<int T>() {
        moe_mv_kernel<T><<<grid, MV_WARPS * 32, 0, s>>>(y, (const uint8_t *)w, expert_bytes, row_bytes, bias,
                                                       b_stride, x, x_div, grp, n_expert, n_in, n_out);
        return cuda_launched();
    });
}

/* ---- activations and sums ------------------------------------------------------------- */

/* gelu(x) = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) as ops.cu's */
__device__ __forceinline__ float act_mul(int act, float g, float u) {
    switch (act) {
    case KERN_CUDA_ACT_GELU:
        return 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g))) * u;
    case KERN_CUDA_ACT_SWIGLU_OAI: {
        const float x = fminf(g, 7.0f), v = fmaxf(fminf(u, 7.0f), -7.0f);
        return x / (1.0f + expf(-1.702f * x)) * (v + 1.0f);
    }
    default: return g / (1.0f + expf(-g)) * u;
    }
}

__global__ void glu_kernel(float *y, const float *g, const float *u, int64_t n, int act) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = act_mul(act, g[i], u[i]);
}

__global__ void q8_kernel(float *__restrict__ dst, const float *__restrict__ src, int64_t n_blocks) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_blocks) act_q8_block(dst + i * 32, src + i * 32);
}

/* in place over 32-value blocks (each thread reads its block before writing it) */
__global__ void q8_inplace_kernel(float *x, int64_t n_blocks) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_blocks) act_q8_block(x + i * 32, x + i * 32);
}

/* out[t][r] = Σ over t's slots in expert order of wt · scale[e] · y[pair][r], one thread a
 * value (out may be the experts' input: that was read by the earlier products) */
__global__ void moe_sum_kernel(float *out, const float *__restrict__ y, const int32_t *__restrict__ sel,
                               const float *__restrict__ wt, const float *__restrict__ scale, int64_t n_tok,
                               int n_used, int64_t n_embd) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_tok * n_embd) return;
    const int64_t t = i / n_embd, r = i % n_embd;
    const int32_t *s = sel + t * n_used;
    float acc = 0.0f;
    int last = -1; /* the expert summed last: the next is the smallest above it */
    for (int j = 0; j < n_used; j++) {
        int best = -1;
        for (int q = 0; q < n_used; q++)
            if (s[q] > last && (best < 0 || s[q] < s[best])) best = q;
        if (best < 0) break;
        last = s[best];
        const float w = wt[t * n_used + best] * (scale ? scale[last] : 1.0f);
        acc += w * y[(t * n_used + best) * n_embd + r];
    }
    out[i] = acc;
}

__global__ void add_gated_kernel(float *y, const float *x, const float *g, int64_t width, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i] / (1.0f + expf(-g[i / width]));
}

static size_t align256(size_t n) {
    return (n + 255) & ~(size_t)255;
}

/* the scratch's parts: the q8-rounded input (n_tok, n_embd), the gate and up products
 * (pairs, n_ff), the down products (pairs, n_embd), the group table */
static void scratch_parts(void *scratch, int64_t n_tok, int64_t n_used, int64_t n_expert, int64_t n_embd,
                          int64_t n_ff, float **xq, float **hg, float **hu, float **y, int32_t **grp,
                          size_t *ret_bytes) {
    const size_t f = sizeof(float), pairs = (size_t)(n_tok * n_used);
    const size_t sz[] = {(size_t)(n_tok * n_embd) * f, pairs * (size_t)n_ff * f, pairs * (size_t)n_ff * f,
                         pairs * (size_t)n_embd * f, (1 + 3 * (size_t)n_expert + pairs) * sizeof(int32_t)};
    char *p = (char *)scratch;
    void **dst[] = {(void **)xq, (void **)hg, (void **)hu, (void **)y, (void **)grp};
    size_t off = 0;
    for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++) {
        if (p) *dst[i] = p + off;
        off += align256(sz[i]);
    }
    *ret_bytes = off;
}

extern "C" size_t kern_cuda_moe_scratch_bytes(int64_t n_tok, int64_t n_used, int64_t n_expert, int64_t n_embd,
                                              int64_t n_ff) {
    float *xq = NULL, *hg = NULL, *hu = NULL, *y = NULL;
    int32_t *grp = NULL;
    size_t bytes;
    scratch_parts(NULL, n_tok, n_used, n_expert, n_embd, n_ff, &xq, &hg, &hu, &y, &grp, &bytes);
    return bytes;
}

static bool act_is_q8(int t) {
    return t != KERN_TYPE_F32 && t != KERN_TYPE_F16 && t != KERN_TYPE_BF16;
}

extern "C" int kern_cuda_moe_experts(struct kern_cuda_ctx *ctx, const struct kern_cuda_moe_args *a, void *scratch) {
    if (!scratch || a->n_tok <= 0 || a->n_used <= 0 || a->n_used > KERN_CUDA_MOE_MAX_USED || a->n_expert <= 0 ||
        a->n_expert > KERN_CUDA_MOE_MAX_EXPERTS || a->n_used > a->n_expert || a->n_embd <= 0 || a->n_embd % 32 ||
        a->n_ff <= 0 || a->n_ff % 32)
        return -EINVAL;
    const enum kern_type ts[3] = {a->gate_t, a->up_t, a->down_t};
    const int64_t n_ins[3] = {a->n_embd, a->n_embd, a->n_ff};
    for (int i = 0; i < 3; i++) {
        if (!type_block_bytes(ts[i])) return -EOPNOTSUPP;
        if (n_ins[i] % type_block_values(ts[i])) return -EINVAL;
    }
    int r = cuda_use(ctx);
    if (r < 0) return r;
    cudaStream_t s = ctx->stream;
    float *xq, *hg, *hu, *y;
    int32_t *grp;
    size_t bytes;
    scratch_parts(scratch, a->n_tok, a->n_used, a->n_expert, a->n_embd, a->n_ff, &xq, &hg, &hu, &y, &grp, &bytes);
    const int64_t pairs = a->n_tok * a->n_used;
    const int E = (int)a->n_expert;
    const unsigned n_groups = (unsigned)(pairs < a->n_expert ? pairs : a->n_expert);

    moe_group_kernel<<<1, 256, 0, s>>>(grp, a->sel, pairs, E);
    if ((r = cuda_launched()) < 0) return r;
    /* the gate and up products of each pair's token (the input rounded once when either
     * weight type rounds it: both are then the same quantized type in every real file) */
    const float *x = a->in;
    if (act_is_q8(a->gate_t) || act_is_q8(a->up_t)) {
        if (act_is_q8(a->gate_t) != act_is_q8(a->up_t)) return -EOPNOTSUPP;
        q8_kernel<<<cuda_blocks(a->n_tok * a->n_embd / 32, 128), 128, 0, s>>>(xq, a->in, a->n_tok * a->n_embd / 32);
        if ((r = cuda_launched()) < 0) return r;
        x = xq;
    }
    const float *gb = a->gate_b ? a->gate_b + a->b0 : NULL, *ub = a->up_b ? a->up_b + a->b0 : NULL;
    r = moe_mv(s, hg, a->gate, a->gate_t, a->gate_stride, gb, a->b_stride, x, a->n_used, grp, E, n_groups,
               a->n_embd, a->n_ff);
    if (r == 0)
        r = moe_mv(s, hu, a->up, a->up_t, a->up_stride, ub, a->b_stride, x, a->n_used, grp, E, n_groups,
                   a->n_embd, a->n_ff);
    if (r < 0) return r;
    glu_kernel<<<cuda_blocks(pairs * a->n_ff, 256), 256, 0, s>>>(hg, hg, hu, pairs * a->n_ff, (int)a->act);
    if ((r = cuda_launched()) < 0) return r;
    if (act_is_q8(a->down_t)) {
        q8_inplace_kernel<<<cuda_blocks(pairs * a->n_ff / 32, 128), 128, 0, s>>>(hg, pairs * a->n_ff / 32);
        if ((r = cuda_launched()) < 0) return r;
    }
    r = moe_mv(s, y, a->down, a->down_t, a->down_stride, a->down_b, a->n_embd, hg, 1, grp, E, n_groups, a->n_ff,
               a->n_embd);
    if (r < 0) return r;
    moe_sum_kernel<<<cuda_blocks(a->n_tok * a->n_embd, 256), 256, 0, s>>>(a->out, y, a->sel, a->wt, a->scale,
                                                                        a->n_tok, (int)a->n_used, a->n_embd);
    return cuda_launched();
}

extern "C" int kern_cuda_glu(struct kern_cuda_ctx *ctx, float *y, const float *g, const float *u, int64_t n,
                             enum kern_cuda_act act) {
    int r = cuda_use(ctx);
    if (r < 0 || n <= 0) return r < 0 ? r : -EINVAL;
    glu_kernel<<<cuda_blocks(n, 256), 256, 0, ctx->stream>>>(y, g, u, n, (int)act);
    return cuda_launched();
}

extern "C" int kern_cuda_add_gated(struct kern_cuda_ctx *ctx, float *y, const float *x, const float *g,
                                   int64_t width, int64_t n_rows) {
    int r = cuda_use(ctx);
    if (r < 0 || width <= 0 || n_rows <= 0) return r < 0 ? r : -EINVAL;
    add_gated_kernel<<<cuda_blocks(width * n_rows, 256), 256, 0, ctx->stream>>>(y, x, g, width, width * n_rows);
    return cuda_launched();
}
