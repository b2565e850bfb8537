/* Helpers shared by the KV tests (test-kv.c, test-state.c): dummy models (made by
 * test_mkmodel()) opened, contexts with given cache types and rotation, greedy decoding. */
#pragma once

#include "engine/engine.h"
#include "engine/forward.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>

static inline struct engine_model *kvt_model_open(const char *path) {
    struct engine_model *m = NULL;
    struct err_detail d = {0};
    int r = engine_model_load(path, NULL, &m, &d);
    if (r < 0) fprintf(stderr, "load %s: %s\n", path, err_msg(&d, r));
    return m;
}

/* A context of one sequence; NULL with the reason in *ret_err when it cannot be made. */
static inline struct engine_context *kvt_ctx(const struct engine_model *m, enum kern_type tk,
                                      enum kern_type tv, bool rotation, uint32_t n_ctx,
                                      int *ret_err) {
    struct engine_context_params p;
    engine_context_params_default(&p);
    p.n_ctx = n_ctx;
    p.n_threads = 1;
    p.type_k = tk;
    p.type_v = tv;
    p.kv_rotation = rotation;
    struct engine_context *ctx = NULL;
    int r = engine_context_new(m, &p, &ctx, NULL);
    if (ret_err) *ret_err = r;
    return r < 0 ? NULL : ctx;
}

static inline int32_t kvt_argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Decodes tokens [from, to) of tok at their positions (one batch, logits of the last). */
static inline int kvt_decode(struct engine_context *ctx, const int32_t *tok, int32_t from, int32_t to) {
    int32_t pos[512];
    if (to - from > 512) return ERR_INVALID;
    for (int32_t i = from; i < to; i++) pos[i - from] = i;
    struct engine_batch b = {.n_tok = to - from, .token = tok + from, .pos = pos};
    return engine_context_decode(ctx, &b, NULL);
}

/* Greedy: n tokens after the last decoded one at position `next`; 0 or < 0. */
static inline int kvt_greedy(struct engine_context *ctx, int32_t next, int n, int32_t *out) {
    int32_t n_vocab = (int32_t)engine_context_model(ctx)->hp.n_vocab;
    for (int i = 0; i < n; i++) {
        out[i] = kvt_argmax(engine_context_logits(ctx, 0), n_vocab);
        int32_t p = next + i;
        struct engine_batch one = {.n_tok = 1, .token = &out[i], .pos = &p};
        int r = engine_context_decode(ctx, &one, NULL);
        if (r < 0) return r;
    }
    return 0;
}

/* XXH3 over everything the cache holds for seq 0 (rows of [0, len), tokens, length). */
static inline uint64_t kvt_seq_hash(const struct engine_context *ctx) {
    const struct kv_cache *kv = &ctx->kv;
    uint32_t len = kv->seq_len[0];
    uint64_t h = hash64(&len, sizeof len);
    for (uint32_t s = 0; s < kv->n_store; s++) {
        const struct kv_store *st = &kv->store[s];
        /* a window's rows: those a query at len - 1 sees (a ring holds no others) */
        uint32_t from = st->window && len >= st->window ? len - st->window + 1 : 0;
        for (uint32_t i = 0; i < st->n_layer_kv; i++)
            for (uint32_t p = from; p < len; p++) {
                size_t c = kv_cell(st, 0, (int32_t)p);
                uint64_t w = 2 * (i + 8 * s) + 3;
                h ^= hash64((const char *)st->k[i] + c * st->k_row_bytes, st->k_row_bytes) * w * (p + 1);
                h ^= hash64((const char *)st->v[i] + c * st->v_row_bytes, st->v_row_bytes) * (w + 2) * (p + 1);
            }
    }
    return h ^ hash64(kv->tok, (size_t)len * sizeof *kv->tok);
}
