/* vocab — tokenizers read from GGUF metadata: SentencePiece-style BPE by score
 * (tokenizer.ggml.model = "llama"), byte-level BPE by merge rank ("gpt2", with the
 * pre-tokenizer regexes named by tokenizer.ggml.pre) and WordPiece ("bert"); special
 * tokens, byte fallback and a streaming detokenizer that emits whole UTF-8 sequences only.
 *
 * Loading copies everything it needs out of the GGUF file (token texts, scores, types,
 * merges) and validates it: arrays of the wrong element type or of different lengths,
 * special-token ids outside the vocabulary, an empty vocabulary, malformed byte tokens
 * "<0xHH>" and malformed merges are ERR_VOCAB with a detail message naming the key. The
 * vocabulary does not borrow from the file; the file may be closed after loading.
 *
 * A loaded vocabulary is immutable: any number of threads may tokenize and detokenize
 * with it at once (each call allocates its own scratch). A struct engine_detok belongs to
 * one stream and one thread.
 *
 * Compatibility: for the vocabularies tested (llama SPM, GPT-2, deepseek-llm,
 * deepseek-coder, bert-bge WordPiece) token ids equal llama.cpp's. Deliberate differences,
 * all for input that is not valid UTF-8 or that llama.cpp handles lossily: invalid bytes
 * stay bytes (llama.cpp turns them into U+FFFD), so detokenize(tokenize(s)) == s for any
 * byte string the vocabulary can represent; overlapping special tokens are matched leftmost
 * first, longest at a position (llama.cpp: longest token first over the whole text);
 * WordPiece drops invalid bytes (llama.cpp decodes overlong sequences and drops the rest).
 * One more: WordPiece honours add_bos_token / add_eos_token = false (llama.cpp adds [CLS]
 * and [SEP] whatever they say; absent or true, the two agree). WordPiece normalizes (lower
 * case, no accents), so its text comes back normalized, not as written.
 *
 * Not representable, so not round-tripped: U+2581 in text for SPM (it is the escaped
 * space), and in deepseek's vocabularies the raw bytes C0, C1, F5..FF, whose byte-alphabet
 * characters ("À", "ÿ", ...) are user-defined tokens that decode as text (as in llama.cpp;
 * this keeps "ü" in text round-tripping). */
#pragma once

#include "base/base.h"
#include "engine/gguf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ENGINE_TOKEN_NONE (-1)
/* Longest text engine_vocab_tokenize() accepts, in bytes; longer is ERR_TOO_LARGE. Keeps
 * every count and offset inside int32 (the CVE-2025-52566 class) and bounds scratch. */
#define ENGINE_VOCAB_MAX_TEXT_BYTES ((size_t)1 << 28)

enum engine_vocab_kind {
    ENGINE_VOCAB_SPM, /* "llama": merge by score over U+2581-escaped text, <0xHH> fallback */
    ENGINE_VOCAB_BPE, /* "gpt2": regex pre-split, GPT-2 byte alphabet, merge by rank */
    /* "gemma4": split at newline runs, spaces as U+2581, merge raw UTF-8 by rank, <0xHH>
     * fallback; BOS always added (llama.cpp does so for every Gemma 4 file) */
    ENGINE_VOCAB_GEMMA4,
    /* "bert": BERT normalization and pre-split, then greedy longest-first WordPiece over
     * "▁"-prefixed words (GGUF's word-start mark; continuation pieces are bare); [CLS] text
     * [SEP] */
    ENGINE_VOCAB_WPM,
    ENGINE_VOCAB_KIND_COUNT
};

/* tokenizer.ggml.token_type values (llama.cpp's LLAMA_TOKEN_TYPE_*). */
enum engine_token_type {
    ENGINE_TOKEN_TYPE_UNDEFINED = 0,
    ENGINE_TOKEN_TYPE_NORMAL = 1,
    ENGINE_TOKEN_TYPE_UNKNOWN = 2,
    ENGINE_TOKEN_TYPE_CONTROL = 3,
    ENGINE_TOKEN_TYPE_USER_DEFINED = 4,
    ENGINE_TOKEN_TYPE_UNUSED = 5,
    ENGINE_TOKEN_TYPE_BYTE = 6,
    ENGINE_TOKEN_TYPE_COUNT
};

struct engine_vocab;

/* Reads the tokenizer.ggml.* keys of f. *ret is written on success only. */
int engine_vocab_load(const struct gguf_file *f, struct engine_vocab **ret, struct err_detail *d);
void engine_vocab_free(struct engine_vocab *v);

enum engine_vocab_kind engine_vocab_kind(const struct engine_vocab *v);
/* The pre-tokenizer's table name ("gpt-2", "llama3", ...); "default" for SPM and WordPiece. */
const char *engine_vocab_pre_name(const struct engine_vocab *v);
int32_t engine_vocab_n_tokens(const struct engine_vocab *v);
/* Special ids, ENGINE_TOKEN_NONE when the vocabulary has none. WordPiece: BOS is [CLS]
 * (bos_token_id, else cls_token_id, else 101), unk 100, pad 0 unless the file says. */
int32_t engine_vocab_bos(const struct engine_vocab *v);
int32_t engine_vocab_eos(const struct engine_vocab *v);
int32_t engine_vocab_eot(const struct engine_vocab *v);
int32_t engine_vocab_unk(const struct engine_vocab *v);
int32_t engine_vocab_pad(const struct engine_vocab *v);
/* tokenizer.ggml.add_bos_token (default: true for SPM and WordPiece, false for BPE) and
 * add_eos_token (default: true for WordPiece, whose end token is [SEP], the separator id). */
bool engine_vocab_add_bos(const struct engine_vocab *v);
bool engine_vocab_add_eos(const struct engine_vocab *v);
/* End of generation: eos, eot, eom, or a token whose text is a known end-of-turn marker
 * (<|eot_id|>, <|im_end|>, <end_of_turn>, <|endoftext|>, ...). */
bool engine_vocab_is_eog(const struct engine_vocab *v, int32_t id);
/* ENGINE_TOKEN_TYPE_UNDEFINED for an id out of range. */
enum engine_token_type engine_vocab_token_type(const struct engine_vocab *v, int32_t id);
/* The token's stored text (escaped: U+2581 for SPM spaces and WordPiece word starts, the
 * byte alphabet for BPE); NULL for a bad id. Valid until engine_vocab_free(). */
const char *engine_vocab_token_text(const struct engine_vocab *v, int32_t id, size_t *ret_len);
/* The id whose stored text is exactly text[0..len), ENGINE_TOKEN_NONE if none. */
int32_t engine_vocab_find(const struct engine_vocab *v, const char *text, size_t len);

enum engine_tokenize_flags {
    /* Add BOS / EOS where the vocabulary asks for them (engine_vocab_add_bos/_eos). */
    ENGINE_TOKENIZE_ADD_SPECIAL = 1u << 0,
    /* Match control and unknown tokens (<s>, <|im_end|>) written in the text. User-defined
     * tokens are matched either way, as llama.cpp and Hugging Face do. */
    ENGINE_TOKENIZE_PARSE_SPECIAL = 1u << 1,
};

/* Encodes text[0..len) (any bytes). On success writes the ids to tokens[0..n) and n to
 * *ret_n and returns 0. When cap is too small it writes nothing to tokens, stores the
 * count needed in *ret_n and returns -ENOSPC (tokens may be NULL with cap 0 to ask).
 * ERR_TOO_LARGE when len > ENGINE_VOCAB_MAX_TEXT_BYTES, -ENOMEM. */
int engine_vocab_tokenize(const struct engine_vocab *v, const char *text, size_t len,
                          unsigned flags, int32_t *tokens, size_t cap, size_t *ret_n);

enum engine_piece_flags {
    /* Render control and unknown tokens as their text; by default they render as nothing. */
    ENGINE_PIECE_SPECIAL = 1u << 0,
};

/* The bytes token id stands for: U+2581 unescaped to ' ' (SPM, WordPiece), the byte
 * alphabet decoded (BPE), <0xHH> as that byte. Returns the length and a view valid until
 * engine_vocab_free(), or NULL (with *ret_len = 0) for a bad id. Not NUL-terminated. */
const char *engine_vocab_piece_view(const struct engine_vocab *v, int32_t id, unsigned flags,
                                    size_t *ret_len);
/* Copies that piece to buf. Returns its length, -ENOSPC when cap is too small, ERR_TOKEN
 * for a bad id. */
int engine_vocab_piece(const struct engine_vocab *v, int32_t id, unsigned flags, char *buf,
                       size_t cap);
/* The longest piece, in bytes. */
size_t engine_vocab_max_piece(const struct engine_vocab *v);

/* ---- streaming detokenizer ----------------------------------------------------------- */

enum engine_detok_flags {
    ENGINE_DETOK_SPECIAL = 1u << 0, /* render control tokens (as ENGINE_PIECE_SPECIAL) */
    /* The stream starts a text (as engine_vocab_tokenize() output does): an SPM vocabulary's
     * dummy-prefix space, or WordPiece's word-start space, is dropped from the first piece.
     * After BOS it is dropped anyway (WordPiece: after an unrendered [CLS]). */
    ENGINE_DETOK_TEXT_START = 1u << 1,
    /* Replace bytes that are not valid UTF-8 by U+FFFD (for JSON and terminals); by default
     * they pass through unchanged, so byte-level round trips are exact. */
    ENGINE_DETOK_VALID_UTF8 = 1u << 2,
};

/* Holds back an incomplete UTF-8 sequence across tokens; a plain value, no resources.
 * WordPiece output is cleaned as llama.cpp cleans it: no space before ? ! . , and none
 * around a lone apostrophe (" ' " -> "'"), so "hello , world" reads "hello, world" and
 * "don ' t" reads "don't"; rendered special tokens are words ("[CLS] hello"). */
struct engine_detok {
    const struct engine_vocab *vocab;
    unsigned flags;
    bool strip_space; /* drop one leading ' ' from the next non-empty piece */
    bool held_apos;   /* WordPiece: " '" held until the next piece says whether to keep ' ' */
    uint8_t n_tail;   /* bytes held in tail: a valid but unfinished UTF-8 prefix */
    uint8_t tail[4];
};

void engine_detok_init(struct engine_detok *dt, const struct engine_vocab *v, unsigned flags);
/* The output room engine_detok_feed() needs: 3 * (engine_vocab_max_piece() + 4) bytes
 * (a piece, the held-back tail, and U+FFFD expansion under VALID_UTF8). */
size_t engine_detok_min_cap(const struct engine_vocab *v);
/* Feeds one token. Writes only whole UTF-8 sequences (and, without VALID_UTF8, bytes that
 * can never become valid) to out and returns the count; -ENOSPC when cap is below
 * engine_detok_min_cap() (nothing consumed then); ERR_TOKEN for a bad id. */
int engine_detok_feed(struct engine_detok *dt, int32_t id, char *out, size_t cap);
/* Ends the stream: writes what is held back (at most 3 bytes, or WordPiece's " '"; 4 of
 * room always suffice) and returns the count. */
int engine_detok_flush(struct engine_detok *dt, char *out, size_t cap);

/* Whole-sequence detokenization with one engine_detok (flags as engine_detok_flags).
 * Writes up to cap bytes and the length to *ret_len; -ENOSPC (with *ret_len = the length
 * needed) when cap is too small. No NUL terminator. */
int engine_vocab_detokenize(const struct engine_vocab *v, const int32_t *ids, size_t n,
                            unsigned flags, char *out, size_t cap, size_t *ret_len);
