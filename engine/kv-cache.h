/* kv-cache — private to the engine: the K and V rows of every sequence, per layer that
 * owns KV, in the cache's stored types.
 *
 * Layout: for each owning layer, K is (n_seq, n_ctx) rows of n_head_kv × head_dim_k values
 * of type_k (row stride k_row_bytes), V the same with head_dim_v and type_v; cell p of
 * sequence s holds position p, and tok records the token id it was computed from.
 *
 * Shared-KV models (<arch>.attention.shared_kv_layers = N): the last N layers own no KV
 * and read the KV of the last owning layer, kv_source(il). Everything about a layer's KV —
 * its rows, types, head sizes and Hadamard rotation — is looked up through kv_source(il),
 * never from the querying layer's own index.
 *
 * Rotation (DESIGN.md 3.4): n_rot_k / n_rot_v are the sizes of the Hadamard blocks the
 * cached K / V rows were rotated with (0 = not rotated). They are decided once at
 * creation, recorded here, and are part of the state blob's ABI (kv-state.c). */
#pragma once

#include "engine/model.h"
#include "kernels/types.h"

struct kv_cache {
    enum kern_type type_k, type_v;
    uint32_t n_layer;      /* layers of the model */
    uint32_t n_layer_kv;   /* layers that own KV */
    uint32_t n_seq, n_ctx;
    int64_t n_head_kv;
    int64_t n_embd_k;      /* n_head_kv × head_dim_k */
    int64_t n_embd_v;      /* n_head_kv × head_dim_v */
    int64_t head_dim_k, head_dim_v;
    size_t k_row_bytes, v_row_bytes;
    int32_t *source;       /* (n_layer): model layer -> the model layer whose KV it reads */
    int32_t *owner;        /* (n_layer): slot in k[] / v[] of a layer that owns KV, else -1 */
    void **k, **v;         /* (n_layer_kv) each (n_seq × n_ctx) rows */
    int32_t *tok;          /* (n_seq × n_ctx) token id of each cell */
    uint32_t *seq_len;     /* (n_seq) cached positions per sequence */
    int n_rot_k, n_rot_v;  /* Hadamard rotation sizes, 0 = off */
};

/* The Hadamard sizes DESIGN.md 3.4 gives a cache (0 = no rotation):
 * K: the largest power of two dividing head_dim (64 -> 64, 128 -> 128, 192 -> 64,
 * 256 -> 256, 576 -> 64) when the type is quantized, head_dim is a multiple of 64 and
 * rotation is on; V: 64 under the same conditions on its type and head size. */
int kv_rot_size_k(enum kern_type t, int64_t head_dim, bool rotation);
int kv_rot_size_v(enum kern_type t, int64_t head_dim, bool rotation);

/* Sizes and allocates the cache (zeroed). Types: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0,
 * q5_1, iq4_nl (block types need head sizes that are multiples of 32). rotation: whether
 * quantized K/V may be Hadamard-rotated (the context parameter kv_rotation). */
int kv_cache_init(struct kv_cache *kv, const struct engine_model *m, enum kern_type type_k,
                  enum kern_type type_v, uint32_t n_seq, uint32_t n_ctx, bool rotation,
                  struct err_detail *d);
void kv_cache_done(struct kv_cache *kv);
size_t kv_cache_bytes(const struct kv_cache *kv);

/* The model layer whose KV layer il reads (il itself unless il is a shared-KV layer). */
static inline int kv_source(const struct kv_cache *kv, int il) {
    return kv->source[il];
}
/* Does layer il write its own KV? */
static inline bool kv_owns(const struct kv_cache *kv, int il) {
    return kv->owner[il] >= 0;
}
/* Rotation sizes of the KV layer il reads (through kv_source; one cache, one size today,
 * but a per-cache lookup is what keeps shared layers right when caches differ). */
static inline int kv_rot_k(const struct kv_cache *kv, int il) {
    return kv->owner[kv_source(kv, il)] >= 0 ? kv->n_rot_k : 0;
}
static inline int kv_rot_v(const struct kv_cache *kv, int il) {
    return kv->owner[kv_source(kv, il)] >= 0 ? kv->n_rot_v : 0;
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
/* Token id cell (seq, pos) was computed from. */
static inline int32_t *kv_tok(const struct kv_cache *kv, int32_t seq, int32_t pos) {
    return kv->tok + (size_t)seq * kv->n_ctx + (size_t)pos;
}
/* Stores n values of f32 src as row dst of type t. */
void kv_row_store(void *dst, const float *src, enum kern_type t, int64_t n);
