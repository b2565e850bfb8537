/* The KV cache: allocation, rotation sizes, per-sequence bookkeeping and context shift
 * (see kv-cache.h). */
#include "engine/kv-cache.h"

#include "engine/context.h"
#include "engine/forward.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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

/* Zeroed cache memory with its pages faulted in now, at load: a restore after a restart
 * otherwise pays a page fault per 4 KiB it writes (about 9 times a warm memcpy) and the
 * first prefill one per row it adds (issue 16). Buffers of several MiB ask for transparent
 * huge pages (fewer faults, fewer TLB misses in attention); MADV_POPULATE_WRITE (Linux
 * 5.14) faults the rest without a trap per page, and a store to every page covers older
 * kernels and the edges of the buffer. Best effort throughout. */
static void *kv_alloc(size_t n) {
    char *p = calloc(1, n);
    if (!p || n == 0) return p;
    const uintptr_t huge = 2u << 20, page = 4096, a = (uintptr_t)p;
    uintptr_t h0 = (a + huge - 1) & ~(huge - 1), h1 = (a + n) & ~(huge - 1);
    if (h1 > h0 && n >= 2 * huge) (void)madvise((void *)h0, h1 - h0, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_WRITE
    uintptr_t p0 = (a + page - 1) & ~(page - 1), p1 = (a + n) & ~(page - 1);
    if (p1 > p0) (void)madvise((void *)p0, p1 - p0, MADV_POPULATE_WRITE);
#endif
    volatile char *v = p;
    for (size_t i = 0; i < n; i += page) v[i] = 0;
    v[n - 1] = 0;
    return p;
}

/* Which store layer il's own KV goes to. */
static int store_kind(const struct engine_hparams *hp, uint32_t il) {
    return hp->layer[il].swa ? KV_STORE_SWA : KV_STORE_FULL;
}

/* Sizes store st from its first layer and checks that every other layer of it has the
 * same K and V rows (a store has one row size and one rotation decision). */
static int store_shape(struct kv_store *st, const struct engine_layer_hparams *l, uint32_t il,
                       bool first, struct err_detail *d) {
    if (first) {
        st->n_head_kv = l->n_head_kv;
        st->head_dim_k = l->head_dim_k;
        st->head_dim_v = l->head_dim_v;
        return 0;
    }
    if (st->n_head_kv != l->n_head_kv || st->head_dim_k != l->head_dim_k ||
        st->head_dim_v != l->head_dim_v)
        return err_set(d, ERR_UNSUPPORTED, "layer %u has %u KV heads of %u/%u values, other "
                       "layers of its kind %lld of %lld/%lld: one cache needs one row size", il,
                       l->n_head_kv, l->head_dim_k, l->head_dim_v, (long long)st->n_head_kv,
                       (long long)st->head_dim_k, (long long)st->head_dim_v);
    return 0;
}

/* The recurrent layers' state (kv_rstate), zeroed, on the host. */
static int rstate_init(struct kv_rstate *rs, const struct engine_model *m, uint32_t n_seq,
                       uint32_t n_snap, struct err_detail *d) {
    const struct engine_hparams *hp = &m->hp;
    if (!(rs->slot = calloc_array(hp->n_layer, sizeof *rs->slot))) return -ENOMEM;
    for (uint32_t il = 0; il < hp->n_layer; il++)
        rs->slot[il] =
            hp->layer[il].mixer == ENGINE_MIXER_GATED_DELTANET ? (int32_t)rs->n_layer_rs++ : -1;
    if (rs->n_layer_rs == 0) return 0;
    if (!(rs->layers = calloc_array(rs->n_layer_rs, sizeof *rs->layers))) return -ENOMEM;
    for (uint32_t il = 0; il < hp->n_layer; il++)
        if (rs->slot[il] >= 0) rs->layers[rs->slot[il]] = (int32_t)il;
    rs->shape = (struct kern_dn_shape){
        .n_head_k = hp->ssm_n_head_k, .n_head_v = hp->ssm_n_head_v,
        .head_dim_k = hp->ssm_head_dim_k, .head_dim_v = hp->ssm_head_dim_v,
        .head_map = hp->ssm_head_map, /* qwen35's tiled order, qwen3next's grouped (§A.4) */
        .scale = 1.0f / sqrtf((float)hp->ssm_head_dim_k),
        .l2_eps = hp->rms_eps, /* q, k L2-normed as they are read (notes §A.6 step 4) */
    };
    rs->n_kernel = hp->ssm_n_kernel;
    rs->n_chan = 2 * rs->shape.n_head_k * rs->shape.head_dim_k +
                 rs->shape.n_head_v * rs->shape.head_dim_v;
    rs->conv_floats = (size_t)(rs->n_kernel - 1) * (size_t)rs->n_chan;
    rs->ssm_floats = (size_t)rs->shape.n_head_v * rs->shape.head_dim_v * rs->shape.head_dim_k;
    rs->conv = calloc_array(rs->n_layer_rs, sizeof *rs->conv);
    rs->ssm = calloc_array(rs->n_layer_rs, sizeof *rs->ssm);
    if (!rs->conv || !rs->ssm) return -ENOMEM;
    size_t cb, sb;
    if (!size_mul(n_seq, rs->conv_floats * sizeof(float), &cb) ||
        !size_mul(n_seq, rs->ssm_floats * sizeof(float), &sb))
        return err_set(d, ERR_OVERFLOW, "recurrent state of %u sequences overflows", n_seq);
    for (uint32_t i = 0; i < rs->n_layer_rs; i++) {
        rs->conv[i] = kv_alloc(cb ? cb : 1);
        rs->ssm[i] = kv_alloc(sb);
        if (!rs->conv[i] || !rs->ssm[i]) return -ENOMEM;
    }
    /* snapshots: n_snap whole states per sequence, allocated (untouched) now */
    rs->state_floats = rs->n_layer_rs * (rs->conv_floats + rs->ssm_floats);
    rs->n_snap = n_snap;
    size_t n_slots, snap_bytes;
    if (!size_mul(n_seq, n_snap, &n_slots) ||
        !size_mul(n_slots, rs->state_floats * sizeof(float), &snap_bytes))
        return err_set(d, ERR_OVERFLOW, "%u recurrent snapshots of %u sequences overflow",
                       n_snap, n_seq);
    rs->live = calloc_array(n_seq, sizeof *rs->live);
    rs->newer = calloc_array(n_seq, sizeof *rs->newer); /* both zero: KV_RS_SAME */
    rs->snap_pos = malloc_array(n_slots ? n_slots : 1, sizeof *rs->snap_pos);
    rs->snap = n_slots ? malloc(snap_bytes) : NULL;
    if (!rs->live || !rs->newer || !rs->snap_pos || (n_slots && !rs->snap)) return -ENOMEM;
    for (size_t i = 0; i < n_slots; i++) rs->snap_pos[i] = KV_NO_SNAP;
    return 0;
}

static void rstate_done(struct kv_rstate *rs) {
    for (uint32_t i = 0; i < rs->n_layer_rs; i++) {
        if (rs->conv) free(rs->conv[i]);
        if (rs->ssm) free(rs->ssm[i]);
    }
    free(rs->conv);
    free(rs->ssm);
    free(rs->slot);
    free(rs->layers);
    free(rs->live);
    free(rs->newer);
    free(rs->snap_pos);
    free(rs->snap);
}

/* seq's live recurrent state back to zero: a sequence that starts again */
/* The host wrote seq's live state: a device copy is stale (kv_rs_mem). */
static void rs_host_wrote(const struct kv_rstate *rs, int32_t seq) {
    if (rs->mem) rs->newer[seq] = KV_RS_HOST_NEWER;
}

static void rstate_clear(struct kv_rstate *rs, int32_t seq) {
    rs_host_wrote(rs, seq);
    for (uint32_t i = 0; i < rs->n_layer_rs; i++) {
        memset(rs->conv[i] + (size_t)seq * rs->conv_floats, 0, rs->conv_floats * sizeof(float));
        memset(rs->ssm[i] + (size_t)seq * rs->ssm_floats, 0, rs->ssm_floats * sizeof(float));
    }
    if (rs->n_layer_rs) rs->live[seq] = 0;
}

/* The snapshot slot of seq at position p, or -1. */
static int snap_find(const struct kv_rstate *rs, int32_t seq, uint32_t p) {
    const uint32_t *pos = rs->snap_pos + (size_t)seq * rs->n_snap;
    for (uint32_t i = 0; i < rs->n_snap; i++)
        if (pos[i] == p) return (int)i;
    return -1;
}

static float *snap_data(const struct kv_rstate *rs, int32_t seq, uint32_t i) {
    return rs->snap + ((size_t)seq * rs->n_snap + i) * rs->state_floats;
}

int kv_rs_sync(const struct kv_cache *kv, int32_t seq) {
    const struct kv_rstate *rs = &kv->rs;
    if (!rs->mem || rs->newer[seq] != KV_RS_DEV_NEWER) return 0;
    int r = rs->mem->get(rs->mem->ud, seq);
    if (r == 0) rs->newer[seq] = KV_RS_SAME;
    return r;
}

int kv_rs_dev_step(struct kv_cache *kv, int32_t seq) {
    struct kv_rstate *rs = &kv->rs;
    if (!rs->mem) return 0;
    if (rs->newer[seq] == KV_RS_HOST_NEWER) {
        int r = rs->mem->set(rs->mem->ud, seq);
        if (r < 0) return r;
    }
    rs->newer[seq] = KV_RS_DEV_NEWER;
    return 0;
}

/* seq's live state as a whole state into dst (conv then S per layer, in slot order); the
 * caller synced it (kv_rs_sync). */
static void live_get(const struct kv_rstate *rs, int32_t seq, uint8_t *dst) {
    for (uint32_t i = 0; i < rs->n_layer_rs; i++) {
        memcpy(dst, rs->conv[i] + (size_t)seq * rs->conv_floats, rs->conv_floats * sizeof(float));
        dst += rs->conv_floats * sizeof(float);
        memcpy(dst, rs->ssm[i] + (size_t)seq * rs->ssm_floats, rs->ssm_floats * sizeof(float));
        dst += rs->ssm_floats * sizeof(float);
    }
}

int kv_cache_init(struct kv_cache *kv, const struct engine_model *m, enum kern_type type_k,
                  enum kern_type type_v, uint32_t n_seq, uint32_t n_ctx, bool rotation,
                  uint32_t ring_extra, const struct kv_mem *mem, uint32_t dev_layer0,
                  uint32_t n_snap, struct err_detail *d) {
    memset(kv, 0, sizeof *kv);
    kv->mem = mem;
    const struct engine_hparams *hp = &m->hp;
    int r;
    if (hp->n_layer_kv_shared >= hp->n_layer)
        return err_set(d, ERR_MODEL_HPARAM, "%u of %u layers share KV: none owns any",
                       hp->n_layer_kv_shared, hp->n_layer);
    kv->type_k = type_k;
    kv->type_v = type_v;
    kv->n_layer = hp->n_layer;
    kv->n_seq = n_seq;
    kv->n_ctx = n_ctx;
    kv->source = calloc_array(hp->n_layer, sizeof *kv->source);
    kv->owner = calloc_array(hp->n_layer, sizeof *kv->owner);
    kv->store_of = calloc_array(hp->n_layer, sizeof *kv->store_of);
    kv->seq_len = calloc_array(n_seq, sizeof *kv->seq_len);
    kv->swa_lo = calloc_array(n_seq, sizeof *kv->swa_lo);
    if (!kv->source || !kv->owner || !kv->store_of || !kv->seq_len || !kv->swa_lo) goto nomem;
    /* owners get a slot in the store of their kind; shared layers read kv_source's */
    kv->n_store = 1;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const struct engine_layer_hparams *l = &hp->layer[il];
        int src = l->kv_source, k = store_kind(hp, (uint32_t)src);
        struct kv_store *st = &kv->store[k];
        kv->source[il] = src;
        kv->store_of[il] = (uint8_t)k;
        kv->owner[il] = -1;
        /* a shared-KV layer reads src's; a recurrent layer has its state instead */
        if (src != (int)il || l->mixer == ENGINE_MIXER_GATED_DELTANET) continue;
        if ((r = store_shape(st, l, il, st->n_layer_kv == 0, d)) < 0) goto fail;
        kv->owner[il] = (int32_t)st->n_layer_kv++;
        kv->n_layer_kv++;
        if (k == KV_STORE_SWA) kv->n_store = 2;
    }
    /* an SWA-only model keeps an empty full store 0: store indices stay the kinds */
    for (uint32_t s = 0; s < kv->n_store; s++) {
        struct kv_store *st = &kv->store[s];
        if (st->n_layer_kv == 0) continue;
        if ((r = kv_type_check(type_k, st->head_dim_k, "key", d)) < 0 ||
            (r = kv_type_check(type_v, st->head_dim_v, "value", d)) < 0)
            goto fail;
        st->window = s == KV_STORE_SWA ? hp->swa_window : 0;
        st->n_cells = n_ctx;
        /* the ring: the window, one chunk and one batch (DESIGN.md 3.6) */
        if (st->window && ring_extra && (uint64_t)st->window + ring_extra < n_ctx)
            st->n_cells = st->window + ring_extra;
        st->ring = st->n_cells < n_ctx;
        st->n_embd_k = st->n_head_kv * st->head_dim_k;
        st->n_embd_v = st->n_head_kv * st->head_dim_v;
        st->k_row_bytes = kern_row_size(type_k, st->n_embd_k);
        st->v_row_bytes = kern_row_size(type_v, st->n_embd_v);
        /* every layer of this store has its one K and V head size (store_shape), so the
         * per-cache condition of 3.4 reduces to it */
        st->n_rot_k = kv_rot_size_k(type_k, st->head_dim_k, rotation);
        st->n_rot_v = kv_rot_size_v(type_v, st->head_dim_v, rotation);
        st->layers = calloc_array(st->n_layer_kv, sizeof *st->layers);
        st->k = calloc_array(st->n_layer_kv, sizeof *st->k);
        st->v = calloc_array(st->n_layer_kv, sizeof *st->v);
        st->on_dev = calloc_array(st->n_layer_kv, sizeof *st->on_dev);
        if (!st->layers || !st->k || !st->v || !st->on_dev) goto nomem;
        size_t rows, kb, vb;
        if (!size_mul(n_seq, (size_t)st->n_cells * (st->ring ? 2 : 1), &rows) ||
            !size_mul(rows, st->k_row_bytes, &kb) || !size_mul(rows, st->v_row_bytes, &vb)) {
            kv_cache_done(kv);
            return err_set(d, ERR_OVERFLOW, "KV cache of %u sequences x %u positions overflows",
                           n_seq, n_ctx);
        }
    }
    for (uint32_t il = 0; il < hp->n_layer; il++)
        if (kv->owner[il] >= 0) kv->store[kv->store_of[il]].layers[kv->owner[il]] = (int32_t)il;
    /* the rows: host memory faulted in now, or the device's for the layers a GPU runs */
    for (uint32_t s = 0; s < kv->n_store; s++) {
        struct kv_store *st = &kv->store[s];
        size_t rows = (size_t)n_seq * st->n_cells * (st->ring ? 2 : 1); /* checked above */
        size_t kb = rows * st->k_row_bytes, vb = rows * st->v_row_bytes;
        for (uint32_t i = 0; i < st->n_layer_kv; i++) {
            if (mem && (uint32_t)st->layers[i] >= dev_layer0) {
                if ((r = mem->alloc(mem->ud, s, i, rows, &st->k[i], &st->v[i])) < 0) {
                    kv_cache_done(kv);
                    return err_set(d, r, "cannot allocate layer %d's KV cache on the device "
                                   "(%zu + %zu bytes)", st->layers[i], kb, vb);
                }
                st->on_dev[i] = true;
                continue;
            }
            st->k[i] = kv_alloc(kb);
            st->v[i] = kv_alloc(vb);
            if (!st->k[i] || !st->v[i]) goto nomem;
        }
    }
    size_t cells;
    if (!size_mul(n_seq, n_ctx, &cells)) {
        kv_cache_done(kv);
        return err_set(d, ERR_OVERFLOW, "KV cache of %u sequences x %u positions overflows",
                       n_seq, n_ctx);
    }
    kv->tok = calloc_array(cells, sizeof *kv->tok);
    if (!kv->tok) goto nomem;
    if ((r = rstate_init(&kv->rs, m, n_seq, n_snap, d)) < 0) {
        kv_cache_done(kv);
        return r == -ENOMEM ? err_set(d, r, "cannot allocate the recurrent state (%u sequences)",
                                      n_seq)
                            : r;
    }
    return 0;
nomem:
    kv_cache_done(kv);
    return err_set(d, -ENOMEM, "cannot allocate the KV cache (%u sequences x %u positions)",
                   n_seq, n_ctx);
fail:
    kv_cache_done(kv);
    return r;
}

void kv_cache_done(struct kv_cache *kv) {
    for (uint32_t s = 0; s < KV_MAX_STORES; s++) {
        struct kv_store *st = &kv->store[s];
        for (uint32_t i = 0; st->k && st->v && i < st->n_layer_kv; i++) {
            if (st->on_dev && st->on_dev[i]) {
                kv->mem->free(kv->mem->ud, s, i);
                continue;
            }
            free(st->k[i]);
            free(st->v[i]);
        }
        free(st->k);
        free(st->v);
        free(st->on_dev);
        free(st->layers);
    }
    free(kv->source);
    free(kv->owner);
    free(kv->store_of);
    free(kv->tok);
    free(kv->seq_len);
    free(kv->swa_lo);
    rstate_done(&kv->rs);
    memset(kv, 0, sizeof *kv);
}

size_t kv_cache_bytes(const struct kv_cache *kv) {
    size_t n = 0;
    for (uint32_t s = 0; s < kv->n_store; s++) {
        const struct kv_store *st = &kv->store[s];
        n += (size_t)st->n_layer_kv * kv->n_seq * st->n_cells * (st->ring ? 2 : 1) *
             (st->k_row_bytes + st->v_row_bytes);
    }
    /* the live states and the snapshots */
    return n + (size_t)kv->n_seq * (1 + kv->rs.n_snap) * kv_rs_state_bytes(kv);
}

void kv_row_store(void *dst, const float *src, enum kern_type t, int64_t n) {
    if (t == KERN_TYPE_F32)
        memcpy(dst, src, (size_t)n * sizeof(float));
    else
        kern_quantize_row(t, dst, src, n);
}

void kv_put_heads(struct kv_cache *kv, int il, int32_t seq, int32_t pos, int64_t h0, int64_t nh,
                  const float *k, const float *v) {
    struct kv_store *st = &kv->store[kv->store_of[il]];
    const size_t k_off = kern_row_size(kv->type_k, h0 * st->head_dim_k);
    const size_t v_off = kern_row_size(kv->type_v, h0 * st->head_dim_v);
    const size_t k_n = kern_row_size(kv->type_k, nh * st->head_dim_k);
    const size_t v_n = kern_row_size(kv->type_v, nh * st->head_dim_v);
    char *kr = (char *)kv_k_row(kv, il, seq, pos) + k_off, *vr = (char *)kv_v_row(kv, il, seq, pos) + v_off;
    kv_row_store(kr, k, kv->type_k, nh * st->head_dim_k);
    kv_row_store(vr, v, kv->type_v, nh * st->head_dim_v);
    if (st->ring) { /* the mirror copy, n_cells rows on */
        memcpy(kr + (size_t)st->n_cells * st->k_row_bytes, kr, k_n);
        memcpy(vr + (size_t)st->n_cells * st->v_row_bytes, vr, v_n);
    }
}

void kv_put(struct kv_cache *kv, int il, int32_t seq, int32_t pos, const float *k,
            const float *v) {
    kv_put_heads(kv, il, seq, pos, 0, kv_store_of(kv, il)->n_head_kv, k, v);
}

/* Runs of rows [p0, p1) that are contiguous in the first copy (a ring splits at its end). */
#define FOR_RUNS(st, p0, p1, p, n)                                                         \
    for (uint32_t p = (p0), n; p < (p1) &&                                                 \
         (n = (st)->ring ? MIN((p1) - p, (st)->n_cells - p % (st)->n_cells) : (p1) - p, 1); \
         p += n)

/* n rows of K (v false) or V of a slot from cell c on: to the host, from the host, or
 * within the slot (memcpy on the host, else through kv->mem) */
static uint32_t store_index(const struct kv_cache *kv, const struct kv_store *st) {
    return (uint32_t)(st - kv->store);
}
static int rows_get(const struct kv_cache *kv, const struct kv_store *st, uint32_t slot, bool v,
                    size_t c, size_t n, void *dst) {
    if (st->on_dev[slot]) return kv->mem->get(kv->mem->ud, store_index(kv, st), slot, v, c, n, dst);
    size_t rb = v ? st->v_row_bytes : st->k_row_bytes;
    memcpy(dst, (const char *)(v ? st->v : st->k)[slot] + c * rb, n * rb);
    return 0;
}
static int rows_set(const struct kv_cache *kv, const struct kv_store *st, uint32_t slot, bool v,
                    size_t c, size_t n, const void *src) {
    if (st->on_dev[slot]) return kv->mem->set(kv->mem->ud, store_index(kv, st), slot, v, c, n, src);
    size_t rb = v ? st->v_row_bytes : st->k_row_bytes;
    memcpy((char *)(v ? st->v : st->k)[slot] + c * rb, src, n * rb);
    return 0;
}
static int rows_copy(const struct kv_cache *kv, const struct kv_store *st, uint32_t slot, bool v,
                     size_t dst, size_t src, size_t n) {
    if (st->on_dev[slot]) return kv->mem->copy(kv->mem->ud, store_index(kv, st), slot, v, dst, src, n);
    size_t rb = v ? st->v_row_bytes : st->k_row_bytes;
    char *base = (v ? st->v : st->k)[slot];
    memcpy(base + dst * rb, base + src * rb, n * rb);
    return 0;
}

int kv_rows_get(const struct kv_cache *kv, const struct kv_store *st, uint32_t slot, int32_t seq,
                uint32_t p0, uint32_t p1, uint8_t *dst_k, uint8_t *dst_v) {
    int r = 0;
    FOR_RUNS(st, p0, p1, p, n) {
        size_t c = kv_cell(st, seq, (int32_t)p);
        if ((r = rows_get(kv, st, slot, false, c, n, dst_k)) < 0 ||
            (r = rows_get(kv, st, slot, true, c, n, dst_v)) < 0)
            return r;
        dst_k += n * st->k_row_bytes;
        dst_v += n * st->v_row_bytes;
    }
    return 0;
}

int kv_rows_set(const struct kv_cache *kv, struct kv_store *st, uint32_t slot, int32_t seq,
                uint32_t p0, uint32_t p1, const uint8_t *src_k, const uint8_t *src_v) {
    int r = 0;
    /* a ring keeps only the last n_cells of the rows */
    if (st->ring && p1 - p0 > st->n_cells) {
        src_k += (size_t)(p1 - p0 - st->n_cells) * st->k_row_bytes;
        src_v += (size_t)(p1 - p0 - st->n_cells) * st->v_row_bytes;
        p0 = p1 - st->n_cells;
    }
    FOR_RUNS(st, p0, p1, p, n) {
        size_t c = kv_cell(st, seq, (int32_t)p);
        if ((r = rows_set(kv, st, slot, false, c, n, src_k)) < 0 ||
            (r = rows_set(kv, st, slot, true, c, n, src_v)) < 0)
            return r;
        /* a ring's mirror copy, n_cells rows on */
        if (st->ring && ((r = rows_set(kv, st, slot, false, c + st->n_cells, n, src_k)) < 0 ||
                         (r = rows_set(kv, st, slot, true, c + st->n_cells, n, src_v)) < 0))
            return r;
        src_k += n * st->k_row_bytes;
        src_v += n * st->v_row_bytes;
    }
    return 0;
}

#undef FOR_RUNS

void kv_written(struct kv_cache *kv, int32_t seq, uint32_t p0, uint32_t p1) {
    (void)p0;
    kv->seq_len[seq] = p1;
    const struct kv_store *st = &kv->store[KV_STORE_SWA];
    /* writing [p0, p1) into a ring evicts the positions n_cells below them */
    if (kv->n_store > 1 && st->ring && p1 > st->n_cells)
        kv->swa_lo[seq] = MAX(kv->swa_lo[seq], p1 - st->n_cells);
}

/* ---- public sequence operations ------------------------------------------------------- */

uint32_t engine_kv_seq_len(const struct engine_context *ctx, int32_t seq) {
    const struct kv_cache *kv = &ctx->kv;
    return seq >= 0 && (uint32_t)seq < kv->n_seq ? kv->seq_len[seq] : 0;
}

/* Can seq continue at position p (after truncation to p): does the SWA ring still hold
 * the rows of [p - W + 1, p)? Always true without a ring. */
bool kv_rs_can_resume(const struct kv_cache *kv, int32_t seq, uint32_t p) {
    const struct kv_rstate *rs = &kv->rs;
    if (rs->n_layer_rs == 0 || p == 0) return true;
    return p <= kv->seq_len[seq] && (p == rs->live[seq] || snap_find(rs, seq, p) >= 0);
}

bool kv_rs_get(const struct kv_cache *kv, int32_t seq, uint32_t p, void *dst) {
    const struct kv_rstate *rs = &kv->rs;
    if (rs->n_layer_rs == 0 || p == 0 || p > kv->seq_len[seq]) return false;
    if (p == rs->live[seq]) {
        /* (a caller that reports a device failure synced first: this one cannot fail) */
        if (dst && kv_rs_sync(kv, seq) == 0) live_get(rs, seq, dst);
        return true;
    }
    int i = snap_find(rs, seq, p);
    if (i < 0) return false;
    if (dst) memcpy(dst, snap_data(rs, seq, (uint32_t)i), rs->state_floats * sizeof(float));
    return true;
}

void kv_rs_load(struct kv_cache *kv, int32_t seq, const void *src, uint32_t p) {
    const struct kv_rstate *rs = &kv->rs;
    const uint8_t *q = src;
    rs_host_wrote(rs, seq);
    for (uint32_t i = 0; i < rs->n_layer_rs; i++) {
        memcpy(rs->conv[i] + (size_t)seq * rs->conv_floats, q, rs->conv_floats * sizeof(float));
        q += rs->conv_floats * sizeof(float);
        memcpy(rs->ssm[i] + (size_t)seq * rs->ssm_floats, q, rs->ssm_floats * sizeof(float));
        q += rs->ssm_floats * sizeof(float);
    }
    rs->live[seq] = p;
}

void kv_rs_cut(struct kv_cache *kv, int32_t seq, uint32_t p) {
    struct kv_rstate *rs = &kv->rs;
    if (rs->n_layer_rs == 0) return;
    uint32_t *pos = rs->snap_pos + (size_t)seq * rs->n_snap;
    int best = -1;
    for (uint32_t i = 0; i < rs->n_snap; i++) {
        if (pos[i] != KV_NO_SNAP && pos[i] > p) pos[i] = KV_NO_SNAP;
        if (pos[i] != KV_NO_SNAP && (best < 0 || pos[i] > pos[best])) best = (int)i;
    }
    if (rs->live[seq] <= p) return;
    if (best >= 0) kv_rs_load(kv, seq, snap_data(rs, seq, (uint32_t)best), pos[best]);
    else rstate_clear(rs, seq);
}

int engine_kv_snapshot(struct engine_context *ctx, int32_t seq, struct err_detail *d) {
    struct kv_cache *kv = &ctx->kv;
    struct kv_rstate *rs = &kv->rs;
    if (seq < 0 || (uint32_t)seq >= kv->n_seq)
        return err_set(d, ERR_INVALID, "sequence %d is not in [0, %u)", seq, kv->n_seq);
    if (rs->n_layer_rs == 0) return 0;
    const uint32_t p = kv->seq_len[seq];
    if (rs->live[seq] != p)
        return err_set(d, ERR_INVALID, "sequence %d: its recurrent state is at position %u, "
                       "behind its %u positions (rows imported without a snapshot)", seq,
                       rs->live[seq], p);
    if (p == 0 || rs->n_snap == 0) return 0;
    /* the slot already at p, else a free one, else the one at the lowest position: the
     * newest snapshots are the ones a next turn resumes from */
    int i = snap_find(rs, seq, p);
    uint32_t *pos = rs->snap_pos + (size_t)seq * rs->n_snap;
    for (uint32_t k = 0; i < 0 && k < rs->n_snap; k++)
        if (pos[k] == KV_NO_SNAP) i = (int)k;
    if (i < 0) {
        i = 0;
        for (uint32_t k = 1; k < rs->n_snap; k++)
            if (pos[k] < pos[i]) i = (int)k;
    }
    int r = kv_rs_sync(kv, seq);
    if (r < 0)
        return err_set(d, r, "sequence %d: cannot read its recurrent state from the device", seq);
    live_get(rs, seq, (uint8_t *)snap_data(rs, seq, (uint32_t)i));
    pos[i] = p;
    return 0;
}

uint32_t engine_kv_seq_resume_pos(const struct engine_context *ctx, int32_t seq, uint32_t p) {
    const struct kv_cache *kv = &ctx->kv;
    const struct kv_rstate *rs = &kv->rs;
    if (seq < 0 || (uint32_t)seq >= kv->n_seq) return 0;
    p = MIN(p, kv->seq_len[seq]);
    if (rs->n_layer_rs == 0) return kv_can_resume(kv, seq, p) ? p : 0;
    uint32_t best = rs->live[seq] <= p ? rs->live[seq] : 0;
    const uint32_t *pos = rs->snap_pos + (size_t)seq * rs->n_snap;
    for (uint32_t i = 0; i < rs->n_snap; i++)
        if (pos[i] != KV_NO_SNAP && pos[i] <= p && pos[i] > best) best = pos[i];
    return kv_can_resume(kv, seq, best) ? best : 0;
}

bool kv_can_resume(const struct kv_cache *kv, int32_t seq, uint32_t p) {
    const struct kv_store *st = &kv->store[KV_STORE_SWA];
    if (!kv_rs_can_resume(kv, seq, p)) return false;
    if (kv->n_store < 2 || p == 0) return true;
    uint32_t lo = MIN(kv->swa_lo[seq], p), need = p >= st->window ? p - st->window + 1 : 0;
    return lo <= need;
}

int engine_kv_seq_rm(struct engine_context *ctx, int32_t seq, uint32_t p0) {
    struct kv_cache *kv = &ctx->kv;
    if (seq < 0 || (uint32_t)seq >= kv->n_seq) return ERR_INVALID;
    p0 = MIN(kv->seq_len[seq], p0);
    /* an SWA ring that no longer holds the window before p0 cannot continue there */
    if (!kv_can_resume(kv, seq, p0)) return -ENODATA;
    if (p0 == 0) rstate_clear(&kv->rs, seq);
    /* the state at p0: the live one, or a snapshot (kv_can_resume said which exists) */
    kv_rs_cut(kv, seq, p0);
    kv->seq_len[seq] = p0;
    kv->swa_lo[seq] = MIN(kv->swa_lo[seq], p0);
    return 0;
}

int engine_kv_seq_cp(struct engine_context *ctx, int32_t src, int32_t dst, uint32_t p1) {
    struct kv_cache *kv = &ctx->kv;
    if (src < 0 || (uint32_t)src >= kv->n_seq || dst < 0 || (uint32_t)dst >= kv->n_seq)
        return ERR_INVALID;
    p1 = MIN(p1, kv->seq_len[src]);
    if (!kv_can_resume(kv, src, p1)) return -ENODATA;
    if (src != dst) {
        for (uint32_t s = 0; s < kv->n_store; s++) {
            struct kv_store *st = &kv->store[s];
            /* a ring copies what it holds of [0, p1), both copies, cell for cell */
            size_t per_seq = (size_t)st->n_cells * (st->ring ? 2 : 1);
            size_t n = st->ring ? per_seq : p1;
            for (uint32_t i = 0; i < st->n_layer_kv; i++) {
                int r;
                if ((r = rows_copy(kv, st, i, false, (size_t)dst * per_seq, (size_t)src * per_seq, n)) < 0 ||
                    (r = rows_copy(kv, st, i, true, (size_t)dst * per_seq, (size_t)src * per_seq, n)) < 0)
                    return r;
            }
        }
        /* the state after p1 (the live one or a snapshot; at 0 a fresh one), and the
         * snapshots at or before p1 */
        struct kv_rstate *rs = &kv->rs;
        if (rs->n_layer_rs && p1 > 0) {
            const int i = snap_find(rs, src, p1);
            const size_t n = rs->state_floats * sizeof(float);
            if (p1 == rs->live[src]) {
                int r = kv_rs_sync(kv, src);
                if (r < 0) return r;
                rs_host_wrote(rs, dst);
                for (uint32_t l = 0; l < rs->n_layer_rs; l++) {
                    memcpy(rs->conv[l] + (size_t)dst * rs->conv_floats,
                           rs->conv[l] + (size_t)src * rs->conv_floats, rs->conv_floats * sizeof(float));
                    memcpy(rs->ssm[l] + (size_t)dst * rs->ssm_floats,
                           rs->ssm[l] + (size_t)src * rs->ssm_floats, rs->ssm_floats * sizeof(float));
                }
                rs->live[dst] = p1;
            } else {
                kv_rs_load(kv, dst, snap_data(rs, src, (uint32_t)i), p1);
            }
            for (uint32_t k = 0; k < rs->n_snap; k++) {
                uint32_t at = rs->snap_pos[(size_t)src * rs->n_snap + k];
                rs->snap_pos[(size_t)dst * rs->n_snap + k] = at <= p1 ? at : KV_NO_SNAP;
                if (at <= p1) memcpy(snap_data(rs, dst, k), snap_data(rs, src, k), n);
            }
        }
        size_t so = (size_t)src * kv->n_ctx, dO = (size_t)dst * kv->n_ctx;
        memcpy(kv->tok + dO, kv->tok + so, (size_t)p1 * sizeof *kv->tok);
    } else {
        kv_rs_cut(kv, dst, p1);
    }
    if (p1 == 0) {
        rstate_clear(&kv->rs, dst);
        kv_rs_cut(kv, dst, 0);
    }
    kv->seq_len[dst] = p1;
    kv->swa_lo[dst] = MIN(kv->swa_lo[src], p1);
    return 0;
}

/* ---- context shift ------------------------------------------------------------------- */

/* Re-positions one cached K row (all KV heads) of store st by delta positions, in place
 * (DESIGN.md 3.4): to f32, un-rotate every head blockwise (H·H = I), RoPE by delta, rotate
 * back, store in the cache type. tmp holds n_embd_k floats, cs the RoPE pairs of delta. */
static void k_row_shift(const struct kv_cache *kv, const struct kv_store *st, void *row,
                        float *tmp, const float *cs, const struct kern_rope_params *rope) {
    const struct kern_type_traits *tt = kern_type_traits(kv->type_k);
    tt->to_f32(tmp, row, st->n_embd_k);
    if (st->n_rot_k) kern_hadamard(tmp, st->n_embd_k, st->n_rot_k);
    kern_rope_apply(tmp, cs, st->n_head_kv, st->head_dim_k, rope);
    if (st->n_rot_k) kern_hadamard(tmp, st->n_embd_k, st->n_rot_k);
    kv_row_store(row, tmp, kv->type_k, st->n_embd_k);
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
    if (kv->rs.n_layer_rs)
        return err_set(d, ERR_UNSUPPORTED, "context shift of a model with recurrent layers (their "
                       "state folds in every position and cannot drop some)");
    for (uint32_t s = 0; s < kv->n_store; s++)
        if (kv->store[s].ring)
            return err_set(d, ERR_UNSUPPORTED, "context shift of a sliding-window ring cache "
                           "(it holds only the last %u positions)", kv->store[s].n_cells);
    /* RoPE pairs for a rotation by -n_discard positions, per store (its kind's RoPE).
     * kern_rope_cache() scales the pairs by the attention magnitude factor, which the
     * cached K already carries: normalize them back to unit length so only the angle
     * changes. */
    float *cs = ctx->rope_cs[0], *tmp = ctx->k_row;
    for (uint32_t s = 0; s < kv->n_store; s++) {
        const struct kv_store *st = &kv->store[s];
        const struct kern_rope_params *rope = &ctx->rope[s];
        kern_rope_cache(cs, -(int32_t)n_discard, rope);
        for (int64_t i = 0; i < rope->n_dims; i += 2) {
            float mag = hypotf(cs[i], cs[i + 1]);
            if (mag > 0) cs[i] /= mag, cs[i + 1] /= mag;
        }
        size_t base = (size_t)seq * st->n_cells;
        for (uint32_t i = 0; i < st->n_layer_kv; i++) {
            /* a device slot: its rows [p0, len) to the host, shifted there, and back (a
             * context shift is rare next to the decode steps it saves) */
            _cleanup_free_ char *hk = NULL, *hv = NULL;
            char *k = NULL, *v = NULL;
            if (!st->on_dev[i]) {
                k = (char *)st->k[i] + base * st->k_row_bytes;
                v = (char *)st->v[i] + base * st->v_row_bytes;
            } else {
                hk = malloc_array(len, st->k_row_bytes);
                hv = malloc_array(len, st->v_row_bytes);
                if (!hk || !hv) return err_set(d, -ENOMEM, "cannot stage layer %d's KV for the shift", st->layers[i]);
                int r;
                if ((r = kv_rows_get(kv, st, i, seq, p0, len, (uint8_t *)hk + (size_t)p0 * st->k_row_bytes,
                                     (uint8_t *)hv + (size_t)p0 * st->v_row_bytes)) < 0)
                    return err_set(d, r, "cannot read layer %d's KV from the device", st->layers[i]);
                k = hk, v = hv;
            }
            for (uint32_t p = p0 + n_discard; p < len; p++) {
                char *dst = k + (size_t)(p - n_discard) * st->k_row_bytes;
                memcpy(dst, k + (size_t)p * st->k_row_bytes, st->k_row_bytes);
                k_row_shift(kv, st, dst, tmp, cs, rope);
            }
            memmove(v + (size_t)p0 * st->v_row_bytes,
                    v + (size_t)(p0 + n_discard) * st->v_row_bytes,
                    (size_t)(len - p0 - n_discard) * st->v_row_bytes);
            if (st->on_dev[i] && len - n_discard > p0) {
                size_t n = len - n_discard - p0;
                int r;
                if ((r = rows_set(kv, st, i, false, base + p0, n, k + (size_t)p0 * st->k_row_bytes)) < 0 ||
                    (r = rows_set(kv, st, i, true, base + p0, n, v + (size_t)p0 * st->v_row_bytes)) < 0)
                    return err_set(d, r, "cannot write layer %d's shifted KV to the device", st->layers[i]);
            }
        }
    }
    size_t base = (size_t)seq * kv->n_ctx;
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
        .n_rot_k = kv->store[0].n_layer_kv ? kv->store[0].n_rot_k : kv->store[1].n_rot_k,
        .n_rot_v = kv->store[0].n_layer_kv ? kv->store[0].n_rot_v : kv->store[1].n_rot_v,
        .n_cache = kv->n_store,
        .n_layer_rs = kv->rs.n_layer_rs,
        .rs_state_bytes = kv_rs_state_bytes(kv),
    };
    for (uint32_t s = 0; s < kv->n_store; s++) {
        const struct kv_store *st = &kv->store[s];
        ret->cache[s] = (struct engine_kv_cache_info){
            .n_layer_kv = st->n_layer_kv,
            .window = st->window,
            .n_cells = st->n_cells,
            .head_dim_k = (uint32_t)st->head_dim_k,
            .head_dim_v = (uint32_t)st->head_dim_v,
            .n_rot_k = st->n_rot_k,
            .n_rot_v = st->n_rot_v,
        };
    }
}

bool engine_kv_rotation_env_default(void) {
    /* as llama.cpp's LLAMA_ATTN_ROT_DISABLE: any non-zero integer disables */
    const char *e = getenv("WARM_ATTN_ROT_DISABLE");
    return !(e && atoi(e) != 0);
}
