/* Fuzz target for the tokenizers: arbitrary bytes are tokenized with a real vocabulary
 * (llama SPM, GPT-2, deepseek-llm; loaded once from $WARM_SHARED_MODELS/vocab) with and
 * without special-token parsing, then detokenized. Checks, beyond "no crash": every id is
 * in range, detokenize(tokenize(s)) == s where the vocabulary can represent s, and the
 * streaming detokenizer in VALID_UTF8 mode emits valid UTF-8 only. The same bytes read as
 * token ids (in range or not) are streamed through the detokenizer too. Seeds: the 46
 * cases of each tokenizer test-vector file and a few special-token strings. */
#include "engine/vocab-impl.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int fuzz_seeds(void (*add)(const uint8_t *data, size_t size));

static const char *const names[] = {"llama-spm", "gpt-2", "deepseek-llm"};
static struct engine_vocab *vocabs[ARRAY_SIZE(names)];
static bool loaded;

static void load_once(void) {
    if (loaded) return;
    loaded = true;
    const char *dir = getenv("WARM_SHARED_MODELS");
    for (size_t i = 0; dir && i < ARRAY_SIZE(names); i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", dir, names[i]);
        struct gguf_file *f = NULL;
        if (gguf_open(path, &f, NULL) < 0) continue;
        if (engine_vocab_load(f, &vocabs[i], NULL) < 0) __builtin_trap(); /* real files load */
        gguf_close(f);
    }
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
    /* user-defined tokens (deepseek) are matched as text but decode as text: fine */
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
