/* chat-grammar — the grammar of a forced tool call (chat.h, engine_chat_tool_grammar): the
 * family's call format around each tool's parameter schema, compiled to grammar text by
 * engine_grammar_schema_text() with a rule prefix per tool ("t0-", "t1-", ...).
 *
 *   Hermes (chatml, qwen3)   root ::= call ("\n" call)*     (one call: root ::= call)
 *                            call ::= "<tool_call>\n{\"name\": " (t0-call | ...) "}\n</tool_call>"
 *                            t0-call ::= "\"NAME\", \"arguments\": " t0-root
 *   qwen35 (XML)             call ::= "<tool_call>\n<function=" (t0-call | ...)
 *                                     "</function>\n</tool_call>"
 *                            t0-call ::= "NAME>\n" t0-p0 t0-p1? ...  (declared order)
 *                            t0-p0 ::= "<parameter=KEY>\n" VALUE "\n</parameter>\n"
 *
 * A qwen35 string value is free text that never contains "</parameter>" (xml-text below:
 * after each "<", the bytes of "/parameter>" may follow only in part), or one of its enum
 * values; any other value is the JSON of its schema. */
#include "engine/chat.h"
#include "engine/grammar.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gbuf {
    char *p;
    size_t n, cap;
    int err;
};

static void gb_put(struct gbuf *b, const char *s, size_t n) {
    if (b->err) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = MAX(b->cap * 2, b->n + n + 256);
        char *p = realloc(b->p, cap);
        if (!p) {
            b->err = -ENOMEM;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void gb_str(struct gbuf *b, const char *s) { gb_put(b, s, strlen(s)); }

static void gb_printf(struct gbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void gb_printf(struct gbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        if (!b->err) b->err = -EINVAL;
        return;
    }
    gb_put(b, tmp, (size_t)n);
}

/* The bytes s[0..n) as a grammar literal. */
static void gb_lit(struct gbuf *b, const char *s, size_t n) {
    gb_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            gb_put(b, e, 2);
        } else if (c == '\n') {
            gb_put(b, "\\n", 2);
        } else if (c < 0x20 || c >= 0x7f) {
            gb_printf(b, "\\x%02X", c);
        } else {
            gb_put(b, (const char *)&c, 1);
        }
    }
    gb_put(b, "\"", 1);
}

/* Text without "</parameter>": after "<"s, a proper prefix of "/parameter>" and then a
 * byte that neither continues it nor is "<" (or the end). */
static void gb_xml_text(struct gbuf *b) {
    static const char rest[] = "/parameter>";
    gb_str(b, "xml-text ::= [^<]* xml-lt*\nxml-lt ::= \"<\"+ ");
    size_t L = sizeof rest - 1;
    for (size_t j = 0; j < L; j++) {
        gb_printf(b, "( [^%c<] [^<]*", rest[j]);
        if (j + 1 < L) gb_printf(b, " | \"%c\" ", rest[j]);
    }
    for (size_t j = 0; j < L; j++) gb_str(b, " )?");
    gb_str(b, "\n");
}

/* Rule names and the schema compiler's errors name the tool by index. */
static int tool_fail(struct err_detail *d, size_t k, const char *what) {
    return err_set(d, -EINVAL, "tools[%zu]: %s", k, what);
}

/* tools[k]'s schema rules with prefix P ("t<k>-"), root P"root", appended to b. */
static int gb_schema(struct gbuf *b, json_t *schema, const char *prefix, size_t k,
                     struct err_detail *d) {
    char *text = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text) return -ENOMEM;
    char *rules = NULL;
    int r = engine_grammar_schema_text(text, strlen(text), prefix, &rules, d);
    free(text);
    if (r < 0) {
        if (r != -ENOMEM && d && d->msg[0]) {
            char msg[sizeof d->msg];
            snprintf(msg, sizeof msg, "%s", d->msg);
            return err_set(d, r, "tools[%zu].function.parameters: %s", k, msg);
        }
        return r;
    }
    gb_str(b, rules);
    gb_str(b, "\n");
    free(rules);
    return 0;
}

/* The XML form's parameters of tool k (its schema: params) as rules t<k>-p<i>. */
static int gb_xml_params(struct gbuf *b, json_t *params, size_t k, bool *uses_text,
                         struct err_detail *d) {
    json_t *props = json_object_get(params, "properties"), *req = json_object_get(params,
                                                                                "required");
    if (!json_is_object(props) || json_object_size(props) == 0) {
        /* any keys: each a name, each value free text */
        gb_printf(b, "t%zu-params ::= (\"<parameter=\" [a-zA-Z0-9_-]+ \">\\n\" xml-text "
                  "\"\\n</parameter>\\n\")*\n", k);
        *uses_text = true;
        return 0;
    }
    gb_printf(b, "t%zu-params ::=", k);
    const char *key;
    json_t *v;
    size_t i = 0;
    json_object_foreach(props, key, v) {
        bool required = false;
        size_t ri;
        json_t *rk;
        json_array_foreach(req, ri, rk) required = required || (json_is_string(rk) &&
                                                                strcmp(json_string_value(rk),
                                                                       key) == 0);
        gb_printf(b, " t%zu-p%zu%s", k, i, required ? "" : "?");
        i++;
    }
    gb_str(b, "\n");
    i = 0;
    json_object_foreach(props, key, v) {
        if (strpbrk(key, "<>\n")) return tool_fail(d, k, "a parameter name holds '<', '>' or a "
                                                   "new line, which the XML call format cannot "
                                                   "write");
        gb_printf(b, "t%zu-p%zu ::= ", k, i);
        char head[1024];
        int n = snprintf(head, sizeof head, "<parameter=%s>\n", key);
        if (n < 0 || (size_t)n >= sizeof head) return tool_fail(d, k, "a parameter name is too long");
        gb_lit(b, head, (size_t)n);
        const char *type = json_string_value(json_object_get(v, "type"));
        json_t *en = json_object_get(v, "enum");
        bool string = type && strcmp(type, "string") == 0;
        if (string && json_is_array(en) && json_array_size(en) > 0) {
            size_t ei;
            json_t *e;
            gb_str(b, " (");
            json_array_foreach(en, ei, e) {
                if (!json_is_string(e)) return tool_fail(d, k, "a string parameter's enum holds "
                                                         "a value that is not a string");
                if (ei) gb_str(b, " |");
                gb_str(b, " ");
                gb_lit(b, json_string_value(e), json_string_length(e));
            }
            gb_str(b, " )");
        } else if (string) {
            gb_str(b, " xml-text");
            *uses_text = true;
        } else {
            gb_printf(b, " t%zu-p%zu-root", k, i);
        }
        gb_str(b, " \"\\n</parameter>\\n\"\n");
        if (!string) {
            char prefix[48];
            snprintf(prefix, sizeof prefix, "t%zu-p%zu-", k, i);
            int r = gb_schema(b, v, prefix, k, d);
            if (r < 0) return r;
        }
        i++;
    }
    return 0;
}

int engine_chat_tool_grammar(enum engine_chat_family fam, const char *tools, size_t len,
                             const char *name, unsigned max_calls, char **ret_text,
                             struct err_detail *d) {
    if (!engine_chat_has_tools(fam))
        return err_set(d, -EINVAL, "tools: the %s chat template has no tool format",
                       engine_chat_family_name(fam));
    json_error_t je;
    json_t *arr = json_loadb(tools ? tools : "", tools ? len : 0, 0, &je);
    if (!json_is_array(arr) || json_array_size(arr) == 0) {
        json_decref(arr);
        return err_set(d, -EINVAL, "tools: not a non-empty JSON array of tools");
    }
    bool xml = fam == ENGINE_CHAT_QWEN35, uses_text = false;
    struct gbuf b = {0}, calls = {0};
    int r = 0;
    size_t k, n_alt = 0;
    json_t *t;
    json_array_foreach(arr, k, t) {
        json_t *fn = json_object_get(t, "function");
        const char *fname = json_string_value(json_object_get(fn, "name"));
        if (!json_is_object(fn) || !fname || !*fname) {
            r = tool_fail(d, k, "not {\"type\": \"function\", \"function\": {\"name\", ...}}");
            break;
        }
        if (name && strcmp(name, fname) != 0) continue;
        json_t *params = json_object_get(fn, "parameters");
        json_t *any = NULL;
        if (!params || json_is_null(params)) params = any = json_pack("{s:s}", "type", "object");
        if (!json_is_object(params)) {
            r = tool_fail(d, k, "function.parameters: not a JSON Schema object");
            break;
        }
        gb_str(&calls, n_alt++ ? " | " : "");
        gb_printf(&calls, "t%zu-call", k);
        gb_printf(&b, "t%zu-call ::= ", k);
        if (xml) {
            if (strpbrk(fname, "<>\n")) {
                json_decref(any);
                r = tool_fail(d, k, "the function's name holds '<', '>' or a new line, which "
                              "the XML call format cannot write");
                break;
            }
            char *head = malloc(strlen(fname) + 3);
            if (!head) {
                json_decref(any);
                r = -ENOMEM;
                break;
            }
            sprintf(head, "%s>\n", fname);
            gb_lit(&b, head, strlen(head));
            free(head);
            gb_printf(&b, " t%zu-params\n", k);
            r = gb_xml_params(&b, params, k, &uses_text, d);
        } else {
            json_t *js = json_string(fname);
            char *quoted = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
            json_decref(js);
            if (!quoted) {
                json_decref(any);
                r = -ENOMEM;
                break;
            }
            size_t qn = strlen(quoted);
            char *head = malloc(qn + 32);
            if (head) {
                int hn = snprintf(head, qn + 32, "%s, \"arguments\": ", quoted);
                gb_lit(&b, head, (size_t)hn);
            }
            free(head);
            free(quoted);
            if (!head) {
                json_decref(any);
                r = -ENOMEM;
                break;
            }
            gb_printf(&b, " t%zu-root\n", k);
            char prefix[32];
            snprintf(prefix, sizeof prefix, "t%zu-", k);
            r = gb_schema(&b, params, prefix, k, d);
        }
        json_decref(any);
        if (r < 0) break;
    }
    json_decref(arr);
    if (r == 0 && n_alt == 0)
        r = err_set(d, -EINVAL, "tool_choice: no tool is named '%s'", name ? name : "");
    if (r == 0) {
        struct gbuf head = {0};
        gb_str(&head, max_calls == 1 ? "root ::= call\n" : "root ::= call (\"\\n\" call)*\n");
        gb_str(&head, xml ? "call ::= \"<tool_call>\\n<function=\" ( " : "call ::= "
                            "\"<tool_call>\\n{\\\"name\\\": \" ( ");
        gb_str(&head, calls.p ? calls.p : "");
        gb_str(&head, xml ? " ) \"</function>\\n</tool_call>\"\n" : " ) \"}\\n</tool_call>\"\n");
        if (uses_text) gb_xml_text(&head);
        gb_str(&head, b.p ? b.p : "");
        r = head.err ? head.err : b.err ? b.err : calls.err;
        if (r == 0) *ret_text = head.p;
        else free(head.p);
    }
    free(b.p);
    free(calls.p);
    return r == -ENOMEM ? err_set(d, -ENOMEM, "tools: out of memory") : r;
}
