/* forward — private to the engine: the state of a context that the forward pass uses
 * (context.c creates it, forward.c runs it, kv-cache.c owns the cache part). */
#pragma once

#include "engine/context.h"
#include "engine/device.h"
#include "engine/exec-cpu.h"
#include "engine/gpu.h"
#include "engine/kv-cache.h"
#include "engine/model.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"

/* Tokens per attention work item (exec-cpu.c). */
#define ATTN_BLOCK 16

struct engine_context {
    const struct engine_model *model; /* borrowed */
    struct engine_context_params params;
    struct kern_pool *pool; /* device 0's: for the work every device shares (norms, PLE) */
    struct kv_cache kv;
    uint32_t n_dev;
    struct device *dev;          /* (n_dev) engine/device.h */
    struct kern_pool *dev_drive; /* n_dev threads, thread d drives device d (n_dev > 1) */
    /* device = cuda:N: the GPU that runs layers [n_layer_host, n_layer) and the classifier
     * (engine/gpu.h); NULL and n_layer_host = n_layer on the CPU alone */
    struct gpu *gpu;
    uint32_t n_layer_host;
    char device_note[256]; /* device = auto that fell back to the CPU: why (else "") */
    bool split_gpu;        /* the devices are GPU partitions (engine/gpu.h) */
    struct kv_mem split_mem;
    /* RoPE of each store's kind: [KV_STORE_FULL] global layers, [KV_STORE_SWA] SWA layers
     * (gemma: their own base, scale 1, no frequency factors) */
    struct kern_rope_params rope[KV_MAX_STORES];

    /* Scratch rows, sized for n_batch tokens at creation (float counts per row): */
    float *x;        /* (n_batch, n_embd) the residual stream */
    float *xb;       /* (n_batch, n_embd) normed input / projection output */
    /* (the attention's and FFN's scratch are each device's: struct device) */
    float *k_row;    /* (the largest n_head_kv × hd_k) one K row, for the context shift */
    float *rope_cs[KV_MAX_STORES]; /* (n_batch, n_rot of the kind) cos/sin pairs per token */
    float *ple;      /* (n_batch, n_layer × n_embd_per_layer) gemma4 per-layer inputs */
    float *ple_row;  /* (n_layer × n_embd_per_layer) one token's per-layer embedding row */
    float *pl_g;     /* (n_batch, n_embd_per_layer) the per-layer branch's gate */
    float *out_x;    /* (n_out_step, n_embd) final hidden states of the tokens with logits */
    uint32_t n_out_step; /* rows of out_x: min(n_batch, n_outputs) */
    /* the host's executor (engine/exec.h): the recipe on the CPU, device 0's threads */
    struct exec_cpu host;

    float *logits;     /* (n_outputs, n_vocab) */
    int32_t *argmax;   /* (n_outputs) the greedy rows of an argmax_only decode */
    int32_t n_outputs; /* rows filled by the last decode */
    bool argmax_only;  /* the last decode's batch asked for the argmax only */

    /* (n_seq) validation scratch: next expected position, -1 = unseen; through the decode,
     * one past each sequence's last position in the batch (what bidirectional attention
     * sees) */
    int32_t *seq_next;

    /* An embeddings context (params.embeddings): */
    float *embd;       /* (n_batch, n_embd) every token's final hidden state, the last decode */
    int32_t embd_n_tok; /* its tokens */
    int32_t *embd_row; /* (n_seq) row of each sequence of the last decode in embd_seq, or -1 */
    float *embd_seq;   /* (n_seq, n_embd_out) the pooled vectors, after the projections */
    float *pool_in;    /* (n_seq, n_embd) pooled rows before the projections */
    int32_t *pool_n;   /* (n_seq) tokens pooled into each row */
    float *dense_mid;  /* (n_seq, n_embd_dense) between the projections */
    void *dense_scratch; /* the projections' matmul scratch */
};

/* One step of the forward pass over tokens [t0, t0 + n) of b (n <= n_batch); writes the
 * logits of its tokens that want them from row *out_row on. The batch is valid; the only
 * failure is a GPU's (with d). */
int forward_step(struct engine_context *ctx, const struct engine_batch *b, int32_t t0, int32_t n,
                 int32_t *out_row, struct err_detail *d);
/* An embeddings context after the steps of b (its final states in ctx->embd): the model's
 * pooling of each sequence of b, through the dense projections, into ctx->embd_seq (the
 * row ctx->embd_row says). */
void forward_pool(struct engine_context *ctx, const struct engine_batch *b);
/* Token i of the last decode's final state through the dense projections: n_embd_out
 * floats into out. */
void forward_token_embedding(struct engine_context *ctx, int32_t i, float *out);
