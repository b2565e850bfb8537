/* The forward pass: one step over a run of batch tokens, layer by layer.
 *
 * Reads like llama2.c's forward(): embedding, then per layer RMSNorm -> Q, K, V -> RoPE ->
 * cache -> attention -> output projection -> residual, RMSNorm -> SwiGLU FFN -> residual,
 * then the final norm and the classifier for the tokens that want logits. Rows are tokens
 * throughout: x is (n, n_embd). Speed lives in kernels/ (kern_matmul, the pool). */
#include "engine/forward.h"

#include <math.h>
#include <string.h>

/* Multiply-adds below which a step runs on the calling thread: waking the workers costs
 * microseconds (milliseconds when the machine is busy), a tiny model's matmul less. */
#define POOL_MIN_WORK (1 << 16)

/* y (n_tok, w->n_out) = x (n_tok, w->n_in) · Wᵀ */
static void matmul(struct engine_context *ctx, float *y, const struct engine_weight *w,
                   const float *x, int64_t n_tok) {
    bool big = w->n_in * w->n_out * n_tok >= POOL_MIN_WORK;
    kern_matmul(big ? ctx->pool : NULL, y, w->data, w->type, x, w->n_in, w->n_out, n_tok,
                ctx->mm_scratch);
}

/* y[t] += bias for each of n_tok rows, when the weight has a bias */
static void add_bias(float *y, const struct engine_weight *bias, int64_t n_tok) {
    if (!bias->data) return;
    for (int64_t t = 0; t < n_tok; t++) kern_add(y + t * bias->n_in, bias->data, bias->n_in);
}

static int32_t batch_seq(const struct engine_batch *b, int32_t i) {
    return b->seq ? b->seq[i] : 0;
}

static bool batch_wants(const struct engine_batch *b, int32_t i) {
    return b->want_logits ? b->want_logits[i] : i == b->n_tok - 1;
}

/* Runs fn on the pool, or on the calling thread alone when the work (in multiply-adds)
 * is smaller than waking the workers costs. */
static void pool_run(struct kern_pool *pool, kern_task_fn fn, void *arg, int64_t work) {
    if (pool && work >= POOL_MIN_WORK)
        kern_pool_run(pool, fn, arg);
    else
        fn(arg, 0, 1);
}

struct attention_args {
    struct engine_context *ctx;
    const struct engine_batch *b;
    int32_t t0, n, il;
};

/* Multi-head attention of the step's tokens over their sequences' cached cells:
 * att[t][h] = softmax(q[t][h] · K[0..pos]ᵀ / sqrt(hd_k)) · V[0..pos]. Work items are
 * (KV head, block of ATTN_BLOCK tokens) dealt round-robin to the threads. An item covers
 * the `group` query heads that share the KV head (GQA: head h reads KV head h / group)
 * for every token of the block, run by run of tokens of one sequence, so each cached row
 * is read once per item. */
static void attention_task(void *arg, int ith, int nth) {
    const struct attention_args *a = arg;
    struct engine_context *ctx = a->ctx;
    const struct engine_batch *b = a->b;
    const struct engine_hparams *hp = &ctx->model->hp;
    const struct kv_cache *kv = &ctx->kv;
    const int64_t n_head_kv = hp->n_head_kv, hd_k = hp->head_dim_k, hd_v = hp->head_dim_v;
    const int64_t q_dim = hp->n_head * hd_k, att_dim = hp->n_head * hd_v;
    const int64_t group = hp->n_head / hp->n_head_kv; /* query heads per KV head */
    const float scale = 1.0f / sqrtf((float)hd_k);
    float *scratch = ctx->attn_scratch + (size_t)ith * ctx->attn_scratch_floats;
    const int64_t n_blocks = (a->n + ATTN_BLOCK - 1) / ATTN_BLOCK;

    for (int64_t item = ith; item < n_blocks * n_head_kv; item += nth) {
        int64_t h_kv = item % n_head_kv;
        int32_t t_end = (int32_t)MIN((int64_t)a->n, (item / n_head_kv + 1) * ATTN_BLOCK);
        for (int32_t t = (int32_t)(item / n_head_kv * ATTN_BLOCK), t1; t < t_end; t = t1) {
            /* the run [t, t1) of tokens of one sequence; token i sees cells 0..pos_i */
            int32_t seq = batch_seq(b, a->t0 + t), n_kv[ATTN_BLOCK];
            for (t1 = t; t1 < t_end && batch_seq(b, a->t0 + t1) == seq; t1++)
                n_kv[t1 - t] = b->pos[a->t0 + t1] + 1;
            /* this KV head's slice of the sequence's cell 0; cells are *_row_bytes apart */
            const char *k0 = (const char *)kv_k_row(kv, a->il, seq, 0) + kern_row_size(kv->type_k, h_kv * hd_k);
            const char *v0 = (const char *)kv_v_row(kv, a->il, seq, 0) + kern_row_size(kv->type_v, h_kv * hd_v);
            const float *q = ctx->q + t * q_dim + h_kv * group * hd_k; /* (run, group, hd_k) */
            float *out = ctx->att + t * att_dim + h_kv * group * hd_v; /* (run, group, hd_v) */
            kern_attn_head(out, att_dim, q, q_dim, t1 - t, group, n_kv, k0, kv->type_k,
                           kv->k_row_bytes, v0, kv->type_v, kv->v_row_bytes, hd_k, hd_v, scale,
                           scratch);
        }
    }
}

/* x[t] = row token[t] of the embedding (any type with a to_f32) */
static void embed(float *x, const struct engine_weight *emb, int32_t token) {
    const char *row = (const char *)emb->data + (size_t)token * emb->row_bytes;
    if (emb->type == KERN_TYPE_F32)
        memcpy(x, row, (size_t)emb->n_in * sizeof(float));
    else
        kern_type_traits(emb->type)->to_f32(x, row, emb->n_in);
}

void forward_step(struct engine_context *ctx, const struct engine_batch *b, int32_t t0, int32_t n,
                  int32_t *out_row) {
    const struct engine_model *m = ctx->model;
    const struct engine_hparams *hp = &m->hp;
    struct kv_cache *kv = &ctx->kv;
    const int64_t dim = hp->n_embd, n_ff = hp->n_ff, n_rot = hp->n_rot;
    const int64_t hd_k = hp->head_dim_k;
    const int64_t q_dim = hp->n_head * hd_k;                  /* query row */
    const int64_t k_dim = kv->n_embd_k, v_dim = kv->n_embd_v; /* key / value rows */
    const float eps = hp->rms_eps;
    float *x = ctx->x, *xb = ctx->xb, *q = ctx->q, *k = ctx->k, *v = ctx->v;
    float *hb = ctx->hb, *hb2 = ctx->hb2;

    /* token embeddings: x (n, dim) */
    for (int32_t t = 0; t < n; t++) embed(x + t * dim, &m->tok_embd, b->token[t0 + t]);
    /* multiply-adds of one layer's attention: n tokens × n_head × cells × (hd_k + hd_v) */
    int64_t attn_work = 0;
    for (int32_t t = 0; t < n; t++)
        attn_work += ((int64_t)b->pos[t0 + t] + 1) * hp->n_head * (hd_k + hp->head_dim_v);
    /* RoPE angles of each token's position: rope_cs (n, n_rot) */
    for (int32_t t = 0; t < n; t++)
        kern_rope_cache(ctx->rope_cs + t * n_rot, b->pos[t0 + t], &ctx->rope);

    for (int il = 0; il < (int)hp->n_layer; il++) {
        const struct engine_layer *l = &m->layers[il];

        /* attention RMSNorm: xb (n, dim) */
        for (int32_t t = 0; t < n; t++) kern_rmsnorm(xb + t * dim, x + t * dim, l->attn_norm.data, dim, eps);

        /* q (n, n_head × hd_k), k (n, n_head_kv × hd_k), v (n, n_head_kv × hd_v);
         * a shared-KV layer computes only q and reads the KV of kv_source(il) */
        const bool own = kv_owns(kv, il);
        matmul(ctx, q, &l->wq, xb, n);
        add_bias(q, &l->bq, n);
        if (own) {
            matmul(ctx, k, &l->wk, xb, n);
            matmul(ctx, v, &l->wv, xb, n);
            add_bias(k, &l->bk, n);
            add_bias(v, &l->bv, n);
        }

        /* qwen3: RMSNorm of every query and key head (hd_k values each) */
        if (l->q_norm.data)
            for (int64_t i = 0; i < n * hp->n_head; i++) kern_rmsnorm(q + i * hd_k, q + i * hd_k, l->q_norm.data, hd_k, eps);
        if (own && l->k_norm.data)
            for (int64_t i = 0; i < n * hp->n_head_kv; i++) kern_rmsnorm(k + i * hd_k, k + i * hd_k, l->k_norm.data, hd_k, eps);

        /* RoPE on the first n_rot values of every query and key head */
        for (int32_t t = 0; t < n; t++) {
            const float *cs = ctx->rope_cs + t * n_rot;
            kern_rope_apply(q + t * q_dim, cs, hp->n_head, hd_k, &ctx->rope);
            if (own) kern_rope_apply(k + t * k_dim, cs, hp->n_head_kv, hd_k, &ctx->rope);
        }

        /* Hadamard rotation (DESIGN.md 3.4), with the sizes of the KV this layer reads:
         * q and k blockwise by the K rotation (q·k is unchanged), v by the V rotation */
        const int rot_k = kv_rot_k(kv, il), rot_v = kv_rot_v(kv, il);
        if (rot_k) kern_hadamard(q, n * q_dim, rot_k);
        if (rot_k && own) kern_hadamard(k, n * k_dim, rot_k);
        if (rot_v && own) kern_hadamard(v, n * v_dim, rot_v);

        /* store k and v at (sequence, position) in the cache's types */
        if (own)
            for (int32_t t = 0; t < n; t++) {
                int32_t seq = batch_seq(b, t0 + t), pos = b->pos[t0 + t];
                kv_row_store(kv_k_row(kv, il, seq, pos), k + t * k_dim, kv->type_k, k_dim);
                kv_row_store(kv_v_row(kv, il, seq, pos), v + t * v_dim, kv->type_v, v_dim);
            }

        /* attention: att (n, n_head × hd_v), un-rotated by the V rotation (H·H = I) */
        struct attention_args aa = {.ctx = ctx, .b = b, .t0 = t0, .n = n, .il = il};
        pool_run(ctx->pool, attention_task, &aa, attn_work);
        if (rot_v) kern_hadamard(ctx->att, n * hp->n_head * hp->head_dim_v, rot_v);

        /* output projection and residual: x += att · Woᵀ */
        matmul(ctx, xb, &l->wo, ctx->att, n);
        add_bias(xb, &l->bo, n);
        kern_add(x, xb, n * dim);

        /* FFN: x += W_down · (silu(W_gate · xb) * (W_up · xb)), hidden (n, n_ff) */
        for (int32_t t = 0; t < n; t++) kern_rmsnorm(xb + t * dim, x + t * dim, l->ffn_norm.data, dim, eps);
        matmul(ctx, hb, &l->w_gate, xb, n);
        matmul(ctx, hb2, &l->w_up, xb, n);
        kern_silu_mul(hb, hb, hb2, n * n_ff);
        matmul(ctx, xb, &l->w_down, hb, n);
        kern_add(x, xb, n * dim);
    }

    /* final RMSNorm of the tokens that want logits: out_x (n_out, dim) */
    int32_t n_out = 0;
    for (int32_t t = 0; t < n; t++)
        if (batch_wants(b, t0 + t))
            kern_rmsnorm(ctx->out_x + (size_t)n_out++ * dim, x + t * dim, m->output_norm.data, dim, eps);
    /* classifier: logits (n_out, n_vocab) */
    if (n_out > 0) matmul(ctx, ctx->logits + (size_t)*out_row * hp->n_vocab, &m->output, ctx->out_x, n_out);
    *out_row += n_out;
}
