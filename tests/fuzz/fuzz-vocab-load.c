/* Fuzz target for vocabulary loading: the bytes are a GGUF file; when the reader accepts
 * it, engine_vocab_load() must either fail with a code or give a vocabulary that then
 * tokenizes a few fixed strings (ids in range) and detokenizes every id without crashing.
 * Seeds: tiny SPM and BPE vocabularies made with the writer (byte tokens, scores, types,
 * merges, special ids, a user-defined token). */
#include "engine/vocab-impl.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int fuzz_seeds(void (*add)(const uint8_t *data, size_t size));

static void exercise(const struct engine_vocab *v) {
    static const char *const texts[] = {
        "", "ab ab", "a<s>b</s>", "\xff\xc3", "<0x41> \xe2\x96\x81", "aaaa bbbb abab  \n\t!"};
    int32_t ids[256];
    for (size_t i = 0; i < ARRAY_SIZE(texts); i++)
        for (unsigned flags = 0; flags < 4; flags++) {
            size_t n = 0;
            int r = engine_vocab_tokenize(v, texts[i], strlen(texts[i]), flags, ids,
                                          ARRAY_SIZE(ids), &n);
            if (r == 0)
                for (size_t k = 0; k < n; k++)
                    if (ids[k] < 0 || ids[k] >= engine_vocab_n_tokens(v)) __builtin_trap();
        }
    size_t cap = engine_detok_min_cap(v);
    char *out = malloc(cap);
    if (!out) return;
    struct engine_detok dt;
    engine_detok_init(&dt, v, ENGINE_DETOK_TEXT_START | ENGINE_DETOK_SPECIAL);
    int32_t n_tok = MIN(engine_vocab_n_tokens(v), 4096);
    for (int32_t id = 0; id < n_tok; id++)
        if (engine_detok_feed(&dt, id, out, cap) < 0) __builtin_trap();
    if (engine_detok_flush(&dt, out, cap) < 0) __builtin_trap();
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct gguf_file *f = NULL;
    if (gguf_open_mem(data, size, &f, NULL) < 0) return 0;
    struct engine_vocab *v = NULL;
    struct err_detail d = {0};
    int r = engine_vocab_load(f, &v, &d);
    gguf_close(f);
    if (r < 0) {
        if (v || !d.msg[0]) __builtin_trap(); /* failures say why and return nothing */
        return 0;
    }
    exercise(v);
    engine_vocab_free(v);
    return 0;
}

/* Writes one seed: a vocabulary of the byte tokens plus a few pieces. */
static void seed_vocab(void (*add)(const uint8_t *, size_t), bool bpe) {
    struct gguf_writer *w = NULL;
    if (gguf_writer_new(&w) < 0) return;
    static const char *const extra[] = {"\xe2\x96\x81",
                                        "a",
                                        "b",
                                        "ab",
                                        "\xe2\x96\x81"
                                        "a",
                                        "\xc4\xa0",
                                        "<user>"};
    struct gguf_str tok[3 + 256 + ARRAY_SIZE(extra)];
    float scores[ARRAY_SIZE(tok)];
    int32_t types[ARRAY_SIZE(tok)];
    char bytes[256][8];
    size_t n = 0;
    static const char *const sp3[] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++, n++) {
        tok[n] = (struct gguf_str){strlen(sp3[i]), sp3[i]};
        types[n] = i == 0 ? ENGINE_TOKEN_TYPE_UNKNOWN : ENGINE_TOKEN_TYPE_CONTROL;
        scores[n] = 0;
    }
    for (int b = 0; b < 256; b++, n++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        tok[n] = (struct gguf_str){6, bytes[b]};
        types[n] = ENGINE_TOKEN_TYPE_BYTE;
        scores[n] = 0;
    }
    for (size_t i = 0; i < ARRAY_SIZE(extra); i++, n++) {
        tok[n] = (struct gguf_str){strlen(extra[i]), extra[i]};
        types[n] =
            i + 1 == ARRAY_SIZE(extra) ? ENGINE_TOKEN_TYPE_USER_DEFINED : ENGINE_TOKEN_TYPE_NORMAL;
        scores[n] = -(float)i;
    }
    static const struct gguf_str merges[] = {{3, "a b"}, {5, "\xc4\xa0 a"}};
    int r = gguf_writer_add_str(w, "tokenizer.ggml.model", bpe ? "gpt2" : "llama");
    if (r >= 0) r = gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", tok, n);
    if (r >= 0) r = gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, n);
    if (r >= 0) r = gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, n);
    if (r >= 0 && bpe) r = gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", merges, 2);
    if (r >= 0 && bpe) r = gguf_writer_add_str(w, "tokenizer.ggml.pre", "llama-bpe");
    if (r >= 0) r = gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
    if (r >= 0) r = gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (r >= 0) r = gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true);
    char path[] = "/tmp/fuzz-vocab-load-XXXXXX";
    int fd = r >= 0 ? mkstemp(path) : -1;
    if (fd >= 0) {
        close(fd);
        if (gguf_writer_save(w, path) >= 0) {
            FILE *f = fopen(path, "rb");
            static uint8_t buf[1 << 16];
            size_t len = f ? fread(buf, 1, sizeof buf, f) : 0;
            if (f) fclose(f);
            if (len) add(buf, len);
        }
        unlink(path);
    }
    gguf_writer_free(w);
}

int fuzz_seeds(void (*add)(const uint8_t *data, size_t size)) {
    seed_vocab(add, false);
    seed_vocab(add, true);
    return 0;
}
