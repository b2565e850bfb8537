/* kv-cache — private to the engine: the K and V rows of every sequence, per layer that
 * owns KV, in the cache's stored types.
 *
 * Layout: for each owning layer, K is (n_seq, n_ctx) rows of n_head_kv × head_dim_k values
 * of type_k (row stride k_row_bytes), V the same with head_dim_v and type_v; cell p of
 * sequence s holds position p. A layer that reads another layer's KV (shared-KV models)
 * finds it through kv_source(il); every lookup (rows, types, rotation) goes through it.
 * n_rot_k / n_rot_v record the Hadamard rotation (DESIGN.md 3.4; 0 = off). */
#pragma once

#include "engine/model.h"
#include "kernels/types.h"

struct kv_cache {
    enum kern_type type_k, type_v;
    uint32_t n_layer;      /* layers of the model */
    uint32_t n_layer_kv;   /* layers that own KV */
    uint32_t n_seq, n_ctx;
    int64_t n_embd_k;      /* n_head_kv × head_dim_k */
    int64_t n_embd_v;      /* n_head_kv × head_dim_v */
    int64_t head_dim_k, head_dim_v;
    size_t k_row_bytes, v_row_bytes;
    int32_t *source;       /* (n_layer): model layer -> owning layer's slot in k[] / v[] */
    int32_t *owner;        /* (n_layer): slot of a layer that owns KV, -1 otherwise */
    void **k, **v;         /* (n_layer_kv) each (n_seq × n_ctx) rows */
    uint32_t *seq_len;     /* (n_seq) cached positions per sequence */
    int n_rot_k, n_rot_v;  /* Hadamard rotation sizes, 0 = off */
};

/* Sizes and allocates the cache (zeroed). Types: f32, f16, bf16. */
int kv_cache_init(struct kv_cache *kv, const struct engine_model *m, enum kern_type type_k,
                  enum kern_type type_v, uint32_t n_seq, uint32_t n_ctx, struct err_detail *d);
void kv_cache_done(struct kv_cache *kv);
size_t kv_cache_bytes(const struct kv_cache *kv);

/* The model layer whose KV layer il reads (il itself for now: no shared-KV arch yet). */
static inline int kv_source(const struct kv_cache *kv, int il) {
    return kv->source[il];
}
/* Does layer il write its own KV? */
static inline bool kv_owns(const struct kv_cache *kv, int il) {
    return kv->owner[il] >= 0;
}
/* K row of (sequence, position) as seen by layer il (through kv_source). */
static inline void *kv_k_row(const struct kv_cache *kv, int il, int32_t seq, int32_t pos) {
    int slot = kv->owner[kv_source(kv, il)];
    return (char *)kv->k[slot] + ((size_t)seq * kv->n_ctx + (size_t)pos) * kv->k_row_bytes;
}
static inline void *kv_v_row(const struct kv_cache *kv, int il, int32_t seq, int32_t pos) {
    int slot = kv->owner[kv_source(kv, il)];
    return (char *)kv->v[slot] + ((size_t)seq * kv->n_ctx + (size_t)pos) * kv->v_row_bytes;
}
/* Stores n values of f32 src as row dst of type t. */
void kv_row_store(void *dst, const float *src, enum kern_type t, int64_t n);
