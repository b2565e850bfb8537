/* The CUDA device of a context (engine/gpu.h says what runs where and why). */
#include "engine/gpu.h"

#include "engine/forward.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef WARM_CUDA

int gpu_open(struct engine_context *ctx, int index, struct err_detail *d) {
    (void)ctx;
    return err_set(d, ERR_UNSUPPORTED,
                   "device cuda:%d: this build has no CUDA backend (built "
                   "without nvcc)",
                   index);
}
const struct kv_mem *gpu_kv_mem(struct engine_context *ctx) {
    (void)ctx;
    return NULL;
}
int gpu_load(struct engine_context *ctx, struct err_detail *d) {
    (void)ctx;
    return err_set(d, ERR_UNSUPPORTED, "this build has no CUDA backend");
}
void gpu_close(struct engine_context *ctx) { (void)ctx; }
struct exec *gpu_exec(struct engine_context *ctx) {
    (void)ctx;
    return NULL;
}
int gpu_step_begin(struct engine_context *ctx, const struct engine_batch *b, int32_t t0, int32_t n,
                   int32_t *ret_n_out, struct err_detail *d) {
    (void)ctx, (void)b, (void)t0, (void)n, (void)ret_n_out;
    return err_set(d, ERR_UNSUPPORTED, "this build has no CUDA backend");
}
enum gpu_graph gpu_graph_begin(struct engine_context *ctx, int32_t n, int32_t n_out) {
    (void)ctx, (void)n, (void)n_out;
    return GPU_GRAPH_NONE;
}
void gpu_graph_end(struct engine_context *ctx) { (void)ctx; }
int gpu_step_end(struct engine_context *ctx, float *logits, int32_t n, int32_t n_out,
                 int32_t *argmax, struct err_detail *d) {
    (void)ctx, (void)logits, (void)n, (void)n_out, (void)argmax;
    return err_set(d, ERR_UNSUPPORTED, "this build has no CUDA backend");
}
void gpu_device_info(const struct engine_context *ctx, struct engine_device_info *ret) {
    (void)ctx;
    memset(ret, 0, sizeof *ret);
}
uint64_t gpu_host_expert_bytes(const struct engine_context *ctx) {
    (void)ctx;
    return 0;
}
int gpu_parts_open(struct engine_context *ctx, struct err_detail *d) {
    (void)ctx;
    return err_set(d, ERR_UNSUPPORTED,
                   "devices cuda:N: this build has no CUDA backend (built "
                   "without nvcc)");
}
const struct kv_mem *gpu_parts_kv_mem(struct engine_context *ctx) {
    (void)ctx;
    return NULL;
}
int gpu_parts_load(struct engine_context *ctx, struct err_detail *d) {
    (void)ctx;
    return err_set(d, ERR_UNSUPPORTED, "this build has no CUDA backend");
}
void gpu_parts_close(struct engine_context *ctx) { (void)ctx; }
void gpu_part_info(const struct device *dv, struct engine_device_info *ret) {
    (void)dv;
    memset(ret, 0, sizeof *ret);
}
void gpu_part_begin(struct engine_context *ctx, struct device *dv, const struct engine_batch *b,
                    int32_t t0, int32_t n) {
    (void)ctx, (void)dv, (void)b, (void)t0, (void)n;
}
#else /* WARM_CUDA */

#include "engine/arch.h"
#include "engine/gpu-impl.h"

/* ---- the KV slots of one GPU: kv_mem over whole rows ---------------------------------- */

/* rows of rb[K], rb[V] bytes for the slot (rb 0: none here) */
static int kv_bufs_new(struct gpu *g, uint32_t s, uint32_t n_slots, uint32_t slot, size_t rows,
                       const size_t rb[2], const size_t off[2]) {
    if (!g->kv[s]) {
        if (!(g->kv[s] = calloc_array(n_slots, sizeof *g->kv[s]))) return -ENOMEM;
        g->n_slots[s] = n_slots;
    }
    struct gpu_kv_slot *k = &g->kv[s][slot];
    for (int v = 0; v < 2; v++) {
        k->rb[v] = rb[v];
        k->off[v] = off[v];
        if (rb[v] == 0) continue;
        int r = kern_cuda_buf_new(g->cu, rows * rb[v], &k->buf[v]);
        if (r < 0) return r;
        g->kv_bytes += rows * rb[v];
    }
    return 0;
}

static int mem_alloc(void *ud, uint32_t s, uint32_t slot, size_t rows, void **ret_k, void **ret_v) {
    struct engine_context *ctx = ud;
    struct gpu *g = ctx->gpu;
    const struct kv_store *st = &ctx->kv.store[s];
    const size_t rb[2] = {st->k_row_bytes, st->v_row_bytes}, off[2] = {0, 0};
    int r = kv_bufs_new(g, s, st->n_layer_kv, slot, rows, rb, off);
    if (r < 0) return r;
    *ret_k = kern_cuda_buf_ptr(gpu_kv_buf(g, s, slot, false));
    *ret_v = kern_cuda_buf_ptr(gpu_kv_buf(g, s, slot, true));
    return 0;
}

static void kv_bufs_free(struct gpu *g, uint32_t s, uint32_t slot) {
    for (int v = 0; v < 2 && g->kv[s]; v++) {
        struct kern_cuda_buf **b = &g->kv[s][slot].buf[v];
        if (*b) g->kv_bytes -= kern_cuda_buf_bytes(*b);
        kern_cuda_buf_free(*b);
        *b = NULL;
    }
}

static void mem_free(void *ud, uint32_t s, uint32_t slot) {
    struct engine_context *ctx = ud;
    kv_bufs_free(ctx->gpu, s, slot);
}

static int mem_get(void *ud, uint32_t s, uint32_t slot, bool v, size_t cell, size_t n, void *dst) {
    struct engine_context *ctx = ud;
    const struct gpu *g = ctx->gpu;
    const size_t rb = gpu_kv_rb(g, s, slot, v);
    return n ? kern_cuda_buf_download(gpu_kv_buf(g, s, slot, v), cell * rb, dst, n * rb) : 0;
}

static int mem_set(void *ud, uint32_t s, uint32_t slot, bool v, size_t cell, size_t n,
                   const void *src) {
    struct engine_context *ctx = ud;
    const struct gpu *g = ctx->gpu;
    const size_t rb = gpu_kv_rb(g, s, slot, v);
    return n ? kern_cuda_buf_upload(gpu_kv_buf(g, s, slot, v), cell * rb, src, n * rb) : 0;
}

static int kv_copy_rows(struct gpu *g, uint32_t s, uint32_t slot, bool v, size_t dst, size_t src,
                        size_t n) {
    char *b = kern_cuda_buf_ptr(gpu_kv_buf(g, s, slot, v));
    const size_t rb = gpu_kv_rb(g, s, slot, v);
    return n ? kern_cuda_copy(g->cu, b + dst * rb, b + src * rb, n * rb) : 0;
}

static int mem_copy(void *ud, uint32_t s, uint32_t slot, bool v, size_t dst, size_t src, size_t n) {
    struct engine_context *ctx = ud;
    return kv_copy_rows(ctx->gpu, s, slot, v, dst, src, n);
}

/* ---- what the CUDA path runs ------------------------------------------------------- */

static bool weight_type_ok(enum kern_type t) {
    static const enum kern_type ok[] = {
        KERN_TYPE_F32,  KERN_TYPE_F16,  KERN_TYPE_BF16, KERN_TYPE_Q8_0,   KERN_TYPE_Q4_0,
        KERN_TYPE_Q4_1, KERN_TYPE_Q5_0, KERN_TYPE_Q5_1, KERN_TYPE_IQ4_NL, KERN_TYPE_Q4_K,
        KERN_TYPE_Q5_K, KERN_TYPE_Q6_K, KERN_TYPE_Q2_K, KERN_TYPE_Q3_K,   KERN_TYPE_IQ4_XS,
        KERN_TYPE_MXFP4};
    for (size_t i = 0; i < ARRAY_SIZE(ok); i++)
        if (ok[i] == t) return true;
    return false;
}

/* ERR_UNSUPPORTED naming the first thing of m that kernels/cuda does not run. */
static int model_check(const struct engine_model *m, uint32_t l0, const char *dev,
                       struct err_detail *d) {
    const struct engine_hparams *hp = &m->hp;
    /* kernels/cuda's router keeps a token's logits in shared memory and its experts in
     * registers; the experts' products take hidden widths of whole 32-value units */
    if (hp->n_expert > KERN_CUDA_MOE_MAX_EXPERTS || hp->n_expert_used > KERN_CUDA_MOE_MAX_USED)
        return err_set(d, ERR_UNSUPPORTED, "device %s: %u experts, %u a token exceed the CUDA "
                       "router's (%d experts, %d a token)", dev, hp->n_expert, hp->n_expert_used,
                       KERN_CUDA_MOE_MAX_EXPERTS, KERN_CUDA_MOE_MAX_USED);
    bool shexp = false;
    for (uint32_t il = l0; il < hp->n_layer; il++) shexp = shexp || m->layers[il].sh_down.data;
    if (hp->n_expert > 0 && (hp->n_ff_exp % 32 || (shexp && hp->n_ff_shexp % 32)))
        return err_set(d, ERR_UNSUPPORTED, "device %s: the experts' hidden width %u (shared: %u) "
                       "is not a multiple of 32", dev, hp->n_ff_exp, shexp ? hp->n_ff_shexp : 0);
    if (hp->n_embd % 32)
        return err_set(d, ERR_UNSUPPORTED, "device %s: n_embd %u is not a multiple of 32", dev,
                       hp->n_embd);
    if (hp->n_embd_per_layer % 32)
        return err_set(d, ERR_UNSUPPORTED,
                       "device %s: the per-layer embedding width %u is not a "
                       "multiple of 32",
                       dev, hp->n_embd_per_layer);
    bool rec_here = false; /* Gated DeltaNet layers on the device */
    for (uint32_t il = l0; il < hp->n_layer; il++)
        rec_here = rec_here || hp->layer[il].mixer == ENGINE_MIXER_GATED_DELTANET;
    /* kernels/cuda's delta rule: a lane holds d_k / 32 values (at most 8), a value head
     * is a grid row (at most 65535) */
    if (rec_here && (hp->ssm_head_dim_k > 256 || hp->ssm_head_dim_v > 256 ||
                     hp->ssm_n_head_v > 65535 || hp->ssm_n_kernel > KERN_DN_MAX_KERNEL))
        return err_set(d, ERR_UNSUPPORTED, "device %s: the Gated DeltaNet shape (%u key heads of "
                       "%u, %u value heads of %u, conv kernel %u) exceeds the CUDA kernels' "
                       "(heads up to 256 values, 65535 value heads, kernel up to %d)", dev,
                       hp->ssm_n_head_k, hp->ssm_head_dim_k, hp->ssm_n_head_v, hp->ssm_head_dim_v,
                       hp->ssm_n_kernel, KERN_DN_MAX_KERNEL);
    if (rec_here && (hp->ssm_n_head_v * hp->ssm_head_dim_v) % 32)
        return err_set(d, ERR_UNSUPPORTED, "device %s: the Gated DeltaNet output width %u x %u is "
                       "not a multiple of 32 (the CUDA matrix products' rows)", dev,
                       hp->ssm_n_head_v, hp->ssm_head_dim_v);
    for (uint32_t il = l0; il < hp->n_layer; il++) {
        const struct engine_layer_hparams *lh = &hp->layer[il];
        const bool rec = lh->mixer == ENGINE_MIXER_GATED_DELTANET; /* no attention */
        if (!rec && (lh->head_dim_k % 32 || lh->head_dim_v % 32 || lh->head_dim_k > 512 ||
            lh->head_dim_v > 512))
            return err_set(d, ERR_UNSUPPORTED,
                           "device %s: layer %u's head sizes %u/%u (the CUDA "
                           "attention takes multiples of 32 up to 512)",
                           dev, il, lh->head_dim_k, lh->head_dim_v);
        if (!rec &&
            (size_t)lh->n_head_kv * MAX(lh->head_dim_k, lh->head_dim_v) * sizeof(float) > 48 * 1024)
            return err_set(d, ERR_UNSUPPORTED,
                           "device %s: layer %u's KV rows of %u heads are too "
                           "wide for the CUDA KV write",
                           dev, il, lh->n_head_kv);
        for (size_t i = 0; i < engine_n_layer_specs; i++) {
            const struct tensor_spec *s = &engine_layer_specs[i];
            const struct engine_weight *w = spec_field_const(&m->layers[il], s);
            if (s->kind != KIND_VEC && w->data && !weight_type_ok(w->type))
                return err_set(d, ERR_UNSUPPORTED,
                               "device %s: layer %u's %s has %s weights, which "
                               "the CUDA kernels do not read",
                               dev, il, s->name, kern_type_traits(w->type)->name);
        }
    }
    if (!weight_type_ok(m->output.type))
        return err_set(d, ERR_UNSUPPORTED,
                       "device %s: the classifier has %s weights, which the "
                       "CUDA kernels do not read",
                       dev, kern_type_traits(m->output.type)->name);
    return 0;
}

/* A CUDA context on cuda:index named name, into *ret. */
static int gpu_new(int index, const char *name, bool part, struct gpu **ret, struct err_detail *d) {
    int n = kern_cuda_device_count(), r;
    if (n <= 0)
        return err_set(d, ERR_UNSUPPORTED,
                       "device cuda:%d: no GPU, no NVIDIA driver, or a driver "
                       "older than the CUDA runtime",
                       index);
    if (index < 0 || index >= n)
        return err_set(d, ERR_UNSUPPORTED, "device cuda:%d does not exist: %d CUDA device%s found",
                       index, n, n == 1 ? "" : "s");
    struct kern_cuda_device_info info;
    if ((r = kern_cuda_device_get_info(index, &info)) < 0)
        return err_set(d, ERR_UNSUPPORTED, "device cuda:%d cannot be queried (%s)", index,
                       strerror(-r));
    struct gpu *g = calloc(1, sizeof *g);
    if (!g) return -ENOMEM;
    g->index = index;
    g->part = part;
    snprintf(g->name, sizeof g->name, "%s", name);
    snprintf(g->dev_name, sizeof g->dev_name, "%s", info.name);
    *ret = g;
    if ((r = kern_cuda_ctx_new(index, &g->cu)) < 0)
        return err_set(d, r, "device %s (%s): cannot create a CUDA context", name, info.name);
    return 0;
}

static void gpu_free(struct gpu *g) {
    if (!g) return;
    for (uint32_t s = 0; s < KV_MAX_STORES; s++) {
        for (uint32_t i = 0; g->kv[s] && i < g->n_slots[s]; i++) kv_bufs_free(g, s, i);
        free(g->kv[s]);
    }
    for (uint32_t i = 0; i < g->n_rs; i++) {
        if (g->rs_conv) kern_cuda_buf_free(g->rs_conv[i]);
        if (g->rs_ssm) kern_cuda_buf_free(g->rs_ssm[i]);
    }
    free(g->rs_conv);
    free(g->rs_ssm);
    kern_cuda_buf_free(g->weights);
    kern_cuda_buf_free(g->act);
    kern_cuda_ctx_free(g->cu);
    kern_cuda_graph_free(g->graph);
    free(g->layer);
    free(g->whole);
    free(g->h_idx);
    free(g->h_ple);
    free(g->h_moe);
    free(g);
}

static bool is_expert_stack(const struct engine_layer *l, const struct engine_weight *w) {
    return w == &l->exp_gate || w == &l->exp_up || w == &l->exp_down;
}

static uint64_t bytes_of(const struct engine_weight *w) {
    return w->data ? (uint64_t)w->row_bytes * (uint64_t)w->n_out * (uint64_t)MAX(w->n_expert, 1) : 0;
}

/* Where the routed experts of g's layers go (engine_context_params.experts): auto keeps
 * them on the GPU when every weight fits in 90 % of its free memory (the KV cache and the
 * activations need the rest), else on the host, which then runs them. */
static int experts_place(struct engine_context *ctx, struct gpu *g, struct err_detail *d) {
    const struct engine_model *m = ctx->model;
    uint64_t exp = 0, all = bytes_of(&m->output);
    for (uint32_t il = g->l0; il < m->hp.n_layer; il++)
        for (size_t i = 0; i < engine_n_layer_specs; i++) {
            const struct engine_weight *w = spec_field_const(&m->layers[il], &engine_layer_specs[i]);
            all += bytes_of(w);
            if (is_expert_stack(&m->layers[il], w)) exp += bytes_of(w);
        }
    const enum engine_experts_place want = ctx->params.experts;
    if (exp == 0 || want == ENGINE_EXPERTS_GPU) return 0;
    if (want == ENGINE_EXPERTS_AUTO) {
        struct kern_cuda_device_info info;
        int r = kern_cuda_device_get_info(g->index, &info);
        if (r < 0)
            return err_set(d, ERR_UNSUPPORTED, "device %s cannot be queried (%s)", g->name,
                           strerror(-r));
        if (all <= info.free_bytes / 10 * 9) return 0;
    }
    g->moe_host = true;
    g->host_expert_bytes = exp;
    return 0;
}

int gpu_open(struct engine_context *ctx, int index, struct err_detail *d) {
    const struct engine_model *m = ctx->model;
    const struct engine_context_params *p = &ctx->params;
    char dev[16];
    snprintf(dev, sizeof dev, "cuda:%d", index);
    if (p->n_devices > 1 || p->split != ENGINE_SPLIT_NONE)
        return err_set(d, ERR_UNSUPPORTED,
                       "device %s: a tensor split names its devices in "
                       "`devices` (cuda:0,cuda:1 or cpu,cpu), not in `device`",
                       dev);
    const uint32_t n_layer = m->hp.n_layer;
    uint32_t l0 = p->gpu_layers && p->gpu_layers < n_layer ? n_layer - p->gpu_layers : 0;
    /* a shared-KV layer on the GPU reads its source's KV there too: the GPU starts at the
     * earliest source of its layers */
    for (bool moved = true; moved;) {
        moved = false;
        for (uint32_t il = l0; il < n_layer; il++)
            if ((uint32_t)m->hp.layer[il].kv_source < l0)
                l0 = (uint32_t)m->hp.layer[il].kv_source, moved = true;
    }
    /* the device first: "no GPU" says more than a shape it would not take */
    int r = gpu_new(index, dev, false, &ctx->gpu, d);
    if (r < 0 || (r = model_check(m, l0, dev, d)) < 0) return r;
    struct gpu *g = ctx->gpu;
    g->l0 = l0;
    if ((r = experts_place(ctx, g, d)) < 0) return r;
    g->mem = (struct kv_mem){.ud = ctx,
                             .alloc = mem_alloc,
                             .free = mem_free,
                             .get = mem_get,
                             .set = mem_set,
                             .copy = mem_copy};
    ctx->n_layer_host = l0;
    return 0;
}

const struct kv_mem *gpu_kv_mem(struct engine_context *ctx) { return &ctx->gpu->mem; }

void gpu_close(struct engine_context *ctx) {
    /* the KV slots were freed by kv_cache_done() through kv_mem; what is left is freed here */
    gpu_free(ctx->gpu);
    ctx->gpu = NULL;
}

/* ---- weights ------------------------------------------------------------------------ */

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

/* Places w at *off of the weight buffer (upload: copies it there, and *dst describes the
 * copy: its data a device address). */
static int weight_put(struct gpu *g, struct engine_weight *dst, const struct engine_weight *w,
                      size_t *off, bool upload) {
    memset(dst, 0, sizeof *dst);
    if (!w->data || w->n_out == 0 || w->n_in == 0) return 0;
    /* the CUDA kernels read the file's rows; devices_repack() keeps rows8 off GPUs */
    if (w->layout != KERN_LAYOUT_ROWS) return ERR_UNSUPPORTED;
    /* a stack of experts goes up packed, n_out rows an expert: a fused gate/up stack's
     * view skips the other half's rows between experts (engine/model.c) */
    const size_t one = w->row_bytes * (size_t)w->n_out;
    const int64_t n_mat = w->n_expert > 0 ? w->n_expert : 1;
    const size_t n = one * (size_t)n_mat;
    if (upload) {
        int r = 0;
        if (n_mat == 1 || w->expert_bytes == one)
            r = kern_cuda_buf_upload(g->weights, *off, w->data, n);
        for (int64_t e = 0; r == 0 && n_mat > 1 && w->expert_bytes != one && e < n_mat; e++)
            r = kern_cuda_buf_upload(g->weights, *off + (size_t)e * one,
                                     (const char *)w->data + (size_t)e * w->expert_bytes, one);
        if (r < 0) return r;
        *dst = *w;
        dst->data = (const char *)kern_cuda_buf_ptr(g->weights) + *off;
        if (w->n_expert > 0) dst->expert_bytes = one;
    }
    *off += align256(n);
    return 0;
}

/* Every weight the GPU reads, once to size the buffer, once to upload: the whole layers
 * from l0 on, the final norm and the classifier; a partition its slices (dv's views), as
 * the tensor specs' split column made them (engine/arch.h): its rows or columns, the whole
 * per-head norms and none of the host's weights. */
static int weights_walk(struct engine_context *ctx, struct gpu *g, const struct device *dv,
                        size_t *off, bool upload) {
    const struct engine_model *m = ctx->model;
    int r = 0;
    *off = 0;
    if (!dv) r = r ? r : weight_put(g, &g->output_norm, &m->output_norm, off, upload);
    r = r ? r : weight_put(g, &g->output, dv ? &dv->output : &m->output, off, upload);
    r = r ? r : weight_put(g, &g->rope_freqs, &m->rope_freqs, off, upload);
    for (uint32_t il = g->l0; il < m->hp.n_layer && r == 0; il++) {
        const struct dev_layer *dl = dv ? &dv->layer[il] : NULL;
        const struct engine_layer *w = dl ? &dl->w : &m->layers[il];
        struct dev_layer *gl = &g->layer[il];
        for (size_t i = 0; i < engine_n_layer_specs && r == 0; i++) {
            const struct engine_weight *src = spec_field_const(w, &engine_layer_specs[i]);
            struct engine_weight *dst = spec_field(&gl->w, &engine_layer_specs[i]);
            if (g->moe_host && is_expert_stack(w, src)) { /* the host runs them */
                memset(dst, 0, sizeof *dst);
                continue;
            }
            r = weight_put(g, dst, src, off, upload);
        }
        /* (a recurrent layer has no attention: no KV heads; all its Gated DeltaNet heads) */
        const bool rec = m->hp.layer[il].mixer == ENGINE_MIXER_GATED_DELTANET;
        const struct kv_rstate *rs = &ctx->kv.rs;
        gl->kv0 = dl ? dl->kv0 : 0;
        gl->n_kv = dl ? dl->n_kv : rec ? 0 : kv_store_of(&ctx->kv, (int)il)->n_head_kv;
        gl->ff0 = dl ? dl->ff0 : 0;
        gl->n_ff = dl ? dl->n_ff : m->hp.layer[il].n_ff;
        /* a mixture of experts: every expert's units and the shared expert's */
        const bool moe = m->hp.layer[il].ffn == ENGINE_FFN_MOE ||
                         m->hp.layer[il].ffn == ENGINE_FFN_MOE_DENSE;
        gl->fe0 = dl ? dl->fe0 : 0;
        gl->n_fe = dl ? dl->n_fe : moe ? m->hp.n_ff_exp : 0;
        gl->fs0 = dl ? dl->fs0 : 0;
        gl->n_fs = dl ? dl->n_fs : moe && w->sh_down.data ? m->hp.n_ff_shexp : 0;
        if (!dl && rec) {
            gl->dk0 = 0;
            gl->n_dk = rs->shape.n_head_k;
            gl->n_dv = rs->shape.n_head_v;
            gl->n_dchan = rs->n_chan;
            gl->dn = rs->shape;
        }
        if (g->whole) g->whole[il] = gl->w;
    }
    return r;
}

/* ---- the recurrent state of the layers it runs: kv_rs_mem ---------------------------- */

/* seq's conv and S of every recurrent layer on the GPU, to (get) or from (set) the host's
 * kv_rstate arrays */
static int rs_rows(struct engine_context *ctx, int32_t seq, bool set) {
    const struct gpu *g = ctx->gpu;
    const struct kv_rstate *rs = &ctx->kv.rs;
    const size_t cb = rs->conv_floats * sizeof(float), sb = rs->ssm_floats * sizeof(float);
    for (uint32_t i = 0; i < g->n_rs; i++) {
        if (!g->rs_ssm[i]) continue;
        float *hc = rs->conv[i] + (size_t)seq * rs->conv_floats;
        float *hs = rs->ssm[i] + (size_t)seq * rs->ssm_floats;
        int r = 0;
        if (set) {
            if (cb) r = kern_cuda_buf_upload(g->rs_conv[i], (size_t)seq * cb, hc, cb);
            if (r == 0) r = kern_cuda_buf_upload(g->rs_ssm[i], (size_t)seq * sb, hs, sb);
        } else {
            if (cb) r = kern_cuda_buf_download(g->rs_conv[i], (size_t)seq * cb, hc, cb);
            if (r == 0) r = kern_cuda_buf_download(g->rs_ssm[i], (size_t)seq * sb, hs, sb);
        }
        if (r < 0) return r;
    }
    return 0;
}

static int rs_get(void *ud, int32_t seq) { return rs_rows(ud, seq, false); }
static int rs_set(void *ud, int32_t seq) { return rs_rows(ud, seq, true); }

/* The zeroed device state of the recurrent layers from l0 on (the host's is all zero
 * too: both sides agree), and the hook that keeps the host's in step with it. */
static int rs_setup(struct engine_context *ctx, struct gpu *g, struct err_detail *d) {
    struct kv_rstate *rs = &ctx->kv.rs;
    const uint32_t n_seq = ctx->kv.n_seq;
    if (rs->n_layer_rs == 0) return 0;
    g->rs_conv = calloc_array(rs->n_layer_rs, sizeof *g->rs_conv);
    g->rs_ssm = calloc_array(rs->n_layer_rs, sizeof *g->rs_ssm);
    if (!g->rs_conv || !g->rs_ssm) return err_set(d, -ENOMEM, "cannot allocate the GPU's state table");
    g->n_rs = rs->n_layer_rs;
    for (uint32_t i = 0; i < rs->n_layer_rs; i++) {
        if ((uint32_t)rs->layers[i] < g->l0) continue; /* the host's */
        size_t cb, sb; /* (kv_cache_init checked that the host's sizes fit) */
        if (!size_mul(n_seq, rs->conv_floats * sizeof(float), &cb) ||
            !size_mul(n_seq, rs->ssm_floats * sizeof(float), &sb))
            return err_set(d, ERR_OVERFLOW, "layer %d's recurrent state overflows", rs->layers[i]);
        int r = kern_cuda_buf_new(g->cu, cb ? cb : 1, &g->rs_conv[i]);
        if (r == 0) r = kern_cuda_buf_new(g->cu, sb, &g->rs_ssm[i]);
        if (r < 0)
            return err_set(d, r, "device %s (%s): cannot reserve %zu bytes for layer %d's "
                           "recurrent state", g->name, g->dev_name, cb + sb, rs->layers[i]);
        g->rs_bytes += cb + sb;
        g->n_rs_here++;
    }
    if (g->n_rs_here == 0) return 0;
    g->rs_mem = (struct kv_rs_mem){.ud = ctx, .get = rs_get, .set = rs_set};
    rs->mem = &g->rs_mem;
    return 0;
}

/* Weights, RoPE and activations of g (dv: the partition it is, NULL: ctx->gpu). */
static int gpu_setup(struct engine_context *ctx, struct gpu *g, const struct device *dv,
                     struct err_detail *d) {
    const struct engine_model *m = ctx->model;
    const struct engine_hparams *hp = &m->hp;
    const struct kv_cache *kv = &ctx->kv;
    if (!(g->layer = calloc(hp->n_layer, sizeof *g->layer))) return -ENOMEM;
    if (!dv && !(g->whole = calloc(hp->n_layer, sizeof *g->whole))) return -ENOMEM;
    size_t bytes;
    int r = weights_walk(ctx, g, dv, &bytes, false);
    if (r == 0) r = kern_cuda_buf_new(g->cu, bytes ? bytes : 1, &g->weights);
    if (r < 0)
        return err_set(d, r, "device %s (%s): cannot reserve %zu bytes for the weights", g->name,
                       g->dev_name, bytes);
    if ((r = weights_walk(ctx, g, dv, &bytes, true)) < 0)
        return err_set(d, r, "device %s: cannot upload the weights", g->name);
    g->weight_bytes = bytes;
    for (uint32_t s = 0; s < KV_MAX_STORES; s++) {
        g->rope[s] = ctx->rope[s];
        if (g->rope[s].freq_factors) g->rope[s].freq_factors = g->rope_freqs.data;
    }
    const size_t nb = ctx->params.n_batch, no = ctx->n_out_step, f = sizeof(float);
    for (uint32_t s = 0; s < kv->n_store; s++) /* the kernels take cells as int32 */
        if ((uint64_t)kv->n_seq * kv->store[s].n_cells * 2 > INT32_MAX)
            return err_set(d, ERR_UNSUPPORTED,
                           "device %s: %u sequences x %u cells exceed the "
                           "CUDA kernels' cell index",
                           g->name, kv->n_seq, kv->store[s].n_cells);

    /* activations: x, xb (nb, n_embd); q, att (nb, n_head × the largest head); k, v (nb,
     * the widest KV row); hb, hb2 (nb, largest n_ff); the per-layer branch (nb, P) and its
     * inputs (n_layer, nb, P); the gathered rows and their logits (n_out_step, ...); the
     * index arrays; the matmul scratch of the largest product */
    const size_t P = dv ? 0 : hp->n_embd_per_layer;
    /* a gated attention's query and gate rows, its gates; the Gated DeltaNet layers'
     * projections (engine/exec.h; 1 float without; partitions run neither) */
    const struct kv_rstate *rs = &kv->rs;
    const bool gated = !dv && hp->attn_gate, dn = !dv && rs->n_layer_rs > 0;
    const size_t qg = gated ? (size_t)hp->n_head * (hp->max_head_dim_k + hp->max_head_dim_v) : 1,
                 gate = gated ? (size_t)hp->n_head * hp->max_head_dim_v : 1,
                 dn_chan = dn ? (size_t)rs->n_chan : 1,
                 dn_heads = dn ? (size_t)rs->shape.n_head_v : 1,
                 dn_inner = dn ? (size_t)(rs->shape.n_head_v * rs->shape.head_dim_v) : 1;
    /* a mixture of experts: hb holds the router's logits and the shared expert's units,
     * hb2 the shared expert's output (engine/forward.c ffn_moe); each token's experts and
     * their weights (1 without) */
    const bool moe = hp->n_expert > 0;
    const size_t hb = MAX((size_t)hp->max_n_ff,
                          moe ? MAX(MAX(hp->n_expert, hp->n_ff_exp), hp->n_ff_shexp) : 1),
                 hb2 = MAX((size_t)hp->max_n_ff, moe ? MAX(hp->n_embd, hp->n_ff_shexp) : 1),
                 used = moe ? hp->n_expert_used : 1;
    /* gemma4 MoE: att holds the dense FFN's output while the experts run (engine/forward.c
     * ffn_beside) */
    size_t att = (size_t)hp->n_head * hp->max_head_dim_v;
    for (uint32_t il = g->l0; il < hp->n_layer; il++)
        if (hp->layer[il].ffn == ENGINE_FFN_MOE_DENSE) att = MAX(att, (size_t)hp->n_embd);
    int64_t kd = 1, vd = 1;
    for (uint32_t s = 0; s < kv->n_store; s++) {
        kd = MAX(kd, kv->store[s].n_embd_k);
        vd = MAX(vd, MAX(kv->store[s].n_embd_v, kv->store[s].n_embd_k)); /* K = V copies K */
    }
    const size_t sizes[] = {nb * hp->n_embd * f,
                            nb * hp->n_embd * f,
                            nb * hp->n_head * hp->max_head_dim_k * f,
                            nb * (size_t)kd * f,
                            nb * (size_t)vd * f,
                            nb * att * f,
                            nb * hb * f,
                            nb * hb2 * f,
                            nb * MAX(P, 1) * f,
                            hp->n_layer * nb * MAX(P, 1) * f,
                            no * hp->n_embd * f,
                            no * hp->n_vocab * f,
                            IDX_N * nb * sizeof(int32_t),
                            nb * qg * f,
                            nb * gate * f,
                            nb * dn_chan * f,
                            nb * dn_inner * f,
                            nb * dn_heads * f,
                            nb * dn_heads * f,
                            /* (qwen3next: ssm_ba's 2·H_v a token first) */
                            nb * MAX(dn_inner, 2 * dn_heads) * f,
                            nb * used * sizeof(int32_t),
                            nb * used * f};
    size_t scratch = g->output.data
                         ? kern_cuda_matmul_scratch_bytes(hp->n_embd, g->output.n_out, (int64_t)no)
                         : 0;
    for (uint32_t il = g->l0; il < hp->n_layer; il++) {
        for (size_t i = 0; i < engine_n_layer_specs; i++) {
            const struct engine_weight *w =
                spec_field_const(&g->layer[il].w, &engine_layer_specs[i]);
            if (engine_layer_specs[i].kind != KIND_VEC && w->data)
                scratch =
                    MAX(scratch, kern_cuda_matmul_scratch_bytes(w->n_in, w->n_out, (int64_t)nb));
        }
    }
    /* the experts' products share the matmul scratch (neither runs inside the other) */
    if (moe && g->l0 < hp->n_layer && !g->moe_host)
        scratch = MAX(scratch, kern_cuda_moe_scratch_bytes((int64_t)nb, hp->n_expert_used,
                                                           hp->n_expert, hp->n_embd, hp->n_ff_exp));
    size_t act = 0;
    for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) act += align256(sizes[i]);
    if ((r = kern_cuda_buf_new(g->cu, act + scratch, &g->act)) < 0)
        return err_set(d, r, "device %s (%s): cannot reserve %zu bytes of activations", g->name,
                       g->dev_name, act + scratch);
    g->scratch_bytes = act + scratch;
    char *p = kern_cuda_buf_ptr(g->act);
    void **dst[] = {(void **)&g->x,    (void **)&g->xb,  (void **)&g->q,  (void **)&g->k,
                    (void **)&g->v,    (void **)&g->att, (void **)&g->hb, (void **)&g->hb2,
                    (void **)&g->pl_g, (void **)&g->ple, (void **)&g->xo, (void **)&g->logits,
                    (void **)&g->idx,  (void **)&g->qg,   (void **)&g->gate, (void **)&g->dn_qkv,
                    (void **)&g->dn_z, (void **)&g->dn_g, (void **)&g->dn_beta,
                    (void **)&g->dn_o, (void **)&g->moe_sel, (void **)&g->moe_wt};
    _Static_assert(ARRAY_SIZE(sizes) == ARRAY_SIZE(dst), "a pointer for every size");
    for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
        *dst[i] = p;
        p += align256(sizes[i]);
    }
    g->mm_scratch = p;
    g->h_idx = calloc_array(IDX_N * nb, sizeof *g->h_idx);
    g->h_ple = P ? malloc_array(hp->n_layer * nb, P * sizeof(float)) : NULL;
    g->h_moe = g->moe_host ? malloc_array(2 * nb, hp->n_embd * sizeof(float)) : NULL;
    if (!g->h_idx || (P && !g->h_ple) || (g->moe_host && !g->h_moe))
        return err_set(d, -ENOMEM, "cannot allocate the GPU's staging buffers");
    if (!dv && (r = rs_setup(ctx, g, d)) < 0) return r;
    gpu_exec_init(ctx, g);
    return 0;
}

int gpu_load(struct engine_context *ctx, struct err_detail *d) {
    return gpu_setup(ctx, ctx->gpu, NULL, d);
}

static void info_of(const struct gpu *g, struct engine_device_info *ret) {
    *ret = (struct engine_device_info){
        .kind = "cuda",
        .weight_bytes = g->weight_bytes,
        .kv_bytes = g->kv_bytes + g->rs_bytes,
        .scratch_bytes = g->scratch_bytes,
    };
    snprintf(ret->name, sizeof ret->name, "%s", g->name);
    snprintf(ret->device_name, sizeof ret->device_name, "%s", g->dev_name);
}

void gpu_device_info(const struct engine_context *ctx, struct engine_device_info *ret) {
    info_of(ctx->gpu, ret);
}

uint64_t gpu_host_expert_bytes(const struct engine_context *ctx) {
    return ctx->gpu ? ctx->gpu->host_expert_bytes : 0;
}

/* ---- partitions of a tensor split over GPUs ----------------------------------------- */

/* The split's kv_mem: every row's KV heads are cut over the partitions (engine/device.h),
 * each holding its heads' bytes of every row; a whole row is the partitions' pieces in
 * device order. */
/* The cache is made before the split's plan decides the head ranges: the partitions'
 * rows are allocated by gpu_parts_load(). */
static int part_alloc(void *ud, uint32_t s, uint32_t slot, size_t rows, void **ret_k,
                      void **ret_v) {
    (void)ud, (void)s, (void)slot, (void)rows;
    *ret_k = *ret_v = NULL;
    return 0;
}

static int part_alloc_rows(struct engine_context *ctx, uint32_t s, uint32_t slot, size_t rows) {
    const struct kv_store *st = &ctx->kv.store[s];
    const int il = st->layers[slot];
    for (uint32_t i = 0; i < ctx->n_dev; i++) {
        struct gpu *g = ctx->dev[i].gpu;
        const struct dev_layer *dl = &ctx->dev[i].layer[il];
        const size_t off[2] = {kern_row_size(ctx->kv.type_k, dl->kv0 * st->head_dim_k),
                               kern_row_size(ctx->kv.type_v, dl->kv0 * st->head_dim_v)};
        const size_t rb[2] = {kern_row_size(ctx->kv.type_k, dl->n_kv * st->head_dim_k),
                              kern_row_size(ctx->kv.type_v, dl->n_kv * st->head_dim_v)};
        int r = kv_bufs_new(g, s, st->n_layer_kv, slot, rows, rb, off);
        if (r < 0) return r;
    }
    return 0;
}

static void part_free(void *ud, uint32_t s, uint32_t slot) {
    struct engine_context *ctx = ud;
    for (uint32_t i = 0; ctx->dev && i < ctx->n_dev; i++)
        if (ctx->dev[i].gpu) kv_bufs_free(ctx->dev[i].gpu, s, slot);
}

/* rows to (get) or from (set) whole host rows: each partition's pieces through a staging
 * buffer of its own rows */
static int part_rows(struct engine_context *ctx, uint32_t s, uint32_t slot, bool v, size_t cell,
                     size_t n, char *host, bool set) {
    const struct kv_store *st = &ctx->kv.store[s];
    const size_t rb = v ? st->v_row_bytes : st->k_row_bytes;
    for (uint32_t i = 0; i < ctx->n_dev && n; i++) {
        struct gpu *g = ctx->dev[i].gpu;
        const size_t prb = gpu_kv_rb(g, s, slot, v), off = g->kv[s][slot].off[v];
        if (prb == 0) continue;
        _cleanup_free_ char *tmp = malloc_array(n, prb);
        if (!tmp) return -ENOMEM;
        int r = 0;
        if (set) {
            for (size_t j = 0; j < n; j++) memcpy(tmp + j * prb, host + j * rb + off, prb);
            r = kern_cuda_buf_upload(gpu_kv_buf(g, s, slot, v), cell * prb, tmp, n * prb);
        } else {
            r = kern_cuda_buf_download(gpu_kv_buf(g, s, slot, v), cell * prb, tmp, n * prb);
            for (size_t j = 0; r == 0 && j < n; j++)
                memcpy(host + j * rb + off, tmp + j * prb, prb);
        }
        if (r < 0) return r;
    }
    return 0;
}

static int part_get(void *ud, uint32_t s, uint32_t slot, bool v, size_t cell, size_t n, void *dst) {
    return part_rows(ud, s, slot, v, cell, n, dst, false);
}
static int part_set(void *ud, uint32_t s, uint32_t slot, bool v, size_t cell, size_t n,
                    const void *src) {
    return part_rows(ud, s, slot, v, cell, n, (char *)src, true);
}
static int part_copy(void *ud, uint32_t s, uint32_t slot, bool v, size_t dst, size_t src,
                     size_t n) {
    struct engine_context *ctx = ud;
    for (uint32_t i = 0; i < ctx->n_dev; i++) {
        struct gpu *g = ctx->dev[i].gpu;
        int r = gpu_kv_rb(g, s, slot, v) ? kv_copy_rows(g, s, slot, v, dst, src, n) : 0;
        if (r < 0) return r;
    }
    return 0;
}

static const struct kv_mem *part_mem(struct engine_context *ctx) {
    ctx->split_mem = (struct kv_mem){.ud = ctx,
                                     .alloc = part_alloc,
                                     .free = part_free,
                                     .get = part_get,
                                     .set = part_set,
                                     .copy = part_copy};
    return &ctx->split_mem;
}

int gpu_parts_open(struct engine_context *ctx, struct err_detail *d) {
    const struct engine_context_params *p = &ctx->params;
    int r;
    for (uint32_t i = 0; i < ctx->n_dev; i++) {
        struct device *dv = &ctx->dev[i];
        const int index = p->split_cuda[i] - 1;
        uint32_t k = 0, same = 0; /* which context on its GPU, of how many */
        for (uint32_t j = 0; j < ctx->n_dev; j++) {
            if (p->split_cuda[j] != p->split_cuda[i]) continue;
            k += j < i;
            same++;
        }
        if (same > 1)
            snprintf(dv->name, sizeof dv->name, "cuda:%d.%u", index, k);
        else
            snprintf(dv->name, sizeof dv->name, "cuda:%d", index);
        if ((r = gpu_new(index, dv->name, true, &dv->gpu, d)) < 0) return r;
    }
    /* a split cuts Gated DeltaNet layers by key heads and a gated attention's q rows per
     * head with its gate (engine/device.c): the partitions have no ops for either yet */
    const struct engine_model *m = ctx->model;
    if (m->hp.n_layer_rec > 0 || m->hp.attn_gate || m->hp.n_expert > 0)
        return err_set(d, ERR_UNSUPPORTED, "devices %s, ...: a tensor split over GPUs of %s "
                       "models (Gated DeltaNet layers, gated attention, mixtures of experts) "
                       "is not supported yet: "
                       "run them on one GPU (device cuda:N, gpu_layers for less) or split "
                       "over CPUs", ctx->dev[0].name, m->arch_name);
    return model_check(ctx->model, 0, ctx->dev[0].name, d);
}

const struct kv_mem *gpu_parts_kv_mem(struct engine_context *ctx) { return part_mem(ctx); }

int gpu_parts_load(struct engine_context *ctx, struct err_detail *d) {
    const struct kv_cache *kv = &ctx->kv;
    for (uint32_t s = 0; s < kv->n_store; s++) {
        const struct kv_store *st = &kv->store[s];
        const size_t rows = (size_t)kv->n_seq * st->n_cells * (st->ring ? 2 : 1);
        for (uint32_t i = 0; i < st->n_layer_kv; i++) {
            int r = part_alloc_rows(ctx, s, i, rows);
            if (r < 0)
                return err_set(d, r, "cannot allocate layer %d's KV cache on the split's GPUs",
                               st->layers[i]);
        }
    }
    for (uint32_t i = 0; i < ctx->n_dev; i++) {
        int r = gpu_setup(ctx, ctx->dev[i].gpu, &ctx->dev[i], d);
        if (r < 0) return r;
        ctx->dev[i].ex = &ctx->dev[i].gpu->exec;
    }
    return 0;
}

void gpu_parts_close(struct engine_context *ctx) {
    for (uint32_t i = 0; ctx->dev && i < ctx->n_dev; i++) {
        gpu_free(ctx->dev[i].gpu);
        ctx->dev[i].gpu = NULL;
    }
}

void gpu_part_info(const struct device *dv, struct engine_device_info *ret) {
    info_of(dv->gpu, ret);
}

#endif /* WARM_CUDA */
