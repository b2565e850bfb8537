/* Gated DeltaNet: the kernels of the recurrent token mixer of Qwen3.5/3.6 (arch qwen35,
 * qwen35moe) and Qwen3-Next (shared/notes/hybrid.md §A.6, §A.9). One layer, one sequence,
 * after the input projections:
 *
 *   qkv = W_qkv·x   z = W_gate·x   a = W_alpha·x   b = W_beta·x
 *   g, β = softplus(a + dt_bias)·ssm_a, sigmoid(b)              kern_dn_gates
 *   y = SiLU(causal depthwise conv of qkv over K tokens)        kern_dn_conv
 *   q | k | v = y; q, k L2-normalised per head                  kern_dn_l2norm, or on the fly
 *   per value head h (key head kh = kern_dn_head_k(h)), per token t:
 *       S ← e^g·S;  δ = β·(v − Sᵀk);  S ← S + k·δᵀ;  o = Sᵀ(scale·q)    kern_dn_delta
 *   o = RMSNorm(o_h)·ssm_norm ⊙ SiLU(z_h)                       kern_dn_gated_norm
 *   out = W_out·o
 *
 * kern_dn_delta runs one of two forms that agree up to float rounding: the per-token
 * recurrence (kern_dn_recurrent, decode) and the chunked form (kern_dn_chunked, prefill),
 * which folds 64 tokens at a time into the state with a triangular solve per chunk (the
 * WY / UT form of the notes), reading and writing the state once per chunk instead of once
 * per token.
 *
 * State, per layer and sequence, f32, owned by the caller and updated in place; all zero
 * starts a sequence:
 *   conv: (K − 1, n_chan), time-major like the conv's input: row t holds the inputs t
 *         steps after the oldest kept one, so a row is one vector load per channel block.
 *         llama.cpp's r row (notes §A.9) is its transpose (channel-major):
 *         kern_dn_transpose converts either way;
 *   S:    (H_v, d_v, d_k): S[i = key][j = value] of head h at h·d_v·d_k + j·d_k + i, so
 *         row j holds column j of the d_k × d_v matrix of the paper and of HF. This is
 *         llama.cpp's s row as it is.
 *
 * Threads: each kernel takes a range of heads (of channels for the conv) and touches only
 * their state and outputs, so callers split [0, H_v) over threads or devices. Inputs are
 * borrowed for the call. Nothing here allocates: kern_dn_chunked needs scratch of
 * kern_dn_scratch_bytes() per thread.
 *
 * Levels: every call runs the bodies of kern_cpu()->level (WARM_KERNELS, kern_set_level):
 * "ref" the plain-C spec (kernels/ref/deltanet.c), "avx2" (also at "avxvnni") and
 * "avx512"/"avx512bf16" the SIMD bodies (kernels/cpu/x86-deltanet.h). kern_dn_level()
 * names the one that runs. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Largest head size and conv kernel the kernels take (kern_dn_shape_check). */
#define KERN_DN_MAX_HEAD_DIM 256
#define KERN_DN_MAX_KERNEL 8
/* Tokens per chunk of the chunked form. */
#define KERN_DN_CHUNK 64
/* kern_dn_delta takes the chunked form from this many tokens (warm-deltanet-bench). */
#define KERN_DN_CHUNKED_MIN_TOK 32

/* Which key head a value head reads when H_v > H_k (notes §A.4). */
enum kern_dn_head_map {
    KERN_DN_HEAD_MAP_TILED,   /* qwen35, qwen35moe (heads re-ordered at conversion): h mod H_k */
    KERN_DN_HEAD_MAP_GROUPED, /* qwen3next: h / (H_v / H_k) */
    KERN_DN_HEAD_MAP_COUNT,
};

/* One layer's shape and constants, fixed at load. */
struct kern_dn_shape {
    int64_t n_head_k, n_head_v;     /* H_k, H_v (H_v a multiple of H_k) */
    int64_t head_dim_k, head_dim_v; /* d_k, d_v: 1 .. KERN_DN_MAX_HEAD_DIM */
    enum kern_dn_head_map head_map;
    float scale;  /* multiplies q: 1/sqrt(d_k) in this family */
    float l2_eps; /* > 0: q and k are L2-normalised per head as they are read,
                   * x / max(‖x‖, l2_eps) (the rms eps); 0: they come normalised */
};

/* 0, or ERR_INVALID for a shape the kernels do not take (sizes out of range, H_v not a
 * multiple of H_k, an unknown map, scale or l2_eps not finite or negative). */
int kern_dn_shape_check(const struct kern_dn_shape *p);

/* The key head value head h reads. */
static inline int64_t kern_dn_head_k(const struct kern_dn_shape *p, int64_t h) {
    return p->head_map == KERN_DN_HEAD_MAP_TILED ? h % p->n_head_k
                                                 : h / (p->n_head_v / p->n_head_k);
}

/* One call's tokens. Strides count floats from one token's row to the next, so q, k and
 * v can point into the conv output (n_tok, 2·H_k·d_k + H_v·d_v). */
struct kern_dn_seq {
    int64_t n_tok;
    const float *q; /* (n_tok, H_k, d_k) */
    int64_t q_stride;
    const float *k; /* (n_tok, H_k, d_k) */
    int64_t k_stride;
    const float *v; /* (n_tok, H_v, d_v) */
    int64_t v_stride;
    const float *g;    /* (n_tok, H_v) log-decay (<= 0 for a decay) */
    const float *beta; /* (n_tok, H_v) */
    float *o;          /* (n_tok, H_v, d_v); may not overlap the inputs */
    int64_t o_stride;
};

/* The level whose bodies the calls below run now: "ref", "avx2" or "avx512". Static. */
const char *kern_dn_level(void);

/* Causal depthwise conv with SiLU, channels [c0, c1) of n_chan:
 *   y[t][c] = SiLU(Σ_{j<K} w[j·n_chan + c] · xe[t + j][c]),   xe = [state (K−1 rows) | x]
 * w: (K, n_chan), tap-major, w[(K−1)·n_chan + c] meets the newest token: ssm_conv1d
 * ({K, n_chan} in ggml order, i.e. (n_chan, K) row-major) transposed once at load with
 * kern_dn_transpose. x, y: (n_tok, n_chan), row stride n_chan; y may equal x. state (the
 * conv layout above) becomes the last K − 1 rows of xe, the inputs before the conv (also
 * when n_tok < K − 1). K = n_kernel, 1 .. KERN_DN_MAX_KERNEL. */
void kern_dn_conv(float *y, float *state, const float *x, const float *w, int64_t n_tok,
                  int64_t n_chan, int64_t n_kernel, int64_t c0, int64_t c1);

/* dst (n_cols, n_rows) = src (n_rows, n_cols) transposed: conv weights from the GGUF
 * layout, conv state to and from llama.cpp's. dst may not overlap src. */
void kern_dn_transpose(float *dst, const float *src, int64_t n_rows, int64_t n_cols);

/* g = softplus(a + dt_bias)·ssm_a (the log-decay; ssm_a stores −exp(A_log)) and
 * β = sigmoid(b), for (n_tok, n_head) values, softplus(x) = ln(1 + e^x) (x above 20:
 * x). g may equal a, beta may equal b. */
void kern_dn_gates(float *g, float *beta, const float *a, const float *b, const float *dt_bias,
                   const float *ssm_a, int64_t n_tok, int64_t n_head);

/* In place, heads [h0, h1) of each token: x ← x / max(‖x‖, eps), x (n_tok, n_head,
 * head_dim) with stride floats between tokens. */
void kern_dn_l2norm(float *x, int64_t stride, int64_t n_tok, int64_t head_dim, int64_t h0,
                    int64_t h1, float eps);

/* The gated delta rule for value heads [h0, h1), token by token (the spec; the fastest
 * form for a few tokens). state: (H_v, d_v, d_k), see above. */
void kern_dn_recurrent(float *state, const struct kern_dn_seq *s, const struct kern_dn_shape *p,
                       int64_t h0, int64_t h1);

/* Bytes of scratch kern_dn_chunked (and kern_dn_delta) needs per thread: 0 on overflow. */
size_t kern_dn_scratch_bytes(const struct kern_dn_shape *p);

/* kern_dn_recurrent's result, computed KERN_DN_CHUNK tokens at a time; any n_tok. scratch:
 * kern_dn_scratch_bytes(p) bytes, any alignment, contents not kept. */
void kern_dn_chunked(float *state, const struct kern_dn_seq *s, const struct kern_dn_shape *p,
                     int64_t h0, int64_t h1, void *scratch);

/* kern_dn_chunked from KERN_DN_CHUNKED_MIN_TOK tokens, kern_dn_recurrent below (scratch may
 * then be NULL). */
void kern_dn_delta(float *state, const struct kern_dn_seq *s, const struct kern_dn_shape *p,
                   int64_t h0, int64_t h1, void *scratch);

/* The gated output norm, heads [h0, h1) of each token:
 *   y_h = x_h / sqrt(mean(x_h²) + eps) · w ⊙ SiLU(z_h)
 * x, z, y: (n_tok, n_head, head_dim) contiguous; w: (head_dim), shared by the heads
 * (ssm_norm); y may equal x. */
void kern_dn_gated_norm(float *y, const float *x, const float *z, const float *w, int64_t n_tok,
                        int64_t n_head, int64_t head_dim, int64_t h0, int64_t h1, float eps);
