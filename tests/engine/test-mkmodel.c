/* warm-mkmodel: for every architecture x weight type, generate a small model with the tool
 * ($WARM_BIN/warm-mkmodel), read it back with gguf_open and check the metadata, every
 * tensor's name, type and shape (against a list written here from llama.cpp's naming),
 * the weight statistics, determinism per seed, --tied, --vocab-from and the demo's
 * command line. */
#include "test.h"

#include "engine/engine.h"

#include <errno.h>
#include <stdio.h>

static bool tools_found(void) {
    return test_tool_path("warm-mkmodel") && test_tool_path("warm-gguf");
}

static char *read_file(const char *path, size_t *size) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, fp) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(fp);
    if (buf) buf[n] = 0;
    *size = (size_t)n;
    return buf;
}

static bool log_contains(const char *needle) {
    char path[512];
    size_t size;
    snprintf(path, sizeof path, "%s/mkmodel.log", test_tmpdir());
    char *buf = read_file(path, &size);
    bool found = buf && strstr(buf, needle);
    free(buf);
    return found;
}

/* ---- what llama.cpp expects ---------------------------------------------------------- */

struct shape {
    int64_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab;
};

struct want_tensor {
    char name[64];
    enum kern_type type;
    uint32_t n_dims;
    int64_t ne0, ne1;
};

/* The tensor list of a model, in the tool's order. */
static size_t expected_tensors(const char *arch, const struct shape *s, enum kern_type type,
                               bool tied, struct want_tensor *out) {
    size_t n = 0;
    int64_t q = s->n_head * s->head_dim, kv = s->n_head_kv * s->head_dim;
#define W(t, nd, a, b, ...)                                                                 \
    do {                                                                                   \
        out[n] = (struct want_tensor){.type = (t), .n_dims = (nd), .ne0 = (a), .ne1 = (b)}; \
        snprintf(out[n].name, sizeof out[n].name, __VA_ARGS__);                            \
        n++;                                                                               \
    } while (0)
    W(type, 2, s->n_embd, s->n_vocab, "token_embd.weight");
    for (int64_t l = 0; l < s->n_layer; l++) {
        int li = (int)l;
        W(KERN_TYPE_F32, 1, s->n_embd, 1, "blk.%d.attn_norm.weight", li);
        W(type, 2, s->n_embd, q, "blk.%d.attn_q.weight", li);
        if (!strcmp(arch, "qwen2")) W(KERN_TYPE_F32, 1, q, 1, "blk.%d.attn_q.bias", li);
        W(type, 2, s->n_embd, kv, "blk.%d.attn_k.weight", li);
        if (!strcmp(arch, "qwen2")) W(KERN_TYPE_F32, 1, kv, 1, "blk.%d.attn_k.bias", li);
        W(type, 2, s->n_embd, kv, "blk.%d.attn_v.weight", li);
        if (!strcmp(arch, "qwen2")) W(KERN_TYPE_F32, 1, kv, 1, "blk.%d.attn_v.bias", li);
        if (!strcmp(arch, "qwen3")) {
            W(KERN_TYPE_F32, 1, s->head_dim, 1, "blk.%d.attn_q_norm.weight", li);
            W(KERN_TYPE_F32, 1, s->head_dim, 1, "blk.%d.attn_k_norm.weight", li);
        }
        W(type, 2, q, s->n_embd, "blk.%d.attn_output.weight", li);
        W(KERN_TYPE_F32, 1, s->n_embd, 1, "blk.%d.ffn_norm.weight", li);
        W(type, 2, s->n_embd, s->n_ff, "blk.%d.ffn_gate.weight", li);
        W(type, 2, s->n_embd, s->n_ff, "blk.%d.ffn_up.weight", li);
        W(type, 2, s->n_ff, s->n_embd, "blk.%d.ffn_down.weight", li);
    }
    W(KERN_TYPE_F32, 1, s->n_embd, 1, "output_norm.weight");
    if (!tied) W(type, 2, s->n_embd, s->n_vocab, "output.weight");
#undef W
    return n;
}

static const struct {
    const char *name;
    enum kern_type type;
    uint32_t ftype; /* llama_ftype */
} types[] = {
    {"f32", KERN_TYPE_F32, 0},   {"f16", KERN_TYPE_F16, 1},   {"bf16", KERN_TYPE_BF16, 32},
    {"q8_0", KERN_TYPE_Q8_0, 7}, {"q4_0", KERN_TYPE_Q4_0, 2}, {"q4_1", KERN_TYPE_Q4_1, 3},
    {"q5_0", KERN_TYPE_Q5_0, 8}, {"q5_1", KERN_TYPE_Q5_1, 9}, {"iq4_nl", KERN_TYPE_IQ4_NL, 25},
};

static const struct {
    const char *name;
    float rope_base, eps;
    int64_t head_dim;
} archs[] = {
    {"llama", 10000.0f, 1e-5f, 32}, /* head_dim != n_embd / n_head on purpose */
    {"qwen2", 1000000.0f, 1e-6f, 16},
    {"qwen3", 1000000.0f, 1e-6f, 32},
};

/* Mean and standard deviation of a tensor's values, dequantized with the kernels. */
static void tensor_stats(const struct gguf_tensor *t, double *mean, double *std) {
    int64_t n = t->ne[0] * t->ne[1];
    float *x = malloc((size_t)n * sizeof *x);
    kern_type_traits(t->type)->to_f32(x, t->data, n);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) s += x[i], s2 += (double)x[i] * x[i];
    *mean = s / (double)n;
    *std = sqrt(s2 / (double)n - *mean * *mean);
    free(x);
}

static void check_u32(const struct gguf_file *f, const char *arch, const char *key, uint32_t v) {
    char k[128];
    uint32_t got = 0;
    struct err_detail d = {0};
    snprintf(k, sizeof k, "%s.%s", arch, key);
    int r = gguf_get_u32(f, k, &got, &d);
    if (r < 0 || got != v) {
        fprintf(stderr, "%s: %s, got %u, expected %u\n", k, err_msg(&d, r), got, v);
        test_failed_ = 1;
    }
}

TEST(every_arch_and_type) {
    if (!tools_found()) SKIP("WARM_BIN/warm-mkmodel is not built");
    static struct want_tensor want[256];
    for (size_t a = 0; a < ARRAY_SIZE(archs); a++) {
        for (size_t t = 0; t < ARRAY_SIZE(types); t++) {
            struct shape s = {64, 2, 4, 2, archs[a].head_dim, 96, 300};
            char args[512], path[512];
            snprintf(args, sizeof args,
                     "--arch %s --type %s --n-embd 64 --n-layer 2 --n-head 4 --n-head-kv 2 "
                     "--head-dim %d --n-ff 96 --n-vocab 300 --ctx 256 --seed 7",
                     archs[a].name, types[t].name, (int)archs[a].head_dim);
            snprintf(path, sizeof path, "%s/%s-%s.gguf", test_tmpdir(), archs[a].name, types[t].name);
            if (test_mkmodel_run(path, "%s", args) != 0) TEST_FAIL_("warm-mkmodel %s failed", args);

            struct gguf_file *f = NULL;
            struct err_detail d = {0};
            ASSERT_OK_D(gguf_open(path, &f, &d), &d);
            struct gguf_str sv;
            ASSERT_OK(gguf_get_str(f, "general.architecture", &sv, &d));
            ASSERT_TRUE(gguf_str_eq(sv, archs[a].name));
            uint32_t ft = 99;
            ASSERT_OK(gguf_get_u32(f, "general.file_type", &ft, &d));
            ASSERT_EQ(ft, types[t].ftype);
            ASSERT_EQ(gguf_find_kv(f, "general.quantization_version") != NULL,
                      kern_type_traits(types[t].type)->is_quantized);
            const char *an = archs[a].name;
            check_u32(f, an, "context_length", 256);
            check_u32(f, an, "embedding_length", 64);
            check_u32(f, an, "block_count", 2);
            check_u32(f, an, "feed_forward_length", 96);
            check_u32(f, an, "attention.head_count", 4);
            check_u32(f, an, "attention.head_count_kv", 2);
            check_u32(f, an, "attention.key_length", (uint32_t)s.head_dim);
            check_u32(f, an, "attention.value_length", (uint32_t)s.head_dim);
            check_u32(f, an, "rope.dimension_count", (uint32_t)s.head_dim);
            check_u32(f, an, "vocab_size", 300);
            ASSERT_TRUE(!test_failed_);
            char key[128];
            float fv = 0;
            snprintf(key, sizeof key, "%s.rope.freq_base", an);
            ASSERT_OK(gguf_get_f32(f, key, &fv, &d));
            ASSERT_NEAR(fv, archs[a].rope_base, 0);
            snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", an);
            ASSERT_OK(gguf_get_f32(f, key, &fv, &d));
            ASSERT_NEAR(fv, archs[a].eps, 0);

            /* the synthetic SentencePiece-style vocabulary */
            const struct gguf_kv *tok, *tt, *sc;
            ASSERT_OK(gguf_get_str(f, "tokenizer.ggml.model", &sv, &d));
            ASSERT_TRUE(gguf_str_eq(sv, "llama"));
            ASSERT_OK(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &tok, &d));
            ASSERT_OK(gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, &tt, &d));
            ASSERT_OK(gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, &sc, &d));
            ASSERT_TRUE(tok->n == 300 && tt->n == 300 && sc->n == 300);
            ASSERT_TRUE(gguf_str_eq(gguf_kv_str(tok, 0), "<unk>"));
            ASSERT_TRUE(gguf_str_eq(gguf_kv_str(tok, 1), "<s>"));
            ASSERT_TRUE(gguf_str_eq(gguf_kv_str(tok, 2), "</s>"));
            ASSERT_TRUE(gguf_str_eq(gguf_kv_str(tok, 3), "<0x00>"));
            ASSERT_TRUE(gguf_str_eq(gguf_kv_str(tok, 13), "<0x0A>"));
            ASSERT_TRUE(gguf_str_eq(gguf_kv_str(tok, 258), "<0xFF>"));
            ASSERT_TRUE(gguf_str_eq(gguf_kv_str(tok, 259), "\xe2\x96\x81"));
            const int32_t *types_arr = tt->data;
            int32_t t0, t3, t258, t259;
            memcpy(&t0, types_arr, 4), memcpy(&t3, types_arr + 3, 4);
            memcpy(&t258, types_arr + 258, 4), memcpy(&t259, types_arr + 259, 4);
            ASSERT_TRUE(t0 == 2 && t3 == 6 && t258 == 6 && t259 == 1);
            /* pieces are distinct */
            for (uint64_t i = 0; i < tok->n; i++)
                for (uint64_t j = i + 1; j < tok->n; j++) {
                    struct gguf_str x = gguf_kv_str(tok, i), y = gguf_kv_str(tok, j);
                    ASSERT_TRUE(x.len != y.len || memcmp(x.ptr, y.ptr, x.len) != 0);
                }
            uint32_t id;
            ASSERT_OK(gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &id, &d));
            ASSERT_EQ(id, 1);
            ASSERT_OK(gguf_get_u32(f, "tokenizer.ggml.eos_token_id", &id, &d));
            ASSERT_EQ(id, 2);
            ASSERT_OK(gguf_get_u32(f, "tokenizer.ggml.unknown_token_id", &id, &d));
            ASSERT_EQ(id, 0);

            /* every tensor, in order */
            size_t n = expected_tensors(an, &s, types[t].type, false, want);
            ASSERT_EQ(gguf_n_tensors(f), n);
            for (size_t i = 0; i < n; i++) {
                const struct gguf_tensor *ten = gguf_tensor_at(f, i);
                if (!gguf_str_eq(ten->name, want[i].name) || ten->type != want[i].type ||
                    ten->n_dims != want[i].n_dims || ten->ne[0] != want[i].ne0 ||
                    ten->ne[1] != want[i].ne1)
                    TEST_FAIL_("%s %s: tensor #%zu is '%.*s' %s %ux[%lld, %lld], expected '%s' "
                               "%s %ux[%lld, %lld]", an, types[t].name, i, (int)ten->name.len,
                               ten->name.ptr, kern_type_name(ten->type), ten->n_dims,
                               (long long)ten->ne[0], (long long)ten->ne[1], want[i].name,
                               kern_type_name(want[i].type), want[i].n_dims,
                               (long long)want[i].ne0, (long long)want[i].ne1);
            }

            /* weights at the intended scale: matrices std 1/sqrt(n_in), embeddings 0.5,
             * norms 1 +- 0.1 */
            double mean, std;
            tensor_stats(gguf_find_tensor(f, "blk.0.attn_q.weight"), &mean, &std);
            ASSERT_NEAR(mean, 0, 0.02);
            ASSERT_NEAR(std, 1 / sqrt(64.0), 0.015);
            tensor_stats(gguf_find_tensor(f, "blk.1.ffn_down.weight"), &mean, &std);
            ASSERT_NEAR(std, 1 / sqrt(96.0), 0.015);
            tensor_stats(gguf_find_tensor(f, "token_embd.weight"), &mean, &std);
            ASSERT_NEAR(std, 0.5, 0.05);
            tensor_stats(gguf_find_tensor(f, "blk.0.ffn_norm.weight"), &mean, &std);
            ASSERT_NEAR(mean, 1.0, 0.03);
            ASSERT_TRUE(std > 0.02 && std < 0.1);
            gguf_close(f);
        }
    }
}

static bool files_equal(const char *a, const char *b) {
    size_t na, nb;
    char *x = read_file(a, &na), *y = read_file(b, &nb);
    bool eq = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return eq;
}

TEST(seed_determinism) {
    if (!tools_found()) SKIP("WARM_BIN/warm-mkmodel is not built");
    char a[512], b[512], c[512];
    snprintf(a, sizeof a, "%s/seed-a.gguf", test_tmpdir());
    snprintf(b, sizeof b, "%s/seed-b.gguf", test_tmpdir());
    snprintf(c, sizeof c, "%s/seed-c.gguf", test_tmpdir());
    const char *args = "--arch qwen2 --type q4_1 --n-embd 64 --n-head 4 --n-ff 64 --seed 42";
    ASSERT_EQ(test_mkmodel_run(a, "%s", args), 0);
    ASSERT_EQ(test_mkmodel_run(b, "%s", args), 0);
    ASSERT_TRUE(files_equal(a, b));
    ASSERT_EQ(test_mkmodel_run(c, "--arch qwen2 --type q4_1 --n-embd 64 --n-head 4 --n-ff 64 "
                                  "--seed 43"), 0);
    ASSERT_TRUE(!files_equal(a, c));
    /* a different seed changes the weights, not the layout */
    struct gguf_file *fa = NULL, *fc = NULL;
    struct err_detail d = {0};
    ASSERT_OK_D(gguf_open(a, &fa, &d), &d);
    ASSERT_OK_D(gguf_open(c, &fc, &d), &d);
    ASSERT_EQ(gguf_size(fa), gguf_size(fc));
    ASSERT_TRUE(memcmp(gguf_base(fa), gguf_base(fc), gguf_data_offset(fa)) == 0);
    const struct gguf_tensor *ta = gguf_find_tensor(fa, "blk.1.attn_v.weight");
    const struct gguf_tensor *tc = gguf_find_tensor(fc, "blk.1.attn_v.weight");
    ASSERT_TRUE(memcmp(ta->data, tc->data, ta->n_bytes) != 0);
    gguf_close(fa);
    gguf_close(fc);
    /* the default seed is 1 */
    ASSERT_EQ(test_mkmodel_run(a, "--arch llama --n-embd 32 --n-head 2 --n-ff 32"), 0);
    ASSERT_EQ(test_mkmodel_run(b, "--arch llama --n-embd 32 --n-head 2 --n-ff 32 --seed 1"), 0);
    ASSERT_TRUE(files_equal(a, b));
}

TEST(tied_and_options) {
    if (!tools_found()) SKIP("WARM_BIN/warm-mkmodel is not built");
    char path[512];
    snprintf(path, sizeof path, "%s/tied.gguf", test_tmpdir());
    ASSERT_EQ(test_mkmodel_run(path, "--arch qwen3 --tied --n-embd 64 --n-layer 3 --n-head 2 "
                                     "--n-ff 64 --shared-kv-layers 2 --rope-base 500000 "
                                     "--eps 1e-5 --name tiny"), 0);
    struct gguf_file *f = NULL;
    struct err_detail d = {0};
    ASSERT_OK_D(gguf_open(path, &f, &d), &d);
    ASSERT_TRUE(gguf_find_tensor(f, "output.weight") == NULL);
    ASSERT_TRUE(gguf_find_tensor(f, "blk.2.attn_k_norm.weight") != NULL);
    ASSERT_TRUE(gguf_find_tensor(f, "blk.3.attn_norm.weight") == NULL);
    uint32_t u;
    float fv;
    struct gguf_str sv;
    ASSERT_OK(gguf_get_u32(f, "qwen3.attention.shared_kv_layers", &u, &d));
    ASSERT_EQ(u, 2);
    ASSERT_OK(gguf_get_f32(f, "qwen3.rope.freq_base", &fv, &d));
    ASSERT_NEAR(fv, 500000, 0);
    ASSERT_OK(gguf_get_f32(f, "qwen3.attention.layer_norm_rms_epsilon", &fv, &d));
    ASSERT_NEAR(fv, 1e-5, 1e-12);
    ASSERT_OK(gguf_get_str(f, "general.name", &sv, &d));
    ASSERT_TRUE(gguf_str_eq(sv, "tiny"));
    ASSERT_OK(gguf_get_u32(f, "qwen3.attention.key_length", &u, &d));
    ASSERT_EQ(u, 32); /* n_embd / n_head by default */
    gguf_close(f);

    /* refusals: exit 2 for bad arguments, 1 for shapes the type cannot hold */
    ASSERT_EQ(test_mkmodel_run(path, "--arch gpt2"), 2);
    ASSERT_EQ(test_mkmodel_run(path, "--arch llama --type q9_K"), 2);
    /* 256-value types need n_in a multiple of 256 (the default n_embd is not) */
    ASSERT_EQ(test_mkmodel_run(path, "--arch llama --type q4_K"), 1);
    ASSERT_TRUE(log_contains("is not a multiple of q4_K's block size 256"));
    ASSERT_EQ(test_mkmodel_run(path, "--arch llama --n-head 4 --n-head-kv 3"), 2);
    ASSERT_TRUE(log_contains("multiple of --n-head-kv"));
    ASSERT_EQ(test_mkmodel_run(path, "--arch qwen2 --n-embd 64 --n-head 4 --head-dim 32"), 2);
    ASSERT_EQ(test_mkmodel_run(path, "--arch llama --n-vocab 100"), 2);
    ASSERT_EQ(test_mkmodel_run(path, "--arch llama --type q8_0 --n-embd 48 --n-head 4"), 1);
    ASSERT_TRUE(log_contains("token_embd.weight: ne[0] = 48 is not a multiple of q8_0's block size 32"));
}

/* Compares a tokenizer pair of two files: same type, count and values. */
static bool kv_same(const struct gguf_kv *a, const struct gguf_kv *b) {
    if (!a || !b || a->type != b->type || a->arr_type != b->arr_type || a->n != b->n) return false;
    enum gguf_type et = a->type == GGUF_TYPE_ARRAY ? a->arr_type : a->type;
    if (et != GGUF_TYPE_STRING) return memcmp(a->data, b->data, a->n * gguf_type_size(et)) == 0;
    for (uint64_t i = 0; i < a->n; i++) {
        struct gguf_str x = gguf_kv_str(a, i), y = gguf_kv_str(b, i);
        if (x.len != y.len || memcmp(x.ptr, y.ptr, x.len) != 0) return false;
    }
    return true;
}

TEST(vocab_from) {
    if (!tools_found()) SKIP("WARM_BIN/warm-mkmodel is not built");
    static const char *const vocabs[] = {"vocab/ggml-vocab-llama-spm.gguf",
                                         "vocab/ggml-vocab-gpt-2.gguf"};
    int seen = 0;
    for (size_t v = 0; v < ARRAY_SIZE(vocabs); v++) {
        const char *src_path = test_shared_path(vocabs[v]);
        if (!src_path) continue;
        seen++;
        char args[1024], path[512];
        snprintf(path, sizeof path, "%s/vocab-%zu.gguf", test_tmpdir(), v);
        snprintf(args, sizeof args, "--arch qwen2 --n-embd 32 --n-head 2 --n-ff 32 --type f16 "
                 "--tied --vocab-from '%s'", src_path);
        ASSERT_EQ(test_mkmodel_run(path, "%s", args), 0);
        struct gguf_file *f = NULL, *src = NULL;
        struct err_detail d = {0};
        ASSERT_OK_D(gguf_open(path, &f, &d), &d);
        ASSERT_OK_D(gguf_open(src_path, &src, &d), &d);
        const struct gguf_kv *tok = gguf_find_kv(src, "tokenizer.ggml.tokens");
        int copied = 0;
        for (uint64_t i = 0; i < gguf_n_kv(src); i++) {
            const struct gguf_kv *kv = gguf_kv_at(src, i);
            char key[128];
            snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
            if (strncmp(key, "tokenizer.", 10) != 0) {
                /* the source's hparams are not copied */
                if (strcmp(key, "general.architecture") != 0 && strcmp(key, "general.name") != 0 &&
                    strcmp(key, "general.file_type") != 0)
                    ASSERT_TRUE(gguf_find_kv(f, key) == NULL);
                continue;
            }
            ASSERT_TRUE(kv_same(kv, gguf_find_kv(f, key)));
            copied++;
        }
        ASSERT_TRUE(copied >= 5);
        uint32_t n_vocab;
        ASSERT_OK(gguf_get_u32(f, "qwen2.vocab_size", &n_vocab, &d));
        ASSERT_EQ(n_vocab, tok->n);
        const struct gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
        ASSERT_TRUE(emb && emb->type == KERN_TYPE_F16 && emb->ne[0] == 32 &&
                    emb->ne[1] == (int64_t)tok->n);
        gguf_close(src);
        gguf_close(f);
    }
    if (!seen) SKIP("../shared/models/vocab/*.gguf are absent");
}

/* scripts/demo.sh's command line works and warm-gguf --check accepts the result. */
TEST(demo_command) {
    if (!tools_found()) SKIP("WARM_BIN/warm-mkmodel is not built");
    const char *vocab = test_shared_path("vocab/ggml-vocab-llama-spm.gguf");
    char args[1024], path[512], cmd[2048];
    snprintf(path, sizeof path, "%s/demo-llama-q8_0.gguf", test_tmpdir());
    snprintf(args, sizeof args, "--arch llama --n-embd 256 --n-layer 4 --n-head 8 --n-head-kv 4 "
             "--n-ff 512 --type q8_0 --seed 1 %s%s%s", vocab ? "--vocab-from '" : "",
             vocab ? vocab : "", vocab ? "'" : "");
    ASSERT_EQ(test_mkmodel_run(path, "%s", args), 0);
    snprintf(cmd, sizeof cmd, "'%s' --check '%s' > /dev/null", test_tool_path("warm-gguf"), path);
    ASSERT_EQ(system(cmd), 0);
    struct gguf_file *f = NULL;
    struct err_detail d = {0};
    ASSERT_OK_D(gguf_open(path, &f, &d), &d);
    ASSERT_EQ(gguf_n_tensors(f), 1 + 4 * 9 + 2);
    const struct gguf_tensor *t = gguf_find_tensor(f, "blk.3.attn_k.weight");
    ASSERT_TRUE(t && t->type == KERN_TYPE_Q8_0 && t->ne[0] == 256 && t->ne[1] == 128);
    gguf_close(f);
}

/* The synthetic vocabulary loads as a tokenizer at every size: its pieces are distinct
 * (single letters were once listed twice, from n_vocab 381 on). */
TEST(synthetic_vocab_loads) {
    if (!tools_found()) SKIP("WARM_BIN/warm-mkmodel is not built");
    static const int sizes[] = {300, 381, 512, 2000, 32000};
    for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
        char args[256], path[512];
        snprintf(path, sizeof path, "%s/vocab-%d.gguf", test_tmpdir(), sizes[i]);
        snprintf(args, sizeof args, "--arch llama --n-embd 64 --n-layer 1 --n-head 2 "
                 "--n-head-kv 2 --n-ff 64 --n-vocab %d", sizes[i]);
        ASSERT_EQ(test_mkmodel_run(path, "%s", args), 0);
        struct gguf_file *f = NULL;
        struct engine_vocab *v = NULL;
        struct err_detail d = {0};
        ASSERT_OK_D(gguf_open(path, &f, &d), &d);
        int r = engine_vocab_load(f, &v, &d);
        gguf_close(f);
        ASSERT_OK_D(r, &d);
        ASSERT_EQ(engine_vocab_n_tokens(v), sizes[i]);
        engine_vocab_free(v);
    }
}

TEST_MAIN(T(every_arch_and_type), T(seed_determinism), T(tied_and_options), T(vocab_from),
          T(demo_command), T(synthetic_vocab_loads))
