/* Gated DeltaNet on the device (kernels/cuda/cuda.h; the spec: kernels/deltanet.h and
 * kernels/ref/deltanet.c), and the two element-wise ops of a gated attention.
 *
 * A step's tokens come as runs of one sequence each, in batch order (a sequence's runs
 * may interleave with others'). The conv and the delta rule take each token's sequence
 * from a device array and walk the step's tokens in order, loading a sequence's state
 * when the run changes and storing it back before the next one: a later run of the
 * same sequence starts from the state the earlier one left, as on the CPU. The walk is
 * sequential in the tokens (the recurrence is), parallel over channels (the conv) and
 * over the rows of S (the delta rule: row j of a head, column j of the paper's S, is
 * updated from k, q, v[j], the decay and β alone, so rows never talk to each other). */
#include "kernels/cuda/common.cuh"

#include <math.h>

static __device__ __forceinline__ float dn_silu(float x) { return x / (1.0f + expf(-x)); }

static __device__ __forceinline__ float dn_warp_sum(float v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* ---- the gates -------------------------------------------------------------------------- */

/* g = softplus(a + dt_bias)·ssm_a, β = σ(b): one thread per (token, head) */
__global__ void dn_gates_kernel(float *g, float *beta, const float *a, const float *b, const float *dt_bias,
                                const float *ssm_a, int64_t n, int64_t n_head) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int64_t h = i % n_head;
    const float x = a[i] + dt_bias[h], bi = b[i]; /* read before g, β (which may be a, b) */
    g[i] = (x > 20.0f ? x : log1pf(expf(x))) * ssm_a[h];
    beta[i] = 1.0f / (1.0f + expf(-bi));
}

extern "C" int kern_cuda_dn_gates(struct kern_cuda_ctx *ctx, float *g, float *beta, const float *a,
                                  const float *b, const float *dt_bias, const float *ssm_a, int64_t n_tok,
                                  int64_t n_head) {
    int r = cuda_use(ctx);
    if (r < 0 || n_tok <= 0 || n_head <= 0) return r < 0 ? r : -EINVAL;
    dn_gates_kernel<<<cuda_blocks(n_tok * n_head, 256), 256, 0, ctx->stream>>>(g, beta, a, b, dt_bias, ssm_a,
                                                                               n_tok * n_head, n_head);
    return cuda_launched();
}

/* ---- the causal conv -------------------------------------------------------------------- */

/* One thread per channel, the step's tokens in order; win holds the channel's last ns
 * inputs, oldest first (the conv state's column). The loops run over the largest kernel
 * with the taps past ns masked, so every index is a constant and win and wc stay in
 * registers. */
__global__ void dn_conv_kernel(float *y, float *state, int64_t state_stride, const int32_t *seq, const float *x,
                               const float *w, int64_t n_tok, int64_t n_chan, int ns) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n_chan) return;
    float win[KERN_DN_MAX_KERNEL], wc[KERN_DN_MAX_KERNEL];
#pragma unroll
    for (int j = 0; j < KERN_DN_MAX_KERNEL; j++) {
        wc[j] = j <= ns ? w[j * n_chan + c] : 0.0f;
        win[j] = 0.0f;
    }
    int32_t cur = -1;
    for (int64_t t = 0; t < n_tok; t++) {
        const int32_t s = seq[t];
        if (s != cur) { /* a new run: the old sequence's window back, the new one's in */
            if (cur >= 0) {
                float *st = state + (int64_t)cur * state_stride + c;
#pragma unroll
                for (int j = 0; j < KERN_DN_MAX_KERNEL; j++)
                    if (j < ns) st[j * n_chan] = win[j];
            }
            const float *st = state + (int64_t)s * state_stride + c;
#pragma unroll
            for (int j = 0; j < KERN_DN_MAX_KERNEL; j++)
                if (j < ns) win[j] = st[j * n_chan];
            cur = s;
        }
        const float xt = x[t * n_chan + c]; /* read before y (which may be x) is written */
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < KERN_DN_MAX_KERNEL; j++) {
            if (j < ns) acc = fmaf(wc[j], win[j], acc);
            else if (j == ns) acc = fmaf(wc[j], xt, acc);
        }
#pragma unroll
        for (int j = 0; j + 1 < KERN_DN_MAX_KERNEL; j++)
            if (j + 1 < ns) win[j] = win[j + 1];
#pragma unroll
        for (int j = 0; j < KERN_DN_MAX_KERNEL; j++)
            if (j == ns - 1) win[j] = xt;
        y[t * n_chan + c] = dn_silu(acc);
    }
    if (cur >= 0) {
        float *st = state + (int64_t)cur * state_stride + c;
#pragma unroll
        for (int j = 0; j < KERN_DN_MAX_KERNEL; j++)
            if (j < ns) st[j * n_chan] = win[j];
    }
}

extern "C" int kern_cuda_dn_conv(struct kern_cuda_ctx *ctx, float *y, float *state, int64_t state_stride,
                                 const int32_t *seq, const float *x, const float *w, int64_t n_tok, int64_t n_chan,
                                 int64_t n_kernel) {
    int r = cuda_use(ctx);
    if (r < 0) return r;
    if (n_tok <= 0 || n_chan <= 0 || n_kernel < 1 || n_kernel > KERN_DN_MAX_KERNEL ||
        state_stride < (n_kernel - 1) * n_chan)
        return -EINVAL;
    dn_conv_kernel<<<cuda_blocks(n_chan, 128), 128, 0, ctx->stream>>>(y, state, state_stride, seq, x, w, n_tok,
                                                                      n_chan, (int)(n_kernel - 1));
    return cuda_launched();
}

/* ---- the gated delta rule --------------------------------------------------------------- */

#define DN_WARPS 4 /* warps a block */
#define DN_ROWS 4  /* rows of S a warp */

struct dn_dev {
    float *state;
    int64_t state_stride;
    const int32_t *seq;
    const float *q, *k, *v, *g, *beta;
    float *o;
    int64_t q_stride, k_stride, v_stride, o_stride, n_tok;
    int64_t n_head_k, n_head_v, dk, dv, group; /* group: H_v / H_k */
    int tiled;
    float scale, l2_eps;
};

/* Block (x, h): value head h, rows [x·DN_WARPS·DN_ROWS, ...) of its S; warp w of it the
 * DN_ROWS rows from (x·DN_WARPS + w)·DN_ROWS. Lane l holds elements l + 32·i (i < NI,
 * NI·32 >= d_k) of each of its rows and of the token's k and q, so the products over the
 * key index are a lane's partial sums and one warp reduction; no shared memory, no
 * block-wide barrier (a warp whose rows lie past d_v leaves at once). */
template <int NI>
__global__ void __launch_bounds__(DN_WARPS * 32) dn_delta_kernel(struct dn_dev a) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int64_t h = blockIdx.y;
    const int64_t j0 = ((int64_t)blockIdx.x * DN_WARPS + warp) * DN_ROWS;
    if (j0 >= a.dv) return;
    const int64_t kh = a.tiled ? h % a.n_head_k : h / a.group;
    float S[DN_ROWS][NI], kk[NI], qq[NI];
#pragma unroll
    for (int r = 0; r < DN_ROWS; r++)
#pragma unroll
        for (int i = 0; i < NI; i++) S[r][i] = 0.0f;
    int32_t cur = -1;
    for (int64_t t = 0; t < a.n_tok; t++) {
        const int32_t s = a.seq[t];
        if (s != cur) { /* a new run: the old sequence's rows back, the new one's in */
            if (cur >= 0) {
                float *st = a.state + (int64_t)cur * a.state_stride + h * a.dv * a.dk;
#pragma unroll
                for (int r = 0; r < DN_ROWS; r++)
#pragma unroll
                    for (int i = 0; i < NI; i++) {
                        const int64_t e = lane + 32 * i;
                        if (j0 + r < a.dv && e < a.dk) st[(j0 + r) * a.dk + e] = S[r][i];
                    }
            }
            const float *st = a.state + (int64_t)s * a.state_stride + h * a.dv * a.dk;
#pragma unroll
            for (int r = 0; r < DN_ROWS; r++)
#pragma unroll
                for (int i = 0; i < NI; i++) {
                    const int64_t e = lane + 32 * i;
                    S[r][i] = j0 + r < a.dv && e < a.dk ? st[(j0 + r) * a.dk + e] : 0.0f;
                }
            cur = s;
        }
        /* k and q of key head kh, L2-normed as read; q also scaled */
        const float *kp = a.k + t * a.k_stride + kh * a.dk, *qp = a.q + t * a.q_stride + kh * a.dk;
        float sk = 0.0f, sq = 0.0f;
#pragma unroll
        for (int i = 0; i < NI; i++) {
            const int64_t e = lane + 32 * i;
            kk[i] = e < a.dk ? kp[e] : 0.0f;
            qq[i] = e < a.dk ? qp[e] : 0.0f;
            sk = fmaf(kk[i], kk[i], sk);
            sq = fmaf(qq[i], qq[i], sq);
        }
        float fk = 1.0f, fq = a.scale;
        if (a.l2_eps > 0) {
            const float nk = sqrtf(dn_warp_sum(sk)), nq = sqrtf(dn_warp_sum(sq));
            fk = 1.0f / (nk > a.l2_eps ? nk : a.l2_eps);
            fq *= 1.0f / (nq > a.l2_eps ? nq : a.l2_eps);
        }
#pragma unroll
        for (int i = 0; i < NI; i++) {
            kk[i] *= fk;
            qq[i] *= fq;
        }
        const float decay = expf(a.g[t * a.n_head_v + h]), beta = a.beta[t * a.n_head_v + h];
        const float *vp = a.v + t * a.v_stride + h * a.dv;
        float *op = a.o + t * a.o_stride + h * a.dv;
        /* u_r = (decayed row r)·k for every row at once: the reductions interleave */
        float u[DN_ROWS];
#pragma unroll
        for (int r = 0; r < DN_ROWS; r++) {
            float p = 0.0f;
#pragma unroll
            for (int i = 0; i < NI; i++) {
                S[r][i] *= decay;
                p = fmaf(S[r][i], kk[i], p);
            }
            u[r] = p;
        }
#pragma unroll
        for (int o = 16; o > 0; o /= 2)
#pragma unroll
            for (int r = 0; r < DN_ROWS; r++) u[r] += __shfl_xor_sync(0xffffffffu, u[r], o);
        float acc[DN_ROWS];
#pragma unroll
        for (int r = 0; r < DN_ROWS; r++) {
            const float vj = j0 + r < a.dv ? vp[j0 + r] : 0.0f;
            const float d = beta * (vj - u[r]);
            float p = 0.0f;
#pragma unroll
            for (int i = 0; i < NI; i++) {
                S[r][i] = fmaf(kk[i], d, S[r][i]);
                p = fmaf(S[r][i], qq[i], p);
            }
            acc[r] = p;
        }
#pragma unroll
        for (int o = 16; o > 0; o /= 2)
#pragma unroll
            for (int r = 0; r < DN_ROWS; r++) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
        if (lane == 0)
#pragma unroll
            for (int r = 0; r < DN_ROWS; r++)
                if (j0 + r < a.dv) op[j0 + r] = acc[r];
    }
    if (cur >= 0) {
        float *st = a.state + (int64_t)cur * a.state_stride + h * a.dv * a.dk;
#pragma unroll
        for (int r = 0; r < DN_ROWS; r++)
#pragma unroll
            for (int i = 0; i < NI; i++) {
                const int64_t e = lane + 32 * i;
                if (j0 + r < a.dv && e < a.dk) st[(j0 + r) * a.dk + e] = S[r][i];
            }
    }
}

extern "C" int kern_cuda_dn_delta(struct kern_cuda_ctx *ctx, const struct kern_cuda_dn_args *a,
                                  const struct kern_dn_shape *p) {
    int r = cuda_use(ctx);
    if (r < 0) return r;
    if (a->n_tok <= 0 || p->n_head_k <= 0 || p->n_head_v <= 0 || p->n_head_v % p->n_head_k ||
        p->head_dim_k <= 0 || p->head_dim_v <= 0 || p->head_dim_v > KERN_DN_MAX_HEAD_DIM ||
        p->n_head_v > 65535 || !(p->scale >= 0) || !(p->l2_eps >= 0) ||
        a->state_stride < p->n_head_v * p->head_dim_v * p->head_dim_k)
        return -EINVAL;
    if (p->head_dim_k > 256) return -EOPNOTSUPP; /* 8 elements a lane at most */
    struct dn_dev d = {a->state, a->state_stride, a->seq, a->q, a->k, a->v, a->g, a->beta, a->o,
                       a->q_stride, a->k_stride, a->v_stride, a->o_stride, a->n_tok,
                       p->n_head_k, p->n_head_v, p->head_dim_k, p->head_dim_v, p->n_head_v / p->n_head_k,
                       p->head_map == KERN_DN_HEAD_MAP_TILED, p->scale, p->l2_eps};
    const int64_t rows = DN_WARPS * DN_ROWS;
    const dim3 grid((unsigned)((p->head_dim_v + rows - 1) / rows), (unsigned)p->n_head_v);
    const int ni = (int)((p->head_dim_k + 31) / 32);
    if (ni <= 1) dn_delta_kernel<1><<<grid, DN_WARPS * 32, 0, ctx->stream>>>(d);
    else if (ni <= 2) dn_delta_kernel<2><<<grid, DN_WARPS * 32, 0, ctx->stream>>>(d);
    else if (ni <= 4) dn_delta_kernel<4><<<grid, DN_WARPS * 32, 0, ctx->stream>>>(d);
    else dn_delta_kernel<8><<<grid, DN_WARPS * 32, 0, ctx->stream>>>(d);
    return cuda_launched();
}

/* ---- the gated output norm -------------------------------------------------------------- */

/* One warp per row: y = x / sqrt(mean(x²) + eps) · w ⊙ SiLU(z). A lane writes only the
 * elements it read, after the reduction, so y may be x. */
__global__ void dn_gated_norm_kernel(float *y, const float *x, const float *z, const float *w, int64_t n_rows,
                                     int64_t width, float eps) {
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= n_rows) return;
    const float *xr = x + row * width, *zr = z + row * width;
    float *yr = y + row * width;
    float ss = 0.0f;
    for (int64_t i = lane; i < width; i += 32) ss = fmaf(xr[i], xr[i], ss);
    const float scale = rsqrtf(dn_warp_sum(ss) / (float)width + eps);
    for (int64_t i = lane; i < width; i += 32) yr[i] = xr[i] * scale * w[i] * dn_silu(zr[i]);
}

extern "C" int kern_cuda_dn_gated_norm(struct kern_cuda_ctx *ctx, float *y, const float *x, const float *z,
                                       const float *w, int64_t n_rows, int64_t width, float eps) {
    int r = cuda_use(ctx);
    if (r < 0 || n_rows <= 0 || width <= 0) return r < 0 ? r : -EINVAL;
    dn_gated_norm_kernel<<<cuda_blocks(n_rows, 4), 128, 0, ctx->stream>>>(y, x, z, w, n_rows, width, eps);
    return cuda_launched();
}

/* ---- a gated attention's query and gate ------------------------------------------------- */

__global__ void unzip_kernel(float *y0, float *y1, const float *x, int64_t n, int64_t w0, int64_t w1) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int64_t w = w0 + w1, r = i / w, c = i % w;
    if (c < w0) y0[r * w0 + c] = x[i];
    else y1[r * w1 + c - w0] = x[i];
}

extern "C" int kern_cuda_unzip(struct kern_cuda_ctx *ctx, float *y0, float *y1, const float *x, int64_t n_rows,
                               int64_t w0, int64_t w1) {
    int r = cuda_use(ctx);
    if (r < 0 || n_rows <= 0 || w0 <= 0 || w1 <= 0) return r < 0 ? r : -EINVAL;
    unzip_kernel<<<cuda_blocks(n_rows * (w0 + w1), 256), 256, 0, ctx->stream>>>(y0, y1, x, n_rows * (w0 + w1), w0,
                                                                                 w1);
    return cuda_launched();
}

__global__ void sigmoid_mul_kernel(float *x, const float *g, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 1.0f / (1.0f + expf(-g[i]));
}

extern "C" int kern_cuda_sigmoid_mul(struct kern_cuda_ctx *ctx, float *x, const float *g, int64_t n) {
    int r = cuda_use(ctx);
    if (r < 0 || n <= 0) return r < 0 ? r : -EINVAL;
    sigmoid_mul_kernel<<<cuda_blocks(n, 256), 256, 0, ctx->stream>>>(x, g, n);
    return cuda_launched();
}
