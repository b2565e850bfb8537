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
    return err_set(d, ERR_UNSUPPORTED, "device cuda:%d: this build has no CUDA backend (built "
                   "without nvcc)", index);
}
const struct kv_mem *gpu_kv_mem(struct engine_context *ctx) {
    (void)ctx;
    return NULL;
}
int gpu_load(struct engine_context *ctx, struct err_detail *d) {
    (void)ctx;
    return err_set(d, ERR_UNSUPPORTED, "this build has no CUDA backend");
}
void gpu_close(struct engine_context *ctx) {
    (void)ctx;
}
int gpu_step(struct engine_context *ctx, const struct engine_batch *b, int32_t t0, int32_t n,
             float *logits, int32_t *ret_n_out, struct err_detail *d) {
    (void)ctx, (void)b, (void)t0, (void)n, (void)logits, (void)ret_n_out;
    return err_set(d, ERR_UNSUPPORTED, "this build has no CUDA backend");
}
void gpu_device_info(const struct engine_context *ctx, struct engine_device_info *ret) {
    (void)ctx;
    memset(ret, 0, sizeof *ret);
}

#else /* WARM_CUDA */

#include "kernels/cuda/cuda.h"

/* A weight on the device (data NULL: absent). */
struct gpu_w {
    const void *data;
    enum kern_type type;
    int64_t n_in, n_out;
};

struct gpu_layer {
    struct gpu_w attn_norm, wq, bq, wk, bk, wv, bv, wo, bo, q_norm, k_norm, post_attn_norm;
    struct gpu_w ffn_norm, w_gate, w_up, w_down, post_ffn_norm;
    struct gpu_w pl_gate, pl_proj, pl_post_norm;
    float out_scale; /* 0: none */
};

/* Per-step index arrays, each n_batch int32 (device and host staging alike):
 * IDX_POS positions; per store s at IDX_STORE(s): the cell each token writes, its ring
 * mirror, the first cell it reads and how many; IDX_WANT the rows that want logits. */
#define IDX_POS 0
#define IDX_STORE(s) (1 + 4 * (s))
#define IDX_WANT (1 + 4 * KV_MAX_STORES)
#define IDX_N (IDX_WANT + 1)

struct gpu {
    struct kern_cuda_ctx *cu;
    int index;
    char name[16];      /* "cuda:N" */
    char dev_name[128]; /* the GPU's own name */
    uint32_t l0;        /* first layer on the GPU */
    struct kern_cuda_buf *weights;
    uint64_t weight_bytes;
    struct gpu_layer *layer; /* (n_layer); [l0, n_layer) filled */
    struct gpu_w output_norm, output, rope_freqs;
    struct kern_rope_params rope[KV_MAX_STORES]; /* ctx->rope with device frequency factors */

    /* the KV slots' buffers (kv_mem) */
    struct kv_mem mem;
    struct kern_cuda_buf **kv;
    size_t n_kv, cap_kv;
    uint64_t kv_bytes;

    /* activations for n_batch tokens, and the step's index arrays */
    struct kern_cuda_buf *act;
    uint64_t scratch_bytes;
    float *x, *xb, *q, *k, *v, *att, *hb, *hb2, *pl_g, *ple, *xo, *logits;
    int32_t *idx;
    void *mm_scratch;
    int32_t *h_idx; /* (IDX_N × n_batch) host staging */
    float *h_ple;   /* (n_layer × n_batch × n_embd_per_layer) per-layer inputs, layer-major */
};

/* ---- the KV slots: kv_mem over kern_cuda buffers -------------------------------------- */

static struct kern_cuda_buf *kv_buf_of(struct gpu *g, const void *p, size_t *off) {
    for (size_t i = 0; i < g->n_kv; i++) {
        const char *b = kern_cuda_buf_ptr(g->kv[i]);
        if ((const char *)p >= b && (const char *)p < b + kern_cuda_buf_bytes(g->kv[i])) {
            *off = (size_t)((const char *)p - b);
            return g->kv[i];
        }
    }
    return NULL;
}

static int kv_mem_alloc(void *ud, size_t bytes, void **ret) {
    struct gpu *g = ud;
    if (g->n_kv == g->cap_kv) {
        size_t cap = g->cap_kv ? 2 * g->cap_kv : 16;
        struct kern_cuda_buf **kv = realloc(g->kv, cap * sizeof *kv);
        if (!kv) return -ENOMEM;
        g->kv = kv;
        g->cap_kv = cap;
    }
    struct kern_cuda_buf *b;
    int r = kern_cuda_buf_new(g->cu, bytes ? bytes : 1, &b);
    if (r < 0) return r;
    g->kv[g->n_kv++] = b;
    g->kv_bytes += bytes;
    *ret = kern_cuda_buf_ptr(b);
    return 0;
}

static void kv_mem_free(void *ud, void *p) {
    struct gpu *g = ud;
    for (size_t i = 0; i < g->n_kv; i++)
        if (kern_cuda_buf_ptr(g->kv[i]) == p) {
            g->kv_bytes -= kern_cuda_buf_bytes(g->kv[i]);
            kern_cuda_buf_free(g->kv[i]);
            g->kv[i] = g->kv[--g->n_kv];
            return;
        }
}

static int kv_mem_copy(void *ud, void *dst, const void *src, size_t n, enum kv_copy_dir dir) {
    struct gpu *g = ud;
    size_t off;
    struct kern_cuda_buf *b;
    if (n == 0) return 0;
    switch (dir) {
    case KV_TO_HOST:
        if (!(b = kv_buf_of(g, src, &off))) return -EFAULT;
        return kern_cuda_buf_download(b, off, dst, n);
    case KV_FROM_HOST:
        if (!(b = kv_buf_of(g, dst, &off))) return -EFAULT;
        return kern_cuda_buf_upload(b, off, src, n);
    case KV_ON_DEV:
        return kern_cuda_copy(g->cu, dst, src, n);
    }
    return -EINVAL;
}

/* ---- what the CUDA path runs ------------------------------------------------------- */

static bool weight_type_ok(enum kern_type t) {
    static const enum kern_type ok[] = {
        KERN_TYPE_F32,  KERN_TYPE_F16,  KERN_TYPE_BF16, KERN_TYPE_Q8_0,   KERN_TYPE_Q4_0,
        KERN_TYPE_Q4_1, KERN_TYPE_Q5_0, KERN_TYPE_Q5_1, KERN_TYPE_IQ4_NL, KERN_TYPE_Q4_K,
        KERN_TYPE_Q5_K, KERN_TYPE_Q6_K, KERN_TYPE_Q2_K, KERN_TYPE_Q3_K,   KERN_TYPE_IQ4_XS};
    for (size_t i = 0; i < ARRAY_SIZE(ok); i++)
        if (ok[i] == t) return true;
    return false;
}

/* ERR_UNSUPPORTED naming the first thing of m that kernels/cuda does not run. */
static int model_check(const struct engine_model *m, uint32_t l0, const char *dev, struct err_detail *d) {
    const struct engine_hparams *hp = &m->hp;
    if (hp->n_embd % 32)
        return err_set(d, ERR_UNSUPPORTED, "device %s: n_embd %u is not a multiple of 32", dev, hp->n_embd);
    if (hp->n_embd_per_layer % 32)
        return err_set(d, ERR_UNSUPPORTED, "device %s: the per-layer embedding width %u is not a "
                       "multiple of 32", dev, hp->n_embd_per_layer);
    for (uint32_t il = l0; il < hp->n_layer; il++) {
        const struct engine_layer_hparams *lh = &hp->layer[il];
        if (lh->head_dim_k % 32 || lh->head_dim_v % 32 || lh->head_dim_k > 512 || lh->head_dim_v > 512)
            return err_set(d, ERR_UNSUPPORTED, "device %s: layer %u's head sizes %u/%u (the CUDA "
                           "attention takes multiples of 32 up to 512)", dev, il, lh->head_dim_k,
                           lh->head_dim_v);
        if ((size_t)lh->n_head_kv * MAX(lh->head_dim_k, lh->head_dim_v) * sizeof(float) > 48 * 1024)
            return err_set(d, ERR_UNSUPPORTED, "device %s: layer %u's KV rows of %u heads are too "
                           "wide for the CUDA KV write", dev, il, lh->n_head_kv);
        const struct engine_layer *l = &m->layers[il];
        const struct engine_weight *ws[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up,
                                            &l->w_down, &l->pl_gate, &l->pl_proj};
        for (size_t i = 0; i < ARRAY_SIZE(ws); i++)
            if (ws[i]->data && !weight_type_ok(ws[i]->type))
                return err_set(d, ERR_UNSUPPORTED, "device %s: layer %u has %s weights, which "
                               "the CUDA kernels do not read", dev, il,
                               kern_type_traits(ws[i]->type)->name);
    }
    if (!weight_type_ok(m->output.type))
        return err_set(d, ERR_UNSUPPORTED, "device %s: the classifier has %s weights, which the "
                       "CUDA kernels do not read", dev, kern_type_traits(m->output.type)->name);
    return 0;
}

int gpu_open(struct engine_context *ctx, int index, struct err_detail *d) {
    const struct engine_model *m = ctx->model;
    const struct engine_context_params *p = &ctx->params;
    char dev[16];
    snprintf(dev, sizeof dev, "cuda:%d", index);
    int n = kern_cuda_device_count();
    if (n <= 0)
        return err_set(d, ERR_UNSUPPORTED, "device %s: no GPU, no NVIDIA driver, or a driver "
                       "older than the CUDA runtime", dev);
    if (index < 0 || index >= n)
        return err_set(d, ERR_UNSUPPORTED, "device %s does not exist: %d CUDA device%s found",
                       dev, n, n == 1 ? "" : "s");
    if ((p->n_devices > 1) || p->split != ENGINE_SPLIT_NONE)
        return err_set(d, ERR_UNSUPPORTED, "device %s: a tensor split over several devices runs "
                       "on CPU partitions only (devices = cpu,cpu,...)", dev);
    const uint32_t n_layer = m->hp.n_layer;
    uint32_t l0 = p->gpu_layers && p->gpu_layers < n_layer ? n_layer - p->gpu_layers : 0;
    int r = model_check(m, l0, dev, d);
    if (r < 0) return r;
    struct gpu *g = calloc(1, sizeof *g);
    if (!g) return -ENOMEM;
    ctx->gpu = g;
    g->index = index;
    g->l0 = l0;
    snprintf(g->name, sizeof g->name, "%s", dev);
    struct kern_cuda_device_info info;
    if ((r = kern_cuda_device_get_info(index, &info)) < 0)
        return err_set(d, ERR_UNSUPPORTED, "device %s cannot be queried (%s)", dev, strerror(-r));
    snprintf(g->dev_name, sizeof g->dev_name, "%s", info.name);
    if ((r = kern_cuda_ctx_new(index, &g->cu)) < 0)
        return err_set(d, r, "device %s (%s): cannot create a CUDA context", dev, info.name);
    g->mem = (struct kv_mem){.ud = g, .alloc = kv_mem_alloc, .free = kv_mem_free, .copy = kv_mem_copy};
    ctx->n_layer_host = l0;
    return 0;
}

const struct kv_mem *gpu_kv_mem(struct engine_context *ctx) {
    return &ctx->gpu->mem;
}

void gpu_close(struct engine_context *ctx) {
    struct gpu *g = ctx->gpu;
    if (!g) return;
    /* the KV slots are freed by kv_cache_done() before this, through kv_mem */
    for (size_t i = 0; i < g->n_kv; i++) kern_cuda_buf_free(g->kv[i]);
    free(g->kv);
    kern_cuda_buf_free(g->weights);
    kern_cuda_buf_free(g->act);
    kern_cuda_ctx_free(g->cu);
    free(g->layer);
    free(g->h_idx);
    free(g->h_ple);
    free(g);
    ctx->gpu = NULL;
}

/* ---- weights ------------------------------------------------------------------------ */

static size_t align256(size_t n) {
    return (n + 255) & ~(size_t)255;
}

/* Places w at *off of the weight buffer (upload: copies it there) and describes it. */
static int weight_put(struct gpu *g, struct gpu_w *dst, const struct engine_weight *w, size_t *off,
                      bool upload) {
    memset(dst, 0, sizeof *dst);
    if (!w->data) return 0;
    size_t n = w->row_bytes * (size_t)w->n_out;
    if (upload) {
        int r = kern_cuda_buf_upload(g->weights, *off, w->data, n);
        if (r < 0) return r;
        *dst = (struct gpu_w){(const char *)kern_cuda_buf_ptr(g->weights) + *off, w->type, w->n_in, w->n_out};
    }
    *off += align256(n);
    return 0;
}

/* Every weight the GPU reads, once to size the buffer, once to upload. */
static int weights_walk(struct engine_context *ctx, size_t *off, bool upload) {
    struct gpu *g = ctx->gpu;
    const struct engine_model *m = ctx->model;
    int r = 0;
    *off = 0;
    r = r ? r : weight_put(g, &g->output_norm, &m->output_norm, off, upload);
    r = r ? r : weight_put(g, &g->output, &m->output, off, upload);
    r = r ? r : weight_put(g, &g->rope_freqs, &m->rope_freqs, off, upload);
    for (uint32_t il = g->l0; il < m->hp.n_layer && r == 0; il++) {
        const struct engine_layer *l = &m->layers[il];
        struct gpu_layer *gl = &g->layer[il];
        const struct engine_weight *src[] = {
            &l->attn_norm, &l->wq, &l->bq, &l->wk, &l->bk, &l->wv, &l->bv, &l->wo, &l->bo,
            &l->q_norm, &l->k_norm, &l->post_attn_norm, &l->ffn_norm, &l->w_gate, &l->w_up,
            &l->w_down, &l->post_ffn_norm, &l->pl_gate, &l->pl_proj, &l->pl_post_norm};
        struct gpu_w *dst[] = {
            &gl->attn_norm, &gl->wq, &gl->bq, &gl->wk, &gl->bk, &gl->wv, &gl->bv, &gl->wo, &gl->bo,
            &gl->q_norm, &gl->k_norm, &gl->post_attn_norm, &gl->ffn_norm, &gl->w_gate, &gl->w_up,
            &gl->w_down, &gl->post_ffn_norm, &gl->pl_gate, &gl->pl_proj, &gl->pl_post_norm};
        for (size_t i = 0; i < ARRAY_SIZE(src) && r == 0; i++) r = weight_put(g, dst[i], src[i], off, upload);
        gl->out_scale = l->out_scale.data ? *(const float *)l->out_scale.data : 0.0f;
    }
    return r;
}

int gpu_load(struct engine_context *ctx, struct err_detail *d) {
    struct gpu *g = ctx->gpu;
    const struct engine_model *m = ctx->model;
    const struct engine_hparams *hp = &m->hp;
    const struct kv_cache *kv = &ctx->kv;
    if (!(g->layer = calloc(hp->n_layer, sizeof *g->layer))) return -ENOMEM;
    size_t bytes;
    int r = weights_walk(ctx, &bytes, false);
    if (r == 0) r = kern_cuda_buf_new(g->cu, bytes ? bytes : 1, &g->weights);
    if (r < 0)
        return err_set(d, r, "device %s (%s): cannot reserve %zu bytes for the weights", g->name,
                       g->dev_name, bytes);
    if ((r = weights_walk(ctx, &bytes, true)) < 0)
        return err_set(d, r, "device %s: cannot upload the weights", g->name);
    g->weight_bytes = bytes;
    for (uint32_t s = 0; s < KV_MAX_STORES; s++) {
        g->rope[s] = ctx->rope[s];
        if (g->rope[s].freq_factors) g->rope[s].freq_factors = g->rope_freqs.data;
    }

    /* activations: x, xb (nb, n_embd); q, att (nb, n_head × the largest head); k, v (nb,
     * the widest KV row); hb, hb2 (nb, largest n_ff); the per-layer branch (nb, P) and its
     * inputs (n_layer, nb, P); the gathered rows and their logits (n_out_step, ...); the
     * index arrays; the matmul scratch of the largest product */
    const size_t nb = ctx->params.n_batch, no = ctx->n_out_step, f = sizeof(float);
    for (uint32_t s = 0; s < kv->n_store; s++) /* the kernels take cells as int32 */
        if ((uint64_t)kv->n_seq * kv->store[s].n_cells * 2 > INT32_MAX)
            return err_set(d, ERR_UNSUPPORTED, "device %s: %u sequences x %u cells exceed the "
                           "CUDA kernels' cell index", g->name, kv->n_seq, kv->store[s].n_cells);
    const size_t P = hp->n_embd_per_layer;
    int64_t kd = 1, vd = 1;
    for (uint32_t s = 0; s < kv->n_store; s++) {
        kd = MAX(kd, kv->store[s].n_embd_k);
        vd = MAX(vd, MAX(kv->store[s].n_embd_v, kv->store[s].n_embd_k)); /* K = V copies K */
    }
    const size_t sizes[] = {
        nb * hp->n_embd * f, nb * hp->n_embd * f, nb * hp->n_head * hp->max_head_dim_k * f,
        nb * (size_t)kd * f, nb * (size_t)vd * f, nb * hp->n_head * hp->max_head_dim_v * f,
        nb * hp->max_n_ff * f, nb * hp->max_n_ff * f, nb * MAX(P, 1) * f,
        hp->n_layer * nb * MAX(P, 1) * f, no * hp->n_embd * f, no * hp->n_vocab * f,
        IDX_N * nb * sizeof(int32_t)};
    size_t scratch = kern_cuda_matmul_scratch_bytes(hp->n_embd, hp->n_vocab, (int64_t)no);
    for (uint32_t il = g->l0; il < hp->n_layer; il++) {
        const struct gpu_layer *gl = &g->layer[il];
        const struct gpu_w *ws[] = {&gl->wq, &gl->wk, &gl->wv, &gl->wo, &gl->w_gate, &gl->w_up,
                                    &gl->w_down, &gl->pl_gate, &gl->pl_proj};
        for (size_t i = 0; i < ARRAY_SIZE(ws); i++)
            if (ws[i]->data)
                scratch = MAX(scratch, kern_cuda_matmul_scratch_bytes(ws[i]->n_in, ws[i]->n_out, (int64_t)nb));
    }
    size_t act = 0;
    for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) act += align256(sizes[i]);
    if ((r = kern_cuda_buf_new(g->cu, act + scratch, &g->act)) < 0)
        return err_set(d, r, "device %s (%s): cannot reserve %zu bytes of activations", g->name,
                       g->dev_name, act + scratch);
    g->scratch_bytes = act + scratch;
    char *p = kern_cuda_buf_ptr(g->act);
    void **dst[] = {(void **)&g->x,   (void **)&g->xb,  (void **)&g->q,    (void **)&g->k,
                    (void **)&g->v,   (void **)&g->att, (void **)&g->hb,   (void **)&g->hb2,
                    (void **)&g->pl_g, (void **)&g->ple, (void **)&g->xo,  (void **)&g->logits,
                    (void **)&g->idx};
    for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
        *dst[i] = p;
        p += align256(sizes[i]);
    }
    g->mm_scratch = p;
    g->h_idx = calloc_array(IDX_N * nb, sizeof *g->h_idx);
    g->h_ple = P ? malloc_array(hp->n_layer * nb, P * sizeof(float)) : NULL;
    if (!g->h_idx || (P && !g->h_ple)) return err_set(d, -ENOMEM, "cannot allocate the GPU's staging buffers");
    return 0;
}

void gpu_device_info(const struct engine_context *ctx, struct engine_device_info *ret) {
    const struct gpu *g = ctx->gpu;
    *ret = (struct engine_device_info){
        .kind = "cuda",
        .weight_bytes = g->weight_bytes,
        .kv_bytes = g->kv_bytes,
        .scratch_bytes = g->scratch_bytes,
    };
    snprintf(ret->name, sizeof ret->name, "%s", g->name);
    snprintf(ret->device_name, sizeof ret->device_name, "%s", g->dev_name);
}

/* ---- a step ------------------------------------------------------------------------- */

static int mm(struct gpu *g, float *y, const struct gpu_w *w, const float *x, int64_t n) {
    return kern_cuda_matmul(g->cu, y, w->data, w->type, x, w->n_in, w->n_out, n, g->mm_scratch);
}
static int bias(struct gpu *g, float *y, const struct gpu_w *b, int64_t n) {
    return b->data ? kern_cuda_add(g->cu, y, b->data, b->n_in, n, 1) : 0;
}
static int norm(struct gpu *g, float *y, const float *x, const struct gpu_w *w, int64_t width,
                int64_t rows, float eps) {
    return kern_cuda_rmsnorm(g->cu, y, x, w ? w->data : NULL, width, rows, eps);
}

/* One layer on the GPU, the recipe of forward.c's attention_on() and ffn_on() over all
 * heads and units, and the residual and gemma additions of forward_step(). */
static int layer_run(struct engine_context *ctx, int il, int32_t n) {
    struct gpu *g = ctx->gpu;
    const struct engine_hparams *hp = &ctx->model->hp;
    const struct gpu_layer *l = &g->layer[il];
    const struct kv_cache *kv = &ctx->kv;
    const struct kv_store *st = kv_store_of(kv, il);
    struct kern_cuda_ctx *cu = g->cu;
    const int kind = kv->store_of[il];
    const int64_t dim = hp->n_embd, nb = ctx->params.n_batch;
    const int64_t hd_k = hp->layer[il].head_dim_k, hd_v = hp->layer[il].head_dim_v;
    const int64_t n_head = hp->n_head, n_head_kv = st->n_head_kv;
    const int64_t q_dim = n_head * hd_k, k_dim = n_head_kv * hd_k, v_dim = n_head_kv * hd_v;
    const float eps = hp->rms_eps;
    const bool own = kv_owns(kv, il);
    const int32_t *pos = g->idx + IDX_POS * nb, *cells = g->idx + IDX_STORE(kind) * nb;
    const int rot_k = st->n_rot_k, rot_v = st->n_rot_v;
    const int src_slot = kv->owner[kv_source(kv, il)];
    int r = norm(g, g->xb, g->x, &l->attn_norm, dim, n, eps);

    /* q, k, v; a shared-KV layer computes only q; K = V layers take v from the raw k */
    if (r == 0) r = mm(g, g->q, &l->wq, g->xb, n);
    if (r == 0) r = bias(g, g->q, &l->bq, n);
    if (own) {
        if (r == 0) r = mm(g, g->k, &l->wk, g->xb, n);
        if (r == 0) r = bias(g, g->k, &l->bk, n);
        if (r == 0 && l->wv.data) r = mm(g, g->v, &l->wv, g->xb, n);
        if (r == 0 && l->wv.data) r = bias(g, g->v, &l->bv, n);
        if (r == 0 && !l->wv.data) r = kern_cuda_copy(cu, g->v, g->k, (size_t)(n * k_dim) * sizeof(float));
    }
    if (r == 0 && l->q_norm.data) r = norm(g, g->q, g->q, &l->q_norm, hd_k, n * n_head, eps);
    if (r == 0 && own && l->k_norm.data) r = norm(g, g->k, g->k, &l->k_norm, hd_k, n * n_head_kv, eps);
    if (r == 0 && own && hp->v_norm) r = norm(g, g->v, g->v, NULL, hd_v, n * n_head_kv, eps);
    if (r == 0) r = kern_cuda_rope(cu, g->q, pos, n, n_head, hd_k, &g->rope[kind]);
    if (r == 0 && own) r = kern_cuda_rope(cu, g->k, pos, n, n_head_kv, hd_k, &g->rope[kind]);
    /* q by the K rotation; the KV write rotates k and v itself */
    if (r == 0 && rot_k) r = kern_cuda_hadamard(cu, g->q, n * q_dim, rot_k);
    char *kc = st->k[src_slot], *vc = st->v[src_slot];
    if (own) {
        if (r == 0) r = kern_cuda_kv_store(cu, kc, st->k_row_bytes, cells, g->k, n, kv->type_k, k_dim, rot_k);
        if (r == 0) r = kern_cuda_kv_store(cu, vc, st->v_row_bytes, cells, g->v, n, kv->type_v, v_dim, rot_v);
        if (st->ring) { /* the mirror copy */
            if (r == 0) r = kern_cuda_kv_store(cu, kc, st->k_row_bytes, cells + nb, g->k, n, kv->type_k, k_dim, rot_k);
            if (r == 0) r = kern_cuda_kv_store(cu, vc, st->v_row_bytes, cells + nb, g->v, n, kv->type_v, v_dim, rot_v);
        }
    }
    struct kern_cuda_attn_args a = {
        .out = g->att, .q = g->q, .k = kc, .v = vc, .kt = kv->type_k, .vt = kv->type_v,
        .k_stride = st->k_row_bytes, .v_stride = st->v_row_bytes,
        .kv_row0 = cells + 2 * nb, .n_kv = cells + 3 * nb,
        .n_tok = n, .n_head = n_head, .n_head_kv = n_head_kv, .hd_k = hd_k, .hd_v = hd_v,
        .scale = hp->attn_scale > 0 ? hp->attn_scale : 1.0f / sqrtf((float)st->head_dim_k)};
    if (r == 0) r = kern_cuda_attn(cu, &a);
    if (r == 0 && rot_v) r = kern_cuda_hadamard(cu, g->att, n * n_head * hd_v, rot_v);
    if (r == 0) r = mm(g, g->xb, &l->wo, g->att, n);
    if (r == 0) r = bias(g, g->xb, &l->bo, n);
    if (r == 0 && l->post_attn_norm.data) r = norm(g, g->xb, g->xb, &l->post_attn_norm, dim, n, eps);
    if (r == 0) r = kern_cuda_add(cu, g->x, g->xb, dim, n, n);

    /* FFN */
    const int64_t n_ff = hp->layer[il].n_ff;
    if (r == 0) r = norm(g, g->xb, g->x, &l->ffn_norm, dim, n, eps);
    if (r == 0) r = mm(g, g->hb, &l->w_gate, g->xb, n);
    if (r == 0) r = mm(g, g->hb2, &l->w_up, g->xb, n);
    if (r == 0)
        r = hp->ffn_act == ENGINE_FFN_GELU ? kern_cuda_gelu_mul(cu, g->hb, g->hb, g->hb2, n * n_ff)
                                           : kern_cuda_silu_mul(cu, g->hb, g->hb, g->hb2, n * n_ff);
    if (r == 0) r = mm(g, g->xb, &l->w_down, g->hb, n);
    if (r == 0 && l->post_ffn_norm.data) r = norm(g, g->xb, g->xb, &l->post_ffn_norm, dim, n, eps);
    if (r == 0) r = kern_cuda_add(cu, g->x, g->xb, dim, n, n);

    /* gemma4: the per-layer branch, x += RMSNorm(proj · (gelu(gate · x) ⊙ ple_il)), and
     * the layer's output scale */
    const int64_t P = hp->n_embd_per_layer;
    if (P > 0 && l->pl_gate.data) {
        if (r == 0) r = mm(g, g->pl_g, &l->pl_gate, g->x, n);
        if (r == 0) r = kern_cuda_gelu_mul(cu, g->pl_g, g->pl_g, g->ple + (int64_t)il * n * P, n * P);
        if (r == 0) r = mm(g, g->xb, &l->pl_proj, g->pl_g, n);
        if (r == 0) r = norm(g, g->xb, g->xb, &l->pl_post_norm, dim, n, eps);
        if (r == 0) r = kern_cuda_add(cu, g->x, g->xb, dim, n, n);
    }
    if (r == 0 && l->out_scale != 0.0f) r = kern_cuda_scale(cu, g->x, n * dim, l->out_scale);
    return r;
}

int gpu_step(struct engine_context *ctx, const struct engine_batch *b, int32_t t0, int32_t n,
             float *logits, int32_t *ret_n_out, struct err_detail *d) {
    struct gpu *g = ctx->gpu;
    const struct engine_hparams *hp = &ctx->model->hp;
    const struct kv_cache *kv = &ctx->kv;
    const size_t nb = ctx->params.n_batch;
    const int64_t dim = hp->n_embd, P = hp->n_embd_per_layer;
    int32_t *h = g->h_idx, n_out = 0;

    /* positions, each store's cells (written, mirrored, first read, count), wanted rows */
    for (int32_t t = 0; t < n; t++) {
        const int32_t i = t0 + t, seq = b->seq ? b->seq[i] : 0, pos = b->pos[i];
        h[IDX_POS * nb + t] = pos;
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
    size_t idx_off = (size_t)((char *)g->idx - (char *)kern_cuda_buf_ptr(g->act));
    size_t x_off = (size_t)((char *)g->x - (char *)kern_cuda_buf_ptr(g->act));
    int r = kern_cuda_buf_upload(g->act, idx_off, h, IDX_N * nb * sizeof *h);
    if (r == 0) r = kern_cuda_buf_upload(g->act, x_off, ctx->x, (size_t)(n * dim) * sizeof(float));
    if (r == 0 && P > 0) { /* the per-layer inputs, layer-major: ple_il is (n, P) */
        const int64_t LP = (int64_t)hp->n_layer * P;
        for (uint32_t il = g->l0; il < hp->n_layer; il++)
            for (int32_t t = 0; t < n; t++)
                memcpy(g->h_ple + ((size_t)il * n + t) * P, ctx->ple + t * LP + il * P, (size_t)P * sizeof(float));
        size_t off = (size_t)((char *)g->ple - (char *)kern_cuda_buf_ptr(g->act));
        size_t skip = (size_t)g->l0 * n * P;
        r = kern_cuda_buf_upload(g->act, off + skip * sizeof(float), g->h_ple + skip,
                                 (size_t)(hp->n_layer - g->l0) * n * P * sizeof(float));
    }
    for (uint32_t il = g->l0; il < hp->n_layer && r == 0; il++) r = layer_run(ctx, (int)il, n);

    /* the rows that want logits, normed, through the classifier, to the host */
    if (r == 0 && n_out > 0) {
        r = kern_cuda_get_rows(g->cu, g->xo, g->x, KERN_TYPE_F32, (size_t)dim * sizeof(float),
                               g->idx + IDX_WANT * nb, n_out, dim);
        if (r == 0) r = norm(g, g->xo, g->xo, &g->output_norm, dim, n_out, hp->rms_eps);
        if (r == 0) r = mm(g, g->logits, &g->output, g->xo, n_out);
        size_t off = (size_t)((char *)g->logits - (char *)kern_cuda_buf_ptr(g->act));
        if (r == 0)
            r = kern_cuda_buf_download(g->act, off, logits, (size_t)n_out * hp->n_vocab * sizeof(float));
    }
    if (r == 0) r = kern_cuda_ctx_sync(g->cu);
    if (r < 0) return err_set(d, r, "device %s (%s): a step of %d tokens failed", g->name, g->dev_name, n);
    *ret_n_out = n_out;
    return 0;
}

#endif /* WARM_CUDA */
