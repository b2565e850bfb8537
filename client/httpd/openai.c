/* openai — the OpenAI API subset apps use with a local server: GET /v1/models,
 * POST /v1/chat/completions and /v1/completions, streamed (SSE ending in "data: [DONE]") or
 * whole, with the usage block (prompt_tokens_details.cached_tokens = prompt tokens warmd
 * took from RAM or from its prompt cache). A field that would change what a request means
 * and that warmd cannot honour (legacy functions, images, several choices, log
 * probabilities) is refused with a 400 naming it, never dropped; response_format (JSON
 * mode, a JSON Schema) constrains the output through warmd, whose refusal of a schema
 * keyword is a 400 naming it.
 *
 * Tools: tools, tool_choice ("auto", "none", "required", {"type": "function", "function":
 * {"name"}}) and parallel_tool_calls (false: at most one call) go to warmd, which writes
 * them into the model's template and parses the answer's calls: message.tool_calls
 * [{id, type "function", function {name, arguments as JSON text}}] with content null when
 * there is none, finish_reason "tool_calls"; streamed, each call as OpenAI streams it, as
 * the model writes it (a chunk with index, id, type and the name with empty arguments,
 * then the arguments' fragments) after the content. Messages carry tool_calls and role "tool" with
 * tool_call_id. A model whose template has no tool format answers 400 naming it.
 * Reasoning: a thinking family's reasoning is reasoning_content in the message and in
 * deltas (as llama-server and DeepSeek write it), and assistant messages may send it back;
 * reasoning_effort "none" or "minimal" turns thinking off (the Qwen templates have only on
 * and off), "low", "medium", "high" ("xhigh" as high) are gpt-oss's effort and turn the
 * Qwen templates' thinking on (models that do not think ignore them); llama-server's
 * chat_template_kwargs.enable_thinking false does the same as "none". Fields that only tune
 * delivery or bookkeeping (user, store, metadata, service_tier) are ignored. Errors have
 * OpenAI's shape: {"error": {"message", "type", "param", "code"}}. */
#include "httpd.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- field readers (shared with ollama.c) -------------------------------------------------- */

/* Answers 400: "'key' what". */
static int field_fail(struct field_ctx *f, const char *key, const char *what) {
    f->mhd = reply_error(f->r, 400, key, "'%s' %s", key, what);
    return -EINVAL;
}

int field_number(struct field_ctx *f, json_t *obj, const char *key, double lo, double hi,
                 double *ret, bool *ret_present) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return field_fail(f, key, "must be a number");
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) {
        char what[96];
        snprintf(what, sizeof what, "must be a number from %g to %g", lo, hi);
        return field_fail(f, key, what);
    }
    *ret = x;
    if (ret_present) *ret_present = true;
    return 0;
}

static int field_int(struct field_ctx *f, json_t *obj, const char *key, double lo, double hi,
                     int64_t *ret, bool *ret_present) {
    double x = 0;
    bool present = false;
    int r = field_number(f, obj, key, lo, hi, &x, &present);
    if (r < 0 || !present) return r;
    if (x != floor(x)) return field_fail(f, key, "must be an integer");
    *ret = (int64_t)x;
    if (ret_present) *ret_present = true;
    return 0;
}

int field_bool(struct field_ctx *f, json_t *obj, const char *key, bool *ret) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return field_fail(f, key, "must be true or false");
    *ret = json_is_true(v);
    return 0;
}

int field_string(struct field_ctx *f, json_t *obj, const char *key, const char **ret) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) return field_fail(f, key, "must be a string");
    *ret = json_string_value(v);
    return 0;
}

int field_stop(struct field_ctx *f, json_t *obj, const char *key, size_t max, struct gen_job *j) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    size_t n = 0;
    if (json_is_string(v)) {
        j->stop[n++] = json_string_value(v);
    } else if (json_is_array(v) && json_array_size(v) <= max && max <= HTTPD_MAX_STOP) {
        size_t i;
        json_t *s;
        json_array_foreach(v, i, s) {
            if (!json_is_string(s) || !*json_string_value(s))
                return field_fail(f, key, "must hold non-empty strings");
            j->stop[n++] = json_string_value(s);
        }
    } else {
        char what[96];
        snprintf(what, sizeof what, "must be a string or an array of at most %zu strings", max);
        return field_fail(f, key, what);
    }
    for (size_t i = n; i < HTTPD_MAX_STOP; i++) j->stop[i] = NULL;
    return 0;
}

int field_schema(struct field_ctx *f, struct gen_job *j, json_t *schema, const char *param) {
    j->format_param = param;
    if (!schema) {
        j->params.json_schema = WARM_JSON_OBJECT;
        return 0;
    }
    if (!json_is_object(schema) && !json_is_boolean(schema))
        return field_fail(f, param, "must be a JSON Schema (an object)");
    char *text = gen_job_keep(j, json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY));
    if (!text) {
        f->mhd = reply_error(f->r, 503, NULL, "out of memory");
        return -ENOMEM;
    }
    j->params.json_schema = text;
    return 0;
}

/* response_format: {"type": "text"} (free text), {"type": "json_object"} (JSON mode: one
 * object) or {"type": "json_schema", "json_schema": {"name", "schema", "strict",
 * "description"}}: the output is valid under schema whatever strict says (no schema: one
 * object). */
static int parse_response_format(struct field_ctx *f, json_t *b, struct gen_job *j) {
    json_t *rf = json_object_get(b, "response_format");
    if (!rf || json_is_null(rf)) return 0;
    if (!json_is_object(rf)) return field_fail(f, "response_format", "must be an object");
    const char *type = json_string_value(json_object_get(rf, "type"));
    if (type && strcmp(type, "text") == 0) return 0;
    if (type && strcmp(type, "json_object") == 0)
        return field_schema(f, j, NULL, "response_format");
    if (!type || strcmp(type, "json_schema") != 0)
        return field_fail(f, "response_format.type", "must be text, json_object or json_schema");
    json_t *js = json_object_get(rf, "json_schema");
    if (!json_is_object(js))
        return field_fail(f, "response_format.json_schema", "must be an object holding "
                          "'name' and 'schema'");
    json_t *schema = json_object_get(js, "schema");
    if (json_is_null(schema)) schema = NULL;
    return field_schema(f, j, schema, "response_format.json_schema.schema");
}

const char *request_model(struct request *r, const char *name, char buf[HTTPD_MODEL_MAX]) {
    static const char latest[] = ":latest";
    if (!name || !*name) return *r->h->cfg.default_model ? r->h->cfg.default_model : NULL;
    size_t n = strlen(name), l = sizeof latest - 1;
    if (n <= l || strcmp(name + n - l, latest) != 0) return name;
    /* Ollama clients append the tag; warmd's names are file stems. */
    snprintf(buf, HTTPD_MODEL_MAX, "%.*s", (int)(n - l), name);
    return buf;
}

json_t *json_text(const char *s, size_t n) {
    json_t *v = json_stringn(s, n);
    if (v) return v;
    /* Not UTF-8 (a model can emit any bytes): each bad byte becomes U+FFFD. */
    char *out = malloc(3 * n + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        json_t *t = len && i + len <= n ? json_stringn(s + i, len) : NULL;
        if (t) {
            json_decref(t);
            memcpy(out + o, s + i, len);
            o += len;
            i += len;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    v = json_stringn(out, o);
    free(out);
    return v;
}

/* ---- what warmd cannot honour -------------------------------------------------------------- */

enum refusal { REF_NONEMPTY, REF_TRUE, REF_ABOVE_ONE, REF_ABOVE_ZERO, REF_NOT_NULL, REF_NOT_TEXT,
               REF_TOOL_CHOICE };

struct refused_field {
    const char *name;
    enum refusal when;
    const char *why;
};

static const struct refused_field chat_refused[] = {
    {"functions", REF_NONEMPTY, "use 'tools' (the legacy 'functions' are not supported)"},
    {"function_call", REF_TOOL_CHOICE, "use 'tool_choice' (the legacy 'function_call' is not "
                                       "supported)"},
    {"n", REF_ABOVE_ONE, "warmd returns one choice per request"},
    {"logprobs", REF_TRUE, "warmd does not return log probabilities"},
    {"top_logprobs", REF_ABOVE_ZERO, "warmd does not return log probabilities"},
    {"logit_bias", REF_NONEMPTY, "warmd does not bias logits"},
    {"audio", REF_NOT_NULL, "warmd's models answer with text only"},
    {"modalities", REF_NOT_TEXT, "warmd's models answer with text only"},
    {"prediction", REF_NOT_NULL, "warmd does not take predicted outputs"},
};

static const struct refused_field completion_refused[] = {
    {"n", REF_ABOVE_ONE, "warmd returns one choice per request"},
    {"best_of", REF_ABOVE_ONE, "warmd returns one choice per request"},
    {"logprobs", REF_ABOVE_ZERO, "warmd does not return log probabilities"},
    {"echo", REF_TRUE, "warmd does not echo the prompt"},
    {"suffix", REF_NONEMPTY, "warmd does not fill in the middle"},
    {"logit_bias", REF_NONEMPTY, "warmd does not bias logits"},
};

static bool refused(const struct refused_field *f, json_t *v) {
    if (!v || json_is_null(v)) return false;
    switch (f->when) {
    case REF_NONEMPTY:
        return !((json_is_array(v) && json_array_size(v) == 0) ||
                 (json_is_object(v) && json_object_size(v) == 0) ||
                 (json_is_string(v) && !*json_string_value(v)));
    case REF_TRUE: return !json_is_false(v) && !(json_is_number(v) && json_number_value(v) == 0);
    case REF_ABOVE_ONE: return !json_is_number(v) || json_number_value(v) > 1;
    case REF_ABOVE_ZERO: return !json_is_number(v) || json_number_value(v) > 0;
    case REF_NOT_NULL: return true;
    case REF_TOOL_CHOICE:
        return !(json_is_string(v) && (strcmp(json_string_value(v), "none") == 0 ||
                                       strcmp(json_string_value(v), "auto") == 0));
    case REF_NOT_TEXT:
        if (json_is_object(v)) {
            const char *t = json_string_value(json_object_get(v, "type"));
            return !t || strcmp(t, "text") != 0;
        }
        if (json_is_array(v)) {
            size_t i;
            json_t *m;
            json_array_foreach(v, i, m) if (!json_is_string(m) || strcmp(json_string_value(m), "text"))
                return true;
            return false;
        }
        return true;
    }
    return true;
}

static int check_refused(struct field_ctx *f, json_t *body, const struct refused_field *rows,
                         size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (!refused(&rows[i], json_object_get(body, rows[i].name))) continue;
        f->mhd = reply_error(f->r, 400, rows[i].name, "'%s' is not supported: %s; remove it from "
                             "the request", rows[i].name, rows[i].why);
        return -EINVAL;
    }
    return 0;
}

/* ---- the common request fields -------------------------------------------------------------- */

static int parse_common(struct field_ctx *f, json_t *b, struct gen_job *j) {
    struct warm_sampling *s = &j->sampling;
    double x;
    bool set = false;
    int64_t i64 = 0;
    if (field_number(f, b, "temperature", 0, 2, &x, &set) < 0) return -EINVAL;
    if (set) s->temperature = (float)x, set = false;
    if (field_number(f, b, "top_p", 0, 1, &x, &set) < 0) return -EINVAL;
    if (set) s->top_p = (float)x, set = false;
    if (field_number(f, b, "presence_penalty", -2, 2, &x, &set) < 0) return -EINVAL;
    if (set) s->presence_penalty = (float)x, set = false;
    if (field_number(f, b, "frequency_penalty", -2, 2, &x, &set) < 0) return -EINVAL;
    if (set) s->frequency_penalty = (float)x, set = false;
    /* llama.cpp server's extensions, which several apps send. */
    if (field_int(f, b, "top_k", 0, 1 << 20, &i64, &set) < 0) return -EINVAL;
    if (set) s->top_k = (int32_t)i64, set = false;
    if (field_number(f, b, "min_p", 0, 1, &x, &set) < 0) return -EINVAL;
    if (set) s->min_p = (float)x, set = false;
    if (field_number(f, b, "repeat_penalty", 0, 10, &x, &set) < 0) return -EINVAL;
    if (set) s->repeat_penalty = (float)x, set = false;
    if (field_int(f, b, "seed", -9.2e18, 9.2e18, &i64, &set) < 0) return -EINVAL;
    /* warmd reads seed 0 as "pick one": keep OpenAI's fixed seed 0 fixed. */
    if (set) s->seed = i64 ? (uint64_t)i64 : UINT64_MAX, set = false;
    const char *max_keys[] = {"max_completion_tokens", "max_tokens"};
    for (size_t k = 0; k < ARRAY_SIZE(max_keys) && !set; k++) {
        if (field_int(f, b, max_keys[k], 1, UINT32_MAX, &i64, &set) < 0) return -EINVAL;
        if (set) j->params.max_tokens = (uint32_t)i64;
    }
    if (field_stop(f, b, "stop", HTTPD_MAX_STOP, j) < 0) return -EINVAL;
    if (field_bool(f, b, "stream", &j->stream) < 0) return -EINVAL;
    json_t *so = json_object_get(b, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) {
            f->mhd = reply_error(f->r, 400, "stream_options", "'stream_options' must be an object");
            return -EINVAL;
        }
        if (field_bool(f, so, "include_usage", &j->include_usage) < 0) return -EINVAL;
    }
    const char *model = NULL;
    if (field_string(f, b, "model", &model) < 0) return -EINVAL;
    snprintf(j->model, sizeof j->model, "%s", model ? model : "");
    j->params.model = request_model(f->r, model, j->model_buf);
    return 0;
}

/* ---- replies -------------------------------------------------------------------------------- */

static json_t *usage(const struct warm_summary *s) {
    return json_pack("{s:I,s:I,s:I,s:{s:I},s:{s:I}}", "prompt_tokens", (json_int_t)s->prompt_tokens,
                     "completion_tokens", (json_int_t)s->generated_tokens, "total_tokens",
                     (json_int_t)s->prompt_tokens + s->generated_tokens, "prompt_tokens_details",
                     "cached_tokens", (json_int_t)cached_tokens(s), "completion_tokens_details",
                     "reasoning_tokens", (json_int_t)0);
}

static json_t *base(const struct gen_job *j, const char *object) {
    return json_pack("{s:s,s:s,s:I,s:s}", "id", j->id, "object", object, "created",
                     (json_int_t)j->created, "model", j->model);
}

/* One streamed chunk around choice (stolen); "usage": null on every chunk once the client
 * asked for the usage chunk, as OpenAI does. */
static int emit_chunk(struct gen_job *j, const char *object, json_t *choice) {
    json_t *c = base(j, object);
    if (!c || !choice) {
        json_decref(c);
        json_decref(choice);
        return -ENOMEM;
    }
    json_object_set_new(c, "choices", json_pack("[o]", choice));
    if (j->include_usage) json_object_set_new(c, "usage", json_null());
    return gen_emit_json(j, c, true);
}

static int emit_end(struct gen_job *j, const char *object, json_t *last_choice) {
    int r = emit_chunk(j, object, last_choice);
    if (r >= 0 && j->include_usage) {
        json_t *c = base(j, object);
        if (!c) return -ENOMEM;
        json_object_set_new(c, "choices", json_array());
        json_object_set_new(c, "usage", usage(&j->summary));
        r = gen_emit_json(j, c, true);
    }
    if (r >= 0) r = gen_emit(j, "data: [DONE]\n\n", 14);
    return r;
}

static int emit_error(struct gen_job *j) {
    unsigned status = http_status_for(j->err.code);
    return gen_emit_json(j, json_pack("{s:{s:s,s:s,s:n,s:s}}", "error", "message", j->err.message,
                                      "type", openai_error_type(status), "param", "code",
                                      warm_code_name(j->err.code)), true);
}

static int chat_head(struct gen_job *j) {
    if (j->head_sent) return 0;
    j->head_sent = true;
    return emit_chunk(j, "chat.completion.chunk",
                      json_pack("{s:i,s:{s:s,s:s},s:n,s:n}", "index", 0, "delta", "role",
                                "assistant", "content", "", "logprobs", "finish_reason"));
}

static int chat_delta(struct gen_job *j, const char *key, const char *text, size_t len) {
    int r = chat_head(j);
    if (r < 0 || !len) return r;
    return emit_chunk(j, "chat.completion.chunk",
                      json_pack("{s:i,s:{s:o},s:n,s:n}", "index", 0, "delta", key,
                                json_text(text, len), "logprobs", "finish_reason"));
}

static int chat_piece(struct gen_job *j, const char *text, size_t len) {
    return chat_delta(j, "content", text, len);
}

static int chat_thinking(struct gen_job *j, const char *text, size_t len) {
    return chat_delta(j, "reasoning_content", text, len);
}

/* One tool call as OpenAI writes it in a message (or, with index, in a delta). */
static json_t *tool_call_doc(const struct warm_tool_call *c, json_t *index, const char *args) {
    json_t *d = json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", c->id, "type", "function", "function",
                          "name", c->name, "arguments", args);
    if (d && index) json_object_set_new(d, "index", index);
    return d;
}

/* A piece of a tool call as OpenAI streams one: the first with index, id, type and the
 * name (arguments ""), then the arguments' fragments. */
static int chat_tool_call(struct gen_job *j, const struct warm_tool_call_delta *d) {
    int r = chat_head(j);
    if (r >= 0 && d->name) {
        const struct warm_tool_call c = {.id = d->id ? d->id : "", .name = d->name};
        r = emit_chunk(j, "chat.completion.chunk", json_pack(
            "{s:i,s:{s:[o]},s:n,s:n}", "index", 0, "delta", "tool_calls",
            tool_call_doc(&c, json_integer(d->index), ""), "logprobs", "finish_reason"));
    }
    if (r >= 0 && d->len)
        r = emit_chunk(j, "chat.completion.chunk", json_pack(
            "{s:i,s:{s:[{s:I,s:{s:o}}]},s:n,s:n}", "index", 0, "delta", "tool_calls", "index",
            (json_int_t)d->index, "function", "arguments", json_text(d->arguments, d->len),
            "logprobs", "finish_reason"));
    return r;
}

static int chat_end(struct gen_job *j) {
    int r = chat_head(j);
    const struct warm_summary *s = &j->summary;
    /* the calls that did not stream (a daemon that does not send them) come whole */
    for (size_t i = j->n_calls_streamed; r >= 0 && i < s->n_tool_calls; i++) {
        /* the name first, then the arguments, as OpenAI streams a call */
        r = emit_chunk(j, "chat.completion.chunk", json_pack(
            "{s:i,s:{s:[o]},s:n,s:n}", "index", 0, "delta", "tool_calls",
            tool_call_doc(&s->tool_calls[i], json_integer((json_int_t)i), ""), "logprobs",
            "finish_reason"));
        if (r >= 0)
            r = emit_chunk(j, "chat.completion.chunk", json_pack(
                "{s:i,s:{s:[{s:I,s:{s:s}}]},s:n,s:n}", "index", 0, "delta", "tool_calls",
                "index", (json_int_t)i, "function", "arguments", s->tool_calls[i].arguments,
                "logprobs", "finish_reason"));
    }
    if (r < 0) return r;
    return emit_end(j, "chat.completion.chunk",
                    json_pack("{s:i,s:{},s:n,s:s}", "index", 0, "delta", "logprobs",
                              "finish_reason", finish_reason(s->stop_reason)));
}

static json_t *chat_whole(struct gen_job *j) {
    json_t *d = base(j, "chat.completion");
    if (!d) return NULL;
    const struct warm_summary *s = &j->summary;
    json_t *msg = json_pack("{s:s,s:n}", "role", "assistant", "refusal");
    if (!msg) {
        json_decref(d);
        return NULL;
    }
    /* OpenAI: content null when the answer is only tool calls */
    json_object_set_new(msg, "content", s->n_tool_calls && !j->text_len
                                            ? json_null()
                                            : json_text(j->text ? j->text : "", j->text_len));
    if (j->reasoning_len)
        json_object_set_new(msg, "reasoning_content", json_text(j->reasoning, j->reasoning_len));
    if (s->n_tool_calls) {
        json_t *calls = json_array();
        for (size_t i = 0; i < s->n_tool_calls; i++)
            json_array_append_new(calls, tool_call_doc(&s->tool_calls[i], NULL,
                                                       s->tool_calls[i].arguments));
        json_object_set_new(msg, "tool_calls", calls);
    }
    json_object_set_new(d, "choices", json_pack("[{s:i,s:o,s:n,s:s}]", "index", 0, "message",
                                                msg, "logprobs", "finish_reason",
                                                finish_reason(s->stop_reason)));
    json_object_set_new(d, "usage", usage(s));
    return d;
}

static const struct gen_ops chat_ops = {
    .content_type = "text/event-stream",
    .piece = chat_piece, .thinking = chat_thinking, .tool_call = chat_tool_call,
    .end = chat_end, .error = emit_error, .whole = chat_whole,
};

/* ---- tools and reasoning ---------------------------------------------------------------- */

int field_tools(struct field_ctx *f, struct gen_job *j, json_t *tools) {
    if (!tools || json_is_null(tools) || (json_is_array(tools) && json_array_size(tools) == 0))
        return 0;
    if (!json_is_array(tools)) return field_fail(f, "tools", "must be an array of tools");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char key[64];
        const char *type = json_string_value(json_object_get(t, "type"));
        json_t *fn = json_object_get(t, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        snprintf(key, sizeof key, "tools[%zu]", i);
        if (!json_is_object(t) || (type && strcmp(type, "function") != 0) || !name || !*name) {
            f->mhd = reply_error(f->r, 400, key, "'%s' must be {\"type\": \"function\", "
                                 "\"function\": {\"name\", \"description\", \"parameters\"}} "
                                 "(function tools only)", key);
            return -EINVAL;
        }
        json_t *params = json_object_get(fn, "parameters");
        if (params && !json_is_null(params) && !json_is_object(params)) {
            snprintf(key, sizeof key, "tools[%zu].function.parameters", i);
            return field_fail(f, key, "must be a JSON Schema object");
        }
    }
    char *text = gen_job_keep(j, json_dumps(tools, JSON_COMPACT));
    if (!text) {
        f->mhd = reply_error(f->r, 503, NULL, "out of memory");
        return -ENOMEM;
    }
    j->params.tools_json = text;
    return 0;
}

int field_tool_choice(struct field_ctx *f, struct gen_job *j, json_t *tc) {
    if (tc && !json_is_null(tc)) {
        const char *s = json_string_value(tc);
        json_t *fn = json_object_get(tc, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        /* Responses' {"type": "function", "name"} (the AI SDK's Ollama provider sends it) */
        if (!fn && json_is_object(tc)) name = json_string_value(json_object_get(tc, "name"));
        if (s && strcmp(s, "auto") == 0) j->params.tool_choice = WARM_TOOLS_AUTO;
        else if (s && strcmp(s, "none") == 0) j->params.tool_choice = WARM_TOOLS_NONE;
        else if (s && strcmp(s, "required") == 0) j->params.tool_choice = WARM_TOOLS_REQUIRED;
        else if (json_is_object(tc) && name && *name) {
            j->params.tool_choice = WARM_TOOLS_FUNCTION;
            j->params.tool_choice_name = name;
        } else {
            return field_fail(f, "tool_choice", "must be \"auto\", \"none\", \"required\" or "
                              "{\"type\": \"function\", \"function\": {\"name\": ...}}");
        }
        if (j->params.tool_choice >= WARM_TOOLS_REQUIRED && !j->params.tools_json)
            return field_fail(f, "tool_choice", "needs 'tools' to choose from");
    }
    return 0;
}

/* tools, tool_choice, parallel_tool_calls, reasoning_effort and llama-server's
 * chat_template_kwargs.enable_thinking. */
static int parse_tool_fields(struct field_ctx *f, json_t *b, struct gen_job *j) {
    if (field_tools(f, j, json_object_get(b, "tools")) < 0 ||
        field_tool_choice(f, j, json_object_get(b, "tool_choice")) < 0)
        return -EINVAL;
    bool parallel = true;
    if (field_bool(f, b, "parallel_tool_calls", &parallel) < 0) return -EINVAL;
    j->params.max_tool_calls = parallel ? 0 : 1;
    const char *effort = NULL;
    if (field_string(f, b, "reasoning_effort", &effort) < 0) return -EINVAL;
    if (effort) {
        static const char *const known[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
        bool ok = false;
        for (size_t i = 0; i < ARRAY_SIZE(known); i++) ok = ok || strcmp(effort, known[i]) == 0;
        if (!ok)
            return field_fail(f, "reasoning_effort", "must be none, minimal, low, medium or high");
        if (strcmp(effort, "none") == 0 || strcmp(effort, "minimal") == 0)
            j->params.think = WARM_THINK_OFF;
        else
            j->params.think = strcmp(effort, "low") == 0      ? WARM_THINK_LOW
                              : strcmp(effort, "medium") == 0 ? WARM_THINK_MEDIUM
                                                              : WARM_THINK_HIGH;
    }
    json_t *enable = json_object_get(json_object_get(b, "chat_template_kwargs"), "enable_thinking");
    if (json_is_false(enable)) j->params.think = WARM_THINK_OFF;
    return 0;
}

static int completion_piece(struct gen_job *j, const char *text, size_t len) {
    j->head_sent = true;
    if (!len) return 0;
    return emit_chunk(j, "text_completion",
                      json_pack("{s:o,s:i,s:n,s:n}", "text", json_text(text, len), "index", 0,
                                "logprobs", "finish_reason"));
}

static int completion_end(struct gen_job *j) {
    return emit_end(j, "text_completion",
                    json_pack("{s:s,s:i,s:n,s:s}", "text", "", "index", 0, "logprobs",
                              "finish_reason", finish_reason(j->summary.stop_reason)));
}

static json_t *completion_whole(struct gen_job *j) {
    json_t *d = base(j, "text_completion");
    if (!d) return NULL;
    json_object_set_new(d, "choices", json_pack(
        "[{s:o,s:i,s:n,s:s}]", "text", json_text(j->text ? j->text : "", j->text_len), "index", 0,
        "logprobs", "finish_reason", finish_reason(j->summary.stop_reason)));
    json_object_set_new(d, "usage", usage(&j->summary));
    return d;
}

static const struct gen_ops completion_ops = {
    .content_type = "text/event-stream",
    .piece = completion_piece, .end = completion_end, .error = emit_error,
    .whole = completion_whole,
};

/* ---- messages ------------------------------------------------------------------------------- */

/* The text of a message's content: a string, or an array of text parts (joined by new
 * lines); any other part (images, audio, files) is refused by name. */
static int message_text(struct field_ctx *f, struct gen_job *j, json_t *content, size_t i,
                        const char **ret) {
    char key[128];
    if (!content || json_is_null(content)) {
        *ret = "";
        return 0;
    }
    if (json_is_string(content)) {
        *ret = json_string_value(content);
        return 0;
    }
    snprintf(key, sizeof key, "messages[%zu].content", i);
    if (!json_is_array(content)) {
        f->mhd = reply_error(f->r, 400, key, "'%s' must be a string or an array of parts", key);
        return -EINVAL;
    }
    size_t total = 1, k;
    json_t *part;
    json_array_foreach(content, k, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        const char *text = json_string_value(json_object_get(part, "text"));
        if (!type || strcmp(type, "text") != 0 || !text) {
            snprintf(key, sizeof key, "messages[%zu].content[%zu].type", i, k);
            f->mhd = reply_error(f->r, 400, key, "'%s' is '%s': only text parts are supported "
                                 "(warmd's models read text only)", key, type ? type : "missing");
            return -EINVAL;
        }
        total += strlen(text) + 1;
    }
    char *s = gen_job_keep(j, malloc(total));
    if (!s) {
        f->mhd = reply_error(f->r, 503, NULL, "out of memory");
        return -ENOMEM;
    }
    size_t o = 0;
    json_array_foreach(content, k, part) {
        const char *text = json_string_value(json_object_get(part, "text"));
        if (k) s[o++] = '\n';
        memcpy(s + o, text, strlen(text));
        o += strlen(text);
    }
    s[o] = '\0';
    *ret = s;
    return 0;
}

static const struct {
    const char *role, *as;
} roles[] = {{"system", "system"}, {"developer", "system"}, {"user", "user"},
             {"assistant", "assistant"}, {"tool", "tool"}};

/* Parts of a message warmd cannot take (a non-empty array refuses the request). */
static const struct {
    const char *name, *why;
} message_refused[] = {
    {"images", "warmd's models read text only"},
};

/* An assistant message's tool_calls into j->calls[*at...]: OpenAI's arguments are JSON text,
 * Ollama's an object. */
static int message_calls(struct field_ctx *f, struct gen_job *j, json_t *calls, size_t i,
                         size_t *at) {
    size_t k;
    json_t *c;
    json_array_foreach(calls, k, c) {
        char key[96];
        json_t *fn = json_object_get(c, "function"), *args = json_object_get(fn, "arguments");
        const char *name = json_string_value(json_object_get(fn, "name"));
        snprintf(key, sizeof key, "messages[%zu].tool_calls[%zu].function", i, k);
        if (!name || !*name || (args && !json_is_null(args) && !json_is_string(args) &&
                                !json_is_object(args))) {
            f->mhd = reply_error(f->r, 400, key, "'%s' must have a name and arguments (a JSON "
                                 "object, or its text)", key);
            return -EINVAL;
        }
        const char *text = json_string_value(args);
        if (json_is_object(args)) text = gen_job_keep(j, json_dumps(args, JSON_COMPACT));
        else if (!text || !*text) text = "{}";
        if (!text) {
            f->mhd = reply_error(f->r, 503, NULL, "out of memory");
            return -ENOMEM;
        }
        j->calls[(*at)++] = (struct warm_tool_call){
            .id = json_string_value(json_object_get(c, "id")), .name = name, .arguments = text};
    }
    return 0;
}

int parse_messages(struct field_ctx *f, struct gen_job *j, json_t *msgs) {
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        f->mhd = reply_error(f->r, 400, "messages", "'messages' must be a non-empty array");
        return -EINVAL;
    }
    j->msgs = calloc(json_array_size(msgs), sizeof *j->msgs);
    size_t i, n_calls = 0;
    json_t *m;
    json_array_foreach(msgs, i, m) n_calls += json_array_size(json_object_get(m, "tool_calls"));
    j->calls = calloc(n_calls ? n_calls : 1, sizeof *j->calls);
    if (!j->msgs || !j->calls) {
        f->mhd = reply_error(f->r, 503, NULL, "out of memory");
        return -ENOMEM;
    }
    size_t at = 0;
    json_array_foreach(msgs, i, m) {
        char key[128];
        snprintf(key, sizeof key, "messages[%zu].role", i);
        const char *role = json_string_value(json_object_get(m, "role")), *as = NULL;
        for (size_t k = 0; role && k < ARRAY_SIZE(roles); k++)
            if (strcmp(role, roles[k].role) == 0) as = roles[k].as;
        if (!as) {
            f->mhd = reply_error(f->r, 400, key, "'%s' is '%s': only system, developer, user, "
                                 "assistant and tool messages are supported", key,
                                 role ? role : "missing");
            return -EINVAL;
        }
        for (size_t k = 0; k < ARRAY_SIZE(message_refused); k++) {
            if (json_array_size(json_object_get(m, message_refused[k].name)) == 0) continue;
            snprintf(key, sizeof key, "messages[%zu].%s", i, message_refused[k].name);
            f->mhd = reply_error(f->r, 400, key, "'%s' is not supported: %s", key,
                                 message_refused[k].why);
            return -EINVAL;
        }
        const char *text;
        if (message_text(f, j, json_object_get(m, "content"), i, &text) < 0) return -EINVAL;
        j->msgs[i] = (struct warm_chat_message){.role = as, .content = text};
        json_t *calls = json_object_get(m, "tool_calls");
        if (json_array_size(calls) && strcmp(as, "assistant") == 0) {
            j->msgs[i].tool_calls = &j->calls[at];
            j->msgs[i].n_tool_calls = json_array_size(calls);
            if (message_calls(f, j, calls, i, &at) < 0) return -EINVAL;
        }
        /* the reasoning as OpenAI-compatible servers (reasoning_content) and Ollama
         * (thinking) send it back */
        const char *reasoning = json_string_value(json_object_get(m, "reasoning_content"));
        if (!reasoning) reasoning = json_string_value(json_object_get(m, "thinking"));
        if (reasoning && *reasoning) j->msgs[i].reasoning = reasoning;
        j->msgs[i].tool_call_id = json_string_value(json_object_get(m, "tool_call_id"));
        j->msgs[i].name = json_string_value(json_object_get(m, "tool_name"));
        if (!j->msgs[i].name) j->msgs[i].name = json_string_value(json_object_get(m, "name"));
    }
    j->n_msgs = json_array_size(msgs);
    return 0;
}

/* ---- handlers ------------------------------------------------------------------------------- */

enum MHD_Result openai_chat(struct request *r) {
    struct field_ctx f = {.r = r};
    struct gen_job *j = gen_job_new(r, &chat_ops, API_OPENAI);
    if (!j) return reply_error(r, 503, NULL, "out of memory");
    j->chat = true;
    make_id(j->id, sizeof j->id, "chatcmpl-");
    if (check_refused(&f, r->json, chat_refused, ARRAY_SIZE(chat_refused)) < 0 ||
        parse_common(&f, r->json, j) < 0 || parse_response_format(&f, r->json, j) < 0 ||
        parse_tool_fields(&f, r->json, j) < 0 ||
        parse_messages(&f, j, json_object_get(r->json, "messages")) < 0) {
        gen_job_free(j);
        return f.mhd;
    }
    return gen_run(r, j);
}

/* prompt: a string, one string in an array, token ids, or one array of token ids. */
static int parse_prompt(struct field_ctx *f, struct gen_job *j, json_t *p) {
    if (json_is_array(p) && json_array_size(p) == 1 &&
        (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
        p = json_array_get(p, 0);
    if (json_is_string(p)) {
        j->prompt = json_string_value(p);
        return 0;
    }
    if (json_is_array(p) && json_array_size(p) > 0) {
        j->tokens = calloc(json_array_size(p), sizeof *j->tokens);
        if (!j->tokens) return -ENOMEM;
        size_t i;
        json_t *t;
        json_array_foreach(p, i, t) {
            if (!json_is_integer(t) || json_integer_value(t) < 0 ||
                json_integer_value(t) > INT32_MAX) {
                f->mhd = reply_error(f->r, 400, "prompt", "'prompt' must be a string, token ids, "
                                     "or an array holding one of them (one prompt per request)");
                return -EINVAL;
            }
            j->tokens[i] = (int32_t)json_integer_value(t);
        }
        j->n_tokens = json_array_size(p);
        return 0;
    }
    f->mhd = reply_error(f->r, 400, "prompt", "'prompt' must be a string, token ids, or an array "
                         "holding one of them (one prompt per request)");
    return -EINVAL;
}

enum MHD_Result openai_completions(struct request *r) {
    struct field_ctx f = {.r = r};
    struct gen_job *j = gen_job_new(r, &completion_ops, API_OPENAI);
    if (!j) return reply_error(r, 503, NULL, "out of memory");
    make_id(j->id, sizeof j->id, "cmpl-");
    /* OpenAI's default for the legacy endpoint is 16 tokens. */
    j->params.max_tokens = 16;
    if (check_refused(&f, r->json, completion_refused, ARRAY_SIZE(completion_refused)) < 0 ||
        parse_common(&f, r->json, j) < 0 || parse_response_format(&f, r->json, j) < 0 ||
        parse_prompt(&f, j, json_object_get(r->json, "prompt")) < 0) {
        gen_job_free(j);
        return f.mhd;
    }
    return gen_run(r, j);
}

static json_t *model_doc(const struct warm_model_info *m) {
    return json_pack("{s:s,s:s,s:I,s:s}", "id", m->name, "object", "model", "created",
                     (json_int_t)(m->modified_usec / 1000000), "owned_by", "warmd");
}

/* The models the caller may see (warmd's ListModels as that user). */
static int list_models(struct request *r, enum MHD_Result *m, struct warm_model_info **ret,
                       size_t *ret_n) {
    struct client_ref *c = request_client(r, m);
    if (!c) return -1;
    struct warm_error e;
    int rc = warm_models_list(client_ref_client(c), ret, ret_n, &e);
    clients_put(&r->h->clients, c);
    if (rc < 0) *m = reply_warm_error(r, &e);
    return rc;
}

enum MHD_Result openai_models(struct request *r) {
    enum MHD_Result m;
    struct warm_model_info *models;
    size_t n;
    if (list_models(r, &m, &models, &n) < 0) return m;
    json_t *data = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(data, model_doc(&models[i]));
    warm_free(models);
    return reply_json(r, 200, json_pack("{s:s,s:o}", "object", "list", "data", data));
}

enum MHD_Result openai_model(struct request *r) {
    enum MHD_Result m;
    struct warm_model_info *models;
    size_t n;
    const char *name = r->url + strlen("/v1/models/");
    if (list_models(r, &m, &models, &n) < 0) return m;
    json_t *doc = NULL;
    for (size_t i = 0; i < n && !doc; i++)
        if (strcmp(models[i].name, name) == 0) doc = model_doc(&models[i]);
    warm_free(models);
    if (!doc) return reply_error(r, 404, "model", "The model '%s' does not exist", name);
    return reply_json(r, 200, doc);
}
