/* CUDA's ops (engine/exec.h) and the GPU's part of a step (engine/gpu.h): kernels/cuda
 * on the context's stream, device memory placed by engine/gpu.c. Every op is enqueued and
 * returns at once; the first failure stays in e->err and the step reports it at its end. */
#ifdef WARM_CUDA

#include "engine/gpu-impl.h"

#include <errno.h>
#include <math.h>
#include <string.h>

static struct gpu *gpu_of(struct exec *e) { return e->impl; }

/* keeps the first failure; the ops after it do nothing */
static void check(struct exec *e, int r) {
    if (r < 0 && e->err == 0) e->err = r;
}

static void cu_matmul(struct exec *e, float *y, const struct engine_weight *w, const float *x,
                      int64_t n) {
    struct gpu *g = gpu_of(e);
    if (!e->err)
        check(e,
              kern_cuda_matmul(g->cu, y, w->data, w->type, x, w->n_in, w->n_out, n, g->mm_scratch));
}

static void cu_add(struct exec *e, float *y, const float *x, int64_t width, int64_t n_rows,
                   int64_t n_rows_x) {
    if (!e->err) check(e, kern_cuda_add(gpu_of(e)->cu, y, x, width, n_rows, n_rows_x));
}

static void cu_rmsnorm(struct exec *e, float *y, const float *x, const struct engine_weight *w,
                       int64_t width, int64_t n_rows, float eps) {
    if (!e->err)
        check(e, kern_cuda_rmsnorm(gpu_of(e)->cu, y, x, w ? w->data : NULL, width, n_rows, eps));
}

static enum kern_cuda_act act_of(enum engine_ffn_act act) {
    return act == ENGINE_FFN_GELU          ? KERN_CUDA_ACT_GELU
           : act == ENGINE_FFN_SWIGLU_OAI ? KERN_CUDA_ACT_SWIGLU_OAI
                                          : KERN_CUDA_ACT_SILU;
}

static void cu_glu(struct exec *e, float *y, const float *g, const float *u, int64_t n,
                   enum engine_ffn_act act) {
    struct kern_cuda_ctx *cu = gpu_of(e)->cu;
    if (!e->err)
        check(e, act == ENGINE_FFN_GELU   ? kern_cuda_gelu_mul(cu, y, g, u, n)
                 : act == ENGINE_FFN_SILU ? kern_cuda_silu_mul(cu, y, g, u, n)
                                          : kern_cuda_glu(cu, y, g, u, n, act_of(act)));
}

/* the per-layer inputs are layer-major on the device: layer il's are (n, P) at il × n × P */
static void cu_ple_gate(struct exec *e, float *g, int il, int32_t n) {
    struct gpu *gp = gpu_of(e);
    const int64_t P = e->ctx->model->hp.n_embd_per_layer;
    if (!e->err) check(e, kern_cuda_gelu_mul(gp->cu, g, g, gp->ple + (int64_t)il * n * P, n * P));
}

static void cu_scale(struct exec *e, float *x, int64_t n, float v) {
    if (!e->err) check(e, kern_cuda_scale(gpu_of(e)->cu, x, n, v));
}

static void cu_copy(struct exec *e, float *dst, const float *src, int64_t n) {
    if (!e->err) check(e, kern_cuda_copy(gpu_of(e)->cu, dst, src, (size_t)n * sizeof *dst));
}

static void cu_rope(struct exec *e, const struct layer_step *s, float *x, int64_t n_head,
                    int64_t hd, int kind) {
    struct gpu *g = gpu_of(e);
    const int32_t *pos = g->idx + IDX_POS * e->ctx->params.n_batch;
    if (!e->err) check(e, kern_cuda_rope(g->cu, x, pos, s->n, n_head, hd, &g->rope[kind]));
}

static void cu_hadamard(struct exec *e, float *x, int64_t n, int n_rot) {
    if (!e->err) check(e, kern_cuda_hadamard(gpu_of(e)->cu, x, n, n_rot));
}

/* the slot of the KV layer il reads, its K (v false) or V rows on g */
static char *kv_rows(const struct engine_context *ctx, const struct gpu *g, int il, bool v,
                     size_t *ret_rb) {
    const struct kv_cache *kv = &ctx->kv;
    const uint32_t kind = (uint32_t)kv->store_of[il], slot = (uint32_t)kv->owner[kv_source(kv, il)];
    *ret_rb = gpu_kv_rb(g, kind, slot, v);
    return kern_cuda_buf_ptr(gpu_kv_buf(g, kind, slot, v));
}

/* the KV write rotates k and v as it converts them; a ring's rows are written twice, at the
 * cell and at its mirror n_cells on */
static void cu_kv_write(struct exec *e, const struct layer_step *s, float *k, float *v) {
    struct gpu *g = gpu_of(e);
    const struct kv_cache *kv = &e->ctx->kv;
    const struct kv_store *st = kv_store_of(kv, s->il);
    const struct dev_layer *dl = &e->layer[s->il];
    const int64_t nb = e->ctx->params.n_batch;
    const int32_t *cells = g->idx + IDX_STORE(kv->store_of[s->il]) * nb;
    size_t krb, vrb;
    char *kc = kv_rows(e->ctx, g, s->il, false, &krb), *vc = kv_rows(e->ctx, g, s->il, true, &vrb);
    for (int mirror = 0; mirror < (st->ring ? 2 : 1) && !e->err; mirror++) {
        const int32_t *c = cells + mirror * nb;
        check(e, kern_cuda_kv_store(g->cu, kc, krb, c, k, s->n, kv->type_k,
                                    dl->n_kv * st->head_dim_k, st->n_rot_k));
        if (!e->err)
            check(e, kern_cuda_kv_store(g->cu, vc, vrb, c, v, s->n, kv->type_v,
                                        dl->n_kv * st->head_dim_v, st->n_rot_v));
    }
}

static void cu_attend(struct exec *e, const struct layer_step *s, float *att, const float *q) {
    struct gpu *g = gpu_of(e);
    const struct engine_hparams *hp = &e->ctx->model->hp;
    const struct kv_cache *kv = &e->ctx->kv;
    const struct kv_store *st = kv_store_of(kv, s->il);
    const int64_t nb = e->ctx->params.n_batch, n_head_kv = e->layer[s->il].n_kv;
    const int32_t *cells = g->idx + IDX_STORE(kv->store_of[s->il]) * nb;
    const int64_t group = hp->n_head / st->n_head_kv;
    /* gpt-oss's sinks, a logit per query head: this device's heads' (all of them on a
     * whole GPU) */
    const float *sinks = e->layer[s->il].w.attn_sinks.data;
    size_t krb, vrb;
    const char *kc = kv_rows(e->ctx, g, s->il, false, &krb),
               *vc = kv_rows(e->ctx, g, s->il, true, &vrb);
    struct kern_cuda_attn_args a = {
        .out = att,
        .q = q,
        .k = kc,
        .v = vc,
        .kt = kv->type_k,
        .vt = kv->type_v,
        .k_stride = krb,
        .v_stride = vrb,
        .kv_row0 = cells + 2 * nb,
        .n_kv = cells + 3 * nb,
        .n_tok = s->n,
        .n_head = n_head_kv * group,
        .n_head_kv = n_head_kv,
        .hd_k = st->head_dim_k,
        .hd_v = st->head_dim_v,
        .scale = hp->attn_scale > 0 ? hp->attn_scale : 1.0f / sqrtf((float)st->head_dim_k),
        .sinks = sinks ? sinks + e->layer[s->il].kv0 * group : NULL};
    if (!e->err) check(e, kern_cuda_attn(g->cu, &a));
}

/* the rows that want logits were listed at the step's start (IDX_WANT) */
static void cu_gather(struct exec *e, const struct layer_step *s, float *y, const float *x,
                      int32_t *ret_n_out) {
    (void)s;
    struct gpu *g = gpu_of(e);
    const int64_t dim = e->ctx->model->hp.n_embd;
    *ret_n_out = g->n_out;
    if (!e->err && g->n_out > 0)
        check(e, kern_cuda_get_rows(g->cu, y, x, KERN_TYPE_F32, (size_t)dim * sizeof(float),
                                    g->idx + IDX_WANT * e->ctx->params.n_batch, g->n_out, dim));
}

static void cu_unzip(struct exec *e, float *y0, float *y1, const float *x, int64_t n_rows,
                     int64_t w0, int64_t w1) {
    if (!e->err) check(e, kern_cuda_unzip(gpu_of(e)->cu, y0, y1, x, n_rows, w0, w1));
}

static void cu_sigmoid_mul(struct exec *e, float *x, const float *g, int64_t n) {
    if (!e->err) check(e, kern_cuda_sigmoid_mul(gpu_of(e)->cu, x, g, n));
}

/* ---- Gated DeltaNet: the state of each token's sequence (IDX_SEQ) in the GPU's copy of
 * kv_rstate (engine/gpu-impl.h), which the step's start brought up to date ---------- */

static void cu_dn_gates(struct exec *e, float *a, float *b, const struct engine_weight *dt_bias,
                        const struct engine_weight *ssm_a, int64_t n, int64_t n_head) {
    if (!e->err)
        check(e, kern_cuda_dn_gates(gpu_of(e)->cu, a, b, a, b, dt_bias->data, ssm_a->data, n,
                                    n_head));
}

static void cu_dn_conv(struct exec *e, const struct layer_step *s, float *qkv) {
    struct gpu *g = gpu_of(e);
    const struct kv_rstate *rs = &e->ctx->kv.rs;
    const uint32_t slot = (uint32_t)rs->slot[s->il];
    const int32_t *seq = g->idx + IDX_SEQ * e->ctx->params.n_batch;
    if (!e->err)
        check(e, kern_cuda_dn_conv(g->cu, qkv, gpu_rs_conv(g, slot), (int64_t)rs->conv_floats, seq,
                                   qkv, e->layer[s->il].w.ssm_conv.data, s->n,
                                   e->layer[s->il].n_dchan, rs->n_kernel));
}

static void cu_dn_delta(struct exec *e, const struct layer_step *s, float *o, const float *qkv,
                        const float *g, const float *beta) {
    struct gpu *gp = gpu_of(e);
    const struct kv_rstate *rs = &e->ctx->kv.rs;
    const struct dev_layer *dl = &e->layer[s->il];
    const struct kern_dn_shape *p = &dl->dn;
    const int64_t C = dl->n_dchan, key_dim = p->n_head_k * p->head_dim_k;
    const struct kern_cuda_dn_args a = {
        .state = gpu_rs_ssm(gp, (uint32_t)rs->slot[s->il]),
        .state_stride = (int64_t)rs->ssm_floats,
        .seq = gp->idx + IDX_SEQ * e->ctx->params.n_batch,
        .q = qkv, .k = qkv + key_dim, .v = qkv + 2 * key_dim,
        .g = g, .beta = beta, .o = o,
        .q_stride = C, .k_stride = C, .v_stride = C,
        .o_stride = p->n_head_v * p->head_dim_v,
        .n_tok = s->n,
    };
    if (!e->err) check(e, kern_cuda_dn_delta(gp->cu, &a, p));
}

static void cu_dn_gated_norm(struct exec *e, float *y, const float *x, const float *z,
                             const struct engine_weight *w, int64_t n_rows, int64_t width,
                             float eps) {
    if (!e->err)
        check(e, kern_cuda_dn_gated_norm(gpu_of(e)->cu, y, x, z, w->data, n_rows, width, eps));
}

/* ---- mixture of experts: the routing stays on the device (g->moe_sel, g->moe_wt) for
 * the step's moe_experts, so a decode step records as one graph ------------------------ */

static void cu_moe_route(struct exec *e, const float *logits, int32_t n) {
    struct gpu *g = gpu_of(e);
    const struct engine_hparams *hp = &e->ctx->model->hp;
    const struct kern_cuda_moe_route_params p = {
        .gating = hp->moe_gating == ENGINE_MOE_SOFTMAX_TOPK ? KERN_CUDA_MOE_TOPK_SOFTMAX
                                                            : KERN_CUDA_MOE_SOFTMAX,
        .norm_w = hp->moe_norm_w,
        .w_scale = hp->moe_w_scale,
        .n_expert = hp->n_expert,
        .n_used = hp->n_expert_used};
    if (!e->err) check(e, kern_cuda_moe_route(g->cu, g->moe_sel, g->moe_wt, logits, n, &p));
}

/* The routed experts on the host (engine_context_params.experts): the layer's input rows
 * and the device's routing go down into the host device's scratch, the CPU's moe_experts
 * runs over the host's copy of the experts (its dev_layer of every layer views the
 * model's), the rows come back up. Downloads wait for the stream: no graph records such
 * a step (gpu_graph_begin). */
static void host_experts(struct exec *e, const struct layer_step *s, float *out,
                         const float *in) {
    struct gpu *g = gpu_of(e);
    struct engine_context *ctx = e->ctx;
    struct exec *h = &ctx->host.e;
    struct device *dv = h->impl;
    const int64_t dim = ctx->model->hp.n_embd, k = ctx->model->hp.n_expert_used;
    float *hin = g->h_moe, *hout = g->h_moe + (size_t)ctx->params.n_batch * dim;
    const size_t n = (size_t)s->n;
    if (!e->err)
        check(e, kern_cuda_buf_download(g->act, gpu_act_off(g, in), hin, n * dim * sizeof *hin));
    if (!e->err)
        check(e, kern_cuda_buf_download(g->act, gpu_act_off(g, g->moe_sel), dv->moe_sel,
                                        n * k * sizeof *dv->moe_sel));
    if (!e->err)
        check(e, kern_cuda_buf_download(g->act, gpu_act_off(g, g->moe_wt), dv->moe_wt,
                                        n * k * sizeof *dv->moe_wt));
    if (e->err) return;
    h->ops->moe_experts(h, s, hout, hin);
    check(e, kern_cuda_buf_upload(g->act, gpu_act_off(g, out), hout, n * dim * sizeof *hout));
}

/* every expert's units [fe0, fe0 + n_fe) on the device (all of them on a whole GPU); the
 * down bias once, by the share of the first units, as on the CPU */
static void cu_moe_experts(struct exec *e, const struct layer_step *s, float *out,
                           const float *in) {
    struct gpu *g = gpu_of(e);
    if (g->moe_host) {
        host_experts(e, s, out, in);
        return;
    }
    const struct engine_hparams *hp = &e->ctx->model->hp;
    const struct dev_layer *dl = &e->layer[s->il];
    const struct engine_layer *w = &dl->w;
    const struct kern_cuda_moe_args a = {
        .out = out,
        .in = in,
        .sel = g->moe_sel,
        .wt = g->moe_wt,
        .gate = w->exp_gate.data, .up = w->exp_up.data, .down = w->exp_down.data,
        .gate_t = w->exp_gate.type, .up_t = w->exp_up.type, .down_t = w->exp_down.type,
        .gate_stride = w->exp_gate.expert_bytes,
        .up_stride = w->exp_up.expert_bytes,
        .down_stride = w->exp_down.expert_bytes,
        .gate_b = w->exp_gate_b.data, .up_b = w->exp_up_b.data,
        .down_b = dl->fe0 == 0 ? w->exp_down_b.data : NULL,
        .scale = w->exp_down_scale.data,
        .b_stride = w->exp_gate_b.n_in,
        .b0 = dl->fe0,
        .act = act_of(hp->ffn_act),
        .n_tok = s->n,
        .n_used = hp->n_expert_used,
        .n_expert = hp->n_expert,
        .n_embd = hp->n_embd,
        .n_ff = dl->n_fe};
    /* (a GPU holds units of every expert: engine/gpu.c places whole layers) */
    if (!e->err) check(e, dl->n_fe > 0 ? kern_cuda_moe_experts(g->cu, &a, g->mm_scratch) : -EINVAL);
}

static void cu_add_gated(struct exec *e, float *y, const float *x, const float *g, int64_t width,
                         int64_t n_rows) {
    if (!e->err) check(e, kern_cuda_add_gated(gpu_of(e)->cu, y, x, g, width, n_rows));
}

/* a partition's input goes to its xb */
static const float *cu_input(struct exec *e, const float *x, int64_t n) {
    struct gpu *g = gpu_of(e);
    if (!e->err)
        check(e, kern_cuda_buf_upload(g->act, gpu_act_off(g, g->xb), x, (size_t)n * sizeof *x));
    return g->xb;
}

static void cu_output(struct exec *e, float *host, const float *y, int64_t n) {
    struct gpu *g = gpu_of(e);
    if (!e->err)
        check(e, kern_cuda_buf_download(g->act, gpu_act_off(g, y), host, (size_t)n * sizeof *host));
}

const struct exec_ops exec_cuda_ops = {
    .matmul = cu_matmul,
    .add = cu_add,
    .rmsnorm = cu_rmsnorm,
    /* none for the embedding models' layers yet: engine_context_new() keeps them on the
     * CPU (LayerNorm, the plain GELU FFN, bidirectional attention) */
    .layernorm = NULL,
    .gelu = NULL,
    .glu = cu_glu,
    .ple_gate = cu_ple_gate,
    .scale = cu_scale,
    .copy = cu_copy,
    .rope = cu_rope,
    .hadamard = cu_hadamard,
    .kv_write = cu_kv_write,
    .attend = cu_attend,
    .attend_bidir = NULL,
    .unzip = cu_unzip,
    .sigmoid_mul = cu_sigmoid_mul,
    .dn_gates = cu_dn_gates,
    .dn_conv = cu_dn_conv,
    .dn_delta = cu_dn_delta,
    .dn_gated_norm = cu_dn_gated_norm,
    .moe_route = cu_moe_route,
    .moe_experts = cu_moe_experts,
    .add_gated = cu_add_gated,
    .gather = cu_gather,
    .input = cu_input,
    .output = cu_output,
};

void gpu_exec_init(struct engine_context *ctx, struct gpu *g) {
    g->exec = (struct exec){.ops = &exec_cuda_ops,
                            .ctx = ctx,
                            .name = g->name,
                            .layer = g->layer,
                            .whole = g->whole,
                            .x = g->x,
                            .xb = g->xb,
                            .q = g->q,
                            .k = g->k,
                            .v = g->v,
                            .att = g->att,
                            .hb = g->hb,
                            .hb2 = g->hb2,
                            .pl_g = g->pl_g,
                            .out = g->x, /* a partition's partial sum */
                            .xo = g->xo,
                            .logits = g->logits,
                            .qg = g->qg,
                            .gate = g->gate,
                            .dn_qkv = g->dn_qkv,
                            .dn_z = g->dn_z,
                            .dn_g = g->dn_g,
                            .dn_beta = g->dn_beta,
                            .dn_o = g->dn_o,
                            .output_norm = &g->output_norm,
                            .output = &g->output,
                            .impl = g};
}

/* ---- the GPU's part of a step ----------------------------------------------------------- */

/* The step's index arrays (positions, each store's cells, the rows that want logits) into
 * g's staging and onto the device; g->n_out = the rows that want logits. */
static int upload_index(struct engine_context *ctx, struct gpu *g, const struct engine_batch *b,
                        int32_t t0, int32_t n) {
    const struct kv_cache *kv = &ctx->kv;
    const size_t nb = ctx->params.n_batch;
    int32_t *h = g->h_idx, n_out = 0;
    for (int32_t t = 0; t < n; t++) {
        const int32_t i = t0 + t, seq = b->seq ? b->seq[i] : 0, pos = b->pos[i];
        h[IDX_POS * nb + t] = pos;
        h[IDX_SEQ * nb + t] = seq;
        for (uint32_t s = 0; s < kv->n_store; s++) {
            const struct kv_store *st = &kv->store[s];
            int32_t *c = h + IDX_STORE(s) * nb;
            const int32_t lo = st->window ? MAX(0, pos - (int32_t)st->window + 1) : 0;
            const size_t cell = kv_cell(st, seq, pos);
            c[t] = (int32_t)cell;
            c[nb + t] = (int32_t)(st->ring ? cell + st->n_cells : cell);
            c[2 * nb + t] = (int32_t)kv_cell(st, seq, lo);
            c[3 * nb + t] = pos + 1 - lo;
        }
        if (b->want_logits ? b->want_logits[i] : i == b->n_tok - 1) h[IDX_WANT * nb + n_out++] = t;
    }
    g->n_out = n_out;
    return kern_cuda_buf_upload(g->act, gpu_act_off(g, g->idx), h, IDX_ARGMAX * nb * sizeof *h);
}

struct exec *gpu_exec(struct engine_context *ctx) {
    return &ctx->gpu->exec;
}

int gpu_step_begin(struct engine_context *ctx, const struct engine_batch *b, int32_t t0, int32_t n,
                   int32_t *ret_n_out, struct err_detail *d) {
    struct gpu *g = ctx->gpu;
    const struct engine_hparams *hp = &ctx->model->hp;
    const int64_t dim = hp->n_embd, P = hp->n_embd_per_layer;
    g->exec.err = 0;
    int r = upload_index(ctx, g, b, t0, n);
    /* the step updates its sequences' recurrent state on the GPU: a host write since the
     * last step (a clear, a restored blob) goes up first (engine/kv-cache.h kv_rs_mem) */
    for (int32_t t = 0; r == 0 && g->n_rs_here && t < n; t++)
        r = kv_rs_dev_step(&ctx->kv, b->seq ? b->seq[t0 + t] : 0);
    if (r == 0)
        r = kern_cuda_buf_upload(g->act, gpu_act_off(g, g->x), ctx->x,
                                 (size_t)(n * dim) * sizeof(float));
    if (r == 0 && P > 0) { /* the per-layer inputs, layer-major: ple_il is (n, P) */
        const int64_t LP = (int64_t)hp->n_layer * P;
        for (uint32_t il = g->l0; il < hp->n_layer; il++)
            for (int32_t t = 0; t < n; t++)
                memcpy(g->h_ple + ((size_t)il * n + t) * P, ctx->ple + t * LP + il * P,
                       (size_t)P * sizeof(float));
        size_t skip = (size_t)g->l0 * n * P;
        r = kern_cuda_buf_upload(g->act, gpu_act_off(g, g->ple) + skip * sizeof(float),
                                 g->h_ple + skip,
                                 (size_t)(hp->n_layer - g->l0) * n * P * sizeof(float));
    }
    if (r < 0)
        return err_set(d, r, "device %s (%s): a step of %d tokens failed", g->name, g->dev_name, n);
    *ret_n_out = g->n_out;
    return 0;
}

/* Decode steps of one token with one row of logits are alike but for the token, its
 * position and its cells, which the replay reads from device memory: the first is
 * recorded, the later ones replay it in one launch. */
enum gpu_graph gpu_graph_begin(struct engine_context *ctx, int32_t n, int32_t n_out) {
    struct gpu *g = ctx->gpu;
    /* (experts on the host: each MoE layer waits for its rows, which no graph can hold) */
    if (n != 1 || n_out != 1 || g->exec.err || g->moe_host) return GPU_GRAPH_NONE;
    if (g->graph) {
        check(&g->exec, kern_cuda_graph_launch(g->cu, g->graph));
        return GPU_GRAPH_REPLAYED;
    }
    int r = kern_cuda_graph_begin(g->cu);
    if (r < 0) return GPU_GRAPH_NONE; /* the step runs as it is */
    return GPU_GRAPH_RECORDING;
}

void gpu_graph_end(struct engine_context *ctx) {
    struct gpu *g = ctx->gpu;
    struct kern_cuda_graph *graph = NULL;
    int r = kern_cuda_graph_end(g->cu, &graph);
    if (r < 0 || g->exec.err) {
        kern_cuda_graph_free(graph);
        check(&g->exec, r);
        return;
    }
    g->graph = graph;
    /* the recording ran nothing: this step runs by its replay */
    check(&g->exec, kern_cuda_graph_launch(g->cu, g->graph));
}

int gpu_step_end(struct engine_context *ctx, float *logits, int32_t n, int32_t n_out,
                 int32_t *argmax, struct err_detail *d) {
    struct gpu *g = ctx->gpu;
    struct exec *e = &g->exec;
    const struct engine_hparams *hp = &ctx->model->hp;
    const size_t nb = ctx->params.n_batch;
    if (n_out > 0 && argmax) {
        int32_t *ids = g->idx + IDX_ARGMAX * nb;
        if (!e->err) check(e, kern_cuda_argmax(g->cu, ids, g->logits, hp->n_vocab, n_out));
        if (!e->err)
            check(e, kern_cuda_buf_download(g->act, gpu_act_off(g, ids), argmax,
                                            (size_t)n_out * sizeof *ids));
    } else if (n_out > 0 && !e->err) {
        check(e, kern_cuda_buf_download(g->act, gpu_act_off(g, g->logits), logits,
                                        (size_t)n_out * hp->n_vocab * sizeof(float)));
    }
    check(e, kern_cuda_ctx_sync(g->cu));
    if (e->err < 0)
        return err_set(d, e->err, "device %s (%s): a step of %d tokens failed", g->name,
                       g->dev_name, n);
    return 0;
}

void gpu_part_begin(struct engine_context *ctx, struct device *dv, const struct engine_batch *b,
                    int32_t t0, int32_t n) {
    struct gpu *g = dv->gpu;
    g->exec.err = 0;
    check(&g->exec, upload_index(ctx, g, b, t0, n));
}

#else
typedef int exec_cuda_unused; /* ISO C: a translation unit is not empty */
#endif /* WARM_CUDA */
