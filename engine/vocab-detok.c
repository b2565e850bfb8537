/* Pieces and the streaming detokenizer.
 *
 * Byte tokens and byte-level BPE split characters across tokens ("é" as <0xC3> <0xA9>), so
 * a stream must not hand out a piece as is. engine_detok keeps a valid but unfinished UTF-8
 * prefix (at most 3 bytes) until the bytes that complete it arrive; a byte that can never
 * be part of a valid sequence is written at once (raw, or as U+FFFD with VALID_UTF8: one
 * per maximal invalid subpart, as Unicode recommends). WordPiece pieces are also cleaned up
 * as words (detok_feed_wpm). */
#include "engine/vocab-impl.h"

#include <errno.h>
#include <string.h>

#define REPLACEMENT "\xef\xbf\xbd" /* U+FFFD */

const char *engine_vocab_piece_view(const struct engine_vocab *v, int32_t id, unsigned flags,
                                    size_t *ret_len) {
    if (!v || id < 0 || (uint32_t)id >= v->n_tokens) {
        if (ret_len) *ret_len = 0;
        return NULL;
    }
    const struct vocab_token *t = &v->tokens[id];
    size_t n = t->piece_len;
    if ((t->flags & VOCAB_TOKEN_SPECIAL) && !(flags & ENGINE_PIECE_SPECIAL)) n = 0;
    if (ret_len) *ret_len = n;
    return v->arena + t->piece_off;
}

int engine_vocab_piece(const struct engine_vocab *v, int32_t id, unsigned flags, char *buf,
                       size_t cap) {
    size_t n;
    const char *p = engine_vocab_piece_view(v, id, flags, &n);
    if (!p) return ERR_TOKEN;
    if (n > cap) return -ENOSPC;
    if (n) memcpy(buf, p, n);
    return (int)n; /* n <= VOCAB_MAX_TOKEN_BYTES */
}

size_t engine_vocab_max_piece(const struct engine_vocab *v) { return v->max_piece_len; }

size_t engine_detok_min_cap(const struct engine_vocab *v) {
    return 3 * ((size_t)v->max_piece_len + 4);
}

/* ---- UTF-8 state -------------------------------------------------------------------- */

/* Length of the sequence a lead byte starts, 0 if it starts none. */
static size_t lead_len(uint8_t c) {
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

/* Whether b may be byte number pos (1..3) of a sequence led by lead. */
static bool cont_ok(uint8_t lead, size_t pos, uint8_t b) {
    uint8_t lo = 0x80, hi = 0xBF;
    if (pos == 1) { /* no overlongs, no surrogates, nothing past U+10FFFF */
        if (lead == 0xE0) lo = 0xA0;
        if (lead == 0xED) hi = 0x9F;
        if (lead == 0xF0) lo = 0x90;
        if (lead == 0xF4) hi = 0x8F;
    }
    return b >= lo && b <= hi;
}

/* Writes bytes that cannot become valid: as they are, or one U+FFFD for all of them. */
static size_t put_invalid(const struct engine_detok *dt, const uint8_t *p, size_t n, char *out) {
    if (dt->flags & ENGINE_DETOK_VALID_UTF8) {
        memcpy(out, REPLACEMENT, 3);
        return 3;
    }
    memcpy(out, p, n);
    return n;
}

/* Runs bytes through the tail state; returns the bytes written (<= 3 per input byte). */
static size_t detok_bytes(struct engine_detok *dt, const uint8_t *p, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint8_t b = p[i];
        if (dt->n_tail == 0) {
            i++;
            if (b < 0x80) {
                out[o++] = (char)b;
            } else if (lead_len(b)) {
                dt->tail[dt->n_tail++] = b;
            } else {
                o += put_invalid(dt, &b, 1, out + o);
            }
            continue;
        }
        if (!cont_ok(dt->tail[0], dt->n_tail, b)) {
            /* the held prefix is a maximal invalid subpart; b starts afresh */
            o += put_invalid(dt, dt->tail, dt->n_tail, out + o);
            dt->n_tail = 0;
            continue;
        }
        i++;
        dt->tail[dt->n_tail++] = b;
        if (dt->n_tail == lead_len(dt->tail[0])) {
            memcpy(out + o, dt->tail, dt->n_tail);
            o += dt->n_tail;
            dt->n_tail = 0;
        }
    }
    return o;
}

void engine_detok_init(struct engine_detok *dt, const struct engine_vocab *v, unsigned flags) {
    *dt = (struct engine_detok){.vocab = v, .flags = flags};
    dt->strip_space =
        (flags & ENGINE_DETOK_TEXT_START) &&
        ((v->kind == ENGINE_VOCAB_SPM && v->add_space_prefix) || v->kind == ENGINE_VOCAB_WPM);
}

/* WordPiece: a piece is a word start (" the"), a continuation ("s") or a special token,
 * rendered as a word of its own. Spaces only ever lead a piece, so llama.cpp's clean-up of
 * the whole text (no ' ' before ? ! . ,; " ' " -> "'") is decided piece by piece, holding
 * back a " '" until the next piece shows whether a space follows it. */
static int detok_feed_wpm(struct engine_detok *dt, int32_t id, char *out) {
    const struct engine_vocab *v = dt->vocab;
    size_t n;
    const char *p = engine_vocab_piece_view(
        v, id, (dt->flags & ENGINE_DETOK_SPECIAL) ? ENGINE_PIECE_SPECIAL : 0, &n);
    bool special = n && (v->tokens[id].flags & VOCAB_TOKEN_SPECIAL), space = special;
    if (!special && n && p[0] == ' ') {
        space = true;
        p++;
        n--;
    }
    if (!space && !n) { /* renders as nothing; the text starts after an unrendered [CLS] */
        if (id == v->bos) dt->strip_space = true;
        return 0;
    }
    if (dt->strip_space) {
        space = false;
        dt->strip_space = false;
    }
    if (space && n && (p[0] == '?' || p[0] == '!' || p[0] == '.' || p[0] == ',')) space = false;
    size_t o = 0;
    if (dt->held_apos) { /* " ' x" -> "'x"; " 'x" and " ' [SEP]" stay */
        dt->held_apos = false;
        bool join = space && !special;
        const char *apos = join ? "'" : " '";
        o += detok_bytes(dt, (const uint8_t *)apos, strlen(apos), out);
        space &= !join;
    }
    if (space && !special && n == 1 && p[0] == '\'') {
        /* the bytes to come (' ' or '\'') end any unfinished sequence: emit it now, so that
         * the flush has only the " '" to write */
        if (dt->n_tail) o += put_invalid(dt, dt->tail, dt->n_tail, out + o);
        dt->n_tail = 0;
        dt->held_apos = true;
        return (int)o;
    }
    if (space) o += detok_bytes(dt, (const uint8_t *)" ", 1, out + o);
    o += detok_bytes(dt, (const uint8_t *)p, n, out + o);
    return (int)o;
}

int engine_detok_feed(struct engine_detok *dt, int32_t id, char *out, size_t cap) {
    const struct engine_vocab *v = dt->vocab;
    if (id < 0 || (uint32_t)id >= v->n_tokens) return ERR_TOKEN;
    if (cap < engine_detok_min_cap(v)) return -ENOSPC;
    if (v->kind == ENGINE_VOCAB_WPM) return detok_feed_wpm(dt, id, out);
    size_t n;
    const char *p = engine_vocab_piece_view(
        v, id, (dt->flags & ENGINE_DETOK_SPECIAL) ? ENGINE_PIECE_SPECIAL : 0, &n);
    if (dt->strip_space && n) {
        if (p[0] == ' ') {
            p++;
            n--;
        }
        dt->strip_space = false;
    }
    /* SentencePiece drops the space that follows BOS (the dummy prefix of the text) */
    if (id == v->bos && v->kind == ENGINE_VOCAB_SPM && v->add_space_prefix) dt->strip_space = true;
    return (int)detok_bytes(dt, (const uint8_t *)p, n, out);
}

int engine_detok_flush(struct engine_detok *dt, char *out, size_t cap) {
    if (dt->held_apos) { /* the tail was written when the apostrophe came */
        if (cap < 2) return -ENOSPC;
        memcpy(out, " '", 2);
        dt->held_apos = false;
        return 2;
    }
    if (!dt->n_tail) return 0;
    size_t need = (dt->flags & ENGINE_DETOK_VALID_UTF8) ? 3 : dt->n_tail;
    if (cap < need) return -ENOSPC;
    size_t o = put_invalid(dt, dt->tail, dt->n_tail, out);
    dt->n_tail = 0;
    return (int)o;
}

int engine_vocab_detokenize(const struct engine_vocab *v, const int32_t *ids, size_t n,
                            unsigned flags, char *out, size_t cap, size_t *ret_len) {
    if (!v || !ret_len || (!ids && n) || (!out && cap)) return ERR_INVALID;
    size_t tmp_cap = engine_detok_min_cap(v);
    char *tmp = malloc(tmp_cap);
    if (!tmp) return -ENOMEM;
    struct engine_detok dt;
    engine_detok_init(&dt, v, flags);
    size_t total = 0;
    int r = 0;
    for (size_t i = 0; i <= n; i++) {
        r = i < n ? engine_detok_feed(&dt, ids[i], tmp, tmp_cap)
                  : engine_detok_flush(&dt, tmp, tmp_cap);
        if (r < 0) break;
        size_t k = (size_t)r;
        if (total < cap) memcpy(out + total, tmp, MIN(k, cap - total));
        if (!size_add(total, k, &total)) {
            r = ERR_OVERFLOW;
            break;
        }
        r = 0;
    }
    free(tmp);
    if (r < 0) return r;
    *ret_len = total;
    return total > cap ? -ENOSPC : 0;
}
