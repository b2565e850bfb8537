/* kernels/cuda — the CUDA tier of kernels/ (optional target warm_cuda), as a plain C API.
 *
 * Nothing here exposes a CUDA type: device memory is owned by struct kern_cuda_buf objects
 * and addressed as opaque pointers (kern_cuda_buf_ptr() + byte offsets) that only the
 * kern_cuda_* functions dereference. Host <-> device copies are explicit
 * (kern_cuda_buf_upload/download). Every op is enqueued on its context's stream and
 * returns at once; kern_cuda_ctx_sync(), the copies to and from the host and
 * kern_cuda_buf_free() wait for the stream, so a decode step (token id upload, the
 * step's kernels or its graph, the sampled token's download) waits only for its result.
 *
 * Ops mirror kernels/ops.h and kernels/matmul.h (destination first, then sources, then
 * sizes as int64_t, strides in bytes) and are checked against the reference kernels by
 * tests/cuda/ with a named tolerance per type. Errors: 0 ok; -ENODEV no usable device
 * (no GPU, no driver, driver too old); -ENOMEM device memory exhausted; -EINVAL bad
 * argument; -EOPNOTSUPP a type or size the kernel does not handle; -EIO any other CUDA
 * failure (a launch error, a faulted context).
 *
 * Threading: a context is used by one thread at a time; distinct contexts may run
 * concurrently. Buffers belong to the context that made them and are freed before it. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/deltanet.h"
#include "kernels/ops.h"
#include "kernels/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- devices ------------------------------------------------------------------------ */

/* Number of usable CUDA devices; 0 when there is no GPU, no driver (libcuda.so absent) or
 * the driver is older than the runtime. Never aborts. */
int kern_cuda_device_count(void);

struct kern_cuda_device_info {
    char name[128];         /* truncated to 127 bytes */
    int cc_major, cc_minor; /* compute capability */
    int n_sm;               /* streaming multiprocessors */
    size_t total_bytes;     /* device memory */
    size_t free_bytes;      /* free when asked */
};
/* Describes device dev (0 <= dev < kern_cuda_device_count()). *ret on success only. */
int kern_cuda_device_get_info(int dev, struct kern_cuda_device_info *ret);

/* ---- contexts and buffers ----------------------------------------------------------- */

/* A device, a stream, and the bookkeeping of what is reserved on the device. */
struct kern_cuda_ctx;
int kern_cuda_ctx_new(int dev, struct kern_cuda_ctx **ret);
void kern_cuda_ctx_free(struct kern_cuda_ctx *ctx); /* NULL-safe; frees no buffers */
int kern_cuda_ctx_device(const struct kern_cuda_ctx *ctx);
/* Waits for everything enqueued on the context; returns the first error of a kernel. */
int kern_cuda_ctx_sync(struct kern_cuda_ctx *ctx);
/* Bytes of device memory currently held by this context's buffers (and scratch). */
size_t kern_cuda_ctx_reserved_bytes(const struct kern_cuda_ctx *ctx);

/* Device memory of `bytes` bytes (zeroed). */
struct kern_cuda_buf;
int kern_cuda_buf_new(struct kern_cuda_ctx *ctx, size_t bytes, struct kern_cuda_buf **ret);
void kern_cuda_buf_free(struct kern_cuda_buf *buf); /* NULL-safe */
/* Device address of byte 0: pass it (plus offsets) to the ops. Valid until freed. */
void *kern_cuda_buf_ptr(const struct kern_cuda_buf *buf);
size_t kern_cuda_buf_bytes(const struct kern_cuda_buf *buf);
/* Copies n bytes host -> device at byte offset off. Waits until src may be reused. */
int kern_cuda_buf_upload(struct kern_cuda_buf *buf, size_t off, const void *src, size_t n);
/* Copies n bytes device -> host after everything enqueued before it (a sync point). */
int kern_cuda_buf_download(const struct kern_cuda_buf *buf, size_t off, void *dst, size_t n);
/* Device -> device copy of n bytes (enqueued). */
int kern_cuda_copy(struct kern_cuda_ctx *ctx, void *dst, const void *src, size_t n);

/* ---- matrix products ---------------------------------------------------------------- */

/* Tokens at or below which kern_cuda_matmul() runs the dequantizing matrix-vector kernel
 * (decode); above it, weights are dequantized to f16 tiles and multiplied on the tensor
 * cores (WMMA, f32 accumulation). */
#define KERN_CUDA_MATVEC_MAX_TOK 8

/* Scratch bytes kern_cuda_matmul() needs: the q8-rounded activations (n_tok × n_in f32)
 * and, above KERN_CUDA_MATVEC_MAX_TOK tokens, the f16 copies of W (n_out × n_in, rounded up
 * to 64 rows) and of x. */
size_t kern_cuda_matmul_scratch_bytes(int64_t n_in, int64_t n_out, int64_t n_tok);
/* y (n_tok, n_out) f32 = x (n_tok, n_in) f32 · Wᵀ, W n_out rows of type wt (every type
 * kern_matmul() supports: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q4_K,
 * q5_K, q6_K, q2_K, q3_K, iq4_xs, mxfp4; the GEMM path's f16 copy of W needs mxfp4 scales
 * within f16's range, as every real model's are), row stride kern_row_size(wt, n_in). All pointers are device addresses;
 * scratch holds kern_cuda_matmul_scratch_bytes() bytes. As on the CPU, activations of
 * quantized weight types are first rounded to q8 blocks (x' = fp16(d)·q, d = amax/127),
 * so results equal kern_matmul()'s up to float summation order (and, on the GEMM path,
 * the f16 rounding of W and x'). */
int kern_cuda_matmul(struct kern_cuda_ctx *ctx, float *y, const void *w, enum kern_type wt,
                     const float *x, int64_t n_in, int64_t n_out, int64_t n_tok, void *scratch);
/* x (n_tok, n) f32 = rows tokens[t] of the table emb (rows of type t, row_bytes apart);
 * tokens is a device array. */
int kern_cuda_get_rows(struct kern_cuda_ctx *ctx, float *x, const void *emb, enum kern_type t,
                       size_t row_bytes, const int32_t *tokens, int64_t n_tok, int64_t n);

/* ---- row ops ------------------------------------------------------------------------ */

/* Per row r < n_rows: y[r] = x[r] / sqrt(mean(x[r]²) + eps) * w (w NULL: no weight). */
int kern_cuda_rmsnorm(struct kern_cuda_ctx *ctx, float *y, const float *x, const float *w,
                      int64_t n, int64_t n_rows, float eps);
/* y = silu(g) * u over n values */
int kern_cuda_silu_mul(struct kern_cuda_ctx *ctx, float *y, const float *g, const float *u,
                       int64_t n);
/* y = gelu(g) * u (tanh approximation, as ggml's gelu) over n values */
int kern_cuda_gelu_mul(struct kern_cuda_ctx *ctx, float *y, const float *g, const float *u,
                       int64_t n);
/* x *= v over n values (gemma4's layer output scale) */
int kern_cuda_scale(struct kern_cuda_ctx *ctx, float *x, int64_t n, float v);
/* y[r] += x[r % n_rows_x] for n_rows rows of n values (n_rows_x = 1: a bias). */
int kern_cuda_add(struct kern_cuda_ctx *ctx, float *y, const float *x, int64_t n,
                  int64_t n_rows, int64_t n_rows_x);
/* RoPE in place on n_tok rows of n_head heads of head_dim values (row stride
 * n_head × head_dim), token t at position pos[t] (device array), exactly the angles of
 * kern_rope_cache() (computed on the device; p->freq_factors, when set, is a DEVICE array
 * of n_dims/2 floats). */
int kern_cuda_rope(struct kern_cuda_ctx *ctx, float *x, const int32_t *pos, int64_t n_tok,
                   int64_t n_head, int64_t head_dim, const struct kern_rope_params *p);
/* Blockwise normalized Walsh–Hadamard transform of n values (n_rot a power of two,
 * 2 <= n_rot <= 1024, n a multiple of it): kern_ref_hadamard() on the device. */
int kern_cuda_hadamard(struct kern_cuda_ctx *ctx, float *x, int64_t n, int64_t n_rot);
/* Index of the largest of n values of each of n_rows rows (first on ties) into idx
 * (device array): greedy sampling without copying logits to the host. */
int kern_cuda_argmax(struct kern_cuda_ctx *ctx, int32_t *idx, const float *x, int64_t n,
                     int64_t n_rows);

/* ---- KV cache ----------------------------------------------------------------------- */

/* The KV write: for t < n_tok, row src[t] (n f32 values) is rotated blockwise by n_rot
 * (0 = not rotated; DESIGN.md 3.4), converted to type t and stored at
 * dst + cell[t]·dst_stride (cell a device array). Types: f32, f16, bf16, q8_0, q4_0,
 * q4_1, q5_0, q5_1, iq4_nl; the bytes equal the reference quantizers' (the same float
 * operations in the same order, iq4_nl's scale search included). src is not modified. */
int kern_cuda_kv_store(struct kern_cuda_ctx *ctx, void *dst, size_t dst_stride,
                       const int32_t *cell, const float *src, int64_t n_tok, enum kern_type t,
                       int64_t n, int64_t n_rot);

/* Attention of n_tok tokens (n_head query heads each, GQA: head h reads KV head
 * h / (n_head / n_head_kv)) over cached rows read in their stored type (the nine KV
 * types above):
 *   q   (n_tok, n_head × hd_k) f32;  out (n_tok, n_head × hd_v) f32
 *   token t sees cells kv_row0[t] .. kv_row0[t] + n_kv[t] - 1 (device arrays): cell c's
 *   K row is at k + c·k_stride (n_head_kv × hd_k values of kt), V likewise
 *   out = softmax(scale · q·Kᵀ) · V, online softmax over tiles of keys.
 * Head sizes: multiples of 32, at most 512. */
struct kern_cuda_attn_args {
    float *out;
    const float *q;
    const void *k, *v;
    enum kern_type kt, vt;
    size_t k_stride, v_stride;
    const int32_t *kv_row0, *n_kv;
    int64_t n_tok, n_head, n_head_kv, hd_k, hd_v;
    float scale;
    /* gpt-oss's attention sinks (NULL: none): head h's logit sinks[h] joins the softmax's
     * denominator only, as exp(sinks[h] − the largest score) */
    const float *sinks;
};
int kern_cuda_attn(struct kern_cuda_ctx *ctx, const struct kern_cuda_attn_args *a);

/* ---- Gated DeltaNet (kernels/deltanet.h) and gated attention ----------------------------
 * A step's tokens belong to sequences given per token (seq, a device array of n_tok
 * sequence indices): a sequence's state lives at state + seq·state_stride floats, in the
 * layouts of kernels/deltanet.h, and each kernel folds the tokens into their sequences'
 * states in batch order (a sequence's runs may interleave with others'), as the CPU runs
 * kern_dn_conv / kern_dn_recurrent run by run. Results equal the reference up to float
 * summation order (f32 sums here, double there). */

/* kern_dn_gates() on the device: g = softplus(a + dt_bias)·ssm_a, β = σ(b) over
 * (n_tok, n_head); g may be a, beta may be b. */
int kern_cuda_dn_gates(struct kern_cuda_ctx *ctx, float *g, float *beta, const float *a,
                       const float *b, const float *dt_bias, const float *ssm_a, int64_t n_tok,
                       int64_t n_head);
/* kern_dn_conv() of every channel: y, x (n_tok, n_chan), y may be x; w (K, n_chan)
 * tap-major (the transposed ssm_conv); state (K − 1, n_chan) per sequence,
 * state_stride >= (K − 1)·n_chan; K = n_kernel, 1 .. KERN_DN_MAX_KERNEL. */
int kern_cuda_dn_conv(struct kern_cuda_ctx *ctx, float *y, float *state, int64_t state_stride,
                      const int32_t *seq, const float *x, const float *w, int64_t n_tok,
                      int64_t n_chan, int64_t n_kernel);
/* kern_dn_recurrent() of every value head of the shape p (head sizes up to
 * KERN_DN_MAX_HEAD_DIM): S (H_v, d_v, d_k) per sequence, state_stride >= H_v·d_v·d_k;
 * q, k, v, g, beta, o and their strides (floats between tokens) as struct kern_dn_seq's. */
struct kern_cuda_dn_args {
    float *state;
    int64_t state_stride;
    const int32_t *seq;
    const float *q, *k, *v, *g, *beta;
    float *o;
    int64_t q_stride, k_stride, v_stride, o_stride;
    int64_t n_tok;
};
int kern_cuda_dn_delta(struct kern_cuda_ctx *ctx, const struct kern_cuda_dn_args *a,
                       const struct kern_dn_shape *p);
/* kern_dn_gated_norm() of n_rows rows of width values (every row one head): y = x /
 * sqrt(mean(x²) + eps) · w ⊙ SiLU(z); y may be x. */
int kern_cuda_dn_gated_norm(struct kern_cuda_ctx *ctx, float *y, const float *x, const float *z,
                            const float *w, int64_t n_rows, int64_t width, float eps);
/* y0 (n_rows, w0) and y1 (n_rows, w1) = the two parts of each row of x (n_rows, w0 + w1) */
int kern_cuda_unzip(struct kern_cuda_ctx *ctx, float *y0, float *y1, const float *x,
                    int64_t n_rows, int64_t w0, int64_t w1);
/* x = x ⊙ σ(g) over n values */
int kern_cuda_sigmoid_mul(struct kern_cuda_ctx *ctx, float *x, const float *g, int64_t n);

/* ---- mixture of experts (notes/hybrid.md §A.7, §C; engine/moe.h) ------------------------
 * The router's choice stays on the device (no host round trip: a decode step still
 * records as one graph): kern_cuda_moe_route() writes each token's experts and weights,
 * kern_cuda_moe_experts() groups the (token, slot) pairs by expert on the device and reads
 * each active expert's rows once per 8 of its tokens, only the selected experts'. */

#define KERN_CUDA_MOE_MAX_EXPERTS 512 /* experts of a router (engine's ENGINE_MAX_EXPERTS) */
#define KERN_CUDA_MOE_MAX_USED 32     /* experts a token */

enum kern_cuda_moe_gating {
    KERN_CUDA_MOE_SOFTMAX,      /* softmax over all, the top n_used probabilities */
    KERN_CUDA_MOE_TOPK_SOFTMAX, /* the top n_used logits, a softmax over those (gpt-oss) */
};
/* the gated activation act(g) ⊙ u of an FFN */
enum kern_cuda_act {
    KERN_CUDA_ACT_SILU,
    KERN_CUDA_ACT_GELU,       /* the tanh GELU */
    KERN_CUDA_ACT_SWIGLU_OAI, /* gpt-oss: min(g, 7)·σ(1.702·min(g, 7))·(clamp(u, −7, 7) + 1) */
};

struct kern_cuda_moe_route_params {
    enum kern_cuda_moe_gating gating;
    bool norm_w;   /* weights / max(Σ weights, 2^-14) */
    float w_scale; /* 0 or 1: none */
    int64_t n_expert, n_used; /* 1 <= n_used <= min(n_expert, KERN_CUDA_MOE_MAX_USED) */
};
/* moe_route_token() (engine/moe.h) of each of n_tok rows of logits (n_tok, n_expert):
 * sel and wt (n_tok, n_used) its experts, best first (ties to the lower index), and their
 * weights. */
int kern_cuda_moe_route(struct kern_cuda_ctx *ctx, int32_t *sel, float *wt, const float *logits,
                        int64_t n_tok, const struct kern_cuda_moe_route_params *p);

/* out (n_tok, n_embd) = Σ over each token's slots j, in expert order, of wt_j · scale[e_j] ·
 * (W_down_e · h + b_down_e), h = act(W_gate_e · in + b_gate_e) ⊙ (W_up_e · in + b_up_e)
 * over n_ff hidden units. Stacks: expert e's rows at gate + e·gate_stride bytes (row
 * stride kern_row_size(type, n_in)), likewise up and down; biases (optional, f32): expert
 * e's gate and up units at e·b_stride + b0, its down rows at e·n_embd; scale optional
 * (n_expert). Activations are rounded to q8 blocks for quantized types as
 * kern_cuda_matmul() does. in and out may be the same rows. scratch holds
 * kern_cuda_moe_scratch_bytes(). */
struct kern_cuda_moe_args {
    float *out;
    const float *in;
    const int32_t *sel; /* (n_tok, n_used) from kern_cuda_moe_route() */
    const float *wt;
    const void *gate, *up, *down;
    enum kern_type gate_t, up_t, down_t;
    size_t gate_stride, up_stride, down_stride;
    const float *gate_b, *up_b, *down_b, *scale;
    int64_t b_stride, b0;
    enum kern_cuda_act act;
    int64_t n_tok, n_used, n_expert, n_embd, n_ff;
};
size_t kern_cuda_moe_scratch_bytes(int64_t n_tok, int64_t n_used, int64_t n_expert,
                                   int64_t n_embd, int64_t n_ff);
int kern_cuda_moe_experts(struct kern_cuda_ctx *ctx, const struct kern_cuda_moe_args *a,
                          void *scratch);
/* y = act(g) ⊙ u over n values, any of the activations */
int kern_cuda_glu(struct kern_cuda_ctx *ctx, float *y, const float *g, const float *u, int64_t n,
                  enum kern_cuda_act act);
/* y[r] += σ(g[r]) · x[r] for n_rows rows of width values: a shared expert's output gated
 * by its logit (one a row) */
int kern_cuda_add_gated(struct kern_cuda_ctx *ctx, float *y, const float *x, const float *g,
                        int64_t width, int64_t n_rows);

/* ---- graphs: one launch for a whole step ----------------------------------------------- */

/* Between kern_cuda_graph_begin() and kern_cuda_graph_end() the ops enqueued on ctx are
 * recorded, not run (thread-local stream capture); kern_cuda_graph_launch() then replays
 * them with one launch, which removes the per-kernel launch cost that dominates a decode
 * step of a small model. Replays read device memory as it is then (token ids, positions
 * uploaded before the launch); pointers and sizes are those of the capture. No upload,
 * download or sync may happen while capturing. */
struct kern_cuda_graph;
int kern_cuda_graph_begin(struct kern_cuda_ctx *ctx);
int kern_cuda_graph_end(struct kern_cuda_ctx *ctx, struct kern_cuda_graph **ret);
int kern_cuda_graph_launch(struct kern_cuda_ctx *ctx, struct kern_cuda_graph *graph);
void kern_cuda_graph_free(struct kern_cuda_graph *graph); /* NULL-safe */

/* ---- measurements ------------------------------------------------------------------- */

/* Device-to-device copy bandwidth in bytes/s (read + write counted), measured with
 * `bytes`-sized copies repeated `reps` times: the memory-bandwidth bound of decode. */
int kern_cuda_copy_bandwidth(struct kern_cuda_ctx *ctx, size_t bytes, int reps, double *ret);
/* Microseconds between two kern_cuda_ctx_sync() points measured on the device:
 * kern_cuda_timer_begin() records a start event, kern_cuda_timer_end() waits for the
 * stream and returns the elapsed microseconds. */
int kern_cuda_timer_begin(struct kern_cuda_ctx *ctx);
int kern_cuda_timer_end(struct kern_cuda_ctx *ctx, double *ret_usec);

#ifdef __cplusplus
}
#endif
