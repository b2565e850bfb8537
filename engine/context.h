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

struct engine_context_params {
    uint32_t n_ctx;     /* positions per sequence; 0 = min(n_ctx_train, 4096) */
    uint32_t n_seq;     /* sequences; 0 = 1 */
    uint32_t n_batch;   /* tokens per internal step (scratch rows); 0 = 512 */
    uint32_t n_outputs; /* rows of logits one decode may return; 0 = n_seq */
    int n_threads;      /* 0 = 1 */
    enum kern_type type_k, type_v; /* cache types: f32, f16 or bf16 for now */
};

/* The defaults above (f16 cache). */
void engine_context_params_default(struct engine_context_params *p);

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

/* ---- sequences in the cache ----------------------------------------------------------- */

/* Positions cached for seq (its length); 0 for an unknown seq. */
uint32_t engine_kv_seq_len(const struct engine_context *ctx, int32_t seq);
/* Drops positions >= p0 of seq (p0 = 0 clears it). */
int engine_kv_seq_rm(struct engine_context *ctx, int32_t seq, uint32_t p0);
/* Makes dst a copy of positions [0, p1) of src (p1 is clamped to src's length). */
int engine_kv_seq_cp(struct engine_context *ctx, int32_t src, int32_t dst, uint32_t p1);
