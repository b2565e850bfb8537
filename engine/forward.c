/* The forward pass: one step over a run of batch tokens, layer by layer.
 *
 * Reads like llama2.c's forward(): embedding, then per layer RMSNorm -> Q, K, V -> RoPE ->
 * cache -> attention -> output projection -> residual, RMSNorm -> SwiGLU FFN -> residual,
 * then the final norm and the classifier for the tokens that want logits. Rows are tokens
 * throughout: x is (n, n_embd). Speed lives in kernels/ (kern_matmul, the pool).
 *
 * Gemma (notes/gemma.md §A.3, §B.3) adds, where its weights and hparams say so: the
 * embedding × sqrt(n_embd), norms after attention and FFN, GeGLU, V norm, K = V layers,
 * per-layer head sizes, sliding-window layers (their own cache and RoPE), the per-layer
 * embedding branch, the layer output scale and the final soft-cap.
 *
 * Where it runs is engine/device.h's business: the attention and the FFN of a layer run
 * on every device of the context at once, each over its heads and hidden units, and the
 * devices' shares of the output projections are summed; with one device that is the whole
 * layer. The norms, residuals and the gemma4 per-layer branch are shared work. On a
 * context with a GPU (engine/gpu.h) the loop below runs the host's layers, and the GPU the
 * rest, the final norm and the classifier. */
#include "engine/forward.h"

#include <math.h>
#include <string.h>

/* Multiply-adds below which a step runs on the calling thread: waking the workers costs
 * microseconds (milliseconds when the machine is busy), a tiny model's matmul less. */
#define POOL_MIN_WORK (1 << 16)

/* y (n_tok, w->n_out) = x (n_tok, w->n_in) · Wᵀ on pool (scratch: the pool's owner's) */
static void matmul(struct kern_pool *pool, void *scratch, float *y, const struct engine_weight *w,
                   const float *x, int64_t n_tok) {
    bool big = w->n_in * w->n_out * n_tok >= POOL_MIN_WORK;
    kern_matmul_layout(big ? pool : NULL, y, w->data, w->type, w->layout, x, w->n_in, w->n_out,
                       n_tok, scratch);
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

/* RMSNorm of each of n rows of `width` values in place (w == NULL: no weight). */
static void norm_rows(float *x, int64_t n, int64_t width, const struct engine_weight *w,
                      float eps) {
    for (int64_t i = 0; i < n; i++) kern_rmsnorm(x + i * width, x + i * width, w ? w->data : NULL, width, eps);
}

/* One layer of one step: tokens [t0, t0 + n) of b. */
struct layer_step {
    const struct engine_batch *b;
    int32_t t0, n, il;
    int64_t attn_work; /* multiply-adds of the whole layer's attention */
};

struct attention_args {
    struct engine_context *ctx;
    struct device *dv;
    const struct layer_step *s;
};

/* Multi-head attention of the step's tokens over their sequences' cached cells, for the
 * device's KV heads and the query heads that read them:
 * att[t][h] = softmax(scale · q[t][h] · K[lo..pos]ᵀ) · V[lo..pos], lo = 0 on global
 * layers and pos - W + 1 (at least 0) on sliding-window layers. Work items are (KV head,
 * block of ATTN_BLOCK tokens) dealt round-robin to the threads. An item covers the
 * `group` query heads that share the KV head (GQA: head h reads KV head h / group) for
 * every token of the block, run by run of tokens of one sequence, so each cached row is
 * read once per item. Sizes, store and window are those of the KV the layer reads
 * (kv_source). */
static void attention_task(void *arg, int ith, int nth) {
    const struct attention_args *a = arg;
    const struct engine_context *ctx = a->ctx;
    const struct device *dv = a->dv;
    const struct engine_batch *b = a->s->b;
    const int32_t t0 = a->s->t0, n = a->s->n, il = a->s->il;
    const struct engine_hparams *hp = &ctx->model->hp;
    const struct kv_cache *kv = &ctx->kv;
    const struct kv_store *st = kv_store_of(kv, il);
    const struct dev_layer *dl = &dv->layer[il];
    const int64_t n_head_kv = dl->n_kv, hd_k = st->head_dim_k, hd_v = st->head_dim_v;
    const int64_t group = hp->n_head / st->n_head_kv; /* query heads per KV head */
    const int64_t q_dim = n_head_kv * group * hd_k, att_dim = n_head_kv * group * hd_v;
    const float scale = hp->attn_scale > 0 ? hp->attn_scale : 1.0f / sqrtf((float)hd_k);
    const int32_t window = (int32_t)st->window;
    float *scratch = dv->attn_scratch + (size_t)ith * dv->attn_scratch_floats;
    const int64_t n_blocks = (n + ATTN_BLOCK - 1) / ATTN_BLOCK;

    for (int64_t item = ith; item < n_blocks * n_head_kv; item += nth) {
        int64_t h = item % n_head_kv, h_kv = dl->kv0 + h; /* its head, the cache's head */
        int32_t t_end = (int32_t)MIN((int64_t)n, (item / n_head_kv + 1) * ATTN_BLOCK);
        for (int32_t t = (int32_t)(item / n_head_kv * ATTN_BLOCK), t1; t < t_end; t = t1) {
            /* the run [t, t1) of tokens of one sequence; token i sees cells lo_i..pos_i,
             * counted from the run's first visible cell p_lo */
            int32_t seq = batch_seq(b, t0 + t), n_kv[ATTN_BLOCK], kv_lo[ATTN_BLOCK];
            int32_t p_lo = window ? MAX(0, b->pos[t0 + t] - window + 1) : 0;
            for (t1 = t; t1 < t_end && batch_seq(b, t0 + t1) == seq; t1++) {
                int32_t pos = b->pos[t0 + t1];
                n_kv[t1 - t] = pos + 1 - p_lo;
                kv_lo[t1 - t] = window ? MAX(0, pos - window + 1) - p_lo : 0;
            }
            /* this KV head's slice of cell p_lo; the rows that follow are contiguous (a
             * ring mirrors them) and *_row_bytes apart */
            const char *k0 = (const char *)kv_k_row(kv, il, seq, p_lo) + kern_row_size(kv->type_k, h_kv * hd_k);
            const char *v0 = (const char *)kv_v_row(kv, il, seq, p_lo) + kern_row_size(kv->type_v, h_kv * hd_v);
            const float *q = dv->q + t * q_dim + h * group * hd_k; /* (run, group, hd_k) */
            float *out = dv->att + t * att_dim + h * group * hd_v; /* (run, group, hd_v) */
            kern_attn_head_window(out, att_dim, q, q_dim, t1 - t, group, window ? kv_lo : NULL,
                                  n_kv, k0, kv->type_k, st->k_row_bytes, v0, kv->type_v,
                                  st->v_row_bytes, hd_k, hd_v, scale, scratch);
        }
    }
}

/* The attention block of layer il on one device, from the normed input ctx->xb to the
 * device's partial output projection dv->part (n, n_embd): its query heads and the KV
 * heads they read (a shared-KV layer's are placed by its source, engine/device.h). */
static void attention_on(struct engine_context *ctx, struct device *dv, void *arg) {
    const struct layer_step *s = arg;
    const struct engine_batch *b = s->b;
    const int32_t t0 = s->t0, n = s->n, il = s->il;
    const struct engine_hparams *hp = &ctx->model->hp;
    const struct engine_layer *l = &ctx->model->layers[il];
    const struct dev_layer *dl = &dv->layer[il];
    struct kv_cache *kv = &ctx->kv;
    const float eps = hp->rms_eps;
    if (dl->n_kv == 0) { /* none of this layer's heads here */
        memset(dv->part, 0, (size_t)(n * hp->n_embd) * sizeof *dv->part);
        return;
    }
    if (dv->gpu) { /* a GPU partition (engine/gpu.h) */
        gpu_part_attention(ctx, dv, il, n);
        return;
    }
    const int64_t hd_k = hp->layer[il].head_dim_k, hd_v = hp->layer[il].head_dim_v;
    const int64_t n_head_kv = dl->n_kv, n_head = n_head_kv * (hp->n_head / kv_store_of(kv, il)->n_head_kv);
    const int64_t q_dim = n_head * hd_k, k_dim = n_head_kv * hd_k, v_dim = n_head_kv * hd_v;
    float *q = dv->q, *k = dv->k, *v = dv->v;
    /* the RoPE of the KV this layer reads (a shared layer's source is of its kind) */
    const int kind = kv->store_of[il];
    const struct kern_rope_params *rope = &ctx->rope[kind];

    /* q (n, n_head × hd_k), k (n, n_head_kv × hd_k), v (n, n_head_kv × hd_v);
     * a shared-KV layer computes only q and reads the KV of kv_source(il); a gemma4
     * layer without attn_v takes V from the raw K projection (K = V) */
    const bool own = kv_owns(kv, il);
    matmul(dv->pool, dv->mm_scratch, q, &dl->w.wq, ctx->xb, n);
    add_bias(q, &dl->w.bq, n);
    if (own) {
        matmul(dv->pool, dv->mm_scratch, k, &dl->w.wk, ctx->xb, n);
        add_bias(k, &dl->w.bk, n);
        if (dl->w.wv.data) {
            matmul(dv->pool, dv->mm_scratch, v, &dl->w.wv, ctx->xb, n);
            add_bias(v, &dl->w.bv, n);
        } else {
            memcpy(v, k, (size_t)(n * k_dim) * sizeof *v);
        }
    }

    /* qwen3, gemma: RMSNorm of every query and key head (hd_k values each); gemma4:
     * every value head normed without a weight */
    if (l->q_norm.data) norm_rows(q, n * n_head, hd_k, &l->q_norm, eps);
    if (own && l->k_norm.data) norm_rows(k, n * n_head_kv, hd_k, &l->k_norm, eps);
    if (own && hp->v_norm) norm_rows(v, n * n_head_kv, hd_v, NULL, eps);

    /* RoPE on the first n_rot values of every query and key head */
    for (int32_t t = 0; t < n; t++) {
        const float *cs = ctx->rope_cs[kind] + t * rope->n_dims;
        kern_rope_apply(q + t * q_dim, cs, n_head, hd_k, rope);
        if (own) kern_rope_apply(k + t * k_dim, cs, n_head_kv, hd_k, rope);
    }

    /* Hadamard rotation (DESIGN.md 3.4), with the sizes of the KV this layer reads:
     * q and k blockwise by the K rotation (q·k is unchanged), v by the V rotation */
    const int rot_k = kv_rot_k(kv, il), rot_v = kv_rot_v(kv, il);
    if (rot_k) kern_hadamard(q, n * q_dim, rot_k);
    if (rot_k && own) kern_hadamard(k, n * k_dim, rot_k);
    if (rot_v && own) kern_hadamard(v, n * v_dim, rot_v);

    /* store its heads of k and v at (sequence, position) in the cache's types */
    if (own)
        for (int32_t t = 0; t < n; t++)
            kv_put_heads(kv, il, batch_seq(b, t0 + t), b->pos[t0 + t], dl->kv0, n_head_kv,
                         k + t * k_dim, v + t * v_dim);

    /* attention: att (n, n_head × hd_v), un-rotated by the V rotation (H·H = I) */
    struct attention_args aa = {.ctx = ctx, .dv = dv, .s = s};
    pool_run(dv->pool, attention_task, &aa, s->attn_work);
    if (rot_v) kern_hadamard(dv->att, n * n_head * hd_v, rot_v);

    /* its share of the output projection: part = att · Wo[:, its heads]ᵀ */
    matmul(dv->pool, dv->mm_scratch, dv->part, &dl->w.wo, dv->att, n);
}

/* The gated activation y = act(g) * u over n values, cut into ranges for the pool. */
struct gate_args {
    float *y;
    const float *u;
    int64_t n;
    bool gelu;
};

static void gate_task(void *arg, int ith, int nth) {
    const struct gate_args *a = arg;
    const int64_t i0 = a->n * ith / nth / 8 * 8, i1 = ith + 1 == nth ? a->n : a->n * (ith + 1) / nth / 8 * 8;
    if (a->gelu) kern_gelu_mul(a->y + i0, a->y + i0, a->u + i0, i1 - i0);
    else kern_silu_mul(a->y + i0, a->y + i0, a->u + i0, i1 - i0);
}

/* The FFN of layer il on one device: part = W_down[:, its units] · (act(W_gate · xb) *
 * (W_up · xb)) over its hidden units; act is SiLU, or gemma's tanh GELU. */
static void ffn_on(struct engine_context *ctx, struct device *dv, void *arg) {
    const struct layer_step *s = arg;
    const struct dev_layer *dl = &dv->layer[s->il];
    const int32_t n = s->n;
    if (dl->n_ff == 0) {
        memset(dv->part, 0, (size_t)(n * ctx->model->hp.n_embd) * sizeof *dv->part);
        return;
    }
    if (dv->gpu) {
        gpu_part_ffn(ctx, dv, s->il, n);
        return;
    }
    matmul(dv->pool, dv->mm_scratch, dv->hb, &dl->w.w_gate, ctx->xb, n);
    matmul(dv->pool, dv->mm_scratch, dv->hb2, &dl->w.w_up, ctx->xb, n);
    struct gate_args ga = {.y = dv->hb, .u = dv->hb2, .n = n * dl->n_ff,
                           .gelu = ctx->model->hp.ffn_act == ENGINE_FFN_GELU};
    pool_run(dv->pool, gate_task, &ga, ga.n * 16); /* an exp is some 16 multiply-adds */
    matmul(dv->pool, dv->mm_scratch, dv->part, &dl->w.w_down, dv->hb, n);
}

struct classifier_args {
    int32_t n_out;
    float *logits; /* (n_out, n_vocab) */
};

/* The device's rows of the classifier: logits[:, its vocabulary range] */
static void classifier_on(struct engine_context *ctx, struct device *dv, void *arg) {
    const struct classifier_args *a = arg;
    const int64_t n_vocab = ctx->model->hp.n_vocab;
    if (dv->n_vocab == 0) return;
    if (ctx->n_dev == 1) {
        matmul(dv->pool, dv->mm_scratch, a->logits, &dv->output, ctx->out_x, a->n_out);
        return;
    }
    if (dv->gpu)
        gpu_part_classifier(ctx, dv, a->n_out);
    else
        matmul(dv->pool, dv->mm_scratch, dv->logits, &dv->output, ctx->out_x, a->n_out);
    for (int32_t t = 0; t < a->n_out; t++)
        memcpy(a->logits + t * n_vocab + dv->vocab0, dv->logits + t * dv->n_vocab,
               (size_t)dv->n_vocab * sizeof(float));
}

static void part_begin_on(struct engine_context *ctx, struct device *dv, void *arg) {
    const struct layer_step *s = arg;
    gpu_part_begin(ctx, dv, s->b, s->t0, s->n);
}

/* x[t] = row token[t] of the embedding (any type with a to_f32) */
static void embed(float *x, const struct engine_weight *emb, int32_t token) {
    const char *row = (const char *)emb->data + (size_t)token * emb->row_bytes;
    if (emb->type == KERN_TYPE_F32)
        memcpy(x, row, (size_t)emb->n_in * sizeof(float));
    else
        kern_type_traits(emb->type)->to_f32(x, row, emb->n_in);
}

/* gemma4 per-layer inputs (notes/gemma.md, PLE steps 1-3), from the scaled embeddings x:
 * ple[t][l] = (RMSNorm(proj·x_t / sqrt(E), proj_norm)_l + tok_embd_pl[tok]_l · sqrt(P)) / sqrt(2) */
static void per_layer_inputs(struct engine_context *ctx, const struct engine_batch *b, int32_t t0,
                             int32_t n) {
    const struct engine_model *m = ctx->model;
    const struct engine_hparams *hp = &m->hp;
    const int64_t P = hp->n_embd_per_layer, LP = (int64_t)hp->n_layer * P;
    matmul(ctx->pool, ctx->mm_scratch, ctx->ple, &m->pl_model_proj, ctx->x, n);
    const float s_proj = 1.0f / sqrtf((float)hp->n_embd), s_tok = sqrtf((float)P);
    const float s_sum = 1.0f / sqrtf(2.0f);
    for (int32_t t = 0; t < n; t++) {
        float *row = ctx->ple + t * LP;
        embed(ctx->ple_row, &m->pl_tok_embd, b->token[t0 + t]);
        kern_scale(row, LP, s_proj);
        for (int64_t l = 0; l < hp->n_layer; l++)
            kern_rmsnorm(row + l * P, row + l * P, m->pl_proj_norm.data, P, hp->rms_eps);
        for (int64_t i = 0; i < LP; i++) row[i] = (row[i] + ctx->ple_row[i] * s_tok) * s_sum;
    }
}

/* The layer kinds (engine/model.h), each run on every device from the normed input ctx->xb
 * to the device's partial sum dv->part. The three attentions differ only in the KV they
 * read (its window and source come with the layer's KV store), so one function runs them. */
static const struct layer_kind {
    const char *name;
    device_fn run;
} mixer_kinds[ENGINE_MIXER_KIND_COUNT] = {
    [ENGINE_MIXER_ATTENTION] = {"attention", attention_on},
    [ENGINE_MIXER_ATTENTION_SWA] = {"sliding-window attention", attention_on},
    [ENGINE_MIXER_ATTENTION_SHARED] = {"shared-KV attention", attention_on},
}, ffn_kinds[ENGINE_FFN_KIND_COUNT] = {
    [ENGINE_FFN_DENSE_GATED] = {"dense gated FFN", ffn_on},
};

int forward_step(struct engine_context *ctx, const struct engine_batch *b, int32_t t0, int32_t n,
                 int32_t *out_row, struct err_detail *d) {
    const struct engine_model *m = ctx->model;
    const struct engine_hparams *hp = &m->hp;
    struct kv_cache *kv = &ctx->kv;
    const int64_t dim = hp->n_embd, P = hp->n_embd_per_layer;
    const float eps = hp->rms_eps;
    float *x = ctx->x, *xb = ctx->xb;

    /* token embeddings: x (n, dim), gemma's scaled by sqrt(n_embd) (in f32, as llama.cpp) */
    for (int32_t t = 0; t < n; t++) embed(x + t * dim, &m->tok_embd, b->token[t0 + t]);
    if (hp->embd_scale) kern_scale(x, n * dim, sqrtf((float)dim));
    if (P > 0) per_layer_inputs(ctx, b, t0, n);
    /* multiply-adds of one layer's attention: n tokens × n_head × cells × (hd_k + hd_v) */
    int64_t attn_work = 0;
    for (int32_t t = 0; t < n; t++)
        attn_work += ((int64_t)b->pos[t0 + t] + 1) * hp->n_head * (hp->max_head_dim_k + hp->max_head_dim_v);
    /* RoPE angles of each token's position for each kind of layer: rope_cs[s] (n, n_rot) */
    for (uint32_t s = 0; s < kv->n_store; s++)
        for (int32_t t = 0; t < n; t++)
            kern_rope_cache(ctx->rope_cs[s] + t * ctx->rope[s].n_dims, b->pos[t0 + t], &ctx->rope[s]);

    /* the host's layers (all of them without a GPU) */
    /* GPU partitions: the step's positions and cells, once */
    struct layer_step s0 = {.b = b, .t0 = t0, .n = n};
    if (ctx->split_gpu) devices_run(ctx, part_begin_on, &s0);
    for (int il = 0; il < (int)ctx->n_layer_host; il++) {
        const struct engine_layer *l = &m->layers[il];
        const struct engine_layer_hparams *lh = &hp->layer[il];
        struct layer_step s = {.b = b, .t0 = t0, .n = n, .il = il, .attn_work = attn_work};

        /* attention RMSNorm: xb (n, dim) */
        for (int32_t t = 0; t < n; t++) kern_rmsnorm(xb + t * dim, x + t * dim, l->attn_norm.data, dim, eps);

        /* the token mixer, each device over its heads, and the output projection (the sum
         * of the devices' shares) and residual: x += att · Woᵀ (gemma: normed first) */
        devices_run(ctx, mixer_kinds[lh->mixer].run, &s);
        devices_sum(ctx, xb, n * dim);
        add_bias(xb, &l->bo, n);
        if (l->post_attn_norm.data) norm_rows(xb, n, dim, &l->post_attn_norm, eps);
        kern_add(x, xb, n * dim);

        /* FFN, each device over its hidden units, summed: x += W_down · (act(W_gate · xb)
         * * (W_up · xb)); gemma norms the result */
        for (int32_t t = 0; t < n; t++) kern_rmsnorm(xb + t * dim, x + t * dim, l->ffn_norm.data, dim, eps);
        devices_run(ctx, ffn_kinds[lh->ffn].run, &s);
        devices_sum(ctx, xb, n * dim);
        if (l->post_ffn_norm.data) norm_rows(xb, n, dim, &l->post_ffn_norm, eps);
        kern_add(x, xb, n * dim);

        /* gemma4 per-layer embedding branch: x += RMSNorm(proj · (gelu(gate · x) ⊙ ple_il)) */
        if (P > 0) {
            const int64_t LP = (int64_t)hp->n_layer * P;
            matmul(ctx->pool, ctx->mm_scratch, ctx->pl_g, &l->pl_gate, x, n);
            kern_gelu(ctx->pl_g, ctx->pl_g, n * P);
            for (int32_t t = 0; t < n; t++) {
                float *g = ctx->pl_g + t * P;
                const float *e = ctx->ple + t * LP + il * P;
                for (int64_t i = 0; i < P; i++) g[i] *= e[i];
            }
            matmul(ctx->pool, ctx->mm_scratch, xb, &l->pl_proj, ctx->pl_g, n);
            norm_rows(xb, n, dim, &l->pl_post_norm, eps);
            kern_add(x, xb, n * dim);
        }
        /* gemma4: the whole residual stream × the layer's output scale */
        if (l->out_scale.data) kern_scale(x, n * dim, *(const float *)l->out_scale.data);
    }

    /* the GPU's layers, final norm and classifier (engine/gpu.h) */
    float *logits = ctx->logits + (size_t)*out_row * hp->n_vocab;
    int32_t n_out = 0;
    if (ctx->gpu) {
        int r = gpu_step(ctx, b, t0, n, logits, &n_out, d);
        if (r < 0) return r;
    } else {
        /* final RMSNorm of the tokens that want logits: out_x (n_out, dim) */
        for (int32_t t = 0; t < n; t++)
            if (batch_wants(b, t0 + t))
                kern_rmsnorm(ctx->out_x + (size_t)n_out++ * dim, x + t * dim, m->output_norm.data, dim, eps);
        /* classifier: logits (n_out, n_vocab) */
        struct classifier_args ca = {.n_out = n_out, .logits = logits};
        if (n_out > 0) devices_run(ctx, classifier_on, &ca);
    }
    /* soft-capped where the model says so */
    for (uint32_t i = 0; ctx->split_gpu && i < ctx->n_dev; i++)
        if (ctx->dev[i].gpu_err < 0)
            return err_set(d, ctx->dev[i].gpu_err, "device %s: a step of %d tokens failed", ctx->dev[i].name, n);
    if (n_out > 0 && hp->final_softcap > 0)
        kern_softcap(logits, (int64_t)n_out * hp->n_vocab, hp->final_softcap);
    *out_row += n_out;
    return 0;
}
