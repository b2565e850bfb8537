/* GGUF reader on the real files in ../shared/models (a trained model and four llama.cpp
 * vocab-only files), the typed getters, and writer round trips. */
#include "test.h"

#include "engine/gguf.h"
#include "engine/model.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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

/* ---- metadata-only reads (gguf_open_meta) ---------------------------------------------- */

static int open_meta_path(const char *path, struct gguf_file **ret, struct err_detail *d) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    int r = gguf_open_meta(fd, ret, d);
    close(fd);
    return r;
}

/* Writes the first n bytes of buf to a file in the test's directory; returns its path. */
static const char *prefix_file(const uint8_t *buf, size_t n, const char *name) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", test_tmpdir(), name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, n, f) != n) abort();
    fclose(f);
    return path;
}

/* The metadata and tensor table read by pread equal the mapped file's; tensor data is
 * not read; files bigger than the first read (vocabularies of several MiB) and truncated
 * files get the verdicts gguf_open gives. */
TEST(open_meta) {
    const char *path = test_shared_path("stories260K.gguf");
    if (!path) SKIP("../shared/models/stories260K.gguf is absent");
    struct gguf_file *f = NULL, *m = NULL;
    struct err_detail d = {0};
    ASSERT_OK_D(gguf_open(path, &f, &d), &d);
    ASSERT_OK_D(open_meta_path(path, &m, &d), &d);
    ASSERT_EQ(gguf_n_kv(m), gguf_n_kv(f));
    ASSERT_EQ(gguf_n_tensors(m), gguf_n_tensors(f));
    ASSERT_EQ(gguf_size(m), gguf_size(f));
    ASSERT_EQ(gguf_data_end(m), gguf_data_end(f));
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *a = gguf_tensor_at(f, i), *b = gguf_tensor_at(m, i);
        ASSERT_TRUE(a->name.len == b->name.len && !memcmp(a->name.ptr, b->name.ptr, a->name.len));
        ASSERT_EQ(a->offset, b->offset);
        ASSERT_EQ(a->n_bytes, b->n_bytes);
        ASSERT_EQ(a->type, b->type);
        ASSERT_TRUE(b->data == NULL);
    }
    uint32_t ctx;
    ASSERT_OK(gguf_get_u32(m, "llama.context_length", &ctx, NULL));
    ASSERT_EQ(ctx, 2048);
    /* the loader's checks run on it; loading it (no weights) is refused */
    struct engine_model_facts facts;
    ASSERT_OK_D(engine_model_check(m, &facts, &d), &d);
    ASSERT_EQ(facts.n_layer, 5);
    ASSERT_EQ(facts.n_vocab, 512);
    struct engine_model *model = NULL;
    ASSERT_ERR(engine_model_load_gguf(m, NULL, &model, NULL), ERR_INVALID); /* closes m */
    gguf_close(f);

    /* cut inside the tensor data, and inside the metadata: the same codes as gguf_open */
    uint8_t *buf;
    size_t size;
    read_whole(path, &buf, &size);
    ASSERT_TRUE(buf != NULL);
    const size_t cuts[] = {size - 1000, 14000, 2000, 100, 3, 0};
    for (size_t i = 0; i < ARRAY_SIZE(cuts); i++) {
        const char *cut = prefix_file(buf, cuts[i], "cut.gguf");
        struct err_detail d1 = {0}, d2 = {0};
        int r1 = gguf_open(cut, &f, &d1), r2 = open_meta_path(cut, &m, &d2);
        ASSERT_TRUE(r1 < 0);
        ASSERT_EQ(r2, r1);
        ASSERT_STREQ(d2.msg, d1.msg);
    }
    free(buf);

    /* metadata of several MiB: read in growing prefixes */
    const char *big = test_shared_path("vocab/ggml-vocab-deepseek-llm.gguf");
    if (!big) SKIP("the vocabulary files are absent");
    ASSERT_OK_D(gguf_open(big, &f, &d), &d);
    ASSERT_OK_D(open_meta_path(big, &m, &d), &d);
    ASSERT_TRUE(gguf_size(m) > (2u << 20));
    const struct gguf_kv *ka = gguf_find_kv(f, "tokenizer.ggml.merges");
    const struct gguf_kv *kb = gguf_find_kv(m, "tokenizer.ggml.merges");
    ASSERT_TRUE(ka && kb && ka->n == kb->n && ka->n == 99757);
    struct gguf_str la = gguf_kv_str(ka, ka->n - 1), lb = gguf_kv_str(kb, kb->n - 1);
    ASSERT_TRUE(la.len == lb.len && !memcmp(la.ptr, lb.ptr, la.len));
    gguf_close(m);
    gguf_close(f);
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

/* ---- writer -------------------------------------------------------------------------- */

/* Copies every pair and tensor of a file into a writer. */
static int copy_file(const struct gguf_file *f, struct gguf_writer *w) {
    int r = gguf_writer_set_version(w, gguf_version(f));
    for (uint64_t i = 0; r >= 0 && i < gguf_n_kv(f); i++) r = gguf_writer_add_kv(w, gguf_kv_at(f, i));
    for (uint64_t i = 0; r >= 0 && i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(f, i);
        char name[GGUF_MAX_NAME + 1];
        memcpy(name, t->name.ptr, t->name.len);
        name[t->name.len] = 0;
        r = gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data);
    }
    return r;
}

/* The writer's layout is llama.cpp's: copying each shared file reproduces it exactly. */
TEST(writer_copies_shared_files_exactly) {
    static const char *const files[] = {
        "stories260K.gguf", "vocab/ggml-vocab-llama-spm.gguf", "vocab/ggml-vocab-gpt-2.gguf",
        "vocab/ggml-vocab-deepseek-llm.gguf", "vocab/ggml-vocab-deepseek-coder.gguf"};
    int seen = 0;
    for (size_t k = 0; k < ARRAY_SIZE(files); k++) {
        const char *path = test_shared_path(files[k]);
        if (!path) continue;
        seen++;
        struct gguf_file *f = NULL;
        struct gguf_writer *w = NULL;
        struct err_detail d = {0};
        ASSERT_OK_D(gguf_open(path, &f, &d), &d);
        ASSERT_OK(gguf_writer_new(&w));
        ASSERT_OK(copy_file(f, w));
        void *buf = NULL;
        size_t size = 0;
        ASSERT_OK(gguf_writer_encode(w, &buf, &size));
        ASSERT_EQ(size, gguf_size(f));
        ASSERT_TRUE(memcmp(buf, gguf_base(f), size) == 0);
        /* and through a file */
        char out[512];
        snprintf(out, sizeof out, "%s/copy-%zu.gguf", test_tmpdir(), k);
        ASSERT_OK(gguf_writer_save(w, out));
        uint8_t *back;
        size_t back_size;
        read_whole(out, &back, &back_size);
        ASSERT_TRUE(back && back_size == size && memcmp(back, buf, size) == 0);
        free(back);
        free(buf);
        gguf_writer_free(w);
        gguf_close(f);
    }
    if (!seen) SKIP("../shared/models/*.gguf are absent");
}

TEST(writer_roundtrip) {
    struct gguf_writer *w = NULL;
    ASSERT_OK(gguf_writer_new(&w));
    ASSERT_OK(gguf_writer_add_u8(w, "t.u8", 200));
    ASSERT_OK(gguf_writer_add_i8(w, "t.i8", -100));
    ASSERT_OK(gguf_writer_add_u16(w, "t.u16", 60000));
    ASSERT_OK(gguf_writer_add_i16(w, "t.i16", -30000));
    ASSERT_OK(gguf_writer_add_u32(w, "t.u32", 4000000000u));
    ASSERT_OK(gguf_writer_add_i32(w, "t.i32", -2000000000));
    ASSERT_OK(gguf_writer_add_u64(w, "t.u64", 1ull << 40));
    ASSERT_OK(gguf_writer_add_i64(w, "t.i64", -(1ll << 40)));
    ASSERT_OK(gguf_writer_add_f32(w, "t.f32", 0.5f));
    ASSERT_OK(gguf_writer_add_f64(w, "t.f64", 0.25));
    ASSERT_OK(gguf_writer_add_bool(w, "t.bool", true));
    ASSERT_OK(gguf_writer_add_str(w, "t.str", "hello"));
    ASSERT_OK(gguf_writer_add_str(w, "t.empty", ""));
    ASSERT_OK(gguf_writer_add_u32(w, "general.alignment", 64));
    const int16_t i16s[] = {-1, 2, -3};
    ASSERT_OK(gguf_writer_add_arr(w, "t.arr_i16", GGUF_TYPE_INT16, i16s, 3));
    const double f64s[] = {1.5, -2.5};
    ASSERT_OK(gguf_writer_add_arr(w, "t.arr_f64", GGUF_TYPE_FLOAT64, f64s, 2));
    ASSERT_OK(gguf_writer_add_arr(w, "t.arr_empty", GGUF_TYPE_UINT8, NULL, 0));
    const struct gguf_str strs[] = {{3, "abc"}, {0, ""}, {3, "a\0b"}, {4, "\xe2\x96\x81x"}};
    ASSERT_OK(gguf_writer_add_arr_str(w, "t.arr_str", strs, 4));

    /* refusals leave the writer unchanged */
    ASSERT_ERR(gguf_writer_add_u8(w, "t.u8", 1), ERR_GGUF_DUP_KEY);
    ASSERT_ERR(gguf_writer_add_u8(w, "", 1), ERR_GGUF_BAD_KEY);
    ASSERT_ERR(gguf_writer_add_arr(w, "t.bad", GGUF_TYPE_STRING, NULL, 0), ERR_GGUF_BAD_VALUE_TYPE);
    ASSERT_ERR(gguf_writer_add_arr(w, "t.bad", GGUF_TYPE_ARRAY, NULL, 0), ERR_GGUF_BAD_VALUE_TYPE);
    ASSERT_ERR(gguf_writer_set_version(w, 1), ERR_BAD_VERSION);

    /* tensors of several types and ranks; sizes not multiples of the alignment */
    float f32[15];
    for (int i = 0; i < 15; i++) f32[i] = (float)i - 7.0f;
    uint16_t f16[64];
    for (int i = 0; i < 64; i++) f16[i] = kern_fp32_to_fp16((float)i / 8.0f);
    uint8_t q8[2 * 34], q4[6 * 18], bf[16 * 2];
    for (size_t i = 0; i < sizeof q8; i++) q8[i] = (uint8_t)(i * 7);
    for (size_t i = 0; i < sizeof q4; i++) q4[i] = (uint8_t)(i * 13);
    for (size_t i = 0; i < sizeof bf; i++) bf[i] = (uint8_t)(i + 1);
    ASSERT_OK(gguf_writer_add_tensor(w, "a.f32", KERN_TYPE_F32, 2, (int64_t[]){5, 3}, f32));
    ASSERT_OK(gguf_writer_add_tensor(w, "b.f16", KERN_TYPE_F16, 1, (int64_t[]){64}, f16));
    ASSERT_OK(gguf_writer_add_tensor(w, "c.q8_0", KERN_TYPE_Q8_0, 2, (int64_t[]){32, 2}, q8));
    ASSERT_OK(gguf_writer_add_tensor(w, "d.q4_0", KERN_TYPE_Q4_0, 3, (int64_t[]){32, 3, 2}, q4));
    ASSERT_OK(gguf_writer_add_tensor(w, "e.bf16", KERN_TYPE_BF16, 4, (int64_t[]){2, 2, 2, 2}, bf));
    ASSERT_ERR(gguf_writer_add_tensor(w, "a.f32", KERN_TYPE_F32, 1, (int64_t[]){1}, f32),
               ERR_GGUF_DUP_TENSOR);
    ASSERT_ERR(gguf_writer_add_tensor(w, "", KERN_TYPE_F32, 1, (int64_t[]){1}, f32),
               ERR_GGUF_BAD_TENSOR_NAME);
    char long_name[80];
    memset(long_name, 'x', 64);
    long_name[64] = 0;
    ASSERT_ERR(gguf_writer_add_tensor(w, long_name, KERN_TYPE_F32, 1, (int64_t[]){1}, f32),
               ERR_GGUF_BAD_TENSOR_NAME);
    long_name[63] = 0; /* 63 bytes is the limit, allowed */
    ASSERT_OK(gguf_writer_add_tensor(w, long_name, KERN_TYPE_F32, 1, (int64_t[]){1}, f32));
    ASSERT_ERR(gguf_writer_add_tensor(w, "z", KERN_TYPE_Q8_0, 1, (int64_t[]){33}, q8),
               ERR_GGUF_BAD_SHAPE);
    ASSERT_ERR(gguf_writer_add_tensor(w, "z", KERN_TYPE_F32, 2, (int64_t[]){1, 0}, f32),
               ERR_GGUF_BAD_SHAPE);
    ASSERT_ERR(gguf_writer_add_tensor(w, "z", KERN_TYPE_F32, 5, (int64_t[]){1, 1, 1, 1, 1}, f32),
               ERR_GGUF_BAD_DIMS);
    ASSERT_ERR(gguf_writer_add_tensor(w, "z", (enum kern_type)4, 1, (int64_t[]){32}, f32),
               ERR_GGUF_BAD_TENSOR_TYPE);

    char path[512];
    snprintf(path, sizeof path, "%s/roundtrip.gguf", test_tmpdir());
    ASSERT_OK(gguf_writer_save(w, path));
    gguf_writer_free(w);
    struct stat st;
    ASSERT_TRUE(stat(path, &st) == 0 && (st.st_mode & 0777) == 0644);

    struct gguf_file *f = NULL;
    struct err_detail d = {0};
    ASSERT_OK_D(gguf_open(path, &f, &d), &d);
    ASSERT_EQ(gguf_version(f), 3);
    ASSERT_EQ(gguf_alignment(f), 64);
    ASSERT_EQ(gguf_n_kv(f), 18);
    ASSERT_EQ(gguf_n_tensors(f), 6);
    ASSERT_EQ(gguf_data_offset(f) % 64, 0);
    ASSERT_EQ(gguf_trailing_bytes(f), 0);
    ASSERT_EQ(gguf_data_end(f), gguf_size(f)); /* the last tensor is padded too */
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    float fv;
    bool b;
    struct gguf_str sv;
    ASSERT_OK(gguf_get_u32(f, "t.u8", &u32, &d));
    ASSERT_EQ(u32, 200);
    ASSERT_OK(gguf_get_i32(f, "t.i8", &i32, &d));
    ASSERT_EQ(i32, -100);
    ASSERT_ERR(gguf_get_u32(f, "t.i8", &u32, &d), ERR_GGUF_WRONG_TYPE); /* negative */
    ASSERT_OK(gguf_get_u32(f, "t.u16", &u32, &d));
    ASSERT_EQ(u32, 60000);
    ASSERT_OK(gguf_get_i32(f, "t.i16", &i32, &d));
    ASSERT_EQ(i32, -30000);
    ASSERT_OK(gguf_get_u32(f, "t.u32", &u32, &d));
    ASSERT_EQ(u32, 4000000000u);
    ASSERT_ERR(gguf_get_i32(f, "t.u32", &i32, &d), ERR_GGUF_WRONG_TYPE);
    ASSERT_OK(gguf_get_i32(f, "t.i32", &i32, &d));
    ASSERT_EQ(i32, -2000000000);
    ASSERT_OK(gguf_get_u64(f, "t.u64", &u64, &d));
    ASSERT_EQ(u64, 1ull << 40);
    ASSERT_ERR(gguf_get_u32(f, "t.u64", &u32, &d), ERR_GGUF_WRONG_TYPE);
    ASSERT_ERR(gguf_get_u64(f, "t.i64", &u64, &d), ERR_GGUF_WRONG_TYPE);
    const struct gguf_kv *kv = gguf_find_kv(f, "t.i64");
    int64_t i64;
    memcpy(&i64, kv->data, 8);
    ASSERT_TRUE(kv->type == GGUF_TYPE_INT64 && i64 == -(1ll << 40));
    ASSERT_OK(gguf_get_f32(f, "t.f32", &fv, &d));
    ASSERT_NEAR(fv, 0.5, 0);
    ASSERT_OK(gguf_get_f32(f, "t.f64", &fv, &d));
    ASSERT_NEAR(fv, 0.25, 0);
    ASSERT_OK(gguf_get_bool(f, "t.bool", &b, &d));
    ASSERT_TRUE(b);
    ASSERT_OK(gguf_get_str(f, "t.str", &sv, &d));
    ASSERT_TRUE(gguf_str_eq(sv, "hello"));
    ASSERT_OK(gguf_get_str(f, "t.empty", &sv, &d));
    ASSERT_TRUE(sv.len == 0);
    ASSERT_OK(gguf_get_u32(f, "general.alignment", &u32, &d));
    ASSERT_EQ(u32, 64);
    const struct gguf_kv *arr;
    ASSERT_OK(gguf_get_arr(f, "t.arr_i16", GGUF_TYPE_INT16, &arr, &d));
    ASSERT_TRUE(arr->n == 3 && memcmp(arr->data, i16s, sizeof i16s) == 0);
    ASSERT_OK(gguf_get_arr(f, "t.arr_f64", GGUF_TYPE_FLOAT64, &arr, &d));
    ASSERT_TRUE(arr->n == 2 && memcmp(arr->data, f64s, sizeof f64s) == 0);
    ASSERT_OK(gguf_get_arr(f, "t.arr_empty", GGUF_TYPE_UINT8, &arr, &d));
    ASSERT_EQ(arr->n, 0);
    ASSERT_OK(gguf_get_arr(f, "t.arr_str", GGUF_TYPE_STRING, &arr, &d));
    ASSERT_EQ(arr->n, 4);
    for (int i = 0; i < 4; i++) {
        struct gguf_str e = gguf_kv_str(arr, (uint64_t)i);
        ASSERT_TRUE(e.len == strs[i].len && memcmp(e.ptr, strs[i].ptr, e.len) == 0);
    }
    static const struct {
        const char *name;
        enum kern_type type;
        uint32_t n_dims;
        int64_t ne[4];
        uint64_t n_bytes;
    } want[] = {
        {"a.f32", KERN_TYPE_F32, 2, {5, 3, 1, 1}, 60},
        {"b.f16", KERN_TYPE_F16, 1, {64, 1, 1, 1}, 128},
        {"c.q8_0", KERN_TYPE_Q8_0, 2, {32, 2, 1, 1}, 68},
        {"d.q4_0", KERN_TYPE_Q4_0, 3, {32, 3, 2, 1}, 108},
        {"e.bf16", KERN_TYPE_BF16, 4, {2, 2, 2, 2}, 32},
    };
    const void *datas[] = {f32, f16, q8, q4, bf};
    uint64_t off = 0;
    for (int i = 0; i < 5; i++) {
        const struct gguf_tensor *t = gguf_find_tensor(f, want[i].name);
        ASSERT_TRUE(t == gguf_tensor_at(f, (uint64_t)i));
        ASSERT_TRUE(t->type == want[i].type && t->n_dims == want[i].n_dims);
        ASSERT_TRUE(memcmp(t->ne, want[i].ne, sizeof t->ne) == 0);
        ASSERT_EQ(t->n_bytes, want[i].n_bytes);
        ASSERT_EQ(t->offset, off);
        ASSERT_TRUE(memcmp(t->data, datas[i], t->n_bytes) == 0);
        /* padding bytes are zero */
        const uint8_t *p = (const uint8_t *)t->data + t->n_bytes;
        for (uint64_t k = t->n_bytes; k % 64; k++) ASSERT_EQ(*p++, 0);
        off += (t->n_bytes + 63) / 64 * 64;
    }
    ASSERT_TRUE(gguf_find_tensor(f, long_name) != NULL);
    gguf_close(f);
}

TEST(writer_v2_and_empty) {
    struct gguf_writer *w = NULL;
    ASSERT_OK(gguf_writer_new(&w));
    ASSERT_OK(gguf_writer_set_version(w, 2));
    void *buf = NULL;
    size_t size = 0;
    ASSERT_OK(gguf_writer_encode(w, &buf, &size));
    ASSERT_EQ(size, 24); /* header only */
    struct gguf_file *f = NULL;
    struct err_detail d = {0};
    ASSERT_OK_D(gguf_open_mem(buf, size, &f, &d), &d);
    ASSERT_EQ(gguf_version(f), 2);
    ASSERT_EQ(gguf_n_kv(f) + gguf_n_tensors(f), 0);
    ASSERT_TRUE(gguf_find_kv(f, "x") == NULL);
    gguf_close(f);
    free(buf);
    /* bad alignment values are refused */
    ASSERT_ERR(gguf_writer_add_u32(w, "general.alignment", 48), ERR_GGUF_BAD_ALIGN);
    ASSERT_ERR(gguf_writer_add_u32(w, "general.alignment", 0), ERR_GGUF_BAD_ALIGN);
    ASSERT_ERR(gguf_writer_add_i32(w, "general.alignment", 32), ERR_GGUF_WRONG_TYPE);
    gguf_writer_free(w);
}

/* A failed save leaves nothing behind and does not touch the target. */
TEST(writer_save_fails_cleanly) {
    struct gguf_writer *w = NULL;
    ASSERT_OK(gguf_writer_new(&w));
    char path[512];
    snprintf(path, sizeof path, "%s/no-such-dir/x.gguf", test_tmpdir());
    ASSERT_ERR(gguf_writer_save(w, path), -ENOENT);
    gguf_writer_free(w);
}

/* ---- the warm-gguf tool -------------------------------------------------------------- */

/* Runs a shell command line; returns its exit status, or -1 when it did not exit. */
static int run_cmd(const char *cmd) {
    int st = system(cmd);
    return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static bool file_contains(const char *path, const char *needle) {
    uint8_t *buf;
    size_t size;
    read_whole(path, &buf, &size);
    if (!buf) return false;
    buf[size] = 0; /* read_whole leaves room for a NUL */
    bool found = strstr((const char *)buf, needle) != NULL;
    free(buf);
    return found;
}

TEST(warm_gguf_tool) {
    const char *bin = getenv("WARM_BIN");
    char tool[1024], cmd[4096], out[512];
    snprintf(tool, sizeof tool, "%s/warm-gguf", bin ? bin : "");
    if (!bin || access(tool, X_OK) != 0) SKIP("WARM_BIN/warm-gguf is not built");
    snprintf(out, sizeof out, "%s/warm-gguf.out", test_tmpdir());

    /* --check succeeds on every shared GGUF file */
    static const char *const files[] = {
        "stories260K.gguf", "vocab/ggml-vocab-llama-spm.gguf", "vocab/ggml-vocab-gpt-2.gguf",
        "vocab/ggml-vocab-deepseek-llm.gguf", "vocab/ggml-vocab-deepseek-coder.gguf"};
    int seen = 0;
    for (size_t k = 0; k < ARRAY_SIZE(files); k++) {
        const char *path = test_shared_path(files[k]);
        if (!path) continue;
        seen++;
        snprintf(cmd, sizeof cmd, "'%s' --check '%s' > '%s' 2>&1", tool, path, out);
        ASSERT_EQ(run_cmd(cmd), 0);
        ASSERT_TRUE(file_contains(out, ": OK (GGUF v3"));
    }

    /* the listing names the tensors with their shapes, and summarizes arrays */
    const char *stories = test_shared_path("stories260K.gguf");
    if (stories) {
        snprintf(cmd, sizeof cmd, "'%s' '%s' > '%s' 2>&1", tool, stories, out);
        ASSERT_EQ(run_cmd(cmd), 0);
        ASSERT_TRUE(file_contains(out, "[string x 512]"));
        ASSERT_TRUE(file_contains(out, "\"<unk>\", \"<s>\", \"</s>\", \"<0x00>\", ..."));
        ASSERT_TRUE(file_contains(out, "blk.4.ffn_norm.weight"));
        ASSERT_TRUE(file_contains(out, "[172, 64]"));
        ASSERT_TRUE(file_contains(out, "1170944"));
    }

    /* --check on a bad file: exit 1 and the reader's message */
    char bad[512];
    snprintf(bad, sizeof bad, "%s/bad.gguf", test_tmpdir());
    FILE *fp = fopen(bad, "wb");
    ASSERT_TRUE(fp != NULL);
    static const uint8_t hdr[24] = {'G', 'G', 'U', 'F', 1};
    fwrite(hdr, 1, sizeof hdr, fp);
    fclose(fp);
    snprintf(cmd, sizeof cmd, "'%s' --check '%s' > '%s' 2>&1", tool, bad, out);
    ASSERT_EQ(run_cmd(cmd), 1);
    ASSERT_TRUE(file_contains(out, "ERR_BAD_VERSION: header: version 1 at offset 4"));
    if (!seen) SKIP("../shared/models/*.gguf are absent");
}

TEST_MAIN(T(stories260k), T(stories260k_mem), T(open_meta), T(vocab_files), T(open_errors),
          T(writer_copies_shared_files_exactly), T(writer_roundtrip), T(writer_v2_and_empty),
          T(writer_save_fails_cleanly), T(warm_gguf_tool))
