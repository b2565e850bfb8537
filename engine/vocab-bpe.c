/* Byte-level BPE ("gpt2" vocabularies), and Gemma 4's SPM-style BPE ("gemma4").
 *
 * Each pre-tokenizer piece is mapped byte by byte to the GPT-2 alphabet (every byte is one
 * printable code point: the printable Latin-1 bytes stand for themselves, the other 68 are
 * U+0100.. in byte order), split into one symbol per byte, and merged: repeatedly the
 * adjacent pair with the lowest rank in tokenizer.ggml.merges is joined (ties: leftmost),
 * until no adjacent pair is a merge. Each final symbol is a token; one that is not (a
 * vocabulary without some merge result) falls back to one token per byte, or unk.
 *
 * "gemma4" (notes/gemma.md §B.3, as llama.cpp's gemma4 tokenizer): the text is split into
 * runs of newlines and runs of anything else (no word-level pre-split), each space becomes
 * U+2581, the symbols are the raw UTF-8 characters (no byte alphabet), merged by rank the
 * same way; a final symbol that is not a token falls back to its bytes' <0xHH> tokens.
 *
 * Symbols are substrings of the mapped piece, so a candidate pair is looked up by hashing
 * bytes in place. Cost: O(n log n) in the piece length, a heap of candidate pairs. */
#include "engine/vocab-impl.h"

#include <errno.h>
#include <string.h>

struct bpe_sym {
    int32_t prev, next; /* neighbours, -1 at the ends */
    uint32_t off, len;  /* bytes in the mapped piece; len 0 once merged into prev */
};

struct bpe_pair {
    uint32_t rank;
    uint32_t left, right; /* symbol indices */
    uint32_t len;         /* bytes of left + right when queued: detects stale pairs */
};

/* min-heap on (rank, left) */
static bool pair_before(const struct bpe_pair *a, const struct bpe_pair *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_up(struct bpe_pair *h, size_t i) {
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!pair_before(&h[i], &h[p])) break;
        struct bpe_pair t = h[i];
        h[i] = h[p];
        h[p] = t;
        i = p;
    }
}

static void heap_down(struct bpe_pair *h, size_t n, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && pair_before(&h[l], &h[m])) m = l;
        if (r < n && pair_before(&h[r], &h[m])) m = r;
        if (m == i) return;
        struct bpe_pair t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

struct bpe_work {
    const struct engine_vocab *v;
    const char *buf; /* the mapped piece */
    struct bpe_sym *sym;
    struct vocab_scratch *s;
    size_t n_heap;
};

static int pair_try(struct bpe_work *w, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return 0;
    const struct bpe_sym *l = &w->sym[left], *r = &w->sym[right];
    int32_t rank = vocab_merge_find(w->v, w->buf + l->off, l->len + r->len, l->len);
    if (rank < 0) return 0;
    int e = vocab_grow(&w->s->heap, &w->s->heap_cap, w->n_heap + 1, sizeof(struct bpe_pair));
    if (e < 0) return e;
    struct bpe_pair *h = w->s->heap;
    h[w->n_heap] =
        (struct bpe_pair){(uint32_t)rank, (uint32_t)left, (uint32_t)right, l->len + r->len};
    heap_up(h, w->n_heap++);
    return 0;
}

static int emit_fallback(const struct engine_vocab *v, const char *p, size_t n,
                         struct vocab_out *out) {
    /* one token per mapped character (= per original byte) */
    for (size_t i = 0; i < n;) {
        size_t cl = vocab_utf8_len((const uint8_t *)p + i, n - i);
        if (!cl) cl = 1;
        int32_t id = vocab_token_find(v, p + i, cl);
        if (id < 0) id = v->unk;
        if (id >= 0) {
            int r = vocab_out_push(out, id);
            if (r < 0) return r;
        }
        i += cl;
    }
    return 0;
}

/* gemma4: one <0xHH> token per byte, else unk. */
static int emit_byte_tokens(const struct engine_vocab *v, const char *p, size_t n,
                            struct vocab_out *out) {
    for (size_t i = 0; i < n; i++) {
        int32_t id = v->byte_token[(uint8_t)p[i]];
        if (id < 0) id = v->unk;
        int r = id >= 0 ? vocab_out_push(out, id) : 0;
        if (r < 0) return r;
    }
    return 0;
}

static int bpe_word(const struct engine_vocab *v, const char *piece, size_t len,
                    struct vocab_out *out, struct vocab_scratch *s) {
    const bool raw = v->kind == ENGINE_VOCAB_GEMMA4;
    /* map to the byte alphabet (at most 2 bytes per byte), or (gemma4) spaces to U+2581 */
    int r = vocab_grow((void **)&s->buf, &s->buf_cap, 3 * len, 1);
    if (r < 0) return r;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t b = (uint8_t)piece[i];
        if (raw && b == ' ') {
            memcpy(s->buf + n, "\xe2\x96\x81", 3);
            n += 3;
        } else if (raw) {
            s->buf[n++] = (char)b;
        } else {
            memcpy(s->buf + n, v->byte_utf8[b], v->byte_utf8_len[b]);
            n += v->byte_utf8_len[b];
        }
    }
    if (vocab_pre_ignore_merges(v->pre)) {
        int32_t id = vocab_token_find(v, s->buf, n);
        if (id >= 0) return vocab_out_push(out, id);
    }
    r = vocab_grow(&s->sym, &s->sym_cap, n, sizeof(struct bpe_sym));
    if (r < 0) return r;
    /* one symbol per character of the mapped piece (a byte that is not UTF-8: alone) */
    struct bpe_sym *sym = s->sym;
    size_t n_sym = 0;
    for (size_t off = 0; off < n;) {
        size_t cl = vocab_utf8_len((const uint8_t *)s->buf + off, n - off);
        if (!cl) cl = 1;
        sym[n_sym] = (struct bpe_sym){(int32_t)n_sym - 1, -1, (uint32_t)off, (uint32_t)cl};
        if (n_sym) sym[n_sym - 1].next = (int32_t)n_sym;
        n_sym++;
        off += cl;
    }
    len = n_sym;
    struct bpe_work w = {.v = v, .buf = s->buf, .sym = sym, .s = s};
    for (size_t i = 1; i < len; i++)
        if ((r = pair_try(&w, (int32_t)i - 1, (int32_t)i)) < 0) return r;
    while (w.n_heap) {
        struct bpe_pair *h = s->heap;
        struct bpe_pair p = h[0];
        h[0] = h[--w.n_heap];
        heap_down(h, w.n_heap, 0);
        struct bpe_sym *l = &sym[p.left], *rt = &sym[p.right];
        /* stale: one side was merged away or grew since the pair was queued */
        if (l->len == 0 || rt->len == 0 || l->next != (int32_t)p.right || l->len + rt->len != p.len)
            continue;
        l->len += rt->len;
        rt->len = 0;
        l->next = rt->next;
        if (rt->next >= 0) sym[rt->next].prev = (int32_t)p.left;
        if ((r = pair_try(&w, l->prev, (int32_t)p.left)) < 0) return r;
        if ((r = pair_try(&w, (int32_t)p.left, l->next)) < 0) return r;
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next) {
        int32_t id = vocab_token_find(v, s->buf + sym[i].off, sym[i].len);
        r = id >= 0  ? vocab_out_push(out, id)
            : raw    ? emit_byte_tokens(v, s->buf + sym[i].off, sym[i].len, out)
                     : emit_fallback(v, s->buf + sym[i].off, sym[i].len, out);
        if (r < 0) return r;
    }
    return 0;
}

int vocab_bpe_encode(const struct engine_vocab *v, const char *text, size_t len,
                     struct vocab_out *out, struct vocab_scratch *s) {
    if (v->kind == ENGINE_VOCAB_GEMMA4) { /* runs of newlines and of everything else */
        for (size_t i = 0; i < len;) {
            size_t j = i + 1;
            while (j < len && (text[j] == '\n') == (text[i] == '\n')) j++;
            int r = bpe_word(v, text + i, j - i, out, s);
            if (r < 0) return r;
            i = j;
        }
        return 0;
    }
    struct vocab_span *spans;
    size_t n;
    int r = vocab_pre_split(v, text, len, s, &spans, &n);
    if (r < 0) return r;
    for (size_t i = 0; i < n; i++) {
        /* bpe_word reuses s->buf and s->sym, never s->spans */
        r = bpe_word(v, text + spans[i].off, spans[i].len, out, s);
        if (r < 0) return r;
    }
    return 0;
}

void vocab_bpe_init_bytes(struct engine_vocab *v) {
    uint32_t extra = 0;
    for (size_t c = 0; c < ARRAY_SIZE(v->cpt_byte); c++) v->cpt_byte[c] = -1;
    for (uint32_t b = 0; b < 256; b++) {
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        uint32_t c = printable ? b : 256 + extra++;
        v->byte_cpt[b] = (uint16_t)c;
        v->cpt_byte[c] = (int16_t)b;
        char u[4];
        v->byte_utf8_len[b] = (uint8_t)vocab_utf8_put(c, u);
        memcpy(v->byte_utf8[b], u, v->byte_utf8_len[b]);
    }
}

size_t vocab_bpe_decode(const struct engine_vocab *v, const char *text, size_t len, char *out) {
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        size_t cl = vocab_utf8_len((const uint8_t *)text + i, len - i);
        if (!cl) { /* not UTF-8: keep the byte */
            out[n++] = text[i++];
            continue;
        }
        uint32_t c = vocab_utf8_cpt((const uint8_t *)text + i, cl);
        if (c < ARRAY_SIZE(v->cpt_byte) && v->cpt_byte[c] >= 0) {
            out[n++] = (char)v->cpt_byte[c];
        } else { /* outside the alphabet: the character itself */
            memcpy(out + n, text + i, cl);
            n += cl;
        }
        i += cl;
    }
    return n;
}
