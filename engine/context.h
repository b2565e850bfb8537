/* context — what running a model needs besides its weights: the KV cache of n_seq
 * sequences of up to n_ctx positions each, a thread pool, scratch arenas and the logits.
 *
 * Everything is allocated by engine_context_new(); engine_context_decode() allocates
 * nothing. A context is used by one thread at a time (it runs its own pool inside
 * decode); any number of contexts may share one model.
 *
 * Sequences: cell p of sequence s holds the K and V rows of position p. A sequence's
 * cache is the prefix [0, len) of positions; a batch extends it (or rewrites its tail:
 * a token at position p < len first truncates the sequence to p). Each token attends only
 * to the cells [0, its position] of its own sequence. */
#pragma once

#include "base/base.h"
#include "engine/model.h"
#include "kernels/types.h"

#define ENGINE_MAX_DEVICES 16 /* as llama.cpp's meta device */
/* Tokens of a state chunk unless a caller says otherwise: the default of swa_chunk below
 * and of the daemon's cache_chunk_tokens (a plain number: config.c prints it as text). */
#define ENGINE_CHUNK_TOKENS 256

/* How a context spreads over more than one device (DESIGN.md 3.7). */
enum engine_split {
    ENGINE_SPLIT_NONE,   /* one device */
    ENGINE_SPLIT_TENSOR, /* every layer cut by heads and FFN units (engine/device.h) */
};

/* Where a GPU context's routed experts go (engine_context_params.experts; config
 * `experts`: auto, gpu, cpu). */
enum engine_experts_place {
    ENGINE_EXPERTS_AUTO,
    ENGINE_EXPERTS_GPU,
    ENGINE_EXPERTS_CPU,
};

/* What a context runs on when it runs on one device (config `device`). */
enum engine_device_kind {
    ENGINE_DEVICE_CPU,
    ENGINE_DEVICE_CUDA, /* cuda:device_index (engine/gpu.h) */
    ENGINE_DEVICE_AUTO, /* cuda:0 when the model runs and fits there, else the CPU */
};

struct engine_context_params {
    uint32_t n_ctx;     /* positions per sequence; 0 = min(n_ctx_train, 4096) */
    uint32_t n_seq;     /* sequences; 0 = 1 */
    uint32_t n_batch;   /* tokens per internal step (scratch rows); 0 = 512 */
    uint32_t n_outputs; /* rows of logits one decode may return; 0 = n_seq */
    int n_threads;      /* 0 = 1 */
    /* cache types, K and V independently: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1,
     * iq4_nl (block types need head sizes that are multiples of 32) */
    enum kern_type type_k, type_v;
    /* Hadamard rotation of quantized K/V (DESIGN.md 3.4); the caller-facing layer sets it
     * from its config and engine_kv_rotation_env_default(), once. Default true. */
    bool kv_rotation;
    /* Models with sliding-window layers: the SWA cache is a ring of window + swa_chunk +
     * n_batch cells per sequence (swa_chunk: the tokens of a state chunk, exported before
     * their rows leave the ring; 0 = ENGINE_CHUNK_TOKENS). swa_full: the SWA cache holds
     * every position, as the full one (llama.cpp's --swa-full). */
    uint32_t swa_chunk;
    bool swa_full;
    /* Devices: n_devices CPU partitions (0 = 1), each with its own threads (n_threads
     * shared out between them, at least one each), weight slices, KV heads and scratch.
     * More than one needs split = ENGINE_SPLIT_TENSOR. tensor_split: each device's
     * relative share (all 0 = equal shares). */
    uint32_t n_devices;
    enum engine_split split;
    float tensor_split[ENGINE_MAX_DEVICES];
    /* Device i of a split is CUDA device split_cuda[i] - 1 (0: a CPU partition); a split is
     * all CPU partitions or all CUDA contexts. engine_devices_parse_into() fills it. */
    uint16_t split_cuda[ENGINE_MAX_DEVICES];
    /* Tests only: cut a shared-KV layer's attention with its own rotation instead of its
     * KV source's (the placement llama.cpp #31406 fixed). The placement check then refuses
     * the context wherever a query head would leave its KV head's device. */
    bool split_own_rotation;
    /* Tests and benchmarks: multiply by the weights as the file lays them out, without the
     * repacked copies a CPU device makes where its kernels read another layout faster. */
    bool plain_weights;
    /* One device of kind `device` (index: the N of cuda:N); gpu_layers: the last layers on
     * a GPU device, the rest on the CPU (0 = all; more when a shared-KV layer among them
     * reads an earlier layer's KV, which then runs there too). engine_device_resolve()
     * fills them. */
    enum engine_device_kind device;
    int device_index;
    uint32_t gpu_layers;
    /* A mixture of experts on a GPU: where the routed experts' matrices of its layers go
     * (attention, router and shared expert stay on the GPU). AUTO: on the GPU when all its
     * weights fit in 90 % of its free memory, else on the host. On the host they run on
     * the CPU's threads over the host's copy, each MoE layer's rows and routing crossing
     * PCIe (a decode step then runs without its CUDA graph). */
    enum engine_experts_place experts;
    /* An embeddings context, the only kind an embedding model takes
     * (engine_model_is_embedding(); a model that is not one is refused): a decode computes
     * every token's final hidden state and each sequence's pooled embedding
     * (engine_context_embeddings()) instead of logits. Its decodes take whole inputs:
     * every sequence of a batch starts at position 0 (what the cache held of it is
     * dropped), and the batch is one step (n_tok <= n_batch), since a bidirectional
     * layer's tokens see the whole sequence. Several inputs in one batch (one sequence
     * each) give the vectors each gives alone. CPU only for now (a CUDA device is refused,
     * device = auto falls back to the CPU). The cache types apply: f32 K/V give
     * llama.cpp's numbers, f16 moves them by about 1e-4. */
    bool embeddings;
    /* Models with recurrent layers (hybrids): snapshots of the recurrent state kept per
     * sequence (engine_kv_snapshot), each as large as the state (notes/hybrid.md §A.10:
     * the KV of 1.6k-3.2k tokens). Default 2; 0 = none (a sequence then continues only at
     * its end or at 0). */
    uint32_t n_rs_snapshots;
};

/* The defaults above (f16 cache, kv_rotation on). */
void engine_context_params_default(struct engine_context_params *p);
/* false when the environment says WARM_ATTN_ROT_DISABLE=<non-zero integer> (as llama.cpp's
 * LLAMA_ATTN_ROT_DISABLE), else true. For warm-run and the daemon's config to read once at
 * startup; the engine itself never reads the environment. */
bool engine_kv_rotation_env_default(void);

struct engine_context;

/* Creates a context for m (borrowed: must outlive the context). *ret on success only. */
int engine_context_new(const struct engine_model *m, const struct engine_context_params *p,
                       struct engine_context **ret, struct err_detail *d);
void engine_context_free(struct engine_context *ctx);

const struct engine_model *engine_context_model(const struct engine_context *ctx);
/* The effective parameters (defaults resolved). */
const struct engine_context_params *engine_context_params(const struct engine_context *ctx);
/* Bytes of the KV cache. */
size_t engine_context_kv_bytes(const struct engine_context *ctx);

/* What one device of a context holds: its name ("cpu", or "cpu0".. under a split, or
 * "cuda:N", listed first), its threads, the bytes of the weight slices it reads
 * (weight_bytes, of which copied_bytes are its own copies: column slices), of its KV heads
 * and of its scratch. A context on a GPU lists the CPU too when it runs layers there
 * (gpu_layers). */
struct engine_device_info {
    char name[16];          /* "cpu", "cpu0".., "cuda:0" */
    char device_name[128];  /* a GPU's own name ("NVIDIA H200"); "" for the CPU */
    const char *kind; /* "cpu" or "cuda" */
    int n_threads;
    uint64_t weight_bytes, copied_bytes, kv_bytes, scratch_bytes;
};
uint32_t engine_context_n_devices(const struct engine_context *ctx);
/* device = auto that fell back to the CPU: why no GPU runs it (else ""). */
const char *engine_context_device_note(const struct engine_context *ctx);
/* ERR_INVALID when i >= engine_context_n_devices(). */
int engine_context_device_info(const struct engine_context *ctx, uint32_t i,
                               struct engine_device_info *ret);
/* The devices of a list (config `devices`, warm-run/warm-bench --devices) into
 * p->n_devices and p->split_cuda: each entry "cpu" (one CPU partition) or "cuda:N" (a
 * CUDA device, which may be named more than once: each entry is its own context there).
 * ERR_INVALID with d for an empty or unknown entry, more than ENGINE_MAX_DEVICES, or a
 * list that mixes the two kinds. */
int engine_devices_parse_into(const char *list, struct engine_context_params *p, struct err_detail *d);
/* Config `device` as written: "auto", "cpu" or "cuda:N" into *ret_kind (auto stays
 * ENGINE_DEVICE_AUTO) and *ret_index, asking no driver which devices exist (the config
 * checks it when read). ERR_INVALID with d for anything else. */
int engine_device_parse(const char *spec, enum engine_device_kind *ret_kind, int *ret_index,
                        struct err_detail *d);
/* Config `device`, parsed as engine_device_parse() does, for a context. auto is
 * ENGINE_DEVICE_AUTO when a CUDA device exists (engine_context_new() then tries cuda:0 for
 * each model), else the CPU, and then why_not (may be NULL) says why no CUDA device is
 * used (e.g. "this build has no CUDA backend"); it is "" otherwise. ERR_INVALID for
 * anything else. cuda:N is checked at engine_context_new(). */
int engine_device_resolve(const char *spec, enum engine_device_kind *ret_kind, int *ret_index,
                          char *why_not, size_t why_len, struct err_detail *d);
/* 0 when cuda:index exists, else ERR_UNSUPPORTED with d naming why (no CUDA backend in
 * this build, no usable device, index out of range). */
int engine_cuda_usable(int index, struct err_detail *d);
/* The name of CUDA device index ("NVIDIA H200") into buf; "?" when it has none. */
const char *engine_cuda_device_name(int index, char *buf, size_t len);
/* Shares "3,1" (config `tensor_split`, --tensor-split) into ratio[0..max): each a number
 * >= 0, at most max of them, the rest 0. ERR_INVALID with d otherwise. */
int engine_tensor_split_parse(const char *list, float *ratio, uint32_t max, struct err_detail *d);
/* Whether p's devices make a split engine_context_new() accepts: at most
 * ENGINE_MAX_DEVICES, more than one only with split = tensor, every tensor_split share of
 * them >= 0, and not one CUDA device alone (that is device = cuda:N). 0, or ERR_INVALID
 * with d naming the setting. */
int engine_split_check(const struct engine_context_params *p, struct err_detail *d);
/* "none" / "tensor" and back (< 0: ERR_INVALID). */
const char *engine_split_name(enum engine_split s);
int engine_split_from_name(const char *name);

/* A batch: n_tok tokens, each with its position, sequence and whether its logits are
 * wanted. seq == NULL: every token belongs to sequence 0. want_logits == NULL: only the
 * last token's. Per sequence, the tokens of one batch have consecutive positions in batch
 * order, the first one at most the sequence's current length; sequences may interleave.
 * n_tok may exceed n_batch (it is processed in steps of n_batch). */
struct engine_batch {
    int32_t n_tok;
    const int32_t *token;
    const int32_t *pos;
    const int32_t *seq;
    const bool *want_logits;
    /* Greedy decoding: only the argmax of each wanted row is needed (engine_context_argmax);
     * a GPU then computes it on the device and copies 4 bytes a row instead of the logits,
     * and engine_context_logits() returns NULL until the next decode. */
    bool argmax_only;
};

/* Runs the forward pass over the batch: appends its K and V to the cache and computes
 * the logits of the tokens that want them. The whole batch is checked first (token ids,
 * sequences, positions: ERR_TOKEN, ERR_INVALID, ERR_CTX_FULL when a position is past
 * n_ctx); a rejected batch changes nothing. */
int engine_context_decode(struct engine_context *ctx, const struct engine_batch *b,
                          struct err_detail *d);

/* Logits (n_vocab floats) of the i-th token that wanted them in the last decode, in batch
 * order; NULL when i is out of range. Valid until the next decode. */
const float *engine_context_logits(const struct engine_context *ctx, int32_t i);
int32_t engine_context_n_outputs(const struct engine_context *ctx);
/* The greedy token of the i-th row of the last decode: the index of its largest logit, the
 * lowest on ties (the greedy sampler's choice before penalties); -1 when i is out of range. */
int32_t engine_context_argmax(const struct engine_context *ctx, int32_t i);

/* ---- embeddings ------------------------------------------------------------------------ */

/* The embedding of sequence seq in the last decode of an embeddings context: the model's
 * pooling of the sequence's final hidden states (engine_model_pooling()), through its
 * dense projections, engine_model_n_embd_out() floats into out; normalize: divided by its
 * Euclidean norm (as llama-embedding's default, --embd-normalize 2: the squares summed in
 * double; a zero vector stays zero). ERR_INVALID (with d) when ctx is not an embeddings
 * context or seq was not in the last decode, ERR_UNSUPPORTED when the model pools nothing
 * (pooling none: engine_context_embeddings_token()). */
int engine_context_embeddings(const struct engine_context *ctx, int32_t seq, float *out,
                              bool normalize, struct err_detail *d);
/* The final hidden state of the i-th token of the last decode's batch (batch order), not
 * pooled and not normalized, through the dense projections: engine_model_n_embd_out()
 * floats into out. ERR_INVALID (with d) when ctx is not an embeddings context or i is out
 * of range. */
int engine_context_embeddings_token(struct engine_context *ctx, int32_t i, float *out,
                                    struct err_detail *d);

/* ---- sequences in the cache ----------------------------------------------------------- */

/* Positions cached for seq (its length); 0 for an unknown seq. */
uint32_t engine_kv_seq_len(const struct engine_context *ctx, int32_t seq);
/* Drops positions >= p0 of seq (p0 = 0 clears it). -ENODATA (nothing changed) when the
 * sequence cannot continue at p0: the model's sliding-window ring no longer holds the
 * window before p0, or the model has recurrent layers and the state after [0, p0) is
 * neither the live one nor a snapshot (engine_kv_snapshot); truncate to
 * engine_kv_seq_resume_pos() instead, or import state. The snapshots past p0 are
 * dropped. */
int engine_kv_seq_rm(struct engine_context *ctx, int32_t seq, uint32_t p0);
/* Makes dst a copy of positions [0, p1) of src (p1 is clamped to src's length), with its
 * recurrent state and snapshots up to p1; -ENODATA as engine_kv_seq_rm() when an SWA ring
 * or the recurrent state cannot continue at p1. */
int engine_kv_seq_cp(struct engine_context *ctx, int32_t src, int32_t dst, uint32_t p1);
/* The largest position <= p (and <= the length) at which seq can continue (so
 * engine_kv_seq_rm() to it succeeds): p itself for a plain model, the latest snapshot or
 * live state at or before p for a model with recurrent layers; 0 when there is none. */
uint32_t engine_kv_seq_resume_pos(const struct engine_context *ctx, int32_t seq, uint32_t p);
/* Keeps a snapshot of seq's recurrent state at its length (so a later truncation, export
 * or copy can use that position), replacing the snapshot at the lowest position when all
 * n_rs_snapshots are taken. 0 and nothing kept for a model without recurrent layers, an
 * empty sequence or n_rs_snapshots = 0; ERR_INVALID when the live state is behind the
 * length (rows imported without a snapshot). Costs a copy of the state (memcpy). */
int engine_kv_snapshot(struct engine_context *ctx, int32_t seq, struct err_detail *d);
/* Context shift: drops positions [p0, p0 + n_discard) of seq and moves the later cells
 * down by n_discard, re-applying RoPE to their cached K (for every K type: dequantize the
 * whole row, un-rotate when the cache is rotated, RoPE by -n_discard, rotate, quantize).
 * V rows and token ids move unchanged. The sequence's length drops by n_discard.
 * ERR_UNSUPPORTED for a model with recurrent layers. */
int engine_kv_seq_shift(struct engine_context *ctx, int32_t seq, uint32_t p0, uint32_t n_discard,
                        struct err_detail *d);

/* What the caches of a context are: their types, layers that own KV, and the Hadamard
 * sizes they record (0 = not rotated). A model with sliding-window layers has two caches
 * (cache[0] full attention, cache[1] SWA), each with its own rotation decision;
 * n_rot_k / n_rot_v are those of the first cache that has layers. */
struct engine_kv_cache_info {
    uint32_t n_layer_kv, window, n_cells, head_dim_k, head_dim_v;
    int n_rot_k, n_rot_v;
};
struct engine_kv_info {
    enum kern_type type_k, type_v;
    uint32_t n_layer_kv;
    int n_rot_k, n_rot_v;
    uint32_t n_cache;
    struct engine_kv_cache_info cache[2];
    /* recurrent layers (0 without) and the bytes of one whole state of a sequence (what a
     * snapshot costs in RAM and in a blob) */
    uint32_t n_layer_rs;
    size_t rs_state_bytes;
};
void engine_context_kv_info(const struct engine_context *ctx, struct engine_kv_info *ret);

/* ---- KV state blobs (DESIGN.md 3.5) -------------------------------------------------- */

/* The blob format, field by field, and its version policy: engine/kv-state.c. */
#define ENGINE_KV_STATE_VERSION 3

/* A blob of a model with recurrent layers (a hybrid) holds the attention rows of its range
 * and, optionally, a snapshot of the recurrent state at its end (DESIGN.md 3.6): without
 * one, the rows serve only to reach a later blob that has one. (Ignored for other
 * models.) */
enum engine_kv_snap {
    /* export: the state at p1 when the context holds it (the live state or a snapshot);
     * import: the blob's snapshot when it has one, else the rows only (the sequence then
     * continues only at an earlier state: engine_kv_seq_resume_pos()) */
    ENGINE_KV_SNAP_AUTO,
    ENGINE_KV_SNAP_NONE, /* export: the rows only */
    /* export: -ENODATA when the context holds no state at p1; import: a blob without a
     * snapshot is refused (ERR_STATE_LAYOUT, "... no recurrent snapshot ...") */
    ENGINE_KV_SNAP_NEED,
    ENGINE_KV_SNAP_COUNT
};

/* Writes the KV state of positions [p0, p1) of seq (0 <= p0 < p1 <= its length) as a blob
 * into buf; for a hybrid with the recurrent snapshot at p1 when the context holds it
 * (engine_kv_export_snap() with ENGINE_KV_SNAP_AUTO). With buf == NULL only *ret_size is
 * set (the bytes the blob needs: call this first); ERR_TOO_LARGE when cap is smaller than
 * that. *ret_size on success only. The blob depends only on the cache's contents:
 * exporting twice gives the same bytes. */
int engine_kv_export(const struct engine_context *ctx, int32_t seq, uint32_t p0, uint32_t p1,
                     void *buf, size_t cap, size_t *ret_size, struct err_detail *d);
/* engine_kv_export() saying whether a hybrid's blob carries the recurrent snapshot. */
int engine_kv_export_snap(const struct engine_context *ctx, int32_t seq, uint32_t p0,
                          uint32_t p1, enum engine_kv_snap snap, void *buf, size_t cap,
                          size_t *ret_size, struct err_detail *d);

/* Restores a blob of positions [p0, p1) into seq. The sequence must hold at least p0
 * positions; it is truncated to p0 and the blob's [p0, p1) written after it (so a chain
 * of chunk blobs is imported in order, and a blob may overwrite a tail). tokens (NULL: no
 * check) are the caller's token ids from position 0 on, n_tokens of them: every position of
 * [p0, p1) must be among them and hold the blob's token.
 * Everything is checked before the cache is touched, in this order, each with its own
 * error and a message in d: not a blob / truncated / malformed (ERR_STATE_BAD), version
 * (ERR_STATE_VERSION: "incompatible state version (blob N, runtime M)"), model
 * (ERR_STATE_MODEL: "state belongs to another model"), layers, head sizes, RoPE
 * (ERR_STATE_LAYOUT), types (ERR_STATE_KEY_TYPE / ERR_STATE_VALUE_TYPE: "incompatible key
 * type (blob q8_0, runtime f16)"), rotation (ERR_STATE_KEY_ROT / ERR_STATE_VALUE_ROT:
 * "incompatible key rotation (blob n_rot_k=128, runtime 0)"), where it goes (ERR_INVALID:
 * sequence, p0 past its length; ERR_CTX_FULL: p1 past n_ctx), tokens (ERR_STATE_TOKENS:
 * "token mismatch at position P (blob X, expected Y)"), checksums (ERR_STATE_CHECKSUM).
 * A failed import leaves the sequence exactly as it was. *ret_p1 (may be NULL) = p1 on
 * success. */
/* For a hybrid: the blob must carry a recurrent snapshot at p1 (ENGINE_KV_SNAP_NEED), which
 * becomes the sequence's live state; the recurrent layers' ABI is checked with the
 * layout (ERR_STATE_LAYOUT). */
int engine_kv_import(struct engine_context *ctx, int32_t seq, const void *blob, size_t n,
                     const int32_t *tokens, size_t n_tokens, uint32_t *ret_p1,
                     struct err_detail *d);
/* engine_kv_import() saying what a hybrid's blob must carry: with ENGINE_KV_SNAP_AUTO a
 * blob without a snapshot is taken too (a chain of chunk records up to one that has it);
 * the sequence's state then stays where it was, or goes back to its latest snapshot at or
 * before p0 (else to 0) when it was past p0. */
int engine_kv_import_snap(struct engine_context *ctx, int32_t seq, const void *blob, size_t n,
                          const int32_t *tokens, size_t n_tokens, enum engine_kv_snap snap,
                          uint32_t *ret_p1, struct err_detail *d);

/* What a blob holds, after the checks engine_kv_blob_range() makes. */
struct engine_kv_blob_info {
    uint32_t p0, p1;
    uint32_t n_layer_rs;   /* recurrent layers of its model (0: not a hybrid) */
    bool snapshot;         /* it carries the recurrent state at p1 */
    size_t snapshot_bytes; /* of which bytes (0 without) */
};
int engine_kv_blob_info(const void *blob, size_t n, struct engine_kv_blob_info *ret,
                        struct err_detail *d);

/* The range [*ret_p0, *ret_p1) a blob covers, after the checks that need no context
 * (magic, size, version, structure; ERR_STATE_BAD / ERR_STATE_VERSION as above). The
 * checksums are not verified here: engine_kv_import() does that. */
int engine_kv_blob_range(const void *blob, size_t n, uint32_t *ret_p0, uint32_t *ret_p1,
                         struct err_detail *d);
/* The fingerprint of the model a blob belongs to, after the same checks. */
int engine_kv_blob_model(const void *blob, size_t n, struct hash128 *ret_fingerprint,
                         struct err_detail *d);
