/* Fuzz target for KV state blob import (engine_kv_import): whatever the bytes, the import
 * either fails with an ERR_STATE_* / placement error and leaves the sequence exactly as it
 * was, or succeeds on a blob that is consistent with the context, after which decoding
 * runs. The context: a 2-layer llama model with one shared-KV layer, head size 64,
 * q8_0 K and q4_0 V with Hadamard rotation. Seeds: blobs exported from it. */
#include "engine/engine.h"
#include "engine/forward.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int fuzz_seeds(void (*add)(const uint8_t *data, size_t size));

enum { E = 128, H = 2, HK = 1, D = 64, FF = 32, V = 12, N_CTX = 16 };

static void add_tensor(struct gguf_writer *w, const char *name, int64_t ne0, int64_t ne1) {
    static float vals[E * H * D];
    for (int i = 0; i < E * H * D; i++) vals[i] = (float)((i * 37) % 19) / 19.0f - 0.45f;
    int64_t ne[2] = {ne0, ne1};
    gguf_writer_add_tensor(w, name, KERN_TYPE_F32, ne1 == 1 ? 1 : 2, ne, vals);
}

static void *model_bytes;

static struct engine_model *model_make(void) {
    struct gguf_writer *w = NULL;
    if (gguf_writer_new(&w) < 0) return NULL;
    gguf_writer_add_str(w, "general.architecture", "llama");
    gguf_writer_add_u32(w, "llama.context_length", 64);
    gguf_writer_add_u32(w, "llama.embedding_length", E);
    gguf_writer_add_u32(w, "llama.block_count", 2);
    gguf_writer_add_u32(w, "llama.feed_forward_length", FF);
    gguf_writer_add_u32(w, "llama.attention.head_count", H);
    gguf_writer_add_u32(w, "llama.attention.head_count_kv", HK);
    gguf_writer_add_u32(w, "llama.attention.key_length", D);
    gguf_writer_add_u32(w, "llama.attention.value_length", D);
    gguf_writer_add_u32(w, "llama.attention.shared_kv_layers", 1);
    gguf_writer_add_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    add_tensor(w, "token_embd.weight", E, V);
    add_tensor(w, "output_norm.weight", E, 1);
    add_tensor(w, "output.weight", E, V);
    char name[64];
    for (int l = 0; l < 2; l++) {
        const struct {
            const char *s;
            int64_t ne0, ne1;
        } t[] = {
            {"attn_norm.weight", E, 1},   {"attn_q.weight", E, H * D},  {"attn_k.weight", E, HK * D},
            {"attn_v.weight", E, HK * D}, {"attn_output.weight", H * D, E}, {"ffn_norm.weight", E, 1},
            {"ffn_gate.weight", E, FF},   {"ffn_up.weight", E, FF},     {"ffn_down.weight", FF, E},
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            snprintf(name, sizeof name, "blk.%d.%s", l, t[i].s);
            add_tensor(w, name, t[i].ne0, t[i].ne1);
        }
    }
    void *buf = NULL;
    size_t size = 0;
    struct engine_model *m = NULL;
    struct gguf_file *f = NULL;
    if (gguf_writer_encode(w, &buf, &size) == 0 && gguf_open_mem(buf, size, &f, NULL) == 0)
        engine_model_load_gguf(f, NULL, &m, NULL);
    gguf_writer_free(w);
    /* the model's views point into buf: it lives as long as the process (still reachable) */
    model_bytes = buf;
    return m;
}

static struct engine_context *ctx_make(const struct engine_model *m) {
    struct engine_context_params p;
    engine_context_params_default(&p);
    p.n_ctx = N_CTX;
    p.type_k = KERN_TYPE_Q8_0;
    p.type_v = KERN_TYPE_Q4_0;
    p.kv_rotation = true;
    struct engine_context *ctx = NULL;
    return engine_context_new(m, &p, &ctx, NULL) < 0 ? NULL : ctx;
}

static const int32_t toks[N_CTX] = {1, 5, 7, 2, 9, 11, 3, 4, 8, 10, 6, 0, 1, 2, 3, 4};

static int decode(struct engine_context *ctx, int32_t from, int32_t to) {
    int32_t pos[N_CTX];
    for (int32_t i = from; i < to; i++) pos[i - from] = i;
    struct engine_batch b = {.n_tok = to - from, .token = toks + from, .pos = pos};
    return engine_context_decode(ctx, &b, NULL);
}

static struct engine_model *model;
static struct engine_context *ctx;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!model && !(model = model_make())) __builtin_trap();
    if (!ctx && !(ctx = ctx_make(model))) __builtin_trap();
    /* the sequence holds 3 positions before each import */
    engine_kv_seq_rm(ctx, 0, 0);
    if (decode(ctx, 0, 3) < 0) __builtin_trap();
    const struct kv_cache *kv = &ctx->kv;
    uint64_t before = hash64(kv->store[0].k[0], 3 * kv->store[0].k_row_bytes) ^ hash64(kv->store[0].v[0], 3 * kv->store[0].v_row_bytes);
    uint32_t p1 = 0;
    int r = engine_kv_import(ctx, 0, data, size, NULL, 0, &p1, NULL);
    if (r < 0) {
        uint64_t after = hash64(kv->store[0].k[0], 3 * kv->store[0].k_row_bytes) ^ hash64(kv->store[0].v[0], 3 * kv->store[0].v_row_bytes);
        if (after != before || engine_kv_seq_len(ctx, 0) != 3) __builtin_trap();
        return 0;
    }
    if (engine_kv_seq_len(ctx, 0) != p1) __builtin_trap();
    if (p1 < N_CTX) {
        int32_t pos = (int32_t)p1, tok = 1;
        struct engine_batch b = {.n_tok = 1, .token = &tok, .pos = &pos};
        if (engine_context_decode(ctx, &b, NULL) < 0 || !engine_context_logits(ctx, 0)) __builtin_trap();
    }
    return 0;
}

int fuzz_seeds(void (*add)(const uint8_t *data, size_t size)) {
    if (!model && !(model = model_make())) return -1;
    struct engine_context *c = ctx_make(model);
    if (!c || decode(c, 0, 10) < 0) return -1;
    static const uint32_t ranges[][2] = {{0, 3}, {0, 10}, {3, 7}, {2, 4}};
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
        size_t n = 0;
        if (engine_kv_export(c, 0, ranges[i][0], ranges[i][1], NULL, 0, &n, NULL) < 0) continue;
        uint8_t *buf = malloc(n);
        if (buf && engine_kv_export(c, 0, ranges[i][0], ranges[i][1], buf, n, &n, NULL) == 0) add(buf, n);
        free(buf);
    }
    engine_context_free(c);
    return 0;
}
