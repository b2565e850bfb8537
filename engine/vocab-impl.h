/* Private to engine/vocab*.c: the loaded vocabulary's layout and the helpers the SPM, BPE,
 * WordPiece, pre-tokenizer and detokenizer files share. */
#pragma once

#include "engine/vocab.h"

#define VOCAB_MAX_TOKENS ((uint32_t)1 << 24)      /* largest real vocabularies: ~260 K */
#define VOCAB_MAX_TOKEN_BYTES ((uint32_t)1 << 16) /* one token's text */
#define VOCAB_MAX_REGEXES 8

enum vocab_token_flag {
    VOCAB_TOKEN_EOG = 1u << 0,     /* ends generation */
    VOCAB_TOKEN_SPECIAL = 1u << 1, /* control or unknown: rendered only with _SPECIAL */
};

struct vocab_token {
    uint32_t text_off, text_len;   /* stored text, in arena */
    uint32_t piece_off, piece_len; /* decoded bytes, in arena */
    float score;                   /* SPM merge priority (higher first) */
    uint8_t type;                  /* enum engine_token_type */
    uint8_t flags;                 /* enum vocab_token_flag */
};

/* A merge "a b" of tokenizer.ggml.merges stored as the concatenation ab and the length of
 * a, so a candidate pair of adjacent symbols is looked up without copying. */
struct vocab_merge {
    uint32_t off, len; /* ab, in arena */
    uint32_t split;    /* bytes of a */
};

/* Open-addressing hash set of uint32 values (value + 1 in the low half of a slot, the
 * key's hash in the high half; 0 = empty). Keys live elsewhere; callers compare them. */
struct vocab_hash {
    uint64_t *slots;
    size_t mask;
};

struct vocab_pre; /* vocab-pre.c */

struct engine_vocab {
    enum engine_vocab_kind kind;
    uint32_t n_tokens;
    struct vocab_token *tokens; /* [n_tokens] */
    char *arena;                /* texts, pieces, merges */
    size_t arena_len, arena_cap;
    struct vocab_hash token_map; /* stored text -> id (non-empty texts) */

    struct vocab_merge *merges; /* [n_merges], index = rank */
    uint32_t n_merges;
    struct vocab_hash merge_map; /* (ab, split) -> rank */

    int32_t byte_token[256]; /* <0xHH> tokens, ENGINE_TOKEN_NONE where absent */
    /* GPT-2 byte alphabet: byte b is the code point byte_cpt[b] (UTF-8 in byte_utf8). */
    uint16_t byte_cpt[256];
    char byte_utf8[256][2];
    uint8_t byte_utf8_len[256];
    int16_t cpt_byte[512]; /* the inverse: code point -> byte, -1 outside the alphabet */

    /* Tokens matched as whole strings before encoding, sorted by first byte, then longest
     * first; special_start[c] .. special_start[c + 1] are those starting with byte c. */
    int32_t *special_ids;
    uint32_t n_special;
    uint32_t special_start[257];
    /* The distinct lengths of each group, longest first (special_len_start like above):
     * a group of many tokens with few lengths ("[PAD0]".."[PAD99999]") is searched by
     * hashing the text at each length instead of comparing every token. */
    uint32_t *special_lens;
    uint32_t special_len_start[257];

    int32_t bos, eos, eot, eom, unk, sep, pad, mask;
    bool add_bos, add_eos, add_space_prefix;
    /* WordPiece: tokenizer.ggml.normalizer.lowercase / .strip_accents */
    bool wpm_lowercase, wpm_strip_accents;
    uint32_t max_piece_len;
    uint32_t max_text_len; /* the longest stored text, in bytes */

    const struct vocab_pre *pre;    /* NULL for SPM */
    void *regex[VOCAB_MAX_REGEXES]; /* compiled pcre2_code_8 *, pre->n_regex of them */
};

/* A growable id array. */
struct vocab_out {
    int32_t *ids;
    size_t n, cap;
};
int vocab_out_push(struct vocab_out *o, int32_t id);

/* Scratch one tokenize call reuses across fragments and words. */
struct vocab_scratch {
    void *sym; /* symbols (vocab-spm.c / vocab-bpe.c layout) */
    size_t sym_cap;
    void *heap; /* bigram heap */
    size_t heap_cap;
    char *buf; /* escaped or byte-mapped text */
    size_t buf_cap;
    void *spans; /* pre-tokenizer pieces */
    size_t spans_cap;
    void *spans2;
    size_t spans2_cap;
    char *sub; /* pre-tokenizer subject with whitespace folded */
    size_t sub_cap;
    uint32_t *sub_map;
    size_t sub_map_cap;
    void *match_data; /* pcre2_match_data_8 * */
    void *mcontext;   /* pcre2_match_context_8 * */
    void *jit_stack;  /* pcre2_jit_stack_8 * */
};
void vocab_scratch_done(struct vocab_scratch *s);
/* Grows *p to hold n elements of size bytes; -ENOMEM / ERR_OVERFLOW. */
int vocab_grow(void **p, size_t *cap, size_t n, size_t size);

/* Token lookups. */
uint64_t vocab_hash_bytes(const void *p, size_t n);
int32_t vocab_token_find(const struct engine_vocab *v, const char *s, size_t n);
/* Rank of merging adjacent symbols whose bytes are s[0..n) split after `split`, or -1. */
int32_t vocab_merge_find(const struct engine_vocab *v, const char *s, size_t n, size_t split);
static inline const char *vocab_text(const struct engine_vocab *v, uint32_t id) {
    return v->arena + v->tokens[id].text_off;
}

/* UTF-8: the length of the valid sequence at s[0..n), or 0 when s[0] does not start one
 * (an invalid or truncated sequence). Overlongs and surrogates are invalid. */
size_t vocab_utf8_len(const uint8_t *s, size_t n);
/* Decodes the valid sequence of length len at s. */
uint32_t vocab_utf8_cpt(const uint8_t *s, size_t len);
size_t vocab_utf8_put(uint32_t cpt, char out[4]);

/* SPM: encodes one raw-text fragment (no special tokens in it). */
int vocab_spm_encode(const struct engine_vocab *v, const char *text, size_t len, bool space_prefix,
                     struct vocab_out *out, struct vocab_scratch *s);
/* BPE: builds the byte alphabet into v (at load). */
void vocab_bpe_init_bytes(struct engine_vocab *v);
/* BPE: pre-splits and encodes one raw-text fragment. */
int vocab_bpe_encode(const struct engine_vocab *v, const char *text, size_t len,
                     struct vocab_out *out, struct vocab_scratch *s);
/* Decodes a BPE token's stored text to bytes (out holds at least text_len bytes). */
size_t vocab_bpe_decode(const struct engine_vocab *v, const char *text, size_t len, char *out);

/* WordPiece: normalizes, pre-splits and encodes one raw-text fragment (vocab-wpm.c). */
int vocab_wpm_encode(const struct engine_vocab *v, const char *text, size_t len,
                     struct vocab_out *out, struct vocab_scratch *s);

/* Pre-tokenizer: looks name up and compiles its regexes into v. */
int vocab_pre_load(struct engine_vocab *v, const char *name, size_t name_len, struct err_detail *d);
void vocab_pre_free(struct engine_vocab *v);
const char *vocab_pre_name(const struct vocab_pre *p);
bool vocab_pre_ignore_merges(const struct vocab_pre *p);
/* For tests: compiles every row of the table; returns the row count or an error. */
int vocab_pre_selftest(void);

/* A piece of the text: [off, off + len). */
struct vocab_span {
    uint32_t off, len;
};
/* Splits text[0..len) with the vocabulary's regexes; *ret_spans points into scratch. */
int vocab_pre_split(const struct engine_vocab *v, const char *text, size_t len,
                    struct vocab_scratch *s, struct vocab_span **ret_spans, size_t *ret_n);
