/* Fuzz target for the state blobs of a hybrid (blob format 3: the recurrent ABI record and
 * snapshot; engine_kv_import_snap): whatever the bytes, the import either fails with an
 * error and leaves the sequence exactly as it was (its rows, its length, where it can
 * resume and its recurrent state), or succeeds on a blob consistent with the context,
 * after which the sequence decodes from where it can resume. The model is
 * ../shared/models/hybrid/qwen35-tiny.gguf (6 Gated DeltaNet layers, 2 attention layers),
 * q8_0 K and f16 V with rotation; seeds: blobs exported from it with and without the
 * snapshot. Without the model the deterministic run is skipped (exit 77). */
#include "engine/engine.h"
#include "engine/forward.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int fuzz_seeds(void (*add)(const uint8_t *data, size_t size));

enum { N_CTX = 16 };

static const int32_t toks[N_CTX] = {1, 50, 70, 20, 90, 110, 30, 40, 80, 100, 60, 5, 10, 20, 30, 40};
static struct engine_model *model;
static struct engine_context *ctx;
static bool absent;

static struct engine_context *ctx_make(void) {
    struct engine_context_params p;
    engine_context_params_default(&p);
    p.n_ctx = N_CTX;
    p.type_k = KERN_TYPE_Q8_0;
    p.type_v = KERN_TYPE_F16;
    p.kv_rotation = true;
    struct engine_context *c = NULL;
    return engine_context_new(model, &p, &c, NULL) < 0 ? NULL : c;
}

static bool setup(void) {
    if (model || absent) return model != NULL;
    const char *dir = getenv("WARM_SHARED_MODELS");
    char path[4096];
    snprintf(path, sizeof path, "%s/hybrid/qwen35-tiny.gguf", dir ? dir : "../shared/models");
    if (engine_model_load(path, NULL, &model, NULL) < 0) {
        absent = true;
        return false;
    }
    if (!(ctx = ctx_make())) __builtin_trap();
    return true;
}

static int decode(struct engine_context *c, int32_t from, int32_t to) {
    int32_t pos[N_CTX];
    for (int32_t i = from; i < to; i++) pos[i - from] = i;
    struct engine_batch b = {.n_tok = to - from, .token = toks + from, .pos = pos};
    return engine_context_decode(c, &b, NULL);
}

/* Everything an import may change of sequence 0. */
static uint64_t seq_hash(void) {
    const struct kv_cache *kv = &ctx->kv;
    const struct kv_store *st = &kv->store[0];
    uint32_t len = engine_kv_seq_len(ctx, 0);
    uint64_t h = len * 1000003ull + engine_kv_seq_resume_pos(ctx, 0, len);
    for (uint32_t i = 0; i < st->n_layer_kv; i++)
        h ^= hash64(st->k[i], len * st->k_row_bytes) + 3 * hash64(st->v[i], len * st->v_row_bytes);
    for (uint32_t i = 0; i < kv->rs.n_layer_rs; i++)
        h ^= hash64(kv->rs.conv[i], kv->rs.conv_floats * sizeof(float)) * (i + 5) +
             hash64(kv->rs.ssm[i], kv->rs.ssm_floats * sizeof(float));
    return h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!setup()) return 0;
    /* the sequence holds 3 positions before each import */
    engine_kv_seq_rm(ctx, 0, 0);
    if (decode(ctx, 0, 3) < 0) __builtin_trap();
    const uint64_t before = seq_hash();
    uint32_t p1 = 0;
    int r = engine_kv_import_snap(ctx, 0, data, size, NULL, 0, ENGINE_KV_SNAP_AUTO, &p1, NULL);
    if (r < 0) {
        if (seq_hash() != before || engine_kv_seq_len(ctx, 0) != 3) __builtin_trap();
        return 0;
    }
    if (engine_kv_seq_len(ctx, 0) != p1) __builtin_trap();
    /* it goes on where its recurrent state is: p1 with the blob's snapshot */
    uint32_t at = engine_kv_seq_resume_pos(ctx, 0, p1);
    struct engine_kv_blob_info bi;
    if (engine_kv_blob_info(data, size, &bi, NULL) < 0 || (bi.snapshot && at != p1)) __builtin_trap();
    if (engine_kv_seq_rm(ctx, 0, at) < 0) __builtin_trap();
    if (at < N_CTX) {
        int32_t pos = (int32_t)at, tok = 1;
        struct engine_batch b = {.n_tok = 1, .token = &tok, .pos = &pos};
        if (engine_context_decode(ctx, &b, NULL) < 0 || !engine_context_logits(ctx, 0)) __builtin_trap();
    }
    return 0;
}

int fuzz_seeds(void (*add)(const uint8_t *data, size_t size)) {
    if (!setup()) {
        fprintf(stderr, "skipped: ../shared/models/hybrid/qwen35-tiny.gguf is absent "
                        "(WARM_SHARED_MODELS)\n");
        exit(77);
    }
    struct engine_context *c = ctx_make();
    if (!c || decode(c, 0, 4) < 0 || engine_kv_snapshot(c, 0, NULL) < 0 || decode(c, 4, 10) < 0)
        return -1;
    static const struct {
        uint32_t p0, p1;
        enum engine_kv_snap snap;
    } seeds[] = {{0, 4, ENGINE_KV_SNAP_NEED}, {0, 10, ENGINE_KV_SNAP_NEED},
                 {3, 10, ENGINE_KV_SNAP_NEED}, {0, 7, ENGINE_KV_SNAP_NONE},
                 {2, 4, ENGINE_KV_SNAP_NONE}};
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        size_t n = 0;
        if (engine_kv_export_snap(c, 0, seeds[i].p0, seeds[i].p1, seeds[i].snap, NULL, 0, &n,
                                  NULL) < 0)
            return -1;
        uint8_t *buf = malloc(n);
        if (buf && engine_kv_export_snap(c, 0, seeds[i].p0, seeds[i].p1, seeds[i].snap, buf, n,
                                         &n, NULL) == 0)
            add(buf, n);
        free(buf);
    }
    engine_context_free(c);
    return 0;
}
