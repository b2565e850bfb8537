/* gpu-impl — private to engine/gpu.c (where a GPU's memory goes) and engine/exec-cuda.c
 * (the ops of the recipe on it): one CUDA context and what it holds. CUDA builds only. */
#pragma once

#ifdef WARM_CUDA

#include "engine/device.h"
#include "engine/exec.h"
#include "engine/forward.h"
#include "kernels/cuda/cuda.h"

/* Per-step index arrays, each n_batch int32 (device and host staging alike):
 * IDX_POS positions; per store s at IDX_STORE(s): the cell each token writes, its ring
 * mirror, the first cell it reads and how many; IDX_SEQ each token's sequence (the
 * recurrent layers' state); IDX_WANT the rows that want logits; IDX_ARGMAX the greedy
 * token of each of those rows. */
#define IDX_POS 0
#define IDX_STORE(s) (1 + 4 * (s))
#define IDX_SEQ (1 + 4 * KV_MAX_STORES)
#define IDX_WANT (IDX_SEQ + 1)
#define IDX_ARGMAX (IDX_WANT + 1)
#define IDX_N (IDX_ARGMAX + 1)

/* A slot's K and V rows on one device: whole rows, or a partition's KV heads of every row
 * (rb[K/V] bytes a row, at byte off[K/V] of a whole row). */
struct gpu_kv_slot {
    struct kern_cuda_buf *buf[2];
    size_t rb[2], off[2];
};

/* One CUDA context: the GPU of a context (ctx->gpu), or one partition of a tensor split
 * over GPUs (struct device's gpu; two partitions may share a GPU, each its own context). */
struct gpu {
    struct kern_cuda_ctx *cu;
    int index;
    bool part;          /* a partition: layer inputs come from and partial sums go to the host */
    char name[16];      /* "cuda:N", a partition "cuda:N" or "cuda:N.k" */
    char dev_name[128]; /* the GPU's own name */
    uint32_t l0;        /* first layer on the GPU */
    struct kern_cuda_buf *weights;
    uint64_t weight_bytes;
    /* (n_layer; [l0, n_layer) filled) its share of each layer with the weights on the
     * device: all of it on the GPU of a context, a partition's slices; whole: the whole
     * layers the GPU of a context runs the recipe over (NULL on a partition) */
    struct dev_layer *layer;
    struct engine_layer *whole;
    struct engine_weight output_norm, output, rope_freqs;
    struct kern_rope_params rope[KV_MAX_STORES]; /* ctx->rope with device frequency factors */

    /* the KV rows of each owning slot of each store (n_layer_kv slots) */
    struct gpu_kv_slot *kv[KV_MAX_STORES];
    uint32_t n_slots[KV_MAX_STORES];
    uint64_t kv_bytes;
    struct kv_mem mem; /* ctx->gpu's */

    /* the recurrent state of the Gated DeltaNet layers it runs, by kv_rstate slot (NULL
     * for a layer on the host): n_seq × conv_floats and n_seq × ssm_floats each, synced
     * with the host's through rs_mem (engine/kv-cache.h kv_rs_mem) */
    struct kern_cuda_buf **rs_conv, **rs_ssm;
    uint32_t n_rs; /* slots (kv_rstate's n_layer_rs) */
    uint32_t n_rs_here; /* of them on the GPU */
    uint64_t rs_bytes;
    struct kv_rs_mem rs_mem;

    /* activations for n_batch tokens, and the step's index arrays */
    struct kern_cuda_buf *act;
    uint64_t scratch_bytes;
    float *x, *xb, *q, *k, *v, *att, *hb, *hb2, *pl_g, *ple, *xo, *logits;
    float *qg, *gate, *dn_qkv, *dn_z, *dn_g, *dn_beta, *dn_o; /* engine/exec.h */
    int32_t *moe_sel; /* (n_batch, n_expert_used) each token's experts (moe_route) */
    float *moe_wt;    /* (n_batch, n_expert_used) their weights */
    /* routed experts on the host (engine_context_params.experts): their bytes there, and
     * host staging for a MoE layer's input and output rows (2 × n_batch × n_embd) */
    bool moe_host;
    uint64_t host_expert_bytes;
    float *h_moe;
    int32_t *idx;
    void *mm_scratch;
    int32_t *h_idx; /* (IDX_N × n_batch) host staging */
    float *h_ple;   /* (n_layer × n_batch × n_embd_per_layer) per-layer inputs, layer-major */

    struct exec exec;              /* the recipe's ops on it (engine/exec-cuda.c) */
    int32_t n_out;                 /* rows of the step that want logits */
    struct kern_cuda_graph *graph; /* the one-token step with one row of logits, once recorded */
};

static inline size_t gpu_act_off(const struct gpu *g, const void *p) {
    return (size_t)((const char *)p - (const char *)kern_cuda_buf_ptr(g->act));
}
static inline struct kern_cuda_buf *gpu_kv_buf(const struct gpu *g, uint32_t s, uint32_t slot,
                                               bool v) {
    return g->kv[s][slot].buf[v];
}
static inline float *gpu_rs_conv(const struct gpu *g, uint32_t slot) {
    return kern_cuda_buf_ptr(g->rs_conv[slot]);
}
static inline float *gpu_rs_ssm(const struct gpu *g, uint32_t slot) {
    return kern_cuda_buf_ptr(g->rs_ssm[slot]);
}
static inline size_t gpu_kv_rb(const struct gpu *g, uint32_t s, uint32_t slot, bool v) {
    return g->kv[s] ? g->kv[s][slot].rb[v] : 0;
}

/* Sets g->exec up over g's memory (engine/exec-cuda.c); after its activations exist. */
void gpu_exec_init(struct engine_context *ctx, struct gpu *g);

#endif /* WARM_CUDA */
