/* grammar-impl — the compiled form shared by the parser (grammar.c) and the matcher
 * (grammar-match.c).
 *
 * A grammar is a flat array of elements. Rule r has the alternatives that start at
 * alt_pos[rule_alt[r]] .. alt_pos[rule_alt[r + 1] - 1]; each alternative is a run of
 * GRAM_CHARS and GRAM_RULE elements closed by GRAM_END. A position is an index into elems. */
#pragma once

#include "engine/grammar.h"

enum gram_kind {
    GRAM_END,   /* end of an alternative: return to the caller's frame */
    GRAM_CHARS, /* one byte from byte set arg */
    GRAM_RULE,  /* rule arg */
    GRAM_KIND_COUNT
};

struct gram_elem {
    int32_t kind;
    int32_t arg;
};

/* 256 bits: byte b is in the set when bits[b >> 6] >> (b & 63) & 1 */
struct gram_bytes {
    uint64_t bits[4];
};

static inline bool gram_bytes_has(const struct gram_bytes *s, uint8_t b) {
    return (s->bits[b >> 6] >> (b & 63)) & 1;
}

struct engine_grammar {
    struct gram_elem *elems; /* (n_elems) */
    int32_t n_elems;
    struct gram_bytes *sets; /* (n_sets) */
    int32_t n_sets;
    int32_t *rule_alt; /* (n_rules + 1) indices into alt_pos */
    int32_t *alt_pos;  /* (n_alts) first position of each alternative */
    int32_t n_rules;
    int32_t root;
};
