/* A whole-model forward pass on the GPU built from the kernels/cuda ops, for the
 * cross-checks of tests/cuda and for warm-cuda-bench --model. One sequence, positions
 * from 0; the same layer recipe as engine/forward.c (RMSNorm -> Q, K, V (+bias) ->
 * qwen3 QK norm -> RoPE -> Hadamard rotation (DESIGN.md 3.4) -> KV write in the cache
 * type -> attention over the cache in its stored type -> output projection -> SwiGLU FFN),
 * shared-KV layers reading kv_source(il)'s KV.
 *
 * This is NOT the engine's device integration (engine_context with device = cuda:N); it is
 * the same computation driven from the outside through the engine's model struct, so the
 * kernels can be checked end to end against the CPU engine and timed on a real model.
 * Header-only (static functions): included by one test and one tool. */
#pragma once

#include "engine/engine.h"
#include "kernels/cuda/cuda.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct gpu_weight {
    const void *data; /* device address; NULL = absent */
    enum kern_type type;
    int64_t n_in, n_out;
    size_t row_bytes;
};

struct gpu_layer {
    struct gpu_weight attn_norm, wq, wk, wv, wo, bq, bk, bv, bo, q_norm, k_norm, ffn_norm, w_gate, w_up, w_down;
};

struct gpu_model {
    struct kern_cuda_ctx *ctx; /* borrowed */
    const struct engine_model *m;
    struct kern_cuda_buf *weights, *kv, *act;
    struct gpu_weight tok_embd, output_norm, output, rope_freqs;
    struct gpu_layer *layers;
    size_t weight_bytes;
    /* KV: per owning layer, n_ctx K rows then n_ctx V rows */
    enum kern_type type_k, type_v;
    int n_rot_k, n_rot_v;
    int32_t *source, *slot;
    size_t k_row_bytes, v_row_bytes, kv_layer_bytes;
    uint32_t n_ctx, n_batch, n_past;
    uint32_t n_out; /* rows of logits the last step computed */
    struct kern_rope_params rope;
    /* activations (device), see gpu_model_new() */
    float *x, *xb, *q, *k, *v, *att, *hb, *hb2, *logits;
    int32_t *idx; /* (4, n_batch): token ids, positions (= cells), the row of cell 0, n_kv */
    int32_t *tok, *pos, *row0, *n_kv, *argmax;
    void *scratch;
    int32_t *host_idx;                 /* (4, n_batch) staging for idx */
    struct kern_cuda_graph *decode;    /* the one-token step, captured on first use */
};

/* K is rotated with the largest power of two dividing its head size, V with 64, when the
 * type is quantized and the head size a multiple of 64 (engine/kv-cache.c's rules). */
static inline int gpu_rot_size(enum kern_type t, int64_t head_dim, bool rotation, bool is_k) {
    if (!rotation || !kern_type_traits(t)->is_quantized || head_dim % 64) return 0;
    if (!is_k) return 64;
    int n = 64;
    while (head_dim % (2 * n) == 0) n *= 2;
    return n;
}

static inline size_t gpu_align(size_t n) {
    return (n + 255) & ~(size_t)255;
}

static inline size_t gpu_weight_bytes(const struct engine_weight *w) {
    return w->data ? w->row_bytes * (size_t)w->n_out : 0;
}

/* Copies w into the weights buffer at *off (advanced); dst describes the device copy. */
static inline int gpu_weight_put(struct gpu_model *g, struct gpu_weight *dst, const struct engine_weight *w, size_t *off) {
    memset(dst, 0, sizeof *dst);
    if (!w->data) return 0;
    size_t n = gpu_weight_bytes(w);
    if (g->weights) {
        int r = kern_cuda_buf_upload(g->weights, *off, w->data, n);
        if (r < 0) return r;
        *dst = (struct gpu_weight){(const char *)kern_cuda_buf_ptr(g->weights) + *off, w->type, w->n_in, w->n_out,
                                   w->row_bytes};
    }
    *off += gpu_align(n);
    return 0;
}

/* Walks every weight of m (twice: first to size the buffer, then to upload). */
static inline int gpu_weights_walk(struct gpu_model *g, size_t *off) {
    const struct engine_model *m = g->m;
    int r = 0;
    *off = 0;
    r = r ? r : gpu_weight_put(g, &g->tok_embd, &m->tok_embd, off);
    r = r ? r : gpu_weight_put(g, &g->output_norm, &m->output_norm, off);
    r = r ? r : gpu_weight_put(g, &g->output, &m->output, off);
    r = r ? r : gpu_weight_put(g, &g->rope_freqs, &m->rope_freqs, off);
    for (uint32_t il = 0; il < m->hp.n_layer && r == 0; il++) {
        const struct engine_layer *l = &m->layers[il];
        struct gpu_layer *gl = &g->layers[il];
        const struct engine_weight *src[] = {&l->attn_norm, &l->wq, &l->wk, &l->wv, &l->wo, &l->bq, &l->bk, &l->bv,
                                             &l->bo, &l->q_norm, &l->k_norm, &l->ffn_norm, &l->w_gate, &l->w_up,
                                             &l->w_down};
        struct gpu_weight *dst[] = {&gl->attn_norm, &gl->wq, &gl->wk, &gl->wv, &gl->wo, &gl->bq, &gl->bk, &gl->bv,
                                    &gl->bo, &gl->q_norm, &gl->k_norm, &gl->ffn_norm, &gl->w_gate, &gl->w_up,
                                    &gl->w_down};
        for (size_t i = 0; i < ARRAY_SIZE(src) && r == 0; i++) r = gpu_weight_put(g, dst[i], src[i], off);
    }
    return r;
}

static inline void gpu_model_free(struct gpu_model *g) {
    if (!g) return;
    kern_cuda_buf_free(g->weights);
    kern_cuda_buf_free(g->kv);
    kern_cuda_buf_free(g->act);
    kern_cuda_graph_free(g->decode);
    free(g->host_idx);
    free(g->layers);
    free(g->source);
    free(g->slot);
    free(g);
}

/* Uploads every weight of m, and allocates a KV cache of n_ctx positions (types type_k,
 * type_v, rotated by DESIGN.md 3.4's rules when rotation) and activations for up to
 * n_batch tokens a step. */
static inline int gpu_model_new(struct kern_cuda_ctx *ctx, const struct engine_model *m, uint32_t n_ctx, uint32_t n_batch,
                         enum kern_type type_k, enum kern_type type_v, bool rotation, struct gpu_model **ret) {
    const struct engine_hparams *hp = &m->hp;
    if (hp->n_embd % 32 || hp->head_dim_k % 32 || hp->head_dim_v % 32 || n_batch == 0 || n_ctx == 0)
        return -EOPNOTSUPP;
    struct gpu_model *g = calloc(1, sizeof *g);
    if (!g) return -ENOMEM;
    g->ctx = ctx;
    g->m = m;
    g->n_ctx = n_ctx;
    g->n_batch = n_batch;
    g->layers = calloc(hp->n_layer, sizeof *g->layers);
    g->source = calloc(hp->n_layer, sizeof *g->source);
    g->slot = calloc(hp->n_layer, sizeof *g->slot);
    int r = g->layers && g->source && g->slot ? 0 : -ENOMEM;
    size_t bytes = 0;
    if (r == 0) r = gpu_weights_walk(g, &bytes); /* sizes only */
    if (r == 0) r = kern_cuda_buf_new(ctx, bytes, &g->weights);
    if (r == 0) r = gpu_weights_walk(g, &bytes);
    g->weight_bytes = bytes;

    /* KV: the first n_layer - N layers own theirs, the last N read the last owner's */
    const int64_t k_dim = (int64_t)hp->n_head_kv * hp->head_dim_k, v_dim = (int64_t)hp->n_head_kv * hp->head_dim_v;
    g->type_k = type_k;
    g->type_v = type_v;
    g->n_rot_k = gpu_rot_size(type_k, hp->head_dim_k, rotation, true);
    g->n_rot_v = gpu_rot_size(type_v, hp->head_dim_v, rotation, false);
    g->k_row_bytes = kern_row_size(type_k, k_dim);
    g->v_row_bytes = kern_row_size(type_v, v_dim);
    g->kv_layer_bytes = gpu_align(g->k_row_bytes * n_ctx) + gpu_align(g->v_row_bytes * n_ctx);
    uint32_t n_own = hp->n_layer - hp->n_layer_kv_shared;
    for (uint32_t il = 0; il < hp->n_layer && r == 0; il++) {
        g->source[il] = (int32_t)(il < n_own ? il : n_own - 1);
        g->slot[il] = il < n_own ? (int32_t)il : -1;
    }
    if (r == 0) r = kern_cuda_buf_new(ctx, g->kv_layer_bytes * n_own, &g->kv);

    /* activations: x, xb (n_batch, n_embd); q, att (n_batch, n_head × hd); k, v
     * (n_batch, kv dims); hb, hb2 (n_batch, n_ff); logits (n_batch, n_vocab); index
     * arrays; the matmul scratch for the largest product */
    const int64_t nb = n_batch, q_dim = (int64_t)hp->n_head * hp->head_dim_k;
    const int64_t att_dim = (int64_t)hp->n_head * hp->head_dim_v;
    const size_t f = sizeof(float);
    const size_t sizes[] = {nb * hp->n_embd * f, nb * hp->n_embd * f, nb * q_dim * f,     nb * k_dim * f,
                            nb * v_dim * f,      nb * att_dim * f,    nb * hp->n_ff * f,   nb * hp->n_ff * f,
                            nb * hp->n_vocab * f, 4 * nb * 4,         nb * 4};
    size_t scratch = 0, act = 0;
    const int64_t shapes[][2] = {{hp->n_embd, q_dim}, {hp->n_embd, k_dim}, {att_dim, hp->n_embd},
                                 {hp->n_embd, hp->n_ff}, {hp->n_ff, hp->n_embd}, {hp->n_embd, hp->n_vocab}};
    for (size_t i = 0; i < ARRAY_SIZE(shapes); i++) {
        size_t s = kern_cuda_matmul_scratch_bytes(shapes[i][0], shapes[i][1], nb);
        scratch = s > scratch ? s : scratch;
    }
    for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) act += gpu_align(sizes[i]);
    if (r == 0) r = kern_cuda_buf_new(ctx, act + scratch, &g->act);
    if (r == 0) {
        char *p = kern_cuda_buf_ptr(g->act);
        void **dst[] = {(void **)&g->x,   (void **)&g->xb,     (void **)&g->q,   (void **)&g->k,
                        (void **)&g->v,   (void **)&g->att,    (void **)&g->hb,  (void **)&g->hb2,
                        (void **)&g->logits, (void **)&g->idx, (void **)&g->argmax};
        for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
            *dst[i] = p;
            p += gpu_align(sizes[i]);
        }
        g->scratch = p;
        g->tok = g->idx;
        g->pos = g->idx + nb;
        g->row0 = g->idx + 2 * nb;
        g->n_kv = g->idx + 3 * nb;
        g->host_idx = calloc(4 * (size_t)nb, sizeof *g->host_idx);
        if (!g->host_idx) r = -ENOMEM;
    }
    g->rope = (struct kern_rope_params){
        .n_dims = hp->n_rot,
        .neox = hp->rope_kind == ENGINE_ROPE_NEOX,
        .freq_base = hp->rope_freq_base,
        .freq_scale = hp->rope_freq_scale,
        .ext_factor = hp->yarn_ext_factor,
        .attn_factor = hp->yarn_attn_factor,
        .beta_fast = hp->yarn_beta_fast,
        .beta_slow = hp->yarn_beta_slow,
        .n_ctx_orig = hp->rope_n_ctx_orig,
        .freq_factors = g->rope_freqs.data,
    };
    if (r < 0) {
        gpu_model_free(g);
        return r;
    }
    *ret = g;
    return 0;
}

static inline int gpu_matmul(struct gpu_model *g, float *y, const struct gpu_weight *w, const float *x, int64_t n) {
    return kern_cuda_matmul(g->ctx, y, w->data, w->type, x, w->n_in, w->n_out, n, g->scratch);
}
static inline int gpu_bias(struct gpu_model *g, float *y, const struct gpu_weight *b, int64_t n) {
    return b->data ? kern_cuda_add(g->ctx, y, b->data, b->n_in, n, 1) : 0;
}

/* Enqueues the ops of one step of n tokens whose ids and positions are in g->idx; the
 * logits of the last n_out tokens go to g->logits. No host transfer (graph-capturable). */
static inline int gpu_enqueue(struct gpu_model *g, uint32_t n, uint32_t n_out) {
    const struct engine_hparams *hp = &g->m->hp;
    struct kern_cuda_ctx *ctx = g->ctx;
    const int64_t dim = hp->n_embd, hd_k = hp->head_dim_k, hd_v = hp->head_dim_v;
    const int64_t q_dim = hp->n_head * hd_k, k_dim = hp->n_head_kv * hd_k, v_dim = hp->n_head_kv * hd_v;
    const int64_t att_dim = hp->n_head * hd_v;
    int r = kern_cuda_get_rows(ctx, g->x, g->tok_embd.data, g->tok_embd.type, g->tok_embd.row_bytes, g->tok, n, dim);
    for (uint32_t il = 0; il < hp->n_layer && r == 0; il++) {
        const struct gpu_layer *l = &g->layers[il];
        const bool own = g->slot[il] >= 0;
        char *kvl = (char *)kern_cuda_buf_ptr(g->kv) + (size_t)g->slot[g->source[il]] * g->kv_layer_bytes;
        char *kc = kvl, *vc = kvl + gpu_align(g->k_row_bytes * g->n_ctx);
        r = kern_cuda_rmsnorm(ctx, g->xb, g->x, l->attn_norm.data, dim, n, hp->rms_eps);
        if (r == 0) r = gpu_matmul(g, g->q, &l->wq, g->xb, n);
        if (r == 0) r = gpu_bias(g, g->q, &l->bq, n);
        if (r == 0 && own) r = gpu_matmul(g, g->k, &l->wk, g->xb, n);
        if (r == 0 && own) r = gpu_matmul(g, g->v, &l->wv, g->xb, n);
        if (r == 0 && own) r = gpu_bias(g, g->k, &l->bk, n);
        if (r == 0 && own) r = gpu_bias(g, g->v, &l->bv, n);
        if (r == 0 && l->q_norm.data) r = kern_cuda_rmsnorm(ctx, g->q, g->q, l->q_norm.data, hd_k, n * hp->n_head, hp->rms_eps);
        if (r == 0 && own && l->k_norm.data)
            r = kern_cuda_rmsnorm(ctx, g->k, g->k, l->k_norm.data, hd_k, n * hp->n_head_kv, hp->rms_eps);
        if (r == 0) r = kern_cuda_rope(ctx, g->q, g->pos, n, hp->n_head, hd_k, &g->rope);
        if (r == 0 && own) r = kern_cuda_rope(ctx, g->k, g->pos, n, hp->n_head_kv, hd_k, &g->rope);
        /* q by the K rotation here; k and v are rotated by the KV write itself */
        if (r == 0 && g->n_rot_k) r = kern_cuda_hadamard(ctx, g->q, n * q_dim, g->n_rot_k);
        if (r == 0 && own) r = kern_cuda_kv_store(ctx, kc, g->k_row_bytes, g->pos, g->k, n, g->type_k, k_dim, g->n_rot_k);
        if (r == 0 && own) r = kern_cuda_kv_store(ctx, vc, g->v_row_bytes, g->pos, g->v, n, g->type_v, v_dim, g->n_rot_v);
        struct kern_cuda_attn_args a = {
            .out = g->att, .q = g->q, .k = kc, .v = vc, .kt = g->type_k, .vt = g->type_v,
            .k_stride = g->k_row_bytes, .v_stride = g->v_row_bytes, .kv_row0 = g->row0, .n_kv = g->n_kv,
            .n_tok = n, .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .hd_k = hd_k, .hd_v = hd_v,
            .scale = 1.0f / sqrtf((float)hd_k)};
        if (r == 0) r = kern_cuda_attn(ctx, &a);
        if (r == 0 && g->n_rot_v) r = kern_cuda_hadamard(ctx, g->att, n * att_dim, g->n_rot_v);
        if (r == 0) r = gpu_matmul(g, g->xb, &l->wo, g->att, n);
        if (r == 0) r = gpu_bias(g, g->xb, &l->bo, n);
        if (r == 0) r = kern_cuda_add(ctx, g->x, g->xb, dim, n, n);
        if (r == 0) r = kern_cuda_rmsnorm(ctx, g->xb, g->x, l->ffn_norm.data, dim, n, hp->rms_eps);
        if (r == 0) r = gpu_matmul(g, g->hb, &l->w_gate, g->xb, n);
        if (r == 0) r = gpu_matmul(g, g->hb2, &l->w_up, g->xb, n);
        if (r == 0) r = kern_cuda_silu_mul(ctx, g->hb, g->hb, g->hb2, n * hp->n_ff);
        if (r == 0) r = gpu_matmul(g, g->xb, &l->w_down, g->hb, n);
        if (r == 0) r = kern_cuda_add(ctx, g->x, g->xb, dim, n, n);
    }
    const float *last = g->x + (int64_t)(n - n_out) * dim;
    if (r == 0) r = kern_cuda_rmsnorm(ctx, g->xb, last, g->output_norm.data, dim, n_out, hp->rms_eps);
    if (r == 0) r = gpu_matmul(g, g->logits, &g->output, g->xb, n_out);
    return r;
}

/* One step over tokens[0..n) at positions n_past.. (n <= n_batch; the cache must have
 * room): uploads the ids and positions (one host -> device copy), then enqueues the step;
 * a one-token step replays a CUDA graph captured on its first use. The logits of the last
 * n_out tokens (1 <= n_out <= n) end up in g->logits (n_out, n_vocab). */
static inline int gpu_forward(struct gpu_model *g, const int32_t *tokens, uint32_t n, uint32_t n_out) {
    if (n == 0 || n > g->n_batch || g->n_past + n > g->n_ctx || n_out == 0 || n_out > n) return -EINVAL;
    const size_t nb = g->n_batch;
    for (uint32_t t = 0; t < n; t++) {
        g->host_idx[t] = tokens[t];
        g->host_idx[nb + t] = (int32_t)(g->n_past + t); /* position = cell */
        g->host_idx[2 * nb + t] = 0;                    /* the sequence starts at row 0 */
        g->host_idx[3 * nb + t] = (int32_t)(g->n_past + t + 1);
    }
    size_t off = (size_t)((char *)g->idx - (char *)kern_cuda_buf_ptr(g->act));
    int r = kern_cuda_buf_upload(g->act, off, g->host_idx, 4 * nb * sizeof *g->host_idx);
    if (r == 0 && n == 1 && n_out == 1) {
        if (!g->decode) {
            r = kern_cuda_graph_begin(g->ctx);
            if (r == 0) {
                int r2 = gpu_enqueue(g, 1, 1);
                r = kern_cuda_graph_end(g->ctx, &g->decode);
                r = r2 < 0 ? r2 : r;
            }
        }
        if (r == 0) r = kern_cuda_graph_launch(g->ctx, g->decode);
    } else if (r == 0) {
        r = gpu_enqueue(g, n, n_out);
    }
    if (r == 0) {
        g->n_past += n;
        g->n_out = n_out;
    }
    return r;
}

/* Downloads the logits of the last step's n_out tokens (n_out × n_vocab floats). */
static inline int gpu_logits(struct gpu_model *g, float *dst, uint32_t n_out) {
    size_t off = (size_t)((char *)g->logits - (char *)kern_cuda_buf_ptr(g->act));
    return kern_cuda_buf_download(g->act, off, dst, (size_t)n_out * g->m->hp.n_vocab * sizeof(float));
}

/* Greedy token of the last step's last row: argmax on the device, one 4-byte download. */
static inline int gpu_greedy(struct gpu_model *g, int32_t *ret) {
    const int64_t n_vocab = g->m->hp.n_vocab;
    int r = kern_cuda_argmax(g->ctx, g->argmax, g->logits + (int64_t)(g->n_out - 1) * n_vocab, n_vocab, 1);
    size_t off = (size_t)((char *)g->argmax - (char *)kern_cuda_buf_ptr(g->act));
    return r < 0 ? r : kern_cuda_buf_download(g->act, off, ret, sizeof *ret);
}

/* Rows [p0, p1) of the KV of owning layer slot (the layer's index among those that own
 * KV, in layer order): K rows then V rows, the cache's own bytes (as a state blob's
 * payload holds them, DESIGN.md 3.5). gpu_kv_get downloads them into dst, gpu_kv_put
 * uploads src; (p1 - p0) × (k_row_bytes + v_row_bytes) bytes either way. */
static inline int gpu_kv_rows(struct gpu_model *g, int slot, uint32_t p0, uint32_t p1, void *host, bool put) {
    if (p0 >= p1 || p1 > g->n_ctx) return -EINVAL;
    const size_t base = (size_t)slot * g->kv_layer_bytes, n = p1 - p0;
    const size_t k_off = base + p0 * g->k_row_bytes;
    const size_t v_off = base + gpu_align(g->k_row_bytes * g->n_ctx) + p0 * g->v_row_bytes;
    char *h = host;
    int r = put ? kern_cuda_buf_upload(g->kv, k_off, h, n * g->k_row_bytes)
                : kern_cuda_buf_download(g->kv, k_off, h, n * g->k_row_bytes);
    if (r == 0)
        r = put ? kern_cuda_buf_upload(g->kv, v_off, h + n * g->k_row_bytes, n * g->v_row_bytes)
                : kern_cuda_buf_download(g->kv, v_off, h + n * g->k_row_bytes, n * g->v_row_bytes);
    return r;
}
