/* The matcher (see grammar.h): a pushdown automaton over bytes that follows every parse at
 * once, and the vocabulary trie its masks are computed on.
 *
 * A stack is a chain of interned nodes (pos, parent): the top node's pos is a GRAM_CHARS
 * element, each lower node's pos the element its rule call returns to; node 0 is the empty
 * stack (the root rule is complete). A state is an interned, sorted set of top nodes. As
 * nodes and sets are interned, a set's successor on a byte is a function of (set, byte)
 * and is kept in the set's transition table: the automaton turns into a DFA as it runs,
 * and a token mask is a walk of the trie in preorder that looks up one transition per
 * node and jumps over the subtree of every node whose prefix has no parse left. */
#include "engine/grammar-impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- vocabulary trie ---------------------------------------------------------------- */

struct engine_grammar_vocab {
    int32_t n_tokens;
    char *bytes;     /* every piece, back to back */
    size_t *off;     /* (n_tokens + 1): token i produces bytes[off[i] .. off[i + 1]) */
    uint8_t *is_eog; /* (n_tokens) */
    int32_t *eog;    /* (n_eog) */
    int32_t n_eog;
    /* the trie, nodes in preorder; node 0 is the root (the empty prefix) */
    int32_t n_nodes;
    uint8_t *byte;    /* (n_nodes) the byte on the edge into the node */
    uint16_t *depth;  /* (n_nodes) prefix length */
    int32_t *skip;    /* (n_nodes) the first node after the node's subtree */
    int32_t *tok_lo;  /* (n_nodes + 1) tokens of node i: tok_ids[tok_lo[i] .. tok_lo[i + 1]) */
    int32_t *tok_ids; /* tokens whose piece ends at the node, in node order */
    int32_t max_depth;
};

void engine_grammar_vocab_free(struct engine_grammar_vocab *gv) {
    if (!gv) return;
    free(gv->bytes);
    free(gv->off);
    free(gv->is_eog);
    free(gv->eog);
    free(gv->byte);
    free(gv->depth);
    free(gv->skip);
    free(gv->tok_lo);
    free(gv->tok_ids);
    free(gv);
}

int32_t engine_grammar_vocab_n_tokens(const struct engine_grammar_vocab *gv) {
    return gv->n_tokens;
}

struct piece_ref {
    const char *p;
    size_t len;
    int32_t id;
};

static int piece_cmp(const void *a, const void *b) {
    const struct piece_ref *x = a, *y = b;
    int c = memcmp(x->p, y->p, MIN(x->len, y->len));
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Builds the trie from the pieces sorted by bytes: each piece adds the nodes past its
 * common prefix with the previous one, so nodes come out in preorder. */
static int trie_build(struct engine_grammar_vocab *gv) {
    int32_t n = gv->n_tokens;
    _cleanup_free_ struct piece_ref *refs = malloc_array((size_t)n, sizeof *refs);
    if (!refs) return -ENOMEM;
    int32_t n_refs = 0;
    size_t max_nodes = 1;
    for (int32_t i = 0; i < n; i++) {
        size_t len = gv->off[i + 1] - gv->off[i];
        if (!len || gv->is_eog[i]) continue; /* never walked: see grammar.h */
        if (len > UINT16_MAX) return ERR_TOO_LARGE;
        refs[n_refs++] = (struct piece_ref){gv->bytes + gv->off[i], len, i};
        max_nodes += len;
    }
    qsort(refs, (size_t)n_refs, sizeof *refs, piece_cmp);
    gv->byte = malloc_array(max_nodes, sizeof *gv->byte);
    gv->depth = malloc_array(max_nodes, sizeof *gv->depth);
    gv->skip = malloc_array(max_nodes, sizeof *gv->skip);
    gv->tok_lo = malloc_array(max_nodes + 1, sizeof *gv->tok_lo);
    gv->tok_ids = malloc_array(n_refs ? (size_t)n_refs : 1, sizeof *gv->tok_ids);
    _cleanup_free_ int32_t *path = malloc_array(UINT16_MAX + 1, sizeof *path);
    if (!gv->byte || !gv->depth || !gv->skip || !gv->tok_lo || !gv->tok_ids || !path)
        return -ENOMEM;
    int32_t nodes = 1, toks = 0;
    gv->byte[0] = 0;
    gv->depth[0] = 0;
    gv->tok_lo[0] = 0;
    path[0] = 0;
    size_t prev_len = 0;
    const char *prev = "";
    for (int32_t k = 0; k < n_refs; k++) {
        const struct piece_ref *r = &refs[k];
        size_t l = 0;
        while (l < prev_len && l < r->len && prev[l] == r->p[l]) l++;
        for (size_t dd = prev_len; dd > l; dd--) gv->skip[path[dd]] = nodes;
        for (size_t dd = l + 1; dd <= r->len; dd++) {
            gv->byte[nodes] = (uint8_t)r->p[dd - 1];
            gv->depth[nodes] = (uint16_t)dd;
            gv->tok_lo[nodes] = toks;
            path[dd] = nodes++;
        }
        gv->tok_ids[toks++] = r->id;
        prev = r->p;
        prev_len = r->len;
        gv->max_depth = MAX(gv->max_depth, (int32_t)r->len);
    }
    for (size_t dd = prev_len; dd > 0; dd--) gv->skip[path[dd]] = nodes;
    gv->skip[0] = nodes;
    gv->tok_lo[nodes] = toks;
    gv->n_nodes = nodes;
    return 0;
}

int engine_grammar_vocab_new_pieces(int32_t n_tokens, const char *const *piece,
                                    const size_t *piece_len, const int32_t *eog, size_t n_eog,
                                    struct engine_grammar_vocab **ret) {
    if (n_tokens <= 0 || n_eog > (size_t)n_tokens) return ERR_INVALID;
    for (size_t i = 0; i < n_eog; i++)
        if (eog[i] < 0 || eog[i] >= n_tokens) return ERR_INVALID;
    struct engine_grammar_vocab *gv = calloc(1, sizeof *gv);
    if (!gv) return -ENOMEM;
    gv->n_tokens = n_tokens;
    size_t total = 0;
    for (int32_t i = 0; i < n_tokens; i++)
        if (!size_add(total, piece_len[i], &total)) goto overflow;
    gv->bytes = malloc(total ? total : 1);
    gv->off = malloc_array((size_t)n_tokens + 1, sizeof *gv->off);
    gv->is_eog = calloc((size_t)n_tokens, 1);
    gv->eog = malloc_array(n_eog ? n_eog : 1, sizeof *gv->eog);
    int r = -ENOMEM;
    if (!gv->bytes || !gv->off || !gv->is_eog || !gv->eog) goto fail;
    size_t at = 0;
    for (int32_t i = 0; i < n_tokens; i++) {
        gv->off[i] = at;
        if (piece_len[i]) memcpy(gv->bytes + at, piece[i], piece_len[i]);
        at += piece_len[i];
    }
    gv->off[n_tokens] = at;
    for (size_t i = 0; i < n_eog; i++) {
        if (gv->is_eog[eog[i]]) continue;
        gv->is_eog[eog[i]] = 1;
        gv->eog[gv->n_eog++] = eog[i];
    }
    if ((r = trie_build(gv)) < 0) goto fail;
    *ret = gv;
    return 0;
overflow:
    r = ERR_OVERFLOW;
fail:
    engine_grammar_vocab_free(gv);
    return r;
}

int engine_grammar_vocab_new(const struct engine_vocab *v, struct engine_grammar_vocab **ret) {
    int32_t n = engine_vocab_n_tokens(v);
    _cleanup_free_ const char **piece = malloc_array((size_t)n, sizeof *piece);
    _cleanup_free_ size_t *len = malloc_array((size_t)n, sizeof *len);
    _cleanup_free_ int32_t *eog = malloc_array((size_t)n, sizeof *eog);
    if (!piece || !len || !eog) return -ENOMEM;
    size_t n_eog = 0;
    for (int32_t i = 0; i < n; i++) {
        piece[i] = engine_vocab_piece_view(v, i, 0, &len[i]);
        if (!piece[i]) len[i] = 0;
        if (!len[i] && engine_vocab_token_type(v, i) == ENGINE_TOKEN_TYPE_CONTROL) {
            /* <|name|>, <|name> and <name|> control tokens by their text (grammar.h) */
            size_t sn;
            const char *sp = engine_vocab_piece_view(v, i, ENGINE_PIECE_SPECIAL, &sn);
            if (sp && sn > 3 && sp[0] == '<' && sp[sn - 1] == '>' &&
                (sp[1] == '|' || sp[sn - 2] == '|')) {
                piece[i] = sp;
                len[i] = sn;
            }
        }
        if (engine_vocab_is_eog(v, i)) eog[n_eog++] = i;
    }
    return engine_grammar_vocab_new_pieces(n, piece, len, eog, n_eog, ret);
}

/* ---- matcher state ------------------------------------------------------------------ */

#define NODE_DONE 0 /* the empty stack */
#define SET_EMPTY 0 /* no parse left */
/* Past the soft limits the tables are rebuilt around the current state before the next
 * mask or accept; past the hard ones a step fails with ERR_TOO_LARGE. */
#define SOFT_NODES (1 << 20)
#define HARD_NODES (1 << 22)
#define SOFT_SETS (1 << 14)
#define HARD_SETS (1 << 16)
#define SOFT_MASK_BYTES ((size_t)64 << 20)
#define MAX_EXPAND_DEPTH 4096

struct gm_node {
    int32_t pos, parent, depth;
};

struct gm_set {
    uint32_t off, n; /* members[off .. off + n), sorted node ids */
    uint64_t hash;
    int32_t *trans; /* (256) successor set per byte, -1 until computed; NULL until used */
    uint64_t *mask; /* allowed tokens, NULL until masked */
    int32_t n_allowed;
};

struct engine_grammar_matcher {
    const struct engine_grammar *g;
    const struct engine_grammar_vocab *gv;
    struct gm_node *nodes;
    int32_t n_nodes, cap_nodes;
    int32_t *node_tab; /* open addressing over node ids, -1 empty */
    size_t node_tab_cap;
    struct gm_set *sets;
    int32_t n_sets, cap_sets;
    int32_t *set_tab;
    size_t set_tab_cap;
    int32_t *members;
    size_t n_members, cap_members;
    int32_t *scratch; /* expansion output */
    size_t n_scratch, cap_scratch;
    int32_t *walk; /* (gv->max_depth + 1) the set at each depth of the trie walk */
    size_t mask_bytes;
    int32_t cur;
    bool ended;
    struct err_detail *d; /* of the call in progress */
};

static int grow(void **v, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap * 2 : 64;
    while (c < need) c *= 2;
    size_t bytes;
    void *q;
    if (!size_mul(c, size, &bytes) || !(q = realloc(*v, bytes))) return -ENOMEM;
    *v = q;
    *cap = c;
    return 0;
}

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t node_hash(int32_t pos, int32_t parent) {
    return mix64((uint64_t)(uint32_t)pos << 32 | (uint32_t)parent);
}

/* Resizes an open-addressing table of ids to cap (a power of two) and reinserts. */
static int tab_rehash(int32_t **tab, size_t *tab_cap, size_t cap, int32_t n,
                      uint64_t (*hash_of)(const struct engine_grammar_matcher *, int32_t),
                      const struct engine_grammar_matcher *m) {
    int32_t *t = malloc_array(cap, sizeof *t);
    if (!t) return -ENOMEM;
    memset(t, 0xff, cap * sizeof *t);
    for (int32_t id = 0; id < n; id++) {
        size_t h = (size_t)hash_of(m, id) & (cap - 1);
        while (t[h] >= 0) h = (h + 1) & (cap - 1);
        t[h] = id;
    }
    free(*tab);
    *tab = t;
    *tab_cap = cap;
    return 0;
}

static uint64_t node_hash_of(const struct engine_grammar_matcher *m, int32_t id) {
    return node_hash(m->nodes[id].pos, m->nodes[id].parent);
}

static uint64_t set_hash_of(const struct engine_grammar_matcher *m, int32_t id) {
    return m->sets[id].hash;
}

static int too_large(struct engine_grammar_matcher *m, const char *what) {
    return err_set(m->d, ERR_TOO_LARGE, "grammar: the matcher's %s outgrew its bound", what);
}

/* The id of node (pos, parent); -1 in *ret when the stack would be too deep. */
static int node_intern(struct engine_grammar_matcher *m, int32_t pos, int32_t parent,
                       int32_t *ret) {
    int32_t depth = parent < 0 ? 1 : m->nodes[parent].depth + 1;
    if (depth > ENGINE_GRAMMAR_MAX_DEPTH) {
        *ret = -1;
        return 0;
    }
    uint64_t h = node_hash(pos, parent);
    size_t mask = m->node_tab_cap - 1, i = (size_t)h & mask;
    for (; m->node_tab[i] >= 0; i = (i + 1) & mask) {
        const struct gm_node *nd = &m->nodes[m->node_tab[i]];
        if (nd->pos == pos && nd->parent == parent) {
            *ret = m->node_tab[i];
            return 0;
        }
    }
    if (m->n_nodes >= HARD_NODES) return too_large(m, "stack nodes");
    size_t cap = (size_t)m->cap_nodes;
    int r = grow((void **)&m->nodes, &cap, (size_t)m->n_nodes + 1, sizeof *m->nodes);
    if (r < 0) return r;
    m->cap_nodes = (int32_t)cap;
    int32_t id = m->n_nodes++;
    m->nodes[id] = (struct gm_node){pos, parent, depth};
    if ((size_t)m->n_nodes * 2 > m->node_tab_cap) {
        if ((r = tab_rehash(&m->node_tab, &m->node_tab_cap, m->node_tab_cap * 2, m->n_nodes,
                            node_hash_of, m)) < 0)
            return r;
    } else {
        m->node_tab[i] = id;
    }
    *ret = id;
    return 0;
}

static int scratch_push(struct engine_grammar_matcher *m, int32_t node) {
    int r = grow((void **)&m->scratch, &m->cap_scratch, m->n_scratch + 1, sizeof *m->scratch);
    if (r < 0) return r;
    m->scratch[m->n_scratch++] = node;
    return 0;
}

/* Adds to scratch every stack that continues at pos over parent and stops at a byte (or
 * is empty): calls push, rule ends pop. A rule called last in its alternative returns
 * straight to parent (so x* runs in constant stack). */
static int expand(struct engine_grammar_matcher *m, int32_t pos, int32_t parent, int depth) {
    const struct engine_grammar *g = m->g;
    if (depth > MAX_EXPAND_DEPTH) return too_large(m, "rule expansion");
    const struct gram_elem *e = &g->elems[pos];
    int r;
    int32_t id;
    switch (e->kind) {
    case GRAM_END:
        if (parent < 0) return scratch_push(m, NODE_DONE);
        return expand(m, m->nodes[parent].pos, m->nodes[parent].parent, depth + 1);
    case GRAM_CHARS:
        if ((r = node_intern(m, pos, parent, &id)) < 0) return r;
        return id < 0 ? 0 : scratch_push(m, id);
    default: {
        int32_t ret = parent;
        if (g->elems[pos + 1].kind != GRAM_END) {
            if ((r = node_intern(m, pos + 1, parent, &ret)) < 0) return r;
            if (ret < 0) return 0; /* too deep: this path is dropped */
        }
        for (int32_t a = g->rule_alt[e->arg]; a < g->rule_alt[e->arg + 1]; a++)
            if ((r = expand(m, g->alt_pos[a], ret, depth + 1)) < 0) return r;
        return 0;
    }
    }
}

static int i32_cmp(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Interns scratch (sorted and deduplicated here) as a set. */
static int set_intern(struct engine_grammar_matcher *m, int32_t *ret) {
    size_t n = 0;
    if (m->n_scratch > 1) qsort(m->scratch, m->n_scratch, sizeof *m->scratch, i32_cmp);
    for (size_t i = 0; i < m->n_scratch; i++)
        if (!n || m->scratch[i] != m->scratch[n - 1]) m->scratch[n++] = m->scratch[i];
    uint64_t h = hash64(m->scratch, n * sizeof *m->scratch);
    size_t tmask = m->set_tab_cap - 1, i = (size_t)h & tmask;
    for (; m->set_tab[i] >= 0; i = (i + 1) & tmask) {
        const struct gm_set *s = &m->sets[m->set_tab[i]];
        if (s->hash == h && s->n == n &&
            (n == 0 || !memcmp(m->members + s->off, m->scratch, n * sizeof *m->scratch))) {
            *ret = m->set_tab[i];
            return 0;
        }
    }
    if (m->n_sets >= HARD_SETS) return too_large(m, "state sets");
    size_t cap = (size_t)m->cap_sets;
    int r = grow((void **)&m->sets, &cap, (size_t)m->n_sets + 1, sizeof *m->sets);
    if (r < 0 ||
        (r = grow((void **)&m->members, &m->cap_members, m->n_members + n, sizeof *m->members)) < 0)
        return r;
    m->cap_sets = (int32_t)cap;
    if (n) memcpy(m->members + m->n_members, m->scratch, n * sizeof *m->scratch);
    int32_t id = m->n_sets++;
    m->sets[id] = (struct gm_set){.off = (uint32_t)m->n_members, .n = (uint32_t)n, .hash = h};
    m->n_members += n;
    if ((size_t)m->n_sets * 2 > m->set_tab_cap) {
        if ((r = tab_rehash(&m->set_tab, &m->set_tab_cap, m->set_tab_cap * 2, m->n_sets,
                            set_hash_of, m)) < 0)
            return r;
    } else {
        m->set_tab[i] = id;
    }
    *ret = id;
    return 0;
}

/* The set after byte b from set s. */
static int step_slow(struct engine_grammar_matcher *m, int32_t s, uint8_t b, int32_t *ret) {
    if (!m->sets[s].trans) {
        int32_t *t = malloc_array(256, sizeof *t);
        if (!t) return -ENOMEM;
        memset(t, 0xff, 256 * sizeof *t);
        m->sets[s].trans = t;
    }
    const struct engine_grammar *g = m->g;
    m->n_scratch = 0;
    int r;
    for (uint32_t k = 0; k < m->sets[s].n; k++) {
        int32_t node = m->members[m->sets[s].off + k];
        if (node == NODE_DONE) continue;
        int32_t pos = m->nodes[node].pos;
        if (!gram_bytes_has(&g->sets[g->elems[pos].arg], b)) continue;
        if ((r = expand(m, pos + 1, m->nodes[node].parent, 0)) < 0) return r;
    }
    int32_t t;
    if ((r = set_intern(m, &t)) < 0) return r;
    m->sets[s].trans[b] = t;
    *ret = t;
    return 0;
}

static inline int step(struct engine_grammar_matcher *m, int32_t s, uint8_t b, int32_t *ret) {
    const int32_t *t = m->sets[s].trans;
    if (t && t[b] >= 0) {
        *ret = t[b];
        return 0;
    }
    return step_slow(m, s, b, ret);
}

static int initial_set(struct engine_grammar_matcher *m, int32_t *ret) {
    const struct engine_grammar *g = m->g;
    m->n_scratch = 0;
    for (int32_t a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++) {
        int r = expand(m, g->alt_pos[a], -1, 0);
        if (r < 0) return r;
    }
    return set_intern(m, ret);
}

static bool set_done(const struct engine_grammar_matcher *m, int32_t s) {
    return m->sets[s].n && m->members[m->sets[s].off] == NODE_DONE;
}

/* Empties every table (keeping their memory) and re-interns the empty set and node 0. */
static int tables_clear(struct engine_grammar_matcher *m) {
    for (int32_t s = 0; s < m->n_sets; s++) {
        free(m->sets[s].trans);
        free(m->sets[s].mask);
    }
    m->n_sets = 0;
    m->n_members = 0;
    m->n_nodes = 0;
    m->mask_bytes = 0;
    memset(m->node_tab, 0xff, m->node_tab_cap * sizeof *m->node_tab);
    memset(m->set_tab, 0xff, m->set_tab_cap * sizeof *m->set_tab);
    int32_t id;
    m->n_scratch = 0;
    int r = set_intern(m, &id); /* SET_EMPTY */
    if (r < 0) return r;
    size_t cap = (size_t)m->cap_nodes;
    if ((r = grow((void **)&m->nodes, &cap, 1, sizeof *m->nodes)) < 0) return r;
    m->cap_nodes = (int32_t)cap;
    m->nodes[NODE_DONE] = (struct gm_node){-1, -1, 0};
    m->n_nodes = 1; /* node 0 is never in the hash table: nothing looks it up */
    return 0;
}

/* Rebuilds the tables holding only the current state's stacks. */
static int compact(struct engine_grammar_matcher *m) {
    const struct gm_set *s = &m->sets[m->cur];
    size_t total = 0;
    for (uint32_t k = 0; k < s->n; k++) total += (size_t)m->nodes[m->members[s->off + k]].depth + 1;
    _cleanup_free_ int32_t *chains = malloc_array(total ? total : 1, sizeof *chains);
    if (!chains) return -ENOMEM;
    size_t at = 0;
    uint32_t n = s->n;
    for (uint32_t k = 0; k < n; k++) { /* each chain: depth, then positions top to bottom */
        int32_t node = m->members[s->off + k];
        chains[at++] = m->nodes[node].depth;
        for (; node > 0; node = m->nodes[node].parent) chains[at++] = m->nodes[node].pos;
    }
    int r = tables_clear(m);
    if (r < 0) return r;
    m->n_scratch = 0;
    for (size_t c = 0; c < at;) {
        int32_t depth = chains[c++], parent = -1, id = NODE_DONE;
        for (int32_t k = depth - 1; k >= 0; k--) {
            if ((r = node_intern(m, chains[c + (size_t)k], parent, &id)) < 0) return r;
            parent = id;
        }
        c += (size_t)depth;
        if ((r = scratch_push(m, id)) < 0) return r;
    }
    return set_intern(m, &m->cur);
}

static int maybe_compact(struct engine_grammar_matcher *m) {
    if (m->n_nodes > SOFT_NODES || m->n_sets > SOFT_SETS) return compact(m);
    if (m->mask_bytes > SOFT_MASK_BYTES) {
        for (int32_t s = 0; s < m->n_sets; s++) {
            free(m->sets[s].mask);
            m->sets[s].mask = NULL;
        }
        m->mask_bytes = 0;
    }
    return 0;
}

void engine_grammar_matcher_free(struct engine_grammar_matcher *m) {
    if (!m) return;
    for (int32_t s = 0; s < m->n_sets; s++) {
        free(m->sets[s].trans);
        free(m->sets[s].mask);
    }
    free(m->sets);
    free(m->set_tab);
    free(m->members);
    free(m->nodes);
    free(m->node_tab);
    free(m->scratch);
    free(m->walk);
    free(m);
}

int engine_grammar_matcher_new(const struct engine_grammar *g,
                               const struct engine_grammar_vocab *gv,
                               struct engine_grammar_matcher **ret) {
    struct engine_grammar_matcher *m = calloc(1, sizeof *m);
    if (!m) return -ENOMEM;
    m->g = g;
    m->gv = gv;
    m->node_tab_cap = m->set_tab_cap = 1024;
    m->node_tab = malloc_array(m->node_tab_cap, sizeof *m->node_tab);
    m->set_tab = malloc_array(m->set_tab_cap, sizeof *m->set_tab);
    m->walk = malloc_array((size_t)gv->max_depth + 1, sizeof *m->walk);
    int r = -ENOMEM;
    if (!m->node_tab || !m->set_tab || !m->walk || (r = tables_clear(m)) < 0 ||
        (r = initial_set(m, &m->cur)) < 0) {
        engine_grammar_matcher_free(m);
        return r;
    }
    *ret = m;
    return 0;
}

int32_t engine_grammar_matcher_n_tokens(const struct engine_grammar_matcher *m) {
    return m->gv->n_tokens;
}

void engine_grammar_matcher_reset(struct engine_grammar_matcher *m) {
    m->ended = false;
    m->d = NULL;
    int32_t s;
    /* interning the initial set again finds it (or rebuilds it after a compaction); only
     * memory exhaustion can fail, and then the tables start over */
    if (initial_set(m, &s) < 0 && (tables_clear(m) < 0 || initial_set(m, &s) < 0)) s = SET_EMPTY;
    m->cur = s;
}

bool engine_grammar_matcher_done(const struct engine_grammar_matcher *m) {
    return !m->ended && set_done(m, m->cur);
}

/* Allowed tokens of set s, by one walk of the trie. */
static int mask_compute(struct engine_grammar_matcher *m, int32_t s) {
    const struct engine_grammar_vocab *gv = m->gv;
    size_t words = ((size_t)gv->n_tokens + 63) / 64;
    uint64_t *bits = calloc(words, sizeof *bits);
    if (!bits) return -ENOMEM;
    int32_t *walk = m->walk, n_allowed = 0;
    walk[0] = s;
    for (int32_t i = 1; i < gv->n_nodes;) {
        int32_t t, r = step(m, walk[gv->depth[i] - 1], gv->byte[i], &t);
        if (r < 0) {
            free(bits);
            return r;
        }
        if (t == SET_EMPTY) {
            i = gv->skip[i];
            continue;
        }
        walk[gv->depth[i]] = t;
        for (int32_t k = gv->tok_lo[i]; k < gv->tok_lo[i + 1]; k++) {
            int32_t id = gv->tok_ids[k];
            bits[id >> 6] |= 1ull << (id & 63);
            n_allowed++;
        }
        i++;
    }
    if (set_done(m, s))
        for (int32_t k = 0; k < gv->n_eog; k++) {
            bits[gv->eog[k] >> 6] |= 1ull << (gv->eog[k] & 63);
            n_allowed++;
        }
    m->sets[s].mask = bits;
    m->sets[s].n_allowed = n_allowed;
    m->mask_bytes += words * sizeof *bits;
    return 0;
}

int engine_grammar_matcher_mask(struct engine_grammar_matcher *m, float *logits,
                                struct err_detail *d) {
    m->d = d;
    if (m->ended) return err_set(d, ERR_GRAMMAR_TOKEN, "grammar: the output already ended");
    int r = maybe_compact(m);
    if (r < 0) return r;
    if (!m->sets[m->cur].mask && (r = mask_compute(m, m->cur)) < 0) return r;
    const struct gm_set *s = &m->sets[m->cur];
    if (!s->n_allowed)
        return err_set(d, ERR_GRAMMAR_STUCK,
                       "grammar: no token of the vocabulary continues the output here");
    int32_t n = m->gv->n_tokens;
    for (int32_t w = 0; w * 64 < n; w++) {
        uint64_t off = ~s->mask[w];
        int32_t end = MIN(n - w * 64, 64);
        float *x = logits + w * 64;
        if (!off) continue;
        if (off == ~0ull) { /* the common case in structure: a plain store loop */
            for (int32_t b = 0; b < end; b++) x[b] = -INFINITY;
            continue;
        }
        for (; off; off &= off - 1) {
            int32_t b = __builtin_ctzll(off);
            if (b < end) x[b] = -INFINITY;
        }
    }
    return s->n_allowed;
}

/* The set after the bytes of token (or after the raw bytes), SET_EMPTY if they do not fit. */
static int walk_bytes(struct engine_grammar_matcher *m, const char *p, size_t n, int32_t *ret) {
    int32_t s = m->cur;
    for (size_t i = 0; i < n && s != SET_EMPTY; i++) {
        int r = step(m, s, (uint8_t)p[i], &s);
        if (r < 0) return r;
    }
    *ret = n ? s : SET_EMPTY;
    return 0;
}

bool engine_grammar_matcher_allows(struct engine_grammar_matcher *m, int32_t token) {
    const struct engine_grammar_vocab *gv = m->gv;
    if (m->ended || token < 0 || token >= gv->n_tokens) return false;
    if (gv->is_eog[token]) return set_done(m, m->cur);
    if (m->sets[m->cur].mask) return (m->sets[m->cur].mask[token >> 6] >> (token & 63)) & 1;
    int32_t s;
    m->d = NULL;
    return walk_bytes(m, gv->bytes + gv->off[token], gv->off[token + 1] - gv->off[token], &s) >=
               0 &&
           s != SET_EMPTY;
}

static void quote(char *out, size_t cap, const char *p, size_t n) {
    size_t at = 0;
    for (size_t i = 0; i < n && at + 8 < cap; i++) {
        uint8_t c = (uint8_t)p[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
            out[at++] = (char)c;
        else
            at += (size_t)snprintf(out + at, cap - at, "\\x%02x", c);
    }
    out[at] = '\0';
}

static int accept_bytes(struct engine_grammar_matcher *m, const char *p, size_t n, int32_t token) {
    int32_t s;
    int r = maybe_compact(m);
    if (r < 0 || (r = walk_bytes(m, p, n, &s)) < 0) return r;
    if (s == SET_EMPTY) {
        char q[160];
        quote(q, sizeof q, p, MIN(n, (size_t)64));
        if (token >= 0)
            return err_set(m->d, ERR_GRAMMAR_TOKEN,
                           "grammar: token %d (\"%s\") is not allowed here", token, q);
        return err_set(m->d, ERR_GRAMMAR_TOKEN, "grammar: \"%s\" is not allowed here", q);
    }
    m->cur = s;
    return 0;
}

int engine_grammar_matcher_accept(struct engine_grammar_matcher *m, int32_t token,
                                  struct err_detail *d) {
    const struct engine_grammar_vocab *gv = m->gv;
    m->d = d;
    if (token < 0 || token >= gv->n_tokens)
        return err_set(d, ERR_TOKEN, "grammar: token %d is outside the vocabulary", token);
    if (m->ended)
        return err_set(d, ERR_GRAMMAR_TOKEN, "grammar: token %d after the output ended", token);
    if (gv->is_eog[token]) {
        if (!set_done(m, m->cur))
            return err_set(d, ERR_GRAMMAR_TOKEN,
                           "grammar: end-of-generation token %d before the output is complete",
                           token);
        m->ended = true;
        return 0;
    }
    return accept_bytes(m, gv->bytes + gv->off[token], gv->off[token + 1] - gv->off[token], token);
}

int engine_grammar_matcher_accept_bytes(struct engine_grammar_matcher *m, const char *s, size_t n,
                                        struct err_detail *d) {
    m->d = d;
    if (m->ended) return err_set(d, ERR_GRAMMAR_TOKEN, "grammar: bytes after the output ended");
    if (!n) return 0;
    return accept_bytes(m, s, n, -1);
}
