/* chat-llama — the Llama 3.1/3.2 family (chat.h, llama31): the date header, the tool list in
 * the first user turn, JSON tool calls and ipython results, as Meta's templates write them
 * (meta-llama-Llama-3.1-8B-Instruct.jinja; 3.2's differs only in builtin tools and the
 * date's source, see chat.h for why warmd prints the templates' default date). */
#include "engine/chat-impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char header_head[] = "<|start_header_id|>", header_tail[] = "<|end_header_id|>\n\n",
                  eot[] = "<|eot_id|>";

static void out_header(struct chat_out *o, const char *role) {
    chat_out_template(o, header_head);
    chat_out_text(o, role, strlen(role));
    chat_out_template(o, header_tail);
}

static void out_trimmed(struct chat_out *o, const char *s, size_t n) {
    chat_strip_space(&s, &n);
    chat_out_text(o, s, n);
}

int chat_walk_llama31(struct chat_out *o, const struct engine_chat_msg *m, size_t n,
                      unsigned flags) {
    static const char role_name[ENGINE_CHAT_ROLE_COUNT][10] = {"system", "user", "assistant",
                                                               "ipython"};
    static const char tools_intro[] =
        "Given the following functions, please respond with a JSON for a function call with its "
        "proper arguments that best answers the given prompt.\n\nRespond in the format "
        "{\"name\": function name, \"parameters\": dictionary of argument name and its value}."
        "Do not use variables.\n\n";
    bool tools = o->tools && json_array_size(o->tools) > 0;
    size_t i = 0;
    chat_out_template(o, "<|begin_of_text|>");
    out_header(o, "system");
    if (tools) chat_out_text(o, "Environment: ipython\n", 21);
    static const char dates[] = "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n";
    chat_out_text(o, dates, sizeof dates - 1);
    if (m[0].role == ENGINE_CHAT_SYSTEM) {
        out_trimmed(o, m[0].content, m[0].len);
        i = 1;
    }
    chat_out_template(o, eot);
    if (tools) { /* the tool list opens the first user message */
        if (i == n || m[i].role != ENGINE_CHAT_USER)
            return err_set(o->d, -EINVAL,
                           "messages[%zu]: the llama31 template writes the tools into the first "
                           "user message, which must follow the system message", i);
        out_header(o, "user");
        chat_out_text(o, tools_intro, sizeof tools_intro - 1);
        size_t k;
        json_t *t;
        json_array_foreach(o->tools, k, t) {
            chat_out_json_indent(o, t, 4);
            chat_out_text(o, "\n\n", 2);
        }
        out_trimmed(o, m[i].content, m[i].len);
        chat_out_template(o, eot);
        i++;
    }
    for (; i < n && o->err == 0; i++) {
        if (m[i].role == ENGINE_CHAT_ASSISTANT && m[i].n_tool_calls) {
            if (m[i].n_tool_calls != 1)
                return err_set(o->d, -EINVAL,
                               "messages[%zu]: the llama31 template writes one tool call per "
                               "assistant message, not %zu", i, m[i].n_tool_calls);
            const struct engine_chat_tool_call *c = &m[i].tool_calls[0];
            json_t *args = chat_call_args(o, c, i, 0);
            if (!args) break;
            out_header(o, "assistant");
            chat_out_text(o, "{\"name\": \"", 10);
            chat_out_text(o, c->name, c->name_len);
            chat_out_text(o, "\", \"parameters\": ", 17);
            chat_out_json(o, args);
            chat_out_text(o, "}", 1);
            json_decref(args);
        } else if (m[i].role == ENGINE_CHAT_TOOL) { /* the result as a JSON string */
            json_t *s = json_stringn(m[i].content, m[i].len);
            if (!s) return err_set(o->d, -EINVAL, "messages[%zu].content: not UTF-8", i);
            out_header(o, role_name[ENGINE_CHAT_TOOL]);
            chat_out_json(o, s);
            json_decref(s);
        } else {
            out_header(o, role_name[m[i].role]);
            out_trimmed(o, m[i].content, m[i].len);
        }
        if (i + 1 == n && (flags & ENGINE_CHAT_CONTINUE_LAST)) break;
        chat_out_template(o, eot);
    }
    if (flags & ENGINE_CHAT_ADD_GENERATION_PROMPT) out_header(o, "assistant");
    return o->err;
}

/* An answer that is a call: {"name": "NAME", "parameters": {...}} (or "arguments", which
 * Llama 3.x models write too), alone but for whitespace. */
int chat_parse_llama31(const char *text, size_t len, struct engine_chat_parsed_call *calls,
                       size_t cap, size_t *ret_n, size_t *ret_content_len) {
    const char *s = text;
    size_t n = len;
    chat_strip_space(&s, &n);
    if (!cap || !n || *s != '{') return 0;
    json_error_t je;
    json_t *x = json_loadb(s, n, 0, &je), *name = json_object_get(x, "name"),
           *args = json_object_get(x, "parameters");
    if (!args) args = json_object_get(x, "arguments");
    int r = 0;
    if (json_is_string(name) && json_string_length(name) && json_is_object(args)) {
        calls[0].name = strdup(json_string_value(name));
        calls[0].arguments = json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (calls[0].name && calls[0].arguments) {
            *ret_n = 1;
            *ret_content_len = 0;
        } else {
            free(calls[0].name);
            free(calls[0].arguments);
            r = -ENOMEM;
        }
    }
    json_decref(x);
    return r;
}
