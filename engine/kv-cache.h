/* kv-cache — private to the engine: the K and V rows of every sequence, per layer that
 * owns KV, in the cache's stored types.
 *
 * Caches: a context has one cache (kv_store) per attention kind its model has: store 0
 * for the full-attention (global) layers, store 1 for the sliding-window (SWA) layers of
 * a gemma model. Each cache holds the layers of its kind that own KV, all with the same
 * K and V row sizes, and makes its own rotation decision (DESIGN.md 3.4).
 *
 * Layout: for each owning layer of a store, K is n_seq blocks of n_cells rows of
 * n_head_kv × head_dim_k values of type_k (row stride k_row_bytes), V the same with
 * head_dim_v and type_v. A full-attention store has n_cells = n_ctx and cell p holds
 * position p. An SWA store is a ring: n_cells = min(n_ctx, window + ring_extra) cells
 * per sequence, position p in cell p mod n_cells, and every row written twice (at cell c
 * and c + n_cells) so that any run of fewer than n_cells positions is contiguous rows,
 * whatever the wrap: attention reads a window with one pointer and a count. tok records
 * the token id of every position (for all stores).
 *
 * Shared-KV models (<arch>.attention.shared_kv_layers = N): the last N layers own no KV
 * and read the KV of kv_source(il), the last owning layer of their kind (model.h).
 * Everything about a layer's KV — its store, rows, types, head sizes, rotation, window —
 * is looked up through kv_source(il), never from the querying layer's own index.
 *
 * Rotation (DESIGN.md 3.4): n_rot_k / n_rot_v of a store are the sizes of the Hadamard
 * blocks its K / V rows were rotated with (0 = not rotated). They are decided once at
 * creation, recorded here, and are part of the state blob's ABI (kv-state.c).
 *
 * Recurrent state (hybrids, notes/hybrid.md §A.9): a Gated DeltaNet layer owns no KV but a
 * fixed-size state per sequence (struct kv_rstate): its conv state and its S matrices,
 * f32. The live state of a sequence is the one after positions [0, live): normally its
 * length, less after an import of attention rows without a snapshot (the rows run ahead
 * of the state, DESIGN.md 3.6). A state cannot be rolled back, so besides the live one a
 * sequence keeps up to n_snap snapshots, copies of the state at chosen positions
 * (engine_kv_snapshot). A sequence can continue at position p only when p is 0 (a fresh
 * state), live, or a snapshot's position; truncating it anywhere else is refused
 * (-ENODATA, as an SWA ring that lost its window). A truncation to p drops the snapshots
 * past p. State blobs (kv-state.c, version 3) carry a state at their end. */
#pragma once

#include "engine/model.h"
#include "kernels/deltanet.h"
#include "kernels/types.h"

#define KV_STORE_FULL 0
#define KV_STORE_SWA 1
#define KV_MAX_STORES 2

/* One cache: the owning layers of one attention kind. */
struct kv_store {
    uint32_t n_layer_kv;  /* owning layers in this store */
    uint32_t window;      /* 0: full attention; else the SWA window W */
    uint32_t n_cells;     /* cells per sequence (positions for a full store, the ring size) */
    bool ring;            /* n_cells < n_ctx: positions wrap, rows are mirrored */
    int64_t n_head_kv;
    int64_t head_dim_k, head_dim_v;
    int64_t n_embd_k;     /* n_head_kv × head_dim_k */
    int64_t n_embd_v;     /* n_head_kv × head_dim_v */
    size_t k_row_bytes, v_row_bytes;
    int n_rot_k, n_rot_v; /* Hadamard rotation sizes, 0 = off */
    int32_t *layers;      /* (n_layer_kv) the model layer of each slot */
    void **k, **v;        /* (n_layer_kv) each n_seq × (ring ? 2 : 1) × n_cells rows */
    bool *on_dev;         /* (n_layer_kv) the slot's rows are device memory (kv_mem) */
};

/* Device memory for the KV of the layers GPUs run (engine/gpu.c): the cache keeps those
 * slots' rows there, at the same cells as on the host (one GPU holds whole rows; GPUs
 * under a tensor split each hold their KV heads' bytes of every row), and reaches them
 * only through these calls (0 or a negative errno each), by rows: n rows from cell `cell`
 * on, of K (v false) or V, of slot `slot` of store `store`, whole rows of the store's row
 * size on the host side. */
struct kv_mem {
    void *ud;
    /* zeroed rows for the slot; *ret_k / *ret_v: their device address where one device
     * holds whole rows (for its kernels), else NULL */
    int (*alloc)(void *ud, uint32_t store, uint32_t slot, size_t rows, void **ret_k, void **ret_v);
    void (*free)(void *ud, uint32_t store, uint32_t slot);
    int (*get)(void *ud, uint32_t store, uint32_t slot, bool v, size_t cell, size_t n, void *dst);
    int (*set)(void *ud, uint32_t store, uint32_t slot, bool v, size_t cell, size_t n, const void *src);
    /* within the slot: rows [src_cell, src_cell + n) to dst_cell (disjoint) */
    int (*copy)(void *ud, uint32_t store, uint32_t slot, bool v, size_t dst_cell, size_t src_cell, size_t n);
};

/* The recurrent layers' state, per layer and sequence (kernels/deltanet.h layouts):
 * conv (K − 1, conv_dim) time-major, S (H_v, d_v, d_k); zero for an empty sequence. */
#define KV_NO_SNAP UINT32_MAX /* an empty snapshot slot's position */

/* The device copies of the recurrent state of the layers a GPU runs (engine/gpu.c): the
 * GPU's steps update its copy in place, so the state crosses PCIe only when the host
 * reads or writes it outside a step (snapshots, blobs, sequence copy and clear). The host
 * arrays stay the state everything outside a step sees; kv_rstate's `newer` says per
 * sequence which side moved last, and the sync is lazy: a host read pulls the device's
 * copy only when it is newer, a host write only marks it stale, and the GPU pushes a
 * stale sequence at the start of its next step (kv_rs_dev_step). A sequence that
 * decodes on and on never crosses; one read between steps crosses once. */
struct kv_rs_mem {
    void *ud;
    /* seq's state of the device's layers: device -> host arrays, host -> device */
    int (*get)(void *ud, int32_t seq);
    int (*set)(void *ud, int32_t seq);
};
enum { KV_RS_SAME, KV_RS_HOST_NEWER, KV_RS_DEV_NEWER };

struct kv_rstate {
    const struct kv_rs_mem *mem; /* NULL: the state lives on the host only */
    uint8_t *newer;            /* (n_seq) with mem: KV_RS_* */
    uint32_t n_layer_rs;       /* recurrent layers, 0 without */
    int32_t *slot;             /* (n_layer) a recurrent layer's slot, else -1 */
    int32_t *layers;           /* (n_layer_rs) the model layer of each slot */
    struct kern_dn_shape shape; /* every recurrent layer's */
    int64_t n_chan, n_kernel;  /* conv_dim, K */
    size_t conv_floats, ssm_floats; /* per layer and sequence */
    float **conv, **ssm;       /* (n_layer_rs) n_seq × conv_floats, n_seq × ssm_floats */
    uint32_t *live;            /* (n_seq) the live state is the one after [0, live) */
    /* A whole state (every recurrent layer's conv then S, in slot order: state_floats)
     * is what a snapshot and a blob hold. */
    size_t state_floats;
    uint32_t n_snap;           /* snapshots per sequence */
    uint32_t *snap_pos;        /* (n_seq × n_snap) their positions, KV_NO_SNAP = empty */
    float *snap;               /* (n_seq × n_snap × state_floats) */
};

struct kv_cache {
    enum kern_type type_k, type_v;
    uint32_t n_layer;      /* layers of the model */
    uint32_t n_layer_kv;   /* layers that own KV, over all stores */
    uint32_t n_seq, n_ctx;
    uint32_t n_store;      /* 1, or 2 when the model has SWA layers */
    struct kv_store store[KV_MAX_STORES];
    int32_t *source;       /* (n_layer): model layer -> the model layer whose KV it reads */
    uint8_t *store_of;     /* (n_layer): store of the layer's KV (of its source) */
    int32_t *owner;        /* (n_layer): slot in its store of a layer that owns KV, else -1 */
    int32_t *tok;          /* (n_seq × n_ctx) token id of each position */
    uint32_t *seq_len;     /* (n_seq) cached positions per sequence */
    /* (n_seq) per sequence: the first position whose SWA rows the ring still holds,
     * considering that the rows of [seq_len - n_cells, seq_len) were the last written */
    uint32_t *swa_lo;
    const struct kv_mem *mem; /* NULL: every slot on the host */
    struct kv_rstate rs;      /* the recurrent layers' state (hybrids) */
};

/* The Hadamard sizes DESIGN.md 3.4 gives a cache (0 = no rotation):
 * K: the largest power of two dividing head_dim (64 -> 64, 128 -> 128, 192 -> 64,
 * 256 -> 256, 576 -> 64) when the type is quantized, head_dim is a multiple of 64 and
 * rotation is on; V: 64 under the same conditions on its type and head size. */
int kv_rot_size_k(enum kern_type t, int64_t head_dim, bool rotation);
int kv_rot_size_v(enum kern_type t, int64_t head_dim, bool rotation);

/* Sizes and allocates the cache (zeroed). Types: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0,
 * q5_1, iq4_nl (block types need head sizes that are multiples of 32). rotation: whether
 * quantized K/V may be Hadamard-rotated (the context parameter kv_rotation). ring_extra:
 * cells an SWA ring holds beyond the window (one chunk and one batch; 0 = the SWA store
 * holds every position, as a full one). */
/* mem, dev_layer0: the slots of owning layers >= dev_layer0 live in mem's device memory
 * (mem NULL: all on the host). */
/* n_snap: recurrent snapshots kept per sequence (hybrids; ignored without recurrent
 * layers). */
int kv_cache_init(struct kv_cache *kv, const struct engine_model *m, enum kern_type type_k,
                  enum kern_type type_v, uint32_t n_seq, uint32_t n_ctx, bool rotation,
                  uint32_t ring_extra, const struct kv_mem *mem, uint32_t dev_layer0,
                  uint32_t n_snap, struct err_detail *d);
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
/* The store of the KV layer il reads (through kv_source). */
static inline const struct kv_store *kv_store_of(const struct kv_cache *kv, int il) {
    return &kv->store[kv->store_of[il]];
}
/* Rotation sizes of the KV layer il reads (through kv_source: its store's decision). */
static inline int kv_rot_k(const struct kv_cache *kv, int il) {
    return kv_store_of(kv, il)->n_rot_k;
}
static inline int kv_rot_v(const struct kv_cache *kv, int il) {
    return kv_store_of(kv, il)->n_rot_v;
}
/* Row index of position pos of seq in a store's per-layer buffer (the first copy). */
static inline size_t kv_cell(const struct kv_store *st, int32_t seq, int32_t pos) {
    size_t per_seq = st->ring ? 2 * (size_t)st->n_cells : st->n_cells;
    return (size_t)seq * per_seq + (st->ring ? (size_t)pos % st->n_cells : (size_t)pos);
}
/* K row of (sequence, position) as seen by layer il (through kv_source). On a ring, the
 * rows of positions pos .. pos + n_cells - 1 follow this one contiguously. */
static inline void *kv_k_row(const struct kv_cache *kv, int il, int32_t seq, int32_t pos) {
    const struct kv_store *st = kv_store_of(kv, il);
    return (char *)st->k[kv->owner[kv_source(kv, il)]] + kv_cell(st, seq, pos) * st->k_row_bytes;
}
static inline void *kv_v_row(const struct kv_cache *kv, int il, int32_t seq, int32_t pos) {
    const struct kv_store *st = kv_store_of(kv, il);
    return (char *)st->v[kv->owner[kv_source(kv, il)]] + kv_cell(st, seq, pos) * st->v_row_bytes;
}
/* Token id of position pos of seq. */
static inline int32_t *kv_tok(const struct kv_cache *kv, int32_t seq, int32_t pos) {
    return kv->tok + (size_t)seq * kv->n_ctx + (size_t)pos;
}
/* Stores n values of f32 src as row dst of type t. */
void kv_row_store(void *dst, const float *src, enum kern_type t, int64_t n);
/* Writes the K and V rows (f32) of (seq, pos) of owning layer il in the store's types,
 * both copies on a ring. */
void kv_put(struct kv_cache *kv, int il, int32_t seq, int32_t pos, const float *k,
            const float *v);
/* kv_put() of KV heads [h0, h0 + nh) only (k: nh × head_dim_k values, v likewise): what
 * one device of a split writes; devices write disjoint heads of a row at once. */
void kv_put_heads(struct kv_cache *kv, int il, int32_t seq, int32_t pos, int64_t h0, int64_t nh,
                  const float *k, const float *v);
/* Copies rows [p0, p1) of slot `slot` of store st, K then V, to host dst (the store's
 * bytes; rows must be held) / from host src; a device slot through kv->mem (its error). */
int kv_rows_get(const struct kv_cache *kv, const struct kv_store *st, uint32_t slot, int32_t seq,
                uint32_t p0, uint32_t p1, uint8_t *dst_k, uint8_t *dst_v);
int kv_rows_set(const struct kv_cache *kv, struct kv_store *st, uint32_t slot, int32_t seq,
                uint32_t p0, uint32_t p1, const uint8_t *src_k, const uint8_t *src_v);
/* The conv state and S of recurrent layer il for seq (kv_rstate). */
static inline float *kv_rs_conv(const struct kv_cache *kv, int il, int32_t seq) {
    return kv->rs.conv[kv->rs.slot[il]] + (size_t)seq * kv->rs.conv_floats;
}
static inline float *kv_rs_ssm(const struct kv_cache *kv, int il, int32_t seq) {
    return kv->rs.ssm[kv->rs.slot[il]] + (size_t)seq * kv->rs.ssm_floats;
}
/* Can seq's recurrent state continue at position p <= its length: p is 0 (a fresh
 * state), the live state's position or a snapshot's (always true without recurrent
 * layers). */
bool kv_rs_can_resume(const struct kv_cache *kv, int32_t seq, uint32_t p);
/* Does the cache hold seq's state after [0, p) (the live state or a snapshot; p > 0)?
 * When it does and dst is not NULL, copies it there as a whole state (kv_rstate; dst
 * need not be aligned). */
bool kv_rs_get(const struct kv_cache *kv, int32_t seq, uint32_t p, void *dst);
/* The host arrays of seq's live state up to date (with a device copy: pulls it where it
 * is newer); 0 or the device's error. kv_rs_get, engine_kv_snapshot and the sequence
 * copy do this themselves; a caller that must report the failure calls it first. */
int kv_rs_sync(const struct kv_cache *kv, int32_t seq);
/* A device step is about to update seq's state (kv_rs_mem): pushes the host's where it
 * is newer, then the device's copy is the newer one; 0 or the device's error. */
int kv_rs_dev_step(struct kv_cache *kv, int32_t seq);
/* Makes src (a whole state, need not be aligned) seq's live state, after [0, p). */
void kv_rs_load(struct kv_cache *kv, int32_t seq, const void *src, uint32_t p);
/* The decode moved seq's live state to p (its new length). */
static inline void kv_rs_advanced(struct kv_cache *kv, int32_t seq, uint32_t p) {
    if (kv->rs.n_layer_rs) kv->rs.live[seq] = p;
}
/* Bytes of a whole recurrent state (0 without recurrent layers). */
static inline size_t kv_rs_state_bytes(const struct kv_cache *kv) {
    return kv->rs.state_floats * sizeof(float);
}
/* Drops seq's snapshots past p; a live state past p goes back to the latest snapshot at
 * or before p, else to a fresh one at 0 (what an import of rows from p on does). */
void kv_rs_cut(struct kv_cache *kv, int32_t seq, uint32_t p);
/* Can seq continue at position p: does the SWA ring still hold the rows of [p - W + 1, p),
 * and can its recurrent state (kv_rs_can_resume)? (Always true without either.) */
bool kv_can_resume(const struct kv_cache *kv, int32_t seq, uint32_t p);
/* Bookkeeping after positions [p0, p1) of seq were written (decode or import). */
void kv_written(struct kv_cache *kv, int32_t seq, uint32_t p0, uint32_t p1);
