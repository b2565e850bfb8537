/* chat-gemma4 — Gemma 4's tool format (chat.h, gemma4 with tools), written as Google's
 * template (google-gemma-4-31B-it.jinja) writes it: the tool declarations in the system turn
 * (<|tool>declaration:NAME{description:<|"|>...<|"|>,parameters:{...}}<tool|>, schema keys
 * sorted, strings between <|"|> marks), a call <|tool_call>call:NAME{key:value,...}
 * <tool_call|> (keys sorted, strings as <|"|>text<|"|>), its results right after it in the
 * same model turn (<|tool_response>response:NAME{value:<|"|>...<|"|>}<tool_response|>), the
 * model's answer continuing that turn, and the generation prompt <|turn>model\n with the
 * empty thought channel <|channel>thought\n<channel|>; and calls read back into JSON. */
#include "engine/chat-impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char Q[] = "<|\"|>"; /* Gemma 4's string mark */

static void out_s(struct chat_out *o, const char *s) { chat_out_text(o, s, strlen(s)); }

/* Jinja's truth of an optional member. */
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

/* An object's keys as Jinja's dictsort orders them (case-insensitive); *ret_n keys, the
 * array malloc'd (NULL for none or no memory: o->err says which). */
static int key_cmp(const void *a, const void *b) {
    return strcasecmp(*(const char *const *)a, *(const char *const *)b);
}

static const char **sorted_keys(struct chat_out *o, const json_t *obj, size_t *ret_n) {
    size_t n = json_object_size(obj), i = 0;
    *ret_n = 0;
    if (!n) return NULL;
    const char **k = malloc(n * sizeof *k);
    if (!k) {
        if (o->err == 0) o->err = -ENOMEM;
        return NULL;
    }
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) k[i++] = key;
    qsort(k, n, sizeof *k, key_cmp);
    *ret_n = n;
    return k;
}

static void out_str(struct chat_out *o, const json_t *v) { /* Jinja's print of a string */
    if (json_is_string(v)) chat_out_text(o, json_string_value(v), json_string_length(v));
}

static void out_quoted(struct chat_out *o, const char *s, size_t n) {
    chat_out_template(o, Q);
    chat_out_text(o, s, n);
    chat_out_template(o, Q);
}

/* The template's format_argument. */
static void out_arg(struct chat_out *o, const json_t *v, bool escape_keys) {
    if (json_is_string(v)) {
        out_quoted(o, json_string_value(v), json_string_length(v));
    } else if (json_is_boolean(v)) {
        out_s(o, json_is_true(v) ? "true" : "false");
    } else if (json_is_object(v)) {
        size_t n;
        const char **k = sorted_keys(o, v, &n);
        out_s(o, "{");
        for (size_t i = 0; i < n; i++) {
            if (i) out_s(o, ",");
            if (escape_keys) out_quoted(o, k[i], strlen(k[i]));
            else out_s(o, k[i]);
            out_s(o, ":");
            out_arg(o, json_object_get(v, k[i]), escape_keys);
        }
        out_s(o, "}");
        free(k);
    } else if (json_is_array(v)) {
        size_t i;
        json_t *x;
        out_s(o, "[");
        json_array_foreach(v, i, x) {
            if (i) out_s(o, ",");
            out_arg(o, x, escape_keys);
        }
        out_s(o, "]");
    } else {
        chat_out_py_scalar(o, v);
    }
}

/* Jinja's `type | upper` of a schema's type: "" when absent, a list as Python prints it
 * (['STRING', 'NUMBER']). */
static void upper(const json_t *t, char *buf, size_t cap) {
    char tmp[128];
    const char *s = json_string_value(t);
    if (json_is_array(t)) {
        size_t n = 0, i;
        json_t *x;
        n += (size_t)snprintf(tmp + n, sizeof tmp - n, "[");
        json_array_foreach(t, i, x) if (n < sizeof tmp)
            n += (size_t)snprintf(tmp + n, sizeof tmp - n, "%s'%s'", i ? ", " : "",
                                  json_string_value(x) ? json_string_value(x) : "");
        if (n < sizeof tmp) snprintf(tmp + n, sizeof tmp - n, "]");
        s = tmp;
    }
    size_t i = 0;
    for (; s && s[i] && i + 1 < cap; i++)
        buf[i] = (s[i] >= 'a' && s[i] <= 'z') ? (char)(s[i] - 32) : s[i];
    buf[i] = 0;
}

static void comma(struct chat_out *o, bool *add) {
    if (*add) out_s(o, ",");
    *add = true;
}

static void out_required(struct chat_out *o, const json_t *req) {
    size_t i;
    json_t *x;
    out_s(o, "required:[");
    json_array_foreach(req, i, x) {
        if (i) out_s(o, ",");
        out_quoted(o, json_string_value(x) ? json_string_value(x) : "",
                   json_string_value(x) ? json_string_length(x) : 0);
    }
    out_s(o, "]");
}

/* The template's format_parameters(properties). */
static void out_params(struct chat_out *o, const json_t *props, int depth) {
    static const char *const standard[] = {"description", "type", "properties", "required",
                                           "nullable"};
    if (depth > 32) { /* the template recurses without end on a cyclic $ref-free schema only */
        if (o->err == 0) o->err = err_set(o->d, -EINVAL, "tools: parameters nested too deep");
        return;
    }
    size_t n;
    const char **k = sorted_keys(o, props, &n);
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        bool std = false;
        for (size_t s = 0; s < ARRAY_SIZE(standard); s++) std = std || !strcmp(k[i], standard[s]);
        if (std) continue;
        const json_t *v = json_object_get(props, k[i]);
        char type[128];
        upper(json_object_get(v, "type"), type, sizeof type);
        if (!first) out_s(o, ",");
        first = false;
        out_s(o, k[i]);
        out_s(o, ":{");
        bool add = false;
        const json_t *desc = json_object_get(v, "description");
        if (truthy(desc)) {
            chat_out_text(o, "description:", 12);
            out_quoted(o, json_string_value(desc) ? json_string_value(desc) : "",
                       json_string_value(desc) ? json_string_length(desc) : 0);
            add = true;
        }
        if (!strcmp(type, "STRING")) {
            const json_t *en = json_object_get(v, "enum");
            if (truthy(en)) {
                comma(o, &add);
                out_s(o, "enum:");
                out_arg(o, en, true);
            }
        } else if (!strcmp(type, "ARRAY")) {
            const json_t *items = json_object_get(v, "items");
            if (json_is_object(items) && truthy(items)) {
                comma(o, &add);
                out_s(o, "items:{");
                size_t ni;
                const char **ik = sorted_keys(o, items, &ni);
                bool ifirst = true;
                for (size_t j = 0; j < ni; j++) {
                    const json_t *iv = json_object_get(items, ik[j]);
                    if (json_is_null(iv)) continue;
                    if (!ifirst) out_s(o, ",");
                    ifirst = false;
                    if (!strcmp(ik[j], "properties")) {
                        out_s(o, "properties:{");
                        if (json_is_object(iv)) out_params(o, iv, depth + 1);
                        out_s(o, "}");
                    } else if (!strcmp(ik[j], "required")) {
                        out_required(o, iv);
                    } else if (!strcmp(ik[j], "type")) {
                        out_s(o, "type:");
                        if (json_is_string(iv)) {
                            char t[32];
                            upper(iv, t, sizeof t);
                            out_quoted(o, t, strlen(t));
                        } else {
                            size_t ti;
                            json_t *tx;
                            out_s(o, "[");
                            json_array_foreach(iv, ti, tx) {
                                char t[32];
                                upper(tx, t, sizeof t);
                                if (ti) out_s(o, ",");
                                out_quoted(o, t, strlen(t));
                            }
                            out_s(o, "]");
                        }
                    } else {
                        out_s(o, ik[j]);
                        out_s(o, ":");
                        out_arg(o, iv, true);
                    }
                }
                free(ik);
                out_s(o, "}");
            }
        }
        if (truthy(json_object_get(v, "nullable"))) {
            comma(o, &add);
            out_s(o, "nullable:true");
        }
        if (!strcmp(type, "OBJECT")) {
            const json_t *p = json_object_get(v, "properties");
            comma(o, &add);
            out_s(o, "properties:{");
            /* without properties the template lists the schema's own keys (all standard) */
            out_params(o, json_is_object(p) ? p : v, depth + 1);
            out_s(o, "}");
            const json_t *req = json_object_get(v, "required");
            if (truthy(req)) {
                comma(o, &add);
                out_required(o, req);
            }
        }
        comma(o, &add);
        out_s(o, "type:");
        out_quoted(o, type, strlen(type));
        out_s(o, "}");
    }
    free(k);
}

/* The template's format_function_declaration(tool) | trim. */
static void out_declaration(struct chat_out *o, const json_t *tool) {
    const json_t *fn = json_object_get(tool, "function"),
                 *params = json_object_get(fn, "parameters");
    out_s(o, "declaration:");
    out_str(o, json_object_get(fn, "name"));
    out_s(o, "{description:");
    chat_out_template(o, Q);
    out_str(o, json_object_get(fn, "description"));
    chat_out_template(o, Q);
    if (truthy(params)) {
        out_s(o, ",parameters:{");
        const json_t *props = json_object_get(params, "properties"),
                     *req = json_object_get(params, "required"),
                     *type = json_object_get(params, "type");
        if (truthy(props)) {
            out_s(o, "properties:{");
            out_params(o, props, 0);
            out_s(o, "},");
        }
        if (truthy(req)) {
            out_required(o, req);
            out_s(o, ",");
        }
        if (truthy(type)) {
            char t[32];
            upper(type, t, sizeof t);
            out_s(o, "type:");
            out_quoted(o, t, strlen(t));
            out_s(o, "}");
        }
    }
    out_s(o, "}");
}

/* The template's strip_thinking(text): what is outside <|channel>...<channel|>, trimmed. */
static void out_stripped(struct chat_out *o, const char *s, size_t n) {
    static const char open[] = "<|channel>", close[] = "<channel|>";
    /* split on <channel|>; of each part, what comes before <|channel> (all of it if none) */
    char *buf = malloc(n + 1);
    if (!buf) {
        if (o->err == 0) o->err = -ENOMEM;
        return;
    }
    size_t len = 0;
    const char *p = s, *e = s + n;
    for (;;) {
        const char *c = memmem(p, (size_t)(e - p), close, sizeof close - 1);
        const char *pe = c ? c : e;
        const char *op = memmem(p, (size_t)(pe - p), open, sizeof open - 1);
        size_t take = (size_t)((op ? op : pe) - p);
        memcpy(buf + len, p, take);
        len += take;
        if (!c) break;
        p = c + sizeof close - 1;
    }
    const char *t = buf;
    chat_strip_space(&t, &len);
    chat_out_text(o, t, len);
    free(buf);
}

static void out_call(struct chat_out *o, const struct engine_chat_tool_call *c, json_t *args) {
    chat_out_template(o, "<|tool_call>call:");
    chat_out_text(o, c->name, c->name_len);
    out_s(o, "{");
    size_t n;
    const char **k = sorted_keys(o, args, &n);
    for (size_t i = 0; i < n; i++) {
        if (i) out_s(o, ",");
        out_s(o, k[i]);
        out_s(o, ":");
        out_arg(o, json_object_get(args, k[i]), false);
    }
    free(k);
    out_s(o, "}");
    chat_out_template(o, "<tool_call|>");
}

int chat_walk_gemma4(struct chat_out *o, const struct engine_chat_msg *m, size_t n,
                     unsigned flags) {
    bool tools = o->tools && json_array_size(o->tools) > 0;
    enum { PREV_NONE, PREV_CALL, PREV_RESPONSE } prev = PREV_NONE;
    size_t i = 0;
    chat_out_template(o, "<bos>");
    if (tools || m[0].role == ENGINE_CHAT_SYSTEM) {
        chat_out_template(o, "<|turn>system\n");
        if (m[0].role == ENGINE_CHAT_SYSTEM) {
            const char *c = m[0].content;
            size_t cn = m[0].len;
            chat_strip_space(&c, &cn);
            chat_out_text(o, c, cn);
            i = 1;
        }
        size_t k;
        json_t *t;
        json_array_foreach(o->tools, k, t) {
            chat_out_template(o, "<|tool>");
            out_declaration(o, t);
            chat_out_template(o, "<tool|>");
        }
        chat_out_template(o, "<turn|>\n");
    }
    size_t last_user = SIZE_MAX;
    for (size_t k = i; k < n; k++)
        if (m[k].role == ENGINE_CHAT_USER) last_user = k;
    for (; i < n && o->err == 0; i++) {
        const struct engine_chat_msg *x = &m[i];
        if (x->role == ENGINE_CHAT_TOOL) continue; /* written after its call */
        prev = PREV_NONE;
        bool model = x->role == ENGINE_CHAT_ASSISTANT;
        size_t p = i; /* the message before, tool results skipped */
        while (p > 0 && m[p - 1].role == ENGINE_CHAT_TOOL) p--;
        bool same_turn = model && p > 0 && m[p - 1].role == ENGINE_CHAT_ASSISTANT;
        if (!same_turn) {
            chat_out_template(o, "<|turn>");
            out_s(o, model ? "model" : "user");
            out_s(o, "\n");
        }
        if (x->n_tool_calls && x->reasoning_len && (last_user == SIZE_MAX || i > last_user)) {
            chat_out_template(o, "<|channel>thought\n");
            chat_out_text(o, x->reasoning, x->reasoning_len);
            chat_out_template(o, "\n<channel|>");
        }
        for (size_t k = 0; k < x->n_tool_calls && o->err == 0; k++) {
            json_t *args = chat_call_args(o, &x->tool_calls[k], i, k);
            if (!args) break;
            out_call(o, &x->tool_calls[k], args);
            json_decref(args);
            prev = PREV_CALL;
        }
        bool responses = false;
        for (size_t k = i + 1; x->n_tool_calls && k < n && m[k].role == ENGINE_CHAT_TOOL; k++) {
            const struct engine_chat_msg *r = &m[k];
            json_t *s = json_stringn(r->content, r->len);
            if (!s) return err_set(o->d, -EINVAL, "messages[%zu].content: not UTF-8", k);
            chat_out_template(o, "<|tool_response>");
            out_s(o, "response:");
            if (r->tool_name) chat_out_text(o, r->tool_name, r->tool_name_len);
            else out_s(o, "unknown");
            out_s(o, "{value:");
            out_arg(o, s, false);
            out_s(o, "}");
            chat_out_template(o, "<tool_response|>");
            json_decref(s);
            responses = true;
            prev = PREV_RESPONSE;
        }
        if (model) out_stripped(o, x->content, x->len);
        else {
            const char *c = x->content;
            size_t cn = x->len;
            chat_strip_space(&c, &cn);
            chat_out_text(o, c, cn);
        }
        if (i + 1 == n && (flags & ENGINE_CHAT_CONTINUE_LAST)) break;
        if (prev == PREV_CALL && !responses) chat_out_template(o, "<|tool_response>");
        else if (!(responses && x->len == 0)) chat_out_template(o, "<turn|>\n");
    }
    if ((flags & ENGINE_CHAT_ADD_GENERATION_PROMPT) && prev == PREV_NONE)
        chat_out_template(o, "<|turn>model\n<|channel>thought\n<channel|>");
    return o->err;
}

/* ---- calls read back ------------------------------------------------------------------ */

struct gparse {
    const char *p, *e;
    int depth;
};

static bool at(struct gparse *g, const char *s) {
    size_t n = strlen(s);
    if ((size_t)(g->e - g->p) < n || memcmp(g->p, s, n)) return false;
    g->p += n;
    return true;
}

/* One value of Gemma's argument syntax as JSON (NULL: not one). */
static json_t *gvalue(struct gparse *g) {
    if (++g->depth > 64) return NULL;
    json_t *v = NULL;
    if (at(g, Q)) {
        const char *end = memmem(g->p, (size_t)(g->e - g->p), Q, sizeof Q - 1);
        if (end) {
            v = json_stringn(g->p, (size_t)(end - g->p));
            g->p = end + sizeof Q - 1;
        }
    } else if (at(g, "{")) {
        v = json_object();
        bool first = true;
        while (v && !at(g, "}")) {
            if (!first && !at(g, ",")) goto bad;
            first = false;
            const char *k0 = g->p, *k1;
            if (at(g, Q)) {
                k0 = g->p;
                k1 = memmem(g->p, (size_t)(g->e - g->p), Q, sizeof Q - 1);
                if (!k1) goto bad;
                g->p = k1 + sizeof Q - 1;
            } else {
                while (g->p < g->e && *g->p != ':' && *g->p != '}' && *g->p != ',') g->p++;
                k1 = g->p;
            }
            if (k1 == k0 || !at(g, ":")) goto bad;
            char *key = chat_dup_n(k0, (size_t)(k1 - k0));
            json_t *x = key ? gvalue(g) : NULL;
            if (!x || json_object_set_new(v, key, x) < 0) {
                free(key);
                goto bad;
            }
            free(key);
        }
    } else if (at(g, "[")) {
        v = json_array();
        bool first = true;
        while (v && !at(g, "]")) {
            if (!first && !at(g, ",")) goto bad;
            first = false;
            json_t *x = gvalue(g);
            if (!x || json_array_append_new(v, x) < 0) goto bad;
        }
    } else if (at(g, "true")) {
        v = json_true();
    } else if (at(g, "false")) {
        v = json_false();
    } else if (at(g, "None") || at(g, "null")) {
        v = json_null();
    } else { /* a number, as JSON reads it */
        const char *s = g->p;
        while (g->p < g->e && strchr("+-.0123456789eE", *g->p)) g->p++;
        json_error_t je;
        if (g->p > s) v = json_loadb(s, (size_t)(g->p - s), JSON_DECODE_ANY, &je);
    }
    g->depth--;
    return v;
bad:
    json_decref(v);
    return NULL;
}

int chat_parse_gemma4(const char *text, size_t len, struct engine_chat_parsed_call *calls,
                      size_t cap, size_t *ret_n, size_t *ret_content_len) {
    static const char open[] = "<|tool_call>call:", close[] = "<tool_call|>";
    const char *p = text, *e = text + len;
    for (const char *o; *ret_n < cap && (o = memmem(p, (size_t)(e - p), open, sizeof open - 1));) {
        struct gparse g = {.p = o + sizeof open - 1, .e = e};
        const char *brace = memchr(g.p, '{', (size_t)(e - g.p));
        if (!brace) break;
        char *name = chat_dup_n(g.p, (size_t)(brace - g.p));
        g.p = brace;
        json_t *args = name ? gvalue(&g) : NULL;
        char *text_args = json_is_object(args)
                              ? json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        json_decref(args);
        if (!name || !*name || !text_args || !at(&g, close)) {
            free(name);
            free(text_args);
            break;
        }
        if (*ret_n == 0) {
            size_t cl = (size_t)(o - text);
            while (cl && chat_is_space(text[cl - 1])) cl--;
            *ret_content_len = cl;
        }
        calls[(*ret_n)++] = (struct engine_chat_parsed_call){.name = name, .arguments = text_args};
        p = g.p;
    }
    return 0;
}
