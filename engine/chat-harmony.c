/* chat-harmony — gpt-oss's harmony format (chat.h, harmony), written as OpenAI's template
 * (openai-gpt-oss-120b.jinja) writes it: the system message with the reasoning effort, the
 * developer message with the instructions and the tools as a TypeScript namespace, the
 * channels of assistant turns, tool calls and their results; and the model's output read
 * back as it streams: the analysis channel is reasoning, the final channel (and commentary
 * without a recipient) the answer, a message to=functions.NAME a tool call. */
#include "engine/chat-impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the tools as TypeScript (the template's render_typescript_type) ------------------ */

static void out_s(struct chat_out *o, const char *s) { chat_out_text(o, s, strlen(s)); }

/* Jinja's truth of an optional member: present and not false, null, "", [], {} or 0. */
static bool truthy(const json_t *x) {
    switch (x ? json_typeof(x) : JSON_NULL) {
    case JSON_OBJECT: return json_object_size(x) > 0;
    case JSON_ARRAY: return json_array_size(x) > 0;
    case JSON_STRING: return json_string_length(x) > 0;
    case JSON_INTEGER: return json_integer_value(x) != 0;
    case JSON_REAL: return json_real_value(x) != 0;
    case JSON_TRUE: return true;
    default: return false;
    }
}

static bool is_type(const json_t *spec, const char *type) {
    const char *t = json_string_value(json_object_get(spec, "type"));
    return t && strcmp(t, type) == 0;
}

static bool in_list(const json_t *list, const char *s) {
    size_t i;
    json_t *x;
    json_array_foreach(list, i, x) if (json_is_string(x) && strcmp(json_string_value(x), s) == 0)
        return true;
    return false;
}

/* str() of a scalar as Jinja prints it (enum members, "+ default") */
static void out_str(struct chat_out *o, const json_t *v) {
    if (json_is_string(v))
        chat_out_text(o, json_string_value(v), json_string_length(v));
    else if (json_is_true(v) || json_is_false(v))
        out_s(o, json_is_true(v) ? "True" : "False");
    else
        chat_out_json(o, v);
}

static void ts_type(struct chat_out *o, const json_t *spec, const json_t *required);

/* The type of spec rendered on its own (for the inner type of an array). */
static char *ts_type_text(struct chat_out *o, const json_t *spec, const json_t *required) {
    struct chat_out t = {.fam = o->fam, .d = o->d, .opts = o->opts};
    ts_type(&t, spec, required);
    size_t n = t.len;
    char *buf = malloc(n + 1);
    if (!buf || t.err) {
        free(buf);
        if (o->err == 0) o->err = t.err ? t.err : -ENOMEM;
        return NULL;
    }
    t = (struct chat_out){.fam = o->fam, .d = o->d, .opts = o->opts, .buf = buf, .cap = n};
    ts_type(&t, spec, required);
    buf[n] = 0;
    return buf;
}

static void ts_type(struct chat_out *o, const json_t *spec, const json_t *required) {
    const json_t *type = json_object_get(spec, "type");
    bool nullable = truthy(json_object_get(spec, "nullable"));
    if (is_type(spec, "array")) {
        const json_t *items = json_object_get(spec, "items");
        if (!truthy(items)) {
            out_s(o, "any[]");
        } else if (is_type(items, "string") || is_type(items, "boolean")) {
            out_s(o, is_type(items, "string") ? "string[]" : "boolean[]");
        } else if (is_type(items, "number") || is_type(items, "integer")) {
            out_s(o, "number[]");
        } else {
            char *inner = ts_type_text(o, items, required);
            if (!inner) return;
            if (strcmp(inner, "object | object") == 0 || strlen(inner) > 50) {
                out_s(o, "any[]");
            } else {
                out_s(o, inner);
                out_s(o, "[]");
            }
            free(inner);
        }
        if (nullable) out_s(o, " | null");
    } else if (json_is_array(type) && json_array_size(type) > 0) {
        size_t i;
        json_t *t;
        json_array_foreach(type, i, t) {
            if (i) out_s(o, " | ");
            out_str(o, t);
        }
    } else if (truthy(json_object_get(spec, "oneOf"))) {
        /* (the template's object-variant test sets a variable inside its loop, which Jinja
         * scopes to the loop: the variants are always written one by one) */
        const json_t *one = json_object_get(spec, "oneOf");
        size_t i;
        json_t *v;
        json_array_foreach(one, i, v) {
            ts_type(o, v, required);
            const json_t *desc = json_object_get(v, "description"), *def = json_object_get(v,
                                                                                      "default");
            if (truthy(desc)) {
                out_s(o, "// ");
                out_str(o, desc);
            }
            if (def) {
                out_s(o, "                    // default: ");
                chat_out_json(o, def);
            }
            if (i + 1 < json_array_size(one)) out_s(o, " | \n");
        }
    } else if (is_type(spec, "string")) {
        const json_t *en = json_object_get(spec, "enum");
        if (truthy(en)) {
            size_t i;
            json_t *e;
            out_s(o, "\"");
            json_array_foreach(en, i, e) {
                if (i) out_s(o, "\" | \"");
                out_str(o, e);
            }
            out_s(o, "\"");
        } else {
            out_s(o, nullable ? "string | null" : "string");
        }
    } else if (is_type(spec, "number") || is_type(spec, "integer")) {
        out_s(o, "number");
    } else if (is_type(spec, "boolean")) {
        out_s(o, "boolean");
    } else if (is_type(spec, "object")) {
        const json_t *props = json_object_get(spec, "properties"),
                     *req = json_object_get(spec, "required");
        if (!truthy(props)) {
            out_s(o, "object");
            return;
        }
        out_s(o, "{\n");
        const char *k;
        json_t *p;
        size_t i = 0, np = json_object_size(props);
        json_object_foreach((json_t *)props, k, p) {
            out_s(o, k);
            if (!in_list(req, k)) out_s(o, "?");
            /* the template's own line break and indent before the inner type */
            out_s(o, ": \n                ");
            ts_type(o, p, req);
            if (++i < np) out_s(o, ", ");
        }
        out_s(o, "}");
    } else {
        out_s(o, "any");
    }
}

/* The template's render_tool_namespace("functions", tools). */
static void out_namespace(struct chat_out *o) {
    out_s(o, "## functions\n\nnamespace functions {\n\n");
    size_t i;
    json_t *t;
    json_array_foreach(o->tools, i, t) {
        const json_t *fn = json_object_get(t, "function"),
                     *params = json_object_get(fn, "parameters"),
                     *props = json_object_get(params, "properties"),
                     *req = json_object_get(params, "required"),
                     *desc = json_object_get(fn, "description");
        out_s(o, "// ");
        if (desc) out_str(o, desc);
        out_s(o, "\ntype ");
        out_str(o, json_object_get(fn, "name"));
        out_s(o, " = ");
        if (!truthy(params) || !truthy(props)) {
            out_s(o, "() => any;\n\n");
            continue;
        }
        out_s(o, "(_: {\n");
        const char *k;
        json_t *p;
        json_object_foreach((json_t *)props, k, p) {
            const json_t *pd = json_object_get(p, "description"), *def = json_object_get(p,
                                                                                    "default");
            if (truthy(pd)) {
                out_s(o, "// ");
                out_str(o, pd);
                out_s(o, "\n");
            }
            out_s(o, k);
            if (!in_list(req, k)) out_s(o, "?");
            out_s(o, ": ");
            ts_type(o, p, req);
            if (def) {
                if (truthy(json_object_get(p, "enum"))) {
                    out_s(o, ", // default: ");
                    out_str(o, def);
                } else if (truthy(json_object_get(p, "oneOf"))) {
                    out_s(o, "// default: ");
                    out_str(o, def);
                } else {
                    out_s(o, ", // default: ");
                    chat_out_json(o, def);
                }
            }
            out_s(o, ",\n");
        }
        out_s(o, "}) => any;\n\n");
    }
    out_s(o, "} // namespace functions");
}

/* ---- the conversation ---------------------------------------------------------------- */

static const char *const effort_names[ENGINE_CHAT_EFFORT_COUNT] = {"medium", "low", "medium",
                                                                   "high"};

/* YYYY-MM-DD: the caller's, else today's (UTC). */
static int out_date(struct chat_out *o) {
    char today[16];
    const char *d = o->opts->date;
    if (!d) {
        time_t now = time(NULL);
        struct tm tm;
        if (!gmtime_r(&now, &tm) || strftime(today, sizeof today, "%Y-%m-%d", &tm) != 10)
            return err_set(o->d, -EINVAL, "chat: no current date for the harmony template");
        d = today;
    }
    bool ok = strlen(d) == 10;
    for (int i = 0; ok && i < 10; i++)
        ok = (i == 4 || i == 7) ? d[i] == '-' : (d[i] >= '0' && d[i] <= '9');
    if (!ok) return err_set(o->d, -EINVAL, "date: '%s' is not YYYY-MM-DD", d);
    chat_out_text(o, d, 10);
    return 0;
}

static bool has(const char *s, size_t n, const char *what) {
    return n && memmem(s, n, what, strlen(what)) != NULL;
}

static void out_call(struct chat_out *o, const struct engine_chat_tool_call *c, json_t *args) {
    chat_out_template(o, "<|start|>assistant to=functions.");
    chat_out_text(o, c->name, c->name_len);
    chat_out_template(o, "<|channel|>commentary json<|message|>");
    chat_out_json(o, args);
    chat_out_template(o, "<|call|>");
}

int chat_walk_harmony(struct chat_out *o, const struct engine_chat_msg *m, size_t n,
                      unsigned flags) {
    bool tools = o->tools && json_array_size(o->tools) > 0;
    enum engine_chat_effort effort = o->opts->effort;
    if ((unsigned)effort >= ENGINE_CHAT_EFFORT_COUNT)
        return err_set(o->d, -EINVAL, "reasoning effort: %d is not low, medium or high", effort);
    chat_out_template(o, "<|start|>system<|message|>");
    out_s(o, "You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: "
             "2024-06\nCurrent date: ");
    int r = out_date(o);
    if (r < 0) return r;
    out_s(o, "\n\nReasoning: ");
    out_s(o, effort_names[effort]);
    out_s(o, "\n\n# Valid channels: analysis, commentary, final. Channel must be included for "
             "every message.");
    if (tools) out_s(o, "\nCalls to these tools must go to the commentary channel: 'functions'.");
    chat_out_template(o, "<|end|>");
    size_t i = 0;
    bool dev = m[0].role == ENGINE_CHAT_SYSTEM && m[0].len > 0;
    if (m[0].role == ENGINE_CHAT_SYSTEM) i = 1;
    if (dev || tools) {
        chat_out_template(o, "<|start|>developer<|message|>");
        if (dev) {
            out_s(o, "# Instructions\n\n");
            chat_out_text(o, m[0].content, m[0].len);
            out_s(o, "\n\n");
        }
        if (tools) {
            out_s(o, "# Tools\n\n");
            out_namespace(o);
        }
        chat_out_template(o, "<|end|>");
    }
    /* the calls the tool results answer: the k-th result after a message its k-th call */
    const struct engine_chat_msg *caller = NULL;
    size_t k_result = 0;
    for (; i < n && o->err == 0; i++) {
        const struct engine_chat_msg *x = &m[i];
        bool last = i + 1 == n;
        if (x->role == ENGINE_CHAT_USER) {
            chat_out_template(o, "<|start|>user<|message|>");
            chat_out_text(o, x->content, x->len);
            if (last && (flags & ENGINE_CHAT_CONTINUE_LAST)) break;
            chat_out_template(o, "<|end|>");
            continue;
        }
        if (x->role == ENGINE_CHAT_TOOL) {
            if (!caller)
                return err_set(o->d, -EINVAL, "messages[%zu]: a tool result, but no earlier "
                               "assistant message made a tool call", i);
            const struct engine_chat_tool_call *c =
                &caller->tool_calls[MIN(k_result, caller->n_tool_calls - 1)];
            k_result++;
            json_t *s = json_stringn(x->content, x->len);
            if (!s) return err_set(o->d, -EINVAL, "messages[%zu].content: not UTF-8", i);
            chat_out_template(o, "<|start|>functions.");
            chat_out_text(o, c->name, c->name_len);
            chat_out_template(o, " to=assistant<|channel|>commentary<|message|>");
            chat_out_json(o, s);
            json_decref(s);
            chat_out_template(o, "<|end|>");
            continue;
        }
        /* assistant */
        static const char an[] = "<|channel|>analysis<|message|>", fi[] = "<|channel|>final<|message|>";
        if (has(x->content, x->len, an) || has(x->content, x->len, fi) ||
            (x->reasoning && (has(x->reasoning, x->reasoning_len, an) ||
                              has(x->reasoning, x->reasoning_len, fi))))
            return err_set(o->d, -EINVAL, "messages[%zu]: holds <|channel|> tags; pass the "
                           "analysis as its reasoning and the final message as its content", i);
        if (x->n_tool_calls) {
            bool later_final = false;
            for (size_t j = i + 1; j < n; j++)
                later_final = later_final || (m[j].role == ENGINE_CHAT_ASSISTANT &&
                                              m[j].n_tool_calls == 0);
            if (x->len && x->reasoning_len)
                return err_set(o->d, -EINVAL, "messages[%zu]: an assistant message with tool "
                               "calls has content and reasoning; the harmony template takes "
                               "one or the other", i);
            /* the reasoning before a call stays until a final answer follows */
            const char *a = x->len ? x->content : x->reasoning;
            size_t an_len = x->len ? x->len : x->reasoning_len;
            if (an_len && !later_final) {
                chat_out_template(o, "<|start|>assistant<|channel|>analysis<|message|>");
                chat_out_text(o, a, an_len);
                chat_out_template(o, "<|end|>");
            }
            for (size_t k = 0; k < x->n_tool_calls && o->err == 0; k++) {
                json_t *args = chat_call_args(o, &x->tool_calls[k], i, k);
                if (!args) break;
                out_call(o, &x->tool_calls[k], args);
                json_decref(args);
            }
            caller = x;
            k_result = 0;
            continue;
        }
        if (last && (flags & ENGINE_CHAT_CONTINUE_LAST)) {
            chat_out_template(o, "<|start|>assistant<|channel|>final<|message|>");
            chat_out_text(o, x->content, x->len);
            break;
        }
        if (last && !(flags & ENGINE_CHAT_ADD_GENERATION_PROMPT)) {
            /* a finished conversation (training): the last turn keeps its reasoning */
            if (x->reasoning) {
                chat_out_template(o, "<|start|>assistant<|channel|>analysis<|message|>");
                chat_out_text(o, x->reasoning, x->reasoning_len);
                chat_out_template(o, "<|end|>");
            }
            chat_out_template(o, "<|start|>assistant<|channel|>final<|message|>");
            chat_out_text(o, x->content, x->len);
            chat_out_template(o, "<|return|>");
            continue;
        }
        chat_out_template(o, "<|start|>assistant<|channel|>final<|message|>");
        chat_out_text(o, x->content, x->len);
        chat_out_template(o, "<|end|>");
        caller = NULL;
    }
    if (o->err == 0 && (flags & ENGINE_CHAT_ADD_GENERATION_PROMPT))
        chat_out_template(o, "<|start|>assistant");
    return o->err;
}

int engine_chat_effort_parse(const char *name, enum engine_chat_effort *ret) {
    for (int e = ENGINE_CHAT_EFFORT_LOW; name && e < ENGINE_CHAT_EFFORT_COUNT; e++)
        if (strcmp(name, effort_names[e]) == 0) {
            *ret = (enum engine_chat_effort)e;
            return 0;
        }
    return -EINVAL;
}

/* ---- the output read back ------------------------------------------------------------
 * After the generation prompt "<|start|>assistant" the model writes messages: a header
 * ("<|channel|>analysis", "<|channel|>commentary to=functions.NAME <|constrain|>json", or
 * " to=functions.NAME<|channel|>commentary json"), "<|message|>", the body, and "<|end|>"
 * (then "<|start|>assistant" and the next header), "<|call|>" or "<|return|>" (the last
 * two end the generation). The caller passes the control tokens' text (chat.h). A call's
 * body goes to the answer wrapped as a Hermes call, <tool_call>\n{"name": "NAME",
 * "arguments": ARGS}\n</tool_call>, which engine_chat_parse_tool_calls() reads for
 * harmony as for the Hermes families. */

enum { HS_HEADER, HS_BODY, HS_RAW };
enum { HK_REASONING, HK_ANSWER, HK_CALL };

static void hput(struct chat_split_out *so, bool reasoning, const char *s, size_t n) {
    chat_split_put(so, reasoning, s, n);
}

/* A function name the wrapper can write without escaping. */
static bool plain_name(const char *s, size_t n) {
    if (!n) return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || strchr("_-.:", s[i])))
            return false;
    return true;
}

/* The header in t->hdr is whole: what its body is. */
static void header_done(struct engine_chat_think *t, struct chat_split_out *so) {
    const char *h = t->hdr, *e = t->hdr + t->n_hdr;
    const char *ch = memmem(h, t->n_hdr, "<|channel|>", 11), *to = memmem(h, t->n_hdr, "to=", 3);
    size_t cn = 0, tn = 0;
    if (ch) {
        ch += 11;
        while (ch + cn < e && ch[cn] != ' ' && ch[cn] != '<') cn++;
    }
    if (to) {
        to += 3;
        while (to + tn < e && to[tn] != ' ' && to[tn] != '<') tn++;
    }
    t->kind = ch && cn == 8 && !memcmp(ch, "analysis", 8) ? HK_REASONING : HK_ANSWER;
    if (to && tn > 10 && !memcmp(to, "functions.", 10) && plain_name(to + 10, tn - 10)) {
        t->kind = HK_CALL;
        static const char head[] = "<tool_call>\n{\"name\": \"";
        hput(so, false, head, sizeof head - 1);
        hput(so, false, to + 10, tn - 10);
        hput(so, false, "\", \"arguments\": ", 16);
    }
    t->n_hdr = t->n_tag = 0;
    t->state = HS_BODY;
}

static void body_end(struct engine_chat_think *t, struct chat_split_out *so) {
    if (t->kind == HK_CALL) hput(so, false, "}\n</tool_call>", 14);
    t->n_hdr = t->n_tag = 0;
    t->state = HS_HEADER;
}

void chat_harmony_byte(struct engine_chat_think *t, char c, struct chat_split_out *so) {
    static const char *const ends[] = {"<|end|>", "<|call|>", "<|return|>"};
    static const char msg[] = "<|message|>";
    switch (t->state) {
    case HS_HEADER:
        t->hdr[t->n_hdr++] = c;
        if (t->n_hdr >= sizeof msg - 1 &&
            !memcmp(t->hdr + t->n_hdr - (sizeof msg - 1), msg, sizeof msg - 1)) {
            header_done(t, so);
        } else if (t->n_hdr == sizeof t->hdr) { /* no harmony header: plain text */
            hput(so, false, t->hdr, t->n_hdr);
            t->n_hdr = 0;
            t->state = HS_RAW;
        }
        return;
    case HS_BODY: {
        t->tag[t->n_tag++] = c;
        bool prefix = false;
        for (size_t k = 0; k < ARRAY_SIZE(ends); k++) {
            size_t L = strlen(ends[k]);
            if (t->n_tag <= L && !memcmp(ends[k], t->tag, t->n_tag)) {
                if (t->n_tag == L) {
                    body_end(t, so);
                    return;
                }
                prefix = true;
            }
        }
        if (prefix) return;
        /* not an end tag: its first byte is text, the rest is looked at afresh */
        size_t n = t->n_tag;
        char held[sizeof t->tag];
        memcpy(held, t->tag, n);
        t->n_tag = 0;
        hput(so, t->kind == HK_REASONING, held, 1);
        for (size_t i = 1; i < n; i++) chat_harmony_byte(t, held[i], so);
        return;
    }
    default:
        hput(so, false, &c, 1);
    }
}

void chat_harmony_end(struct engine_chat_think *t, struct chat_split_out *so) {
    if (t->state == HS_BODY) {
        hput(so, t->kind == HK_REASONING, t->tag, t->n_tag);
        if (t->kind == HK_CALL) hput(so, false, "}\n</tool_call>", 14);
    } else if (t->state == HS_HEADER && t->n_hdr && !memmem(t->hdr, t->n_hdr, "<|", 2)) {
        hput(so, false, t->hdr, t->n_hdr); /* text that never became a header */
    }
    t->n_hdr = t->n_tag = 0;
    t->state = HS_HEADER;
}
