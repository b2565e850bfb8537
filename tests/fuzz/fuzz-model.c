/* Fuzz target for model loading (arch table, hparams, tensor validation) and, when a
 * mutated file still loads, one forward pass over it: whatever the file says, loading
 * either fails with an error or yields a model the engine runs without reading outside
 * the file or its buffers. Seeds: tiny llama, qwen2 (tied, biases) and qwen3 (QK norm)
 * models made with the writer. */
#include "engine/engine.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int fuzz_seeds(void (*add)(const uint8_t *data, size_t size));

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct gguf_file *f = NULL;
    if (gguf_open_mem(data, size, &f, NULL) < 0) return 0;
    struct engine_model *m = NULL;
    struct err_detail d = {0};
    if (engine_model_load_gguf(f, NULL, &m, &d) < 0) return 0;
    /* keep the run small: the fuzzer may have grown a dimension within the file's size */
    struct engine_context_params p;
    engine_context_params_default(&p);
    p.n_ctx = 2, p.n_batch = 2, p.type_k = KERN_TYPE_F32;
    struct engine_context *ctx = NULL;
    if (engine_context_new(m, &p, &ctx, &d) >= 0) {
        int32_t tok[2] = {0, (int32_t)(m->hp.n_vocab - 1)}, pos[2] = {0, 1};
        struct engine_batch b = {.n_tok = 2, .token = tok, .pos = pos};
        if (engine_context_decode(ctx, &b, &d) >= 0 && !engine_context_logits(ctx, 0))
            __builtin_trap();
        engine_context_free(ctx);
    }
    engine_model_free(m);
    return 0;
}

static void add_tensor(struct gguf_writer *w, const char *name, int64_t ne0, int64_t ne1) {
    static float vals[4096];
    for (int i = 0; i < 4096; i++) vals[i] = (float)((i * 37) % 19) / 19.0f - 0.45f;
    int64_t ne[2] = {ne0, ne1};
    gguf_writer_add_tensor(w, name, KERN_TYPE_F32, ne1 == 1 ? 1 : 2, ne, vals);
}

static void seed_model(void (*add)(const uint8_t *, size_t), const char *arch) {
    struct gguf_writer *w = NULL;
    if (gguf_writer_new(&w) < 0) return;
    char key[96];
    const int64_t E = 16, H = 2, HK = 1, D = 8, FF = 24, V = 12;
    bool qwen2 = !strcmp(arch, "qwen2"), qwen3 = !strcmp(arch, "qwen3");
    gguf_writer_add_str(w, "general.architecture", arch);
#define KEY(s) (snprintf(key, sizeof key, "%s.%s", arch, s), key)
    gguf_writer_add_u32(w, KEY("context_length"), 64);
    gguf_writer_add_u32(w, KEY("embedding_length"), (uint32_t)E);
    gguf_writer_add_u32(w, KEY("block_count"), 1);
    gguf_writer_add_u32(w, KEY("feed_forward_length"), (uint32_t)FF);
    gguf_writer_add_u32(w, KEY("attention.head_count"), (uint32_t)H);
    gguf_writer_add_u32(w, KEY("attention.head_count_kv"), (uint32_t)HK);
    gguf_writer_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
    if (qwen2) {
        gguf_writer_add_str(w, KEY("rope.scaling.type"), "yarn");
        gguf_writer_add_f32(w, KEY("rope.scaling.factor"), 4.0f);
    }
#undef KEY
    add_tensor(w, "token_embd.weight", E, V);
    add_tensor(w, "output_norm.weight", E, 1);
    if (!qwen2) add_tensor(w, "output.weight", E, V);
    const struct {
        const char *name;
        int64_t ne0, ne1;
        bool on;
    } t[] = {
        {"blk.0.attn_norm.weight", E, 1, true},    {"blk.0.attn_q.weight", E, H * D, true},
        {"blk.0.attn_k.weight", E, HK * D, true},  {"blk.0.attn_v.weight", E, HK * D, true},
        {"blk.0.attn_output.weight", H * D, E, true}, {"blk.0.attn_q.bias", H * D, 1, qwen2},
        {"blk.0.attn_k.bias", HK * D, 1, qwen2},   {"blk.0.attn_v.bias", HK * D, 1, qwen2},
        {"blk.0.attn_q_norm.weight", D, 1, qwen3}, {"blk.0.attn_k_norm.weight", D, 1, qwen3},
        {"blk.0.ffn_norm.weight", E, 1, true},     {"blk.0.ffn_gate.weight", E, FF, true},
        {"blk.0.ffn_up.weight", E, FF, true},      {"blk.0.ffn_down.weight", FF, E, true},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (t[i].on) add_tensor(w, t[i].name, t[i].ne0, t[i].ne1);
    void *buf = NULL;
    size_t size = 0;
    if (gguf_writer_encode(w, &buf, &size) == 0) {
        add(buf, size);
        free(buf);
    }
    gguf_writer_free(w);
}

int fuzz_seeds(void (*add)(const uint8_t *data, size_t size)) {
    seed_model(add, "llama");
    seed_model(add, "qwen2");
    seed_model(add, "qwen3");
    return 0;
}
