/* Vocabulary loading and validation, token lookups, and the tokenize driver (BOS/EOS,
 * special-token partitioning, then SPM, BPE or WordPiece per raw fragment). */
#include "engine/vocab-impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define KEY_MODEL "tokenizer.ggml.model"
#define KEY_PRE "tokenizer.ggml.pre"
#define KEY_TOKENS "tokenizer.ggml.tokens"
#define KEY_SCORES "tokenizer.ggml.scores"
#define KEY_TYPES "tokenizer.ggml.token_type"
#define KEY_MERGES "tokenizer.ggml.merges"
#define KEY_ADD_BOS "tokenizer.ggml.add_bos_token"
#define KEY_ADD_EOS "tokenizer.ggml.add_eos_token"
#define KEY_ADD_SPACE "tokenizer.ggml.add_space_prefix"
#define KEY_CLS "tokenizer.ggml.cls_token_id"
#define KEY_SEP "tokenizer.ggml.seperator_token_id"
#define KEY_LOWERCASE "tokenizer.ggml.normalizer.lowercase"
#define KEY_STRIP_ACCENTS "tokenizer.ggml.normalizer.strip_accents"

/* Special-token ids: key -> field. (GGUF spells "seperator".) */
static const struct {
    const char *key;
    size_t field;
} id_keys[] = {
    {"tokenizer.ggml.bos_token_id", offsetof(struct engine_vocab, bos)},
    {"tokenizer.ggml.eos_token_id", offsetof(struct engine_vocab, eos)},
    {"tokenizer.ggml.eot_token_id", offsetof(struct engine_vocab, eot)},
    {"tokenizer.ggml.eom_token_id", offsetof(struct engine_vocab, eom)},
    {"tokenizer.ggml.unknown_token_id", offsetof(struct engine_vocab, unk)},
    {KEY_SEP, offsetof(struct engine_vocab, sep)},
    {"tokenizer.ggml.padding_token_id", offsetof(struct engine_vocab, pad)},
    {"tokenizer.ggml.mask_token_id", offsetof(struct engine_vocab, mask)},
};

/* Texts that end a turn in the chat formats we know; the first present one is EOT when the
 * file names none. */
static const char *const eog_texts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<EOT>",
    "_<EOT>",
    "<\xef\xbd\x9c"
    "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<|return|>",
    "<|call|>",
    "<end_of_utterance>",
    "<turn|>", /* Gemma 4's end of turn */
};
#define N_EOT_TEXTS 8 /* the first 8 of eog_texts may serve as EOT */

static const struct {
    const char *name;
    enum engine_vocab_kind kind;
} model_table[] = {
    {"llama", ENGINE_VOCAB_SPM},
    {"gpt2", ENGINE_VOCAB_BPE},
    {"gemma4", ENGINE_VOCAB_GEMMA4},
    {"bert", ENGINE_VOCAB_WPM},
};

/* ---- small helpers ------------------------------------------------------------------ */

int vocab_grow(void **p, size_t *cap, size_t n, size_t size) {
    if (n <= *cap) return 0;
    size_t c = *cap ? *cap : 16, bytes;
    while (c < n)
        if (!size_mul(c, 2, &c)) return ERR_OVERFLOW;
    if (!size_mul(c, size, &bytes)) return ERR_OVERFLOW;
    void *q = realloc(*p, bytes);
    if (!q) return -ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

int vocab_out_push(struct vocab_out *o, int32_t id) {
    int r = vocab_grow((void **)&o->ids, &o->cap, o->n + 1, sizeof(int32_t));
    if (r < 0) return r;
    o->ids[o->n++] = id;
    return 0;
}

size_t vocab_utf8_len(const uint8_t *s, size_t n) {
    if (n == 0) return 0;
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF; /* the second byte's range (no overlongs, surrogates) */
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return len;
}

uint32_t vocab_utf8_cpt(const uint8_t *s, size_t len) {
    static const uint8_t lead_mask[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
    uint32_t c = s[0] & lead_mask[len];
    for (size_t i = 1; i < len; i++) c = (c << 6) | (s[i] & 0x3F);
    return c;
}

size_t vocab_utf8_put(uint32_t c, char out[4]) {
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xC0 | (c >> 6));
        out[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xE0 | (c >> 12));
        out[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        out[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (c >> 18));
    out[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    out[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

/* A printable, bounded rendering of untrusted bytes for detail messages. */
static const char *shown(const char *s, size_t n, char buf[48]) {
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < 48; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            buf[o++] = (char)c;
        } else {
            snprintf(buf + o, 48 - o, "\\x%02x", c);
            o += 4;
        }
    }
    buf[o] = '\0';
    return buf;
}

/* ---- hash sets ---------------------------------------------------------------------- */

uint64_t vocab_hash_bytes(const void *p, size_t n) { return hash64(p, n); }

static int hash_init(struct vocab_hash *h, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1; /* n <= 2^24: no overflow */
    h->slots = calloc(cap, sizeof *h->slots);
    if (!h->slots) return -ENOMEM;
    h->mask = cap - 1;
    return 0;
}

static void hash_put(struct vocab_hash *h, uint64_t hash, uint32_t value) {
    size_t i = hash & h->mask;
    while (h->slots[i]) i = (i + 1) & h->mask;
    h->slots[i] = (hash & 0xFFFFFFFF00000000ull) | ((uint64_t)value + 1);
}

int32_t vocab_token_find(const struct engine_vocab *v, const char *s, size_t n) {
    if (n == 0 || n > VOCAB_MAX_TOKEN_BYTES) return ENGINE_TOKEN_NONE;
    uint64_t hash = vocab_hash_bytes(s, n);
    for (size_t i = hash & v->token_map.mask;; i = (i + 1) & v->token_map.mask) {
        uint64_t slot = v->token_map.slots[i];
        if (!slot) return ENGINE_TOKEN_NONE;
        if ((slot >> 32) != (hash >> 32)) continue;
        uint32_t id = (uint32_t)slot - 1;
        if (v->tokens[id].text_len == n && memcmp(vocab_text(v, id), s, n) == 0) return (int32_t)id;
    }
}

static uint64_t merge_hash(const char *s, size_t n, size_t split) {
    return vocab_hash_bytes(s, n) ^ ((uint64_t)split * 0x9E3779B97F4A7C15ull);
}

int32_t vocab_merge_find(const struct engine_vocab *v, const char *s, size_t n, size_t split) {
    if (!v->n_merges) return -1;
    uint64_t hash = merge_hash(s, n, split);
    for (size_t i = hash & v->merge_map.mask;; i = (i + 1) & v->merge_map.mask) {
        uint64_t slot = v->merge_map.slots[i];
        if (!slot) return -1;
        if ((slot >> 32) != (hash >> 32)) continue;
        uint32_t rank = (uint32_t)slot - 1;
        const struct vocab_merge *m = &v->merges[rank];
        if (m->len == n && m->split == split && memcmp(v->arena + m->off, s, n) == 0)
            return (int32_t)rank;
    }
}

/* ---- loading ------------------------------------------------------------------------ */

/* Appends n bytes to the arena; *ret_off is where they start. */
static int arena_put(struct engine_vocab *v, const void *p, size_t n, uint32_t *ret_off,
                     struct err_detail *d) {
    size_t end;
    if (!size_add(v->arena_len, n, &end) || end > UINT32_MAX)
        return err_set(d, ERR_VOCAB, "%s: the vocabulary's text exceeds 4 GiB", KEY_TOKENS);
    int r = vocab_grow((void **)&v->arena, &v->arena_cap, end, 1);
    if (r < 0) return r;
    if (p && n) memcpy(v->arena + v->arena_len, p, n);
    *ret_off = (uint32_t)v->arena_len;
    v->arena_len = end;
    return 0;
}

/* The array under key with elements of one of the types allowed, n of them (0 = any). */
static int get_array(const struct gguf_file *f, const char *key, const enum gguf_type *types,
                     size_t n_types, uint64_t n, const struct gguf_kv **ret, struct err_detail *d) {
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    *ret = NULL;
    if (!kv) return 0;
    if (kv->type != GGUF_TYPE_ARRAY)
        return err_set(d, ERR_VOCAB, "%s: expected an array of %s, found a %s", key,
                       gguf_type_name(types[0]), gguf_type_name(kv->type));
    bool ok = false;
    for (size_t i = 0; i < n_types; i++) ok |= kv->arr_type == types[i];
    if (!ok)
        return err_set(d, ERR_VOCAB, "%s: expected an array of %s, found an array of %s", key,
                       gguf_type_name(types[0]), gguf_type_name(kv->arr_type));
    if (n && kv->n != n)
        return err_set(d, ERR_VOCAB, "%s: %llu elements, but %s has %llu", key,
                       (unsigned long long)kv->n, KEY_TOKENS, (unsigned long long)n);
    *ret = kv;
    return 0;
}

static int read_bool(const struct gguf_file *f, const char *key, bool *val, struct err_detail *d) {
    bool b;
    int r = gguf_get_bool(f, key, &b, NULL);
    if (r == ERR_GGUF_MISSING) return 0;
    if (r < 0) return err_set(d, ERR_VOCAB, "%s: expected a bool", key);
    *val = b;
    return 0;
}

/* A special-token id: absent keeps the default; -1 / 0xFFFFFFFF mean none. */
static int read_id(const struct gguf_file *f, const char *key, uint32_t n_tokens, int32_t *id,
                   struct err_detail *d) {
    uint32_t u;
    int32_t s;
    int r = gguf_get_u32(f, key, &u, NULL);
    if (r == ERR_GGUF_MISSING) return 0;
    if (r == 0) {
        if (u == UINT32_MAX) {
            *id = ENGINE_TOKEN_NONE;
            return 0;
        }
        if (u >= n_tokens)
            return err_set(d, ERR_VOCAB, "%s = %u is not below n_vocab %u", key, u, n_tokens);
        *id = (int32_t)u;
        return 0;
    }
    if (gguf_get_i32(f, key, &s, NULL) == 0 && s == -1) {
        *id = ENGINE_TOKEN_NONE;
        return 0;
    }
    return err_set(d, ERR_VOCAB, "%s: not a token id (an integer below n_vocab %u)", key, n_tokens);
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* "<0xHH>" -> HH, or -1. */
static int parse_byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int hi = hexval(s[3]), lo = hexval(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

static int load_tokens(struct engine_vocab *v, const struct gguf_file *f, struct err_detail *d) {
    static const enum gguf_type t_str[] = {GGUF_TYPE_STRING};
    static const enum gguf_type t_f32[] = {GGUF_TYPE_FLOAT32};
    static const enum gguf_type t_int[] = {GGUF_TYPE_INT32, GGUF_TYPE_UINT32};
    const struct gguf_kv *kt, *ks, *ky;
    int r = get_array(f, KEY_TOKENS, t_str, 1, 0, &kt, d);
    if (r < 0) return r;
    if (!kt) return err_set(d, ERR_VOCAB, "%s: missing", KEY_TOKENS);
    if (kt->n == 0) return err_set(d, ERR_VOCAB, "%s: the vocabulary is empty", KEY_TOKENS);
    if (kt->n > VOCAB_MAX_TOKENS)
        return err_set(d, ERR_VOCAB, "%s: %llu tokens, more than %u", KEY_TOKENS,
                       (unsigned long long)kt->n, VOCAB_MAX_TOKENS);
    uint32_t n = (uint32_t)kt->n;
    if ((r = get_array(f, KEY_SCORES, t_f32, 1, n, &ks, d)) < 0) return r;
    if ((r = get_array(f, KEY_TYPES, t_int, 2, n, &ky, d)) < 0) return r;

    v->tokens = calloc(n, sizeof *v->tokens);
    if (!v->tokens) return -ENOMEM;
    v->n_tokens = n;
    for (uint32_t i = 0; i < n; i++) {
        struct vocab_token *t = &v->tokens[i];
        struct gguf_str s = gguf_kv_str(kt, i);
        if (s.len > VOCAB_MAX_TOKEN_BYTES)
            return err_set(d, ERR_VOCAB, "%s[%u]: %llu bytes, more than %u", KEY_TOKENS, i,
                           (unsigned long long)s.len, VOCAB_MAX_TOKEN_BYTES);
        if ((r = arena_put(v, s.ptr, s.len, &t->text_off, d)) < 0) return r;
        t->text_len = (uint32_t)s.len;
        v->max_text_len = MAX(v->max_text_len, t->text_len);
        t->type = ENGINE_TOKEN_TYPE_NORMAL;
        if (ks) {
            memcpy(&t->score, (const char *)ks->data + (size_t)i * 4, 4);
            if (isnan(t->score))
                return err_set(d, ERR_VOCAB, "%s[%u] is not a number", KEY_SCORES, i);
        }
        if (ky) {
            int32_t ty;
            memcpy(&ty, (const char *)ky->data + (size_t)i * 4, 4);
            /* unknown types are UNDEFINED, as in llama.cpp: encoded and decoded as text */
            t->type =
                ty >= 0 && ty < ENGINE_TOKEN_TYPE_COUNT ? (uint8_t)ty : ENGINE_TOKEN_TYPE_UNDEFINED;
        }
    }

    /* text -> id; two tokens with one text would make encoding ambiguous */
    if ((r = hash_init(&v->token_map, n)) < 0) return r;
    for (uint32_t i = 0; i < n; i++) {
        const struct vocab_token *t = &v->tokens[i];
        if (t->text_len == 0) continue; /* never produced by encoding */
        int32_t dup = vocab_token_find(v, vocab_text(v, i), t->text_len);
        if (dup >= 0) {
            char b[48];
            return err_set(d, ERR_VOCAB, "%s[%u]: '%s' duplicates token %d", KEY_TOKENS, i,
                           shown(vocab_text(v, i), t->text_len, b), dup);
        }
        hash_put(&v->token_map, vocab_hash_bytes(vocab_text(v, i), t->text_len), i);
    }

    for (int b = 0; b < 256; b++) v->byte_token[b] = ENGINE_TOKEN_NONE;
    for (uint32_t i = 0; i < n; i++) {
        const struct vocab_token *t = &v->tokens[i];
        if (t->type != ENGINE_TOKEN_TYPE_BYTE) continue;
        int b = parse_byte_token(vocab_text(v, i), t->text_len);
        if (b < 0) {
            char buf[48];
            return err_set(d, ERR_VOCAB, "%s[%u]: byte token '%s' is not <0xHH>", KEY_TOKENS, i,
                           shown(vocab_text(v, i), t->text_len, buf));
        }
        if (v->byte_token[b] < 0) v->byte_token[b] = (int32_t)i;
    }
    return 0;
}

static int load_merges(struct engine_vocab *v, const struct gguf_file *f, struct err_detail *d) {
    static const enum gguf_type t_str[] = {GGUF_TYPE_STRING};
    const struct gguf_kv *km;
    int r = get_array(f, KEY_MERGES, t_str, 1, 0, &km, d);
    if (r < 0) return r;
    if (!km) return err_set(d, ERR_VOCAB, "%s: missing (a gpt2 vocabulary needs it)", KEY_MERGES);
    if (km->n > VOCAB_MAX_TOKENS)
        return err_set(d, ERR_VOCAB, "%s: %llu merges, more than %u", KEY_MERGES,
                       (unsigned long long)km->n, VOCAB_MAX_TOKENS);
    uint32_t n = (uint32_t)km->n;
    v->merges = calloc(n ? n : 1, sizeof *v->merges);
    if (!v->merges) return -ENOMEM;
    if ((r = hash_init(&v->merge_map, n)) < 0) return r;
    for (uint32_t i = 0; i < n; i++) {
        struct gguf_str s = gguf_kv_str(km, i);
        /* "a b": split at the first space after the first byte (a may be a lone space) */
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (!sp || s.len > 2 * (uint64_t)VOCAB_MAX_TOKEN_BYTES) {
            char b[48];
            return err_set(d, ERR_VOCAB, "%s[%u]: '%s' is not two tokens separated by a space",
                           KEY_MERGES, i, shown(s.ptr, MIN(s.len, 40), b));
        }
        size_t la = (size_t)(sp - s.ptr), lb = s.len - la - 1;
        struct vocab_merge *m = &v->merges[i];
        uint32_t off_b;
        if ((r = arena_put(v, s.ptr, la, &m->off, d)) < 0) return r;
        if ((r = arena_put(v, sp + 1, lb, &off_b, d)) < 0) return r;
        m->len = (uint32_t)(la + lb);
        m->split = (uint32_t)la;
        v->n_merges = i + 1;
        hash_put(&v->merge_map, merge_hash(v->arena + m->off, m->len, m->split), i);
    }
    return 0;
}

/* A default special id: id where the vocabulary is that long, else none. */
static int32_t default_id(const struct engine_vocab *v, uint32_t id) {
    return id < v->n_tokens ? (int32_t)id : ENGINE_TOKEN_NONE;
}

static int load_specials(struct engine_vocab *v, const struct gguf_file *f, struct err_detail *d) {
    int r;
    bool spm = v->kind == ENGINE_VOCAB_SPM, wpm = v->kind == ENGINE_VOCAB_WPM;
    v->bos = v->eos = v->eot = v->eom = v->unk = ENGINE_TOKEN_NONE;
    v->sep = v->pad = v->mask = ENGINE_TOKEN_NONE;
    if (spm) { /* llama's defaults, where the vocabulary has those ids */
        v->unk = default_id(v, 0);
        v->bos = default_id(v, 1);
        v->eos = default_id(v, 2);
    }
    if (wpm) { /* bert-base-uncased's [PAD] [UNK] [CLS] [SEP] [MASK], as llama.cpp */
        v->pad = default_id(v, 0);
        v->unk = default_id(v, 100);
        v->bos = default_id(v, 101);
        v->sep = default_id(v, 102);
        v->mask = default_id(v, 103);
    }
    for (size_t i = 0; i < ARRAY_SIZE(id_keys); i++) {
        int32_t *id = (int32_t *)((char *)v + id_keys[i].field);
        if ((r = read_id(f, id_keys[i].key, v->n_tokens, id, d)) < 0) return r;
    }
    /* WordPiece starts with [CLS]: tokenizer.ggml.cls_token_id where no bos_token_id says */
    if (wpm && !gguf_find_kv(f, "tokenizer.ggml.bos_token_id") &&
        (r = read_id(f, KEY_CLS, v->n_tokens, &v->bos, d)) < 0)
        return r;
    v->add_bos = spm || wpm;
    v->add_eos = wpm; /* WordPiece ends with [SEP] */
    v->add_space_prefix = spm;
    if ((r = read_bool(f, KEY_ADD_BOS, &v->add_bos, d)) < 0) return r;
    if ((r = read_bool(f, KEY_ADD_EOS, &v->add_eos, d)) < 0) return r;
    if ((r = read_bool(f, KEY_ADD_SPACE, &v->add_space_prefix, d)) < 0) return r;
    v->wpm_lowercase = true;
    if ((r = read_bool(f, KEY_LOWERCASE, &v->wpm_lowercase, d)) < 0) return r;
    v->wpm_strip_accents = v->wpm_lowercase;
    if ((r = read_bool(f, KEY_STRIP_ACCENTS, &v->wpm_strip_accents, d)) < 0) return r;
    /* llama.cpp adds BOS to every Gemma 4 prompt, whatever the file says (#21500) */
    if (v->kind == ENGINE_VOCAB_GEMMA4 && v->bos >= 0) v->add_bos = true;
    if (v->add_bos && v->bos < 0)
        return err_set(d, ERR_VOCAB, "%s is set but there is no tokenizer.ggml.bos_token_id%s",
                       KEY_ADD_BOS, wpm ? " or " KEY_CLS : "");
    if (v->add_eos && wpm && v->sep < 0)
        return err_set(d, ERR_VOCAB, "%s is set but there is no %s", KEY_ADD_EOS, KEY_SEP);
    if (v->add_eos && !wpm && v->eos < 0)
        return err_set(d, ERR_VOCAB, "%s is set but there is no tokenizer.ggml.eos_token_id",
                       KEY_ADD_EOS);

    for (size_t i = 0; i < ARRAY_SIZE(eog_texts); i++) {
        int32_t id = vocab_token_find(v, eog_texts[i], strlen(eog_texts[i]));
        if (id < 0) continue;
        v->tokens[id].flags |= VOCAB_TOKEN_EOG;
        if (v->eot < 0 && i < N_EOT_TEXTS) v->eot = id;
    }
    /* gpt-oss's harmony: <|end|> closes a message and the model goes on (<|start|>...);
     * its turn ends with <|return|> or <|call|> (llama.cpp takes <|end|> out the same way) */
    int32_t end = vocab_token_find(v, "<|end|>", 7);
    if (end >= 0 && vocab_token_find(v, "<|return|>", 10) >= 0 &&
        vocab_token_find(v, "<|call|>", 8) >= 0) {
        v->tokens[end].flags &= ~VOCAB_TOKEN_EOG;
        if (v->eot == end) v->eot = ENGINE_TOKEN_NONE;
    }
    const int32_t eog_ids[] = {v->eos, v->eot, v->eom};
    for (size_t i = 0; i < ARRAY_SIZE(eog_ids); i++)
        if (eog_ids[i] >= 0) v->tokens[eog_ids[i]].flags |= VOCAB_TOKEN_EOG;
    return 0;
}

/* The decoded bytes of every token, appended to the arena (shared with the text where
 * they are equal). */
static int build_pieces(struct engine_vocab *v, struct err_detail *d) {
    uint32_t max = 0;
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        struct vocab_token *t = &v->tokens[i];
        t->piece_off = t->text_off;
        t->piece_len = t->text_len;
        switch (t->type) {
        case ENGINE_TOKEN_TYPE_CONTROL:
        case ENGINE_TOKEN_TYPE_UNKNOWN:
            t->flags |= VOCAB_TOKEN_SPECIAL;
            break;
        case ENGINE_TOKEN_TYPE_USER_DEFINED:
            break;
        case ENGINE_TOKEN_TYPE_BYTE: {
            char b = (char)parse_byte_token(vocab_text(v, i), t->text_len);
            int r = arena_put(v, &b, 1, &t->piece_off, d);
            if (r < 0) return r;
            t->piece_len = 1;
            break;
        }
        default: { /* normal text: SPM "▁" -> ' ', BPE alphabet -> bytes (never longer) */
            uint32_t off = 0;
            int r = arena_put(v, NULL, t->text_len, &off, d);
            if (r < 0) return r;
            const char *src = vocab_text(v, i);
            char *dst = v->arena + off;
            size_t n = 0;
            if (v->kind == ENGINE_VOCAB_BPE) {
                n = vocab_bpe_decode(v, src, t->text_len, dst);
            } else {
                for (size_t k = 0; k < t->text_len;) {
                    if (k + 3 <= t->text_len && memcmp(src + k, "\xe2\x96\x81", 3) == 0) {
                        dst[n++] = ' ';
                        k += 3;
                    } else {
                        dst[n++] = src[k++];
                    }
                }
            }
            if (n == t->text_len && memcmp(dst, src, n) == 0) {
                v->arena_len = off; /* same as the text: give the bytes back */
            } else {
                t->piece_off = off;
                t->piece_len = (uint32_t)n;
                v->arena_len = off + n;
            }
            break;
        }
        }
        max = MAX(max, t->piece_len);
    }
    v->max_piece_len = max;
    return 0;
}

struct special_key {
    uint8_t first;
    uint32_t len;
    int32_t id;
};

static int special_cmp(const void *pa, const void *pb) {
    const struct special_key *a = pa, *b = pb;
    if (a->first != b->first) return a->first < b->first ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1; /* longest first */
    return a->id < b->id ? -1 : a->id > b->id;
}

/* Control, unknown and user-defined tokens, matched as whole strings before encoding. */
static int build_specials(struct engine_vocab *v) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        uint8_t ty = v->tokens[i].type;
        if (v->tokens[i].text_len &&
            (ty == ENGINE_TOKEN_TYPE_CONTROL || ty == ENGINE_TOKEN_TYPE_UNKNOWN ||
             ty == ENGINE_TOKEN_TYPE_USER_DEFINED))
            n++;
    }
    memset(v->special_start, 0, sizeof v->special_start);
    if (!n) return 0;
    struct special_key *keys = malloc_array(n, sizeof *keys);
    v->special_ids = malloc_array(n, sizeof *v->special_ids);
    if (!keys || !v->special_ids) {
        free(keys);
        return -ENOMEM;
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        const struct vocab_token *t = &v->tokens[i];
        if (t->text_len &&
            (t->type == ENGINE_TOKEN_TYPE_CONTROL || t->type == ENGINE_TOKEN_TYPE_UNKNOWN ||
             t->type == ENGINE_TOKEN_TYPE_USER_DEFINED))
            keys[k++] = (struct special_key){(uint8_t)vocab_text(v, i)[0], t->text_len, (int32_t)i};
    }
    qsort(keys, n, sizeof *keys, special_cmp);
    v->special_lens = malloc_array(n, sizeof *v->special_lens);
    if (!v->special_lens) {
        free(keys);
        return -ENOMEM;
    }
    memset(v->special_len_start, 0, sizeof v->special_len_start);
    uint32_t n_lens = 0;
    for (uint32_t i = 0; i < n; i++) {
        v->special_ids[i] = keys[i].id;
        v->special_start[keys[i].first + 1]++;
        if (i == 0 || keys[i].first != keys[i - 1].first || keys[i].len != keys[i - 1].len) {
            v->special_lens[n_lens++] = keys[i].len; /* sorted: equal lengths are adjacent */
            v->special_len_start[keys[i].first + 1]++;
        }
    }
    for (int c = 0; c < 256; c++) {
        v->special_start[c + 1] += v->special_start[c];
        v->special_len_start[c + 1] += v->special_len_start[c];
    }
    v->n_special = n;
    free(keys);
    return 0;
}

static int vocab_load_all(struct engine_vocab *v, const struct gguf_file *f, struct err_detail *d) {
    struct gguf_str model;
    int r = gguf_get_str(f, KEY_MODEL, &model, NULL);
    if (r == ERR_GGUF_MISSING) return err_set(d, ERR_VOCAB, "%s: missing", KEY_MODEL);
    if (r < 0) return err_set(d, ERR_VOCAB, "%s: expected a string", KEY_MODEL);
    size_t k = 0;
    while (k < ARRAY_SIZE(model_table) && !gguf_str_eq(model, model_table[k].name)) k++;
    if (k == ARRAY_SIZE(model_table)) {
        char b[48];
        return err_set(d, ERR_UNSUPPORTED, "%s: '%s' is not supported (llama, gpt2, gemma4, bert)",
                       KEY_MODEL, shown(model.ptr, model.len, b));
    }
    v->kind = model_table[k].kind;
    if ((r = load_tokens(v, f, d)) < 0) return r;
    if (v->kind == ENGINE_VOCAB_BPE) {
        vocab_bpe_init_bytes(v);
        if ((r = load_merges(v, f, d)) < 0) return r;
        struct gguf_str pre;
        r = gguf_get_str(f, KEY_PRE, &pre, NULL);
        if (r < 0 && r != ERR_GGUF_MISSING)
            return err_set(d, ERR_VOCAB, "%s: expected a string", KEY_PRE);
        r = r == 0 ? vocab_pre_load(v, pre.ptr, pre.len, d) : vocab_pre_load(v, NULL, 0, d);
        if (r < 0) return r;
    }
    if (v->kind == ENGINE_VOCAB_GEMMA4 && (r = load_merges(v, f, d)) < 0) return r;
    if ((r = load_specials(v, f, d)) < 0) return r;
    if ((r = build_pieces(v, d)) < 0) return r;
    return build_specials(v);
}

int engine_vocab_load(const struct gguf_file *f, struct engine_vocab **ret, struct err_detail *d) {
    if (!f || !ret) return err_set(d, ERR_INVALID, "engine_vocab_load: NULL argument");
    struct engine_vocab *v = calloc(1, sizeof *v);
    if (!v) return -ENOMEM;
    int r = vocab_load_all(v, f, d);
    if (r < 0) {
        engine_vocab_free(v);
        return r;
    }
    *ret = v;
    return 0;
}

void engine_vocab_free(struct engine_vocab *v) {
    if (!v) return;
    vocab_pre_free(v);
    free(v->tokens);
    free(v->arena);
    free(v->token_map.slots);
    free(v->merges);
    free(v->merge_map.slots);
    free(v->special_ids);
    free(v->special_lens);
    free(v);
}

/* ---- getters ------------------------------------------------------------------------ */

enum engine_vocab_kind engine_vocab_kind(const struct engine_vocab *v) { return v->kind; }
const char *engine_vocab_pre_name(const struct engine_vocab *v) { return vocab_pre_name(v->pre); }
int32_t engine_vocab_n_tokens(const struct engine_vocab *v) { return (int32_t)v->n_tokens; }
int32_t engine_vocab_bos(const struct engine_vocab *v) { return v->bos; }
int32_t engine_vocab_eos(const struct engine_vocab *v) { return v->eos; }
int32_t engine_vocab_eot(const struct engine_vocab *v) { return v->eot; }
int32_t engine_vocab_unk(const struct engine_vocab *v) { return v->unk; }
int32_t engine_vocab_pad(const struct engine_vocab *v) { return v->pad; }
bool engine_vocab_add_bos(const struct engine_vocab *v) { return v->add_bos; }
bool engine_vocab_add_eos(const struct engine_vocab *v) { return v->add_eos; }

bool engine_vocab_is_eog(const struct engine_vocab *v, int32_t id) {
    return id >= 0 && (uint32_t)id < v->n_tokens && (v->tokens[id].flags & VOCAB_TOKEN_EOG);
}

enum engine_token_type engine_vocab_token_type(const struct engine_vocab *v, int32_t id) {
    if (id < 0 || (uint32_t)id >= v->n_tokens) return ENGINE_TOKEN_TYPE_UNDEFINED;
    return (enum engine_token_type)v->tokens[id].type;
}

const char *engine_vocab_token_text(const struct engine_vocab *v, int32_t id, size_t *ret_len) {
    if (id < 0 || (uint32_t)id >= v->n_tokens) {
        if (ret_len) *ret_len = 0;
        return NULL;
    }
    if (ret_len) *ret_len = v->tokens[id].text_len;
    return vocab_text(v, (uint32_t)id);
}

int32_t engine_vocab_find(const struct engine_vocab *v, const char *text, size_t len) {
    return text ? vocab_token_find(v, text, len) : ENGINE_TOKEN_NONE;
}

/* ---- tokenize ----------------------------------------------------------------------- */

static bool special_allowed(const struct vocab_token *t, unsigned flags) {
    if (t->type == ENGINE_TOKEN_TYPE_USER_DEFINED) return true;
    return (flags & ENGINE_TOKENIZE_PARSE_SPECIAL) &&
           (t->type == ENGINE_TOKEN_TYPE_CONTROL || t->type == ENGINE_TOKEN_TYPE_UNKNOWN);
}

/* The special token starting at p (longest first), if any may match under flags. Compares
 * each candidate, or hashes p at each candidate length when that is fewer steps. */
static int32_t special_at(const struct engine_vocab *v, const char *p, size_t n, unsigned flags) {
    uint8_t c = (uint8_t)p[0];
    uint32_t k0 = v->special_start[c], k1 = v->special_start[c + 1];
    uint32_t l0 = v->special_len_start[c], l1 = v->special_len_start[c + 1];
    if (l1 - l0 < k1 - k0) {
        for (uint32_t k = l0; k < l1; k++) {
            if (v->special_lens[k] > n) continue;
            int32_t id = vocab_token_find(v, p, v->special_lens[k]);
            if (id >= 0 && special_allowed(&v->tokens[id], flags)) return id;
        }
        return ENGINE_TOKEN_NONE;
    }
    for (uint32_t k = k0; k < k1; k++) {
        int32_t id = v->special_ids[k];
        const struct vocab_token *t = &v->tokens[id];
        if (t->text_len > n || !special_allowed(t, flags)) continue;
        if (memcmp(vocab_text(v, (uint32_t)id), p, t->text_len) == 0) return id;
    }
    return ENGINE_TOKEN_NONE;
}

/* A raw fragment always starts the text or follows a special token, so SPM's dummy prefix
 * applies to every fragment (llama.cpp: "prefix with space if previous is special"). */
static int encode_fragment(const struct engine_vocab *v, const char *p, size_t n,
                           struct vocab_out *out, struct vocab_scratch *s) {
    if (v->kind == ENGINE_VOCAB_SPM) return vocab_spm_encode(v, p, n, v->add_space_prefix, out, s);
    if (v->kind == ENGINE_VOCAB_WPM) return vocab_wpm_encode(v, p, n, out, s);
    return vocab_bpe_encode(v, p, n, out, s);
}

int engine_vocab_tokenize(const struct engine_vocab *v, const char *text, size_t len,
                          unsigned flags, int32_t *tokens, size_t cap, size_t *ret_n) {
    if (!v || !ret_n || (!text && len) || (!tokens && cap)) return ERR_INVALID;
    if (len > ENGINE_VOCAB_MAX_TEXT_BYTES) return ERR_TOO_LARGE;
    struct vocab_out out = {0};
    struct vocab_scratch s = {0};
    int r = 0;
    if ((flags & ENGINE_TOKENIZE_ADD_SPECIAL) && v->add_bos) r = vocab_out_push(&out, v->bos);
    size_t frag = 0;
    if (v->n_special) {
        for (size_t i = 0; r >= 0 && i < len;) {
            uint8_t c = (uint8_t)text[i];
            int32_t id = v->special_start[c] == v->special_start[c + 1]
                             ? ENGINE_TOKEN_NONE
                             : special_at(v, text + i, len - i, flags);
            if (id < 0) {
                i++;
                continue;
            }
            if (i > frag) {
                r = encode_fragment(v, text + frag, i - frag, &out, &s);
                if (r < 0) break;
            }
            r = vocab_out_push(&out, id);
            i += v->tokens[id].text_len;
            frag = i;
        }
    }
    if (r >= 0 && len > frag) r = encode_fragment(v, text + frag, len - frag, &out, &s);
    if (r >= 0 && (flags & ENGINE_TOKENIZE_ADD_SPECIAL) && v->add_eos)
        r = vocab_out_push(&out, v->kind == ENGINE_VOCAB_WPM ? v->sep : v->eos);
    if (r >= 0) {
        *ret_n = out.n;
        if (out.n > cap)
            r = -ENOSPC;
        else if (out.n)
            memcpy(tokens, out.ids, out.n * sizeof *tokens);
    }
    free(out.ids);
    vocab_scratch_done(&s);
    return r;
}
