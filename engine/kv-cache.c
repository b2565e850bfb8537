/* The KV cache: allocation, rotation sizes, per-sequence bookkeeping and context shift
 * (see kv-cache.h). */
#include "engine/kv-cache.h"

#include "engine/context.h"
#include "engine/forward.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Cache types this build accepts (ggml's block layouts; attention reads each in place). */
static const enum kern_type kv_types[] = {
    KERN_TYPE_F32,  KERN_TYPE_F16,  KERN_TYPE_BF16, KERN_TYPE_Q8_0,   KERN_TYPE_Q4_0,
    KERN_TYPE_Q4_1, KERN_TYPE_Q5_0, KERN_TYPE_Q5_1, KERN_TYPE_IQ4_NL,
};

static bool kv_type_ok(enum kern_type t) {
    for (size_t i = 0; i < ARRAY_SIZE(kv_types); i++)
        if (kv_types[i] == t) return true;
    return false;
}

/* Rotation applies to a quantized type and a head size that is a multiple of 64. */
static bool rot_applies(enum kern_type t, int64_t head_dim, bool rotation) {
    const struct kern_type_traits *tt = kern_type_traits(t);
    return rotation && tt && tt->is_quantized && head_dim > 0 && head_dim % 64 == 0;
}

int kv_rot_size_k(enum kern_type t, int64_t head_dim, bool rotation) {
    if (!rot_applies(t, head_dim, rotation)) return 0;
    int n = 64;
    while (head_dim % (2 * n) == 0) n *= 2;
    return n;
}

int kv_rot_size_v(enum kern_type t, int64_t head_dim, bool rotation) {
    return rot_applies(t, head_dim, rotation) ? 64 : 0;
}

/* A head of head_dim values must hold whole blocks of t: attention slices rows by head. */
static int kv_type_check(enum kern_type t, int64_t head_dim, const char *what,
                         struct err_detail *d) {
    if (!kv_type_ok(t))
        return err_set(d, ERR_UNSUPPORTED, "%s cache type %s is not supported (f32, f16, bf16, "
                       "q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl)", what, kern_type_name(t));
    int64_t blck = kern_type_traits(t)->blck_size;
    if (head_dim % blck != 0)
        return err_set(d, ERR_UNSUPPORTED, "%s cache type %s needs a head size that is a "
                       "multiple of %lld; the model's is %lld", what, kern_type_name(t),
                       (long long)blck, (long long)head_dim);
    return 0;
}

int kv_cache_init(struct kv_cache *kv, const struct engine_model *m, enum kern_type type_k,
                  enum kern_type type_v, uint32_t n_seq, uint32_t n_ctx, bool rotation,
                  struct err_detail *d) {
    memset(kv, 0, sizeof *kv);
    const struct engine_hparams *hp = &m->hp;
    int r;
    if ((r = kv_type_check(type_k, hp->head_dim_k, "key", d)) < 0 ||
        (r = kv_type_check(type_v, hp->head_dim_v, "value", d)) < 0)
        return r;
    if (hp->n_layer_kv_shared >= hp->n_layer)
        return err_set(d, ERR_MODEL_HPARAM, "%u of %u layers share KV: none owns any",
                       hp->n_layer_kv_shared, hp->n_layer);
    kv->type_k = type_k;
    kv->type_v = type_v;
    kv->n_layer = hp->n_layer;
    kv->n_seq = n_seq;
    kv->n_ctx = n_ctx;
    kv->n_head_kv = hp->n_head_kv;
    kv->head_dim_k = hp->head_dim_k;
    kv->head_dim_v = hp->head_dim_v;
    kv->n_embd_k = (int64_t)hp->n_head_kv * hp->head_dim_k;
    kv->n_embd_v = (int64_t)hp->n_head_kv * hp->head_dim_v;
    kv->k_row_bytes = kern_row_size(type_k, kv->n_embd_k);
    kv->v_row_bytes = kern_row_size(type_v, kv->n_embd_v);
    /* Every layer of this cache has the model's one K and V head size (the supported
     * archs have no per-layer sizes), so the per-cache condition of 3.4 reduces to it. */
    kv->n_rot_k = kv_rot_size_k(type_k, kv->head_dim_k, rotation);
    kv->n_rot_v = kv_rot_size_v(type_v, kv->head_dim_v, rotation);
    kv->source = calloc_array(hp->n_layer, sizeof *kv->source);
    kv->owner = calloc_array(hp->n_layer, sizeof *kv->owner);
    kv->seq_len = calloc_array(n_seq, sizeof *kv->seq_len);
    if (!kv->source || !kv->owner || !kv->seq_len) goto nomem;
    /* the first n_layer - N layers own their KV; the last N read the last owner's */
    uint32_t n_own = hp->n_layer - hp->n_layer_kv_shared;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        bool own = il < n_own;
        kv->source[il] = (int32_t)(own ? il : n_own - 1);
        kv->owner[il] = own ? (int32_t)kv->n_layer_kv++ : -1;
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
    kv->tok = calloc_array(cells, sizeof *kv->tok);
    if (!kv->tok) goto nomem;
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
    free(kv->tok);
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
    if (src != dst) {
        size_t so = (size_t)src * kv->n_ctx, dO = (size_t)dst * kv->n_ctx;
        for (uint32_t i = 0; i < kv->n_layer_kv; i++) {
            memcpy((char *)kv->k[i] + dO * kv->k_row_bytes,
                   (char *)kv->k[i] + so * kv->k_row_bytes, (size_t)p1 * kv->k_row_bytes);
            memcpy((char *)kv->v[i] + dO * kv->v_row_bytes,
                   (char *)kv->v[i] + so * kv->v_row_bytes, (size_t)p1 * kv->v_row_bytes);
        }
        memcpy(kv->tok + dO, kv->tok + so, (size_t)p1 * sizeof *kv->tok);
    }
    kv->seq_len[dst] = p1;
    return 0;
}

/* ---- context shift ------------------------------------------------------------------- */

/* Re-positions one cached K row (all KV heads) by delta positions, in place (DESIGN.md
 * 3.4): to f32, un-rotate every head blockwise (H·H = I), RoPE by delta, rotate back,
 * store in the cache type. tmp holds n_embd_k floats, cs the RoPE pairs of delta. */
static void k_row_shift(const struct kv_cache *kv, void *row, float *tmp, const float *cs,
                        const struct kern_rope_params *rope) {
    const struct kern_type_traits *tt = kern_type_traits(kv->type_k);
    tt->to_f32(tmp, row, kv->n_embd_k);
    if (kv->n_rot_k) kern_hadamard(tmp, kv->n_embd_k, kv->n_rot_k);
    kern_rope_apply(tmp, cs, kv->n_head_kv, kv->head_dim_k, rope);
    if (kv->n_rot_k) kern_hadamard(tmp, kv->n_embd_k, kv->n_rot_k);
    kv_row_store(row, tmp, kv->type_k, kv->n_embd_k);
}

int engine_kv_seq_shift(struct engine_context *ctx, int32_t seq, uint32_t p0, uint32_t n_discard,
                        struct err_detail *d) {
    struct kv_cache *kv = &ctx->kv;
    if (seq < 0 || (uint32_t)seq >= kv->n_seq)
        return err_set(d, ERR_INVALID, "sequence %d is not in [0, %u)", seq, kv->n_seq);
    uint32_t len = kv->seq_len[seq];
    if (p0 > len || n_discard > len - p0)
        return err_set(d, ERR_INVALID, "cannot discard [%u, %llu) of the %u positions of "
                       "sequence %d", p0, (unsigned long long)p0 + n_discard, len, seq);
    if (n_discard == 0) return 0;
    /* RoPE pairs for a rotation by -n_discard positions. kern_rope_cache() scales the
     * pairs by the attention magnitude factor, which the cached K already carries:
     * normalize them back to unit length so only the angle changes. */
    const struct kern_rope_params *rope = &ctx->rope;
    float *cs = ctx->rope_cs, *tmp = ctx->k;
    kern_rope_cache(cs, -(int32_t)n_discard, rope);
    for (int64_t i = 0; i < rope->n_dims; i += 2) {
        float mag = hypotf(cs[i], cs[i + 1]);
        if (mag > 0) cs[i] /= mag, cs[i + 1] /= mag;
    }
    size_t base = (size_t)seq * kv->n_ctx;
    for (uint32_t i = 0; i < kv->n_layer_kv; i++) {
        char *k = (char *)kv->k[i] + base * kv->k_row_bytes;
        char *v = (char *)kv->v[i] + base * kv->v_row_bytes;
        for (uint32_t p = p0 + n_discard; p < len; p++) {
            char *dst = k + (size_t)(p - n_discard) * kv->k_row_bytes;
            memcpy(dst, k + (size_t)p * kv->k_row_bytes, kv->k_row_bytes);
            k_row_shift(kv, dst, tmp, cs, rope);
        }
        memmove(v + (size_t)p0 * kv->v_row_bytes, v + (size_t)(p0 + n_discard) * kv->v_row_bytes,
                (size_t)(len - p0 - n_discard) * kv->v_row_bytes);
    }
    memmove(kv->tok + base + p0, kv->tok + base + p0 + n_discard,
            (size_t)(len - p0 - n_discard) * sizeof *kv->tok);
    kv->seq_len[seq] = len - n_discard;
    return 0;
}

void engine_context_kv_info(const struct engine_context *ctx, struct engine_kv_info *ret) {
    const struct kv_cache *kv = &ctx->kv;
    *ret = (struct engine_kv_info){
        .type_k = kv->type_k,
        .type_v = kv->type_v,
        .n_layer_kv = kv->n_layer_kv,
        .n_rot_k = kv->n_rot_k,
        .n_rot_v = kv->n_rot_v,
    };
}

bool engine_kv_rotation_env_default(void) {
    /* as llama.cpp's LLAMA_ATTN_ROT_DISABLE: any non-zero integer disables */
    const char *e = getenv("WARM_ATTN_ROT_DISABLE");
    return !(e && atoi(e) != 0);
}
