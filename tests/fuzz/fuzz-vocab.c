/* Fuzz target for the tokenizers: arbitrary bytes are tokenized with each vocabulary
 * (with and without special-token parsing), then detokenized. Checks, beyond "no crash":
 * every id is in range, detokenize(tokenize(s)) == s where the vocabulary can represent s,
 * and the streaming detokenizer in VALID_UTF8 mode emits valid UTF-8 only. The same bytes
 * read as token ids (in range or not) are streamed through the detokenizer too.
 *
 * Vocabularies: two made here with the writer, always (an SPM one with byte fallback and a
 * byte-level BPE one with merges, a control and a user-defined token), so the target
 * never runs on nothing; and the real llama SPM, GPT-2 and deepseek-llm ones from
 * $WARM_SHARED_MODELS/vocab when they are there (the first input says on stderr which are
 * missing). Seeds: the 46 cases of a tokenizer test-vector file and a few special-token
 * strings. */
#include "engine/vocab-impl.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int fuzz_seeds(void (*add)(const uint8_t *data, size_t size));

static const char *const names[] = {"llama-spm", "gpt-2", "deepseek-llm"};
enum { N_MADE = 2 };
static struct engine_vocab *vocabs[N_MADE + ARRAY_SIZE(names)];
static bool loaded;

/* GPT-2's byte-level alphabet: byte b stands for itself when printable (33..126, 161..172,
 * 174..255), else for U+0100 + its rank among the others; written as UTF-8 to out. */
static size_t byte_char(int b, char out[3]) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    int rank = 0;
    for (int k = 0; k < b; k++)
        rank += !((k >= 33 && k <= 126) || (k >= 161 && k <= 172) || k >= 174);
    unsigned cp = printable ? (unsigned)b : 256u + (unsigned)rank;
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xc0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

/* A small vocabulary made with the writer: SPM (byte tokens <0xXX>) or byte-level BPE. */
static struct engine_vocab *vocab_make(bool bpe) {
    static const char *const spm_pieces[] = {
        "\xe2\x96\x81", "a", "b", "ab", "\xe2\x96\x81" "a", "\xe2\x96\x81" "ab", "c",
        "\xe2\x96\x81" "c", "<user>"};
    static const char *const bpe_pieces[] = {"ab", "\xc4\xa0" "a", "\xc4\xa0" "ab",
                                             "<|endoftext|>", "<user>"};
    static const struct gguf_str merges[] = {
        {3, "a b"}, {4, "\xc4\xa0 a"}, {5, "\xc4\xa0" "a b"}};
    static char bytes[256][8];
    struct gguf_str tok[3 + 256 + ARRAY_SIZE(spm_pieces)];
    float scores[ARRAY_SIZE(tok)];
    int32_t types[ARRAY_SIZE(tok)];
    size_t n = 0;
    static const char *const sp3[] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; !bpe && i < 3; i++, n++) {
        tok[n] = (struct gguf_str){strlen(sp3[i]), sp3[i]};
        types[n] = i == 0 ? ENGINE_TOKEN_TYPE_UNKNOWN : ENGINE_TOKEN_TYPE_CONTROL;
        scores[n] = 0;
    }
    for (int b = 0; b < 256; b++, n++) {
        size_t len = bpe ? byte_char(b, bytes[b]) : (size_t)snprintf(bytes[b], 8, "<0x%02X>", b);
        tok[n] = (struct gguf_str){len, bytes[b]};
        types[n] = bpe ? ENGINE_TOKEN_TYPE_NORMAL : ENGINE_TOKEN_TYPE_BYTE;
        scores[n] = 0;
    }
    const char *const *pieces = bpe ? bpe_pieces : spm_pieces;
    size_t n_pieces = bpe ? ARRAY_SIZE(bpe_pieces) : ARRAY_SIZE(spm_pieces);
    int32_t eot = -1;
    for (size_t i = 0; i < n_pieces; i++, n++) {
        tok[n] = (struct gguf_str){strlen(pieces[i]), pieces[i]};
        types[n] = !strcmp(pieces[i], "<user>")          ? ENGINE_TOKEN_TYPE_USER_DEFINED
                   : !strcmp(pieces[i], "<|endoftext|>") ? ENGINE_TOKEN_TYPE_CONTROL
                                                         : ENGINE_TOKEN_TYPE_NORMAL;
        if (!strcmp(pieces[i], "<|endoftext|>")) eot = (int32_t)n;
        scores[n] = -(float)i;
    }
    struct gguf_writer *w = NULL;
    if (gguf_writer_new(&w) < 0) return NULL;
    int r = gguf_writer_add_str(w, "tokenizer.ggml.model", bpe ? "gpt2" : "llama");
    if (r >= 0) r = gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", tok, n);
    if (r >= 0) r = gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, n);
    if (r >= 0) r = gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, n);
    if (r >= 0 && bpe)
        r = gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", merges, ARRAY_SIZE(merges));
    if (r >= 0 && bpe) r = gguf_writer_add_str(w, "tokenizer.ggml.pre", "llama-bpe");
    if (r >= 0) r = gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", bpe ? (uint32_t)eot : 1);
    if (r >= 0) r = gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", bpe ? (uint32_t)eot : 2);
    void *buf = NULL;
    size_t size = 0;
    struct gguf_file *f = NULL;
    struct engine_vocab *v = NULL;
    if (r >= 0 && gguf_writer_encode(w, &buf, &size) == 0 && gguf_open_mem(buf, size, &f, NULL) == 0) {
        engine_vocab_load(f, &v, NULL);
        gguf_close(f);
    }
    free(buf);
    gguf_writer_free(w);
    return v;
}

static void load_once(void) {
    if (loaded) return;
    loaded = true;
    for (int i = 0; i < N_MADE; i++)
        if (!(vocabs[i] = vocab_make(i == 1))) __builtin_trap(); /* never fuzz nothing */
    const char *dir = getenv("WARM_SHARED_MODELS");
    char missing[512] = "";
    for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", dir ? dir : "", names[i]);
        struct gguf_file *f = NULL;
        if (!dir || gguf_open(path, &f, NULL) < 0) {
            size_t at = strlen(missing);
            snprintf(missing + at, sizeof missing - at, " %s", names[i]);
            continue;
        }
        if (engine_vocab_load(f, &vocabs[N_MADE + i], NULL) < 0) __builtin_trap(); /* real files load */
        gguf_close(f);
    }
    if (missing[0])
        fprintf(stderr, "fuzz-vocab: real vocabularies missing under %s/vocab:%s (set "
                "WARM_SHARED_MODELS); only the 2 made-up ones stand in for them\n",
                dir ? dir : "$WARM_SHARED_MODELS", missing);
}

static bool utf8_valid(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t cl = vocab_utf8_len((const uint8_t *)s + i, n - i);
        if (!cl) return false;
        i += cl;
    }
    return true;
}

/* Whether detokenize(tokenize(s)) must give s back (see test-vocab.c round_trip_random). */
static bool representable(const struct engine_vocab *v, const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (engine_vocab_kind(v) == ENGINE_VOCAB_SPM) {
            if (i + 3 <= n && memcmp(s + i, "\xe2\x96\x81", 3) == 0) return false;
            continue;
        }
        int32_t id = engine_vocab_find(v, v->byte_utf8[s[i]], v->byte_utf8_len[s[i]]);
        if (id >= 0 && engine_vocab_token_type(v, id) != ENGINE_TOKEN_TYPE_NORMAL) return false;
    }
    /* User-defined tokens are matched as text and decode as text: fine for BPE (deepseek).
     * SPM, as llama.cpp, gives the raw text after one a dummy-prefix space of its own, which
     * the detokenizer keeps ("a<user>b" comes back "a<user> b"; the first libFuzzer run of
     * the made-up SPM vocabulary found it). */
    if (engine_vocab_kind(v) == ENGINE_VOCAB_SPM && v->add_space_prefix)
        for (uint32_t k = 0; k < v->n_special; k++) {
            int32_t id = v->special_ids[k];
            size_t len = 0;
            const char *text = engine_vocab_token_text(v, id, &len);
            if (engine_vocab_token_type(v, id) == ENGINE_TOKEN_TYPE_USER_DEFINED && len &&
                memmem(s, n, text, len))
                return false;
        }
    return true;
}

static void check_one(const struct engine_vocab *v, const uint8_t *data, size_t size,
                      unsigned flags) {
    size_t n = 0;
    int r = engine_vocab_tokenize(v, (const char *)data, size, flags, NULL, 0, &n);
    if (r != -ENOSPC && r != 0) __builtin_trap();
    int32_t *ids = malloc_array(n ? n : 1, sizeof *ids);
    if (!ids) return;
    size_t n2 = 0;
    if (engine_vocab_tokenize(v, (const char *)data, size, flags, ids, n, &n2) != 0 || n2 != n)
        __builtin_trap();
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= engine_vocab_n_tokens(v)) __builtin_trap();

    size_t len = 0;
    r = engine_vocab_detokenize(v, ids, n, ENGINE_DETOK_TEXT_START, NULL, 0, &len);
    if (r != 0 && r != -ENOSPC) __builtin_trap();
    char *out = malloc(len + 1);
    if (out) {
        size_t len2 = 0;
        if (engine_vocab_detokenize(v, ids, n, ENGINE_DETOK_TEXT_START, out, len, &len2) != 0 ||
            len2 != len)
            __builtin_trap();
        if (flags == 0 && representable(v, data, size) &&
            (len != size || memcmp(out, data, size) != 0))
            __builtin_trap();
        free(out);
    }

    /* streaming, valid UTF-8 only */
    size_t cap = engine_detok_min_cap(v);
    char *chunk = malloc(cap);
    if (chunk) {
        struct engine_detok dt;
        engine_detok_init(&dt, v, ENGINE_DETOK_VALID_UTF8 | ENGINE_DETOK_SPECIAL);
        for (size_t i = 0; i < n; i++) {
            r = engine_detok_feed(&dt, ids[i], chunk, cap);
            if (r < 0 || !utf8_valid(chunk, (size_t)r)) __builtin_trap();
        }
        r = engine_detok_flush(&dt, chunk, cap);
        if (r < 0 || !utf8_valid(chunk, (size_t)r)) __builtin_trap();
        free(chunk);
    }
    free(ids);
}

/* The bytes as little-endian 16-bit ids, some beyond the vocabulary, streamed raw. */
static void check_ids(const struct engine_vocab *v, const uint8_t *data, size_t size) {
    size_t cap = engine_detok_min_cap(v);
    char *chunk = malloc(cap);
    if (!chunk) return;
    struct engine_detok dt;
    engine_detok_init(&dt, v, size && (data[0] & 1) ? ENGINE_DETOK_SPECIAL : 0);
    for (size_t i = 0; i + 1 < size; i += 2) {
        int32_t id = (int32_t)(data[i] | data[i + 1] << 8) * ((data[i] & 0x80) ? 2 : 1);
        if (data[i + 1] == 0xFF) id = -id - 1;
        int r = engine_detok_feed(&dt, id, chunk, cap);
        if (r < 0 && (r != ERR_TOKEN || (id >= 0 && id < engine_vocab_n_tokens(v))))
            __builtin_trap();
    }
    if (engine_detok_flush(&dt, chunk, cap) < 0) __builtin_trap();
    free(chunk);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    load_once();
    if (size > 4096) size = 4096; /* arbitrary bytes need not be long; keeps runs quick */
    for (size_t i = 0; i < ARRAY_SIZE(vocabs); i++) {
        if (!vocabs[i]) continue;
        check_one(vocabs[i], data, size, 0);
        check_one(vocabs[i], data, size,
                  ENGINE_TOKENIZE_ADD_SPECIAL | ENGINE_TOKENIZE_PARSE_SPECIAL);
        check_ids(vocabs[i], data, size);
    }
    return 0;
}

int fuzz_seeds(void (*add)(const uint8_t *data, size_t size)) {
    static const char *const extra[] = {
        "<s>Hello</s> world",
        "a<|endoftext|>b<|endoftext|",
        "<\xef\xbd\x9c"
        "fim\xe2\x96\x81hole\xef\xbd\x9c>",
        "M\xc3\xbcller \xc3\xbf \xff\xfe\xc0 \xed\xa0\x80",
        "\xc2\xa0\xe3\x80\x80  \n\n\t x",
        "\xe2\x96\x81\xe2\x96\x81 <0x41>",
        "a<user>b", /* a user-defined token inside SPM text (see representable()) */
    };
    for (size_t i = 0; i < ARRAY_SIZE(extra); i++) add((const uint8_t *)extra[i], strlen(extra[i]));
    const char *dir = getenv("WARM_SHARED_MODELS");
    if (!dir) return 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-deepseek-llm.gguf.inp", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *sep = "\n__ggml_vocab_test__\n";
    for (char *p = buf, *e; (e = strstr(p, sep)); p = e + strlen(sep))
        add((const uint8_t *)p, (size_t)(e - p));
    return 0;
}
