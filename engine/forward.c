/* The forward pass: one step over a run of batch tokens, layer by layer.
 *
 * Reads like llama2.c's forward(): embedding, then per layer RMSNorm -> the token mixer
 * (attention: Q, K, V -> RoPE -> cache -> attention -> output projection) -> residual,
 * RMSNorm -> the FFN (SwiGLU) -> residual, then the final norm and the classifier for the
 * tokens that want logits. Rows are tokens throughout: x is (n, n_embd).
 *
 * The recipe is written once, here, over the ops of an executor (engine/exec.h): the CPU,
 * a CPU partition, a whole GPU or a GPU partition run the same lines with their own
 * kernels (engine/exec-cpu.c, engine/exec-cuda.c). Each layer's mixer and FFN are
 * functions of its kinds (mixer_kinds, ffn_kinds below; engine/model.h computes the
 * kinds at load): a new layer kind is a function and a row, never a branch in the loop.
 *
 * Gemma (notes/gemma.md §A.3, §B.3) adds, where its weights and hparams say so: the
 * embedding × sqrt(n_embd), norms after attention and FFN, GeGLU, V norm, K = V layers,
 * per-layer head sizes, sliding-window layers (their own cache and RoPE), the per-layer
 * embedding branch, the layer output scale and the final soft-cap.
 *
 * Hybrids (notes/hybrid.md §A: qwen35) add Gated DeltaNet layers, a recurrent mixer whose
 * state per sequence sits beside the KV cache, and attention whose output is gated by
 * sigmoid(gate), the gate rows interleaved with the query's in attn_q.
 *
 * Mixture-of-experts models (qwen3moe, qwen35moe: notes/hybrid.md §A.7, §C) have an FFN
 * kind of their own: a router picks each token's experts, whose gated FFNs are summed with
 * the router's weights, plus a shared expert where the layer has one.
 *
 * Embedding models (../shared/models/embed/README.md) add, where theirs say so: learned
 * positions, token type 0 and a LayerNorm at the embedding step (bert), LayerNorm as the
 * arch's norm, the norm of the residual stream after each block instead of before it
 * (post-norm), bidirectional attention (its own layer kinds), an FFN that is not gated;
 * an embeddings context keeps every token's final state and pools them per sequence
 * (forward_pool), through the dense projections where the model has them.
 *
 * Where it runs is engine/device.h's business: under a tensor split the mixer and the FFN
 * of a layer run on every device of the context at once, each over its heads and hidden
 * units, and the devices' shares of the output projections are summed on the host; the
 * norms, residuals and the gemma4 per-layer branch are the host's. On a context with a
 * GPU (engine/gpu.h) the host runs its layers, then the GPU the rest, the final norm and
 * the classifier, its residual stream staying on the device. */
#include "engine/forward.h"

#include <math.h>
#include <string.h>

/* x[t] = row token[t] of the embedding (any type with a to_f32) */
static void embed(float *x, const struct engine_weight *emb, int32_t token) {
    const char *row = (const char *)emb->data + (size_t)token * emb->row_bytes;
    if (emb->type == KERN_TYPE_F32)
        memcpy(x, row, (size_t)emb->n_in * sizeof(float));
    else
        kern_type_traits(emb->type)->to_f32(x, row, emb->n_in);
}

/* gemma4 per-layer inputs (notes/gemma.md, PLE steps 1-3), from the scaled embeddings x:
 * ple[t][l] = (RMSNorm(proj·x_t / sqrt(E), proj_norm)_l + tok_embd_pl[tok]_l · sqrt(P)) / sqrt(2)
 */
static void per_layer_inputs(struct engine_context *ctx, const struct engine_batch *b, int32_t t0,
                             int32_t n) {
    const struct engine_model *m = ctx->model;
    const struct engine_hparams *hp = &m->hp;
    const int64_t P = hp->n_embd_per_layer, LP = (int64_t)hp->n_layer * P;
    struct exec *h = &ctx->host.e;
    h->ops->matmul(h, ctx->ple, &m->pl_model_proj, ctx->x, n);
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

/* The arch's norm of n rows of the residual stream: RMSNorm · w, or LayerNorm · w + b
 * (b NULL: none). */
static void norm(struct exec *e, float *y, const float *x, const struct engine_weight *w,
                 const struct engine_weight *b, int32_t n) {
    const struct engine_hparams *hp = &e->ctx->model->hp;
    if (hp->norm == ENGINE_NORM_LAYER)
        e->ops->layernorm(e, y, x, w, b, hp->n_embd, n, hp->rms_eps);
    else
        e->ops->rmsnorm(e, y, x, w, hp->n_embd, n, hp->rms_eps);
}

/* bert: x[t] += token_types[0] + position_embd[pos[t]] (llama.cpp's order: the type row
 * first), the rows converted through ctx->xb */
static void embed_extras(struct engine_context *ctx, const struct engine_batch *b, int32_t t0,
                         int32_t n) {
    const struct engine_model *m = ctx->model;
    const int64_t dim = m->hp.n_embd;
    struct exec *h = &ctx->host.e;
    if (m->type_embd.data) {
        embed(ctx->xb, &m->type_embd, 0);
        h->ops->add(h, ctx->x, ctx->xb, dim, n, 1);
    }
    if (m->pos_embd.data) {
        for (int32_t t = 0; t < n; t++) embed(ctx->xb + t * dim, &m->pos_embd, b->pos[t0 + t]);
        h->ops->add(h, ctx->x, ctx->xb, dim, n, n);
    }
}

/* ---- the layer kinds -----------------------------------------------------------------
 * Each runs on one executor from the normed input `in` to its output `out` (n, n_embd):
 * the whole product on one device, a partial sum under a split. false: the device holds
 * no share of the layer (out untouched). */
typedef bool (*kind_fn)(struct exec *e, const struct layer_step *s, const float *in, float *out);

/* ys[i] = x · W_iᵀ for the matrices that read x: one op where the executor has it */
static void exec_matmuls(struct exec *e, int n_mat, float *const *ys,
                         const struct engine_weight *const *ws, const float *x, int32_t n) {
    if (e->ops->matmul_many && n_mat > 1) {
        e->ops->matmul_many(e, n_mat, ys, ws, x, n);
        return;
    }
    for (int i = 0; i < n_mat; i++) e->ops->matmul(e, ys[i], ws[i], x, n);
}

/* Attention over the KV cache, for the executor's KV heads and the query heads that read
 * them (a shared-KV layer's are placed by its source, engine/device.h). The global,
 * sliding-window and shared-KV kinds differ only in the KV they read (its window and
 * source come with the layer's KV store), so one function runs them; the bidirectional
 * kinds only in the cells each token sees (attend_bidir). */
static bool attention_run(struct exec *e, const struct layer_step *s, const float *in, float *out,
                          bool bidir) {
    const struct exec_ops *op = e->ops;
    const struct engine_hparams *hp = &e->ctx->model->hp;
    const struct kv_cache *kv = &e->ctx->kv;
    const int il = s->il;
    const int32_t n = s->n;
    const struct dev_layer *dl = &e->layer[il];
    const struct engine_layer *w = &dl->w;
    if (dl->n_kv == 0) return false;
    const int64_t hd_k = hp->layer[il].head_dim_k, hd_v = hp->layer[il].head_dim_v;
    const int64_t n_head_kv = dl->n_kv,
                  n_head = n_head_kv * (hp->n_head / kv_store_of(kv, il)->n_head_kv);
    const int64_t q_dim = n_head * hd_k, k_dim = n_head_kv * hd_k;
    const int kind = kv->store_of[il]; /* the RoPE of the KV it reads */
    const float eps = hp->rms_eps;

    /* q (n, n_head × hd_k), k (n, n_head_kv × hd_k), v (n, n_head_kv × hd_v); a shared-KV
     * layer computes only q and reads the KV of kv_source(il); a gemma4 layer without
     * attn_v takes V from the raw K projection (K = V) */
    const bool own = kv_owns(kv, il);
    /* qwen35's query is each head's query, then its output gate (n, n_head × (hd_k + hd_v)) */
    float *ys[3] = {hp->attn_gate ? e->qg : e->q, e->k, e->v};
    const struct engine_weight *ws[3] = {&w->wq, &w->wk, &w->wv};
    exec_matmuls(e, !own ? 1 : w->wv.data ? 3 : 2, ys, ws, in, n);
    if (hp->attn_gate) op->unzip(e, e->q, e->gate, e->qg, n * n_head, hd_k, hd_v);
    if (w->bq.data) op->add(e, e->q, w->bq.data, q_dim, n, 1);
    if (own) {
        if (w->bk.data) op->add(e, e->k, w->bk.data, k_dim, n, 1);
        if (!w->wv.data) op->copy(e, e->v, e->k, n * k_dim);
        else if (w->bv.data) op->add(e, e->v, w->bv.data, n_head_kv * hd_v, n, 1);
    }

    /* qwen3, gemma: RMSNorm of every query and key head (hd_k values each); gemma4:
     * every value head normed without a weight */
    if (w->q_norm.data) op->rmsnorm(e, e->q, e->q, &w->q_norm, hd_k, n * n_head, eps);
    if (own && w->k_norm.data) op->rmsnorm(e, e->k, e->k, &w->k_norm, hd_k, n * n_head_kv, eps);
    if (own && hp->v_norm) op->rmsnorm(e, e->v, e->v, NULL, hd_v, n * n_head_kv, eps);

    /* RoPE on the first n_rot values of every query and key head */
    op->rope(e, s, e->q, n_head, hd_k, kind);
    if (own) op->rope(e, s, e->k, n_head_kv, hd_k, kind);

    /* Hadamard rotation (DESIGN.md 3.4), with the sizes of the KV this layer reads: q
     * blockwise by the K rotation (q·k is unchanged; the KV write rotates k and v) */
    const int rot_k = kv_rot_k(kv, il), rot_v = kv_rot_v(kv, il);
    if (rot_k) op->hadamard(e, e->q, n * q_dim, rot_k);

    /* its heads of k and v into the cache at (sequence, position) in the cache's types,
     * then the attention: att (n, n_head × hd_v), un-rotated by the V rotation (H·H = I) */
    if (own) op->kv_write(e, s, e->k, e->v);
    (bidir ? op->attend_bidir : op->attend)(e, s, e->att, e->q);
    if (rot_v) op->hadamard(e, e->att, n * n_head * hd_v, rot_v);
    if (hp->attn_gate) op->sigmoid_mul(e, e->att, e->gate, n * n_head * hd_v);

    /* its share of the output projection: out = att · Wo[:, its heads]ᵀ */
    op->matmul(e, out, &w->wo, e->att, n);
    return true;
}

static bool attention(struct exec *e, const struct layer_step *s, const float *in, float *out) {
    return attention_run(e, s, in, out, false);
}

/* Bidirectional attention: every token of the step's sequence sees all the others that
 * the step wrote (the K and V of the whole step are in the cache before any token
 * attends), within window / 2 on both sides on a sliding-window layer. */
static bool attention_bidir(struct exec *e, const struct layer_step *s, const float *in,
                            float *out) {
    return attention_run(e, s, in, out, true);
}

/* A Gated DeltaNet layer (notes/hybrid.md §A.6) over the executor's heads: the projections,
 * the causal conv over q | k | v with each sequence's conv state, the gated delta rule over
 * its S (q and k L2-normed, q scaled by 1/sqrt(d_k)), the gated RMSNorm of each head with
 * z, the output projection. */
static bool gated_deltanet(struct exec *e, const struct layer_step *s, const float *in,
                           float *out) {
    const struct exec_ops *op = e->ops;
    const struct engine_hparams *hp = &e->ctx->model->hp;
    const struct dev_layer *dl = &e->layer[s->il];
    const struct engine_layer *w = &dl->w;
    const int32_t n = s->n;
    /* the executor's value heads (and the key heads they read: engine/device.h) */
    const int64_t n_head = dl->n_dv, hd = hp->ssm_head_dim_v;
    if (n_head == 0) return false;
    op->matmul(e, e->dn_qkv, &w->ssm_qkv, in, n);  /* (n, 2·H_k·d_k + H_v·d_v): q | k | v */
    op->matmul(e, e->dn_z, &w->ssm_z, in, n);      /* (n, H_v × d_v) */
    if (w->ssm_ba.data) {
        /* qwen3next: per key head its r = H_v / H_k β, then its r α (n, H_k × 2r) */
        const int64_t r = n_head / dl->n_dk;
        op->matmul(e, e->dn_o, &w->ssm_ba, in, n);
        op->unzip(e, e->dn_beta, e->dn_g, e->dn_o, n * dl->n_dk, r, r);
    } else {
        op->matmul(e, e->dn_g, &w->ssm_alpha, in, n);  /* (n, H_v) */
        op->matmul(e, e->dn_beta, &w->ssm_beta, in, n); /* (n, H_v) */
    }
    /* g = softplus(a + dt_bias)·ssm_a (the log-decay), β = sigmoid(b) */
    op->dn_gates(e, e->dn_g, e->dn_beta, &w->ssm_dt, &w->ssm_a, n, n_head);
    op->dn_conv(e, s, e->dn_qkv);
    /* per value head: S ← e^g·S; δ = β·(v − Sᵀk); S ← S + k·δᵀ; o = Sᵀq */
    op->dn_delta(e, s, e->dn_o, e->dn_qkv, e->dn_g, e->dn_beta);
    op->dn_gated_norm(e, e->dn_o, e->dn_o, e->dn_z, &w->ssm_norm, n * n_head, hd, hp->rms_eps);
    op->matmul(e, out, &w->ssm_out, e->dn_o, n);
    return true;
}

/* The dense gated FFN over the executor's hidden units: out = W_down[:, its units] ·
 * (act(W_gate · in) * (W_up · in)); act is SiLU, or gemma's tanh GELU. */
static bool ffn_dense(struct exec *e, const struct layer_step *s, const float *in, float *out) {
    const struct exec_ops *op = e->ops;
    const struct dev_layer *dl = &e->layer[s->il];
    const int32_t n = s->n;
    if (dl->n_ff == 0) return false;
    float *ys[2] = {e->hb, e->hb2};
    const struct engine_weight *ws[2] = {&dl->w.w_gate, &dl->w.w_up};
    exec_matmuls(e, 2, ys, ws, in, n);
    op->glu(e, e->hb, e->hb, e->hb2, n * dl->n_ff, e->ctx->model->hp.ffn_act);
    op->matmul(e, out, &dl->w.w_down, e->hb, n);
    return true;
}

/* The FFN that is not gated (bert) over the executor's hidden units: out =
 * W_down[:, its units] · gelu(W_up · in + b_up) (the down bias comes after the sum). */
static bool ffn_plain(struct exec *e, const struct layer_step *s, const float *in, float *out) {
    const struct exec_ops *op = e->ops;
    const struct dev_layer *dl = &e->layer[s->il];
    const int32_t n = s->n;
    if (dl->n_ff == 0) return false;
    op->matmul(e, e->hb, &dl->w.w_up, in, n);
    if (dl->w.b_up.data) op->add(e, e->hb, dl->w.b_up.data, dl->n_ff, n, 1);
    op->gelu(e, e->hb, e->hb, n * dl->n_ff);
    op->matmul(e, out, &dl->w.w_down, e->hb, n);
    return true;
}

/* A mixture-of-experts FFN (notes/hybrid.md §A.7, §C) over the executor's share of every
 * expert's hidden units: the router's logits (n, n_expert) = W_router · in; each token's
 * n_expert_used experts and their weights (moe_route: qwen's softmax over all experts, top
 * k, renormalised); out = Σ_k w_k · W_down_e · (SiLU(W_gate_e · in) ⊙ (W_up_e · in)), the
 * step's tokens grouped by expert (moe_experts); then, where the layer has one, the shared
 * expert's dense FFN × sigmoid(w_sh · in). gpt-oss (§C.3) adds the router's bias to the
 * logits, routes by the top k logits then a softmax over those, and its experts add their
 * biases to the gate, up and down products around the clamped SWIGLU_OAI. */
static bool ffn_moe(struct exec *e, const struct layer_step *s, const float *in, float *out) {
    const struct exec_ops *op = e->ops;
    const struct engine_hparams *hp = &e->ctx->model->hp;
    const struct dev_layer *dl = &e->layer[s->il];
    const struct engine_layer *w = &dl->w;
    const int32_t n = s->n;
    if (dl->n_fe == 0 && dl->n_fs == 0) return false;
    op->matmul(e, e->hb, &w->moe_router, in, n); /* (n, n_expert) */
    if (w->moe_router_b.data) op->add(e, e->hb, w->moe_router_b.data, hp->n_expert, n, 1);
    op->moe_route(e, e->hb, n);
    /* the shared expert first (out may be in): hb2 (n, n_embd) = its FFN over its units,
     * hb (n) its gate logit */
    if (dl->n_fs > 0) {
        float *ys[2] = {e->hb, e->hb2};
        const struct engine_weight *ws[2] = {&w->sh_gate, &w->sh_up};
        exec_matmuls(e, 2, ys, ws, in, n);
        op->glu(e, e->hb, e->hb, e->hb2, n * dl->n_fs, hp->ffn_act);
        op->matmul(e, e->hb2, &w->sh_down, e->hb, n);
        op->matmul(e, e->hb, &w->sh_gate_inp, in, n);
    }
    op->moe_experts(e, s, out, in);
    if (dl->n_fs > 0) op->add_gated(e, out, e->hb2, e->hb, hp->n_embd, n);
    return true;
}

/* gemma4 MoE's experts (notes/hybrid.md §C.4) over the executor's share of every expert's
 * hidden units, from the raw residual `in`: the router's logits = W_router ·
 * (rms_norm(in) ⊙ scale / √n_embd), qwen's softmax routing; out = Σ_k w_k · s_e ·
 * W_down_e · (GELU(W_gate_e · y) ⊙ (W_up_e · y)), y = pre_ffw_norm_2(in), s_e the expert's
 * scale (folded into w_k by moe_experts). */
static bool ffn_experts(struct exec *e, const struct layer_step *s, const float *in,
                        float *out) {
    const struct exec_ops *op = e->ops;
    const struct engine_hparams *hp = &e->ctx->model->hp;
    const struct dev_layer *dl = &e->layer[s->il];
    const struct engine_layer *w = &dl->w;
    const int32_t n = s->n;
    const int64_t dim = hp->n_embd;
    if (dl->n_fe == 0) return false;
    op->rmsnorm(e, e->hb2, in, &w->moe_router_scale, dim, n, hp->rms_eps);
    op->scale(e, e->hb2, n * dim, 1.0f / sqrtf((float)dim));
    op->matmul(e, e->hb, &w->moe_router, e->hb2, n); /* (n, n_expert) */
    op->moe_route(e, e->hb, n);
    op->rmsnorm(e, e->hb2, in, &w->pre_ffn_norm_2, dim, n, hp->rms_eps);
    op->moe_experts(e, s, out, e->hb2);
    return true;
}

static bool mix(struct exec *e, const struct layer_step *s, kind_fn run);

/* gemma4 MoE's FFN on the host (notes/hybrid.md §C.4) into e->xb, before the layer's
 * post_ffw_norm: post_ffw_norm_1(dense(ffn_norm(x))) + post_ffw_norm_2(experts(x)). Each
 * part is summed over the devices before its norm, so each is a mix of its own; the dense
 * one waits in the host's att (sized for it: engine/device.c). */
static bool ffn_beside(struct exec *e, const struct layer_step *s) {
    const struct exec_ops *op = e->ops;
    const struct engine_layer *l = &e->whole[s->il];
    const int32_t n = s->n;
    const int64_t dim = e->ctx->model->hp.n_embd;
    norm(e, e->xb, e->x, &l->ffn_norm, NULL, n);
    if (!mix(e, s, ffn_dense)) memset(e->xb, 0, (size_t)(n * dim) * sizeof *e->xb);
    norm(e, e->att, e->xb, &l->post_ffn_norm_1, NULL, n);
    op->copy(e, e->xb, e->x, n * dim);
    if (!mix(e, s, ffn_experts)) memset(e->xb, 0, (size_t)(n * dim) * sizeof *e->xb);
    norm(e, e->xb, e->xb, &l->post_ffn_norm_2, NULL, n);
    op->add(e, e->xb, e->att, dim, n, n);
    return true;
}

/* A layer kind: its run on an executor's share; an FFN kind with more than one sum over
 * the devices has its own host recipe (`host`, into e->xb) instead of norm-then-mix. */
struct layer_kind {
    const char *name;
    kind_fn run;
    bool (*host)(struct exec *e, const struct layer_step *s);
};
static const struct layer_kind mixer_kinds[ENGINE_MIXER_KIND_COUNT] = {
    [ENGINE_MIXER_ATTENTION] = {"attention", attention},
    [ENGINE_MIXER_ATTENTION_SWA] = {"sliding-window attention", attention},
    [ENGINE_MIXER_ATTENTION_SHARED] = {"shared-KV attention", attention},
    [ENGINE_MIXER_ATTENTION_BIDIR] = {"bidirectional attention", attention_bidir},
    [ENGINE_MIXER_ATTENTION_BIDIR_SWA] = {"bidirectional sliding-window attention",
                                          attention_bidir},
    [ENGINE_MIXER_GATED_DELTANET] = {"Gated DeltaNet", gated_deltanet},
};
static const struct layer_kind ffn_kinds[ENGINE_FFN_KIND_COUNT] = {
    [ENGINE_FFN_DENSE_GATED] = {"dense gated FFN", ffn_dense},
    [ENGINE_FFN_DENSE] = {"dense FFN", ffn_plain},
    [ENGINE_FFN_MOE] = {"mixture of experts", ffn_moe},
    [ENGINE_FFN_MOE_DENSE] = {"dense FFN beside a mixture of experts", ffn_experts, ffn_beside},
};

/* ---- the recipe ------------------------------------------------------------------------ */

struct kind_call {
    const struct layer_step *s;
    kind_fn run;
};

/* A device's share of a split: the host's normed input ctx->xb onto it, its kind's output
 * back into dv->part (zeros where it holds no share). */
static void kind_on(struct engine_context *ctx, struct device *dv, void *arg) {
    const struct kind_call *c = arg;
    struct exec *e = dv->ex;
    const int64_t n = c->s->n * ctx->model->hp.n_embd;
    if (e->err) return;
    const float *in = e->ops->input(e, ctx->xb, n);
    if (c->run(e, c->s, in, e->out))
        e->ops->output(e, dv->part, e->out, n);
    else
        memset(dv->part, 0, (size_t)n * sizeof *dv->part);
}

/* Layer s->il's kind `run` from e->xb into e->xb: on e, or under a split on every device
 * at once, summed. false: nothing to add (no share here). */
static bool mix(struct exec *e, const struct layer_step *s, kind_fn run) {
    struct engine_context *ctx = e->ctx;
    if (e != &ctx->host.e || ctx->n_dev == 1) return run(e, s, e->xb, e->xb);
    struct kind_call c = {.s = s, .run = run};
    devices_run(ctx, kind_on, &c);
    devices_sum(ctx, e->xb, s->n * ctx->model->hp.n_embd);
    return true;
}

/* The FFN's normed input (or x itself), then its kind: into e->xb */
static bool ffn_in(struct exec *e, const struct layer_step *s, kind_fn run) {
    const struct engine_layer *l = &e->whole[s->il];
    if (l->ffn_norm.data)
        norm(e, e->xb, e->x, &l->ffn_norm, NULL, s->n);
    else
        e->ops->copy(e, e->xb, e->x, s->n * e->ctx->model->hp.n_embd);
    return mix(e, s, run);
}

/* One layer on e, which holds the residual stream e->x of the step's tokens. */
static void layer_run(struct exec *e, const struct layer_step *s) {
    const struct exec_ops *op = e->ops;
    const struct engine_model *m = e->ctx->model;
    const struct engine_hparams *hp = &m->hp;
    const int il = s->il;
    const int32_t n = s->n;
    const struct engine_layer *l = &e->whole[il];
    const struct engine_layer_hparams *lh = &hp->layer[il];
    const int64_t dim = hp->n_embd, P = hp->n_embd_per_layer;
    const float eps = hp->rms_eps;

    /* the token mixer of the normed input, then its bias (after the devices' sum), gemma's
     * norm, and the residual: x += mixer(norm(x)); a post-norm arch (bert) mixes x itself
     * and norms the sum: x = LN(x + mixer(x)) */
    if (l->attn_norm.data)
        norm(e, e->xb, e->x, &l->attn_norm, NULL, n);
    else
        op->copy(e, e->xb, e->x, n * dim);
    if (mix(e, s, mixer_kinds[lh->mixer].run)) {
        if (l->bo.data) op->add(e, e->xb, l->bo.data, dim, n, 1);
        if (l->post_attn_norm.data) norm(e, e->xb, e->xb, &l->post_attn_norm, NULL, n);
        op->add(e, e->x, e->xb, dim, n, n);
        if (l->attn_out_norm.data) norm(e, e->x, e->x, &l->attn_out_norm, &l->attn_out_norm_b, n);
    }

    /* the FFN likewise: x += FFN(norm(x)), gemma norming the result, bert the sum */
    const struct layer_kind *fk = &ffn_kinds[lh->ffn];
    if (fk->host ? fk->host(e, s) : ffn_in(e, s, fk->run)) {
        if (l->b_down.data) op->add(e, e->xb, l->b_down.data, dim, n, 1);
        if (l->post_ffn_norm.data) norm(e, e->xb, e->xb, &l->post_ffn_norm, NULL, n);
        op->add(e, e->x, e->xb, dim, n, n);
        if (l->layer_out_norm.data)
            norm(e, e->x, e->x, &l->layer_out_norm, &l->layer_out_norm_b, n);
    }

    /* gemma4 per-layer embedding branch: x += RMSNorm(proj · (gelu(gate · x) ⊙ ple_il)) */
    if (P > 0 && l->pl_gate.data) {
        op->matmul(e, e->pl_g, &l->pl_gate, e->x, n);
        op->ple_gate(e, e->pl_g, il, n);
        op->matmul(e, e->xb, &l->pl_proj, e->pl_g, n);
        op->rmsnorm(e, e->xb, e->xb, &l->pl_post_norm, dim, n, eps);
        op->add(e, e->x, e->xb, dim, n, n);
    }
    /* gemma4: the whole residual stream × the layer's output scale (a host scalar) */
    const struct engine_weight *os = &m->layers[il].out_scale;
    if (os->data) op->scale(e, e->x, n * dim, *(const float *)os->data);
}

struct classifier_args {
    int32_t n_out;
    float *logits; /* (n_out, n_vocab) */
};

/* A device's rows of the classifier under a split: logits[:, its vocabulary range] */
static void classifier_on(struct engine_context *ctx, struct device *dv, void *arg) {
    const struct classifier_args *a = arg;
    struct exec *e = dv->ex;
    const int64_t n_vocab = ctx->model->hp.n_vocab;
    if (dv->n_vocab == 0 || e->err) return;
    const float *in = e->ops->input(e, ctx->out_x, a->n_out * ctx->model->hp.n_embd);
    e->ops->matmul(e, e->logits, e->output, in, a->n_out);
    e->ops->output(e, dv->logits, e->logits, a->n_out * dv->n_vocab);
    for (int32_t t = 0; t < a->n_out; t++)
        memcpy(a->logits + t * n_vocab + dv->vocab0, dv->logits + t * dv->n_vocab,
               (size_t)dv->n_vocab * sizeof(float));
}

/* The final RMSNorm of the step's tokens that want logits and the classifier: on e into
 * e->logits (the host's logits on the CPU), or under a split each device its rows.
 * *ret_n_out = the rows. */
static void head(struct exec *e, const struct layer_step *s, float *logits, int32_t *ret_n_out) {
    struct engine_context *ctx = e->ctx;
    const struct engine_hparams *hp = &ctx->model->hp;
    int32_t n_out = 0;
    e->ops->gather(e, s, e->xo, e->x, &n_out);
    *ret_n_out = n_out;
    if (n_out == 0) return;
    e->ops->rmsnorm(e, e->xo, e->xo, e->output_norm, hp->n_embd, n_out, hp->rms_eps);
    if (e == &ctx->host.e && ctx->n_dev > 1) {
        struct classifier_args ca = {.n_out = n_out, .logits = logits};
        devices_run(ctx, classifier_on, &ca);
        return;
    }
    e->ops->matmul(e, e == &ctx->host.e ? logits : e->logits, e->output, e->xo, n_out);
}

/* An embeddings context: every token's final hidden state, through the final norm where
 * the model has one, into rows t0.. of ctx->embd (n, n_embd). */
static void final_states(struct exec *e, const struct layer_step *s) {
    struct engine_context *ctx = e->ctx;
    const struct engine_model *m = ctx->model;
    float *y = ctx->embd + (size_t)s->t0 * m->hp.n_embd;
    if (m->output_norm.data)
        norm(e, y, e->x, &m->output_norm, NULL, s->n);
    else
        e->ops->copy(e, y, e->x, s->n * m->hp.n_embd);
}

/* A GPU partition's index arrays for the step (engine/gpu.h) */
static void part_begin_on(struct engine_context *ctx, struct device *dv, void *arg) {
    const struct layer_step *s = arg;
    gpu_part_begin(ctx, dv, s->b, s->t0, s->n);
}

int forward_step(struct engine_context *ctx, const struct engine_batch *b, int32_t t0, int32_t n,
                 int32_t *out_row, struct err_detail *d) {
    const struct engine_model *m = ctx->model;
    const struct engine_hparams *hp = &m->hp;
    struct kv_cache *kv = &ctx->kv;
    const int64_t dim = hp->n_embd, P = hp->n_embd_per_layer;
    float *x = ctx->x;

    /* token embeddings: x (n, dim), gemma's scaled by sqrt(n_embd) (in f32, as llama.cpp);
     * bert's plus token type 0 and each token's position row, then normed */
    for (int32_t t = 0; t < n; t++) embed(x + t * dim, &m->tok_embd, b->token[t0 + t]);
    if (m->type_embd.data || m->pos_embd.data) embed_extras(ctx, b, t0, n);
    if (hp->embd_scale) kern_scale(x, n * dim, sqrtf((float)dim));
    if (m->embd_norm.data) norm(&ctx->host.e, x, x, &m->embd_norm, &m->embd_norm_b, n);
    if (P > 0) per_layer_inputs(ctx, b, t0, n);
    /* multiply-adds of one layer's attention: n tokens × n_head × cells × (hd_k + hd_v) */
    int64_t attn_work = 0;
    for (int32_t t = 0; t < n; t++)
        attn_work +=
            ((int64_t)b->pos[t0 + t] + 1) * hp->n_head * (hp->max_head_dim_k + hp->max_head_dim_v);
    /* RoPE angles of each token's position for each kind of layer: rope_cs[s] (n, n_rot) */
    for (uint32_t s = 0; s < kv->n_store; s++)
        for (int32_t t = 0; t < n; t++)
            kern_rope_cache(ctx->rope_cs[s] + t * ctx->rope[s].n_dims, b->pos[t0 + t],
                            &ctx->rope[s]);

    /* the host's layers (all of them without a GPU); GPU partitions take the step's
     * positions and cells once */
    struct layer_step s = {.b = b, .t0 = t0, .n = n, .attn_work = attn_work};
    if (ctx->split_gpu) devices_run(ctx, part_begin_on, &s);
    for (s.il = 0; s.il < (int)ctx->n_layer_host; s.il++) layer_run(&ctx->host.e, &s);

    float *logits = ctx->logits + (size_t)*out_row * hp->n_vocab;
    int32_t n_out = 0;
    int r = 0;
    if (!ctx->gpu) {
        if (ctx->params.embeddings)
            final_states(&ctx->host.e, &s);
        else
            head(&ctx->host.e, &s, logits, &n_out);
        for (uint32_t i = 0; ctx->split_gpu && i < ctx->n_dev && r == 0; i++)
            if ((r = ctx->dev[i].ex->err) < 0)
                return err_set(d, r, "device %s: a step of %d tokens failed", ctx->dev[i].name, n);
    } else {
        /* the GPU's layers, final norm and classifier; a one-token step replays the CUDA
         * graph of the first one (engine/gpu.h) */
        struct exec *g = gpu_exec(ctx);
        if ((r = gpu_step_begin(ctx, b, t0, n, &n_out, d)) < 0) return r;
        enum gpu_graph graph = gpu_graph_begin(ctx, n, n_out);
        if (graph != GPU_GRAPH_REPLAYED) {
            for (s.il = (int)ctx->n_layer_host; s.il < (int)hp->n_layer; s.il++) layer_run(g, &s);
            head(g, &s, logits, &n_out);
            if (graph == GPU_GRAPH_RECORDING) gpu_graph_end(ctx);
        }
        if ((r = gpu_step_end(ctx, logits, n, n_out,
                              ctx->argmax_only ? ctx->argmax + *out_row : NULL, d)) < 0)
            return r;
    }
    /* soft-capped where the model says so */
    if (n_out > 0 && hp->final_softcap > 0 && !(ctx->gpu && ctx->argmax_only))
        kern_softcap(logits, (int64_t)n_out * hp->n_vocab, hp->final_softcap);
    *out_row += n_out;
    return 0;
}

/* n rows of x (n, n_embd) through the dense projections the model has (gemma-embedding's
 * dense_2 then dense_3, no bias, no activation) into y (n, n_embd_out), on the host's
 * threads; ctx->dense_mid holds the middle rows. */
static void dense_project(struct engine_context *ctx, float *y, const float *x, int64_t n) {
    const struct engine_model *m = ctx->model;
    const struct engine_weight *ws[] = {&m->dense_2, &m->dense_3};
    float *outs[] = {m->dense_3.data ? ctx->dense_mid : y, y};
    const float *in = x;
    for (size_t i = 0; i < ARRAY_SIZE(ws); i++) {
        const struct engine_weight *w = ws[i];
        if (!w->data) continue;
        kern_matmul_layout(ctx->pool, outs[i], w->data, w->type, w->layout, in, w->n_in, w->n_out,
                           n, ctx->dense_scratch);
        in = outs[i];
    }
    if (in == x) memcpy(y, x, (size_t)n * ctx->model->hp.n_embd * sizeof *y);
}

void forward_pool(struct engine_context *ctx, const struct engine_batch *b) {
    const struct engine_model *m = ctx->model;
    const int64_t dim = m->hp.n_embd;
    const enum engine_pooling pooling = m->hp.pooling;
    /* the batch's sequences, in sequence order, one row each */
    int32_t n_rows = 0;
    for (uint32_t q = 0; q < ctx->kv.n_seq; q++)
        ctx->embd_row[q] = ctx->seq_next[q] >= 0 ? n_rows++ : -1;
    ctx->embd_n_tok = b->n_tok;
    if (pooling == ENGINE_POOLING_NONE) return;
    /* mean: the sum of a sequence's rows over its count; cls and last: its first and last
     * row in the batch, which are its lowest and highest positions (a sequence's positions
     * rise in batch order) */
    memset(ctx->pool_in, 0, (size_t)n_rows * dim * sizeof *ctx->pool_in);
    for (int32_t r = 0; r < n_rows; r++) ctx->pool_n[r] = 0;
    for (int32_t t = 0; t < b->n_tok; t++) {
        const int32_t r = ctx->embd_row[b->seq ? b->seq[t] : 0];
        const float *x = ctx->embd + (size_t)t * dim;
        float *y = ctx->pool_in + (size_t)r * dim;
        const bool first = ctx->pool_n[r]++ == 0;
        if (pooling == ENGINE_POOLING_MEAN)
            kern_add(y, x, dim);
        else if (pooling == ENGINE_POOLING_LAST || first)
            memcpy(y, x, (size_t)dim * sizeof *y);
    }
    if (pooling == ENGINE_POOLING_MEAN)
        for (int32_t r = 0; r < n_rows; r++)
            kern_scale(ctx->pool_in + (size_t)r * dim, dim, 1.0f / (float)ctx->pool_n[r]);
    dense_project(ctx, ctx->embd_seq, ctx->pool_in, n_rows);
}

void forward_token_embedding(struct engine_context *ctx, int32_t i, float *out) {
    dense_project(ctx, out, ctx->embd + (size_t)i * ctx->model->hp.n_embd, 1);
}
