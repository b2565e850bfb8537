/* WordPiece ("bert" vocabularies): llama.cpp's bert-bge test vectors (exact ids), the
 * embedding reference models' prompt ids ([CLS] ... [SEP], bert-tiny and nomic-bert-tiny),
 * BERT normalization and pre-split rule by rule on a hand-built vocabulary, special tokens
 * and add_* keys, and the detokenizer's word joining and clean-up. */
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
    gguf_close(f);
    if (r < 0) fprintf(stderr, "%s: %s\n", rel, err_msg(&d, r));
    return v;
}

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

static bool ids_equal(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

static void print_ids(const char *what, const int32_t *ids, size_t n) {
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}

/* Whitespace-separated integers of s into ids (at most cap). */
static size_t parse_ids(const char *s, int32_t *ids, size_t cap) {
    size_t n = 0;
    while (n < cap) {
        char *e;
        long id = strtol(s, &e, 10);
        if (e == s) break;
        ids[n++] = (int32_t)id;
        s = e;
    }
    return n;
}

/* ---- llama.cpp's bert-bge vectors --------------------------------------------------- */

#define SEP "\n__ggml_vocab_test__\n"
#define BGE "embed/ggml-vocab-bert-bge.gguf"

TEST(vectors_bert_bge) {
    struct engine_vocab *v = vocab_open(BGE);
    if (!v) SKIP("%s not available", BGE);
    ASSERT_EQ(engine_vocab_kind(v), ENGINE_VOCAB_WPM);
    ASSERT_EQ(engine_vocab_n_tokens(v), 30522);
    char path_inp[4096], path_out[4096];
    snprintf(path_inp, sizeof path_inp, "%s.inp", test_shared_path(BGE));
    snprintf(path_out, sizeof path_out, "%s.out", test_shared_path(BGE));
    size_t n_inp, n_out;
    char *inp = slurp(path_inp, &n_inp), *out = slurp(path_out, &n_out);
    int n_case = 0, n_pass = 0, n_trip = 0, n_trip_ok = 0;
    for (char *ip = inp, *op = out; inp && out && *op;) {
        char *end = strstr(ip, SEP), *eol = strchr(op, '\n');
        if (!end || !eol) break;
        size_t len = (size_t)(end - ip);
        *eol = '\0';
        int32_t want[512];
        size_t n_want = parse_ids(op, want, ARRAY_SIZE(want));
        int32_t *got = NULL;
        size_t n_got = 0;
        int r = tokenize(v, ip, len, 0, &got, &n_got);
        bool ok = r == 0 && ids_equal(got, n_got, want, n_want);
        n_case++;
        n_pass += ok;
        if (!ok) {
            fprintf(stderr, "bert-bge case %d '%.*s'\n", n_case, (int)len, ip);
            print_ids("got", got, r == 0 ? n_got : 0);
            print_ids("expected", want, n_want);
        }
        /* the text is normalized, so the round trip is on ids: tokenize(detokenize(ids))
         * gives the ids back wherever no word became [UNK] */
        bool has_unk = false;
        for (size_t i = 0; r == 0 && i < n_got; i++) has_unk |= got[i] == engine_vocab_unk(v);
        if (r == 0 && !has_unk) {
            char *back = NULL;
            size_t n_back = 0;
            int32_t *again = NULL;
            size_t n_again = 0;
            n_trip++;
            if (detokenize(v, got, n_got, ENGINE_DETOK_TEXT_START, &back, &n_back) == 0 &&
                tokenize(v, back, n_back, 0, &again, &n_again) == 0 &&
                ids_equal(again, n_again, got, n_got))
                n_trip_ok++;
            else
                fprintf(stderr, "bert-bge case %d: round trip through '%s' differs\n", n_case,
                        back ? back : "(error)");
            free(back);
            free(again);
        }
        free(got);
        ip = end + strlen(SEP);
        op = eol + 1;
    }
    printf("vocab bert-bge: %d/%d (round trip %d/%d)\n", n_pass, n_case, n_trip_ok, n_trip);
    free(inp);
    free(out);
    engine_vocab_free(v);
    ASSERT_EQ(n_case, 46);
    ASSERT_EQ(n_pass, n_case);
    ASSERT_TRUE(n_trip >= 30);
    ASSERT_EQ(n_trip_ok, n_trip);
}

/* A few texts with their ids, beyond the vectors: accents, CJK, Unicode punctuation. */
TEST(bert_bge_texts) {
    struct engine_vocab *v = vocab_open(BGE);
    if (!v) SKIP("%s not available", BGE);
    static const struct {
        const char *text;
        const char *pieces; /* the tokens' texts, space-separated */
    } cases[] = {
        {"The Café", "\xe2\x96\x81the \xe2\x96\x81"
                     "cafe"},
        {"ÉCOLE", "\xe2\x96\x81"
                  "ecole"},
        {"naïve", "\xe2\x96\x81naive"},
        {"x¿y", "\xe2\x96\x81x \xe2\x96\x81\xc2\xbf \xe2\x96\x81y"},
        {"日本", "\xe2\x96\x81\xe6\x97\xa5 \xe2\x96\x81\xe6\x9c\xac"},
        {"a\xe2\x80\x8b"
         "b",
         "\xe2\x96\x81"
         "ab"}, /* U+200B (Cf) is dropped, not a space */
        {"a\xe3\x80\x80"
         "b",
         "\xe2\x96\x81"
         "a \xe2\x96\x81"
         "b"}, /* U+3000 is a space */
    };
    for (size_t k = 0; k < ARRAY_SIZE(cases); k++) {
        int32_t *got = NULL;
        size_t n_got = 0;
        ASSERT_OK(tokenize(v, cases[k].text, strlen(cases[k].text), 0, &got, &n_got));
        char joined[256];
        size_t o = 0;
        for (size_t i = 0; i < n_got && o < sizeof joined - 64; i++) {
            size_t tl;
            const char *t = engine_vocab_token_text(v, got[i], &tl);
            if (i) joined[o++] = ' ';
            memcpy(joined + o, t, tl);
            o += tl;
        }
        joined[o] = '\0';
        free(got);
        if (strcmp(joined, cases[k].pieces) != 0)
            TEST_FAIL_("'%s' gave '%s', expected '%s'", cases[k].text, joined, cases[k].pieces);
    }
    engine_vocab_free(v);
}

/* ---- the embedding reference models ------------------------------------------------- */

/* Known texts of the inputs (README.md "Inputs"); the others are rebuilt from their ids. */
static const char *known_text(int input, int seq) {
    if (input == 1 && seq == 0) return "The quick brown fox jumps over the lazy dog.";
    if (input == 4 && seq == 0) return "What is the capital of France?";
    return NULL;
}

static void check_embed_model(const char *model, int *ret_seqs) {
    char rel[256];
    snprintf(rel, sizeof rel, "embed/%s.gguf", model);
    struct engine_vocab *v = vocab_open(rel);
    if (!v) SKIP("%s not available", rel);
    ASSERT_EQ(engine_vocab_kind(v), ENGINE_VOCAB_WPM);
    ASSERT_EQ(engine_vocab_n_tokens(v), 4033);
    ASSERT_EQ(engine_vocab_bos(v), 101);
    ASSERT_EQ(engine_vocab_unk(v), 100);
    const unsigned flags = ENGINE_TOKENIZE_ADD_SPECIAL | ENGINE_TOKENIZE_PARSE_SPECIAL;
    int n_seq_ok = 0, n_seq = 0;
    for (int input = 1; input <= 4; input++) {
        snprintf(rel, sizeof rel, "embed/%s-I%d.txt", model, input);
        const char *path = test_shared_path(rel);
        size_t n;
        char *txt = path ? slurp(path, &n) : NULL;
        if (!txt) {
            engine_vocab_free(v);
            SKIP("%s not available", rel);
        }
        char *nt = strstr(txt, "n_tokens: ");
        ASSERT_TRUE(nt);
        int32_t counts[8];
        size_t n_counts = parse_ids(nt + strlen("n_tokens: "), counts, ARRAY_SIZE(counts));
        for (size_t seq = 0; seq < n_counts; seq++) {
            char key[32];
            snprintf(key, sizeof key, "\nids%zu: ", seq);
            char *line = strstr(txt, key);
            ASSERT_TRUE(line);
            int32_t want[1024];
            size_t n_want = parse_ids(line + strlen(key), want, ARRAY_SIZE(want));
            ASSERT_EQ(n_want, (size_t)counts[seq]);
            ASSERT_EQ(want[0], 101);
            ASSERT_EQ(want[n_want - 1], 102);
            /* the text: as the README gives it, else the ids' text without [CLS]/[SEP] */
            char *text = NULL;
            size_t n_text = 0;
            const char *known = known_text(input, (int)seq);
            if (known) {
                text = strdup(known);
                n_text = strlen(known);
            } else {
                ASSERT_OK(detokenize(v, want, n_want, ENGINE_DETOK_TEXT_START, &text, &n_text));
            }
            int32_t *got = NULL;
            size_t n_got = 0;
            ASSERT_OK(tokenize(v, text, n_text, flags, &got, &n_got));
            bool ok = ids_equal(got, n_got, want, n_want);
            n_seq++;
            n_seq_ok += ok;
            if (!ok) {
                fprintf(stderr, "%s I%d seq %zu '%s'\n", model, input, seq, text);
                print_ids("got", got, n_got);
                print_ids("expected", want, n_want);
            }
            /* I2's per-token hidden states have one row per token */
            if (input == 2 && seq == 0) {
                snprintf(rel, sizeof rel, "embed/%s-I2.tokens", model);
                const char *tp = test_shared_path(rel);
                size_t n_tok_file = 0;
                char *tok = tp ? slurp(tp, &n_tok_file) : NULL;
                ASSERT_TRUE(tok && n_tok_file >= 24 && memcmp(tok, "EMBD", 4) == 0);
                uint32_t n_rows;
                memcpy(&n_rows, tok + 12, 4);
                ASSERT_EQ(n_rows, (uint32_t)n_want);
                free(tok);
            }
            free(got);
            free(text);
        }
        free(txt);
    }
    printf("%s: %d/%d prompt sequences\n", model, n_seq_ok, n_seq);
    engine_vocab_free(v);
    ASSERT_EQ(n_seq, 6);
    ASSERT_EQ(n_seq_ok, n_seq);
    *ret_seqs = n_seq_ok;
}

TEST(embed_bert_tiny) {
    int n = 0;
    check_embed_model("bert-tiny", &n);
}

TEST(embed_nomic_bert_tiny) {
    int n = 0;
    check_embed_model("nomic-bert-tiny", &n);
}

/* ---- hand-built vocabularies -------------------------------------------------------- */

/* The hand-built vocabulary: five control tokens, then words ("▁" + text) and bare
 * continuation pieces. */
enum {
    T_PAD,
    T_UNK,
    T_CLS,
    T_SEP,
    T_MASK,
    N_SPECIAL,
    W_HELLO = N_SPECIAL,
    W_WORLD,
    W_COMMA,
    W_BANG,
    W_DOT,
    W_FUHRER,
    W_F,
    W_U,
    W_HR,
    W_ER,
    W_RI,
    W_BEN,
    W_APOS,
    W_T,
    W_DON,
    W_IQUEST,
    W_IDEO_COMMA,
    W_DOLLAR,
    W_A,
    W_B_CONT,
    W_AB,
    W_HIEUH,
    W_HELLO_CAP,
    W_E_ACUTE,
    W_E,
    W_B,
    W_S,
    W_QUEST,
    W_LBRACKET,
    W_RBRACKET,
    W_SEPWORD,
    W_COUNT
};

#define S "\xe2\x96\x81" /* U+2581 */
static const char *const texts[W_COUNT] = {
    [T_PAD] = "[PAD]",
    [T_UNK] = "[UNK]",
    [T_CLS] = "[CLS]",
    [T_SEP] = "[SEP]",
    [T_MASK] = "[MASK]",
    [W_HELLO] = S "hello",
    [W_WORLD] = S "world",
    [W_COMMA] = S ",",
    [W_BANG] = S "!",
    [W_DOT] = S ".",
    [W_FUHRER] = S "fuhrer",
    [W_F] = S "f",
    [W_U] = "u",
    [W_HR] = "hr",
    [W_ER] = "er",
    [W_RI] = S "\xe6\x97\xa5",  /* 日 */
    [W_BEN] = S "\xe6\x9c\xac", /* 本 */
    [W_APOS] = S "'",
    [W_T] = S "t",
    [W_DON] = S "don",
    [W_IQUEST] = S "\xc2\xbf",         /* ¿ */
    [W_IDEO_COMMA] = S "\xe3\x80\x81", /* 、 */
    [W_DOLLAR] = S "$",
    [W_A] = S "a",
    [W_B_CONT] = "b",
    [W_AB] = S "ab",
    [W_HIEUH] = S "\xe1\x84\x92", /* U+1112, the jamo ᄒ */
    [W_HELLO_CAP] = S "Hello",
    [W_E_ACUTE] = S "\xc3\xa9", /* é */
    [W_E] = S "e",
    [W_B] = S "b",
    [W_S] = S "s",
    [W_QUEST] = S "?",
    [W_LBRACKET] = S "[",
    [W_RBRACKET] = S "]",
    [W_SEPWORD] = S "sep",
};

#define KEY_ABSENT (-2)

struct wspec {
    int32_t bos, cls, sep, unk; /* KEY_ABSENT, or the key's value (-1: none) */
    int add_bos, add_eos;       /* 0 absent, 1 false, 2 true */
    int lowercase, strip;       /* 0 absent, 1 false, 2 true */
};

static int wspec_load(const struct wspec *sp, struct engine_vocab **ret, struct err_detail *d) {
    struct gguf_writer *w = NULL;
    int r = gguf_writer_new(&w);
    if (r < 0) return r;
    const size_t n = W_COUNT;
    struct gguf_str tok[W_COUNT];
    int32_t types[W_COUNT];
    for (size_t i = 0; i < n; i++) {
        tok[i] = (struct gguf_str){strlen(texts[i]), texts[i]};
        types[i] = i < N_SPECIAL ? ENGINE_TOKEN_TYPE_CONTROL : ENGINE_TOKEN_TYPE_NORMAL;
    }
    r = gguf_writer_add_str(w, "tokenizer.ggml.model", "bert");
    if (r >= 0) r = gguf_writer_add_str(w, "tokenizer.ggml.pre", "bert-bge");
    if (r >= 0) r = gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", tok, n);
    if (r >= 0) r = gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, n);
    const struct {
        const char *key;
        int32_t val;
    } ids[] = {
        {"tokenizer.ggml.bos_token_id", sp->bos},
        {"tokenizer.ggml.cls_token_id", sp->cls},
        {"tokenizer.ggml.seperator_token_id", sp->sep},
        {"tokenizer.ggml.unknown_token_id", sp->unk},
    };
    for (size_t i = 0; r >= 0 && i < ARRAY_SIZE(ids); i++)
        if (ids[i].val != KEY_ABSENT) r = gguf_writer_add_i32(w, ids[i].key, ids[i].val);
    const struct {
        const char *key;
        int val;
    } bools[] = {
        {"tokenizer.ggml.add_bos_token", sp->add_bos},
        {"tokenizer.ggml.add_eos_token", sp->add_eos},
        {"tokenizer.ggml.normalizer.lowercase", sp->lowercase},
        {"tokenizer.ggml.normalizer.strip_accents", sp->strip},
    };
    for (size_t i = 0; r >= 0 && i < ARRAY_SIZE(bools); i++)
        if (bools[i].val) r = gguf_writer_add_bool(w, bools[i].key, bools[i].val == 2);
    char path[4096];
    snprintf(path, sizeof path, "%s/wpm.gguf", test_tmpdir());
    if (r >= 0) r = gguf_writer_save(w, path);
    gguf_writer_free(w);
    if (r < 0) return r;
    struct gguf_file *f = NULL;
    if ((r = gguf_open(path, &f, d)) < 0) return r;
    r = engine_vocab_load(f, ret, d);
    gguf_close(f);
    return r;
}

/* The default spec: the special ids by key (the vocabulary is shorter than 101). */
static struct wspec wspec_default(void) {
    return (struct wspec){.bos = KEY_ABSENT, .cls = T_CLS, .sep = T_SEP, .unk = T_UNK};
}

static bool expect(const struct engine_vocab *v, const char *text, unsigned flags,
                   const int32_t *want, size_t n_want) {
    int32_t ids[64];
    size_t n = 0;
    int r = engine_vocab_tokenize(v, text, strlen(text), flags, ids, ARRAY_SIZE(ids), &n);
    if (r == 0 && ids_equal(ids, n, want, n_want)) return true;
    fprintf(stderr, "'%s' (flags %u): %s\n", text, flags, r < 0 ? err_name(r) : "");
    print_ids("got", ids, r == 0 ? n : 0);
    print_ids("expected", want, n_want);
    return false;
}

#define EXPECT(v, text, flags, ...)                                                                \
    ASSERT_TRUE(expect(v, text, flags, (int32_t[]){__VA_ARGS__},                                   \
                       sizeof((int32_t[]){__VA_ARGS__}) / sizeof(int32_t)))

TEST(normalize_and_split) {
    struct engine_vocab *v = NULL;
    struct err_detail d = {0};
    struct wspec sp = wspec_default();
    ASSERT_OK_D(wspec_load(&sp, &v, &d), &d);
    ASSERT_EQ(engine_vocab_kind(v), ENGINE_VOCAB_WPM);
    /* whitespace splits, punctuation is its own word, lower case */
    EXPECT(v, "Hello, World!", 0, W_HELLO, W_COMMA, W_WORLD, W_BANG);
    EXPECT(v, "  hello\t\n world  ", 0, W_HELLO, W_WORLD);
    /* Unicode whitespace: U+00A0, U+3000, U+2028 */
    EXPECT(v, "hello\xc2\xa0world\xe3\x80\x80!\xe2\x80\xa8.", 0, W_HELLO, W_WORLD, W_BANG, W_DOT);
    /* Unicode punctuation (U+00BF, U+3001) and ASCII symbols split; '.' inside a word too */
    EXPECT(v, "\xc2\xbfhello\xe3\x80\x81", 0, W_IQUEST, W_HELLO, W_IDEO_COMMA);
    EXPECT(v, "a$a", 0, W_A, W_DOLLAR, W_A);
    EXPECT(v, "hello.world", 0, W_HELLO, W_DOT, W_WORLD);
    /* accents: precomposed (Ü -> U -> u) and combining (u + U+0308) */
    EXPECT(v, "F\xc3\x9cHRER", 0, W_FUHRER);
    EXPECT(v, "Fu\xcc\x88hrer", 0, W_FUHRER);
    EXPECT(v, "\xc3\xa9", 0, W_E);
    /* a Hangul syllable is its leading jamo (U+D55C -> U+1112) */
    EXPECT(v, "\xed\x95\x9c", 0, W_HIEUH);
    /* CJK ideographs are words of one character */
    EXPECT(v, "\xe6\x97\xa5\xe6\x9c\xac", 0, W_RI, W_BEN);
    EXPECT(v,
           "a\xe6\x97\xa5"
           "a",
           0, W_A, W_RI, W_A);
    /* dropped without splitting: controls (U+0001, U+200B, U+00AD), U+FFFD, invalid bytes */
    EXPECT(v,
           "a\x01"
           "b",
           0, W_AB);
    EXPECT(v,
           "a\xe2\x80\x8b"
           "b",
           0, W_AB);
    EXPECT(v,
           "a\xc2\xad"
           "b",
           0, W_AB);
    EXPECT(v,
           "a\xef\xbf\xbd"
           "b",
           0, W_AB);
    EXPECT(v,
           "a\xff\xc3"
           "b",
           0, W_AB);
    EXPECT(v, "", 0);
    EXPECT(v, " \x01 ", 0);
    engine_vocab_free(v);
}

TEST(greedy_and_unk) {
    struct engine_vocab *v = NULL;
    struct err_detail d = {0};
    struct wspec sp = wspec_default();
    ASSERT_OK_D(wspec_load(&sp, &v, &d), &d);
    /* longest first from the word's start: "▁ab" then "b" (not "▁a" "b" "b") */
    EXPECT(v, "abb", 0, W_AB, W_B_CONT);
    /* continuation pieces are bare texts: "▁f" "u" "hr" "er" when "▁fuhrer" is not whole */
    EXPECT(v, "fuhrerer", 0, W_FUHRER, W_ER);
    EXPECT(v, "fuhr", 0, W_F, W_U, W_HR);
    /* a position nothing matches: the whole word is one [UNK], the other words stay */
    EXPECT(v, "abq hello", 0, T_UNK, W_HELLO);
    EXPECT(v, "zzz", 0, T_UNK);
    /* no unk in the vocabulary: the word is dropped */
    struct engine_vocab *nu = NULL;
    sp.unk = -1;
    ASSERT_OK_D(wspec_load(&sp, &nu, &d), &d);
    EXPECT(nu, "zzz hello", 0, W_HELLO);
    engine_vocab_free(nu);
    engine_vocab_free(v);
}

TEST(normalizer_keys) {
    struct engine_vocab *v = NULL;
    struct err_detail d = {0};
    /* lowercase false: case and (by default then) accents are kept */
    struct wspec sp = wspec_default();
    sp.lowercase = 1;
    ASSERT_OK_D(wspec_load(&sp, &v, &d), &d);
    EXPECT(v, "Hello hello", 0, W_HELLO_CAP, W_HELLO);
    EXPECT(v, "\xc3\xa9", 0, W_E_ACUTE);
    EXPECT(v, "e\xcc\x81", 0, T_UNK); /* "▁e" + U+0301 kept: no such token */
    engine_vocab_free(v);
    /* lowercase, accents kept */
    v = NULL;
    sp = wspec_default();
    sp.lowercase = 2;
    sp.strip = 1;
    ASSERT_OK_D(wspec_load(&sp, &v, &d), &d);
    EXPECT(v, "HELLO \xc3\x89", 0, W_HELLO, W_E_ACUTE);
    engine_vocab_free(v);
}

TEST(specials_and_keys) {
    struct engine_vocab *v = NULL;
    struct err_detail d = {0};
    struct wspec sp = wspec_default();
    ASSERT_OK_D(wspec_load(&sp, &v, &d), &d);
    ASSERT_EQ(engine_vocab_bos(v), T_CLS);
    ASSERT_TRUE(engine_vocab_add_bos(v) && engine_vocab_add_eos(v));
    const unsigned add = ENGINE_TOKENIZE_ADD_SPECIAL, parse = ENGINE_TOKENIZE_PARSE_SPECIAL;
    EXPECT(v, "hello", add, T_CLS, W_HELLO, T_SEP);
    EXPECT(v, "", add, T_CLS, T_SEP);
    /* special tokens in the text: parsed with PARSE_SPECIAL, text otherwise */
    EXPECT(v, "hello[SEP]world", parse, W_HELLO, T_SEP, W_WORLD);
    EXPECT(v, "[CLS]hello [MASK]", add | parse, T_CLS, T_CLS, W_HELLO, T_MASK, T_SEP);
    EXPECT(v, "hello[SEP]world", 0, W_HELLO, W_LBRACKET, W_SEPWORD, W_RBRACKET, W_WORLD);
    engine_vocab_free(v);

    /* bos_token_id wins over cls_token_id; add_*_token false are honoured */
    v = NULL;
    sp = wspec_default();
    sp.bos = W_A;
    sp.add_eos = 1;
    ASSERT_OK_D(wspec_load(&sp, &v, &d), &d);
    EXPECT(v, "hello", add, W_A, W_HELLO);
    engine_vocab_free(v);
    v = NULL;
    sp = wspec_default();
    sp.add_bos = 1;
    ASSERT_OK_D(wspec_load(&sp, &v, &d), &d);
    EXPECT(v, "hello", add, W_HELLO, T_SEP);
    engine_vocab_free(v);

    /* no [CLS] or [SEP] to add: refused, naming the keys */
    v = NULL;
    sp = wspec_default();
    sp.cls = KEY_ABSENT;
    ASSERT_ERR(wspec_load(&sp, &v, &d), ERR_VOCAB);
    ASSERT_TRUE(strstr(d.msg, "tokenizer.ggml.cls_token_id") != NULL);
    sp = wspec_default();
    sp.sep = -1;
    ASSERT_ERR(wspec_load(&sp, &v, &d), ERR_VOCAB);
    ASSERT_TRUE(strstr(d.msg, "tokenizer.ggml.seperator_token_id") != NULL);
    sp = wspec_default();
    sp.sep = -1;
    sp.add_eos = 1; /* nothing to add, nothing needed */
    ASSERT_OK_D(wspec_load(&sp, &v, &d), &d);
    engine_vocab_free(v);
}

/* ---- detokenization ----------------------------------------------------------------- */

static void expect_text(const struct engine_vocab *v, const int32_t *ids, size_t n, unsigned flags,
                        const char *want) {
    char *got = NULL;
    size_t n_got = 0;
    ASSERT_OK(detokenize(v, ids, n, flags, &got, &n_got));
    bool ok = n_got == strlen(want) && memcmp(got, want, n_got) == 0;
    if (!ok) fprintf(stderr, "detokenized '%s', expected '%s'\n", got, want);
    /* streamed one token at a time, with the smallest room: the same bytes */
    size_t cap = engine_detok_min_cap(v), n_all = 0;
    char *chunk = malloc(cap), *all = malloc(n * cap + 8);
    struct engine_detok dt;
    engine_detok_init(&dt, v, flags);
    for (size_t i = 0; i < n; i++) {
        int r = engine_detok_feed(&dt, ids[i], chunk, cap);
        ASSERT_TRUE(r >= 0);
        memcpy(all + n_all, chunk, (size_t)r);
        n_all += (size_t)r;
    }
    int r = engine_detok_flush(&dt, all + n_all, 4);
    ASSERT_TRUE(r >= 0);
    n_all += (size_t)r;
    ok &= n_all == n_got && memcmp(all, got, n_all) == 0;
    free(chunk);
    free(all);
    free(got);
    ASSERT_TRUE(ok);
}

#define EXPECT_TEXT(v, flags, want, ...)                                                           \
    expect_text(v, (int32_t[]){__VA_ARGS__}, sizeof((int32_t[]){__VA_ARGS__}) / sizeof(int32_t),   \
                flags, want)

TEST(detokenize_words) {
    struct engine_vocab *v = NULL;
    struct err_detail d = {0};
    struct wspec sp = wspec_default();
    ASSERT_OK_D(wspec_load(&sp, &v, &d), &d);
    const unsigned start = ENGINE_DETOK_TEXT_START, special = ENGINE_DETOK_SPECIAL;
    /* word starts are spaces, continuations join; the text's first space goes */
    EXPECT_TEXT(v, start, "hello fuhr", W_HELLO, W_F, W_U, W_HR);
    EXPECT_TEXT(v, 0, " hello fuhr", W_HELLO, W_F, W_U, W_HR);
    /* no space before ? ! . , */
    EXPECT_TEXT(v, start, "hello, world!", W_HELLO, W_COMMA, W_WORLD, W_BANG);
    EXPECT_TEXT(v, start, ". hello?", W_DOT, W_HELLO, W_QUEST);
    /* a lone apostrophe between spaces joins; at the start or end it stays */
    EXPECT_TEXT(v, start, "don't", W_DON, W_APOS, W_T);
    EXPECT_TEXT(v, start, "hello '", W_HELLO, W_APOS);
    EXPECT_TEXT(v, start, "' hello", W_APOS, W_HELLO);
    EXPECT_TEXT(v, start, "hello '.", W_HELLO, W_APOS, W_DOT);
    EXPECT_TEXT(v, start, "hello'' s", W_HELLO, W_APOS, W_APOS, W_S);
    /* [CLS] and [SEP]: nothing by default, and the text after [CLS] starts a text */
    EXPECT_TEXT(v, 0, "hello world", T_CLS, W_HELLO, W_WORLD, T_SEP);
    /* rendered, they are words */
    EXPECT_TEXT(v, start | special, "[CLS] hello world [SEP]", T_CLS, W_HELLO, W_WORLD, T_SEP);
    EXPECT_TEXT(v, start | special, "hello ' [SEP]", W_HELLO, W_APOS, T_SEP);
    engine_vocab_free(v);
}

/* Random text: any bytes tokenize, every id is in range, and tokenize(detokenize(ids))
 * keeps the ids of the words that are not [UNK]. */
static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

TEST(random_text_bert_bge) {
    struct engine_vocab *v = vocab_open(BGE);
    if (!v) SKIP("%s not available", BGE);
    static const char *const pieces[] = {
        " ",   "  ",     "\n", "Hello",    "world",        "'s", "don't",
        "123", "日本",   "é",  "\xc2\xa0", "\xe3\x80\x80", "!!", ",",
        ".",   "Führer", "ñ",  "[SEP]",    "[CLS]",        "$5",
    };
    uint64_t seed = 7;
    int n_ok = 0, n_run = 0;
    for (int it = 0; it < 300; it++) {
        char s[512];
        size_t n = 0;
        while (n < 400) {
            uint64_t x = rng_next(&seed);
            if (x % 16 == 0) {
                s[n++] = (char)(x >> 8);
            } else {
                const char *w = pieces[(x >> 8) % ARRAY_SIZE(pieces)];
                memcpy(s + n, w, strlen(w));
                n += strlen(w);
            }
        }
        int32_t *ids = NULL, *again = NULL;
        size_t n_ids = 0, n_again = 0, n_back = 0;
        char *back = NULL;
        ASSERT_OK(tokenize(v, s, n, ENGINE_TOKENIZE_PARSE_SPECIAL, &ids, &n_ids));
        for (size_t i = 0; i < n_ids; i++)
            ASSERT_TRUE(ids[i] >= 0 && ids[i] < engine_vocab_n_tokens(v));
        bool has_unk = false;
        for (size_t i = 0; i < n_ids; i++) has_unk |= ids[i] == engine_vocab_unk(v);
        if (!has_unk) {
            n_run++;
            ASSERT_OK(detokenize(v, ids, n_ids, ENGINE_DETOK_TEXT_START | ENGINE_DETOK_SPECIAL,
                                 &back, &n_back));
            ASSERT_OK(tokenize(v, back, n_back, ENGINE_TOKENIZE_PARSE_SPECIAL, &again, &n_again));
            n_ok += ids_equal(again, n_again, ids, n_ids);
        }
        free(ids);
        free(again);
        free(back);
    }
    printf("random text bert-bge: %d/%d round trips (the others hold [UNK])\n", n_ok, n_run);
    engine_vocab_free(v);
    ASSERT_TRUE(n_run > 0);
    ASSERT_EQ(n_ok, n_run);
}

TEST(speed_bert_bge) {
    struct engine_vocab *v = vocab_open(BGE);
    char path[4096];
    const char *p = test_shared_path(BGE);
    if (!v || !p) {
        engine_vocab_free(v);
        SKIP("%s not available", BGE);
    }
    snprintf(path, sizeof path, "%s.inp", p);
    size_t n_src;
    char *src = slurp(path, &n_src);
    ASSERT_TRUE(src && n_src);
    size_t n = 100 * 1024;
    char *text = malloc(n);
    for (size_t i = 0; i < n; i++) text[i] = src[i % n_src];
    int32_t *ids = NULL;
    size_t n_ids = 0;
    uint64_t t0 = time_now_usec();
    ASSERT_OK(tokenize(v, text, n, 0, &ids, &n_ids));
    uint64_t t1 = time_now_usec();
    printf("speed bert-bge: tokenize 100 KiB -> %zu tokens in %.1f ms\n", n_ids,
           (t1 - t0) / 1000.0);
    free(ids);
    free(text);
    free(src);
    engine_vocab_free(v);
}

TEST_MAIN(T(vectors_bert_bge), T(bert_bge_texts), T(embed_bert_tiny), T(embed_nomic_bert_tiny),
          T(normalize_and_split), T(greedy_and_unk), T(normalizer_keys), T(specials_and_keys),
          T(detokenize_words), T(random_text_bert_bge), T(speed_bert_bge))
