/* Pre-tokenizers of byte-level BPE vocabularies: the regex lists named by
 * tokenizer.ggml.pre (the lists are public facts: the Hugging Face tokenizer.json files and
 * llama.cpp's table agree on them), run with PCRE2 in UTF + UCP mode.
 *
 * Semantics, matching llama.cpp's splitter: the text starts as one piece; each regex of the
 * list in turn splits every piece into its matches and the gaps between them (both kept).
 * A regex sees only its piece, so `$` and look-ahead stop at the piece's end.
 *
 * Whitespace: llama.cpp folds every non-ASCII White_Space code point (U+0085, U+00A0,
 * U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000) to U+000B before
 * matching, so `\s` matches them and no class naming them does (deepseek-llm's [　-。]).
 * We fold the same way on a copy and map the piece offsets back to the original bytes.
 *
 * Invalid UTF-8: PCRE2_MATCH_INVALID_UTF makes invalid bytes unmatchable; they end up in
 * gap pieces and the byte-level alphabet encodes them losslessly. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "engine/vocab-impl.h"

#include <errno.h>
#include <pcre2.h>
#include <string.h>

/* ---- the table ---------------------------------------------------------------------- */

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_LLAMA3_HEAD                                                                             \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
#define RE_LLAMA3_TAIL "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_LLAMA3 RE_LLAMA3_HEAD "\\p{N}{1,3}" RE_LLAMA3_TAIL
#define RE_QWEN2 RE_LLAMA3_HEAD "\\p{N}" RE_LLAMA3_TAIL
/* CJK ideographs (U+4E00..U+9FA5), U+0800..U+4E00 and Hangul (U+AC00..U+D7FF). */
#define RE_DEEPSEEK_CJK "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"
/* deepseek-llm's letters: the cased letters (Lu, Ll, Lt) of Unicode as ranges. */
#define RE_DEEPSEEK_LLM_LETTERS                                                                    \
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"            \
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}"         \
    "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}"                  \
    "\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}"                       \
    "\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"                 \
    "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}"                 \
    "\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}"                 \
    "\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}"         \
    "\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}"        \
    "\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}"                  \
    "\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}"                   \
    "\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}"        \
    "\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}"         \
    "\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}"                  \
    "\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}"                 \
    "\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}"               \
    "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}"         \
    "\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+"
/* ASCII and full-width punctuation, curly quotes, U+3000..U+3002. */
#define RE_DEEPSEEK_LLM_PUNCT                                                                      \
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+"
#define RE_BLOOM " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{0964}\\x{06D4}\\x{060C})]+"

struct vocab_pre {
    const char *name;
    const char *aliases[16]; /* tokenizer.ggml.pre values, NULL-terminated */
    const char *regex[VOCAB_MAX_REGEXES];
    uint32_t n_regex;
    /* A whole piece that is a token is emitted as is (Llama 3's tokenizer.json). */
    bool ignore_merges;
};

static const struct vocab_pre pre_table[] = {
    {.name = "default",
     .aliases = {"default"},
     .regex = {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"},
     .n_regex = 4},
    {.name = "llama3",
     .aliases = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
                 "lfm2"},
     .regex = {RE_LLAMA3},
     .n_regex = 1,
     .ignore_merges = true},
    {.name = "dbrx",
     .aliases = {"dbrx", "smaug-bpe", "chatglm-bpe", "glm4"},
     .regex = {RE_LLAMA3},
     .n_regex = 1},
    {.name = "qwen2",
     .aliases = {"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez"},
     .regex = {RE_QWEN2},
     .n_regex = 1},
    {.name = "gpt-2",
     .aliases = {"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en", "jina-v2-es",
                 "jina-v2-de", "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais", "trillion"},
     .regex = {RE_GPT2},
     .n_regex = 1},
    {.name = "deepseek-llm",
     .aliases = {"deepseek-llm"},
     .regex = {"[\\r\\n]", RE_DEEPSEEK_LLM_LETTERS, RE_DEEPSEEK_LLM_PUNCT, "\\s+$", RE_DEEPSEEK_CJK,
               "\\p{N}+"},
     .n_regex = 6},
    {.name = "deepseek-coder",
     .aliases = {"deepseek-coder"},
     .regex = {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_DEEPSEEK_CJK, "\\p{N}"},
     .n_regex = 5},
    {.name = "deepseek-v3",
     .aliases = {"deepseek-v3"},
     .regex = {"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
               "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+"
               "|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*"
               "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     .n_regex = 3},
    {.name = "falcon",
     .aliases = {"falcon"},
     .regex = {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"},
     .n_regex = 3},
    {.name = "starcoder",
     .aliases = {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"},
     .regex = {"\\p{N}", RE_GPT2},
     .n_regex = 2},
    {.name = "tekken",
     .aliases = {"tekken"},
     .regex = {"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+"
               "|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*"
               "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     .n_regex = 1},
    {.name = "bloom",
     .aliases = {"bloom", "poro-chat", "gpt3-finnish"},
     .regex = {RE_BLOOM},
     .n_regex = 1},
    {.name = "viking", .aliases = {"viking"}, .regex = {RE_BLOOM, "\\p{N}"}, .n_regex = 2},
};

const char *vocab_pre_name(const struct vocab_pre *p) { return p ? p->name : "default"; }
bool vocab_pre_ignore_merges(const struct vocab_pre *p) { return p && p->ignore_merges; }

static const struct vocab_pre *pre_lookup(const char *name, size_t len) {
    for (size_t i = 0; i < ARRAY_SIZE(pre_table); i++)
        for (const char *const *a = pre_table[i].aliases; *a; a++)
            if (strlen(*a) == len && memcmp(*a, name, len) == 0) return &pre_table[i];
    return NULL;
}

static int pre_compile(const char *pattern, pcre2_code **ret) {
    int errcode;
    PCRE2_SIZE erroff;
    pcre2_code *re =
        pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                      PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY | PCRE2_MATCH_INVALID_UTF,
                      &errcode, &erroff, NULL);
    if (!re) return errcode == PCRE2_ERROR_HEAPLIMIT ? -ENOMEM : ERR_INVALID;
    /* JIT is an optimization: without it (no JIT on this CPU) the interpreter runs. */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    *ret = re;
    return 0;
}

int vocab_pre_load(struct engine_vocab *v, const char *name, size_t name_len,
                   struct err_detail *d) {
    const struct vocab_pre *p = name ? pre_lookup(name, name_len) : &pre_table[0];
    if (!p) {
        char shown[64];
        size_t n = 0;
        for (size_t i = 0; i < name_len && n + 1 < sizeof shown; i++)
            shown[n++] = (name[i] >= 0x20 && name[i] < 0x7f) ? name[i] : '?';
        shown[n] = '\0';
        return err_set(d, ERR_VOCAB, "tokenizer.ggml.pre: unknown pre-tokenizer '%s'", shown);
    }
    for (uint32_t i = 0; i < p->n_regex; i++) {
        pcre2_code *re = NULL;
        int r = pre_compile(p->regex[i], &re);
        if (r < 0) {
            vocab_pre_free(v);
            return err_set(d, r, "tokenizer.ggml.pre '%s': regex %u does not compile", p->name, i);
        }
        v->regex[i] = re;
    }
    v->pre = p;
    return 0;
}

void vocab_pre_free(struct engine_vocab *v) {
    for (size_t i = 0; i < ARRAY_SIZE(v->regex); i++) {
        pcre2_code_free(v->regex[i]);
        v->regex[i] = NULL;
    }
    v->pre = NULL;
}

/* ---- splitting ---------------------------------------------------------------------- */

/* Code points llama.cpp folds to U+000B (White_Space minus ASCII). */
static bool cpt_is_wide_space(uint32_t c) {
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
           c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Builds s->sub (the folded subject) and s->sub_map (folded offset -> original offset,
 * len + 1 entries) when text holds a wide space; otherwise the subject is text itself. */
static int pre_fold(const char *text, size_t len, struct vocab_scratch *s, const char **subj,
                    size_t *subj_len, const uint32_t **map) {
    const uint8_t *t = (const uint8_t *)text;
    bool any = false;
    for (size_t i = 0; i < len;) {
        if (t[i] < 0x80) {
            i++;
            continue;
        }
        size_t cl = vocab_utf8_len(t + i, len - i);
        if (cl && cpt_is_wide_space(vocab_utf8_cpt(t + i, cl))) {
            any = true;
            break;
        }
        i += cl ? cl : 1;
    }
    *subj = text;
    *subj_len = len;
    *map = NULL;
    if (!any) return 0;
    int r = vocab_grow((void **)&s->sub, &s->sub_cap, len + 1, 1);
    if (r < 0) return r;
    r = vocab_grow((void **)&s->sub_map, &s->sub_map_cap, len + 1, sizeof(uint32_t));
    if (r < 0) return r;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t cl = t[i] < 0x80 ? 1 : vocab_utf8_len(t + i, len - i);
        if (cl > 1 && cpt_is_wide_space(vocab_utf8_cpt(t + i, cl))) {
            s->sub_map[o] = (uint32_t)i;
            s->sub[o++] = 0x0B;
            i += cl;
            continue;
        }
        if (!cl) cl = 1;
        for (size_t k = 0; k < cl; k++) {
            s->sub_map[o] = (uint32_t)(i + k);
            s->sub[o++] = text[i + k];
        }
        i += cl;
    }
    s->sub_map[o] = (uint32_t)len;
    *subj = s->sub;
    *subj_len = o;
    *map = s->sub_map;
    return 0;
}

static int span_push(void **spans, size_t *cap, size_t *n, uint32_t off, uint32_t len) {
    int r = vocab_grow(spans, cap, *n + 1, sizeof(struct vocab_span));
    if (r < 0) return r;
    ((struct vocab_span *)*spans)[(*n)++] = (struct vocab_span){off, len};
    return 0;
}

/* One match of re in subj[0..n) from start; 1 with [*m0, *m1), 0 for none, < 0 error. */
static int pre_match(const pcre2_code *re, const char *subj, size_t n, size_t start,
                     struct vocab_scratch *s, size_t *m0, size_t *m1) {
    for (;;) {
        int rc = pcre2_match(re, (PCRE2_SPTR)subj, n, start, 0, s->match_data, s->mcontext);
        if (rc == PCRE2_ERROR_NOMATCH) return 0;
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !s->jit_stack) {
            /* Deep backtracking (a long run of spaces before `(?!\S)`): retry once with a
             * larger JIT stack than the 32 KiB default. */
            s->jit_stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, NULL);
            if (!s->jit_stack) return -ENOMEM;
            pcre2_jit_stack_assign(s->mcontext, NULL, s->jit_stack);
            continue;
        }
        if (rc < 0) return rc == PCRE2_ERROR_NOMEMORY ? -ENOMEM : ERR_TOO_LARGE;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->match_data);
        *m0 = ov[0];
        *m1 = ov[1];
        return 1;
    }
}

int vocab_pre_split(const struct engine_vocab *v, const char *text, size_t len,
                    struct vocab_scratch *s, struct vocab_span **ret_spans, size_t *ret_n) {
    const char *subj;
    size_t subj_len;
    const uint32_t *map;
    int r = pre_fold(text, len, s, &subj, &subj_len, &map);
    if (r < 0) return r;
    if (!s->match_data) {
        s->match_data = pcre2_match_data_create(1, NULL);
        s->mcontext = pcre2_match_context_create(NULL);
        if (!s->match_data || !s->mcontext) return -ENOMEM;
    }
    size_t n = 0;
    if (subj_len && (r = span_push(&s->spans, &s->spans_cap, &n, 0, (uint32_t)subj_len)) < 0)
        return r;
    for (uint32_t k = 0; k < v->pre->n_regex; k++) {
        const pcre2_code *re = v->regex[k];
        struct vocab_span *in = s->spans;
        size_t n_out = 0;
        for (size_t i = 0; i < n; i++) {
            const char *p = subj + in[i].off;
            size_t plen = in[i].len, pos = 0, gap = 0;
            while (pos < plen) {
                size_t m0, m1;
                r = pre_match(re, p, plen, pos, s, &m0, &m1);
                if (r < 0) return r;
                if (r == 0) break;
                if (m1 == m0) { /* an empty match claims nothing; step over one character */
                    size_t cl = vocab_utf8_len((const uint8_t *)p + m0, plen - m0);
                    pos = m0 + (cl ? cl : 1);
                    continue;
                }
                if (m0 > gap &&
                    (r = span_push(&s->spans2, &s->spans2_cap, &n_out, in[i].off + (uint32_t)gap,
                                   (uint32_t)(m0 - gap))) < 0)
                    return r;
                if ((r = span_push(&s->spans2, &s->spans2_cap, &n_out, in[i].off + (uint32_t)m0,
                                   (uint32_t)(m1 - m0))) < 0)
                    return r;
                pos = gap = m1;
            }
            if (gap < plen &&
                (r = span_push(&s->spans2, &s->spans2_cap, &n_out, in[i].off + (uint32_t)gap,
                               (uint32_t)(plen - gap))) < 0)
                return r;
        }
        /* swap the buffers: the output becomes the next regex's input */
        void *tp = s->spans;
        size_t tc = s->spans_cap;
        s->spans = s->spans2;
        s->spans_cap = s->spans2_cap;
        s->spans2 = tp;
        s->spans2_cap = tc;
        n = n_out;
    }
    struct vocab_span *spans = s->spans;
    if (map)
        for (size_t i = 0; i < n; i++) {
            uint32_t a = map[spans[i].off], b = map[spans[i].off + spans[i].len];
            spans[i] = (struct vocab_span){a, b - a};
        }
    *ret_spans = spans;
    *ret_n = n;
    return 0;
}

int vocab_pre_selftest(void) {
    for (size_t i = 0; i < ARRAY_SIZE(pre_table); i++)
        for (uint32_t k = 0; k < pre_table[i].n_regex; k++) {
            pcre2_code *re = NULL;
            int r = pre_compile(pre_table[i].regex[k], &re);
            if (r < 0) return r;
            pcre2_code_free(re);
        }
    return (int)ARRAY_SIZE(pre_table);
}

void vocab_scratch_done(struct vocab_scratch *s) {
    free(s->sym);
    free(s->heap);
    free(s->buf);
    free(s->spans);
    free(s->spans2);
    free(s->sub);
    free(s->sub_map);
    pcre2_match_data_free(s->match_data);
    pcre2_match_context_free(s->mcontext);
    pcre2_jit_stack_free(s->jit_stack);
    *s = (struct vocab_scratch){0};
}
