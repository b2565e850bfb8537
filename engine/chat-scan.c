/* chat-scan — tool calls read while they stream (chat.h, engine_chat_scan_*): each family's
 * call form as a short pattern walked one byte at a time, so the caller can send a call's
 * name as soon as it is whole and its JSON arguments as they come. Patterns:
 *
 *   Hermes, harmony   ws "<tool_call>" ws "{" ws "\"name\"" ws ":" ws STRING ws "," ws
 *                     KEY ws ":" ws ARGS ws "}" ws "</tool_call>", repeated
 *   llama31           ws "{" ws "\"name\"" ws ":" ws STRING ws "," ws KEY ws ":" ws ARGS
 *                     ws "}", once
 *   qwen35            ws "<tool_call>" ws "<function=" NAME ">" ... "</tool_call>", repeated
 *                     (its arguments are XML: they come whole with the parsed call)
 *   gemma4            ws "<|tool_call>call:" NAME "{" ... "<tool_call|>", repeated (Gemma's
 *                     own syntax: likewise whole)
 *
 * KEY is "arguments" (llama31: or "parameters"), ARGS a JSON object whose bytes are
 * reported as arguments, STRING the function's name (without escapes). */
#include "engine/chat.h"

#include <string.h>

enum scan_op {
    OP_WS,      /* any whitespace */
    OP_LIT,     /* the literal arg */
    OP_NAME,    /* a JSON string: the function's name */
    OP_KEY,     /* a JSON string: "arguments" (or "parameters" where allowed) */
    OP_ARGS,    /* a JSON object: the arguments */
    OP_XNAME,   /* bytes up to the byte arg: the function's name */
    OP_SKIP,    /* anything up to and including the literal arg */
    OP_END,     /* the call is over: report it, go back to step 0 (or stop, once) */
};

struct scan_step {
    enum scan_op op;
    const char *arg;
};

#define S(op, arg) {OP_##op, arg}
static const struct scan_step hermes[] = {
    S(WS, 0), S(LIT, "<tool_call>"), S(WS, 0), S(LIT, "{"), S(WS, 0), S(LIT, "\"name\""),
    S(WS, 0), S(LIT, ":"), S(WS, 0), S(NAME, 0), S(WS, 0), S(LIT, ","), S(WS, 0), S(KEY, 0),
    S(WS, 0), S(LIT, ":"), S(WS, 0), S(ARGS, 0), S(WS, 0), S(LIT, "}"), S(WS, 0),
    S(LIT, "</tool_call>"), S(END, 0),
};
static const struct scan_step llama[] = {
    S(WS, 0), S(LIT, "{"), S(WS, 0), S(LIT, "\"name\""), S(WS, 0), S(LIT, ":"), S(WS, 0),
    S(NAME, 0), S(WS, 0), S(LIT, ","), S(WS, 0), S(KEY, 0), S(WS, 0), S(LIT, ":"), S(WS, 0),
    S(ARGS, 0), S(WS, 0), S(LIT, "}"), S(END, "once"),
};
static const struct scan_step xml[] = {
    S(WS, 0), S(LIT, "<tool_call>"), S(WS, 0), S(LIT, "<function="), S(XNAME, ">"),
    S(SKIP, "</tool_call>"), S(END, 0),
};
static const struct scan_step gemma4[] = {
    S(WS, 0), S(LIT, "<|tool_call>call:"), S(XNAME, "{"), S(SKIP, "<tool_call|>"), S(END, 0),
};
#undef S

static const struct scan_step *pattern(const struct engine_chat_scan *s, size_t *n) {
    switch (s->form) {
    case 1: *n = ARRAY_SIZE(llama); return llama;
    case 2: *n = ARRAY_SIZE(xml); return xml;
    case 3: *n = ARRAY_SIZE(gemma4); return gemma4;
    default: *n = ARRAY_SIZE(hermes); return hermes;
    }
}

void engine_chat_scan_begin(struct engine_chat_scan *s, enum engine_chat_family fam) {
    memset(s, 0, sizeof *s);
    s->form = fam == ENGINE_CHAT_LLAMA31  ? 1
              : fam == ENGINE_CHAT_QWEN35 ? 2
              : fam == ENGINE_CHAT_GEMMA4 ? 3
                                          : 0;
    s->failed = !engine_chat_has_tools(fam);
}

static bool ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The step is done: the next one starts afresh. */
static void next(struct engine_chat_scan *s) {
    s->step++;
    s->sub = 0;
    s->n_key = 0;
}

/* After a literal: whether that ended the call. */
static enum engine_chat_scan_event after(struct engine_chat_scan *s, const struct scan_step *p) {
    if (p[s->step].op != OP_END) return ENGINE_CHAT_SCAN_NONE;
    s->done = p[s->step].arg != NULL;
    s->step = 0;
    s->n_calls++;
    return ENGINE_CHAT_SCAN_END;
}

static enum engine_chat_scan_event fail(struct engine_chat_scan *s) {
    s->failed = true;
    return ENGINE_CHAT_SCAN_FAIL;
}

enum engine_chat_scan_event engine_chat_scan_byte(struct engine_chat_scan *s, char c) {
    size_t n;
    const struct scan_step *p = pattern(s, &n);
    if (s->failed || s->done) return ENGINE_CHAT_SCAN_FAIL;
    for (;;) {
        const struct scan_step *st = &p[s->step];
        switch (st->op) {
        case OP_WS:
            if (ws(c)) return ENGINE_CHAT_SCAN_NONE;
            next(s);
            continue;
        case OP_LIT:
            if (c != st->arg[s->sub]) return fail(s);
            if (st->arg[++s->sub] != 0) return ENGINE_CHAT_SCAN_NONE;
            next(s);
            return after(s, p);
        case OP_NAME:
            if (s->sub == 0) {
                if (c != '"') return fail(s);
                s->sub = 1;
                s->n_name = 0;
                return ENGINE_CHAT_SCAN_NONE;
            }
            if (c == '"') {
                if (!s->n_name) return fail(s);
                s->name[s->n_name] = 0;
                next(s);
                return ENGINE_CHAT_SCAN_NAME;
            }
            if (c == '\\' || (unsigned char)c < 0x20 || s->n_name + 1 >= sizeof s->name)
                return fail(s);
            s->name[s->n_name++] = c;
            return ENGINE_CHAT_SCAN_NONE;
        case OP_KEY:
            if (s->sub == 0) {
                if (c != '"') return fail(s);
                s->sub = 1;
                return ENGINE_CHAT_SCAN_NONE;
            }
            if (c == '"') {
                bool args = s->n_key == 9 && !memcmp(s->key, "arguments", 9),
                     params = s->n_key == 10 && !memcmp(s->key, "parameters", 10);
                if (!args && !(params && s->form == 1)) return fail(s);
                next(s);
                return ENGINE_CHAT_SCAN_NONE;
            }
            if (s->n_key == sizeof s->key) return fail(s);
            s->key[s->n_key++] = c;
            return ENGINE_CHAT_SCAN_NONE;
        case OP_ARGS:
            if (s->sub == 0) { /* an object */
                if (c != '{') return fail(s);
                s->sub = 1;
                s->depth = 1;
                s->in_str = s->esc = false;
                return ENGINE_CHAT_SCAN_ARG;
            }
            if (s->in_str) {
                if (s->esc) s->esc = false;
                else if (c == '\\') s->esc = true;
                else if (c == '"') s->in_str = false;
            } else if (c == '"') {
                s->in_str = true;
            } else if (c == '{' || c == '[') {
                s->depth++;
            } else if (c == '}' || c == ']') {
                if (--s->depth == 0) next(s);
            }
            return ENGINE_CHAT_SCAN_ARG;
        case OP_XNAME:
            if (s->sub == 0) s->n_name = 0, s->sub = 1;
            if (c == st->arg[0]) {
                if (!s->n_name) return fail(s);
                s->name[s->n_name] = 0;
                next(s);
                return ENGINE_CHAT_SCAN_NAME;
            }
            if (c == '\n' || c == '<' || s->n_name + 1 >= sizeof s->name) return fail(s);
            s->name[s->n_name++] = c;
            return ENGINE_CHAT_SCAN_NONE;
        case OP_SKIP: /* a partial match restarts: the literal has no repeated prefix */
            if (c == st->arg[s->sub]) {
                if (st->arg[++s->sub] != 0) return ENGINE_CHAT_SCAN_NONE;
                next(s);
                return after(s, p);
            }
            s->sub = c == st->arg[0] ? 1 : 0;
            return ENGINE_CHAT_SCAN_NONE;
        case OP_END: /* not reached: after() takes it */
            return after(s, p);
        }
    }
}
