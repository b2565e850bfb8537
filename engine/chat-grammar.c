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
 *   llama31                  root ::= "{\"name\": " (t0-call | ...) "}"   (one call)
 *                            t0-call ::= "\"NAME\", \"parameters\": " t0-root
 *   harmony                  root ::= "<|channel|>commentary to=functions." (t0-call | ...)
 *                            t0-call ::= "NAME <|constrain|>json<|message|>" t0-root
 *                            (one call; the model's <|call|> ends it: harmony's control
 *                            tokens are walked by their text, see grammar.h)
 *
 *   gemma4                   root ::= call+   (one call: root ::= call)
 *                            call ::= "<|tool_call>call:" (t0-call | ...) "<tool_call|>"
 *                            t0-call ::= "NAME{" t0-a0 "}"
 *                            the properties in the template's order (sorted by name), each
 *                            KEY:VALUE in Gemma's syntax (strings <|"|>text<|"|>, numbers,
 *                            true/false, None, [..], {..}), required ones always, commas
 *                            between: t0-a<i> (none written yet) and t0-b<i> (some were)
 *                            (types, enums, required and nesting are kept; numeric and
 *                            length limits are not, in this syntax)
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
#include <strings.h>

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

/* Gemma 4's values: text between <|"|> marks never holds the mark (g-text as xml-text),
 * and a value of any type. */
static void gb_gemma_common(struct gbuf *b) {
    static const char rest[] = "|\"|>";
    gb_str(b, "g-str ::= \"<|\\\"|>\" g-text \"<|\\\"|>\"\ng-text ::= [^<]* g-lt*\n"
              "g-lt ::= \"<\"+ ");
    size_t L = sizeof rest - 1;
    for (size_t j = 0; j < L; j++) {
        if (rest[j] == '"') gb_str(b, "( [^\"<] [^<]*");
        else gb_printf(b, "( [^%c<] [^<]*", rest[j]);
        if (j + 1 < L) gb_str(b, rest[j] == '"' ? " | \"\\\"\" " : " | \"|\" ");
    }
    for (size_t j = 0; j < L; j++) gb_str(b, " )?");
    gb_str(b, "\ng-int ::= \"-\"? [0-9]+\n"
              "g-num ::= g-int (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)?\n"
              "g-bool ::= \"true\" | \"false\"\n"
              "g-any ::= g-str | g-num | g-bool | \"None\" | g-obj | g-arr\n"
              "g-obj ::= \"{\" (g-key \":\" g-any (\",\" g-key \":\" g-any)*)? \"}\"\n"
              "g-key ::= [a-zA-Z_] [a-zA-Z0-9_]*\n"
              "g-arr ::= \"[\" (g-any (\",\" g-any)*)? \"]\"\n");
}

static int name_cmp(const void *a, const void *b) {
    return strcasecmp(*(const char *const *)a, *(const char *const *)b);
}

static int gb_gemma_value(struct gbuf *b, const json_t *sc, const char *rule, size_t k,
                          int depth, struct err_detail *d);

/* Rule `rule` for an object schema's members in Gemma's syntax: "{" members "}" without the
 * braces when bare (a call's arguments). */
static int gb_gemma_object(struct gbuf *b, const json_t *sc, const char *rule, size_t k,
                           int depth, bool bare, struct err_detail *d) {
    const json_t *props = json_object_get(sc, "properties"), *req = json_object_get(sc,
                                                                                "required");
    size_t n = json_object_size(props);
    if (!json_is_object(props) || n == 0) { /* any members */
        gb_printf(b, "%s ::= %s(g-key \":\" g-any (\",\" g-key \":\" g-any)*)?%s\n", rule,
                  bare ? "" : "\"{\" ", bare ? "" : " \"}\"");
        return 0;
    }
    const char **keys = malloc(n * sizeof *keys);
    if (!keys) return -ENOMEM;
    size_t i = 0;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)props, key, v) keys[i++] = key;
    qsort(keys, n, sizeof *keys, name_cmp); /* the template's dictsort */
    int r = 0;
    gb_printf(b, "%s ::= %s%s-a0%s\n", rule, bare ? "" : "\"{\" ", rule, bare ? "" : " \"}\"");
    for (i = 0; i < n && r == 0; i++) {
        if (strpbrk(keys[i], ":,{}[]<>\"\n") || !*keys[i]) {
            r = tool_fail(d, k, "a parameter name holds one of :,{}[]<>\" or is empty, which "
                          "Gemma's call syntax cannot write");
            break;
        }
        bool required = false;
        size_t ri;
        json_t *rk;
        json_array_foreach(req, ri, rk) required = required || (json_is_string(rk) &&
                                                                !strcmp(json_string_value(rk),
                                                                        keys[i]));
        char member[96];
        snprintf(member, sizeof member, "%s-m%zu", rule, i);
        /* a<i>: from member i on, none written yet; b<i>: some were (a comma first) */
        gb_printf(b, "%s-a%zu ::= %s %s-b%zu", rule, i, member, rule, i + 1);
        if (!required) gb_printf(b, " | %s-a%zu", rule, i + 1);
        gb_str(b, "\n");
        gb_printf(b, "%s-b%zu ::= \",\" %s %s-b%zu", rule, i, member, rule, i + 1);
        if (!required) gb_printf(b, " | %s-b%zu", rule, i + 1);
        gb_str(b, "\n");
        char head[512];
        int hn = snprintf(head, sizeof head, "%s:", keys[i]);
        if (hn < 0 || (size_t)hn >= sizeof head) {
            r = tool_fail(d, k, "a parameter name is too long");
            break;
        }
        gb_printf(b, "%s ::= ", member);
        gb_lit(b, head, (size_t)hn);
        gb_printf(b, " %s-v\n", member);
        char vrule[128];
        snprintf(vrule, sizeof vrule, "%s-v", member);
        r = gb_gemma_value(b, json_object_get(props, keys[i]), vrule, k, depth + 1, d);
    }
    gb_printf(b, "%s-a%zu ::= \"\"\n%s-b%zu ::= \"\"\n", rule, n, rule, n);
    free(keys);
    return r;
}

static int gb_gemma_value(struct gbuf *b, const json_t *sc, const char *rule, size_t k,
                          int depth, struct err_detail *d) {
    if (depth > 16) return tool_fail(d, k, "function.parameters: nested too deep");
    const char *type = json_string_value(json_object_get(sc, "type"));
    const json_t *en = json_object_get(sc, "enum");
    if (json_is_array(en) && json_array_size(en) > 0) {
        size_t i;
        json_t *e;
        gb_printf(b, "%s ::=", rule);
        json_array_foreach(en, i, e) {
            gb_str(b, i ? " | " : " ");
            if (json_is_string(e)) {
                gb_str(b, "\"<|\\\"|>\" ");
                gb_lit(b, json_string_value(e), json_string_length(e));
                gb_str(b, " \"<|\\\"|>\"");
            } else if (json_is_integer(e)) {
                gb_printf(b, "\"%" JSON_INTEGER_FORMAT "\"", json_integer_value(e));
            } else if (json_is_boolean(e) || json_is_null(e)) {
                gb_str(b, json_is_true(e) ? "\"true\"" : json_is_false(e) ? "\"false\"" : "\"None\"");
            } else {
                return tool_fail(d, k, "an enum holds a value other than a string, an integer, "
                                 "a boolean or null, which Gemma's call syntax does not take");
            }
        }
        gb_str(b, "\n");
        return 0;
    }
    if (!type) return gb_printf(b, "%s ::= g-any\n", rule), 0;
    if (!strcmp(type, "string")) return gb_printf(b, "%s ::= g-str\n", rule), 0;
    if (!strcmp(type, "integer")) return gb_printf(b, "%s ::= g-int\n", rule), 0;
    if (!strcmp(type, "number")) return gb_printf(b, "%s ::= g-num\n", rule), 0;
    if (!strcmp(type, "boolean")) return gb_printf(b, "%s ::= g-bool\n", rule), 0;
    if (!strcmp(type, "null")) return gb_printf(b, "%s ::= \"None\"\n", rule), 0;
    if (!strcmp(type, "array")) {
        const json_t *items = json_object_get(sc, "items");
        if (!json_is_object(items)) return gb_printf(b, "%s ::= g-arr\n", rule), 0;
        gb_printf(b, "%s ::= \"[\" (%s-i (\",\" %s-i)*)? \"]\"\n", rule, rule, rule);
        char item[128];
        snprintf(item, sizeof item, "%s-i", rule);
        return gb_gemma_value(b, items, item, k, depth + 1, d);
    }
    if (!strcmp(type, "object")) return gb_gemma_object(b, sc, rule, k, depth, false, d);
    return gb_printf(b, "%s ::= g-any\n", rule), 0;
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
    bool llama = fam == ENGINE_CHAT_LLAMA31, harmony = fam == ENGINE_CHAT_HARMONY,
         gemma = fam == ENGINE_CHAT_GEMMA4;
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
        } else if (gemma) {
            if (strpbrk(fname, "{}<>:\n")) {
                json_decref(any);
                r = tool_fail(d, k, "the function's name holds one of {}<>: or a new line, "
                              "which Gemma's call syntax cannot write");
                break;
            }
            char *head = malloc(strlen(fname) + 2);
            if (!head) {
                json_decref(any);
                r = -ENOMEM;
                break;
            }
            sprintf(head, "%s{", fname);
            gb_lit(&b, head, strlen(head));
            free(head);
            gb_printf(&b, " t%zu-args \"}\"\n", k);
            char rule[32];
            snprintf(rule, sizeof rule, "t%zu-args", k);
            r = gb_gemma_object(&b, params, rule, k, 0, true, d);
        } else if (harmony) {
            bool plain = true;
            for (const char *c = fname; *c; c++)
                plain = plain && ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                                  (*c >= '0' && *c <= '9') || strchr("_-.:", *c));
            if (!plain) {
                json_decref(any);
                r = tool_fail(d, k, "the function's name holds a byte other than letters, digits "
                              "and _-.:, which the harmony call header cannot carry");
                break;
            }
            gb_lit(&b, fname, strlen(fname));
            gb_printf(&b, " \" <|constrain|>json<|message|>\" t%zu-root\n", k);
            char prefix[32];
            snprintf(prefix, sizeof prefix, "t%zu-", k);
            r = gb_schema(&b, params, prefix, k, d);
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
                int hn = snprintf(head, qn + 32, llama ? "%s, \"parameters\": "
                                                       : "%s, \"arguments\": ", quoted);
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
        bool one = max_calls == 1 || llama || harmony; /* their formats make one call */
        gb_str(&head, one     ? "root ::= call\n"
                      : gemma ? "root ::= call+\n"
                              : "root ::= call (\"\\n\" call)*\n");
        gb_str(&head, xml       ? "call ::= \"<tool_call>\\n<function=\" ( "
                      : llama   ? "call ::= \"{\\\"name\\\": \" ( "
                      : harmony ? "call ::= \"<|channel|>commentary to=functions.\" ( "
                      : gemma   ? "call ::= \"<|tool_call>call:\" ( "
                                : "call ::= \"<tool_call>\\n{\\\"name\\\": \" ( ");
        gb_str(&head, calls.p ? calls.p : "");
        gb_str(&head, xml       ? " ) \"</function>\\n</tool_call>\"\n"
                      : llama   ? " ) \"}\"\n"
                      : harmony ? " )\n"
                      : gemma   ? " ) \"<tool_call|>\"\n"
                                : " ) \"}\\n</tool_call>\"\n");
        if (gemma) gb_gemma_common(&head);
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
