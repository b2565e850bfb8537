/* JSON Schema to grammar text (see grammar.h for what is supported and refused).
 *
 * The schema is parsed with jansson (a Debian library warm-httpd already uses; objects keep
 * their key order, which is the property order we emit). Each schema node becomes one rule
 * `<prefix>rN`; shared pieces (whitespace, strings, numbers, any value) are fixed rules
 * appended once. Errors name the keyword and the node's JSON pointer, for an HTTP 400. */
#include "engine/grammar-impl.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_PREFIX 64
#define MAX_SCHEMA_DEPTH 128
#define MAX_POINTER 1024
/* the grammar's integer part has at most 16 digits, so a bound at or past ±(10^16 - 1) is
 * no bound at all */
#define INT_LIMIT 9999999999999999LL

struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
};

static void sb_put(struct sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap * 2 : 256;
        while (c < b->n + n + 1) c *= 2;
        char *q = realloc(b->p, c);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        b->oom = true; /* callers only format short pieces */
        return;
    }
    sb_put(b, tmp, (size_t)n);
}

/* bytes as a grammar literal "..." */
static void sb_literal(struct sbuf *b, const char *s, size_t n) {
    sb_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        uint8_t c = (uint8_t)s[i];
        if (c == '"' || c == '\\')
            sb_printf(b, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            sb_printf(b, "\\x%02x", c);
        else
            sb_put(b, s + i, 1);
    }
    sb_put(b, "\"", 1);
}

struct ref {
    char *pointer;
    int32_t rule;
};

struct sc {
    json_t *root;
    const char *prefix;
    struct sbuf out;
    struct err_detail *d;
    char path[MAX_POINTER]; /* JSON pointer of the node being compiled */
    size_t path_len;
    struct ref *refs;
    size_t n_refs, cap_refs;
    int32_t n_rules;
    int depth;
};

static int fail(struct sc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct sc *c, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(c->d, ERR_GRAMMAR, "JSON schema: %s at %s", msg,
                   c->path_len ? c->path : "the root (\"\")");
}

/* Appends /seg (escaped as RFC 6901 says) to the path; returns the old length. */
static size_t path_push(struct sc *c, const char *seg) {
    size_t old = c->path_len;
    char tmp[MAX_POINTER];
    size_t n = 0;
    tmp[n++] = '/';
    for (const char *s = seg; *s && n + 3 < sizeof tmp; s++) {
        if (*s == '~' || *s == '/') {
            tmp[n++] = '~';
            tmp[n++] = *s == '~' ? '0' : '1';
        } else {
            tmp[n++] = *s;
        }
    }
    if (c->path_len + n + 1 < sizeof c->path) {
        memcpy(c->path + c->path_len, tmp, n);
        c->path_len += n;
        c->path[c->path_len] = '\0';
    }
    return old;
}

static size_t path_push_index(struct sc *c, size_t i) {
    char seg[32];
    snprintf(seg, sizeof seg, "%zu", i);
    return path_push(c, seg);
}

static void path_pop(struct sc *c, size_t old) {
    c->path_len = old;
    c->path[old] = '\0';
}

static int32_t rule_next(struct sc *c) { return c->n_rules++; }

/* "<prefix>rN ::= " */
static void rule_head(struct sc *c, int32_t id) { sb_printf(&c->out, "%sr%d ::= ", c->prefix, id); }

/* A rule reference as text: a numbered rule or a fixed one ("value", "string"). */
struct name {
    char s[MAX_PREFIX + 24];
};

static struct name name_rule(const struct sc *c, int32_t id) {
    struct name n;
    snprintf(n.s, sizeof n.s, "%sr%d", c->prefix, id);
    return n;
}

static struct name name_fixed(const struct sc *c, const char *fixed) {
    struct name n;
    snprintf(n.s, sizeof n.s, "%s%s", c->prefix, fixed);
    return n;
}

/* ---- keywords ----------------------------------------------------------------------- */

static const char *const refused[] = {
    "pattern",
    "patternProperties",
    "if",
    "then",
    "else",
    "not",
    "unevaluatedProperties",
    "unevaluatedItems",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "contains",
    "minContains",
    "maxContains",
    "multipleOf",
    "prefixItems",
    "$dynamicRef",
    "$recursiveRef",
    "additionalItems",
};

/* keywords that only apply to one type; next to anyOf/oneOf they would need an
 * intersection of grammars, which is refused */
static const char *const typed[] = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "format",
    "enum",
    "const",
};

static bool in_list(const char *key, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(key, list[i])) return true;
    return false;
}

static int gen(struct sc *c, json_t *s, struct name *ret);

static int check_keywords(struct sc *c, json_t *s) {
    const char *key;
    json_t *v;
    json_object_foreach(s, key, v) {
        if (in_list(key, refused, ARRAY_SIZE(refused)))
            return fail(c, "unsupported keyword '%s'", key);
        if (!strcmp(key, "uniqueItems") && json_is_true(v))
            return fail(c, "unsupported keyword 'uniqueItems' (true)");
        if (!strcmp(key, "items") && json_is_array(v))
            return fail(c, "unsupported keyword 'items' as an array (tuple form)");
    }
    return 0;
}

/* A non-negative integer keyword (minItems, maxLength, ...); -1 when absent. */
static int get_count(struct sc *c, json_t *s, const char *key, long *ret) {
    json_t *v = json_object_get(s, key);
    *ret = -1;
    if (!v) return 0;
    double x = json_is_integer(v) ? (double)json_integer_value(v)
               : json_is_real(v)  ? json_real_value(v)
                                  : -1;
    if (x < 0 || x != floor(x)) return fail(c, "'%s' must be a non-negative integer", key);
    if (x > ENGINE_GRAMMAR_MAX_REPEAT)
        return fail(c, "'%s' of %.0f is above the supported %d", key, x, ENGINE_GRAMMAR_MAX_REPEAT);
    *ret = (long)x;
    return 0;
}

static int get_number(struct sc *c, json_t *s, const char *key, bool *has, double *ret) {
    json_t *v = json_object_get(s, key);
    *has = false;
    if (!v) return 0;
    if (json_is_boolean(v))
        return fail(c, "unsupported keyword '%s' as a boolean (draft 4 form)", key);
    if (!json_is_number(v)) return fail(c, "'%s' must be a number", key);
    *has = true;
    *ret = json_number_value(v);
    return 0;
}

/* ---- literals, enum, const ---------------------------------------------------------- */

static void sb_json_literal(struct sc *c, struct sbuf *b, json_t *v) {
    char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!text) {
        b->oom = true;
        return;
    }
    sb_literal(b, text, strlen(text));
    free(text);
}

/* ---- integers and numbers with bounds ----------------------------------------------- */

/* Digit strings of length n (n >= 1) in [lo, hi] (both n digits, lo <= hi), as an
 * expression: the usual split at the first digit where the bounds differ. */
static void digits_range(struct sbuf *b, const char *lo, const char *hi, int n) {
    bool all_lo = true, all_hi = true;
    for (int i = 0; i < n; i++) {
        all_lo &= lo[i] == '0';
        all_hi &= hi[i] == '9';
    }
    if (all_lo && all_hi) {
        sb_printf(b, " [0-9]{%d}", n);
        return;
    }
    bool rest_lo = true, rest_hi = true;
    for (int i = 1; i < n; i++) {
        rest_lo &= lo[i] == '0';
        rest_hi &= hi[i] == '9';
    }
    if (n > 1 && lo[0] != hi[0] && rest_lo && rest_hi) {
        sb_printf(b, " [%c-%c] [0-9]{%d}", lo[0], hi[0], n - 1);
        return;
    }
    if (lo[0] == hi[0]) {
        sb_printf(b, " \"%c\"", lo[0]);
        if (n > 1) digits_range(b, lo + 1, hi + 1, n - 1);
        return;
    }
    if (n == 1) {
        sb_printf(b, " [%c-%c]", lo[0], hi[0]);
        return;
    }
    char nines[20], zeros[20];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    sb_printf(b, " ( \"%c\"", lo[0]);
    digits_range(b, lo + 1, nines, n - 1);
    if (lo[0] + 1 <= hi[0] - 1) sb_printf(b, " | [%c-%c] [0-9]{%d}", lo[0] + 1, hi[0] - 1, n - 1);
    sb_printf(b, " | \"%c\"", hi[0]);
    digits_range(b, zeros, hi + 1, n - 1);
    sb_put(b, " )", 2);
}

/* Decimal integers without sign or leading zeros in [lo, hi] (0 <= lo; hi < 0: no upper
 * bound, i.e. up to 16 digits) as alternatives, each starting with " | ". */
static void uint_range(struct sbuf *b, long long lo, long long hi) {
    char los[24], his[24];
    int nlo = snprintf(los, sizeof los, "%lld", lo);
    int nhi = hi < 0 ? 16 : snprintf(his, sizeof his, "%lld", hi);
    for (int len = nlo; len <= nhi; len++) {
        char a[24], z[24];
        if (len == nlo) {
            memcpy(a, los, (size_t)len);
        } else {
            memset(a, '0', (size_t)len);
            a[0] = '1';
        }
        if (hi >= 0 && len == nhi)
            memcpy(z, his, (size_t)len);
        else
            memset(z, '9', (size_t)len);
        sb_put(b, " |", 2);
        digits_range(b, a, z, len);
    }
}

/* Integers in [lo, hi]; has_lo/has_hi false: unbounded on that side. */
static int int_range(struct sc *c, struct sbuf *b, bool has_lo, long long lo, bool has_hi,
                     long long hi) {
    if (has_lo && has_hi && lo > hi) return fail(c, "no integer lies between the bounds");
    struct sbuf alts = {0};
    if (!has_lo || lo < 0) { /* "-" and a magnitude in [max(1, -hi), -lo] */
        long long mlo = has_hi && hi < 0 ? -hi : 1, mhi = has_lo ? -lo : -1;
        struct sbuf mag = {0};
        uint_range(&mag, mlo, mhi);
        if (mag.p) sb_printf(&alts, " | \"-\" (%s )", mag.p + 2);
        alts.oom |= mag.oom;
        free(mag.p);
    }
    if (!has_hi || hi >= 0) uint_range(&alts, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1);
    if (alts.p) sb_printf(b, "(%s )", alts.p + 2);
    b->oom |= alts.oom;
    free(alts.p);
    return 0;
}

/* Numbers whose magnitude m satisfies lo <= m <= hi (integers, 0 <= lo; hi < 0: none):
 * an integer part in [lo, hi - 1] with any fraction, or hi with a zero fraction. */
static void magnitude_range(struct sc *c, struct sbuf *b, long long lo, long long hi) {
    sb_put(b, "(", 1);
    bool any = false;
    if (hi < 0 || hi - 1 >= lo) {
        struct sbuf ip = {0};
        uint_range(&ip, lo, hi < 0 ? -1 : hi - 1);
        if (ip.p) sb_printf(b, " (%s ) %sfrac?", ip.p + 2, c->prefix);
        b->oom |= ip.oom;
        free(ip.p);
        any = true;
    }
    if (hi >= 0) {
        struct sbuf ip = {0};
        uint_range(&ip, hi, hi);
        if (ip.p) sb_printf(b, "%s (%s ) %szfrac?", any ? " |" : "", ip.p + 2, c->prefix);
        b->oom |= ip.oom;
        free(ip.p);
    }
    sb_put(b, " )", 2);
}

static int bound(struct sc *c, json_t *s, const char *key, bool *has, double *ret) {
    int r = get_number(c, s, key, has, ret);
    if (r >= 0 && *has && fabs(*ret) > (double)INT_LIMIT) *has = false; /* no bound */
    return r;
}

static int gen_integer(struct sc *c, json_t *s, struct sbuf *b) {
    bool hmin, hmax, hxmin, hxmax;
    double min = 0, max = 0, xmin = 0, xmax = 0;
    int r;
    if ((r = bound(c, s, "minimum", &hmin, &min)) < 0 ||
        (r = bound(c, s, "maximum", &hmax, &max)) < 0 ||
        (r = bound(c, s, "exclusiveMinimum", &hxmin, &xmin)) < 0 ||
        (r = bound(c, s, "exclusiveMaximum", &hxmax, &xmax)) < 0)
        return r;
    if (!hmin && !hmax && !hxmin && !hxmax) {
        sb_printf(b, "%sinteger", c->prefix);
        return 0;
    }
    long long lo = 0, hi = 0;
    if (hmin) lo = (long long)ceil(min);
    if (hxmin) lo = MAX(hmin ? lo : LLONG_MIN, (long long)floor(xmin) + 1);
    if (hmax) hi = (long long)floor(max);
    if (hxmax) hi = MIN(hmax ? hi : LLONG_MAX, (long long)ceil(xmax) - 1);
    return int_range(c, b, hmin || hxmin, lo, hmax || hxmax, hi);
}

static int gen_number(struct sc *c, json_t *s, struct sbuf *b) {
    bool hmin, hmax, hx;
    double min = 0, max = 0, x = 0;
    int r;
    if ((r = bound(c, s, "minimum", &hmin, &min)) < 0 ||
        (r = bound(c, s, "maximum", &hmax, &max)) < 0 ||
        (r = get_number(c, s, "exclusiveMinimum", &hx, &x)) < 0)
        return r;
    if (hx) return fail(c, "unsupported keyword 'exclusiveMinimum' on a number");
    if ((r = get_number(c, s, "exclusiveMaximum", &hx, &x)) < 0) return r;
    if (hx) return fail(c, "unsupported keyword 'exclusiveMaximum' on a number");
    if (!hmin && !hmax) {
        sb_printf(b, "%snumber", c->prefix);
        return 0;
    }
    if ((hmin && min != floor(min)) || (hmax && max != floor(max)))
        return fail(c, "unsupported keyword '%s' with a non-integer bound on a number",
                    hmin && min != floor(min) ? "minimum" : "maximum");
    long long lo = hmin ? (long long)min : 0, hi = hmax ? (long long)max : 0;
    if (hmin && hmax && lo > hi) return fail(c, "no number lies between minimum and maximum");
    sb_put(b, "(", 1);
    bool any = false;
    if (!hmax || hi >= 0) { /* x >= 0: magnitude in [max(lo, 0), hi] */
        sb_put(b, " ", 1);
        magnitude_range(c, b, hmin && lo > 0 ? lo : 0, hmax ? hi : -1);
        any = true;
    }
    if (!hmin || lo < 0) { /* x = -m: m in [max(-hi, 0), -lo] */
        sb_printf(b, "%s \"-\" ", any ? " |" : "");
        magnitude_range(c, b, hmax && hi < 0 ? -hi : 0, hmin ? -lo : -1);
    }
    sb_put(b, " )", 2);
    return 0;
}

/* ---- strings ------------------------------------------------------------------------ */

static int gen_string(struct sc *c, json_t *s, struct sbuf *b) {
    json_t *f = json_object_get(s, "format");
    if (f && !json_is_string(f)) return fail(c, "'format' must be a string");
    const char *fmt = f ? json_string_value(f) : NULL;
    static const char *const formats[] = {"date", "time", "date-time", "uuid"};
    if (fmt && in_list(fmt, formats, ARRAY_SIZE(formats))) {
        if (!strcmp(fmt, "date-time"))
            sb_printf(b, "\"\\\"\" %sdate \"T\" %stime \"\\\"\"", c->prefix, c->prefix);
        else
            sb_printf(b, "\"\\\"\" %s%s \"\\\"\"", c->prefix, fmt);
        return 0;
    }
    long min, max;
    int r;
    if ((r = get_count(c, s, "minLength", &min)) < 0 ||
        (r = get_count(c, s, "maxLength", &max)) < 0)
        return r;
    if (min >= 0 && max >= 0 && min > max) return fail(c, "minLength is above maxLength");
    if (min < 0 && max < 0)
        sb_printf(b, "%sstring", c->prefix);
    else if (max < 0)
        sb_printf(b, "\"\\\"\" %schar{%ld,} \"\\\"\"", c->prefix, MAX(min, 0));
    else
        sb_printf(b, "\"\\\"\" %schar{%ld,%ld} \"\\\"\"", c->prefix, MAX(min, 0), max);
    return 0;
}

/* ---- arrays ------------------------------------------------------------------------- */

static int gen_array(struct sc *c, json_t *s, struct sbuf *b) {
    json_t *items = json_object_get(s, "items");
    struct name item = name_fixed(c, "value");
    int r;
    if (items) {
        size_t old = path_push(c, "items");
        r = gen(c, items, &item);
        path_pop(c, old);
        if (r < 0) return r;
    }
    long min, max;
    if ((r = get_count(c, s, "minItems", &min)) < 0 || (r = get_count(c, s, "maxItems", &max)) < 0)
        return r;
    if (min >= 0 && max >= 0 && min > max) return fail(c, "minItems is above maxItems");
    struct name wsn = name_fixed(c, "ws");
    const char *wsb = wsn.s;
    if (max == 0) {
        sb_printf(b, "\"[\" %s \"]\"", wsb);
        return 0;
    }
    long more_min = MAX(min - 1, 0);
    char more[3 * MAX_PREFIX + 128];
    if (max < 0)
        snprintf(more, sizeof more, "( %s \",\" %s %s ){%ld,}", wsb, wsb, item.s, more_min);
    else
        snprintf(more, sizeof more, "( %s \",\" %s %s ){%ld,%ld}", wsb, wsb, item.s, more_min,
                 max - 1);
    if (min <= 0)
        sb_printf(b, "\"[\" %s ( %s %s %s )? \"]\"", wsb, item.s, more, wsb);
    else
        sb_printf(b, "\"[\" %s %s %s %s \"]\"", wsb, item.s, more, wsb);
    return 0;
}

/* ---- objects ------------------------------------------------------------------------ */

struct prop {
    const char *key;
    struct name value;
    bool required;
};

static int name_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool key_char(uint8_t ch) { return ch >= 0x20 && ch <= 0x7e && ch != '"' && ch != '\\'; }

/* A rule for the rest of a key (printable ASCII without '"' and '\') given that the first
 * depth bytes equal those of names[0..n) (sorted, all longer than or equal to depth):
 * any key but the names. */
static int32_t other_key_rule(struct sc *c, const char **names, size_t n, size_t depth) {
    int32_t id = rule_next(c);
    struct sbuf b = {0};
    bool terminal = false;
    size_t i = 0;
    if (i < n && strlen(names[0]) == depth) {
        terminal = true;
        i = 1;
    }
    struct gram_bytes used = {0};
    bool first_alt = true;
    if (!terminal) {
        first_alt = false; /* the empty alternative: the key may end here */
    }
    while (i < n) {
        uint8_t ch = (uint8_t)names[i][depth];
        size_t j = i;
        while (j < n && (uint8_t)names[j][depth] == ch) j++;
        int32_t sub = other_key_rule(c, names + i, j - i, depth + 1);
        sb_put(&b, first_alt ? "" : " | ", first_alt ? 0 : 3);
        sb_literal(&b, (const char *)&ch, 1);
        sb_printf(&b, " %s", name_rule(c, sub).s);
        first_alt = false;
        used.bits[ch >> 6] |= 1ull << (ch & 63);
        i = j;
    }
    /* any other first byte, then anything */
    sb_put(&b, first_alt ? "[" : " | [", first_alt ? 1 : 4);
    for (unsigned ch = 0x20; ch <= 0x7e; ch++)
        if (key_char((uint8_t)ch) && !gram_bytes_has(&used, (uint8_t)ch))
            sb_printf(&b, "\\x%02x", ch);
    sb_printf(&b, "] %skc*", c->prefix);
    rule_head(c, id);
    sb_put(&c->out, b.p ? b.p : "", b.p ? b.n : 0);
    sb_put(&c->out, "\n", 1);
    c->out.oom |= b.oom;
    free(b.p);
    return id;
}

static int gen_object(struct sc *c, json_t *s, struct sbuf *b) {
    json_t *props = json_object_get(s, "properties");
    json_t *req = json_object_get(s, "required");
    json_t *add = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return fail(c, "'properties' must be an object");
    if (req && !json_is_array(req)) return fail(c, "'required' must be an array");
    if (add && !json_is_boolean(add) && !json_is_object(add))
        return fail(c, "'additionalProperties' must be a boolean or a schema");
    size_t n_props = props ? json_object_size(props) : 0, n_req = req ? json_array_size(req) : 0;
    _cleanup_free_ struct prop *p = calloc(n_props + n_req + 1, sizeof *p);
    _cleanup_free_ const char **names = calloc(n_props + n_req + 1, sizeof *names);
    if (!p || !names) return -ENOMEM;
    size_t n = 0;
    int r;
    const char *key;
    json_t *v;
    if (props) {
        size_t old = path_push(c, "properties");
        json_object_foreach(props, key, v) {
            size_t old2 = path_push(c, key);
            p[n].key = key;
            r = gen(c, v, &p[n].value);
            path_pop(c, old2);
            if (r < 0) return r;
            n++;
        }
        path_pop(c, old);
    }
    for (size_t k = 0; k < n_req; k++) {
        json_t *rk = json_array_get(req, k);
        if (!json_is_string(rk)) {
            size_t old = path_push(c, "required");
            path_push_index(c, k);
            r = fail(c, "a required name must be a string");
            path_pop(c, old);
            return r;
        }
        size_t i = 0;
        while (i < n && strcmp(p[i].key, json_string_value(rk))) i++;
        if (i == n) { /* required but not described: any value */
            p[n].key = json_string_value(rk);
            p[n++].value = name_fixed(c, "value");
        }
        p[i].required = true;
    }
    bool extras = !add || json_is_true(add) || json_is_object(add);
    struct name extra_value = name_fixed(c, "value");
    if (add && json_is_object(add)) {
        size_t old = path_push(c, "additionalProperties");
        r = gen(c, add, &extra_value);
        path_pop(c, old);
        if (r < 0) return r;
    }
    const char *P = c->prefix;
    int32_t extra_kv = -1;
    if (extras) {
        for (size_t i = 0; i < n; i++) names[i] = p[i].key;
        qsort(names, n, sizeof *names, name_cmp);
        size_t m = 0; /* names a printable-ASCII key could spell */
        for (size_t i = 0; i < n; i++) {
            bool ok = true;
            for (const char *q = names[i]; *q && ok; q++) ok = key_char((uint8_t)*q);
            if (ok && (!m || strcmp(names[m - 1], names[i]))) names[m++] = names[i];
        }
        int32_t k = other_key_rule(c, names, m, 0);
        extra_kv = rule_next(c);
        rule_head(c, extra_kv);
        sb_printf(&c->out, "\"\\\"\" %sr%d \"\\\"\" %sws \":\" %sws %s\n", P, k, P, P,
                  extra_value.s);
    }
    /* rest_i: properties i.. after at least one was written; first_i: none written yet */
    int32_t rest = rule_next(c), first = rule_next(c);
    rule_head(c, rest);
    if (extras) sb_printf(&c->out, "( %sws \",\" %sws %sr%d )*", P, P, P, extra_kv);
    sb_put(&c->out, "\n", 1);
    rule_head(c, first);
    if (extras) sb_printf(&c->out, "( %sr%d %sr%d )?", P, extra_kv, P, rest);
    sb_put(&c->out, "\n", 1);
    for (size_t i = n; i-- > 0;) {
        int32_t kv = rule_next(c), rest_i = rule_next(c), first_i = rule_next(c);
        rule_head(c, kv);
        json_t *ks = json_string(p[i].key);
        char *kt = ks ? json_dumps(ks, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        json_decref(ks);
        if (!kt) return -ENOMEM;
        sb_literal(&c->out, kt, strlen(kt));
        free(kt);
        sb_printf(&c->out, " %sws \":\" %sws %s\n", P, P, p[i].value.s);
        rule_head(c, rest_i);
        sb_printf(&c->out, "%sws \",\" %sws %sr%d %sr%d", P, P, P, kv, P, rest);
        if (!p[i].required) sb_printf(&c->out, " | %sr%d", P, rest);
        sb_put(&c->out, "\n", 1);
        rule_head(c, first_i);
        sb_printf(&c->out, "%sr%d %sr%d", P, kv, P, rest);
        if (!p[i].required) sb_printf(&c->out, " | %sr%d", P, first);
        sb_put(&c->out, "\n", 1);
        rest = rest_i;
        first = first_i;
    }
    sb_printf(b, "\"{\" %sws %sr%d %sws \"}\"", P, P, first, P);
    return 0;
}

/* ---- references --------------------------------------------------------------------- */

/* The node a local reference "#/a/b" points at, NULL if none. */
static json_t *resolve(json_t *root, const char *ref) {
    if (ref[0] != '#') return NULL;
    json_t *at = root;
    const char *p = ref + 1;
    while (*p) {
        if (*p != '/') return NULL;
        p++;
        char seg[MAX_POINTER];
        size_t n = 0;
        for (; *p && *p != '/' && n + 1 < sizeof seg; p++) {
            if (*p == '~' && (p[1] == '0' || p[1] == '1')) {
                seg[n++] = p[1] == '0' ? '~' : '/';
                p++;
            } else {
                seg[n++] = *p;
            }
        }
        seg[n] = '\0';
        if (json_is_object(at)) {
            at = json_object_get(at, seg);
        } else if (json_is_array(at)) {
            char *end;
            unsigned long i = strtoul(seg, &end, 10);
            at = *seg && !*end ? json_array_get(at, i) : NULL;
        } else {
            at = NULL;
        }
        if (!at) return NULL;
    }
    return at;
}

static int gen_ref(struct sc *c, const char *ref, struct name *ret) {
    for (size_t i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i].pointer, ref)) {
            *ret = name_rule(c, c->refs[i].rule);
            return 0;
        }
    json_t *target = resolve(c->root, ref);
    if (!target) {
        if (ref[0] != '#')
            return fail(c, "unsupported keyword '$ref' to \"%s\" (only local references)", ref);
        return fail(c, "'$ref' \"%s\" points at nothing", ref);
    }
    if (c->n_refs == c->cap_refs) {
        size_t cap = c->cap_refs ? 2 * c->cap_refs : 8;
        struct ref *q = realloc(c->refs, cap * sizeof *q);
        if (!q) return -ENOMEM;
        c->refs = q;
        c->cap_refs = cap;
    }
    int32_t id = rule_next(c);
    char *copy = strdup(ref);
    if (!copy) return -ENOMEM;
    c->refs[c->n_refs++] = (struct ref){copy, id};
    /* compile the target with its own pointer as the path */
    char saved[MAX_POINTER];
    size_t saved_len = c->path_len;
    memcpy(saved, c->path, saved_len + 1);
    snprintf(c->path, sizeof c->path, "%s", ref + 1);
    c->path_len = strlen(c->path);
    struct name target_name;
    int r = gen(c, target, &target_name);
    memcpy(c->path, saved, saved_len + 1);
    c->path_len = saved_len;
    if (r < 0) return r;
    rule_head(c, id);
    sb_printf(&c->out, "%s\n", target_name.s);
    *ret = name_rule(c, id);
    return 0;
}

/* ---- one schema node ---------------------------------------------------------------- */

static const char *const type_names[] = {"string", "number", "integer", "boolean",
                                         "null",   "object", "array"};

/* The type the keywords imply when "type" is absent, NULL for any value. */
static const char *implied_type(json_t *s) {
    static const struct {
        const char *key, *type;
    } implies[] = {
        {"properties", "object"},
        {"required", "object"},
        {"additionalProperties", "object"},
        {"items", "array"},
        {"minItems", "array"},
        {"maxItems", "array"},
        {"minLength", "string"},
        {"maxLength", "string"},
        {"format", "string"},
        {"minimum", "number"},
        {"maximum", "number"},
        {"exclusiveMinimum", "number"},
        {"exclusiveMaximum", "number"},
    };
    for (size_t i = 0; i < ARRAY_SIZE(implies); i++)
        if (json_object_get(s, implies[i].key)) return implies[i].type;
    return NULL;
}

static int gen_type(struct sc *c, json_t *s, const char *type, struct sbuf *b) {
    if (!strcmp(type, "string")) return gen_string(c, s, b);
    if (!strcmp(type, "integer")) return gen_integer(c, s, b);
    if (!strcmp(type, "number")) return gen_number(c, s, b);
    if (!strcmp(type, "boolean")) {
        sb_printf(b, "( \"true\" | \"false\" )");
        return 0;
    }
    if (!strcmp(type, "null")) {
        sb_printf(b, "\"null\"");
        return 0;
    }
    if (!strcmp(type, "object")) return gen_object(c, s, b);
    if (!strcmp(type, "array")) return gen_array(c, s, b);
    return fail(c, "unknown type '%s'", type);
}

static int gen_alternatives(struct sc *c, json_t *s, const char *key, struct sbuf *b) {
    json_t *list = json_object_get(s, key);
    if (!json_is_array(list) || !json_array_size(list))
        return fail(c, "'%s' must be a non-empty array", key);
    const char *k2;
    json_t *v;
    json_object_foreach(s, k2, v) {
        if (strcmp(k2, key) && in_list(k2, typed, ARRAY_SIZE(typed)))
            return fail(c, "unsupported keyword '%s' next to '%s'", k2, key);
    }
    size_t old = path_push(c, key);
    for (size_t i = 0; i < json_array_size(list); i++) {
        struct name alt;
        size_t old2 = path_push_index(c, i);
        int r = gen(c, json_array_get(list, i), &alt);
        path_pop(c, old2);
        if (r < 0) {
            path_pop(c, old);
            return r;
        }
        sb_printf(b, "%s%s", i ? " | " : "", alt.s);
    }
    path_pop(c, old);
    return 0;
}

static int gen_body(struct sc *c, json_t *s, struct sbuf *b) {
    int r;
    if ((r = check_keywords(c, s)) < 0) return r;
    json_t *v;
    if ((v = json_object_get(s, "allOf"))) {
        if (!json_is_array(v) || json_array_size(v) != 1)
            return fail(c, "unsupported keyword 'allOf' (only with one member)");
        const char *k;
        json_t *x;
        json_object_foreach(s, k, x) {
            if (in_list(k, typed, ARRAY_SIZE(typed)))
                return fail(c, "unsupported keyword '%s' next to 'allOf'", k);
        }
        struct name one;
        size_t old = path_push(c, "allOf");
        path_push_index(c, 0);
        r = gen(c, json_array_get(v, 0), &one);
        path_pop(c, old);
        if (r >= 0) sb_put(b, one.s, strlen(one.s));
        return r;
    }
    if (json_object_get(s, "anyOf")) return gen_alternatives(c, s, "anyOf", b);
    if (json_object_get(s, "oneOf")) return gen_alternatives(c, s, "oneOf", b);
    if ((v = json_object_get(s, "const"))) {
        sb_json_literal(c, b, v);
        return 0;
    }
    if ((v = json_object_get(s, "enum"))) {
        if (!json_is_array(v) || !json_array_size(v))
            return fail(c, "'enum' must be a non-empty array");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) sb_put(b, " | ", 3);
            sb_json_literal(c, b, json_array_get(v, i));
        }
        return 0;
    }
    json_t *type = json_object_get(s, "type");
    if (!type) {
        const char *t = implied_type(s);
        if (!t) {
            sb_printf(b, "%svalue", c->prefix);
            return 0;
        }
        return gen_type(c, s, t, b);
    }
    if (json_is_string(type)) return gen_type(c, s, json_string_value(type), b);
    if (!json_is_array(type) || !json_array_size(type))
        return fail(c, "'type' must be a string or a non-empty array of strings");
    for (size_t i = 0; i < json_array_size(type); i++) {
        json_t *t = json_array_get(type, i);
        if (!json_is_string(t) ||
            !in_list(json_string_value(t), type_names, ARRAY_SIZE(type_names)))
            return fail(c, "'type' lists something that is not a type name");
        if (i) sb_put(b, " | ", 3);
        sb_put(b, "( ", 2);
        if ((r = gen_type(c, s, json_string_value(t), b)) < 0) return r;
        sb_put(b, " )", 2);
    }
    return 0;
}

static int gen(struct sc *c, json_t *s, struct name *ret) {
    if (json_is_true(s)) {
        *ret = name_fixed(c, "value");
        return 0;
    }
    if (json_is_false(s)) return fail(c, "the schema false allows no value");
    if (!json_is_object(s)) return fail(c, "a schema must be an object or a boolean");
    json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        if (!json_is_string(ref)) return fail(c, "'$ref' must be a string");
        return gen_ref(c, json_string_value(ref), ret);
    }
    if (++c->depth > MAX_SCHEMA_DEPTH) {
        c->depth--;
        return fail(c, "schemas nested deeper than %d", MAX_SCHEMA_DEPTH);
    }
    struct sbuf body = {0};
    int32_t id = rule_next(c);
    int r = gen_body(c, s, &body);
    c->depth--;
    if (r >= 0 && body.oom) r = -ENOMEM;
    if (r >= 0) {
        rule_head(c, id);
        sb_put(&c->out, body.p ? body.p : "", body.n);
        sb_put(&c->out, "\n", 1);
        *ret = name_rule(c, id);
    }
    free(body.p);
    return r;
}

/* The shared rules; @ stands for the prefix. */
static const char fixed_rules[] =
    "@ws ::= ( \" \" | \"\\n\" [ \\t]{0,20} )?\n"
    "@value ::= @object | @array | @string | @number | \"true\" | \"false\" | "
    "\"null\"\n"
    "@object ::= \"{\" @ws ( @member ( @ws \",\" @ws @member )* @ws )? "
    "\"}\"\n"
    "@member ::= @string @ws \":\" @ws @value\n"
    "@array ::= \"[\" @ws ( @value ( @ws \",\" @ws @value )* @ws )? \"]\"\n"
    "@string ::= \"\\\"\" @char* \"\\\"\"\n"
    "@char ::= [\\x20-\\x21\\x23-\\x5b\\x5d-\\x7e] | \"\\\\\" @esc | @u8\n"
    "@esc ::= [\"\\\\/bfnrt] | \"u\" @uesc\n"
    "@uesc ::= [0-9a-cA-CeEfF] @hex{3} | [dD] [0-7] @hex{2} | [dD] [89abAB] @hex{2} "
    "\"\\\\u\" [dD] [c-fC-F] @hex{2}\n"
    "@hex ::= [0-9a-fA-F]\n"
    "@u8 ::= [\\xc2-\\xdf] @cont | \"\\xe0\" [\\xa0-\\xbf] @cont | "
    "[\\xe1-\\xec\\xee\\xef] @cont @cont | \"\\xed\" [\\x80-\\x9f] @cont | "
    "\"\\xf0\" [\\x90-\\xbf] @cont @cont | [\\xf1-\\xf3] @cont @cont @cont | "
    "\"\\xf4\" [\\x80-\\x8f] @cont @cont\n"
    "@cont ::= [\\x80-\\xbf]\n"
    "@intpart ::= \"0\" | [1-9] [0-9]{0,15}\n"
    "@frac ::= \".\" [0-9]{1,16}\n"
    "@zfrac ::= \".\" \"0\"{1,16}\n"
    "@number ::= \"-\"? @intpart @frac? ( [eE] [-+]? [0-9]{1,3} )?\n"
    "@integer ::= \"-\"? @intpart\n"
    "@kc ::= [\\x20-\\x21\\x23-\\x5b\\x5d-\\x7e]\n"
    "@date ::= [0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] [0-9] "
    "| \"3\" [01] )\n"
    "@time ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] "
    "( \".\" [0-9]{1,9} )? ( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )\n"
    "@uuid ::= @hex{8} \"-\" @hex{4} \"-\" @hex{4} \"-\" @hex{4} \"-\" "
    "@hex{12}\n";

int engine_grammar_schema_text(const char *schema, size_t len, const char *prefix, char **ret_text,
                               struct err_detail *d) {
    if (!schema || !prefix) return ERR_INVALID;
    if (len > ENGINE_GRAMMAR_MAX_TEXT_BYTES)
        return err_set(d, ERR_TOO_LARGE, "JSON schema: %zu bytes, the limit is %zu", len,
                       ENGINE_GRAMMAR_MAX_TEXT_BYTES);
    size_t plen = strlen(prefix);
    for (size_t i = 0; i < plen; i++)
        if (!((prefix[i] >= 'a' && prefix[i] <= 'z') || (prefix[i] >= 'A' && prefix[i] <= 'Z') ||
              (prefix[i] >= '0' && prefix[i] <= '9') || prefix[i] == '-' || prefix[i] == '_'))
            return ERR_INVALID;
    if (plen > MAX_PREFIX) return ERR_INVALID;
    json_error_t je;
    json_t *root = json_loadb(schema, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return err_set(d, ERR_GRAMMAR, "JSON schema: not valid JSON: %s at line %d, column %d",
                       je.text, je.line, je.column);
    struct sc c = {.root = root, .prefix = prefix, .d = d};
    struct name top;
    int r = gen(&c, root, &top);
    if (r >= 0) {
        sb_printf(&c.out, "%sroot ::= %s\n", prefix, top.s);
        for (const char *q = fixed_rules; *q; q++) {
            if (*q == '@')
                sb_put(&c.out, prefix, plen);
            else
                sb_put(&c.out, q, 1);
        }
        if (c.out.oom) r = -ENOMEM;
    }
    for (size_t i = 0; i < c.n_refs; i++) free(c.refs[i].pointer);
    free(c.refs);
    json_decref(root);
    if (r < 0) {
        free(c.out.p);
        return r;
    }
    *ret_text = c.out.p;
    return 0;
}

int engine_grammar_from_schema(const char *schema, size_t len, struct engine_grammar **ret,
                               struct err_detail *d) {
    char *text = NULL;
    int r = engine_grammar_schema_text(schema, len, "", &text, d);
    if (r < 0) return r;
    r = engine_grammar_parse(text, strlen(text), ret, d);
    free(text);
    return r;
}
