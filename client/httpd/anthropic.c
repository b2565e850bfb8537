/* anthropic — Anthropic's Messages API, enough for Claude Code and the Anthropic SDKs to run
 * a tool loop against a local model: POST /v1/messages, whole or streamed, and POST
 * /v1/messages/count_tokens. Who a request is served as is decided as for the other APIs
 * (the connection's uid, else an Authorization bearer token: ANTHROPIC_AUTH_TOKEN); an
 * x-api-key header is not a credential here and, like anthropic-version and
 * anthropic-beta, is accepted and ignored.
 *
 * Request: model, max_tokens (required), system (a string or text blocks), messages (role
 * user or assistant; content a string or blocks: text, tool_use {id, name, input},
 * tool_result {tool_use_id, content (a string or text blocks), is_error}, thinking
 * {thinking, signature} (an earlier assistant turn's reasoning) and redacted_thinking
 * (dropped)), tools ([{name, description, input_schema}], sent to warmd OpenAI-shaped),
 * tool_choice ({type: auto|any|tool|none, name, disable_parallel_tool_use}), thinking
 * ({type: enabled, budget_tokens}: thinking on, the budget is not enforced; {type:
 * disabled}: off), stop_sequences, temperature, top_p, top_k, stream, output_format
 * ({type: json_schema, schema}); metadata, service_tier, cache_control fields and unknown
 * fields are ignored. A block warmd cannot read (images, documents, search results) or a
 * server tool is refused with a 400 naming it.
 *
 * Reply: {id "msg_...", type "message", role "assistant", model, content [thinking block
 * (signature ""), text block, tool_use blocks {id, name, input}], stop_reason (end_turn,
 * max_tokens, stop_sequence, tool_use), stop_sequence, usage {input_tokens,
 * cache_read_input_tokens, cache_creation_input_tokens 0, output_tokens}}. As Anthropic
 * counts them, input_tokens are the prompt tokens warmd computed and cache_read_input_tokens
 * those it took from RAM or its prompt cache (their sum is the prompt). Streamed (SSE with
 * event lines): message_start, ping, then per block content_block_start, its deltas
 * (thinking_delta, text_delta; a tool call's input as input_json_delta events, as the
 * model writes it) and content_block_stop, then message_delta {stop_reason,
 * stop_sequence, usage} and message_stop. message_start's usage says 0 input tokens (the
 * count comes with warmd's summary, at the end): message_delta's usage has them all.
 *
 * count_tokens: warmd has no call that only renders a chat, so the conversation (with its
 * system and tools) is sent as a one-token chat and its summary's prompt_tokens answered;
 * the prompt stays in warmd's cache for the request that follows.
 *
 * Errors: {"type": "error", "error": {"type", "message"}} with Anthropic's types for the
 * status (server.c's error_doc); in a stream that already started, an error event. */
#include "httpd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ---------------------------------------------------------------------------- */

static const struct {
    unsigned status;
    const char *type;
} error_types[] = {
    {400, "invalid_request_error"}, {401, "authentication_error"}, {403, "permission_error"},
    {404, "not_found_error"},       {405, "invalid_request_error"}, {408, "timeout_error"},
    {413, "request_too_large"},     {429, "rate_limit_error"},      {501, "api_error"},
    {503, "overloaded_error"},      {504, "timeout_error"},         {529, "overloaded_error"},
};

const char *anthropic_error_type(unsigned status) {
    for (size_t i = 0; i < ARRAY_SIZE(error_types); i++)
        if (error_types[i].status == status) return error_types[i].type;
    return status < 500 ? "invalid_request_error" : "api_error";
}

static int fail(struct field_ctx *f, const char *key, const char *what) {
    f->mhd = reply_error(f->r, 400, key, "'%s' %s", key, what);
    return -EINVAL;
}

static int fail_memory(struct field_ctx *f) {
    f->mhd = reply_error(f->r, 503, NULL, "out of memory");
    return -ENOMEM;
}

/* ---- texts joined from blocks ------------------------------------------------------------- */

struct text_buf {
    char *s;
    size_t len, cap;
    bool any;
};

static int text_add(struct text_buf *b, const char *sep, const char *text) {
    size_t n_sep = b->any ? strlen(sep) : 0, n = strlen(text), need;
    if (!size_add(b->len, n_sep, &need) || !size_add(need, n + 1, &need)) return -ENOMEM;
    if (need > b->cap) {
        size_t cap = MAX(need, 2 * b->cap);
        char *s = realloc(b->s, cap);
        if (!s) return -ENOMEM;
        b->s = s;
        b->cap = cap;
    }
    memcpy(b->s + b->len, sep, n_sep);
    memcpy(b->s + b->len + n_sep, text, n + 1);
    b->len += n_sep + n;
    b->any = true;
    return 0;
}

/* The joined text, kept by j ("" for none); the buffer is emptied. NULL on ENOMEM. */
static const char *text_take(struct gen_job *j, struct text_buf *b) {
    char *s = b->s;
    *b = (struct text_buf){0};
    if (!s) return "";
    return gen_job_keep(j, s);
}

/* content: a string, or text blocks (joined by new lines); key names it in errors. */
static int blocks_text(struct field_ctx *f, struct gen_job *j, json_t *content,
                       const char *key, const char **ret) {
    if (!content || json_is_null(content)) {
        *ret = "";
        return 0;
    }
    if (json_is_string(content)) {
        *ret = json_string_value(content);
        return 0;
    }
    if (!json_is_array(content)) return fail(f, key, "must be a string or an array of text blocks");
    struct text_buf b = {0};
    size_t i;
    json_t *block;
    json_array_foreach(content, i, block) {
        const char *type = json_string_value(json_object_get(block, "type"));
        const char *text = json_string_value(json_object_get(block, "text"));
        if (!type || strcmp(type, "text") != 0 || !text) {
            char k[160];
            snprintf(k, sizeof k, "%s[%zu]", key, i);
            free(b.s);
            f->mhd = reply_error(f->r, 400, k, "'%s' is a '%s' block: only text blocks are "
                                 "supported here (warmd's models read text only)", k,
                                 type ? type : "untyped");
            return -EINVAL;
        }
        if (text_add(&b, "\n", text) < 0) {
            free(b.s);
            return fail_memory(f);
        }
    }
    *ret = text_take(j, &b);
    return *ret ? 0 : fail_memory(f);
}

/* ---- messages --------------------------------------------------------------------------- */

/* The name of the tool_use block with id in the request's messages (NULL: none). */
static const char *tool_use_name(json_t *msgs, const char *id) {
    size_t i, k;
    json_t *m, *block;
    if (!id) return NULL;
    json_array_foreach(msgs, i, m) {
        json_array_foreach(json_object_get(m, "content"), k, block) {
            const char *type = json_string_value(json_object_get(block, "type"));
            const char *bid = json_string_value(json_object_get(block, "id"));
            if (type && strcmp(type, "tool_use") == 0 && bid && strcmp(bid, id) == 0)
                return json_string_value(json_object_get(block, "name"));
        }
    }
    return NULL;
}

static struct warm_chat_message *msg_add(struct gen_job *j, const char *role, const char *content) {
    struct warm_chat_message *m = &j->msgs[j->n_msgs++];
    *m = (struct warm_chat_message){.role = role, .content = content};
    return m;
}

/* A user message: its text blocks become user messages, each tool_result a tool message,
 * in their order. */
static int user_message(struct field_ctx *f, struct gen_job *j, json_t *msgs, json_t *content,
                        size_t i) {
    char key[160];
    snprintf(key, sizeof key, "messages[%zu].content", i);
    if (!json_is_array(content)) {
        const char *text;
        if (blocks_text(f, j, content, key, &text) < 0) return -EINVAL;
        msg_add(j, "user", text);
        return 0;
    }
    struct text_buf b = {0};
    size_t k;
    json_t *block;
    json_array_foreach(content, k, block) {
        const char *type = json_string_value(json_object_get(block, "type"));
        snprintf(key, sizeof key, "messages[%zu].content[%zu]", i, k);
        if (type && strcmp(type, "text") == 0) {
            const char *text = json_string_value(json_object_get(block, "text"));
            if (!text) {
                free(b.s);
                return fail(f, key, "must have 'text'");
            }
            if (text_add(&b, "\n", text) < 0) {
                free(b.s);
                return fail_memory(f);
            }
            continue;
        }
        if (!type || strcmp(type, "tool_result") != 0) {
            free(b.s);
            f->mhd = reply_error(f->r, 400, key, "'%s' is a '%s' block: user messages may hold "
                                 "text and tool_result blocks (warmd's models read text only)",
                                 key, type ? type : "untyped");
            return -EINVAL;
        }
        const char *id = json_string_value(json_object_get(block, "tool_use_id")), *text;
        if (!id || !*id) {
            free(b.s);
            return fail(f, key, "must have 'tool_use_id'");
        }
        if (b.any) {
            const char *t = text_take(j, &b);
            if (!t) return fail_memory(f);
            msg_add(j, "user", t);
        }
        char ckey[192];
        snprintf(ckey, sizeof ckey, "%s.content", key);
        if (blocks_text(f, j, json_object_get(block, "content"), ckey, &text) < 0) return -EINVAL;
        if (json_is_true(json_object_get(block, "is_error"))) {
            /* the model learns that the call failed in the only way a template shows */
            struct text_buf e = {0};
            if (text_add(&e, "", "Error: ") < 0 || text_add(&e, "", text) < 0) {
                free(e.s);
                return fail_memory(f);
            }
            if (!(text = text_take(j, &e))) return fail_memory(f);
        }
        struct warm_chat_message *m = msg_add(j, "tool", text);
        m->tool_call_id = id;
        m->name = tool_use_name(msgs, id);
    }
    if (b.any || json_array_size(content) == 0) {
        const char *t = text_take(j, &b);
        if (!t) return fail_memory(f);
        msg_add(j, "user", t);
    }
    return 0;
}

/* An assistant message: its text, its reasoning (thinking blocks) and its tool calls. */
static int assistant_message(struct field_ctx *f, struct gen_job *j, json_t *content, size_t i,
                             size_t *at) {
    char key[160];
    snprintf(key, sizeof key, "messages[%zu].content", i);
    if (!json_is_array(content)) {
        const char *text;
        if (blocks_text(f, j, content, key, &text) < 0) return -EINVAL;
        msg_add(j, "assistant", text);
        return 0;
    }
    struct text_buf text = {0}, reasoning = {0};
    size_t first = *at, k;
    json_t *block;
    int r = 0;
    json_array_foreach(content, k, block) {
        const char *type = json_string_value(json_object_get(block, "type"));
        snprintf(key, sizeof key, "messages[%zu].content[%zu]", i, k);
        if (type && strcmp(type, "text") == 0) {
            const char *t = json_string_value(json_object_get(block, "text"));
            if (!t) r = fail(f, key, "must have 'text'");
            else if (text_add(&text, "\n", t) < 0) r = fail_memory(f);
        } else if (type && strcmp(type, "thinking") == 0) {
            const char *t = json_string_value(json_object_get(block, "thinking"));
            if (t && *t && text_add(&reasoning, "\n", t) < 0) r = fail_memory(f);
        } else if (type && strcmp(type, "redacted_thinking") == 0) {
            /* encrypted by Anthropic: nothing a local model can read */
        } else if (type && strcmp(type, "tool_use") == 0) {
            const char *name = json_string_value(json_object_get(block, "name"));
            json_t *input = json_object_get(block, "input");
            if (!name || !*name || (input && !json_is_object(input))) {
                r = fail(f, key, "must have a 'name' and an 'input' object");
            } else {
                char *args = gen_job_keep(j, input ? json_dumps(input, JSON_COMPACT)
                                                   : strdup("{}"));
                if (!args) r = fail_memory(f);
                else
                    j->calls[(*at)++] = (struct warm_tool_call){
                        .id = json_string_value(json_object_get(block, "id")), .name = name,
                        .arguments = args};
            }
        } else {
            f->mhd = reply_error(f->r, 400, key, "'%s' is a '%s' block: assistant messages may "
                                 "hold text, thinking and tool_use blocks", key,
                                 type ? type : "untyped");
            r = -EINVAL;
        }
        if (r < 0) break;
    }
    bool thought = reasoning.any;
    const char *t = r < 0 ? NULL : text_take(j, &text);
    const char *think = r < 0 || !thought ? NULL : text_take(j, &reasoning);
    free(text.s);
    free(reasoning.s);
    if (r < 0) return r;
    if (!t || (thought && !think)) return fail_memory(f);
    struct warm_chat_message *m = msg_add(j, "assistant", t);
    m->reasoning = think;
    if (*at > first) {
        m->tool_calls = &j->calls[first];
        m->n_tool_calls = *at - first;
    }
    return 0;
}

static int parse_conversation(struct field_ctx *f, struct gen_job *j, json_t *b) {
    json_t *msgs = json_object_get(b, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return fail(f, "messages", "must be a non-empty array");
    /* At most: the system, and per message one message per block (or one). */
    size_t n = 1, n_calls = 0, i, k;
    json_t *m, *block;
    json_array_foreach(msgs, i, m) {
        json_t *content = json_object_get(m, "content");
        n += json_is_array(content) ? json_array_size(content) + 1 : 1;
        json_array_foreach(content, k, block) {
            const char *type = json_string_value(json_object_get(block, "type"));
            if (type && strcmp(type, "tool_use") == 0) n_calls++;
        }
    }
    j->msgs = calloc(n, sizeof *j->msgs);
    j->calls = calloc(n_calls ? n_calls : 1, sizeof *j->calls);
    if (!j->msgs || !j->calls) return fail_memory(f);
    json_t *system = json_object_get(b, "system");
    if (system && !json_is_null(system)) {
        const char *text;
        if (blocks_text(f, j, system, "system", &text) < 0) return -EINVAL;
        if (*text) msg_add(j, "system", text);
    }
    size_t at = 0;
    json_array_foreach(msgs, i, m) {
        char key[96];
        snprintf(key, sizeof key, "messages[%zu].role", i);
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *content = json_object_get(m, "content");
        int r;
        if (role && strcmp(role, "user") == 0) {
            r = user_message(f, j, msgs, content, i);
        } else if (role && strcmp(role, "assistant") == 0) {
            r = assistant_message(f, j, content, i, &at);
        } else {
            f->mhd = reply_error(f->r, 400, key, "'%s' is '%s': messages are user or assistant "
                                 "(the system prompt goes in 'system')", key,
                                 role ? role : "missing");
            r = -EINVAL;
        }
        if (r < 0) return r;
    }
    return 0;
}

/* ---- tools, thinking, sampling ------------------------------------------------------------ */

/* tools [{name, description, input_schema}] as warmd takes them: OpenAI-shaped. */
static int parse_tools(struct field_ctx *f, struct gen_job *j, json_t *tools) {
    if (!tools || json_is_null(tools) || (json_is_array(tools) && json_array_size(tools) == 0))
        return 0;
    if (!json_is_array(tools)) return fail(f, "tools", "must be an array of tools");
    json_t *out = json_array();
    if (!out) return fail_memory(f);
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char key[64];
        snprintf(key, sizeof key, "tools[%zu]", i);
        const char *type = json_string_value(json_object_get(t, "type"));
        const char *name = json_string_value(json_object_get(t, "name"));
        json_t *schema = json_object_get(t, "input_schema");
        if (type && strcmp(type, "custom") != 0) {
            json_decref(out);
            f->mhd = reply_error(f->r, 400, key, "'%s' is a '%s' tool: Anthropic's server and "
                                 "client tools run at Anthropic; define it as a custom tool "
                                 "{name, description, input_schema}", key, type);
            return -EINVAL;
        }
        if (!json_is_object(t) || !name || !*name || !json_is_object(schema)) {
            json_decref(out);
            return fail(f, key, "must be {\"name\", \"description\", \"input_schema\"} with "
                        "input_schema a JSON Schema object");
        }
        json_t *fn = json_pack("{s:s,s:O}", "name", name, "parameters", schema);
        json_t *desc = json_object_get(t, "description");
        if (fn && json_is_string(desc)) json_object_set(fn, "description", desc);
        if (!fn || json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function",
                                                        "function", fn)) < 0) {
            json_decref(out);
            return fail_memory(f);
        }
    }
    char *text = gen_job_keep(j, json_dumps(out, JSON_COMPACT));
    json_decref(out);
    if (!text) return fail_memory(f);
    j->params.tools_json = text;
    return 0;
}

static const struct {
    const char *type;
    enum warm_tool_choice choice;
} tool_choices[] = {
    {"auto", WARM_TOOLS_AUTO}, {"any", WARM_TOOLS_REQUIRED}, {"tool", WARM_TOOLS_FUNCTION},
    {"none", WARM_TOOLS_NONE},
};

static int parse_tool_choice(struct field_ctx *f, struct gen_job *j, json_t *tc) {
    if (!tc || json_is_null(tc)) return 0;
    const char *type = json_string_value(json_object_get(tc, "type"));
    bool known = false;
    for (size_t i = 0; type && i < ARRAY_SIZE(tool_choices); i++) {
        if (strcmp(type, tool_choices[i].type) != 0) continue;
        j->params.tool_choice = tool_choices[i].choice;
        known = true;
    }
    if (!json_is_object(tc) || !known)
        return fail(f, "tool_choice", "must be {\"type\": \"auto\"}, {\"type\": \"any\"}, "
                    "{\"type\": \"tool\", \"name\": ...} or {\"type\": \"none\"}");
    if (j->params.tool_choice == WARM_TOOLS_FUNCTION) {
        const char *name = json_string_value(json_object_get(tc, "name"));
        if (!name || !*name) return fail(f, "tool_choice.name", "must name a tool");
        j->params.tool_choice_name = name;
    }
    if (j->params.tool_choice >= WARM_TOOLS_REQUIRED && !j->params.tools_json)
        return fail(f, "tool_choice", "needs 'tools' to choose from");
    bool one = false;
    if (field_bool(f, tc, "disable_parallel_tool_use", &one) < 0) return -EINVAL;
    j->params.max_tool_calls = one ? 1 : 0;
    return 0;
}

static int parse_thinking(struct field_ctx *f, struct gen_job *j, json_t *t) {
    if (!t || json_is_null(t)) return 0;
    const char *type = json_string_value(json_object_get(t, "type"));
    if (json_is_object(t) && type && strcmp(type, "enabled") == 0) {
        j->params.think = WARM_THINK_ON;    /* budget_tokens: warmd has no budget */
        return 0;
    }
    if (json_is_object(t) && type && strcmp(type, "disabled") == 0) {
        j->params.think = WARM_THINK_OFF;
        return 0;
    }
    if (json_is_object(t) && type && strcmp(type, "adaptive") == 0) return 0;
    return fail(f, "thinking", "must be {\"type\": \"enabled\", \"budget_tokens\": ...} or "
                "{\"type\": \"disabled\"}");
}

/* output_format (and output_config.format): {"type": "json_schema", "schema"}. */
static int parse_output_format(struct field_ctx *f, struct gen_job *j, json_t *b) {
    const char *param = "output_format";
    json_t *of = json_object_get(b, param);
    if (!of || json_is_null(of)) {
        param = "output_config.format";
        of = json_object_get(json_object_get(b, "output_config"), "format");
    }
    if (!of || json_is_null(of)) return 0;
    const char *type = json_string_value(json_object_get(of, "type"));
    if (!type || strcmp(type, "json_schema") != 0)
        return fail(f, param, "must be {\"type\": \"json_schema\", \"schema\": ...}");
    char key[64];
    snprintf(key, sizeof key, "%s.schema", param);
    json_t *schema = json_object_get(of, "schema");
    return field_schema(f, j, json_is_null(schema) ? NULL : schema, key);
}

static int parse_sampling(struct field_ctx *f, struct gen_job *j, json_t *b) {
    struct warm_sampling *s = &j->sampling;
    double x = 0;
    bool set = false;
    if (field_number(f, b, "temperature", 0, 1, &x, &set) < 0) return -EINVAL;
    if (set) s->temperature = (float)x, set = false;
    if (field_number(f, b, "top_p", 0, 1, &x, &set) < 0) return -EINVAL;
    if (set) s->top_p = (float)x, set = false;
    if (field_number(f, b, "top_k", 0, 1 << 20, &x, &set) < 0) return -EINVAL;
    if (set) {
        if (x != (double)(int32_t)x) return fail(f, "top_k", "must be an integer");
        s->top_k = (int32_t)x;
    }
    return field_stop(f, b, "stop_sequences", HTTPD_MAX_STOP, j);
}

/* Everything a Messages request says, into j. with_max: max_tokens is required. */
static int parse_request(struct field_ctx *f, struct gen_job *j, json_t *b, bool with_max) {
    const char *model = NULL;
    if (field_string(f, b, "model", &model) < 0) return -EINVAL;
    if (!model || !*model) return fail(f, "model", "is required (a model warmd serves)");
    snprintf(j->model, sizeof j->model, "%s", model);
    j->params.model = request_model(f->r, model, j->model_buf);
    if (with_max) {
        double x = 0;
        bool set = false;
        if (field_number(f, b, "max_tokens", 1, UINT32_MAX, &x, &set) < 0) return -EINVAL;
        if (!set || x != (double)(uint32_t)x)
            return fail(f, "max_tokens", "is required: a positive integer");
        j->params.max_tokens = (uint32_t)x;
    }
    if (parse_sampling(f, j, b) < 0 || field_bool(f, b, "stream", &j->stream) < 0 ||
        parse_tools(f, j, json_object_get(b, "tools")) < 0 ||
        parse_tool_choice(f, j, json_object_get(b, "tool_choice")) < 0 ||
        parse_thinking(f, j, json_object_get(b, "thinking")) < 0 ||
        parse_output_format(f, j, b) < 0)
        return -EINVAL;
    return parse_conversation(f, j, b);
}

/* ---- replies ---------------------------------------------------------------------------- */

/* Anthropic's stop reason; a stop string that is not one of the request's stop_sequences
 * (the template's end) is the end of the turn. */
static const char *stop_reason(const struct gen_job *j, const char **ret_sequence) {
    const struct warm_summary *s = &j->summary;
    *ret_sequence = NULL;
    switch (s->stop_reason) {
    case WARM_STOP_MAX_TOKENS:
    case WARM_STOP_CONTEXT_FULL: return "max_tokens";
    case WARM_STOP_TOOL_CALLS: return "tool_use";
    case WARM_STOP_STOP_STRING:
        for (size_t i = 0; i < HTTPD_MAX_STOP && j->stop[i]; i++) {
            if (strcmp(j->stop[i], s->stop_string) != 0) continue;
            *ret_sequence = j->stop[i];
            return "stop_sequence";
        }
        return "end_turn";
    default: return "end_turn";
    }
}

static json_t *usage(const struct warm_summary *s, bool at_start) {
    uint32_t cached = at_start ? 0 : cached_tokens(s);
    uint32_t input = at_start ? 0 : s->prompt_tokens - MIN(cached, s->prompt_tokens);
    return json_pack("{s:I,s:I,s:I,s:I}", "input_tokens", (json_int_t)input,
                     "cache_creation_input_tokens", (json_int_t)0, "cache_read_input_tokens",
                     (json_int_t)cached, "output_tokens",
                     (json_int_t)(at_start ? 0 : s->generated_tokens));
}

/* A tool call's input: its arguments as an object ({} should warmd's text not parse). */
static json_t *call_input(const struct warm_tool_call *c) {
    json_t *v = json_loads(c->arguments ? c->arguments : "{}", 0, NULL);
    if (json_is_object(v)) return v;
    json_decref(v);
    return json_object();
}

static json_t *message_doc(struct gen_job *j, json_t *content, bool at_start) {
    const char *seq = NULL, *reason = at_start ? NULL : stop_reason(j, &seq);
    return json_pack("{s:s,s:s,s:s,s:s,s:o,s:o,s:o,s:o}", "id", j->id, "type", "message",
                     "role", "assistant", "model", j->model, "content", content, "stop_reason",
                     reason ? json_string(reason) : json_null(), "stop_sequence",
                     seq ? json_string(seq) : json_null(), "usage", usage(&j->summary, at_start));
}

static json_t *messages_whole(struct gen_job *j) {
    const struct warm_summary *s = &j->summary;
    json_t *content = json_array();
    if (!content) return NULL;
    if (j->reasoning_len)
        json_array_append_new(content, json_pack("{s:s,s:o,s:s}", "type", "thinking", "thinking",
                                                 json_text(j->reasoning, j->reasoning_len),
                                                 "signature", ""));
    if (j->text_len || (!j->reasoning_len && !s->n_tool_calls))
        json_array_append_new(content, json_pack("{s:s,s:o}", "type", "text", "text",
                                                 json_text(j->text ? j->text : "", j->text_len)));
    for (size_t i = 0; i < s->n_tool_calls; i++)
        json_array_append_new(content, json_pack(
            "{s:s,s:s,s:s,s:o}", "type", "tool_use", "id", s->tool_calls[i].id, "name",
            s->tool_calls[i].name, "input", call_input(&s->tool_calls[i])));
    return message_doc(j, content, false);
}

/* The stream: "event: TYPE\ndata: {...}\n\n"; j->block_open is the kind of the block
 * being streamed, j->block_index its index (or the next block's). */
enum block { BLOCK_NONE, BLOCK_THINKING, BLOCK_TEXT, BLOCK_TOOL_USE };

static int emit_event(struct gen_job *j, const char *type, json_t *doc) {
    if (!doc) return -ENOMEM;
    char line[64];
    int n = snprintf(line, sizeof line, "event: %s\n", type);
    int r = gen_emit(j, line, (size_t)n);
    if (r < 0) {
        json_decref(doc);
        return r;
    }
    return gen_emit_json(j, doc, true);
}

static int stream_head(struct gen_job *j) {
    if (j->head_sent) return 0;
    j->head_sent = true;
    int r = emit_event(j, "message_start", json_pack("{s:s,s:o}", "type", "message_start",
                                                     "message", message_doc(j, json_array(),
                                                                            true)));
    if (r >= 0) r = emit_event(j, "ping", json_pack("{s:s}", "type", "ping"));
    return r;
}

static int block_stop(struct gen_job *j) {
    if (j->block_open == BLOCK_NONE) return 0;
    int r = emit_event(j, "content_block_stop", json_pack("{s:s,s:i}", "type",
                                                          "content_block_stop", "index",
                                                          j->block_index));
    j->block_open = BLOCK_NONE;
    j->block_index++;
    return r;
}

/* Starts block (stolen) as a block of kind. */
static int block_start(struct gen_job *j, int kind, json_t *block) {
    j->block_open = kind;
    return emit_event(j, "content_block_start", json_pack("{s:s,s:i,s:o}", "type",
                                                          "content_block_start", "index",
                                                          j->block_index, "content_block",
                                                          block));
}

/* Text of one kind (a thinking or a text block), opening its block when another is open. */
static int stream_delta(struct gen_job *j, enum block kind, const char *text, size_t len) {
    int r = stream_head(j);
    if (r < 0 || !len) return r;
    bool thinking = kind == BLOCK_THINKING;
    if (j->block_open != (int)kind) {
        r = block_stop(j);
        if (r >= 0)
            r = block_start(j, kind, thinking ? json_pack("{s:s,s:s,s:s}", "type", "thinking",
                                                          "thinking", "", "signature", "")
                                              : json_pack("{s:s,s:s}", "type", "text", "text",
                                                          ""));
        if (r < 0) return r;
    }
    return emit_event(j, "content_block_delta", json_pack(
        "{s:s,s:i,s:{s:s,s:o}}", "type", "content_block_delta", "index", j->block_index,
        "delta", "type", thinking ? "thinking_delta" : "text_delta",
        thinking ? "thinking" : "text", json_text(text, len)));
}

static int stream_piece(struct gen_job *j, const char *text, size_t len) {
    return stream_delta(j, BLOCK_TEXT, text, len);
}

static int stream_thinking(struct gen_job *j, const char *text, size_t len) {
    return stream_delta(j, BLOCK_THINKING, text, len);
}

/* A piece of a tool call: a call's first piece opens its tool_use block, the arguments'
 * fragments are its input_json_delta events. */
static int stream_tool_call(struct gen_job *j, const struct warm_tool_call_delta *d) {
    int r = stream_head(j);
    if (r >= 0 && d->name) {
        r = block_stop(j);
        if (r >= 0)
            r = block_start(j, BLOCK_TOOL_USE, json_pack("{s:s,s:s,s:s,s:{}}", "type", "tool_use",
                                                     "id", d->id ? d->id : "", "name", d->name,
                                                     "input"));
    }
    if (r >= 0 && d->len && j->block_open == BLOCK_TOOL_USE)
        r = emit_event(j, "content_block_delta", json_pack(
            "{s:s,s:i,s:{s:s,s:o}}", "type", "content_block_delta", "index", j->block_index,
            "delta", "type", "input_json_delta", "partial_json",
            json_text(d->arguments, d->len)));
    return r;
}

static int stream_end(struct gen_job *j) {
    const struct warm_summary *s = &j->summary;
    int r = stream_head(j);
    /* An answer with nothing in it still has its (empty) text block. */
    if (r >= 0 && j->block_index == 0 && j->block_open == BLOCK_NONE && !s->n_tool_calls)
        r = block_start(j, BLOCK_TEXT, json_pack("{s:s,s:s}", "type", "text", "text", ""));
    if (r >= 0) r = block_stop(j);
    /* the calls that did not stream come whole */
    for (size_t i = j->n_calls_streamed; r >= 0 && i < s->n_tool_calls; i++) {
        const struct warm_tool_call *c = &s->tool_calls[i];
        r = block_start(j, BLOCK_TOOL_USE, json_pack("{s:s,s:s,s:s,s:{}}", "type", "tool_use", "id",
                                                 c->id, "name", c->name, "input"));
        if (r >= 0)
            r = emit_event(j, "content_block_delta", json_pack(
                "{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_delta", "index",
                j->block_index, "delta", "type", "input_json_delta", "partial_json",
                c->arguments ? c->arguments : "{}"));
        if (r >= 0) r = block_stop(j);
    }
    const char *seq = NULL, *reason = stop_reason(j, &seq);
    if (r >= 0)
        r = emit_event(j, "message_delta", json_pack(
            "{s:s,s:{s:s,s:o},s:o}", "type", "message_delta", "delta", "stop_reason", reason,
            "stop_sequence", seq ? json_string(seq) : json_null(), "usage",
            usage(s, false)));
    if (r >= 0) r = emit_event(j, "message_stop", json_pack("{s:s}", "type", "message_stop"));
    return r;
}

static int stream_error(struct gen_job *j) {
    unsigned status = http_status_for(j->err.code);
    return emit_event(j, "error", json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type",
                                            anthropic_error_type(status), "message",
                                            j->err.message));
}

static const struct gen_ops messages_ops = {
    .content_type = "text/event-stream",
    .piece = stream_piece, .thinking = stream_thinking, .tool_call = stream_tool_call,
    .end = stream_end, .error = stream_error, .whole = messages_whole,
};

/* ---- handlers ----------------------------------------------------------------------------- */

enum MHD_Result anthropic_messages(struct request *r) {
    struct field_ctx f = {.r = r};
    struct gen_job *j = gen_job_new(r, &messages_ops, API_ANTHROPIC);
    if (!j) return reply_error(r, 503, NULL, "out of memory");
    j->chat = true;
    make_id(j->id, sizeof j->id, "msg_");
    if (parse_request(&f, j, r->json, true) < 0) {
        gen_job_free(j);
        return f.mhd;
    }
    return gen_run(r, j);
}

enum MHD_Result anthropic_count_tokens(struct request *r) {
    struct field_ctx f = {.r = r};
    struct gen_job *j = gen_job_new(r, &messages_ops, API_ANTHROPIC);
    if (!j) return reply_error(r, 503, NULL, "out of memory");
    enum MHD_Result m;
    if (parse_request(&f, j, r->json, false) < 0) {
        gen_job_free(j);
        return f.mhd;
    }
    j->client = request_client(r, &m);
    if (!j->client) {
        gen_job_free(j);
        return m;
    }
    /* One token: the summary counts the rendered prompt (a forced call would compile the
     * tools' grammar for nothing). */
    struct warm_gen_params p = j->params;
    p.max_tokens = 1;
    p.n_stop = 0;
    p.on_reasoning = NULL;
    p.json_schema = NULL;
    if (p.tool_choice != WARM_TOOLS_NONE) p.tool_choice = WARM_TOOLS_AUTO;
    p.tool_choice_name = NULL;
    struct warm_summary s;
    int rc = warm_chat(client_ref_client(j->client), &p, j->msgs, j->n_msgs, 0, NULL, NULL, &s,
                       &j->err);
    if (rc < 0) {
        m = reply_warm_error(r, &j->err);
    } else {
        m = reply_json(r, 200, json_pack("{s:I}", "input_tokens", (json_int_t)s.prompt_tokens));
        warm_summary_done(&s);
    }
    gen_job_free(j);
    return m;
}
