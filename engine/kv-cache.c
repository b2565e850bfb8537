/* The KV cache: allocation, per-sequence bookkeeping (see kv-cache.h). */
#include "engine/kv-cache.h"

#include "engine/context.h"
#include "engine/forward.h"

#include <errno.h>
#include <string.h>

/* Cache types this build accepts. Quantized types arrive with Hadamard rotation. */
static const enum kern_type kv_types[] = {KERN_TYPE_F32, KERN_TYPE_F16, KERN_TYPE_BF16};

static bool kv_type_ok(enum kern_type t) {
    for (size_t i = 0; i < ARRAY_SIZE(kv_types); i++)
        if (kv_types[i] == t) return true;
    return false;
}

int kv_cache_init(struct kv_cache *kv, const struct engine_model *m, enum kern_type type_k,
                  enum kern_type type_v, uint32_t n_seq, uint32_t n_ctx, struct err_detail *d) {
    memset(kv, 0, sizeof *kv);
    if (!kv_type_ok(type_k) || !kv_type_ok(type_v))
        return err_set(d, ERR_UNSUPPORTED, "KV cache types %s/%s: only f32, f16 and bf16 are "
                       "supported", kern_type_name(type_k), kern_type_name(type_v));
    const struct engine_hparams *hp = &m->hp;
    kv->type_k = type_k;
    kv->type_v = type_v;
    kv->n_layer = hp->n_layer;
    kv->n_seq = n_seq;
    kv->n_ctx = n_ctx;
    kv->head_dim_k = hp->head_dim_k;
    kv->head_dim_v = hp->head_dim_v;
    kv->n_embd_k = (int64_t)hp->n_head_kv * hp->head_dim_k;
    kv->n_embd_v = (int64_t)hp->n_head_kv * hp->head_dim_v;
    kv->k_row_bytes = kern_row_size(type_k, kv->n_embd_k);
    kv->v_row_bytes = kern_row_size(type_v, kv->n_embd_v);
    kv->source = calloc_array(hp->n_layer, sizeof *kv->source);
    kv->owner = calloc_array(hp->n_layer, sizeof *kv->owner);
    kv->seq_len = calloc_array(n_seq, sizeof *kv->seq_len);
    if (!kv->source || !kv->owner || !kv->seq_len) goto nomem;
    /* every layer of the supported archs owns its KV */
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        kv->source[il] = (int32_t)il;
        kv->owner[il] = (int32_t)kv->n_layer_kv++;
    }
    kv->k = calloc_array(kv->n_layer_kv, sizeof *kv->k);
    kv->v = calloc_array(kv->n_layer_kv, sizeof *kv->v);
    if (!kv->k || !kv->v) goto nomem;
    size_t cells, kb, vb;
    if (!size_mul(n_seq, n_ctx, &cells) || !size_mul(cells, kv->k_row_bytes, &kb) ||
        !size_mul(cells, kv->v_row_bytes, &vb)) {
        kv_cache_done(kv);
        return err_set(d, ERR_OVERFLOW, "KV cache of %u sequences x %u positions overflows",
                       n_seq, n_ctx);
    }
    for (uint32_t i = 0; i < kv->n_layer_kv; i++) {
        kv->k[i] = calloc(1, kb);
        kv->v[i] = calloc(1, vb);
        if (!kv->k[i] || !kv->v[i]) goto nomem;
    }
    return 0;
nomem:
    kv_cache_done(kv);
    return err_set(d, -ENOMEM, "cannot allocate the KV cache (%u sequences x %u positions)",
                   n_seq, n_ctx);
}

void kv_cache_done(struct kv_cache *kv) {
    for (uint32_t i = 0; kv->k && i < kv->n_layer_kv; i++) free(kv->k[i]);
    for (uint32_t i = 0; kv->v && i < kv->n_layer_kv; i++) free(kv->v[i]);
    free(kv->k);
    free(kv->v);
    free(kv->source);
    free(kv->owner);
    free(kv->seq_len);
    memset(kv, 0, sizeof *kv);
}

size_t kv_cache_bytes(const struct kv_cache *kv) {
    return (size_t)kv->n_layer_kv * kv->n_seq * kv->n_ctx * (kv->k_row_bytes + kv->v_row_bytes);
}

void kv_row_store(void *dst, const float *src, enum kern_type t, int64_t n) {
    if (t == KERN_TYPE_F32)
        memcpy(dst, src, (size_t)n * sizeof(float));
    else
        kern_quantize_row(t, dst, src, n);
}

/* ---- public sequence operations ------------------------------------------------------- */

uint32_t engine_kv_seq_len(const struct engine_context *ctx, int32_t seq) {
    const struct kv_cache *kv = &ctx->kv;
    return seq >= 0 && (uint32_t)seq < kv->n_seq ? kv->seq_len[seq] : 0;
}

int engine_kv_seq_rm(struct engine_context *ctx, int32_t seq, uint32_t p0) {
    struct kv_cache *kv = &ctx->kv;
    if (seq < 0 || (uint32_t)seq >= kv->n_seq) return ERR_INVALID;
    kv->seq_len[seq] = MIN(kv->seq_len[seq], p0);
    return 0;
}

int engine_kv_seq_cp(struct engine_context *ctx, int32_t src, int32_t dst, uint32_t p1) {
    struct kv_cache *kv = &ctx->kv;
    if (src < 0 || (uint32_t)src >= kv->n_seq || dst < 0 || (uint32_t)dst >= kv->n_seq)
        return ERR_INVALID;
    p1 = MIN(p1, kv->seq_len[src]);
    if (src != dst)
        for (uint32_t i = 0; i < kv->n_layer_kv; i++) {
            size_t kso = (size_t)src * kv->n_ctx, kdo = (size_t)dst * kv->n_ctx;
            memcpy((char *)kv->k[i] + kdo * kv->k_row_bytes,
                   (char *)kv->k[i] + kso * kv->k_row_bytes, (size_t)p1 * kv->k_row_bytes);
            memcpy((char *)kv->v[i] + kdo * kv->v_row_bytes,
                   (char *)kv->v[i] + kso * kv->v_row_bytes, (size_t)p1 * kv->v_row_bytes);
        }
    kv->seq_len[dst] = p1;
    return 0;
}
