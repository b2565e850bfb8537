/* responses — OpenAI's Responses API, enough for Codex-style tool loops against a local
 * model: POST /v1/responses, whole or streamed. Who a request is served as is decided as
 * for the other APIs (the connection's uid, else an Authorization bearer token).
 *
 * Request: model, input (a string: one user message; or items: messages {role user,
 * assistant, system or developer (as system), content a string or parts input_text /
 * output_text {text}}, function_call {call_id, name, arguments} (joined to the assistant
 * turn before it), function_call_output {call_id, output (a string or input_text parts)}
 * and reasoning {summary, content} (the reasoning of the assistant turn that follows)),
 * instructions (the system message), tools ([{type "function", name, description,
 * parameters, strict}], sent to warmd in the Chat Completions shape), tool_choice ("auto",
 * "none", "required", {type "function", name}), parallel_tool_calls (false: at most one
 * call), max_output_tokens, temperature, top_p, reasoning {effort: "none" or "minimal"
 * turn thinking off}, text.format ({type text | json_object | json_schema {name, schema,
 * strict}}: warmd's output format; the output is valid under the schema whatever strict
 * says), stream. store, metadata, user, include, truncation, service_tier and
 * prompt_cache_key are accepted and ignored. Refused with a 400 naming them: any tool but
 * a function (warmd runs no hosted tools), parts that are not text (images, files),
 * item types warmd cannot read (item_reference, ...), previous_response_id and
 * conversation (warmd keeps no conversation on the server: send the whole input), and
 * background.
 *
 * Reply: {id "resp_...", object "response", created_at, status ("completed", or
 * "incomplete" with incomplete_details {reason "max_output_tokens"} when the output ran
 * into max_output_tokens or the context), model, output [reasoning item {id "rs_...",
 * content [{type reasoning_text, text}], summary []} (a thinking family's reasoning, raw,
 * as OpenAI writes the reasoning of open-weight models), message item {id "msg_...", role
 * assistant, status, content [{type output_text, text, annotations []}]}, function_call
 * items {id "fc_...", call_id (warmd's "call_..."), name, arguments, status}], usage
 * {input_tokens (the whole prompt), input_tokens_details.cached_tokens (taken from RAM or
 * warmd's prompt cache), output_tokens, output_tokens_details.reasoning_tokens (0: warmd
 * does not count them apart), total_tokens}}, with the request's settings echoed.
 *
 * Streamed: SSE with event lines, each event with its sequence_number: response.created,
 * response.in_progress, then per output item response.output_item.added, its parts and
 * deltas (reasoning: response.content_part.added, response.reasoning_text.delta / .done,
 * response.content_part.done; message: response.content_part.added,
 * response.output_text.delta / .done, response.content_part.done; a function call: its
 * response.function_call_arguments.delta events as the model writes the arguments, and
 * .done) and response.output_item.done; last response.completed (response.incomplete when
 * the status is incomplete) with the whole response. An error after the stream started is
 * an error event {type "error", code, message, param}.
 *
 * Errors: OpenAI's shape {"error": {message, type, param, code}} (server.c's error_doc). */
#include "httpd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(struct field_ctx *f, const char *key, const char *what) {
    f->mhd = reply_error(f->r, 400, key, "'%s' %s", key, what);
    return -EINVAL;
}

static int fail_memory(struct field_ctx *f) {
    f->mhd = reply_error(f->r, 503, NULL, "out of memory");
    return -ENOMEM;
}

/* ---- texts joined from parts -------------------------------------------------------------- */

/* b and text joined by sep into a new string kept by j (b may be NULL: text alone). */
static const char *text_join(struct gen_job *j, const char *b, const char *sep, const char *text) {
    if (!b) return text;
    size_t nb = strlen(b), ns = strlen(sep), nt = strlen(text), n;
    if (!size_add(nb, ns, &n) || !size_add(n, nt + 1, &n)) return NULL;
    char *s = malloc(n);
    if (!s) return NULL;
    memcpy(s, b, nb);
    memcpy(s + nb, sep, ns);
    memcpy(s + nb + ns, text, nt + 1);
    return gen_job_keep(j, s);
}

/* content: a string, or parts whose type is one of types (each {type, text}), joined by
 * new lines; key names it in errors. */
static int parts_text(struct field_ctx *f, struct gen_job *j, json_t *content, const char *key,
                      const char *const *types, size_t n_types, const char **ret) {
    if (!content || json_is_null(content)) {
        *ret = "";
        return 0;
    }
    if (json_is_string(content)) {
        *ret = json_string_value(content);
        return 0;
    }
    if (!json_is_array(content)) return fail(f, key, "must be a string or an array of text parts");
    const char *out = NULL;
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        const char *text = json_string_value(json_object_get(part, "text"));
        bool known = false;
        for (size_t k = 0; type && k < n_types; k++) known = known || strcmp(type, types[k]) == 0;
        char k[160];
        snprintf(k, sizeof k, "%s[%zu]", key, i);
        if (!known) {
            f->mhd = reply_error(f->r, 400, k, "'%s' is a '%s' part: only text parts (%s) are "
                                 "supported here (warmd's models read text only)", k,
                                 type ? type : "untyped", types[0]);
            return -EINVAL;
        }
        if (!text) return fail(f, k, "must have 'text'");
        if (!(out = text_join(j, out, "\n", text))) return fail_memory(f);
    }
    *ret = out ? out : "";
    return 0;
}

static const char *const message_parts[] = {"input_text", "output_text", "text"};
static const char *const output_parts[] = {"input_text", "text"};

/* ---- input items ---------------------------------------------------------------------------- */

struct conv {
    size_t at;                          /* j->calls used */
    const char *reasoning;              /* a reasoning item's text, for the next assistant turn */
    struct warm_chat_message *turn;     /* the assistant turn function calls join (or NULL) */
};

static struct warm_chat_message *msg_add(struct gen_job *j, const char *role, const char *content) {
    struct warm_chat_message *m = &j->msgs[j->n_msgs++];
    *m = (struct warm_chat_message){.role = role, .content = content};
    return m;
}

static struct warm_chat_message *assistant_add(struct gen_job *j, struct conv *c,
                                               const char *content) {
    struct warm_chat_message *m = msg_add(j, "assistant", content);
    m->reasoning = c->reasoning;
    c->reasoning = NULL;
    c->turn = m;
    return m;
}

/* The name of the function_call item with call_id in input (NULL: none). */
static const char *call_name(json_t *input, const char *call_id) {
    size_t i;
    json_t *it;
    if (!call_id) return NULL;
    json_array_foreach(input, i, it) {
        const char *type = json_string_value(json_object_get(it, "type"));
        const char *id = json_string_value(json_object_get(it, "call_id"));
        if (type && strcmp(type, "function_call") == 0 && id && strcmp(id, call_id) == 0)
            return json_string_value(json_object_get(it, "name"));
    }
    return NULL;
}

static const struct {
    const char *role, *as;
} roles[] = {
    {"user", "user"}, {"system", "system"}, {"developer", "system"}, {"assistant", "assistant"},
};

static int message_item(struct field_ctx *f, struct gen_job *j, struct conv *c, json_t *it,
                        size_t i) {
    char key[96];
    const char *role = json_string_value(json_object_get(it, "role")), *as = NULL;
    for (size_t k = 0; role && k < ARRAY_SIZE(roles); k++)
        if (strcmp(role, roles[k].role) == 0) as = roles[k].as;
    if (!as) {
        snprintf(key, sizeof key, "input[%zu].role", i);
        f->mhd = reply_error(f->r, 400, key, "'%s' is '%s': messages are user, assistant, system "
                             "or developer", key, role ? role : "missing");
        return -EINVAL;
    }
    snprintf(key, sizeof key, "input[%zu].content", i);
    const char *text;
    if (parts_text(f, j, json_object_get(it, "content"), key, message_parts,
                   ARRAY_SIZE(message_parts), &text) < 0)
        return -EINVAL;
    if (strcmp(as, "assistant") == 0) {
        assistant_add(j, c, text);
        return 0;
    }
    msg_add(j, as, text);
    c->turn = NULL;
    return 0;
}

/* A function_call joins the assistant turn just before it (or makes one). */
static int call_item(struct field_ctx *f, struct gen_job *j, struct conv *c, json_t *it,
                     size_t i) {
    const char *id = json_string_value(json_object_get(it, "call_id"));
    const char *name = json_string_value(json_object_get(it, "name"));
    const char *args = json_string_value(json_object_get(it, "arguments"));
    if (!id || !*id || !name || !*name || !args) {
        char key[64];
        snprintf(key, sizeof key, "input[%zu]", i);
        return fail(f, key, "must be a function_call {call_id, name, arguments (JSON text)}");
    }
    struct warm_chat_message *m = c->turn;
    if (!m || m != &j->msgs[j->n_msgs - 1]) m = assistant_add(j, c, "");
    if (!m->tool_calls) m->tool_calls = &j->calls[c->at];
    j->calls[c->at++] = (struct warm_tool_call){.id = id, .name = name, .arguments = args};
    m->n_tool_calls++;
    return 0;
}

static int output_item(struct field_ctx *f, struct gen_job *j, struct conv *c, json_t *input,
                       json_t *it, size_t i) {
    char key[96];
    const char *id = json_string_value(json_object_get(it, "call_id")), *text;
    if (!id || !*id) {
        snprintf(key, sizeof key, "input[%zu]", i);
        return fail(f, key, "must be a function_call_output {call_id, output}");
    }
    snprintf(key, sizeof key, "input[%zu].output", i);
    if (parts_text(f, j, json_object_get(it, "output"), key, output_parts,
                   ARRAY_SIZE(output_parts), &text) < 0)
        return -EINVAL;
    struct warm_chat_message *m = msg_add(j, "tool", text);
    m->tool_call_id = id;
    m->name = call_name(input, id);
    c->turn = NULL;
    return 0;
}

/* A reasoning item: its content (reasoning_text) or else its summary (summary_text); an
 * encrypted_content is OpenAI's and is dropped. */
static int reasoning_item(struct field_ctx *f, struct gen_job *j, struct conv *c, json_t *it,
                          size_t i) {
    static const char *const content_parts[] = {"reasoning_text", "text"};
    static const char *const summary_parts[] = {"summary_text", "text"};
    char key[96];
    const char *text;
    json_t *content = json_object_get(it, "content");
    bool has_content = json_is_array(content) && json_array_size(content) > 0;
    snprintf(key, sizeof key, "input[%zu].%s", i, has_content ? "content" : "summary");
    if (parts_text(f, j, has_content ? content : json_object_get(it, "summary"), key,
                   has_content ? content_parts : summary_parts, 2, &text) < 0)
        return -EINVAL;
    if (*text && !(c->reasoning = text_join(j, c->reasoning, "\n", text))) return fail_memory(f);
    c->turn = NULL;
    return 0;
}

static int parse_input(struct field_ctx *f, struct gen_job *j, json_t *b) {
    json_t *input = json_object_get(b, "input");
    const char *instructions = NULL;
    if (field_string(f, b, "instructions", &instructions) < 0) return -EINVAL;
    size_t n = json_is_array(input) ? json_array_size(input) : 1;
    j->msgs = calloc(n + 1, sizeof *j->msgs);
    j->calls = calloc(n, sizeof *j->calls);
    if (!j->msgs || !j->calls) return fail_memory(f);
    if (instructions && *instructions) msg_add(j, "system", instructions);
    if (json_is_string(input)) {
        msg_add(j, "user", json_string_value(input));
        return 0;
    }
    if (!json_is_array(input) || json_array_size(input) == 0)
        return fail(f, "input", "must be a string or a non-empty array of items");
    struct conv c = {0};
    size_t i;
    json_t *it;
    json_array_foreach(input, i, it) {
        const char *type = json_string_value(json_object_get(it, "type"));
        int r;
        if (!json_is_object(it)) {
            char key[64];
            snprintf(key, sizeof key, "input[%zu]", i);
            r = fail(f, key, "must be an item (an object)");
        } else if (!type || strcmp(type, "message") == 0) {
            r = message_item(f, j, &c, it, i);
        } else if (strcmp(type, "function_call") == 0) {
            r = call_item(f, j, &c, it, i);
        } else if (strcmp(type, "function_call_output") == 0) {
            r = output_item(f, j, &c, input, it, i);
        } else if (strcmp(type, "reasoning") == 0) {
            r = reasoning_item(f, j, &c, it, i);
        } else {
            char key[64];
            snprintf(key, sizeof key, "input[%zu]", i);
            f->mhd = reply_error(f->r, 400, key, "'%s' is a '%s' item: input items are "
                                 "messages, function_call, function_call_output and reasoning",
                                 key, type);
            r = -EINVAL;
        }
        if (r < 0) return r;
    }
    if (j->n_msgs == 0 || (j->n_msgs == 1 && instructions && *instructions))
        return fail(f, "input", "holds no message");
    return 0;
}

/* ---- tools, choices, format ------------------------------------------------------------------ */

/* tools [{type "function", name, description, parameters, strict}], sent to warmd in the
 * Chat Completions shape. */
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
        json_t *params = json_object_get(t, "parameters");
        if (!type || strcmp(type, "function") != 0) {
            json_decref(out);
            f->mhd = reply_error(f->r, 400, key, "'%s' is a '%s' tool: only function tools "
                                 "{type \"function\", name, description, parameters} are "
                                 "supported (warmd runs no hosted tools)", key,
                                 type ? type : "untyped");
            return -EINVAL;
        }
        if (!name || !*name || (params && !json_is_null(params) && !json_is_object(params))) {
            json_decref(out);
            return fail(f, key, "must have a 'name' and 'parameters' a JSON Schema object");
        }
        json_t *fn = json_pack("{s:s}", "name", name);
        json_t *desc = json_object_get(t, "description");
        if (fn && json_is_string(desc)) json_object_set(fn, "description", desc);
        if (fn && json_is_object(params)) json_object_set(fn, "parameters", params);
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
    const char *name;
    enum warm_tool_choice choice;
} tool_choices[] = {
    {"auto", WARM_TOOLS_AUTO}, {"none", WARM_TOOLS_NONE}, {"required", WARM_TOOLS_REQUIRED},
};

static int parse_tool_choice(struct field_ctx *f, struct gen_job *j, json_t *tc) {
    if (!tc || json_is_null(tc)) return 0;
    const char *s = json_string_value(tc);
    const char *type = json_string_value(json_object_get(tc, "type"));
    bool known = false;
    for (size_t i = 0; s && i < ARRAY_SIZE(tool_choices); i++) {
        if (strcmp(s, tool_choices[i].name) != 0) continue;
        j->params.tool_choice = tool_choices[i].choice;
        known = true;
    }
    if (json_is_object(tc) && type && strcmp(type, "function") == 0) {
        const char *name = json_string_value(json_object_get(tc, "name"));
        if (!name || !*name) return fail(f, "tool_choice.name", "must name a function");
        j->params.tool_choice = WARM_TOOLS_FUNCTION;
        j->params.tool_choice_name = name;
        known = true;
    }
    if (!known)
        return fail(f, "tool_choice", "must be \"auto\", \"none\", \"required\" or "
                    "{\"type\": \"function\", \"name\": ...}");
    if (j->params.tool_choice >= WARM_TOOLS_REQUIRED && !j->params.tools_json)
        return fail(f, "tool_choice", "needs 'tools' to choose from");
    return 0;
}

/* reasoning {effort, summary}: effort "none" or "minimal" turns thinking off; "low",
 * "medium", "high" ("xhigh" as high) are gpt-oss's effort and turn the Qwen templates'
 * thinking on (models that do not think ignore them). */
static int parse_reasoning(struct field_ctx *f, struct gen_job *j, json_t *rs) {
    if (!rs || json_is_null(rs)) return 0;
    if (!json_is_object(rs)) return fail(f, "reasoning", "must be an object {effort, summary}");
    static const char *const efforts[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
    json_t *e = json_object_get(rs, "effort");
    if (!e || json_is_null(e)) return 0;
    const char *effort = json_string_value(e);
    bool ok = false;
    for (size_t i = 0; effort && i < ARRAY_SIZE(efforts); i++)
        ok = ok || strcmp(effort, efforts[i]) == 0;
    if (!ok) return fail(f, "reasoning.effort", "must be none, minimal, low, medium or high");
    if (strcmp(effort, "none") == 0 || strcmp(effort, "minimal") == 0)
        j->params.think = WARM_THINK_OFF;
    else
        j->params.think = strcmp(effort, "low") == 0      ? WARM_THINK_LOW
                          : strcmp(effort, "medium") == 0 ? WARM_THINK_MEDIUM
                                                          : WARM_THINK_HIGH;
    return 0;
}

/* text {format: {type text | json_object | json_schema {name, schema, strict}}}. */
static int parse_text_format(struct field_ctx *f, struct gen_job *j, json_t *text) {
    if (!text || json_is_null(text)) return 0;
    if (!json_is_object(text)) return fail(f, "text", "must be an object {format}");
    json_t *fmt = json_object_get(text, "format");
    if (!fmt || json_is_null(fmt)) return 0;
    const char *type = json_string_value(json_object_get(fmt, "type"));
    if (type && strcmp(type, "text") == 0) return 0;
    if (type && strcmp(type, "json_object") == 0) return field_schema(f, j, NULL, "text.format");
    if (!type || strcmp(type, "json_schema") != 0)
        return fail(f, "text.format.type", "must be text, json_object or json_schema");
    json_t *schema = json_object_get(fmt, "schema");
    if (!json_is_object(schema) && !json_is_boolean(schema))
        return fail(f, "text.format.schema", "must be a JSON Schema (an object)");
    return field_schema(f, j, schema, "text.format.schema");
}

/* Fields that need what warmd does not keep or do. */
static const struct {
    const char *name, *why;
} refused_fields[] = {
    {"previous_response_id", "warmd keeps no conversation on the server (responses are not "
                             "stored): send the whole conversation in 'input'"},
    {"conversation", "warmd keeps no conversation on the server: send the whole conversation "
                     "in 'input'"},
    {"prompt", "warmd keeps no stored prompts: send the instructions and input"},
};

static int parse_request(struct field_ctx *f, struct gen_job *j, json_t *b) {
    for (size_t i = 0; i < ARRAY_SIZE(refused_fields); i++) {
        json_t *v = json_object_get(b, refused_fields[i].name);
        if (!v || json_is_null(v)) continue;
        f->mhd = reply_error(f->r, 400, refused_fields[i].name, "'%s' is not supported: %s",
                             refused_fields[i].name, refused_fields[i].why);
        return -EINVAL;
    }
    if (json_is_true(json_object_get(b, "background")))
        return fail(f, "background", "is not supported: warmd answers while the request waits "
                    "(responses are not stored to fetch later)");
    const char *model = NULL;
    if (field_string(f, b, "model", &model) < 0) return -EINVAL;
    snprintf(j->model, sizeof j->model, "%s", model ? model : "");
    j->params.model = request_model(f->r, model, j->model_buf);
    struct warm_sampling *s = &j->sampling;
    double x = 0;
    bool set = false, parallel = true;
    if (field_number(f, b, "temperature", 0, 2, &x, &set) < 0) return -EINVAL;
    if (set) s->temperature = (float)x, set = false;
    if (field_number(f, b, "top_p", 0, 1, &x, &set) < 0) return -EINVAL;
    if (set) s->top_p = (float)x, set = false;
    if (field_number(f, b, "max_output_tokens", 1, UINT32_MAX, &x, &set) < 0) return -EINVAL;
    if (set) {
        if (x != (double)(uint32_t)x) return fail(f, "max_output_tokens", "must be an integer");
        j->params.max_tokens = (uint32_t)x;
    }
    if (field_bool(f, b, "stream", &j->stream) < 0 ||
        field_bool(f, b, "parallel_tool_calls", &parallel) < 0 ||
        parse_tools(f, j, json_object_get(b, "tools")) < 0 ||
        parse_tool_choice(f, j, json_object_get(b, "tool_choice")) < 0 ||
        parse_reasoning(f, j, json_object_get(b, "reasoning")) < 0 ||
        parse_text_format(f, j, json_object_get(b, "text")) < 0)
        return -EINVAL;
    j->params.max_tool_calls = parallel ? 0 : 1;
    return parse_input(f, j, b);
}

/* ---- the response object ------------------------------------------------------------------- */

/* Item ids share the response's random part: "resp_X" -> "msg_X", "rs_X", "fc_X_2". */
static void item_id(const struct gen_job *j, char *dst, size_t size, const char *prefix, int k) {
    const char *hex = j->id + strlen("resp_");
    if (k < 0) snprintf(dst, size, "%s%s", prefix, hex);
    else snprintf(dst, size, "%s%s_%d", prefix, hex, k);
}

static bool incomplete(const struct gen_job *j) {
    enum warm_stop_reason s = j->summary.stop_reason;
    return s == WARM_STOP_MAX_TOKENS || s == WARM_STOP_CONTEXT_FULL;
}

static json_t *usage(const struct warm_summary *s) {
    return json_pack("{s:I,s:{s:I},s:I,s:{s:I},s:I}", "input_tokens",
                     (json_int_t)s->prompt_tokens, "input_tokens_details", "cached_tokens",
                     (json_int_t)cached_tokens(s), "output_tokens",
                     (json_int_t)s->generated_tokens, "output_tokens_details",
                     "reasoning_tokens", (json_int_t)0, "total_tokens",
                     (json_int_t)s->prompt_tokens + s->generated_tokens);
}

/* The request's value of key (a new reference), or dflt (stolen) when it has none. */
static json_t *echo(const struct gen_job *j, const char *key, json_t *dflt) {
    json_t *v = json_object_get(j->body, key);
    if (!v || json_is_null(v)) return dflt;
    json_decref(dflt);
    return json_incref(v);
}

/* The response with output (stolen); status "in_progress" before the summary. */
static json_t *response_doc(struct gen_job *j, json_t *output, bool done) {
    const char *status = !done ? "in_progress" : incomplete(j) ? "incomplete" : "completed";
    json_t *doc = json_pack(
        "{s:s,s:s,s:I,s:s,s:n,s:o,s:o,s:s,s:o,s:o,s:b,s:n,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}",
        "id", j->id, "object", "response", "created_at", (json_int_t)j->created, "status", status,
        "error", "incomplete_details",
        done && incomplete(j) ? json_pack("{s:s}", "reason", "max_output_tokens") : json_null(),
        "instructions", echo(j, "instructions", json_null()), "model", j->model, "output", output,
        "max_output_tokens", echo(j, "max_output_tokens", json_null()), "parallel_tool_calls",
        j->params.max_tool_calls != 1, "previous_response_id", "reasoning",
        echo(j, "reasoning", json_pack("{s:n,s:n}", "effort", "summary")), "temperature",
        echo(j, "temperature", json_real(1)), "top_p", echo(j, "top_p", json_real(1)), "text",
        echo(j, "text", json_pack("{s:{s:s}}", "format", "type", "text")), "tool_choice",
        echo(j, "tool_choice", json_string("auto")), "tools", echo(j, "tools", json_array()),
        "metadata", echo(j, "metadata", json_object()), "usage",
        done ? usage(&j->summary) : json_null());
    if (doc) json_object_set_new(doc, "store", json_false());
    return doc;
}

static json_t *reasoning_item_doc(const struct gen_job *j, const char *text, size_t len) {
    char id[64];
    item_id(j, id, sizeof id, "rs_", -1);
    return json_pack("{s:s,s:s,s:[],s:[{s:s,s:o}]}", "type", "reasoning", "id", id, "summary",
                     "content", "type", "reasoning_text", "text", json_text(text, len));
}

static json_t *text_part(const char *text, size_t len) {
    return json_pack("{s:s,s:o,s:[]}", "type", "output_text", "text", json_text(text, len),
                     "annotations");
}

/* The message item; content NULL: an empty list (the item as it starts). */
static json_t *message_item_doc(const struct gen_job *j, json_t *content, const char *status) {
    char id[64];
    item_id(j, id, sizeof id, "msg_", -1);
    return json_pack("{s:s,s:s,s:s,s:s,s:o}", "type", "message", "id", id, "status", status,
                     "role", "assistant", "content", content ? content : json_array());
}

static json_t *call_item_doc(const struct gen_job *j, size_t k, const char *args,
                             const char *status) {
    const struct warm_tool_call *c = &j->summary.tool_calls[k];
    char id[64];
    item_id(j, id, sizeof id, "fc_", (int)k);
    return json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "type", "function_call", "id", id, "call_id",
                     c->id, "name", c->name, "arguments", args, "status", status);
}

static const char *call_args(const struct warm_tool_call *c) {
    return c->arguments ? c->arguments : "{}";
}

/* The output of a finished generation, from the texts gathered in j. */
static json_t *output_doc(struct gen_job *j) {
    const struct warm_summary *s = &j->summary;
    json_t *out = json_array();
    if (!out) return NULL;
    const char *status = incomplete(j) ? "incomplete" : "completed";
    if (j->reasoning_len)
        json_array_append_new(out, reasoning_item_doc(j, j->reasoning, j->reasoning_len));
    if (j->text_len || (!j->reasoning_len && !s->n_tool_calls))
        json_array_append_new(out, message_item_doc(
            j, json_pack("[o]", text_part(j->text ? j->text : "", j->text_len)), status));
    for (size_t i = 0; i < s->n_tool_calls; i++)
        json_array_append_new(out, call_item_doc(j, i, call_args(&s->tool_calls[i]), "completed"));
    return out;
}

static json_t *response_whole(struct gen_job *j) {
    return response_doc(j, output_doc(j), true);
}

/* ---- the stream ----------------------------------------------------------------------------- */

/* j->block_open is the kind of the output item being streamed, j->block_index its
 * output_index (or the next item's); j->seq the next sequence_number. While streaming, the
 * texts gather in j->text and j->reasoning for the .done events and the final response. */
enum item { ITEM_NONE, ITEM_REASONING, ITEM_MESSAGE, ITEM_CALL };

/* "event: TYPE\ndata: {type, sequence_number, ...doc}\n\n"; steals doc. */
static int emit_event(struct gen_job *j, const char *type, json_t *doc) {
    if (!doc) return -ENOMEM;
    if (json_object_set_new(doc, "type", json_string(type)) < 0 ||
        json_object_set_new(doc, "sequence_number", json_integer(j->seq++)) < 0) {
        json_decref(doc);
        return -ENOMEM;
    }
    char line[96];
    int n = snprintf(line, sizeof line, "event: %s\n", type);
    int r = gen_emit(j, line, (size_t)n);
    if (r < 0) {
        json_decref(doc);
        return r;
    }
    return gen_emit_json(j, doc, true);
}

static int append(char **buf, size_t *len, size_t *cap, const char *text, size_t n) {
    size_t need;
    if (!size_add(*len, n, &need) || !size_add(need, 1, &need)) return -ENOMEM;
    if (need > *cap) {
        size_t c = MAX(need, 2 * *cap);
        char *b = realloc(*buf, c);
        if (!b) return -ENOMEM;
        *buf = b;
        *cap = c;
    }
    memcpy(*buf + *len, text, n);
    *len += n;
    (*buf)[*len] = '\0';
    return 0;
}

static int stream_head(struct gen_job *j) {
    if (j->head_sent) return 0;
    j->head_sent = true;
    int r = emit_event(j, "response.created",
                       json_pack("{s:o}", "response", response_doc(j, json_array(), false)));
    if (r >= 0)
        r = emit_event(j, "response.in_progress",
                       json_pack("{s:o}", "response", response_doc(j, json_array(), false)));
    return r;
}

/* doc (stolen, returned) placed at the open item's first part: item_id, output_index and
 * content_index set. */
static json_t *part_at(const struct gen_job *j, json_t *doc) {
    char id[64];
    item_id(j, id, sizeof id, j->block_open == ITEM_REASONING ? "rs_" : "msg_", -1);
    if (doc) {
        json_object_set_new(doc, "item_id", json_string(id));
        json_object_set_new(doc, "output_index", json_integer(j->block_index));
        json_object_set_new(doc, "content_index", json_integer(0));
    }
    return doc;
}

/* A function_call item of call k (call_id, name) as it streams. */
static json_t *streamed_call_doc(const struct gen_job *j, unsigned k, const char *call_id,
                                 const char *name, const char *args, const char *status) {
    char id[64];
    item_id(j, id, sizeof id, "fc_", (int)k);
    return json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "type", "function_call", "id", id, "call_id",
                     call_id, "name", name, "arguments", args, "status", status);
}

/* The streamed call that is open (gen.c's j->call_*) is over. */
static int call_close(struct gen_job *j) {
    const char *args = j->call_args ? j->call_args : "";
    unsigned k = j->n_calls_streamed - 1;
    char id[64];
    item_id(j, id, sizeof id, "fc_", (int)k);
    int r = emit_event(j, "response.function_call_arguments.done", json_pack(
        "{s:s,s:i,s:s,s:s}", "item_id", id, "output_index", j->block_index, "name", j->call_name,
        "arguments", args));
    if (r >= 0)
        r = emit_event(j, "response.output_item.done", json_pack(
            "{s:i,s:o}", "output_index", j->block_index, "item",
            streamed_call_doc(j, k, j->call_id, j->call_name, args, "completed")));
    j->block_open = ITEM_NONE;
    j->block_index++;
    return r;
}

static int item_close(struct gen_job *j) {
    if (j->block_open == ITEM_NONE) return 0;
    if (j->block_open == ITEM_CALL) return call_close(j);
    bool reasoning = j->block_open == ITEM_REASONING;
    const char *text = reasoning ? j->reasoning : j->text;
    size_t len = reasoning ? j->reasoning_len : j->text_len;
    json_t *part = reasoning ? json_pack("{s:s,s:o}", "type", "reasoning_text", "text",
                                         json_text(text ? text : "", len))
                             : text_part(text ? text : "", len);
    int r = emit_event(j, reasoning ? "response.reasoning_text.done" : "response.output_text.done",
                       part_at(j, json_pack("{s:o}", "text", json_text(text ? text : "", len))));
    if (r >= 0)
        r = emit_event(j, "response.content_part.done",
                       part_at(j, json_pack("{s:O}", "part", part)));
    json_t *item = reasoning ? reasoning_item_doc(j, text ? text : "", len)
                             : message_item_doc(j, json_pack("[O]", part), "completed");
    json_decref(part);
    if (r >= 0)
        r = emit_event(j, "response.output_item.done", json_pack("{s:i,s:o}", "output_index",
                                                                 j->block_index, "item", item));
    else
        json_decref(item);
    j->block_open = ITEM_NONE;
    j->block_index++;
    return r;
}

static int item_open(struct gen_job *j, enum item kind) {
    j->block_open = kind;
    bool reasoning = kind == ITEM_REASONING;
    json_t *item = reasoning ? json_pack("{s:s,s:s,s:[],s:[]}", "type", "reasoning", "id", "",
                                         "summary", "content")
                             : message_item_doc(j, NULL, "in_progress");
    if (item && reasoning) {
        char id[64];
        item_id(j, id, sizeof id, "rs_", -1);
        json_object_set_new(item, "id", json_string(id));
    }
    int r = emit_event(j, "response.output_item.added", json_pack("{s:i,s:o}", "output_index",
                                                                  j->block_index, "item", item));
    if (r >= 0)
        r = emit_event(j, "response.content_part.added", part_at(j, json_pack(
            "{s:o}", "part", reasoning ? json_pack("{s:s,s:s}", "type", "reasoning_text",
                                                   "text", "")
                                       : text_part("", 0))));
    return r;
}

static int stream_delta(struct gen_job *j, enum item kind, const char *text, size_t len) {
    int r = stream_head(j);
    if (r < 0 || !len) return r;
    bool reasoning = kind == ITEM_REASONING;
    if (j->block_open != (int)kind) {
        r = item_close(j);
        if (r >= 0) r = item_open(j, kind);
        if (r < 0) return r;
    }
    r = reasoning ? append(&j->reasoning, &j->reasoning_len, &j->reasoning_cap, text, len)
                  : append(&j->text, &j->text_len, &j->text_cap, text, len);
    if (r < 0) return r;
    json_t *doc = part_at(j, json_pack("{s:o}", "delta", json_text(text, len)));
    if (doc && !reasoning) json_object_set_new(doc, "logprobs", json_array());
    return emit_event(j, reasoning ? "response.reasoning_text.delta" : "response.output_text.delta",
                      doc);
}

static int stream_piece(struct gen_job *j, const char *text, size_t len) {
    return stream_delta(j, ITEM_MESSAGE, text, len);
}

static int stream_thinking(struct gen_job *j, const char *text, size_t len) {
    return stream_delta(j, ITEM_REASONING, text, len);
}

/* A piece of a tool call: a call's first piece adds its function_call item, the
 * arguments' fragments are its response.function_call_arguments.delta events. */
static int stream_tool_call(struct gen_job *j, const struct warm_tool_call_delta *d) {
    int r = stream_head(j);
    if (r >= 0 && d->name) {
        r = item_close(j); /* the text, reasoning or call before (j still describes it) */
        if (r >= 0)
            r = emit_event(j, "response.output_item.added", json_pack(
                "{s:i,s:o}", "output_index", j->block_index, "item",
                streamed_call_doc(j, d->index, d->id ? d->id : "", d->name, "", "in_progress")));
        j->block_open = ITEM_CALL;
    }
    if (r >= 0 && d->len && j->block_open == ITEM_CALL) {
        char id[64];
        item_id(j, id, sizeof id, "fc_", (int)d->index);
        r = emit_event(j, "response.function_call_arguments.delta", json_pack(
            "{s:s,s:i,s:o}", "item_id", id, "output_index", j->block_index, "delta",
            json_text(d->arguments, d->len)));
    }
    return r;
}

static int stream_end(struct gen_job *j) {
    const struct warm_summary *s = &j->summary;
    int r = stream_head(j);
    /* An answer with nothing in it still has its (empty) message. */
    if (r >= 0 && j->block_index == 0 && j->block_open == ITEM_NONE && !s->n_tool_calls)
        r = item_open(j, ITEM_MESSAGE);
    if (r >= 0) r = item_close(j);
    /* the calls that did not stream come whole */
    for (size_t i = j->n_calls_streamed; r >= 0 && i < s->n_tool_calls; i++) {
        const char *args = call_args(&s->tool_calls[i]);
        char id[64];
        item_id(j, id, sizeof id, "fc_", (int)i);
        r = emit_event(j, "response.output_item.added", json_pack(
            "{s:i,s:o}", "output_index", j->block_index, "item",
            call_item_doc(j, i, "", "in_progress")));
        if (r >= 0)
            r = emit_event(j, "response.function_call_arguments.delta", json_pack(
                "{s:s,s:i,s:s}", "item_id", id, "output_index", j->block_index, "delta", args));
        if (r >= 0)
            r = emit_event(j, "response.function_call_arguments.done", json_pack(
                "{s:s,s:i,s:s,s:s}", "item_id", id, "output_index", j->block_index, "name",
                s->tool_calls[i].name, "arguments", args));
        if (r >= 0)
            r = emit_event(j, "response.output_item.done", json_pack(
                "{s:i,s:o}", "output_index", j->block_index, "item",
                call_item_doc(j, i, args, "completed")));
        j->block_index++;
    }
    if (r >= 0)
        r = emit_event(j, incomplete(j) ? "response.incomplete" : "response.completed",
                       json_pack("{s:o}", "response", response_whole(j)));
    return r;
}

static int stream_error(struct gen_job *j) {
    unsigned status = http_status_for(j->err.code);
    return emit_event(j, "error", json_pack("{s:s,s:s,s:o}", "code", openai_error_type(status),
                                            "message", j->err.message, "param",
                                            j->format_error && j->format_param
                                                ? json_string(j->format_param) : json_null()));
}

static const struct gen_ops responses_ops = {
    .content_type = "text/event-stream",
    .piece = stream_piece, .thinking = stream_thinking, .tool_call = stream_tool_call,
    .end = stream_end, .error = stream_error, .whole = response_whole,
};

/* ---- the handler ---------------------------------------------------------------------------- */

enum MHD_Result openai_responses(struct request *r) {
    struct field_ctx f = {.r = r};
    struct gen_job *j = gen_job_new(r, &responses_ops, API_OPENAI);
    if (!j) return reply_error(r, 503, NULL, "out of memory");
    j->chat = true;
    make_id(j->id, sizeof j->id, "resp_");
    if (parse_request(&f, j, r->json) < 0) {
        gen_job_free(j);
        return f.mhd;
    }
    return gen_run(r, j);
}
