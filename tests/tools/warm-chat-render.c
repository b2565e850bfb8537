/* warm-chat-render — a conversation rendered by a built-in chat family (engine/chat.h), for
 * tests that compare it with the official template rendered by Jinja.
 *
 *   warm-chat-render FAMILY [--generation-prompt] [--no-thinking] [--continue] < messages.json
 *   warm-chat-render --detect < template.jinja       (prints the family warmd detects)
 *
 * messages.json: [{"role": "system"|"user"|"assistant", "content": "...",
 * "reasoning_content": "..."}, ...] (reasoning_content optional). Writes the rendering to
 * stdout, exactly (no newline added). Exit 1 with the engine's message for a conversation
 * the family refuses, 2 for bad usage or input. */
#include "engine/engine.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    unsigned flags = 0;
    int fam = -1;
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
    json_error_t je;
    json_t *root = json_loadf(stdin, 0, &je);
    if (!json_is_array(root)) {
        fprintf(stderr, "warm-chat-render: stdin is not a JSON array of messages (%s)\n", je.text);
        return 2;
    }
    size_t n = json_array_size(root);
    struct engine_chat_msg *m = calloc(n ? n : 1, sizeof *m);
    for (size_t i = 0; i < n; i++) {
        json_t *msg = json_array_get(root, i), *r = json_object_get(msg, "reasoning_content");
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
    }
    struct err_detail d = {0};
    size_t len = 0;
    int r = engine_chat_render((enum engine_chat_family)fam, m, n, flags, NULL, 0, &len, &d);
    char *buf = r == -ENOSPC || r == 0 ? malloc(len ? len : 1) : NULL;
    if (buf) r = engine_chat_render((enum engine_chat_family)fam, m, n, flags, buf, len, &len, &d);
    if (r < 0) {
        fprintf(stderr, "warm-chat-render: %s\n", err_msg(&d, r));
        return 1;
    }
    fwrite(buf, 1, len, stdout);
    free(buf);
    free(m);
    json_decref(root);
    return 0;
}
