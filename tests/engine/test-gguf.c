/* GGUF reader on the real files in ../shared/models (a trained model and four llama.cpp
 * vocab-only files), the typed getters, and writer round trips. */
#include "test.h"

#include "engine/gguf.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

/* ---- helpers ------------------------------------------------------------------------- */

static void read_whole(const char *path, uint8_t **ret, size_t *ret_size) {
    FILE *fp = fopen(path, "rb");
    *ret = NULL;
    *ret_size = 0;
    if (!fp) return;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, fp) == (size_t)n) {
        *ret = buf;
        *ret_size = (size_t)n;
    } else {
        free(buf);
    }
    fclose(fp);
}

static bool tensor_is(const struct gguf_tensor *t, const char *name, enum kern_type type,
                      uint32_t n_dims, int64_t ne0, int64_t ne1) {
    return t && gguf_str_eq(t->name, name) && t->type == type && t->n_dims == n_dims &&
           t->ne[0] == ne0 && t->ne[1] == ne1 && t->ne[2] == 1 && t->ne[3] == 1;
}

/* ---- stories260K.gguf ---------------------------------------------------------------- */

TEST(stories260k) {
    const char *path = test_shared_path("stories260K.gguf");
    if (!path) SKIP("../shared/models/stories260K.gguf is absent");
    struct gguf_file *f = NULL;
    struct err_detail d = {0};
    ASSERT_OK_D(gguf_open(path, &f, &d), &d);
    ASSERT_EQ(gguf_version(f), 3);
    ASSERT_EQ(gguf_size(f), 1185376);
    ASSERT_EQ(gguf_n_kv(f), 19);
    ASSERT_EQ(gguf_n_tensors(f), 48);
    ASSERT_EQ(gguf_alignment(f), 32);
    ASSERT_EQ(gguf_data_offset(f), 14176); /* tensor infos end at 14152 */
    ASSERT_EQ(gguf_data_end(f), 1185376);
    ASSERT_EQ(gguf_trailing_bytes(f), 0);

    /* metadata, in file order */
    static const char *const keys[] = {
        "tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
        "tokenizer.ggml.model", "general.architecture", "general.name",
        "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id", "tokenizer.ggml.seperator_token_id",
        "tokenizer.ggml.padding_token_id", "llama.context_length", "llama.embedding_length",
        "llama.feed_forward_length", "llama.attention.head_count",
        "llama.attention.head_count_kv", "llama.block_count", "llama.rope.dimension_count",
        "llama.attention.layer_norm_rms_epsilon"};
    for (uint64_t i = 0; i < ARRAY_SIZE(keys); i++) {
        const struct gguf_kv *kv = gguf_kv_at(f, i);
        ASSERT_TRUE(kv && gguf_str_eq(kv->key, keys[i]));
        ASSERT_TRUE(gguf_find_kv(f, keys[i]) == kv);
    }
    ASSERT_TRUE(gguf_kv_at(f, 19) == NULL);
    ASSERT_EQ(gguf_kv_at(f, 0)->offset, 24);
    ASSERT_EQ(gguf_find_kv(f, "general.alignment") == NULL, 1);
    ASSERT_EQ(gguf_find_kv(f, "llama.attention.head_coun") == NULL, 1);

    const struct gguf_kv *tok = NULL, *scores = NULL, *types = NULL;
    ASSERT_OK_D(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &tok, &d), &d);
    ASSERT_OK_D(gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, &scores, &d), &d);
    ASSERT_OK_D(gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, &types, &d), &d);
    ASSERT_EQ(tok->n, 512);
    ASSERT_EQ(scores->n, 512);
    ASSERT_EQ(types->n, 512);
    struct gguf_str s = gguf_kv_str(tok, 0);
    ASSERT_TRUE(gguf_str_eq(s, "<unk>"));
    ASSERT_TRUE(gguf_str_eq(gguf_kv_str(tok, 1), "<s>"));
    ASSERT_TRUE(gguf_str_eq(gguf_kv_str(tok, 2), "</s>"));
    ASSERT_TRUE(gguf_str_eq(gguf_kv_str(tok, 3), "<0x00>"));
    ASSERT_TRUE(gguf_str_eq(gguf_kv_str(tok, 258), "<0xFF>"));
    ASSERT_TRUE(gguf_kv_str(tok, 512).ptr == NULL); /* out of range: empty view */
    ASSERT_TRUE(gguf_kv_str(scores, 0).ptr == NULL); /* not a string */
    int32_t tt[4];
    memcpy(tt, types->data, sizeof tt);
    ASSERT_TRUE(tt[0] == 2 && tt[1] == 3 && tt[2] == 3 && tt[3] == 6);

    struct gguf_str arch;
    ASSERT_OK(gguf_get_str(f, "general.architecture", &arch, &d));
    ASSERT_TRUE(gguf_str_eq(arch, "llama"));
    uint32_t u = 0;
    ASSERT_OK(gguf_get_u32(f, "llama.embedding_length", &u, &d));
    ASSERT_EQ(u, 64);
    ASSERT_OK(gguf_get_u32(f, "llama.feed_forward_length", &u, &d));
    ASSERT_EQ(u, 172);
    ASSERT_OK(gguf_get_u32(f, "llama.attention.head_count_kv", &u, &d));
    ASSERT_EQ(u, 4);
    ASSERT_OK(gguf_get_u32(f, "tokenizer.ggml.padding_token_id", &u, &d));
    ASSERT_EQ(u, UINT32_MAX);
    uint64_t u64 = 0;
    ASSERT_OK(gguf_get_u64(f, "llama.block_count", &u64, &d));
    ASSERT_EQ(u64, 5);
    int32_t i32 = 0;
    ASSERT_ERR(gguf_get_i32(f, "tokenizer.ggml.padding_token_id", &i32, &d), ERR_GGUF_WRONG_TYPE);
    ASSERT_TRUE(strstr(d.msg, "does not fit") != NULL);
    ASSERT_OK(gguf_get_i32(f, "llama.context_length", &i32, &d));
    ASSERT_EQ(i32, 2048);
    float eps = 0;
    ASSERT_OK(gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &eps, &d));
    ASSERT_NEAR(eps, 1e-5, 1e-12);
    ASSERT_ERR(gguf_get_f32(f, "general.name", &eps, &d), ERR_GGUF_WRONG_TYPE);
    ASSERT_TRUE(strstr(d.msg, "general.name") && strstr(d.msg, "string"));
    ASSERT_ERR(gguf_get_u32(f, "llama.rope.freq_base", &u, &d), ERR_GGUF_MISSING);
    bool b;
    ASSERT_ERR(gguf_get_bool(f, "llama.block_count", &b, &d), ERR_GGUF_WRONG_TYPE);
    const struct gguf_kv *arr;
    ASSERT_ERR(gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_TYPE_INT32, &arr, &d),
               ERR_GGUF_WRONG_TYPE);
    ASSERT_TRUE(strstr(d.msg, "array of float32") != NULL);

    /* tensors: the order llama.cpp's converter wrote them */
    ASSERT_TRUE(tensor_is(gguf_tensor_at(f, 0), "token_embd.weight", KERN_TYPE_F32, 2, 64, 512));
    ASSERT_TRUE(tensor_is(gguf_tensor_at(f, 1), "output_norm.weight", KERN_TYPE_F32, 1, 64, 1));
    ASSERT_TRUE(tensor_is(gguf_tensor_at(f, 2), "output.weight", KERN_TYPE_F32, 2, 64, 512));
    static const struct {
        const char *name;
        uint32_t n_dims;
        int64_t ne0, ne1;
    } layer[] = {
        {"attn_q.weight", 2, 64, 64},  {"attn_k.weight", 2, 64, 32},
        {"attn_v.weight", 2, 64, 32},  {"attn_output.weight", 2, 64, 64},
        {"attn_norm.weight", 1, 64, 1}, {"ffn_gate.weight", 2, 64, 172},
        {"ffn_down.weight", 2, 172, 64}, {"ffn_up.weight", 2, 64, 172},
        {"ffn_norm.weight", 1, 64, 1},
    };
    uint64_t expect_off = 0;
    for (uint64_t i = 0; i < 48; i++) {
        const struct gguf_tensor *t = gguf_tensor_at(f, i);
        ASSERT_EQ(t->offset, expect_off);
        ASSERT_EQ(t->n_bytes, t->ne[0] * t->ne[1] * 4);
        ASSERT_TRUE((const uint8_t *)t->data ==
                    (const uint8_t *)gguf_base(f) + gguf_data_offset(f) + t->offset);
        expect_off += (t->n_bytes + 31) / 32 * 32;
        ASSERT_TRUE(gguf_find_tensor(f, t->name.ptr) == NULL || t->name.len > 0);
        if (i < 3) continue;
        char name[64];
        snprintf(name, sizeof name, "blk.%d.%s", (int)(i - 3) / 9, layer[(i - 3) % 9].name);
        ASSERT_TRUE(tensor_is(t, name, KERN_TYPE_F32, layer[(i - 3) % 9].n_dims,
                              layer[(i - 3) % 9].ne0, layer[(i - 3) % 9].ne1));
        ASSERT_TRUE(gguf_find_tensor(f, name) == t);
    }
    ASSERT_EQ(expect_off, 1185376 - 14176);
    ASSERT_TRUE(gguf_find_tensor(f, "blk.5.attn_q.weight") == NULL);
    ASSERT_TRUE(gguf_tensor_at(f, 48) == NULL);

    /* The tensor data is the llama2.c checkpoint's: token_embedding[512][64] follows its
     * 28-byte header, rms_att[0][64] follows the embedding. */
    const char *bin_path = test_shared_path("stories260K.bin");
    if (bin_path) {
        uint8_t *bin;
        size_t bin_size;
        read_whole(bin_path, &bin, &bin_size);
        ASSERT_TRUE(bin && bin_size == 1056540);
        const struct gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
        const struct gguf_tensor *norm0 = gguf_find_tensor(f, "blk.0.attn_norm.weight");
        ASSERT_TRUE(memcmp(emb->data, bin + 28, emb->n_bytes) == 0);
        ASSERT_TRUE(memcmp(norm0->data, bin + 28 + emb->n_bytes, norm0->n_bytes) == 0);
        free(bin);
    }
    gguf_close(f);
}

/* The same file through gguf_open_mem, and the mapping is not needed afterwards. */
TEST(stories260k_mem) {
    const char *path = test_shared_path("stories260K.gguf");
    if (!path) SKIP("../shared/models/stories260K.gguf is absent");
    uint8_t *buf;
    size_t size;
    read_whole(path, &buf, &size);
    ASSERT_TRUE(buf != NULL);
    struct gguf_file *f = NULL;
    struct err_detail d = {0};
    ASSERT_OK_D(gguf_open_mem(buf, size, &f, &d), &d);
    ASSERT_EQ(gguf_n_tensors(f), 48);
    ASSERT_TRUE(gguf_base(f) == buf);
    const struct gguf_tensor *t = gguf_find_tensor(f, "blk.4.ffn_norm.weight");
    ASSERT_TRUE(t && t->offset == 1170944 && (const uint8_t *)t->data == buf + 14176 + 1170944);
    gguf_close(f);
    free(buf);
}

/* ---- vocab-only files ---------------------------------------------------------------- */

struct vocab_case {
    const char *file;
    uint64_t n_kv, n_tokens, n_merges, size;
    const char *arch, *model, *pre, *tok0, *tok_last;
    uint32_t bos, eos;
    bool has_scores;
};

static const struct vocab_case vocab_cases[] = {
    {"vocab/ggml-vocab-llama-spm.gguf", 22, 32000, 0, 723869, "llama", "llama", "default",
     "<unk>", NULL, 1, 2, true},
    {"vocab/ggml-vocab-gpt-2.gguf", 16, 50257, 50000, 1766807, "gpt2", "gpt2", "gpt-2", "!",
     "<|endoftext|>", 50256, 50256, false},
    {"vocab/ggml-vocab-deepseek-llm.gguf", 23, 102400, 99757, 3970167, "llama", "gpt2",
     "deepseek-llm", "!", NULL, 100000, 100001, false},
    {"vocab/ggml-vocab-deepseek-coder.gguf", 25, 32256, 31757, 1156067, "llama", "gpt2",
     "deepseek-coder", "!", NULL, 32013, 32014, false},
};

TEST(vocab_files) {
    int seen = 0;
    for (size_t c = 0; c < ARRAY_SIZE(vocab_cases); c++) {
        const struct vocab_case *vc = &vocab_cases[c];
        const char *path = test_shared_path(vc->file);
        if (!path) continue;
        seen++;
        struct gguf_file *f = NULL;
        struct err_detail d = {0};
        ASSERT_OK_D(gguf_open(path, &f, &d), &d);
        ASSERT_EQ(gguf_version(f), 3);
        ASSERT_EQ(gguf_size(f), vc->size);
        ASSERT_EQ(gguf_n_kv(f), vc->n_kv);
        ASSERT_EQ(gguf_n_tensors(f), 0);
        /* These files end right after the metadata, without padding. */
        ASSERT_EQ(gguf_data_offset(f), (vc->size + 31) / 32 * 32);
        ASSERT_EQ(gguf_trailing_bytes(f), 0);
        ASSERT_TRUE(gguf_tensor_at(f, 0) == NULL && gguf_find_tensor(f, "x") == NULL);
        struct gguf_str s;
        ASSERT_OK(gguf_get_str(f, "general.architecture", &s, &d));
        ASSERT_TRUE(gguf_str_eq(s, vc->arch));
        ASSERT_OK(gguf_get_str(f, "tokenizer.ggml.model", &s, &d));
        ASSERT_TRUE(gguf_str_eq(s, vc->model));
        ASSERT_OK(gguf_get_str(f, "tokenizer.ggml.pre", &s, &d));
        ASSERT_TRUE(gguf_str_eq(s, vc->pre));
        const struct gguf_kv *tok, *tt, *arr;
        ASSERT_OK(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &tok, &d));
        ASSERT_EQ(tok->n, vc->n_tokens);
        ASSERT_TRUE(gguf_str_eq(gguf_kv_str(tok, 0), vc->tok0));
        if (vc->tok_last) ASSERT_TRUE(gguf_str_eq(gguf_kv_str(tok, tok->n - 1), vc->tok_last));
        /* every string view lies inside the file, and they tile the array */
        const char *end = (const char *)gguf_base(f) + gguf_size(f);
        for (uint64_t i = 0; i + 1 < tok->n; i++) {
            struct gguf_str a = gguf_kv_str(tok, i), b2 = gguf_kv_str(tok, i + 1);
            ASSERT_TRUE(a.ptr + a.len + 8 == b2.ptr && b2.ptr + b2.len <= end);
        }
        ASSERT_OK(gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, &tt, &d));
        ASSERT_EQ(tt->n, vc->n_tokens);
        if (vc->n_merges) {
            ASSERT_OK(gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_TYPE_STRING, &arr, &d));
            ASSERT_EQ(arr->n, vc->n_merges);
            /* a merge is two pieces joined by one space: "\xc4\xa0 t" is "Ġ t" */
            ASSERT_TRUE(gguf_str_eq(gguf_kv_str(arr, vc->n_merges == 50000 ? 0 : 1), "\xc4\xa0 t"));
            for (uint64_t i = 0; i < arr->n; i++) {
                struct gguf_str m = gguf_kv_str(arr, i);
                ASSERT_TRUE(m.len >= 3 && memchr(m.ptr, ' ', m.len) != NULL);
            }
        } else {
            ASSERT_TRUE(gguf_find_kv(f, "tokenizer.ggml.merges") == NULL);
        }
        ASSERT_EQ(gguf_find_kv(f, "tokenizer.ggml.scores") != NULL, vc->has_scores);
        uint32_t id;
        ASSERT_OK(gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &id, &d));
        ASSERT_EQ(id, vc->bos);
        ASSERT_OK(gguf_get_u32(f, "tokenizer.ggml.eos_token_id", &id, &d));
        ASSERT_EQ(id, vc->eos);
        if (gguf_find_kv(f, "tokenizer.ggml.add_bos_token")) {
            bool b = false;
            ASSERT_OK(gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b, &d));
            ASSERT_TRUE(b);
            ASSERT_OK(gguf_get_bool(f, "tokenizer.ggml.add_eos_token", &b, &d));
            ASSERT_TRUE(!b);
        }
        gguf_close(f);
    }
    if (!seen) SKIP("../shared/models/vocab/*.gguf are absent");
}

TEST(open_errors) {
    struct gguf_file *f = NULL;
    struct err_detail d = {0};
    char path[512];
    snprintf(path, sizeof path, "%s/does-not-exist.gguf", test_tmpdir());
    ASSERT_ERR(gguf_open(path, &f, &d), -ENOENT);
    ASSERT_TRUE(strstr(d.msg, "does-not-exist.gguf") != NULL);
    ASSERT_ERR(gguf_open(test_tmpdir(), &f, &d), ERR_INVALID); /* a directory */
    ASSERT_TRUE(f == NULL);
}

TEST_MAIN(T(stories260k), T(stories260k_mem), T(vocab_files), T(open_errors))
