/* The CPU's ops (engine/exec.h): kernels/ on the device's thread pool, host memory. */
#include "engine/exec-cpu.h"

#include "engine/forward.h"
#include "engine/moe.h"
#include "kernels/deltanet.h"

#include <math.h>
#include <string.h>

/* Multiply-adds below which a step runs on the calling thread: waking the workers costs
 * microseconds (milliseconds when the machine is busy), a tiny model's matmul less. */
#define POOL_MIN_WORK (1 << 16)

static struct exec_cpu *cpu_of(struct exec *e) { return (struct exec_cpu *)e; }

/* Runs fn on the pool, or on the calling thread alone when the work (in multiply-adds)
 * is smaller than waking the workers costs. */
static void pool_run(struct kern_pool *pool, kern_task_fn fn, void *arg, int64_t work) {
    if (pool && work >= POOL_MIN_WORK)
        kern_pool_run(pool, fn, arg);
    else
        fn(arg, 0, 1);
}

static int32_t batch_seq(const struct engine_batch *b, int32_t i) { return b->seq ? b->seq[i] : 0; }

static void cpu_matmul(struct exec *e, float *y, const struct engine_weight *w, const float *x,
                       int64_t n) {
    struct exec_cpu *c = cpu_of(e);
    bool big = w->n_in * w->n_out * n >= POOL_MIN_WORK;
    kern_matmul_layout(big ? c->pool : NULL, y, w->data, w->type, w->layout, x, w->n_in, w->n_out,
                       n, c->mm_scratch);
}

static void cpu_matmul_many(struct exec *e, int n_mat, float *const *ys,
                            const struct engine_weight *const *ws, const float *x, int64_t n) {
    struct exec_cpu *c = cpu_of(e);
    struct kern_mm_out outs[KERN_MM_MANY_MAX];
    int64_t work = 0;
    assert(n_mat <= KERN_MM_MANY_MAX);
    for (int i = 0; i < n_mat; i++) {
        assert(ws[i]->n_in == ws[0]->n_in);
        outs[i] = (struct kern_mm_out){.y = ys[i], .w = ws[i]->data, .wt = ws[i]->type,
                                       .layout = ws[i]->layout, .n_out = ws[i]->n_out};
        work += ws[i]->n_in * ws[i]->n_out * n;
    }
    kern_matmul_many(work >= POOL_MIN_WORK ? c->pool : NULL, outs, n_mat, x, ws[0]->n_in, n,
                     c->mm_scratch);
}

static void cpu_add(struct exec *e, float *y, const float *x, int64_t width, int64_t n_rows,
                    int64_t n_rows_x) {
    (void)e;
    if (n_rows_x == n_rows) {
        kern_add(y, x, width * n_rows);
        return;
    }
    for (int64_t r = 0; r < n_rows; r++) kern_add(y + r * width, x + (r % n_rows_x) * width, width);
}

static void cpu_rmsnorm(struct exec *e, float *y, const float *x, const struct engine_weight *w,
                        int64_t width, int64_t n_rows, float eps) {
    (void)e;
    const float *wd = w ? w->data : NULL;
    for (int64_t r = 0; r < n_rows; r++) kern_rmsnorm(y + r * width, x + r * width, wd, width, eps);
}

static void cpu_layernorm(struct exec *e, float *y, const float *x, const struct engine_weight *w,
                          const struct engine_weight *b, int64_t width, int64_t n_rows,
                          float eps) {
    (void)e;
    const float *wd = w ? w->data : NULL, *bd = b ? b->data : NULL;
    for (int64_t r = 0; r < n_rows; r++)
        kern_layernorm(y + r * width, x + r * width, wd, bd, width, eps);
}

static void cpu_gelu(struct exec *e, float *y, const float *x, int64_t n) {
    (void)e;
    kern_gelu(y, x, n);
}

/* y = act(g) * u over n values */
static void glu_range(float *y, const float *g, const float *u, int64_t n,
                      enum engine_ffn_act act) {
    if (act == ENGINE_FFN_GELU)
        kern_gelu_mul(y, g, u, n);
    else if (act == ENGINE_FFN_SWIGLU_OAI)
        kern_swiglu_oai(y, g, u, n, 1.702f, 7.0f); /* gpt-oss's constants, as ggml's */
    else
        kern_silu_mul(y, g, u, n);
}

/* The gated activation y = act(g) * u over n values, cut into ranges for the pool. */
struct glu_args {
    float *y;
    const float *g, *u;
    int64_t n;
    enum engine_ffn_act act;
};

static void glu_task(void *arg, int ith, int nth) {
    const struct glu_args *a = arg;
    const int64_t i0 = a->n * ith / nth / 8 * 8,
                  i1 = ith + 1 == nth ? a->n : a->n * (ith + 1) / nth / 8 * 8;
    glu_range(a->y + i0, a->g + i0, a->u + i0, i1 - i0, a->act);
}

static void cpu_glu(struct exec *e, float *y, const float *g, const float *u, int64_t n,
                    enum engine_ffn_act act) {
    struct glu_args a = {.y = y, .g = g, .u = u, .n = n, .act = act};
    pool_run(cpu_of(e)->pool, glu_task, &a, n * 16); /* an exp is some 16 multiply-adds */
}

/* ctx->ple is (n, n_layer × P): token t's inputs of layer il at t × LP + il × P */
static void cpu_ple_gate(struct exec *e, float *g, int il, int32_t n) {
    const struct engine_context *ctx = e->ctx;
    const int64_t P = ctx->model->hp.n_embd_per_layer, LP = (int64_t)ctx->model->hp.n_layer * P;
    kern_gelu(g, g, n * P);
    for (int32_t t = 0; t < n; t++) {
        float *gt = g + t * P;
        const float *in = ctx->ple + t * LP + il * P;
        for (int64_t i = 0; i < P; i++) gt[i] *= in[i];
    }
}

static void cpu_scale(struct exec *e, float *x, int64_t n, float v) {
    (void)e;
    kern_scale(x, n, v);
}

static void cpu_copy(struct exec *e, float *dst, const float *src, int64_t n) {
    (void)e;
    memcpy(dst, src, (size_t)n * sizeof *dst);
}

/* the angles of each token's position were computed once a step: ctx->rope_cs[kind] */
static void cpu_rope(struct exec *e, const struct layer_step *s, float *x, int64_t n_head,
                     int64_t hd, int kind) {
    const struct engine_context *ctx = e->ctx;
    const struct kern_rope_params *rope = &ctx->rope[kind];
    for (int32_t t = 0; t < s->n; t++)
        kern_rope_apply(x + t * n_head * hd, ctx->rope_cs[kind] + t * rope->n_dims, n_head, hd,
                        rope);
}

static void cpu_hadamard(struct exec *e, float *x, int64_t n, int n_rot) {
    (void)e;
    kern_hadamard(x, n, n_rot);
}

static void cpu_kv_write(struct exec *e, const struct layer_step *s, float *k, float *v) {
    struct kv_cache *kv = &e->ctx->kv;
    const int il = s->il;
    const struct dev_layer *dl = &e->layer[il];
    const struct kv_store *st = kv_store_of(kv, il);
    const int64_t k_dim = dl->n_kv * st->head_dim_k, v_dim = dl->n_kv * st->head_dim_v;
    const int rot_k = kv_rot_k(kv, il), rot_v = kv_rot_v(kv, il);
    if (rot_k) kern_hadamard(k, s->n * k_dim, rot_k);
    if (rot_v) kern_hadamard(v, s->n * v_dim, rot_v);
    for (int32_t t = 0; t < s->n; t++)
        kv_put_heads(kv, il, batch_seq(s->b, s->t0 + t), s->b->pos[s->t0 + t], dl->kv0, dl->n_kv,
                     k + t * k_dim, v + t * v_dim);
}

struct attend_args {
    struct exec_cpu *c;
    const struct layer_step *s;
    float *att;
    const float *q;
    bool bidir; /* attend_bidir */
};

/* The cells [*lo, *hi) a token at pos sees: causal, up to pos, the last `window` of them
 * on an SWA layer (window 0: all); bidirectional, every cell of the sequence the step
 * wrote (end: one past its last position), within window / 2 of pos on both sides. */
static void cells_seen(bool bidir, int32_t window, int32_t pos, int32_t end, int32_t *lo,
                       int32_t *hi) {
    if (!bidir) {
        *lo = window ? MAX(0, pos - window + 1) : 0;
        *hi = pos + 1;
    } else {
        *lo = window ? MAX(0, pos - window / 2) : 0;
        *hi = window ? MIN(end, pos + window / 2 + 1) : end;
    }
}

/* Multi-head attention of the step's tokens over their sequences' cached cells, for the
 * device's KV heads and the query heads that read them:
 * att[t][h] = softmax(scale · q[t][h] · K[lo..hi)ᵀ) · V[lo..hi), [lo, hi) = cells_seen()
 * (causal: lo = 0 on global layers and pos - W + 1 (at least 0) on sliding-window layers,
 * hi = pos + 1; bidirectional: the whole sequence, or pos ± W/2). Work items are (KV head,
 * block of ATTN_BLOCK tokens) dealt round-robin to the threads. An item covers the
 * `group` query heads that share the KV head (GQA: head h reads KV head h / group) for
 * every token of the block, run by run of tokens of one sequence, so each cached row is
 * read once per item. Sizes, store and window are those of the KV the layer reads
 * (kv_source). */
static void attend_task(void *arg, int ith, int nth) {
    const struct attend_args *a = arg;
    const struct engine_context *ctx = a->c->e.ctx;
    const struct engine_batch *b = a->s->b;
    const int32_t t0 = a->s->t0, n = a->s->n, il = a->s->il;
    const struct engine_hparams *hp = &ctx->model->hp;
    const struct kv_cache *kv = &ctx->kv;
    const struct kv_store *st = kv_store_of(kv, il);
    const struct dev_layer *dl = &a->c->e.layer[il];
    const int64_t n_head_kv = dl->n_kv, hd_k = st->head_dim_k, hd_v = st->head_dim_v;
    const int64_t group = hp->n_head / st->n_head_kv; /* query heads per KV head */
    const int64_t q_dim = n_head_kv * group * hd_k, att_dim = n_head_kv * group * hd_v;
    const float scale = hp->attn_scale > 0 ? hp->attn_scale : 1.0f / sqrtf((float)hd_k);
    const int32_t window = (int32_t)st->window;
    float *scratch = a->c->attn_scratch + (size_t)ith * a->c->attn_scratch_floats;
    const int64_t n_blocks = (n + ATTN_BLOCK - 1) / ATTN_BLOCK;

    for (int64_t item = ith; item < n_blocks * n_head_kv; item += nth) {
        int64_t h = item % n_head_kv, h_kv = dl->kv0 + h; /* its head, the cache's head */
        int32_t t_end = (int32_t)MIN((int64_t)n, (item / n_head_kv + 1) * ATTN_BLOCK);
        for (int32_t t = (int32_t)(item / n_head_kv * ATTN_BLOCK), t1; t < t_end; t = t1) {
            /* the run [t, t1) of tokens of one sequence; token i sees cells lo_i..pos_i,
             * counted from the run's first visible cell p_lo */
            int32_t seq = batch_seq(b, t0 + t), n_kv[ATTN_BLOCK], kv_lo[ATTN_BLOCK];
            const int32_t end = a->bidir ? ctx->seq_next[seq] : 0;
            int32_t p_lo, lo, hi;
            cells_seen(a->bidir, window, b->pos[t0 + t], end, &p_lo, &hi);
            for (t1 = t; t1 < t_end && batch_seq(b, t0 + t1) == seq; t1++) {
                cells_seen(a->bidir, window, b->pos[t0 + t1], end, &lo, &hi);
                n_kv[t1 - t] = hi - p_lo;
                kv_lo[t1 - t] = lo - p_lo;
            }
            /* this KV head's slice of cell p_lo; the rows that follow are contiguous (a
             * ring mirrors them) and *_row_bytes apart */
            const char *k0 =
                (const char *)kv_k_row(kv, il, seq, p_lo) + kern_row_size(kv->type_k, h_kv * hd_k);
            const char *v0 =
                (const char *)kv_v_row(kv, il, seq, p_lo) + kern_row_size(kv->type_v, h_kv * hd_v);
            const float *q = a->q + t * q_dim + h * group * hd_k; /* (run, group, hd_k) */
            float *out = a->att + t * att_dim + h * group * hd_v; /* (run, group, hd_v) */
            /* gpt-oss's attention sinks (notes/hybrid.md §C.3), a logit per query head in
             * the softmax's denominator (whole on every device: head h_kv · group + g's) */
            const float *sinks = dl->w.attn_sinks.data;
            kern_attn_head_window(out, att_dim, q, q_dim, t1 - t, group, window ? kv_lo : NULL,
                                  n_kv, k0, kv->type_k, st->k_row_bytes, v0, kv->type_v,
                                  st->v_row_bytes, hd_k, hd_v, scale,
                                  sinks ? sinks + h_kv * group : NULL, scratch);
        }
    }
}

static void cpu_attend(struct exec *e, const struct layer_step *s, float *att, const float *q) {
    struct attend_args a = {.c = cpu_of(e), .s = s, .att = att, .q = q};
    pool_run(cpu_of(e)->pool, attend_task, &a, s->attn_work);
}

static void cpu_attend_bidir(struct exec *e, const struct layer_step *s, float *att,
                             const float *q) {
    struct attend_args a = {.c = cpu_of(e), .s = s, .att = att, .q = q, .bidir = true};
    pool_run(cpu_of(e)->pool, attend_task, &a, s->attn_work);
}

static void cpu_gather(struct exec *e, const struct layer_step *s, float *y, const float *x,
                       int32_t *ret_n_out) {
    const struct engine_batch *b = s->b;
    const int64_t dim = e->ctx->model->hp.n_embd;
    int32_t n_out = 0;
    for (int32_t t = 0; t < s->n; t++) {
        const int32_t i = s->t0 + t;
        if (b->want_logits ? b->want_logits[i] : i == b->n_tok - 1)
            memcpy(y + (size_t)n_out++ * dim, x + t * dim, (size_t)dim * sizeof *y);
    }
    *ret_n_out = n_out;
}

static void cpu_unzip(struct exec *e, float *y0, float *y1, const float *x, int64_t n_rows,
                      int64_t w0, int64_t w1) {
    (void)e;
    for (int64_t r = 0; r < n_rows; r++) {
        memcpy(y0 + r * w0, x + r * (w0 + w1), (size_t)w0 * sizeof *y0);
        memcpy(y1 + r * w1, x + r * (w0 + w1) + w0, (size_t)w1 * sizeof *y1);
    }
}

static void cpu_sigmoid_mul(struct exec *e, float *x, const float *g, int64_t n) {
    (void)e;
    for (int64_t i = 0; i < n; i++) x[i] *= 1.0f / (1.0f + expf(-g[i]));
}

/* ---- Gated DeltaNet ------------------------------------------------------------------
 * A step's tokens come as runs of one sequence (sequences may interleave in a batch, each
 * in position order): each run is folded into its sequence's state in batch order, so a
 * sequence's later run starts from the state its earlier run left. */

/* The end of the run of tokens of one sequence that starts at token t of the step. */
static int32_t seq_run_end(const struct layer_step *s, int32_t t) {
    const int32_t seq = batch_seq(s->b, s->t0 + t);
    int32_t t1 = t + 1;
    while (t1 < s->n && batch_seq(s->b, s->t0 + t1) == seq) t1++;
    return t1;
}

static void cpu_dn_gates(struct exec *e, float *a, float *b, const struct engine_weight *dt_bias,
                         const struct engine_weight *ssm_a, int64_t n, int64_t n_head) {
    (void)e;
    kern_dn_gates(a, b, a, b, dt_bias->data, ssm_a->data, n, n_head);
}

struct dn_args {
    struct exec_cpu *c;
    const struct layer_step *s;
    float *o, *qkv;
    const float *g, *beta;
};

/* the conv over the device's channels [c0, c1) of this thread, run by run */
static void dn_conv_task(void *arg, int ith, int nth) {
    const struct dn_args *a = arg;
    const struct kv_cache *kv = &a->c->e.ctx->kv;
    const struct layer_step *s = a->s;
    const int64_t C = a->c->e.layer[s->il].n_dchan;
    const int64_t c0 = C * ith / nth, c1 = C * (ith + 1) / nth;
    for (int32_t t = 0, t1; t < s->n; t = t1) {
        t1 = seq_run_end(s, t);
        float *x = a->qkv + (size_t)t * C;
        device_dn_conv(a->c->e.impl, s->il, x, kv_rs_conv(kv, s->il, batch_seq(s->b, s->t0 + t)),
                       x, t1 - t, c0, c1);
    }
}

static void cpu_dn_conv(struct exec *e, const struct layer_step *s, float *qkv) {
    struct dn_args a = {.c = cpu_of(e), .s = s, .qkv = qkv};
    const struct kv_rstate *rs = &e->ctx->kv.rs;
    pool_run(cpu_of(e)->pool, dn_conv_task, &a, s->n * e->layer[s->il].n_dchan * rs->n_kernel);
}

/* the delta rule for the device's value heads [h0, h1) of this thread, run by run */
static void dn_delta_task(void *arg, int ith, int nth) {
    const struct dn_args *a = arg;
    const struct kv_cache *kv = &a->c->e.ctx->kv;
    const struct layer_step *s = a->s;
    const struct kern_dn_shape *p = &a->c->e.layer[s->il].dn; /* its heads' */
    const int64_t C = a->c->e.layer[s->il].n_dchan, key_dim = p->n_head_k * p->head_dim_k;
    const int64_t inner = p->n_head_v * p->head_dim_v;
    const int64_t h0 = p->n_head_v * ith / nth, h1 = p->n_head_v * (ith + 1) / nth;
    void *scratch = (char *)a->c->dn_scratch + (size_t)ith * a->c->dn_scratch_bytes;
    if (h0 == h1) return;
    for (int32_t t = 0, t1; t < s->n; t = t1) {
        t1 = seq_run_end(s, t);
        const float *q = a->qkv + (size_t)t * C;
        const struct kern_dn_seq sq = {
            .n_tok = t1 - t,
            .q = q, .q_stride = C,
            .k = q + key_dim, .k_stride = C,
            .v = q + 2 * key_dim, .v_stride = C,
            .g = a->g + (size_t)t * p->n_head_v,
            .beta = a->beta + (size_t)t * p->n_head_v,
            .o = a->o + (size_t)t * inner, .o_stride = inner,
        };
        device_dn_delta(a->c->e.impl, s->il, kv_rs_ssm(kv, s->il, batch_seq(s->b, s->t0 + t)), &sq,
                        h0, h1, scratch);
    }
}

static void cpu_dn_delta(struct exec *e, const struct layer_step *s, float *o, const float *qkv,
                         const float *g, const float *beta) {
    struct dn_args a = {.c = cpu_of(e), .s = s, .o = o, .qkv = (float *)qkv, .g = g,
                        .beta = beta};
    const struct kern_dn_shape *p = &e->layer[s->il].dn;
    pool_run(cpu_of(e)->pool, dn_delta_task, &a,
             s->n * p->n_head_v * p->head_dim_v * p->head_dim_k * 4);
}

static void cpu_dn_gated_norm(struct exec *e, float *y, const float *x, const float *z,
                              const struct engine_weight *w, int64_t n_rows, int64_t width,
                              float eps) {
    (void)e;
    kern_dn_gated_norm(y, x, z, w->data, n_rows, 1, width, 0, 1, eps);
}

/* ---- mixture of experts ----------------------------------------------------------------
 * The routing and the grouped tokens live in the device's scratch (e->impl: the host's
 * executor is device 0's). */

static void cpu_moe_route(struct exec *e, const float *logits, int32_t n) {
    struct device *dv = e->impl;
    const struct moe_route_params p = moe_route_params_of(&e->ctx->model->hp);
    for (int32_t t = 0; t < n; t++)
        moe_route_token(dv->moe_sel + (size_t)t * p.n_used, dv->moe_wt + (size_t)t * p.n_used,
                        logits + (size_t)t * p.n_expert, &p);
}

/* Groups the step's (token, slot) pairs by expert, a counting sort that keeps batch order
 * within an expert: expert x's pairs are moe_list[count[x], count[x + 1]), each the index
 * t · n_used + slot into moe_sel / moe_wt. */
static void moe_group(struct device *dv, int32_t n, int32_t n_used, int32_t n_expert) {
    int32_t *count = dv->moe_count;
    memset(count, 0, (size_t)(n_expert + 1) * sizeof *count);
    for (int32_t i = 0; i < n * n_used; i++) count[dv->moe_sel[i] + 1]++;
    for (int32_t x = 0; x < n_expert; x++) count[x + 1] += count[x];
    /* fill from the starts, then shift back: count[x] ends at expert x + 1's start */
    for (int32_t i = 0; i < n * n_used; i++) dv->moe_list[count[dv->moe_sel[i]]++] = i;
    for (int32_t x = n_expert; x > 0; x--) count[x] = count[x - 1];
    count[0] = 0;
}

/* A few tokens' experts in two passes of the threads, each thread over its share of the
 * rows of every selected expert (pool wake-ups: two, not three per expert):
 *   pass 0: h (pair, n_fe) = act(W_gate_e · x_t) ⊙ (W_up_e · x_t), thread ith its units;
 *   pass 1: acc[t] = Σ_slots w · W_down_e · h, thread ith its output rows, a token's
 *           experts added in expert order (as the grouped path adds them).
 * Each product is one row range's, so the bits do not depend on the threads. */
struct moe_few_args {
    struct device *dv;
    const struct dev_layer *dl;
    const float *in;
    int32_t n, n_used;
    int64_t dim;
    enum engine_ffn_act act;
    int pass;
};

/* expert x's output scale (gemma4's ffn_down_exps.scale; 1 without), folded into its
 * routing weight: the down product is linear */
static float expert_scale(const struct engine_layer *w, int32_t x) {
    return w->exp_down_scale.data ? ((const float *)w->exp_down_scale.data)[x] : 1.0f;
}

static void moe_few_task(void *arg, int ith, int nth) {
    const struct moe_few_args *a = arg;
    struct device *dv = a->dv;
    const struct engine_layer *w = &a->dl->w;
    float *row = (float *)((char *)dv->moe_few + (size_t)ith * dv->moe_few_bytes);
    void *mine = (char *)row + ((size_t)a->dim * sizeof *row + 63) / 64 * 64; /* scratch */
    /* (whole groups of 8 rows: a repacked expert's rows8 groups are not cut) */
    const int64_t n_fe = a->dl->n_fe, rows = a->pass == 0 ? n_fe : a->dim;
    const int64_t r0 = rows * ith / nth / 8 * 8,
                  r1 = ith + 1 == nth ? rows : rows * (ith + 1) / nth / 8 * 8;
    if (r0 == r1) return;
    for (int32_t t = 0; t < a->n; t++) {
        /* the token's slots in expert order */
        int32_t slot[ENGINE_MAX_EXPERTS], k = a->n_used;
        for (int32_t j = 0; j < k; j++) {
            int32_t q = j;
            for (; q > 0 && dv->moe_sel[t * k + slot[q - 1]] > dv->moe_sel[t * k + j]; q--)
                slot[q] = slot[q - 1];
            slot[q] = j;
        }
        float *acc = dv->moe_acc + (size_t)t * a->dim;
        if (a->pass == 1) memset(acc + r0, 0, (size_t)(r1 - r0) * sizeof *acc);
        for (int32_t j = 0; j < k; j++) {
            const int32_t i = t * k + slot[j], x = dv->moe_sel[i];
            float *h = dv->moe_h + (size_t)i * n_fe;
            if (a->pass == 0) {
                const struct engine_weight g = engine_weight_expert(&w->exp_gate, x),
                                           u = engine_weight_expert(&w->exp_up, x);
                const float *xt = a->in + (size_t)t * a->dim;
                float *h2 = dv->moe_h2 + (size_t)i * n_fe;
                kern_matmul_layout(NULL, h + r0, (const char *)g.data + (size_t)r0 * g.row_bytes,
                                   g.type, g.layout, xt, g.n_in, r1 - r0, 1, mine);
                kern_matmul_layout(NULL, h2 + r0, (const char *)u.data + (size_t)r0 * u.row_bytes,
                                   u.type, u.layout, xt, u.n_in, r1 - r0, 1, mine);
                if (w->exp_gate_b.data) { /* gpt-oss: its units' biases, before the act */
                    const int64_t b0 = x * w->exp_gate_b.n_in + a->dl->fe0 + r0;
                    kern_add(h + r0, (const float *)w->exp_gate_b.data + b0, r1 - r0);
                    kern_add(h2 + r0, (const float *)w->exp_up_b.data + b0, r1 - r0);
                }
                glu_range(h + r0, h + r0, h2 + r0, r1 - r0, a->act);
            } else {
                const struct engine_weight dn = engine_weight_expert(&w->exp_down, x);
                kern_matmul_layout(NULL, row, (const char *)dn.data + (size_t)r0 * dn.row_bytes,
                                   dn.type, dn.layout, h, dn.n_in, r1 - r0, 1, mine);
                /* the down bias once: by the share of the first units */
                if (w->exp_down_b.data && a->dl->fe0 == 0)
                    kern_add(row, (const float *)w->exp_down_b.data + x * a->dim + r0, r1 - r0);
                const float wt = dv->moe_wt[i] * expert_scale(w, x);
                for (int64_t r = 0; r < r1 - r0; r++) acc[r0 + r] += wt * row[r];
            }
        }
    }
}

/* Each selected expert once: its tokens' rows gathered, its gate and up rows (the
 * device's units) over them, the activation, its down columns, the weighted rows added
 * to their tokens' output. A token's experts are summed in expert order. A step of a few
 * tokens runs moe_few_task instead. */
static void cpu_moe_experts(struct exec *e, const struct layer_step *s, float *out,
                            const float *in) {
    struct device *dv = e->impl;
    const struct engine_hparams *hp = &e->ctx->model->hp;
    const struct dev_layer *dl = &e->layer[s->il];
    const int64_t dim = hp->n_embd;
    const int32_t n = s->n, n_used = (int32_t)hp->n_expert_used, n_expert = (int32_t)hp->n_expert;
    float *acc = dv->moe_acc; /* (out may be in: written at the end) */
    if (n <= MOE_FEW_TOKENS && dl->n_fe > 0) {
        struct moe_few_args a = {.dv = dv, .dl = dl, .in = in, .n = n, .n_used = n_used,
                                 .dim = dim, .act = hp->ffn_act};
        const int64_t work = (int64_t)n * n_used * dl->n_fe * dim;
        pool_run(cpu_of(e)->pool, moe_few_task, &a, 2 * work);
        a.pass = 1;
        pool_run(cpu_of(e)->pool, moe_few_task, &a, work);
        memcpy(out, acc, (size_t)n * dim * sizeof *out);
        return;
    }
    memset(acc, 0, (size_t)n * dim * sizeof *acc);
    moe_group(dv, n, n_used, n_expert);
    for (int32_t x = 0; x < n_expert; x++) {
        const int32_t *list = dv->moe_list + dv->moe_count[x];
        const int32_t m = dv->moe_count[x + 1] - dv->moe_count[x];
        if (m == 0 || dl->n_fe == 0) continue;
        for (int32_t j = 0; j < m; j++)
            memcpy(dv->moe_x + (size_t)j * dim, in + (size_t)(list[j] / n_used) * dim,
                   (size_t)dim * sizeof *in);
        const struct engine_weight gate = engine_weight_expert(&dl->w.exp_gate, x),
                                   up = engine_weight_expert(&dl->w.exp_up, x),
                                   down = engine_weight_expert(&dl->w.exp_down, x);
        /* gate and up: one activation conversion, one hand-off to the threads */
        const struct engine_weight *gu[2] = {&gate, &up};
        float *const hs[2] = {dv->moe_h, dv->moe_h2};
        cpu_matmul_many(e, 2, hs, gu, dv->moe_x, m);
        if (dl->w.exp_gate_b.data) { /* gpt-oss: its units' biases, before the activation */
            const int64_t b0 = x * dl->w.exp_gate_b.n_in + dl->fe0;
            for (int32_t j = 0; j < m; j++) {
                kern_add(dv->moe_h + (size_t)j * dl->n_fe,
                         (const float *)dl->w.exp_gate_b.data + b0, dl->n_fe);
                kern_add(dv->moe_h2 + (size_t)j * dl->n_fe,
                         (const float *)dl->w.exp_up_b.data + b0, dl->n_fe);
            }
        }
        cpu_glu(e, dv->moe_h, dv->moe_h, dv->moe_h2, m * dl->n_fe, hp->ffn_act);
        cpu_matmul(e, dv->moe_y, &down, dv->moe_h, m);
        if (dl->w.exp_down_b.data && dl->fe0 == 0) /* once: by the share of the first units */
            cpu_add(e, dv->moe_y, (const float *)dl->w.exp_down_b.data + x * dim, dim, m, 1);
        for (int32_t j = 0; j < m; j++) {
            float *y = acc + (size_t)(list[j] / n_used) * dim;
            const float *r = dv->moe_y + (size_t)j * dim,
                        w = dv->moe_wt[list[j]] * expert_scale(&dl->w, x);
            for (int64_t i = 0; i < dim; i++) y[i] += w * r[i];
        }
    }
    memcpy(out, acc, (size_t)n * dim * sizeof *out);
}

static void cpu_add_gated(struct exec *e, float *y, const float *x, const float *g, int64_t width,
                          int64_t n_rows) {
    (void)e;
    for (int64_t r = 0; r < n_rows; r++) {
        const float s = 1.0f / (1.0f + expf(-g[r]));
        for (int64_t i = 0; i < width; i++) y[r * width + i] += s * x[r * width + i];
    }
}

static const float *cpu_input(struct exec *e, const float *x, int64_t n) {
    (void)e, (void)n;
    return x;
}

static void cpu_output(struct exec *e, float *host, const float *y, int64_t n) {
    (void)e;
    if (host != y) memcpy(host, y, (size_t)n * sizeof *host);
}

const struct exec_ops exec_cpu_ops = {
    .matmul = cpu_matmul,
    .matmul_many = cpu_matmul_many,
    .add = cpu_add,
    .rmsnorm = cpu_rmsnorm,
    .layernorm = cpu_layernorm,
    .gelu = cpu_gelu,
    .glu = cpu_glu,
    .ple_gate = cpu_ple_gate,
    .scale = cpu_scale,
    .copy = cpu_copy,
    .rope = cpu_rope,
    .hadamard = cpu_hadamard,
    .kv_write = cpu_kv_write,
    .attend = cpu_attend,
    .attend_bidir = cpu_attend_bidir,
    .unzip = cpu_unzip,
    .sigmoid_mul = cpu_sigmoid_mul,
    .dn_gates = cpu_dn_gates,
    .dn_conv = cpu_dn_conv,
    .dn_delta = cpu_dn_delta,
    .dn_gated_norm = cpu_dn_gated_norm,
    .moe_route = cpu_moe_route,
    .moe_experts = cpu_moe_experts,
    .add_gated = cpu_add_gated,
    .gather = cpu_gather,
    .input = cpu_input,
    .output = cpu_output,
};
