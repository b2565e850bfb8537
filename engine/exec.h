/* exec — private to the engine: the small set of operations the layer recipe
 * (engine/forward.c) runs, behind one interface that every device implements: the CPU
 * and CPU partitions (engine/exec-cpu.c) and CUDA, a whole GPU or a partition of a split
 * over GPUs (engine/exec-cuda.c). The recipe is written once, in forward.c; a device
 * only says how it multiplies, norms, rotates, writes and reads its KV.
 *
 * An executor (struct exec) is one device's: its ops, its share of every layer (head and
 * unit ranges and the weights on that device, engine/device.h's dev_layer), and its
 * activations. Pointers to activations and weights are the device's own (host memory on
 * the CPU, device addresses on a GPU): the recipe passes them along and never reads them.
 *
 * Errors are sticky: an op that fails (a CUDA launch, a faulted context) keeps its code
 * in e->err, every later op of the step does nothing, and the step checks e->err once at
 * its end. CPU ops cannot fail. */
#pragma once

#include "engine/model.h"

struct engine_context;
struct engine_batch;
struct dev_layer;
struct exec;

/* One layer of one step: tokens [t0, t0 + n) of b. */
struct layer_step {
    const struct engine_batch *b;
    int32_t t0, n, il;
    int64_t attn_work; /* multiply-adds of the whole layer's attention (CPU threading) */
};

struct exec_ops {
    /* y (n, w->n_out) = x (n, w->n_in) · Wᵀ */
    void (*matmul)(struct exec *e, float *y, const struct engine_weight *w, const float *x,
                   int64_t n);
    /* ys[i] (n, ws[i]->n_out) = x (n, n_in) · W_iᵀ for n_mat (up to KERN_MM_MANY_MAX)
     * matrices of the same n_in over the same x (a layer's q, k, v; gate and up); NULL:
     * matmul each (exec_matmuls) */
    void (*matmul_many)(struct exec *e, int n_mat, float *const *ys,
                        const struct engine_weight *const *ws, const float *x, int64_t n);
    /* y[r] += x[r % n_rows_x] for n_rows rows of width values (n_rows_x = 1: a bias) */
    void (*add)(struct exec *e, float *y, const float *x, int64_t width, int64_t n_rows,
                int64_t n_rows_x);
    /* y[r] = RMSNorm(x[r]) · w for n_rows rows of width values (w NULL or absent: no weight) */
    void (*rmsnorm)(struct exec *e, float *y, const float *x, const struct engine_weight *w,
                    int64_t width, int64_t n_rows, float eps);
    /* y[r] = LayerNorm(x[r]) · w + b for n_rows rows of width values (w, b NULL or absent:
     * none): the BERT family's norm */
    void (*layernorm)(struct exec *e, float *y, const float *x, const struct engine_weight *w,
                      const struct engine_weight *b, int64_t width, int64_t n_rows, float eps);
    /* y = gelu(x) over n values (the tanh GELU): bert's FFN, which is not gated */
    void (*gelu)(struct exec *e, float *y, const float *x, int64_t n);
    /* y = act(g) * u over n values (SiLU, or gemma's tanh GELU) */
    void (*glu)(struct exec *e, float *y, const float *g, const float *u, int64_t n,
                enum engine_ffn_act act);
    /* gemma4's per-layer branch: g (n, P) = gelu(g) ⊙ the step's per-layer input of layer il */
    void (*ple_gate)(struct exec *e, float *g, int il, int32_t n);
    void (*scale)(struct exec *e, float *x, int64_t n, float v);
    void (*copy)(struct exec *e, float *dst, const float *src, int64_t n);
    /* RoPE in place on the step's n tokens, n_head heads of hd values a row, with the
     * angles of the KV store `kind` (engine/kv-cache.h) at each token's position */
    void (*rope)(struct exec *e, const struct layer_step *s, float *x, int64_t n_head, int64_t hd,
                 int kind);
    /* blockwise normalized Walsh–Hadamard transform of n values (DESIGN.md 3.4) */
    void (*hadamard)(struct exec *e, float *x, int64_t n, int n_rot);
    /* Layer il's K and V rows of the step's tokens, its KV heads (k: n × n_kv × hd_k, v:
     * n × n_kv × hd_v), into the cache at each token's (sequence, position), rotated as
     * the cache is; k and v may be overwritten. */
    void (*kv_write)(struct exec *e, const struct layer_step *s, float *k, float *v);
    /* att (n, its query heads × hd_v) = softmax(scale · q · Kᵀ) · V over the cells each
     * token sees (its sequence, up to its position, within a sliding window), for its KV
     * heads and the query heads that read them (un-rotated by the caller) */
    void (*attend)(struct exec *e, const struct layer_step *s, float *att, const float *q);
    /* attend for a bidirectional layer: each token sees every cell of its sequence that
     * the step wrote (an embeddings context's step holds whole sequences), earlier and
     * later, within window / 2 positions on both sides on a sliding-window layer. NULL
     * where the device has none (CUDA: engine_context_new() keeps embedding models off
     * it). */
    void (*attend_bidir)(struct exec *e, const struct layer_step *s, float *att, const float *q);
    /* y0 (n_rows, w0) and y1 (n_rows, w1) = the two parts of each row of x (n_rows, w0 + w1):
     * a gated attention's query and gate of each head */
    void (*unzip)(struct exec *e, float *y0, float *y1, const float *x, int64_t n_rows,
                  int64_t w0, int64_t w1);
    /* x = x ⊙ sigmoid(g) over n values: the output gate of a gated attention */
    void (*sigmoid_mul)(struct exec *e, float *x, const float *g, int64_t n);
    /* Gated DeltaNet (kernels/deltanet.h, notes/hybrid.md §A.6), layer s->il, the
     * executor's heads, the state of each token's sequence (engine/kv-cache.h kv_rstate;
     * on a GPU its device copy, kv_rs_mem) updated in batch order.
     * dn_gates: in place over (n, H_v): a → g = softplus(a + dt_bias)·ssm_a, b → β = σ(b) */
    void (*dn_gates)(struct exec *e, float *a, float *b, const struct engine_weight *dt_bias,
                     const struct engine_weight *ssm_a, int64_t n, int64_t n_head);
    /* in place over qkv (n, conv_dim): SiLU(causal depthwise conv with the layer's
     * ssm_conv), after each sequence's conv state, which becomes its last K − 1 inputs */
    void (*dn_conv)(struct exec *e, const struct layer_step *s, float *qkv);
    /* o (n, H_v × d_v) = the gated delta rule of q | k | v (qkv, the conv's output; q and
     * k L2-normed as they are read), g and β (n, H_v), over each sequence's S */
    void (*dn_delta)(struct exec *e, const struct layer_step *s, float *o, const float *qkv,
                     const float *g, const float *beta);
    /* y = RMSNorm(x)·w ⊙ SiLU(z) for n_rows rows (heads) of width values; y may equal x */
    void (*dn_gated_norm)(struct exec *e, float *y, const float *x, const float *z,
                          const struct engine_weight *w, int64_t n_rows, int64_t width,
                          float eps);
    /* Mixture of experts (notes/hybrid.md §A.7, §C; engine/moe.h). NULL where the device
     * has none (CUDA: engine/gpu.c refuses such models).
     * moe_route: each of the n tokens' n_expert_used experts and their weights from its
     * router logits (n, n_expert), as the model's gating says; kept by the executor for
     * the step's moe_experts */
    void (*moe_route)(struct exec *e, const float *logits, int32_t n);
    /* out (n, n_embd) = Σ over each token's experts of weight · W_down_e[:, its units] ·
     * (act(W_gate_e · in) ⊙ (W_up_e · in)) over the executor's hidden units of every
     * expert of layer s->il (zeros where it holds none): the step's tokens grouped by
     * expert, so each selected expert's rows are read once a step and the others not at
     * all. in and out may be the same rows (in is read before out is written); hb and hb2
     * are left as they are. */
    void (*moe_experts)(struct exec *e, const struct layer_step *s, float *out, const float *in);
    /* y[r] += sigmoid(g[r]) · x[r] for n_rows rows of width values: a shared expert's
     * output gated by its logit (one a row) */
    void (*add_gated)(struct exec *e, float *y, const float *x, const float *g, int64_t width,
                      int64_t n_rows);
    /* The rows of x that want logits (batch order) into y: *ret_n_out rows */
    void (*gather)(struct exec *e, const struct layer_step *s, float *y, const float *x,
                   int32_t *ret_n_out);
    /* A partition's layer input: the host's n floats of x onto the device (returns where
     * they are), and its output back to the host; on the CPU the same memory, nothing to do */
    const float *(*input)(struct exec *e, const float *x, int64_t n);
    void (*output)(struct exec *e, float *host, const float *y, int64_t n);
};

struct exec {
    const struct exec_ops *ops;
    struct engine_context *ctx;
    const char *name;              /* the device's */
    const struct dev_layer *layer; /* (n_layer) its share of each layer and the weights there */
    const struct engine_layer
        *whole; /* (n_layer) whole layers where it runs the recipe, else NULL */
    /* activations on the device: the residual stream and normed input (n_batch, n_embd)
     * where it runs the recipe; its scratch for the layer kinds; a partition's output; the
     * gathered rows that want logits and their logits */
    float *x, *xb, *q, *k, *v, *att, *hb, *hb2, *pl_g, *out, *xo, *logits;
    /* a gated attention's query and gate rows (n_batch, n_head × (hd_k + hd_v)) and its
     * gates (n_batch, n_head × hd_v); a Gated DeltaNet layer's projections: qkv (n_batch,
     * conv_dim), z and o (n_batch, H_v × d_v), g and β (n_batch, H_v) */
    float *qg, *gate, *dn_qkv, *dn_z, *dn_g, *dn_beta, *dn_o;
    const struct engine_weight *output_norm, *output; /* on the device (its classifier rows) */
    int err;    /* the step's first failure (sticky), 0 when none */
    void *impl; /* struct device * (CPU) or struct gpu * (CUDA) */
};

extern const struct exec_ops exec_cpu_ops;
#ifdef WARM_CUDA
extern const struct exec_ops exec_cuda_ops;
#endif
