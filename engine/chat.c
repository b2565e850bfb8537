/* chat — built-in chat templates (see chat.h for the formats and why no Jinja runs). */
#include "engine/chat.h"
#include "engine/chat-impl.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct chat_family families[ENGINE_CHAT_FAMILY_COUNT] = {
    [ENGINE_CHAT_CHATML] = {
        .name = "chatml", .marker = "<|im_start|>",
        .prefix = {"<|im_start|>system\n", "<|im_start|>user\n", "<|im_start|>assistant\n"},
        .suffix = {"<|im_end|>\n", "<|im_end|>\n", "<|im_end|>\n"},
        .gen_prompt = "<|im_start|>assistant\n", .end_of_turn = "<|im_end|>",
        .tools = TOOLS_HERMES,
        .specials = {{"<|im_start|>", SPECIAL_REQUIRED}, {"<|im_end|>", SPECIAL_REQUIRED},
                     {"<tool_call>", SPECIAL_TEXT_OK}, {"</tool_call>", SPECIAL_TEXT_OK},
                     {"<tool_response>", SPECIAL_TEXT_OK}, {"</tool_response>", SPECIAL_TEXT_OK}},
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
        .tools = TOOLS_HERMES,
        .specials = {{"<|im_start|>", SPECIAL_REQUIRED}, {"<|im_end|>", SPECIAL_REQUIRED},
                     {"<think>", SPECIAL_TEXT_OK}, {"</think>", SPECIAL_TEXT_OK},
                     {"<tool_call>", SPECIAL_TEXT_OK}, {"</tool_call>", SPECIAL_TEXT_OK},
                     {"<tool_response>", SPECIAL_TEXT_OK}, {"</tool_response>", SPECIAL_TEXT_OK}},
    },
    [ENGINE_CHAT_QWEN35] = {
        .name = "qwen35", .marker = "<function=",
        .prefix = {"<|im_start|>system\n", "<|im_start|>user\n", "<|im_start|>assistant\n"},
        .suffix = {"<|im_end|>\n", "<|im_end|>\n", "<|im_end|>\n"},
        .gen_prompt = "<|im_start|>assistant\n", .end_of_turn = "<|im_end|>", .trim = true,
        .think = THINK_QWEN35, .gen_think_on = "<think>\n",
        .gen_think_off = "<think>\n\n</think>\n\n", .tools = TOOLS_QWEN35,
        .specials = {{"<|im_start|>", SPECIAL_REQUIRED}, {"<|im_end|>", SPECIAL_REQUIRED},
                     {"<think>", SPECIAL_TEXT_OK}, {"</think>", SPECIAL_TEXT_OK},
                     {"<tool_call>", SPECIAL_TEXT_OK}, {"</tool_call>", SPECIAL_TEXT_OK},
                     {"<tool_response>", SPECIAL_TEXT_OK}, {"</tool_response>", SPECIAL_TEXT_OK}},
    },
    [ENGINE_CHAT_LLAMA31] = {
        .name = "llama31", .marker = "Cutting Knowledge Date:", .bos = "<|begin_of_text|>",
        .end_of_turn = "<|eot_id|>", .tools = TOOLS_LLAMA31, .walk = chat_walk_llama31,
        .specials = {{"<|begin_of_text|>", SPECIAL_BOS}, {"<|start_header_id|>", SPECIAL_REQUIRED},
                     {"<|end_header_id|>", SPECIAL_REQUIRED}, {"<|eot_id|>", SPECIAL_REQUIRED}},
    },
    [ENGINE_CHAT_HARMONY] = {
        .name = "harmony", .marker = "<|channel|>", .end_of_turn = "<|return|>",
        .think = THINK_HARMONY, .tools = TOOLS_HARMONY, .walk = chat_walk_harmony,
        .specials = {{"<|start|>", SPECIAL_REQUIRED}, {"<|message|>", SPECIAL_REQUIRED},
                     {"<|end|>", SPECIAL_REQUIRED}, {"<|channel|>", SPECIAL_REQUIRED},
                     {"<|call|>", SPECIAL_REQUIRED}, {"<|return|>", SPECIAL_REQUIRED},
                     {"<|constrain|>", SPECIAL_TEXT_OK}},
    },
    [ENGINE_CHAT_GEMMA4] = {
        .name = "gemma4", .marker = "<|turn>", .bos = "<bos>",
        .prefix = {"<|turn>system\n", "<|turn>user\n", "<|turn>model\n"},
        .suffix = {"<turn|>\n", "<turn|>\n", "<turn|>\n"},
        .gen_prompt = "<|turn>model\n", .end_of_turn = "<turn|>", .trim = true,
        .tools = TOOLS_GEMMA4, .tools_walk = chat_walk_gemma4,
        .specials = {{"<bos>", SPECIAL_BOS}, {"<|turn>", SPECIAL_REQUIRED},
                     {"<turn|>", SPECIAL_REQUIRED}, {"<|tool>", SPECIAL_TEXT_OK},
                     {"<tool|>", SPECIAL_TEXT_OK}, {"<|tool_call>", SPECIAL_TEXT_OK},
                     {"<tool_call|>", SPECIAL_TEXT_OK}, {"<|tool_response>", SPECIAL_TEXT_OK},
                     {"<tool_response|>", SPECIAL_TEXT_OK}, {"<|\"|>", SPECIAL_TEXT_OK},
                     {"<|channel>", SPECIAL_TEXT_OK}, {"<channel|>", SPECIAL_TEXT_OK}},
    },
};

/* Detection order: harmony first (its template names no other family's marker, but says
 * "<|channel|>" only itself); gemma4 before gemma (a Gemma 4 template may mention
 * <start_of_turn>); the thinking chatml families before chatml, each also needing chatml's
 * marker; Llama 3.1/3.2 (their date header) before Llama 3. */
static const enum engine_chat_family detect_order[ENGINE_CHAT_FAMILY_COUNT] = {
    ENGINE_CHAT_HARMONY, ENGINE_CHAT_QWEN35, ENGINE_CHAT_QWEN3, ENGINE_CHAT_CHATML,
    ENGINE_CHAT_LLAMA31, ENGINE_CHAT_LLAMA3, ENGINE_CHAT_GEMMA4, ENGINE_CHAT_GEMMA,
    ENGINE_CHAT_MISTRAL,
};

static const char *const role_names[ENGINE_CHAT_ROLE_COUNT] = {"system", "user", "assistant",
                                                               "tool"};

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
        if ((families[f].think == THINK_QWEN3 || families[f].think == THINK_QWEN35) &&
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
    if (!f) return ENGINE_CHAT_NONE;
    enum engine_chat_family fam = gguf_get_str(f, "tokenizer.chat_template", &s, &d) < 0
                                      ? ENGINE_CHAT_NONE : engine_chat_detect(s.ptr, s.len);
    /* gpt-oss speaks harmony whatever its file says about a template */
    if (fam == ENGINE_CHAT_NONE && gguf_get_str(f, "general.architecture", &s, &d) >= 0 &&
        s.len == 7 && !memcmp(s.ptr, "gpt-oss", 7))
        fam = ENGINE_CHAT_HARMONY;
    return fam;
}

const char *engine_chat_family_name(enum engine_chat_family fam) {
    return (unsigned)fam < ENGINE_CHAT_FAMILY_COUNT ? families[fam].name : "none";
}

const char *engine_chat_end_of_turn(enum engine_chat_family fam) {
    return (unsigned)fam < ENGINE_CHAT_FAMILY_COUNT ? families[fam].end_of_turn : "";
}

const char *engine_chat_family_list(void) {
    return "chatml, llama3, gemma, mistral, gemma4, qwen3, qwen35, llama31, harmony";
}

bool engine_chat_has_tools(enum engine_chat_family fam) {
    return (unsigned)fam < ENGINE_CHAT_FAMILY_COUNT && families[fam].tools != TOOLS_NONE;
}

const char *engine_chat_call_open(enum engine_chat_family fam) {
    if (!engine_chat_has_tools(fam)) return NULL;
    switch (families[fam].tools) {
    case TOOLS_LLAMA31: return "";
    case TOOLS_GEMMA4: return "<|tool_call>";
    default: return "<tool_call>";
    }
}

bool engine_chat_has_effort(enum engine_chat_family fam) {
    return (unsigned)fam < ENGINE_CHAT_FAMILY_COUNT && families[fam].think == THINK_HARMONY;
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
void chat_out_text(struct chat_out *o, const char *s, size_t n) {
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
        chat_out_text(o, sp->text, n);
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
        case SPECIAL_TEXT_OK: chat_out_text(o, sp->text, n); return;
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
void chat_out_template(struct chat_out *o, const char *s) {
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
            chat_out_text(o, s, n);
            return;
        }
        chat_out_text(o, s, (size_t)(best - s));
        out_special(o, bsp);
        size_t skip = (size_t)(best - s) + strlen(bsp->text);
        s += skip;
        n -= skip;
    }
}

bool chat_is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Message content: always plain text, never special tokens. */
static void out_content(struct chat_out *o, const char *s, size_t n) {
    if (o->fam->trim) {
        while (n && chat_is_space(*s)) s++, n--;
        while (n && chat_is_space(s[n - 1])) n--;
    }
    chat_out_text(o, s, n);
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
            return err_set(d, -EINVAL, "messages[%zu].role: not system, user, assistant or tool",
                           i);
        if (m[i].len && !m[i].content)
            return err_set(d, -EINVAL, "messages[%zu].content: NULL", i);
        if ((m[i].role == ENGINE_CHAT_TOOL || m[i].n_tool_calls) && f->tools == TOOLS_NONE)
            return err_set(d, -EINVAL, "messages[%zu]: the %s template has no tool %s", i, f->name,
                           m[i].role == ENGINE_CHAT_TOOL ? "results" : "calls");
        if (m[i].n_tool_calls && m[i].role != ENGINE_CHAT_ASSISTANT)
            return err_set(d, -EINVAL, "messages[%zu]: only an assistant message makes tool calls",
                           i);
        for (size_t k = 0; k < m[i].n_tool_calls; k++)
            if (!m[i].tool_calls[k].name_len ||
                memchr(m[i].tool_calls[k].name, '"', m[i].tool_calls[k].name_len))
                return err_set(d, -EINVAL,
                               "messages[%zu].tool_calls[%zu].name: empty or with a quote", i, k);
        if (m[i].role == ENGINE_CHAT_TOOL && (i == 0 || (m[i - 1].role != ENGINE_CHAT_ASSISTANT &&
                                                         m[i - 1].role != ENGINE_CHAT_TOOL)))
            return err_set(d, -EINVAL,
                           "messages[%zu]: a tool result must follow an assistant message "
                           "or another tool result",
                           i);
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

void chat_strip_space(const char **s, size_t *n) {
    while (*n && chat_is_space(**s)) (*s)++, (*n)--;
    while (*n && chat_is_space((*s)[*n - 1])) (*n)--;
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

/* JSON as Python's json.dumps(x, ensure_ascii=False) writes it (the templates' tojson):
 * ", " and ": " separators, keys in their order, UTF-8 kept. NULL: out of memory. */
char *chat_py_json(const json_t *x) {
    return json_dumps(x, JSON_ENCODE_ANY | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
}

void chat_out_json(struct chat_out *o, const json_t *x) { chat_out_json_indent(o, x, 0); }

void chat_out_json_indent(struct chat_out *o, const json_t *x, int indent) {
    char *t = json_dumps(x, JSON_ENCODE_ANY | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17) |
                                JSON_INDENT(indent));
    if (!t) {
        if (o->err == 0) o->err = -ENOMEM;
        return;
    }
    chat_out_text(o, t, strlen(t));
    free(t);
}

/* A tool call's arguments parsed (an object; a non-object or broken JSON is refused). */
json_t *chat_call_args(struct chat_out *o, const struct engine_chat_tool_call *c, size_t i,
                         size_t k) {
    json_error_t je;
    json_t *a = json_loadb(c->arguments ? c->arguments : "{}", c->arguments ? c->arguments_len : 2,
                           JSON_DECODE_ANY, &je);
    if (!json_is_object(a)) {
        json_decref(a);
        if (o->err == 0)
            o->err = err_set(o->d, -EINVAL,
                             "messages[%zu].tool_calls[%zu].arguments: not a JSON object", i, k);
        return NULL;
    }
    return a;
}

/* Python's str() of a JSON scalar, as Jinja's |string writes a tool argument (Qwen3.5) */
void chat_out_py_scalar(struct chat_out *o, const json_t *v) {
    char num[40];
    switch (json_typeof(v)) {
    case JSON_STRING:
        chat_out_text(o, json_string_value(v), json_string_length(v));
        return;
    case JSON_TRUE:
        chat_out_text(o, "True", 4);
        return;
    case JSON_FALSE:
        chat_out_text(o, "False", 5);
        return;
    case JSON_NULL:
        chat_out_text(o, "None", 4);
        return;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        break;
    case JSON_REAL: { /* the shortest text that reads back the same, as Python's repr */
        double x = json_real_value(v);
        for (int p = 1; p <= 17; p++) {
            snprintf(num, sizeof num, "%.*g", p, x);
            if (strtod(num, NULL) == x) break;
        }
        if (!strpbrk(num, ".eEn")) strcat(num, ".0");
        break;
    }
    default:
        chat_out_json(o, v);
        return;
    }
    chat_out_text(o, num, strlen(num));
}

/* The tool calls of message i after its content (non-empty: has_content) */
static void out_tool_calls(struct chat_out *o, const struct engine_chat_msg *m, size_t i,
                           bool has_content) {
    const struct chat_family *f = o->fam;
    for (size_t k = 0; k < m->n_tool_calls && o->err == 0; k++) {
        const struct engine_chat_tool_call *c = &m->tool_calls[k];
        json_t *args = chat_call_args(o, c, i, k);
        if (!args) return;
        if (f->tools == TOOLS_HERMES) {
            /* Qwen2.5: each call on a new line; Qwen3: a new line after content or a call */
            if (f->think == THINK_NONE || k > 0 || has_content) chat_out_text(o, "\n", 1);
            chat_out_template(o, "<tool_call>\n{\"name\": \"");
            chat_out_text(o, c->name, c->name_len);
            chat_out_text(o, "\", \"arguments\": ", 16);
            chat_out_json(o, args);
            chat_out_template(o, "}\n</tool_call>");
        } else {
            chat_out_template(o, k > 0         ? "\n<tool_call>\n<function="
                            : has_content ? "\n\n<tool_call>\n<function="
                                          : "<tool_call>\n<function=");
            chat_out_text(o, c->name, c->name_len);
            chat_out_text(o, ">\n", 2);
            const char *key;
            json_t *v;
            json_object_foreach(args, key, v) {
                chat_out_text(o, "<parameter=", 11);
                chat_out_text(o, key, strlen(key));
                chat_out_text(o, ">\n", 2);
                if (json_is_object(v) || json_is_array(v))
                    chat_out_json(o, v);
                else
                    chat_out_py_scalar(o, v);
                chat_out_text(o, "\n</parameter>\n", 14);
            }
            chat_out_template(o, "</function>\n</tool_call>");
        }
        json_decref(args);
    }
}

/* The system turn with the tool list (Hermes: the system text first; Qwen3.5: after). */
static void out_tools_system(struct chat_out *o, const struct engine_chat_msg *sys) {
    const struct chat_family *f = o->fam;
    static const char hermes_head[] =
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
        "provided with function signatures within <tools></tools> XML tags:\n<tools>";
    static const char hermes_tail[] =
        "\n</tools>\n\nFor each function call, return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
        "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>";
    static const char q35_head[] =
        "# Tools\n\nYou have access to the following functions:\n\n<tools>";
    static const char q35_tail[] =
        "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO "
        "suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>"
        "\nvalue_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the value for the "
        "second parameter\nthat can span\nmultiple "
        "lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function "
        "calls MUST follow the specified format: an inner <function=...></function> block must be "
        "nested within <tool_call></tool_call> XML tags\n- Required parameters MUST be "
        "specified\n- You may provide optional reasoning for your function call in natural "
        "language BEFORE the function call, but NOT after\n- If there is no function call "
        "available, answer the question like normal with your current knowledge and do not tell "
        "the user about function calls\n</IMPORTANT>";
    chat_out_template(o, f->prefix[ENGINE_CHAT_SYSTEM]);
    if (f->tools == TOOLS_HERMES && sys) {
        chat_out_text(o, sys->content, sys->len);
        chat_out_text(o, "\n\n", 2);
    }
    chat_out_template(o, f->tools == TOOLS_HERMES ? hermes_head : q35_head);
    size_t i;
    json_t *t;
    json_array_foreach(o->tools, i, t) {
        chat_out_text(o, "\n", 1);
        chat_out_json(o, t);
    }
    chat_out_template(o, f->tools == TOOLS_HERMES ? hermes_tail : q35_tail);
    if (f->tools == TOOLS_QWEN35 && sys) {
        const char *c = sys->content;
        size_t cn = sys->len;
        chat_strip_space(&c, &cn);
        if (cn) {
            chat_out_text(o, "\n\n", 2);
            chat_out_text(o, c, cn);
        }
    }
    chat_out_template(o, f->suffix[ENGINE_CHAT_SYSTEM]);
}

/* Message i, a tool result: a run of them is one user turn of <tool_response> blocks. */
static void out_tool_result(struct chat_out *o, const struct engine_chat_msg *m, size_t i,
                            size_t n) {
    const char *c = m[i].content;
    size_t cn = m[i].len;
    if (o->fam->tools == TOOLS_QWEN35) chat_strip_space(&c, &cn);
    if (m[i - 1].role != ENGINE_CHAT_TOOL) chat_out_template(o, "<|im_start|>user");
    chat_out_template(o, "\n<tool_response>\n");
    chat_out_text(o, c, cn);
    chat_out_template(o, "\n</tool_response>");
    if (i + 1 == n || m[i + 1].role != ENGINE_CHAT_TOOL) chat_out_template(o, "<|im_end|>\n");
}

/* An assistant turn of a thinking family: after the last user message (`after`) with its
 * reasoning in a think block (Qwen3: where it has some, or is the last message), earlier
 * ones without; then its tool calls. */
static void out_assistant_think(struct chat_out *o, const struct engine_chat_msg *m, size_t i,
                                bool after, bool last) {
    const struct chat_family *f = o->fam;
    const char *c = m->content, *r = m->reasoning ? m->reasoning : "";
    size_t cn = m->len, rn = m->reasoning ? m->reasoning_len : 0;
    if (f->think == THINK_QWEN35) chat_strip_space(&c, &cn);
    if (!m->reasoning) think_cut(c, cn, &r, &rn, &c, &cn);
    if (f->think == THINK_QWEN35) chat_strip_space(&r, &rn);
    const char *tc = c; /* what the templates test for content before the calls */
    size_t tcn = cn;
    if (f->think == THINK_QWEN35) chat_strip_space(&tc, &tcn);
    chat_out_template(o, f->prefix[ENGINE_CHAT_ASSISTANT]);
    if (!after || (f->think == THINK_QWEN3 && !last && rn == 0)) {
        chat_out_text(o, c, cn);
    } else {
        if (f->think == THINK_QWEN3) {
            strip_nl(&r, &rn, true, true);
            strip_nl(&c, &cn, true, false);
        }
        chat_out_template(o, "<think>\n");
        chat_out_text(o, r, rn);
        chat_out_template(o, "\n</think>\n\n");
        chat_out_text(o, c, cn);
    }
    out_tool_calls(o, m, i, tcn > 0);
}

/* Qwen2.5's assistant turn with tool calls: its content on a line of its own, if any. */
static void out_assistant_calls(struct chat_out *o, const struct engine_chat_msg *m, size_t i) {
    chat_out_template(o, "<|im_start|>assistant");
    if (m->len) {
        chat_out_text(o, "\n", 1);
        chat_out_text(o, m->content, m->len);
    }
    out_tool_calls(o, m, i, m->len > 0);
}

/* Qwen's templates do not count a user message that only wraps tool results as a query */
static bool is_query(const struct engine_chat_msg *m, bool trim) {
    static const char open[] = "<tool_response>", close[] = "</tool_response>";
    const char *c = m->content;
    size_t cn = m->len;
    if (m->role != ENGINE_CHAT_USER) return false;
    if (trim) chat_strip_space(&c, &cn);
    return !(cn >= sizeof open - 1 + sizeof close - 1 && !memcmp(c, open, sizeof open - 1) &&
             !memcmp(c + cn - (sizeof close - 1), close, sizeof close - 1));
}

static int chat_walk(enum engine_chat_family fam, const struct engine_chat_msg *m, size_t n,
                     unsigned flags, struct chat_out *o) {
    if ((unsigned)fam >= ENGINE_CHAT_FAMILY_COUNT)
        return err_set(o->d, -EINVAL, "chat: no supported chat template (recognised: %s)",
                       engine_chat_family_list());
    const struct chat_family *f = o->fam = &families[fam];
    int r = chat_check(f, m, n, flags, o->d);
    if (r < 0) return r;
    bool tooled = o->tools && json_array_size(o->tools) > 0;
    for (size_t i = 0; i < n && !tooled; i++)
        tooled = m[i].role == ENGINE_CHAT_TOOL || m[i].n_tool_calls > 0;
    int (*walk)(struct chat_out *, const struct engine_chat_msg *, size_t, unsigned) =
        tooled && f->tools_walk ? f->tools_walk : f->walk;
    if (walk) {
        r = walk(o, m, n, flags);
        if (o->vocab) out_flush(o);
        return r < 0 ? r : o->err;
    }
    bool merge = !f->prefix[ENGINE_CHAT_SYSTEM] && m[0].role == ENGINE_CHAT_SYSTEM;
    /* thinking families: the last user message (the query the reasoning after it answers) */
    size_t last_query = n - 1;
    if (f->think != THINK_NONE) {
        size_t q = n;
        while (q > 0 && !is_query(&m[q - 1], f->think == THINK_QWEN35)) q--;
        if (q == 0 && f->think == THINK_QWEN35)
            return err_set(o->d, -EINVAL, "chat: the %s template needs a user message", f->name);
        if (q > 0) last_query = q - 1;
    }
    if (f->bos) chat_out_template(o, f->bos);
    else if (o->vocab && engine_vocab_add_bos(o->vocab) && engine_vocab_bos(o->vocab) >= 0)
        out_id(o, engine_vocab_bos(o->vocab));
    size_t i0 = merge ? 1 : 0;
    if (o->tools && json_array_size(o->tools) > 0) { /* the system turn lists the tools */
        bool sys = m[0].role == ENGINE_CHAT_SYSTEM;
        out_tools_system(o, sys ? &m[0] : NULL);
        i0 = sys ? 1 : 0;
    }
    for (size_t i = i0; i < n; i++) {
        enum engine_chat_role role = m[i].role;
        if (role == ENGINE_CHAT_TOOL) {
            out_tool_result(o, m, i, n);
            continue;
        }
        if ((f->think != THINK_NONE || m[i].n_tool_calls) && role == ENGINE_CHAT_ASSISTANT) {
            if (f->think != THINK_NONE)
                out_assistant_think(o, &m[i], i, i > last_query, i + 1 == n);
            else
                out_assistant_calls(o, &m[i], i);
            if (i + 1 == n && (flags & ENGINE_CHAT_CONTINUE_LAST)) break;
            chat_out_template(o, f->suffix[role]);
            continue;
        }
        chat_out_template(o, f->prefix[role]);
        if (merge && i == 1) {
            /* the system text as the first user message's start, untrimmed (Gemma 3) */
            chat_out_text(o, m[0].content, m[0].len);
            chat_out_text(o, f->system_sep, strlen(f->system_sep));
        }
        out_content(o, m[i].content, m[i].len);
        if (i + 1 == n && (flags & ENGINE_CHAT_CONTINUE_LAST)) break;
        chat_out_template(o, f->suffix[role]);
    }
    if (flags & ENGINE_CHAT_ADD_GENERATION_PROMPT) {
        chat_out_template(o, f->gen_prompt);
        if (f->think != THINK_NONE)
            chat_out_template(o, (flags & ENGINE_CHAT_NO_THINKING) ? f->gen_think_off : f->gen_think_on);
    }
    if (o->vocab) out_flush(o);
    return o->err;
}

/* The tool list parsed into o->tools (none: NULL), refused for a family without tools. */
static int tools_parse(struct chat_out *o, enum engine_chat_family fam,
                       const struct engine_chat_tools *t) {
    if (!t || !t->json) return 0;
    json_error_t je;
    o->tools = json_loadb(t->json, t->len, 0, &je);
    if (!json_is_array(o->tools))
        return err_set(o->d, -EINVAL, "tools: not a JSON array (%s)",
                       o->tools ? "another value" : je.text);
    size_t i;
    json_t *x;
    json_array_foreach(o->tools, i, x) if (!json_is_object(x)) return err_set(
        o->d, -EINVAL, "tools[%zu]: not a JSON object", i);
    if (json_array_size(o->tools) &&
        ((unsigned)fam >= ENGINE_CHAT_FAMILY_COUNT || families[fam].tools == TOOLS_NONE))
        return err_set(o->d, -EINVAL, "tools: the %s chat template has no tool format",
                       engine_chat_family_name(fam));
    return 0;
}

static const struct engine_chat_opts no_opts;

int engine_chat_render_opts(enum engine_chat_family fam, const struct engine_chat_msg *msgs,
                            size_t n, const struct engine_chat_opts *opts, unsigned flags,
                            char *buf, size_t cap, size_t *ret_len, struct err_detail *d) {
    struct chat_out o = {.d = d, .buf = buf, .cap = buf ? cap : 0, .opts = opts ? opts : &no_opts};
    int r = tools_parse(&o, fam, &o.opts->tools);
    if (r == 0) r = chat_walk(fam, msgs, n, flags, &o);
    json_decref(o.tools);
    if (r < 0) return r;
    *ret_len = o.len;
    return o.len > o.cap ? -ENOSPC : 0;
}

int engine_chat_render_tools(enum engine_chat_family fam, const struct engine_chat_msg *msgs,
                             size_t n, const struct engine_chat_tools *tools, unsigned flags,
                             char *buf, size_t cap, size_t *ret_len, struct err_detail *d) {
    struct engine_chat_opts opts = {.tools = tools ? *tools : (struct engine_chat_tools){0}};
    return engine_chat_render_opts(fam, msgs, n, &opts, flags, buf, cap, ret_len, d);
}

int engine_chat_render(enum engine_chat_family fam, const struct engine_chat_msg *msgs, size_t n,
                       unsigned flags, char *buf, size_t cap, size_t *ret_len,
                       struct err_detail *d) {
    return engine_chat_render_opts(fam, msgs, n, NULL, flags, buf, cap, ret_len, d);
}

int engine_chat_tokenize_opts(enum engine_chat_family fam, const struct engine_vocab *v,
                              const struct engine_chat_msg *msgs, size_t n,
                              const struct engine_chat_opts *opts, unsigned flags, int32_t **ret,
                              size_t *ret_n, struct err_detail *d) {
    struct chat_out o = {.d = d, .vocab = v, .opts = opts ? opts : &no_opts};
    int r = tools_parse(&o, fam, &o.opts->tools);
    if (r == 0) r = chat_walk(fam, msgs, n, flags, &o);
    json_decref(o.tools);
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

int engine_chat_tokenize_tools(enum engine_chat_family fam, const struct engine_vocab *v,
                               const struct engine_chat_msg *msgs, size_t n,
                               const struct engine_chat_tools *tools, unsigned flags, int32_t **ret,
                               size_t *ret_n, struct err_detail *d) {
    struct engine_chat_opts opts = {.tools = tools ? *tools : (struct engine_chat_tools){0}};
    return engine_chat_tokenize_opts(fam, v, msgs, n, &opts, flags, ret, ret_n, d);
}

int engine_chat_tokenize(enum engine_chat_family fam, const struct engine_vocab *v,
                         const struct engine_chat_msg *msgs, size_t n, unsigned flags,
                         int32_t **ret, size_t *ret_n, struct err_detail *d) {
    return engine_chat_tokenize_opts(fam, v, msgs, n, NULL, flags, ret, ret_n, d);
}

/* ---- tool calls in an answer -------------------------------------------------------- */

char *chat_dup_n(const char *s, size_t n) {
    char *t = malloc(n + 1);
    if (t) {
        memcpy(t, s, n);
        t[n] = 0;
    }
    return t;
}

/* One Hermes call body: {"name": "...", "arguments": {...}} */
static int parse_hermes(const char *s, size_t n, struct engine_chat_parsed_call *c) {
    json_error_t je;
    json_t *x = json_loadb(s, n, 0, &je), *name = json_object_get(x, "name"),
           *args = json_object_get(x, "arguments");
    int r = -EINVAL;
    if (json_is_string(name) && (json_is_object(args) || !args)) {
        c->name = strdup(json_string_value(name));
        c->arguments = args ? json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER) : strdup("{}");
        r = c->name && c->arguments ? 0 : -ENOMEM;
    }
    json_decref(x);
    return r;
}

/* One Qwen3.5 call body: <function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>;
 * a value that reads as JSON is that JSON, else a string */
static int parse_qwen35(const char *s, size_t n, struct engine_chat_parsed_call *c) {
    static const char fo[] = "<function=", fc[] = "</function>",
                      po[] = "<parameter=", pc[] = "</parameter>";
    const char *e = s + n;
    while (s < e && chat_is_space(*s)) s++;
    if ((size_t)(e - s) < sizeof fo - 1 || memcmp(s, fo, sizeof fo - 1)) return -EINVAL;
    s += sizeof fo - 1;
    const char *gt = memchr(s, '>', (size_t)(e - s));
    const char *end = memmem(s, (size_t)(e - s), fc, sizeof fc - 1);
    if (!gt || !end || gt > end) return -EINVAL;
    json_t *args = json_object();
    c->name = chat_dup_n(s, (size_t)(gt - s));
    for (const char *p = gt + 1; args && c->name;) {
        const char *o = memmem(p, (size_t)(end - p), po, sizeof po - 1);
        if (!o) break;
        const char *k0 = o + sizeof po - 1, *k1 = memchr(k0, '>', (size_t)(end - k0));
        const char *v1 = k1 ? memmem(k1, (size_t)(end - k1), pc, sizeof pc - 1) : NULL;
        if (!k1 || !v1) break;
        const char *v0 = k1 + 1;
        if (v0 < v1 && *v0 == '\n') v0++;
        size_t vn = (size_t)(v1 - v0);
        if (vn && v0[vn - 1] == '\n') vn--;
        char *key = chat_dup_n(k0, (size_t)(k1 - k0));
        json_error_t je;
        json_t *v = json_loadb(v0, vn, JSON_DECODE_ANY, &je);
        if (!v) v = json_stringn(v0, vn);
        if (key)
            json_object_set_new(args, key, v);
        else
            json_decref(v);
        free(key);
        p = v1 + sizeof pc - 1;
    }
    c->arguments = args ? json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(args);
    return c->name && c->arguments ? 0 : -ENOMEM;
}

int engine_chat_parse_tool_calls(enum engine_chat_family fam, const char *text, size_t len,
                                 struct engine_chat_parsed_call *calls, size_t cap, size_t *ret_n,
                                 size_t *ret_content_len) {
    static const char open[] = "<tool_call>", close[] = "</tool_call>";
    *ret_n = 0;
    *ret_content_len = len;
    if ((unsigned)fam >= ENGINE_CHAT_FAMILY_COUNT || families[fam].tools == TOOLS_NONE) return 0;
    if (families[fam].tools == TOOLS_LLAMA31)
        return chat_parse_llama31(text, len, calls, cap, ret_n, ret_content_len);
    if (families[fam].tools == TOOLS_GEMMA4)
        return chat_parse_gemma4(text, len, calls, cap, ret_n, ret_content_len);
    const char *p = text, *e = text + len;
    for (const char *o; *ret_n < cap && (o = memmem(p, (size_t)(e - p), open, sizeof open - 1));) {
        const char *b = o + sizeof open - 1,
                   *c = memmem(b, (size_t)(e - b), close, sizeof close - 1);
        if (!c) break; /* not closed: text */
        struct engine_chat_parsed_call pc = {0};
        int r = families[fam].tools != TOOLS_QWEN35 ? parse_hermes(b, (size_t)(c - b), &pc)
                                                    : parse_qwen35(b, (size_t)(c - b), &pc);
        if (r < 0) {
            free(pc.name);
            free(pc.arguments);
            if (r == -ENOMEM) return r;
            break;
        }
        if (*ret_n == 0) {
            size_t cl = (size_t)(o - text);
            while (cl && chat_is_space(text[cl - 1])) cl--;
            *ret_content_len = cl;
        }
        calls[(*ret_n)++] = pc;
        p = c + sizeof close - 1;
    }
    return 0;
}

void engine_chat_parsed_calls_free(struct engine_chat_parsed_call *calls, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(calls[i].name);
        free(calls[i].arguments);
    }
}

/* ---- reasoning apart from the answer ------------------------------------------------ */

enum { TS_BEFORE, TS_THINK_START, TS_THINK, TS_ANSWER_START, TS_ANSWER };

void engine_chat_think_begin(struct engine_chat_think *t, enum engine_chat_family fam,
                             unsigned flags) {
    memset(t, 0, sizeof *t);
    t->harmony = engine_chat_thinks(fam) && families[fam].think == THINK_HARMONY;
    if (t->harmony) return; /* reads its headers, thinking or not (the effort is its switch) */
    if (!engine_chat_thinks(fam) || (flags & ENGINE_CHAT_NO_THINKING))
        t->state = TS_ANSWER;
    else /* Qwen3.5's generation prompt opened the block; Qwen3's model opens it */
        t->state = families[fam].think == THINK_QWEN35 ? TS_THINK_START : TS_BEFORE;
}

void chat_split_put(struct chat_split_out *so, bool reasoning, const char *s, size_t n) {
    if (!n) return;
    memcpy(reasoning ? so->r + so->nr : so->a + so->na, s, n);
    *(reasoning ? &so->nr : &so->na) += n;
}

#define put chat_split_put

static void think_byte(struct engine_chat_think *t, char c, struct chat_split_out *so) {
    static const char open[] = "<think>", close[] = "</think>";
    switch (t->state) {
    case TS_BEFORE: /* whitespace, then <think> or the answer */
        if (t->n_tag == 0 && chat_is_space(c)) return;
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
        if (chat_is_space(c)) return;
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
        if (chat_is_space(c)) { /* whitespace before </think> is dropped, elsewhere kept */
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
    struct chat_split_out so = {.r = reasoning, .a = answer};
    for (size_t i = 0; i < len; i++)
        if (t->harmony) chat_harmony_byte(t, text[i], &so);
        else think_byte(t, text[i], &so);
    *ret_r = so.nr;
    *ret_a = so.na;
}

void engine_chat_think_end(struct engine_chat_think *t, char *reasoning, size_t *ret_r,
                           char *answer, size_t *ret_a) {
    struct chat_split_out so = {.r = reasoning, .a = answer};
    if (t->harmony) chat_harmony_end(t, &so);
    else if (t->state == TS_THINK) { /* the block never closed: what is held was reasoning */
        put(&so, true, t->ws, t->n_ws);
        put(&so, true, t->tag, t->n_tag);
    }
    else if (t->state == TS_BEFORE)
        put(&so, false, t->tag, t->n_tag);
    t->n_tag = t->n_ws = 0;
    *ret_r = so.nr;
    *ret_a = so.na;
}
