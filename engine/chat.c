/* chat — built-in chat templates (see chat.h for the formats and why no Jinja runs). */
#include "engine/chat.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* How a special string of a template is tokenized when the vocabulary is asked for it. */
enum chat_special_kind {
    SPECIAL_REQUIRED, /* the vocabulary must have it as one token (else ERR_VOCAB) */
    SPECIAL_TEXT_OK,  /* a token if the vocabulary has one, else plain text ("[INST]" v1) */
    SPECIAL_BOS,      /* that token, else the vocabulary's BOS, else nothing */
    SPECIAL_EOS,      /* that token, else the vocabulary's EOS */
};

struct chat_special {
    const char *text;
    enum chat_special_kind kind;
};

#define CHAT_MAX_SPECIALS 4

struct chat_family {
    const char *name;
    const char *marker;       /* detection: the template contains this */
    const char *bos;          /* rendered once first; NULL = none */
    /* Per role: the text before and after the content. prefix[SYSTEM] NULL: the family
     * has no system turn; the system content goes before the first user content with
     * system_sep after it. */
    const char *prefix[ENGINE_CHAT_ROLE_COUNT];
    const char *suffix[ENGINE_CHAT_ROLE_COUNT];
    const char *system_sep;
    const char *gen_prompt;   /* "" = none */
    const char *end_of_turn;
    bool alternate;           /* user, assistant, user, ... after the system message */
    bool trim;                /* contents are whitespace-trimmed (Jinja "| trim") */
    /* Thinking (chat.h's qwen3 and qwen35): how assistant turns carry their reasoning, and
     * what follows the generation prompt with thinking on and off */
    enum chat_think { THINK_NONE, THINK_QWEN3, THINK_QWEN35 } think;
    const char *gen_think_on, *gen_think_off;
    struct chat_special specials[CHAT_MAX_SPECIALS];
};

static const struct chat_family families[ENGINE_CHAT_FAMILY_COUNT] = {
    [ENGINE_CHAT_CHATML] = {
        .name = "chatml", .marker = "<|im_start|>",
        .prefix = {"<|im_start|>system\n", "<|im_start|>user\n", "<|im_start|>assistant\n"},
        .suffix = {"<|im_end|>\n", "<|im_end|>\n", "<|im_end|>\n"},
        .gen_prompt = "<|im_start|>assistant\n", .end_of_turn = "<|im_end|>",
        .specials = {{"<|im_start|>", SPECIAL_REQUIRED}, {"<|im_end|>", SPECIAL_REQUIRED}},
    },
    [ENGINE_CHAT_LLAMA3] = {
        .name = "llama3", .marker = "<|start_header_id|>", .bos = "<|begin_of_text|>",
        .prefix = {"<|start_header_id|>system<|end_header_id|>\n\n",
                   "<|start_header_id|>user<|end_header_id|>\n\n",
                   "<|start_header_id|>assistant<|end_header_id|>\n\n"},
        .suffix = {"<|eot_id|>", "<|eot_id|>", "<|eot_id|>"},
        .gen_prompt = "<|start_header_id|>assistant<|end_header_id|>\n\n",
        .end_of_turn = "<|eot_id|>", .trim = true,
        .specials = {{"<|begin_of_text|>", SPECIAL_BOS}, {"<|start_header_id|>", SPECIAL_REQUIRED},
                     {"<|end_header_id|>", SPECIAL_REQUIRED}, {"<|eot_id|>", SPECIAL_REQUIRED}},
    },
    [ENGINE_CHAT_GEMMA] = {
        .name = "gemma", .marker = "<start_of_turn>", .bos = "<bos>",
        .prefix = {NULL, "<start_of_turn>user\n", "<start_of_turn>model\n"},
        .suffix = {NULL, "<end_of_turn>\n", "<end_of_turn>\n"},
        .system_sep = "\n\n", .gen_prompt = "<start_of_turn>model\n",
        .end_of_turn = "<end_of_turn>", .alternate = true, .trim = true,
        .specials = {{"<bos>", SPECIAL_BOS}, {"<start_of_turn>", SPECIAL_REQUIRED},
                     {"<end_of_turn>", SPECIAL_REQUIRED}},
    },
    [ENGINE_CHAT_MISTRAL] = {
        .name = "mistral", .marker = "[INST]", .bos = "<s>",
        .prefix = {NULL, "[INST] ", ""},
        .suffix = {NULL, " [/INST]", "</s>"},
        .system_sep = "\n\n", .gen_prompt = "", .end_of_turn = "</s>", .alternate = true,
        .specials = {{"<s>", SPECIAL_BOS}, {"</s>", SPECIAL_EOS}, {"[INST]", SPECIAL_TEXT_OK},
                     {"[/INST]", SPECIAL_TEXT_OK}},
    },
    [ENGINE_CHAT_QWEN3] = {
        .name = "qwen3", .marker = "<think>",
        .prefix = {"<|im_start|>system\n", "<|im_start|>user\n", "<|im_start|>assistant\n"},
        .suffix = {"<|im_end|>\n", "<|im_end|>\n", "<|im_end|>\n"},
        .gen_prompt = "<|im_start|>assistant\n", .end_of_turn = "<|im_end|>",
        .think = THINK_QWEN3, .gen_think_on = "", .gen_think_off = "<think>\n\n</think>\n\n",
        .specials = {{"<|im_start|>", SPECIAL_REQUIRED}, {"<|im_end|>", SPECIAL_REQUIRED},
                     {"<think>", SPECIAL_TEXT_OK}, {"</think>", SPECIAL_TEXT_OK}},
    },
    [ENGINE_CHAT_QWEN35] = {
        .name = "qwen35", .marker = "<function=",
        .prefix = {"<|im_start|>system\n", "<|im_start|>user\n", "<|im_start|>assistant\n"},
        .suffix = {"<|im_end|>\n", "<|im_end|>\n", "<|im_end|>\n"},
        .gen_prompt = "<|im_start|>assistant\n", .end_of_turn = "<|im_end|>", .trim = true,
        .think = THINK_QWEN35, .gen_think_on = "<think>\n",
        .gen_think_off = "<think>\n\n</think>\n\n",
        .specials = {{"<|im_start|>", SPECIAL_REQUIRED}, {"<|im_end|>", SPECIAL_REQUIRED},
                     {"<think>", SPECIAL_TEXT_OK}, {"</think>", SPECIAL_TEXT_OK}},
    },
    [ENGINE_CHAT_GEMMA4] = {
        .name = "gemma4", .marker = "<|turn>", .bos = "<bos>",
        .prefix = {"<|turn>system\n", "<|turn>user\n", "<|turn>model\n"},
        .suffix = {"<turn|>\n", "<turn|>\n", "<turn|>\n"},
        .gen_prompt = "<|turn>model\n", .end_of_turn = "<turn|>", .trim = true,
        .specials = {{"<bos>", SPECIAL_BOS}, {"<|turn>", SPECIAL_REQUIRED},
                     {"<turn|>", SPECIAL_REQUIRED}},
    },
};

/* Detection order: gemma4 before gemma (a Gemma 4 template may mention <start_of_turn>);
 * the thinking chatml families before chatml, each also needing chatml's marker. */
static const enum engine_chat_family detect_order[ENGINE_CHAT_FAMILY_COUNT] = {
    ENGINE_CHAT_QWEN35, ENGINE_CHAT_QWEN3,  ENGINE_CHAT_CHATML,  ENGINE_CHAT_LLAMA3,
    ENGINE_CHAT_GEMMA4, ENGINE_CHAT_GEMMA,  ENGINE_CHAT_MISTRAL,
};

static const char *const role_names[ENGINE_CHAT_ROLE_COUNT] = {"system", "user", "assistant"};

/* ---- detection ---------------------------------------------------------------------- */

enum engine_chat_family engine_chat_detect(const char *tmpl, size_t len) {
    if (!tmpl || !len) return ENGINE_CHAT_NONE;
    /* Llama 2 templates use "[INST]" too, with a different system block: not mistral. */
    static const char llama2[] = "<<SYS>>";
    for (int k = 0; k < ENGINE_CHAT_FAMILY_COUNT; k++) {
        enum engine_chat_family f = detect_order[k];
        const char *m = families[f].marker;
        if (!memmem(tmpl, len, m, strlen(m))) continue;
        /* Qwen3.5 writes XML tool calls and thinks; Qwen3-Coder writes them and does not */
        if (families[f].think != THINK_NONE &&
            (!memmem(tmpl, len, "<|im_start|>", 12) || !memmem(tmpl, len, "<think>", 7)))
            continue;
        if (f == ENGINE_CHAT_MISTRAL && memmem(tmpl, len, llama2, sizeof llama2 - 1)) break;
        return f;
    }
    return ENGINE_CHAT_NONE;
}

enum engine_chat_family engine_chat_detect_gguf(const struct gguf_file *f) {
    struct gguf_str s;
    struct err_detail d = {0};
    if (!f || gguf_get_str(f, "tokenizer.chat_template", &s, &d) < 0) return ENGINE_CHAT_NONE;
    return engine_chat_detect(s.ptr, s.len);
}

const char *engine_chat_family_name(enum engine_chat_family fam) {
    return (unsigned)fam < ENGINE_CHAT_FAMILY_COUNT ? families[fam].name : "none";
}

const char *engine_chat_end_of_turn(enum engine_chat_family fam) {
    return (unsigned)fam < ENGINE_CHAT_FAMILY_COUNT ? families[fam].end_of_turn : "";
}

const char *engine_chat_family_list(void) {
    return "chatml, llama3, gemma, mistral, gemma4, qwen3, qwen35";
}

bool engine_chat_thinks(enum engine_chat_family fam) {
    return (unsigned)fam < ENGINE_CHAT_FAMILY_COUNT && families[fam].think != THINK_NONE;
}

int engine_chat_role_parse(const char *name, enum engine_chat_role *ret) {
    for (int r = 0; name && r < ENGINE_CHAT_ROLE_COUNT; r++)
        if (strcmp(name, role_names[r]) == 0) {
            *ret = (enum engine_chat_role)r;
            return 0;
        }
    return -EINVAL;
}

/* ---- the emitter: one walk over the conversation, to text or to tokens -------------- */

struct chat_out {
    const struct chat_family *fam;
    const struct engine_vocab *vocab; /* NULL: render text */
    struct err_detail *d;
    int err;
    /* text mode */
    char *buf;
    size_t cap, len;
    /* token mode: plain text waiting to be tokenized, and the ids so far */
    char *run;
    size_t n_run, cap_run;
    int32_t *ids;
    size_t n_ids, cap_ids;
};

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t n = MAX(need, *cap * 2);
    n = MAX(n, (size_t)64);
    size_t bytes;
    if (!size_mul(n, elem, &bytes)) return -ENOMEM;
    void *q = realloc(*p, bytes);
    if (!q) return -ENOMEM;
    *p = q;
    *cap = n;
    return 0;
}

static void out_id(struct chat_out *o, int32_t id) {
    if (o->err < 0) return;
    void *p = o->ids;
    o->err = grow(&p, &o->cap_ids, o->n_ids + 1, sizeof *o->ids);
    o->ids = p;
    if (o->err == 0) o->ids[o->n_ids++] = id;
}

/* Tokenizes the waiting run of plain text (no special-token parsing) onto ids. */
static void out_flush(struct chat_out *o) {
    if (o->err < 0 || !o->n_run) return;
    size_t n = 0;
    int e = engine_vocab_tokenize(o->vocab, o->run, o->n_run, 0, NULL, 0, &n);
    if (e == -ENOSPC) {
        void *p = o->ids;
        e = grow(&p, &o->cap_ids, o->n_ids + n, sizeof *o->ids);
        o->ids = p;
        if (e == 0)
            e = engine_vocab_tokenize(o->vocab, o->run, o->n_run, 0, o->ids + o->n_ids, n, &n);
    }
    if (e < 0) {
        o->err = err_set(o->d, e, "chat: tokenizing %zu bytes of text failed", o->n_run);
        return;
    }
    o->n_ids += n;
    o->n_run = 0;
}

/* Plain text: appended to the rendering, or to the run to be tokenized without specials. */
static void out_text(struct chat_out *o, const char *s, size_t n) {
    if (o->err < 0 || !n) return;
    if (!o->vocab) {
        if (o->len < o->cap) memcpy(o->buf + o->len, s, MIN(n, o->cap - o->len));
        if (!size_add(o->len, n, &o->len)) o->err = -ENOMEM;
        return;
    }
    size_t need;
    if (!size_add(o->n_run, n, &need)) {
        o->err = -ENOMEM;
        return;
    }
    void *p = o->run;
    o->err = grow(&p, &o->cap_run, need, 1);
    o->run = p;
    if (o->err == 0) {
        memcpy(o->run + o->n_run, s, n);
        o->n_run = need;
    }
}

/* One of the family's special strings, by id where the vocabulary has it. */
static void out_special(struct chat_out *o, const struct chat_special *sp) {
    size_t n = strlen(sp->text);
    if (!o->vocab) {
        out_text(o, sp->text, n);
        return;
    }
    int32_t id = engine_vocab_find(o->vocab, sp->text, n);
    enum engine_token_type t = engine_vocab_token_type(o->vocab, id);
    if (id >= 0 && t != ENGINE_TOKEN_TYPE_CONTROL && t != ENGINE_TOKEN_TYPE_USER_DEFINED &&
        t != ENGINE_TOKEN_TYPE_UNKNOWN)
        id = ENGINE_TOKEN_NONE; /* an ordinary piece that happens to spell it */
    if (id < 0) {
        switch (sp->kind) {
        case SPECIAL_BOS: id = engine_vocab_bos(o->vocab); break;
        case SPECIAL_EOS: id = engine_vocab_eos(o->vocab); break;
        case SPECIAL_TEXT_OK: out_text(o, sp->text, n); return;
        case SPECIAL_REQUIRED: break;
        }
        if (id < 0 && sp->kind != SPECIAL_BOS) {
            if (o->err == 0)
                o->err = err_set(o->d, ERR_VOCAB,
                                 "chat: the %s template needs the special token %s, which the "
                                 "vocabulary does not have", o->fam->name, sp->text);
            return;
        }
        if (id < 0) return;
    }
    out_flush(o);
    out_id(o, id);
}

/* Template text: its special strings become tokens, the rest plain text. */
static void out_template(struct chat_out *o, const char *s) {
    size_t n = strlen(s);
    while (n && o->err == 0) {
        const char *best = NULL;
        const struct chat_special *bsp = NULL;
        for (int k = 0; k < CHAT_MAX_SPECIALS && o->fam->specials[k].text; k++) {
            const struct chat_special *sp = &o->fam->specials[k];
            const char *hit = memmem(s, n, sp->text, strlen(sp->text));
            if (hit && (!best || hit < best)) best = hit, bsp = sp;
        }
        if (!best) {
            out_text(o, s, n);
            return;
        }
        out_text(o, s, (size_t)(best - s));
        out_special(o, bsp);
        size_t skip = (size_t)(best - s) + strlen(bsp->text);
        s += skip;
        n -= skip;
    }
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Message content: always plain text, never special tokens. */
static void out_content(struct chat_out *o, const char *s, size_t n) {
    if (o->fam->trim) {
        while (n && is_space(*s)) s++, n--;
        while (n && is_space(s[n - 1])) n--;
    }
    out_text(o, s, n);
}

/* Checks the conversation against the family's rules (see chat.h). */
static int chat_check(const struct chat_family *f, const struct engine_chat_msg *m, size_t n,
                      unsigned flags, struct err_detail *d) {
    if (n == 0) return err_set(d, -EINVAL, "chat: no messages");
    if ((flags & ENGINE_CHAT_ADD_GENERATION_PROMPT) && (flags & ENGINE_CHAT_CONTINUE_LAST))
        return err_set(d, -EINVAL, "chat: a generation prompt and continue_last exclude each other");
    size_t first = 0;
    for (size_t i = 0; i < n; i++) {
        if ((unsigned)m[i].role >= ENGINE_CHAT_ROLE_COUNT)
            return err_set(d, -EINVAL, "messages[%zu].role: not system, user or assistant", i);
        if (m[i].len && !m[i].content)
            return err_set(d, -EINVAL, "messages[%zu].content: NULL", i);
        if (m[i].role == ENGINE_CHAT_SYSTEM) {
            if (i != 0)
                return err_set(d, -EINVAL, "messages[%zu]: a system message may only come first", i);
            first = 1;
            continue;
        }
        if (f->alternate &&
            m[i].role != ((i - first) % 2 == 0 ? ENGINE_CHAT_USER : ENGINE_CHAT_ASSISTANT))
            return err_set(d, -EINVAL,
                           "messages[%zu]: the %s template needs user and assistant turns to "
                           "alternate, starting with user", i, f->name);
    }
    if (!f->prefix[ENGINE_CHAT_SYSTEM] && first == 1 && n == 1)
        return err_set(d, -EINVAL,
                       "messages[0]: the %s template puts the system message into the first "
                       "user message, and there is none", f->name);
    enum engine_chat_role last = m[n - 1].role;
    if ((flags & ENGINE_CHAT_CONTINUE_LAST) && last != ENGINE_CHAT_ASSISTANT)
        return err_set(d, -EINVAL, "messages[%zu]: continue_last needs an assistant message last",
                       n - 1);
    if ((flags & ENGINE_CHAT_ADD_GENERATION_PROMPT) && f->alternate && last != ENGINE_CHAT_USER)
        return err_set(d, -EINVAL, "messages[%zu]: the %s template asks for a reply only after a "
                       "user message", n - 1, f->name);
    return 0;
}

static void strip_nl(const char **s, size_t *n, bool left, bool right) {
    while (left && *n && **s == '\n') (*s)++, (*n)--;
    while (right && *n && (*s)[*n - 1] == '\n') (*n)--;
}

static void strip_space(const char **s, size_t *n) {
    while (*n && is_space(**s)) (*s)++, (*n)--;
    while (*n && is_space((*s)[*n - 1])) (*n)--;
}

/* An assistant turn's text cut as the Qwen templates cut it: the reasoning is what comes
 * before the first </think> (after the last <think> there, newlines stripped around it),
 * the content what follows the last </think> (leading newlines stripped). false: no
 * </think>, nothing cut. */
static bool think_cut(const char *s, size_t n, const char **r, size_t *rn, const char **c,
                      size_t *cn) {
    static const char close[] = "</think>", open[] = "<think>";
    const char *first = memmem(s, n, close, sizeof close - 1), *last = first;
    if (!first) return false;
    for (const char *nx; (nx = memmem(last + 1, (size_t)(s + n - last - 1), close, sizeof close - 1));)
        last = nx;
    *c = last + sizeof close - 1;
    *cn = (size_t)(s + n - *c);
    strip_nl(c, cn, true, false);
    *r = s;
    *rn = (size_t)(first - s);
    strip_nl(r, rn, false, true);
    for (const char *o; (o = memmem(*r, *rn, open, sizeof open - 1));) {
        *rn -= (size_t)(o + sizeof open - 1 - *r);
        *r = o + sizeof open - 1;
    }
    strip_nl(r, rn, true, false);
    return true;
}

/* An assistant turn of a thinking family: after the last user message (`after`) with its
 * reasoning in a think block (Qwen3: where it has some, or is the last message), earlier
 * ones without. */
static void out_assistant_think(struct chat_out *o, const struct engine_chat_msg *m, bool after,
                                bool last) {
    const struct chat_family *f = o->fam;
    const char *c = m->content, *r = m->reasoning ? m->reasoning : "";
    size_t cn = m->len, rn = m->reasoning ? m->reasoning_len : 0;
    if (f->think == THINK_QWEN35) strip_space(&c, &cn);
    if (!m->reasoning) think_cut(c, cn, &r, &rn, &c, &cn);
    if (f->think == THINK_QWEN35) strip_space(&r, &rn);
    out_template(o, f->prefix[ENGINE_CHAT_ASSISTANT]);
    if (!after || (f->think == THINK_QWEN3 && !last && rn == 0)) {
        out_text(o, c, cn);
        return;
    }
    if (f->think == THINK_QWEN3) {
        strip_nl(&r, &rn, true, true);
        strip_nl(&c, &cn, true, false);
    }
    out_template(o, "<think>\n");
    out_text(o, r, rn);
    out_template(o, "\n</think>\n\n");
    out_text(o, c, cn);
}

static int chat_walk(enum engine_chat_family fam, const struct engine_chat_msg *m, size_t n,
                     unsigned flags, struct chat_out *o) {
    if ((unsigned)fam >= ENGINE_CHAT_FAMILY_COUNT)
        return err_set(o->d, -EINVAL, "chat: no supported chat template (recognised: %s)",
                       engine_chat_family_list());
    const struct chat_family *f = o->fam = &families[fam];
    int r = chat_check(f, m, n, flags, o->d);
    if (r < 0) return r;
    bool merge = !f->prefix[ENGINE_CHAT_SYSTEM] && m[0].role == ENGINE_CHAT_SYSTEM;
    /* thinking families: the last user message (the query the reasoning after it answers) */
    size_t last_query = n - 1;
    if (f->think != THINK_NONE) {
        size_t q = n;
        while (q > 0 && m[q - 1].role != ENGINE_CHAT_USER) q--;
        if (q == 0 && f->think == THINK_QWEN35)
            return err_set(o->d, -EINVAL, "chat: the %s template needs a user message", f->name);
        if (q > 0) last_query = q - 1;
    }
    if (f->bos) out_template(o, f->bos);
    else if (o->vocab && engine_vocab_add_bos(o->vocab) && engine_vocab_bos(o->vocab) >= 0)
        out_id(o, engine_vocab_bos(o->vocab));
    for (size_t i = merge ? 1 : 0; i < n; i++) {
        enum engine_chat_role role = m[i].role;
        if (f->think != THINK_NONE && role == ENGINE_CHAT_ASSISTANT) {
            out_assistant_think(o, &m[i], i > last_query, i + 1 == n);
            if (i + 1 == n && (flags & ENGINE_CHAT_CONTINUE_LAST)) break;
            out_template(o, f->suffix[role]);
            continue;
        }
        out_template(o, f->prefix[role]);
        if (merge && i == 1) {
            /* the system text as the first user message's start, untrimmed (Gemma 3) */
            out_text(o, m[0].content, m[0].len);
            out_text(o, f->system_sep, strlen(f->system_sep));
        }
        out_content(o, m[i].content, m[i].len);
        if (i + 1 == n && (flags & ENGINE_CHAT_CONTINUE_LAST)) break;
        out_template(o, f->suffix[role]);
    }
    if (flags & ENGINE_CHAT_ADD_GENERATION_PROMPT) {
        out_template(o, f->gen_prompt);
        if (f->think != THINK_NONE)
            out_template(o, (flags & ENGINE_CHAT_NO_THINKING) ? f->gen_think_off : f->gen_think_on);
    }
    if (o->vocab) out_flush(o);
    return o->err;
}

int engine_chat_render(enum engine_chat_family fam, const struct engine_chat_msg *msgs, size_t n,
                       unsigned flags, char *buf, size_t cap, size_t *ret_len,
                       struct err_detail *d) {
    struct chat_out o = {.d = d, .buf = buf, .cap = buf ? cap : 0};
    int r = chat_walk(fam, msgs, n, flags, &o);
    if (r < 0) return r;
    *ret_len = o.len;
    return o.len > o.cap ? -ENOSPC : 0;
}

int engine_chat_tokenize(enum engine_chat_family fam, const struct engine_vocab *v,
                         const struct engine_chat_msg *msgs, size_t n, unsigned flags,
                         int32_t **ret, size_t *ret_n, struct err_detail *d) {
    struct chat_out o = {.d = d, .vocab = v};
    int r = chat_walk(fam, msgs, n, flags, &o);
    free(o.run);
    if (r < 0) {
        free(o.ids);
        return r == -ENOMEM ? err_set(d, -ENOMEM, "chat: out of memory") : r;
    }
    if (!o.ids) o.ids = malloc(sizeof *o.ids); /* an empty rendering still owns a buffer */
    if (!o.ids) return err_set(d, -ENOMEM, "chat: out of memory");
    *ret = o.ids;
    *ret_n = o.n_ids;
    return 0;
}

/* ---- reasoning apart from the answer ------------------------------------------------ */

enum { TS_BEFORE, TS_THINK_START, TS_THINK, TS_ANSWER_START, TS_ANSWER };

void engine_chat_think_begin(struct engine_chat_think *t, enum engine_chat_family fam,
                             unsigned flags) {
    memset(t, 0, sizeof *t);
    if (!engine_chat_thinks(fam) || (flags & ENGINE_CHAT_NO_THINKING))
        t->state = TS_ANSWER;
    else /* Qwen3.5's generation prompt opened the block; Qwen3's model opens it */
        t->state = families[fam].think == THINK_QWEN35 ? TS_THINK_START : TS_BEFORE;
}

struct split_out {
    char *r, *a;
    size_t nr, na;
};

static void put(struct split_out *so, bool reasoning, const char *s, size_t n) {
    memcpy(reasoning ? so->r + so->nr : so->a + so->na, s, n);
    *(reasoning ? &so->nr : &so->na) += n;
}

static void think_byte(struct engine_chat_think *t, char c, struct split_out *so) {
    static const char open[] = "<think>", close[] = "</think>";
    switch (t->state) {
    case TS_BEFORE: /* whitespace, then <think> or the answer */
        if (t->n_tag == 0 && is_space(c)) return;
        if (c == open[t->n_tag]) {
            t->tag[t->n_tag++] = c;
            if (t->n_tag == sizeof open - 1) t->n_tag = 0, t->state = TS_THINK_START;
            return;
        }
        put(so, false, t->tag, t->n_tag); /* no block: all of it is the answer */
        t->n_tag = 0;
        t->state = TS_ANSWER;
        put(so, false, &c, 1);
        return;
    case TS_THINK_START:
    case TS_ANSWER_START:
        if (is_space(c)) return;
        t->state = t->state == TS_THINK_START ? TS_THINK : TS_ANSWER;
        think_byte(t, c, so);
        return;
    case TS_THINK:
        if (c == close[t->n_tag]) {
            t->tag[t->n_tag++] = c;
            if (t->n_tag == sizeof close - 1) t->n_tag = t->n_ws = 0, t->state = TS_ANSWER_START;
            return;
        }
        if (t->n_tag) { /* not the tag after all: text, and c afresh */
            put(so, true, t->ws, t->n_ws);
            put(so, true, t->tag, t->n_tag);
            t->n_ws = t->n_tag = 0;
            think_byte(t, c, so);
            return;
        }
        if (is_space(c)) { /* whitespace before </think> is dropped, elsewhere kept */
            if (t->n_ws == sizeof t->ws) put(so, true, t->ws, t->n_ws), t->n_ws = 0;
            t->ws[t->n_ws++] = c;
            return;
        }
        put(so, true, t->ws, t->n_ws);
        t->n_ws = 0;
        put(so, true, &c, 1);
        return;
    default:
        put(so, false, &c, 1);
    }
}

void engine_chat_think_split(struct engine_chat_think *t, const char *text, size_t len,
                             char *reasoning, size_t *ret_r, char *answer, size_t *ret_a) {
    struct split_out so = {.r = reasoning, .a = answer};
    for (size_t i = 0; i < len; i++) think_byte(t, text[i], &so);
    *ret_r = so.nr;
    *ret_a = so.na;
}

void engine_chat_think_end(struct engine_chat_think *t, char *reasoning, size_t *ret_r,
                           char *answer, size_t *ret_a) {
    struct split_out so = {.r = reasoning, .a = answer};
    if (t->state == TS_THINK) { /* the block never closed: what is held was reasoning */
        put(&so, true, t->ws, t->n_ws);
        put(&so, true, t->tag, t->n_tag);
    }
    else if (t->state == TS_BEFORE)
        put(&so, false, t->tag, t->n_tag);
    t->n_tag = t->n_ws = 0;
    *ret_r = so.nr;
    *ret_a = so.na;
}
