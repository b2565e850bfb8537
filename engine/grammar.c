/* Grammar text to the compiled form (see grammar.h for the syntax, grammar-impl.h for the
 * form). One recursive-descent pass builds rules with alternatives of elements; groups and
 * repetitions become helper rules (x* is h ::= x h | ε, which the matcher runs without
 * growing the stack because a rule called last in an alternative returns straight to its
 * caller's caller). Then undefined rules and left recursion are refused and the rules are
 * flattened. */
#include "engine/grammar-impl.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

struct elemvec {
    struct gram_elem *v;
    size_t n, cap;
};

struct prule {
    char *name; /* NULL for a helper rule (group, repetition) */
    size_t name_len;
    bool defined;
    size_t at; /* text offset of the definition, or of the first use */
    struct elemvec *alts;
    size_t n_alts, cap_alts;
};

struct parser {
    const char *start, *end, *p;
    struct prule *rules;
    size_t n_rules, cap_rules;
    struct gram_bytes *sets;
    size_t n_sets, cap_sets;
    int32_t single[256]; /* set index of the one-byte set {b}, -1 until made */
    size_t n_elems;      /* elements so far, against ENGINE_GRAMMAR_MAX_ELEMS */
    int depth;           /* group nesting, against stack overflow */
    struct err_detail *d;
};

#define MAX_GROUP_DEPTH 64

static int grow(void **v, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap * 2 : 8;
    while (c < need) c *= 2;
    void *q = NULL;
    size_t bytes;
    if (!size_mul(c, size, &bytes) || !(q = realloc(*v, bytes))) return -ENOMEM;
    *v = q;
    *cap = c;
    return 0;
}

static int elemvec_push(struct elemvec *v, struct gram_elem e) {
    int r = grow((void **)&v->v, &v->cap, v->n + 1, sizeof *v->v);
    if (r < 0) return r;
    v->v[v->n++] = e;
    return 0;
}

static void where(const struct parser *p, const char *at, int32_t *line, int32_t *col) {
    int32_t l = 1, c = 1;
    for (const char *q = p->start; q < at; q++) {
        if (*q == '\n') {
            l++;
            c = 1;
        } else {
            c++;
        }
    }
    *line = l;
    *col = c;
}

static int perr(const struct parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int perr(const struct parser *p, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int32_t line, col;
    where(p, p->p, &line, &col);
    return err_set(p->d, ERR_GRAMMAR, "grammar line %d, column %d: %s", line, col, msg);
}

static int count_elems(struct parser *p, size_t n) {
    if (!size_add(p->n_elems, n, &p->n_elems) || p->n_elems > (size_t)ENGINE_GRAMMAR_MAX_ELEMS)
        return err_set(p->d, ERR_TOO_LARGE, "grammar: more than %d elements after expansion",
                       ENGINE_GRAMMAR_MAX_ELEMS);
    return 0;
}

/* ---- rules and byte sets ------------------------------------------------------------ */

static int rule_new(struct parser *p, const char *name, size_t len, int32_t *ret) {
    if (p->n_rules >= (size_t)ENGINE_GRAMMAR_MAX_ELEMS)
        return err_set(p->d, ERR_TOO_LARGE, "grammar: too many rules");
    int r = grow((void **)&p->rules, &p->cap_rules, p->n_rules + 1, sizeof *p->rules);
    if (r < 0) return r;
    struct prule *pr = &p->rules[p->n_rules];
    *pr = (struct prule){0};
    if (name) {
        if (!(pr->name = strndup(name, len))) return -ENOMEM;
        pr->name_len = len;
    }
    pr->at = (size_t)(p->p - p->start);
    *ret = (int32_t)p->n_rules++;
    return 0;
}

static int rule_find(struct parser *p, const char *name, size_t len, int32_t *ret) {
    for (size_t i = 0; i < p->n_rules; i++)
        if (p->rules[i].name && p->rules[i].name_len == len &&
            !memcmp(p->rules[i].name, name, len)) {
            *ret = (int32_t)i;
            return 0;
        }
    return rule_new(p, name, len, ret);
}

/* Appends alternative e[0..n) to rule r (copied), plus its END element. */
static int rule_add_alt(struct parser *p, int32_t r, const struct gram_elem *e, size_t n) {
    struct prule *pr = &p->rules[r];
    int ret = grow((void **)&pr->alts, &pr->cap_alts, pr->n_alts + 1, sizeof *pr->alts);
    if (ret < 0 || (ret = count_elems(p, n + 1)) < 0) return ret;
    struct elemvec *alt = &pr->alts[pr->n_alts++];
    *alt = (struct elemvec){0};
    for (size_t i = 0; i < n; i++)
        if ((ret = elemvec_push(alt, e[i])) < 0) return ret;
    return 0;
}

static int set_add(struct parser *p, const struct gram_bytes *s, int32_t *ret) {
    for (size_t i = 0; i < p->n_sets; i++)
        if (!memcmp(&p->sets[i], s, sizeof *s)) {
            *ret = (int32_t)i;
            return 0;
        }
    int r = grow((void **)&p->sets, &p->cap_sets, p->n_sets + 1, sizeof *p->sets);
    if (r < 0) return r;
    p->sets[p->n_sets] = *s;
    *ret = (int32_t)p->n_sets++;
    return 0;
}

static int set_single(struct parser *p, uint8_t b, int32_t *ret) {
    if (p->single[b] < 0) {
        struct gram_bytes s = {0};
        s.bits[b >> 6] |= 1ull << (b & 63);
        int r = set_add(p, &s, &p->single[b]);
        if (r < 0) return r;
    }
    *ret = p->single[b];
    return 0;
}

/* ---- lexing ------------------------------------------------------------------------- */

static void skip_space(struct parser *p) {
    while (p->p < p->end) {
        char c = *p->p;
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            p->p++;
        } else if (c == '#') {
            while (p->p < p->end && *p->p != '\n') p->p++;
        } else {
            break;
        }
    }
}

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

static size_t name_len(const struct parser *p, const char *at) {
    size_t n = 0;
    while (at + n < p->end && is_name_char(at[n])) n++;
    return n;
}

/* Whether a rule definition `name ::=` starts at p->p. */
static bool at_rule_start(const struct parser *p) {
    size_t n = name_len(p, p->p);
    if (!n) return false;
    const char *q = p->p + n;
    while (q < p->end && (*q == ' ' || *q == '\t')) q++;
    return p->end - q >= 3 && !memcmp(q, "::=", 3);
}

static int hex_val(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One byte of a literal or class at p->p (after the caller checked it is not the closing
 * quote or bracket). */
static int lex_byte(struct parser *p, uint8_t *ret) {
    uint8_t c = (uint8_t)*p->p;
    if (c == '\n' || c == '\r') return perr(p, "line break inside a literal or class");
    if (c != '\\') {
        p->p++;
        *ret = c;
        return 0;
    }
    if (p->end - p->p < 2) return perr(p, "unfinished escape");
    char e = p->p[1];
    static const char plain[] = "\\\"'[]-^/";
    switch (e) {
    case 'n':
        *ret = '\n';
        break;
    case 'r':
        *ret = '\r';
        break;
    case 't':
        *ret = '\t';
        break;
    case 'x': {
        int hi = p->end - p->p >= 4 ? hex_val(p->p[2]) : -1;
        int lo = hi >= 0 ? hex_val(p->p[3]) : -1;
        if (lo < 0) return perr(p, "\\x needs two hex digits");
        *ret = (uint8_t)(hi << 4 | lo);
        p->p += 4;
        return 0;
    }
    default:
        if (!e || !strchr(plain, e)) return perr(p, "unknown escape '\\%c'", e);
        *ret = (uint8_t)e;
    }
    p->p += 2;
    return 0;
}

/* ---- parsing ------------------------------------------------------------------------ */

static int parse_alts(struct parser *p, int32_t rule);

static int parse_literal(struct parser *p, struct elemvec *item) {
    p->p++; /* the opening quote */
    for (;;) {
        if (p->p >= p->end) return perr(p, "unterminated literal");
        if (*p->p == '"') break;
        uint8_t b;
        int32_t set;
        int r = lex_byte(p, &b);
        if (r < 0 || (r = set_single(p, b, &set)) < 0 ||
            (r = elemvec_push(item, (struct gram_elem){GRAM_CHARS, set})) < 0)
            return r;
    }
    p->p++;
    return 0;
}

static int parse_class(struct parser *p, struct elemvec *item) {
    p->p++; /* '[' */
    bool negate = p->p < p->end && *p->p == '^';
    if (negate) p->p++;
    struct gram_bytes s = {0};
    bool any = false;
    for (;;) {
        if (p->p >= p->end) return perr(p, "unterminated class");
        if (*p->p == ']') break;
        if ((uint8_t)*p->p >= 0x80)
            return perr(p, "non-ASCII byte in a class (classes are over bytes: use \\xHH or a "
                           "literal)");
        uint8_t lo, hi;
        int r = lex_byte(p, &lo);
        if (r < 0) return r;
        hi = lo;
        if (p->end - p->p >= 2 && p->p[0] == '-' && p->p[1] != ']') {
            p->p++;
            if ((uint8_t)*p->p >= 0x80) return perr(p, "non-ASCII byte in a class");
            if ((r = lex_byte(p, &hi)) < 0) return r;
            if (hi < lo) return perr(p, "class range %#x-%#x is backwards", lo, hi);
        }
        for (unsigned b = lo; b <= hi; b++) s.bits[b >> 6] |= 1ull << (b & 63);
        any = true;
    }
    p->p++;
    if (!any) return perr(p, "empty class");
    if (negate)
        for (int i = 0; i < 4; i++) s.bits[i] = ~s.bits[i];
    int32_t set;
    int r = set_add(p, &s, &set);
    if (r < 0) return r;
    return elemvec_push(item, (struct gram_elem){GRAM_CHARS, set});
}

static int parse_count(struct parser *p, long *ret) {
    long v = 0;
    if (p->p >= p->end || *p->p < '0' || *p->p > '9') return perr(p, "expected a count");
    while (p->p < p->end && *p->p >= '0' && *p->p <= '9') {
        v = v * 10 + (*p->p++ - '0');
        if (v > ENGINE_GRAMMAR_MAX_REPEAT)
            return err_set(p->d, ERR_TOO_LARGE, "grammar: repetition count above %d",
                           ENGINE_GRAMMAR_MAX_REPEAT);
    }
    *ret = v;
    return 0;
}

/* h ::= x h | ε */
static int make_star(struct parser *p, struct gram_elem x, struct gram_elem *ret) {
    int32_t h = -1;
    int r = rule_new(p, NULL, 0, &h);
    if (r < 0) return r;
    struct gram_elem alt[2] = {x, {GRAM_RULE, h}};
    if ((r = rule_add_alt(p, h, alt, 2)) < 0 || (r = rule_add_alt(p, h, NULL, 0)) < 0) return r;
    *ret = (struct gram_elem){GRAM_RULE, h};
    return 0;
}

/* Applies a postfix operator, if one follows, to item and appends the result to out. */
static int parse_postfix(struct parser *p, struct elemvec *item, struct elemvec *out) {
    char op = p->p < p->end ? *p->p : 0;
    int r;
    if (op != '*' && op != '+' && op != '?' && op != '{') {
        for (size_t i = 0; i < item->n; i++)
            if ((r = elemvec_push(out, item->v[i])) < 0) return r;
        return 0;
    }
    long m = 0, n = -1; /* n < 0: unbounded */
    p->p++;
    if (op == '+') m = 1;
    if (op == '?') n = 1;
    if (op == '{') {
        skip_space(p);
        if ((r = parse_count(p, &m)) < 0) return r;
        skip_space(p);
        n = m;
        if (p->p < p->end && *p->p == ',') {
            p->p++;
            skip_space(p);
            n = -1;
            if (p->p < p->end && *p->p != '}' && (r = parse_count(p, &n)) < 0) return r;
            skip_space(p);
        }
        if (p->p >= p->end || *p->p != '}') return perr(p, "expected '}'");
        p->p++;
        if (n >= 0 && n < m) return perr(p, "repetition {%ld,%ld} has max < min", m, n);
    }
    struct gram_elem x = item->n == 1 ? item->v[0] : (struct gram_elem){GRAM_RULE, -1};
    if (item->n != 1) {
        int32_t h = -1;
        if ((r = rule_new(p, NULL, 0, &h)) < 0 || (r = rule_add_alt(p, h, item->v, item->n)) < 0)
            return r;
        x.arg = h;
    }
    if ((r = count_elems(p, (size_t)m)) < 0) return r;
    for (long i = 0; i < m; i++)
        if ((r = elemvec_push(out, x)) < 0) return r;
    if (n < 0) {
        struct gram_elem star;
        if ((r = make_star(p, x, &star)) < 0) return r;
        return elemvec_push(out, star);
    }
    /* o_1 ::= x | ε, o_k ::= x o_(k-1) | ε */
    struct gram_elem prev = {GRAM_END, 0};
    for (long k = 1; k <= n - m; k++) {
        int32_t h = -1;
        struct gram_elem alt[2] = {x, prev};
        if ((r = rule_new(p, NULL, 0, &h)) < 0 ||
            (r = rule_add_alt(p, h, alt, k == 1 ? 1 : 2)) < 0 ||
            (r = rule_add_alt(p, h, NULL, 0)) < 0)
            return r;
        prev = (struct gram_elem){GRAM_RULE, h};
    }
    return n > m ? elemvec_push(out, prev) : 0;
}

static int parse_seq(struct parser *p, struct elemvec *out) {
    struct elemvec item = {0};
    int r = 0;
    for (;;) {
        skip_space(p);
        if (p->p >= p->end) break;
        char c = *p->p;
        if (c == '|' || c == ')') break;
        item.n = 0;
        if (c == '"') {
            r = parse_literal(p, &item);
        } else if (c == '[') {
            r = parse_class(p, &item);
        } else if (c == '.') {
            p->p++;
            struct gram_bytes all;
            memset(&all, 0xff, sizeof all);
            int32_t set;
            if ((r = set_add(p, &all, &set)) >= 0)
                r = elemvec_push(&item, (struct gram_elem){GRAM_CHARS, set});
        } else if (c == '(') {
            if (++p->depth > MAX_GROUP_DEPTH) {
                r = perr(p, "groups nested deeper than %d", MAX_GROUP_DEPTH);
                break;
            }
            int32_t h = -1;
            p->p++;
            if ((r = rule_new(p, NULL, 0, &h)) >= 0 && (r = parse_alts(p, h)) >= 0) {
                skip_space(p);
                if (p->p >= p->end || *p->p != ')')
                    r = perr(p, "expected ')'");
                else
                    p->p++;
            }
            p->depth--;
            if (r >= 0) r = elemvec_push(&item, (struct gram_elem){GRAM_RULE, h});
        } else if (is_name_char(c)) {
            if (at_rule_start(p)) break;
            size_t n = name_len(p, p->p);
            int32_t ref;
            if ((r = rule_find(p, p->p, n, &ref)) >= 0)
                r = elemvec_push(&item, (struct gram_elem){GRAM_RULE, ref});
            p->p += n;
        } else {
            r = perr(p, "unexpected '%c'", c);
        }
        if (r < 0 || (r = parse_postfix(p, &item, out)) < 0) break;
    }
    free(item.v);
    return r;
}

static int parse_alts(struct parser *p, int32_t rule) {
    for (;;) {
        struct elemvec alt = {0};
        int r = parse_seq(p, &alt);
        if (r >= 0) r = rule_add_alt(p, rule, alt.v, alt.n);
        free(alt.v);
        if (r < 0) return r;
        skip_space(p);
        if (p->p >= p->end || *p->p != '|') return 0;
        p->p++;
    }
}

/* ---- checks and flattening ---------------------------------------------------------- */

static int rule_err(struct parser *p, int32_t r, const char *what) {
    const struct prule *pr = &p->rules[r];
    int32_t line, col;
    where(p, p->start + pr->at, &line, &col);
    if (pr->name)
        return err_set(p->d, ERR_GRAMMAR, "grammar line %d, column %d: rule '%s' %s", line, col,
                       pr->name, what);
    return err_set(p->d, ERR_GRAMMAR, "grammar line %d, column %d: the group or repetition %s",
                   line, col, what);
}

/* Nullable rules by fixpoint, then a depth-first search for a cycle among "r calls s
 * before matching any byte" edges. */
static int check_left_recursion(struct parser *p) {
    size_t n = p->n_rules;
    _cleanup_free_ bool *nullable = calloc(n ? n : 1, sizeof *nullable);
    _cleanup_free_ uint8_t *color = calloc(n ? n : 1, 1);
    _cleanup_free_ int32_t *stack = malloc_array(n ? n : 1, 2 * sizeof *stack);
    if (!nullable || !color || !stack) return -ENOMEM;
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < n; r++) {
            if (nullable[r]) continue;
            for (size_t a = 0; a < p->rules[r].n_alts && !nullable[r]; a++) {
                const struct elemvec *alt = &p->rules[r].alts[a];
                bool all = true;
                for (size_t i = 0; i < alt->n && all; i++)
                    all = alt->v[i].kind == GRAM_RULE && nullable[alt->v[i].arg];
                if (all) nullable[r] = changed = true;
            }
        }
    }
    /* iterative DFS; stack holds (rule, next edge index) with edges enumerated as
     * (alternative, element) pairs flattened into one counter */
    for (size_t root = 0; root < n; root++) {
        if (color[root]) continue;
        size_t sp = 0;
        stack[0] = (int32_t)root;
        stack[1] = 0;
        color[root] = 1;
        sp = 1;
        while (sp) {
            int32_t r = stack[2 * (sp - 1)], *next = &stack[2 * (sp - 1) + 1];
            const struct prule *pr = &p->rules[r];
            int32_t s = -1;
            /* next = alt << 16 | elem would overflow for long alternatives; walk instead */
            int32_t k = 0;
            for (size_t a = 0; a < pr->n_alts && s < 0; a++) {
                const struct elemvec *alt = &pr->alts[a];
                for (size_t i = 0; i < alt->n; i++) {
                    if (alt->v[i].kind != GRAM_RULE) break;
                    if (k++ == *next) {
                        s = alt->v[i].arg;
                        break;
                    }
                    if (!nullable[alt->v[i].arg]) break;
                }
            }
            if (s < 0) {
                color[r] = 2;
                sp--;
                continue;
            }
            (*next)++;
            if (color[s] == 1) return rule_err(p, s, "is left-recursive");
            if (color[s] == 0) {
                color[s] = 1;
                stack[2 * sp] = s;
                stack[2 * sp + 1] = 0;
                sp++;
            }
        }
    }
    return 0;
}

static int flatten(struct parser *p, struct engine_grammar *g) {
    size_t n_alts = 0, n_elems = 0;
    for (size_t r = 0; r < p->n_rules; r++) {
        n_alts += p->rules[r].n_alts;
        for (size_t a = 0; a < p->rules[r].n_alts; a++) n_elems += p->rules[r].alts[a].n + 1;
    }
    g->elems = malloc_array(n_elems ? n_elems : 1, sizeof *g->elems);
    g->alt_pos = malloc_array(n_alts ? n_alts : 1, sizeof *g->alt_pos);
    g->rule_alt = malloc_array(p->n_rules + 1, sizeof *g->rule_alt);
    g->sets = malloc_array(p->n_sets ? p->n_sets : 1, sizeof *g->sets);
    if (!g->elems || !g->alt_pos || !g->rule_alt || !g->sets) return -ENOMEM;
    if (p->n_sets) memcpy(g->sets, p->sets, p->n_sets * sizeof *g->sets);
    g->n_sets = (int32_t)p->n_sets;
    int32_t e = 0, k = 0;
    for (size_t r = 0; r < p->n_rules; r++) {
        g->rule_alt[r] = k;
        for (size_t a = 0; a < p->rules[r].n_alts; a++) {
            const struct elemvec *alt = &p->rules[r].alts[a];
            g->alt_pos[k++] = e;
            if (alt->n) memcpy(&g->elems[e], alt->v, alt->n * sizeof *alt->v);
            e += (int32_t)alt->n;
            g->elems[e++] = (struct gram_elem){GRAM_END, 0};
        }
    }
    g->rule_alt[p->n_rules] = k;
    g->n_elems = e;
    g->n_rules = (int32_t)p->n_rules;
    return 0;
}

void engine_grammar_free(struct engine_grammar *g) {
    if (!g) return;
    free(g->elems);
    free(g->sets);
    free(g->rule_alt);
    free(g->alt_pos);
    free(g);
}

static void parser_done(struct parser *p) {
    for (size_t r = 0; r < p->n_rules; r++) {
        for (size_t a = 0; a < p->rules[r].n_alts; a++) free(p->rules[r].alts[a].v);
        free(p->rules[r].alts);
        free(p->rules[r].name);
    }
    free(p->rules);
    free(p->sets);
}

static int parse_all(struct parser *p, struct engine_grammar *g) {
    int r;
    for (;;) {
        skip_space(p);
        if (p->p >= p->end) break;
        size_t n = name_len(p, p->p);
        if (!n || !at_rule_start(p)) return perr(p, "expected a rule definition 'name ::= ...'");
        int32_t rule;
        if ((r = rule_find(p, p->p, n, &rule)) < 0) return r;
        if (p->rules[rule].defined) return perr(p, "rule '%.*s' is defined twice", (int)n, p->p);
        p->rules[rule].defined = true;
        p->rules[rule].at = (size_t)(p->p - p->start);
        p->p += n;
        skip_space(p);
        p->p += 3; /* "::=" */
        if ((r = parse_alts(p, rule)) < 0) return r;
        skip_space(p);
        if (p->p < p->end && !at_rule_start(p)) return perr(p, "unexpected '%c'", *p->p);
    }
    g->root = -1;
    for (size_t i = 0; i < p->n_rules; i++) {
        const struct prule *pr = &p->rules[i];
        if (pr->name && !pr->defined) return rule_err(p, (int32_t)i, "is used but not defined");
        if (pr->name && pr->name_len == 4 && !memcmp(pr->name, "root", 4)) g->root = (int32_t)i;
    }
    if (g->root < 0) return err_set(p->d, ERR_GRAMMAR, "grammar: no rule named 'root'");
    if ((r = check_left_recursion(p)) < 0) return r;
    return flatten(p, g);
}

int engine_grammar_parse(const char *text, size_t len, struct engine_grammar **ret,
                         struct err_detail *d) {
    if (!text && len) return ERR_INVALID;
    if (len > ENGINE_GRAMMAR_MAX_TEXT_BYTES)
        return err_set(d, ERR_TOO_LARGE, "grammar: text of %zu bytes, the limit is %zu", len,
                       ENGINE_GRAMMAR_MAX_TEXT_BYTES);
    struct parser p = {.start = text, .end = text + len, .p = text, .d = d};
    memset(p.single, 0xff, sizeof p.single);
    struct engine_grammar *g = calloc(1, sizeof *g);
    if (!g) return -ENOMEM;
    int r = parse_all(&p, g);
    parser_done(&p);
    if (r < 0) {
        engine_grammar_free(g);
        return r;
    }
    *ret = g;
    return 0;
}
