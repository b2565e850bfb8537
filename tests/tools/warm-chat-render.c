/* warm-chat-render — a conversation rendered by a built-in chat family (engine/chat.h), for
 * tests that compare it with the official template rendered by Jinja.
 *
 *   warm-chat-render FAMILY [--generation-prompt] [--no-thinking] [--continue]
 *                    [--date YYYY-MM-DD] [--effort low|medium|high] < messages.json
 *   warm-chat-render --detect < template.jinja       (prints the family warmd detects)
 *
 * messages.json: [{"role": "system"|"user"|"assistant"|"tool", "content": "...",
 * "reasoning_content": "...", "tool_calls": [{"id": "...", "function": {"name": "f",
 * "arguments": {...}}}], "name": "f", "tool_call_id": "..."}, ...] (all but role and
 * content optional; a tool result's function is its name, else that of the call its
 * tool_call_id names), or {"messages": [...], "tools": [...]}.
 * Writes the rendering to stdout, exactly (no newline added).
 *   warm-chat-render FAMILY --parse < answer.txt
 * prints the tool calls engine_chat_parse_tool_calls() finds in a generated answer, as JSON:
 * {"content": "...", "reasoning": "...", "tool_calls": [{"name": "...", "arguments": {...}}]};
 * harmony's output is split first (engine_chat_think_split, as the daemon does: its
 * channels, the control tokens written as text; other families' text is the answer). Exit 1 with the engine's
 * message for a conversation the family refuses, 2 for bad usage or input. */
#include "engine/engine.h"

#include <errno.h>
#include <stdbool.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    unsigned flags = 0;
    int fam = -1;
    struct engine_chat_opts opts = {0};
    bool parse = false;
    if (argc == 2 && !strcmp(argv[1], "--detect")) {
        static char tmpl[1 << 20];
        size_t n = fread(tmpl, 1, sizeof tmpl, stdin);
        printf("%s\n", engine_chat_family_name(engine_chat_detect(tmpl, n)));
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--generation-prompt"))
            flags |= ENGINE_CHAT_ADD_GENERATION_PROMPT;
        else if (!strcmp(argv[i], "--no-thinking"))
            flags |= ENGINE_CHAT_NO_THINKING;
        else if (!strcmp(argv[i], "--continue"))
            flags |= ENGINE_CHAT_CONTINUE_LAST;
        else if (!strcmp(argv[i], "--parse"))
            parse = true;
        else if (!strcmp(argv[i], "--date") && i + 1 < argc)
            opts.date = argv[++i];
        else if (!strcmp(argv[i], "--effort") && i + 1 < argc) {
            if (engine_chat_effort_parse(argv[++i], &opts.effort) < 0) {
                fprintf(stderr, "warm-chat-render: --effort: low, medium or high\n");
                return 2;
            }
        }
        else
            for (int f = 0; f < ENGINE_CHAT_FAMILY_COUNT; f++)
                if (!strcmp(argv[i], engine_chat_family_name((enum engine_chat_family)f))) fam = f;
    }
    if (fam < 0) {
        fprintf(stderr,
                "usage: warm-chat-render FAMILY (%s) [--generation-prompt] [--no-thinking] "
                "[--continue] < messages.json\n",
                engine_chat_family_list());
        return 2;
    }
    if (parse) {
        static char raw[1 << 20], text[(2 << 20) + 2 * ENGINE_CHAT_SPLIT_EXTRA],
            reasoning[(2 << 20) + 2 * ENGINE_CHAT_SPLIT_EXTRA];
        size_t n = fread(raw, 1, sizeof raw, stdin), n_calls, content, nr = n, na = n;
        struct engine_chat_think th;
        engine_chat_think_begin(&th, fam == ENGINE_CHAT_HARMONY ? ENGINE_CHAT_HARMONY
                                                                 : ENGINE_CHAT_NONE, flags);
        engine_chat_think_split(&th, raw, n, reasoning, &nr, text, &na);
        size_t nr2, na2;
        engine_chat_think_end(&th, reasoning + nr, &nr2, text + na, &na2);
        n = na + na2;
        nr += nr2;
        struct engine_chat_parsed_call calls[16];
        if (engine_chat_parse_tool_calls((enum engine_chat_family)fam, text, n, calls, 16, &n_calls,
                                         &content) < 0)
            return 1;
        json_t *out = json_object(), *arr = json_array();
        json_object_set_new(out, "content", json_stringn(text, content));
        json_object_set_new(out, "reasoning", json_stringn(reasoning, nr));
        for (size_t i = 0; i < n_calls; i++) {
            json_error_t je;
            json_t *c = json_object();
            json_object_set_new(c, "name", json_string(calls[i].name));
            json_object_set_new(c, "arguments", json_loads(calls[i].arguments, 0, &je));
            json_array_append_new(arr, c);
        }
        json_object_set_new(out, "tool_calls", arr);
        char *t = json_dumps(out, JSON_PRESERVE_ORDER);
        printf("%s\n", t);
        free(t);
        json_decref(out);
        engine_chat_parsed_calls_free(calls, n_calls);
        return 0;
    }
    json_error_t je;
    json_t *doc = json_loadf(stdin, 0, &je), *root = doc, *tools_json = NULL;
    if (json_is_object(doc)) {
        root = json_object_get(doc, "messages");
        tools_json = json_object_get(doc, "tools");
    }
    if (!json_is_array(root)) {
        fprintf(stderr, "warm-chat-render: stdin is not a JSON array of messages (%s)\n", je.text);
        return 2;
    }
    size_t n = json_array_size(root);
    struct engine_chat_msg *m = calloc(n ? n : 1, sizeof *m);
    for (size_t i = 0; i < n; i++) {
        json_t *msg = json_array_get(root, i), *r = json_object_get(msg, "reasoning_content");
        if (!r) r = json_object_get(msg, "thinking"); /* gpt-oss's name for it */
        const char *role = json_string_value(json_object_get(msg, "role"));
        json_t *c = json_object_get(msg, "content");
        if (!m || !role || engine_chat_role_parse(role, &m[i].role) < 0 || !json_is_string(c)) {
            fprintf(stderr,
                    "warm-chat-render: message %zu: needs a known role and a string content\n", i);
            return 2;
        }
        m[i].content = json_string_value(c);
        m[i].len = json_string_length(c);
        if (json_is_string(r)) {
            m[i].reasoning = json_string_value(r);
            m[i].reasoning_len = json_string_length(r);
        }
        json_t *tc = json_object_get(msg, "tool_calls");
        size_t nc = json_array_size(tc);
        struct engine_chat_tool_call *calls = nc ? calloc(nc, sizeof *calls) : NULL;
        for (size_t k = 0; k < nc && calls; k++) {
            json_t *call = json_array_get(tc, k), *f = json_object_get(call, "function");
            if (f) call = f;
            json_t *name = json_object_get(call, "name"),
                   *args = json_object_get(call, "arguments");
            calls[k].name = json_string_value(name);
            calls[k].name_len = calls[k].name ? strlen(calls[k].name) : 0;
            calls[k].arguments = json_is_string(args) ? strdup(json_string_value(args))
                                                      : json_dumps(args, JSON_PRESERVE_ORDER);
            calls[k].arguments_len = calls[k].arguments ? strlen(calls[k].arguments) : 0;
        }
        m[i].tool_calls = calls;
        m[i].n_tool_calls = nc;
        /* a tool result's function, as Gemma 4's template finds it: its "name", replaced by
         * that of the last call of the assistant message before whose id equals its
         * tool_call_id (both absent counts as equal) */
        const char *tname = json_string_value(json_object_get(msg, "name"));
        const char *tcid = json_string_value(json_object_get(msg, "tool_call_id"));
        size_t j = i;
        for (const char *r0; j > 0; j--) {
            r0 = json_string_value(json_object_get(json_array_get(root, j - 1), "role"));
            if (!r0 || strcmp(r0, "tool") != 0) break;
        }
        if (j > 0) {
            json_t *pc = json_object_get(json_array_get(root, j - 1), "tool_calls"), *c1;
            size_t k;
            json_array_foreach(pc, k, c1) {
                const char *id = json_string_value(json_object_get(c1, "id"));
                json_t *f1 = json_object_get(c1, "function");
                if (f1 && ((!id && !tcid) || (id && tcid && !strcmp(id, tcid))))
                    tname = json_string_value(json_object_get(f1, "name"));
            }
        }
        if (m[i].role == ENGINE_CHAT_TOOL && tname) {
            m[i].tool_name = tname;
            m[i].tool_name_len = strlen(tname);
        }
    }
    char *tools_text = tools_json ? json_dumps(tools_json, JSON_PRESERVE_ORDER) : NULL;
    opts.tools = (struct engine_chat_tools){.json = tools_text,
                                            .len = tools_text ? strlen(tools_text) : 0};
    struct err_detail d = {0};
    size_t len = 0;
    int r = engine_chat_render_opts((enum engine_chat_family)fam, m, n, &opts, flags, NULL, 0,
                                    &len, &d);
    char *buf = r == -ENOSPC || r == 0 ? malloc(len ? len : 1) : NULL;
    if (buf)
        r = engine_chat_render_opts((enum engine_chat_family)fam, m, n, &opts, flags, buf, len,
                                    &len, &d);
    if (r < 0)
        fprintf(stderr, "warm-chat-render: %s\n", err_msg(&d, r));
    else
        fwrite(buf, 1, len, stdout);
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < m[i].n_tool_calls; k++) free((char *)m[i].tool_calls[k].arguments);
        free((void *)m[i].tool_calls);
    }
    free(buf);
    free(m);
    free(tools_text);
    json_decref(doc);
    return r < 0 ? 1 : 0;
}
