/* openai — the OpenAI API subset apps use with a local server: GET /v1/models,
 * POST /v1/chat/completions and /v1/completions, streamed (SSE ending in "data: [DONE]") or
 * whole, with the usage block (prompt_tokens_details.cached_tokens = prompt tokens warmd
 * took from RAM or from its prompt cache). A field that would change what a request means
 * and that warmd cannot honour (tools, images, several choices, log probabilities) is
 * refused with a 400 naming it, never dropped; response_format (JSON mode, a JSON Schema)
 * constrains the output through warmd, whose refusal of a schema keyword is a 400 naming
 * it; fields that only tune
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
    {"tools", REF_NONEMPTY, "warmd does not run tool calls"},
    {"functions", REF_NONEMPTY, "warmd does not run tool calls"},
    {"tool_choice", REF_TOOL_CHOICE, "warmd does not run tool calls"},
    {"function_call", REF_TOOL_CHOICE, "warmd does not run tool calls"},
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

static int chat_piece(struct gen_job *j, const char *text, size_t len) {
    int r = chat_head(j);
    if (r < 0 || !len) return r;
    return emit_chunk(j, "chat.completion.chunk",
                      json_pack("{s:i,s:{s:o},s:n,s:n}", "index", 0, "delta", "content",
                                json_text(text, len), "logprobs", "finish_reason"));
}

static int chat_end(struct gen_job *j) {
    int r = chat_head(j);
    if (r < 0) return r;
    return emit_end(j, "chat.completion.chunk",
                    json_pack("{s:i,s:{},s:n,s:s}", "index", 0, "delta", "logprobs",
                              "finish_reason", finish_reason(j->summary.stop_reason)));
}

static json_t *chat_whole(struct gen_job *j) {
    json_t *d = base(j, "chat.completion");
    if (!d) return NULL;
    json_object_set_new(d, "choices", json_pack(
        "[{s:i,s:{s:s,s:o,s:n},s:n,s:s}]", "index", 0, "message", "role", "assistant", "content",
        json_text(j->text ? j->text : "", j->text_len), "refusal", "logprobs", "finish_reason",
        finish_reason(j->summary.stop_reason)));
    json_object_set_new(d, "usage", usage(&j->summary));
    return d;
}

static const struct gen_ops chat_ops = {
    .content_type = "text/event-stream",
    .piece = chat_piece, .end = chat_end, .error = emit_error, .whole = chat_whole,
};

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
             {"assistant", "assistant"}};

/* Parts of a message warmd cannot take (a non-empty array refuses the request). */
static const struct {
    const char *name, *why;
} message_refused[] = {
    {"tool_calls", "warmd does not run tool calls"},
    {"images", "warmd's models read text only"},
};

int parse_messages(struct field_ctx *f, struct gen_job *j, json_t *msgs) {
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        f->mhd = reply_error(f->r, 400, "messages", "'messages' must be a non-empty array");
        return -EINVAL;
    }
    j->msgs = calloc(json_array_size(msgs), sizeof *j->msgs);
    if (!j->msgs) {
        f->mhd = reply_error(f->r, 503, NULL, "out of memory");
        return -ENOMEM;
    }
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        char key[128];
        snprintf(key, sizeof key, "messages[%zu].role", i);
        const char *role = json_string_value(json_object_get(m, "role")), *as = NULL;
        for (size_t k = 0; role && k < ARRAY_SIZE(roles); k++)
            if (strcmp(role, roles[k].role) == 0) as = roles[k].as;
        if (!as) {
            f->mhd = reply_error(f->r, 400, key, "'%s' is '%s': only system, developer, user and "
                                 "assistant messages are supported (warmd does not run tool "
                                 "calls)", key, role ? role : "missing");
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
