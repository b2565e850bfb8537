/* Tokenizers: llama.cpp's four tokenizer test-vector files (exact ids), round trips, the
 * stories260K vocabulary against run.c's prompt ids and text, streaming detokenization,
 * special tokens, and hostile vocabulary metadata built with the GGUF writer. */
#include "test.h"

#include "engine/engine.h"
#include "engine/vocab-impl.h"

#include <errno.h>

/* ---- helpers ------------------------------------------------------------------------ */

static char *slurp(const char *path, size_t *ret_len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (size_t k; buf && (k = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += k;
        if (n == cap) {
            char *q = realloc(buf, 2 * cap + 1);
            if (!q) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = q;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    *ret_len = n;
    return buf;
}

/* Loads a vocabulary from a file under shared/models; NULL (and a message) if absent. */
static struct engine_vocab *vocab_open(const char *rel) {
    const char *path = test_shared_path(rel);
    if (!path) return NULL;
    struct gguf_file *f = NULL;
    struct err_detail d = {0};
    int r = gguf_open(path, &f, &d);
    if (r < 0) {
        fprintf(stderr, "%s: %s\n", rel, err_msg(&d, r));
        return NULL;
    }
    struct engine_vocab *v = NULL;
    r = engine_vocab_load(f, &v, &d);
    gguf_close(f); /* the vocabulary does not borrow from the file */
    if (r < 0) fprintf(stderr, "%s: %s\n", rel, err_msg(&d, r));
    return v;
}

static bool utf8_valid(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t cl = vocab_utf8_len((const uint8_t *)s + i, n - i);
        if (!cl) return false;
        i += cl;
    }
    return true;
}

static bool has_spm_space(const char *s, size_t n) {
    for (size_t i = 0; i + 3 <= n; i++)
        if (memcmp(s + i, "\xe2\x96\x81", 3) == 0) return true;
    return false;
}

/* tokenize into a malloc'd array */
static int tokenize(const struct engine_vocab *v, const char *s, size_t n, unsigned flags,
                    int32_t **ret, size_t *ret_n) {
    size_t need = 0;
    int r = engine_vocab_tokenize(v, s, n, flags, NULL, 0, &need);
    if (r < 0 && r != -ENOSPC) return r;
    int32_t *ids = malloc_array(need ? need : 1, sizeof *ids);
    if (!ids) return -ENOMEM;
    r = engine_vocab_tokenize(v, s, n, flags, ids, need, ret_n);
    if (r < 0) {
        free(ids);
        return r;
    }
    *ret = ids;
    return 0;
}

/* detokenize into a malloc'd NUL-terminated string */
static int detokenize(const struct engine_vocab *v, const int32_t *ids, size_t n, unsigned flags,
                      char **ret, size_t *ret_len) {
    size_t need = 0;
    int r = engine_vocab_detokenize(v, ids, n, flags, NULL, 0, &need);
    if (r < 0 && r != -ENOSPC) return r;
    char *s = malloc(need + 1);
    if (!s) return -ENOMEM;
    r = engine_vocab_detokenize(v, ids, n, flags, s, need, ret_len);
    if (r < 0) {
        free(s);
        return r;
    }
    s[*ret_len] = '\0';
    *ret = s;
    return 0;
}

/* ---- llama.cpp's vectors ------------------------------------------------------------ */

#define SEP "\n__ggml_vocab_test__\n"

static void run_vectors(const char *name) {
    char rel[256], path_inp[4096], path_out[4096];
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf", name);
    struct engine_vocab *v = vocab_open(rel);
    if (!v) SKIP("%s not available", rel);
    const char *p = test_shared_path(rel);
    snprintf(path_inp, sizeof path_inp, "%s.inp", p);
    snprintf(path_out, sizeof path_out, "%s.out", p);
    size_t n_inp, n_out;
    char *inp = slurp(path_inp, &n_inp), *out = slurp(path_out, &n_out);
    int n_case = 0, n_pass = 0, n_trip = 0, n_trip_ok = 0;
    char *ip = inp, *op = out;
    while (inp && out && *op) {
        char *end = strstr(ip, SEP), *eol = strchr(op, '\n');
        if (!end || !eol) break;
        size_t len = (size_t)(end - ip);
        *eol = '\0';
        /* the expected ids: " 1 2 3" */
        int32_t want[512];
        size_t n_want = 0;
        for (char *q = op; *q && n_want < ARRAY_SIZE(want);) {
            char *e;
            long id = strtol(q, &e, 10);
            if (e == q) break;
            want[n_want++] = (int32_t)id;
            q = e;
        }
        int32_t *got = NULL;
        size_t n_got = 0;
        int r = tokenize(v, ip, len, 0, &got, &n_got);
        bool ok = r == 0 && n_got == n_want && memcmp(got, want, n_got * sizeof *got) == 0;
        n_case++;
        n_pass += ok;
        if (!ok) {
            fprintf(stderr, "%s case %d '%.*s': got", name, n_case, (int)len, ip);
            for (size_t i = 0; r == 0 && i < n_got; i++) fprintf(stderr, " %d", got[i]);
            fprintf(stderr, "\n  expected %s\n", op);
        }
        /* detokenize(tokenize(s)) == s where the vocabulary represents s */
        if (r == 0 && !(engine_vocab_kind(v) == ENGINE_VOCAB_SPM && has_spm_space(ip, len))) {
            char *back = NULL;
            size_t n_back = 0;
            n_trip++;
            if (detokenize(v, got, n_got, ENGINE_DETOK_TEXT_START, &back, &n_back) == 0 &&
                n_back == len && memcmp(back, ip, len) == 0)
                n_trip_ok++;
            else
                fprintf(stderr, "%s case %d: round trip gave '%s'\n", name, n_case,
                        back ? back : "(error)");
            free(back);
        }
        free(got);
        ip = end + strlen(SEP);
        op = eol + 1;
    }
    printf("vocab %s: %d/%d (round trip %d/%d)\n", name, n_pass, n_case, n_trip_ok, n_trip);
    free(inp);
    free(out);
    engine_vocab_free(v);
    ASSERT_EQ(n_case, 46);
    ASSERT_EQ(n_pass, n_case);
    ASSERT_EQ(n_trip_ok, n_trip);
}

TEST(vectors_llama_spm) { run_vectors("llama-spm"); }
TEST(vectors_gpt_2) { run_vectors("gpt-2"); }
TEST(vectors_deepseek_llm) { run_vectors("deepseek-llm"); }
TEST(vectors_deepseek_coder) { run_vectors("deepseek-coder"); }

/* ---- stories260K: run.c's prompt ids and generated text ----------------------------- */

static void check_stories(const char *rel) {
    struct engine_vocab *v = vocab_open("stories260K.gguf");
    const char *path = test_shared_path(rel); /* a static buffer: after vocab_open */
    if (!path || !v) {
        engine_vocab_free(v);
        SKIP("stories260K.gguf or %s not available", rel);
    }
    size_t n;
    char *txt = slurp(path, &n);
    ASSERT_TRUE(txt);
    char *prompt = strstr(txt, "prompt: "), *pids = strstr(txt, "prompt_ids: "),
         *gids = strstr(txt, "generated_ids: "), *text = strstr(txt, "\ntext:\n");
    ASSERT_TRUE(prompt && pids && gids && text);
    prompt += strlen("prompt: ");
    *strchr(prompt, '\n') = '\0';
    int32_t ids[1024];
    size_t n_ids = 0, n_prompt;
    for (char *q = pids + strlen("prompt_ids: "); *q != '\n';) {
        char *e;
        long id = strtol(q, &e, 10);
        ids[n_ids++] = (int32_t)id;
        q = e;
    }
    n_prompt = n_ids;
    for (char *q = gids + strlen("generated_ids: "); *q != '\n' && n_ids < ARRAY_SIZE(ids);) {
        char *e;
        long id = strtol(q, &e, 10);
        if (e == q) break;
        ids[n_ids++] = (int32_t)id;
        q = e;
    }
    int32_t *got = NULL;
    size_t n_got = 0;
    ASSERT_OK(tokenize(v, prompt, strlen(prompt), ENGINE_TOKENIZE_ADD_SPECIAL, &got, &n_got));
    ASSERT_EQ(n_got, n_prompt);
    ASSERT_TRUE(memcmp(got, ids, n_got * sizeof *got) == 0);
    free(got);

    /* prompt + generation, streamed token by token, is the reference text */
    text += strlen("\ntext:\n");
    size_t n_text = strlen(text);
    while (n_text && text[n_text - 1] == '\n') n_text--;
    struct engine_detok dt;
    engine_detok_init(&dt, v, 0);
    size_t cap = engine_detok_min_cap(v), n_all = 0;
    char *chunk = malloc(cap), *all = malloc(n_text + 4096);
    for (size_t i = 0; i < n_ids; i++) {
        int r = engine_detok_feed(&dt, ids[i], chunk, cap);
        ASSERT_TRUE(r >= 0);
        ASSERT_TRUE(utf8_valid(chunk, (size_t)r));
        memcpy(all + n_all, chunk, (size_t)r);
        n_all += (size_t)r;
    }
    n_all += (size_t)engine_detok_flush(&dt, all + n_all, 4);
    ASSERT_EQ(n_all, n_text);
    ASSERT_TRUE(memcmp(all, text, n_text) == 0);
    free(chunk);
    free(all);
    free(txt);
    engine_vocab_free(v);
}

TEST(stories_prompt_once) { check_stories("expected/stories260K-S1.txt"); }
TEST(stories_prompt_empty) { check_stories("expected/stories260K-S0.txt"); }

TEST(stories_vocab) {
    struct engine_vocab *v = vocab_open("stories260K.gguf");
    if (!v) SKIP("stories260K.gguf not available");
    ASSERT_EQ(engine_vocab_n_tokens(v), 512);
    ASSERT_EQ(engine_vocab_kind(v), ENGINE_VOCAB_SPM);
    ASSERT_EQ(engine_vocab_bos(v), 1);
    ASSERT_EQ(engine_vocab_eos(v), 2);
    ASSERT_EQ(engine_vocab_unk(v), 0);
    ASSERT_EQ(engine_vocab_pad(v), ENGINE_TOKEN_NONE); /* 0xFFFFFFFF in the file */
    ASSERT_TRUE(engine_vocab_add_bos(v));
    ASSERT_TRUE(engine_vocab_is_eog(v, 2));
    ASSERT_TRUE(!engine_vocab_is_eog(v, 1));
    ASSERT_EQ(engine_vocab_token_type(v, 3), ENGINE_TOKEN_TYPE_BYTE);
    char buf[8];
    ASSERT_EQ(engine_vocab_piece(v, 13, 0, buf, sizeof buf), 1); /* <0x0A> */
    ASSERT_EQ(buf[0], '\n');
    ASSERT_EQ(engine_vocab_piece(v, 1, 0, buf, sizeof buf), 0); /* control: nothing */
    ASSERT_EQ(engine_vocab_piece(v, 1, ENGINE_PIECE_SPECIAL, buf, sizeof buf), 3);
    ASSERT_EQ(engine_vocab_piece(v, 1, ENGINE_PIECE_SPECIAL, buf, 2), -ENOSPC);
    ASSERT_EQ(engine_vocab_piece(v, 512, 0, buf, sizeof buf), ERR_TOKEN);
    ASSERT_EQ(engine_vocab_piece(v, -1, 0, buf, sizeof buf), ERR_TOKEN);
    engine_vocab_free(v);
}

/* ---- streaming ---------------------------------------------------------------------- */

TEST(stream_utf8_split) {
    struct engine_vocab *v = vocab_open("vocab/ggml-vocab-llama-spm.gguf");
    if (!v) SKIP("llama-spm vocab not available");
    size_t cap = engine_detok_min_cap(v);
    char *out = malloc(cap);
    struct engine_detok dt;
    /* U+1F999 as four byte tokens <0xF0> <0x9F> <0xA6> <0x99> (ids 3 + byte) */
    const uint8_t llama[] = {0xF0, 0x9F, 0xA6, 0x99};
    engine_detok_init(&dt, v, 0);
    for (int i = 0; i < 3; i++) ASSERT_EQ(engine_detok_feed(&dt, 3 + llama[i], out, cap), 0);
    ASSERT_EQ(engine_detok_feed(&dt, 3 + llama[3], out, cap), 4);
    ASSERT_TRUE(memcmp(out, llama, 4) == 0);
    ASSERT_EQ(engine_detok_flush(&dt, out, 4), 0);
    ASSERT_EQ(engine_detok_feed(&dt, 3, out, cap - 1), -ENOSPC);
    ASSERT_EQ(engine_detok_feed(&dt, 32000, out, cap), ERR_TOKEN);

    /* invalid: C3 followed by '(' — raw by default, U+FFFD with VALID_UTF8 */
    int32_t bad[] = {3 + 0xC3, 3 + '('};
    engine_detok_init(&dt, v, 0);
    ASSERT_EQ(engine_detok_feed(&dt, bad[0], out, cap), 0);
    ASSERT_EQ(engine_detok_feed(&dt, bad[1], out, cap), 2);
    ASSERT_TRUE(memcmp(out, "\xc3(", 2) == 0);
    engine_detok_init(&dt, v, ENGINE_DETOK_VALID_UTF8);
    ASSERT_EQ(engine_detok_feed(&dt, bad[0], out, cap), 0);
    ASSERT_EQ(engine_detok_feed(&dt, bad[1], out, cap), 4);
    ASSERT_TRUE(memcmp(out, "\xef\xbf\xbd(", 4) == 0);
    /* an unfinished sequence at the end comes out at flush */
    engine_detok_init(&dt, v, ENGINE_DETOK_VALID_UTF8);
    ASSERT_EQ(engine_detok_feed(&dt, 3 + 0xE2, out, cap), 0);
    ASSERT_EQ(engine_detok_feed(&dt, 3 + 0x82, out, cap), 0);
    ASSERT_EQ(engine_detok_flush(&dt, out, 4), 3);
    ASSERT_TRUE(memcmp(out, "\xef\xbf\xbd", 3) == 0);
    engine_detok_init(&dt, v, 0);
    ASSERT_EQ(engine_detok_feed(&dt, 3 + 0xE2, out, cap), 0);
    ASSERT_EQ(engine_detok_flush(&dt, out, 4), 1);
    ASSERT_EQ((uint8_t)out[0], 0xE2);
    /* surrogates and overlongs never start a held sequence */
    engine_detok_init(&dt, v, ENGINE_DETOK_VALID_UTF8);
    ASSERT_EQ(engine_detok_feed(&dt, 3 + 0xED, out, cap), 0);
    ASSERT_EQ(engine_detok_feed(&dt, 3 + 0xA0, out, cap), 6); /* ED | A0: two subparts */
    ASSERT_EQ(engine_detok_feed(&dt, 3 + 0xC0, out, cap), 3);

    /* a text whose characters all fall back to bytes streams as whole characters */
    const char *s = "é🦙 ok ∑ 日本";
    int32_t *ids = NULL;
    size_t n_ids = 0, n_all = 0;
    ASSERT_OK(tokenize(v, s, strlen(s), ENGINE_TOKENIZE_ADD_SPECIAL, &ids, &n_ids));
    char all[256];
    engine_detok_init(&dt, v, 0);
    for (size_t i = 0; i < n_ids; i++) {
        int r = engine_detok_feed(&dt, ids[i], out, cap);
        ASSERT_TRUE(r >= 0);
        ASSERT_TRUE(utf8_valid(out, (size_t)r));
        memcpy(all + n_all, out, (size_t)r);
        n_all += (size_t)r;
    }
    ASSERT_EQ(engine_detok_flush(&dt, out, 4), 0);
    ASSERT_EQ(n_all, strlen(s));
    ASSERT_TRUE(memcmp(all, s, n_all) == 0);
    free(ids);
    free(out);
    engine_vocab_free(v);
}

TEST(stream_byte_level) {
    struct engine_vocab *v = vocab_open("vocab/ggml-vocab-gpt-2.gguf");
    if (!v) SKIP("gpt-2 vocab not available");
    /* emoji split by BPE into byte-level tokens; every chunk is whole UTF-8 */
    const char *s = "emoji 🦙🚀 and 日本語 and Ä";
    int32_t *ids = NULL;
    size_t n_ids = 0, n_all = 0, cap = engine_detok_min_cap(v), n_partial = 0;
    ASSERT_OK(tokenize(v, s, strlen(s), 0, &ids, &n_ids));
    char *out = malloc(cap), all[256];
    struct engine_detok dt;
    engine_detok_init(&dt, v, 0);
    for (size_t i = 0; i < n_ids; i++) {
        size_t pn;
        engine_vocab_piece_view(v, ids[i], 0, &pn);
        int r = engine_detok_feed(&dt, ids[i], out, cap);
        ASSERT_TRUE(r >= 0);
        n_partial += (size_t)r != pn;
        ASSERT_TRUE(utf8_valid(out, (size_t)r));
        memcpy(all + n_all, out, (size_t)r);
        n_all += (size_t)r;
    }
    ASSERT_TRUE(n_partial > 0); /* some token did end inside a character */
    ASSERT_EQ(n_all, strlen(s));
    ASSERT_TRUE(memcmp(all, s, n_all) == 0);
    free(out);
    free(ids);
    engine_vocab_free(v);
}

/* ---- special tokens, BOS/EOS, limits ------------------------------------------------ */

TEST(special_tokens) {
    struct engine_vocab *spm = vocab_open("vocab/ggml-vocab-llama-spm.gguf");
    struct engine_vocab *gpt = vocab_open("vocab/ggml-vocab-gpt-2.gguf");
    struct engine_vocab *dsc = vocab_open("vocab/ggml-vocab-deepseek-coder.gguf");
    if (!spm || !gpt || !dsc) {
        engine_vocab_free(spm);
        engine_vocab_free(gpt);
        engine_vocab_free(dsc);
        SKIP("vocab files not available");
    }
    int32_t ids[64];
    size_t n;
    const char *s = "<s>Hello</s>";
    ASSERT_OK(engine_vocab_tokenize(spm, s, strlen(s), ENGINE_TOKENIZE_PARSE_SPECIAL, ids, 64, &n));
    ASSERT_EQ(n, 3);
    ASSERT_EQ(ids[0], 1);
    ASSERT_EQ(ids[1], 15043); /* "▁Hello": the dummy prefix follows a special token */
    ASSERT_EQ(ids[2], 2);
    ASSERT_OK(engine_vocab_tokenize(spm, s, strlen(s), 0, ids, 64, &n));
    ASSERT_TRUE(n > 3);
    for (size_t i = 0; i < n; i++) ASSERT_TRUE(ids[i] != 1 && ids[i] != 2);
    /* BOS per add_bos_token */
    ASSERT_OK(engine_vocab_tokenize(spm, "Hello", 5, ENGINE_TOKENIZE_ADD_SPECIAL, ids, 64, &n));
    ASSERT_EQ(n, 2);
    ASSERT_EQ(ids[0], 1);
    ASSERT_OK(engine_vocab_tokenize(spm, "", 0, ENGINE_TOKENIZE_ADD_SPECIAL, ids, 64, &n));
    ASSERT_EQ(n, 1);
    ASSERT_OK(engine_vocab_tokenize(spm, "", 0, 0, ids, 64, &n));
    ASSERT_EQ(n, 0);

    s = "a<|endoftext|>b";
    ASSERT_OK(engine_vocab_tokenize(gpt, s, strlen(s), ENGINE_TOKENIZE_PARSE_SPECIAL, ids, 64, &n));
    ASSERT_EQ(n, 3);
    ASSERT_EQ(ids[1], 50256);
    ASSERT_TRUE(engine_vocab_is_eog(gpt, 50256));
    ASSERT_TRUE(!engine_vocab_add_bos(gpt));
    ASSERT_STREQ(engine_vocab_pre_name(gpt), "gpt-2");
    ASSERT_OK(engine_vocab_tokenize(gpt, s, strlen(s), ENGINE_TOKENIZE_ADD_SPECIAL, ids, 64, &n));
    ASSERT_TRUE(n > 3); /* not parsed, no BOS added */
    char buf[64];
    size_t len;
    ASSERT_OK(engine_vocab_detokenize(gpt, (int32_t[]){50256}, 1, 0, buf, sizeof buf, &len));
    ASSERT_EQ(len, 0);
    ASSERT_OK(engine_vocab_detokenize(gpt, (int32_t[]){50256}, 1, ENGINE_DETOK_SPECIAL, buf,
                                      sizeof buf, &len));
    ASSERT_EQ(len, 13);

    /* deepseek: user-defined tokens match even without PARSE_SPECIAL; BOS is added */
    s = "x<\xef\xbd\x9c"
        "fim\xe2\x96\x81hole\xef\xbd\x9c>y";
    ASSERT_OK(engine_vocab_tokenize(dsc, s, strlen(s), ENGINE_TOKENIZE_ADD_SPECIAL, ids, 64, &n));
    ASSERT_EQ(n, 4);
    ASSERT_EQ(ids[0], 32013);
    ASSERT_EQ(ids[2], 32015);
    ASSERT_EQ(engine_vocab_eot(dsc), 32014);
    ASSERT_STREQ(engine_vocab_pre_name(dsc), "deepseek-coder");
    ASSERT_OK(engine_vocab_detokenize(dsc, ids, n, 0, buf, sizeof buf, &len));
    ASSERT_EQ(len, strlen(s));
    ASSERT_TRUE(memcmp(buf, s, len) == 0);
    ASSERT_EQ(engine_vocab_find(dsc, "<|EOT|>", 7), 32021);
    ASSERT_EQ(engine_vocab_find(dsc, "<|nope|>", 8), ENGINE_TOKEN_NONE);

    engine_vocab_free(spm);
    engine_vocab_free(gpt);
    engine_vocab_free(dsc);

    /* deepseek-llm's 2385 user-defined "[PAD…]" tokens: searched by length, not one by one */
    struct engine_vocab *dsl = vocab_open("vocab/ggml-vocab-deepseek-llm.gguf");
    if (!dsl) SKIP("deepseek-llm vocab not available");
    s = "x[PAD100400]y[PAD1004";
    ASSERT_OK(engine_vocab_tokenize(dsl, s, strlen(s), 0, ids, 64, &n));
    ASSERT_TRUE(n >= 4);
    ASSERT_EQ(ids[0], 87);
    ASSERT_EQ(ids[1], 100400);
    ASSERT_EQ(ids[2], 88);
    for (size_t i = 3; i < n; i++) ASSERT_TRUE(ids[i] < 100000);
    engine_vocab_free(dsl);
}

TEST(limits) {
    struct engine_vocab *v = vocab_open("vocab/ggml-vocab-gpt-2.gguf");
    if (!v) SKIP("gpt-2 vocab not available");
    int32_t ids[4];
    size_t n = 0;
    const char *s = "Hello world, this is a test";
    ASSERT_EQ(engine_vocab_tokenize(v, s, strlen(s), 0, ids, 2, &n), -ENOSPC);
    ASSERT_EQ(n, 7); /* the count needed */
    ASSERT_EQ(engine_vocab_tokenize(v, s, ENGINE_VOCAB_MAX_TEXT_BYTES + 1, 0, ids, 4, &n),
              ERR_TOO_LARGE);
    ASSERT_EQ(engine_vocab_tokenize(v, NULL, 3, 0, ids, 4, &n), ERR_INVALID);
    char buf[4];
    size_t len = 0;
    int32_t hello[] = {15496, 995};
    ASSERT_EQ(engine_vocab_detokenize(v, hello, 2, 0, buf, sizeof buf, &len), -ENOSPC);
    ASSERT_EQ(len, 11); /* "Hello world" */
    ASSERT_EQ(engine_vocab_detokenize(v, (int32_t[]){99999}, 1, 0, buf, sizeof buf, &len),
              ERR_TOKEN);
    engine_vocab_free(v);
}

/* ---- round trips of random bytes ---------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

TEST(round_trip_random) {
    static const char *const names[] = {"llama-spm", "gpt-2", "deepseek-llm", "deepseek-coder"};
    /* pieces of text mixed with raw random bytes */
    static const char *const words[] = {" ",        "  ",           "\n",   "\t",  "Hello",
                                        "'s",       "123",          "日本", "é",   "🦙",
                                        "\xc2\xa0", "\xe3\x80\x80", "!!",   "\r\n"};
    for (size_t k = 0; k < ARRAY_SIZE(names); k++) {
        char rel[128];
        snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf", names[k]);
        struct engine_vocab *v = vocab_open(rel);
        if (!v) SKIP("%s not available", rel);
        /* deepseek's added tokens "ÿ", "õ", ... (the alphabet's characters for the bytes
         * C0, C1, F5..FF) decode as text, so those raw bytes have no token of their own */
        bool byte_ok[256];
        for (int c = 0; c < 256; c++) {
            int32_t id = engine_vocab_find(v, v->byte_utf8[c], v->byte_utf8_len[c]);
            byte_ok[c] = engine_vocab_kind(v) == ENGINE_VOCAB_SPM || id < 0 ||
                         engine_vocab_token_type(v, id) == ENGINE_TOKEN_TYPE_NORMAL;
        }
        uint64_t seed = 42;
        int n_ok = 0, n_run = 0, n_skip = 0;
        for (int it = 0; it < 300; it++) {
            char s[512];
            size_t n = 0;
            while (n < 400) {
                uint64_t x = rng_next(&seed);
                if (x % 16 == 0) {
                    s[n++] = (char)(x >> 8);
                } else {
                    const char *w = words[(x >> 8) % ARRAY_SIZE(words)];
                    memcpy(s + n, w, strlen(w));
                    n += strlen(w);
                }
            }
            bool representable = !(engine_vocab_kind(v) == ENGINE_VOCAB_SPM && has_spm_space(s, n));
            for (size_t i = 0; i < n; i++) representable &= byte_ok[(uint8_t)s[i]];
            if (!representable) {
                n_skip++;
                continue;
            }
            int32_t *ids = NULL;
            size_t n_ids;
            char *back = NULL;
            size_t n_back = 0;
            n_run++;
            if (tokenize(v, s, n, 0, &ids, &n_ids) == 0 &&
                detokenize(v, ids, n_ids, ENGINE_DETOK_TEXT_START, &back, &n_back) == 0 &&
                n_back == n && memcmp(back, s, n) == 0)
                n_ok++;
            free(ids);
            free(back);
        }
        printf("round trip %s: %d/%d random byte strings (%d not representable)\n", names[k], n_ok,
               n_run, n_skip);
        engine_vocab_free(v);
        ASSERT_EQ(n_ok, n_run);
    }
}

/* ---- speed (printed, not asserted) -------------------------------------------------- */

TEST(speed_100k) {
    static const char *const names[] = {"llama-spm", "gpt-2", "deepseek-llm", "deepseek-coder"};
    const char *inp = test_shared_path("vocab/ggml-vocab-deepseek-llm.gguf.inp");
    if (!inp) SKIP("vectors not available");
    size_t n_src;
    char *src = slurp(inp, &n_src);
    size_t n = 100 * 1024;
    char *text = malloc(n);
    for (size_t i = 0; i < n; i++) text[i] = src[i % n_src];
    for (size_t k = 0; k < ARRAY_SIZE(names); k++) {
        char rel[128];
        snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf", names[k]);
        struct engine_vocab *v = vocab_open(rel);
        if (!v) continue;
        int32_t *ids = NULL;
        size_t n_ids = 0;
        uint64_t t0 = time_now_usec();
        ASSERT_OK(tokenize(v, text, n, 0, &ids, &n_ids));
        uint64_t t1 = time_now_usec();
        char *back = NULL;
        size_t n_back;
        ASSERT_OK(detokenize(v, ids, n_ids, ENGINE_DETOK_TEXT_START, &back, &n_back));
        uint64_t t2 = time_now_usec();
        printf("speed %s: tokenize 100 KiB -> %zu tokens in %.1f ms, detokenize %.1f ms\n",
               names[k], n_ids, (t1 - t0) / 1000.0, (t2 - t1) / 1000.0);
        free(ids);
        free(back);
        engine_vocab_free(v);
    }
    free(text);
    free(src);
}

/* ---- pre-tokenizer table ------------------------------------------------------------ */

TEST(pre_table_compiles) {
    int n = vocab_pre_selftest();
    ASSERT_TRUE(n >= 13);
}

/* ---- small hand-built vocabularies and hostile metadata ----------------------------- */

#define N_BASE 259 /* <unk> <s> </s> <0x00>..<0xFF> */

struct spec {
    const char *model;        /* NULL: "llama" */
    bool no_model;            /* no tokenizer.ggml.model */
    const char *const *extra; /* tokens after the base ones */
    size_t n_extra;
    const float *extra_scores;
    bool no_base; /* tokens = extra only */
    bool no_scores, no_types;
    bool scores_u8;                /* scores typed uint8 instead of float32 */
    bool types_i8;                 /* token_type typed int8 instead of int32 */
    int scores_delta, types_delta; /* lengths off by this many */
    const char *byte0;             /* replaces "<0x00>" */
    const char *const *merges;
    size_t n_merges;
    const char *pre;
    const char *id_key; /* one special id set to id_val */
    uint32_t id_val;
    bool id_i32; /* ... typed int32 */
    int add_bos; /* 0 absent, 1 false, 2 true */
};

static int spec_load(const struct spec *sp, struct engine_vocab **ret, struct err_detail *d) {
    struct gguf_writer *w = NULL;
    int r = gguf_writer_new(&w);
    if (r < 0) return r;
    size_t n_base = sp->no_base ? 0 : N_BASE, n = n_base + sp->n_extra;
    struct gguf_str *tok = calloc(n + 1, sizeof *tok);
    char(*bytes)[8] = calloc(256, 8);
    float *scores = calloc(n + 8, sizeof(float));
    int32_t *types = calloc(n + 8, sizeof(int32_t));
    uint8_t *small = calloc(n + 8, 1);
    for (size_t i = 0; i < n_base; i++) {
        if (i < 3) {
            static const char *const sp3[] = {"<unk>", "<s>", "</s>"};
            tok[i] = (struct gguf_str){strlen(sp3[i]), sp3[i]};
            types[i] = i == 0 ? ENGINE_TOKEN_TYPE_UNKNOWN : ENGINE_TOKEN_TYPE_CONTROL;
        } else {
            snprintf(bytes[i - 3], 8, "<0x%02X>", (unsigned)(i - 3));
            const char *b = (i == 3 && sp->byte0) ? sp->byte0 : bytes[i - 3];
            tok[i] = (struct gguf_str){strlen(b), b};
            types[i] = ENGINE_TOKEN_TYPE_BYTE;
        }
    }
    for (size_t i = 0; i < sp->n_extra; i++) {
        tok[n_base + i] = (struct gguf_str){strlen(sp->extra[i]), sp->extra[i]};
        types[n_base + i] = ENGINE_TOKEN_TYPE_NORMAL;
        scores[n_base + i] = sp->extra_scores ? sp->extra_scores[i] : -(float)i;
    }
    if (!sp->no_model)
        r = gguf_writer_add_str(w, "tokenizer.ggml.model", sp->model ? sp->model : "llama");
    if (r >= 0) r = gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", tok, n);
    if (r >= 0 && !sp->no_scores) {
        uint64_t ns = n + (size_t)sp->scores_delta;
        r = sp->scores_u8
                ? gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_UINT8, small, ns)
                : gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, ns);
    }
    if (r >= 0 && !sp->no_types) {
        uint64_t nt = n + (size_t)sp->types_delta;
        r = sp->types_i8
                ? gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT8, small, nt)
                : gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, nt);
    }
    if (r >= 0 && sp->merges) {
        struct gguf_str *m = calloc(sp->n_merges + 1, sizeof *m);
        for (size_t i = 0; i < sp->n_merges; i++)
            m[i] = (struct gguf_str){strlen(sp->merges[i]), sp->merges[i]};
        r = gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", m, sp->n_merges);
        free(m);
    }
    if (r >= 0 && sp->pre) r = gguf_writer_add_str(w, "tokenizer.ggml.pre", sp->pre);
    if (r >= 0 && sp->id_key)
        r = sp->id_i32 ? gguf_writer_add_i32(w, sp->id_key, (int32_t)sp->id_val)
                       : gguf_writer_add_u32(w, sp->id_key, sp->id_val);
    if (r >= 0 && sp->add_bos)
        r = gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", sp->add_bos == 2);
    char path[4096];
    snprintf(path, sizeof path, "%s/vocab.gguf", test_tmpdir());
    if (r >= 0) r = gguf_writer_save(w, path);
    gguf_writer_free(w);
    free(tok);
    free(bytes);
    free(scores);
    free(types);
    free(small);
    if (r < 0) return r;
    struct gguf_file *f = NULL;
    if ((r = gguf_open(path, &f, d)) < 0) return r;
    r = engine_vocab_load(f, ret, d);
    gguf_close(f);
    return r;
}

#define SPEC_SPM(...) ((struct spec){__VA_ARGS__})

/* Expects ERR_VOCAB (or code) with the detail naming `key`. */
#define ASSERT_BAD(sp, code, key)                                                                  \
    do {                                                                                           \
        struct engine_vocab *v_ = NULL;                                                            \
        struct err_detail d_ = {0};                                                                \
        struct spec s_ = sp;                                                                       \
        ASSERT_ERR(spec_load(&s_, &v_, &d_), code);                                                \
        ASSERT_TRUE(v_ == NULL);                                                                   \
        if (!strstr(d_.msg, key)) TEST_FAIL_("detail '%s' does not name %s", d_.msg, key);         \
    } while (0)

TEST(hostile_metadata) {
    /* G19: scores / token_type with the wrong element type */
    ASSERT_BAD(SPEC_SPM(.scores_u8 = true), ERR_VOCAB, "tokenizer.ggml.scores");
    ASSERT_BAD(SPEC_SPM(.types_i8 = true), ERR_VOCAB, "tokenizer.ggml.token_type");
    /* G20: lengths differ; special ids out of range; an empty vocabulary */
    ASSERT_BAD(SPEC_SPM(.scores_delta = -1), ERR_VOCAB, "tokenizer.ggml.scores");
    ASSERT_BAD(SPEC_SPM(.types_delta = 3), ERR_VOCAB, "tokenizer.ggml.token_type");
    ASSERT_BAD(SPEC_SPM(.id_key = "tokenizer.ggml.bos_token_id", .id_val = N_BASE), ERR_VOCAB,
               "tokenizer.ggml.bos_token_id");
    ASSERT_BAD(SPEC_SPM(.id_key = "tokenizer.ggml.eos_token_id", .id_val = 1u << 31), ERR_VOCAB,
               "tokenizer.ggml.eos_token_id");
    ASSERT_BAD(SPEC_SPM(.id_key = "tokenizer.ggml.padding_token_id", .id_val = 100000), ERR_VOCAB,
               "tokenizer.ggml.padding_token_id");
    ASSERT_BAD(SPEC_SPM(.id_key = "tokenizer.ggml.unknown_token_id", .id_val = (uint32_t)-5,
                        .id_i32 = true),
               ERR_VOCAB, "tokenizer.ggml.unknown_token_id");
    ASSERT_BAD(SPEC_SPM(.no_base = true), ERR_VOCAB, "tokenizer.ggml.tokens");
    /* G21: byte tokens that are not <0xHH> */
    ASSERT_BAD(SPEC_SPM(.byte0 = "<0x-1>"), ERR_VOCAB, "<0x-1>");
    ASSERT_BAD(SPEC_SPM(.byte0 = "<0xZZ>"), ERR_VOCAB, "<0xZZ>");
    ASSERT_BAD(SPEC_SPM(.byte0 = "<0x0>"), ERR_VOCAB, "tokenizer.ggml.tokens");
    /* missing and unknown keys */
    ASSERT_BAD(SPEC_SPM(.no_model = true), ERR_VOCAB, "tokenizer.ggml.model");
    ASSERT_BAD(SPEC_SPM(.model = "t5"), ERR_UNSUPPORTED, "tokenizer.ggml.model");
    static const char *const dup[] = {"ab", "cd", "ab"};
    ASSERT_BAD(SPEC_SPM(.extra = dup, .n_extra = 3), ERR_VOCAB, "duplicates");
    ASSERT_BAD(
        SPEC_SPM(.id_key = "tokenizer.ggml.bos_token_id", .id_val = UINT32_MAX, .add_bos = 2),
        ERR_VOCAB, "tokenizer.ggml.add_bos_token");
    static const char *const ab[] = {"a", "b", "ab"};
    static const char *const m_ok[] = {"a b"}, *const m_bad[] = {"ab"};
    ASSERT_BAD(SPEC_SPM(.model = "gpt2", .extra = ab, .n_extra = 3, .pre = "gpt-2"), ERR_VOCAB,
               "tokenizer.ggml.merges");
    ASSERT_BAD(SPEC_SPM(.model = "gpt2", .extra = ab, .n_extra = 3, .merges = m_bad, .n_merges = 1),
               ERR_VOCAB, "tokenizer.ggml.merges");
    ASSERT_BAD(SPEC_SPM(.model = "gpt2", .extra = ab, .n_extra = 3, .merges = m_ok, .n_merges = 1,
                        .pre = "no-such-pre"),
               ERR_VOCAB, "tokenizer.ggml.pre");

    /* none: 0xFFFFFFFF and int32 -1 are accepted as "no such token" */
    struct engine_vocab *v = NULL;
    struct err_detail d = {0};
    struct spec ok = SPEC_SPM(.id_key = "tokenizer.ggml.padding_token_id", .id_val = UINT32_MAX);
    ASSERT_OK_D(spec_load(&ok, &v, &d), &d);
    ASSERT_EQ(engine_vocab_pad(v), ENGINE_TOKEN_NONE);
    engine_vocab_free(v);
    ok = SPEC_SPM(.id_key = "tokenizer.ggml.bos_token_id", .id_val = (uint32_t)-1, .id_i32 = true,
                  .add_bos = 1);
    v = NULL;
    ASSERT_OK_D(spec_load(&ok, &v, &d), &d);
    ASSERT_EQ(engine_vocab_bos(v), ENGINE_TOKEN_NONE);
    ASSERT_TRUE(!engine_vocab_add_bos(v));
    engine_vocab_free(v);
    /* scores and types are optional */
    ok = SPEC_SPM(.no_scores = true, .no_types = true);
    v = NULL;
    ASSERT_OK_D(spec_load(&ok, &v, &d), &d);
    engine_vocab_free(v);
}

static void expect_ids(const struct spec *sp, const char *text, const int32_t *want,
                       size_t n_want) {
    struct engine_vocab *v = NULL;
    struct err_detail d = {0};
    ASSERT_OK_D(spec_load(sp, &v, &d), &d);
    int32_t ids[32];
    size_t n = 0;
    ASSERT_OK(engine_vocab_tokenize(v, text, strlen(text), 0, ids, 32, &n));
    engine_vocab_free(v);
    ASSERT_EQ(n, n_want);
    for (size_t i = 0; i < n; i++) ASSERT_EQ(ids[i], want[i]);
}

TEST(spm_merge_order) {
    /* "ab" -> "▁ab": pairs (▁,a) -> "▁a" and (a,b) -> "ab"; the higher score merges first */
    static const char *const t[] = {"\xe2\x96\x81", "a", "b",
                                    "\xe2\x96\x81"
                                    "a",
                                    "ab"};
    const float hi_ab[] = {0, 0, 0, -2, -1}, hi_sa[] = {0, 0, 0, -1, -2}, tie[] = {0, 0, 0, -1, -1};
    struct spec sp = SPEC_SPM(.extra = t, .n_extra = 5, .extra_scores = hi_ab);
    expect_ids(&sp, "ab", (int32_t[]){N_BASE + 0, N_BASE + 4}, 2);
    sp.extra_scores = hi_sa;
    expect_ids(&sp, "ab", (int32_t[]){N_BASE + 3, N_BASE + 2}, 2);
    sp.extra_scores = tie; /* ties: leftmost */
    expect_ids(&sp, "ab", (int32_t[]){N_BASE + 3, N_BASE + 2}, 2);
    /* a character outside the vocabulary falls back to its bytes */
    expect_ids(&sp, "a\xc3\xa9", (int32_t[]){N_BASE + 3, 3 + 0xC3, 3 + 0xA9}, 3);
}

TEST(bpe_merge_order) {
    static const char *const t[] = {"a", "b", "c", "ab", "bc"};
    static const char *const m1[] = {"a b", "b c"}, *const m2[] = {"b c", "a b"};
    struct spec sp = {.model = "gpt2",
                      .extra = t,
                      .n_extra = 5,
                      .no_base = true,
                      .no_scores = true,
                      .merges = m1,
                      .n_merges = 2,
                      .pre = "gpt-2"};
    expect_ids(&sp, "abc", (int32_t[]){3, 2}, 2);
    sp.merges = m2;
    expect_ids(&sp, "abc", (int32_t[]){0, 4}, 2);
    /* bytes with no token are dropped (no unk in this vocabulary) */
    expect_ids(&sp, "a!c", (int32_t[]){0, 2}, 2);
}

/* The pre-tokenizers the vector files do not cover (llama3, qwen2), piece by piece. */
static void expect_pieces(const char *pre, const char *text, const char *const *want,
                          size_t n_want) {
    static const char *const t[] = {"a", "b"};
    static const char *const m[] = {"a b"};
    struct spec sp = {.model = "gpt2",
                      .extra = t,
                      .n_extra = 2,
                      .no_base = true,
                      .no_scores = true,
                      .merges = m,
                      .n_merges = 1,
                      .pre = pre};
    struct engine_vocab *v = NULL;
    struct err_detail d = {0};
    ASSERT_OK_D(spec_load(&sp, &v, &d), &d);
    struct vocab_scratch s = {0};
    struct vocab_span *spans = NULL;
    size_t n = 0;
    int r = vocab_pre_split(v, text, strlen(text), &s, &spans, &n);
    bool same = r == 0 && n == n_want;
    for (size_t i = 0; same && i < n; i++)
        same = spans[i].len == strlen(want[i]) &&
               memcmp(text + spans[i].off, want[i], spans[i].len) == 0;
    if (!same) {
        fprintf(stderr, "%s: '%s' split as", pre, text);
        for (size_t i = 0; r == 0 && i < n; i++)
            fprintf(stderr, " [%.*s]", (int)spans[i].len, text + spans[i].off);
        fprintf(stderr, "\n");
    }
    vocab_scratch_done(&s);
    engine_vocab_free(v);
    ASSERT_TRUE(same);
}

TEST(pre_split) {
    const char *text = "Hello world's 12345 test\n\n  x";
    static const char *const llama3[] = {"Hello", " world", "'s",   " ", "123",
                                         "45",    " test",  "\n\n", " ", " x"};
    static const char *const qwen2[] = {"Hello", " world", "'s",    " ",    "1", "2", "3",
                                        "4",     "5",      " test", "\n\n", " ", " x"};
    static const char *const gpt2[] = {"Hello", " world", "'s", " 12345", " test", "\n\n ", " x"};
    expect_pieces("llama-bpe", text, llama3, ARRAY_SIZE(llama3));
    expect_pieces("qwen2", text, qwen2, ARRAY_SIZE(qwen2));
    expect_pieces("gpt-2", text, gpt2, ARRAY_SIZE(gpt2));
    /* llama3 contractions ignore case; gpt-2's do not */
    static const char *const l3_case[] = {"I", "'LL", " go"}, *const g2_case[] = {"I", "'", "LL",
                                                                                  " go"};
    expect_pieces("llama3", "I'LL go", l3_case, 3);
    expect_pieces("gpt-2", "I'LL go", g2_case, 4);
    /* U+0085 and U+00A0 are whitespace (folded to U+000B as llama.cpp does) */
    static const char *const nel[] = {"a", "\xc2\x85", "!"}, *const nbsp[] = {"a", "\xc2\xa0", "!"};
    expect_pieces("gpt-2", "a\xc2\x85!", nel, 3);
    expect_pieces("gpt-2", "a\xc2\xa0!", nbsp, 3);
    /* invalid UTF-8 never matches: it stays a piece of its own */
    static const char *const bad[] = {"ab", "\xff\xfe", " cd"};
    expect_pieces("gpt-2", "ab\xff\xfe cd", bad, 3);
    /* deepseek-llm's punctuation and CJK classes name U+3000, but folded it is whitespace:
     * "。" | "\v。" by punctuation, then the CJK range splits "\v" from "。" (unfolded it
     * would stay one piece) */
    static const char *const ideo[] = {"\xe3\x80\x82", "\xe3\x80\x80", "\xe3\x80\x82"};
    expect_pieces("deepseek-llm", "\xe3\x80\x82\xe3\x80\x80\xe3\x80\x82", ideo, 3);
    /* deepseek-llm: "\s+$" only at the very end of a piece */
    static const char *const dsl[] = {"a", "   "};
    expect_pieces("deepseek-llm", "a   ", dsl, 2);
}

TEST_MAIN(T(vectors_llama_spm), T(vectors_gpt_2), T(vectors_deepseek_llm),
          T(vectors_deepseek_coder), T(stories_prompt_once), T(stories_prompt_empty),
          T(stories_vocab), T(stream_utf8_split), T(stream_byte_level), T(special_tokens),
          T(limits), T(round_trip_random), T(speed_100k), T(pre_table_compiles),
          T(hostile_metadata), T(spm_merge_order), T(bpe_merge_order), T(pre_split))
