/* KV state blobs: engine_kv_export() / engine_kv_import() (DESIGN.md 3.5, 3.6).
 *
 * ## Format, version 3 (ENGINE_KV_STATE_VERSION)
 * Version 3 adds the recurrent layers of a hybrid (qwen35: Gated DeltaNet, notes/hybrid.md
 * §A.9, §D.7): a recurrent ABI record after the cache records and, optionally, a snapshot
 * of the recurrent state at the blob's end after the attention rows (flags below). A blob
 * of a model without recurrent layers has the layout of version 2 (flags 0). Version 2
 * carried one cache ABI record per cache of the context (a model with sliding-window
 * layers has a full-attention cache and an SWA cache, each with its own head sizes,
 * rotation and RoPE); version 1 had exactly one record.
 * Little-endian, no padding, every field 4 or 8 bytes wide; offsets in bytes.
 *
 * Fixed header (KVS_FIXED = 40 bytes):
 *   0   magic          4 bytes "WKVS"
 *   4   format_version u32, 3
 *   8   header_bytes   u32, bytes from offset 0 to the range section (= 40 + the cache
 *                      ABI records + the recurrent ABI record); lets a reader skip the ABI
 *   12  flags          u32: bit 0 (KVS_FLAG_RECURRENT) the model has recurrent layers and
 *                      the recurrent ABI record follows the cache records; bit 1
 *                      (KVS_FLAG_SNAPSHOT, only with bit 0) the payload ends with the
 *                      recurrent state after positions [0, p1). Other bits: rejected.
 *   16  fingerprint    16 bytes: the model's XXH3-128, low u64 then high u64
 *   32  arch           u32, enum engine_arch of the model
 *   36  n_cache        u32, cache records that follow: 1, or 2 for a model with SWA
 *                      layers (the full-attention cache first, then the SWA cache; a
 *                      model with SWA layers only has just the SWA record)
 * Cache ABI record, per cache (KVS_CACHE_FIXED = 88 bytes + 4 per model layer), at
 * 40 + c × (88 + 4 × n_layer) for cache c:
 *   +0  n_layer        u32, layers of the model (entries of the source map; the same in
 *                      every record)
 *   +4  n_layer_kv     u32, layers of this cache that own KV (and have rows in the payload)
 *   +8  type_k         u32, ggml type id of cached K (kern_type)
 *   +12 type_v         u32, same for V
 *   +16 head_dim_k     u32, of this cache's layers (gemma4: SWA and global differ)
 *   +20 head_dim_v     u32
 *   +24 n_head_kv      u32
 *   +28 n_rot_k        u32, Hadamard block of K, 0 = not rotated (DESIGN.md 3.4)
 *   +32 n_rot_v        u32, same for V
 *   +36 rot_kind       u32, 0 = none (both sizes 0), 1 = normalized Sylvester Hadamard,
 *                      blockwise, applied after RoPE
 *   +40 v_layout       u32, 0 = V as rows of n_head_kv × head_dim_v per position
 *   +44 swa_window     u32, 0 = full attention, else the window W of this SWA cache
 *   +48 rope_dims      u32, rotated values per head (RoPE fields: this cache's layers'
 *                      RoPE; an SWA cache has its own base, scale 1, no YaRN)
 *   +52 rope_kind      u32, enum engine_rope_kind (0 adjacent pairs, 1 NeoX halves)
 *   +56 rope_scaling   u32, enum engine_rope_scaling
 *   +60 rope_base      f32
 *   +64 rope_freq_scale f32
 *   +68 yarn_ext_factor f32
 *   +72 yarn_attn_factor f32
 *   +76 yarn_beta_fast f32
 *   +80 yarn_beta_slow f32
 *   +84 rope_n_ctx_orig u32
 *   +88 source         i32 × n_layer: for each layer whose KV is in this cache, the layer
 *                      whose KV it reads (kv_source); -1 (0xffffffff) for a layer whose
 *                      KV is in the other cache or that is recurrent. Every layer is in
 *                      exactly one record or in the recurrent record's list.
 * Recurrent ABI record (flag bit 0; KVS_RS_FIXED = 48 bytes + 4 per recurrent layer), at
 * 40 + n_cache × (88 + 4 × n_layer):
 *   +0  n_layer        u32, layers of the model (as in the cache records)
 *   +4  n_layer_rs     u32, recurrent layers (1 .. n_layer)
 *   +8  conv_kernel    u32, K of the causal conv (its state keeps K - 1 inputs)
 *   +12 n_head_k       u32, H_k
 *   +16 n_head_v       u32, H_v (a multiple of H_k)
 *   +20 head_dim_k     u32, d_k
 *   +24 head_dim_v     u32, d_v
 *   +28 n_chan         u32, conv channels = 2 × H_k × d_k + H_v × d_v, [q | k | v]
 *   +32 head_map       u32, enum kern_dn_head_map: 0 tiled V-head order (qwen35: value
 *                      head h reads key head h mod H_k), 1 grouped (qwen3next)
 *   +36 state_type     u32, ggml type id of the state: 0 = f32 (the only one)
 *   +40 conv_layout    u32, 0 = (K - 1, n_chan) time-major, oldest input first
 *   +44 ssm_layout     u32, 0 = (H_v, d_v, d_k): S[key i][value j] of head h at
 *                      h × d_v × d_k + j × d_k + i (kernels/deltanet.h)
 *   +48 layers         u32 × n_layer_rs, the recurrent layers, ascending
 * Range section (at header_bytes):
 *   +0  p0             u32, first position
 *   +4  p1             u32, one past the last (p0 < p1)
 *   +8  tokens         i32 × (p1 - p0), the token id of each position
 *   then payload_bytes u64, payload_xxh3 u64 (XXH3-64 of the payload), header_xxh3 u64
 *   (XXH3-64 of every byte before this field: header, ABI, range and the two fields
 *   before it), then the payload.
 * Payload: per cache in record order, per owning layer in layer order, the K rows of
 * positions [r0, p1) then their V rows, each row the cache's own bytes (n_head_kv ×
 * head_dim values of the cache type, rotated when n_rot is not 0): n_layer_kv ×
 * (p1 - r0) × (k_row + v_row) bytes. r0 = p0 for a full-attention cache; for an SWA
 * cache of window W, r0 = max(p0, p1 - W + 1): the rows of its tokens that a query at
 * p1 can still see (a chunk of C < W tokens carries all its rows, so a chain of chunks
 * carries every SWA row and any chunk end is a resume point, DESIGN.md 3.6; a longer blob
 * carries the last W - 1, all that continuing at p1 needs). Import writes them into the
 * SWA ring; when r0 > p0 the ring holds nothing below r0.
 * Then, with flag bit 1, the recurrent snapshot: per recurrent layer in list order, its
 * conv state ((K - 1) × n_chan f32) then its S (H_v × d_v × d_k f32), the state after
 * positions [0, p1). A recurrent state cannot be rolled back or rebuilt from the
 * attention rows, so only a blob with a snapshot is a point a hybrid resumes at; one
 * without carries rows for a later blob of a chain.
 * The blob ends with the payload; trailing bytes are an error.
 *
 * ## Version policy
 * Bytes 0..11 (magic, format_version, header_bytes) keep their meaning forever. Any other
 * change of layout or meaning — a field added, removed, widened or reinterpreted, a new
 * payload encoding, a new rot_kind — bumps format_version by one. A reader accepts only
 * its own version (exact equality, as llama.cpp's state files): a blob of another version
 * is rejected as incompatible, never converted, and the daemon recomputes and overwrites
 * it. New versions do not reuse the numbers of old ones.
 *
 * ## Checks on import, in order (nothing is written before all pass)
 * magic and size (ERR_STATE_BAD), version, structure (lengths, counts, known types,
 * payload size = the ABI's; ERR_STATE_BAD), model fingerprint and arch, per cache layout
 * (layers, source map, head sizes, RoPE), K type, V type, K rotation, V rotation; then the
 * recurrent ABI (layers, shape, V-head order, state type and layouts) and the recurrent
 * snapshot where one is needed (both ERR_STATE_LAYOUT), destination (sequence,
 * positions), tokens, header checksum, payload checksum. */
#include "engine/forward.h"

#include <errno.h>
#include <string.h>

#define KVS_MAGIC "WKVS"
#define KVS_FIXED 40
#define KVS_CACHE_FIXED 88
#define KVS_ROT_NONE 0
#define KVS_ROT_HADAMARD 1
#define KVS_RS_FIXED 48
#define KVS_FLAG_RECURRENT 1u
#define KVS_FLAG_SNAPSHOT 2u

/* ---- little-endian writer and reader ------------------------------------------------ */

static uint8_t *put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
    return p + 4;
}
static uint8_t *put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
    return p + 8;
}
static uint8_t *put_f32(uint8_t *p, float f) {
    uint32_t v;
    memcpy(&v, &f, 4);
    return put_u32(p, v);
}
static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const uint8_t *p) {
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}
static float get_f32(const uint8_t *p) {
    uint32_t v = get_u32(p);
    float f;
    memcpy(&f, &v, 4);
    return f;
}

/* ---- the cache ABI ----------------------------------------------------------------- */

#define KVS_NO_LAYER 0xffffffffu /* source map entry of a layer whose KV is in another cache */

/* The fields of one cache ABI record, as numbers (the runtime's or a blob's). */
struct kvs_abi {
    uint32_t n_layer, n_layer_kv, type_k, type_v, head_dim_k, head_dim_v, n_head_kv;
    uint32_t n_rot_k, n_rot_v, rot_kind, v_layout, swa_window;
    uint32_t rope_dims, rope_kind, rope_scaling;
    float rope_base, rope_freq_scale, yarn_ext, yarn_attn, yarn_beta_fast, yarn_beta_slow;
    uint32_t rope_n_ctx_orig;
    const uint8_t *source_le; /* blob: n_layer little-endian i32 */
};

/* The runtime's caches that appear in blobs: the stores that have layers, in order. */
static uint32_t runtime_caches(const struct kv_cache *kv, uint32_t idx[KV_MAX_STORES]) {
    uint32_t n = 0;
    for (uint32_t s = 0; s < kv->n_store; s++)
        if (kv->store[s].n_layer_kv) idx[n++] = s;
    return n;
}

static void abi_of(const struct engine_context *ctx, uint32_t s, struct kvs_abi *a) {
    const struct kv_cache *kv = &ctx->kv;
    const struct kv_store *st = &kv->store[s];
    const struct engine_hparams *hp = &ctx->model->hp;
    const struct kern_rope_params *rope = &ctx->rope[s];
    *a = (struct kvs_abi){
        .n_layer = kv->n_layer,
        .n_layer_kv = st->n_layer_kv,
        .type_k = (uint32_t)kv->type_k,
        .type_v = (uint32_t)kv->type_v,
        .head_dim_k = (uint32_t)st->head_dim_k,
        .head_dim_v = (uint32_t)st->head_dim_v,
        .n_head_kv = (uint32_t)st->n_head_kv,
        .n_rot_k = (uint32_t)st->n_rot_k,
        .n_rot_v = (uint32_t)st->n_rot_v,
        .rot_kind = st->n_rot_k || st->n_rot_v ? KVS_ROT_HADAMARD : KVS_ROT_NONE,
        .v_layout = 0,
        .swa_window = st->window,
        .rope_dims = (uint32_t)rope->n_dims,
        .rope_kind = (uint32_t)hp->rope_kind,
        .rope_scaling = s == KV_STORE_SWA ? ENGINE_ROPE_SCALING_NONE : (uint32_t)hp->rope_scaling,
        .rope_base = rope->freq_base,
        .rope_freq_scale = rope->freq_scale,
        .yarn_ext = rope->ext_factor,
        .yarn_attn = rope->attn_factor,
        .yarn_beta_fast = rope->beta_fast,
        .yarn_beta_slow = rope->beta_slow,
        .rope_n_ctx_orig = (uint32_t)rope->n_ctx_orig,
    };
}

/* Source map entry of layer il in the record of store s (a recurrent layer is in none). */
static uint32_t map_entry(const struct kv_cache *kv, uint32_t s, uint32_t il) {
    if (kv->rs.n_layer_rs && kv->rs.slot[il] >= 0) return KVS_NO_LAYER;
    return kv->store_of[il] == s ? (uint32_t)kv->source[il] : KVS_NO_LAYER;
}

/* ---- the recurrent ABI --------------------------------------------------------------- */

struct kvs_rs_abi {
    uint32_t n_layer, n_layer_rs, n_kernel, n_head_k, n_head_v, head_dim_k, head_dim_v;
    uint32_t n_chan, head_map, state_type, conv_layout, ssm_layout;
    const uint8_t *layers_le; /* blob: n_layer_rs little-endian u32 */
};

static void rs_abi_of(const struct kv_cache *kv, struct kvs_rs_abi *a) {
    const struct kv_rstate *rs = &kv->rs;
    *a = (struct kvs_rs_abi){
        .n_layer = kv->n_layer,
        .n_layer_rs = rs->n_layer_rs,
        .n_kernel = (uint32_t)rs->n_kernel,
        .n_head_k = (uint32_t)rs->shape.n_head_k,
        .n_head_v = (uint32_t)rs->shape.n_head_v,
        .head_dim_k = (uint32_t)rs->shape.head_dim_k,
        .head_dim_v = (uint32_t)rs->shape.head_dim_v,
        .n_chan = (uint32_t)rs->n_chan,
        .head_map = (uint32_t)rs->shape.head_map,
        .state_type = KERN_TYPE_F32,
        .conv_layout = 0,
        .ssm_layout = 0,
    };
}

static size_t rs_record_bytes(uint32_t n_layer_rs) {
    return KVS_RS_FIXED + 4 * (size_t)n_layer_rs;
}

static uint8_t *rs_abi_put(uint8_t *p, const struct kvs_rs_abi *a, const struct kv_cache *kv) {
    const uint32_t u[] = {a->n_layer,    a->n_layer_rs, a->n_kernel,    a->n_head_k,
                          a->n_head_v,   a->head_dim_k, a->head_dim_v,  a->n_chan,
                          a->head_map,   a->state_type, a->conv_layout, a->ssm_layout};
    for (size_t i = 0; i < ARRAY_SIZE(u); i++) p = put_u32(p, u[i]);
    for (uint32_t i = 0; i < a->n_layer_rs; i++) p = put_u32(p, (uint32_t)kv->rs.layers[i]);
    return p;
}

static void rs_abi_get(const uint8_t *p, struct kvs_rs_abi *a) {
    uint32_t *u[] = {&a->n_layer,    &a->n_layer_rs, &a->n_kernel,    &a->n_head_k,
                     &a->n_head_v,   &a->head_dim_k, &a->head_dim_v,  &a->n_chan,
                     &a->head_map,   &a->state_type, &a->conv_layout, &a->ssm_layout};
    for (size_t i = 0; i < ARRAY_SIZE(u); i++, p += 4) *u[i] = get_u32(p);
    a->layers_le = p;
}

/* Floats of a whole state of the ABI (its fields are bounded by rs_record_check). */
static size_t rs_state_floats(const struct kvs_rs_abi *a) {
    return (size_t)a->n_layer_rs * ((size_t)(a->n_kernel - 1) * a->n_chan +
                                     (size_t)a->n_head_v * a->head_dim_v * a->head_dim_k);
}

static uint8_t *abi_put(uint8_t *p, const struct kvs_abi *a, const struct kv_cache *kv,
                        uint32_t s) {
    const uint32_t u[] = {a->n_layer,    a->n_layer_kv, a->type_k,    a->type_v,
                          a->head_dim_k, a->head_dim_v, a->n_head_kv, a->n_rot_k,
                          a->n_rot_v,    a->rot_kind,   a->v_layout,  a->swa_window,
                          a->rope_dims,  a->rope_kind,  a->rope_scaling};
    for (size_t i = 0; i < ARRAY_SIZE(u); i++) p = put_u32(p, u[i]);
    const float f[] = {a->rope_base, a->rope_freq_scale, a->yarn_ext,
                       a->yarn_attn, a->yarn_beta_fast,  a->yarn_beta_slow};
    for (size_t i = 0; i < ARRAY_SIZE(f); i++) p = put_f32(p, f[i]);
    p = put_u32(p, a->rope_n_ctx_orig);
    for (uint32_t il = 0; il < kv->n_layer; il++) p = put_u32(p, map_entry(kv, s, il));
    return p;
}

static void abi_get(const uint8_t *p, struct kvs_abi *a) {
    uint32_t *u[] = {&a->n_layer,    &a->n_layer_kv, &a->type_k,    &a->type_v,
                     &a->head_dim_k, &a->head_dim_v, &a->n_head_kv, &a->n_rot_k,
                     &a->n_rot_v,    &a->rot_kind,   &a->v_layout,  &a->swa_window,
                     &a->rope_dims,  &a->rope_kind,  &a->rope_scaling};
    for (size_t i = 0; i < ARRAY_SIZE(u); i++, p += 4) *u[i] = get_u32(p);
    float *f[] = {&a->rope_base, &a->rope_freq_scale, &a->yarn_ext,
                  &a->yarn_attn, &a->yarn_beta_fast,  &a->yarn_beta_slow};
    for (size_t i = 0; i < ARRAY_SIZE(f); i++, p += 4) *f[i] = get_f32(p);
    a->rope_n_ctx_orig = get_u32(p);
    a->source_le = p + 4;
}

/* The first position whose rows a cache with SWA window w carries in a blob of [p0, p1):
 * all of them without a window, else those a query at p1 - 1 sees, [p1 - w + 1, p1),
 * but never before p0. */
static uint32_t rows_from(uint32_t w, uint32_t p0, uint32_t p1) {
    return w == 0 || p1 - p0 < w ? p0 : p1 - w + 1;
}

static size_t record_bytes(uint32_t n_layer) {
    return KVS_CACHE_FIXED + 4 * (size_t)n_layer;
}

/* Bytes of the header (to the range section) of a blob of kv. */
static size_t header_size(const struct kv_cache *kv, uint32_t n_cache) {
    return KVS_FIXED + n_cache * record_bytes(kv->n_layer) +
           (kv->rs.n_layer_rs ? rs_record_bytes(kv->rs.n_layer_rs) : 0);
}

/* Bytes of the blob of [p0, p1) of kv, with a recurrent snapshot or not; false on
 * overflow. */
static bool blob_size(const struct kv_cache *kv, uint32_t p0, uint32_t p1, bool snap,
                      size_t *ret) {
    uint32_t idx[KV_MAX_STORES], n_cache = runtime_caches(kv, idx);
    size_t payload = snap ? kv_rs_state_bytes(kv) : 0, tok, rows = header_size(kv, n_cache);
    for (uint32_t c = 0; c < n_cache; c++) {
        const struct kv_store *st = &kv->store[idx[c]];
        size_t b;
        uint32_t n_pos = p1 - rows_from(st->window, p0, p1);
        if (!size_mul((size_t)st->n_layer_kv * n_pos, st->k_row_bytes + st->v_row_bytes, &b) ||
            !size_add(payload, b, &payload))
            return false;
    }
    if (!size_mul(p1 - p0, 4, &tok)) return false;
    return size_add(rows + 8 + 24, tok, &rows) && size_add(rows, payload, ret);
}

/* ---- export -------------------------------------------------------------------------- */

int engine_kv_export(const struct engine_context *ctx, int32_t seq, uint32_t p0, uint32_t p1,
                     void *buf, size_t cap, size_t *ret_size, struct err_detail *d) {
    return engine_kv_export_snap(ctx, seq, p0, p1, ENGINE_KV_SNAP_AUTO, buf, cap, ret_size, d);
}

int engine_kv_export_snap(const struct engine_context *ctx, int32_t seq, uint32_t p0,
                          uint32_t p1, enum engine_kv_snap snap, void *buf, size_t cap,
                          size_t *ret_size, struct err_detail *d) {
    const struct kv_cache *kv = &ctx->kv;
    if ((unsigned)snap >= ENGINE_KV_SNAP_COUNT)
        return err_set(d, ERR_INVALID, "snapshot mode %d is not one of enum engine_kv_snap",
                       (int)snap);
    if (seq < 0 || (uint32_t)seq >= kv->n_seq)
        return err_set(d, ERR_INVALID, "sequence %d is not in [0, %u)", seq, kv->n_seq);
    if (p0 >= p1 || p1 > kv->seq_len[seq])
        return err_set(d, ERR_INVALID, "range [%u, %u) is not a non-empty part of the %u "
                       "positions of sequence %d", p0, p1, kv->seq_len[seq], seq);
    uint32_t idx[KV_MAX_STORES], n_cache = runtime_caches(kv, idx);
    for (uint32_t c = 0; c < n_cache; c++) {
        const struct kv_store *st = &kv->store[idx[c]];
        uint32_t from = rows_from(st->window, p0, p1);
        if (st->window && from < kv->swa_lo[seq])
            return err_set(d, ERR_INVALID, "the sliding-window rows of positions [%u, %u) are "
                           "no longer held (sequence %d holds them from %u on)", from, p1, seq,
                           kv->swa_lo[seq]);
    }
    /* a hybrid's state at p1: the live one or a snapshot, when the context holds it */
    bool with_snap = false;
    if (kv->rs.n_layer_rs && snap != ENGINE_KV_SNAP_NONE) {
        with_snap = kv_rs_get(kv, seq, p1, NULL);
        if (!with_snap && snap == ENGINE_KV_SNAP_NEED)
            return err_set(d, -ENODATA, "sequence %d: no recurrent state at position %u is held "
                           "(the live state is at %u; keep one with engine_kv_snapshot when "
                           "the sequence is there)", seq, p1, kv->rs.live[seq]);
    }
    size_t size;
    if (!blob_size(kv, p0, p1, with_snap, &size))
        return err_set(d, ERR_OVERFLOW, "a blob of %u positions overflows", p1 - p0);
    if (!buf) {
        *ret_size = size;
        return 0;
    }
    if (cap < size)
        return err_set(d, ERR_TOO_LARGE, "the blob needs %zu bytes, the buffer holds %zu", size,
                       cap);

    uint8_t *p = buf;
    memcpy(p, KVS_MAGIC, 4);
    p = put_u32(p + 4, ENGINE_KV_STATE_VERSION);
    p = put_u32(p, (uint32_t)header_size(kv, n_cache));
    p = put_u32(p, (kv->rs.n_layer_rs ? KVS_FLAG_RECURRENT : 0) | (with_snap ? KVS_FLAG_SNAPSHOT : 0));
    p = put_u64(p, ctx->model->fingerprint.lo);
    p = put_u64(p, ctx->model->fingerprint.hi);
    p = put_u32(p, (uint32_t)ctx->model->arch);
    p = put_u32(p, n_cache);
    for (uint32_t c = 0; c < n_cache; c++) {
        struct kvs_abi abi;
        abi_of(ctx, idx[c], &abi);
        p = abi_put(p, &abi, kv, idx[c]);
    }
    if (kv->rs.n_layer_rs) {
        struct kvs_rs_abi ra;
        rs_abi_of(kv, &ra);
        p = rs_abi_put(p, &ra, kv);
    }
    p = put_u32(p, p0);
    p = put_u32(p, p1);
    for (uint32_t pos = p0; pos < p1; pos++) p = put_u32(p, (uint32_t)*kv_tok(kv, seq, (int32_t)pos));
    uint8_t *sums = p;
    uint8_t *payload = sums + 24, *q = payload;
    for (uint32_t c = 0; c < n_cache; c++) {
        const struct kv_store *st = &kv->store[idx[c]];
        uint32_t from = rows_from(st->window, p0, p1), n_pos = p1 - from;
        for (uint32_t i = 0; i < st->n_layer_kv; i++) {
            int r = kv_rows_get(kv, st, i, seq, from, p1, q, q + (size_t)n_pos * st->k_row_bytes);
            if (r < 0) return err_set(d, r, "cannot read layer %d's KV rows from the device", st->layers[i]);
            q += (size_t)n_pos * (st->k_row_bytes + st->v_row_bytes);
        }
    }
    if (with_snap) {
        /* (a GPU's copy of the live state first: kv_rs_get cannot report its failure) */
        int r = kv_rs_sync(kv, seq);
        if (r < 0)
            return err_set(d, r, "sequence %d: cannot read its recurrent state from the device",
                           seq);
        kv_rs_get(kv, seq, p1, q);
        q += kv_rs_state_bytes(kv);
    }
    size_t payload_bytes = (size_t)(q - payload);
    p = put_u64(sums, payload_bytes);
    p = put_u64(p, hash64(payload, payload_bytes));
    put_u64(p, hash64(buf, (size_t)(p - (uint8_t *)buf)));
    *ret_size = size;
    return 0;
}

/* ---- import -------------------------------------------------------------------------- */

/* A parsed blob: views into its bytes, valid while the blob is. */
struct kvs_view {
    uint32_t n_cache, flags;
    struct kvs_abi abi[KV_MAX_STORES];
    struct kvs_rs_abi rs;    /* with KVS_FLAG_RECURRENT, else zero */
    const uint8_t *snapshot; /* with KVS_FLAG_SNAPSHOT: the state, at the payload's end */
    size_t snapshot_bytes;
    size_t k_row_bytes[KV_MAX_STORES], v_row_bytes[KV_MAX_STORES];
    const uint8_t *fingerprint;
    uint32_t arch, p0, p1;
    const uint8_t *tokens;   /* (p1 - p0) little-endian i32 */
    const uint8_t *sums;     /* payload_bytes, payload_xxh3, header_xxh3 */
    const uint8_t *payload;
    size_t payload_bytes;
};

static bool kv_type_known(uint32_t t) {
    const struct kern_type_traits *tt = kern_type_traits((int)t);
    return tt && tt->to_f32 && tt->from_f32 && tt->blck_size <= 32;
}

/* One cache record's own consistency; at is its offset (for messages). */
static int record_check(const struct kvs_abi *a, size_t at, size_t *k_row, size_t *v_row,
                        struct err_detail *d) {
    /* source map: owners read themselves, shared layers read an owner of this cache */
    uint32_t owners = 0;
    for (uint32_t il = 0; il < a->n_layer; il++) {
        uint32_t src = get_u32(a->source_le + 4 * il);
        if (src == KVS_NO_LAYER) continue;
        bool ok = src < a->n_layer && get_u32(a->source_le + 4 * src) == src;
        if (!ok)
            return err_set(d, ERR_STATE_BAD, "state blob: layer %u reads layer %u (offset %zu), "
                           "which owns no KV", il, src, at + KVS_CACHE_FIXED + 4 * il);
        owners += src == il;
    }
    if (owners != a->n_layer_kv)
        return err_set(d, ERR_STATE_BAD, "state blob: n_layer_kv %u, the source map has %u "
                       "owners", a->n_layer_kv, owners);
    if (!kv_type_known(a->type_k) || !kv_type_known(a->type_v))
        return err_set(d, ERR_STATE_BAD, "state blob: unknown cache type ids %u/%u at offset %zu",
                       a->type_k, a->type_v, at + 8);
    size_t n_embd_k, n_embd_v;
    if (!size_mul(a->n_head_kv, a->head_dim_k, &n_embd_k) ||
        !size_mul(a->n_head_kv, a->head_dim_v, &n_embd_v) || n_embd_k > (1u << 24) ||
        n_embd_v > (1u << 24))
        return err_set(d, ERR_STATE_BAD, "state blob: %u heads of %u/%u values", a->n_head_kv,
                       a->head_dim_k, a->head_dim_v);
    *k_row = kern_row_size(a->type_k, (int64_t)n_embd_k);
    *v_row = kern_row_size(a->type_v, (int64_t)n_embd_v);
    if (*k_row == 0 || *v_row == 0)
        return err_set(d, ERR_STATE_BAD, "state blob: rows of %zu/%zu values do not fit the "
                       "cache types' blocks", n_embd_k, n_embd_v);
    bool rotated = a->n_rot_k || a->n_rot_v;
    if (a->rot_kind != (rotated ? KVS_ROT_HADAMARD : KVS_ROT_NONE))
        return err_set(d, ERR_STATE_BAD, "state blob: rotation kind %u with n_rot_k=%u, "
                       "n_rot_v=%u", a->rot_kind, a->n_rot_k, a->n_rot_v);
    return 0;
}

/* The recurrent ABI record's own consistency; at is its offset (for messages). */
static int rs_record_check(const struct kvs_rs_abi *a, size_t at, uint32_t n_layer,
                           struct err_detail *d) {
    if (a->n_layer != n_layer)
        return err_set(d, ERR_STATE_BAD, "state blob: the recurrent record at offset %zu has %u "
                       "layers, the cache records %u", at, a->n_layer, n_layer);
    for (uint32_t i = 0; i < a->n_layer_rs; i++) {
        uint32_t l = get_u32(a->layers_le + 4 * i);
        if (l >= n_layer || (i && l <= get_u32(a->layers_le + 4 * (i - 1))))
            return err_set(d, ERR_STATE_BAD, "state blob: recurrent layer %u (offset %zu) is %u: "
                           "not ascending in [0, %u)", i, at + KVS_RS_FIXED + 4 * i, l, n_layer);
    }
    if (a->n_kernel < 2 || a->n_kernel > KERN_DN_MAX_KERNEL || a->n_head_k < 1 ||
        a->n_head_k > 4096 || a->n_head_v < 1 || a->n_head_v > 4096 ||
        a->n_head_v % a->n_head_k || a->head_dim_k < 1 || a->head_dim_k > KERN_DN_MAX_HEAD_DIM ||
        a->head_dim_v < 1 || a->head_dim_v > KERN_DN_MAX_HEAD_DIM)
        return err_set(d, ERR_STATE_BAD, "state blob: recurrent shape at offset %zu: conv kernel "
                       "%u, H_k %u, H_v %u, d_k %u, d_v %u", at + 8, a->n_kernel, a->n_head_k,
                       a->n_head_v, a->head_dim_k, a->head_dim_v);
    uint64_t chan = 2ull * a->n_head_k * a->head_dim_k + (uint64_t)a->n_head_v * a->head_dim_v;
    if (a->n_chan != chan)
        return err_set(d, ERR_STATE_BAD, "state blob: %u conv channels at offset %zu, the heads "
                       "make %llu", a->n_chan, at + 28, (unsigned long long)chan);
    if (a->head_map >= KERN_DN_HEAD_MAP_COUNT || a->state_type != KERN_TYPE_F32 ||
        a->conv_layout != 0 || a->ssm_layout != 0)
        return err_set(d, ERR_STATE_BAD, "state blob: recurrent head map %u, state type %u, "
                       "layouts %u/%u at offset %zu (known: head map 0 or 1, f32, 0/0)",
                       a->head_map, a->state_type, a->conv_layout, a->ssm_layout, at + 32);
    return 0;
}

/* Magic, size, version, then the blob's own consistency (no runtime comparison yet). */
static int blob_parse(const uint8_t *b, size_t n, struct kvs_view *v, struct err_detail *d) {
    if (n < 12 || memcmp(b, KVS_MAGIC, 4) != 0)
        return err_set(d, ERR_STATE_BAD, n < 12 ? "not a state blob: %zu bytes" :
                       "not a state blob (bad magic, %zu bytes)", n);
    uint32_t version = get_u32(b + 4);
    if (version != ENGINE_KV_STATE_VERSION)
        return err_set(d, ERR_STATE_VERSION, "incompatible state version (blob %u, runtime %u)",
                       version, ENGINE_KV_STATE_VERSION);
    if (n < KVS_FIXED + KVS_CACHE_FIXED)
        return err_set(d, ERR_STATE_BAD, "state blob truncated: %zu bytes, the header alone "
                       "needs %d", n, KVS_FIXED + KVS_CACHE_FIXED);
    uint32_t header_bytes = get_u32(b + 8), flags = get_u32(b + 12), n_cache = get_u32(b + 36);
    if ((flags & ~(KVS_FLAG_RECURRENT | KVS_FLAG_SNAPSHOT)) ||
        ((flags & KVS_FLAG_SNAPSHOT) && !(flags & KVS_FLAG_RECURRENT)))
        return err_set(d, ERR_STATE_BAD, "state blob: flags 0x%x at offset 12 (defined: bit 0 "
                       "recurrent layers, bit 1 a recurrent snapshot, only with bit 0)", flags);
    v->flags = flags;
    if (n_cache < 1 || n_cache > KV_MAX_STORES)
        return err_set(d, ERR_STATE_BAD, "state blob: %u caches at offset 36, expected 1 or 2",
                       n_cache);
    v->n_cache = n_cache;
    v->fingerprint = b + 16;
    v->arch = get_u32(b + 32);
    uint32_t n_layer = get_u32(b + KVS_FIXED);
    if (n_layer < 1 || n_layer > ENGINE_MAX_LAYERS)
        return err_set(d, ERR_STATE_BAD, "state blob: n_layer %u at offset %d is not in [1, %d]",
                       n_layer, KVS_FIXED, ENGINE_MAX_LAYERS);
    size_t rec = record_bytes(n_layer), rs_at = KVS_FIXED + n_cache * rec, want = rs_at;
    uint32_t n_layer_rs = 0;
    if (flags & KVS_FLAG_RECURRENT) {
        if (n < rs_at + KVS_RS_FIXED)
            return err_set(d, ERR_STATE_BAD, "state blob truncated at %zu bytes, inside the "
                           "recurrent ABI record at offset %zu", n, rs_at);
        n_layer_rs = get_u32(b + rs_at + 4);
        if (n_layer_rs < 1 || n_layer_rs > n_layer)
            return err_set(d, ERR_STATE_BAD, "state blob: %u recurrent layers at offset %zu, "
                           "not in [1, %u]", n_layer_rs, rs_at + 4, n_layer);
        want += rs_record_bytes(n_layer_rs);
    }
    if (header_bytes != want)
        return err_set(d, ERR_STATE_BAD, "state blob: header_bytes %u at offset 8, the ABI "
                       "of %u caches of %u layers (%u recurrent) makes %zu", header_bytes,
                       n_cache, n_layer, n_layer_rs, want);
    if (n < (size_t)header_bytes + 8)
        return err_set(d, ERR_STATE_BAD, "state blob truncated at %zu bytes, inside the header "
                       "(%u bytes)", n, header_bytes + 8);
    int r;
    for (uint32_t c = 0; c < n_cache; c++) {
        size_t at = KVS_FIXED + c * rec;
        abi_get(b + at, &v->abi[c]);
        if (v->abi[c].n_layer != n_layer)
            return err_set(d, ERR_STATE_BAD, "state blob: cache %u at offset %zu has %u layers, "
                           "cache 0 %u", c, at, v->abi[c].n_layer, n_layer);
        if ((r = record_check(&v->abi[c], at, &v->k_row_bytes[c], &v->v_row_bytes[c], d)) < 0)
            return r;
    }
    bool recurrent[ENGINE_MAX_LAYERS] = {0};
    if (flags & KVS_FLAG_RECURRENT) {
        rs_abi_get(b + rs_at, &v->rs);
        if ((r = rs_record_check(&v->rs, rs_at, n_layer, d)) < 0) return r;
        for (uint32_t i = 0; i < n_layer_rs; i++) recurrent[get_u32(v->rs.layers_le + 4 * i)] = true;
    }
    /* every layer's KV is in exactly one cache, or the layer is recurrent */
    for (uint32_t il = 0; il < n_layer; il++) {
        uint32_t in = recurrent[il];
        for (uint32_t c = 0; c < n_cache; c++)
            in += get_u32(v->abi[c].source_le + 4 * il) != KVS_NO_LAYER;
        if (in != 1)
            return err_set(d, ERR_STATE_BAD, "state blob: layer %u is in %u of the %u caches' "
                           "source maps and the recurrent layers", il, in, n_cache);
    }

    const uint8_t *rr = b + header_bytes;
    v->p0 = get_u32(rr);
    v->p1 = get_u32(rr + 4);
    if (v->p0 >= v->p1)
        return err_set(d, ERR_STATE_BAD, "state blob: empty range [%u, %u) at offset %u", v->p0,
                       v->p1, header_bytes);
    size_t n_pos = v->p1 - v->p0, at = (size_t)header_bytes + 8, tok_bytes, expect = 0;
    if (!size_mul(n_pos, 4, &tok_bytes) || tok_bytes > n - at || n - at - tok_bytes < 24)
        return err_set(d, ERR_STATE_BAD, "state blob truncated: %zu positions of tokens at "
                       "offset %zu do not fit in %zu bytes", n_pos, at, n);
    v->tokens = b + at;
    at += tok_bytes;
    v->sums = b + at;
    at += 24;
    uint64_t payload_bytes = get_u64(v->sums);
    if (payload_bytes != n - at)
        return err_set(d, ERR_STATE_BAD, "state blob: payload of %llu bytes (offset %zu), but "
                       "%zu bytes follow", (unsigned long long)payload_bytes, at - 24, n - at);
    for (uint32_t c = 0; c < n_cache; c++) {
        size_t rows = v->p1 - rows_from(v->abi[c].swa_window, v->p0, v->p1), bytes;
        if (!size_mul((size_t)v->abi[c].n_layer_kv * rows,
                      v->k_row_bytes[c] + v->v_row_bytes[c], &bytes) ||
            !size_add(expect, bytes, &expect))
            return err_set(d, ERR_STATE_BAD, "state blob: %zu positions of %u layers overflow",
                           n_pos, v->abi[c].n_layer_kv);
    }
    size_t rows_bytes = expect;
    if (flags & KVS_FLAG_SNAPSHOT) {
        v->snapshot_bytes = rs_state_floats(&v->rs) * sizeof(float);
        if (!size_add(expect, v->snapshot_bytes, &expect))
            return err_set(d, ERR_STATE_BAD, "state blob: a recurrent snapshot overflows");
    }
    if (expect != payload_bytes)
        return err_set(d, ERR_STATE_BAD, "state blob: payload of %llu bytes, its ABI makes "
                       "%zu%s", (unsigned long long)payload_bytes, expect,
                       flags & KVS_FLAG_SNAPSHOT ? " (with the recurrent snapshot)" : "");
    v->payload = b + at;
    v->payload_bytes = (size_t)payload_bytes;
    v->snapshot = flags & KVS_FLAG_SNAPSHOT ? v->payload + rows_bytes : NULL;
    return 0;
}

/* One field of the layout that must equal the runtime's. */
#define LAYOUT_U32(field, name)                                                        \
    if (blob->field != run->field)                                                     \
        return err_set(d, ERR_STATE_LAYOUT, "incompatible cache layout: " name         \
                       " (blob %u, runtime %u)", blob->field, run->field);
#define LAYOUT_F32(field, name)                                                        \
    if (memcmp(&blob->field, &run->field, sizeof(float)) != 0)                         \
        return err_set(d, ERR_STATE_LAYOUT, "incompatible cache layout: " name         \
                       " (blob %g, runtime %g)", (double)blob->field, (double)run->field);

static int abi_compare(const struct kvs_abi *blob, const struct kvs_abi *run,
                       const struct kv_cache *kv, uint32_t s, struct err_detail *d) {
    LAYOUT_U32(n_layer, "n_layer")
    LAYOUT_U32(n_layer_kv, "layers that own KV")
    for (uint32_t il = 0; il < run->n_layer; il++) {
        uint32_t src = get_u32(blob->source_le + 4 * il), want = map_entry(kv, s, il);
        if (src != want)
            return err_set(d, ERR_STATE_LAYOUT, "incompatible cache layout: layer %u reads the "
                           "KV of layer %d (blob), %d (runtime)", il, (int32_t)src, (int32_t)want);
    }
    LAYOUT_U32(n_head_kv, "n_head_kv")
    LAYOUT_U32(head_dim_k, "key head size")
    LAYOUT_U32(head_dim_v, "value head size")
    LAYOUT_U32(v_layout, "value layout")
    LAYOUT_U32(swa_window, "SWA window")
    LAYOUT_U32(rope_dims, "RoPE dims")
    LAYOUT_U32(rope_kind, "RoPE kind")
    LAYOUT_U32(rope_scaling, "RoPE scaling")
    LAYOUT_U32(rope_n_ctx_orig, "RoPE original context")
    LAYOUT_F32(rope_base, "RoPE base")
    LAYOUT_F32(rope_freq_scale, "RoPE frequency scale")
    LAYOUT_F32(yarn_ext, "YaRN extrapolation factor")
    LAYOUT_F32(yarn_attn, "YaRN attention factor")
    LAYOUT_F32(yarn_beta_fast, "YaRN beta_fast")
    LAYOUT_F32(yarn_beta_slow, "YaRN beta_slow")
    if (blob->type_k != run->type_k)
        return err_set(d, ERR_STATE_KEY_TYPE, "incompatible key type (blob %s, runtime %s)",
                       kern_type_name((int)blob->type_k), kern_type_name((int)run->type_k));
    if (blob->type_v != run->type_v)
        return err_set(d, ERR_STATE_VALUE_TYPE, "incompatible value type (blob %s, runtime %s)",
                       kern_type_name((int)blob->type_v), kern_type_name((int)run->type_v));
    if (blob->n_rot_k != run->n_rot_k)
        return err_set(d, ERR_STATE_KEY_ROT, "incompatible key rotation (blob n_rot_k=%u, "
                       "runtime %u)", blob->n_rot_k, run->n_rot_k);
    if (blob->n_rot_v != run->n_rot_v)
        return err_set(d, ERR_STATE_VALUE_ROT, "incompatible value rotation (blob n_rot_v=%u, "
                       "runtime %u)", blob->n_rot_v, run->n_rot_v);
    return 0;
}

/* The blob's recurrent ABI against the runtime's: both without, or the same layers,
 * shape, V-head order, state type and layouts. */
static int rs_abi_compare(const struct kvs_view *v, const struct kv_cache *kv,
                          struct err_detail *d) {
    const uint32_t n_blob = v->flags & KVS_FLAG_RECURRENT ? v->rs.n_layer_rs : 0;
    if (n_blob != kv->rs.n_layer_rs)
        return err_set(d, ERR_STATE_LAYOUT, "incompatible cache layout: recurrent layers (blob "
                       "%u, runtime %u)", n_blob, kv->rs.n_layer_rs);
    if (n_blob == 0) return 0;
    struct kvs_rs_abi r;
    rs_abi_of(kv, &r);
    const struct kvs_rs_abi *blob = &v->rs, *run = &r;
    for (uint32_t i = 0; i < run->n_layer_rs; i++) {
        uint32_t l = get_u32(blob->layers_le + 4 * i);
        if (l != (uint32_t)kv->rs.layers[i])
            return err_set(d, ERR_STATE_LAYOUT, "incompatible cache layout: recurrent layer %u "
                           "is layer %u (blob), %d (runtime)", i, l, kv->rs.layers[i]);
    }
    LAYOUT_U32(n_kernel, "recurrent conv kernel")
    LAYOUT_U32(n_head_k, "recurrent key heads")
    LAYOUT_U32(n_head_v, "recurrent value heads")
    LAYOUT_U32(head_dim_k, "recurrent key head size")
    LAYOUT_U32(head_dim_v, "recurrent value head size")
    LAYOUT_U32(head_map, "recurrent V-head order")
    LAYOUT_U32(state_type, "recurrent state type")
    LAYOUT_U32(conv_layout, "conv state layout")
    LAYOUT_U32(ssm_layout, "S layout")
    return 0;
}

#undef LAYOUT_U32
#undef LAYOUT_F32

int engine_kv_blob_range(const void *blob, size_t n, uint32_t *ret_p0, uint32_t *ret_p1,
                         struct err_detail *d) {
    struct kvs_view v;
    if (!blob) return err_set(d, ERR_STATE_BAD, "not a state blob: no bytes");
    int r = blob_parse(blob, n, &v, d);
    if (r < 0) return r;
    *ret_p0 = v.p0;
    *ret_p1 = v.p1;
    return 0;
}

int engine_kv_blob_model(const void *blob, size_t n, struct hash128 *ret_fingerprint,
                         struct err_detail *d) {
    struct kvs_view v;
    if (!blob) return err_set(d, ERR_STATE_BAD, "not a state blob: no bytes");
    int r = blob_parse(blob, n, &v, d);
    if (r < 0) return r;
    *ret_fingerprint = (struct hash128){.lo = get_u64(v.fingerprint),
                                        .hi = get_u64(v.fingerprint + 8)};
    return 0;
}

int engine_kv_blob_info(const void *blob, size_t n, struct engine_kv_blob_info *ret,
                        struct err_detail *d) {
    struct kvs_view v;
    if (!blob) return err_set(d, ERR_STATE_BAD, "not a state blob: no bytes");
    int r = blob_parse(blob, n, &v, d);
    if (r < 0) return r;
    *ret = (struct engine_kv_blob_info){
        .p0 = v.p0,
        .p1 = v.p1,
        .n_layer_rs = v.flags & KVS_FLAG_RECURRENT ? v.rs.n_layer_rs : 0,
        .snapshot = v.snapshot != NULL,
        .snapshot_bytes = v.snapshot ? v.snapshot_bytes : 0,
    };
    return 0;
}

int engine_kv_import(struct engine_context *ctx, int32_t seq, const void *blob, size_t n,
                     const int32_t *tokens, size_t n_tokens, uint32_t *ret_p1,
                     struct err_detail *d) {
    return engine_kv_import_snap(ctx, seq, blob, n, tokens, n_tokens, ENGINE_KV_SNAP_NEED,
                                 ret_p1, d);
}

int engine_kv_import_snap(struct engine_context *ctx, int32_t seq, const void *blob, size_t n,
                          const int32_t *tokens, size_t n_tokens, enum engine_kv_snap snap,
                          uint32_t *ret_p1, struct err_detail *d) {
    struct kv_cache *kv = &ctx->kv;
    const uint8_t *b = blob;
    struct kvs_view v;
    int r;
    if ((unsigned)snap >= ENGINE_KV_SNAP_COUNT)
        return err_set(d, ERR_INVALID, "snapshot mode %d is not one of enum engine_kv_snap",
                       (int)snap);
    if (!blob) return err_set(d, ERR_STATE_BAD, "not a state blob: no bytes");
    if ((r = blob_parse(b, n, &v, d)) < 0) return r;

    const struct hash128 *fp = &ctx->model->fingerprint;
    if (get_u64(v.fingerprint) != fp->lo || get_u64(v.fingerprint + 8) != fp->hi ||
        v.arch != (uint32_t)ctx->model->arch)
        return err_set(d, ERR_STATE_MODEL, "state belongs to another model");
    uint32_t idx[KV_MAX_STORES], n_cache = runtime_caches(kv, idx);
    if (v.n_cache != n_cache)
        return err_set(d, ERR_STATE_LAYOUT, "incompatible cache layout: %u caches (blob %u, "
                       "runtime %u)", v.n_cache, v.n_cache, n_cache);
    for (uint32_t c = 0; c < n_cache; c++) {
        struct kvs_abi run;
        abi_of(ctx, idx[c], &run);
        if ((r = abi_compare(&v.abi[c], &run, kv, idx[c], d)) < 0) return r;
    }
    if ((r = rs_abi_compare(&v, kv, d)) < 0) return r;
    /* a hybrid resumes only from a recurrent state: rows alone are a chain's middle */
    if (kv->rs.n_layer_rs && !v.snapshot && snap == ENGINE_KV_SNAP_NEED)
        return err_set(d, ERR_STATE_LAYOUT, "state blob of positions [%u, %u) has no recurrent "
                       "snapshot at position %u: model %s has %u recurrent layers, whose state "
                       "cannot be rebuilt from attention rows", v.p0, v.p1, v.p1,
                       ctx->model->arch_name, kv->rs.n_layer_rs);

    if (seq < 0 || (uint32_t)seq >= kv->n_seq)
        return err_set(d, ERR_INVALID, "sequence %d is not in [0, %u)", seq, kv->n_seq);
    if (v.p0 > kv->seq_len[seq])
        return err_set(d, ERR_INVALID, "the blob starts at position %u, sequence %d holds %u "
                       "positions", v.p0, seq, kv->seq_len[seq]);
    if (v.p1 > kv->n_ctx)
        return err_set(d, ERR_CTX_FULL, "the blob ends at position %u, past the context size "
                       "%u", v.p1, kv->n_ctx);
    const uint32_t n_vocab = ctx->model->hp.n_vocab;
    for (uint32_t p = v.p0; p < v.p1; p++) {
        int32_t t = (int32_t)get_u32(v.tokens + 4 * (size_t)(p - v.p0));
        if (t < 0 || (uint32_t)t >= n_vocab)
            return err_set(d, ERR_STATE_TOKENS, "token id %d at position %u is not in [0, %u)",
                           t, p, n_vocab);
        if (tokens && p >= n_tokens)
            return err_set(d, ERR_STATE_TOKENS, "token mismatch at position %u (blob %d, "
                           "expected none: the caller's tokens end at %zu)", p, t, n_tokens);
        if (tokens && tokens[p] != t)
            return err_set(d, ERR_STATE_TOKENS, "token mismatch at position %u (blob %d, "
                           "expected %d)", p, t, tokens[p]);
    }
    size_t header_len = (size_t)(v.sums + 16 - b);
    if (get_u64(v.sums + 16) != hash64(b, header_len))
        return err_set(d, ERR_STATE_CHECKSUM, "state blob: header checksum mismatch");
    if (get_u64(v.sums + 8) != hash64(v.payload, v.payload_bytes))
        return err_set(d, ERR_STATE_CHECKSUM, "state blob: payload checksum mismatch");

    /* all checked: truncate to p0 and write [p0, p1); an SWA cache gets the rows the blob
     * carries, and holds nothing below them when they start after p0 */
    kv->swa_lo[seq] = MIN(kv->swa_lo[seq], v.p0);
    const uint8_t *q = v.payload;
    for (uint32_t c = 0; c < n_cache; c++) {
        struct kv_store *st = &kv->store[idx[c]];
        uint32_t from = rows_from(st->window, v.p0, v.p1), n_pos = v.p1 - from;
        for (uint32_t i = 0; i < st->n_layer_kv; i++) {
            r = kv_rows_set(kv, st, i, seq, from, v.p1, q, q + (size_t)n_pos * st->k_row_bytes);
            if (r < 0) {
                /* rows written so far are not a state: the sequence is empty again */
                kv->seq_len[seq] = 0;
                kv_rs_cut(kv, seq, 0);
                return err_set(d, r, "cannot write layer %d's KV rows to the device", st->layers[i]);
            }
            q += (size_t)n_pos * (st->k_row_bytes + st->v_row_bytes);
        }
        if (st->window && from > v.p0) kv->swa_lo[seq] = from;
    }
    size_t base = (size_t)seq * kv->n_ctx + v.p0, n_pos = v.p1 - v.p0;
    for (size_t i = 0; i < n_pos; i++) kv->tok[base + i] = (int32_t)get_u32(v.tokens + 4 * i);
    /* the recurrent state: the blob's at p1, or what was held at or before p0 */
    kv_rs_cut(kv, seq, v.p0);
    if (v.snapshot) kv_rs_load(kv, seq, v.snapshot, v.p1);
    kv_written(kv, seq, v.p0, v.p1);
    if (ret_p1) *ret_p1 = v.p1;
    return 0;
}
