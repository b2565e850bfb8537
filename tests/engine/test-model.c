/* Model loading: stories260K's hparams and fingerprint, small models of every arch built
 * here with the GGUF writer, and the malformed-model classes (block_count out of range,
 * unknown or missing architecture, missing, extra, misshapen and mistyped tensors, bad
 * hparams), each with its specific error and a message naming the key or tensor. */
#include "test.h"

#include "engine/engine.h"

#include <errno.h>

/* ---- a small model builder ------------------------------------------------------------ */

struct spec {
    const char *arch;
    uint32_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab;
    bool tied;
    /* mutations */
    bool no_arch;
    int64_t block_count;      /* != 0: the key's value (written as u64 when > UINT32_MAX) */
    const char *skip;         /* tensor left out */
    const char *extra;        /* tensor added */
    const char *wrong_shape;  /* tensor written with one more row */
    const char *wrong_type;   /* tensor written as q8_0 (norms) or i32 */
    int wrong_type_id;        /* != 0: wrong_type is written as this type instead */
    const char *rope_scaling; /* rope.scaling.type */
    float rope_factor;
    bool rope_freqs;
    bool no_eps;
};

static struct spec spec_default(const char *arch) {
    return (struct spec){.arch = arch, .n_embd = 64, .n_layer = 2, .n_head = 4, .n_head_kv = 2,
                         .head_dim = 16, .n_ff = 96, .n_vocab = 40};
}

static char *key(const struct spec *s, const char *suffix) {
    static char buf[128];
    snprintf(buf, sizeof buf, "%s.%s", s->arch, suffix);
    return buf;
}

static int add_tensor(struct gguf_writer *w, const struct spec *s, const char *name, int64_t ne0,
                      int64_t ne1) {
    if (s->skip && !strcmp(s->skip, name)) return 0;
    if (s->wrong_shape && !strcmp(s->wrong_shape, name)) ne1 += 1;
    enum kern_type type = KERN_TYPE_F32;
    if (s->wrong_type && !strcmp(s->wrong_type, name))
        type = s->wrong_type_id ? (enum kern_type)s->wrong_type_id
               : ne1 == 1 ? KERN_TYPE_Q8_0 : KERN_TYPE_I32;
    size_t n = kern_row_size(type, ne0) * (size_t)ne1;
    uint8_t *data = calloc(1, n);
    if (!data) return -ENOMEM;
    /* small deterministic values, so a loaded model computes finite numbers */
    if (type == KERN_TYPE_F32)
        for (size_t i = 0; i < n / 4; i++) ((float *)data)[i] = 0.02f * (float)((i * 7919) % 17) - 0.15f;
    int64_t ne[2] = {ne0, ne1};
    int r = gguf_writer_add_tensor(w, name, type, ne1 == 1 ? 1 : 2, ne, data);
    free(data);
    return r;
}

static int build(const struct spec *s, const char *path) {
    struct gguf_writer *w = NULL;
    int r = gguf_writer_new(&w);
    if (r < 0) return r;
    if (!s->no_arch) gguf_writer_add_str(w, "general.architecture", s->arch);
    gguf_writer_add_u32(w, key(s, "context_length"), 256);
    gguf_writer_add_u32(w, key(s, "embedding_length"), s->n_embd);
    if (s->block_count > UINT32_MAX)
        gguf_writer_add_u64(w, key(s, "block_count"), (uint64_t)s->block_count);
    else
        gguf_writer_add_u32(w, key(s, "block_count"), s->block_count ? (uint32_t)s->block_count : s->n_layer);
    gguf_writer_add_u32(w, key(s, "feed_forward_length"), s->n_ff);
    gguf_writer_add_u32(w, key(s, "attention.head_count"), s->n_head);
    gguf_writer_add_u32(w, key(s, "attention.head_count_kv"), s->n_head_kv);
    gguf_writer_add_u32(w, key(s, "attention.key_length"), s->head_dim);
    gguf_writer_add_u32(w, key(s, "attention.value_length"), s->head_dim);
    if (!s->no_eps) gguf_writer_add_f32(w, key(s, "attention.layer_norm_rms_epsilon"), 1e-6f);
    gguf_writer_add_f32(w, key(s, "rope.freq_base"), 1e6f);
    if (s->rope_scaling) gguf_writer_add_str(w, key(s, "rope.scaling.type"), s->rope_scaling);
    if (s->rope_factor) gguf_writer_add_f32(w, key(s, "rope.scaling.factor"), s->rope_factor);

    int64_t E = s->n_embd, Q = (int64_t)s->n_head * s->head_dim, K = (int64_t)s->n_head_kv * s->head_dim;
    bool qwen2 = !strcmp(s->arch, "qwen2"), qwen3 = !strcmp(s->arch, "qwen3");
    r = add_tensor(w, s, "token_embd.weight", E, s->n_vocab);
    if (r >= 0) r = add_tensor(w, s, "output_norm.weight", E, 1);
    if (r >= 0 && !s->tied) r = add_tensor(w, s, "output.weight", E, s->n_vocab);
    if (r >= 0 && s->rope_freqs) r = add_tensor(w, s, "rope_freqs.weight", s->head_dim / 2, 1);
    for (uint32_t il = 0; r >= 0 && il < s->n_layer; il++) {
        struct {
            const char *name;
            int64_t ne0, ne1;
            bool on;
        } t[] = {
            {"attn_norm.weight", E, 1, true},       {"attn_q.weight", E, Q, true},
            {"attn_k.weight", E, K, true},          {"attn_v.weight", E, K, true},
            {"attn_output.weight", Q, E, true},     {"attn_q.bias", Q, 1, qwen2},
            {"attn_k.bias", K, 1, qwen2},           {"attn_v.bias", K, 1, qwen2},
            {"attn_q_norm.weight", s->head_dim, 1, qwen3},
            {"attn_k_norm.weight", s->head_dim, 1, qwen3},
            {"ffn_norm.weight", E, 1, true},        {"ffn_gate.weight", E, s->n_ff, true},
            {"ffn_up.weight", E, s->n_ff, true},    {"ffn_down.weight", s->n_ff, E, true},
        };
        for (size_t i = 0; r >= 0 && i < ARRAY_SIZE(t); i++) {
            if (!t[i].on) continue;
            char name[96];
            snprintf(name, sizeof name, "blk.%u.%s", il, t[i].name);
            r = add_tensor(w, s, name, t[i].ne0, t[i].ne1);
        }
    }
    if (r >= 0 && s->extra) r = add_tensor(w, s, s->extra, E, 1);
    if (r >= 0) r = gguf_writer_save(w, path);
    gguf_writer_free(w);
    return r;
}

/* Builds s, loads it; returns the load's result with the detail in d. */
static int build_load(const struct spec *s, struct engine_model **ret, struct err_detail *d) {
    static int n;
    char path[512];
    snprintf(path, sizeof path, "%s/m%d.gguf", test_tmpdir(), n++);
    int r = build(s, path);
    if (r < 0) return r;
    memset(d, 0, sizeof *d);
    struct engine_model *m = NULL;
    r = engine_model_load(path, NULL, &m, d);
    if (ret && r >= 0)
        *ret = m;
    else
        engine_model_free(m);
    return r;
}

/* Asserts that s fails to load with code and a message containing needle. */
#define ASSERT_LOAD_FAILS(s, code, needle)                                                  \
    do {                                                                                   \
        struct err_detail d_;                                                              \
        ASSERT_ERR(build_load(&(s), NULL, &d_), code);                                     \
        if (!strstr(d_.msg, needle)) TEST_FAIL_("message '%s' lacks '%s'", d_.msg, needle); \
        printf("  %s: %s\n", err_name(code), d_.msg);                                      \
    } while (0)

/* ---- tests ------------------------------------------------------------------------------ */

TEST(stories260k) {
    const char *path = test_shared_path("stories260K.gguf");
    if (!path) SKIP("stories260K.gguf is absent");
    struct engine_model *m = NULL;
    struct err_detail d = {0};
    ASSERT_OK_D(engine_model_load(path, NULL, &m, &d), &d);
    const struct engine_hparams *hp = &m->hp;
    ASSERT_EQ(m->arch, ENGINE_ARCH_LLAMA);
    ASSERT_STREQ(m->arch_name, "llama");
    ASSERT_EQ(hp->n_embd, 64);
    ASSERT_EQ(hp->n_layer, 5);
    ASSERT_EQ(hp->n_head, 8);
    ASSERT_EQ(hp->n_head_kv, 4);
    ASSERT_EQ(hp->head_dim_k, 8);
    ASSERT_EQ(hp->head_dim_v, 8);
    ASSERT_EQ(hp->n_rot, 8);
    ASSERT_EQ(hp->n_ff, 172);
    ASSERT_EQ(hp->n_vocab, 512);
    ASSERT_NEAR(hp->rms_eps, 1e-5, 1e-12);
    ASSERT_NEAR(hp->rope_freq_base, 10000, 0);
    ASSERT_EQ(hp->rope_kind, ENGINE_ROPE_NORM);
    ASSERT_EQ(hp->rope_scaling, ENGINE_ROPE_SCALING_NONE);
    ASSERT_TRUE(!hp->tied_embeddings); /* the GGUF stores output.weight */
    ASSERT_EQ(m->output.n_out, 512);
    ASSERT_EQ(m->layers[4].w_down.n_in, 172);
    ASSERT_TRUE(m->layers[0].bq.data == NULL && m->layers[0].q_norm.data == NULL);

    /* fingerprint = XXH3-128 of the file's bytes */
    FILE *fp = fopen(path, "rb");
    ASSERT_TRUE(fp);
    static uint8_t bytes[1185376];
    size_t n = fread(bytes, 1, sizeof bytes, fp);
    fclose(fp);
    ASSERT_EQ(n, sizeof bytes);
    ASSERT_TRUE(hash128_eq(m->fingerprint, hash128(bytes, n)));
    /* a known fingerprint is taken as is (no rehash) */
    struct hash128 known = {1, 2};
    struct engine_model_params p = {.fingerprint = &known};
    struct engine_model *m2 = NULL;
    ASSERT_OK(engine_model_load(path, &p, &m2, NULL));
    ASSERT_TRUE(hash128_eq(m2->fingerprint, known));
    engine_model_free(m2);
    engine_model_free(m);
}

TEST(arch_table) {
    ASSERT_EQ(engine_arch_from_name("llama"), ENGINE_ARCH_LLAMA);
    ASSERT_EQ(engine_arch_from_name("qwen2"), ENGINE_ARCH_QWEN2);
    ASSERT_EQ(engine_arch_from_name("qwen3"), ENGINE_ARCH_QWEN3);
    ASSERT_ERR(engine_arch_from_name("gptj"), ERR_MODEL_ARCH);
    ASSERT_STREQ(engine_arch_name(ENGINE_ARCH_QWEN2), "qwen2");
}

TEST(archs_load) {
    struct engine_model *m = NULL;
    struct err_detail d;
    /* llama with head_dim 24, not n_embd / n_head = 16 */
    struct spec s = spec_default("llama");
    s.head_dim = 24;
    ASSERT_OK_D(build_load(&s, &m, &d), &d);
    ASSERT_EQ(m->hp.head_dim_k, 24);
    ASSERT_EQ(m->layers[1].wq.n_out, 4 * 24);
    ASSERT_EQ(m->layers[1].wo.n_in, 4 * 24);
    ASSERT_EQ(m->hp.rope_kind, ENGINE_ROPE_NORM);
    ASSERT_NEAR(m->hp.rms_eps, 1e-6, 1e-12);
    ASSERT_NEAR(m->hp.rope_freq_base, 1e6, 0);
    engine_model_free(m);

    s = spec_default("qwen2");
    s.tied = true;
    ASSERT_OK_D(build_load(&s, &m, &d), &d);
    ASSERT_EQ(m->hp.rope_kind, ENGINE_ROPE_NEOX);
    ASSERT_TRUE(m->hp.tied_embeddings);
    ASSERT_TRUE(m->output.data == m->tok_embd.data);
    ASSERT_TRUE(m->layers[0].bq.data && m->layers[0].bk.data && m->layers[0].bv.data);
    ASSERT_EQ(m->layers[0].bk.type, KERN_TYPE_F32);
    engine_model_free(m);

    s = spec_default("qwen3");
    ASSERT_OK_D(build_load(&s, &m, &d), &d);
    ASSERT_EQ(m->hp.rope_kind, ENGINE_ROPE_NEOX);
    ASSERT_TRUE(m->layers[1].q_norm.data && m->layers[1].k_norm.data);
    ASSERT_EQ(m->layers[1].k_norm.n_in, 16);
    engine_model_free(m);
}

TEST(rope_scaling_hparams) {
    struct engine_model *m = NULL;
    struct err_detail d;
    struct spec s = spec_default("llama");
    s.rope_scaling = "linear", s.rope_factor = 4;
    ASSERT_OK_D(build_load(&s, &m, &d), &d);
    ASSERT_EQ(m->hp.rope_scaling, ENGINE_ROPE_SCALING_LINEAR);
    ASSERT_NEAR(m->hp.rope_freq_scale, 0.25, 1e-7);
    ASSERT_NEAR(m->hp.yarn_ext_factor, 0, 0);
    engine_model_free(m);

    s = spec_default("qwen2");
    s.rope_scaling = "yarn", s.rope_factor = 4;
    ASSERT_OK_D(build_load(&s, &m, &d), &d);
    ASSERT_EQ(m->hp.rope_scaling, ENGINE_ROPE_SCALING_YARN);
    ASSERT_NEAR(m->hp.rope_freq_scale, 0.25, 1e-7);
    ASSERT_NEAR(m->hp.yarn_ext_factor, 1, 0);
    ASSERT_NEAR(m->hp.yarn_beta_fast, 32, 0);
    ASSERT_NEAR(m->hp.yarn_beta_slow, 1, 0);
    ASSERT_EQ(m->hp.rope_n_ctx_orig, 256); /* defaults to context_length */
    engine_model_free(m);

    /* llama3: frequency factors in rope_freqs.weight */
    s = spec_default("llama");
    s.rope_freqs = true;
    ASSERT_OK_D(build_load(&s, &m, &d), &d);
    ASSERT_EQ(m->hp.rope_scaling, ENGINE_ROPE_SCALING_LLAMA3);
    ASSERT_EQ(m->rope_freqs.n_in, 8);
    engine_model_free(m);

    /* no scaling type but no factor: none */
    s = spec_default("llama");
    s.rope_scaling = "none", s.rope_factor = 8;
    ASSERT_OK_D(build_load(&s, &m, &d), &d);
    ASSERT_EQ(m->hp.rope_scaling, ENGINE_ROPE_SCALING_NONE);
    ASSERT_NEAR(m->hp.rope_freq_scale, 1, 0);
    engine_model_free(m);

    s = spec_default("llama");
    s.rope_scaling = "longrope";
    ASSERT_LOAD_FAILS(s, ERR_MODEL_HPARAM, "rope.scaling.type");
    /* rope_freqs belongs to llama only */
    s = spec_default("qwen3");
    s.rope_freqs = true;
    ASSERT_LOAD_FAILS(s, ERR_MODEL_TENSOR_UNUSED, "rope_freqs.weight");
}

/* G22: block_count 513 and 2^32 - 1 (and beyond u32) */
TEST(block_count_out_of_range) {
    struct spec s = spec_default("llama");
    s.block_count = 513;
    ASSERT_LOAD_FAILS(s, ERR_MODEL_HPARAM, "llama.block_count");
    s.block_count = 4294967295ll;
    ASSERT_LOAD_FAILS(s, ERR_MODEL_HPARAM, "4294967295");
    s.block_count = 1ll << 40;
    ASSERT_LOAD_FAILS(s, ERR_MODEL_HPARAM, "llama.block_count");
    s.block_count = 0;
    s.n_layer = 0;
    ASSERT_LOAD_FAILS(s, ERR_MODEL_HPARAM, "llama.block_count");
    /* fewer blocks declared than the file has: the extra layer's tensors are unexpected */
    s = spec_default("llama");
    s.block_count = 1;
    ASSERT_LOAD_FAILS(s, ERR_MODEL_TENSOR_UNUSED, "blk.1.");
    /* more declared than present: the first missing tensor is named */
    s.block_count = 3;
    ASSERT_LOAD_FAILS(s, ERR_MODEL_TENSOR_MISSING, "blk.2.attn_norm.weight");
}

/* G38: general.architecture missing or unknown */
TEST(architecture_key) {
    struct spec s = spec_default("llama");
    s.no_arch = true;
    ASSERT_LOAD_FAILS(s, ERR_MODEL_ARCH, "general.architecture");
    s = spec_default("gpt-neox-weird");
    ASSERT_LOAD_FAILS(s, ERR_MODEL_ARCH, "gpt-neox-weird");
}

/* G40: missing and extra tensors, wrong shapes and types */
TEST(tensor_validation) {
    struct spec s = spec_default("llama");
    s.skip = "blk.1.ffn_up.weight";
    ASSERT_LOAD_FAILS(s, ERR_MODEL_TENSOR_MISSING, "'blk.1.ffn_up.weight'");
    s = spec_default("llama");
    s.skip = "token_embd.weight";
    ASSERT_LOAD_FAILS(s, ERR_MODEL_TENSOR_MISSING, "'token_embd.weight'");
    s = spec_default("qwen2");
    s.skip = "blk.0.attn_v.bias";
    ASSERT_LOAD_FAILS(s, ERR_MODEL_TENSOR_MISSING, "'blk.0.attn_v.bias'");
    s = spec_default("qwen3");
    s.skip = "blk.1.attn_k_norm.weight";
    ASSERT_LOAD_FAILS(s, ERR_MODEL_TENSOR_MISSING, "'blk.1.attn_k_norm.weight'");

    s = spec_default("llama");
    s.extra = "blk.0.ffn_gate_inp.weight";
    ASSERT_LOAD_FAILS(s, ERR_MODEL_TENSOR_UNUSED, "'blk.0.ffn_gate_inp.weight'");
    s.extra = "blk.01.attn_norm.weight";
    ASSERT_LOAD_FAILS(s, ERR_MODEL_TENSOR_UNUSED, "'blk.01.attn_norm.weight'");
    s.extra = "something.else";
    ASSERT_LOAD_FAILS(s, ERR_MODEL_TENSOR_UNUSED, "'something.else'");
    s = spec_default("qwen3"); /* a llama-only bias in a qwen3 file */
    s.extra = "blk.0.attn_output.bias";
    ASSERT_LOAD_FAILS(s, ERR_MODEL_TENSOR_UNUSED, "'blk.0.attn_output.bias'");

    s = spec_default("llama");
    s.wrong_shape = "blk.1.attn_k.weight";
    ASSERT_LOAD_FAILS(s, ERR_MODEL_TENSOR_SHAPE, "'blk.1.attn_k.weight'");
    s = spec_default("llama");
    s.wrong_shape = "output.weight";
    ASSERT_LOAD_FAILS(s, ERR_MODEL_TENSOR_SHAPE, "expected [64, 40]");
    s = spec_default("llama");
    s.wrong_type = "blk.0.attn_q.weight"; /* i32 matrix */
    ASSERT_LOAD_FAILS(s, ERR_MODEL_TENSOR_TYPE, "'blk.0.attn_q.weight' is I32");
    s = spec_default("llama");
    s.wrong_type = "blk.0.ffn_norm.weight"; /* a quantized norm weight */
    ASSERT_LOAD_FAILS(s, ERR_MODEL_TENSOR_TYPE, "'blk.0.ffn_norm.weight'");
}

/* A ggml type the reader can size but warmd has no kernels for: the file opens (warm-gguf
 * lists it) and the loader names the tensor, its type and what it supports instead. */
TEST(known_type_without_kernels) {
    struct spec s = spec_default("llama");
    s.n_embd = 256;
    s.head_dim = 64;
    s.wrong_type = "blk.0.attn_q.weight";
    s.wrong_type_id = KERN_TYPE_IQ2_XS;
    char path[512];
    snprintf(path, sizeof path, "%s/iq2xs.gguf", test_tmpdir());
    ASSERT_OK(build(&s, path));
    struct err_detail d = {0};
    struct gguf_file *f = NULL;
    ASSERT_OK_D(gguf_open(path, &f, &d), &d);
    const struct gguf_tensor *t = gguf_find_tensor(f, "blk.0.attn_q.weight");
    ASSERT_TRUE(t != NULL);
    ASSERT_EQ(t->type, KERN_TYPE_IQ2_XS);
    ASSERT_EQ(t->n_bytes, (uint64_t)74 * 256); /* 256 rows of one 74-byte block */
    gguf_close(f);
    ASSERT_LOAD_FAILS(s, ERR_MODEL_TENSOR_TYPE,
                      "tensor 'blk.0.attn_q.weight' is IQ2_XS, which warmd does not support "
                      "yet; supported: F32, F16, Q4_0");
    ASSERT_LOAD_FAILS(s, ERR_MODEL_TENSOR_TYPE, "Q4_K, Q5_K, Q6_K");
}

TEST(hparam_validation) {
    struct spec s = spec_default("llama");
    s.no_eps = true;
    ASSERT_LOAD_FAILS(s, ERR_MODEL_HPARAM, "llama.attention.layer_norm_rms_epsilon");
    s = spec_default("llama");
    s.n_head = 4, s.n_head_kv = 3;
    ASSERT_LOAD_FAILS(s, ERR_MODEL_HPARAM, "head_count_kv");
    s = spec_default("llama");
    s.n_head_kv = 8; /* more KV heads than heads */
    ASSERT_LOAD_FAILS(s, ERR_MODEL_HPARAM, "llama.attention.head_count_kv");
}

/* Every bad model from the cases above, loaded from memory, never crashes; a model
 * loaded from a buffer that is then truncated at every 64th byte fails cleanly. */
TEST(truncated_files) {
    struct spec s = spec_default("qwen3");
    char path[512];
    snprintf(path, sizeof path, "%s/trunc.gguf", test_tmpdir());
    ASSERT_OK(build(&s, path));
    FILE *fp = fopen(path, "rb");
    ASSERT_TRUE(fp);
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)size);
    ASSERT_TRUE(buf && fread(buf, 1, (size_t)size, fp) == (size_t)size);
    fclose(fp);
    int n_ok = 0;
    for (long cut = 0; cut <= size; cut += 64) {
        struct gguf_file *f = NULL;
        if (gguf_open_mem(buf, (size_t)cut, &f, NULL) < 0) continue;
        struct engine_model *m = NULL;
        struct err_detail d = {0};
        int r = engine_model_load_gguf(f, NULL, &m, &d);
        if (r >= 0) n_ok++;
        engine_model_free(m);
    }
    struct gguf_file *f = NULL;
    ASSERT_OK(gguf_open_mem(buf, (size_t)size, &f, NULL));
    struct engine_model *m = NULL;
    ASSERT_OK(engine_model_load_gguf(f, NULL, &m, NULL));
    engine_model_free(m);
    free(buf);
    printf("  %d truncated prefixes loaded as a model (expected 0 or the padded tail)\n", n_ok);
    ASSERT_TRUE(n_ok <= 1);
}

TEST_MAIN(T(stories260k), T(arch_table), T(archs_load), T(rope_scaling_hparams),
          T(block_count_out_of_range), T(architecture_key), T(tensor_validation),
          T(known_type_without_kernels),
          T(hparam_validation), T(truncated_files))
