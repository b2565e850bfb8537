/* SentencePiece-style BPE ("llama" vocabularies).
 *
 * The fragment is escaped (' ' -> U+2581 "▁", and one "▁" prepended when the vocabulary
 * adds a dummy prefix and the fragment starts the text or follows a special token), split
 * into one symbol per UTF-8 character (a byte that starts no valid sequence is a symbol of
 * its own), and merged: repeatedly the adjacent pair whose concatenation is a token with
 * the highest score is joined (ties: leftmost), until no adjacent pair is a token. Every
 * merged symbol is a token by construction; a single character that is not falls back to
 * its bytes as <0xHH> tokens, or unk where the vocabulary has no byte tokens.
 *
 * The whole fragment is one sequence (SentencePiece does not pre-split), so a heap keeps
 * this O(n log n) in the fragment's length. */
#include "engine/vocab-impl.h"

#include <errno.h>
#include <string.h>

#define SPM_SPACE "\xe2\x96\x81" /* U+2581 */

struct spm_sym {
    int32_t prev, next;
    uint32_t off, len; /* bytes in the escaped text; len 0 once merged into prev */
};

struct spm_pair {
    float score;
    uint32_t left, right;
    uint32_t len; /* bytes of left + right when queued */
};

/* max-heap on (score, -left) */
static bool pair_before(const struct spm_pair *a, const struct spm_pair *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_up(struct spm_pair *h, size_t i) {
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!pair_before(&h[i], &h[p])) break;
        struct spm_pair t = h[i];
        h[i] = h[p];
        h[p] = t;
        i = p;
    }
}

static void heap_down(struct spm_pair *h, size_t n, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && pair_before(&h[l], &h[m])) m = l;
        if (r < n && pair_before(&h[r], &h[m])) m = r;
        if (m == i) return;
        struct spm_pair t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

struct spm_work {
    const struct engine_vocab *v;
    const char *buf;
    struct spm_sym *sym;
    struct vocab_scratch *s;
    size_t n_heap;
};

static int pair_try(struct spm_work *w, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return 0;
    const struct spm_sym *l = &w->sym[left], *r = &w->sym[right];
    int32_t id = vocab_token_find(w->v, w->buf + l->off, l->len + r->len);
    if (id < 0) return 0;
    int e = vocab_grow(&w->s->heap, &w->s->heap_cap, w->n_heap + 1, sizeof(struct spm_pair));
    if (e < 0) return e;
    struct spm_pair *h = w->s->heap;
    h[w->n_heap] =
        (struct spm_pair){w->v->tokens[id].score, (uint32_t)left, (uint32_t)right, l->len + r->len};
    heap_up(h, w->n_heap++);
    return 0;
}

static int emit_bytes(const struct engine_vocab *v, const char *p, size_t n,
                      struct vocab_out *out) {
    for (size_t i = 0; i < n; i++) {
        int32_t id = v->byte_token[(uint8_t)p[i]];
        if (id < 0) id = v->unk;
        if (id < 0) continue;
        int r = vocab_out_push(out, id);
        if (r < 0) return r;
    }
    return 0;
}

int vocab_spm_encode(const struct engine_vocab *v, const char *text, size_t len, bool space_prefix,
                     struct vocab_out *out, struct vocab_scratch *s) {
    /* escape: every byte becomes at most 3, plus the prefix; len <= 2^28 so no overflow */
    size_t cap = 3 * len + 3;
    int r = vocab_grow((void **)&s->buf, &s->buf_cap, cap, 1);
    if (r < 0) return r;
    char *buf = s->buf;
    size_t n = 0;
    if (space_prefix) {
        memcpy(buf, SPM_SPACE, 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(buf + n, SPM_SPACE, 3);
            n += 3;
        } else {
            buf[n++] = text[i];
        }
    }
    if (n == 0) return 0;
    r = vocab_grow(&s->sym, &s->sym_cap, n, sizeof(struct spm_sym));
    if (r < 0) return r;
    struct spm_sym *sym = s->sym;
    size_t n_sym = 0;
    for (size_t i = 0; i < n;) {
        size_t cl = vocab_utf8_len((const uint8_t *)buf + i, n - i);
        if (!cl) cl = 1;
        sym[n_sym] = (struct spm_sym){(int32_t)n_sym - 1, -1, (uint32_t)i, (uint32_t)cl};
        if (n_sym) sym[n_sym - 1].next = (int32_t)n_sym;
        n_sym++;
        i += cl;
    }
    struct spm_work w = {.v = v, .buf = buf, .sym = sym, .s = s};
    for (size_t i = 1; i < n_sym; i++)
        if ((r = pair_try(&w, (int32_t)i - 1, (int32_t)i)) < 0) return r;
    while (w.n_heap) {
        struct spm_pair *h = s->heap;
        struct spm_pair p = h[0];
        h[0] = h[--w.n_heap];
        heap_down(h, w.n_heap, 0);
        struct spm_sym *l = &sym[p.left], *rt = &sym[p.right];
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
        int32_t id = vocab_token_find(v, buf + sym[i].off, sym[i].len);
        r = id >= 0 ? vocab_out_push(out, id) : emit_bytes(v, buf + sym[i].off, sym[i].len, out);
        if (r < 0) return r;
    }
    return 0;
}
